//! ipc over a named `/dev/shm` region: the core's ipc [`Server`] and [`Client`] with the
//! pids and liveness checks left to the host.

use copyrpc_core::ipc::{
    self, Client, Config, IpcCallError, IpcRegion, IpcReplyError, IpcRequest, Server,
};
use copyrpc_core::shm::{peek_header, ClientInfo, EvictError, Payload, Slab, SlabEntry};

use super::layout::{create_region, dead_clients, open_region, server_alive, RefusedCalls};
use super::{ProcessId, ShmRegion};
use crate::error::{Error, Result};

/// The server of an ipc region it created; dropping it clears `server_alive` and unlinks.
pub struct IpcServer<Req: Payload, Resp: Payload> {
    // Field order matters: `server` borrows the mapping owned by `shm` and drops first.
    server: Server<'static, Req, Resp>,
    shm: ShmRegion,
}

impl<Req: Payload, Resp: Payload> std::fmt::Debug for IpcServer<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpcServer")
            .field("name", &self.shm.name())
            .finish()
    }
}

impl<Req: Payload, Resp: Payload> IpcServer<Req, Resp> {
    /// Creates region `name` exclusively (see [`super::deleg::DelegServer::create`] for the
    /// stale-region rules) and starts serving.
    pub fn create(name: &str, cfg: Config, replace_stale: bool) -> Result<Self> {
        // The mapping outlives `server` (field order), and nothing derived from it is
        // handed out beyond `&self`.
        let (region, shm) =
            create_region::<IpcRegion<'static, Req, Resp>>(name, &cfg, replace_stale)?;
        Ok(Self {
            server: Server::new(region),
            shm,
        })
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        self.shm.name()
    }

    /// Core `poll`.
    pub fn poll(&mut self) -> usize {
        self.server.poll()
    }

    /// Core `poll_with_skip`.
    pub fn poll_with_skip(&mut self, skip: impl FnMut(u32) -> bool) -> usize {
        self.server.poll_with_skip(skip)
    }

    /// Core `recv`.
    pub fn recv(&mut self) -> Option<IpcRequest<Req>> {
        self.server.recv()
    }

    /// Core `reply`.
    pub fn reply(&mut self, h: IpcRequest<Req>, resp: &Resp) -> Result<(), IpcReplyError> {
        self.server.reply(h, resp)
    }

    /// The client table.
    pub fn clients(&self) -> impl Iterator<Item = ClientInfo> + '_ {
        self.server.clients()
    }

    /// Core `evict`.
    pub fn evict(&mut self, id: u32) -> Result<(), EvictError> {
        self.server.evict(id)
    }

    /// Evicts every active client whose owner pid is gone; returns how many. The next
    /// `poll` frees their ids.
    pub fn reap_dead_clients(&mut self) -> usize {
        let dead = dead_clients(self.server.clients());
        for &id in &dead {
            let _ = self.server.evict(id);
        }
        dead.len()
    }
}

/// Heap storage for a client's slab, freed after the client that borrows it.
struct SlabBox<U>(*mut [SlabEntry<U>]);

impl<U> Drop for SlabBox<U> {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `IpcClient::connect`; the client borrowing it
        // was dropped before this field (declaration order).
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// A client of an ipc region, with `depth` slab entries for its calls' user data.
pub struct IpcClient<Req: Payload, Resp: Payload, U: 'static> {
    // Field order matters: `client` borrows both `slab` and the mapping in `shm`.
    client: Client<'static, 'static, Req, Resp, U>,
    _slab: SlabBox<U>,
    region: IpcRegion<'static, Req, Resp>,
    /// The server the region named when this client connected.
    server: ProcessId,
    shm: ShmRegion,
    refused: RefusedCalls,
}

// SAFETY: the raw slab pointer is owned exclusively by this value (like a Box), and the
// region views point into a process-wide mapping that is shared only through atomics.
unsafe impl<Req: Payload, Resp: Payload, U: Send + 'static> Send for IpcClient<Req, Resp, U> {}

impl<Req: Payload, Resp: Payload, U: 'static> std::fmt::Debug for IpcClient<Req, Resp, U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpcClient")
            .field("name", &self.shm.name())
            .field("id", &self.client.id())
            .finish()
    }
}

impl<Req: Payload, Resp: Payload, U: 'static> IpcClient<Req, Resp, U> {
    /// Opens `name`, validates its layout, checks that its server is alive and registers.
    pub fn connect(name: &str) -> Result<Self> {
        // The mapping outlives the views (field order).
        let (region, server, shm) = open_region::<IpcRegion<'static, Req, Resp>>(name)?;
        let depth = region.config().depth as usize;
        let raw = Box::into_raw((0..depth).map(|_| SlabEntry::new()).collect::<Box<[_]>>());
        let slab_box = SlabBox(raw);
        // SAFETY: `raw` is a live allocation owned by `slab_box`, which is dropped after
        // the client that borrows it; nothing else aliases it.
        let slab = Slab::new(unsafe { &mut *raw });
        let client =
            Client::connect(region, ProcessId::current(), slab).map_err(|e| Error::IpcConnect {
                name: name.to_owned(),
                source: e,
            })?;
        Ok(Self {
            client,
            _slab: slab_box,
            region,
            server,
            shm,
            refused: RefusedCalls::default(),
        })
    }

    /// This client's id.
    pub fn id(&self) -> u32 {
        self.client.id()
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> usize {
        self.client.in_flight()
    }

    /// Core `call`. With every call in flight (`Full`) it checks the server's process
    /// too, at most once a millisecond, and says `ServerDisconnected` once it is gone: a
    /// SIGKILLed server never clears its flag, and a client that polls and retries would
    /// otherwise wait for ever.
    pub fn call(&mut self, req: &Req, user_data: U) -> Result<(), IpcCallError> {
        match self.client.call(req, user_data) {
            Err(IpcCallError::Full) if self.refused.server_gone(&self.region) => {
                Err(IpcCallError::ServerDisconnected)
            }
            r => r,
        }
    }

    /// Core `poll`.
    pub fn poll(&mut self, f: impl FnMut(U, &Resp)) -> usize {
        self.client.poll(f)
    }

    /// True while the server's flag is set and its process (pid and start time) is alive.
    pub fn server_alive(&self) -> bool {
        server_alive(&self.region)
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        self.shm.name()
    }

    /// Why [`call`](Self::call) says `ServerDisconnected`, in words for an error
    /// message. The liveness check reads the region's header, so a header overwritten
    /// (zeroed by another process, say) reads as a server that is gone although it may
    /// still run: that is told apart here, from the magic and version the header must
    /// hold and from the server process this client connected to.
    pub fn disconnect_cause(&self) -> String {
        // SAFETY: the mapping covers `shm.len()` bytes for as long as `self` lives, and
        // every party accesses the header only atomically.
        let id = unsafe { peek_header(self.shm.as_ptr(), self.shm.len()) };
        let server = self.server.pid;
        let then = if self.server.alive() {
            "still runs"
        } else {
            "is gone"
        };
        match id {
            Some(h) if h.magic == ipc::MAGIC && h.version == ipc::VERSION => {
                let recorded = ProcessId::from(h.server);
                if server_alive(&self.region) {
                    "the server is alive and the region intact (not disconnected)".into()
                } else if recorded.alive() {
                    format!("the server (pid {}) closed the region", recorded.pid)
                } else {
                    format!("the server's process (pid {}) is gone", recorded.pid)
                }
            }
            Some(h) => format!(
                "the region's header was overwritten (magic {:#x}, version {}, where an ipc \
                 region has {:#x}, version {}): the server this client connected to (pid \
                 {server}) {then}, but the region can no longer be trusted",
                h.magic,
                h.version,
                ipc::MAGIC,
                ipc::VERSION
            ),
            None => "the region's mapping is shorter than a header".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::tests::unique;
    use copyrpc_core::ipc::IpcConnectError;
    use copyrpc_core::shm::LayoutError;

    type Req = [u64; 2];
    type Resp = [u64; 2];
    const CFG: Config = Config {
        max_clients: 1,
        depth: 4,
    };

    #[test]
    fn round_trip_and_typed_errors() {
        let name = unique("ipc");
        let mut s = IpcServer::<Req, Resp>::create(&name, CFG, false).unwrap();
        let mut c = IpcClient::<Req, Resp, u32>::connect(&name).unwrap();
        assert!(c.server_alive());
        c.call(&[1, 2], 7).unwrap();
        assert_eq!(s.poll(), 1);
        let h = s.recv().unwrap();
        s.reply(h, &[3, 4]).unwrap();
        let mut got = None;
        c.poll(|u, r| got = Some((u, *r)));
        assert_eq!(got, Some((7, [3, 4])));
        // Exhaustion, payload mismatch, wrong protocol.
        assert!(matches!(
            IpcClient::<Req, Resp, u32>::connect(&name),
            Err(Error::IpcConnect {
                source: IpcConnectError::NoFreeClientId,
                ..
            })
        ));
        assert!(matches!(
            IpcClient::<[u8; 4], Resp, u32>::connect(&name),
            Err(Error::ShmLayout {
                source: LayoutError::PayloadSize { .. },
                ..
            })
        ));
        assert!(matches!(
            super::super::deleg::DelegClient::<Req, Resp>::connect(&name),
            Err(Error::ShmLayout {
                source: LayoutError::BadMagic { .. },
                ..
            })
        ));
        drop(c);
        s.poll();
        let _c2 = IpcClient::<Req, Resp, u32>::connect(&name).unwrap();
    }

    /// All calls in flight and the server killed (its flag still set): the next call
    /// says the server is gone instead of "full, poll and retry" for ever.
    #[test]
    fn a_client_with_every_call_in_flight_learns_that_a_killed_server_is_gone() {
        let name = unique("ipc-killed");
        let _s = IpcServer::<Req, Resp>::create(&name, CFG, false).unwrap();
        let mut c = IpcClient::<Req, Resp, u32>::connect(&name).unwrap();
        for i in 0..CFG.depth {
            c.call(&[u64::from(i), 0], i).unwrap();
        }
        assert_eq!(c.call(&[9, 0], 9), Err(IpcCallError::Full), "server alive");
        let mut dead = std::process::Command::new("true").spawn().unwrap();
        let pid = dead.id();
        dead.wait().unwrap();
        // What a SIGKILL leaves: the flag set, the recorded process gone.
        c.region
            .header()
            .server_owner
            .store(pid, std::sync::atomic::Ordering::Relaxed);
        let t0 = std::time::Instant::now();
        loop {
            match c.call(&[9, 0], 9) {
                Err(IpcCallError::ServerDisconnected) => break,
                Err(IpcCallError::Full) => {
                    assert!(
                        t0.elapsed() < std::time::Duration::from_secs(10),
                        "still Full 10 s after the server died"
                    );
                    std::thread::yield_now();
                }
                other => panic!("{other:?}"),
            }
        }
        let why = c.disconnect_cause();
        assert!(
            why.contains(&format!("process (pid {pid}) is gone")),
            "{why}"
        );
    }

    /// A region zeroed under a live server: the header's liveness words read as a
    /// server gone, and the client's error said "ipc server gone" although the server
    /// ran. The cause now says the header was overwritten and that the server runs.
    #[test]
    fn item5_a_zeroed_region_is_reported_as_overwritten_not_as_a_gone_server() {
        use std::sync::atomic::Ordering::Relaxed;
        let name = unique("ipc-zeroed");
        let _s = IpcServer::<Req, Resp>::create(&name, CFG, false).unwrap();
        let mut c = IpcClient::<Req, Resp, u32>::connect(&name).unwrap();
        for i in 0..CFG.depth {
            c.call(&[u64::from(i), 0], i).unwrap();
        }
        let h = c.region.header();
        h.magic.store(0, Relaxed);
        h.version.store(0, Relaxed);
        h.server_alive.store(false, Relaxed);
        h.server_owner.store(0, Relaxed);
        h.server_owner_token.store(0, Relaxed);
        let t0 = std::time::Instant::now();
        while c.call(&[9, 0], 9) != Err(IpcCallError::ServerDisconnected) {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(10),
                "never refused"
            );
            std::thread::yield_now();
        }
        let why = c.disconnect_cause();
        let me = std::process::id();
        assert!(why.contains("header was overwritten"), "{why}");
        assert!(why.contains(&format!("(pid {me}) still runs")), "{why}");
        assert!(!why.contains("gone"), "{why}");
    }
}
