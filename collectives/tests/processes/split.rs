//! Communicator split and nonblocking collectives ([`rcoll::Background`]) between real
//! processes. Part of the `processes` test binary (`../processes.rs`), whose `rank_main`
//! runs the scenarios.

use std::time::{Duration, Instant};

use rcoll::{Background, Communicator, ReduceOp};

use super::common::finish;
use super::spawn;

/// The members of `color` in a group of `n` where the last of more than 4 ranks joins
/// no color, in the order split ranks them (key = -rank: highest rank first).
fn members(n: usize, color: usize) -> Vec<usize> {
    let mut m: Vec<usize> = (0..n)
        .filter(|&q| q % 2 == color && !(n > 4 && q == n - 1))
        .collect();
    m.reverse();
    m
}

/// Scenario `split`: color = rank % 2 (the last of more than 4 ranks: none), key = -rank.
/// Each new group all_reduces on its own thread while the parent all_reduces on this one,
/// every result checked; then a group splits once more.
pub fn split(comm: &mut Communicator) {
    let (r, n) = (comm.rank(), comm.size());
    let color = (!(n > 4 && r == n - 1)).then_some((r % 2) as u32);
    let child = comm.split(color, -(r as i64)).expect("split");
    let Some(mut child) = child else {
        assert!(
            color.is_none(),
            "rank {r}: no communicator for color {color:?}"
        );
        parent_rounds(comm);
        println!("RANK-SPLIT none");
        return;
    };
    let m = members(n, r % 2);
    assert_eq!(child.size(), m.len(), "rank {r}: new size");
    assert_eq!(
        Some(child.rank()),
        m.iter().position(|&q| q == r),
        "rank {r}: ordered by key"
    );
    std::thread::scope(|s| {
        let sub = s.spawn(|| {
            for i in 0..40u64 {
                let len = 1000 + 37 * i as usize;
                let mut v = vec![(r as u64 + 1) * (i + 1); len];
                child
                    .all_reduce_in_place(&mut v, ReduceOp::Sum)
                    .expect("child all_reduce");
                let want: u64 = m.iter().map(|&q| (q as u64 + 1) * (i + 1)).sum();
                assert!(v.iter().all(|&x| x == want), "rank {r}: child round {i}");
            }
        });
        parent_rounds(comm);
        sub.join().expect("child thread");
    });
    // A split of a split: one group of everyone, reversed back.
    let mut grandchild = child
        .split(Some(7), child.rank() as i64)
        .expect("second split")
        .expect("color 7");
    assert_eq!(grandchild.rank(), child.rank());
    let mut v = vec![1u32; 5];
    grandchild
        .all_reduce_in_place(&mut v, ReduceOp::Sum)
        .expect("grandchild");
    assert_eq!(v, vec![m.len() as u32; 5]);
    println!("RANK-SPLIT {} of {}", child.rank(), child.size());
}

fn parent_rounds(comm: &mut Communicator) {
    let (r, n) = (comm.rank(), comm.size());
    for i in 0..40u32 {
        let mut v = vec![r as u32 + i; 3000];
        comm.all_reduce_in_place(&mut v, ReduceOp::Sum)
            .expect("parent all_reduce");
        let want: u32 = (0..n as u32).map(|q| q + i).sum();
        assert!(v.iter().all(|&x| x == want), "rank {r}: parent round {i}");
    }
}

/// Scenario `background`: nonblocking collectives queued several at a time and waited for
/// out of order, blocking calls between them, each result checked. With
/// `RCOLL_TEST_KILL_LAST`, the last rank kills itself after the first round and the
/// others' queued requests must fail naming it, within the timeout.
pub fn background(comm: Communicator) {
    let (r, n) = (comm.rank(), comm.size());
    let bg = Background::new(comm).expect("progress thread");
    let die = std::env::var("RCOLL_TEST_KILL_LAST").is_ok();
    // With a rank killed, any call from the kill on may be the one that fails — a
    // request or a blocking call, of the round it dies in or of the one before (a peer
    // already past it aborts the others) — and it must name the dead rank.
    let ok_or_died = |what: &str, e: rcoll::Error| -> ! {
        let named = format!("rank {}", n - 1);
        assert!(die, "rank {r}: {what}: {e}");
        assert!(e.to_string().contains(&named), "rank {r}: {what}: {e}");
        println!("RANK-ERROR {e}");
        super::common::rank_complete();
        std::process::exit(0);
    };
    for round in 0..20u64 {
        if round == 1 && die && r == n - 1 {
            std::process::Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status()
                .expect("kill");
            std::thread::sleep(Duration::from_secs(60));
        }
        let sums: Vec<_> = (0..4u64)
            .map(|k| {
                bg.all_reduce(
                    vec![r as u64 + k + round; 10_000 + k as usize],
                    ReduceOp::Sum,
                )
            })
            .collect();
        let cast = bg.broadcast(
            vec![(r as u8).wrapping_add(round as u8); 70_001],
            (round as usize) % n,
        );
        let gathered = bg.all_gather(vec![r as u32; 1000]);
        let started = Instant::now();
        // Out of order: the last first.
        let g = gathered.wait();
        if die && round >= 1 {
            let e = g.expect_err("a collective with a killed rank succeeded");
            let named = format!("rank {}", n - 1);
            assert!(e.to_string().contains(&named), "rank {r}: {e}");
            assert!(
                started.elapsed() < Duration::from_secs(25),
                "rank {r}: {:?}",
                started.elapsed()
            );
            println!("RANK-ERROR {e}");
            return;
        }
        let g = g.unwrap_or_else(|e| ok_or_died("all_gather", e));
        assert!(g
            .chunks(1000)
            .enumerate()
            .all(|(q, c)| c.iter().all(|&x| x == q as u32)));
        let b = cast.wait().unwrap_or_else(|e| ok_or_died("broadcast", e));
        let root = (round as usize) % n;
        assert!(b
            .iter()
            .all(|&x| x == (root as u8).wrapping_add(round as u8)));
        for (k, s) in sums.into_iter().enumerate().rev() {
            let v = s.wait().unwrap_or_else(|e| ok_or_died("all_reduce", e));
            let want: u64 = (0..n as u64).map(|q| q + k as u64 + round).sum();
            assert!(
                v.len() == 10_000 + k && v.iter().all(|&x| x == want),
                "round {round} k {k}"
            );
        }
        // A blocking call between queued ones keeps the issue order.
        let pending = bg.all_reduce(vec![1i32; 100], ReduceOp::Sum);
        let mut v = vec![2i32; 100];
        bg.run(|c| c.all_reduce_in_place(&mut v, ReduceOp::Sum))
            .unwrap_or_else(|e| ok_or_died("blocking", e));
        assert!(v.iter().all(|&x| x == 2 * n as i32));
        assert!(
            pending.test(),
            "a blocking call ran before the call queued ahead of it"
        );
        assert!(pending
            .wait()
            .unwrap_or_else(|e| ok_or_died("queued", e))
            .iter()
            .all(|&x| x == n as i32));
    }
    let mut comm = bg.into_inner();
    comm.barrier().expect("barrier after the progress thread");
    println!("RANK-BACKGROUND ok");
}

fn all_succeed(what: &str, results: &[(bool, String)]) {
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(ok, "{what}: rank {r} failed:\n{out}");
    }
}

/// 4 ranks split by color = rank % 2 into two groups that all_reduce correctly while the
/// parent does too; with 5 ranks the last joins none; over TCP and over shared memory.
#[test]
fn split_groups_run_independently_and_concurrently_with_the_parent() {
    for (n, transport) in [(4, "tcp"), (5, "tcp"), (4, "shm")] {
        let results = finish(
            spawn("split", n, &[("RCOLL_TRANSPORT", transport.into())]),
            Duration::from_secs(120),
        );
        all_succeed(&format!("{n} ranks on {transport}"), &results);
        for (r, (_, out)) in results.iter().enumerate() {
            assert!(
                out.contains("RANK-SPLIT"),
                "{n}/{transport} rank {r}:\n{out}"
            );
        }
    }
}

/// Nonblocking collectives on 3 ranks: queued, overlapped with blocking calls, waited for
/// out of order, all correct.
#[test]
fn nonblocking_collectives_complete_in_issue_order_and_correctly() {
    let results = finish(spawn("background", 3, &[]), Duration::from_secs(120));
    all_succeed("background", &results);
}

/// A rank killed while the others have nonblocking collectives queued: their requests
/// fail naming it.
#[test]
fn a_killed_rank_fails_the_others_queued_requests_naming_it() {
    let results = finish(
        spawn("background", 3, &[("RCOLL_TEST_KILL_LAST", "1".into())]),
        Duration::from_secs(120),
    );
    for (r, (ok, out)) in results.iter().enumerate().take(2) {
        assert!(*ok && out.contains("RANK-ERROR"), "rank {r}:\n{out}");
    }
    assert!(!results[2].0, "the killed rank exited cleanly");
}
