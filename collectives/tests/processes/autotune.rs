//! Selection by trial (`RCOLL_AUTOTUNE`) between real processes. Part of the `processes`
//! test binary (`../processes.rs`), whose `rank_main` runs the scenarios.

use std::time::Duration;

use rcoll::{Collective, Communicator, ReduceOp};

use super::common::finish;
use super::{spawn, spawn_each};

/// Calls after the trials, checked as the ones before.
const AFTER: usize = 5;

/// Scenario `autotune`: all_reduce of two sizes until their trials are over and a few
/// calls more, every result checked: 4 KB, timed in bursts of five from a common start,
/// and 2.4 MB, one call at a time. Rank 0 calls in place, the others out of place: one
/// bucket all the same. Prints when each size settled and on what.
pub fn autotune(comm: &mut Communicator) {
    let r = comm.rank();
    let limit = rcoll::autotune::max_trial_calls(1);
    assert!(
        !comm.autotunes::<f32>(Collective::Barrier, 0),
        "a barrier is not tried"
    );
    for count in [1000usize, 600_000] {
        assert!(comm.autotunes::<f32>(Collective::AllReduce, count));
        assert_eq!(comm.autotuned::<f32>(Collective::AllReduce, count, 0), None);
        let mut calls = 0;
        let mut after = 0;
        while after < AFTER {
            checked_all_reduce(comm, count, calls);
            match comm.autotuned::<f32>(Collective::AllReduce, count, 0) {
                Some(_) => after += 1,
                None => calls += 1,
            }
            assert!(calls < limit, "rank {r}: {count} elements never settled");
        }
        let chosen = comm
            .autotuned::<f32>(Collective::AllReduce, count, 0)
            .expect("settled");
        assert_eq!(
            comm.algorithm_for::<f32>(Collective::AllReduce, count, 0, true),
            chosen,
            "what auto reports is what it settled on"
        );
        println!("TUNED {count} {chosen} after {} calls", calls + 1);
    }
}

/// One all_reduce of `count` elements, the `call`-th, its result checked: rank 0 calls in
/// place, the others out of place (one bucket all the same).
fn checked_all_reduce(comm: &mut Communicator, count: usize, call: usize) {
    let (r, n) = (comm.rank(), comm.size());
    // Small integers: every order of the additions gives the exact sum.
    let input: Vec<f32> = (0..count)
        .map(|i| ((r + 1) * (i % 7 + call % 5)) as f32)
        .collect();
    let mut out = vec![0f32; count];
    if r == 0 {
        out.copy_from_slice(&input);
        comm.all_reduce_in_place(&mut out, ReduceOp::Sum)
    } else {
        comm.all_reduce(&input, &mut out, ReduceOp::Sum)
    }
    .unwrap_or_else(|e| panic!("rank {r}, {count} elements, call {call}: {e}"));
    for (i, x) in out.iter().enumerate() {
        let want = ((i % 7 + call % 5) * n * (n + 1) / 2) as f32;
        assert_eq!(
            *x, want,
            "rank {r}, {count} elements, call {call}, element {i}"
        );
    }
}

/// Scenario `autotune_mismatch`: rank 1 runs without `RCOLL_AUTOTUNE`, the others with it;
/// the same loop of all_reduce must fail on every rank (the others' first burst starts
/// with a barrier rank 1 does not make), naming the disagreement.
pub fn mismatch(comm: &mut Communicator) {
    let mut v = vec![1f32; 1000];
    let r = (0..50)
        .try_for_each(|_| comm.all_reduce_in_place(&mut v, ReduceOp::Sum))
        .and_then(|_| comm.barrier())
        .and_then(|_| comm.barrier());
    println!("RANK-RESULT {r:?}");
    let e = r.expect_err("ranks that try different algorithms must fail");
    assert!(e.to_string().contains("disagrees"), "{e}");
}

/// Three ranks over shared memory try every candidate at two sizes (in bursts and one
/// call at a time), agree, and settle on one algorithm per size, the same on every rank,
/// whether they call in place or not, with every result exact.
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
            // Settled after two passes over at least two candidates: blocks of a warm-up
            // and 8 bursts of 5 at 4 KB, of a warm-up and one call at 2.4 MB.
            let w: Vec<&str> = line.split_whitespace().collect();
            let calls: usize = w[4].parse().unwrap();
            let least = if w[1] == "1000" {
                2 * 2 * 41
            } else {
                2 * 2 * 2
            };
            assert!(
                (least..=rcoll::autotune::max_trial_calls(1)).contains(&calls),
                "rank {r}: {line}"
            );
        }
        // The log names the candidates tried and their agreed times.
        assert_eq!(events(out).len(), 2, "rank {r}:\n{out}");
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

/// A rank's log of selection by trial: each settlement (choice, candidates and agreed
/// times) and re-trial, without the time of day and the rank, which differ between ranks.
fn events(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.contains(" INFO "))
        .filter_map(|l| l.split_once("trials: autotune"))
        .map(|(_, e)| {
            e.split_whitespace()
                .filter(|w| !w.starts_with("rank="))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}
