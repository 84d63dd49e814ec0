//! A thread pinned with `affinity::pin_current_thread(cpu)` runs on `cpu`, as the kernel
//! reports it (`sched_getcpu`), for every core this process may use.

use copyrpc_host::affinity::{pin_current_thread, usable_cores};

fn current_cpu() -> usize {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    assert!(
        cpu >= 0,
        "sched_getcpu failed: {}",
        std::io::Error::last_os_error()
    );
    cpu as usize
}

#[test]
fn pinned_thread_runs_on_the_requested_core() {
    let cores = usable_cores().unwrap();
    assert!(!cores.is_empty());
    for &cpu in &cores {
        let seen = std::thread::spawn(move || {
            pin_current_thread(cpu).unwrap();
            // sched_setaffinity on the calling thread migrates it before returning, so
            // the very first reading must already be `cpu`; keep checking across
            // reschedules (yield) that it stays there.
            (0..1000)
                .map(|_| {
                    let c = current_cpu();
                    std::thread::yield_now();
                    c
                })
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        assert!(
            seen.iter().all(|&c| c == cpu),
            "pinned to cpu {cpu}, but ran on {:?}",
            seen.iter().filter(|&&c| c != cpu).collect::<Vec<_>>()
        );
    }
}

#[test]
fn pinning_is_per_thread() {
    // Pinning a spawned thread leaves the spawning thread's affinity alone.
    let before = usable_cores().unwrap();
    let last = *before.last().unwrap();
    std::thread::spawn(move || pin_current_thread(last).unwrap())
        .join()
        .unwrap();
    assert_eq!(usable_cores().unwrap(), before);
}
