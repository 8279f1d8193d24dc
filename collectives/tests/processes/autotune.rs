//! Selection by trial (`RCOLL_AUTOTUNE`) between real processes. Part of the `processes`
//! test binary (`../processes.rs`), whose `rank_main` runs the scenarios.

use std::time::Duration;

use rcoll::{Collective, Communicator, ReduceOp};

use super::common::finish;
use super::{spawn, spawn_each};

/// Calls of each size; enough for every candidate's trials at `RCOLL_AUTOTUNE=1` (three
/// passes of a warm-up and a timed call, at most 10 candidates).
const CALLS: usize = 70;

/// Scenario `autotune`: all_reduce of two sizes, alternately out of place and in place,
/// every result checked; prints when each size settled and on what.
pub fn autotune(comm: &mut Communicator) {
    let (r, n) = (comm.rank(), comm.size());
    // 1.2 and 2.4 MB: sizes timed `trials` times, one call at a time (smaller ones are
    // timed in bursts, and more often).
    for count in [300_000usize, 600_000] {
        assert_eq!(comm.autotuned::<f32>(Collective::AllReduce, count, 0), None);
        let mut settled_at = None;
        for call in 0..CALLS {
            // Small integers: every order of the additions gives the exact sum.
            let input: Vec<f32> = (0..count)
                .map(|i| ((r + 1) * (i % 7 + call)) as f32)
                .collect();
            let mut out = vec![0f32; count];
            if call % 2 == 0 {
                comm.all_reduce(&input, &mut out, ReduceOp::Sum)
            } else {
                out.copy_from_slice(&input);
                comm.all_reduce_in_place(&mut out, ReduceOp::Sum)
            }
            .unwrap_or_else(|e| panic!("rank {r}, {count} elements, call {call}: {e}"));
            for (i, x) in out.iter().enumerate() {
                let want = ((i % 7 + call) * n * (n + 1) / 2) as f32;
                assert_eq!(
                    *x, want,
                    "rank {r}, {count} elements, call {call}, element {i}"
                );
            }
            let tuned = comm.autotuned::<f32>(Collective::AllReduce, count, 0);
            if settled_at.is_none() && tuned.is_some() {
                settled_at = Some(call + 1);
            }
        }
        let tuned = comm.autotuned::<f32>(Collective::AllReduce, count, 0);
        let chosen = tuned.unwrap_or_else(|| panic!("rank {r}: {count} elements never settled"));
        assert_eq!(
            comm.algorithm_for::<f32>(Collective::AllReduce, count, 0, true),
            chosen,
            "what auto reports is what it settled on"
        );
        println!(
            "TUNED {count} {chosen} after {} calls",
            settled_at.unwrap_or(0)
        );
    }
}

/// Scenario `autotune_mismatch`: rank 1 runs without `RCOLL_AUTOTUNE`, the others with it;
/// the same loop of all_reduce must fail on every rank, naming the disagreement.
pub fn mismatch(comm: &mut Communicator) {
    let mut v = vec![1f32; 1000];
    let r = (0..CALLS)
        .try_for_each(|_| comm.all_reduce_in_place(&mut v, ReduceOp::Sum))
        .and_then(|_| comm.barrier())
        .and_then(|_| comm.barrier());
    println!("RANK-RESULT {r:?}");
    let e = r.expect_err("ranks that try different algorithms must fail");
    assert!(e.to_string().contains("disagrees"), "{e}");
}

/// Three ranks over shared memory try every candidate at two sizes, agree, and settle
/// on one algorithm per size, the same on every rank, with every result exact.
#[test]
fn trials_settle_every_rank_on_one_algorithm_per_size() {
    let extra = [
        ("RCOLL_TRANSPORT", "shm".to_string()),
        ("RCOLL_AUTOTUNE", "1".to_string()),
        ("RCOLL_DEBUG", "info".to_string()),
    ];
    let results = finish(spawn("autotune", 3, &extra), Duration::from_secs(120));
    let mut seen: Option<Vec<String>> = None;
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(ok, "rank {r}:\n{out}");
        let tuned: Vec<String> = out
            .lines()
            .filter(|l| l.starts_with("TUNED"))
            .map(String::from)
            .collect();
        assert_eq!(tuned.len(), 2, "rank {r}:\n{out}");
        for line in &tuned {
            // Settled after the trials (at least a first pass of two calls of at least
            // two candidates), not at once.
            let calls: usize = line.split_whitespace().nth(4).unwrap().parse().unwrap();
            assert!((4..=60).contains(&calls), "rank {r}: {line}");
        }
        // The log names the candidates tried and their agreed times.
        let tried = out.lines().filter(|l| l.contains("autotune")).count();
        assert_eq!(tried, 2, "rank {r}:\n{out}");
        match &seen {
            None => seen = Some(tuned),
            Some(first) => assert_eq!(first, &tuned, "rank {r} settled elsewhere"),
        }
    }
}

/// A rank without `RCOLL_AUTOTUNE` among ranks with it: every rank fails with an error
/// naming the disagreement, none hangs.
#[test]
fn a_rank_without_autotune_fails_every_rank_not_a_hang() {
    let children = spawn_each("autotune_mismatch", 3, |r| {
        vec![
            ("RCOLL_TRANSPORT", "shm".to_string()),
            ("RCOLL_TIMEOUT", "10".to_string()),
            (
                "RCOLL_AUTOTUNE",
                if r == 1 { String::new() } else { "1".into() },
            ),
        ]
    });
    let results = finish(children, Duration::from_secs(60));
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(ok, "rank {r}:\n{out}");
        assert!(
            out.contains("algorithm"),
            "rank {r} names the algorithms:\n{out}"
        );
    }
}
