//! Cost profiles: the CPU figures of a [`CostModel`] as a small text file, written by
//! `scripts/calibrate.sh` from the real code's measured instructions, read by
//! `--cost-profile FILE`. The built-in default is such a file (`default.cost`), with the
//! machine it was measured on named in it.
//!
//! ```text
//! copyrpc-cost-profile 1          the format and its version: the first line that is
//!                                 not blank or a `#` comment
//! machine = <text>                where the figures were measured
//! instructions_per_ns = <x>       that machine's rate, which turned instructions into ns
//! loop_ns = <x>                   ... one line for every figure of PROFILE_KEYS
//! ```
//!
//! Every figure must be there once, a finite number of at least 0; anything else is
//! refused naming the file, the line and the field.

use std::path::Path;

use super::model::CostModel;

/// The format line this build reads.
pub const PROFILE_HEADER: &str = "copyrpc-cost-profile 1";

/// The built-in profile.
pub const DEFAULT_PROFILE: &str = include_str!("default.cost");

/// The figures a profile gives, each in ns except `instructions_per_ns`.
pub const PROFILE_KEYS: [&str; 18] = [
    "instructions_per_ns",
    "loop_ns",
    "loop_client_ns",
    "loop_peer_ns",
    "item_ns",
    "post_ns",
    "cqe_ns",
    "poll_ns",
    "client_ns",
    "client_item_ns",
    "client_idle_ns",
    "client_slot_ns",
    "echo_pass_ns",
    "echo_peer_ns",
    "echo_item_ns",
    "echo_post_ns",
    "line_ns",
    "line_overlap",
];

/// A profile read and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// The machine the figures were measured on.
    pub machine: String,
    /// Its instructions per ns.
    pub instructions_per_ns: f64,
    /// The figures, as a cost model with no jitter and a clock ratio of 1.
    pub cost: CostModel,
}

/// Reads the profile at `path`; errors name `--cost-profile`, the file, and the line
/// and field at fault.
pub fn load_profile(path: &Path) -> Result<Profile, String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--cost-profile {name}: cannot read it: {e}"))?;
    parse_profile(&name, &text)
}

/// Parses profile `text`, called `name` in errors.
pub fn parse_profile(name: &str, text: &str) -> Result<Profile, String> {
    let err = |line: usize, why: String| format!("--cost-profile {name}: line {line}: {why}");
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let Some((n, first)) = lines.next() else {
        return Err(format!(
            "--cost-profile {name}: empty; a profile starts with `{PROFILE_HEADER}`"
        ));
    };
    if first != PROFILE_HEADER {
        let why = match first.strip_prefix("copyrpc-cost-profile ") {
            Some(v) => format!(
                "format version `{}`; this build reads `{PROFILE_HEADER}` (rerun \
                 scripts/calibrate.sh)",
                v.trim()
            ),
            None => format!("expected `{PROFILE_HEADER}` first, found `{first}`"),
        };
        return Err(err(n, why));
    }
    let mut machine: Option<String> = None;
    let mut values: [Option<f64>; PROFILE_KEYS.len()] = [None; PROFILE_KEYS.len()];
    for (n, line) in lines {
        let Some((k, v)) = line.split_once('=') else {
            return Err(err(n, format!("`{line}` is not `key = value`")));
        };
        let (k, v) = (k.trim(), v.trim());
        if k == "machine" {
            if machine.replace(v.to_string()).is_some() {
                return Err(err(n, "`machine` is given twice".into()));
            }
            continue;
        }
        let Some(i) = PROFILE_KEYS.iter().position(|&p| p == k) else {
            return Err(err(
                n,
                format!(
                    "unknown field `{k}` (known: machine, {})",
                    PROFILE_KEYS.join(", ")
                ),
            ));
        };
        let x: f64 = v
            .parse()
            .map_err(|_| err(n, format!("{k} = {v} is not a number")))?;
        let low = if k == "instructions_per_ns" {
            "more than 0"
        } else {
            "at least 0"
        };
        let ok = x.is_finite() && (x > 0.0 || (x == 0.0 && k != "instructions_per_ns"));
        if !ok || x > 1e9 {
            return Err(err(
                n,
                format!("{k} = {v} must be a finite number, {low} and at most 1e9"),
            ));
        }
        if values[i].replace(x).is_some() {
            return Err(err(n, format!("`{k}` is given twice")));
        }
    }
    let machine = machine.ok_or_else(|| format!("--cost-profile {name}: no `machine` line"))?;
    let mut got = [0.0; PROFILE_KEYS.len()];
    for (i, v) in values.iter().enumerate() {
        got[i] =
            v.ok_or_else(|| format!("--cost-profile {name}: no `{}` line", PROFILE_KEYS[i]))?;
    }
    let [ipn, loop_ns, loop_client_ns, loop_peer_ns, item_ns, post_ns, cqe_ns, poll_ns, client_ns, client_item_ns, client_idle_ns, client_slot_ns, echo_pass_ns, echo_peer_ns, echo_item_ns, echo_post_ns, line_ns, line_overlap] =
        got;
    Ok(Profile {
        machine,
        instructions_per_ns: ipn,
        cost: CostModel {
            loop_ns,
            loop_client_ns,
            loop_peer_ns,
            item_ns,
            post_ns,
            cqe_ns,
            poll_ns,
            client_ns,
            client_item_ns,
            client_idle_ns,
            client_slot_ns,
            echo_pass_ns,
            echo_peer_ns,
            echo_item_ns,
            echo_post_ns,
            line_ns,
            line_overlap,
            jitter: 0.0,
            clock_ratio: 1.0,
        },
    })
}

/// The built-in profile.
pub fn default_profile() -> Profile {
    parse_profile("(built in)", DEFAULT_PROFILE).expect("the built-in profile parses (tested)")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "# a comment\n\ncopyrpc-cost-profile 1\nmachine = test box, 2 cpus\n\
        instructions_per_ns = 2\nloop_ns = 100\nloop_client_ns = 5\nloop_peer_ns = 3\n\
        item_ns = 20\npost_ns = 30\ncqe_ns = 0\npoll_ns = 40\nclient_ns = 50\n\
        client_item_ns = 10\nclient_idle_ns = 60\nclient_slot_ns = 2\necho_pass_ns = 70\n\
        echo_peer_ns = 4\necho_item_ns = 15\necho_post_ns = 25\nline_ns = 0\n\
        line_overlap = 3\n";

    #[test]
    fn a_profile_gives_every_figure_and_the_builtin_one_parses() {
        let p = parse_profile("t", GOOD).unwrap();
        assert_eq!(p.machine, "test box, 2 cpus");
        assert_eq!(p.instructions_per_ns, 2.0);
        let c = p.cost;
        assert_eq!(
            [
                c.loop_ns,
                c.loop_client_ns,
                c.loop_peer_ns,
                c.item_ns,
                c.post_ns,
                c.cqe_ns,
                c.poll_ns,
                c.client_ns,
                c.client_item_ns,
                c.client_idle_ns,
                c.client_slot_ns,
                c.echo_pass_ns,
                c.echo_peer_ns,
                c.echo_item_ns,
                c.echo_post_ns,
                c.line_ns,
            ],
            [
                100.0, 5.0, 3.0, 20.0, 30.0, 0.0, 40.0, 50.0, 10.0, 60.0, 2.0, 70.0, 4.0, 15.0,
                25.0, 0.0
            ]
        );
        assert_eq!((c.jitter, c.clock_ratio, c.line_overlap), (0.0, 1.0, 3.0));
        assert_eq!((c.transfers(0), c.transfers(1), c.transfers(6)), (0, 0, 0));
        let lines = CostModel { line_ns: 60.0, ..c };
        assert_eq!(
            (lines.transfers(1), lines.transfers(2), lines.transfers(6)),
            (60, 60, 120)
        );
        let d = default_profile();
        assert!(!d.machine.is_empty());
        assert_eq!(d.cost, CostModel::default());
        // --cost keys apply over a profile, and the clock ratio divides every figure.
        let fast = CostModel::with_profile(c, "item_ns=40,clock_ratio=2").unwrap();
        assert_eq!(
            (fast.loop_ns, fast.item_ns, fast.echo_post_ns),
            (50.0, 20.0, 12.5)
        );
        assert_eq!(fast.clock_ratio, 2.0);
        assert!(CostModel::with_profile(c, "clock_ratio=0").is_err());
    }

    #[test]
    fn bad_profiles_are_refused_naming_the_file_line_and_field() {
        let with = |from: &str, to: &str| GOOD.replace(from, to);
        for (text, needle) in [
            (String::new(), "empty"),
            (
                with("copyrpc-cost-profile 1", "copyrpc-cost-profile 2"),
                "line 3: format version `2`",
            ),
            (
                with("copyrpc-cost-profile 1", "hello"),
                "line 3: expected `copyrpc-cost-profile 1`",
            ),
            (
                with("loop_ns = 100", "loop_ns = -1"),
                "line 6: loop_ns = -1 must be",
            ),
            (
                with("loop_ns = 100", "loop_ns = NaN"),
                "loop_ns = NaN must be",
            ),
            (
                with("loop_ns = 100", "loop_ns = inf"),
                "loop_ns = inf must be",
            ),
            (
                with("loop_ns = 100", "loop_ns = 1e10"),
                "loop_ns = 1e10 must be",
            ),
            (
                with("loop_ns = 100", "loop_ns = fast"),
                "loop_ns = fast is not a number",
            ),
            (
                with("loop_ns = 100", "loop_ns 100"),
                "line 6: `loop_ns 100` is not `key = value`",
            ),
            (with("loop_ns = 100\n", ""), "no `loop_ns` line"),
            (
                with("machine = test box, 2 cpus\n", ""),
                "no `machine` line",
            ),
            (
                with("line_ns = 0", "line_ns = 0\nline_ns = 1"),
                "`line_ns` is given twice",
            ),
            (
                with("line_ns = 0", "line_ns = 0\nspeed = 1"),
                "unknown field `speed`",
            ),
            (
                with("instructions_per_ns = 2", "instructions_per_ns = 0"),
                "more than 0",
            ),
        ] {
            let e = parse_profile("p.cost", &text).unwrap_err();
            assert!(
                e.starts_with("--cost-profile p.cost: ") && e.contains(needle),
                "{needle}: {e}"
            );
        }
        let e = load_profile(Path::new("/nonexistent/p.cost")).unwrap_err();
        assert!(
            e.contains("--cost-profile /nonexistent/p.cost: cannot read it"),
            "{e}"
        );
    }
}
