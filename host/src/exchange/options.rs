//! Options every rank of one job must share. `mpirun A : B` (MPMD) can start ranks with
//! different command lines; ranks that disagree on their workload would run different
//! things against each other, or wait for calls the other never makes. A tool lists its
//! shared options as `(flag, value)`, all-gathers [`option_hashes`] and reports
//! [`first_difference`].

/// A hash of each option's value, in order: what ranks all-gather to compare. FNV-1a, the
/// same in every process and build (std's hasher is seeded per process).
pub fn option_hashes<const N: usize>(opts: &[(&'static str, String); N]) -> [u64; N] {
    opts.each_ref().map(|(_, v)| {
        v.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    })
}

/// The first rank in `all` (every rank's [`option_hashes`], by rank) started with
/// another value of one of `opts` (this rank's options) than this rank, as the error
/// every rank reports: the rank, the option and this rank's value.
pub fn first_difference<const N: usize>(
    opts: &[(&'static str, String); N],
    all: &[[u64; N]],
) -> Option<String> {
    let mine = option_hashes(opts);
    all.iter().enumerate().find_map(|(rank, theirs)| {
        let k = (0..N).find(|&k| theirs[k] != mine[k])?;
        let (flag, value) = &opts[k];
        Some(format!(
            "rank {rank} was started with another {flag} than this rank's ({value}): every \
             rank of a job must get the same {}; an `mpirun A : B` gave the ranks different \
             command lines",
            opts.iter().map(|(f, _)| *f).collect::<Vec<_>>().join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_rank_and_option_that_differ_are_named() {
        let mine = [("--a", "1".to_string()), ("--b", "x".to_string())];
        let other = [("--a", "1".to_string()), ("--b", "y".to_string())];
        let h = option_hashes(&mine);
        assert_eq!(first_difference(&mine, &[h, h]), None);
        let why = first_difference(&mine, &[h, option_hashes(&other)]).expect("a difference");
        assert!(why.starts_with("rank 1 was started with another --b than this rank's (x)"));
    }
}
