//! Floating-point rounding: random data, every algorithm, compared with an f64 serial
//! reference under the classic bound for recursive summation, and bit-identical results
//! on every rank.
//!
//! Bound: any order of summing n terms, rounding each partial sum to the element type
//! (unit roundoff u), errs by at most (n-1) u sum|x_i| (Higham, Accuracy and Stability of
//! Numerical Algorithms, 2nd ed., eq. 4.4), to first order. The inputs are rounded to the
//! element type before the reference sees them, so the bound covers only the reduction.
//! f16 and bf16 widen to f32 inside each reduction but round to their own type between
//! hops, so their u is their own (2^-11, 2^-8).

mod common;

use std::time::Duration;

use half::{bf16, f16};
use rcoll::{Algorithm, Collective, Element, ReduceOp};

use common::on_ranks;

fn random(seed: u64, i: usize) -> f64 {
    // SplitMix64, mapped to [-1, 1).
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(i as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

fn check<T: Element>(unit_roundoff: f64) {
    const COUNT: usize = 3001;
    for algorithm in Algorithm::ALL
        .into_iter()
        .filter(|a| a.serves(Collective::AllReduce))
    {
        for n in 1..=8 {
            let input = |r: usize| -> Vec<T> {
                (0..COUNT)
                    .map(|i| T::from_f64(random(r as u64 + 1, i)))
                    .collect()
            };
            let results = on_ranks(n, Some(algorithm), Duration::from_secs(60), |comm| {
                let mut v = input(comm.rank());
                comm.all_reduce_in_place(&mut v, ReduceOp::Sum).map(|_| v)
            });
            let results: Vec<Vec<T>> = results
                .into_iter()
                .map(|r| r.expect("all_reduce"))
                .collect();
            let inputs: Vec<Vec<T>> = (0..n).map(input).collect();
            for i in 0..COUNT {
                let exact: f64 = inputs.iter().map(|v| v[i].to_f64()).sum();
                let magnitude: f64 = inputs.iter().map(|v| v[i].to_f64().abs()).sum();
                let bound = (n as f64 - 1.0) * unit_roundoff * magnitude * 1.000_001;
                let got = results[0][i].to_f64();
                assert!(
                    (got - exact).abs() <= bound,
                    "{algorithm} {} n={n} element {i}: {got} vs {exact} (bound {bound})",
                    T::DTYPE
                );
            }
            for (r, v) in results.iter().enumerate() {
                assert!(
                    v.iter()
                        .zip(&results[0])
                        .all(|(a, b)| bytemuck::bytes_of(a) == bytemuck::bytes_of(b)),
                    "{algorithm} {} n={n}: rank {r} differs from rank 0",
                    T::DTYPE
                );
            }
        }
    }
}

#[test]
fn f64_sum() {
    check::<f64>(f64::EPSILON / 2.0);
}

#[test]
fn f32_sum() {
    check::<f32>(f32::EPSILON as f64 / 2.0);
}

#[test]
fn f16_sum() {
    check::<f16>(f16::EPSILON.to_f64() / 2.0);
}

#[test]
fn bf16_sum() {
    check::<bf16>(bf16::EPSILON.to_f64() / 2.0);
}
