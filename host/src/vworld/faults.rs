//! Faults injected at virtual instants (`--vfault`): a rank's NICs stall, or the link
//! between two ranks is cut.

use crate::units::parse_duration;

/// What happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Every NIC of `rank` does nothing for `for_ns` (packets to it wait in the link,
    /// its own sends wait in its SQs), then resumes.
    Stall {
        /// The stalled rank.
        rank: u32,
        /// How long, ns.
        for_ns: u64,
    },
    /// The link between ranks `a` and `b` drops every packet from now on, both ways:
    /// their endpoints fail after the transport's retries and every call on them is
    /// answered as unreachable.
    Cut {
        /// One end.
        a: u32,
        /// The other.
        b: u32,
    },
}

/// A fault and its virtual time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// When, ns of virtual time.
    pub at_ns: u64,
    /// What.
    pub kind: FaultKind,
}

fn time_ns(flag_item: &str, s: &str) -> Result<u64, String> {
    parse_duration(s)
        .map(|d| d.as_nanos() as u64)
        .map_err(|e| format!("--vfault {flag_item}: {e}"))
}

fn rank(item: &str, s: &str, ranks: u32) -> Result<u32, String> {
    let r: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("--vfault {item}: `{s}` is not a rank"))?;
    if r >= ranks {
        return Err(format!(
            "--vfault {item}: rank {r} does not exist (the world has {ranks})"
        ));
    }
    Ok(r)
}

impl Fault {
    /// `stall:RANK@TIME+DURATION` or `cut:A-B@TIME`, for a world of `ranks`.
    pub fn parse(item: &str, ranks: u32) -> Result<Self, String> {
        let usage = || {
            format!("--vfault {item}: expected stall:RANK@TIME+DURATION or cut:A-B@TIME (e.g. stall:3@2ms+1ms, cut:0-1@5ms)")
        };
        let (kind, rest) = item.split_once(':').ok_or_else(usage)?;
        let (who, when) = rest.split_once('@').ok_or_else(usage)?;
        match kind.trim() {
            "stall" => {
                let (at, dur) = when.split_once('+').ok_or_else(usage)?;
                Ok(Self {
                    at_ns: time_ns(item, at)?,
                    kind: FaultKind::Stall {
                        rank: rank(item, who, ranks)?,
                        for_ns: time_ns(item, dur)?,
                    },
                })
            }
            "cut" => {
                let (a, b) = who.split_once('-').ok_or_else(usage)?;
                let (a, b) = (rank(item, a, ranks)?, rank(item, b, ranks)?);
                if a == b {
                    return Err(format!("--vfault {item}: a link joins two different ranks"));
                }
                Ok(Self {
                    at_ns: time_ns(item, when)?,
                    kind: FaultKind::Cut { a, b },
                })
            }
            _ => Err(usage()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_bad_ones_are_named() {
        assert_eq!(
            Fault::parse("stall:3@2ms+1ms", 4).unwrap(),
            Fault {
                at_ns: 2_000_000,
                kind: FaultKind::Stall {
                    rank: 3,
                    for_ns: 1_000_000
                }
            }
        );
        assert_eq!(
            Fault::parse("cut:0-1@500us", 2).unwrap().kind,
            FaultKind::Cut { a: 0, b: 1 }
        );
        for bad in [
            "stall:4@1ms+1ms",
            "stall:1@1ms",
            "cut:1-1@1ms",
            "cut:0@1ms",
            "melt:0@1ms",
            "stall:x@1ms+1ms",
            "stall:0@-1ms+1ms",
            "",
        ] {
            assert!(
                Fault::parse(bad, 4).unwrap_err().contains("--vfault"),
                "{bad}"
            );
        }
    }
}
