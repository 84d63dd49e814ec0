//! What virtual time is made of: the CPU cost of each actor's turn ([`CostModel`]) and
//! its run-to-run variation ([`Jitter`]), the NIC between the ranks ([`NicProfile`]),
//! and the `key=value` lists a command line sets them with. Where each default comes
//! from is in docs/BENCHKV.md ("The virtual world's figures").

use crate::fabric::sim::{rnr_timer_ns, SimLinkConfig};
use crate::rng::Rng;

/// Nanoseconds of CPU per piece of a turn. A daemon loop costs `loop_ns +
/// loop_client_ns × clients it serves + loop_peer_ns × endpoints it holds + item_ns ×
/// items + cqe_ns × completions + post_ns × WQEs posted`; a step-A poll that the poll
/// budget repeats costs `poll_ns`; a client turn costs `client_idle_ns + client_slot_ns ×
/// requests outstanding`, and when it did something `client_ns + client_item_ns ×
/// (issued + answered)` more; an echo pass `echo_pass_ns + echo_peer_ns × peers +
/// echo_item_ns × (calls, responses and answers) + echo_post_ns × WQEs posted`. The figures come from a cost profile
/// (`profile.rs`: the built-in one, measured from the real code, or `--cost-profile`),
/// then `--cost` keys, and are then divided by `clock_ratio`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// A daemon loop's fixed cost: every phase's poll of shared lines.
    pub loop_ns: f64,
    /// A loop's look at one client's ipc ring.
    pub loop_client_ns: f64,
    /// A loop's look at one endpoint it holds.
    pub loop_peer_ns: f64,
    /// Per item a loop handles (a completion, a request taken, served or forwarded).
    pub item_ns: f64,
    /// Per WQE the loop posted (build, doorbell record, BlueFlame copy).
    pub post_ns: f64,
    /// Per completion (receive CQE: one arrived batch) the loop took, on top of its item:
    /// the CQE read, the SRQ repost, the batch parse.
    pub cqe_ns: f64,
    /// One extra transport poll in step A (docs/spec/poll-budget.md#poll-budget).
    pub poll_ns: f64,
    /// A client turn's fixed cost when it issued or collected something.
    pub client_ns: f64,
    /// Per request a client issued or collected.
    pub client_item_ns: f64,
    /// Every client turn: one look at its queues (so the period of an idle client's
    /// polling).
    pub client_idle_ns: f64,
    /// Per request outstanding, in every client turn (the look at its answer slot).
    pub client_slot_ns: f64,
    /// An echo pass's fixed cost.
    pub echo_pass_ns: f64,
    /// An echo pass's look at one peer.
    pub echo_peer_ns: f64,
    /// Per call, response or answer of an echo pass.
    pub echo_item_ns: f64,
    /// Per WQE an echo pass posted.
    pub echo_post_ns: f64,
    /// A turn's read of a cache line another core wrote last: the line's transfer
    /// (half the one-line ping-pong's round trip). A memory figure, not the core's:
    /// `clock_ratio` leaves it alone.
    pub line_ns: f64,
    /// How many such transfers a turn overlaps (independent loads in flight at once):
    /// `k` lines cost `line_ns × max(1, k / line_overlap)`.
    pub line_overlap: f64,
    /// Every turn's cost is drawn uniformly from `cost × (1 ± jitter)` (a seeded stream per
    /// actor, so runs stay deterministic): the run-to-run variation of real loops (cache
    /// misses, interrupts) that starts the dispersion
    /// (docs/spec/poll-budget.md#bistability) of the synchronised first wave. 0 makes every
    /// turn cost exactly its figure.
    pub jitter: f64,
    /// How much faster the modeled CPU runs the same instructions than the machine the
    /// profile was measured on; every figure above is already divided by it.
    pub clock_ratio: f64,
}

impl Default for CostModel {
    /// The built-in profile's figures (docs/BENCHKV.md, "The virtual world's figures").
    fn default() -> Self {
        super::profile::default_profile().cost
    }
}

/// One NIC and its link, in the units of a data sheet. A packet's one-way time is fixed
/// (`doorbell_ns + nic_ns + latency_ns + dma_ns`, plus its bytes at `gbps`); what a NIC
/// can send is bounded apart from it, by three spacings that only delay a packet when
/// the NIC or its QP is busy: `nic_packet_ns` between any two packets of the NIC (its
/// message rate), `qp_packet_ns` between two data packets of one QP, `ack_ns` between
/// two acknowledgements of one QP. Where each default comes from is in docs/BENCHKV.md.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NicProfile {
    /// Wire and switch, one way.
    pub latency_ns: f64,
    /// From the CPU's doorbell (the BlueFlame write crossing PCIe) to the NIC starting
    /// on the WQE.
    pub doorbell_ns: f64,
    /// The NICs' own processing of a packet, sending and receiving side together: a
    /// pipeline's latency, not a rate (many packets are in it at once).
    pub nic_ns: f64,
    /// The receiving NIC's PCIe write of the payload and the CQE.
    pub dma_ns: f64,
    /// Least time between two data packets of one QP: the per-QP packet rate (a NIC
    /// works through one QP's WQEs in order). An idle QP's packet leaves at once.
    pub qp_packet_ns: f64,
    /// Least time between two ACKs of one QP. A ConnectX builds ACKs in its receive
    /// pipeline, so they neither wait for the QP's data packets nor hold them.
    pub ack_ns: f64,
    /// Least time between two packets of the whole NIC, over all its QPs (data and
    /// ACKs): its message rate. A NIC is one daemon's device here (docs/BENCHKV.md).
    pub nic_packet_ns: f64,
    /// Link bandwidth, Gbit/s.
    pub gbps: f64,
    /// The transport's acknowledgement timeout; a cut link fails a QP after 8 of these
    /// (retry count 7).
    pub ack_timeout_ns: f64,
    /// The receiver's `min_rnr_timer`: how long a sender's QP stops after an RNR NAK
    /// (an incoming WRITE_IMM found the shared SRQ empty). Rounded up to the IBA
    /// encoding; the default is the verbs fabric's (code 12, 640 µs).
    pub rnr_timer_ns: f64,
}

impl Default for NicProfile {
    /// ConnectX-7 class (docs/BENCHKV.md, "The virtual world's figures").
    fn default() -> Self {
        Self {
            latency_ns: 300.0,
            doorbell_ns: 250.0,
            nic_ns: 500.0,
            dma_ns: 350.0,
            qp_packet_ns: 50.0,
            ack_ns: 0.0,
            nic_packet_ns: 3.0,
            gbps: 400.0,
            // IB local_ack_timeout 8: 4.096 us << 8.
            ack_timeout_ns: 1_048_576.0,
            rnr_timer_ns: 640_000.0,
        }
    }
}

impl CostModel {
    /// A daemon loop's fixed cost when it serves `clients` clients and holds `peers`
    /// endpoints.
    pub fn loop_fixed(&self, clients: usize, peers: usize) -> f64 {
        self.loop_ns + self.loop_client_ns * clients as f64 + self.loop_peer_ns * peers as f64
    }

    /// A whole daemon loop of fixed cost `fixed` that handled `items` and took `cqes`
    /// completions.
    pub fn daemon_loop(&self, fixed: f64, items: usize, cqes: u64) -> f64 {
        fixed + self.item_ns * items as f64 + self.cqe_ns * cqes as f64
    }

    /// A client turn that began with `outstanding` requests out and issued or collected
    /// `items` requests.
    pub fn client_turn(&self, outstanding: u64, items: usize) -> f64 {
        let look = self.client_idle_ns + self.client_slot_ns * outstanding as f64;
        if items > 0 {
            look + self.client_ns + self.client_item_ns * items as f64
        } else {
            look
        }
    }

    /// The CPU time of posting `wqes` WQEs.
    pub fn posts(&self, wqes: u32) -> f64 {
        self.post_ns * f64::from(wqes)
    }

    /// An echo pass over `peers` peers that handled `items` calls, responses and
    /// answers.
    pub fn echo_pass(&self, peers: usize, items: usize) -> f64 {
        self.echo_pass_ns + self.echo_peer_ns * peers as f64 + self.echo_item_ns * items as f64
    }

    /// A turn's reads of `lines` cache lines another core wrote last, in whole virtual ns
    /// (0 when it read none; never varied: a memory figure, not a CPU one).
    pub fn transfers(&self, lines: u64) -> u64 {
        if lines == 0 {
            0
        } else {
            (self.line_ns * (lines as f64 / self.line_overlap).max(1.0)).round() as u64
        }
    }

    /// The CPU time of an echo pass's `wqes` WQEs.
    pub fn echo_posts(&self, wqes: u32) -> f64 {
        self.echo_post_ns * f64::from(wqes)
    }
}

/// One actor's draws of [`CostModel::jitter`]: every cost it is charged is scaled by a
/// factor uniform in `1 ± jitter`, from a stream seeded by the run's seed and the
/// actor's id, so a run stays a function of its seed.
#[derive(Clone, Debug)]
pub struct Jitter {
    rng: Rng,
    fraction: f64,
}

impl Jitter {
    /// The stream of actor `id` in a run seeded with `seed`.
    pub fn for_actor(seed: u64, id: usize, fraction: f64) -> Self {
        Self {
            rng: Rng::new(seed ^ (id as u64).wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5157),
            fraction,
        }
    }

    /// `x` ns of cost, varied, as whole virtual nanoseconds (at least 1). With no jitter
    /// nothing is drawn.
    pub fn ns(&mut self, x: f64) -> u64 {
        if self.fraction == 0.0 {
            return ns(x);
        }
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ns(x * (1.0 + self.fraction * (2.0 * u - 1.0)))
    }
}

impl NicProfile {
    /// The sim device's link for this profile.
    pub fn link(&self) -> SimLinkConfig {
        SimLinkConfig {
            latency_ns: self.one_way_ns(),
            bandwidth_bytes_per_s: self.bytes_per_s(),
            packet_ns: spacing(self.qp_packet_ns),
            ack_ns: spacing(self.ack_ns),
        }
    }

    /// A packet's fixed one-way time besides its bytes (which the link serialises) and
    /// any wait for a busy NIC or QP, ns.
    pub fn one_way_ns(&self) -> u64 {
        (self.latency_ns + self.doorbell_ns + self.nic_ns + self.dma_ns).round() as u64
    }

    /// The NIC-wide spacing in whole ns (0: none).
    pub fn nic_spacing_ns(&self) -> u64 {
        spacing(self.nic_packet_ns)
    }

    /// The smallest IBA `min_rnr_timer` code whose wait is at least `rnr_timer_ns`
    /// (codes 1..=31 grow with the wait; 0 means the longest, 655 ms).
    pub fn rnr_timer_code(&self) -> u8 {
        let want = self.rnr_timer_ns.round() as u64;
        (1..=31u8).find(|&c| rnr_timer_ns(c) >= want).unwrap_or(0)
    }

    /// Link bandwidth in bytes per second.
    pub fn bytes_per_s(&self) -> u64 {
        (self.gbps * 1e9 / 8.0).round() as u64
    }
}

/// The largest figure any cost or NIC entry may have: a second (ns) or 10 Tbit/s.
const ABSURD: f64 = 1e9;
const ABSURD_GBPS: f64 = 10_000.0;

/// Applies `key=value,key=value` to `fields` (name, slot, max); every value must be a
/// finite number in `(0, max]`, or `[0, max]` for the keys in `zero_ok`. The error names
/// the flag, the key and why.
fn apply(
    flag: &str,
    text: &str,
    fields: &mut [(&str, &mut f64, f64)],
    zero_ok: &[&str],
) -> Result<(), String> {
    if text.trim().is_empty() {
        return Ok(());
    }
    let mut seen: Vec<&str> = Vec::new();
    for item in text.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(format!(
                "{flag} {text:?}: an empty item (write key=value,key=value with no empty one)"
            ));
        }
        let Some((k, v)) = item.split_once('=') else {
            return Err(format!("{flag}: `{item}` is not key=value"));
        };
        let (k, v) = (k.trim(), v.trim());
        if seen.contains(&k) {
            return Err(format!("{flag}: `{k}` is given twice"));
        }
        seen.push(k);
        let Some((_, slot, max)) = fields.iter_mut().find(|(name, _, _)| *name == k) else {
            let names: Vec<&str> = fields.iter().map(|(n, _, _)| *n).collect();
            return Err(format!(
                "{flag}: unknown key `{k}` (known: {})",
                names.join(", ")
            ));
        };
        let x: f64 = v
            .parse()
            .map_err(|_| format!("{flag}: {k}={v} is not a number"))?;
        let low_ok = x > 0.0 || (x == 0.0 && zero_ok.contains(&k));
        if !x.is_finite() || !low_ok || x > *max {
            let low = if zero_ok.contains(&k) {
                "at least 0"
            } else {
                "more than 0"
            };
            return Err(format!("{flag}: {k}={v} must be {low} and at most {max}"));
        }
        **slot = x;
    }
    Ok(())
}

impl CostModel {
    /// The built-in profile with `text` (`--cost`) applied.
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::with_profile(Self::default(), text)
    }

    /// `base` (a profile's figures) with `text` (`--cost`) applied, every figure then
    /// divided by the `clock_ratio` key (1 unless given).
    pub fn with_profile(base: Self, text: &str) -> Result<Self, String> {
        let mut c = base;
        c.clock_ratio = 1.0;
        apply(
            "--cost",
            text,
            &mut [
                ("jitter", &mut c.jitter, 0.9),
                ("clock_ratio", &mut c.clock_ratio, 1000.0),
                ("loop_ns", &mut c.loop_ns, ABSURD),
                ("loop_client_ns", &mut c.loop_client_ns, ABSURD),
                ("loop_peer_ns", &mut c.loop_peer_ns, ABSURD),
                ("item_ns", &mut c.item_ns, ABSURD),
                ("post_ns", &mut c.post_ns, ABSURD),
                ("cqe_ns", &mut c.cqe_ns, ABSURD),
                ("poll_ns", &mut c.poll_ns, ABSURD),
                ("client_ns", &mut c.client_ns, ABSURD),
                ("client_item_ns", &mut c.client_item_ns, ABSURD),
                ("client_idle_ns", &mut c.client_idle_ns, ABSURD),
                ("client_slot_ns", &mut c.client_slot_ns, ABSURD),
                ("echo_pass_ns", &mut c.echo_pass_ns, ABSURD),
                ("echo_peer_ns", &mut c.echo_peer_ns, ABSURD),
                ("echo_item_ns", &mut c.echo_item_ns, ABSURD),
                ("echo_post_ns", &mut c.echo_post_ns, ABSURD),
                ("line_ns", &mut c.line_ns, ABSURD),
                ("line_overlap", &mut c.line_overlap, 64.0),
            ],
            &[
                "jitter",
                "cqe_ns",
                "line_ns",
                "loop_client_ns",
                "loop_peer_ns",
                "client_slot_ns",
                "echo_peer_ns",
            ],
        )?;
        if c.clock_ratio < 0.001 {
            return Err(format!(
                "--cost: clock_ratio={} must be at least 0.001 and at most 1000",
                c.clock_ratio
            ));
        }
        if c.line_overlap < 1.0 {
            return Err(format!(
                "--cost: line_overlap={} must be at least 1 and at most 64",
                c.line_overlap
            ));
        }
        let r = c.clock_ratio;
        for f in [
            &mut c.loop_ns,
            &mut c.loop_client_ns,
            &mut c.loop_peer_ns,
            &mut c.item_ns,
            &mut c.post_ns,
            &mut c.cqe_ns,
            &mut c.poll_ns,
            &mut c.client_ns,
            &mut c.client_item_ns,
            &mut c.client_idle_ns,
            &mut c.client_slot_ns,
            &mut c.echo_pass_ns,
            &mut c.echo_peer_ns,
            &mut c.echo_item_ns,
            &mut c.echo_post_ns,
        ] {
            *f /= r;
        }
        Ok(c)
    }

    /// `key=value` list of every figure, for the report.
    pub fn describe(&self) -> String {
        format!(
            "loop_ns={},loop_client_ns={},loop_peer_ns={},item_ns={},post_ns={},cqe_ns={},poll_ns={},client_ns={},client_item_ns={},client_idle_ns={},client_slot_ns={},echo_pass_ns={},echo_peer_ns={},echo_item_ns={},echo_post_ns={},line_ns={},line_overlap={},jitter={},clock_ratio={}",
            self.loop_ns,
            self.loop_client_ns,
            self.loop_peer_ns,
            self.item_ns,
            self.post_ns,
            self.cqe_ns,
            self.poll_ns,
            self.client_ns,
            self.client_item_ns,
            self.client_idle_ns,
            self.client_slot_ns,
            self.echo_pass_ns,
            self.echo_peer_ns,
            self.echo_item_ns,
            self.echo_post_ns,
            self.line_ns,
            self.line_overlap,
            self.jitter,
            self.clock_ratio
        )
    }
}

/// The key the NIC's one packet time had before it was split: what replaces it.
const SPLIT_WQE_NS: &str = "--nic: wqe_ns was split (it was at once a QP's packet rate, an \
     ACK's cost and a latency): qp_packet_ns (least time between two data packets of a QP), \
     ack_ns (between two ACKs of a QP), nic_packet_ns (between two packets of the NIC) and \
     nic_ns (the NIC's processing latency); the old wqe_ns=X was close to \
     qp_packet_ns=X,nic_ns=X with every ACK waiting X on its QP's data";

impl NicProfile {
    /// The defaults with `text` (`--nic`) applied.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text
            .split(',')
            .any(|i| i.split_once('=').map_or(i, |(k, _)| k).trim() == "wqe_ns")
        {
            return Err(SPLIT_WQE_NS.to_string());
        }
        let mut n = Self::default();
        apply(
            "--nic",
            text,
            &mut [
                ("latency_ns", &mut n.latency_ns, ABSURD),
                ("doorbell_ns", &mut n.doorbell_ns, ABSURD),
                ("nic_ns", &mut n.nic_ns, ABSURD),
                ("dma_ns", &mut n.dma_ns, ABSURD),
                ("qp_packet_ns", &mut n.qp_packet_ns, ABSURD),
                ("ack_ns", &mut n.ack_ns, ABSURD),
                ("nic_packet_ns", &mut n.nic_packet_ns, ABSURD),
                ("gbps", &mut n.gbps, ABSURD_GBPS),
                ("ack_timeout_ns", &mut n.ack_timeout_ns, ABSURD * 10.0),
                ("rnr_timer_ns", &mut n.rnr_timer_ns, 655_360_000.0),
            ],
            &[
                "latency_ns",
                "doorbell_ns",
                "nic_ns",
                "dma_ns",
                "qp_packet_ns",
                "ack_ns",
                "nic_packet_ns",
            ],
        )?;
        // The link holds bandwidth in whole bytes per second, and 0 there means no limit:
        // a figure that rounds to it would run at full speed instead of refusing.
        if n.bytes_per_s() == 0 {
            return Err(format!(
                "--nic: gbps={} is below one byte per second (at least {:e})",
                n.gbps, 8e-9
            ));
        }
        Ok(n)
    }

    /// `key=value` list of every figure, for the report.
    pub fn describe(&self) -> String {
        format!(
            "latency_ns={},doorbell_ns={},nic_ns={},dma_ns={},qp_packet_ns={},ack_ns={},nic_packet_ns={},gbps={},ack_timeout_ns={},rnr_timer_ns={}",
            self.latency_ns,
            self.doorbell_ns,
            self.nic_ns,
            self.dma_ns,
            self.qp_packet_ns,
            self.ack_ns,
            self.nic_packet_ns,
            self.gbps,
            self.ack_timeout_ns,
            rnr_timer_ns(self.rnr_timer_code())
        )
    }
}

/// A spacing in whole ns; 0 stays 0 (no limit), anything above rounds to at least 1.
fn spacing(x: f64) -> u64 {
    if x > 0.0 {
        ns(x)
    } else {
        0
    }
}

/// Virtual nanoseconds, rounded, never 0 (a turn that costs nothing would let the
/// scheduler pick the same actor forever).
pub fn ns(x: f64) -> u64 {
    (x.round() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_override_defaults_and_bad_values_are_named() {
        let c = CostModel::parse("loop_ns=700, item_ns=0.5").unwrap();
        assert_eq!((c.loop_ns, c.item_ns), (700.0, 0.5));
        assert_eq!(c.post_ns, CostModel::default().post_ns);
        let n = NicProfile::parse("gbps=200,latency_ns=1000").unwrap();
        assert_eq!(n.bytes_per_s(), 25_000_000_000);
        assert_eq!(n.one_way_ns(), 1000 + 250 + 500 + 350);
        for (bad, needle) in [
            ("loop_ns=0", "more than 0"),
            ("loop_ns=-5", "more than 0"),
            ("loop_ns=nan", "more than 0"),
            ("loop_ns=inf", "more than 0"),
            ("loop_ns=1e12", "at most"),
            ("loop_ns=abc", "not a number"),
            ("loop_ns", "key=value"),
            ("speed=1", "unknown key `speed`"),
        ] {
            let e = CostModel::parse(bad).unwrap_err();
            assert!(e.contains("--cost") && e.contains(needle), "{bad}: {e}");
        }
        assert!(NicProfile::parse("gbps=1e6").unwrap_err().contains("gbps"));
        // The old single packet time is refused with what replaced it.
        for old in ["wqe_ns=7000", "gbps=100, wqe_ns = 1", "wqe_ns"] {
            let e = NicProfile::parse(old).unwrap_err();
            assert!(
                e.contains("wqe_ns was split") && e.contains("qp_packet_ns"),
                "{e}"
            );
        }
        // A spacing of 0 is no limit; the others round to whole ns, at least 1.
        let z = NicProfile::parse("qp_packet_ns=0,ack_ns=0.2,nic_packet_ns=0").unwrap();
        assert_eq!((z.link().packet_ns, z.link().ack_ns), (0, 1));
        assert_eq!(z.nic_spacing_ns(), 0);
        assert!(NicProfile::parse("ack_ns=-1")
            .unwrap_err()
            .contains("at least 0"));
        // A bandwidth that rounds to 0 B/s (the link's "no limit") is refused.
        assert!(NicProfile::parse("gbps=1e-9")
            .unwrap_err()
            .contains("below one byte per second"));
        assert_eq!(NicProfile::parse("gbps=8e-9").unwrap().bytes_per_s(), 1);
        // Empty items and keys given twice are refused, not skipped or overridden.
        for bad in [
            ",,,",
            "loop_ns=700,,item_ns=2",
            "loop_ns=700,loop_ns=800",
            ",",
        ] {
            assert!(
                CostModel::parse(bad).unwrap_err().contains("--cost"),
                "{bad}"
            );
        }
        assert!(CostModel::parse("loop_ns=700,loop_ns=800")
            .unwrap_err()
            .contains("twice"));
        assert_eq!(CostModel::parse("  ").unwrap(), CostModel::default());
        assert_eq!(ns(0.2), 1);
        assert_eq!(NicProfile::default().rnr_timer_code(), 12);
        assert_eq!(
            NicProfile::parse("rnr_timer_ns=15000")
                .unwrap()
                .rnr_timer_code(),
            2
        );
        assert_eq!(
            NicProfile::parse("rnr_timer_ns=10")
                .unwrap()
                .rnr_timer_code(),
            1
        );
        assert_eq!(CostModel::parse("jitter=0").unwrap().jitter, 0.0);
        assert!(CostModel::parse("jitter=0.95")
            .unwrap_err()
            .contains("at most 0.9"));
        assert!(CostModel::parse("loop_ns=0")
            .unwrap_err()
            .contains("more than 0"));
    }
}
