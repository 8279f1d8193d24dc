//! Reduction kernels against `memcpy`.
//!
//! Run with `cargo bench -p rcoll --bench reduce` (or `ci/bench-reduce.sh`, which also prints
//! the reduce/memcpy ratios).
//!
//! # What the throughput numbers mean
//!
//! Every benchmark here reports `Throughput::Bytes(N)` where **N = bytes of the result** (equal
//! to the bytes of ONE operand). Criterion's `thrpt` line is therefore "result bytes per
//! second" = elements produced per second x `size_of::<T>()`, and the f32-sum and memcpy lines
//! are directly comparable: their ratio is the target metric
//! ("f32 sum reduction throughput against memcpy throughput; aim >= 0.8").
//!
//! Memory traffic per call is *not* the same, though:
//!
//! | kernel                          | reads | writes | traffic | traffic / result bytes |
//! |---------------------------------|-------|--------|---------|------------------------|
//! | `memcpy` (`copy_from_slice`)    | N     | N      | 2N      | 2                      |
//! | `reduce_assign` (`acc += other`)| 2N    | N      | 3N      | 3                      |
//! | `reduce_to` (`dst = a + b`)     | 2N    | N      | 3N      | 3                      |
//!
//! So `traffic ratio = result ratio x 3/2`: a reduction that hits 0.67x memcpy in result bytes
//! per second moves memory exactly as fast as memcpy does. (Write-allocate makes the real
//! picture slightly worse for `reduce_to` and plain-store copies: a cache-missing store first
//! reads the line, so a DRAM-bound `dst = a + b` moves ~4N; glibc's memcpy switches to
//! non-temporal stores for very large copies and avoids that read. `acc += other` reads `acc`
//! anyway, so it pays no extra.)
//!
//! Working sets per size (one operand = N): memcpy and `reduce_assign` touch 2N,
//! `reduce_to` 3N. 16 KiB stays in L1d, 256 KiB in L2, 4 MiB in L3, 64 MiB goes to DRAM.

// `criterion_group!` generates an undocumented `pub fn benches()`.
#![allow(missing_docs)]

use std::mem::size_of;
use std::time::Duration;

use criterion::{
    black_box, criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use half::{bf16, f16};
use rcoll::{Element, ReduceOp};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Bytes of one operand (= bytes of the result).
const SIZES: [usize; 4] = [16 * KIB, 256 * KIB, 4 * MIB, 64 * MIB];

/// Size used for the per-type context benchmarks.
const CONTEXT_SIZE: usize = 4 * MIB;

fn label(bytes: usize) -> String {
    if bytes >= MIB {
        format!("{}MiB", bytes / MIB)
    } else {
        format!("{}KiB", bytes / KIB)
    }
}

/// A buffer of `bytes` bytes whose every page is written (a `vec![0; n]` would be `calloc`ed
/// and map the shared zero page, which makes reads of it artificially cache-hot).
///
/// Values are small and varied so repeated `acc += other` stays finite even for `f16`
/// (it converges where the increment drops below half an ulp) and integer sums just wrap.
fn buffer<T: Element>(bytes: usize, seed: usize, scale: f64) -> Vec<T> {
    let n = bytes / size_of::<T>();
    (0..n)
        .map(|i| T::from_f64(((i + seed) % 7 + 1) as f64 * scale))
        .collect()
}

/// Large buffers take tens of milliseconds per call: keep the total iteration count low.
fn sampling_for(bytes: usize) -> SamplingMode {
    if bytes >= 64 * MIB {
        SamplingMode::Flat
    } else {
        SamplingMode::Linear
    }
}

fn reduce_f32_sum(c: &mut Criterion) {
    let mut group = c.benchmark_group("reduce_f32_sum");
    for &bytes in &SIZES {
        group.throughput(Throughput::Bytes(bytes as u64));
        group.sampling_mode(sampling_for(bytes));

        let mut acc: Vec<f32> = buffer(bytes, 0, 1.0);
        let other: Vec<f32> = buffer(bytes, 3, 1e-3);
        group.bench_with_input(
            BenchmarkId::new("reduce_assign", label(bytes)),
            &bytes,
            |bch, _| {
                bch.iter(|| {
                    f32::reduce_assign(
                        black_box(ReduceOp::Sum),
                        black_box(&mut acc[..]),
                        black_box(&other[..]),
                    )
                })
            },
        );
        drop(acc);

        let a = other;
        let b: Vec<f32> = buffer(bytes, 5, 1.0);
        let mut dst: Vec<f32> = buffer(bytes, 1, 0.0);
        group.bench_with_input(
            BenchmarkId::new("reduce_to", label(bytes)),
            &bytes,
            |bch, _| {
                bch.iter(|| {
                    f32::reduce_to(
                        black_box(ReduceOp::Sum),
                        black_box(&mut dst[..]),
                        black_box(&a[..]),
                        black_box(&b[..]),
                    )
                })
            },
        );
    }
    group.finish();
}

fn memcpy(c: &mut Criterion) {
    let mut group = c.benchmark_group("memcpy");
    for &bytes in &SIZES {
        group.throughput(Throughput::Bytes(bytes as u64));
        group.sampling_mode(sampling_for(bytes));
        let src: Vec<f32> = buffer(bytes, 0, 1.0);
        let mut dst: Vec<f32> = buffer(bytes, 1, 0.0);
        group.bench_with_input(
            BenchmarkId::new("copy_from_slice", label(bytes)),
            &bytes,
            |bch, _| bch.iter(|| black_box(&mut dst[..]).copy_from_slice(black_box(&src[..]))),
        );
    }
    group.finish();
}

/// `acc = op(acc, other)` for one element type at [`CONTEXT_SIZE`] bytes per operand.
fn context_one<T: Element>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    op: ReduceOp,
) {
    let mut acc: Vec<T> = buffer(CONTEXT_SIZE, 0, 1.0);
    let other: Vec<T> = buffer(CONTEXT_SIZE, 3, 1e-3);
    group.bench_with_input(
        BenchmarkId::new(name, label(CONTEXT_SIZE)),
        &CONTEXT_SIZE,
        |bch, _| {
            bch.iter(|| {
                T::reduce_assign(
                    black_box(op),
                    black_box(&mut acc[..]),
                    black_box(&other[..]),
                )
            })
        },
    );
}

/// Other types and ops, `reduce_assign` only, same result-bytes throughput convention.
/// Compare with `reduce_f32_sum/reduce_assign/4MiB` and `memcpy/copy_from_slice/4MiB`.
fn reduce_types(c: &mut Criterion) {
    let mut group = c.benchmark_group("reduce_types");
    group.throughput(Throughput::Bytes(CONTEXT_SIZE as u64));
    context_one::<bf16>(&mut group, "bf16_sum", ReduceOp::Sum);
    context_one::<f16>(&mut group, "f16_sum", ReduceOp::Sum);
    context_one::<f64>(&mut group, "f64_sum", ReduceOp::Sum);
    context_one::<i32>(&mut group, "i32_sum", ReduceOp::Sum);
    context_one::<f32>(&mut group, "f32_max", ReduceOp::Max);
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_millis(2500))
}

criterion_group! {
    name = benches;
    config = config();
    targets = reduce_f32_sum, memcpy, reduce_types
}
criterion_main!(benches);
