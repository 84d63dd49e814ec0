//! Latency histogram: fixed log-linear buckets, so per-thread histograms merge by adding
//! counts, and every rank's can be gathered as one plain array.
//!
//! Values below 32 ns have a bucket each; above, every power of two is cut into 16 equal
//! buckets, so a reported percentile is within 1/16 (6.25 %) of the true value. 976
//! buckets cover all of `u64`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Buckets below this value are exact.
const LINEAR: u64 = 32;
/// Sub-buckets per power of two.
const SUB_BITS: u32 = 4;
/// Number of buckets.
pub const BUCKETS: usize = LINEAR as usize + (64 - 5) * (1 << SUB_BITS);

/// Counts of latencies (nanoseconds) per bucket.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Histogram {
    counts: [u64; BUCKETS],
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

fn bucket(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= 5
    let m = (v >> (e - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    LINEAR as usize + ((e - 5) as usize) * (1 << SUB_BITS) + m as usize
}

/// `[low, high]` of bucket `i`.
fn bounds(i: usize) -> (u64, u64) {
    if i < LINEAR as usize {
        return (i as u64, i as u64);
    }
    let j = i - LINEAR as usize;
    let e = (j >> SUB_BITS) as u32 + 5;
    let m = (j & ((1 << SUB_BITS) - 1)) as u64;
    let width = 1u64 << (e - SUB_BITS);
    let low = (1u64 << e) + m * width;
    (low, low + (width - 1))
}

impl Histogram {
    /// Empty.
    pub fn new() -> Self {
        Self {
            counts: [0; BUCKETS],
        }
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[bucket(v)] += 1;
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &Self) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The value below which a fraction `q` (in `0..=1`) of the recorded values lie: the
    /// midpoint of the bucket holding the `ceil(q * count)`-th value. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = bounds(i);
                return Some(lo + (hi - lo) / 2);
            }
        }
        unreachable!("rank <= count")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_u64_in_order() {
        let mut prev_high = None;
        for i in 0..BUCKETS {
            let (lo, hi) = bounds(i);
            assert!(lo <= hi);
            if let Some(p) = prev_high {
                assert_eq!(lo, p + 1, "bucket {i} leaves a gap");
            }
            assert_eq!(bucket(lo), i);
            assert_eq!(bucket(hi), i);
            prev_high = Some(hi);
        }
        assert_eq!(prev_high, Some(u64::MAX));
    }

    #[test]
    fn quantiles_are_within_a_sixteenth() {
        let mut h = Histogram::new();
        for v in 1..=10_000u64 {
            h.record(v * 100);
        }
        for (q, exact) in [(0.5, 500_000.0), (0.99, 990_000.0), (0.999, 999_000.0)] {
            let got = h.quantile(q).unwrap() as f64;
            assert!(
                (got - exact).abs() / exact <= 1.0 / 16.0,
                "q{q}: {got} vs {exact}"
            );
        }
        assert_eq!(Histogram::new().quantile(0.5), None);
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        a.record(5);
        b.record(5);
        b.record(1_000_000);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.quantile(0.5), Some(5));
        assert!(a.quantile(1.0).unwrap() > 900_000);
    }
}
