//! Real data through every collective x algorithm x element type x operation, on
//! in-process groups of 1..=8 ranks, in place and out of place, with counts 0, 1, primes
//! and (in `large_counts`) more than 4 Mi elements.

mod common;

use std::time::Duration;

use half::{bf16, f16};
use rcoll::{Algorithm, Collective, Communicator, DataType, Element, ReduceOp};

use common::{on_group, on_ranks, run_one, run_one_of};

const SMALL_COUNTS: [usize; 5] = [0, 1, 2, 7, 13];
const TIMEOUT: Duration = Duration::from_secs(60);

/// Every (collective, op, count, root, placement) for type `dtype`, in the same order on
/// every rank. Returns the failures seen by this rank.
fn sweep_type(
    comm: &mut Communicator,
    dtype: DataType,
    algorithm: Algorithm,
    counts: &[usize],
) -> Vec<String> {
    let n = comm.size();
    let mut failures = Vec::new();
    for collective in Collective::SCHEDULED {
        if !algorithm.serves(collective) {
            continue;
        }
        let ops: Vec<ReduceOp> = if collective.reduces() {
            ReduceOp::ALL
                .into_iter()
                .filter(|o| dtype.supports(*o))
                .collect()
        } else {
            vec![ReduceOp::Sum]
        };
        let roots = if collective.is_rooted() {
            vec![0, n - 1]
        } else {
            vec![0]
        };
        for &op in &ops {
            for &count in counts {
                for &root in &roots {
                    for in_place in [false, true] {
                        if let Err(e) = run_one_of(
                            dtype, comm, algorithm, collective, op, count, root, in_place,
                        ) {
                            failures.push(format!(
                                "{algorithm} {collective} {dtype} {op} n={n} count={count} root={root} in_place={in_place} rank {}: {e}",
                                comm.rank()
                            ));
                            return failures; // the communicator is poisoned now
                        }
                    }
                }
            }
        }
    }
    failures
}

fn sweep_all_types(comm: &mut Communicator, algorithm: Algorithm, counts: &[usize]) -> Vec<String> {
    for dtype in DataType::ALL {
        let f = sweep_type(comm, dtype, algorithm, counts);
        if !f.is_empty() {
            return f;
        }
    }
    Vec::new()
}

fn matrix(algorithm: Algorithm) {
    for n in 1..=8 {
        // 8-byte segments, so that these counts are cut into many segments and every
        // lockstep and credit path of the engine runs; a window of 2 makes senders wait.
        let group = rcoll::local::Builder::new(n)
            .timeout(TIMEOUT)
            .segment_bytes(8)
            .window(2);
        let failures: Vec<String> = on_group(group, |comm| {
            sweep_all_types(comm, algorithm, &SMALL_COUNTS)
        })
        .into_iter()
        .flatten()
        .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

/// More than 4 Mi elements in every buffer, every collective the algorithm serves, in
/// place and out of place, on 1, 3 and 8 ranks, for f32 (SIMD kernels), bf16 (widened
/// kernels) and i64, with the default segment size.
fn large(algorithm: Algorithm) {
    const BIG: usize = 4 * 1024 * 1024 + 3;
    for n in [1, 3, 8] {
        let failures: Vec<String> = on_ranks(n, None, TIMEOUT, |comm| {
            let mut f = Vec::new();
            for collective in Collective::SCHEDULED {
                if !algorithm.serves(collective) {
                    continue;
                }
                // Per-rank count such that the largest buffer exceeds 4 Mi elements.
                let count = match collective {
                    Collective::AllReduce | Collective::Reduce | Collective::Broadcast => BIG,
                    _ => BIG / n + 1,
                };
                for in_place in [false, true] {
                    let root = n - 1;
                    let results = [
                        run_one::<f32>(
                            comm,
                            algorithm,
                            collective,
                            ReduceOp::Sum,
                            count,
                            root,
                            in_place,
                        ),
                        run_one::<bf16>(
                            comm,
                            algorithm,
                            collective,
                            ReduceOp::Max,
                            count,
                            root,
                            in_place,
                        ),
                        run_one::<i64>(
                            comm,
                            algorithm,
                            collective,
                            ReduceOp::Avg,
                            count,
                            root,
                            in_place,
                        ),
                    ];
                    for e in results.into_iter().filter_map(Result::err) {
                        f.push(format!(
                            "{algorithm} {collective} n={n} count={count} in_place={in_place}: {e}"
                        ));
                    }
                }
            }
            f
        })
        .into_iter()
        .flatten()
        .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

#[test]
fn mesh() {
    matrix(Algorithm::Mesh);
}

#[test]
fn single_root() {
    matrix(Algorithm::SingleRoot);
}

#[test]
fn tree() {
    matrix(Algorithm::Tree);
}

#[test]
fn binomial_tree() {
    matrix(Algorithm::BinomialTree);
}

#[test]
fn naive_ring() {
    matrix(Algorithm::NaiveRing);
}

#[test]
fn ring() {
    matrix(Algorithm::Ring);
}

#[test]
fn double_binary_tree() {
    matrix(Algorithm::DoubleBinaryTree);
}

#[test]
fn halving_doubling() {
    matrix(Algorithm::HalvingDoubling);
}

#[test]
fn recursive_doubling() {
    matrix(Algorithm::RecursiveDoubling);
}

#[test]
fn large_mesh() {
    large(Algorithm::Mesh);
}

#[test]
fn large_single_root() {
    large(Algorithm::SingleRoot);
}

#[test]
fn large_tree() {
    large(Algorithm::Tree);
}

#[test]
fn large_binomial_tree() {
    large(Algorithm::BinomialTree);
}

#[test]
fn large_naive_ring() {
    large(Algorithm::NaiveRing);
}

#[test]
fn large_ring() {
    large(Algorithm::Ring);
}

#[test]
fn large_double_binary_tree() {
    large(Algorithm::DoubleBinaryTree);
}

#[test]
fn large_halving_doubling() {
    large(Algorithm::HalvingDoubling);
}

#[test]
fn large_recursive_doubling() {
    large(Algorithm::RecursiveDoubling);
}

/// One plan run with two segment sizes in turn: the same count of f32 and of f64 elements
/// (one layout, one cached plan) cut into 8-byte segments, 2 and 1 elements each. The
/// engine keeps a plan's segment counts between calls; each call must cut its own.
#[test]
fn one_plan_alternating_element_sizes_cuts_each_call_right() {
    const COUNT: usize = 37;
    let group = rcoll::local::Builder::new(3)
        .timeout(TIMEOUT)
        .segment_bytes(8);
    let failures: Vec<String> = on_group(group, |comm| {
        let rank = comm.rank() as f64;
        let mut f = Vec::new();
        for round in 0..4 {
            for algorithm in [Algorithm::Ring, Algorithm::Mesh] {
                let input: Vec<f32> = (0..COUNT).map(|i| (i as f64 + rank) as f32).collect();
                let mut out = vec![0f32; COUNT];
                let sent =
                    comm.with_algorithm(algorithm)
                        .all_reduce(&input, &mut out, ReduceOp::Sum);
                if let Err(e) = sent {
                    f.push(format!("round {round} {algorithm} f32: {e}"));
                    continue;
                }
                let wide: Vec<f64> = (0..COUNT).map(|i| 2.0 * i as f64 + rank).collect();
                let mut out64 = vec![0f64; COUNT];
                let sent =
                    comm.with_algorithm(algorithm)
                        .all_reduce(&wide, &mut out64, ReduceOp::Sum);
                if let Err(e) = sent {
                    f.push(format!("round {round} {algorithm} f64: {e}"));
                    continue;
                }
                for i in 0..COUNT {
                    // Ranks 0, 1 and 2: 3i + 3 in f32, 6i + 3 in f64.
                    let y = 3.0 * i as f64 + 3.0;
                    if f64::from(out[i]) != y || out64[i] != 2.0 * y - 3.0 {
                        f.push(format!(
                            "round {round} {algorithm} element {i}: {} and {}",
                            out[i], out64[i]
                        ));
                        break;
                    }
                }
            }
        }
        f
    })
    .into_iter()
    .flatten()
    .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The tables `run_one` checks with are the definition (`value`, `reduced`) element by
/// element, for every type and operation, at offsets across several periods.
#[test]
fn the_check_tables_are_the_data_definition() {
    fn one<T: Element>() -> Vec<String> {
        let mut f = Vec::new();
        for op in ReduceOp::ALL.into_iter().filter(|o| T::DTYPE.supports(*o)) {
            for n in 1..=8 {
                let data = common::Data::<T>::new(op, n);
                for r in 0..n {
                    let row = data.of(r, 200);
                    if (0..200).any(|i| row[i] != common::value::<T>(op, r, i)) {
                        f.push(format!("{} {op} n={n} rank {r}: values", T::DTYPE));
                    }
                    if (0..200).any(|i| data.at(r, i) != common::value::<T>(op, r, i)) {
                        f.push(format!("{} {op} n={n} rank {r}: at", T::DTYPE));
                    }
                }
                for from in [0, 1, 32, 33, 34, 1000] {
                    let red = data.reduced(from, 100);
                    if (0..100).any(|i| red[i] != common::reduced::<T>(op, n, from + i)) {
                        f.push(format!("{} {op} n={n}: reduced from {from}", T::DTYPE));
                    }
                }
            }
        }
        f
    }
    let mut failures = Vec::new();
    for dtype in DataType::ALL {
        failures.extend(match dtype {
            DataType::I8 => one::<i8>(),
            DataType::U8 => one::<u8>(),
            DataType::I32 => one::<i32>(),
            DataType::U32 => one::<u32>(),
            DataType::I64 => one::<i64>(),
            DataType::U64 => one::<u64>(),
            DataType::F16 => one::<f16>(),
            DataType::Bf16 => one::<bf16>(),
            DataType::F32 => one::<f32>(),
            DataType::F64 => one::<f64>(),
            _ => vec![format!("no test for {dtype}")],
        });
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The reference the checks use (`common::reference`) follows rcoll's definitions, shown on
/// cases worked by hand: integer sums and products wrap modulo 2^bits, averages divide
/// the wrapped sum truncating toward zero, bitwise operations act on the two's complement
/// bits, floats round once into the type. And the integer data do wrap: for every
/// integer type some sum over 8 ranks leaves the type's range.
#[test]
fn the_reference_follows_the_definitions() {
    use common::reference as r;
    use ReduceOp::*;
    assert_eq!(r::<i8>(Sum, &[100, 100]), -56);
    assert_eq!(r::<u8>(Sum, &[200, 100]), 44);
    assert_eq!(r::<i64>(Sum, &[i64::MAX, 1]), i64::MIN);
    assert_eq!(r::<u64>(Sum, &[u64::MAX, u64::MAX, 3]), 1);
    assert_eq!(r::<i8>(Prod, &[16, 16]), 0);
    assert_eq!(r::<u8>(Prod, &[3, 171]), 1); // 513 = 2 * 256 + 1
    assert_eq!(r::<i32>(Prod, &[-65_536, 65_536, 3]), 0);
    assert_eq!(r::<u64>(Prod, &[1 << 63, 3]), 1 << 63);
    assert_eq!(r::<i64>(Prod, &[i64::MIN, -1]), i64::MIN);
    assert_eq!(r::<i32>(Avg, &[-7, 0]), -3);
    assert_eq!(r::<i8>(Avg, &[100, 100]), -28); // -56 / 2
    assert_eq!(r::<u8>(Avg, &[200, 100, 0]), 14); // 44 / 3
    assert_eq!(r::<i8>(Min, &[-128, 127, 0]), -128);
    assert_eq!(r::<u32>(Max, &[7, u32::MAX, 0]), u32::MAX);
    assert_eq!(r::<i8>(BitAnd, &[-1, 0x0f, 0x3c]), 0x0c);
    assert_eq!(r::<u64>(BitOr, &[1 << 63, 1]), (1 << 63) | 1);
    assert_eq!(r::<i32>(BitXor, &[-1, 1, 2]), -4);
    assert_eq!(r::<f32>(Avg, &[1.0, 1.0, 0.0]), 2.0f32 / 3.0);
    assert_eq!(
        r::<f16>(
            Avg,
            &[f16::from_f32(1.0), f16::from_f32(2.0), f16::from_f32(2.0)]
        ),
        f16::from_f64(5.0 / 3.0)
    );
    assert_eq!(
        r::<bf16>(Sum, &[bf16::from_f32(256.0), bf16::from_f32(1.0)]),
        bf16::from_f32(256.0) // 257 rounds to even in bf16's 8 bits
    );
    assert_eq!(r::<f64>(Min, &[-0.5, 3.0]), -0.5);
    assert_eq!(r::<f64>(Prod, &[-2.0, 2.0, 0.5]), -2.0);
    fn wraps<T: Element>() -> bool {
        (0..common::PERIOD).any(|i| {
            let exact: i128 = (0..8)
                .map(|q| common::int_of(common::value::<T>(ReduceOp::Sum, q, i)))
                .sum();
            common::int_of(common::reduced::<T>(ReduceOp::Sum, 8, i)) != exact
        })
    }
    assert!(wraps::<i8>() && wraps::<u8>() && wraps::<i32>() && wraps::<u32>());
    assert!(wraps::<i64>() && wraps::<u64>());
}
