//! Named `/dev/shm` regions, and the shared-memory protocols of the core over them.
//!
//! [`ShmRegion`] is one POSIX shared-memory object mapped read/write: created exclusively
//! (`O_CREAT | O_EXCL`, mode 0600) and unlinked when its creator drops it, or opened by
//! name. Each failing call is its own [`Error`] variant naming the region.
//!
//! The protocol wrappers ([`deleg`], [`ipc`]) put a core layout in a region: the creator
//! initialises it (the core stores the magic last) and records its pid in the header; an
//! opener validates magic, version, payload sizes and length through the core, and checks
//! that the creator is alive. A region whose creator is gone is *stale*
//! ([`Error::ShmStale`]): `create` refuses it unless asked to replace it, `open` refuses it.
//!
//! "Alive" means the same process, not the same pid: pids wrap (at 32768 by default), so
//! a region left by a dead process may carry the pid of a live one, even ours. Every
//! owner is recorded as a [`ProcessId`] — pid and process start time — and is alive only
//! while a process with that pid *and* that start time exists.
//!
//! What the core does and what the host does: the core never sees a pid. The host records
//! pids and start times in the opaque owner words of the layouts and turns "that process
//! is gone" into `evict` calls (delegation clients) or stale-region errors (servers).

pub mod deleg;
pub mod ipc;
pub mod layout;
pub mod world;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use copyrpc_core::shm::Owner;

use crate::error::{Error, Result};

/// One mapped POSIX shared-memory object.
#[derive(Debug)]
pub struct ShmRegion {
    name: String,
    ptr: NonNull<u8>,
    len: usize,
    creator: bool,
    /// The object's inode, to tell whether its name still refers to it. No descriptor
    /// is kept: a process maps many regions (a virtual world, every peer's), and the
    /// mappings, unlike descriptors, do not count against `RLIMIT_NOFILE`.
    ino: u64,
}

// SAFETY: the mapping is process-wide memory; the handle only owns the mapping (munmap
// and unlink on drop), and every access to the bytes goes through the core's atomics
// and protocol-guarded cells.
unsafe impl Send for ShmRegion {}
// SAFETY: as above; `&ShmRegion` exposes only the pointer, length and name.
unsafe impl Sync for ShmRegion {}

fn c_name(name: &str) -> Result<CString> {
    let bad = |reason| Error::ShmName {
        name: name.to_owned(),
        reason,
    };
    let rest = name
        .strip_prefix('/')
        .ok_or_else(|| bad("must start with '/'"))?;
    if rest.is_empty() || rest.len() > 254 {
        return Err(bad("must have 1..=254 bytes after '/'"));
    }
    if rest.contains('/') {
        return Err(bad("must not contain '/' after the first"));
    }
    CString::new(name).map_err(|_| bad("must not contain NUL"))
}

impl ShmRegion {
    /// Creates `name` exclusively with mode 0600, sizes it to `len` zero bytes, claims
    /// all of them from `/dev/shm` and maps it. Fails with [`Error::ShmOpen`] (kind
    /// `AlreadyExists`) if the name exists, and with [`Error::ShmNoRoom`] (leaving no
    /// name behind) if `/dev/shm` cannot hold `len` bytes.
    pub fn create(name: &str, len: usize) -> Result<Self> {
        Self::create_with(name, len, true)
    }

    /// [`create`](Self::create) without claiming the bytes: pages are taken from
    /// `/dev/shm` as they are touched. For a region handed out piece by piece, each
    /// piece [`commit`](Self::commit)ted before use, so that a large default size costs
    /// only what is used. Touching an uncommitted page of a full `/dev/shm` raises SIGBUS.
    pub fn create_sparse(name: &str, len: usize) -> Result<Self> {
        Self::create_with(name, len, false)
    }

    fn create_with(name: &str, len: usize, commit_all: bool) -> Result<Self> {
        let c = c_name(name)?;
        // Registered before the name exists: a sweep in another thread that lists the
        // new file then finds it ours, instead of taking it for a predecessor's.
        created_here().push(name.to_owned());
        Self::create_named(name, &c, len, commit_all).inspect_err(|_| forget_created(name))
    }

    fn create_named(name: &str, c: &CString, len: usize, commit_all: bool) -> Result<Self> {
        // SAFETY: `c` is a valid C string.
        let raw = unsafe {
            libc::shm_open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                0o600 as libc::mode_t,
            )
        };
        if raw < 0 {
            return Err(Error::ShmOpen {
                name: name.to_owned(),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: `raw` is a descriptor we just opened and own alone.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let unlink = || {
            // SAFETY: `c` is a valid C string; we created this name.
            unsafe { libc::shm_unlink(c.as_ptr()) };
        };
        // SAFETY: `fd` is our open descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            let source = io::Error::last_os_error();
            unlink();
            return Err(Error::ShmTruncate {
                name: name.to_owned(),
                len,
                source,
            });
        }
        if commit_all {
            if let Err(e) = claim(&fd, name, 0, len) {
                unlink();
                return Err(e);
            }
        }
        match inode(&fd, name).and_then(|ino| Ok((Self::map(name, &fd, len)?, ino))) {
            Ok((ptr, ino)) => Ok(Self {
                name: name.to_owned(),
                ptr,
                len,
                creator: true,
                ino,
            }),
            Err(e) => {
                unlink();
                Err(e)
            }
        }
    }

    /// Claims bytes `offset..offset + len` of the region from `/dev/shm` (zero bytes
    /// stay zero), so that touching them cannot raise SIGBUS. [`Error::ShmNoRoom`] if
    /// the file system cannot hold them; nothing is claimed then. Opens the region's
    /// name for it, so only while the name exists (its creator has not dropped it).
    pub fn commit(&self, offset: usize, len: usize) -> Result<()> {
        let end = offset.checked_add(len).filter(|&e| e <= self.len);
        assert!(
            end.is_some(),
            "commit of {len} bytes at {offset} is outside {} ({} bytes)",
            self.name,
            self.len
        );
        if len == 0 {
            return Ok(());
        }
        let c = c_name(&self.name)?;
        // SAFETY: `c` is a valid C string.
        let raw = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if raw < 0 {
            return Err(Error::ShmOpen {
                name: self.name.clone(),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: `raw` is a descriptor we just opened and own alone.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        claim(&fd, &self.name, offset, len)
    }

    /// Opens an existing region and maps all of it.
    pub fn open(name: &str) -> Result<Self> {
        let c = c_name(name)?;
        // SAFETY: `c` is a valid C string.
        let raw = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if raw < 0 {
            return Err(Error::ShmOpen {
                name: name.to_owned(),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: `raw` is a descriptor we just opened and own alone.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: `stat` is plain data; zeroed is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open, `st` is a valid out pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(Error::ShmStat {
                name: name.to_owned(),
                source: io::Error::last_os_error(),
            });
        }
        let len = st.st_size as usize;
        let ptr = Self::map(name, &fd, len)?;
        Ok(Self {
            name: name.to_owned(),
            ptr,
            len,
            creator: false,
            ino: st.st_ino,
        })
    }

    /// Maps `len` bytes of `fd` shared read/write.
    fn map(name: &str, fd: &OwnedFd, len: usize) -> Result<NonNull<u8>> {
        if len == 0 {
            // An empty region has nothing to map; a dangling aligned pointer stands in and
            // the layout checks refuse it as truncated.
            Ok(NonNull::<u64>::dangling().cast())
        } else {
            // SAFETY: a fresh shared mapping of an open descriptor; the kernel picks the
            // address.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                Err(Error::ShmMap {
                    name: name.to_owned(),
                    len,
                    source: io::Error::last_os_error(),
                })
            } else {
                Ok(NonNull::new(p.cast()).expect("mmap returned null"))
            }
        }
    }

    /// Removes a name from `/dev/shm` (mappings stay valid until unmapped).
    pub fn unlink(name: &str) -> Result<()> {
        let c = c_name(name)?;
        // SAFETY: `c` is a valid C string.
        if unsafe { libc::shm_unlink(c.as_ptr()) } != 0 {
            return Err(Error::ShmUnlink {
                name: name.to_owned(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Base of the mapping (page aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Mapped bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The inode of the object mapped: tells whether a name still refers to it.
    pub fn inode(&self) -> u64 {
        self.ino
    }

    /// True if this handle created the region (and unlinks it on drop).
    pub fn is_creator(&self) -> bool {
        self.creator
    }
}

impl Drop for ShmRegion {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: our mapping of exactly `len` bytes; nothing borrows it past the
            // owner (the protocol wrappers drop their views first).
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        }
        if self.creator {
            let _ = Self::unlink(&self.name);
            forget_created(&self.name);
        }
    }
}

/// Unlinks every region this process created and has not dropped, and returns how many.
/// For a process about to end without running destructors (a signal, `_exit`): mappings
/// stay valid until the process is gone, but no later process finds the names.
pub fn unlink_created() -> usize {
    let names = created_here().clone();
    names
        .iter()
        .filter(|n| ShmRegion::unlink(n).is_ok())
        .count()
}

/// `posix_fallocate` of `offset..offset + len` of region `name` through `fd`, as
/// [`ShmRegion::commit`] describes.
fn claim(fd: &OwnedFd, name: &str, offset: usize, len: usize) -> Result<()> {
    // A signal may interrupt the allocation; a bounded number of retries, then the
    // EINTR is the error.
    let mut rc = libc::EINTR;
    for _ in 0..64 {
        // SAFETY: `fd` is an open descriptor of the region; the caller keeps the range
        // inside its size, so the file does not grow.
        rc = unsafe {
            libc::posix_fallocate(fd.as_raw_fd(), offset as libc::off_t, len as libc::off_t)
        };
        if rc != libc::EINTR {
            break;
        }
    }
    if rc == 0 {
        return Ok(());
    }
    let (free, size) = shm_room().unwrap_or((0, 0));
    Err(Error::ShmNoRoom {
        name: name.to_owned(),
        offset,
        len,
        free,
        size,
        source: io::Error::from_raw_os_error(rc),
    })
}

/// The inode behind `fd`.
fn inode(fd: &OwnedFd, name: &str) -> Result<u64> {
    // SAFETY: `stat` is plain data; zeroed is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor and a valid out pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Error::ShmStat {
            name: name.to_owned(),
            source: io::Error::last_os_error(),
        });
    }
    Ok(st.st_ino)
}

/// Free and total bytes of the file system behind `/dev/shm`, for error messages.
fn shm_room() -> Option<(u64, u64)> {
    // SAFETY: `statvfs` is plain data; zeroed is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out pointer.
    let rc = unsafe { libc::statvfs(c"/dev/shm".as_ptr(), &mut st) };
    (rc == 0).then(|| {
        let unit = st.f_frsize as u64;
        (st.f_bavail as u64 * unit, st.f_blocks as u64 * unit)
    })
}

/// Names (with their leading `/`) of the regions this process created and has not
/// dropped: a region named with our pid that is not here was left by an earlier process
/// that had our pid.
fn created_here() -> std::sync::MutexGuard<'static, Vec<String>> {
    static CREATED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    // A panic while holding the lock leaves the list intact (push / retain only).
    CREATED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Drops one registration of `name` (the same name may be created, dropped and created
/// again, or be tried by two threads at once).
fn forget_created(name: &str) {
    let mut list = created_here();
    if let Some(i) = list.iter().position(|n| n == name) {
        list.swap_remove(i);
    }
}

/// Unlinks the regions in `dir` (normally `/dev/shm`) named `<prefix><pid><sep>...`
/// whose creator is gone: a process killed by a signal (or by `mpirun` tearing a failed
/// job down) cannot unlink its regions, and nothing else would until reboot.
///
/// The name holds only a pid, and pids are reused, so a region also counts as left
/// behind when its pid is ours but this process did not create it, or when its pid is
/// alive but the file is older than that process (see [`region_predates`]). Regions of
/// live creators and other names are left alone; one that cannot be removed is skipped.
/// Returns how many were removed.
pub fn reap_dead_regions(dir: &std::path::Path, prefix: &str, sep: char) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            region_creator(n, prefix, sep).is_some_and(|pid| {
                if pid == my_pid() {
                    let ours = format!("/{n}");
                    !created_here().contains(&ours)
                } else {
                    !pid_alive(pid) || region_predates(&dir.join(n), pid)
                }
            })
        })
        .filter(|n| std::fs::remove_file(dir.join(n)).is_ok())
        .count()
}

/// Unlinks every region copyrpc's host makes on its own (not a tool's: the sim fabric's
/// `copyrpc-sim-<pid>-<n>`) left in `/dev/shm` by a process that is gone, as
/// [`reap_dead_regions`] decides. Opening a sim fabric runs it; a tool that may not open
/// one (benchkv on one rank, or with `--loopback-ranks`) runs it at start, so that the
/// next run of any copyrpc tool sweeps what a killed one left. Returns how many were
/// removed.
pub fn sweep_left_behind() -> usize {
    sweep_left_behind_in(std::path::Path::new("/dev/shm"))
}

/// [`sweep_left_behind`] in `dir`.
pub fn sweep_left_behind_in(dir: &std::path::Path) -> usize {
    reap_dead_regions(dir, crate::fabric::sim::REGION_PREFIX, '-')
}

/// True if the file at `path` is older than process `pid`, so that process cannot have
/// created it. Every timestamp of a file is at or after its creation, so the earliest
/// one bounds the creation from above; it must be more than a second before the process
/// started (start times have clock-tick resolution, and the wall clock may have been
/// stepped since). False when either time cannot be read.
pub fn region_predates(path: &std::path::Path, pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(meta), Some(started)) = (std::fs::metadata(path), process_started_at(pid)) else {
        return false;
    };
    let ctime = SystemTime::UNIX_EPOCH + Duration::new(meta.ctime().max(0) as u64, 0);
    let earliest = [meta.modified().ok(), meta.created().ok(), Some(ctime)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(ctime);
    earliest + Duration::from_secs(1) < started
}

/// Wall-clock time at which process `pid` started: its start time (clock ticks since
/// boot) placed on the wall clock through the current boot-time offset.
fn process_started_at(pid: u32) -> Option<SystemTime> {
    let ticks = proc_stat(pid)?.1;
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return None;
    }
    let since_boot = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
    let at_start = Duration::from_nanos(ticks.saturating_mul(1_000_000_000) / hz as u64);
    SystemTime::now().checked_sub(since_boot.checked_sub(at_start)?)
}

/// The state letter of process `pid` (`/proc/<pid>/stat` field 3: `R`, `S`, `T`, `Z`,
/// ...), or `None` if there is no such process (or no `/proc`).
pub fn proc_state(pid: u32) -> Option<char> {
    proc_stat(pid).map(|(state, _)| state)
}

/// `(state, start time)` of process `pid` from its main thread's
/// `/proc/<pid>/task/<pid>/stat` (fields 3 and 22).
///
/// On Linux that file says what `/proc/<pid>/stat` says. It is read instead because
/// qemu-user (how the aarch64 build is smoke-tested) fakes `/proc/<own pid>/stat` from the
/// *calling thread's* emulated state: field 3 reads `0` and field 22 is the thread's start,
/// so a client thread would find its own process's regions stale. qemu passes the
/// `task/` path through to the kernel.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/stat")).ok()?;
    // The fields after the command name, which may contain spaces or parens: field 3
    // (state) is the first, field 22 (starttime) the twentieth.
    let mut rest = s.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let start = rest.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// One process, as the regions record their owners: a pid and the process's start time
/// (clock ticks after boot, `/proc/<pid>/stat` field 22). Unlike the pid alone, the pair
/// is not reused while the machine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessId {
    /// The pid.
    pub pid: u32,
    /// Its start time; 0 if `/proc` could not be read when it was recorded.
    pub start: u64,
}

impl ProcessId {
    /// This process. Cached, but keyed by pid: a forked child is another process.
    pub fn current() -> Self {
        static ME: OnceLock<ProcessId> = OnceLock::new();
        let pid = my_pid();
        let read = || Self {
            pid,
            start: proc_stat(pid).map_or(0, |(_, start)| start),
        };
        let me = *ME.get_or_init(read);
        if me.pid == pid {
            me
        } else {
            read()
        }
    }

    /// True if a process with this pid and this start time exists and is not a zombie.
    /// A recorded start of 0 (no token: an old layout, or a recorder without `/proc`)
    /// matches no live process. Only if `/proc/<pid>/stat` cannot be read while the pid
    /// exists is the pid alone taken.
    pub fn alive(&self) -> bool {
        if !pid_alive(self.pid) {
            return false;
        }
        match proc_stat(self.pid) {
            Some((_, start)) => start == self.start,
            None => true,
        }
    }
}

impl From<ProcessId> for Owner {
    fn from(p: ProcessId) -> Self {
        Owner {
            id: p.pid,
            token: p.start,
        }
    }
}

impl From<Owner> for ProcessId {
    fn from(o: Owner) -> Self {
        ProcessId {
            pid: o.id,
            start: o.token,
        }
    }
}

/// The pid in a region name `<prefix><pid><sep>...`, if the name has that shape.
pub fn region_creator(name: &str, prefix: &str, sep: char) -> Option<u32> {
    name.strip_prefix(prefix)?.split(sep).next()?.parse().ok()
}

/// True if process `pid` exists and is not a zombie. `kill(pid, 0)` alone counts a zombie
/// (killed but not yet reaped by its parent) as alive, so `/proc/<pid>/stat` is checked too.
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    match proc_state(pid) {
        Some(state) => !matches!(state, 'Z' | 'X'),
        None => rc == 0,
    }
}

/// This process's pid, as the layouts record it.
pub fn my_pid() -> u32 {
    std::process::id()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::sync::atomic::{AtomicU32, Ordering};

    pub(crate) fn unique(tag: &str) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        format!(
            "/copyrpc-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    #[test]
    fn create_is_exclusive_0600_and_unlinks_on_drop() {
        let name = unique("region");
        let r = ShmRegion::create(&name, 4096).unwrap();
        assert!(r.is_creator());
        assert_eq!(r.as_ptr() as usize % 4096, 0);
        let path = format!("/dev/shm{name}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        match ShmRegion::create(&name, 4096) {
            Err(Error::ShmOpen { name: n, source }) => {
                assert_eq!(n, name);
                assert_eq!(source.kind(), io::ErrorKind::AlreadyExists);
            }
            other => panic!("{other:?}"),
        }
        let o = ShmRegion::open(&name).unwrap();
        assert_eq!(o.len(), 4096);
        assert!(!o.is_creator());
        // SAFETY: both map the same 4096 bytes; single-threaded test access.
        unsafe {
            r.as_ptr().add(100).write(0xAB);
            assert_eq!(o.as_ptr().add(100).read(), 0xAB);
        }
        drop(r);
        assert!(std::fs::metadata(&path).is_err(), "creator drop unlinks");
        drop(o);
        assert!(matches!(
            ShmRegion::open(&name),
            Err(Error::ShmOpen { source, .. }) if source.kind() == io::ErrorKind::NotFound
        ));
    }

    #[test]
    fn bytes_dev_shm_cannot_hold_are_an_error_not_a_sigbus() {
        let (_, size) = shm_room().expect("statvfs(/dev/shm)");
        assert!(
            size > 0,
            "/dev/shm reports no size limit; this test needs a sized tmpfs to refuse"
        );
        // More than the whole file system: tmpfs refuses it before allocating a page.
        let too_big = (size + (1 << 30)) as usize;
        let name = unique("noroom");
        match ShmRegion::create(&name, too_big) {
            Err(Error::ShmNoRoom {
                name: n,
                offset,
                len,
                size: s,
                source,
                ..
            }) => {
                assert_eq!(
                    (n.as_str(), offset, len, s),
                    (name.as_str(), 0, too_big, size)
                );
                assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
            }
            other => panic!("{other:?}"),
        }
        let path = format!("/dev/shm{name}");
        assert!(
            std::fs::metadata(&path).is_err(),
            "a refused create leaves no name"
        );
        assert!(!created_here().contains(&name), "nor a registration");

        // Sparse, the same size is granted (nothing is claimed); a piece the file system
        // cannot hold is refused, and a small piece is claimed and usable.
        let r = ShmRegion::create_sparse(&name, too_big).unwrap();
        let e = r.commit(8192, too_big - 8192).unwrap_err();
        assert!(
            e.to_string().contains(&name) && e.to_string().contains("--shm-size"),
            "{e}"
        );
        r.commit(4096, 4096).unwrap();
        let blocks = |p: &str| std::fs::metadata(p).unwrap().blocks();
        assert!(
            blocks(&path) >= 8,
            "4096 bytes claimed: {} blocks",
            blocks(&path)
        );
        assert!(
            blocks(&path) < 64,
            "nothing more claimed: {} blocks",
            blocks(&path)
        );
        // SAFETY: byte 4096 is inside the mapping and claimed; single-threaded access.
        unsafe {
            r.as_ptr().add(4096).write(0x5A);
            assert_eq!(r.as_ptr().add(4096).read(), 0x5A);
        }
    }

    #[test]
    fn bad_names_are_typed_errors() {
        for n in ["noslash", "/", "/a/b"] {
            assert!(
                matches!(ShmRegion::create(n, 64), Err(Error::ShmName { .. })),
                "{n}"
            );
        }
        let long = format!("/{}", "x".repeat(300));
        assert!(matches!(ShmRegion::open(&long), Err(Error::ShmName { .. })));
    }

    #[test]
    fn item4_process_id_needs_pid_and_start_time() {
        let me = ProcessId::current();
        assert_eq!(me.pid, my_pid());
        assert_ne!(me.start, 0, "/proc/self/stat field 22");
        assert!(me.alive());
        let reused = ProcessId {
            start: me.start + 1,
            ..me
        };
        assert!(!reused.alive(), "our pid, another start time");
        assert!(!ProcessId { start: 0, ..me }.alive(), "no token");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = proc_stat(pid).map_or(1, |(_, s)| s);
        child.wait().unwrap();
        assert!(!ProcessId { pid, start }.alive());
    }

    #[test]
    fn a_thread_reads_its_process_start_time_not_its_own() {
        // Started 20 ms after the process, so a per-thread start time would differ (qemu
        // reports one for `/proc/<own pid>/stat`; see `proc_stat`).
        let main = ProcessId::current();
        let seen = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            (proc_stat(my_pid()), main.alive())
        })
        .join()
        .unwrap();
        assert_eq!(seen.0.map(|(_, start)| start), Some(main.start));
        assert!(
            seen.1,
            "this process is alive when asked from another thread"
        );
        assert!(matches!(proc_state(my_pid()), Some('R' | 'S' | 'D')));
    }

    /// The sim fabric's regions of a dead process are swept by `sweep_left_behind`,
    /// which a tool calls whether or not it opens that fabric: benchkv's one-rank and
    /// `--loopback-ranks` runs never do, and opening it was the only sweep, so what a
    /// killed run left stayed until a multi-rank run. Live processes' regions and other
    /// names stay.
    #[test]
    fn item8_a_left_behind_sim_region_is_swept_by_a_tool_that_opens_no_fabric() {
        let dir = std::env::temp_dir().join(format!("copyrpc-sweep-{}", my_pid()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let names = [
            format!("copyrpc-sim-{dead}-0"),
            format!("copyrpc-sim-{dead}-3"),
            "copyrpc-sim-1-0".to_string(),
            format!("benchkv_{dead}_0_ipc_0"),
            format!("copyrpc-simulation-{dead}"),
        ];
        for n in &names {
            std::fs::write(dir.join(n), b"").unwrap();
        }
        assert_eq!(sweep_left_behind_in(&dir), 2);
        let left: Vec<bool> = names.iter().map(|n| dir.join(n).exists()).collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(left, [false, false, true, true, true], "{names:?}");
    }

    #[test]
    fn pid_liveness() {
        assert!(pid_alive(my_pid()));
        assert!(!pid_alive(0));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }
}
