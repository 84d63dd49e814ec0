//! delegationrpc over a named `/dev/shm` region: the core's [`Server`] and [`Client`]
//! with the clock, the pids and the liveness checks the core leaves to its host.

use std::time::{Duration, Instant};

use copyrpc_core::deleg::{
    CallError, Client, Config, ConnectError, DelegRegion, RecvEntry, ReplyError, ReplyToken,
    Server, ServerConfig, ServerStats,
};
use copyrpc_core::shm::{ClientInfo, ClientState, EvictError, Payload};

use super::layout::{
    create_region, dead_clients, open_region, owner_gone, server_alive, RefusedCalls,
    LIVENESS_EVERY,
};
use super::{ProcessId, ShmRegion};
use crate::error::{Error, Result};

/// Options of [`DelegServer::create`].
#[derive(Debug, Clone, Copy)]
pub struct ServerOptions {
    /// How long a hole at the ring cursor may stay unclaimed before it is abandoned.
    pub hole_timeout: Duration,
    /// How often `poll` checks the client pids and evicts dead clients.
    pub reap_interval: Duration,
    /// Replace a stale region of the same name (its creator is dead) instead of failing.
    pub replace_stale: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            hole_timeout: Duration::from_millis(100),
            reap_interval: Duration::from_millis(10),
            replace_stale: false,
        }
    }
}

/// The server of a delegationrpc region it created. Dropping it clears `server_alive`
/// and unlinks the region.
pub struct DelegServer<Req: Payload, Resp: Payload> {
    // Field order matters: `server` borrows the mapping owned by `shm` and drops first.
    server: Server<'static, Req, Resp>,
    shm: ShmRegion,
    start: Instant,
    last_reap: Instant,
    reap_interval: Duration,
    /// Polls so far; the clock is read every `CLOCK_EVERY` polls (vDSO `clock_gettime`
    /// costs about as much as an idle poll).
    polls: u64,
    now_ns: u64,
}

/// Polls between clock reads in [`DelegServer::poll`].
const CLOCK_EVERY: u64 = 64;

impl<Req: Payload, Resp: Payload> std::fmt::Debug for DelegServer<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegServer")
            .field("name", &self.shm.name())
            .field("stats", &self.server.stats())
            .finish()
    }
}

impl<Req: Payload, Resp: Payload> DelegServer<Req, Resp> {
    /// Creates region `name` with `cfg`, records this pid as its server and starts serving.
    pub fn create(name: &str, cfg: Config, opts: ServerOptions) -> Result<Self> {
        // The region's references are stored only in `server`, which drops before `shm`,
        // and no method hands out anything that outlives `&self`.
        let (region, shm) =
            create_region::<DelegRegion<'static, Req, Resp>>(name, &cfg, opts.replace_stale)?;
        let server = Server::new(
            region,
            ServerConfig {
                hole_timeout: opts.hole_timeout.as_nanos().min(u64::MAX as u128) as u64,
            },
        );
        let now = Instant::now();
        Ok(Self {
            server,
            shm,
            start: now,
            last_reap: now,
            reap_interval: opts.reap_interval,
            polls: 0,
            now_ns: 0,
        })
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        self.shm.name()
    }

    /// The mapped region (for inspection).
    pub fn shm(&self) -> &ShmRegion {
        &self.shm
    }

    /// Core `poll` with this process's clock; evicts clients whose process is gone every
    /// `reap_interval`. Returns the committed requests ready in a row.
    ///
    /// The clock is read every 64 polls, so the hole timeout and the reap interval are
    /// honoured to within 64 polls.
    pub fn poll(&mut self) -> usize {
        if self.polls.is_multiple_of(CLOCK_EVERY) {
            let now = Instant::now();
            self.now_ns = now.duration_since(self.start).as_nanos() as u64;
            if now.duration_since(self.last_reap) >= self.reap_interval {
                self.last_reap = now;
                self.reap_dead_clients();
            }
        }
        self.polls += 1;
        self.server.poll(self.now_ns)
    }

    /// Evicts every registered client whose owner pid is gone; returns how many.
    pub fn reap_dead_clients(&mut self) -> usize {
        let dead = dead_clients(self.server.clients());
        for &id in &dead {
            let _ = self.server.evict(id);
        }
        dead.len()
    }

    /// Core `recv`.
    pub fn recv(&mut self) -> Option<RecvEntry<Req>> {
        self.server.recv()
    }

    /// Core `advance_tail`.
    pub fn advance_tail(&mut self) {
        self.server.advance_tail()
    }

    /// Core `reply`.
    pub fn reply(&mut self, token: ReplyToken, resp: &Resp) -> Result<(), ReplyError> {
        self.server.reply(token, resp)
    }

    /// Counters.
    pub fn stats(&self) -> ServerStats {
        self.server.stats()
    }

    /// True once the core found `head` persistently behind its cursor: the ring control
    /// block was overwritten, and `poll` reports no work from then on.
    pub fn ring_corrupt(&self) -> bool {
        self.server.ring_corrupt()
    }

    /// A one-line snapshot for failure messages: cursor, head, tail, the cursor slot's
    /// `committed` and claim word, counters and the client table.
    pub fn diagnostics(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let r = self.server.region();
        let cur = self.server.cursor();
        let slot = r.req_slot((cur & (r.config().ring_depth as u64 - 1)) as usize);
        // Relaxed: a snapshot for humans.
        format!(
            "cursor={cur} head={} tail={} corrupt={} committed={} claim={:#x} hole={:?} stats={:?} clients={:?} ring={:?}",
            r.ring_control().head.load(Relaxed),
            r.ring_control().tail.load(Relaxed),
            self.server.ring_corrupt(),
            slot.committed.load(Relaxed),
            slot.claim.load(Relaxed),
            self.server.hole(),
            self.server.stats(),
            self.server
                .clients()
                .map(|c| (c.id, c.state, c.owner, r.client_entry(c.id).claim_pos.load(Relaxed)))
                .collect::<Vec<_>>(),
            (0..r.config().ring_depth as usize)
                .map(|i| {
                    let s = r.req_slot(i);
                    (s.committed.load(Relaxed), s.claim.load(Relaxed))
                })
                .collect::<Vec<_>>()
        )
    }

    /// The client table (id, state, epoch, owner pid).
    pub fn clients(&self) -> impl Iterator<Item = ClientInfo> + '_ {
        self.server.clients()
    }

    /// Core `evict`: declares a client dead (normally done by `poll` through the pids).
    pub fn evict(&mut self, id: u32) -> Result<(), EvictError> {
        self.server.evict(id)
    }
}

/// How long [`DelegClient::connect`] waits for the server to free ids of dead clients.
pub const CONNECT_WAIT: Duration = Duration::from_secs(2);

/// Registers; if every id is taken, declares the ids of dead owners dead (the server's
/// own reaper may not have run yet: it checks every `reap_interval`) and waits, bounded
/// by [`CONNECT_WAIT`], for the server to drain and free them — or ids of closing
/// clients — and retries. Only the server may free an id: the dead client's requests
/// still in the ring must be dropped before a new owner takes its response slots.
fn connect_reclaiming<Req: Payload, Resp: Payload>(
    region: DelegRegion<'static, Req, Resp>,
    name: &str,
    server: ProcessId,
) -> Result<Client<'static, Req, Resp>> {
    let connect_err = |source| Error::Connect {
        name: name.to_owned(),
        source,
    };
    let me = ProcessId::current();
    let start = Instant::now();
    let mut waiting_for = Vec::new();
    loop {
        match Client::connect(region, me) {
            Ok(c) => return Ok(c),
            Err(ConnectError::NoFreeClientId) => {}
            Err(e) => return Err(connect_err(e)),
        }
        waiting_for.clear();
        // An id the server freed between the failed connect and this scan: try again at
        // once. Before, such a scan found nothing to wait for and gave up with "no free
        // client id" while an id was free (seen under load in the item-9 test).
        let mut freed_meanwhile = false;
        for id in 0..region.config().max_clients {
            let c = region.client_info(id);
            let dead = c.state == ClientState::Active
                && owner_gone(&c)
                && region.declare_dead(id, c.epoch);
            if dead || matches!(c.state, ClientState::Closing | ClientState::Dead) {
                waiting_for.push(id);
            }
            freed_meanwhile |= c.state == ClientState::Free;
        }
        if waiting_for.is_empty() && !freed_meanwhile {
            return Err(connect_err(ConnectError::NoFreeClientId));
        }
        if !server.alive() {
            return Err(Error::ShmStale {
                name: name.to_owned(),
                pid: server.pid,
            });
        }
        let waited = start.elapsed();
        if waited >= CONNECT_WAIT {
            return Err(Error::ClientIdNotFreed {
                name: name.to_owned(),
                ids: waiting_for,
                waited,
            });
        }
        if freed_meanwhile {
            continue;
        }
        // The server frees ids in its poll loop; give it the core meanwhile.
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// How long [`DelegClient::call`] waits for room in a full ring by default.
pub const DEFAULT_CALL_WAIT: Duration = Duration::from_secs(5);

/// A client of a delegationrpc region created by another process (or thread).
pub struct DelegClient<Req: Payload, Resp: Payload> {
    // Field order matters: `client` borrows the mapping owned by `shm` and drops first.
    client: Client<'static, Req, Resp>,
    region: DelegRegion<'static, Req, Resp>,
    shm: ShmRegion,
    call_wait: Duration,
    refused: RefusedCalls,
}

impl<Req: Payload, Resp: Payload> std::fmt::Debug for DelegClient<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegClient")
            .field("name", &self.shm.name())
            .field("id", &self.client.id())
            .finish()
    }
}

impl<Req: Payload, Resp: Payload> DelegClient<Req, Resp> {
    /// Opens `name`, validates its layout for these payload types, checks that its server
    /// is alive and registers (this pid is recorded as the client's owner).
    pub fn connect(name: &str) -> Result<Self> {
        // The views are stored in fields that drop before `shm`.
        let (region, server, shm) = open_region::<DelegRegion<'static, Req, Resp>>(name)?;
        let client = connect_reclaiming(region, name, server)?;
        Ok(Self {
            client,
            region,
            shm,
            call_wait: DEFAULT_CALL_WAIT,
            refused: RefusedCalls::default(),
        })
    }

    /// Bounds how long one [`call`](Self::call) waits for room in a full ring.
    pub fn set_call_wait(&mut self, wait: Duration) {
        self.call_wait = wait;
    }

    /// This client's id.
    pub fn id(&self) -> u32 {
        self.client.id()
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> u32 {
        self.client.in_flight()
    }

    /// Core `call`, with a bounded wait while the ring is full: every millisecond of
    /// it checks the server's process (pid and start time; a SIGKILLed server never
    /// clears `server_alive`) and ends with `ServerDisconnected` if it is gone, and after
    /// [`set_call_wait`](Self::set_call_wait) (default [`DEFAULT_CALL_WAIT`]) it ends with
    /// `RingFull`. `RingCorrupt` if `head`/`tail` were overwritten. With every call in
    /// flight (`NoResponseSlot`) it checks the server's process too, at most once a
    /// millisecond, and says `ServerDisconnected` once it is gone: a client that polls
    /// and retries does not wait for answers a killed server will never send.
    pub fn call(&mut self, req: &Req) -> Result<u32, CallError> {
        let server = ProcessId::from(self.region.header().server_owner());
        let bound = self.call_wait;
        let mut since: Option<(Instant, Instant)> = None;
        let r = self.client.call_with(req, || {
            let now = Instant::now();
            let (start, checked) = since.get_or_insert((now, now));
            if now.duration_since(*checked) >= LIVENESS_EVERY {
                *checked = now;
                if !server.alive() {
                    return Err(CallError::ServerDisconnected);
                }
            }
            if now.duration_since(*start) >= bound {
                return Err(CallError::RingFull);
            }
            // Waiting for another process: leave it the core if it shares ours.
            std::thread::yield_now();
            Ok(())
        });
        match r {
            Err(CallError::NoResponseSlot) if self.refused.server_gone(&self.region) => {
                Err(CallError::ServerDisconnected)
            }
            r => r,
        }
    }

    /// [`call`](Self::call) that never waits for room: with the ring full it returns
    /// `RingFull` after the core's first few hundred spins, keeping the claimed position
    /// for the next call (so a refused call holds one position, as a timed-out `call`
    /// does, and the server skips it after its hole timeout if no call comes back for
    /// it). The server's process is checked then too, at most once a millisecond
    /// (`ServerDisconnected`). For a poll loop that must not block.
    pub fn try_call(&mut self, req: &Req) -> Result<u32, CallError> {
        let (refused, region) = (&mut self.refused, &self.region);
        let r = self.client.call_with(req, || {
            if refused.server_gone(region) {
                Err(CallError::ServerDisconnected)
            } else {
                Err(CallError::RingFull)
            }
        });
        match r {
            Err(CallError::NoResponseSlot) if self.refused.server_gone(&self.region) => {
                Err(CallError::ServerDisconnected)
            }
            r => r,
        }
    }

    /// Calls a client may have in flight (the region's response depth): the response
    /// slots [`call`](Self::call) returns are below it.
    pub fn resp_depth(&self) -> u32 {
        self.region.config().resp_depth
    }

    /// Core `poll`.
    pub fn poll(&mut self, f: impl FnMut(u32, &Resp)) -> usize {
        self.client.poll(f)
    }

    /// True while the server runs: its flag is set and its process (pid and start time)
    /// is alive. A server killed without running its destructor is caught by the second.
    pub fn server_alive(&self) -> bool {
        server_alive(&self.region)
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        self.shm.name()
    }

    /// A one-line snapshot for failure messages: id, calls in flight, and each response
    /// slot's `(pending, valid)`.
    pub fn diagnostics(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let r = self.region;
        let id = self.client.id();
        // Relaxed: a snapshot for humans.
        format!(
            "client id={id} in_flight={} head={} tail={} slots={:?}",
            self.client.in_flight(),
            r.ring_control().head.load(Relaxed),
            r.ring_control().tail.load(Relaxed),
            (0..r.config().resp_depth)
                .map(|i| {
                    let s = r.resp_slot(id, i);
                    (s.pending.load(Relaxed), s.valid.load(Relaxed))
                })
                .collect::<Vec<_>>()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::my_pid;
    use crate::shm::tests::unique;
    use copyrpc_core::deleg::ConnectError;
    use copyrpc_core::shm::LayoutError;
    use std::sync::atomic::Ordering;

    type Req = [u64; 2];
    type Resp = [u64; 2];

    const CFG: Config = Config {
        max_clients: 2,
        ring_depth: 4,
        resp_depth: 2,
    };

    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    }

    #[test]
    fn round_trip_over_dev_shm() {
        let name = unique("deleg");
        let mut s = DelegServer::<Req, Resp>::create(&name, CFG, ServerOptions::default()).unwrap();
        let mut c = DelegClient::<Req, Resp>::connect(&name).unwrap();
        assert!(c.server_alive());
        c.call(&[1, 2]).unwrap();
        assert_eq!(s.poll(), 1);
        let e = s.recv().unwrap();
        s.advance_tail();
        s.reply(e.token, &[e.payload[1], e.payload[0]]).unwrap();
        let mut got = None;
        c.poll(|_, r| got = Some(*r));
        assert_eq!(got, Some([2, 1]));
        drop(s);
        assert!(!c.server_alive());
        assert_eq!(c.call(&[0, 0]), Err(CallError::ServerDisconnected));
        // The creator unlinked the name.
        assert!(matches!(
            DelegClient::<Req, Resp>::connect(&name),
            Err(Error::ShmOpen { .. })
        ));
    }

    #[test]
    fn bad_regions_are_typed_errors_naming_the_region() {
        // Wrong magic: a region of the right size that is not delegationrpc.
        let name = unique("magic");
        let len = DelegRegion::<Req, Resp>::required_len(&CFG).unwrap();
        let raw = ShmRegion::create(&name, len).unwrap();
        // SAFETY: our fresh mapping, no other user yet.
        unsafe { raw.as_ptr().cast::<u64>().write(0x1234) };
        match DelegClient::<Req, Resp>::connect(&name) {
            Err(Error::ShmLayout {
                name: n,
                source: LayoutError::BadMagic { found: 0x1234 },
            }) => assert_eq!(n, name),
            other => panic!("{other:?}"),
        }
        drop(raw);

        // Truncated: a file shorter than the header, then shorter than the layout.
        let name = unique("short");
        let raw = ShmRegion::create(&name, 64).unwrap();
        assert!(matches!(
            DelegClient::<Req, Resp>::connect(&name),
            Err(Error::ShmLayout {
                source: LayoutError::Truncated {
                    need: 128,
                    have: 64
                },
                ..
            })
        ));
        drop(raw);
        let name = unique("trunc");
        let s = DelegServer::<Req, Resp>::create(&name, CFG, ServerOptions::default()).unwrap();
        let path = format!("/dev/shm{name}");
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len as u64 - 64).unwrap();
        assert!(matches!(
            DelegClient::<Req, Resp>::connect(&name),
            Err(Error::ShmLayout {
                source: LayoutError::Truncated { .. },
                ..
            })
        ));
        f.set_len(len as u64).unwrap();

        // Wrong payload size, wrong version.
        assert!(matches!(
            DelegClient::<[u64; 3], Resp>::connect(&name),
            Err(Error::ShmLayout {
                source: LayoutError::PayloadSize { req: 16, resp: 16 },
                ..
            })
        ));
        let h = DelegClient::<Req, Resp>::connect(&name).unwrap();
        h.region.header().version.store(9, Ordering::Relaxed);
        assert!(matches!(
            DelegClient::<Req, Resp>::connect(&name),
            Err(Error::ShmLayout {
                source: LayoutError::BadVersion { found: 9 },
                ..
            })
        ));
        h.region
            .header()
            .version
            .store(copyrpc_core::deleg::VERSION, Ordering::Relaxed);

        // Client-id exhaustion (max_clients = 2, `h` holds one).
        let _b = DelegClient::<Req, Resp>::connect(&name).unwrap();
        match DelegClient::<Req, Resp>::connect(&name) {
            Err(Error::Connect {
                name: n,
                source: ConnectError::NoFreeClientId,
            }) => assert_eq!(n, name),
            other => panic!("{other:?}"),
        }
        drop(s);
        drop(h);
    }

    #[test]
    fn stale_region_is_detected_and_replaceable() {
        let name = unique("stale");
        let s = DelegServer::<Req, Resp>::create(&name, CFG, ServerOptions::default()).unwrap();
        // Pretend its server died without cleaning up: a dead pid, flag still set.
        let h = DelegClient::<Req, Resp>::connect(&name).unwrap();
        let dead = dead_pid();
        h.region
            .header()
            .server_owner
            .store(dead, Ordering::Relaxed);
        assert!(!h.server_alive());
        match DelegClient::<Req, Resp>::connect(&name) {
            Err(Error::ShmStale { name: n, pid }) => {
                assert_eq!((n, pid), (name.clone(), dead))
            }
            other => panic!("{other:?}"),
        }
        match DelegServer::<Req, Resp>::create(&name, CFG, ServerOptions::default()) {
            Err(Error::ShmStale { pid, .. }) => assert_eq!(pid, dead),
            other => panic!("{other:?}"),
        }
        // Keep the old mapping but drop the old handles' claim on the name.
        std::mem::forget(s);
        let opts = ServerOptions {
            replace_stale: true,
            ..ServerOptions::default()
        };
        let s2 = DelegServer::<Req, Resp>::create(&name, CFG, opts).unwrap();
        let mut c = DelegClient::<Req, Resp>::connect(&name).unwrap();
        assert_eq!(c.id(), 0, "fresh region");
        c.call(&[1, 1]).unwrap();
        drop(h);
        drop(c);
        drop(s2);
    }

    /// All calls in flight and the server killed (its flag still set): the next call
    /// says the server is gone instead of "no response slot, poll and retry" for ever.
    #[test]
    fn a_client_with_every_call_in_flight_learns_that_a_killed_server_is_gone() {
        let name = unique("deleg-killed");
        let _s = DelegServer::<Req, Resp>::create(&name, CFG, ServerOptions::default()).unwrap();
        let mut c = DelegClient::<Req, Resp>::connect(&name).unwrap();
        for i in 0..CFG.resp_depth {
            c.call(&[u64::from(i), 0]).unwrap();
        }
        assert_eq!(
            c.call(&[9, 0]),
            Err(CallError::NoResponseSlot),
            "server alive"
        );
        let dead = dead_pid();
        c.region
            .header()
            .server_owner
            .store(dead, Ordering::Relaxed);
        let t0 = Instant::now();
        loop {
            match c.call(&[9, 0]) {
                Err(CallError::ServerDisconnected) => break,
                Err(CallError::NoResponseSlot) => {
                    assert!(
                        t0.elapsed() < Duration::from_secs(10),
                        "still NoResponseSlot 10 s after the server died"
                    );
                    std::thread::yield_now();
                }
                other => panic!("{other:?}"),
            }
        }
    }

    fn replacing() -> ServerOptions {
        ServerOptions {
            replace_stale: true,
            ..ServerOptions::default()
        }
    }

    #[test]
    fn an_object_that_is_not_a_copyrpc_region_is_never_replaced() {
        let name = unique("foreign");
        let path = format!("/dev/shm{name}");
        let bytes = b"another program's shared segment".repeat(64);
        std::fs::write(&path, &bytes).unwrap();
        match DelegServer::<Req, Resp>::create(&name, CFG, replacing()) {
            Err(e @ Error::ShmForeign { .. }) => {
                assert!(e.to_string().contains("not a copyrpc region"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "left as it was");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn an_uninitialised_region_is_left_while_recent_and_replaced_once_old() {
        let name = unique("unfinished");
        let path = format!("/dev/shm{name}");
        // What a creator leaves between its exclusive create and its init (or forever,
        // if it dies in between): zero bytes, no magic, no owner.
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(4096).unwrap();
        match DelegServer::<Req, Resp>::create(&name, CFG, replacing()) {
            Err(Error::ShmUnfinished { name: n }) => assert_eq!(n, name),
            other => panic!("{other:?}"),
        }
        assert!(std::path::Path::new(&path).exists());
        let old = std::time::SystemTime::now() - Duration::from_secs(60);
        f.set_modified(old).unwrap();
        let s = DelegServer::<Req, Resp>::create(&name, CFG, replacing()).unwrap();
        let mut c = DelegClient::<Req, Resp>::connect(&name).unwrap();
        c.call(&[1, 1]).unwrap();
        drop(c);
        drop(s);
    }

    #[test]
    fn two_servers_creating_one_name_at_once_never_both_succeed() {
        for i in 0..200 {
            let name = unique("race");
            let barrier = std::sync::Barrier::new(2);
            let won: Vec<bool> = std::thread::scope(|t| {
                let hs: Vec<_> = (0..2)
                    .map(|_| {
                        t.spawn(|| {
                            barrier.wait();
                            let r = DelegServer::<Req, Resp>::create(&name, CFG, replacing());
                            // Held until both tried: a dropped winner would unlink the
                            // name and let the other create it legitimately.
                            barrier.wait();
                            r.is_ok()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(
                won.iter().filter(|&&w| w).count(),
                1,
                "iteration {i}: {won:?}"
            );
        }
    }

    #[test]
    fn live_server_region_is_not_replaced() {
        let name = unique("live");
        let _s = DelegServer::<Req, Resp>::create(&name, CFG, ServerOptions::default()).unwrap();
        let opts = ServerOptions {
            replace_stale: true,
            ..ServerOptions::default()
        };
        match DelegServer::<Req, Resp>::create(&name, CFG, opts) {
            Err(Error::ShmExists { name: n, pid }) => {
                assert_eq!((n, pid), (name.clone(), my_pid()))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn dead_client_is_evicted_and_its_id_reused() {
        let name = unique("reap");
        let cfg = Config {
            max_clients: 1,
            ..CFG
        };
        let mut s = DelegServer::<Req, Resp>::create(&name, cfg, ServerOptions::default()).unwrap();
        let c = DelegClient::<Req, Resp>::connect(&name).unwrap();
        // Make the client look like another process that died.
        c.region
            .client_entry(c.id())
            .owner
            .store(dead_pid(), Ordering::Relaxed);
        std::mem::forget(c);
        assert_eq!(s.reap_dead_clients(), 1);
        s.poll();
        let c2 = DelegClient::<Req, Resp>::connect(&name).unwrap();
        assert_eq!(c2.id(), 0);
    }

    /// A call on a full ring that the (live) server does not drain ends with `RingFull`
    /// after the client's bound, keeping its position: the next call resumes it rather
    /// than claiming another, and is delivered once the server makes room.
    #[test]
    fn item3_full_ring_wait_is_bounded_and_resumes() {
        let name = unique("full");
        let cfg = Config {
            max_clients: 1,
            ring_depth: 2,
            resp_depth: 4,
        };
        let mut s = DelegServer::<Req, Resp>::create(&name, cfg, ServerOptions::default()).unwrap();
        let mut c = DelegClient::<Req, Resp>::connect(&name).unwrap();
        c.set_call_wait(Duration::from_millis(50));
        c.call(&[1, 1]).unwrap();
        c.call(&[2, 2]).unwrap();
        let t = Instant::now();
        assert_eq!(c.call(&[3, 3]), Err(CallError::RingFull));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(CallError::RingFull.to_string().contains("advance tail"));
        assert_eq!(c.call(&[3, 3]), Err(CallError::RingFull));
        let head = || {
            s.server
                .region()
                .ring_control()
                .head
                .load(Ordering::Relaxed)
        };
        assert_eq!(head(), 3, "one position claimed for both attempts");
        assert_eq!(s.poll(), 2);
        while let Some(e) = s.recv() {
            s.reply(e.token, &e.payload).unwrap();
        }
        s.advance_tail();
        c.call(&[3, 3]).unwrap();
        assert_eq!(s.poll(), 1);
        assert_eq!(s.recv().unwrap().payload, [3, 3]);
        assert_eq!(s.stats().abandoned, 0);
    }

    /// `try_call` on a full ring returns `RingFull` without waiting out any bound (the
    /// client's bound is set far beyond the test's so only the non-blocking path can
    /// pass), keeps one position for both refusals, and delivers once the server made
    /// room; with the server gone it says so.
    #[test]
    fn try_call_on_a_full_ring_returns_at_once_and_resumes() {
        let name = unique("try");
        let cfg = Config {
            max_clients: 1,
            ring_depth: 2,
            resp_depth: 4,
        };
        let mut s = DelegServer::<Req, Resp>::create(&name, cfg, ServerOptions::default()).unwrap();
        let mut c = DelegClient::<Req, Resp>::connect(&name).unwrap();
        c.set_call_wait(Duration::from_secs(3600));
        assert_eq!(c.resp_depth(), 4);
        c.try_call(&[1, 1]).unwrap();
        c.try_call(&[2, 2]).unwrap();
        assert_eq!(c.try_call(&[3, 3]), Err(CallError::RingFull));
        assert_eq!(c.try_call(&[3, 3]), Err(CallError::RingFull));
        let head = s
            .server
            .region()
            .ring_control()
            .head
            .load(Ordering::Relaxed);
        assert_eq!(head, 3, "one position claimed for both refusals");
        assert_eq!(s.poll(), 2);
        while let Some(e) = s.recv() {
            s.reply(e.token, &e.payload).unwrap();
        }
        s.advance_tail();
        c.try_call(&[3, 3]).unwrap();
        assert_eq!(s.poll(), 1);
        assert_eq!(s.recv().unwrap().payload, [3, 3]);
        drop(s);
        assert_eq!(c.try_call(&[4, 4]), Err(CallError::ServerDisconnected));
    }

    /// A connecting client that finds every id taken declares the dead owner's id dead
    /// itself; if the server does not poll (and so never frees it), connect ends after
    /// its bound with an error naming the id it waited for, and succeeds once it polls.
    #[test]
    fn item9_connect_waits_bounded_for_a_dead_clients_id() {
        let name = unique("reclaim");
        let cfg = Config {
            max_clients: 1,
            ..CFG
        };
        let mut s = DelegServer::<Req, Resp>::create(&name, cfg, ServerOptions::default()).unwrap();
        let c = DelegClient::<Req, Resp>::connect(&name).unwrap();
        c.region
            .client_entry(c.id())
            .owner
            .store(dead_pid(), Ordering::Relaxed);
        std::mem::forget(c);
        let e = DelegClient::<Req, Resp>::connect(&name).unwrap_err();
        match &e {
            Error::ClientIdNotFreed { ids, waited, .. } => {
                assert_eq!(ids, &[0]);
                assert!(*waited >= CONNECT_WAIT);
            }
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().contains("free ids [0]"), "{e}");
        // Declared dead by the connecting host: the server's reaper has nothing left to do.
        assert_eq!(s.reap_dead_clients(), 0);
        s.poll();
        assert_eq!(DelegClient::<Req, Resp>::connect(&name).unwrap().id(), 0);
    }
}
