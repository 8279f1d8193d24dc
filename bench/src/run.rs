//! One rank's part of the benchmark, whatever launched it.
//!
//! For each size, out of place and then in place: fill the buffers with the known data of
//! [`crate::data`], a barrier, the warmup iterations, a second barrier (so the timed loop
//! starts together on every rank), then the timed iterations, each timed on its own. With
//! `-c 1` one more, untimed, iteration follows from freshly filled buffers (inputs
//! rewritten, outputs set to a sentinel), and its output is checked: in place, every
//! iteration consumes the previous one's result, so re-initialising is what makes the
//! expected result known; out of place it also catches a call that writes nothing. Then
//! every rank's per-iteration times and wrong counts are gathered to rank 0 with rcoll's
//! own gather (as nccl-tests reduces its timings with MPI), and rank 0 builds the report.

use std::time::{Duration, Instant};

use rcoll::{Collective, Communicator, DataType, Element, Layout, Rank};

use crate::call::{call, Buffers};
use crate::data::Reference;
use crate::error::BenchError;
use crate::hosts;
use crate::plan::layout_count;
use crate::report::{self, ModeReport, SizeReport};
use crate::spec::{size_bytes, BenchSpec};

/// Calls `f::<T>(args...)` for the element type of `dtype`.
macro_rules! dispatch {
    ($dtype:expr, [$($f:tt)+], $($arg:expr),*) => {{
        use half::{bf16, f16};
        match $dtype {
            DataType::I8 => $($f)+::<i8>($($arg),*),
            DataType::U8 => $($f)+::<u8>($($arg),*),
            DataType::I32 => $($f)+::<i32>($($arg),*),
            DataType::U32 => $($f)+::<u32>($($arg),*),
            DataType::I64 => $($f)+::<i64>($($arg),*),
            DataType::U64 => $($f)+::<u64>($($arg),*),
            DataType::F16 => $($f)+::<f16>($($arg),*),
            DataType::Bf16 => $($f)+::<bf16>($($arg),*),
            DataType::F32 => $($f)+::<f32>($($arg),*),
            DataType::F64 => $($f)+::<f64>($($arg),*),
            other => Err(BenchError::Usage(format!(
                "-d {other} is not supported by rcoll-bench yet"
            ))),
        }
    }};
}

/// Runs the benchmark on this rank. Rank 0 passes the header and then each size's row,
/// as it completes, to `print`, and returns every size's report; other ranks print
/// nothing and return an empty list.
pub fn run_rank(
    comm: &mut Communicator,
    spec: &BenchSpec,
    print: &mut dyn FnMut(&str),
) -> Result<Vec<SizeReport>, BenchError> {
    let ranks = hosts::exchange(comm)?;
    if comm.rank() == 0 {
        print(&report::header(spec, &ranks));
    }
    if spec.compare {
        return dispatch!(spec.dtype, [crate::compare::run_typed], comm, spec, print);
    }
    let mut on_row = |r: &SizeReport| print(&format!("{}\n", report::row(r)));
    let on_row = &mut on_row;
    dispatch!(spec.dtype, [run_typed], comm, spec, on_row)
}

/// `RCOLL_BENCH_CORRUPT=<rank>`: that rank damages one element of every checked output
/// before checking it, to show that the check, the report and the exit status catch a
/// wrong result (peers/mpi_bench's BENCH_CORRUPT).
const CORRUPT: &str = "RCOLL_BENCH_CORRUPT";

/// One mode's raw results on one rank.
struct Sample {
    times_us: Vec<f64>,
    wrong: u64,
}

fn run_typed<T: Element>(
    comm: &mut Communicator,
    spec: &BenchSpec,
    on_row: &mut dyn FnMut(&SizeReport),
) -> Result<Vec<SizeReport>, BenchError> {
    let (n, rank) = (comm.size(), comm.rank());
    let elem = std::mem::size_of::<T>();
    let reference = Reference::<T>::new(spec.op, n);
    let modes: &[bool] = if spec.collective == Collective::SendRecv {
        &[false]
    } else {
        &[false, true]
    };
    let corrupt = std::env::var(CORRUPT).ok() == Some(rank.to_string());
    let mut reports = Vec::new();
    for &size in &spec.sizes {
        let count = layout_count(spec.collective, size, elem, n);
        let mut samples = Vec::with_capacity(modes.len());
        for &in_place in modes {
            samples.push(measure(comm, spec, &reference, count, in_place, corrupt)?);
        }
        // [wrong, times...] per mode, the same length on every rank.
        let local: Vec<f64> = samples
            .iter()
            .flat_map(|s| std::iter::once(s.wrong as f64).chain(s.times_us.iter().copied()))
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
        let algorithm = if spec.collective == Collective::SendRecv {
            "p2p".to_owned()
        } else {
            // The out-of-place choice; the cost model prices in-place calls the same way.
            match comm.algorithm_for::<T>(spec.collective, count, spec.root, false) {
                rcoll::Algorithm::Hierarchical => {
                    match comm.level_algorithms_for::<T>(spec.collective, count, spec.root, false) {
                        Some(levels) => format!("hierarchical({levels})"),
                        None => "hierarchical".to_owned(),
                    }
                }
                a => a.to_string(),
            }
        };
        let report = summarise(
            spec,
            size_bytes(spec.collective, count, elem, n),
            count,
            algorithm,
            &gathered,
            n,
        );
        on_row(&report);
        reports.push(report);
    }
    Ok(reports)
}

/// Rank 0's report for one size from the gathered `[wrong, times...]` records.
fn summarise(
    spec: &BenchSpec,
    size: usize,
    count: usize,
    algorithm: String,
    gathered: &[f64],
    nranks: usize,
) -> SizeReport {
    let per_rank_len = gathered.len() / nranks.max(1);
    let record = spec.iters + 1;
    let mode = |m: usize| {
        let times: Vec<&[f64]> = gathered
            .chunks(per_rank_len.max(1))
            .filter_map(|r| r.get(m * record + 1..(m + 1) * record))
            .collect();
        let wrong: f64 = gathered
            .chunks(per_rank_len.max(1))
            .filter_map(|r| r.get(m * record))
            .sum();
        let wrong = spec.check.then_some(wrong as u64);
        ModeReport::from_ranks(&times, wrong, size, spec.collective)
    };
    SizeReport::new(
        spec,
        nranks,
        (size, count),
        algorithm,
        mode(0),
        (per_rank_len >= 2 * record).then(|| mode(1)),
    )
}

/// Calls are timed in batches of this many when the warmup's took less than
/// [`BATCH_BELOW`] each.
pub const BATCH: usize = 64;

/// See [`BATCH`].
pub const BATCH_BELOW: Duration = Duration::from_micros(2);

/// Each of `iters` calls' time in microseconds from the stamps at the ends of batches of
/// `every` calls (the last may be shorter; `stamps[0]` is the start): its batch's mean.
fn per_call_us(stamps: &[Instant], every: usize, iters: usize) -> Vec<f64> {
    let mut times_us = Vec::with_capacity(iters);
    for (b, w) in stamps.windows(2).enumerate() {
        let calls = ((b + 1) * every).min(iters).saturating_sub(b * every);
        let each = (w[1] - w[0]).as_secs_f64() * 1e6 / calls.max(1) as f64;
        times_us.extend(std::iter::repeat_n(each, calls));
    }
    times_us
}

/// Warmup, timed iterations and the checked iteration of one mode of one size
/// (`corrupt`: see [`CORRUPT`]).
fn measure<T: Element>(
    comm: &mut Communicator,
    spec: &BenchSpec,
    reference: &Reference<T>,
    count: usize,
    in_place: bool,
    corrupt: bool,
) -> Result<Sample, BenchError> {
    let (n, rank) = (comm.size(), comm.rank());
    let layout = Layout {
        collective: spec.collective,
        nranks: n,
        count,
        root: Rank::from(spec.root),
        in_place,
    };
    let extents = layout.buffers(Rank::from(rank));
    let sentinel = reference.sentinel();
    let mut buffers = Buffers::new(comm, &extents, in_place)?;
    let fill = |buffers: &mut Buffers<T>| buffers.fill(reference, rank, &extents);
    fill(&mut buffers);
    comm.barrier()?;
    let warm = Instant::now();
    for _ in 0..spec.warmup {
        call(comm, spec, &mut buffers)?;
    }
    let warm = warm.elapsed();
    comm.barrier()?;
    // One clock read per batch of calls, where it ends (the next one's start): the mean is
    // the loop's time over its iterations, as the peers time theirs (one read before the
    // loop and one after), with a spread for min, max and p99 at the cost of one read
    // (~20-30 ns) per batch instead of two. A batch is one call, or BATCH calls when the
    // warmup's calls were shorter than BATCH_BELOW (a read would be a tenth of one): each
    // of its calls then counts its batch's mean.
    let every = if spec.warmup > 0 && warm < BATCH_BELOW * spec.warmup as u32 {
        BATCH
    } else {
        1
    };
    let batches = spec.iters.div_ceil(every);
    // Every stamp's page touched before the loop: a fault in it would be timed.
    let mut stamps = vec![Instant::now(); batches + 1];
    stamps[0] = Instant::now();
    for b in 0..batches {
        for _ in b * every..((b + 1) * every).min(spec.iters) {
            call(comm, spec, &mut buffers)?;
        }
        stamps[b + 1] = Instant::now();
    }
    let times_us = per_call_us(&stamps, every, spec.iters);
    let mut wrong = 0;
    if spec.check {
        fill(&mut buffers);
        call(comm, spec, &mut buffers)?;
        if corrupt {
            let first = match &mut buffers {
                Buffers::Separate { recv, .. } => recv.first_mut(),
                Buffers::InPlace(buf) => buf.get_mut(extents.output.offset),
            };
            if let Some(x) = first.filter(|_| extents.output.len > 0) {
                *x = if *x == sentinel {
                    T::from_f64(98.0)
                } else {
                    sentinel
                };
            }
        }
        wrong = buffers
            .output(&extents)
            .map_or(extents.output.len as u64, |out| {
                reference.count_wrong(spec.collective, n, rank, spec.root, count, out)
            });
    }
    Ok(Sample { times_us, wrong })
}

#[cfg(test)]
mod tests {
    use super::per_call_us;

    /// Batches of 4 calls over 10 calls: the last batch has 2; every call counts its
    /// batch's mean, and together they add up to the loop's time.
    #[test]
    fn calls_timed_in_batches_count_their_batchs_mean() {
        let t0 = std::time::Instant::now();
        let at = |us: u64| t0 + std::time::Duration::from_micros(us);
        let stamps = [at(0), at(40), at(48), at(58)];
        let times = per_call_us(&stamps, 4, 10);
        assert_eq!(times.len(), 10);
        let want = [10.0, 10.0, 10.0, 10.0, 2.0, 2.0, 2.0, 2.0, 5.0, 5.0];
        for (got, want) in times.iter().zip(want) {
            assert!((got - want).abs() < 1e-9, "{times:?}");
        }
        assert!((times.iter().sum::<f64>() - 58.0).abs() < 1e-9);
        // One call per batch: each call its own time.
        let times = per_call_us(&stamps, 1, 3);
        assert_eq!(times.len(), 3);
        assert!((times[2] - 10.0).abs() < 1e-9, "{times:?}");
    }
}
