//! Real processes over TCP on loopback: every collective x the main algorithms on 2, 3, 4,
//! 5 and 8 ranks; a rank killed with SIGKILL mid-collective; ranks that disagree.
//!
//! The test binary is its own rank program: each test spawns copies of itself that run
//! only `rank_main` (with `RCOLL_TEST_SCENARIO` set) and joins the group through the same
//! environment variables a launcher would set.

#[path = "processes/autotune.rs"]
mod autotune;
#[path = "processes/bootstrap.rs"]
mod bootstrap;

mod common;
#[path = "processes/netns.rs"]
mod netns;
#[path = "processes/shm.rs"]
mod shm;
#[path = "processes/shrink.rs"]
mod shrink;
#[path = "processes/split.rs"]
mod split;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rcoll::{Algorithm, Collective, Communicator, ReduceOp};

use common::{
    all_reduce_until_a_rank_dies, all_succeed, finish, ring_send_recv, signal, sweep_collectives,
    StartedDir,
};

const SCENARIO: &str = "RCOLL_TEST_SCENARIO";

/// Entry point of the spawned rank processes; does nothing in a normal test run.
#[test]
fn rank_main() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    // Ranks may be held back until a file exists ("rank,rank...:path"), a minute at most.
    if let Ok(hold) = std::env::var("RCOLL_TEST_HOLD") {
        let (ranks, path) = hold.split_once(':').expect("RCOLL_TEST_HOLD=ranks:path");
        let me = std::env::var("RCOLL_RANK").unwrap_or_default();
        if ranks.split(',').any(|r| r == me) {
            let until = std::time::Instant::now() + Duration::from_secs(60);
            while !std::path::Path::new(path).exists() && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    // Rank 0 may be told to run out of file descriptors: its limit becomes what it has open
    // plus a few.
    if let Ok(slack) = std::env::var("RCOLL_TEST_NOFILE_SLACK") {
        if std::env::var("RCOLL_RANK").as_deref() == Ok("0") {
            let open = std::fs::read_dir("/proc/self/fd").expect("fds").count();
            let limit = open + slack.parse::<usize>().expect("slack");
            let ok = Command::new("prlimit")
                .args([
                    "--pid",
                    &std::process::id().to_string(),
                    &format!("--nofile={limit}:{limit}"),
                ])
                .status()
                .map(|s| s.success());
            assert!(ok.unwrap_or(false), "prlimit (util-linux)");
        }
    }
    let mut comm = match rcoll::process::init() {
        Ok(c) => c,
        Err(e) => panic!("RANK-INIT-ERROR {e}"),
    };
    if let Ok(want) = std::env::var("RCOLL_TEST_EXPECT_TRANSPORT") {
        assert_eq!(
            comm.transport_name(),
            want,
            "rank {}: {}",
            comm.rank(),
            comm.transport_details()
        );
    }
    if let Ok(want) = std::env::var("RCOLL_TEST_EXPECT_LEVELS") {
        let got = comm.level_algorithms_for::<f32>(Collective::AllReduce, 1 << 10, 0, false);
        assert_eq!(
            got.map(|l| l.to_string()).as_deref(),
            Some(want.as_str()),
            "rank {}: the levels' algorithms",
            comm.rank()
        );
    }
    if let Ok(want) = std::env::var("RCOLL_TEST_EXPECT_RING") {
        let order: Vec<String> = comm
            .hosts()
            .map(|h| h.ring_order().iter().map(|r| r.0.to_string()).collect())
            .unwrap_or_default();
        assert_eq!(order.join(" "), want, "rank {}: ring order", comm.rank());
    }
    match scenario.as_str() {
        "sweep" => sweep(&mut comm),
        "matrix" => {
            let failures = common::matrix(&mut comm);
            assert!(failures.is_empty(), "{}", failures.join("\n"));
        }
        "large" => large(&mut comm),
        "killed" => killed(&mut comm),
        // 64 MiB each: on two ranks over shared memory, one read of the root's memory.
        "killed_broadcast" => common::broadcast_until_a_rank_dies(&mut comm, 16 << 20, 10_000),
        "mismatch" => mismatch(&mut comm),
        "soak" => common::soak(&mut comm, &MAIN_ALGORITHMS),
        "fanout" => shm::fanout(&mut comm),
        "whole" => shm::whole(&mut comm),
        "split" => split::split(&mut comm),
        "background" => split::background(comm),
        "shrink_loop" => shrink::shrink_loop(comm),
        "autotune" => autotune::autotune(&mut comm),
        "autotune_mismatch" => autotune::mismatch(&mut comm),
        "auto" => {
            // Calls left to auto, small to large; every rank prints its choice.
            for count in [1usize, 1000, 100_000] {
                let a = comm.algorithm_for::<f32>(Collective::AllReduce, count, 0, true);
                println!("AUTO {count} {a}");
                let mut v = vec![1f32; count];
                comm.all_reduce_in_place(&mut v, ReduceOp::Sum)
                    .expect("all_reduce");
                assert!(v.iter().all(|x| *x == comm.size() as f32), "wrong sum");
            }
        }
        "placement" => {
            // What the kernel says this thread may run on, read apart from rcoll's own
            // sched_getaffinity, against the placement rcoll reports.
            let status = std::fs::read_to_string("/proc/thread-self/status").expect("status");
            let list = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .expect("Cpus_allowed_list");
            let placed = comm.placement().expect("a placement");
            println!(
                "PLACED rank {} kernel {} placement {} bound {}",
                comm.rank(),
                list.trim(),
                placed.cpus,
                placed.bind
            );
        }
        "hello" => {
            let mut v = vec![1u32; 10];
            comm.all_reduce_in_place(&mut v, ReduceOp::Sum)
                .expect("all_reduce");
            assert_eq!(v, vec![comm.size() as u32; 10]);
        }
        other => panic!("unknown scenario {other}"),
    }
    common::rank_complete();
}

const MAIN_ALGORITHMS: [Algorithm; 7] = [
    Algorithm::Ring,
    Algorithm::DoubleBinaryTree,
    Algorithm::HalvingDoubling,
    Algorithm::RecursiveDoubling,
    Algorithm::Tree,
    Algorithm::Mesh,
    Algorithm::Hierarchical,
];

fn sweep(comm: &mut Communicator) {
    let failures = sweep_collectives(comm, &MAIN_ALGORITHMS, &[0, 1, 7, 10_007]);
    assert!(
        failures.is_empty(),
        "rank {}: {}",
        comm.rank(),
        failures.join("\n")
    );
    // Point-to-point around the ring.
    ring_send_recv(comm, 5000);
}

/// all_reduce, broadcast, all_gather and reduce_scatter of 64 MiB of f32 and of an odd
/// size, in place and out, with the ring.
fn large(comm: &mut Communicator) {
    let n = comm.size();
    let mut failures = Vec::new();
    for collective in [
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::AllGather,
        Collective::ReduceScatter,
    ] {
        // Gathers and scatters count per rank.
        let per_rank = matches!(
            collective,
            Collective::AllGather | Collective::ReduceScatter
        );
        for total in [16 << 20, 3_000_017] {
            let count = if per_rank { total / n } else { total };
            for in_place in [false, true] {
                let r = common::run_one::<f32>(
                    comm,
                    Algorithm::Ring,
                    collective,
                    ReduceOp::Sum,
                    count,
                    n - 1,
                    in_place,
                );
                if let Err(e) = r {
                    failures.push(format!(
                        "{collective} count={count} in_place={in_place}: {e}"
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "rank {}: {}",
        comm.rank(),
        failures.join("\n")
    );
    println!(
        "PLACED {} {}",
        comm.rank(),
        comm.statistics().placed_receives
    );
}

/// Loops over a large all_reduce until the group fails (one rank is killed); prints the
/// error for the parent to check and exits successfully if it names the dead rank.
fn killed(comm: &mut Communicator) {
    all_reduce_until_a_rank_dies(comm, 4 << 20, 10_000);
}

/// Rank 1 disagrees with the others (`RCOLL_TEST_MISMATCH`: count, type, op or root):
/// every rank must get an error.
fn mismatch(comm: &mut Communicator) {
    let odd = comm.rank() == 1;
    let kind = std::env::var("RCOLL_TEST_MISMATCH").expect("mismatch kind");
    let r = match kind.as_str() {
        "count" => comm.all_reduce_in_place(
            &mut vec![1i32; if odd { 1000 } else { 1001 }],
            ReduceOp::Sum,
        ),
        "type" if odd => comm.all_reduce_in_place(&mut vec![1i32; 1000], ReduceOp::Sum),
        "type" => comm.all_reduce_in_place(&mut vec![1f32; 1000], ReduceOp::Sum),
        "op" => comm.all_reduce_in_place(
            &mut vec![1u64; 1000],
            if odd { ReduceOp::Max } else { ReduceOp::Sum },
        ),
        "root" => comm.broadcast_in_place(&mut vec![1u8; 1000], usize::from(odd)),
        // Ranks whose RCOLL_LEVEL_ALGO differ (set per rank by the test).
        "levels" => comm
            .with_algorithm(Algorithm::Hierarchical)
            .all_reduce_in_place(&mut vec![1f32; 1000], ReduceOp::Sum),
        other => panic!("unknown mismatch {other}"),
    };
    // A rank whose part was only sending learns of the disagreement from the abort of the
    // rank that saw it, at a later call: the one that sees it may only notice at the end of
    // the next call, which the sending rank may already have finished.
    let r = r.and_then(|_| comm.barrier()).and_then(|_| comm.barrier());
    println!("RANK-RESULT {r:?}");
    let e = r.expect_err("a mismatch must fail on every rank");
    assert!(
        e.to_string().contains("disagrees"),
        "the error names the disagreement: {e}"
    );
}

fn free_root() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

fn spawn(scenario: &str, n: usize, extra: &[(&str, String)]) -> Vec<Child> {
    spawn_as("rcoll", scenario, n, extra)
}

/// Like [`spawn`], with each rank's own `extra(r)`.
fn spawn_each(
    scenario: &str,
    n: usize,
    extra: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> Vec<Child> {
    let root = free_root();
    let secret =
        rcoll::process::format_unique_id(rcoll::process::random_unique_id().expect("a job secret"));
    (0..n)
        .map(|r| {
            rank_command("rcoll", scenario, (r, n), &root, &secret, &extra(r), None)
                .spawn()
                .expect("spawn rank")
        })
        .collect()
}

/// Starts `n` ranks that learn their place the way `launcher` tells them: its rank and
/// size variables, and its rendezvous variables where it has them.
fn spawn_as(launcher: &str, scenario: &str, n: usize, extra: &[(&str, String)]) -> Vec<Child> {
    let root = free_root();
    let secret =
        rcoll::process::format_unique_id(rcoll::process::random_unique_id().expect("a job secret"));
    (0..n)
        .map(|r| {
            rank_command(launcher, scenario, (r, n), &root, &secret, extra, None)
                .spawn()
                .expect("spawn rank")
        })
        .collect()
}

/// The command for rank `r` of `n`, told its place the way `launcher` does, in network
/// namespace `netns` if given; `extra` last (an empty value removes a variable).
fn rank_command(
    launcher: &str,
    scenario: &str,
    (r, n): (usize, usize),
    root: &str,
    secret: &str,
    extra: &[(&str, String)],
    netns: Option<&str>,
) -> Command {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.args([
        "rank_main",
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "--quiet",
    ])
    .env(SCENARIO, scenario)
    .env("RCOLL_TRANSPORT", "tcp")
    .env("RCOLL_TIMEOUT", "20")
    .env("RCOLL_UNIQUE_ID", secret)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let (rank_var, size_var) = match launcher {
        "rcoll" => ("RCOLL_RANK", "RCOLL_WORLD_SIZE"),
        "torchrun" => ("RANK", "WORLD_SIZE"),
        "openmpi" => ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        "pmi" => ("PMI_RANK", "PMI_SIZE"),
        "slurm" => ("SLURM_PROCID", "SLURM_NTASKS"),
        other => panic!("unknown launcher {other}"),
    };
    cmd.env(rank_var, r.to_string())
        .env(size_var, n.to_string());
    if launcher == "torchrun" {
        let (host, port) = root.rsplit_once(':').expect("host:port");
        cmd.env("MASTER_ADDR", host).env("MASTER_PORT", port);
    } else {
        cmd.env("RCOLL_ROOT_ADDR", root);
    }
    for (k, v) in extra {
        if v.is_empty() {
            cmd.env_remove(k);
        } else {
            cmd.env(k, v);
        }
    }
    cmd
}

/// A rank process whose test filter matches nothing exits 0 (`ok. 0 passed`) without
/// running a line of the scenario: [`finish`] must count it failed, as it counts a rank
/// that ran `rank_main` to its end (and printed the completion marker) succeeded.
#[test]
fn a_rank_process_that_ran_no_test_counts_as_failed() {
    let secret = rcoll::process::format_unique_id(rcoll::process::random_unique_id().expect("id"));
    let run = |filter: &str| {
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                filter,
                "--exact",
                "--nocapture",
                "--test-threads=1",
                "--quiet",
            ])
            .env(SCENARIO, "hello")
            .env("RCOLL_TRANSPORT", "tcp")
            .env("RCOLL_RANK", "0")
            .env("RCOLL_WORLD_SIZE", "1")
            .env("RCOLL_ROOT_ADDR", free_root())
            .env("RCOLL_UNIQUE_ID", &secret)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rank");
        let results = finish(vec![child], Duration::from_secs(60));
        results.into_iter().next().expect("one rank")
    };
    let (ok, out) = run("no_such_test_anywhere");
    assert!(
        !ok && out.contains("0 passed"),
        "a rank that ran no test passed for one:\n{out}"
    );
    let (ok, out) = run("rank_main");
    assert!(ok, "the same rank running rank_main:\n{out}");
}

#[test]
fn every_collective_across_processes() {
    for n in [2, 3, 4, 5, 8] {
        let results = finish(spawn("sweep", n, &[]), Duration::from_secs(300));
        for (r, (ok, out)) in results.iter().enumerate() {
            assert!(ok, "{n} ranks, rank {r} failed:\n{out}");
        }
    }
}

/// Every collective x every algorithm serving it x every operation x element types of 1,
/// 2, 4 and 8 bytes x in place and out ([`common::matrix`]) on 4 rank processes over TCP.
#[test]
fn the_matrix_of_collectives_algorithms_ops_and_types_over_tcp() {
    let results = finish(spawn("matrix", 4, &[]), Duration::from_secs(300));
    all_succeed("4 ranks over TCP", &results);
    assert!(results.iter().all(|(_, out)| out.contains("MATRIX ")));
}

/// The large end over TCP: 64 MiB collectives through the ring, checked element by
/// element on 3 ranks, with large segments read from the socket straight into the
/// caller's buffers on every rank (the ring's copies and forwards).
#[test]
fn buffers_up_to_64_mib_over_tcp_land_in_place() {
    let n = 3;
    let results = finish(spawn("large", n, &[]), Duration::from_secs(300));
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(ok, "rank {r} failed:\n{out}");
        let placed: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("PLACED {r} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("rank {r} printed no PLACED line:\n{out}"));
        assert!(
            placed > 0,
            "rank {r}: nothing read straight into place:\n{out}"
        );
    }
}

/// A host with fewer CPUs than ranks (`RCOLL_HOST_CPUS`, as a container's CPU quota would
/// say) makes auto send fewer messages per round in small calls: 4 ranks take turns on 2
/// CPUs, so one round of 3 messages each (mesh) costs more than two rounds of one. Every
/// rank chooses alike, and every call is right.
#[test]
fn auto_prices_ranks_taking_turns_on_fewer_cpus_alike_on_every_rank() {
    let n = 4;
    let choices = |cpus: usize| -> Vec<Vec<String>> {
        let extra = [("RCOLL_HOST_CPUS", cpus.to_string())];
        let results = finish(spawn("auto", n, &extra), Duration::from_secs(60));
        results
            .iter()
            .enumerate()
            .map(|(r, (ok, out))| {
                assert!(ok, "rank {r} failed:\n{out}");
                out.lines()
                    .filter(|l| l.starts_with("AUTO "))
                    .map(str::to_owned)
                    .collect()
            })
            .collect()
    };
    let (roomy, crowded) = (choices(4), choices(2));
    for c in [&roomy, &crowded] {
        assert_eq!(c[0].len(), 3, "{c:?}");
        assert!(
            c.iter().all(|x| x == &c[0]),
            "ranks chose differently: {c:?}"
        );
    }
    assert_eq!(roomy[0][0], "AUTO 1 mesh", "4 CPUs: {:?}", roomy[0]);
    assert!(
        crowded[0][0].starts_with("AUTO 1 ") && crowded[0][0] != "AUTO 1 mesh",
        "2 CPUs: {:?}",
        crowded[0]
    );
}

/// Two ranks of this host with `RCOLL_BIND=core` on a machine of two CPUs or more: after
/// init each rank's thread runs where its placement says (the kernel's
/// Cpus_allowed_list, read from /proc), on fewer CPUs than the machine has, and the two
/// ranks' CPUs do not overlap.
#[test]
fn ranks_bound_to_cores_run_on_their_placements_cpus() {
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    let parse = |t: &str| rcoll::transport::topology::CpuSet::parse_list(t).expect("a CPU list");
    let mine = std::fs::read_to_string("/proc/self/status").expect("status");
    let allowed = mine
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|l| parse(l.trim()))
        .expect("Cpus_allowed_list");
    if online < 2 || allowed.len() < 2 {
        common::cannot_run(
            "ranks_bound_to_cores_run_on_their_placements_cpus",
            "fewer than two CPUs to bind two ranks to",
        );
        return;
    }
    let results = finish(
        spawn("placement", 2, &[("RCOLL_BIND", "core".to_string())]),
        Duration::from_secs(60),
    );
    all_succeed("placement", &results);
    let sets: Vec<_> = results
        .iter()
        .enumerate()
        .map(|(r, (_, out))| {
            let line = out
                .lines()
                .find_map(|l| l.strip_prefix(&format!("PLACED rank {r} kernel ")))
                .unwrap_or_else(|| panic!("rank {r}:\n{out}"));
            let words: Vec<&str> = line.split(' ').collect();
            let (kernel, placed) = (parse(words[0]), parse(words[2]));
            assert_eq!(kernel, placed, "rank {r}: {line}");
            assert!(line.ends_with("bound true"), "rank {r}: {line}");
            assert!(
                !kernel.is_empty() && kernel.len() < allowed.len(),
                "rank {r} on {kernel} of {allowed}"
            );
            kernel
        })
        .collect();
    assert!(
        sets[0].intersection(&sets[1]).is_empty(),
        "ranks 0 and 1 share CPUs: {} and {}",
        sets[0],
        sets[1]
    );
}

/// A setting that does not parse fails every rank at setup with an error naming the
/// variable and its value (not a default taken in silence): the host's CPUs, the binding,
/// the topology file, shared memory's slots.
#[test]
fn a_bad_setting_fails_every_rank_naming_the_variable() {
    let cases: [(&[(&str, &str)], &str); 5] = [
        (&[("RCOLL_HOST_CPUS", "two")], "RCOLL_HOST_CPUS=\"two\""),
        (&[("RCOLL_HOST_CPUS", "0")], "RCOLL_HOST_CPUS=\"0\""),
        (&[("RCOLL_BIND", "tight")], "RCOLL_BIND=\"tight\""),
        (
            &[("RCOLL_TOPO_FILE", "/nonexistent/topo.xml")],
            "RCOLL_TOPO_FILE /nonexistent/topo.xml",
        ),
        (
            &[("RCOLL_TRANSPORT", "shm"), ("RCOLL_SHM_SLOTS", "1")],
            "RCOLL_SHM_SLOTS=\"1\"",
        ),
    ];
    for (vars, named) in cases {
        let extra: Vec<(&str, String)> = vars.iter().map(|(k, v)| (*k, v.to_string())).collect();
        let results = finish(spawn("hello", 2, &extra), Duration::from_secs(60));
        for (r, (ok, out)) in results.iter().enumerate() {
            assert!(
                !ok && out.contains("RANK-INIT-ERROR") && out.contains(named),
                "{vars:?}: rank {r} should fail at setup naming {named}:\n{out}"
            );
        }
    }
    // Set on one rank only: that rank fails naming it, and the other's setup fails too,
    // within its timeout, instead of waiting for it.
    let start = std::time::Instant::now();
    let results = finish(
        spawn_each("hello", 2, |r| {
            let mut env = vec![("RCOLL_TIMEOUT", "4".to_string())];
            if r == 1 {
                env.push(("RCOLL_HOST_CPUS", "-1".to_string()));
            }
            env
        }),
        Duration::from_secs(60),
    );
    let (ok1, out1) = &results[1];
    assert!(
        !ok1 && out1.contains("RCOLL_HOST_CPUS=\"-1\""),
        "rank 1:\n{out1}"
    );
    let (ok0, out0) = &results[0];
    assert!(!ok0 && out0.contains("RANK-INIT-ERROR"), "rank 0:\n{out0}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_killed_rank_fails_the_others_naming_it_20_times_out_of_20() {
    for trial in 0..20 {
        let dead = 2;
        let joined = StartedDir::new(4);
        let env = [
            ("RCOLL_TEST_DEAD", dead.to_string()),
            ("RCOLL_TEST_STARTED_DIR", joined.path.clone()),
        ];
        let mut children = spawn("killed", 4, &env);
        // Once all ranks are calling collectives, kill -9 one of them, a little later in
        // each trial (their loop of 4 MiB all_reduces takes milliseconds a call).
        joined.wait(Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(7 * trial as u64));
        children[dead].kill().expect("kill");
        let results = finish(children, Duration::from_secs(60));
        let all: Vec<String> = results
            .iter()
            .enumerate()
            .map(|(r, (_, out))| format!("--- rank {r}:\n{out}"))
            .collect();
        for (r, (ok, _)) in results.iter().enumerate().filter(|(r, _)| *r != dead) {
            assert!(
                ok,
                "trial {trial}: rank {r} did not report rank {dead}'s death\n{}",
                all.join("\n")
            );
        }
    }
}

#[test]
fn ranks_that_disagree_on_count_type_op_or_root_all_fail() {
    for (kind, words) in [
        (
            "count",
            "count, root, segment size or level algorithms differ",
        ),
        ("type", "element type"),
        ("op", "operation"),
        (
            "root",
            "count, root, segment size or level algorithms differ",
        ),
    ] {
        let extra = [
            ("RCOLL_TEST_MISMATCH", kind.to_string()),
            ("RCOLL_TIMEOUT", "5".to_string()),
        ];
        let results = finish(spawn("mismatch", 3, &extra), Duration::from_secs(60));
        for (r, (ok, out)) in results.iter().enumerate() {
            assert!(ok, "{kind}: rank {r}:\n{out}");
        }
        for (r, (_, out)) in results.iter().enumerate() {
            assert!(
                out.contains(words),
                "{kind}: rank {r} should name {words:?}:\n{out}"
            );
        }
    }
}

/// Two emulated hosts of two ranks (`RCOLL_HOST`, shared memory inside, TCP across)
/// where rank 0 is told other level algorithms (`RCOLL_LEVEL_ALGO=mesh/ring`) than the
/// others (`binomial_tree/ring`): a forced hierarchical all_reduce fails on every rank,
/// whose errors say how the calls differ, instead of hanging or mixing data.
#[test]
fn ranks_that_disagree_on_level_algorithms_all_fail() {
    let children = spawn_each("mismatch", 4, |r| {
        vec![
            ("RCOLL_TEST_MISMATCH", "levels".to_string()),
            ("RCOLL_TIMEOUT", "5".to_string()),
            ("RCOLL_TRANSPORT", "shm".to_string()),
            ("RCOLL_HOST", format!("levels-host{}", r / 2)),
            (
                "RCOLL_LEVEL_ALGO",
                if r == 0 {
                    "mesh/ring"
                } else {
                    "binomial_tree/ring"
                }
                .to_string(),
            ),
        ]
    });
    let results = finish(children, Duration::from_secs(60));
    // Every rank fails naming the disagreement: in the call, or (a rank still finishing
    // its setup when the others abort) in its setup.
    for (r, (_, out)) in results.iter().enumerate() {
        assert!(
            out.contains("level algorithms differ") || out.contains("disagrees"),
            "rank {r}:\n{out}"
        );
    }
    assert!(
        results
            .iter()
            .any(|(_, out)| out.contains("level algorithms differ")),
        "some rank names the level algorithms: {results:?}"
    );
}

#[test]
fn ipv6_rendezvous_chosen_interface_and_debug_log() {
    let l = TcpListener::bind("[::1]:0").expect("IPv6 loopback");
    let root = l.local_addr().expect("addr").to_string();
    drop(l);
    let extra = [
        ("RCOLL_ROOT_ADDR", root),
        ("RCOLL_SOCKET_IFNAME", "lo".to_string()),
        ("RCOLL_DEBUG", "debug".to_string()),
    ];
    let results = finish(spawn("hello", 3, &extra), Duration::from_secs(60));
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(ok, "rank {r}:\n{out}");
        for words in [
            "joining over tcp",
            "connected to every peer",
            "communicator ready",
            "algorithm=",
        ] {
            assert!(out.contains(words), "rank {r} log lacks {words:?}:\n{out}");
        }
        assert!(out.contains("::1"), "rank {r} runs over IPv6:\n{out}");
    }
}

#[test]
fn an_unknown_interface_is_an_error_listing_the_real_ones() {
    let extra = [("RCOLL_SOCKET_IFNAME", "nosuch0".to_string())];
    let results = finish(spawn("hello", 1, &extra), Duration::from_secs(60));
    let (ok, out) = &results[0];
    assert!(!ok, "{out}");
    assert!(
        out.contains("nosuch0") && out.contains("lo (127.0.0.1)"),
        "{out}"
    );
}

#[test]
fn ranks_started_under_each_launchers_conventions() {
    for launcher in ["torchrun", "openmpi", "pmi", "slurm"] {
        let results = finish(spawn_as(launcher, "hello", 3, &[]), Duration::from_secs(60));
        for (r, (ok, out)) in results.iter().enumerate() {
            assert!(ok, "{launcher}: rank {r}:\n{out}");
        }
    }
}

/// The soak ([`common::soak`]): 2 x 2,000 mixed collectives of random sizes on 4 rank
/// processes, over TCP and over shared memory: every result right, and the heap after the
/// second 2,000 calls no larger than after the first.
#[test]
fn a_soak_of_mixed_collectives_stays_correct_and_its_heap_flat_over_tcp_and_shm() {
    for transport in ["tcp", "shm"] {
        let extra = [
            ("RCOLL_TEST_SOAK", "2000".to_string()),
            ("RCOLL_TRANSPORT", transport.to_string()),
            ("RCOLL_TEST_EXPECT_TRANSPORT", transport.to_string()),
        ];
        let results = finish(spawn("soak", 4, &extra), Duration::from_secs(600));
        all_succeed(transport, &results);
        // The figures, for the record.
        for (r, (_, out)) in results.iter().enumerate() {
            let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("SOAK")).collect();
            assert!(!lines.is_empty(), "{transport} rank {r}:\n{out}");
            eprintln!("{transport} rank {r}: {}", lines.join("\n  "));
        }
    }
}

/// Sends `signal` to a child (`kill -SIGNAL pid`).
/// A rank stopped with SIGSTOP (alive, its sockets open, silent): the others fail within
/// the timeout, naming it, instead of waiting for ever.
#[test]
fn a_stopped_rank_fails_the_others_within_the_timeout_naming_it() {
    let stopped = 2;
    let joined = StartedDir::new(4);
    let children = spawn(
        "killed",
        4,
        &[
            ("RCOLL_TEST_DEAD", stopped.to_string()),
            ("RCOLL_TIMEOUT", "3".to_string()),
            ("RCOLL_TEST_STARTED_DIR", joined.path.clone()),
        ],
    );
    joined.wait(Duration::from_secs(60));
    let took = others_fail_naming_the_stopped_rank(children, stopped);
    // The timeout (3 s) counts from the last progress; the rest is the pipeline draining.
    assert!(took < Duration::from_secs(15), "took {took:?}");
    eprintln!("a stopped rank: every other rank failed {took:?} after SIGSTOP");
}

/// Stops rank `stopped` of `children` (SIGSTOP), waits for the others and asserts that
/// each failed naming it, then kills it: how long the others took after the signal.
fn others_fail_naming_the_stopped_rank(mut children: Vec<Child>, stopped: usize) -> Duration {
    let mut frozen = children.remove(stopped);
    signal(&frozen, "STOP");
    let start = std::time::Instant::now();
    let results = finish(children, Duration::from_secs(60));
    let took = start.elapsed();
    signal(&frozen, "KILL");
    let _ = frozen.wait();
    for (i, (ok, out)) in results.iter().enumerate() {
        let r = if i < stopped { i } else { i + 1 };
        assert!(
            *ok && out.contains("RANK-ERROR") && out.contains(&format!("rank {stopped}")),
            "rank {r} did not report the stopped rank {stopped}:\n{out}"
        );
    }
    took
}
