//! Survivors carry on: a training-like loop of all_reduces on 4 rank processes, one or
//! two of them killed (SIGKILL, by themselves at a step the test picks at random, while
//! their all_reduce runs) or stopped (SIGSTOP, by the test); the others agree on who
//! failed, shrink ([`Communicator::shrink`]) and finish the loop, every step's result
//! checked against a reference computed here from the survivors' data. Over TCP, shared
//! memory and 2 hosts emulated by `ci/multihost.sh`. Part of the `processes` test binary
//! (`../processes.rs`), whose `rank_main` runs the scenario.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rcoll::{Communicator, ReduceOp};

use super::common::{
    cannot_run, finish, kill_myself_soon, shrink_contribution as contribution,
    shrink_expected as expected, signal,
};
use super::spawn_each;

/// Elements of each step's all_reduce (1 MiB of i64: long enough to be killed inside).
const ELEMS: usize = 1 << 17;
/// Steps of the loop.
const STEPS: usize = 24;

/// `RCOLL_TEST_VICTIMS`: the ranks that fail ("1,3"), `RCOLL_TEST_KILL_STEP`: when,
/// `RCOLL_TEST_FAULT`: `kill` (at that step), `kill_in_agreement` (the second victim
/// kills itself as it starts to shrink), `stop` (the test stops it: it prints its steps),
/// `exclude` (every rank removes the first victim, healthy, at that step).
fn env_list(name: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("a rank"))
        .collect()
}

/// Scenario `shrink_loop` (see the module docs).
pub fn shrink_loop(comm: Communicator) {
    let mut comm = comm;
    let me = comm.rank();
    let n = comm.size();
    let victims = env_list("RCOLL_TEST_VICTIMS");
    let at: usize = std::env::var("RCOLL_TEST_KILL_STEP")
        .expect("kill step")
        .parse()
        .expect("a step");
    let fault = std::env::var("RCOLL_TEST_FAULT").expect("fault");
    let go_file = std::env::var("RCOLL_TEST_GO").ok();
    let mut alive: Vec<usize> = (0..n).collect();
    let mut shrinks = 0;
    let mut step = 0;
    let mut v = vec![0i64; ELEMS];
    // After the loop, with `stop`: steps until the test says the stopped rank woke and
    // is done (rank 0's word, so that every rank runs the same number).
    let mut extra = 0usize;
    let started = Instant::now();
    loop {
        let waiting_for_go = fault == "stop" && step >= STEPS && go_file.is_some();
        if step >= STEPS && !waiting_for_go {
            break;
        }
        println!("STEP {step}");
        let dies_now = step == at
            && shrinks == 0
            && match fault.as_str() {
                "kill" => victims.contains(&me),
                // The second victim dies later, as it begins to shrink.
                "kill_in_agreement" => victims.first() == Some(&me),
                _ => false,
            };
        if dies_now {
            kill_myself_soon();
        }
        if step == at && fault == "exclude" && shrinks == 0 {
            let removed = victims[0];
            if me == removed {
                let Err(e) = comm.shrink(&[removed]) else {
                    panic!("a removed rank got a communicator")
                };
                println!("REMOVED {e}");
                assert!(matches!(e, rcoll::Error::Excluded { .. }), "{e}");
                return;
            }
            comm = shrink_to(
                &mut comm,
                &[alive
                    .iter()
                    .position(|&r| r == removed)
                    .expect("the removed rank is a member")],
                &mut alive,
            );
            shrinks += 1;
        }
        let rank_now = comm.rank();
        for (i, x) in v.iter_mut().enumerate() {
            *x = contribution(alive[rank_now], step, i);
        }
        match comm.all_reduce_in_place(&mut v, ReduceOp::Sum) {
            Ok(()) => {
                let bad = (0..ELEMS).find(|&i| v[i] != expected(&alive, step, i));
                assert_eq!(
                    bad.map(|i| (i, v[i], expected(&alive, step, i))),
                    None,
                    "rank {me} (now {rank_now}), step {step}, members {alive:?}: (element, got, expected)"
                );
                step += 1;
            }
            Err(e) if fault == "stop" && victims.contains(&me) => {
                woken(&mut comm, e);
                return;
            }
            Err(e) => {
                println!("FAILED {step}: {e}");
                if fault == "kill_in_agreement" && victims.get(1) == Some(&me) {
                    kill_myself_soon();
                }
                // Back to the last step every member finished: a rank whose part of the
                // failed step was done went on to the next one. A failure of that first
                // call (a rank that died after the decision) is shrunk away again.
                loop {
                    comm = shrink_to(&mut comm, &[], &mut alive);
                    shrinks += 1;
                    let mut next = [step as u64];
                    match comm.all_reduce_in_place(&mut next, ReduceOp::Min) {
                        Ok(()) => {
                            step = next[0] as usize;
                            break;
                        }
                        Err(e) => println!("FAILED resume: {e}"),
                    }
                }
                println!("RESUME {step}");
            }
        }
        if waiting_for_go {
            let mut go = [u8::from(
                go_file
                    .as_deref()
                    .is_some_and(|f| std::path::Path::new(f).exists()),
            )];
            comm.broadcast_in_place(&mut go, 0).expect("go");
            extra += 1;
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "no word from the test"
            );
            if go[0] == 1 {
                break;
            }
        }
    }
    let mut want: Vec<usize> = (0..n).filter(|r| !victims.contains(r)).collect();
    want.sort();
    assert_eq!(
        alive, want,
        "rank {me}: the members after {shrinks} shrinks"
    );
    println!("SURVIVORS {alive:?} after {shrinks} shrinks, {extra} steps after the loop");
}

/// The shrunk communicator, `alive` (the first group's ranks of its members) updated.
fn shrink_to(comm: &mut Communicator, exclude: &[usize], alive: &mut Vec<usize>) -> Communicator {
    let t = Instant::now();
    let new = comm.shrink(exclude).expect("shrink");
    let s = new.shrunk().expect("a shrunk communicator says so").clone();
    assert_eq!(s.parent_ranks.len(), new.size());
    let left: Vec<usize> = s.excluded.iter().map(|&p| alive[p]).collect();
    *alive = s.parent_ranks.iter().map(|&p| alive[p]).collect();
    println!(
        "SHRUNK excluded {left:?} members {alive:?} in {:?}",
        t.elapsed()
    );
    // The host map recomputed for the members (new ranks), and the ring over it.
    if let Some(h) = new.hosts() {
        let hosts: Vec<Vec<u32>> = (0..h.nhosts())
            .map(|i| h.members(i).iter().map(|r| r.0).collect())
            .collect();
        let ring: Vec<u32> = h.ring_order().iter().map(|r| r.0).collect();
        println!("HOSTS {hosts:?} RING {ring:?}");
    }
    // Shared memory's description counts the peers of this rank's host it reads from:
    // the members left, not those it started with.
    if std::env::var("RCOLL_SHM_SINGLE_COPY").is_ok_and(|v| v == "on") {
        let details = new.transport_details();
        let peers: usize = details
            .split("single copy from ")
            .nth(1)
            .and_then(|rest| rest.split(" of ").nth(1))
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no single-copy peer count in: {details}"));
        let me = rcoll::Rank(new.rank() as u32);
        let local = new.hosts().map_or(new.size(), |h| h.local_size(me));
        assert_eq!(peers, local - 1, "the shrunk group's details: {details}");
    }
    new
}

/// The stopped rank, woken after the others shrank: its call failed (`err`), and so does
/// its shrink (an error, never a hang, never a group of its own).
fn woken(comm: &mut Communicator, err: rcoll::Error) {
    println!("WOKE-FAILED {err}");
    let Err(e) = comm.shrink(&[]) else {
        panic!("a rank the others left out got a communicator of its own")
    };
    println!("WOKE-SHRINK {e}");
    assert!(
        matches!(
            e,
            rcoll::Error::Excluded { .. } | rcoll::Error::Agreement { .. }
        ),
        "{e}"
    );
}

/// A step to fail at, different every run (printed, to reproduce one).
fn random_step() -> usize {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0) as usize;
    3 + nanos % 12
}

fn spawn_loop(
    transport: &str,
    victims: &str,
    fault: &str,
    at: usize,
    extra: Vec<(&'static str, String)>,
) -> Vec<Child> {
    let (transport, victims, fault) = (
        transport.to_string(),
        victims.to_string(),
        fault.to_string(),
    );
    spawn_each("shrink_loop", 4, move |_| {
        let mut env = vec![
            ("RCOLL_TRANSPORT", transport.clone()),
            ("RCOLL_TEST_VICTIMS", victims.clone()),
            ("RCOLL_TEST_FAULT", fault.clone()),
            ("RCOLL_TEST_KILL_STEP", at.to_string()),
            ("RCOLL_TIMEOUT", "10".to_string()),
        ];
        if transport == "shm" {
            // Single copy on, so that the peers it reads from are counted in the details.
            env.push(("RCOLL_SHM_SINGLE_COPY", "on".to_string()));
        }
        env.extend(extra.iter().cloned());
        env
    })
}

/// Every rank but `victims` completed, agreed that exactly `victims` failed and printed
/// the same survivors; the victims died (SIGKILL) or were removed.
fn survivors_agree(results: &[(bool, String)], victims: &[usize], what: &str) {
    let all: Vec<String> = results
        .iter()
        .enumerate()
        .map(|(r, (_, out))| format!("--- rank {r}:\n{out}"))
        .collect();
    let want: Vec<usize> = (0..results.len())
        .filter(|r| !victims.contains(r))
        .collect();
    let line = format!("SURVIVORS {want:?}");
    for (r, (ok, out)) in results.iter().enumerate() {
        if victims.contains(&r) {
            continue;
        }
        assert!(
            *ok && out.contains(&line),
            "{what}: rank {r} did not finish with {line}\n{}",
            all.join("\n")
        );
    }
    eprintln!(
        "{what}: {}",
        results[want[0]]
            .1
            .lines()
            .filter(|l| l.starts_with("SHRUNK") || l.starts_with("FAILED"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
}

fn killed_and_shrunk(transport: &str, victims: &[usize], fault: &str) {
    let at = random_step();
    let list: Vec<String> = victims.iter().map(|v| v.to_string()).collect();
    let what = format!("{transport}, {fault} of {victims:?} at step {at}");
    eprintln!("{what}");
    let children = spawn_loop(transport, &list.join(","), fault, at, Vec::new());
    let results = finish(children, Duration::from_secs(120));
    survivors_agree(&results, victims, &what);
}

#[test]
fn tcp_survivors_of_a_killed_rank_shrink_and_finish_the_loop() {
    killed_and_shrunk("tcp", &[2], "kill");
}

#[test]
fn tcp_survivors_of_a_killed_rank_0_shrink_without_a_root() {
    killed_and_shrunk("tcp", &[0], "kill");
}

#[test]
fn shm_survivors_of_a_killed_rank_shrink_and_finish_the_loop() {
    killed_and_shrunk("shm", &[1], "kill");
}

#[test]
fn shm_survivors_of_two_ranks_killed_at_once_agree_on_both() {
    killed_and_shrunk("shm", &[1, 3], "kill");
}

/// Rank 2 dies mid all_reduce, and rank 0 (the agreement's first coordinator) kills
/// itself as it begins to shrink: the two survivors agree on both (in one shrink, or in
/// a second one when rank 0's death came after the decision).
#[test]
fn tcp_a_failure_during_the_agreement_is_agreed_on_too() {
    killed_and_shrunk("tcp", &[2, 0], "kill_in_agreement");
}

/// Every rank removes healthy rank 3 at a step: no failure, the same shrink.
#[test]
fn tcp_a_planned_removal_of_a_healthy_rank() {
    let at = random_step();
    let children = spawn_loop("tcp", "3", "exclude", at, Vec::new());
    let results = finish(children, Duration::from_secs(120));
    survivors_agree(&results, &[3], &format!("removal of rank 3 at step {at}"));
    assert!(
        results[3].0 && results[3].1.contains("REMOVED"),
        "{}",
        results[3].1
    );
}

/// A rank stopped (SIGSTOP) mid-loop: the others time out on it, agree, shrink and go on;
/// woken (SIGCONT) while they still run, its calls fail, and the survivors' every result
/// stays right (it writes nothing of theirs).
fn stopped_and_shrunk(transport: &str) {
    let victim = 2;
    let at = random_step();
    let dir = std::env::temp_dir().join(format!(
        "rcoll-shrink-stop-{}-{transport}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let go = dir.join("go");
    let mut children = spawn_loop(
        transport,
        &victim.to_string(),
        "stop",
        at,
        vec![
            ("RCOLL_TIMEOUT", "3".to_string()),
            ("RCOLL_TEST_GO", go.display().to_string()),
        ],
    );
    // Every rank's lines as they come: the victim's steps, the survivors' shrinks.
    let (tx, rx) = mpsc::channel::<(usize, String)>();
    let mut taken = Vec::new();
    for (r, c) in children.iter_mut().enumerate() {
        let out = c.stdout.take().expect("stdout");
        let tx = tx.clone();
        taken.push(std::thread::spawn(move || {
            let mut text = String::new();
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send((r, line.clone()));
                text.push_str(&line);
                text.push('\n');
            }
            text
        }));
    }
    drop(tx);
    let deadline = Instant::now() + Duration::from_secs(90);
    let next = |what: &mut dyn FnMut(usize, &str) -> bool| loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((r, line)) if what(r, &line) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    };
    let step_line = format!("STEP {at}");
    assert!(
        next(&mut |r, l| r == victim && l == step_line),
        "rank {victim} never reached step {at}"
    );
    signal(&children[victim], "STOP");
    let stopped = Instant::now();
    let mut shrunk = 0;
    let ok = next(&mut |r, l| {
        if r != victim && l.starts_with("SHRUNK") {
            shrunk += 1;
        }
        shrunk == 3
    });
    let took = stopped.elapsed();
    signal(&children[victim], "CONT");
    assert!(ok, "the survivors did not all shrink");
    eprintln!("{transport}: SIGSTOP at step {at}: every survivor shrank {took:?} after it");
    // The woken rank's calls fail; then the survivors may stop.
    let woke = next(&mut |r, l| r == victim && l.starts_with("WOKE-SHRINK"));
    std::fs::write(&go, b"").expect("go");
    // Each rank's exit, and its output (which the reading threads hold).
    let until = Instant::now() + Duration::from_secs(60);
    let mut results = Vec::new();
    for (mut c, t) in children.into_iter().zip(taken) {
        let status = loop {
            match c.try_wait() {
                Ok(Some(status)) => break Some(status),
                _ if Instant::now() > until => break None,
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        if status.is_none() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let mut err = String::new();
        if let Some(mut e) = c.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        let out = t.join().unwrap_or_default();
        let ok = status.is_some_and(|s| s.success()) && super::common::completed(&out);
        let hung = if status.is_none() {
            "\nHUNG: killed by the test"
        } else {
            ""
        };
        results.push((ok, format!("{out}{err}{hung}")));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        woke,
        "the woken rank did not fail its shrink:\n{}",
        results[victim].1
    );
    survivors_agree(
        &results,
        &[victim],
        &format!("{transport}: SIGSTOP of rank {victim} at step {at}"),
    );
    assert!(
        results[victim].1.contains("WOKE-FAILED"),
        "{}",
        results[victim].1
    );
}

#[test]
fn tcp_a_stopped_rank_is_left_out_and_fails_when_it_wakes() {
    stopped_and_shrunk("tcp");
}

#[test]
fn shm_a_stopped_rank_is_left_out_and_fails_when_it_wakes() {
    stopped_and_shrunk("shm");
}

/// `ci/multihost.sh` (root): 2 hosts x 2 ranks as network namespaces (shared memory
/// inside a host, TCP across); rank 1 (host 1's first) kills itself mid all_reduce and the
/// three others shrink and finish.
#[test]
fn emulated_hosts_survivors_of_a_killed_rank_shrink_and_finish_the_loop() {
    let name = "emulated_hosts_survivors_of_a_killed_rank_shrink_and_finish_the_loop";
    if !super::shm::is_root() {
        cannot_run(name, "network namespaces need root");
        return;
    }
    let at = random_step();
    let at = at.to_string();
    let (_, text) = super::shm::on_emulated_hosts(
        "shrink_loop",
        &["--rate", "0", "--timeout", "120"],
        &[
            ("RCOLL_TIMEOUT", "10"),
            ("RCOLL_TEST_VICTIMS", "1"),
            ("RCOLL_TEST_FAULT", "kill"),
            ("RCOLL_TEST_KILL_STEP", &at),
        ],
    );
    for r in [0, 2, 3] {
        for want in [
            format!("[rank {r}] SURVIVORS [0, 2, 3]"),
            // Host 0 kept rank 0, host 1 ranks 2 and 3 (now 1 and 2).
            format!("[rank {r}] HOSTS [[0], [1, 2]] RING [0, 1, 2]"),
            format!("[rank {r}] {}", super::common::RANK_COMPLETE),
        ] {
            assert!(
                text.contains(&want),
                "step {at}: rank {r}: no {want:?}\n{text}"
            );
        }
    }
    eprintln!(
        "emulated hosts, rank 1 killed at step {at}: {}",
        text.lines()
            .filter(|l| l.contains("SHRUNK"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
}
