//! A settled choice watched against its contenders ([`Watch`]), and the probes that
//! re-check it when its calls slow down ([`ProbeRun`], [`Tuner::check`]).

use super::{
    mean, median, Entry, Key, Tuner, CONTEND_SPREAD, DRIFT, MAX_CONTENDERS, MAX_GAP,
    MAX_WINDOW_CALLS, PROBE_BURSTS, PROBE_ROUNDS, TIE_TOLERANCE, WINDOW_BURSTS, WINDOW_US,
};
use crate::algorithm::Algorithm;

/// The calls of a settled bucket whose choice other candidates came close to
/// ([`CONTEND_SPREAD`]), timed in windows of whole bursts; the ranks agree on each
/// window's time (its slowest rank's median burst). A window slower than the choice's
/// agreed time by more than [`DRIFT`] (the machine's state changed since) starts a probe
/// ([`ProbeRun`]): [`PROBE_ROUNDS`] rounds of a window of each finalist (the choice first,
/// the order reversed every other round), each window 1/[`PROBE_ROUNDS`] of the one that
/// started it (at least [`PROBE_BURSTS`] bursts), and the fastest contender by median
/// window replaces the choice if it beat the choice's median by more than
/// [`TIE_TOLERANCE`]. Probes compare algorithms as the application calls them (no
/// barrier, no warm-up), interleaved in the same moments of the machine, and cost about a
/// window of a contender each.
#[derive(Clone, Debug)]
pub(super) struct Watch {
    /// The choice first, then its contenders.
    finalists: Vec<Algorithm>,
    /// Calls per window, a whole number of bursts: [`WINDOW_BURSTS`] of them after the
    /// trials or a probe, twice as many after each window of the choice, up to `longest`
    /// (about [`WINDOW_US`]). A probe's windows are all as long.
    window: usize,
    /// The calls of the longest window.
    longest: usize,
    /// This rank's call times in the current window, in microseconds.
    times: Vec<f64>,
    /// Windows of the choice agreed on since it was (re)measured (since the last probe).
    windows: usize,
    /// The first window that may start a probe: 1 after the trials, twice the last gap
    /// after a probe (up to [`MAX_GAP`]), whether it changed the choice or not: between
    /// algorithms within noise of each other, probes would otherwise take turns.
    gap: usize,
    /// The choice's agreed time in its trials, in microseconds; after a probe that kept
    /// it, its median window in the probe; after one that changed it, the new choice's
    /// next window (`None` until then): the fastest of several noisy medians won the
    /// probe, and its next window would be slower than that by chance.
    reference: Option<f64>,
    /// A probe under way.
    probe: Option<ProbeRun>,
}

/// A probe under way: [`PROBE_ROUNDS`] rounds of a window of each finalist still in it,
/// every other round in the reverse order. A contender whose window in a round was slower
/// than the choice's in the same round by more than [`CONTEND_SPREAD`] leaves the probe
/// (it is no contender now, and each of its windows costs the application calls that much
/// slower); the probe ends early when none is left.
#[derive(Clone, Debug)]
struct ProbeRun {
    /// The agreed windows so far, per finalist.
    times: Vec<Vec<f64>>,
    /// The finalists still in the probe (indices of `finalists`), the choice first.
    active: Vec<usize>,
    /// The round under way.
    round: usize,
    /// Its windows done.
    at: usize,
}

impl ProbeRun {
    fn new(finalists: usize) -> ProbeRun {
        ProbeRun {
            times: vec![Vec::new(); finalists],
            active: (0..finalists).collect(),
            round: 0,
            at: 0,
        }
    }

    /// The finalist whose window is next.
    fn turn(&self) -> usize {
        let k = self.active.len();
        self.active[if self.round % 2 == 0 {
            self.at
        } else {
            k - 1 - self.at
        }]
    }

    /// Files the agreed time of the window that just ended; returns whether the probe
    /// goes on.
    fn record(&mut self, agreed: f64) -> bool {
        let f = self.turn();
        self.times[f].push(agreed);
        self.at += 1;
        if self.at == self.active.len() {
            let ProbeRun { times, active, .. } = self;
            let choice = times[0].last().copied().unwrap_or(f64::INFINITY);
            let close = |f: usize| {
                times[f]
                    .last()
                    .is_some_and(|t| *t <= choice * CONTEND_SPREAD)
            };
            active.retain(|&f| f == 0 || close(f));
            (self.round, self.at) = (self.round + 1, 0);
        }
        self.round < PROBE_ROUNDS && self.active.len() > 1
    }
}

impl Watch {
    /// The watch of `chosen`, which took `time` in the trials of `key` that timed `tried`
    /// at `agreed`: `None` if no other came within [`CONTEND_SPREAD`] of it.
    pub(super) fn after_trials(
        key: &Key,
        chosen: Algorithm,
        tried: &[Algorithm],
        agreed: &[f64],
        time: f64,
    ) -> Option<Watch> {
        let mut close: Vec<(f64, Algorithm)> = agreed
            .iter()
            .zip(tried)
            .filter(|&(t, a)| *a != chosen && t.is_finite() && *t <= time * CONTEND_SPREAD)
            .map(|(t, a)| (*t, *a))
            .collect();
        close.sort_by(|x, y| x.0.total_cmp(&y.0));
        let contenders = close.iter().take(MAX_CONTENDERS).map(|(_, a)| *a);
        let finalists: Vec<Algorithm> = std::iter::once(chosen).chain(contenders).collect();
        let burst = Tuner::burst(key);
        let calls = ((WINDOW_US / time).ceil() as usize).clamp(1, MAX_WINDOW_CALLS);
        (finalists.len() > 1).then(|| Watch {
            finalists,
            window: WINDOW_BURSTS * burst,
            longest: calls.div_ceil(burst).max(WINDOW_BURSTS) * burst,
            times: Vec::new(),
            windows: 0,
            gap: 1,
            reference: Some(time),
            probe: None,
        })
    }

    /// The algorithm the bucket's calls run now: the choice, or the finalist whose turn
    /// it is in a probe.
    pub(super) fn running(&self) -> Algorithm {
        self.finalists[self.probe.as_ref().map_or(0, ProbeRun::turn)]
    }
}

/// What a window of a watched bucket changed ([`Tuner::check`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Probe {
    /// A probe started, or went on: the next calls run this finalist.
    Runs(Algorithm),
    /// A probe ended.
    Ended {
        /// Each finalist's median window in microseconds, the choice that started the
        /// probe first.
        medians: Vec<(Algorithm, f64)>,
        /// The choice from now on.
        chosen: Algorithm,
    },
}

impl Tuner {
    /// Records this rank's time of a call of settled `key` that is watched. Returns this
    /// rank's time of the window it ends (the median of its bursts' mean call times, as a
    /// trial's pass): the ranks agree on it ([`Tuner::check`]).
    pub fn watched(&mut self, key: &Key, us: f64) -> Option<f64> {
        let burst = Self::burst(key);
        let Some(Entry::Settled { watch: Some(w), .. }) = self.entries.get_mut(key) else {
            return None;
        };
        w.times.push(us);
        if w.times.len() < w.window {
            return None;
        }
        let time = median(w.times.chunks(burst).map(mean).collect());
        w.times.clear();
        Some(time)
    }

    /// After a window of watched `key`, with `agreed` its slowest rank's time. A window of
    /// the choice slower than its reference by more than [`DRIFT`] (and not before the
    /// one it waits for) starts a probe: [`PROBE_ROUNDS`] rounds of a window of each
    /// finalist, and the fastest contender by median window becomes the choice if it beat
    /// the choice's median by more than [`TIE_TOLERANCE`]. Returns what the window
    /// changed, if anything.
    pub fn check(&mut self, key: &Key, agreed: f64) -> Option<Probe> {
        let changed = self.window_ended(key, agreed);
        self.generation += u64::from(changed.is_some());
        changed
    }

    /// [`Tuner::check`] but for the generation.
    fn window_ended(&mut self, key: &Key, agreed: f64) -> Option<Probe> {
        let burst = Self::burst(key);
        let Some(Entry::Settled {
            algorithm,
            watch: Some(w),
        }) = self.entries.get_mut(key)
        else {
            return None;
        };
        let Some(mut probe) = w.probe.take() else {
            w.windows += 1;
            let reference = *w.reference.get_or_insert(agreed);
            if w.windows < w.gap || agreed <= reference * (1.0 + DRIFT) {
                w.window = (w.window * 2).min(w.longest);
                return None;
            }
            // The window that started the probe is not one of its windows: it was picked
            // for being slow (its noise among the causes), and every contender would beat
            // it by chance.
            w.window = (w.window / burst / PROBE_ROUNDS).max(PROBE_BURSTS) * burst;
            w.probe = Some(ProbeRun::new(w.finalists.len()));
            return Some(Probe::Runs(w.running()));
        };
        if probe.record(agreed) {
            w.probe = Some(probe);
            return Some(Probe::Runs(w.running()));
        }
        let medians: Vec<(Algorithm, f64)> = w
            .finalists
            .iter()
            .zip(&probe.times)
            .map(|(a, times)| (*a, median(times.clone())))
            .collect();
        let choice = medians[0].1;
        let (i, fastest) = (probe.active[1..].iter())
            .map(|&f| (f, medians[f].1))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, f64::INFINITY));
        let switch = choice > fastest * (1.0 + TIE_TOLERANCE);
        if switch {
            w.finalists.swap(0, i);
            *algorithm = w.finalists[0];
        }
        // The winner's median is no reference either (the fastest of several): its next
        // window is.
        w.reference = (!switch).then_some(choice);
        (w.windows, w.gap) = (0, (w.gap * 2).min(MAX_GAP));
        w.window = WINDOW_BURSTS * burst;
        Some(Probe::Ended {
            medians,
            chosen: *algorithm,
        })
    }
}
