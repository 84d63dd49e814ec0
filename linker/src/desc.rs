//! The plain-data blocks that cross the C boundary by value: queue and endpoint
//! descriptions (written by the setup API, opaque to C) and the peer info two endpoints
//! exchange (plain bytes with a checksum, so a damaged or foreign one is refused).

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use copyrpc_core::copyrpc::{EndpointInfo, EndpointMem, Queues};
use mlx5_raw::SqDesc;

use crate::status::{COPYRPC_E_BAD_DESC, COPYRPC_E_BAD_PEER_INFO, COPYRPC_E_NULL};

/// The shared queues of one context (SRQ, send CQ, recv CQ), as the setup API
/// describes them. Opaque: pass it from `copyrpc_fabric_queues` to `copyrpc_ctx_init`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct copyrpc_queues {
    pub opaque: [u64; 24],
}

/// One endpoint's QP and memory (send ring, recv ring, control word), as the setup API
/// describes them. Opaque: pass it from `copyrpc_fabric_endpoint` to `copyrpc_ep_create`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct copyrpc_ep_desc {
    pub opaque: [u64; 32],
}

/// What one endpoint tells its peer: the QP's fabric address and the rings' addresses
/// and keys, 96 bytes of plain data to send over any channel (a socket, MPI, a file).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct copyrpc_peer_info {
    /// `COPYRPC_PEER_INFO_MAGIC`.
    pub magic: u32,
    /// `COPYRPC_PEER_INFO_VERSION`.
    pub version: u32,
    /// The QP's address on the fabric.
    pub qp: [u8; 32],
    /// The endpoint's rings and keys.
    pub endpoint: [u8; 48],
    /// FNV-1a over the bytes before it.
    pub check: u64,
}

/// `copyrpc_peer_info.magic`.
pub const COPYRPC_PEER_INFO_MAGIC: u32 = 0x4950_5243; // "CRPI"
/// `copyrpc_peer_info.version`.
pub const COPYRPC_PEER_INFO_VERSION: u32 = 1;

const QUEUES_MAGIC: u64 = u64::from_le_bytes(*b"CRPCQUE2");
const EP_DESC_MAGIC: u64 = u64::from_le_bytes(*b"CRPCEPD2");

/// The word of an open fabric's shell ([`FabricShell`]).
pub const FABRIC_MAGIC: u64 = u64::from_le_bytes(*b"CRPCFAB1");

/// What C holds as a `copyrpc_fabric *`: the part of a fabric that is never freed nor
/// reused, so a pointer to a closed fabric always finds its own shell, closed (its word
/// 0), and is refused, even after another fabric was opened (whose shell is another).
/// The descriptions and contexts point at it too, to ask whether their fabric is open
/// and whether its queues are taken.
#[repr(C)]
#[derive(Debug)]
pub struct FabricShell {
    /// [`FABRIC_MAGIC`] while open (with the polling mark while its exchange callback
    /// runs), 0 once closed. First, as in every handle.
    pub magic: u64,
    /// The fabric's queues: [`QUEUES_FREE`], then [`QUEUES_TAKEN`] by the one context
    /// they serve, then [`QUEUES_RETIRED`] when it ends.
    queues: AtomicU32,
    /// Endpoints the fabric's context class holds (16, 64, 256 or 1 024).
    pub endpoints: u32,
    /// The setup side's state (the C library's boxed fabric); null once closed.
    pub parts: *mut c_void,
}

/// [`FabricShell`]'s queues: no context took them yet.
pub const QUEUES_FREE: u32 = 0;
/// A live context uses them: the fabric refuses to close.
pub const QUEUES_TAKEN: u32 = 1;
/// The context that used them ended; they serve no other.
pub const QUEUES_RETIRED: u32 = 2;

impl FabricShell {
    /// An open fabric's shell for contexts of `endpoints` endpoints.
    pub fn new(endpoints: u32, parts: *mut c_void) -> Self {
        Self {
            magic: FABRIC_MAGIC,
            queues: AtomicU32::new(QUEUES_FREE),
            endpoints,
            parts,
        }
    }

    /// Whether the fabric is open (also while its exchange callback runs).
    pub fn is_open(&self) -> bool {
        // SAFETY: reading the word of a shell this thread uses (one thread at a time).
        let word = unsafe { (&raw const self.magic).read_volatile() };
        word == FABRIC_MAGIC || word == crate::kind::polling(FABRIC_MAGIC)
    }

    /// The state of the queues (`QUEUES_*`).
    pub fn queues(&self) -> u32 {
        // Acquire (pairs with the Release in `retire_queues`): a context that ended on
        // another thread is seen ended before the fabric is closed.
        self.queues.load(Ordering::Acquire)
    }

    /// Takes the queues for a context: false if a context took them before.
    pub fn take_queues(&self) -> bool {
        // Relaxed: the swap decides who takes them; nothing is published through it.
        self.queues
            .compare_exchange(
                QUEUES_FREE,
                QUEUES_TAKEN,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Gives the queues back when the context that took them failed to start.
    pub fn give_back_queues(&self) {
        // Relaxed: as in `take_queues`.
        self.queues.store(QUEUES_FREE, Ordering::Relaxed);
    }

    /// The context that took the queues ended.
    pub fn retire_queues(&self) {
        // Release (pairs with the Acquire in `queues`).
        self.queues.store(QUEUES_RETIRED, Ordering::Release);
    }
}

/// What an endpoint description's QP and rings are taken with, kept by whoever wrote the
/// description (the setup API's fabric) for as long as they exist: the first
/// `copyrpc_ep_create` sets it. A description is a plain struct C copies freely, and its
/// magic, cleared on use, stays in every copy; this flag does not, so a copy cannot give
/// the same QP to a second endpoint.
pub type Claim = AtomicBool;

/// A description's claim flag (none for a description whose writer keeps none).
#[derive(Clone, Copy, Debug)]
pub struct ClaimRef(*const Claim);

impl ClaimRef {
    /// Takes what the description names: false if another description (a copy) took
    /// it already.
    ///
    /// # Safety
    ///
    /// The writer of the description still keeps the flag (the fabric is open).
    pub unsafe fn take(self) -> bool {
        // Relaxed: the swap decides who takes the objects, nothing is published through
        // it (each taker reads its description, not the other's writes).
        // SAFETY: the flag lives (caller contract).
        self.0.is_null() || !unsafe { &*self.0 }.swap(true, Ordering::Relaxed)
    }

    /// Gives back what [`take`](Self::take) took, when what was to use it failed.
    ///
    /// # Safety
    ///
    /// As `take`, and this caller took it.
    pub unsafe fn give_back(self) {
        if !self.0.is_null() {
            // Relaxed: as in `take`.
            // SAFETY: the flag lives (caller contract).
            unsafe { &*self.0 }.store(false, Ordering::Relaxed);
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
struct QueuesInner {
    magic: u64,
    shell: *const FabricShell,
    q: Queues,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct EpInner {
    magic: u64,
    shell: *const FabricShell,
    claim: *const Claim,
    sq: SqDesc,
    mem: EndpointMem,
    qp: [u8; 32],
}

const _: () = {
    use core::mem::{align_of, size_of};
    assert!(size_of::<QueuesInner>() <= size_of::<copyrpc_queues>());
    assert!(align_of::<QueuesInner>() <= align_of::<copyrpc_queues>());
    assert!(size_of::<EpInner>() <= size_of::<copyrpc_ep_desc>());
    assert!(align_of::<EpInner>() <= align_of::<copyrpc_ep_desc>());
    assert!(size_of::<copyrpc_peer_info>() == 96);
};

/// Writes the queues `q` of the fabric whose shell is `shell` into a description (setup
/// side).
pub fn write_queues(out: &mut copyrpc_queues, q: Queues, shell: &FabricShell) {
    *out = copyrpc_queues { opaque: [0; 24] };
    let p = (out as *mut copyrpc_queues).cast::<QueuesInner>();
    // SAFETY: `QueuesInner` fits in and is no more aligned than `copyrpc_queues`
    // (checked above), and `out` is a valid exclusive reference.
    unsafe {
        p.write(QueuesInner {
            magic: QUEUES_MAGIC,
            shell,
            q,
        })
    };
}

/// The fabric shell and queues a description names. `COPYRPC_E_BAD_DESC` if the setup
/// API did not write it. Whether the fabric is open and its queues free is the shell's
/// to say ([`FabricShell::is_open`], [`FabricShell::take_queues`]).
///
/// # Safety
///
/// A description with the setup API's magic names a shell of the setup API (shells are
/// never freed, so a description outliving its fabric still names a readable one).
pub unsafe fn read_queues(d: &copyrpc_queues) -> Result<(&'static FabricShell, Queues), i32> {
    if d.opaque[0] != QUEUES_MAGIC {
        return Err(COPYRPC_E_BAD_DESC);
    }
    let p = (d as *const copyrpc_queues).cast::<QueuesInner>();
    // SAFETY: in bounds and aligned (checked above); the magic says `write_queues` wrote
    // it, and every field is plain data (pointers and integers), so any bytes are a
    // valid value. Whether the queues are real is the setup API's contract.
    let i = unsafe { p.read() };
    // SAFETY: shells are never freed (caller contract).
    Ok((unsafe { &*i.shell }, i.q))
}

/// Writes an endpoint description (setup side).
///
/// `claim` as in [`Claim`], for this QP and its rings; `shell` names its fabric.
pub fn write_ep(
    out: &mut copyrpc_ep_desc,
    shell: &FabricShell,
    sq: SqDesc,
    mem: EndpointMem,
    qp: [u8; 32],
    claim: &Claim,
) {
    *out = copyrpc_ep_desc { opaque: [0; 32] };
    let p = (out as *mut copyrpc_ep_desc).cast::<EpInner>();
    // SAFETY: as in `write_queues`.
    unsafe {
        p.write(EpInner {
            magic: EP_DESC_MAGIC,
            shell,
            claim,
            sq,
            mem,
            qp,
        })
    };
}

/// The QP, memory, fabric address and claim flag of a description the setup API wrote
/// for the fabric whose shell is `shell` (`COPYRPC_E_BAD_DESC` for another fabric's).
///
/// # Safety
///
/// As [`read_queues`].
pub unsafe fn read_ep(
    d: &copyrpc_ep_desc,
    shell: *const FabricShell,
) -> Result<(SqDesc, EndpointMem, [u8; 32], ClaimRef), i32> {
    if d.opaque[0] != EP_DESC_MAGIC {
        return Err(COPYRPC_E_BAD_DESC);
    }
    let p = (d as *const copyrpc_ep_desc).cast::<EpInner>();
    // SAFETY: as in `read_queues`.
    let e = unsafe { p.read() };
    // The claim flag lives in the fabric's state, which only an open fabric has: the
    // context's own fabric is (it refuses to close while the context lives).
    if e.shell != shell {
        return Err(COPYRPC_E_BAD_DESC);
    }
    Ok((e.sq, e.mem, e.qp, ClaimRef(e.claim)))
}

/// Marks a queue description used: its queues now belong to a context.
pub fn use_up_queues(d: &mut copyrpc_queues) {
    d.opaque[0] = 0;
}

/// Marks an endpoint description used: its QP and rings now belong to an endpoint.
pub fn use_up_ep(d: &mut copyrpc_ep_desc) {
    d.opaque[0] = 0;
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn check_of(i: &copyrpc_peer_info) -> u64 {
    fnv1a(&[
        &i.magic.to_le_bytes(),
        &i.version.to_le_bytes(),
        &i.qp,
        &i.endpoint,
    ])
}

/// The peer info of an endpoint at fabric address `qp`.
pub fn peer_info(qp: [u8; 32], ep: &EndpointInfo) -> copyrpc_peer_info {
    let mut i = copyrpc_peer_info {
        magic: COPYRPC_PEER_INFO_MAGIC,
        version: COPYRPC_PEER_INFO_VERSION,
        qp,
        endpoint: ep.to_bytes(),
        check: 0,
    };
    i.check = check_of(&i);
    i
}

/// The fabric address and endpoint info of a received peer info, once its magic,
/// version and checksum hold.
pub fn open_peer_info(i: Option<&copyrpc_peer_info>) -> Result<([u8; 32], EndpointInfo), i32> {
    let i = i.ok_or(COPYRPC_E_NULL)?;
    if i.magic != COPYRPC_PEER_INFO_MAGIC
        || i.version != COPYRPC_PEER_INFO_VERSION
        || i.check != check_of(i)
    {
        return Err(COPYRPC_E_BAD_PEER_INFO);
    }
    Ok((i.qp, EndpointInfo::from_bytes(&i.endpoint)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> copyrpc_peer_info {
        let ep = EndpointInfo {
            qpn: 0x1234,
            recv_ring_addr: 0x7f00_0000_1000,
            recv_ring_rkey: 7,
            recv_ring_size: 16384,
            consumer_addr: 0x7f00_0000_9000,
            consumer_rkey: 7,
            initial_credit: 4096,
        };
        peer_info([3; 32], &ep)
    }

    #[test]
    fn a_peer_info_round_trips() {
        let i = info();
        let (qp, ep) = open_peer_info(Some(&i)).expect("a fresh info opens");
        assert_eq!(qp, [3; 32]);
        assert_eq!(ep.qpn, 0x1234);
        assert_eq!(ep.recv_ring_size, 16384);
    }

    /// Every single-bit flip anywhere in the 96 bytes is refused.
    #[test]
    fn every_bit_flip_is_refused() {
        let good = info();
        for byte in 0..size_of_val(&good) {
            for bit in 0..8 {
                let mut i = good;
                // SAFETY: `copyrpc_peer_info` is plain integers and byte arrays with no
                // padding (96 bytes, checked above), so any bytes are a valid value.
                unsafe { *(&raw mut i).cast::<u8>().add(byte) ^= 1 << bit };
                assert_eq!(
                    open_peer_info(Some(&i)).err(),
                    Some(COPYRPC_E_BAD_PEER_INFO),
                    "flip of bit {bit} in byte {byte} accepted"
                );
            }
        }
        assert_eq!(open_peer_info(None).err(), Some(COPYRPC_E_NULL));
    }
}
