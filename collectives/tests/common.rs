//! Helpers shared by the real-data tests: run a closure on every rank of an in-process
//! group, and deterministic data whose reductions are exact in every element type.
#![allow(dead_code)]

use std::time::Duration;

use rcoll::{Algorithm, Communicator, Element, ReduceOp};

/// Runs `body` on each rank of a fresh `n`-rank group (one thread per rank) and returns
/// the per-rank results in rank order.
pub fn on_ranks<R: Send>(
    n: usize,
    algorithm: Option<Algorithm>,
    timeout: Duration,
    body: impl Fn(&mut Communicator) -> R + Sync,
) -> Vec<R> {
    on_group(
        rcoll::local::Builder::new(n)
            .algorithm(algorithm)
            .timeout(timeout),
        body,
    )
}

/// Runs `body` on each rank of the group `builder` makes.
pub fn on_group<R: Send>(
    builder: rcoll::local::Builder,
    body: impl Fn(&mut Communicator) -> R + Sync,
) -> Vec<R> {
    let comms = builder.build().expect("group");
    std::thread::scope(|s| {
        let body = &body;
        let handles: Vec<_> = comms
            .into_iter()
            .map(|mut c| s.spawn(move || body(&mut c)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

/// Input element `i` of rank `rank`: small integers, so that every sum, min and max of up
/// to 8 of them, and every product (of 1s and 2s), is exactly representable in every
/// element type — including f16 and bf16 — whatever the order of reduction. Float results
/// are then exact and compared exactly; integer arithmetic wraps as specified.
pub fn value<T: Element>(op: ReduceOp, rank: usize, i: usize) -> T {
    let k = (rank * 7 + i * 3) % 11;
    let v = match op {
        ReduceOp::Prod => {
            if (rank + i) % 3 == 0 {
                2.0
            } else {
                1.0
            }
        }
        _ if T::DTYPE.is_float() || T::DTYPE.name().starts_with('i') => k as f64 - 5.0,
        _ => k as f64,
    };
    T::from_f64(v)
}

/// The reduction of element `i` over `n` ranks, computed serially with the same kernels.
pub fn reduced<T: Element>(op: ReduceOp, n: usize, i: usize) -> T {
    let mut acc = [value::<T>(op, 0, i)];
    for r in 1..n {
        T::reduce_assign(op, &mut acc, &[value::<T>(op, r, i)]);
    }
    if op == ReduceOp::Avg {
        T::average(&mut acc, n);
    }
    acc[0]
}

/// A value no collective produces from the data above, to fill outputs with.
pub fn sentinel<T: Element>() -> T {
    T::from_f64(99.0)
}
