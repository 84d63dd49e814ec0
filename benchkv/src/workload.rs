//! Access patterns: each client thread gets its own pregenerated sequence of `(rank, key,
//! is_read)` (docs/spec/benchkv.md#orchestration, step 2), replayed in a loop during the
//! run, so no random numbers are drawn on the measured path.
//!
//! Keys come from `0..keys`, uniformly or Zipf-distributed (key 0 hottest); the target
//! rank is drawn uniformly and independently, so every rank holds the whole key range and
//! a request is remote with probability `(ranks - 1) / ranks`.

pub use copyrpc_host::rng::Rng;

/// Key distribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// `P(key = k) ∝ 1 / (k + 1)^theta`.
    Zipf {
        /// The exponent, > 0.
        theta: f64,
    },
}

/// One request of a pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Target rank.
    pub rank: u32,
    /// Key in `0..keys`.
    pub key: u64,
    /// GET (true) or PUT.
    pub is_read: bool,
}

/// What a pattern is made of.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PatternSpec {
    /// Ranks to spread requests over.
    pub ranks: u32,
    /// Key space size.
    pub keys: u64,
    /// Key distribution.
    pub distribution: Distribution,
    /// Fraction of GETs, in `0..=1`.
    pub read_ratio: f64,
    /// Entries per pattern (replayed cyclically).
    pub len: usize,
}

/// Zipf over `1..=n` by rejection-inversion (Hörmann and Derflinger, 1996): O(1) setup
/// and O(1) expected time per sample for any `n`, unlike the zeta-sum method that needs
/// an O(n) pass.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    exponent: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    s: f64,
}

impl Zipf {
    /// Zipf over `1..=n` with exponent `exponent > 0`.
    pub fn new(n: u64, exponent: f64) -> Self {
        assert!(n >= 1 && exponent > 0.0, "checked by config validation");
        let mut z = Self {
            n: n as f64,
            exponent,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            s: 0.0,
        };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(z.n + 0.5);
        z.s = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// One sample in `1..=n`.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_integral_n + rng.next_f64() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.s || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    fn h(&self, x: f64) -> f64 {
        (-self.exponent * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.exponent) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.exponent)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// `ln(1 + x) / x`, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// Draws keys from a [`Distribution`].
#[derive(Clone, Debug)]
pub enum KeyGen {
    /// Uniform over `0..keys`.
    Uniform(u64),
    /// Zipf, shifted to `0..keys`.
    Zipf(Zipf),
}

impl KeyGen {
    /// A generator over `0..keys`.
    pub fn new(keys: u64, d: Distribution) -> Self {
        match d {
            Distribution::Uniform => Self::Uniform(keys),
            Distribution::Zipf { theta } => Self::Zipf(Zipf::new(keys, theta)),
        }
    }

    /// One key.
    pub fn key(&self, rng: &mut Rng) -> u64 {
        match self {
            Self::Uniform(n) => rng.below(*n),
            Self::Zipf(z) => z.sample(rng) - 1,
        }
    }
}

/// The seed of client `client` on rank `rank`: distinct per thread, reproducible per run.
pub fn client_seed(seed: u64, rank: u32, client: usize) -> u64 {
    seed ^ (u64::from(rank) << 40) ^ (client as u64).wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// A pattern of `spec.len` entries from `seed`.
pub fn generate(spec: &PatternSpec, seed: u64) -> Vec<Entry> {
    let mut rng = Rng::new(seed);
    let keys = KeyGen::new(spec.keys, spec.distribution);
    (0..spec.len)
        .map(|_| Entry {
            rank: rng.below(u64::from(spec.ranks)) as u32,
            key: keys.key(&mut rng),
            is_read: rng.next_f64() < spec.read_ratio,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(distribution: Distribution, keys: u64, len: usize) -> PatternSpec {
        PatternSpec {
            ranks: 4,
            keys,
            distribution,
            read_ratio: 0.7,
            len,
        }
    }

    /// Pearson's chi-square of `counts` against `expected` probabilities.
    fn chi_square(counts: &[u64], expected: &[f64]) -> f64 {
        let n: u64 = counts.iter().sum();
        counts
            .iter()
            .zip(expected)
            .map(|(&c, &p)| {
                let e = p * n as f64;
                (c as f64 - e).powi(2) / e
            })
            .sum()
    }

    #[test]
    fn uniform_keys_ranks_and_reads_fit_their_distributions() {
        let p = generate(&spec(Distribution::Uniform, 20, 200_000), 7);
        let mut keys = [0u64; 20];
        let mut ranks = [0u64; 4];
        let mut reads = 0u64;
        for e in &p {
            keys[e.key as usize] += 1;
            ranks[e.rank as usize] += 1;
            reads += u64::from(e.is_read);
        }
        // 19 degrees of freedom: P(chi2 > 43.8) = 0.001.
        let chi = chi_square(&keys, &[1.0 / 20.0; 20]);
        assert!(chi < 43.8, "uniform keys: chi2 {chi} {keys:?}");
        // 3 degrees of freedom: P(chi2 > 16.3) = 0.001.
        let chi = chi_square(&ranks, &[0.25; 4]);
        assert!(chi < 16.3, "ranks: chi2 {chi} {ranks:?}");
        let frac = reads as f64 / p.len() as f64;
        assert!((frac - 0.7).abs() < 0.005, "read fraction {frac}");
    }

    #[test]
    fn zipf_keys_fit_the_zipf_law() {
        for theta in [0.5, 0.99, 1.0, 1.2] {
            let n = 50u64;
            let p = generate(&spec(Distribution::Zipf { theta }, n, 300_000), 11);
            let mut counts = vec![0u64; n as usize];
            for e in &p {
                counts[e.key as usize] += 1;
            }
            let norm: f64 = (1..=n).map(|k| (k as f64).powf(-theta)).sum();
            let expected: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-theta) / norm).collect();
            // 49 degrees of freedom: P(chi2 > 85.4) = 0.001.
            let chi = chi_square(&counts, &expected);
            assert!(chi < 85.4, "theta {theta}: chi2 {chi}");
            assert!(
                counts.windows(2).take(5).all(|w| w[0] > w[1]),
                "theta {theta}: the head is not decreasing: {:?}",
                &counts[..6]
            );
        }
    }

    #[test]
    fn zipf_is_not_uniform_and_uniform_is_not_zipf() {
        // The chi-square tests above must be able to fail: cross-check them.
        let n = 50u64;
        let z = generate(&spec(Distribution::Zipf { theta: 0.99 }, n, 100_000), 3);
        let mut counts = vec![0u64; n as usize];
        for e in &z {
            counts[e.key as usize] += 1;
        }
        assert!(chi_square(&counts, &vec![1.0 / n as f64; n as usize]) > 1000.0);
    }

    #[test]
    fn zipf_covers_huge_key_spaces_without_a_setup_pass() {
        let z = Zipf::new(1 << 40, 0.99);
        let mut rng = Rng::new(1);
        let max = (0..10_000).map(|_| z.sample(&mut rng)).max().unwrap();
        assert!(max <= 1 << 40 && max > 1000, "max sample {max}");
    }

    #[test]
    fn patterns_are_reproducible_per_seed_and_differ_across_seeds() {
        let s = spec(Distribution::Uniform, 1000, 100);
        assert_eq!(generate(&s, 5), generate(&s, 5));
        assert_ne!(generate(&s, 5), generate(&s, 6));
        assert_ne!(client_seed(1, 0, 0), client_seed(1, 0, 1));
        assert_ne!(client_seed(1, 0, 0), client_seed(1, 1, 0));
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::new(9);
        assert!((0..10_000).all(|_| r.below(3) < 3));
        assert_eq!(r.below(1), 0);
    }
}
