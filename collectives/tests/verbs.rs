//! The verbs transport on real RDMA devices: rank processes over Soft-RoCE, spread over
//! `rxe0` (veth0, 10.99.0.1) and `rxe1` (veth1, 10.99.0.2).
//!
//! These tests need RDMA devices, so they are `#[ignore]`d in a plain `cargo test` and run
//! by CI inside the Soft-RoCE VM:
//!
//! ```text
//! soft-roce/run-in-vm.sh 'cargo test -p rcoll --test verbs -- --ignored'
//! ```
//!
//! `RCOLL_TEST_VERBS_ADDRS` (default `10.99.0.1,10.99.0.2`) and `RCOLL_TEST_VERBS_IFS`
//! (default `veth0,veth1`) name the addresses and interfaces ranks alternate over, for a
//! host with rxe set up by `soft-roce/setup.sh`.

mod common;
#[path = "verbs/placement.rs"]
mod placement;
#[path = "verbs/scenarios.rs"]
mod scenarios;
#[path = "verbs/shrink.rs"]
mod shrink;
#[path = "verbs/transport.rs"]
mod transport;

use std::time::Duration;

use common::{finish, signal, spawn_ranks, StartedDir};

const SCENARIO: &str = "RCOLL_TEST_SCENARIO";
const IGNORE: &str = "needs RDMA devices: run in soft-roce/run-in-vm.sh";

/// Entry point of the spawned rank processes; does nothing in a normal test run. A rank
/// whose body ran to its end prints the completion marker the parent requires.
#[test]
fn rank_main() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    rank_body(&scenario);
    common::rank_complete();
}

fn rank_body(scenario: &str) {
    // A rank told to run without CAP_IPC_LOCK under a small locked-memory limit runs itself
    // again that way (setpriv drops the capability, prlimit sets the limit).
    if let Ok(kib) = std::env::var("RCOLL_TEST_MEMLOCK_KIB") {
        if std::env::var_os("RCOLL_TEST_MEMLOCK_APPLIED").is_none() {
            let bytes = kib.parse::<u64>().expect("KiB") * 1024;
            let status = std::process::Command::new("setpriv")
                .args(["--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", "--"])
                .arg("prlimit")
                .arg(format!("--memlock={bytes}:{bytes}"))
                .arg("--")
                .arg(std::env::current_exe().expect("exe"))
                .args(std::env::args_os().skip(1))
                .env("RCOLL_TEST_MEMLOCK_APPLIED", "1")
                .status()
                .expect("setpriv and prlimit (util-linux)");
            std::process::exit(status.code().unwrap_or(1));
        }
    }
    match scenario {
        "held_back" => return transport::held_back(),
        "lockstep" => return transport::lockstep(),
        "oversized" => return transport::oversized(),
        "fault" => return transport::faulty(),
        _ => {}
    }
    let mut comm = match rcoll::process::init() {
        Ok(c) => c,
        Err(e) => {
            println!("RANK-INIT-ERROR {e}");
            if scenario == "wrong_gid" || scenario == "memlock" {
                return;
            }
            panic!("RANK-INIT-ERROR {e}");
        }
    };
    let want = std::env::var("RCOLL_TEST_EXPECT_TRANSPORT").unwrap_or_else(|_| "verbs".into());
    assert_eq!(
        comm.transport_name(),
        want,
        "the group must run over {want}: {}",
        comm.transport_details()
    );
    // Queue pairs only where they are used: "queue pairs to N of M peers".
    if let Ok(qps) = std::env::var("RCOLL_TEST_EXPECT_QPS") {
        let details = comm.transport_details();
        assert!(
            details.contains(&format!(
                "queue pairs to {qps} of {} peers",
                comm.size() - 1
            )),
            "rank {}: expected queue pairs to {qps} peers: {details}",
            comm.rank()
        );
    }
    // A rank gives its CPU away between polls only where its host has more ranks than
    // CPUs: "waits spin" or "waits yield".
    if let Ok(waits) = std::env::var("RCOLL_TEST_EXPECT_WAITS") {
        let details = comm.transport_details();
        assert!(
            details.contains(&format!("waits {waits}")),
            "rank {} of {}: expected waits {waits}: {details}",
            comm.rank(),
            comm.size()
        );
    }
    match scenario {
        "sweep" => scenarios::sweep(&mut comm),
        "soak" => common::soak(&mut comm, &scenarios::ALGORITHMS),
        "matrix" => {
            let failures = common::matrix(&mut comm);
            assert!(failures.is_empty(), "{}", failures.join("\n"));
        }
        "large" => scenarios::large(&mut comm),
        "killed" => scenarios::killed(&mut comm),
        "zero_copy" => scenarios::zero_copy(&mut comm),
        "killed_zero_copy" => scenarios::killed_zero_copy(&mut comm),
        "wrong_gid" => panic!("rank {} joined although a GID was wrong", comm.rank()),
        "memlock" => panic!("rank {} joined although memlock was too low", comm.rank()),
        "lossy" => scenarios::lossy(&mut comm),
        "wake_ups" => scenarios::wake_ups(&mut comm),
        "shrink" => shrink::shrink(comm),
        "reaped" => shrink::reaped(comm),
        "split" => scenarios::split(&mut comm),
        other => panic!("unknown scenario {other}"),
    }
}

fn list(var: &str, default: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(str::to_owned)
        .collect()
}

/// Ranks alternate over the two devices' interfaces; rank 0 listens on the first address.
fn spawn(
    scenario: &str,
    n: usize,
    extra: impl Fn(usize) -> Vec<(String, String)>,
) -> Vec<std::process::Child> {
    let addrs = list("RCOLL_TEST_VERBS_ADDRS", "10.99.0.1,10.99.0.2");
    let ifs = list("RCOLL_TEST_VERBS_IFS", "veth0,veth1");
    let port = {
        let l = std::net::TcpListener::bind((addrs[0].as_str(), 0))
            .expect("bind a port on the first address");
        l.local_addr().expect("addr").port()
    };
    spawn_ranks("rank_main", n, |r| {
        let mut env: Vec<(String, String)> = vec![
            (SCENARIO.into(), scenario.into()),
            ("RCOLL_TRANSPORT".into(), "verbs".into()),
            ("RCOLL_TIMEOUT".into(), "60".into()),
            ("RCOLL_ROOT_ADDR".into(), format!("{}:{port}", addrs[0])),
            ("RCOLL_SOCKET_IFNAME".into(), ifs[r % ifs.len()].clone()),
        ];
        env.extend(extra(r));
        env
    })
}

/// Every rank succeeded (see [`common::all_succeed`]).
fn all_ok(what: &str, results: &[(bool, String)]) {
    common::all_succeed(what, results);
}

#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn every_collective_on_rxe_2_3_4_ranks() {
    let _ = IGNORE;
    for n in [2, 3, 4] {
        // Two CPUs: 2 ranks spin for messages, 3 and 4 give their CPU away between polls.
        let waits = if n <= 2 { "spin" } else { "yield" };
        let env = |_| {
            vec![
                ("RCOLL_HOST_CPUS".into(), "2".into()),
                ("RCOLL_TEST_EXPECT_WAITS".into(), waits.into()),
            ]
        };
        let results = finish(spawn("sweep", n, env), Duration::from_secs(600));
        all_ok(&format!("{n} ranks"), &results);
    }
}

/// The matrix (`common::matrix`: every collective x every algorithm serving it x every
/// operation x element types of 1, 2, 4 and 8 bytes x in place and out) on 3 ranks over
/// rxe, and on 2 hosts x 2 ranks emulated with `RCOLL_HOST` (shared memory inside, verbs
/// across: the hierarchical algorithm on two levels).
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn the_matrix_over_rxe_and_shared_memory_with_verbs_across() {
    let results = finish(spawn("matrix", 3, |_| Vec::new()), Duration::from_secs(600));
    all_ok("3 ranks over rxe", &results);
    let results = finish(
        spawn("matrix", 4, |r| {
            vec![
                ("RCOLL_TRANSPORT".into(), "auto".into()),
                ("RCOLL_HOST".into(), format!("host{}", r % 2)),
                ("RCOLL_TEST_EXPECT_TRANSPORT".into(), "shm+verbs".into()),
            ]
        }),
        Duration::from_secs(600),
    );
    all_ok("2 hosts x 2 ranks, shm + verbs", &results);
}

/// The soak (`common::soak`) over rxe: 2 x 1,000 mixed collectives of random sizes on 3
/// ranks, every result right, and the heap after the second 1,000 calls no larger than
/// after the first. Then 2 x 500 on 2 emulated hosts x 2 ranks placed cyclically (shared
/// memory inside, verbs across, the hierarchical algorithm among the four): where a stall
/// was once seen in CI, which would end a call at its timeout and fail the soak. The heap
/// is judged there too, net of the verbs pool: the pool grows with the timing of the run
/// (the most messages in flight and waiting at once) and never shrinks, and its buffers
/// are judged on their own, every one where the transport keeps it after every call.
/// `RCOLL_TEST_SOAK` sets the calls of both runs (a longer soak by hand).
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn a_soak_over_rxe_stays_correct_and_its_heap_flat() {
    let calls = |default: &str| std::env::var("RCOLL_TEST_SOAK").unwrap_or(default.into());
    let print = |what: &str, results: &[(bool, String)]| {
        all_ok(what, results);
        for (r, (_, out)) in results.iter().enumerate() {
            let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("SOAK")).collect();
            assert!(!lines.is_empty(), "{what}, rank {r}:\n{out}");
            println!("{what}, rank {r}: {}", lines.join("\n  "));
        }
    };
    let n = calls("1000");
    let results = finish(
        spawn("soak", 3, |_| vec![("RCOLL_TEST_SOAK".into(), n.clone())]),
        Duration::from_secs(600),
    );
    print("soak over rxe", &results);
    let n = calls("500");
    let results = finish(
        spawn("soak", 4, |r| {
            vec![
                ("RCOLL_TEST_SOAK".into(), n.clone()),
                ("RCOLL_TRANSPORT".into(), "auto".into()),
                ("RCOLL_HOST".into(), format!("host{}", r % 2)),
                ("RCOLL_TEST_EXPECT_TRANSPORT".into(), "shm+verbs".into()),
            ]
        }),
        Duration::from_secs(600),
    );
    print("soak over 2 hosts x 2 ranks, shm + verbs", &results);
}

/// Two emulated hosts of two ranks (`RCOLL_HOST`; a host's ranks on one device), with
/// rcoll's own choice: shared memory inside each host, verbs across. Every collective x
/// the main algorithms (the hierarchical one included) right.
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn shared_memory_inside_hosts_and_verbs_across() {
    let results = finish(
        spawn("sweep", 4, |r| {
            vec![
                ("RCOLL_TRANSPORT".into(), "auto".into()),
                ("RCOLL_HOST".into(), format!("host{}", r % 2)),
                ("RCOLL_TEST_EXPECT_TRANSPORT".into(), "shm+verbs".into()),
                // Two peers on the other host; none to the one sharing memory.
                ("RCOLL_TEST_EXPECT_QPS".into(), "2".into()),
            ]
        }),
        Duration::from_secs(600),
    );
    all_ok("2 hosts x 2 ranks, shm + verbs", &results);
}

#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn large_buffers_up_to_64_mib_on_rxe() {
    // 4 ranks (two per emulated CPU) up to 16 MiB: 2 ranks cover 64 MiB, and the 4 ranks at
    // 64 MiB were most of this test's 317 s in the VM.
    for (n, mib) in [(2, 64), (4, 16)] {
        let env = |_| vec![("RCOLL_TEST_LARGE_MIB".into(), format!("{mib}"))];
        let results = finish(spawn("large", n, env), Duration::from_secs(900));
        all_ok(&format!("{n} ranks, up to {mib} MiB"), &results);
    }
}

#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn registered_buffers_go_zero_copy_and_stay_correct() {
    // Offers asked for: without windows (Soft-RoCE) they are off unless asked for.
    for n in [2, 3] {
        let results = finish(
            spawn("zero_copy", n, |_| {
                vec![("RCOLL_IB_DIRECT".into(), "1".into())]
            }),
            Duration::from_secs(900),
        );
        all_ok(&format!("{n} ranks, RCOLL_IB_DIRECT=1"), &results);
    }
}

/// Without windows and without RCOLL_IB_DIRECT, no destination is offered: an offer under a
/// region's key would let every peer write the whole registered buffer for as long as it
/// stays registered. Every message goes through slots and every result is right.
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn without_windows_no_destination_is_offered_unless_asked() {
    let results = finish(
        spawn("zero_copy", 2, |_| {
            vec![
                ("RCOLL_IB_SCOPED".into(), "0".into()),
                ("RCOLL_TEST_LARGE_MIB".into(), "4".into()),
            ]
        }),
        Duration::from_secs(900),
    );
    all_ok("2 ranks, RCOLL_IB_SCOPED=0", &results);
    for (r, (_, out)) in results.iter().enumerate() {
        assert!(
            out.contains("written in place") && !out.contains("destinations offered"),
            "rank {r} offered destinations without windows:\n{out}"
        );
    }
}

/// With memory windows (the default off Soft-RoCE): each offer its own window, written
/// and invalidated by the sender, or invalidated here when a slot overtook it. Up to 16 MiB:
/// a window per offer whatever its size; at 64 MiB this test and the next took 394 s in the
/// VM, at 16 MiB 113.
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn registered_buffers_offered_through_memory_windows_stay_correct() {
    for n in [2, 3] {
        let results = finish(
            spawn("zero_copy", n, |_| {
                vec![
                    ("RCOLL_IB_SCOPED".into(), "1".into()),
                    ("RCOLL_TEST_LARGE_MIB".into(), "16".into()),
                ]
            }),
            Duration::from_secs(900),
        );
        all_ok(&format!("{n} ranks, RCOLL_IB_SCOPED=1"), &results);
        for (r, (_, out)) in results.iter().enumerate() {
            assert!(
                out.contains("destinations offered through windows"),
                "rank {r} does not offer through windows:\n{out}"
            );
            for line in out.lines().filter(|l| l.contains("written in place")) {
                println!("{n} ranks, windows: {line}");
            }
        }
    }
}

/// Without offers: every message through slots, the same results (up to 16 MiB, as above).
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn registered_buffers_without_offers_go_through_slots_and_stay_correct() {
    let results = finish(
        spawn("zero_copy", 2, |_| {
            vec![
                ("RCOLL_IB_DIRECT".into(), "0".into()),
                ("RCOLL_TEST_LARGE_MIB".into(), "16".into()),
            ]
        }),
        Duration::from_secs(900),
    );
    all_ok("2 ranks, RCOLL_IB_DIRECT=0", &results);
}

/// A wait that took the completion the engine waited for returns at once. The periodic
/// poll that heals a lost wake-up within 10 ms is off here, and the busy-poll before
/// sleeping is longer than the timeout, so that it takes every completion a root's
/// broadcast ends on: a wait that did not count one would spin, or sleep, to the deadline
/// and fail the call.
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn a_wait_wakes_for_every_completion_without_the_periodic_poll() {
    for n in [2, 3] {
        let results = finish(
            spawn("wake_ups", n, |_| {
                vec![
                    // Offers (asked for: off without windows): a root's call ends on the
                    // completions of writes into them.
                    ("RCOLL_IB_DIRECT".into(), "1".into()),
                    ("RCOLL_IB_WAKE_CHECK_MS".into(), "0".into()),
                    ("RCOLL_IB_SPIN_US".into(), "30000000".into()),
                    ("RCOLL_TIMEOUT".into(), "20".into()),
                ]
            }),
            Duration::from_secs(600),
        );
        all_ok(&format!("{n} ranks"), &results);
    }
}

/// A split over verbs: 4 ranks alternating over rxe0 and rxe1 split by rank % 2 (each new
/// group one device's ranks), the new groups and the parent all_reducing in turn, every
/// result right, the new groups over verbs too.
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn split_groups_connect_over_verbs_beside_the_parent() {
    let results = finish(spawn("split", 4, |_| Vec::new()), Duration::from_secs(300));
    all_ok("4 ranks", &results);
    for (r, (_, out)) in results.iter().enumerate() {
        assert!(
            out.contains(&format!("RANK-SPLIT {} of 2 over", r / 2)),
            "rank {r}:\n{out}"
        );
    }
}

#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn a_killed_rank_fails_the_others_naming_it() {
    for trial in 0..3 {
        let dead = 2;
        let joined = StartedDir::new(4);
        let mut children = spawn("killed", 4, |_| {
            vec![
                ("RCOLL_TEST_DEAD".into(), dead.to_string()),
                ("RCOLL_TIMEOUT".into(), "20".into()),
                ("RCOLL_TEST_STARTED_DIR".into(), joined.path.clone()),
            ]
        });
        // Killed once every rank joined (a rank killed during setup is another test); the
        // trials' 0, 300 and 600 ms more put the kill at other points of the loop (they
        // order nothing).
        joined.wait(Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(300 * trial));
        children[dead].kill().expect("kill");
        let results = finish(children, Duration::from_secs(120));
        for (r, (ok, out)) in results.iter().enumerate().filter(|(r, _)| *r != dead) {
            assert!(
                *ok && out.contains("RANK-ERROR"),
                "trial {trial}: rank {r} did not report rank {dead}'s death:\n{out}"
            );
        }
    }
}

/// A survivor whose failed call left zero-copy writes to a dead rank unacknowledged
/// reclaims them by stopping that rank's queue pair, and the stop is the dead rank's
/// failure alone: both survivors shrink and go on ([`shrink::reaped`]). With slots lent as
/// regions (Soft-RoCE's default) and through memory windows, where the slots the dead rank
/// held come back with fresh windows (theirs stay bound on its stopped pair).
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn a_survivor_that_reclaimed_writes_to_the_dead_rank_shrinks_with_the_other() {
    for scoped in ["0", "1"] {
        let joined = StartedDir::new(3);
        let mut children = spawn("reaped", 3, |_| {
            vec![
                ("RCOLL_TEST_STARTED_DIR".into(), joined.path.clone()),
                ("RCOLL_TIMEOUT".into(), "20".into()),
                ("RCOLL_IB_SCOPED".into(), scoped.into()),
            ]
        });
        joined.wait(Duration::from_secs(60));
        children[2].kill().expect("kill");
        children[2].wait().expect("the killed rank");
        std::fs::write(format!("{}/go", joined.path), b"").expect("go");
        let results = finish(children, Duration::from_secs(120));
        survivors_finished(&format!("RCOLL_IB_SCOPED={scoped}"), &results);
    }
}

/// Ranks 0 and 1 finished as the survivors of rank 2 (`SURVIVORS [0, 1]`); else every
/// rank's output, under `what`.
fn survivors_finished(what: &str, results: &[(bool, String)]) {
    let all: Vec<String> = results
        .iter()
        .enumerate()
        .map(|(r, (_, out))| format!("--- rank {r}:\n{out}"))
        .collect();
    for (r, (ok, out)) in results.iter().enumerate().take(2) {
        assert!(
            *ok && out.contains("SURVIVORS [0, 1]"),
            "{what}: rank {r} did not finish\n{}",
            all.join("\n")
        );
    }
}

/// A rank killed mid-loop over verbs: the two survivors shrink over their queue pairs and
/// finish, registered buffers still sent zero-copy and every result right
/// ([`shrink::shrink`]).
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn survivors_of_a_killed_rank_shrink_3_to_2_over_verbs() {
    // A step of its own every run (inside the VM, process ids repeat from boot to boot).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos()) as usize;
    let at = 3 + nanos % 8;
    let children = spawn("shrink", 3, |_| {
        vec![
            ("RCOLL_TEST_KILL_STEP".into(), at.to_string()),
            ("RCOLL_TIMEOUT".into(), "20".into()),
        ]
    });
    let results = finish(children, Duration::from_secs(120));
    survivors_finished(&format!("killed at step {at}"), &results);
    eprintln!(
        "killed at step {at}: {}",
        results[0]
            .1
            .lines()
            .filter(|l| l.starts_with("SHRUNK") || l.starts_with("SURVIVORS"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
}

/// A rank stopped with SIGSTOP: its device still acknowledges writes, so only the control
/// plane's liveness probe can tell. The others fail within the timeout, naming it.
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn a_stopped_rank_fails_the_others_within_the_timeout_naming_it() {
    let stopped = 2;
    let joined = StartedDir::new(3);
    let mut children = spawn("killed", 3, |_| {
        vec![
            ("RCOLL_TEST_DEAD".into(), stopped.to_string()),
            ("RCOLL_TIMEOUT".into(), "5".into()),
            ("RCOLL_TEST_STARTED_DIR".into(), joined.path.clone()),
        ]
    });
    joined.wait(Duration::from_secs(60));
    let mut frozen = children.remove(stopped);
    signal(&frozen, "STOP");
    let start = std::time::Instant::now();
    let results = finish(children, Duration::from_secs(120));
    let took = start.elapsed();
    signal(&frozen, "KILL");
    let _ = frozen.wait();
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(
            *ok && out.contains("RANK-ERROR") && out.contains(&format!("rank {stopped}")),
            "rank {r} did not report the stopped rank {stopped}:\n{out}"
        );
    }
    // A rank that timed out says what its transport held toward its peers.
    assert!(
        results
            .iter()
            .any(|(_, out)| out.contains("[transport: ") && out.contains("of its slots to write")),
        "no timeout carried the verbs state:\n{}",
        results[0].1
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
    println!("a stopped rank on verbs: the others failed {took:?} after SIGSTOP");
}

/// Mid-run, the link of rank 1's device goes down: its packets (RDMA and the TCP control
/// plane alike) vanish without a reset. Both ranks fail within the timeout, naming each
/// other; the link comes back up for the tests after this one.
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn a_blackholed_link_fails_both_ranks_within_the_timeout() {
    let link = |state: &str| {
        let ok = std::process::Command::new("ip")
            .args(["link", "set", "veth1", state])
            .status()
            .map(|s| s.success());
        assert!(ok.unwrap_or(false), "ip link set veth1 {state}");
    };
    let joined = StartedDir::new(2);
    let children = spawn("killed", 2, |r| {
        vec![
            ("RCOLL_TEST_DEAD".into(), (1 - r).to_string()),
            ("RCOLL_TIMEOUT".into(), "5".into()),
            ("RCOLL_TEST_STARTED_DIR".into(), joined.path.clone()),
        ]
    });
    joined.wait(Duration::from_secs(60));
    link("down");
    let start = std::time::Instant::now();
    let results = finish(children, Duration::from_secs(120));
    let took = start.elapsed();
    link("up");
    // rxe1 follows its netdev: wait until the port is active again.
    for _ in 0..100 {
        let out = std::process::Command::new("rdma")
            .args(["link", "show", "rxe1/1"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if out.contains("state ACTIVE") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(
            *ok && out.contains("RANK-ERROR"),
            "rank {r} did not fail naming rank {}:\n{out}",
            1 - r
        );
    }
    assert!(took < Duration::from_secs(30), "took {took:?}");
    println!("a blackholed link on verbs: both ranks failed {took:?} after it went down");
}

#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn a_killed_peer_leaves_no_send_reading_a_returned_buffer() {
    // The second trial lends windows: offers out are windows bound to the dead peer's pair.
    for trial in 0..2 {
        let dead = 2;
        let joined = StartedDir::new(3);
        let mut children = spawn("killed_zero_copy", 3, |_| {
            vec![
                ("RCOLL_TEST_DEAD".into(), dead.to_string()),
                ("RCOLL_TIMEOUT".into(), "20".into()),
                ("RCOLL_TEST_STARTED_DIR".into(), joined.path.clone()),
                ("RCOLL_IB_SCOPED".into(), (trial % 2).to_string()),
            ]
        });
        // After every rank joined; the second trial's 700 ms more puts the kill at another
        // point of the loop (it orders nothing).
        joined.wait(Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(700 * trial));
        children[dead].kill().expect("kill");
        let results = finish(children, Duration::from_secs(120));
        for (r, (ok, out)) in results.iter().enumerate().filter(|(r, _)| *r != dead) {
            assert!(
                *ok && out.contains("BORROWED-IN-FLIGHT 0"),
                "trial {trial}: rank {r} returned with sends still reading its buffer:\n{out}"
            );
        }
    }
}

/// A rank whose locked-memory limit is too small for its slots (64 KiB, no CAP_IPC_LOCK):
/// it fails naming ibv_reg_mr and the limit, and the other rank learns that cause from it
/// (relayed), not just that it closed.
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn too_little_locked_memory_is_named_on_every_rank() {
    let results = finish(
        spawn("memlock", 2, |r| {
            if r == 1 {
                vec![("RCOLL_TEST_MEMLOCK_KIB".into(), "64".into())]
            } else {
                vec![]
            }
        }),
        Duration::from_secs(120),
    );
    let (ok1, out1) = &results[1];
    assert!(
        *ok1 && out1.contains("RANK-INIT-ERROR")
            && out1.contains("ibv_reg_mr")
            && out1.contains("locked-memory limit (64 KiB"),
        "rank 1 names the registration and the limit:\n{out1}"
    );
    let (ok0, out0) = &results[0];
    assert!(
        *ok0 && out0.contains("RANK-INIT-ERROR")
            && out0.contains("aborted by rank 1")
            && out0.contains("ibv_reg_mr"),
        "rank 0 learns rank 1's cause:\n{out0}"
    );
    for (r, (_, out)) in results.iter().enumerate() {
        if let Some(line) = out.lines().find(|l| l.starts_with("RANK-INIT-ERROR")) {
            eprintln!("rank {r}: {line}");
        }
    }
}

/// netem on an interface for as long as it lives.
struct Netem(&'static str);

impl Netem {
    fn add(dev: &'static str, spec: &str) -> Netem {
        let mut args = vec!["qdisc", "add", "dev", dev, "root", "netem"];
        args.extend(spec.split_whitespace());
        let ok = std::process::Command::new("tc")
            .args(&args)
            .status()
            .expect("tc")
            .success();
        assert!(ok, "tc {}", args.join(" "));
        Netem(dev)
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tc")
            .args(["qdisc", "del", "dev", self.0, "root"])
            .status();
    }
}

#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn a_lossy_reordering_link_keeps_every_result_right() {
    let spec = "delay 1ms 1ms loss 1% reorder 25% 50%";
    let _a = Netem::add("veth0", spec);
    let _b = Netem::add("veth1", spec);
    // A lost packet waits for the ACK timeout: 4.096 us * 2^12 = 17 ms per try here (the
    // default, 268 ms, is for an emulated device under load without loss).
    let results = finish(
        spawn("lossy", 2, |_| {
            vec![("RCOLL_IB_TIMEOUT".into(), "12".into())]
        }),
        Duration::from_secs(600),
    );
    all_ok("2 ranks over 1% loss and reordering", &results);
}

#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn a_wrong_gid_forced_by_env_is_a_clear_error_on_every_rank() {
    // Rank 1 forces GID index 0, the link-local fe80:: GID, which cannot reach the others'
    // IPv4-mapped RoCE v2 GIDs.
    let results = finish(
        spawn("wrong_gid", 2, |r| {
            if r == 1 {
                vec![("RCOLL_IB_GID_INDEX".into(), "0".into())]
            } else {
                vec![]
            }
        }),
        Duration::from_secs(120),
    );
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(
            *ok && out.contains("RANK-INIT-ERROR"),
            "rank {r} must fail to join:\n{out}"
        );
    }
    // Whichever rank finds the mismatch first (the other is aborted with its error), both
    // errors name the forced GID, its index and type, and the variable that forced it.
    for (r, (_, out)) in results.iter().enumerate() {
        assert!(
            out.contains("GID index 0 fe80:")
                && out.contains("RoCE")
                && out.contains("RCOLL_IB_GID_INDEX"),
            "rank {r}: the error names the forced GID, its type and the variable:\n{out}"
        );
    }
    // An index that does not exist: refused, listing the table.
    let results = finish(
        spawn("wrong_gid", 2, |_| {
            vec![("RCOLL_IB_GID_INDEX".into(), "77".into())]
        }),
        Duration::from_secs(120),
    );
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(
            *ok && out.contains("RANK-INIT-ERROR"),
            "rank {r} must fail to join:\n{out}"
        );
    }
    assert!(
        results[0].1.contains("RCOLL_IB_GID_INDEX=77"),
        "{}",
        results[0].1
    );
}

/// Soft-RoCE in the VM: the topology finds rxe0 and rxe1 over their veth interfaces, which
/// have no NUMA locality (virtual devices), so a rank's device is chosen by address and
/// its placement says why; `rcoll-bench topo` would print the same.
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn the_topology_of_soft_roce_degrades_to_the_choice_by_address_and_says_so() {
    use rcoll::transport::topology;
    let t = topology::discover().expect("topology");
    let rxe: Vec<&topology::Device> = t.rdma().filter(|d| d.name.starts_with("rxe")).collect();
    assert!(rxe.len() >= 2, "no rxe devices in:\n{}", t.describe());
    for d in &rxe {
        assert!(d.netdev.is_some(), "{} has no interface: {d:?}", d.name);
    }
    let p = topology::place(&t, 0, 2, &topology::CpuSet::new(), topology::Bind::Numa);
    if rxe.iter().all(|d| d.numa.is_none()) {
        assert_eq!(p.device, None, "{p:?}");
        assert!(
            p.notes.iter().any(|n| n.contains("without locality")),
            "{p:?}\n{}",
            t.describe()
        );
    }
    println!(
        "{}",
        topology::Report::new(t, 2, topology::Bind::Numa, &topology::CpuSet::new()).describe()
    );
}

/// The GID table ranks choose from comes from `ibv_query_gid_table` (one call), and it is
/// the table sysfs shows entry by entry (the fallback for rdma-core before 32): the same
/// indexes, GIDs, types and interfaces, with the RoCE v2 IPv4 GID of each rxe device's
/// veth among them.
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn the_gid_table_from_one_library_call_is_the_one_sysfs_shows() {
    use rcoll::transport::verbs::{self, select::GidKind};
    let names = verbs::device_names().expect("devices");
    let rxe: Vec<&String> = names.iter().filter(|n| n.starts_with("rxe")).collect();
    assert!(rxe.len() >= 2, "rxe devices: {names:?}");
    for dev in rxe {
        let (library, sysfs) = verbs::gid_tables(dev, 1).expect("GID tables");
        let library = library.expect("rdma-core 44 has ibv_query_gid_table");
        assert_eq!(library, sysfs, "{dev}: the library's table against sysfs");
        assert!(
            library.iter().any(|e| e.kind == GidKind::RoceV2
                && e.ipv4().is_some_and(|a| a.octets()[..3] == [10, 99, 0])
                && e.netdev.as_deref().is_some_and(|n| n.starts_with("veth"))),
            "{dev}: no RoCE v2 GID of a 10.99.0.x veth in {library:?}"
        );
    }
}
