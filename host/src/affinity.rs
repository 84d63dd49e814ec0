//! Usable cores and thread pinning (Linux `sched_getaffinity` / `sched_setaffinity`).

use std::io;
use std::mem;

use crate::error::{Error, Result};

/// The cpus this process may run on, ascending.
pub fn usable_cores() -> Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_getaffinity(0, mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(Error::Affinity {
            source: io::Error::last_os_error(),
        });
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` < CPU_SETSIZE, within the set.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// The cpus online on this host, whatever this process may run on (at least 1).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf reads a system value and touches no memory of ours.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(Error::PinThread {
            cpu,
            source: io::Error::from_raw_os_error(libc::EINVAL),
        });
    }
    // SAFETY: as in usable_cores.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE, checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(Error::PinThread {
            cpu,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_cores_nonempty_and_pinning_sticks() {
        let cores = usable_cores().unwrap();
        assert!(!cores.is_empty());
        let last = *cores.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(last).unwrap();
            assert_eq!(usable_cores().unwrap(), vec![last]);
        })
        .join()
        .unwrap();
        assert!(matches!(
            pin_current_thread(1 << 20),
            Err(Error::PinThread { cpu, .. }) if cpu == 1 << 20
        ));
    }
}
