//! Fabrics: where copyrpc's queues come from.
//!
//! | fabric | queues live in | status |
//! |---|---|---|
//! | [`verbs`] | a ConnectX NIC, through libibverbs + mlx5dv | here |
//! | [`sim`] | the software device model's objects in `/dev/shm`, on an engine thread | here |
//!
//! Both hand out the same raw descriptions (`mlx5_raw::desc::{SqDesc, CqDesc, SrqDesc}`
//! plus memory-region keys), so the driver above does not know which it runs on.
//!
//! [`FabricKind::Auto`] probes for an RDMA device and falls back to `sim` when there is
//! none; [`select`] returns that decision with a sentence saying why, for the caller to
//! print (this crate never prints).

pub mod sim;
pub mod verbs;

use std::fmt;
use std::str::FromStr;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::{Error, Result};

/// Which fabric to open (the `--fabric` command-line value).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FabricKind {
    /// A real mlx5 NIC through verbs; an error without one.
    Verbs,
    /// The software device model over `/dev/shm`.
    Sim,
    /// `verbs` if an mlx5 device is present, else `sim`.
    #[default]
    Auto,
}

impl FabricKind {
    /// The command-line spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Verbs => "verbs",
            Self::Sim => "sim",
            Self::Auto => "auto",
        }
    }
}

impl fmt::Display for FabricKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FabricKind {
    type Err = Error;

    /// `verbs`, `sim` or `auto`, ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self> {
        [Self::Verbs, Self::Sim, Self::Auto]
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| Error::ParseFabricKind {
                given: s.to_owned(),
            })
    }
}

/// The fabric [`select`] decided on, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// [`FabricKind::Verbs`] or [`FabricKind::Sim`], never `Auto`.
    pub kind: FabricKind,
    /// One sentence for the user, e.g. "auto: no RDMA device (…); using the software
    /// device model (sim)".
    pub reason: String,
}

/// Options for [`open`].
#[derive(Clone, Debug, Default)]
pub struct FabricOptions {
    /// Device, port and GID for `verbs` (also what `auto` probes for).
    pub verbs: verbs::VerbsOptions,
    /// Region size, engine idle policy, links and tracing for `sim`.
    pub sim: sim::SimOptions,
}

/// Resolves `kind` (only `Auto` needs a probe). `Verbs` and `Sim` are taken as asked;
/// whether `verbs` can actually open is [`open`]'s business.
///
/// `Auto` picks `verbs` when an mlx5 device is present (the named one, if
/// `opts.verbs.device` is set), else `sim`, and says which devices it saw. A named
/// device that is absent while others are present is an error rather than a silent
/// fallback, so a typo does not turn a NIC run into a simulation.
pub fn select(kind: FabricKind, opts: &FabricOptions) -> Result<Selection> {
    let requested = |kind| Selection {
        kind,
        reason: format!("fabric `{kind}` requested"),
    };
    match kind {
        FabricKind::Verbs | FabricKind::Sim => Ok(requested(kind)),
        FabricKind::Auto => Ok(auto_decision(
            &verbs::probe()?,
            opts.verbs.device.as_deref(),
        )?),
    }
}

/// The `Auto` rule over a probe result (separate so it is testable without a NIC).
fn auto_decision(probe: &verbs::Probe, device: Option<&str>) -> Result<Selection> {
    let sim = |why: String| Selection {
        kind: FabricKind::Sim,
        reason: format!("auto: {why}; using the software device model (sim)"),
    };
    match probe {
        // A device the user named is the one to use: no falling back to sim behind it.
        verbs::Probe::NoDevice { detail } if device.is_some() => Err(Error::NoRdmaDevice {
            detail: format!(
                "{detail}, and --device {} was named",
                device.unwrap_or_default()
            ),
        }),
        verbs::Probe::NoDevice { detail } => Ok(sim(format!("no RDMA device ({detail})"))),
        verbs::Probe::Devices(devs) => {
            let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
            let chosen = match device {
                Some(name) => match devs.iter().find(|d| d.name == name) {
                    Some(d) => d,
                    None => {
                        return Err(Error::RdmaDeviceNotFound {
                            name: name.to_owned(),
                            available: names.iter().map(|n| n.to_string()).collect(),
                        })
                    }
                },
                None => match devs.iter().find(|d| d.mlx5) {
                    Some(d) => d,
                    None => {
                        return Ok(sim(format!(
                            "RDMA devices {names:?} are present but none is mlx5"
                        )))
                    }
                },
            };
            if !chosen.mlx5 {
                return Err(Error::NotMlx5 {
                    device: chosen.name.clone(),
                });
            }
            Ok(Selection {
                kind: FabricKind::Verbs,
                reason: format!("auto: using mlx5 device {} (found {names:?})", chosen.name),
            })
        }
    }
}

/// An opened fabric.
#[derive(Debug)]
#[non_exhaustive]
pub enum Fabric {
    /// A real NIC.
    Verbs(verbs::Device),
    /// The software device model.
    Sim(Box<sim::SimFabric>),
}

/// Opens the fabric `kind` selects: the one entry point for command-line tools.
///
/// Returns the fabric and the [`Selection`] (print its `reason`). With `verbs` and no
/// RDMA device this is [`Error::NoRdmaDevice`], whose message names `--fabric sim`.
pub fn open(kind: FabricKind, opts: &FabricOptions) -> Result<(Fabric, Selection)> {
    let sel = select(kind, opts)?;
    let fabric = match sel.kind {
        FabricKind::Verbs => Fabric::Verbs(verbs::Device::open(&opts.verbs)?),
        FabricKind::Sim => open_sim(opts)?,
        FabricKind::Auto => unreachable!("select never returns Auto"),
    };
    Ok((fabric, sel))
}

/// Opens the device-model fabric: a `/dev/shm` region and an engine thread.
pub fn open_sim(opts: &FabricOptions) -> Result<Fabric> {
    Ok(Fabric::Sim(Box::new(sim::SimFabric::open(&opts.sim)?)))
}

/// The quality of service a connection asks the fabric for: perftest's `--tclass` and
/// `--sl` (`ib_write_bw --tclass=<value> --sl=<sl>`). Both sides of a connection must
/// use the same: the responder's ACKs and READ responses carry its own values, and on a
/// fabric with a lossless class for RDMA a mismatch puts half the traffic in the lossy
/// class. The sim fabric records it per QP ([`sim::SimFabric::qos_of`]) and sends
/// nothing differently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Qos {
    /// GRH traffic class (`ah_attr.grh.traffic_class`): on RoCE v2 the IP header's DSCP
    /// (upper 6 bits) and ECN (lower 2), e.g. 106 for DSCP 26. Used only with a GRH
    /// (always on RoCE).
    pub traffic_class: u8,
    /// Service level (`ah_attr.sl`), 0..=15: on InfiniBand mapped to a virtual lane by
    /// the subnet manager; on RoCE the 802.1p priority of VLAN-tagged frames (mlx5 keeps
    /// its low 3 bits).
    pub sl: u8,
}

impl Qos {
    /// The largest service level (4 bits).
    pub const MAX_SL: u8 = 15;

    /// Both values; a service level above [`Qos::MAX_SL`] is refused naming `--sl`.
    pub fn new(traffic_class: u8, sl: u8) -> Result<Self> {
        if sl > Self::MAX_SL {
            return Err(Error::RpcConfig {
                reason: format!("--sl {sl} is out of range: a service level is 0..=15"),
            });
        }
        Ok(Self { traffic_class, sl })
    }

    /// The first field in which `peer` differs from `self`, as the flag that sets it and
    /// both values: `("--tclass", mine, theirs)`.
    pub fn difference(&self, peer: &Qos) -> Option<(&'static str, u8, u8)> {
        if self.traffic_class != peer.traffic_class {
            Some(("--tclass", self.traffic_class, peer.traffic_class))
        } else if self.sl != peer.sl {
            Some(("--sl", self.sl, peer.sl))
        } else {
            None
        }
    }
}

/// A QP's address for the peer: what two ranks exchange before [`verbs::Qp::connect`].
/// Fixed-size plain data (32 bytes), so it travels in an all-to-all as is.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct QpEndpoint {
    /// QP number.
    pub qpn: u32,
    /// Starting packet sequence number of its send side (24 bits).
    pub psn: u32,
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// Port's active MTU as an `ibv_mtu` code (1 = 256 … 5 = 4096); 0 = unknown.
    pub mtu: u8,
    /// [`QpEndpoint::FLAG_GRH`].
    pub flags: u8,
    /// Port GID.
    pub gid: [u8; 16],
    /// Zero.
    pub reserved: [u8; 4],
}

impl QpEndpoint {
    /// The peer must be addressed with a GRH (RoCE).
    pub const FLAG_GRH: u8 = 1;
    /// A `sim` fabric endpoint: the GID bytes name a `/dev/shm` region and a link in it
    /// (see [`sim`]), not a port.
    pub const FLAG_SIM: u8 = 2;
}

/// A memory region's address for the peer's RDMA (24 bytes of plain data).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct MrEndpoint {
    /// Virtual address of the region's first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
    /// Zero.
    pub reserved: u32,
}

#[cfg(test)]
mod tests {
    use super::verbs::{DeviceInfo, Probe};
    use super::*;

    #[test]
    fn kind_parses_and_prints() {
        for k in [FabricKind::Verbs, FabricKind::Sim, FabricKind::Auto] {
            assert_eq!(k.to_string().parse::<FabricKind>().unwrap(), k);
        }
        assert_eq!(" SIM ".parse::<FabricKind>().unwrap(), FabricKind::Sim);
        let e = "rxe".parse::<FabricKind>().unwrap_err();
        assert!(matches!(&e, Error::ParseFabricKind { given } if given == "rxe"));
        assert!(e.to_string().contains("`verbs`, `sim` or `auto`"), "{e}");
    }

    fn dev(name: &str, mlx5: bool) -> DeviceInfo {
        DeviceInfo {
            name: name.into(),
            mlx5,
        }
    }

    #[test]
    fn auto_without_device_picks_sim_and_says_so() {
        let p = Probe::NoDevice {
            detail: "ibv_get_device_list: Function not implemented".into(),
        };
        let s = auto_decision(&p, None).unwrap();
        assert_eq!(s.kind, FabricKind::Sim);
        assert!(s.reason.contains("no RDMA device"), "{}", s.reason);
        assert!(
            s.reason.contains("Function not implemented"),
            "{}",
            s.reason
        );
        assert!(s.reason.contains("sim"), "{}", s.reason);
    }

    #[test]
    fn auto_with_devices() {
        let p = Probe::Devices(vec![dev("rxe0", false), dev("mlx5_1", true)]);
        let s = auto_decision(&p, None).unwrap();
        assert_eq!(s.kind, FabricKind::Verbs);
        assert!(s.reason.contains("mlx5_1"), "{}", s.reason);

        // A named device is used or refused, never replaced by sim.
        let e = auto_decision(&p, Some("rxe0")).unwrap_err();
        assert!(
            matches!(&e, Error::NotMlx5 { device } if device == "rxe0"),
            "{e:?}"
        );
        let none = Probe::NoDevice {
            detail: "ibv_get_device_list returned NULL".into(),
        };
        let e = auto_decision(&none, Some("mlx5_0"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no RDMA device") && e.contains("--device mlx5_0") && e.contains("NULL"),
            "{e}"
        );

        let only_rxe = Probe::Devices(vec![dev("rxe0", false)]);
        assert_eq!(
            auto_decision(&only_rxe, None).unwrap().kind,
            FabricKind::Sim
        );

        let e = auto_decision(&p, Some("mlx5_9")).unwrap_err();
        assert!(
            matches!(&e, Error::RdmaDeviceNotFound { name, available }
                if name == "mlx5_9" && available.len() == 2),
            "{e:?}"
        );
    }

    #[test]
    fn explicit_kinds_are_taken_as_asked() {
        for k in [FabricKind::Verbs, FabricKind::Sim] {
            let s = select(k, &FabricOptions::default()).unwrap();
            assert_eq!(s.kind, k);
            assert!(s.reason.contains(k.as_str()));
        }
    }

    #[test]
    fn sim_opens_a_region_that_goes_with_it() {
        let (f, sel) = open(FabricKind::Sim, &FabricOptions::default()).unwrap();
        assert_eq!(sel.kind, FabricKind::Sim);
        let Fabric::Sim(f) = f else { panic!("{f:?}") };
        let name = f.region_name().to_owned();
        assert!(std::path::Path::new(&format!("/dev/shm{name}")).exists());
        drop(f);
        assert!(!std::path::Path::new(&format!("/dev/shm{name}")).exists());
    }

    #[test]
    fn endpoint_records_are_fixed_size() {
        assert_eq!(std::mem::size_of::<QpEndpoint>(), 32);
        assert_eq!(std::mem::size_of::<MrEndpoint>(), 24);
    }
}
