//! Loom models of ipc: a client and the server as threads, depth 2.
//!
//! `LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" cargo test -p copyrpc-core --release --test loom_ipc`
#![cfg(loom)]

mod loom_common;

use copyrpc_core::ipc::{Cell, Client, ClientEntry, Config, Header, IpcRegion, Server};
use copyrpc_core::shm::spsc::{RingCtl, Slot};
use copyrpc_core::shm::{ClientState, Owner, Slab, SlabEntry};
use loom::sync::Arc;
use loom::thread;
use loom_common::model;

type Req = u64;
type Resp = u64;

struct Parts {
    header: Header,
    clients: Vec<ClientEntry>,
    req_ctl: Vec<RingCtl>,
    resp_ctl: Vec<RingCtl>,
    cells: Vec<Cell<Req, Resp>>,
}

impl Parts {
    fn new(cfg: Config) -> Arc<Self> {
        let n = cfg.max_clients as usize;
        let slots = n * cfg.depth as usize;
        Arc::new(Self {
            header: Header::new::<Req, Resp>(&cfg),
            clients: (0..n).map(|_| ClientEntry::new()).collect(),
            req_ctl: (0..n).map(|_| RingCtl::new()).collect(),
            resp_ctl: (0..n).map(|_| RingCtl::new()).collect(),
            cells: (0..slots).map(|_| Cell::new()).collect(),
        })
    }
    fn region(&self) -> IpcRegion<'_, Req, Resp> {
        IpcRegion::from_parts(
            &self.header,
            &self.clients,
            &self.req_ctl,
            &self.resp_ctl,
            &self.cells,
        )
        .unwrap()
    }
}

/// Three calls through depth-2 rings (so both rings wrap), replies in reverse order of
/// arrival: every call's user datum comes back once, with its own reply. Neither side
/// hands slots back (`pop_no_handback`): a slot is rewritten only after the causal chain
/// through the other ring, and loom checks each payload cell for a race with it.
#[test]
fn calls_answered_once_out_of_order() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 1,
            depth: 2,
        });
        let p2 = parts.clone();
        let client = thread::spawn(move || {
            // A slab larger than the depth: the in-flight bound, not the slab, limits calls.
            let mut sm: Vec<SlabEntry<u64>> = (0..4).map(|_| SlabEntry::new()).collect();
            let mut c = Client::connect(p2.region(), 1, Slab::new(&mut sm)).unwrap();
            let (mut sent, mut got) = (0u64, 0u64);
            while got < 3 {
                if sent < 3 && c.call(&sent, sent + 100).is_ok() {
                    sent += 1;
                }
                got += c.poll(|u, r| assert_eq!(*r, (u - 100) * 3)) as u64;
                thread::yield_now();
            }
            std::mem::forget(c);
        });
        let mut server = Server::new(parts.region());
        let mut held = Vec::new();
        let mut answered = 0;
        while answered < 3 {
            server.poll();
            while let Some(h) = server.recv() {
                held.push(h);
            }
            while let Some(h) = held.pop() {
                let p = h.payload;
                server.reply(h, &(p * 3)).unwrap();
                answered += 1;
            }
            thread::yield_now();
        }
        std::mem::forget(server);
        client.join().unwrap();
    });
}

/// Depth 1: every call reuses the one cell — the client rewrites the request half right
/// after reading the response half the server wrote, with no hand-back store on either
/// side. Three calls, each answered once with its own reply.
#[test]
fn depth_one_reuses_the_cell() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 1,
            depth: 1,
        });
        let p2 = parts.clone();
        let client = thread::spawn(move || {
            let mut sm: Vec<SlabEntry<u64>> = (0..2).map(|_| SlabEntry::new()).collect();
            let mut c = Client::connect(p2.region(), 1, Slab::new(&mut sm)).unwrap();
            for i in 0..3u64 {
                c.call(&i, i + 100).unwrap();
                let mut got = 0;
                while got == 0 {
                    got = c.poll(|u, r| assert_eq!((u, *r), (i + 100, i * 3)));
                    thread::yield_now();
                }
            }
            std::mem::forget(c);
        });
        let mut server = Server::new(parts.region());
        let mut answered = 0;
        while answered < 3 {
            server.poll();
            while let Some(h) = server.recv() {
                let p = h.payload;
                server.reply(h, &(p * 3)).unwrap();
                answered += 1;
            }
            thread::yield_now();
        }
        std::mem::forget(server);
        client.join().unwrap();
    });
}

/// The bare ring, capacity 2, four messages: the producer reuses each slot while the
/// consumer may still be reading it, so the slot hand-back (R2/A2) is exercised without
/// any other causal path.
#[test]
fn ring_reuses_slots_safely() {
    model(|| {
        let ctl = Arc::new(RingCtl::new());
        let slots: Arc<Vec<Slot<u64>>> = Arc::new((0..2).map(|_| Slot::new()).collect());
        let (c2, s2) = (ctl.clone(), slots.clone());
        let producer = thread::spawn(move || {
            let mut i = 0;
            while i < 4 {
                // SAFETY: the only producer; same slice as the consumer.
                if unsafe { c2.push(&s2[..], i) }.is_ok() {
                    i += 1;
                } else {
                    thread::yield_now();
                }
            }
        });
        let mut want = 0;
        while want < 4 {
            // SAFETY: the only consumer; only the producer wrote the slots.
            match unsafe { ctl.pop(&slots[..]) } {
                Some(v) => {
                    assert_eq!(v, want, "lost, duplicated or reordered");
                    want += 1;
                }
                None => thread::yield_now(),
            }
        }
        producer.join().unwrap();
    });
}

/// Two clients connect at once to a region with room for exactly two: both get an id,
/// and not the same one. (A client used to scan only the ids counted when it looked;
/// the other client could take the one it had reserved meanwhile, and it then reported
/// `NoFreeClientId` with a free id left.)
#[test]
fn concurrent_connects_both_get_an_id() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 2,
            depth: 1,
        });
        let p2 = parts.clone();
        let other = thread::spawn(move || {
            let mut sm: Vec<SlabEntry<u64>> = (0..1).map(|_| SlabEntry::new()).collect();
            let c = Client::connect(p2.region(), 2, Slab::new(&mut sm)).expect("second client");
            let id = c.id();
            std::mem::forget(c);
            id
        });
        let mut sm: Vec<SlabEntry<u64>> = (0..1).map(|_| SlabEntry::new()).collect();
        let c = Client::connect(parts.region(), 1, Slab::new(&mut sm)).expect("first client");
        let id = c.id();
        std::mem::forget(c);
        assert_ne!(id, other.join().unwrap(), "two clients on one id");
    });
}

/// A client calls and closes at once, its reply still in flight; the server's thread
/// then takes the region's one id for a new client (another thread than the old
/// owner's). Nothing else orders the two: the server must see the close (R5/A5 on the
/// state word) and drain the old client's request ring before freeing the id (R4), so
/// the old request is never delivered as the new client's, and the old owner's one look
/// at the row (no yield before it) never shows the new epoch with the old owner. The
/// server yields only after a turn that found nothing (see `loom_deleg_races.rs`).
#[test]
fn close_with_a_reply_in_flight_then_the_id_is_taken_on_another_thread() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 1,
            depth: 1,
        });
        let mut server = Server::new(parts.region());
        let pa = parts.clone();
        let old = thread::spawn(move || {
            let region = pa.region();
            let mut sm: Vec<SlabEntry<u64>> = (0..1).map(|_| SlabEntry::new()).collect();
            let mut a =
                Client::connect(region, Owner { id: 1, token: 5 }, Slab::new(&mut sm)).unwrap();
            a.call(&1, 0).unwrap();
            a.close();
            let row = pa.clients[0].info(0);
            if row.state == ClientState::Active && row.epoch == 2 {
                assert!(
                    matches!((row.owner, row.owner_token), (0, _) | (2, 7)),
                    "epoch 2 shows owner {} token {}",
                    row.owner,
                    row.owner_token
                );
            }
        });
        let mut sm: Vec<SlabEntry<u64>> = (0..1).map(|_| SlabEntry::new()).collect();
        let mut slab = Some(Slab::new(&mut sm));
        let mut new = None;
        loop {
            let ready = server.poll();
            let mut got = 0;
            while let Some(h) = server.recv() {
                let p = h.payload;
                assert!(
                    p == 2 || new.is_none(),
                    "the old client's request delivered after its id was taken again"
                );
                let _ = server.reply(h, &(p * 3));
                got += 1;
            }
            if new.is_none() {
                let row = parts.clients[0].info(0);
                if row.state == ClientState::Free && row.epoch == 1 {
                    let owner = Owner { id: 2, token: 7 };
                    let slab = slab.take().unwrap();
                    let mut b = Client::connect(parts.region(), owner, slab).expect("freed id");
                    assert_eq!(b.epoch(), 2);
                    b.call(&2, 0).unwrap();
                    new = Some(b);
                }
            }
            if let Some(b) = new.as_mut() {
                if b.poll(|_, r| assert_eq!(*r, 6, "another call's reply")) == 1 {
                    break;
                }
            }
            // Loom needs a yield to run the old client while this thread waits; only
            // after a turn that found nothing, so no stale read is hidden.
            if ready == 0 && got == 0 {
                thread::yield_now();
            }
        }
        std::mem::forget(new);
        std::mem::forget(server);
        old.join().unwrap();
    });
}

/// A5 on its own: a client calls and closes on its thread while the server, on another,
/// takes one look (one `poll`, no loop and so no yield before it: after a yield loom lets
/// a thread's loads see only the newest stores, which would hide the stale read this
/// model is about). If that look retired the client, the retirement must have drained
/// the request it pushed before closing: the server's thread then takes the freed id for
/// a new client, which calls nothing, so any request the server finds afterwards is the
/// old client's, delivered under the new epoch. Only A5 (the state load, pairing with the
/// close's R5) orders the push before the drain; with it `Relaxed` the drain may read the
/// slot as still empty, and the next scan finds the old request.
///
/// Both roles run on spawned threads: with the server on the model's main thread, loom
/// never ran the client's connect, call and close before the server's first look (its
/// search, bounded by preemptions, did not reach that schedule), and the model passed
/// with A5 weakened.
#[test]
fn one_look_that_sees_a_close_drains_the_requests_pushed_before_it() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 1,
            depth: 1,
        });
        // Marks the server alive before either thread starts (the thread takes the role
        // again: a `Server` holds no state a second one would miss).
        std::mem::forget(Server::new(parts.region()));
        let pa = parts.clone();
        let old = thread::spawn(move || {
            let mut sm: Vec<SlabEntry<u64>> = (0..1).map(|_| SlabEntry::new()).collect();
            // The server's thread may take the id first (if its one look came before).
            let Ok(mut a) = Client::connect(pa.region(), 1, Slab::new(&mut sm)) else {
                return;
            };
            a.call(&1, 0).unwrap();
            a.close();
        });
        let ps = parts.clone();
        let server = thread::spawn(move || {
            let mut server = Server::new(ps.region());
            server.poll();
            let mut sm: Vec<SlabEntry<u64>> = (0..1).map(|_| SlabEntry::new()).collect();
            // Succeeds only if the look above retired the old client (or it has not
            // connected yet).
            if let Ok(b) = Client::connect(ps.region(), 2, Slab::new(&mut sm)) {
                server.poll();
                if let Some(h) = server.recv() {
                    panic!(
                        "request {} of a closed client delivered to epoch {}'s server scan",
                        h.payload,
                        b.epoch()
                    );
                }
                std::mem::forget(b);
            }
            std::mem::forget(server);
        });
        old.join().unwrap();
        server.join().unwrap();
    });
}

/// R4 on its own: a client calls and closes before the model's threads start, the server
/// retires it (reading the request cell as it drains it) while another thread tries once
/// to connect. A client that gets the freed id takes the rings over and calls, rewriting
/// the one request cell: only R4 (the store that frees the id, pairing with A4 in the new
/// client's activate CAS) orders the server's drain before that, so with it `Relaxed`
/// loom sees the cell written while the drain's read of it is unordered (and the new
/// client may start its ring at the drain's stale position, a lap the server never
/// reads). After both threads end, the new client's request is what the server receives.
#[test]
fn an_id_freed_by_the_server_is_taken_on_another_thread_only_after_the_drain() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 1,
            depth: 1,
        });
        let mut server = Server::new(parts.region());
        let mut sm: Vec<SlabEntry<u64>> = (0..1).map(|_| SlabEntry::new()).collect();
        let mut a = Client::connect(parts.region(), 1, Slab::new(&mut sm)).unwrap();
        a.call(&1, 0).unwrap();
        a.close();
        let pb = parts.clone();
        let new = thread::spawn(move || {
            let mut sm: Vec<SlabEntry<u64>> = (0..1).map(|_| SlabEntry::new()).collect();
            let connected = match Client::connect(pb.region(), 2, Slab::new(&mut sm)) {
                Ok(mut b) => {
                    assert_eq!(b.epoch(), 2);
                    b.call(&2, 0).unwrap();
                    std::mem::forget(b);
                    true
                }
                Err(_) => false,
            };
            connected
        });
        server.poll();
        let connected = new.join().unwrap();
        server.poll();
        let got = server.recv().map(|h| h.payload);
        assert_eq!(
            got,
            connected.then_some(2),
            "the server receives the new client's request, and only it"
        );
        std::mem::forget(server);
    });
}
