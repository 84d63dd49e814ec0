//! `--plot FILE.svg`: requests/s per run (one bar per run, stacked by rank) and, with
//! `--metrics`, the CQE-batch histogram summed over every daemon of every rank.
//!
//! Hand-written SVG rather than a plotting crate: two bar charts are a few dozen lines,
//! and the file stays small, diffable and viewable in any browser.

use std::fmt::Write as _;

use crate::metrics::CQE_BUCKET_LABELS;
use crate::report::Report;

const W: f64 = 640.0;
const H: f64 = 280.0;
const MARGIN: f64 = 56.0;
/// Fill colours by rank (cycled).
const COLOURS: [&str; 6] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
];

/// Escapes text for an SVG text node.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One bar chart at vertical offset `y0`: `bars[i]` is a stack of `(value, colour)`.
fn chart(o: &mut String, y0: f64, title: &str, labels: &[String], bars: &[Vec<(f64, &str)>]) {
    let max = bars
        .iter()
        .map(|b| b.iter().map(|(v, _)| v).sum::<f64>())
        .fold(0.0, f64::max)
        .max(1.0);
    let (x0, plot_w, plot_h) = (MARGIN, W - 2.0 * MARGIN, H - 2.0 * MARGIN);
    let base = y0 + H - MARGIN;
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" font-size="14" text-anchor="middle">{}</text>"#,
        W / 2.0,
        y0 + 24.0,
        esc(title)
    );
    let _ = writeln!(
        o,
        r##"<line x1="{x0}" y1="{base}" x2="{}" y2="{base}" stroke="#333"/>"##,
        x0 + plot_w
    );
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>"#,
        x0 - 4.0,
        base - plot_h + 4.0,
        esc(&format_value(max))
    );
    let slot = plot_w / bars.len().max(1) as f64;
    for (i, (stack, label)) in bars.iter().zip(labels).enumerate() {
        let x = x0 + i as f64 * slot + slot * 0.15;
        let mut y = base;
        for (v, colour) in stack {
            let h = v / max * plot_h;
            y -= h;
            let _ = writeln!(
                o,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{colour}"><title>{}</title></rect>"#,
                slot * 0.7,
                esc(&format_value(*v))
            );
        }
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
            x + slot * 0.35,
            base + 16.0,
            esc(label)
        );
    }
}

fn format_value(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// The SVG document for `r`.
pub fn svg(r: &Report) -> String {
    let cqe: Option<[u64; 5]> = r.metrics.as_ref().map(|m| {
        let mut sum = [0u64; 5];
        for d in m.iter().flatten() {
            for (a, b) in sum.iter_mut().zip(d.cqe_batches) {
                *a += b;
            }
        }
        sum
    });
    let height = if cqe.is_some() { 2.0 * H } else { H };
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" font-family="sans-serif">"#
    );
    let labels: Vec<String> = (1..=r.runs.len()).map(|i| format!("run {i}")).collect();
    let bars: Vec<Vec<(f64, &str)>> = r
        .runs
        .iter()
        .map(|run| {
            run.ranks
                .iter()
                .enumerate()
                .map(|(rank, rec)| (rec.rps(), COLOURS[rank % COLOURS.len()]))
                .collect()
        })
        .collect();
    chart(
        &mut o,
        0.0,
        "requests/s per run (stacked by rank)",
        &labels,
        &bars,
    );
    if let Some(c) = cqe {
        let labels: Vec<String> = CQE_BUCKET_LABELS.iter().map(|s| s.to_string()).collect();
        let bars: Vec<Vec<(f64, &str)>> = c.iter().map(|&v| vec![(v as f64, COLOURS[0])]).collect();
        chart(
            &mut o,
            H,
            "transport polls by completions returned (CQE batch)",
            &labels,
            &bars,
        );
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::Histogram;
    use crate::metrics::DaemonMetrics;
    use crate::report::{RankSummary, RunRecord, RunResult};

    fn report(metrics: bool) -> Report {
        let rec = |c| RunRecord {
            completed: c,
            elapsed_ns: 1_000_000_000,
        };
        Report {
            setup: vec![],
            runs: vec![
                RunResult {
                    ranks: vec![rec(100), rec(300)],
                    hists: vec![Histogram::new(); 2],
                },
                RunResult {
                    ranks: vec![rec(200), rec(200)],
                    hists: vec![Histogram::new(); 2],
                },
            ],
            ranks: vec![RankSummary::default(); 2],
            metrics: metrics.then(|| {
                let m = DaemonMetrics {
                    cqe_batches: [5, 4, 3, 2, 1],
                    ..Default::default()
                };
                vec![vec![m]; 2]
            }),
        }
    }

    #[test]
    fn one_bar_per_rank_and_run_and_one_per_cqe_bucket() {
        let s = svg(&report(true));
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<rect").count(), 2 * 2 + 5);
        assert!(s.contains(">run 2<") && s.contains(">&gt;100<"));
        // The tallest stack (400 req/s) sets the scale.
        assert!(s.contains(">400<"), "{s}");
        let plain = svg(&report(false));
        assert_eq!(
            plain.matches("<rect").count(),
            4,
            "no CQE chart without metrics"
        );
    }
}
