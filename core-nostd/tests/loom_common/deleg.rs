//! The delegationrpc region as separately allocated parts, shared by the deleg loom
//! models (`#[path]`-included by `loom_deleg.rs` and `loom_deleg_races.rs`).

use copyrpc_core::deleg::{
    Client, ClientEntry, Config, DelegRegion, Header, ReqSlot, RespSlot, RingControl,
};
use loom::sync::Arc;
use loom::thread;

pub type Req = u64;
pub type Resp = u64;

/// The parts of one region, allocated normally (loom atomics cannot be cast from bytes).
pub struct Parts {
    header: Header,
    ctrl: RingControl,
    ring: Vec<ReqSlot<Req>>,
    resp: Vec<RespSlot<Resp>>,
    clients: Vec<ClientEntry>,
}

impl Parts {
    pub fn new(cfg: Config) -> Arc<Self> {
        Arc::new(Self {
            header: Header::new::<Req, Resp>(&cfg),
            ctrl: RingControl::new(),
            ring: (0..cfg.ring_depth).map(|_| ReqSlot::new()).collect(),
            resp: (0..cfg.max_clients * cfg.resp_depth)
                .map(|_| RespSlot::new())
                .collect(),
            clients: (0..cfg.max_clients).map(|_| ClientEntry::new()).collect(),
        })
    }

    pub fn region(&self) -> DelegRegion<'_, Req, Resp> {
        DelegRegion::from_parts(
            &self.header,
            &self.ctrl,
            &self.ring,
            &self.resp,
            &self.clients,
        )
        .unwrap()
    }
}

/// Polls until one response arrives and checks it is `expect`. The yield is what loom
/// needs to schedule the server while this thread waits for it.
#[allow(dead_code)]
pub fn wait_response(c: &mut Client<'_, Req, Resp>, expect: u64) {
    loop {
        let mut got = None;
        if c.poll(|_, r| got = Some(*r)) == 1 {
            assert_eq!(got, Some(expect), "response routed to the wrong call");
            return;
        }
        thread::yield_now();
    }
}
