//! The parts of `copyrpc-bulk`: the two roles and the exchanges that keep them in step.

pub mod client;
pub mod server;
pub mod steps;
pub mod world;

use std::time::Duration;

use copyrpc_core::bulk::Pattern;
use copyrpc_host::bulk::{BufferPool, PoolBuf};
use copyrpc_host::rpc::RpcNode;

/// Slots of the server's mover: the most operations in flight.
pub const SLOTS: usize = 32;
pub type Node = RpcNode<u64, 1, 64, 512>;
/// The request that ends the server's loop (a header-only call carrying these bytes).
pub const STOP: &[u8] = b"STOP";

/// The settings both ranks run with.
pub struct Args {
    pub kind: copyrpc_host::fabric::FabricKind,
    /// `--device`, `--port`, `--gid-index` (the verbs fabric's).
    pub verbs: copyrpc_host::fabric::verbs::VerbsOptions,
    /// `--tclass`, `--sl`.
    pub qos: copyrpc_host::fabric::Qos,
    pub patterns: Vec<Pattern>,
    pub sizes: Vec<usize>,
    pub iters: u32,
    pub chunk: u32,
    pub depth: u16,
    pub deadline: Duration,
    /// `--seed`: the put data's pattern (and, in a virtual world, the turns' jitter).
    pub seed: u64,
    /// `--world virtual:2`.
    pub world: Option<copyrpc_host::vworld::WorldSpec>,
}

impl Args {
    /// The transfer steps, in order: every size of each pattern.
    pub fn schedule(&self) -> Vec<(Pattern, usize)> {
        self.patterns
            .iter()
            .flat_map(|&p| self.sizes.iter().map(move |&n| (p, n)))
            .collect()
    }
}

/// A step in words: `put 16777216 B`.
pub fn step_name(p: Pattern, n: usize) -> String {
    format!("{} {n} B", format!("{p:?}").to_lowercase())
}

/// FNV-1a, fed in pieces.
#[derive(Clone, Copy)]
pub struct Fnv(u64);

impl Fnv {
    pub const fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    pub fn byte(&mut self, b: u8) {
        self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }

    pub fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    pub const fn get(self) -> u64 {
        self.0
    }
}

/// FNV-1a of `bytes`.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h = Fnv::new();
    h.bytes(bytes);
    h.get()
}

/// The server's data for a GET of `len` bytes, byte `i` of it.
pub fn get_byte(len: usize, i: usize) -> u8 {
    (i.wrapping_mul(13) ^ len) as u8
}

/// The bytes of a pool buffer.
///
/// # Safety
///
/// No operation targets the buffer while the slice lives.
pub unsafe fn bytes<'a>(pool: &'a mut BufferPool, b: &PoolBuf, len: usize) -> &'a mut [u8] {
    // SAFETY: the buffer is `buf_bytes` long inside the pool's mapping; the caller
    // guarantees the device is not using it.
    unsafe { std::slice::from_raw_parts_mut(pool.ptr(b), len.min(pool.buf_bytes())) }
}
