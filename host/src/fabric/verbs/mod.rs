//! The `verbs` fabric: a real mlx5 NIC through libibverbs (rdma-sys) and mlx5dv.
//!
//! Verbs creates the objects (device context, PD, MRs, CQs, SRQ, RC QPs) and moves QPs
//! through INIT → RTR → RTS; [`mlx5dv_init_obj`](mlx5dv::mlx5dv_init_obj) then exposes
//! their queue memory, which this module copies into `mlx5_raw`'s
//! [`SqDesc`], [`CqDesc`] and [`SrqDesc`]. From there on the data path never calls into
//! libibverbs: `mlx5_raw::{Sq, Cq, Srq}` write WQEs and poll CQEs directly.
//!
//! # No device
//!
//! `ibv_get_device_list` returns NULL with `errno = ENOSYS` on a kernel without RDMA
//! (as on the CI machines), and an empty list when RDMA is there but no NIC is.
//! [`probe`] reports both as [`Probe::NoDevice`] with a human-readable detail, and
//! [`Device::open`] as [`Error::NoRdmaDevice`], whose message names the fix
//! (`--fabric sim`).
//!
//! # Lifetimes
//!
//! Every object holds an `Arc` of what it was created from (QP → CQs, SRQ → device), so
//! drop order cannot destroy a CQ under a live QP. The raw descriptions stay valid while
//! the object they came from lives.

mod domain;
pub mod gid;
pub mod huge;
mod queues;

pub mod mlx5dv;

use std::ffi::{c_int, CStr};
use std::io;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use rdma_sys::{
    ibv_access_flags, ibv_alloc_pd, ibv_close_device, ibv_context, ibv_dealloc_pd, ibv_dereg_mr,
    ibv_device, ibv_device_attr, ibv_free_device_list, ibv_get_device_list, ibv_get_device_name,
    ibv_gid, ibv_mr, ibv_open_device, ibv_pd, ibv_port_attr, ibv_port_state, ibv_query_device,
    ibv_query_gid, ibv_reg_mr,
};

pub use domain::ThreadDomain;
pub use mlx5_raw::desc::{CqDesc, SqDesc, SrqDesc};
pub use queues::{ConnectOptions, Cq, PathMtu, Qp, QpOptions, Srq};

use crate::error::{Error, Result};
use crate::fabric::MrEndpoint;

/// `IBV_LINK_LAYER_ETHERNET` (an anonymous enum in `verbs.h`, so rdma-sys has no name
/// for it): RoCE, where every address handle needs a GRH.
const LINK_LAYER_ETHERNET: u8 = 2;

/// One RDMA device as `ibv_get_device_list` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Kernel name, e.g. `mlx5_0`.
    pub name: String,
    /// Whether the mlx5 provider drives it (`mlx5dv_is_supported`): only those can run
    /// copyrpc, which writes mlx5 WQEs itself.
    pub mlx5: bool,
}

/// What [`probe`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// At least one RDMA device (maybe none of them mlx5).
    Devices(Vec<DeviceInfo>),
    /// None: `detail` says why in words (ENOSYS from `ibv_get_device_list`, or an empty
    /// list), for the caller to print.
    NoDevice {
        /// What the probe saw.
        detail: String,
    },
}

/// The `ibv_get_device_list` result, freed on drop.
struct DeviceList {
    list: NonNull<*mut ibv_device>,
    len: usize,
}

impl DeviceList {
    /// `Ok(Err(detail))` when there is no RDMA at all (see the module docs).
    fn get() -> Result<Result<Self, String>> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the call has no other preconditions.
        let list = unsafe { ibv_get_device_list(&mut n) };
        let Some(list) = NonNull::new(list) else {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENOSYS) {
                return Ok(Err(format!(
                    "ibv_get_device_list: {err}: this kernel has no RDMA support \
                     (no /sys/class/infiniband_verbs)"
                )));
            }
            return Err(Error::VerbsDeviceList { source: err });
        };
        let this = Self {
            list,
            len: usize::try_from(n).unwrap_or(0),
        };
        if this.len == 0 {
            return Ok(Err("ibv_get_device_list found no RDMA devices".to_owned()));
        }
        Ok(Ok(this))
    }

    fn devices(&self) -> impl Iterator<Item = *mut ibv_device> + '_ {
        // SAFETY: the list holds `len` device pointers (ibv_get_device_list's contract)
        // and lives as long as `self`.
        (0..self.len).map(move |i| unsafe { *self.list.as_ptr().add(i) })
    }

    fn info(dev: *mut ibv_device) -> DeviceInfo {
        // SAFETY: `dev` comes from a live device list; the name is a NUL-terminated
        // string inside the device struct.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above; the call only reads the device's provider.
        let mlx5 = unsafe { mlx5dv::mlx5dv_is_supported(dev) };
        DeviceInfo { name, mlx5 }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the pointer came from ibv_get_device_list and is freed once; devices
        // opened from it stay valid after the list is freed (libibverbs contract).
        unsafe { ibv_free_device_list(self.list.as_ptr()) };
    }
}

/// Lists the RDMA devices, or says in words why there are none.
///
/// Errors only when `ibv_get_device_list` fails for another reason than "no RDMA in
/// this kernel" (e.g. ENOMEM).
pub fn probe() -> Result<Probe> {
    Ok(match DeviceList::get()? {
        Ok(list) => Probe::Devices(list.devices().map(DeviceList::info).collect()),
        Err(detail) => Probe::NoDevice { detail },
    })
}

/// Which device, port and GID to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsOptions {
    /// Device name (`mlx5_0`); `None` picks the first mlx5 device.
    pub device: Option<String>,
    /// Port number, usually 1.
    pub port: u8,
    /// GID table index for the GRH; `None` (the default) picks it: on RoCE with
    /// [`gid::choose`] (a RoCE v2 entry of the port's netdev, IPv4 first; several equally
    /// good ones are refused, naming them), on InfiniBand 0 (used only if the peer has no
    /// LID). Given, it must be a RoCE v2 entry of the table on RoCE ([`gid::check_index`]).
    pub gid_index: Option<u8>,
    /// Bytes this process will register (0: unknown). Checked against `RLIMIT_MEMLOCK`
    /// at open, so a limit too small for the run fails up front with the limit named,
    /// not as a bare ENOMEM from `ibv_reg_mr` halfway through set-up.
    pub pinned_bytes: u64,
    /// Carve [`Device::alloc_mr`] regions from 2 MiB huge pages ([`huge`]), falling back
    /// to 4 KiB pages when none are free ([`Device::huge_pages`] says why).
    pub hugepages: bool,
}

impl Default for VerbsOptions {
    fn default() -> Self {
        Self {
            device: None,
            port: 1,
            gid_index: None,
            pinned_bytes: 0,
            hugepages: false,
        }
    }
}

bitflags::bitflags! {
    /// Memory-region access rights (`ibv_access_flags`); a `bitflags` set.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Access: u32 {
        /// The NIC may write the region (needed for any receive or READ target, and
        /// implied by the remote-write right).
        const LOCAL_WRITE = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        /// Peers may RDMA-WRITE into the region.
        const REMOTE_WRITE = ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        /// Peers may RDMA-READ the region.
        const REMOTE_READ = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        /// The NIC may reorder its PCIe writes to the region (faster on some hosts;
        /// only for regions whose readers do not rely on write order).
        const RELAXED_ORDERING = ibv_access_flags::IBV_ACCESS_RELAXED_ORDERING.0;
        /// `LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ`: what copyrpc's rings need.
        const RDMA = Self::LOCAL_WRITE.bits() | Self::REMOTE_WRITE.bits() | Self::REMOTE_READ.bits();
    }
}

/// The device context and protection domain, shared by every object made from them.
#[derive(Debug)]
struct Ctx {
    ctx: NonNull<ibv_context>,
    pd: NonNull<ibv_pd>,
    name: String,
    port: u8,
    gid_index: u8,
    lid: u16,
    link_layer: u8,
    active_mtu: u32,
    gid: [u8; 16],
    /// The netdev of the GID entry in use, when sysfs names it.
    gid_netdev: Option<String>,
    max_qp_rd_atom: u8,
    max_qp_init_rd_atom: u8,
    /// One lock per BlueFlame register address of this context
    /// ([`mlx5_raw::SharedBf`]). rdma-core shares registers between QPs past the first
    /// ones and mlx5dv does not say which, so every QP's doorbell takes its register's
    /// lock (uncontended for a register of its own: one compare-and-swap).
    bf_locks: std::sync::Mutex<std::collections::HashMap<usize, Arc<mlx5_raw::SharedBf>>>,
    /// Where `alloc_mr` carves regions with `--hugepages`.
    huge: Option<huge::HugeArena>,
}

impl Ctx {
    /// The lock of the BlueFlame register at `reg` (made on first use; QPs that share
    /// the register get the same one).
    fn bf_lock(&self, reg: *mut u8) -> Arc<mlx5_raw::SharedBf> {
        let mut map = self
            .bf_locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(map.entry(reg.addr()).or_default())
    }
}

// SAFETY: libibverbs objects may be used from any thread, and its verbs are thread-safe
// (rdma-core documents the verbs API as such); `Ctx` only reads its own fields otherwise.
unsafe impl Send for Ctx {}
// SAFETY: as above; no interior mutability on the Rust side.
unsafe impl Sync for Ctx {}

impl Drop for Ctx {
    fn drop(&mut self) {
        // Every child holds an Arc<Ctx>, so none is alive here. Errors cannot be
        // reported from drop; a failure would mean a leaked child, which the Arcs rule out.
        // SAFETY: the PD and context came from ibv_alloc_pd / ibv_open_device and are
        // released once, PD first.
        unsafe {
            ibv_dealloc_pd(self.pd.as_ptr());
            ibv_close_device(self.ctx.as_ptr());
        }
    }
}

/// The error of a verb that returns 0 or an errno (most), or -1 with `errno` (some).
fn verb_error(rc: c_int) -> io::Error {
    if rc > 0 {
        return io::Error::from_raw_os_error(rc);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(0) | None => io::Error::from_raw_os_error(libc::EIO),
        _ => e,
    }
}

/// An open mlx5 device with its protection domain: the root of the `verbs` fabric.
///
/// Cheap to clone (an `Arc`); objects made from it keep it open.
#[derive(Clone, Debug)]
pub struct Device {
    ctx: Arc<Ctx>,
}

impl Device {
    /// Opens the device `opts.device` (or the first mlx5 device), checks that the port is
    /// active, reads its LID, MTU and GID, and allocates a protection domain.
    ///
    /// With no RDMA device this is [`Error::NoRdmaDevice`] (which tells the user to run
    /// with `--fabric sim`); a missing name is [`Error::RdmaDeviceNotFound`]; a device
    /// that is not mlx5 is [`Error::NotMlx5`].
    pub fn open(opts: &VerbsOptions) -> Result<Self> {
        let list = DeviceList::get()?.map_err(|detail| Error::NoRdmaDevice { detail })?;
        let infos: Vec<_> = list.devices().map(|d| (d, DeviceList::info(d))).collect();
        let picked = match &opts.device {
            Some(name) => infos.iter().find(|(_, i)| &i.name == name),
            None => infos.iter().find(|(_, i)| i.mlx5),
        };
        let Some((dev, info)) = picked else {
            return Err(match &opts.device {
                Some(name) => Error::RdmaDeviceNotFound {
                    name: name.clone(),
                    available: infos.iter().map(|(_, i)| i.name.clone()).collect(),
                },
                None => Error::NoRdmaDevice {
                    detail: format!(
                        "RDMA devices are present ({:?}) but none is driven by mlx5",
                        infos.iter().map(|(_, i)| &i.name).collect::<Vec<_>>()
                    ),
                },
            });
        };
        if !info.mlx5 {
            return Err(Error::NotMlx5 {
                device: info.name.clone(),
            });
        }
        let name = info.name.clone();
        // SAFETY: `dev` is from the live list.
        let ctx = unsafe { ibv_open_device(*dev) };
        let ctx = NonNull::new(ctx).ok_or_else(|| Error::VerbsOpenDevice {
            device: name.clone(),
            source: io::Error::last_os_error(),
        })?;
        drop(list);
        // From here a failure must close the context: `Opening` does.
        Opening {
            ctx,
            pd: None,
            name,
            armed: true,
        }
        .finish(opts)
    }

    /// The device name, e.g. `mlx5_0`.
    pub fn name(&self) -> &str {
        &self.ctx.name
    }

    /// The port in use.
    pub fn port(&self) -> u8 {
        self.ctx.port
    }

    /// The port's LID (0 on RoCE).
    pub fn lid(&self) -> u16 {
        self.ctx.lid
    }

    /// The port's GID at the configured index.
    pub fn gid(&self) -> [u8; 16] {
        self.ctx.gid
    }

    /// The GID table index in use (`--gid-index`, or what `auto` picked).
    pub fn gid_index(&self) -> u8 {
        self.ctx.gid_index
    }

    /// One line for the user: device, port, link layer and, on RoCE, the GID in use with
    /// its netdev, e.g. `mlx5_0 port 1 (RoCE): GID index 3 ::ffff:10.0.0.1 (IPv4 10.0.0.1,
    /// netdev eth0)`.
    pub fn describe(&self) -> String {
        let c = &self.ctx;
        if !self.is_roce() {
            return format!("{} port {} (InfiniBand, LID {:#x})", c.name, c.port, c.lid);
        }
        let ip = std::net::Ipv6Addr::from(c.gid);
        let v4 = ip
            .to_ipv4_mapped()
            .map(|a| format!("IPv4 {a}, "))
            .unwrap_or_default();
        format!(
            "{} port {} (RoCE): GID index {} {ip} ({v4}netdev {})",
            c.name,
            c.port,
            c.gid_index,
            c.gid_netdev.as_deref().unwrap_or("unknown")
        )
    }

    /// Whether the port is RoCE (Ethernet link layer; every QP uses a GRH).
    pub fn is_roce(&self) -> bool {
        self.ctx.link_layer == LINK_LAYER_ETHERNET
    }

    /// The NIC's NUMA node from sysfs, if the platform reports one.
    pub fn numa_node(&self) -> Option<u32> {
        crate::topology::nic_numa_node(&self.ctx.name)
    }

    /// Allocates `len` bytes of zeroed, page-aligned memory and registers it: carved
    /// from huge pages with [`VerbsOptions::hugepages`] while any are free, else an
    /// anonymous `mmap` of its own. `region` names it in errors.
    pub fn alloc_mr(&self, region: &str, len: usize, access: Access) -> Result<Mr> {
        if let Some(Ok((chunk, p))) = self.ctx.huge.as_ref().map(|h| h.carve(len)) {
            // SAFETY: `p .. p + len` is a fresh region of `chunk`, carved for this Mr
            // alone; the Mr keeps the chunk mapped (stored in it, dropped after
            // deregistration).
            let mut mr = unsafe { self.register(region, p, len, access)? };
            mr.chunk = Some(chunk);
            return Ok(mr);
        }
        let buf = MmapBuf::new(region, len)?;
        // SAFETY: `buf` is `len` bytes we own; the Mr keeps it alive (it is stored in
        // the Mr, which deregisters before unmapping).
        let mut mr = unsafe { self.register(region, buf.ptr.as_ptr(), len, access)? };
        mr.buf = Some(buf);
        Ok(mr)
    }

    /// With [`VerbsOptions::hugepages`]: how many regions went on huge pages, and why
    /// the others did not. `None` when huge pages were not asked for.
    pub fn huge_pages(&self) -> Option<huge::HugeReport> {
        self.ctx.huge.as_ref().map(huge::HugeArena::report)
    }

    /// Registers caller-owned memory (e.g. a `/dev/shm` region).
    ///
    /// # Safety
    ///
    /// `addr .. addr + len` is mapped memory that stays mapped until the returned [`Mr`]
    /// is dropped. The NIC may read and (with write access) write it at any time while
    /// registered, so the caller must not assume Rust aliasing rules over it: access it
    /// through raw pointers or atomics only.
    pub unsafe fn register(
        &self,
        region: &str,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Mr> {
        // SAFETY: the PD is alive (we hold the Arc); the range is valid per the
        // caller's contract. Access bits fit in an int.
        let mr = unsafe {
            ibv_reg_mr(
                self.ctx.pd.as_ptr(),
                addr.cast(),
                len,
                access.bits() as c_int,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| Error::VerbsRegMr {
            device: self.ctx.name.clone(),
            region: region.to_owned(),
            len,
            source: io::Error::last_os_error(),
        })?;
        Ok(Mr {
            mr,
            addr,
            len,
            region: region.to_owned(),
            buf: None,
            chunk: None,
            _ctx: self.ctx.clone(),
        })
    }
}

/// The soft `RLIMIT_MEMLOCK` in bytes (`None`: unlimited or unreadable).
pub fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid out-struct.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    (rc == 0 && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// `Err(limit)` when `need` bytes (0: unknown, never refused) exceed `limit`.
pub fn check_memlock(need: u64, limit: Option<u64>) -> std::result::Result<(), u64> {
    match limit {
        Some(l) if need > l => Err(l),
        _ => Ok(()),
    }
}

/// Builds the rest of a [`Device`]; closes the context (and PD) if a step fails.
struct Opening {
    ctx: NonNull<ibv_context>,
    pd: Option<NonNull<ibv_pd>>,
    name: String,
    /// Cleared once the context and PD belong to a `Ctx`.
    armed: bool,
}

impl Opening {
    fn finish(mut self, opts: &VerbsOptions) -> Result<Device> {
        let c = self.ctx.as_ptr();
        // SAFETY: all-zero is a valid ibv_device_attr (plain integers and arrays).
        let mut dattr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is an open context, `dattr` a valid out-struct.
        let rc = unsafe { ibv_query_device(c, &mut dattr) };
        if rc != 0 {
            return Err(Error::VerbsQueryDevice {
                device: self.name.clone(),
                source: verb_error(rc),
            });
        }
        // SAFETY: all-zero is a valid ibv_port_attr (plain integers).
        let mut pattr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is an open context; rdma-sys's ___ibv_query_port is the
        // `ibv_query_port` macro of verbs.h (it passes sizeof(port_attr)).
        let rc = unsafe { rdma_sys::___ibv_query_port(c, opts.port, &mut pattr) };
        if rc != 0 {
            return Err(Error::VerbsQueryPort {
                device: self.name.clone(),
                port: opts.port,
                source: verb_error(rc),
            });
        }
        if pattr.state != ibv_port_state::IBV_PORT_ACTIVE {
            return Err(Error::VerbsPortNotActive {
                device: self.name.clone(),
                port: opts.port,
                state: pattr.state,
            });
        }
        check_memlock(opts.pinned_bytes, memlock_limit()).map_err(|limit| Error::VerbsMemlock {
            device: self.name.clone(),
            need: opts.pinned_bytes,
            limit,
        })?;
        let ethernet = pattr.link_layer == LINK_LAYER_ETHERNET;
        let table = gid::read_table(&gid::class_dir(&gid::sysfs_root()), &self.name, opts.port);
        let (gid_index, gid_netdev) = match (opts.gid_index, ethernet, &table) {
            (Some(i), _, Some(t)) => {
                let e =
                    gid::check_index(t, i, ethernet).map_err(|reason| Error::VerbsGidIndex {
                        device: self.name.clone(),
                        port: opts.port,
                        reason,
                    })?;
                (i, e.netdev)
            }
            // Sysfs does not list the port: ibv_query_gid below is the only check.
            (Some(i), _, None) => (i, None),
            (None, false, _) => (0, None),
            (None, true, t) => {
                let e = gid::choose(t.as_ref().unwrap_or(&gid::GidTable::default())).map_err(
                    |why| Error::VerbsGidChoice {
                        device: self.name.clone(),
                        port: opts.port,
                        why: why.to_string(),
                    },
                )?;
                (e.index, e.netdev)
            }
        };
        let mut gid = ibv_gid { raw: [0; 16] };
        // SAFETY: open context, valid out-union.
        let rc = unsafe { ibv_query_gid(c, opts.port, c_int::from(gid_index), &mut gid) };
        if rc != 0 {
            return Err(Error::VerbsQueryGid {
                device: self.name.clone(),
                port: opts.port,
                index: gid_index,
                source: verb_error(rc),
            });
        }
        // SAFETY: every bit pattern of the union is a valid [u8; 16].
        if ethernet && unsafe { gid.raw } == [0; 16] {
            // An empty slot: RoCE addresses by GID, so every packet would be dropped.
            return Err(Error::VerbsZeroGid {
                device: self.name.clone(),
                port: opts.port,
                index: gid_index,
            });
        }
        // SAFETY: open context.
        let pd = unsafe { ibv_alloc_pd(c) };
        let pd = NonNull::new(pd).ok_or_else(|| Error::VerbsAllocPd {
            device: self.name.clone(),
            source: io::Error::last_os_error(),
        })?;
        self.pd = Some(pd);
        let clamp = |v: c_int| u8::try_from(v.max(0)).unwrap_or(u8::MAX);
        let ctx = Ctx {
            ctx: self.ctx,
            pd,
            name: std::mem::take(&mut self.name),
            port: opts.port,
            gid_index,
            lid: pattr.lid,
            link_layer: pattr.link_layer,
            active_mtu: pattr.active_mtu,
            // SAFETY: every bit pattern of the union is a valid [u8; 16].
            gid: unsafe { gid.raw },
            gid_netdev,
            max_qp_rd_atom: clamp(dattr.max_qp_rd_atom),
            max_qp_init_rd_atom: clamp(dattr.max_qp_init_rd_atom),
            bf_locks: std::sync::Mutex::default(),
            huge: opts.hugepages.then(|| huge::HugeArena::new(true)),
        };
        // Ownership moved into `ctx`: disarm our drop.
        self.armed = false;
        Ok(Device { ctx: Arc::new(ctx) })
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // SAFETY: still owned here (not moved into a Ctx): release PD, then context.
        unsafe {
            if let Some(pd) = self.pd {
                ibv_dealloc_pd(pd.as_ptr());
            }
            ibv_close_device(self.ctx.as_ptr());
        }
    }
}

/// Page-aligned anonymous memory, unmapped on drop.
#[derive(Debug)]
struct MmapBuf {
    ptr: NonNull<u8>,
    len: usize,
}

impl MmapBuf {
    fn new(region: &str, len: usize) -> Result<Self> {
        let err = |source| Error::MrAlloc {
            region: region.to_owned(),
            len,
            source,
        };
        if len == 0 {
            return Err(err(io::Error::from_raw_os_error(libc::EINVAL)));
        }
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(err(io::Error::last_os_error()));
        }
        Ok(Self {
            ptr: NonNull::new(p.cast()).ok_or_else(|| err(io::Error::other("mmap gave NULL")))?,
            len,
        })
    }
}

impl Drop for MmapBuf {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once (after deregistration: see Mr).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A registered memory region; deregistered (and, if [`Device::alloc_mr`] allocated it,
/// unmapped) on drop.
///
/// The memory is shared with the NIC, so it is exposed only as a raw pointer.
#[derive(Debug)]
pub struct Mr {
    mr: NonNull<ibv_mr>,
    addr: *mut u8,
    len: usize,
    region: String,
    /// Dropped after `mr` is deregistered (in `Drop::drop`, before the fields).
    buf: Option<MmapBuf>,
    /// The huge-page chunk the region was carved from, likewise.
    chunk: Option<Arc<huge::Chunk>>,
    _ctx: Arc<Ctx>,
}

// SAFETY: the region's memory is not tied to a thread, and deregistration is thread-safe;
// `Mr` exposes only raw pointers and keys, never references into the memory.
unsafe impl Send for Mr {}
// SAFETY: as above; every method takes `&self` and only reads immutable fields.
unsafe impl Sync for Mr {}

impl Mr {
    /// Start of the region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never, for a registered one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Name given at registration.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Local key (for data segments).
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is registered until drop; lkey is immutable after registration.
        unsafe { (*self.mr.as_ptr()).lkey }
    }

    /// Remote key (for peers' RDMA).
    pub fn rkey(&self) -> u32 {
        // SAFETY: as for lkey.
        unsafe { (*self.mr.as_ptr()).rkey }
    }

    /// What a peer needs to RDMA into this region.
    pub fn endpoint(&self) -> MrEndpoint {
        MrEndpoint {
            addr: self.addr as u64,
            len: self.len as u64,
            rkey: self.rkey(),
            reserved: 0,
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered once, deregistered once; the memory (`buf`, if ours) is
        // unmapped only afterwards, when the fields drop.
        unsafe { ibv_dereg_mr(self.mr.as_ptr()) };
    }
}
