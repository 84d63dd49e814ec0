//! Rings and queues on huge pages (`--hugepages`).
//!
//! A rank's rings are many small regions (two rings and a control line per peer), each
//! registered on its own. On 4 KiB pages each page is an entry of the NIC's translation
//! table, and a ring walk misses the IOTLB every 4 KiB. With huge pages the regions are
//! carved from 2 MiB `MAP_HUGETLB` chunks ([`HugeArena`]), page-aligned inside them, so
//! one translation covers many regions; a chunk lives as long as the last region carved
//! from it.
//!
//! The queues (QP, CQ and SRQ buffers) are rdma-core's: its mlx5 provider puts them on
//! huge pages when `MLX_QP_ALLOC_TYPE`, `MLX_CQ_ALLOC_TYPE` and `MLX_SRQ_ALLOC_TYPE` say
//! `PREFER_HUGE` (`mlx5_get_alloc_type` in providers/mlx5/buf.c reads
//! `<component>_ALLOC_TYPE`, the components being `MLX_QP`, `MLX_CQ`, `MLX_SRQ` in
//! mlx5.h), falling back to ordinary pages without a word when none are free
//! (`mlx5_alloc_prefered_buf`). [`prefer_huge_queue_buffers`] sets them; it must run
//! before the process has other threads.
//!
//! Huge pages come from the pool the administrator reserves (`vm.nr_hugepages`); with
//! none free, `--hugepages` falls back to 4 KiB pages and [`unavailable`] says why.

use std::io;
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex};

/// The huge page size used: 2 MiB (x86-64's and arm64's with 4 KiB base pages).
pub const HUGE_PAGE: usize = 2 << 20;
/// Regions inside a chunk start on a base page: `ibv_reg_mr` pins whole pages, and two
/// regions never share one.
const BASE_PAGE: usize = 4096;

/// The environment variables that make rdma-core's mlx5 provider allocate queue buffers
/// on huge pages, with fallback (see the module docs).
pub const QUEUE_ALLOC_ENV: [&str; 3] = [
    "MLX_QP_ALLOC_TYPE",
    "MLX_CQ_ALLOC_TYPE",
    "MLX_SRQ_ALLOC_TYPE",
];

/// Sets each of [`QUEUE_ALLOC_ENV`] to `PREFER_HUGE` unless the user set it already;
/// returns those it set.
///
/// # Safety
///
/// No other thread of the process may run yet (before MPI starts and before any thread
/// is spawned): `setenv` is not safe against a concurrent `getenv`, which rdma-core calls
/// while it creates queues.
pub unsafe fn prefer_huge_queue_buffers() -> Vec<&'static str> {
    QUEUE_ALLOC_ENV
        .into_iter()
        .filter(|k| std::env::var_os(k).is_none())
        .inspect(|k| std::env::set_var(k, "PREFER_HUGE"))
        .collect()
}

/// `HugePages_Total`, `HugePages_Free` and `Hugepagesize` (KiB) from `meminfo` text.
fn meminfo_huge(text: &str) -> Option<(u64, u64, u64)> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(name)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
    };
    Some((
        field("HugePages_Total:")?,
        field("HugePages_Free:")?,
        field("Hugepagesize:")?,
    ))
}

/// Why a `MAP_HUGETLB` mapping failed with `err`, with what `/proc/meminfo` says about
/// the pool and the fix.
pub fn unavailable(err: &io::Error) -> String {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    unavailable_from(err, &meminfo)
}

fn unavailable_from(err: &io::Error, meminfo: &str) -> String {
    match meminfo_huge(meminfo) {
        Some((0, _, size)) => format!(
            "MAP_HUGETLB failed ({err}): no huge pages are reserved (HugePages_Total 0, \
             {size} KiB each); reserve some, e.g. `sysctl vm.nr_hugepages=1024`"
        ),
        Some((total, free, size)) => format!(
            "MAP_HUGETLB failed ({err}): {free} of {total} huge pages of {size} KiB are \
             free; reserve more (`sysctl vm.nr_hugepages`)"
        ),
        None => format!("MAP_HUGETLB failed ({err}); /proc/meminfo lists no huge page pool"),
    }
}

/// One mapping regions are carved from; unmapped when the last region and the arena let
/// go of it.
#[derive(Debug)]
pub(crate) struct Chunk {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; nothing here is tied to a
// thread, and the pointer is only handed out raw.
unsafe impl Send for Chunk {}
// SAFETY: as above; `Chunk` has no interior mutability.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// A fresh zeroed mapping of `len` bytes (a multiple of [`HUGE_PAGE`] when `huge`).
    fn map(len: usize, huge: bool) -> io::Result<Self> {
        let flags = libc::MAP_PRIVATE
            | libc::MAP_ANONYMOUS
            | if huge {
                libc::MAP_HUGETLB | libc::MAP_HUGE_2MB
            } else {
                0
            };
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(Self { ptr, len })
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once, after every region in it was
        // deregistered (each holds an Arc of the chunk).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[derive(Debug, Default)]
struct ArenaState {
    /// The chunk regions are carved from now, and the bytes of it used.
    current: Option<(Arc<Chunk>, usize)>,
    /// Bytes mapped in chunks so far.
    mapped: u64,
    /// Regions carved.
    regions: u64,
    /// Why the last chunk could not be mapped.
    failed: Option<String>,
}

/// Page-aligned regions carved from huge-page chunks (see the module docs). Regions are
/// never reused: a rank makes its rings once.
#[derive(Debug)]
pub(crate) struct HugeArena {
    huge: bool,
    state: Mutex<ArenaState>,
}

/// What [`HugeArena::report`] says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugeReport {
    /// Regions on huge pages.
    pub regions: u64,
    /// Bytes of huge pages mapped for them.
    pub mapped: u64,
    /// Why some region is on 4 KiB pages, if one is.
    pub fallback: Option<String>,
}

impl std::fmt::Display for HugeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ring region(s) on 2 MiB huge pages ({} MiB)",
            self.regions,
            self.mapped >> 20
        )?;
        match &self.fallback {
            Some(why) => write!(f, "; the others on 4 KiB pages: {why}"),
            None => Ok(()),
        }
    }
}

impl HugeArena {
    /// An arena of `MAP_HUGETLB` chunks (`huge`), or of ordinary ones (tests).
    pub(crate) fn new(huge: bool) -> Self {
        Self {
            huge,
            state: Mutex::default(),
        }
    }

    /// `len` zeroed bytes at a base-page boundary, and the chunk that must outlive them;
    /// `Err(why)` when no chunk could be mapped (the caller falls back to 4 KiB pages).
    pub(crate) fn carve(&self, len: usize) -> Result<(Arc<Chunk>, *mut u8), String> {
        let len = len.max(1).next_multiple_of(BASE_PAGE);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let fits = st
            .current
            .as_ref()
            .is_some_and(|(c, used)| c.len - used >= len);
        if !fits {
            let size = len.next_multiple_of(HUGE_PAGE);
            match Chunk::map(size, self.huge) {
                Ok(c) => {
                    st.mapped += size as u64;
                    st.current = Some((Arc::new(c), 0));
                }
                Err(e) => {
                    let why = unavailable(&e);
                    st.failed = Some(why.clone());
                    return Err(why);
                }
            }
        }
        st.regions += 1;
        let (chunk, used) = st.current.as_mut().expect("a chunk with room");
        // Inside the chunk: `used + len <= chunk.len`, checked or mapped for above.
        let p = chunk.ptr.as_ptr().wrapping_add(*used);
        *used += len;
        Ok((Arc::clone(chunk), p))
    }

    /// Regions carved, bytes mapped, and why the last failure fell back.
    pub(crate) fn report(&self) -> HugeReport {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        HugeReport {
            regions: st.regions,
            mapped: st.mapped,
            fallback: st.failed.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_page_aligned_disjoint_and_share_chunks() {
        let a = HugeArena::new(false);
        let mut got = Vec::new();
        for len in [36 << 10, 100, 36 << 10, (2 << 20) + 1, 4096] {
            let (c, p) = a.carve(len).unwrap();
            assert_eq!(p as usize % BASE_PAGE, 0, "{len}");
            // Zeroed and writable to its end.
            // SAFETY: `p .. p + len` lies in the chunk `c`, which is alive.
            let s = unsafe { std::slice::from_raw_parts_mut(p, len) };
            assert!(s.iter().all(|&b| b == 0));
            s.fill(0xa5);
            got.push((p as usize, len, c));
        }
        got.sort_by_key(|g| g.0);
        for w in got.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "regions overlap");
        }
        let r = a.report();
        // 36K + 4K + 36K + 4K fill the first chunk's start; the 2 MiB + 1 region needs a
        // chunk of its own (4 MiB), and the last 4 KiB fits after it.
        assert_eq!((r.regions, r.mapped, r.fallback), (5, 6 << 20, None));
        assert!(Arc::ptr_eq(&got[0].2, &got[1].2));
    }

    #[test]
    fn without_reserved_huge_pages_the_fallback_says_why() {
        let free = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| meminfo_huge(&m))
            .map_or(0, |(_, free, _)| free);
        let a = HugeArena::new(true);
        match a.carve(64 << 10) {
            Ok(_) => assert!(free > 0, "a huge page with none free"),
            Err(why) => {
                assert!(why.contains("MAP_HUGETLB failed"), "{why}");
                assert!(why.contains("nr_hugepages"), "{why}");
                assert_eq!(a.report().fallback, Some(why.clone()));
                assert!(a.report().to_string().contains("4 KiB pages"));
            }
        }
        let e = io::Error::from_raw_os_error(libc::ENOMEM);
        let none = unavailable_from(
            &e,
            "HugePages_Total:       0\nHugePages_Free:        0\nHugepagesize:       2048 kB\n",
        );
        assert!(
            none.contains("no huge pages are reserved") && none.contains("2048 KiB"),
            "{none}"
        );
        let few = unavailable_from(
            &e,
            "HugePages_Total:      16\nHugePages_Free:        1\nHugepagesize:       2048 kB\n",
        );
        assert!(few.contains("1 of 16"), "{few}");
    }
}
