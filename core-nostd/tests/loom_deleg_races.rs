//! Loom models of delegationrpc where nothing but the protocol orders the threads: a
//! client laps the ring without waiting for its replies, closes with a reply in flight,
//! its id is taken by a client on another thread, a dead claimer is evicted, a slot is
//! reused after an abandon (issue 25; `loom_deleg.rs` has the gentler models).
//!
//! No loop here yields on a turn that made progress. Loom needs a yield in a loop that
//! waits on another thread (a spin without one never lets the model end), but after a
//! yield loom no longer lets a load return a store the thread could already see: a
//! server that yields every turn always reads fresh values, and a needed ordering can
//! be weakened unnoticed. So the server yields only on a turn that found nothing to do,
//! and a client only while it waits for a reply or a free id. `scripts/orderings.sh`
//! shows which weakened ordering each model catches.
//!
//! `LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" cargo test -p copyrpc-core --release --test loom_deleg_races`
#![cfg(loom)]

#[path = "loom_common/deleg.rs"]
mod deleg_parts;
mod loom_common;

use copyrpc_core::deleg::{CallError, Client, Config, RecvEntry, ReplyToken, Server, ServerConfig};
use copyrpc_core::shm::{ClientState, Owner};
use deleg_parts::{Parts, Req};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_common::model_bounded;

/// One server turn: poll, take every request ready and answer `p` with `p * 10`,
/// publish `tail`. `on_recv(payload, (client, slot, epoch, call), replied)` sees each request
/// delivered and whether its reply was taken. True if the turn found work.
fn turn(
    server: &mut Server<'_, Req, u64>,
    now: u64,
    mut on_recv: impl FnMut(Req, (u32, u32, u32, u32), bool),
) -> bool {
    let ready = server.poll(now);
    let mut got = 0;
    while let Some(RecvEntry { token, payload }) = server.recv() {
        let raw = token.into_raw();
        let ok = server
            .reply(ReplyToken::from_raw(raw), &(payload * 10))
            .is_ok();
        on_recv(payload, raw, ok);
        got += 1;
    }
    server.advance_tail();
    ready > 0 || got > 0
}

/// Runs server turns until `done(&mut server)`, yielding only after a turn that found
/// no work. Returns the server undropped: its drop clears `server_alive`, which would
/// fail calls still to come.
fn serve_until<'a>(
    parts: &'a Parts,
    hole_timeout: u64,
    mut on_recv: impl FnMut(Req, (u32, u32, u32, u32), bool),
    mut done: impl FnMut(&mut Server<'a, Req, u64>) -> bool,
) -> Server<'a, Req, u64> {
    let mut server = Server::new(parts.region(), ServerConfig { hole_timeout });
    let mut now = 0;
    loop {
        now += 1;
        let busy = turn(&mut server, now, &mut on_recv);
        if done(&mut server) {
            return server;
        }
        if !busy {
            thread::yield_now();
        }
    }
}

/// One client makes three calls back to back on a 2-slot ring and only then polls: the
/// third call reuses slot 0 while its first request may still be being read and answered.
/// Only the server's `tail` (R2/A2) orders the server's read of the first request before
/// the client's rewrite of the slot, and each reply must reach its own call.
#[test]
fn client_laps_the_ring_without_waiting_for_its_replies() {
    // One preemption: 3 s; two take minutes (the third call spins on `tail`).
    model_bounded(1, || {
        let parts = Parts::new(Config {
            max_clients: 1,
            ring_depth: 2,
            resp_depth: 4,
        });
        let p2 = parts.clone();
        let client = thread::spawn(move || {
            let mut c = Client::connect(p2.region(), 1).unwrap();
            let mut expect = [0u64; 4];
            for req in 1..=3u64 {
                let slot = c.call(&req).unwrap();
                expect[slot as usize] = req * 10;
            }
            let mut got = 0;
            loop {
                got += c
                    .poll(|slot, r| assert_eq!(*r, expect[slot as usize], "reply of another call"));
                if got == 3 {
                    break;
                }
                thread::yield_now();
            }
            std::mem::forget(c);
        });
        let mut seen = Vec::new();
        let server = serve_until(
            &parts,
            u64::MAX,
            |p, _, ok| {
                assert!(ok, "reply to a live client refused");
                seen.push(p);
            },
            |server| server.stats().received == 3,
        );
        std::mem::forget(server);
        assert_eq!(seen, [1, 2, 3], "each request once, in ring order");
        client.join().unwrap();
    });
}

/// The server's thread, once the region's one id is free again, also hosts a new client
/// on it (so the id is taken on another thread than the old owner's): connects, calls
/// `2`, and turns the server until its reply arrives. Checks every request delivered.
fn reconnect_on_server_thread(
    parts: &Parts,
    mut server: Server<'_, Req, u64>,
    mut on_turn: impl FnMut(&mut Server<'_, Req, u64>),
) {
    let mut now = 0;
    let mut new: Option<Client<'_, Req, u64>> = None;
    let check = |p: Req, (_, _, epoch, _): (u32, u32, u32, u32), ok: bool| {
        let want = if p == 2 { 2 } else { 1 };
        assert_eq!(epoch, want, "request {p} delivered under epoch {epoch}");
        if p == 2 {
            assert!(ok, "reply to the new client refused");
        }
    };
    loop {
        on_turn(&mut server);
        now += 1;
        let busy = turn(&mut server, now, check);
        if new.is_none() && server.stats().reclaimed == 1 {
            let mut b =
                Client::connect(parts.region(), Owner { id: 2, token: 7 }).expect("the freed id");
            assert_eq!(b.epoch(), 2);
            b.call(&2).unwrap();
            new = Some(b);
        }
        if let Some(b) = new.as_mut() {
            let mut got = None;
            if b.poll(|_, r| got = Some(*r)) == 1 {
                assert_eq!(got, Some(20), "the new client got another call's reply");
                std::mem::forget(new);
                std::mem::forget(server);
                return;
            }
        }
        if !busy {
            thread::yield_now();
        }
    }
}

/// A client closes right after its call, the reply still in flight, and the server's
/// thread then takes the region's one id for a new client. The server must see the close
/// (R5/A5 on `retire_requests`, R8/A8 on the state word) or the id leaks and the model
/// never ends; it must drain the old request before freeing the id (R4) and never
/// deliver it under the new epoch. The old client's host then looks at the row once, as
/// a liveness check does: a row of the new epoch must not show the old owner (or a host
/// would declare the new client dead).
#[test]
fn close_with_a_reply_in_flight_then_the_id_is_taken_on_another_thread() {
    // Two preemptions: under a second.
    model_bounded(2, || {
        let parts = Parts::new(Config {
            max_clients: 1,
            ring_depth: 2,
            resp_depth: 1,
        });
        let server = Server::new(
            parts.region(),
            ServerConfig {
                hole_timeout: u64::MAX,
            },
        );
        let pa = parts.clone();
        let old = thread::spawn(move || {
            let region = pa.region();
            let mut a = Client::connect(region, Owner { id: 1, token: 5 }).unwrap();
            a.call(&1).unwrap();
            a.close();
            // One look, no yield before it (after a yield loom shows only fresh values).
            let row = region.client_info(0);
            if row.state == ClientState::Active && row.epoch == 2 {
                assert!(
                    matches!((row.owner, row.owner_token), (0, _) | (2, 7)),
                    "epoch 2 shows owner {} token {}",
                    row.owner,
                    row.owner_token
                );
            }
        });
        reconnect_on_server_thread(&parts, server, |_| {});
        old.join().unwrap();
    });
}

/// A client dies holding a claimed position (no commit, no cancel); with no hole timeout
/// only its eviction lets the server past the hole. The server's host evicts it once it
/// is gone (the flag stands for the host's pid check); the id is drained and freed, and
/// a new client on the server's thread takes it and is answered through the reused slot.
#[test]
fn dead_claimer_is_evicted_and_its_slot_and_id_reused() {
    // Two preemptions: under a second.
    model_bounded(2, || {
        let parts = Parts::new(Config {
            max_clients: 1,
            ring_depth: 2,
            resp_depth: 1,
        });
        let server = Server::new(
            parts.region(),
            ServerConfig {
                hole_timeout: u64::MAX,
            },
        );
        let gone = Arc::new(AtomicBool::new(false));
        let (pd, fg) = (parts.clone(), gone.clone());
        let dead = thread::spawn(move || {
            let mut d = Client::connect(pd.region(), 1).unwrap();
            let r = d.reserve().unwrap();
            // Dies between claim and commit: neither commits nor cancels.
            std::mem::forget(r);
            std::mem::forget(d);
            fg.store(true, Ordering::SeqCst);
        });
        let mut evicted = false;
        reconnect_on_server_thread(&parts, server, |server| {
            if !evicted && gone.load(Ordering::SeqCst) {
                server.evict(0).unwrap();
                evicted = true;
            }
            if evicted {
                assert!(
                    server.stats().abandoned <= 1,
                    "the dead claim skipped twice"
                );
            }
        });
        dead.join().unwrap();
    });
}

/// Three calls back to back against a server whose hole timeout is 0, so any claim not
/// yet written may be abandoned under the claimer; a later call of the same client then
/// reuses the abandoned slot. Every call either is answered once with its own reply or
/// reports `Abandoned` and is never delivered.
#[test]
fn slot_reused_after_an_abandon() {
    // One preemption: 4 s; two take about three minutes.
    model_bounded(1, || {
        let parts = Parts::new(Config {
            max_clients: 1,
            ring_depth: 2,
            resp_depth: 4,
        });
        let p2 = parts.clone();
        let client = thread::spawn(move || {
            let mut c = Client::connect(p2.region(), 1).unwrap();
            let mut expect = [0u64; 4];
            let mut sent = Vec::new();
            for req in 1..=3u64 {
                match c.call(&req) {
                    Ok(slot) => {
                        expect[slot as usize] = req * 10;
                        sent.push(req);
                    }
                    Err(CallError::Abandoned) => {}
                    Err(e) => panic!("call {req}: {e:?}"),
                }
            }
            let mut got = 0;
            while got < sent.len() {
                got += c
                    .poll(|slot, r| assert_eq!(*r, expect[slot as usize], "reply of another call"));
                if got < sent.len() {
                    thread::yield_now();
                }
            }
            std::mem::forget(c);
            sent
        });
        let mut seen = Vec::new();
        let server = serve_until(
            &parts,
            0,
            |p, _, ok| {
                assert!(ok, "reply to a live client refused");
                seen.push(p);
            },
            |server| server.stats().received + server.stats().abandoned == 3,
        );
        std::mem::forget(server);
        let sent = client.join().unwrap();
        assert_eq!(
            seen, sent,
            "delivered exactly the calls that were not abandoned"
        );
    });
}
