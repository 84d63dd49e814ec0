//! Loom models of the delegationrpc protocol: processes as threads, tiny capacities.
//!
//! `LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" cargo test -p copyrpc-core --release --test loom_deleg`
#![cfg(loom)]

#[path = "loom_common/deleg.rs"]
mod deleg_parts;
mod loom_common;

use copyrpc_core::deleg::{CallError, Client, Config, ConnectError, Server, ServerConfig};
use copyrpc_core::shm::{ClientState, Owner};
use deleg_parts::{wait_response, Parts};
use loom::thread;
use loom_common::model;

/// Serves until `total` requests were answered or abandoned; returns (answered, abandoned).
fn serve(parts: &Parts, total: u64, hole_timeout: u64) -> (u64, u64) {
    let mut server = Server::new(parts.region(), ServerConfig { hole_timeout });
    let mut now = 0;
    let mut answered = 0;
    loop {
        now += 1;
        server.poll(now);
        while let Some(e) = server.recv() {
            let p = e.payload;
            server.reply(e.token, &(p * 10)).unwrap();
            answered += 1;
        }
        server.advance_tail();
        let abandoned = server.stats().abandoned;
        if answered + abandoned >= total {
            // Keep the server alive (Drop clears server_alive) until clients are done.
            std::mem::forget(server);
            return (answered, abandoned);
        }
        thread::yield_now();
    }
}

/// Two clients race fetch_add and commit; every request is delivered exactly once, with
/// its sender's id (the response routing is checked by the two-thread models below).
#[test]
fn two_clients_each_delivered_once() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 2,
            ring_depth: 2,
            resp_depth: 1,
        });
        let clients: Vec<_> = (0..2u64)
            .map(|i| {
                let parts = parts.clone();
                thread::spawn(move || {
                    let mut c = Client::connect(parts.region(), i as u32).unwrap();
                    c.call(&(100 + c.id() as u64)).unwrap();
                    std::mem::forget(c);
                })
            })
            .collect();
        let mut server = Server::new(
            parts.region(),
            ServerConfig {
                hole_timeout: u64::MAX,
            },
        );
        let mut seen = [0u32; 2];
        let mut got = 0;
        while got < 2 {
            server.poll(0);
            while let Some(e) = server.recv() {
                let id = e.token.client_id();
                assert_eq!(e.payload, 100 + id as u64, "payload of another client");
                seen[id as usize] += 1;
                server.reply(e.token, &0).unwrap();
                got += 1;
            }
            server.advance_tail();
            thread::yield_now();
        }
        assert_eq!(seen, [1, 1]);
        std::mem::forget(server);
        for h in clients {
            h.join().unwrap();
        }
    });
}

/// One client laps a 2-slot ring three times against the server: flow control on tail
/// and the claim word's lap keep every slot single-owner.
#[test]
fn ring_wraps_under_flow_control() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 1,
            ring_depth: 2,
            resp_depth: 2,
        });
        let p2 = parts.clone();
        let client = thread::spawn(move || {
            let mut c = Client::connect(p2.region(), 0).unwrap();
            c.call(&1).unwrap();
            c.call(&2).unwrap();
            let mut seen = 0u64;
            while seen < 2 {
                seen += c.poll(|_, r| assert!(*r == 10 || *r == 20)) as u64;
                thread::yield_now();
            }
            c.call(&3).unwrap();
            wait_response(&mut c, 30);
            std::mem::forget(c);
        });
        let (answered, _) = serve(&parts, 3, u64::MAX);
        assert_eq!(answered, 3);
        client.join().unwrap();
    });
}

/// A claimer races the server's hole timeout (0 ticks): either its commit wins and the
/// request is delivered exactly once, or the abandon wins and the commit is refused.
/// Never both, never neither.
#[test]
fn late_commit_races_abandon() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 1,
            ring_depth: 2,
            resp_depth: 1,
        });
        let p2 = parts.clone();
        let client = thread::spawn(move || {
            let mut c = Client::connect(p2.region(), 0).unwrap();
            let res = c.reserve().unwrap();
            let out = res.commit(&7);
            if out.is_ok() {
                wait_response(&mut c, 70);
            }
            std::mem::forget(c);
            out
        });
        let (answered, abandoned) = serve(&parts, 1, 0);
        let out = client.join().unwrap();
        match out {
            Ok(_) => assert_eq!((answered, abandoned), (1, 0)),
            Err(CallError::Abandoned) => assert_eq!((answered, abandoned), (0, 1)),
            Err(e) => panic!("unexpected {e:?}"),
        }
    });
}

/// A client closes and a second one takes its id (max_clients = 1) while the server runs;
/// the newcomer's request is answered, and nothing of the first client's reaches it.
#[test]
fn closed_id_is_reused() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 1,
            ring_depth: 2,
            resp_depth: 1,
        });
        let p2 = parts.clone();
        let clients = thread::spawn(move || {
            let region = p2.region();
            let mut a = Client::connect(region, 1).unwrap();
            a.call(&1).unwrap();
            wait_response(&mut a, 10);
            a.close();
            let mut b = loop {
                match Client::connect(region, 2) {
                    Ok(b) => break b,
                    Err(_) => thread::yield_now(),
                }
            };
            assert_eq!(b.epoch(), 2);
            b.call(&2).unwrap();
            wait_response(&mut b, 20);
            std::mem::forget(b);
        });
        let (answered, _) = serve(&parts, 2, u64::MAX);
        assert_eq!(answered, 2);
        clients.join().unwrap();
    });
}

/// Two clients connect at once to a region with room for exactly two: both get an id,
/// and not the same one (the same guarantee as ipc's model of it).
#[test]
fn concurrent_connects_both_get_an_id() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 2,
            ring_depth: 2,
            resp_depth: 1,
        });
        let p2 = parts.clone();
        let other = thread::spawn(move || {
            let c = Client::connect(p2.region(), 2).expect("second client");
            let id = c.id();
            std::mem::forget(c);
            id
        });
        let c = Client::connect(parts.region(), 1).expect("first client");
        let id = c.id();
        std::mem::forget(c);
        assert_ne!(id, other.join().unwrap(), "two clients on one id");
    });
}

/// A client dies with a committed request (max_clients = 1); a new client's host finds no
/// free id, sees the owner gone and declares the id dead itself (`DelegRegion::declare_dead`)
/// while the server runs. The server frees the id; the newcomer takes it with a new
/// epoch, reads its own owner in the table from then on (R7/A7, and the server's clearing
/// of the old owner before R4), and gets only its own answer, never the dead one's.
#[test]
fn dead_id_declared_by_connecting_host_is_reused() {
    model(|| {
        let parts = Parts::new(Config {
            max_clients: 1,
            ring_depth: 2,
            resp_depth: 1,
        });
        let p2 = parts.clone();
        let clients = thread::spawn(move || {
            let region = p2.region();
            let mut dead = Client::connect(region, 1).unwrap();
            dead.call(&1).unwrap();
            std::mem::forget(dead);
            let me = Owner { id: 2, token: 7 };
            let mut b = loop {
                match Client::connect(region, me) {
                    Ok(b) => break b,
                    Err(ConnectError::NoFreeClientId) => {
                        let c = region.client_info(0);
                        if c.state == ClientState::Active && c.owner == 1 {
                            assert!(region.declare_dead(0, c.epoch));
                        }
                        thread::yield_now();
                    }
                    Err(e) => panic!("{e:?}"),
                }
            };
            assert_eq!(b.epoch(), 2);
            let c = region.client_info(0);
            assert_eq!((c.epoch, c.owner, c.owner_token), (2, 2, 7));
            b.call(&2).unwrap();
            wait_response(&mut b, 20);
            std::mem::forget(b);
        });
        let mut server = Server::new(
            parts.region(),
            ServerConfig {
                hole_timeout: u64::MAX,
            },
        );
        let mut now = 0;
        let mut second_answered = false;
        while !second_answered {
            now += 1;
            server.poll(now);
            while let Some(e) = server.recv() {
                let p = e.payload;
                // The dead client's request may be taken before it is declared dead; its
                // reply is then refused or lands in the dead client's slot, which the
                // newcomer clears when it takes the id.
                if server.reply(e.token, &(p * 10)).is_ok() && p == 2 {
                    second_answered = true;
                }
            }
            server.advance_tail();
            thread::yield_now();
        }
        std::mem::forget(server);
        clients.join().unwrap();
    });
}
