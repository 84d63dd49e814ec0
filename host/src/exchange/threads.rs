//! The exchange over threads: ranks are threads of one process sharing a board.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{decode, encode, Record, ReduceOp};
use crate::error::{Error, Result};

/// One rank of a thread group made by [`ThreadExchange::group`]; move each into its
/// thread.
///
/// Same methods as `MpiExchange` (feature `mpi`). Collectives block until every
/// rank has called them. If a rank drops its handle (returns early, or panics) while the
/// others are waiting or call another collective, they get
/// [`Error::ExchangePeerGone`] instead of waiting forever. A rank that is alive but never
/// arrives (hung, or waiting on something else) is bounded too: after
/// [`ThreadExchange::timeout`] the waiting ranks get [`Error::ExchangeTimeout`] naming
/// the ranks that did not arrive, and the group is broken for good.
#[derive(Debug)]
pub struct ThreadExchange {
    rank: usize,
    board: Arc<Board>,
}

#[derive(Debug)]
struct Board {
    size: usize,
    state: Mutex<State>,
    turn: Condvar,
    timeout: Duration,
}

/// The default bound on one collective of a thread group.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug)]
struct State {
    /// Ranks arrived at the current barrier.
    arrived: usize,
    /// Which ranks those are.
    here: Vec<bool>,
    /// Set when a collective outlived the timeout: the ranks that had not arrived.
    broken: Option<Vec<usize>>,
    /// Barriers completed; a waiter leaves when it changes.
    generation: u64,
    /// The first rank that left, and whether it panicked.
    gone: Option<(usize, bool)>,
    /// Each rank's contribution to the current collective.
    slots: Vec<Vec<u8>>,
}

impl ThreadExchange {
    /// A group of `size` ranks (`size >= 1`), handle `i` being rank `i`, whose
    /// collectives wait at most [`DEFAULT_TIMEOUT`].
    pub fn group(size: usize) -> Vec<Self> {
        Self::group_with_timeout(size, DEFAULT_TIMEOUT)
    }

    /// [`group`](Self::group) with collectives bounded by `timeout`.
    pub fn group_with_timeout(size: usize, timeout: Duration) -> Vec<Self> {
        assert!(size >= 1, "a thread exchange needs at least one rank");
        let board = Arc::new(Board {
            size,
            timeout,
            state: Mutex::new(State {
                arrived: 0,
                here: vec![false; size],
                broken: None,
                generation: 0,
                gone: None,
                slots: vec![Vec::new(); size],
            }),
            turn: Condvar::new(),
        });
        (0..size)
            .map(|rank| Self {
                rank,
                board: board.clone(),
            })
            .collect()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How long a collective waits for the other ranks.
    pub fn timeout(&self) -> Duration {
        self.board.timeout
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.board.size
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking rank never holds the lock in a half-updated state that matters:
        // `gone` is what tells the others, so a poisoned lock is still usable.
        self.board
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn gone_error((rank, panicked): (usize, bool)) -> Error {
        Error::ExchangePeerGone { rank, panicked }
    }

    /// Waits for every rank (at most [`timeout`](Self::timeout)).
    pub fn barrier(&self) -> Result<()> {
        let mut s = self.lock();
        if let Some(missing) = &s.broken {
            return Err(self.timeout_error(missing.clone()));
        }
        if let Some(g) = s.gone {
            return Err(Self::gone_error(g));
        }
        let generation = s.generation;
        s.arrived += 1;
        s.here[self.rank] = true;
        if s.arrived == self.board.size {
            s.arrived = 0;
            s.here.iter_mut().for_each(|h| *h = false);
            s.generation += 1;
            self.board.turn.notify_all();
            return Ok(());
        }
        let deadline = Instant::now() + self.board.timeout;
        while s.generation == generation {
            // The timeout first: the rank that timed out leaves the group right after,
            // and that departure is a consequence, not the cause.
            if let Some(missing) = &s.broken {
                return Err(self.timeout_error(missing.clone()));
            }
            if let Some(g) = s.gone {
                return Err(Self::gone_error(g));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let missing: Vec<usize> = (0..self.board.size).filter(|&r| !s.here[r]).collect();
                s.broken = Some(missing.clone());
                self.board.turn.notify_all();
                return Err(self.timeout_error(missing));
            }
            s = self
                .board
                .turn
                .wait_timeout(s, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        Ok(())
    }

    fn timeout_error(&self, missing: Vec<usize>) -> Error {
        Error::ExchangeTimeout {
            rank: self.rank,
            waited: self.board.timeout,
            missing,
        }
    }

    /// Posts `bytes` as this rank's slot, waits for all, lets `read` look at every slot,
    /// and waits again so no slot is overwritten before everyone has read.
    fn collective<R>(&self, bytes: Vec<u8>, read: impl FnOnce(&[Vec<u8>]) -> R) -> Result<R> {
        self.lock().slots[self.rank] = bytes;
        self.barrier()?;
        let out = read(&self.lock().slots);
        self.barrier()?;
        Ok(out)
    }

    /// Sends `records[i]` to rank `i`; returns what each rank sent to this one, in rank
    /// order.
    pub fn all_to_all<T: Record>(&self, records: &[T]) -> Result<Vec<T>> {
        let n = self.size();
        let send = encode("all_to_all", records, n)?;
        let sz = std::mem::size_of::<T>();
        let me = self.rank;
        let recv = self.collective(send, |slots| {
            slots
                .iter()
                .flat_map(|s| s[me * sz..(me + 1) * sz].iter().copied())
                .collect::<Vec<u8>>()
        })?;
        Ok(decode(&recv, n))
    }

    /// Every rank's `record`, in rank order.
    pub fn all_gather<T: Record>(&self, record: &T) -> Result<Vec<T>> {
        let n = self.size();
        let recv = self.collective(record.as_bytes().to_vec(), |slots| slots.concat())?;
        Ok(decode(&recv, n))
    }

    /// Reduces one u64 over all ranks (in rank order, so every rank gets the same value).
    pub fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> Result<u64> {
        let all = self.all_gather(&value)?;
        Ok(all.into_iter().reduce(|a, b| op.u64(a, b)).unwrap_or(value))
    }

    /// Reduces one f64 over all ranks (in rank order, so every rank gets the same value,
    /// bit for bit).
    pub fn all_reduce_f64(&self, value: f64, op: ReduceOp) -> Result<f64> {
        let all = self.all_gather(&value)?;
        Ok(all.into_iter().reduce(|a, b| op.f64(a, b)).unwrap_or(value))
    }
}

impl Drop for ThreadExchange {
    fn drop(&mut self) {
        let mut s = self.lock();
        if s.gone.is_none() {
            s.gone = Some((self.rank, std::thread::panicking()));
        }
        self.board.turn.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::QpEndpoint;

    /// Runs `f(rank handle)` on `n` threads; returns the results in rank order.
    fn run<R: Send + 'static>(
        n: usize,
        f: impl Fn(ThreadExchange) -> R + Send + Sync + 'static,
    ) -> Vec<R> {
        let f = Arc::new(f);
        let handles: Vec<_> = ThreadExchange::group(n)
            .into_iter()
            .map(|x| {
                let f = f.clone();
                std::thread::spawn(move || f(x))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    fn ep(from: usize, to: usize) -> QpEndpoint {
        QpEndpoint {
            qpn: (from * 100 + to) as u32,
            psn: 0xabc000 + from as u32,
            lid: to as u16,
            mtu: 5,
            flags: 0,
            gid: [from as u8; 16],
            reserved: [0; 4],
        }
    }

    #[test]
    fn all_to_all_delivers_each_pair_once_over_rounds() {
        for n in [1, 2, 3, 5] {
            let out = run(n, move |x| {
                let r = x.rank();
                // Several rounds: slots are reused, so a missing second barrier would
                // let a fast rank overwrite a slot before a slow one read it.
                (0..20)
                    .map(|round| {
                        let send: Vec<_> = (0..n)
                            .map(|to| QpEndpoint {
                                reserved: [round; 4],
                                ..ep(r, to)
                            })
                            .collect();
                        x.all_to_all(&send).unwrap()
                    })
                    .collect::<Vec<_>>()
            });
            for (me, rounds) in out.iter().enumerate() {
                for (round, got) in rounds.iter().enumerate() {
                    let want: Vec<_> = (0..n)
                        .map(|from| QpEndpoint {
                            reserved: [round as u8; 4],
                            ..ep(from, me)
                        })
                        .collect();
                    assert_eq!(got, &want, "n={n} rank {me} round {round}");
                }
            }
        }
    }

    #[test]
    fn all_gather_and_reductions() {
        let out = run(4, |x| {
            let r = x.rank() as u64;
            let g = x.all_gather(&(r * 10)).unwrap();
            let sum = x.all_reduce_u64(r + 1, ReduceOp::Sum).unwrap();
            let max = x.all_reduce_u64(r * 7 % 4, ReduceOp::Max).unwrap();
            let fsum = x
                .all_reduce_f64(0.1 * (r as f64 + 1.0), ReduceOp::Sum)
                .unwrap();
            let fmax = x.all_reduce_f64(-(r as f64), ReduceOp::Max).unwrap();
            x.barrier().unwrap();
            (g, sum, max, fsum, fmax)
        });
        let fsum0 = out[0].3;
        for (g, sum, max, fsum, fmax) in out {
            assert_eq!(g, vec![0, 10, 20, 30]);
            assert_eq!(sum, 10);
            assert_eq!(max, 3);
            assert!((fsum - 1.0).abs() < 1e-12, "{fsum}");
            assert_eq!(
                fsum.to_bits(),
                fsum0.to_bits(),
                "every rank gets the same bits"
            );
            assert_eq!(fmax, 0.0);
        }
    }

    #[test]
    fn wrong_record_count_is_an_error_not_a_hang() {
        let mut g = ThreadExchange::group(2);
        let x = g.remove(0);
        let e = x.all_to_all(&[1u32]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ExchangeShape {
                    op: "all_to_all",
                    expected: 2,
                    got: 1
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn a_rank_that_leaves_fails_the_others_instead_of_hanging() {
        let out = run(3, |x| {
            if x.rank() == 1 {
                // Leaves without joining the barrier.
                return Ok(());
            }
            x.barrier()
        });
        for (rank, r) in out.into_iter().enumerate() {
            if rank != 1 {
                let e = r.unwrap_err();
                assert!(
                    matches!(
                        e,
                        Error::ExchangePeerGone {
                            rank: 1,
                            panicked: false
                        }
                    ),
                    "{e:?}"
                );
            }
        }
        let out = run(2, |x| {
            if x.rank() == 0 {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                    let _x = x;
                    panic!("rank 0 fails");
                }));
                return None;
            }
            Some(x.barrier())
        });
        let e = out[1].as_ref().unwrap().as_ref().unwrap_err();
        assert!(
            matches!(
                e,
                Error::ExchangePeerGone {
                    rank: 0,
                    panicked: true
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn a_rank_that_never_arrives_times_the_others_out_naming_it() {
        let mut g = ThreadExchange::group_with_timeout(3, Duration::from_millis(200));
        let late = g.pop().unwrap(); // rank 2: alive, never calls the barrier
        let waiters: Vec<_> = g
            .into_iter()
            .map(|x| std::thread::spawn(move || x.barrier()))
            .collect();
        for w in waiters {
            match w.join().unwrap() {
                Err(Error::ExchangeTimeout { missing, .. }) => assert_eq!(missing, vec![2]),
                other => panic!("expected a timeout naming rank 2, got {other:?}"),
            }
        }
        // The group is broken for good: the late rank is told too, at once.
        let e = late.barrier().unwrap_err();
        assert!(e.to_string().contains("did not arrive"), "{e}");
    }
}
