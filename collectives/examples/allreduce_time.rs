//! The mean time of one in-place f32 all_reduce through the Rust API, with the very loop
//! of `capi/examples/bench.c time` (so that bench/figures/capi.sh can set the two side by
//! side): `allreduce_time BYTES ITERS [OTHER_BYTES]`, ranks from the environment launcher;
//! rank 0 prints `TIME <bytes> <us>`. With OTHER_BYTES the calls take turns between the
//! two sizes (an application's gradient buckets of two sizes) and the time is per call.

use std::time::Instant;

fn main() -> rcoll::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).and_then(|a| a.parse::<usize>().ok());
    let (bytes, iters) = (arg(1).unwrap_or(8), arg(2).unwrap_or(100));
    let other = arg(3);
    let mut comm = rcoll::process::init()?;
    let mut v = vec![0f32; bytes / 4];
    let mut w = vec![0f32; other.unwrap_or(0) / 4];
    let mut call = |i: usize, comm: &mut rcoll::Communicator| match (other, i % 2) {
        (Some(_), 1) => comm.all_reduce_in_place(&mut w, rcoll::ReduceOp::Sum),
        _ => comm.all_reduce_in_place(&mut v, rcoll::ReduceOp::Sum),
    };
    for i in 0..iters / 10 + 2 {
        call(i, &mut comm)?;
    }
    comm.barrier()?;
    let t0 = Instant::now();
    for i in 0..iters {
        call(i, &mut comm)?;
    }
    let us = t0.elapsed().as_secs_f64() / iters as f64 * 1e6;
    if comm.rank() == 0 {
        match other {
            Some(o) => println!("TIME {bytes}+{o} {us:.3}"),
            None => println!("TIME {bytes} {us:.3}"),
        }
    }
    Ok(())
}
