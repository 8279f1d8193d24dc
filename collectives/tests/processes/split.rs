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
///
/// With `RCOLL_TEST_DIE_IN_SPLIT`, the last rank kills itself (SIGKILL) where it would enter
/// the split: every other rank's split fails, naming it, within the timeout.
pub fn split(comm: &mut Communicator) {
    let (r, n) = (comm.rank(), comm.size());
    let color = (!(n > 4 && r == n - 1)).then_some((r % 2) as u32);
    if std::env::var_os("RCOLL_TEST_DIE_IN_SPLIT").is_some() {
        if r == n - 1 {
            // Dead before it sends anything of the split (the others are in it).
            let pid = std::process::id().to_string();
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid])
                .status();
            unreachable!("rank {r} outlived its SIGKILL");
        }
        let started = Instant::now();
        let err = match comm.split(color, -(r as i64)) {
            Ok(_) => panic!("rank {r}: split succeeded though rank {} died in it", n - 1),
            Err(e) => e,
        };
        let said = err.to_string();
        let dead = format!("rank {}", n - 1);
        assert!(said.contains(&dead), "rank {r}: {said}");
        println!("RANK-SPLIT-FAILED after {:?}: {said}", started.elapsed());
        return;
    }
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

/// How the calls of the `background` scenario ended, checked as each ends: without a
/// dead rank every call succeeds; with one, a call fails only naming it, a call issued
/// after one that failed fails too (the progress thread runs them in issue order, and a
/// failure leaves the communicator unusable), none of the calls of a round the dead rank
/// never joined succeeds, and every call, whichever way it ends, ends within the bound.
struct Outcomes {
    rank: usize,
    /// The rank killed, if one is.
    dead: Option<usize>,
    /// The first round the dead rank does not join.
    dead_from: u64,
    /// Every call of a round ends within this of the round's start: the timeout, counted
    /// from the last progress, and slack.
    bound: Duration,
    /// The latest call (round, place in issue order) that succeeded, and the earliest that
    /// failed.
    last_ok: Option<(u64, usize)>,
    first_failed: Option<(u64, usize)>,
    failed: usize,
    first_error: Option<String>,
}

impl Outcomes {
    /// Call `at` (round, place in issue order), `what`, started with its round at
    /// `started`, ended with `result`: the value if it succeeded.
    fn end<T>(
        &mut self,
        at: (u64, usize),
        what: &str,
        started: Instant,
        result: rcoll::Result<T>,
    ) -> Option<T> {
        let r = self.rank;
        let took = started.elapsed();
        assert!(
            took < self.bound,
            "rank {r}: round {} {what} ended {took:?} after the round started (bound {:?})",
            at.0,
            self.bound
        );
        match result {
            Ok(v) => {
                if let Some(dead) = self.dead {
                    assert!(
                        at.0 < self.dead_from,
                        "rank {r}: round {} {what} succeeded though rank {dead} never joined it",
                        at.0
                    );
                }
                assert!(
                    self.first_failed.is_none_or(|f| f > at),
                    "rank {r}: round {} {what} succeeded after a call issued before it failed ({:?})",
                    at.0,
                    self.first_error
                );
                self.last_ok = self.last_ok.max(Some(at));
                Some(v)
            }
            Err(e) => {
                let Some(dead) = self.dead else {
                    panic!("rank {r}: round {} {what}: {e}", at.0);
                };
                assert!(
                    e.to_string().contains(&format!("rank {dead}")),
                    "rank {r}: round {} {what}: the error must name rank {dead}: {e}",
                    at.0
                );
                assert!(
                    self.last_ok.is_none_or(|ok| ok < at),
                    "rank {r}: round {} {what} failed, but a call issued after it succeeded: {e}",
                    at.0
                );
                if self.first_error.is_none() {
                    println!("RANK-ERROR {e}");
                    self.first_error = Some(e.to_string());
                }
                self.first_failed = Some(self.first_failed.map_or(at, |f| f.min(at)));
                self.failed += 1;
                None
            }
        }
    }
}

/// Scenario `background`: nonblocking collectives queued several at a time and waited for
/// out of order, blocking calls between them, each result checked. With
/// `RCOLL_TEST_KILL_LAST`, the last rank kills itself at the start of round 1, before it
/// queues anything: on the others, every call from the first that fails on (and every
/// call of round 1) must fail naming it, each within the timeout. A rank that saw a call
/// fail still waits for every call it queued, and then makes two more (queued and
/// blocking), which must fail too; it prints `RANK-DRAINED <calls failed>`.
pub fn background(comm: Communicator) {
    let (r, n) = (comm.rank(), comm.size());
    let bg = Background::new(comm).expect("progress thread");
    let die = std::env::var("RCOLL_TEST_KILL_LAST").is_ok();
    let timeout: u64 = std::env::var("RCOLL_TIMEOUT")
        .expect("RCOLL_TIMEOUT")
        .parse()
        .expect("seconds");
    let mut outcomes = Outcomes {
        rank: r,
        dead: die.then_some(n - 1),
        dead_from: 1,
        bound: Duration::from_secs(timeout + 5),
        last_ok: None,
        first_failed: None,
        failed: 0,
        first_error: None,
    };
    for round in 0..20u64 {
        if round == outcomes.dead_from && die && r == n - 1 {
            std::process::Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status()
                .expect("kill");
            std::thread::sleep(Duration::from_secs(60));
            unreachable!("rank {r} outlived kill -9");
        }
        let started = Instant::now();
        // Issue order: the sums (0..4), the broadcast (4), the all_gather (5).
        let sums: Vec<_> = (0..4u64)
            .map(|k| {
                bg.all_reduce(
                    vec![r as u64 + k + round; 10_000 + k as usize],
                    ReduceOp::Sum,
                )
            })
            .collect();
        let root = (round as usize) % n;
        let cast = bg.broadcast(vec![(r as u8).wrapping_add(round as u8); 70_001], root);
        let gathered = bg.all_gather(vec![r as u32; 1000]);
        // Out of order: the last first.
        if let Some(g) = outcomes.end((round, 5), "all_gather", started, gathered.wait()) {
            assert!(
                g.len() == 1000 * n
                    && g.chunks(1000)
                        .enumerate()
                        .all(|(q, c)| c.iter().all(|&x| x == q as u32)),
                "rank {r}: round {round} all_gather"
            );
        }
        if let Some(b) = outcomes.end((round, 4), "broadcast", started, cast.wait()) {
            assert!(
                b.len() == 70_001
                    && b.iter()
                        .all(|&x| x == (root as u8).wrapping_add(round as u8)),
                "rank {r}: round {round} broadcast from {root}"
            );
        }
        for (k, s) in sums.into_iter().enumerate().rev() {
            let what = format!("all_reduce {k}");
            if let Some(v) = outcomes.end((round, k), &what, started, s.wait()) {
                let want: u64 = (0..n as u64).map(|q| q + k as u64 + round).sum();
                assert!(
                    v.len() == 10_000 + k && v.iter().all(|&x| x == want),
                    "rank {r}: round {round} {what}"
                );
            }
        }
        // A blocking call between queued ones keeps the issue order.
        let pending = bg.all_reduce(vec![1i32; 100], ReduceOp::Sum);
        let mut v = vec![2i32; 100];
        let blocking = bg.run(|c| c.all_reduce_in_place(&mut v, ReduceOp::Sum));
        assert!(
            pending.test(),
            "rank {r}: round {round}: a blocking call ran before the call queued ahead of it"
        );
        if let Some(p) = outcomes.end((round, 6), "queued all_reduce", started, pending.wait()) {
            assert!(p.iter().all(|&x| x == n as i32), "rank {r}: round {round}");
        }
        if outcomes
            .end((round, 7), "blocking all_reduce", started, blocking)
            .is_some()
        {
            assert!(
                v.iter().all(|&x| x == 2 * n as i32),
                "rank {r}: round {round}"
            );
        }
        if outcomes.first_failed.is_some() {
            // Every call of the round was waited for. Calls made after a failure fail too.
            let started = Instant::now();
            let late = bg.all_reduce(vec![1u8; 10], ReduceOp::Max);
            outcomes.end(
                (round + 1, 0),
                "a queued call after the failure",
                started,
                late.wait(),
            );
            let late = bg.run(|c| c.barrier());
            outcomes.end(
                (round + 1, 1),
                "a blocking call after the failure",
                started,
                late,
            );
            assert!(outcomes.last_ok < outcomes.first_failed, "rank {r}");
            println!("RANK-DRAINED {}", outcomes.failed);
            return;
        }
    }
    assert!(
        !die,
        "rank {r}: every call succeeded though rank {} was killed",
        n - 1
    );
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
/// parent does too; with 5 ranks the last joins none; with 3, color 1 has one member (a
/// group of one, which all_reduces and splits alone); over TCP and over shared memory.
#[test]
fn split_groups_run_independently_and_concurrently_with_the_parent() {
    for (n, transport) in [(4, "tcp"), (5, "tcp"), (3, "tcp"), (4, "shm")] {
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

/// A rank killed as it enters a split of 4 ranks (TCP, shared memory): the other three's
/// split fails naming it, each within the timeout (10 s), none hangs or forms a group.
#[test]
fn a_rank_killed_during_split_fails_the_others_split_naming_it() {
    for transport in ["tcp", "shm"] {
        let started = Instant::now();
        let results = finish(
            spawn(
                "split",
                4,
                &[
                    ("RCOLL_TRANSPORT", transport.into()),
                    ("RCOLL_TEST_DIE_IN_SPLIT", "1".into()),
                    ("RCOLL_TIMEOUT", "10".into()),
                ],
            ),
            Duration::from_secs(120),
        );
        for (r, (ok, out)) in results.iter().enumerate().take(3) {
            assert!(
                *ok && out.contains("RANK-SPLIT-FAILED"),
                "{transport}: rank {r}:\n{out}"
            );
        }
        assert!(!results[3].0, "{transport}: the killed rank exited cleanly");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{transport}: {:?}",
            started.elapsed()
        );
    }
}

/// Nonblocking collectives on 3 ranks: queued, overlapped with blocking calls, waited for
/// out of order, all correct.
#[test]
fn nonblocking_collectives_complete_in_issue_order_and_correctly() {
    let results = finish(spawn("background", 3, &[]), Duration::from_secs(120));
    all_succeed("background", &results);
    for (r, (_, out)) in results.iter().enumerate() {
        assert!(out.contains("RANK-BACKGROUND ok"), "rank {r}:\n{out}");
    }
}

/// A rank killed while the others have nonblocking collectives queued: on each of the
/// others, every call from the first that fails on fails naming it (none of the round it
/// never joined succeeds), each within the timeout, and the rank waits for every request it
/// queued before it says so (`RANK-DRAINED`).
#[test]
fn a_killed_rank_fails_the_others_queued_requests_naming_it() {
    let results = finish(
        spawn("background", 3, &[("RCOLL_TEST_KILL_LAST", "1".into())]),
        Duration::from_secs(120),
    );
    for (r, (ok, out)) in results.iter().enumerate().take(2) {
        assert!(
            *ok && out.contains("RANK-ERROR") && out.contains("RANK-DRAINED"),
            "rank {r}:\n{out}"
        );
    }
    assert!(!results[2].0, "the killed rank exited cleanly");
}

/// `ci/multihost.sh` (root): 2 hosts x 2 ranks as network namespaces, shared memory inside
/// a host and TCP across. Placed in blocks (ranks 0, 1 on host 0), each color = rank % 2
/// group has a rank on each host; placed cyclically (rank r on host r % 2), each group is
/// one host's ranks. Every group's all_reduces and its second split are right beside the
/// parent's, and every rank finishes.
#[test]
fn emulated_hosts_split_across_and_within_hosts() {
    let name = "emulated_hosts_split_across_and_within_hosts";
    if !super::shm::is_root() {
        super::common::cannot_run(name, "network namespaces need root");
        return;
    }
    for placement in [&[][..], &["--cyclic"]] {
        let flags: Vec<&str> = ["--rate", "0", "--timeout", "120"]
            .into_iter()
            .chain(placement.iter().copied())
            .collect();
        let (ok, text) = super::shm::on_emulated_hosts("split", &flags, &[("RCOLL_TIMEOUT", "30")]);
        assert!(ok, "{placement:?}:\n{text}");
        for r in 0..4 {
            for want in [
                format!("[rank {r}] RANK-SPLIT {} of 2", 1 - r / 2),
                format!("[rank {r}] {}", super::common::RANK_COMPLETE),
            ] {
                assert!(text.contains(&want), "{placement:?}: no {want:?}\n{text}");
            }
        }
    }
}
