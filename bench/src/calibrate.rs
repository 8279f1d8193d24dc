//! `rcoll-bench calibrate`: measures this machine and writes a tuning file
//! (`RCOLL_TUNING_FILE`, [`rcoll::tuning`]).
//!
//! For each rank count and collective it runs `rcoll-bench <collective> --algo all` as a
//! child process (the same ranks, transport and sizes a user would benchmark), `--passes`
//! times over (each pass after the whole of the one before), then:
//! - **rules**: per size, the algorithm with the least worst regret over the passes (its
//!   time over the pass's fastest): [`robust_choice`];
//! - **rates**: alpha, beta and gamma fitted to every measured time at once. Each
//!   algorithm's schedule is priced with unit rates, which splits its model time into
//!   rounds `R`, bytes through the busiest rank `B` and bytes reduced `G`, so that
//!   `t = alpha R + beta B + gamma G` is linear in the rates; they are fitted by least
//!   squares on relative error (small and large sizes count alike), constrained to be
//!   non-negative.

use std::path::{Path, PathBuf};
use std::process::Command;

use rcoll::schedule::cost::{cost, CostModel};
use rcoll::tuning::{RuleEntry, Tuning, TuningFile, VERSION};
use rcoll::{Algorithm, Collective, DataType, Layout, Rank};

use crate::args::CalibrateArgs;
use crate::error::{usage, BenchError};
use crate::output::print;
use crate::report::VariantTime;

/// The fields of a `-J` record of `--algo all` calibration reads.
#[derive(Debug, serde::Deserialize)]
struct Record {
    collective: String,
    nranks: usize,
    count: usize,
    #[serde(rename = "type")]
    dtype: String,
    transport: String,
    #[serde(default)]
    compared: Option<Vec<VariantTime>>,
}

/// One measured time with its schedule's unit prices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Rounds.
    pub rounds: f64,
    /// Bytes through the busiest rank, summed over rounds.
    pub bytes: f64,
    /// Bytes reduced by the busiest rank, summed over steps.
    pub reduced: f64,
    /// Messages the busiest rank sends and receives, summed over rounds.
    pub messages: f64,
    /// Measured microseconds.
    pub time_us: f64,
}

/// `rcoll-bench calibrate`.
pub fn run(args: CalibrateArgs) -> Result<(), BenchError> {
    let ranks = list(&args.ranks, "--ranks", |s| {
        s.parse::<usize>().ok().filter(|n| *n >= 2)
    })?;
    let collectives = list(&args.collectives, "--collectives", |s| {
        s.parse::<Collective>()
            .ok()
            .filter(|c| Collective::SCHEDULED.contains(c))
    })?;
    let exe =
        std::env::current_exe().map_err(|e| usage(format!("cannot find rcoll-bench: {e}")))?;
    let scratch = std::env::temp_dir().join(format!("rcoll-calibrate-{}.json", std::process::id()));
    let mut file = match (&args.merge, std::fs::read_to_string(&args.output)) {
        (true, Ok(text)) => {
            serde_json::from_str::<TuningFile>(&text).map_err(|source| BenchError::NotAReport {
                path: args.output.clone(),
                source,
            })?
        }
        _ => TuningFile {
            version: VERSION,
            ..TuningFile::default()
        },
    };
    // A file to merge into must be one RCOLL_TUNING_FILE accepts.
    Tuning::from_file(file.clone())
        .map_err(|e| usage(format!("--merge {}: {e}", args.output.display())))?;
    let mut samples: Vec<(String, Sample)> = Vec::new();
    // Per size (its rule without the algorithm), every pass's times.
    let mut measured: Vec<(RuleEntry, Vec<Timed>)> = Vec::new();
    for pass in 1..=args.passes {
        for &n in &ranks {
            for &c in &collectives {
                print(&format!(
                    "# calibrate: {c} on {n} ranks over {}, pass {pass} of {}\n",
                    args.transport, args.passes
                ));
                let status = Command::new(&exe)
                    .arg(c.name())
                    .args(["--algo", "all", "--ranks", &n.to_string()])
                    .args(["--transport", &args.transport])
                    .args([
                        "-b",
                        &args.minbytes.to_string(),
                        "-e",
                        &args.maxbytes.to_string(),
                    ])
                    .args(["-f", &args.stepfactor.to_string()])
                    .args([
                        "-n",
                        &args.iters.to_string(),
                        "-w",
                        &args.warmup_iters.to_string(),
                    ])
                    .arg("-J")
                    .arg(&scratch)
                    .status()
                    .map_err(|e| usage(format!("cannot run {}: {e}", exe.display())))?;
                if !status.success() {
                    let _ = std::fs::remove_file(&scratch);
                    return Err(usage(format!(
                        "the --algo all run of {c} on {n} ranks failed ({status})"
                    )));
                }
                let records = read(&scratch)?;
                let _ = std::fs::remove_file(&scratch);
                for r in &records {
                    let (size, times, of_record) = digest(r)?;
                    samples.extend(of_record);
                    // An empty call (below one element per rank) has nothing to choose: its
                    // "fastest" would be noise deciding the smallest real calls.
                    let Some(size) = size else { continue };
                    match measured.iter_mut().find(|(s, _)| *s == size) {
                        Some((_, passes)) => passes.push(times),
                        None => measured.push((size, vec![times])),
                    }
                }
            }
        }
    }
    let new_rules: Vec<RuleEntry> = measured
        .into_iter()
        .filter_map(|(size, passes)| {
            robust_choice(&passes).map(|a| RuleEntry {
                algorithm: a.name().to_owned(),
                ..size
            })
        })
        .collect();
    // New measurements replace old ones of the same transport, collective and rank count.
    // (With --no-rules there are none, and the file's rules stay.)
    file.rules.retain(|old| {
        args.no_rules
            || !new_rules.iter().any(|r| {
                r.transport == old.transport
                    && r.collective == old.collective
                    && r.nranks == old.nranks
            })
    });
    if !args.no_rules {
        file.rules.extend(new_rules);
    }
    let mut kinds: Vec<String> = samples.iter().map(|(k, _)| k.clone()).collect();
    kinds.sort();
    kinds.dedup();
    for kind in kinds {
        let of_kind: Vec<Sample> = samples
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, s)| *s)
            .collect();
        let Some(model) = fit(&of_kind) else {
            print(&format!("# {kind}: too few samples to fit rates\n"));
            continue;
        };
        print(&format!(
            "# {kind}: alpha {:.2} us, {:.2} Gbit/s, reduce {:.2} GB/s, {:.2} us per message; median error {:.0}% over {} times\n",
            model.alpha_us,
            model.bandwidth_gbps,
            model.reduce_gbytes_per_s,
            model.overhead_us,
            100.0 * median_error(&model, &of_kind),
            of_kind.len()
        ));
        file.models.insert(kind, model);
    }
    let text = serde_json::to_string_pretty(&file)? + "\n";
    std::fs::write(&args.output, text).map_err(|source| BenchError::Write {
        path: args.output.clone(),
        source,
    })?;
    print(&format!(
        "# wrote {} ({} rules, {} models): use it with RCOLL_TUNING_FILE={}\n",
        args.output.display(),
        file.rules.len(),
        file.models.len(),
        args.output.display()
    ));
    Ok(())
}

fn list<T>(
    text: &str,
    flag: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Vec<T>, BenchError> {
    text.split(',')
        .map(|s| parse(s.trim()).ok_or_else(|| usage(format!("{flag}: {s:?} is not valid"))))
        .collect()
}

fn read(path: &Path) -> Result<Vec<Record>, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BenchError::Read {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| BenchError::NotAReport {
        path: PathBuf::from(path),
        source,
    })
}

/// What one record (one size of one pass) gives: the size's rule with its algorithm left
/// empty (`None` for an empty call), every algorithm's time, and the samples keyed by the
/// model they fit (`shm` for shared memory inside the host, else the transport's name).
type Digest = (Option<RuleEntry>, Timed, Vec<(String, Sample)>);

/// Every algorithm's time at one size in one pass, in microseconds.
type Timed = Vec<(Algorithm, f64)>;

/// The algorithm whose worst regret over `passes` (its time over the fastest of that pass)
/// is least; ties go to the least sum of regrets. Only algorithms timed in every pass
/// compete. With one pass it is that pass's fastest.
pub fn robust_choice(passes: &[Timed]) -> Option<Algorithm> {
    let bests: Vec<f64> = passes
        .iter()
        .map(|p| p.iter().map(|(_, t)| *t).fold(f64::INFINITY, f64::min))
        .collect();
    let first = passes.first()?;
    first
        .iter()
        .filter_map(|&(a, _)| {
            let regrets: Option<Vec<f64>> = passes
                .iter()
                .zip(&bests)
                .map(|(p, best)| {
                    let t = p.iter().find(|(b, _)| *b == a)?.1;
                    (*best > 0.0).then(|| t / best)
                })
                .collect();
            let regrets = regrets?;
            let worst = regrets.iter().copied().fold(0.0, f64::max);
            Some((a, worst, regrets.iter().sum::<f64>()))
        })
        .min_by(|x, y| x.1.total_cmp(&y.1).then(x.2.total_cmp(&y.2)))
        .map(|(a, _, _)| a)
}

fn digest(r: &Record) -> Result<Digest, BenchError> {
    let bad = |what: String| usage(format!("calibration record: {what}"));
    let collective = r.collective.parse::<Collective>().map_err(bad)?;
    let dtype = r
        .dtype
        .parse::<DataType>()
        .map_err(|e| bad(e.to_string()))?;
    let elem = dtype.size();
    // The rates a single-level fit can find: a run on one transport. A mixed run
    // (`shm+tcp`: two levels) gives rules only.
    let kind = (!r.transport.contains('+')).then(|| r.transport.clone());
    let mut times = Vec::new();
    let mut samples = Vec::new();
    let layout = Layout {
        collective,
        nranks: r.nranks,
        count: r.count,
        root: Rank(0),
        in_place: false,
    };
    for v in r.compared.iter().flatten() {
        let (Ok(a), Some(t)) = (v.algorithm.parse::<Algorithm>(), v.time_us) else {
            continue;
        };
        times.push((a, t));
        let Some(kind) = &kind else {
            continue;
        };
        if let Ok(schedules) = a.schedules(&layout) {
            let unit = |m: CostModel| cost(&schedules, elem, &m).predicted_us;
            samples.push((
                kind.clone(),
                Sample {
                    rounds: unit(CostModel {
                        alpha_us: 1.0,
                        ..NOTHING
                    }),
                    bytes: unit(CostModel {
                        bandwidth_gbps: 0.008,
                        ..NOTHING
                    }),
                    reduced: unit(CostModel {
                        reduce_gbytes_per_s: 0.001,
                        ..NOTHING
                    }),
                    messages: unit(CostModel {
                        overhead_us: 1.0,
                        ..NOTHING
                    }),
                    time_us: t,
                },
            ));
        }
    }
    let size = (r.count > 0).then(|| RuleEntry {
        transport: r.transport.clone(),
        collective: r.collective.clone(),
        nranks: r.nranks,
        bytes: r.count * elem,
        algorithm: String::new(),
    });
    Ok((size, times, samples))
}

/// A model that charges nothing: the base of the unit models that price one term each.
const NOTHING: CostModel = CostModel {
    alpha_us: 0.0,
    bandwidth_gbps: f64::INFINITY,
    reduce_gbytes_per_s: f64::INFINITY,
    overhead_us: 0.0,
    switch_us: 0.0,
    cache_speedup: 0.0,
    polls: true,
};

/// The terms fitted: rounds, bytes, reduced bytes, messages.
const TERMS: usize = 4;

/// Non-negative least squares on relative error: `alpha R + beta B + gamma G + o M ~ t`.
pub fn fit(samples: &[Sample]) -> Option<CostModel> {
    let rows: Vec<[f64; TERMS]> = samples
        .iter()
        .filter(|s| s.time_us > 0.0 && s.time_us.is_finite())
        .map(|s| {
            [
                s.rounds / s.time_us,
                s.bytes / s.time_us,
                s.reduced / s.time_us,
                s.messages / s.time_us,
            ]
        })
        .collect();
    if rows.len() < TERMS {
        return None;
    }
    // A term no sample has (no reductions measured) cannot be fitted: it stays free.
    let mut active = [0, 1, 2, 3].map(|i| rows.iter().any(|r| r[i] > 0.0));
    let mut x = [0.0; TERMS];
    for _ in 0..TERMS {
        x = solve(&rows, active)?;
        match (0..TERMS).find(|&i| active[i] && x[i] < 0.0) {
            Some(i) => active[i] = false,
            None => break,
        }
    }
    let [alpha, beta, gamma, overhead] = x.map(|v| v.max(0.0));
    // beta and gamma are microseconds per byte; a rate of zero cost is "very fast".
    let rate = |per_byte: f64, scale: f64| {
        if per_byte > 0.0 {
            (scale / (per_byte * 1e3)).min(1e5)
        } else {
            1e5
        }
    };
    Some(CostModel {
        alpha_us: alpha,
        bandwidth_gbps: rate(beta, 8.0),
        reduce_gbytes_per_s: rate(gamma, 1.0),
        overhead_us: overhead,
        // Measured as it was: `o` already holds what crowding cost.
        switch_us: 0.0,
        // Fitted over every size: the cache is in the rates as measured.
        cache_speedup: 0.0,
        // As fitted models were priced before the field existed.
        polls: true,
    })
}

/// The least-squares solution of `rows . x = 1` over the `active` unknowns (the others 0).
fn solve(rows: &[[f64; TERMS]], active: [bool; TERMS]) -> Option<[f64; TERMS]> {
    let idx: Vec<usize> = (0..TERMS).filter(|&i| active[i]).collect();
    let k = idx.len();
    if k == 0 {
        return Some([0.0; TERMS]);
    }
    // Normal equations, scaled per column so that bytes and rounds are comparable.
    let scale: Vec<f64> = idx
        .iter()
        .map(|&i| {
            let s = rows.iter().map(|r| r[i] * r[i]).sum::<f64>().sqrt();
            if s > 0.0 {
                s
            } else {
                1.0
            }
        })
        .collect();
    let mut m = vec![vec![0.0; k + 1]; k];
    for r in rows {
        for a in 0..k {
            let ra = r[idx[a]] / scale[a];
            for b in 0..k {
                m[a][b] += ra * r[idx[b]] / scale[b];
            }
            m[a][k] += ra;
        }
    }
    // Gaussian elimination with partial pivoting.
    for col in 0..k {
        let pivot = (col..k).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() < 1e-12 {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col].clone();
        for (row, values) in m.iter_mut().enumerate() {
            if row != col {
                let f = values[col] / pivot_row[col];
                for (v, p) in values.iter_mut().zip(&pivot_row).skip(col) {
                    *v -= f * p;
                }
            }
        }
    }
    let mut x = [0.0; TERMS];
    for (a, &i) in idx.iter().enumerate() {
        x[i] = m[a][k] / m[a][a] / scale[a];
    }
    Some(x)
}

/// The median of |predicted - measured| / measured.
pub fn median_error(model: &CostModel, samples: &[Sample]) -> f64 {
    let beta = 8.0 / (model.bandwidth_gbps * 1e3);
    let gamma = 1.0 / (model.reduce_gbytes_per_s * 1e3);
    let mut errors: Vec<f64> = samples
        .iter()
        .map(|s| {
            let predicted = model.alpha_us * s.rounds
                + beta * s.bytes
                + gamma * s.reduced
                + model.overhead_us * s.messages;
            (predicted - s.time_us).abs() / s.time_us
        })
        .collect();
    errors.sort_by(f64::total_cmp);
    errors.get(errors.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 MiB all_reduce on 4 shared-memory ranks of a 2-CPU VM, µs, in a calibration and
    /// in an evaluation minutes later (`--algo all -n 40`): the tree won the first and
    /// took 1.57x the best in the second; the binomial tree was within 1.3% of the best in
    /// both.
    fn two_passes() -> Vec<Timed> {
        use Algorithm::*;
        vec![
            vec![
                (Mesh, 301.4),
                (SingleRoot, 167.0),
                (Tree, 134.2),
                (BinomialTree, 135.9),
                (NaiveRing, 143.0),
                (Ring, 141.3),
                (HalvingDoubling, 147.0),
            ],
            vec![
                (Mesh, 408.0),
                (SingleRoot, 213.1),
                (Tree, 229.0),
                (BinomialTree, 146.0),
                (NaiveRing, 183.6),
                (Ring, 172.8),
                (HalvingDoubling, 188.5),
            ],
        ]
    }

    #[test]
    fn the_rule_is_the_algorithm_closest_to_the_best_in_every_pass() {
        let passes = two_passes();
        assert_eq!(robust_choice(&passes[..1]), Some(Algorithm::Tree));
        assert_eq!(robust_choice(&passes[1..]), Some(Algorithm::BinomialTree));
        assert_eq!(robust_choice(&passes), Some(Algorithm::BinomialTree));
        // Reversed passes choose alike.
        let reversed: Vec<_> = passes.iter().rev().cloned().collect();
        assert_eq!(robust_choice(&reversed), Some(Algorithm::BinomialTree));
    }

    #[test]
    fn an_algorithm_missing_from_a_pass_does_not_compete() {
        let mut passes = two_passes();
        // A wrong result leaves the binomial tree untimed in the second pass.
        passes[1].retain(|(a, _)| *a != Algorithm::BinomialTree);
        // Ring: 1.053 and 1.0; naive ring 1.066 and 1.063; the tree 1.0 and 1.325.
        assert_eq!(robust_choice(&passes), Some(Algorithm::Ring));
        assert_eq!(robust_choice(&[]), None);
    }

    /// Times made from known rates (with 5% of deterministic noise) give those rates back.
    #[test]
    fn the_fit_recovers_known_rates() {
        let (alpha, beta, gamma, o) = (25.0, 8.0 / (12.0 * 1e3), 1.0 / (3.0 * 1e3), 4.0);
        let samples: Vec<Sample> = (0..40)
            .map(|i| {
                let rounds = (1 + i % 7) as f64;
                let bytes = 8.0 * 4f64.powi(i % 12);
                let reduced = if i % 3 == 0 { 0.0 } else { bytes / 2.0 };
                // One message per round each way, or a mesh's p-1 (here 3, 5 or 7).
                let messages = 2.0 * rounds * (1 + 2 * (i % 4)) as f64;
                let noise = 1.0 + 0.05 * ((i * 7919) % 11) as f64 / 10.0 - 0.025;
                Sample {
                    rounds,
                    bytes,
                    reduced,
                    messages,
                    time_us: (alpha * rounds + beta * bytes + gamma * reduced + o * messages)
                        * noise,
                }
            })
            .collect();
        let m = fit(&samples).expect("fitted");
        assert!((m.alpha_us / alpha - 1.0).abs() < 0.1, "{m:?}");
        assert!((m.overhead_us / o - 1.0).abs() < 0.1, "{m:?}");
        assert!((m.bandwidth_gbps / 12.0 - 1.0).abs() < 0.1, "{m:?}");
        assert!((m.reduce_gbytes_per_s / 3.0 - 1.0).abs() < 0.2, "{m:?}");
        assert!(median_error(&m, &samples) < 0.05);
    }

    /// A term the data cannot support (no reductions at all) comes out as a free rate,
    /// never a negative one.
    #[test]
    fn unsupported_terms_are_free_not_negative() {
        let samples: Vec<Sample> = (0..10)
            .map(|i| Sample {
                rounds: 2.0,
                bytes: 1000.0 * (i + 1) as f64,
                reduced: 0.0,
                messages: 0.0,
                time_us: 10.0 + 0.001 * 1000.0 * (i + 1) as f64,
            })
            .collect();
        let m = fit(&samples).expect("fitted");
        assert!(m.alpha_us > 0.0 && m.bandwidth_gbps > 0.0, "{m:?}");
        assert_eq!(m.reduce_gbytes_per_s, 1e5);
        assert_eq!(m.overhead_us, 0.0);
        assert!(fit(&samples[..3]).is_none());
    }
}
