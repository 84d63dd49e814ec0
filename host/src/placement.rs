//! Where a rank's NIC-facing memory lands: on the NIC's NUMA node.
//!
//! Linux gives a page the node of the thread that first touches it (under that thread's
//! memory policy). A ring registered with `ibv_reg_mr`, or a queue rdma-core allocates
//! and zeroes, is touched first by the thread that creates it, and stays where it landed
//! (registration pins it). If that thread runs on the far socket, every WQE, CQE and
//! ring byte crosses the socket link for the rest of the run. So the threads that create
//! a rank's rings and queues run with [`bind_current_thread`] (or inside
//! [`run_on_node`]): on the node's CPUs, with the node as their preferred memory node
//! (`set_mempolicy(MPOL_PREFERRED)`: pages come from the node while it has free memory,
//! from the nearest other node after, never an allocation failure).

use std::io;
use std::mem;

use crate::error::{Error, Result};
use crate::topology;

/// Bits of the node masks passed to the kernel: 1 024 nodes, the kernel's largest
/// `MAX_NUMNODES` on x86-64 and arm64.
const MASK_BITS: usize = 1024;
type NodeMask = [libc::c_ulong; MASK_BITS / libc::c_ulong::BITS as usize];

/// What [`bind_current_thread`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The node.
    pub node: u32,
    /// The CPUs the thread may run on now: the node's that this process may use. Empty
    /// when it may use none of them (mpirun bound the rank elsewhere): the thread then
    /// stays where it was, and only its memory policy names the node.
    pub cpus: Vec<usize>,
}

/// A thread's memory policy as `get_mempolicy` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemPolicy {
    /// `MPOL_DEFAULT` (0), `MPOL_PREFERRED` (1), `MPOL_BIND` (2), ...
    pub mode: i32,
    /// The nodes of the policy's mask.
    pub nodes: Vec<u32>,
}

fn placement_err(node: u32, what: &'static str, source: io::Error) -> Error {
    Error::Placement { node, what, source }
}

/// Sets the calling thread's memory policy: `MPOL_PREFERRED` on `node`.
pub fn prefer_node(node: u32) -> Result<()> {
    if node as usize >= MASK_BITS {
        return Err(placement_err(
            node,
            "set_mempolicy",
            io::Error::from_raw_os_error(libc::EINVAL),
        ));
    }
    let mut mask: NodeMask = [0; MASK_BITS / libc::c_ulong::BITS as usize];
    let bits = libc::c_ulong::BITS as usize;
    mask[node as usize / bits] |= 1 << (node as usize % bits);
    // SAFETY: `mask` holds MASK_BITS bits; the kernel reads `maxnode - 1` of them
    // (mm/mempolicy.c `get_nodes` counts one less than it is given, as libnuma does).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            libc::MPOL_PREFERRED,
            mask.as_ptr(),
            (MASK_BITS + 1) as libc::c_ulong,
        )
    };
    if rc != 0 {
        return Err(placement_err(
            node,
            "set_mempolicy",
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The calling thread's memory policy.
pub fn memory_policy() -> Result<MemPolicy> {
    let mut mode: libc::c_int = 0;
    let mut mask: NodeMask = [0; MASK_BITS / libc::c_ulong::BITS as usize];
    // SAFETY: valid out-pointers of the sizes given; no address, no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            (MASK_BITS + 1) as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            0 as libc::c_ulong,
        )
    };
    if rc != 0 {
        return Err(placement_err(
            0,
            "get_mempolicy",
            io::Error::last_os_error(),
        ));
    }
    let bits = libc::c_ulong::BITS as usize;
    let nodes = (0..MASK_BITS)
        .filter(|&n| mask[n / bits] >> (n % bits) & 1 == 1)
        .map(|n| n as u32)
        .collect();
    Ok(MemPolicy { mode, nodes })
}

/// Binds the calling thread to NUMA node `node`: the pages it touches first come from
/// the node ([`prefer_node`]), and it runs on the node's CPUs that this process may use
/// (`sched_setaffinity`; none usable: it stays where it was, see [`Placement::cpus`]).
/// Fails naming the node when sysfs does not list the node or a call fails.
pub fn bind_current_thread(node: u32) -> Result<Placement> {
    let node_cpus = topology::node_cpus(node).ok_or_else(|| {
        placement_err(
            node,
            "reading its cpulist",
            io::Error::from_raw_os_error(libc::ENOENT),
        )
    })?;
    prefer_node(node)?;
    let usable = crate::affinity::usable_cores()?;
    let cpus: Vec<usize> = node_cpus
        .into_iter()
        .filter(|c| usable.contains(c) && *c < libc::CPU_SETSIZE as usize)
        .collect();
    if cpus.is_empty() {
        return Ok(Placement { node, cpus });
    }
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    for &c in &cpus {
        // SAFETY: `c` < CPU_SETSIZE, filtered above.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(placement_err(
            node,
            "sched_setaffinity",
            io::Error::last_os_error(),
        ));
    }
    Ok(Placement { node, cpus })
}

/// Runs `f` on a new thread of `stack` bytes named `name`, bound to `node` with
/// [`bind_current_thread`] first (`None`: unbound, as any thread), and returns what `f`
/// returned. For the set-up that creates a rank's rings and queues: they land on the
/// NIC's node whatever thread asked for them. A panic in `f` is an error naming `name`.
pub fn run_on_node<T: Send>(
    node: Option<u32>,
    name: &str,
    stack: usize,
    f: impl FnOnce() -> T + Send,
) -> Result<T> {
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name(name.to_owned())
            .stack_size(stack)
            .spawn_scoped(s, move || -> Result<T> {
                if let Some(n) = node {
                    bind_current_thread(n)?;
                }
                Ok(f())
            })
            .map_err(|source| Error::SpawnThread {
                what: "a set-up thread bound to a NUMA node",
                source,
            })?;
        h.join().map_err(|_| Error::ThreadPanicked {
            name: name.to_owned(),
        })?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node 0 exists on every Linux machine with sysfs NUMA information; without it
    /// there is nothing to bind to and the test says so.
    fn node0() -> Option<Vec<usize>> {
        topology::node_cpus(0)
    }

    #[test]
    fn a_thread_run_on_a_node_prefers_its_memory_and_runs_on_its_cpus() {
        let Some(cpus0) = node0() else {
            panic!("no /sys/devices/system/node/node0/cpulist: this test needs Linux NUMA sysfs")
        };
        let (policy, cores) = run_on_node(Some(0), "placement-test", 1 << 20, || {
            // The first touch of a fresh mapping happens under the policy.
            let v = vec![1u8; 1 << 20];
            std::hint::black_box(&v);
            (
                memory_policy().unwrap(),
                crate::affinity::usable_cores().unwrap(),
            )
        })
        .unwrap();
        assert_eq!(policy.mode, libc::MPOL_PREFERRED);
        assert_eq!(policy.nodes, vec![0]);
        assert!(
            cores.iter().all(|c| cpus0.contains(c)),
            "{cores:?} ⊄ {cpus0:?}"
        );
        // An unbound thread keeps the default policy.
        let p = run_on_node(None, "placement-none", 1 << 20, || memory_policy().unwrap()).unwrap();
        assert_eq!(p.mode, 0, "MPOL_DEFAULT");
    }

    #[test]
    fn a_node_that_is_not_there_is_an_error_naming_it() {
        let e = run_on_node(Some(4000), "placement-absent", 1 << 20, || ()).unwrap_err();
        assert!(matches!(&e, Error::Placement { node: 4000, .. }), "{e:?}");
        assert!(e.to_string().contains("NUMA node 4000"), "{e}");
        let e =
            run_on_node(None, "placement-panics", 1 << 20, || panic!("on purpose")).unwrap_err();
        assert!(e.to_string().contains("placement-panics"), "{e}");
    }
}
