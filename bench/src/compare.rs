//! `--algo all`: at each size, auto and every algorithm that serves the collective, their
//! timings interleaved (round i of every variant before round i+1 of any, so that drift
//! in the machine's speed falls on all alike; a round is a block of back-to-back calls
//! after a barrier, the variants in an order drawn anew each round: [`round_order`]),
//! out of place, each result checked;
//! then auto's regret, its time over the best algorithm's, and the regret of its choice: the
//! time of the algorithm auto chose, run forced in the same rounds, over the best. The two
//! differ by noise alone (auto runs the schedule it chose): the first is what a user sees,
//! the second whether the choice was right. The last line says how far apart they came
//! ([`Spread`]): a regret limit below that noise cannot be shown on this machine.
//!
//! A variant's time is the median over rounds of the slowest rank's mean time per call in
//! that round: the collective ends when its last rank does, and the median keeps one
//! descheduled round from deciding a comparison.

use std::fmt::Write as _;
use std::time::Instant;

use rcoll::{Algorithm, Communicator, Element, Layout, Rank};

use crate::call::{call, Buffers};
use crate::data::Reference;
use crate::error::BenchError;
use crate::plan::layout_count;
use crate::report::{ModeReport, SizeReport, VariantTime};
use crate::spec::{size_bytes, BenchSpec};
use rcoll::select::quadratic_beyond_limit;

/// Regret above this is flagged in the table (the target the issue sets for auto).
pub const REGRET_LIMIT: f64 = 1.10;

/// Calls per timed block up to [`BLOCK_LIMIT_BYTES`] (one above: a call is long enough
/// to time alone).
const BLOCK: usize = 5;
const BLOCK_LIMIT_BYTES: usize = 1 << 20;

/// Auto (`None`) first, then every algorithm that serves the collective on `n` ranks.
pub fn variants(spec: &BenchSpec, n: usize) -> Vec<Option<Algorithm>> {
    std::iter::once(None)
        .chain(
            Algorithm::ALL
                .into_iter()
                .filter(|a| a.serves(spec.collective))
                // As `Auto` leaves them out.
                .filter(|a| !quadratic_beyond_limit(*a, n))
                .map(Some),
        )
        .collect()
}

/// One size's result on rank 0.
#[derive(Clone, Debug)]
pub struct Compared {
    /// Bytes, nccl-tests' convention.
    pub size: usize,
    /// What auto chose.
    pub choice: Algorithm,
    /// Per variant (as [`variants`]): median time in microseconds, `None` if a result was wrong.
    pub times_us: Vec<Option<f64>>,
}

impl Compared {
    /// The fastest forced algorithm and its time.
    pub fn best(&self, variants: &[Option<Algorithm>]) -> Option<(Algorithm, f64)> {
        variants
            .iter()
            .zip(&self.times_us)
            .filter_map(|(v, t)| Some(((*v)?, (*t)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Auto's time over the best algorithm's.
    pub fn regret(&self, variants: &[Option<Algorithm>]) -> Option<f64> {
        let auto = self.times_us.first().copied().flatten()?;
        let (_, best) = self.best(variants)?;
        (best > 0.0).then(|| auto / best)
    }

    /// The time of the algorithm auto chose, run forced, over the best algorithm's: the
    /// regret of the choice without the noise between two runs of one schedule. `None`
    /// when the choice was not run forced (or its result was wrong).
    pub fn choice_regret(&self, variants: &[Option<Algorithm>]) -> Option<f64> {
        let chosen = self.chosen_time(variants)?;
        let (_, best) = self.best(variants)?;
        (best > 0.0).then(|| chosen / best)
    }

    /// The time of the algorithm auto chose, run forced (`None` when not run or wrong).
    fn chosen_time(&self, variants: &[Option<Algorithm>]) -> Option<f64> {
        variants
            .iter()
            .zip(&self.times_us)
            .find_map(|(v, t)| (*v == Some(self.choice)).then_some(*t))
            .flatten()
    }

    /// Auto's time over that of the algorithm it chose, run forced in the same rounds: one
    /// schedule timed in two columns, so its distance from 1 is the noise of this machine
    /// at this size, which no choice can beat. `None` as for [`Compared::choice_regret`].
    pub fn auto_over_choice(&self, variants: &[Option<Algorithm>]) -> Option<f64> {
        let auto = self.times_us.first().copied().flatten()?;
        let chosen = self.chosen_time(variants)?;
        (chosen > 0.0).then(|| auto / chosen)
    }
}

/// How far apart auto and its choice forced came over the sizes ([`Compared::auto_over_choice`]):
/// the lowest and highest ratio, and how many of the sizes compared lie beyond
/// [`REGRET_LIMIT`] either way.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread {
    /// Lowest and highest ratio (`None` before the first).
    pub range: Option<(f64, f64)>,
    /// Sizes compared.
    pub sizes: usize,
    /// Of those, the ones above `REGRET_LIMIT` or below its inverse.
    pub beyond: usize,
}

impl Spread {
    /// Adds one size's ratio.
    pub fn add(&mut self, r: f64) {
        self.range = Some(self.range.map_or((r, r), |(lo, hi)| (lo.min(r), hi.max(r))));
        self.sizes += 1;
        self.beyond += usize::from(r > REGRET_LIMIT || r * REGRET_LIMIT < 1.0);
    }

    /// The summary line, if any size was compared.
    pub fn line(&self) -> Option<String> {
        let (lo, hi) = self.range?;
        Some(format!(
            "# auto's time over its choice forced (one schedule in two columns: the noise \
             here): {lo:.2}-{hi:.2}, beyond {REGRET_LIMIT:.2} either way at {} of {} sizes\n",
            self.beyond, self.sizes
        ))
    }
}

/// Runs the comparison on this rank; rank 0 prints the table through `print` and returns
/// auto's reports (for `-J` and `--plot`).
pub fn run_typed<T: Element>(
    comm: &mut Communicator,
    spec: &BenchSpec,
    print: &mut dyn FnMut(&str),
) -> Result<Vec<SizeReport>, BenchError> {
    let (n, rank) = (comm.size(), comm.rank());
    let elem = std::mem::size_of::<T>();
    let reference = Reference::<T>::new(spec.op, n);
    let variants = variants(spec, n);
    if rank == 0 {
        print(&header(spec, &variants));
    }
    let mut reports = Vec::new();
    let mut worst: Option<(f64, usize)> = None;
    let mut worst_choice: Option<(f64, usize)> = None;
    let mut spread = Spread::default();
    // Sizes with a regret, and of them those above the limit (the rows marked !).
    let (mut regrets, mut above) = (0usize, 0usize);
    // Auto's calls until its trials were over, the fewest and the most over the sizes, and
    // the sizes whose trials were not over by the most they can take.
    let mut trial_calls: Option<(usize, usize)> = None;
    let mut unsettled = Vec::new();
    for &size in &spec.sizes {
        let count = layout_count(spec.collective, size, elem, n);
        let mut settled_at = None;
        let layout = Layout {
            collective: spec.collective,
            nranks: n,
            count,
            root: Rank::from(spec.root),
            in_place: false,
        };
        let extents = layout.buffers(Rank::from(rank));
        let mut buffers = Buffers::<T>::new(comm, &extents, false)?;
        buffers.fill(&reference, rank, &extents);
        comm.barrier()?;
        // Selection by trial (`RCOLL_AUTOTUNE`): auto warms up until its trials are over
        // (on every rank at the same call), so that the rounds time what it settled on;
        // the calls that took are reported.
        let tuning = comm.autotunes::<T>(spec.collective, count);
        let limit = rcoll::autotune::max_trial_calls(comm.config().autotune);
        for v in &variants {
            let mut calls = 0;
            while calls < spec.warmup
                || (tuning
                    && v.is_none()
                    && calls < limit
                    && comm
                        .autotuned::<T>(spec.collective, count, spec.root)
                        .is_none())
            {
                call_variant(comm, spec, *v, &mut buffers)?;
                calls += 1;
                if tuning && v.is_none() && settled_at.is_none() {
                    let tuned = comm.autotuned::<T>(spec.collective, count, spec.root);
                    settled_at = tuned.map(|_| calls);
                }
            }
        }
        if tuning && settled_at.is_none() {
            unsettled.push(size);
        }
        comm.barrier()?;
        // Rounds of blocks: each variant's block starts from a barrier (so that no call
        // pays for the previous variant's last rank) and runs back to back, as a
        // benchmark loop does; a block's time is its mean per call.
        let block = if size <= BLOCK_LIMIT_BYTES { BLOCK } else { 1 };
        let mut times = vec![Vec::with_capacity(spec.iters); variants.len()];
        for it in 0..spec.iters {
            for i in round_order(it, variants.len()) {
                comm.barrier()?;
                let start = Instant::now();
                for _ in 0..block {
                    call_variant(comm, spec, variants[i], &mut buffers)?;
                }
                times[i].push(start.elapsed().as_secs_f64() * 1e6 / block as f64);
            }
        }
        let mut wrong = vec![0u64; variants.len()];
        if spec.check {
            for (i, v) in variants.iter().enumerate() {
                buffers.fill(&reference, rank, &extents);
                call_variant(comm, spec, *v, &mut buffers)?;
                wrong[i] = buffers
                    .output(&extents)
                    .map_or(extents.output.len as u64, |out| {
                        reference.count_wrong(spec.collective, n, rank, spec.root, count, out)
                    });
            }
        }
        // [wrong, times...] per variant, the same length on every rank.
        let local: Vec<f64> = wrong
            .iter()
            .zip(&times)
            .flat_map(|(w, t)| std::iter::once(*w as f64).chain(t.iter().copied()))
            .collect();
        let mut gathered = if rank == 0 {
            vec![0.0; local.len() * n]
        } else {
            Vec::new()
        };
        comm.gather(&local, &mut gathered, 0)?;
        if rank != 0 {
            continue;
        }
        let choice = comm.algorithm_for::<T>(spec.collective, count, spec.root, false);
        let bytes = size_bytes(spec.collective, count, elem, n);
        let (compared, auto_report) = summarise(spec, &variants, &gathered, n, bytes, choice);
        // An empty call (a size below one element per rank) has nothing to choose.
        if let Some(r) = compared.regret(&variants).filter(|_| count > 0) {
            regrets += 1;
            above += usize::from(r > REGRET_LIMIT);
            if worst.is_none_or(|(w, _)| r > w) {
                worst = Some((r, bytes));
            }
        }
        if let Some(r) = compared.auto_over_choice(&variants).filter(|_| count > 0) {
            spread.add(r);
        }
        if let Some(r) = compared.choice_regret(&variants).filter(|_| count > 0) {
            if worst_choice.is_none_or(|(w, _)| r > w) {
                worst_choice = Some((r, bytes));
            }
        }
        if let Some(c) = settled_at {
            trial_calls = Some(trial_calls.map_or((c, c), |(lo, hi)| (lo.min(c), hi.max(c))));
        }
        print(&row(&compared, &variants));
        let mut report = SizeReport::new(
            spec,
            n,
            (bytes, count),
            choice.to_string(),
            auto_report,
            None,
        );
        report.compared = Some(
            variants
                .iter()
                .zip(&compared.times_us)
                .map(|(v, t)| VariantTime {
                    algorithm: v.map_or_else(|| "auto".to_owned(), |a| a.name().to_owned()),
                    time_us: *t,
                })
                .collect(),
        );
        reports.push(report);
    }
    if rank == 0 {
        print(&match worst {
            Some((r, bytes)) => format!(
                "# auto's regret: worst {r:.2} at {bytes} B ({})\n",
                if r <= REGRET_LIMIT {
                    format!("<= {REGRET_LIMIT:.2} at every size")
                } else {
                    format!(
                        "above {REGRET_LIMIT:.2} at {above} of {regrets} sizes: the ones marked !"
                    )
                }
            ),
            None => "# auto's regret: nothing to compare\n".to_owned(),
        });
        if let Some((lo, hi)) = trial_calls {
            print(&format!(
                "# auto's trials (RCOLL_AUTOTUNE): over after {lo}-{hi} calls per size, \
                 before the rounds\n"
            ));
        }
        if !unsettled.is_empty() {
            print(&format!(
                "# auto's trials (RCOLL_AUTOTUNE) not over before the rounds at {unsettled:?} B: \
                 their rounds time trials\n"
            ));
        }
        if let Some((r, bytes)) = worst_choice {
            print(&format!(
                "# auto's choice (run forced in the same rounds) over the best: worst {r:.2} \
                 at {bytes} B\n"
            ));
        }
        if let Some(line) = spread.line() {
            print(&line);
        }
    }
    Ok(reports)
}

/// The order of the variants in round `round`: a permutation drawn anew each round, the
/// same on every rank (seeded by the round). A fixed rotation made each variant always
/// follow the same one, whose aftermath (its rank skew, its memory left in caches and
/// socket buffers) then fell on it alone: auto, after recursive doubling every round, took
/// 1.3x the time of the same schedule forced (tree, 8 MiB, 3 ranks over TCP).
pub fn round_order(round: usize, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    fastrand::Rng::with_seed(round as u64).shuffle(&mut order);
    order
}

/// One call through auto or a forced algorithm.
fn call_variant<T: Element>(
    comm: &mut Communicator,
    spec: &BenchSpec,
    variant: Option<Algorithm>,
    buffers: &mut Buffers<T>,
) -> Result<(), BenchError> {
    match variant {
        None => call(comm, spec, buffers),
        Some(a) => call(&mut comm.with_algorithm(a), spec, buffers),
    }
}

/// Rank 0's figures for one size from the gathered `[wrong, times...]` records, and
/// auto's report in the usual form.
fn summarise(
    spec: &BenchSpec,
    variants: &[Option<Algorithm>],
    gathered: &[f64],
    n: usize,
    bytes: usize,
    choice: Algorithm,
) -> (Compared, ModeReport) {
    let record = spec.iters + 1;
    let per_rank = gathered.len() / n.max(1);
    let ranks: Vec<&[f64]> = gathered.chunks(per_rank.max(1)).collect();
    let times_of = |v: usize| -> Vec<&[f64]> {
        ranks
            .iter()
            .filter_map(|r| r.get(v * record + 1..(v + 1) * record))
            .collect()
    };
    let wrong_of =
        |v: usize| -> u64 { ranks.iter().filter_map(|r| r.get(v * record)).sum::<f64>() as u64 };
    let times_us = (0..variants.len())
        .map(|v| (wrong_of(v) == 0).then(|| median_of_slowest(&times_of(v))))
        .collect();
    let auto = ModeReport::from_ranks(
        &times_of(0),
        spec.check.then(|| wrong_of(0)),
        bytes,
        spec.collective,
    );
    (
        Compared {
            size: bytes,
            choice,
            times_us,
        },
        auto,
    )
}

/// The median over iterations of the slowest rank's time in each.
pub fn median_of_slowest(per_rank: &[&[f64]]) -> f64 {
    let iters = per_rank.iter().map(|t| t.len()).min().unwrap_or(0);
    let mut slowest: Vec<f64> = (0..iters)
        .map(|i| per_rank.iter().map(|t| t[i]).fold(0.0, f64::max))
        .collect();
    if slowest.is_empty() {
        return 0.0;
    }
    slowest.sort_by(f64::total_cmp);
    let mid = slowest.len() / 2;
    if slowest.len() % 2 == 1 {
        slowest[mid]
    } else {
        (slowest[mid - 1] + slowest[mid]) / 2.0
    }
}

fn short(v: Option<Algorithm>) -> &'static str {
    match v {
        None => "auto",
        Some(Algorithm::Mesh) => "mesh",
        Some(Algorithm::SingleRoot) => "single",
        Some(Algorithm::Tree) => "tree",
        Some(Algorithm::BinomialTree) => "binom",
        Some(Algorithm::NaiveRing) => "nring",
        Some(Algorithm::Ring) => "ring",
        Some(Algorithm::DoubleBinaryTree) => "dbt",
        Some(Algorithm::HalvingDoubling) => "hd",
        Some(Algorithm::Hierarchical) => "hier",
        Some(Algorithm::RecursiveDoubling) => "rd",
        Some(_) => "other",
    }
}

fn header(spec: &BenchSpec, variants: &[Option<Algorithm>]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# --algo all: out of place, {} interleaved rounds (blocks of {BLOCK} calls up to {} \
         after a barrier) after {} warmup calls each; time (us) = median over rounds of the \
         slowest rank's mean; regret = auto / best; choice = the chosen algorithm run \
         forced, over the best; x = a wrong result",
        spec.iters, BLOCK_LIMIT_BYTES, spec.warmup
    );
    let _ = write!(s, "# {:>10}  {:>18}", "size (B)", "auto's choice");
    for v in variants {
        let _ = write!(s, " {:>9}", short(*v));
    }
    let _ = writeln!(s, "  {:>6} {:>7} {:>7}", "best", "regret", "choice");
    s
}

fn row(c: &Compared, variants: &[Option<Algorithm>]) -> String {
    let mut s = format!("  {:>10}  {:>18}", c.size, c.choice.name());
    for t in &c.times_us {
        match t {
            Some(t) => {
                let _ = write!(s, " {t:>9.1}");
            }
            None => {
                let _ = write!(s, " {:>9}", "x");
            }
        }
    }
    match (c.best(variants), c.regret(variants)) {
        (Some((a, _)), Some(r)) => {
            let _ = write!(s, "  {:>6} {r:>7.2}", short(Some(a)));
        }
        _ => s.push_str("       -       -"),
    }
    match c.choice_regret(variants) {
        Some(r) => {
            let _ = write!(s, " {r:>7.2}");
        }
        None => s.push_str("       -"),
    }
    if c.regret(variants).is_some_and(|r| r > REGRET_LIMIT) {
        s.push_str(" !");
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_over_the_slowest_rank_of_each_iteration() {
        let a = [1.0, 10.0, 3.0];
        let b = [2.0, 1.0, 30.0];
        assert_eq!(median_of_slowest(&[&a, &b]), 10.0);
        assert_eq!(median_of_slowest(&[&[1.0, 3.0][..]]), 2.0);
        assert_eq!(median_of_slowest(&[]), 0.0);
    }

    #[test]
    fn regret_is_auto_over_the_best_forced_algorithm() {
        let variants = [None, Some(Algorithm::Ring), Some(Algorithm::Tree)];
        let c = Compared {
            size: 8,
            choice: Algorithm::Ring,
            times_us: vec![Some(12.0), Some(11.0), Some(10.0)],
        };
        assert_eq!(c.best(&variants), Some((Algorithm::Tree, 10.0)));
        assert!((c.regret(&variants).expect("regret") - 1.2).abs() < 1e-12);
        let wrong_best = Compared {
            times_us: vec![Some(12.0), Some(11.0), None],
            ..c
        };
        assert_eq!(wrong_best.best(&variants), Some((Algorithm::Ring, 11.0)));
    }

    #[test]
    fn the_choice_is_priced_by_its_own_forced_run() {
        let variants = [None, Some(Algorithm::Ring), Some(Algorithm::Tree)];
        let c = Compared {
            size: 8,
            choice: Algorithm::Ring,
            times_us: vec![Some(12.0), Some(11.0), Some(10.0)],
        };
        assert!((c.choice_regret(&variants).expect("choice") - 1.1).abs() < 1e-12);
        let right = Compared {
            choice: Algorithm::Tree,
            ..c.clone()
        };
        assert!((right.choice_regret(&variants).expect("choice") - 1.0).abs() < 1e-12);
        let not_run = Compared {
            choice: Algorithm::Mesh,
            ..c.clone()
        };
        assert_eq!(not_run.choice_regret(&variants), None);
        let wrong = Compared {
            times_us: vec![Some(12.0), None, Some(10.0)],
            ..c
        };
        assert_eq!(wrong.choice_regret(&variants), None);
    }

    #[test]
    fn auto_over_its_choice_forced_is_the_noise_between_two_columns_of_one_schedule() {
        let variants = [None, Some(Algorithm::Ring), Some(Algorithm::Tree)];
        let c = Compared {
            size: 8,
            choice: Algorithm::Ring,
            times_us: vec![Some(12.0), Some(10.0), Some(9.0)],
        };
        assert!((c.auto_over_choice(&variants).expect("ratio") - 1.2).abs() < 1e-12);
        let not_run = Compared {
            choice: Algorithm::Mesh,
            ..c.clone()
        };
        assert_eq!(not_run.auto_over_choice(&variants), None);
        let wrong_auto = Compared {
            times_us: vec![None, Some(10.0), Some(9.0)],
            ..c
        };
        assert_eq!(wrong_auto.auto_over_choice(&variants), None);

        let mut s = Spread::default();
        assert_eq!(s.line(), None);
        for r in [1.0, 1.05, 0.95, 1.2, 0.8, 1.1] {
            s.add(r);
        }
        assert_eq!((s.range, s.sizes, s.beyond), (Some((0.8, 1.2)), 6, 2));
        let line = s.line().expect("line");
        assert!(line.contains("0.80-1.20"), "{line}");
        assert!(line.contains("at 2 of 6 sizes"), "{line}");
    }

    /// Every round runs every variant once, in an order that is the same for a given round
    /// (every rank computes it alone) and varies across rounds, so that no variant always
    /// follows the same one (a rotation gives each exactly one predecessor inside rounds).
    #[test]
    fn each_round_runs_every_variant_once_after_varied_predecessors() {
        let n = 11;
        let mut before: Vec<std::collections::BTreeSet<usize>> = vec![Default::default(); n];
        let mut first = std::collections::BTreeSet::new();
        for round in 0..40 {
            let order = round_order(round, n);
            assert_eq!(order, round_order(round, n));
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(
                sorted,
                (0..n).collect::<Vec<_>>(),
                "round {round}: {order:?}"
            );
            for w in order.windows(2) {
                before[w[1]].insert(w[0]);
            }
            first.insert(order[0]);
        }
        for (v, b) in before.iter().enumerate() {
            assert!(b.len() >= 4, "variant {v} only ever follows {b:?}");
        }
        assert!(first.len() >= 6, "{first:?}");
        assert_eq!(round_order(0, 1), [0]);
        assert!(round_order(0, 0).is_empty());
    }
}
