//! What the delegationrpc and ipc wrappers share: creating a region exclusively (with
//! the stale-region rules), opening one (validating its layout and its server's
//! liveness), and the liveness checks of client-table rows. Each protocol's region type
//! implements [`ShmLayout`]; the wrappers hold only what is their protocol's own.

use copyrpc_core::deleg::{self, DelegRegion};
use copyrpc_core::ipc::{self, IpcRegion};
use copyrpc_core::shm::{peek_header, ClientInfo, ClientState, LayoutError, Owner, Payload};

use std::os::unix::fs::MetadataExt;

use super::{ProcessId, ShmRegion};
use crate::error::{Error, Result};

/// A core region view the host can put in a named mapping.
pub trait ShmLayout: Copy + Sized {
    /// The shape the creator chooses.
    type Config;

    /// Bytes a region with `cfg` needs.
    fn required_len(cfg: &Self::Config) -> std::result::Result<usize, LayoutError>;

    /// Core `init`, recording `owner` as the server.
    ///
    /// # Safety
    ///
    /// As the core's `init`: `ptr` valid for `len` zero bytes for `'static`, accessed
    /// only through the layout's views.
    unsafe fn init(
        ptr: *mut u8,
        len: usize,
        cfg: &Self::Config,
        owner: ProcessId,
    ) -> std::result::Result<Self, LayoutError>;

    /// Core `attach`.
    ///
    /// # Safety
    ///
    /// As the core's `attach`: `ptr` valid for `len` bytes for `'static`, accessed only
    /// through the layout's views (in any process).
    unsafe fn attach(ptr: *mut u8, len: usize) -> std::result::Result<Self, LayoutError>;

    /// The header's `server_alive` flag.
    fn server_flag(&self) -> bool;

    /// The server's owner as recorded at init.
    fn server_owner(&self) -> Owner;
}

/// The same forwarding for each protocol's region view (their inherent functions have
/// the same shapes).
macro_rules! shm_layout {
    ($region:ident, $config:ty) => {
        impl<Req: Payload, Resp: Payload> ShmLayout for $region<'static, Req, Resp> {
            type Config = $config;

            fn required_len(cfg: &$config) -> std::result::Result<usize, LayoutError> {
                $region::<'static, Req, Resp>::required_len(cfg)
            }

            unsafe fn init(
                ptr: *mut u8,
                len: usize,
                cfg: &$config,
                owner: ProcessId,
            ) -> std::result::Result<Self, LayoutError> {
                // SAFETY: the caller's contract is the core's.
                unsafe { $region::<'static, Req, Resp>::init(ptr, len, cfg, owner) }
            }

            unsafe fn attach(ptr: *mut u8, len: usize) -> std::result::Result<Self, LayoutError> {
                // SAFETY: the caller's contract is the core's.
                unsafe { $region::<'static, Req, Resp>::attach(ptr, len) }
            }

            fn server_flag(&self) -> bool {
                // Relaxed: a flag; nothing is published with it.
                self.header()
                    .server_alive
                    .load(std::sync::atomic::Ordering::Relaxed)
            }

            fn server_owner(&self) -> Owner {
                self.header().server_owner()
            }
        }
    };
}

shm_layout!(DelegRegion, deleg::Config);
shm_layout!(IpcRegion, ipc::Config);

fn layout_err(name: &str) -> impl Fn(LayoutError) -> Error + '_ {
    move |source| Error::ShmLayout {
        name: name.to_owned(),
        source,
    }
}

/// Creates region `name` exclusively (see [`create_exclusive`]) and initialises layout
/// `L` in it with this process as its server.
///
/// The view borrows the mapping as `'static`: the caller keeps the [`ShmRegion`] alive
/// for as long as it holds the view (a field declared after every view, so it drops
/// last), and hands out nothing that outlives `&self`.
pub(crate) fn create_region<L: ShmLayout>(
    name: &str,
    cfg: &L::Config,
    replace_stale: bool,
) -> Result<(L, ShmRegion)> {
    let len = L::required_len(cfg).map_err(layout_err(name))?;
    let shm = create_exclusive(name, len, replace_stale)?;
    // SAFETY: a fresh mapping of `len` zero bytes; the caller keeps `shm` alive as long as
    // the view (see above).
    let region = unsafe { L::init(shm.as_ptr(), shm.len(), cfg, ProcessId::current()) }
        .map_err(layout_err(name))?;
    Ok((region, shm))
}

/// Opens `name`, validates layout `L` in it and checks that its server runs: the flag
/// set ([`Error::ServerGone`] if not) and its process, pid and start time, alive
/// ([`Error::ShmStale`] if not). Returns the view, the server and the mapping, which the
/// caller keeps alive as long as the view (as for [`create_region`]).
pub(crate) fn open_region<L: ShmLayout>(name: &str) -> Result<(L, ProcessId, ShmRegion)> {
    let shm = ShmRegion::open(name)?;
    // SAFETY: the mapping covers `shm.len()` bytes and the caller keeps it alive as long
    // as the view; other processes access it only through the same layout's atomics and
    // protocol.
    let region = unsafe { L::attach(shm.as_ptr(), shm.len()) }.map_err(layout_err(name))?;
    if !region.server_flag() {
        return Err(Error::ServerGone {
            name: name.to_owned(),
        });
    }
    let server = ProcessId::from(region.server_owner());
    if !server.alive() {
        return Err(Error::ShmStale {
            name: name.to_owned(),
            pid: server.pid,
        });
    }
    Ok((region, server, shm))
}

/// True while the server runs: its flag is set and its process (pid and start time) is
/// alive. A server killed without running its destructor is caught by the second.
pub(crate) fn server_alive<L: ShmLayout>(region: &L) -> bool {
    region.server_flag() && ProcessId::from(region.server_owner()).alive()
}

/// How often a client waiting on the server checks that the server's process lives.
pub(crate) const LIVENESS_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

/// A client's liveness check for calls refused because all its calls are in flight: the
/// core cannot tell "wait for an answer" from "the server was killed" (a SIGKILLed server
/// never clears `server_alive`), so without it a client that retries is told to poll and
/// retry for ever.
#[derive(Debug, Default)]
pub(crate) struct RefusedCalls {
    checked: Option<std::time::Instant>,
}

impl RefusedCalls {
    /// True if the server's process is gone. Looks at most once per [`LIVENESS_EVERY`]
    /// (a `/proc` read), false in between.
    pub(crate) fn server_gone<L: ShmLayout>(&mut self, region: &L) -> bool {
        let now = std::time::Instant::now();
        if self
            .checked
            .is_some_and(|t| now.duration_since(t) < LIVENESS_EVERY)
        {
            return false;
        }
        self.checked = Some(now);
        !server_alive(region)
    }
}

/// What an existing region of the name asked for is, to `create`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Existing {
    /// A delegationrpc or ipc region whose creator (pid and start time) lives.
    Live(u32),
    /// One whose creator is gone, or of an older layout (which records no start time,
    /// so its creator cannot be told from a reused pid): replaceable when asked.
    Stale(u32),
    /// Magic still 0 and no creator recorded, and the file is recent: another process
    /// may be creating it right now (between its exclusive create and its magic store).
    Unfinished,
    /// Anything else: not ours to delete.
    Foreign(u64),
}

/// How long a region with no magic and no creator may be another process's creation in
/// progress. Past it, it is taken for one whose creator died while initialising it.
const INIT_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

fn classify(shm: &ShmRegion) -> Existing {
    // SAFETY: the mapping covers `shm.len()` bytes, which other processes touch only
    // atomically.
    let Some(h) = (unsafe { peek_header(shm.as_ptr(), shm.len()) }) else {
        // Shorter than a header: no layout of ours is.
        return Existing::Foreign(0);
    };
    let owner = ProcessId::from(h.server);
    let ours = h.magic == deleg::MAGIC || h.magic == ipc::MAGIC;
    let current = (h.magic == deleg::MAGIC && h.version == deleg::VERSION)
        || (h.magic == ipc::MAGIC && h.version == ipc::VERSION);
    if current || (h.magic == 0 && owner.pid != 0) {
        // A creator that recorded itself (the magic is stored last).
        return if owner.alive() {
            Existing::Live(owner.pid)
        } else {
            Existing::Stale(owner.pid)
        };
    }
    if ours {
        return Existing::Stale(owner.pid);
    }
    if h.magic != 0 {
        return Existing::Foreign(h.magic);
    }
    let recent = std::fs::metadata(format!("/dev/shm{}", shm.name()))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age < INIT_GRACE);
    if recent {
        Existing::Unfinished
    } else {
        Existing::Stale(0)
    }
}

/// Creates `name` exclusively. If it exists: [`Error::ShmExists`] when its creator (pid
/// and start time) is alive, [`Error::ShmUnfinished`] while another process may be
/// creating it, [`Error::ShmForeign`] when it is not a delegationrpc or ipc region, else
/// (its creator gone) [`Error::ShmStale`], or with `replace_stale`, unlink and create
/// anew. Only a region of ours whose creator is gone is ever unlinked.
pub(crate) fn create_exclusive(name: &str, len: usize, replace_stale: bool) -> Result<ShmRegion> {
    match ShmRegion::create(name, len) {
        Err(Error::ShmOpen { source, .. })
            if source.kind() == std::io::ErrorKind::AlreadyExists =>
        {
            let (existing, seen) = match ShmRegion::open(name) {
                Ok(r) => (classify(&r), r.inode()),
                // Gone between the two calls: its owner removed it; try once more.
                Err(Error::ShmOpen { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    return ShmRegion::create(name, len);
                }
                Err(e) => return Err(e),
            };
            let name = name.to_owned();
            match existing {
                Existing::Live(pid) => Err(Error::ShmExists { name, pid }),
                Existing::Unfinished => Err(Error::ShmUnfinished { name }),
                Existing::Foreign(magic) => Err(Error::ShmForeign { name, magic }),
                Existing::Stale(pid) if !replace_stale => Err(Error::ShmStale { name, pid }),
                Existing::Stale(_) => {
                    // The name still the object judged stale: another process replacing
                    // it at the same time may have put a fresh one there already.
                    let path = format!("/dev/shm{name}");
                    let now = std::fs::metadata(&path).map(|m| m.ino()).ok();
                    if now != Some(seen) {
                        return Err(Error::ShmUnfinished { name });
                    }
                    ShmRegion::unlink(&name)?;
                    // Exclusive again: of two processes replacing the same stale region,
                    // one creates and the other gets `ShmOpen` (exists).
                    ShmRegion::create(&name, len)
                }
            }
        }
        other => other,
    }
}

/// True if the client row names an owner (0 while it registers) that is no longer alive.
pub(crate) fn owner_gone(c: &ClientInfo) -> bool {
    c.owner != 0
        && !ProcessId {
            pid: c.owner,
            start: c.owner_token,
        }
        .alive()
}

/// The ids of the active clients in `clients` whose owner process is gone.
pub(crate) fn dead_clients(clients: impl Iterator<Item = ClientInfo>) -> Vec<u32> {
    clients
        .filter(|c| c.state == ClientState::Active && owner_gone(c))
        .map(|c| c.id)
        .collect()
}
