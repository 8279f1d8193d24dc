//! The mean time of one in-place f32 all_reduce through the Rust API, with the very loop
//! of `capi/examples/bench.c time` (so that bench/figures/capi.sh can set the two side by
//! side): `allreduce_time BYTES ITERS`, ranks from the environment launcher; rank 0
//! prints `TIME <bytes> <us>`.

use std::time::Instant;

fn main() -> rcoll::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (bytes, iters) = (arg(1, 8), arg(2, 100));
    let mut comm = rcoll::process::init()?;
    let mut v = vec![0f32; bytes / 4];
    for _ in 0..iters / 10 + 2 {
        comm.all_reduce_in_place(&mut v, rcoll::ReduceOp::Sum)?;
    }
    comm.barrier()?;
    let t0 = Instant::now();
    for _ in 0..iters {
        comm.all_reduce_in_place(&mut v, rcoll::ReduceOp::Sum)?;
    }
    let us = t0.elapsed().as_secs_f64() / iters as f64 * 1e6;
    if comm.rank() == 0 {
        println!("TIME {bytes} {us:.3}");
    }
    Ok(())
}
