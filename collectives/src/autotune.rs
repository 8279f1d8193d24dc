//! Selection by trial at run time (`RCOLL_AUTOTUNE`): the first calls of each size try
//! the candidates in turn, the ranks agree on the one whose slowest rank took least, and
//! later calls of that size run it.
//!
//! The cost model ranks algorithms from their schedules; where the machine does what the
//! model does not price (a VM whose CPUs the host moves nearer or farther, a tree that
//! pipelines better than its unpipelined bound), the model's choice can be slower than the
//! fastest (the regret figures, `docs/src/algorithms.md`). Trials measure instead, as Intel
//! MPI's run-time autotuner (`I_MPI_TUNING_MODE=auto`) does.
//!
//! Per size bucket (a collective, its bytes rounded up to a power of two, the element
//! size; every root alike, so that a job that takes turns at the root tries once; empty
//! calls and barriers are not tried):
//! - the candidates are every algorithm that serves the collective and that the model
//!   prices within [`CANDIDATE_SPREAD`] times the cheapest, the model's order kept (a
//!   tuning file's rule for the size goes first);
//! - the first calls run the candidates one block after another (A A A, B B B, ...): a
//!   call's time on a rank includes waiting for the slowest rank to arrive, which the
//!   call before decides, so a candidate is timed in a burst of its own, as applications
//!   call it (a data-parallel step all_reduces its gradients' buckets one after
//!   another); run in turn (A B C, A B C), a small call is timed with its neighbours'
//!   stragglers;
//! - a block is a warm-up call, then `trials` bursts of calls, each started on every rank
//!   at once (a barrier): bursts of [`BURST_CALLS`] up to [`SMALL_CALL_BYTES`], single
//!   calls above, and more bursts for small calls (`Tuner::timed`). That is how the
//!   regret figure (`rcoll-bench --algo all`) times calls, and on a crowded host the
//!   grouping decides the winner. The warm-up follows another algorithm, and a plan's
//!   first run pays its allocations and cold caches: it is not counted. A rank's time for
//!   a candidate in a pass is the median of its bursts' mean call times (one call alone
//!   swings with the calls around it; a burst that waits on a rank the host descheduled is
//!   an outlier, which the figure's median over rounds leaves out too);
//! - above [`SMALL_CALL_BYTES`], calls are single ones from a barrier, and long enough for
//!   the machine's state to change between blocks: there the candidates take turns (A B
//!   C, A B C) after one warm-up pass, each pass a single call of each, `trials` times as
//!   many passes, so that every pass times all of them in the same state;
//! - after [`PRUNE_AFTER`] passes over all candidates, an all_reduce of each one's faster
//!   pass (the maximum over ranks: the collective lasts as long as its slowest rank)
//!   gives every rank the same numbers, and the candidates slower than [`PRUNE_RATIO`]
//!   times the fastest are dropped (one left is the choice);
//! - the rest run the other passes, up to [`PASSES`]; a candidate's time is its median
//!   pass (a moment in which the machine did something else, or the host moved this VM's
//!   CPUs, moves one pass, not the choice); a second all_reduce agrees on them, and the
//!   cheapest wins, or an earlier one in the model's order within [`TIE_TOLERANCE`] of it
//!   (closer than that, the trials cannot tell them apart).
//!
//! Every rank makes the same calls in the same order (a collective's contract), so every
//! rank counts the same trials and agrees at the same calls without a word
//! more than the barrier before each burst (the communicator's own: barriers are not
//! tried) and the all_reduces (forced to recursive doubling). Each call's fingerprint
//! carries its algorithm: ranks configured differently (one with `RCOLL_AUTOTUNE`, one
//! without) fail their call with an error naming how the calls differ, never a hang.
//!
//! During the trials, calls of one size run different algorithms, whose results may
//! differ in the last bits of floating-point sums (the order of the additions): where that
//! matters, leave it off (the default).

use std::collections::HashMap;

use crate::algorithm::Algorithm;
use crate::schedule::Collective;

/// Candidates priced by the model at more than this many times the cheapest are not
/// tried: wide, because the model misprices pipelined trees and crowded hosts by more than
/// its own noise (how far, `docs/src/algorithms.md`).
pub const CANDIDATE_SPREAD: f64 = 4.0;

/// Bursts of calls timed per candidate and pass when `RCOLL_AUTOTUNE` is `on` (a burst is
/// one call above [`SMALL_CALL_BYTES`], [`BURST_CALLS`] up to it; `Tuner::timed` scales
/// them for small calls).
pub const DEFAULT_TRIALS: u32 = 2;

/// Passes over the candidates: each candidate's time is its median pass's, so that a
/// moment the machine did something else moves one pass of the candidate it fell on,
/// either way, and not the choice (the fewest passes with a median that is not the mean
/// of two).
pub const PASSES: usize = 3;

/// Passes over every candidate before the ranks agree on which to drop (by each
/// candidate's faster pass): with one, a moment in which the machine did something else
/// can drop the fastest.
pub const PRUNE_AFTER: usize = 2;

/// After the first passes, the ranks agree on their times and drop every candidate that
/// took more than this many times the fastest: the other passes try the rest, which the
/// first passes could not yet tell apart.
pub const PRUNE_RATIO: f64 = 1.5;

/// A candidate must take less than the model's earlier candidates by more than this
/// fraction to be chosen over them: closer than that, the trials cannot tell them apart,
/// and the model's order decides (the value that left the fewest regretted choices over a
/// regret run: `docs/src/algorithms.md`).
pub const TIE_TOLERANCE: f64 = 0.05;

/// The most trials per candidate `RCOLL_AUTOTUNE` accepts.
pub const MAX_TRIALS: u32 = 100;

/// One size bucket's identity: what every rank of a call agrees on (not whether it is in
/// place, which ranks of one call may differ in through the C API).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The collective.
    pub collective: Collective,
    /// The call's bytes rounded up to a power of two.
    pub bucket_bytes: usize,
    /// Bytes per element.
    pub elem_size: usize,
}

/// Where one bucket stands.
#[derive(Clone, Debug)]
enum Entry {
    /// Trying `candidates`: block `b` runs `candidates[plan[b]]` (the first passes, then,
    /// once the ranks agreed on them, the other passes over the candidates kept); `times[i]`
    /// holds this rank's times of candidate `i` in microseconds; `calls` trial calls were
    /// handed out.
    Trying {
        candidates: Vec<Algorithm>,
        times: Vec<Vec<f64>>,
        plan: Vec<usize>,
        calls: usize,
        first_passes_agreed: bool,
    },
    /// Agreed on `algorithm`.
    Settled { algorithm: Algorithm },
}

/// What the ranks agree on after a trial call (an all_reduce of the maximum), per
/// candidate in order: this rank's mean per candidate, its block's first call left out.
#[derive(Clone, Debug, PartialEq)]
pub enum Agree {
    /// The first [`PRUNE_AFTER`] passes are over: each candidate's faster pass, for
    /// [`Tuner::prune`].
    FirstPasses(Vec<f64>),
    /// Every pass is over: each candidate's median pass (infinite for one dropped after
    /// the first passes), for [`Tuner::settle`].
    Final(Vec<f64>),
}

/// The next call of a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run this algorithm; the bucket is settled.
    Settled(Algorithm),
    /// Run this candidate and report its time ([`Tuner::record`]).
    Trial(Algorithm),
}

/// One communicator's trials and choices.
#[derive(Debug)]
pub struct Tuner {
    trials: u32,
    entries: HashMap<Key, Entry, foldhash::fast::RandomState>,
    /// Counts the changes to settled buckets ([`Tuner::generation`]).
    generation: u64,
}

/// Calls of at most this many bytes are timed in bursts of [`BURST_CALLS`] from a common
/// start, larger ones one at a time; smaller calls in more bursts (`Tuner::timed`).
pub const SMALL_CALL_BYTES: usize = 1 << 20;

/// Calls per burst up to [`SMALL_CALL_BYTES`]: what `rcoll-bench --algo all` times (and
/// the regret figure), a few collectives in a row between two phases of an application.
pub const BURST_CALLS: usize = 5;

/// At most this many times as many bursts for small calls.
pub const SMALL_CALL_SCALE: usize = 8;

/// Beyond this many buckets the tuner forgets the buckets still being tried (every rank at
/// the same call), and then, if that is not enough, the settled ones too.
const BUCKET_LIMIT: usize = 1024;

/// The most calls one bucket's trials can take with `trials` per candidate and pass:
/// three passes over every algorithm, blocks of the most timed calls and a warm-up.
pub fn max_trial_calls(trials: u32) -> usize {
    let block = trials.max(1) as usize * SMALL_CALL_SCALE * BURST_CALLS + 1;
    block * Algorithm::ALL.len() * PASSES
}

impl Tuner {
    /// A tuner that tries each candidate `trials` times (at least 1).
    pub fn new(trials: u32) -> Tuner {
        Tuner {
            trials: trials.max(1),
            entries: HashMap::default(),
            generation: 0,
        }
    }

    /// A count that moves whenever a settled bucket's calls may run another algorithm
    /// than before (a bucket forgotten to make room): what a caller kept of a settled call
    /// is stale once it moved. (A bucket's trials going on or settling
    /// are told by [`Tuner::upcoming`].)
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The calls of a burst of `key`: [`BURST_CALLS`] up to [`SMALL_CALL_BYTES`], else 1.
    fn burst(key: &Key) -> usize {
        match key.bucket_bytes <= SMALL_CALL_BYTES {
            true => BURST_CALLS,
            false => 1,
        }
    }

    /// The calls timed per candidate of `key` (after its block's warm-up call): `trials`
    /// bursts, times as many as [`SMALL_CALL_BYTES`] holds calls of the bucket's size, up
    /// to [`SMALL_CALL_SCALE`] times. A small call takes a few microseconds, as long as a
    /// rank that waits on a crowded host takes to get its CPU back, so one call alone says
    /// little.
    ///
    /// How calls are grouped decides which algorithm is fastest on a crowded host, so
    /// trials time calls the way the regret figure does, and auto is chosen for what it is
    /// measured on (measured: docs/src/algorithms.md, "How the trials' numbers were set").
    fn timed(&self, key: &Key) -> usize {
        let scale = (SMALL_CALL_BYTES / key.bucket_bytes.max(1)).clamp(1, SMALL_CALL_SCALE);
        self.trials as usize * scale * Self::burst(key)
    }

    /// Whether `key`'s calls are single ones, taken in turn ([`SMALL_CALL_BYTES`]): one
    /// call of each candidate after another (A B C, A B C), each from a barrier, after one
    /// warm-up pass. A call above 1 MiB lasts long enough for the host's state to change
    /// between blocks, which would drop candidates for when they ran rather than what they
    /// cost (measured: docs/src/algorithms.md, "How the trials' numbers were set"). Taken
    /// in turn, each pass times every candidate in the same state; the barrier before each
    /// call leaves no skew from the call before.
    fn in_turn(key: &Key) -> bool {
        key.bucket_bytes > SMALL_CALL_BYTES
    }

    /// Calls per plan entry of `key`: a block's warm-up and timed calls, or one call of
    /// a bucket taken in turn.
    fn block(&self, key: &Key) -> usize {
        match Self::in_turn(key) {
            true => 1,
            false => self.timed(key) + 1,
        }
    }

    /// Passes over the candidates before the ranks agree on which to drop (`first`), or in
    /// all: [`PRUNE_AFTER`] and [`PASSES`], each of `trials` single calls for a bucket
    /// taken in turn. Not counting the warm-up pass of such a bucket.
    fn passes(&self, key: &Key, first: bool) -> usize {
        let passes = match first {
            true => PRUNE_AFTER.min(PASSES),
            false => PASSES,
        };
        match Self::in_turn(key) {
            true => passes * self.trials as usize,
            false => passes,
        }
    }

    /// This rank's time of each pass of a candidate, from its calls `t` in blocks of
    /// `block` and bursts of `burst`: the median of a block's burst means (its warm-up
    /// left out), or (`in_turn`) each call after the warm-up pass's. The regret figure
    /// times a variant the same way, by the median of its rounds' means: on a crowded
    /// host a burst that waits for a descheduled rank takes several times the others, and
    /// in a block's mean it would decide the pass.
    fn pass_times(block: usize, burst: usize, in_turn: bool, t: &[f64]) -> Vec<f64> {
        match in_turn {
            true => t.get(1..).unwrap_or_default().to_vec(),
            false => (0..t.len() / block)
                .map(|p| {
                    let timed = &t[p * block + 1..(p + 1) * block];
                    median(timed.chunks(burst.max(1)).map(mean).collect())
                })
                .collect(),
        }
    }

    /// The agreed algorithm of `key`, if its trials are over.
    pub fn settled(&self, key: &Key) -> Option<Algorithm> {
        match self.entries.get(key) {
            Some(Entry::Settled { algorithm, .. }) => Some(*algorithm),
            _ => None,
        }
    }

    /// What the next call of `key` would run, without counting it; `None` for a bucket
    /// not seen yet.
    pub fn upcoming(&self, key: &Key) -> Option<Next> {
        match self.entries.get(key)? {
            Entry::Settled { algorithm } => Some(Next::Settled(*algorithm)),
            Entry::Trying {
                candidates,
                plan,
                calls,
                ..
            } => {
                let block = *calls / self.block(key);
                // Past the plan only if a call ran before the first pass was agreed on,
                // which the communicator does not do.
                let i = plan.get(block).or(plan.last()).copied().unwrap_or(0);
                Some(Next::Trial(candidates[i]))
            }
        }
    }

    /// Whether the call of `key` last handed out ([`Tuner::next`]) starts a burst of
    /// timed calls: the ranks start it together.
    pub fn starts_burst(&self, key: &Key) -> bool {
        match self.entries.get(key) {
            Some(Entry::Trying { calls, .. }) if *calls > 0 && Self::in_turn(key) => true,
            Some(Entry::Trying { calls, .. }) if *calls > 0 => {
                let at = (*calls - 1) % (self.timed(key) + 1);
                at >= 1 && (at - 1) % Self::burst(key) == 0
            }
            _ => false,
        }
    }

    /// What the next call of `key` runs. `candidates` (the model's order, cheapest first)
    /// is asked for on a bucket's first call only; a bucket with one candidate or none
    /// settles at once (on the first, or on `fallback`).
    pub fn next(
        &mut self,
        key: Key,
        fallback: Algorithm,
        candidates: impl FnOnce() -> Vec<Algorithm>,
    ) -> Next {
        if !self.entries.contains_key(&key) {
            if self.entries.len() >= BUCKET_LIMIT {
                self.generation += 1;
                self.entries
                    .retain(|_, e| matches!(e, Entry::Settled { .. }));
            }
            if self.entries.len() >= BUCKET_LIMIT {
                self.entries.clear();
            }
            let candidates = candidates();
            let entry = match candidates.len() {
                0 | 1 => Entry::Settled {
                    algorithm: candidates.first().copied().unwrap_or(fallback),
                },
                n => Entry::Trying {
                    candidates,
                    times: vec![Vec::new(); n],
                    // A bucket taken in turn starts with a warm-up pass.
                    plan: (0..self.passes(&key, true) + usize::from(Self::in_turn(&key)))
                        .flat_map(|_| 0..n)
                        .collect(),
                    calls: 0,
                    first_passes_agreed: false,
                },
            };
            self.entries.insert(key, entry);
        }
        let next = self.upcoming(&key).unwrap_or(Next::Settled(fallback));
        if let Some(Entry::Trying { calls, .. }) = self.entries.get_mut(&key) {
            *calls += 1;
        }
        next
    }

    /// Records this rank's time of a trial of `algorithm` on `key`. Returns what the
    /// ranks must agree on when it ends the first pass or the last.
    pub fn record(&mut self, key: &Key, algorithm: Algorithm, us: f64) -> Option<Agree> {
        let block = self.block(key);
        let all = self.passes(key, false);
        let in_turn = Self::in_turn(key);
        let burst = Self::burst(key);
        let pass_times = |t: &[f64]| Self::pass_times(block, burst, in_turn, t);
        let Some(Entry::Trying {
            candidates,
            times,
            plan,
            first_passes_agreed,
            ..
        }) = self.entries.get_mut(key)
        else {
            return None;
        };
        let i = candidates.iter().position(|c| *c == algorithm)?;
        times[i].push(us);
        let recorded: usize = times.iter().map(Vec::len).sum();
        if recorded != plan.len() * block {
            return None;
        }
        Some(match first_passes_agreed {
            false => Agree::FirstPasses(
                times
                    .iter()
                    .map(|t| pass_times(t).into_iter().fold(f64::INFINITY, f64::min))
                    .collect(),
            ),
            true => Agree::Final(
                times
                    .iter()
                    .map(|t| match pass_times(t) {
                        p if p.len() < all => f64::INFINITY,
                        p => median(p),
                    })
                    .collect(),
            ),
        })
    }

    /// After the first passes, with `agreed` their slowest rank's times: keeps the
    /// candidates within [`PRUNE_RATIO`] of the fastest for the other passes. Returns the choice and
    /// the candidates if that leaves one (the bucket is then settled).
    pub fn prune(&mut self, key: &Key, agreed: &[f64]) -> Option<(Algorithm, Vec<Algorithm>)> {
        let more = self.passes(key, false) - self.passes(key, true);
        let Some(Entry::Trying {
            candidates,
            plan,
            first_passes_agreed,
            ..
        }) = self.entries.get_mut(key)
        else {
            return None;
        };
        let fastest = agreed
            .iter()
            .copied()
            .filter(|t| t.is_finite())
            .fold(f64::INFINITY, f64::min);
        let kept: Vec<usize> = (0..candidates.len())
            .filter(|&i| agreed.get(i).is_some_and(|t| *t <= PRUNE_RATIO * fastest))
            .collect();
        if kept.len() < 2 || agreed.len() != candidates.len() || more == 0 {
            return self.settle(key, agreed);
        }
        for _ in 0..more {
            plan.extend(&kept);
        }
        *first_passes_agreed = true;
        None
    }

    /// Settles `key` on the cheapest of `agreed` (every rank's the same: the slowest
    /// rank's time per candidate), or on an earlier candidate within [`TIE_TOLERANCE`] of
    /// it; on the model's first candidate if `agreed` does not fit them or holds no finite
    /// time. Returns the choice and the candidates, or `None` if `key` was not being tried.
    pub fn settle(&mut self, key: &Key, agreed: &[f64]) -> Option<(Algorithm, Vec<Algorithm>)> {
        let Some(Entry::Trying { candidates, .. }) = self.entries.get(key) else {
            return None;
        };
        let fits = agreed.len() == candidates.len();
        let best = match fits {
            true => cheapest(agreed).unwrap_or(0),
            false => 0,
        };
        let (chosen, tried) = (candidates[best], candidates.clone());
        self.entries
            .insert(*key, Entry::Settled { algorithm: chosen });
        Some((chosen, tried))
    }
}

/// The index of the first finite time within [`TIE_TOLERANCE`] of the smallest.
fn cheapest(times: &[f64]) -> Option<usize> {
    let fastest = times
        .iter()
        .copied()
        .filter(|t| t.is_finite())
        .reduce(f64::min)?;
    times
        .iter()
        .position(|t| t.is_finite() && *t <= fastest * (1.0 + TIE_TOLERANCE))
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    match times.len() {
        0 => f64::INFINITY,
        n if n % 2 == 1 => times[n / 2],
        n => (times[n / 2 - 1] + times[n / 2]) / 2.0,
    }
}

fn mean(times: &[f64]) -> f64 {
    match times.len() {
        0 => f64::INFINITY,
        n => times.iter().sum::<f64>() / n as f64,
    }
}

#[cfg(test)]
mod tests;
