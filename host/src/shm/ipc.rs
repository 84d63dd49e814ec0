//! ipc over a named `/dev/shm` region: the core's ipc [`Server`] and [`Client`] with the
//! pids and liveness checks left to the host.

use copyrpc_core::ipc::{
    Client, Config, IpcCallError, IpcRegion, IpcReplyError, IpcRequest, Server,
};
use copyrpc_core::shm::{ClientInfo, EvictError, Payload, Slab, SlabEntry};

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
        let (region, _server, shm) = open_region::<IpcRegion<'static, Req, Resp>>(name)?;
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
    }
}
