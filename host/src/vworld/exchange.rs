//! The endpoint exchange of N ranks on one thread.
//!
//! Over MPI every rank sends one record to each peer and receives one from each (an
//! all-to-all); the ranks of a virtual world live on one thread, so none can block in a
//! collective while the others have not reached it. The world instead collects every
//! rank's outgoing table first and then hands each rank its incoming column.

/// `sent[r][p]` is what rank `r` sends rank `p`; the result's `[p][r]` is what rank `p`
/// receives from rank `r`. Every table must have one entry per rank.
pub fn transpose<T: Copy>(sent: &[Vec<T>]) -> Vec<Vec<T>> {
    let n = sent.len();
    assert!(
        sent.iter().all(|t| t.len() == n),
        "every rank sends one record to each of the {n} ranks"
    );
    (0..n)
        .map(|p| sent.iter().map(|t| t[p]).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rank_receives_what_every_rank_sent_it() {
        let sent = vec![
            vec![(0, 0), (0, 1), (0, 2)],
            vec![(1, 0), (1, 1), (1, 2)],
            vec![(2, 0), (2, 1), (2, 2)],
        ];
        let got = transpose(&sent);
        for (p, column) in got.iter().enumerate() {
            assert_eq!(column, &[(0, p), (1, p), (2, p)]);
        }
    }
}
