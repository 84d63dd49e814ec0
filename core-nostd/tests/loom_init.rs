//! Loom model of attaching to a region while its creator initialises it: the header's
//! fields are stored `Relaxed` and published by the magic, stored last with Release (R0)
//! and loaded with Acquire (A0). A reader that sees the magic must see every field.
//!
//! `LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" cargo test -p copyrpc-core --release --test loom_init`
#![cfg(loom)]

mod loom_common;

use copyrpc_core::shm::LayoutError;
use copyrpc_core::{deleg, ipc};
use loom::sync::Arc;
use loom::thread;
use loom_common::model;

/// Reads `read` until the magic shows; from then on it must succeed with `want`. The
/// yield lets loom run the creator while this thread waits for it.
fn attach<C: PartialEq + core::fmt::Debug>(
    want: C,
    mut read: impl FnMut() -> Result<C, LayoutError>,
) {
    loop {
        match read() {
            Ok(c) => {
                assert_eq!(c, want, "a field read before its value was published");
                return;
            }
            Err(LayoutError::BadMagic { .. }) => thread::yield_now(),
            Err(e) => panic!("{e:?}: the magic was seen before the fields it publishes"),
        }
    }
}

#[test]
fn deleg_attach_while_the_creator_initialises() {
    model(|| {
        let cfg = deleg::Config {
            max_clients: 2,
            ring_depth: 4,
            resp_depth: 2,
        };
        let h = Arc::new(deleg::Header::unpublished());
        let h2 = h.clone();
        let creator = thread::spawn(move || h2.publish_as_init::<u64, u64>(&cfg));
        attach(cfg, || h.read_config::<u64, u64>());
        creator.join().unwrap();
    });
}

#[test]
fn ipc_attach_while_the_creator_initialises() {
    model(|| {
        let cfg = ipc::Config {
            max_clients: 2,
            depth: 4,
        };
        let h = Arc::new(ipc::Header::unpublished());
        let h2 = h.clone();
        let creator = thread::spawn(move || h2.publish_as_init::<u64, u64>(&cfg));
        attach(cfg, || h.read_config::<u64, u64>());
        creator.join().unwrap();
    });
}
