//! Two OS processes exchange RDMA WRITE_WITH_IMM through the software mlx5 device over
//! `/dev/shm`.
//!
//! Each process runs its own device (its own QP, CQs, SRQ and registered memory, in
//! private memory) on a host engine thread; the only shared memory is one `/dev/shm`
//! region holding a small rendezvous header and the two link queues between the QPs. So
//! every CQ and SRQ has a single producer, the device of its own process, as in
//! hardware. Process A (this test) sends WRITE_IMMs of 1..3000 bytes (several packets at
//! MTU 1024) into B's region; process B (this binary re-executed with a role variable)
//! checks each one's immediate, byte count, source QPN and bytes, and echoes it back
//! with a WRITE_IMM into A's region, which A checks too. Both sides flow-control with a
//! window, so no buffer is rewritten before its reader is done with it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use copyrpc_host::shm::ShmRegion;
use copyrpc_host::sim_engine::{EngineConfig, SimEngine};
use mlx5_raw::layout::{Completion, CqeOpcode, FmCeSe};
use mlx5_raw::sim::{
    format_link, link_bytes, Access, CqMem, Device, DeviceConfig, LinkConfig, LinkDesc, MrKeys,
    Peer, QpAttr, SqMem, SrqMem,
};
use mlx5_raw::{Cq, Payload, Remote, Sge, Sq, SqConfig, Srq};

const ROLE: &str = "COPYRPC_SIM2P_ROLE";
const NAME: &str = "COPYRPC_SIM2P_NAME";
const MESSAGES: u32 = 400;
/// Messages in flight (sent, echo not yet checked).
const WINDOW: u32 = 8;
/// Buffer slots per direction; a slot is reused only `SLOTS` messages later.
const SLOTS: u32 = 16;
const SLOT: u64 = 4096;
const ECHO_BASE: u64 = SLOTS as u64 * SLOT;
const MTU: u32 = 1024;
const LINK_SLOTS: u32 = 64;
const HEADER: usize = 4096;
const CHILD_DEADLINE: Duration = Duration::from_secs(50);
const TEST_DEADLINE: Duration = Duration::from_secs(60);

type Dev = Box<Device<2, 2, 1, 2>>;

/// Rendezvous words in the header: per side, [ready, qpn, rkey, va].
const A_WORDS: usize = 0;
const B_WORDS: usize = 8;

fn word(shm: &ShmRegion, i: usize) -> &AtomicU64 {
    assert!((i + 1) * 8 <= HEADER);
    // SAFETY: inside the mapping, 8-aligned (page-aligned base); the header words are
    // only ever accessed atomically, by both processes.
    unsafe { AtomicU64::from_ptr(shm.as_ptr().add(i * 8).cast()) }
}

fn links(shm: &ShmRegion) -> (LinkDesc, LinkDesc) {
    let lb = link_bytes(LINK_SLOTS, MTU);
    assert!(shm.len() >= HEADER + 2 * lb);
    let ab = LinkDesc {
        base: shm.as_ptr().wrapping_add(HEADER),
        len: lb,
    };
    let ba = LinkDesc {
        base: shm.as_ptr().wrapping_add(HEADER + lb),
        len: lb,
    };
    (ab, ba)
}

fn len_of(seq: u32) -> u32 {
    1 + (seq * 997) % 3000
}

fn byte_of(seq: u32, k: u32) -> u8 {
    (seq.wrapping_mul(31) ^ k.wrapping_mul(7)) as u8
}

/// Zeroed 4096-aligned private memory, used through raw pointers only.
struct Mem(*mut u8, std::alloc::Layout);
impl Mem {
    fn new(len: usize) -> Self {
        let l = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: non-zero size.
        Self(unsafe { std::alloc::alloc_zeroed(l) }, l)
    }
}
impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.0, self.1) }
    }
}

/// One process's side: the engine first, so it stops before the memory it uses goes.
struct Node {
    engine: SimEngine<Dev>,
    sq: Sq,
    scq: Cq,
    rcq: Cq,
    srq: Srq,
    keys: MrKeys,
    qpn: u32,
    data: Mem,
    _mem: Vec<Mem>,
}

impl Node {
    fn new(qpn_base: u32) -> Self {
        let mem: Vec<Mem> = (0..6).map(|_| Mem::new(1 << 16)).collect();
        let data = Mem::new(2 * ECHO_BASE as usize);
        let engine = SimEngine::start(
            Box::new(Device::new(DeviceConfig {
                qpn_base,
                ..DeviceConfig::DEFAULT
            })),
            EngineConfig {
                trace_events: 2048,
                ..EngineConfig::default()
            },
        )
        .unwrap();
        // SAFETY: `data` and `mem` live in the `Node`, whose engine field is dropped (the
        // thread joined) before them; each buffer has one role.
        let (sq, scq, rcq, srq, keys, qpn) = engine.with(|d| unsafe {
            let pd = d.alloc_pd();
            let keys = d
                .reg_mr(pd, data.0, 2 * ECHO_BASE as usize, Access::ALL)
                .unwrap();
            let dbrec = |i: usize| mem[5].0.add(i * 64).cast::<u32>();
            let cq = |i: usize| CqMem {
                buf: mem[i].0,
                cqe_cnt: 128,
                cqe_size: 64,
                dbrec: dbrec(i),
            };
            let scq = d.create_cq(cq(0)).unwrap();
            let rcq = d.create_cq(cq(1)).unwrap();
            let srq = d
                .create_srq(
                    pd,
                    SrqMem {
                        buf: mem[2].0,
                        wqe_cnt: 64,
                        stride: 32,
                        dbrec: dbrec(2),
                    },
                )
                .unwrap();
            let qp = d
                .create_qp(
                    pd,
                    QpAttr::new(scq.cqn, rcq.cqn, Some(srq.srqn)),
                    SqMem {
                        buf: mem[3].0,
                        wqe_cnt: 256,
                        dbrec: dbrec(3),
                        uar: mem[4].0,
                    },
                )
                .unwrap();
            (
                Sq::new(&qp, SqConfig::COPYRPC).unwrap(),
                Cq::new(&scq).unwrap(),
                Cq::new(&rcq).unwrap(),
                Srq::new(&srq, keys.lkey).unwrap(),
                keys,
                qp.qpn,
            )
        });
        let mut n = Self {
            engine,
            sq,
            scq,
            rcq,
            srq,
            keys,
            qpn,
            data,
            _mem: mem,
        };
        n.srq.post_batch(63).unwrap();
        n
    }

    /// Publishes this side's QPN and region, waits for the peer's, and connects.
    fn rendezvous(
        &mut self,
        shm: &ShmRegion,
        mine: usize,
        theirs: usize,
        tx: LinkDesc,
        rx: LinkDesc,
        deadline: Instant,
    ) -> (u32, Remote) {
        // Relaxed: published by the Release store of the ready word below.
        word(shm, mine + 1).store(u64::from(self.qpn), Ordering::Relaxed);
        word(shm, mine + 2).store(u64::from(self.keys.rkey), Ordering::Relaxed);
        word(shm, mine + 3).store(self.keys.va, Ordering::Relaxed);
        // R-READY (pairs with A-READY in the peer): publishes the three words above.
        word(shm, mine).store(1, Ordering::Release);
        // A-READY (pairs with the peer's R-READY).
        while word(shm, theirs).load(Ordering::Acquire) == 0 {
            assert!(Instant::now() < deadline, "peer never published its QP");
            std::thread::yield_now();
        }
        // Relaxed: ordered by A-READY.
        let qpn = word(shm, theirs + 1).load(Ordering::Relaxed) as u32;
        let remote = Remote {
            rkey: word(shm, theirs + 2).load(Ordering::Relaxed) as u32,
            addr: word(shm, theirs + 3).load(Ordering::Relaxed),
        };
        let me = self.qpn;
        // SAFETY: the links live in `shm`, which outlives this node's engine (both are
        // locals of the role function, `shm` declared first); this process is the only
        // producer on `tx` and consumer of `rx`, the peer process the reverse.
        self.engine
            .with(|d| unsafe {
                d.connect(
                    me,
                    Peer {
                        remote_qpn: qpn,
                        tx,
                        rx,
                        link: LinkConfig::default(),
                    },
                )
            })
            .unwrap();
        (qpn, remote)
    }

    fn write(&self, off: u64, bytes: &[u8]) {
        assert!(off as usize + bytes.len() <= self.data.1.size());
        // SAFETY: inside `data`; the device does not write this range now (flow control).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.data.0.add(off as usize),
                bytes.len(),
            )
        }
    }

    fn read(&self, off: u64, len: u32) -> Vec<u8> {
        let mut v = vec![0u8; len as usize];
        assert!(off as usize + v.len() <= self.data.1.size());
        // SAFETY: inside `data`; written by the device before the CQE this follows.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data.0.add(off as usize), v.as_mut_ptr(), v.len())
        };
        v
    }

    /// WRITE_IMM of `len` bytes at `off` of this region to `remote + roff`, signaled.
    fn post(&mut self, remote: Remote, roff: u64, off: u64, len: u32, imm: u32) {
        let sge = [Sge {
            addr: self.keys.va + off,
            len,
            lkey: self.keys.lkey,
        }];
        let mut b = self.sq.batch();
        // SAFETY: the SGE lies in this node's registered region, unmodified until the
        // completion (slots are reused only after it, see the callers).
        b.rdma_write_imm(
            Remote {
                addr: remote.addr + roff,
                rkey: remote.rkey,
            },
            unsafe { Payload::gather(&sge) },
            imm.to_be_bytes(),
            FmCeSe::CQ_UPDATE,
        )
        .unwrap();
        b.finish();
    }

    /// Retires requester completions (all must succeed); returns how many.
    fn poll_sends(&mut self, what: &str) -> u32 {
        let mut n = 0;
        while let Some(c) = self.scq.poll() {
            let c = c.decode().unwrap();
            assert_eq!(
                c.opcode,
                CqeOpcode::Req,
                "{what}: {c:?}\n{}",
                self.engine.trace_dump()
            );
            self.sq.retire_completion(&c).unwrap();
            n += 1;
        }
        self.scq.update_ci();
        n
    }

    fn poll_recv(&mut self) -> Option<Completion> {
        let c = self.rcq.poll()?.decode().unwrap();
        self.rcq.update_ci();
        self.srq.free(c.wqe_counter).unwrap();
        self.srq.post_batch(1).unwrap();
        Some(c)
    }
}

/// Checks a received WRITE_IMM of message `seq` at `off` of `node`'s region.
fn check(node: &Node, c: &Completion, seq: u32, off: u64, from: u32) {
    assert_eq!(c.opcode, CqeOpcode::RespWrImm, "{c:?}");
    assert_eq!(c.imm, Some(seq.to_be_bytes()));
    assert_eq!(c.byte_cnt, len_of(seq));
    assert_eq!(c.qpn, node.qpn);
    assert_eq!(c.remote_qpn, Some(from));
    let got = node.read(off, len_of(seq));
    let want: Vec<u8> = (0..len_of(seq)).map(|k| byte_of(seq, k)).collect();
    assert!(got == want, "message {seq}: payload differs");
}

/// The child entry point; a no-op when run as an ordinary test.
#[test]
fn role_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "b");
    let deadline = Instant::now() + CHILD_DEADLINE;
    let shm = ShmRegion::open(&std::env::var(NAME).unwrap()).unwrap();
    let (ab, ba) = links(&shm);
    let mut node = Node::new(0x200);
    let (a_qpn, a) = node.rendezvous(&shm, B_WORDS, A_WORDS, ba, ab, deadline);
    let (mut got, mut echoed_done) = (0u32, 0u32);
    while got < MESSAGES || echoed_done < MESSAGES {
        assert!(
            Instant::now() < deadline,
            "b stuck: {got} received, {echoed_done} echoes completed\n{}",
            node.engine.trace_dump()
        );
        echoed_done += node.poll_sends("b's echo");
        // The echo slot of message `got` was last used by `got - SLOTS`: its echo must
        // have completed before the slot is overwritten.
        if got < MESSAGES && got < echoed_done + SLOTS {
            if let Some(c) = node.poll_recv() {
                let slot = u64::from(got % SLOTS) * SLOT;
                check(&node, &c, got, slot, a_qpn);
                let bytes = node.read(slot, len_of(got));
                node.write(ECHO_BASE + slot, &bytes);
                node.post(a, ECHO_BASE + slot, ECHO_BASE + slot, len_of(got), got);
                got += 1;
                continue;
            }
        }
        std::thread::yield_now();
    }
    println!("B DONE {got}");
    drop(node); // joins the engine before `shm` unmaps
}

#[test]
fn two_processes_exchange_write_imm_over_dev_shm() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let deadline = Instant::now() + TEST_DEADLINE;
    let name = format!("/copyrpc-sim2p-{}", std::process::id());
    let shm = ShmRegion::create(&name, HEADER + 2 * link_bytes(LINK_SLOTS, MTU)).unwrap();
    let (ab, ba) = links(&shm);
    // SAFETY: fresh region memory; no device uses the links yet (the child is started
    // below, after the format's Release store of each magic).
    unsafe {
        format_link(&ab, LINK_SLOTS, MTU).unwrap();
        format_link(&ba, LINK_SLOTS, MTU).unwrap();
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "role_entry", "--nocapture", "--test-threads=1"])
        .env(ROLE, "b")
        .env(NAME, &name)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let mut node = Node::new(0x100);
    let (b_qpn, b) = node.rendezvous(&shm, A_WORDS, B_WORDS, ab, ba, deadline);
    let (mut sent, mut echoed, mut sends_done) = (0u32, 0u32, 0u32);
    let mut spins = 0u32;
    while echoed < MESSAGES || sends_done < MESSAGES {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) {
            if let Some(st) = child.try_wait().unwrap() {
                panic!(
                    "process b exited early: {st}\n{}",
                    lines.join().unwrap().join("\n")
                );
            }
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!(
                "a stuck: {sent} sent, {echoed} echoed, {sends_done} completed\n{}",
                node.engine.trace_dump()
            );
        }
        sends_done += node.poll_sends("a's write");
        if let Some(c) = node.poll_recv() {
            let slot = u64::from(echoed % SLOTS) * SLOT;
            check(&node, &c, echoed, ECHO_BASE + slot, b_qpn);
            echoed += 1;
            continue;
        }
        // Slot `sent % SLOTS` was last sent `SLOTS` messages ago; with `WINDOW < SLOTS`
        // its echo (so b's reading of it, and its completion) is done.
        if sent < MESSAGES && sent < echoed + WINDOW && sent < sends_done + WINDOW {
            let slot = u64::from(sent % SLOTS) * SLOT;
            let bytes: Vec<u8> = (0..len_of(sent)).map(|k| byte_of(sent, k)).collect();
            node.write(slot, &bytes);
            node.post(b, slot, slot, len_of(sent), sent);
            sent += 1;
            continue;
        }
        std::thread::yield_now();
    }
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("process b did not exit");
        }
        std::thread::yield_now();
    };
    let lines = lines.join().unwrap();
    assert!(
        status.success(),
        "process b failed: {status}\n{}",
        lines.join("\n")
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("B DONE {MESSAGES}"))),
        "{}",
        lines.join("\n")
    );
    drop(node);
    drop(shm);
}
