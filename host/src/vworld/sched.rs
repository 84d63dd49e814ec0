//! The scheduler: earliest clock first, one turn at a time, faults at their instants.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use super::faults::Fault;

/// What an actor's turn says about its next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Take the next turn at this virtual time (ns; later than the turn's start).
    At(u64),
    /// What the run waits for this actor to do is done, but it keeps serving the others
    /// (an echo rank that got every answer still answers its peers): take the next turn
    /// at this virtual time.
    DoneAt(u64),
    /// The actor is done and takes no more turns.
    Finished,
    /// The actor met an error the world cannot go on with (it keeps what it says for its
    /// program): the run ends now.
    Halt,
}

/// A participant of the virtual world: a daemon loop, a client, an echo rank. `W` is the
/// state the actors of one program share (counters, time series, reports).
pub trait Actor<W> {
    /// Takes a turn that starts at `now` (ns of virtual time).
    fn turn(&mut self, now: u64, world: &mut W) -> Turn;

    /// Whether the run waits for this actor to finish (a client), or ends around it once
    /// every awaited actor has finished (a server loop, which never finishes by itself).
    fn awaited(&self) -> bool;
}

/// Actors of different types in one world: `Runtime<Box<dyn Actor<W>>>`.
impl<W, A: Actor<W> + ?Sized> Actor<W> for Box<A> {
    fn turn(&mut self, now: u64, world: &mut W) -> Turn {
        (**self).turn(now, world)
    }

    fn awaited(&self) -> bool {
        (**self).awaited()
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunEnd {
    /// The virtual time of the last event taken, ns.
    pub end_ns: u64,
    /// Awaited actors that had not finished when the run gave up.
    pub unfinished: usize,
}

/// A progress line on stderr every this much wall time, for long runs.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// The actors of one world and their clocks.
#[derive(Debug)]
pub struct Runtime<A> {
    actors: Vec<A>,
    finished: Vec<bool>,
    /// Done with what the run waits for (finished, or still serving).
    done: Vec<bool>,
}

impl<A> Default for Runtime<A> {
    fn default() -> Self {
        Self {
            actors: Vec::new(),
            finished: Vec::new(),
            done: Vec::new(),
        }
    }
}

impl<A> Runtime<A> {
    /// An empty world.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an actor, whose first turn is at time 0; returns its id (ids count up from 0
    /// in the order actors are added, and break ties between equal clocks).
    pub fn add(&mut self, actor: A) -> usize {
        self.actors.push(actor);
        self.finished.push(false);
        self.done.push(false);
        self.actors.len() - 1
    }

    /// The actors, by id.
    pub fn actors(&self) -> &[A] {
        &self.actors
    }

    /// The actors, by id, for their results after a run.
    pub fn into_actors(self) -> Vec<A> {
        self.actors
    }

    /// Whether actor `id` has finished.
    pub fn finished(&self, id: usize) -> bool {
        self.finished[id]
    }

    /// Runs until every awaited actor has finished, or the next event is past
    /// `give_up_ns`. Each fault is handed to `on_fault` at its instant, after every
    /// actor's turn due at that instant (faults must be in time order). With
    /// `progress = Some((who, end_ns))`, a long run prints how far it got every two
    /// seconds of wall time. An error from `on_fault` ends the run with it.
    pub fn run<W>(
        &mut self,
        world: &mut W,
        faults: &[Fault],
        mut on_fault: impl FnMut(&Fault, &[A], &mut W) -> Result<(), String>,
        give_up_ns: u64,
        progress: Option<(&str, u64)>,
    ) -> Result<RunEnd, String>
    where
        A: Actor<W>,
    {
        let n = self.actors.len();
        // (clock, id), the smallest first: faults take the ids after the actors.
        let mut q: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::with_capacity(n + faults.len());
        let mut left = 0;
        for id in 0..n {
            if !self.finished[id] {
                q.push(Reverse((0, id)));
            }
            if !self.done[id] {
                left += usize::from(self.actors[id].awaited());
            }
        }
        for (i, f) in faults.iter().enumerate() {
            q.push(Reverse((f.at_ns, n + i)));
        }
        let wall = Instant::now();
        let mut last_progress = wall;
        let mut end_ns = 0;
        while left > 0 {
            let Some(Reverse((t, id))) = q.pop() else {
                break;
            };
            end_ns = t;
            if t > give_up_ns {
                break;
            }
            if id < n {
                match self.actors[id].turn(t, world) {
                    Turn::At(next) => q.push(Reverse((next, id))),
                    Turn::DoneAt(next) => {
                        if !std::mem::replace(&mut self.done[id], true) {
                            left -= usize::from(self.actors[id].awaited());
                        }
                        q.push(Reverse((next, id)));
                    }
                    Turn::Halt => break,
                    Turn::Finished => {
                        self.finished[id] = true;
                        if !std::mem::replace(&mut self.done[id], true) {
                            left -= usize::from(self.actors[id].awaited());
                        }
                    }
                }
            } else {
                on_fault(&faults[id - n], &self.actors, world)?;
            }
            if let Some((who, until_ns)) = progress {
                if last_progress.elapsed() >= PROGRESS_EVERY {
                    last_progress = Instant::now();
                    eprintln!(
                        "{who}: virtual {:.3} ms of {:.3} ms (wall {:.1} s)",
                        t as f64 / 1e6,
                        until_ns as f64 / 1e6,
                        wall.elapsed().as_secs_f64()
                    );
                }
            }
        }
        Ok(RunEnd {
            end_ns,
            unfinished: left,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vworld::FaultKind;

    /// Takes `turns` turns `step` apart, logging `(time, id)` into the world.
    struct Ticker {
        id: usize,
        step: u64,
        turns: u32,
        awaited: bool,
    }

    impl Actor<Vec<(u64, usize)>> for Ticker {
        fn turn(&mut self, now: u64, log: &mut Vec<(u64, usize)>) -> Turn {
            log.push((now, self.id));
            self.turns -= 1;
            if self.turns == 0 {
                Turn::Finished
            } else {
                Turn::At(now + self.step)
            }
        }
        fn awaited(&self) -> bool {
            self.awaited
        }
    }

    fn ticker(id: usize, step: u64, turns: u32, awaited: bool) -> Ticker {
        Ticker {
            id,
            step,
            turns,
            awaited,
        }
    }

    #[test]
    fn the_earliest_clock_goes_first_and_ties_go_to_the_lower_id() {
        let mut rt = Runtime::new();
        rt.add(ticker(0, 3, 3, true));
        rt.add(ticker(1, 2, 4, true));
        let mut log = Vec::new();
        let end = rt
            .run(&mut log, &[], |_, _, _| Ok(()), u64::MAX, None)
            .unwrap();
        assert_eq!(
            log,
            [(0, 0), (0, 1), (2, 1), (3, 0), (4, 1), (6, 0), (6, 1)]
        );
        assert_eq!(
            end,
            RunEnd {
                end_ns: 6,
                unfinished: 0
            }
        );
    }

    #[test]
    fn a_run_ends_when_the_awaited_actors_finish_and_gives_up_past_its_bound() {
        // The server never finishes; the run ends with the client.
        let mut rt = Runtime::new();
        rt.add(ticker(0, 1, u32::MAX, false));
        rt.add(ticker(1, 5, 2, true));
        let mut log = Vec::new();
        let end = rt
            .run(&mut log, &[], |_, _, _| Ok(()), u64::MAX, None)
            .unwrap();
        assert_eq!(end.unfinished, 0);
        assert_eq!(log.last(), Some(&(5, 1)));
        assert!(!rt.finished(0) && rt.finished(1));
        // A client that would need past the bound is reported unfinished.
        let mut rt = Runtime::new();
        rt.add(ticker(0, 10, 5, true));
        let mut log = Vec::new();
        let end = rt.run(&mut log, &[], |_, _, _| Ok(()), 25, None).unwrap();
        assert_eq!(
            end,
            RunEnd {
                end_ns: 30,
                unfinished: 1
            }
        );
        assert_eq!(log, [(0, 0), (10, 0), (20, 0)]);
    }

    /// Done after `turns` turns, then serves on.
    struct Server {
        turns: u32,
    }

    impl Actor<Vec<(u64, usize)>> for Server {
        fn turn(&mut self, now: u64, log: &mut Vec<(u64, usize)>) -> Turn {
            log.push((now, 9));
            self.turns = self.turns.saturating_sub(1);
            if self.turns == 0 {
                Turn::DoneAt(now + 2)
            } else {
                Turn::At(now + 2)
            }
        }
        fn awaited(&self) -> bool {
            true
        }
    }

    #[test]
    fn an_actor_done_at_a_time_keeps_serving_until_the_others_are_done() {
        type Log = Vec<(u64, usize)>;
        let mut rt: Runtime<Box<dyn Actor<Log>>> = Runtime::new();
        rt.add(Box::new(Server { turns: 1 }));
        rt.add(Box::new(ticker(1, 3, 3, true)));
        let mut log = Vec::new();
        let end = rt
            .run(&mut log, &[], |_, _, _| Ok(()), u64::MAX, None)
            .unwrap();
        // The server is done after its first turn and still runs until the ticker ends.
        assert_eq!(
            log,
            [(0, 9), (0, 1), (2, 9), (3, 1), (4, 9), (6, 9), (6, 1)]
        );
        assert_eq!(
            end,
            RunEnd {
                end_ns: 6,
                unfinished: 0
            }
        );
        assert!(!rt.finished(0));
    }

    /// Halts at its second turn.
    struct Faulty;

    impl Actor<Vec<(u64, usize)>> for Faulty {
        fn turn(&mut self, now: u64, log: &mut Vec<(u64, usize)>) -> Turn {
            log.push((now, 7));
            if now == 0 {
                Turn::At(5)
            } else {
                Turn::Halt
            }
        }
        fn awaited(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_halting_actor_ends_the_run_at_once() {
        type Log = Vec<(u64, usize)>;
        let mut rt: Runtime<Box<dyn Actor<Log>>> = Runtime::new();
        rt.add(Box::new(Faulty));
        rt.add(Box::new(ticker(1, 3, 10, true)));
        let mut log = Vec::new();
        let end = rt
            .run(&mut log, &[], |_, _, _| Ok(()), u64::MAX, None)
            .unwrap();
        assert_eq!(log, [(0, 7), (0, 1), (3, 1), (5, 7)]);
        assert_eq!(
            end,
            RunEnd {
                end_ns: 5,
                unfinished: 1
            }
        );
    }

    #[test]
    fn a_fault_comes_after_the_turns_due_at_its_instant_and_its_error_ends_the_run() {
        let stall = |at_ns| Fault {
            at_ns,
            kind: FaultKind::Stall { rank: 0, for_ns: 1 },
        };
        let mut rt = Runtime::new();
        rt.add(ticker(0, 4, 3, true));
        let mut log = Vec::new();
        rt.run(
            &mut log,
            &[stall(4)],
            |f, actors, log| {
                log.push((f.at_ns, 100 + actors.len()));
                Ok(())
            },
            u64::MAX,
            None,
        )
        .unwrap();
        assert_eq!(log, [(0, 0), (4, 0), (4, 101), (8, 0)]);
        let mut rt = Runtime::new();
        rt.add(ticker(0, 4, 3, true));
        let e = rt
            .run(
                &mut Vec::new(),
                &[stall(1)],
                |_, _, _| Err("no".into()),
                u64::MAX,
                None,
            )
            .unwrap_err();
        assert_eq!(e, "no");
    }
}
