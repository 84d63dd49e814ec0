//! ipc across processes: one server and three client processes over a `/dev/shm`
//! region; one client is SIGKILLed mid-run, the server evicts it (its pid is gone) and
//! keeps serving the other two, all of whose requests are answered.
//!
//! The processes, the stamped payloads, the client loop and the kill scenario are
//! `copyrpc_tests::shm_rig`'s (shared with `shm_deleg.rs`); here is the ipc server.

use std::time::{Duration, Instant};

use copyrpc_core::ipc::Config;
use copyrpc_core::shm::ClientState;
use copyrpc_host::shm::ipc::{IpcClient, IpcServer};

use copyrpc_tests::shm_rig::{check_word, response_for, run_client, Roles, Stamp, CHILD_DEADLINE};

type Req = Stamp;
type Resp = Stamp;

const ROLES: Roles = Roles {
    role: "COPYRPC_SHM_IPC_ROLE",
    name: "COPYRPC_SHM_IPC_NAME",
};

/// The child entry point; a no-op when run as an ordinary test.
#[test]
fn role_entry() {
    let Some((role, name)) = ROLES.current() else {
        return;
    };
    let client = || IpcClient::<Req, Resp, u64>::connect(&name).unwrap();
    match role.as_str() {
        "server" => run_server(&name),
        "client" => run_client(&mut client(), true),
        "victim" => run_client(&mut client(), false),
        r => panic!("unknown role {r}"),
    }
}

fn run_server(name: &str) {
    let cfg = Config {
        max_clients: 4,
        depth: 4,
    };
    let mut server = IpcServer::<Req, Resp>::create(name, cfg, false).unwrap();
    println!("READY");
    let deadline = Instant::now() + CHILD_DEADLINE;
    let mut next_seq = std::collections::HashMap::<(u32, u64), u64>::new();
    let mut last_reap = Instant::now();
    let mut held = Vec::new();
    let mut received = 0u64;
    loop {
        assert!(Instant::now() < deadline, "server deadline");
        if last_reap.elapsed() >= Duration::from_millis(5) {
            last_reap = Instant::now();
            server.reap_dead_clients();
        }
        if server.poll() == 0 {
            // Three spinning processes share two cores with whatever else runs: give
            // the clients the core rather than burn the time slice.
            std::thread::yield_now();
        }
        while let Some(h) = server.recv() {
            let [pid, seq, check, _] = h.payload;
            assert_eq!(check, check_word(pid, seq), "torn or foreign request");
            let want = next_seq.entry((h.client_id(), pid)).or_insert(0);
            assert_eq!(seq, *want, "request lost, duplicated or reordered");
            *want += 1;
            received += 1;
            held.push(h);
        }
        // Reply newest first: out of order on purpose.
        while let Some(h) = held.pop() {
            let resp = response_for(&h.payload);
            // A client that died or left meanwhile: its reply is refused, not misrouted.
            let _ = server.reply(h, &resp);
        }
        if next_seq.len() >= 3 && server.clients().all(|c| c.state == ClientState::Free) {
            break;
        }
    }
    println!("SERVER received={received}");
}

#[test]
fn killed_client_does_not_stop_the_others() {
    if ROLES.current().is_none() {
        copyrpc_tests::shm_rig::killed_client_does_not_stop_the_others(ROLES, "copyrpc-mp-ipc");
    }
}
