//! The "outstanding time series" (docs/spec/poll-budget.md#loop-metrics) of one poll loop in the virtual world: the
//! requests it holds, its completions per loop, the answers collected, its poll budget,
//! sampled at fixed virtual intervals; and the SVG that `--plot` draws of them.

use std::fmt::Write as _;

/// One sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Virtual time, ns.
    pub t_ns: u64,
    /// Requests daemon#0 held (awaiting an answer or parked).
    pub outstanding: u64,
    /// Completions per loop since the previous sample.
    pub cqe_batch: f64,
    /// Answers the rank's clients collected since the previous sample, per µs.
    pub rate_per_us: f64,
    /// Daemon#0's poll budget in force.
    pub budget: u32,
}

/// Samples taken every `every_ns`.
#[derive(Clone, Debug)]
pub struct Series {
    every_ns: u64,
    next_ns: u64,
    last: (u64, u64, u64, u64),
    /// The samples, in time order.
    pub samples: Vec<Sample>,
}

impl Series {
    /// An empty series sampled every `every_ns`.
    pub fn new(every_ns: u64) -> Self {
        Self {
            every_ns: every_ns.max(1),
            next_ns: every_ns.max(1),
            last: (0, 0, 0, 0),
            samples: Vec::new(),
        }
    }

    /// Offers the state at `t_ns`: `(loops, cqes)` of daemon#0, its outstanding count,
    /// the rank's answers so far, daemon#0's poll budget. Records a sample when one is
    /// due.
    pub fn offer(
        &mut self,
        t_ns: u64,
        loops: u64,
        cqes: u64,
        outstanding: u64,
        answers: u64,
        budget: u32,
    ) {
        if t_ns < self.next_ns {
            return;
        }
        let (t0, l0, c0, a0) = self.last;
        let dl = loops - l0;
        self.samples.push(Sample {
            t_ns,
            outstanding,
            cqe_batch: if dl == 0 {
                0.0
            } else {
                (cqes - c0) as f64 / dl as f64
            },
            rate_per_us: (answers - a0) as f64 * 1e3 / (t_ns - t0).max(1) as f64,
            budget,
        });
        self.last = (t_ns, loops, cqes, answers);
        self.next_ns = t_ns - t_ns % self.every_ns + self.every_ns;
    }

    /// Four stacked line charts over virtual time.
    pub fn svg(&self, title: &str) -> String {
        let (w, h, pad, gap) = (720.0, 170.0, 56.0, 24.0);
        let charts: [Chart; 4] = [
            (
                "outstanding (daemon#0 of rank 0)",
                |s| s.outstanding as f64,
                "#4e79a7",
            ),
            ("CQE batch mean per loop", |s| s.cqe_batch, "#e15759"),
            ("answers per µs (rank 0)", |s| s.rate_per_us, "#59a14f"),
            (
                "poll budget u (daemon#0)",
                |s| f64::from(s.budget),
                "#f28e2b",
            ),
        ];
        let total_h = 40.0 + charts.len() as f64 * (h + gap);
        let mut o = String::new();
        let _ = writeln!(
            o,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{total_h}" font-family="sans-serif">"#
        );
        let _ = writeln!(
            o,
            r#"<text x="{}" y="22" font-size="14" text-anchor="middle">{}</text>"#,
            w / 2.0,
            escape(title)
        );
        let t_max = self.samples.last().map_or(1, |s| s.t_ns).max(1) as f64;
        for (i, (name, f, colour)) in charts.iter().enumerate() {
            let top = 40.0 + i as f64 * (h + gap);
            let bottom = top + h - 20.0;
            let y_max = self.samples.iter().map(f).fold(0.0f64, f64::max).max(1e-9);
            let _ = writeln!(
                o,
                r##"<text x="{pad}" y="{}" font-size="12">{name} (max {y_max:.1})</text><line x1="{pad}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="#333"/>"##,
                top + 10.0,
                w - 16.0
            );
            let mut points = String::new();
            for s in &self.samples {
                let x = pad + (w - pad - 16.0) * s.t_ns as f64 / t_max;
                let y = bottom - (h - 40.0) * f(s) / y_max;
                let _ = write!(points, "{x:.1},{y:.1} ");
            }
            let _ = writeln!(
                o,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{points}"/>"#
            );
            let _ = writeln!(
                o,
                r#"<text x="{}" y="{}" font-size="10" text-anchor="end">{:.0} µs</text>"#,
                w - 16.0,
                bottom + 14.0,
                t_max / 1e3
            );
        }
        o.push_str("</svg>\n");
        o
    }
}

/// A chart: its title, what it plots of a sample, its colour.
type Chart = (&'static str, fn(&Sample) -> f64, &'static str);

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_taken_once_per_interval_with_deltas() {
        let mut s = Series::new(100);
        s.offer(50, 5, 5, 3, 10, 0); // not due
        s.offer(120, 10, 40, 7, 20, 0);
        s.offer(150, 12, 44, 8, 25, 0); // not due: next at 200
        s.offer(230, 20, 40 + 16 * 2, 9, 60, 4);
        assert_eq!(s.samples.len(), 2);
        assert_eq!(s.samples[0].cqe_batch, 4.0);
        assert_eq!(s.samples[1].cqe_batch, 3.2);
        assert_eq!((s.samples[1].outstanding, s.samples[1].budget), (9, 4));
        assert!((s.samples[1].rate_per_us - 40.0 * 1e3 / 110.0).abs() < 1e-9);
        assert!(s.svg("x").contains("<polyline"));
    }
}
