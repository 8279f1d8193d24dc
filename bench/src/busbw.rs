//! Algorithm bandwidth and bus bandwidth, as nccl-tests defines them.

use rcoll::Collective;

/// The factor that turns algorithm bandwidth into bus bandwidth for `collective` on
/// `nranks` ranks.
///
/// From nccl-tests `doc/PERFORMANCE.md` ("Bus bandwidth"): algbw = S / t, where S is the
/// size reported for the operation, is the natural figure for a user, but it falls as
/// ranks are added even when every link runs at full speed, so it cannot be compared with
/// the hardware's peak. busbw rescales algbw by what an optimal algorithm must move
/// through the busiest rank. In an all_reduce each rank must receive the n - 1
/// contributions of every element it owns after a reduce-scatter (S (n-1)/n bytes) and
/// then the n - 1 blocks it lacks in an all-gather (another S (n-1)/n), so its link carries
/// 2 S (n-1)/n bytes in time t: busbw = algbw * 2(n-1)/n. A reduce_scatter or an
/// all_gather is one of those halves, (n-1)/n; so is an all_to_all (each rank keeps 1/n of
/// its data and exchanges the rest) and, as nccl-tests' `gather.cu` and `scatter.cu` count
/// them, a gather or scatter. A broadcast or reduce moves the whole S through every rank
/// of a pipelined chain, and a sendrecv moves S over one link: factor 1. With these
/// factors busbw is independent of n and can be read against the link bandwidth.
pub fn factor(collective: Collective, nranks: usize) -> f64 {
    let n = nranks.max(1) as f64;
    match collective {
        Collective::AllReduce => 2.0 * (n - 1.0) / n,
        Collective::ReduceScatter
        | Collective::AllGather
        | Collective::AllToAll
        | Collective::Gather
        | Collective::Scatter => (n - 1.0) / n,
        _ => 1.0,
    }
}

/// Bytes per second over 1e9 (nccl-tests' GB/s) for `bytes` moved in `time_us`.
pub fn gbytes_per_s(bytes: usize, time_us: f64) -> f64 {
    if time_us > 0.0 {
        bytes as f64 / (time_us * 1e3)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_match_nccl_tests() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(factor(Collective::AllReduce, 4), 1.5));
        assert!(close(factor(Collective::AllReduce, 1), 0.0));
        for c in [
            Collective::ReduceScatter,
            Collective::AllGather,
            Collective::AllToAll,
            Collective::Gather,
            Collective::Scatter,
        ] {
            assert!(close(factor(c, 8), 0.875), "{c}");
        }
        for c in [
            Collective::Broadcast,
            Collective::Reduce,
            Collective::SendRecv,
        ] {
            assert!(close(factor(c, 8), 1.0), "{c}");
        }
    }

    #[test]
    fn bandwidth_is_bytes_per_nanosecond() {
        assert!((gbytes_per_s(1_000_000, 1000.0) - 1.0).abs() < 1e-12);
        assert_eq!(gbytes_per_s(8, 0.0), 0.0);
    }
}
