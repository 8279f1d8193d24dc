//! Processes of one host over shared memory (`RCOLL_TRANSPORT=shm`), and hosts emulated
//! with `RCOLL_HOST` (shared memory inside each, TCP across). Part of the `processes` test
//! binary (`../processes.rs`), whose `rank_main` runs the scenarios (those of single-copy
//! sends are here: `fanout`, `whole`).

use std::time::Duration;

use rcoll::{Algorithm, Communicator};

use super::common::{all_succeed, cannot_run, finish, StartedDir};
use super::{spawn, spawn_each};

/// The segments (and nothing else) the ranks with these process ids left in /dev/shm:
/// none, once they exited. Segment names start with `rcoll-<pid>-`.
fn leftovers(pids: &[u32]) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| pids.iter().any(|p| n.starts_with(&format!("rcoll-{p}-"))))
                .collect()
        })
        .unwrap_or_default()
}

/// `extra` on top of shared memory required (and checked by every rank).
/// Single copy (off by default): the receiver reads sends from 32 KiB straight from the
/// sender's memory.
fn single_copy_on() -> (&'static str, String) {
    ("RCOLL_SHM_SINGLE_COPY", "on".to_string())
}

fn shm(extra: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("RCOLL_TRANSPORT", "shm".to_string()),
        ("RCOLL_TEST_EXPECT_TRANSPORT", "shm".to_string()),
    ];
    env.extend_from_slice(extra);
    env
}

/// Every collective x the main algorithms, in place and out, 0 to 10,007 elements, and
/// point to point, on 2 to 8 ranks of this host over shared memory (single copy on odd
/// rank counts); nothing left in /dev/shm afterwards.
#[test]
fn every_collective_over_shared_memory_on_2_to_8_ranks() {
    for n in 2..=8 {
        // Through the ring, and on odd rank counts with single copy from 32 KiB.
        let env: Vec<_> = (n % 2 == 1).then(single_copy_on).into_iter().collect();
        let children = spawn("sweep", n, &shm(&env));
        let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
        let results = finish(children, Duration::from_secs(300));
        all_succeed(&format!("{n} ranks"), &results);
        assert_eq!(leftovers(&pids), Vec::<String>::new(), "{n} ranks");
    }
}

/// The matrix ([`super::common::matrix`]: every collective x every algorithm serving it x
/// every operation x element types of 1, 2, 4 and 8 bytes x in place and out) on 3 ranks
/// over shared memory, and on 2 hosts x 2 ranks emulated with `RCOLL_HOST` (shared memory
/// inside each, TCP across: the hierarchical algorithm on two levels).
#[test]
fn the_matrix_over_shared_memory_and_on_emulated_hosts() {
    let results = finish(spawn("matrix", 3, &shm(&[])), Duration::from_secs(300));
    all_succeed("3 ranks over shared memory", &results);
    let hosts = ["a", "a", "b", "b"];
    let children = spawn_each("matrix", 4, |r| {
        vec![
            ("RCOLL_TRANSPORT", "shm".to_string()),
            ("RCOLL_TEST_EXPECT_TRANSPORT", "shm+tcp".to_string()),
            ("RCOLL_HOST", hosts[r].to_string()),
        ]
    });
    let results = finish(children, Duration::from_secs(300));
    all_succeed("2 emulated hosts x 2 ranks", &results);
}

/// The large end: all_reduce, broadcast, all_gather and reduce_scatter of 64 MiB (and
/// sizes that are not a multiple of the segment), in place and out, checked element by
/// element, on 2 and 4 ranks through the ring, and on 2 with single copy.
#[test]
fn buffers_up_to_64_mib_over_shared_memory() {
    for (n, single_copy) in [(2, false), (4, false), (2, true)] {
        let env: Vec<_> = single_copy.then(single_copy_on).into_iter().collect();
        let results = finish(spawn("large", n, &shm(&env)), Duration::from_secs(300));
        all_succeed(&format!("{n} ranks, single copy {single_copy}"), &results);
    }
}

/// Runs `scenario` on `n` ranks over shared memory, all of which must succeed: how many
/// sends each rank's peers read from its memory (its `ZERO-COPY <rank> <sends>` line), and
/// what the ranks printed.
fn single_copy_sends(scenario: &str, n: usize) -> (Vec<u64>, String) {
    let results = finish(
        spawn(scenario, n, &shm(&[single_copy_on()])),
        Duration::from_secs(120),
    );
    all_succeed(&format!("{n} ranks"), &results);
    let text: String = results.iter().map(|(_, out)| out.as_str()).collect();
    let sends = (0..n)
        .map(|rank| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(&format!("ZERO-COPY {rank} ")))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("rank {rank} printed no count: {text}"))
        })
        .collect();
    (sends, text)
}

/// A send to several peers at once (mesh all_gather, a single_root broadcast's root) is
/// read by each of them from the sender's memory, as a send to one peer is, and every
/// result is right: each rank's sends of 256 KiB blocks all went single copy.
#[test]
fn a_send_to_several_peers_is_read_from_the_senders_memory_by_each() {
    let (sends, text) = single_copy_sends("fanout", 4);
    for (rank, sends) in sends.into_iter().enumerate() {
        // Each of 3 rounds: its block to 3 peers (mesh), and as the root of one broadcast
        // (rounds 0..3 have roots 0, 1, 2), the vector to 3 peers; every 128 KiB segment
        // is one send.
        let segments = (256 << 10) / (128 << 10);
        let want = 3 * 3 * segments + if rank < 3 { 3 * segments } else { 0 };
        assert_eq!(sends, want as u64, "rank {rank}: {text}");
    }
}

/// On two ranks, a collective that only moves data sends each message in one piece, not
/// in segments: every broadcast, all_gather, all_to_all, gather and scatter of 4 MiB and
/// 3 elements is right, and each message was one read of the sender's memory.
#[test]
fn on_two_ranks_a_message_that_only_moves_is_read_in_one_piece() {
    let (sends, text) = single_copy_sends("whole", 2);
    for (rank, sends) in sends.into_iter().enumerate() {
        // As the root of two broadcasts (one in place); all_gather twice; all_to_all
        // once; gather (rank 1 to 0) and scatter (rank 0 to 1) once: one message each.
        // Cut into 128 KiB segments, each would be 33.
        assert_eq!(sends, 6, "rank {rank}: {text}");
    }
}

/// `kill -9` of a rank in the middle of 4 MiB all_reduces over shared memory: every other
/// rank fails naming it, within the timeout, and the dead rank's segment is gone.
#[test]
fn a_killed_rank_on_shared_memory_fails_the_others_naming_it() {
    for trial in 0..6u64 {
        // Through the ring, and with single copy (every other trial).
        killed_and_named("killed", 4, 2, trial, trial % 2 == 1);
    }
}

/// `kill -9` of either rank of two while 64 MiB broadcasts go whole (one read of the
/// root's memory each, during which the root spins rather than sleeps): the reader's
/// death, and the root's, are named by the other within the timeout.
#[test]
fn a_rank_killed_while_a_whole_message_is_read_is_named_by_the_other() {
    for trial in 0..4u64 {
        killed_and_named("killed_broadcast", 2, (1 - trial % 2) as usize, trial, true);
    }
}

/// Runs `scenario` on `n` ranks over shared memory (`single_copy` on or off), kills rank
/// `dead` once all started (and `53 * trial` ms more): every other rank reports an error
/// naming it within 20 s, and no segment is left.
fn killed_and_named(scenario: &str, n: usize, dead: usize, trial: u64, single_copy: bool) {
    let joined = StartedDir::new(n);
    let mut env = vec![
        ("RCOLL_TEST_DEAD", dead.to_string()),
        ("RCOLL_TEST_STARTED_DIR", joined.path.clone()),
    ];
    env.extend(single_copy.then(single_copy_on));
    let mut children = spawn(scenario, n, &shm(&env));
    let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    joined.wait(Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(53 * trial));
    children[dead].kill().expect("kill");
    let start = std::time::Instant::now();
    let results = finish(children, Duration::from_secs(60));
    for (r, (ok, out)) in results.iter().enumerate().filter(|(r, _)| *r != dead) {
        assert!(
            *ok && out.contains("RANK-ERROR"),
            "{scenario} trial {trial}: rank {r} did not report rank {dead}'s death:\n{out}"
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{scenario} trial {trial}"
    );
    assert_eq!(
        leftovers(&pids),
        Vec::<String>::new(),
        "{scenario} trial {trial}"
    );
}

/// A rank stopped with SIGSTOP: on shared memory nothing tells the others but the
/// liveness probe; they fail within the timeout, naming it.
#[test]
fn a_stopped_rank_on_shared_memory_fails_the_others_within_the_timeout() {
    // 3 ranks of 4 MiB all_reduces through the ring; then 2 ranks of 64 MiB broadcasts
    // with single copy, read whole from the root's memory, with the reader stopped (the
    // root spins while it reads).
    for (scenario, n, stopped, single_copy) in
        [("killed", 3, 1, false), ("killed_broadcast", 2, 1, true)]
    {
        let joined = StartedDir::new(n);
        let mut env = vec![
            ("RCOLL_TEST_DEAD", stopped.to_string()),
            ("RCOLL_TIMEOUT", "3".to_string()),
            ("RCOLL_TEST_STARTED_DIR", joined.path.clone()),
        ];
        env.extend(single_copy.then(single_copy_on));
        let children = spawn(scenario, n, &shm(&env));
        joined.wait(Duration::from_secs(60));
        let took = super::others_fail_naming_the_stopped_rank(children, stopped);
        assert!(took < Duration::from_secs(15), "{scenario}: took {took:?}");
        eprintln!(
            "{scenario}: a stopped rank on shared memory: the others failed {took:?} after SIGSTOP"
        );
    }
}

/// Hosts emulated with `RCOLL_HOST`: 2 hosts x 2 ranks, 3 hosts x 1, 2 (cyclic) and 3
/// ranks, and 3 hosts of 3, 2 and 1 ranks placed cyclically; shared memory inside each
/// host, TCP across; every collective correct with every main algorithm, the
/// hierarchical one included.
#[test]
fn every_collective_on_emulated_hosts_shared_memory_inside_tcp_across() {
    for hosts in [
        vec!["a", "a", "b", "b"],
        vec!["a", "b", "c"],
        vec!["a", "b", "c", "a", "b", "c"],
        vec!["a", "a", "a", "b", "b", "b", "c", "c", "c"],
        vec!["a", "b", "c", "a", "b", "a"],
    ] {
        let n = hosts.len();
        let children = spawn_each("sweep", n, |r| {
            // A rank alone on its host has only TCP peers.
            let alone = hosts.iter().filter(|&&h| h == hosts[r]).count() == 1;
            vec![
                ("RCOLL_TRANSPORT", "shm".to_string()),
                (
                    "RCOLL_TEST_EXPECT_TRANSPORT",
                    if alone { "tcp" } else { "shm+tcp" }.to_string(),
                ),
                ("RCOLL_HOST", hosts[r].to_string()),
            ]
        });
        let results = finish(children, Duration::from_secs(120));
        all_succeed(&format!("hosts {hosts:?}"), &results);
    }
}

/// Auto on emulated hosts where rank 2 is alone on its host (its transport is TCP, its
/// peers' shm+tcp): every rank prices pairs inside hosts alike and looks tuning rules up
/// by the transport they share, so all make the same choice — without a tuning file, and
/// with one whose `tcp` rule (the network's) names `tree`.
#[test]
fn auto_chooses_alike_on_every_rank_when_one_is_alone_on_its_host() {
    let hosts = ["a", "a", "b"];
    let tuning =
        std::env::temp_dir().join(format!("rcoll-tuning-hosts-{}.json", std::process::id()));
    std::fs::write(
        &tuning,
        r#"{ "version": 1,
             "models": { "tcp": { "alpha_us": 40.0, "bandwidth_gbps": 5.0, "reduce_gbytes_per_s": 2.0 },
                         "shm": { "alpha_us": 0.5, "bandwidth_gbps": 200.0, "reduce_gbytes_per_s": 8.0 } },
             "rules": [ { "transport": "tcp", "collective": "all_reduce", "nranks": 3,
                          "bytes": 400000, "algorithm": "tree" } ] }"#,
    )
    .expect("write the tuning file");
    for file in [None, Some(&tuning)] {
        let children = spawn_each("auto", 3, |r| {
            let mut env = vec![
                ("RCOLL_TRANSPORT", "shm".to_string()),
                ("RCOLL_HOST", hosts[r].to_string()),
            ];
            if let Some(f) = file {
                env.push(("RCOLL_TUNING_FILE", f.display().to_string()));
            }
            env
        });
        let results = finish(children, Duration::from_secs(60));
        all_succeed(&format!("tuning file {file:?}"), &results);
        let choices: Vec<Vec<&str>> = results
            .iter()
            .map(|(_, out)| out.lines().filter(|l| l.starts_with("AUTO ")).collect())
            .collect();
        for (r, c) in choices.iter().enumerate() {
            assert_eq!(c.len(), 3, "rank {r}: {c:?}");
            assert_eq!(c, &choices[0], "rank {r} chose differently from rank 0");
            if file.is_some() {
                assert!(c.iter().all(|l| l.ends_with(" tree")), "rank {r}: {c:?}");
            }
        }
    }
    let _ = std::fs::remove_file(&tuning);
}

/// Auto across two emulated hosts of two ranks over TCP, where host `a`'s ranks are told
/// their machine has `cpus_a` CPUs and host `b`'s 8 (`RCOLL_HOST_CPUS`): each rank's
/// choices, per rank.
fn choices_with_host_cpus(cpus_a: usize) -> Vec<Vec<String>> {
    let hosts = ["a", "a", "b", "b"];
    let children = spawn_each("auto", 4, |r| {
        let cpus = if hosts[r] == "a" { cpus_a } else { 8 };
        vec![
            ("RCOLL_TRANSPORT", "tcp".to_string()),
            ("RCOLL_HOST", hosts[r].to_string()),
            ("RCOLL_HOST_CPUS", cpus.to_string()),
        ]
    });
    let results = finish(children, Duration::from_secs(60));
    all_succeed(&format!("host a with {cpus_a} CPUs"), &results);
    results
        .iter()
        .map(|(_, out)| {
            out.lines()
                .filter(|l| l.starts_with("AUTO "))
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

/// Every host's CPUs travel in the bootstrap table: with host `a` crowded (2 ranks on 1
/// CPU) and host `b` not, every rank, those of `b` too, prices `a`'s ranks taking turns
/// and chooses alike — and not what all choose when `a` has room.
#[test]
fn ranks_on_every_host_price_a_crowded_host_alike() {
    let (roomy, crowded) = (choices_with_host_cpus(8), choices_with_host_cpus(1));
    for c in [&roomy, &crowded] {
        for (r, x) in c.iter().enumerate() {
            assert_eq!(x.len(), 3, "rank {r}: {x:?}");
            assert_eq!(x, &c[0], "rank {r} chose differently from rank 0: {c:?}");
        }
    }
    eprintln!("roomy {:?} crowded {:?}", roomy[0], crowded[0]);
    assert_ne!(
        roomy[0][0], crowded[0][0],
        "a crowded host changes no choice"
    );
}

/// Shared memory that cannot be set up (a segment directory that does not exist, one too
/// small): with `RCOLL_TRANSPORT=shm` every rank fails saying why; with `auto` the ranks
/// run over TCP.
#[test]
fn shared_memory_that_cannot_be_set_up_is_an_error_or_a_fallback() {
    let results = finish(
        spawn(
            "hello",
            3,
            &[
                ("RCOLL_TRANSPORT", "shm".to_string()),
                ("RCOLL_SHM_DIR", "/nonexistent-rcoll".to_string()),
            ],
        ),
        Duration::from_secs(60),
    );
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(
            !ok && out.contains("shared memory with local peers failed")
                && out.contains("/nonexistent-rcoll"),
            "rank {r}:\n{out}"
        );
    }
    // A segment directory too small for the rings (a container's 64 MiB /dev/shm, in
    // miniature): the memory is reserved at setup, so it is ENOSPC there, never SIGBUS
    // in the middle of a collective.
    if let Some(small) = SmallTmpfs::mount("256k") {
        let results = finish(
            spawn(
                "hello",
                3,
                &[
                    ("RCOLL_TRANSPORT", "shm".to_string()),
                    ("RCOLL_SHM_DIR", small.path.clone()),
                ],
            ),
            Duration::from_secs(60),
        );
        for (r, (ok, out)) in results.iter().enumerate() {
            assert!(
                !ok && out.contains("No space left on device") && out.contains("reserving"),
                "rank {r}:\n{out}"
            );
        }
        let left = std::fs::read_dir(&small.path).map_or(0, |d| d.count());
        assert_eq!(left, 0, "segments left in {}", small.path);
    }
    let results = finish(
        spawn(
            "hello",
            3,
            &[
                ("RCOLL_TRANSPORT", "auto".to_string()),
                ("RCOLL_SHM_DIR", "/nonexistent-rcoll".to_string()),
                ("RCOLL_TEST_EXPECT_TRANSPORT", "tcp".to_string()),
            ],
        ),
        Duration::from_secs(60),
    );
    all_succeed("auto without shared memory", &results);
}

/// Runs this binary's scenario `scenario` on 2 emulated hosts x 2 ranks (`ci/multihost.sh`
/// with `flags`, as root), shared memory inside a host, with `env` on every rank: whether
/// every rank passed, and the script's output (each rank's lines behind `[rank r] `). One
/// run at a time, and each must leave no namespace behind (the script removes them however
/// it ends): checked here, while no other run can have made one.
pub(super) fn on_emulated_hosts(
    scenario: &str,
    flags: &[&str],
    env: &[(&str, &str)],
) -> (bool, String) {
    static ONE_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_RUN.lock().unwrap_or_else(|p| p.into_inner());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../ci/multihost.sh");
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new("bash")
        .args([script, "--hosts", "2", "--ranks-per-host", "2"])
        .args(flags)
        .arg("--")
        .arg(exe)
        .args([
            "rank_main",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "--quiet",
        ])
        .env("RCOLL_TEST_SCENARIO", scenario)
        .env("RCOLL_TRANSPORT", "shm")
        .envs(env.iter().copied())
        .output()
        .expect("bash");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let netns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    let left = String::from_utf8_lossy(&netns.stdout).into_owned();
    assert!(
        !left.lines().any(|l| l.starts_with("rcmh")),
        "{scenario}: namespaces left: {left}\n{text}"
    );
    (out.status.success(), text)
}

/// Runs this binary's `sweep` on 2 emulated hosts x 2 ranks ([`on_emulated_hosts`]) with
/// `flags` and `env`; every rank must pass. The script's output.
fn sweep_on_emulated_hosts(flags: &[&str], env: &[(&str, &str)]) -> String {
    let flags: Vec<&str> = flags.iter().copied().chain(["--timeout", "240"]).collect();
    let env: Vec<(&str, &str)> = [("RCOLL_TIMEOUT", "60")]
        .into_iter()
        .chain(env.iter().copied())
        .collect();
    let (ok, text) = on_emulated_hosts("sweep", &flags, &env);
    assert!(ok, "{text}");
    for r in 0..4 {
        assert!(
            text.contains(&format!("[rank {r}] {}\n", super::common::RANK_COMPLETE)),
            "rank {r}:\n{text}"
        );
    }
    text
}

pub(super) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// `ci/multihost.sh --cyclic` (root): ranks 0 and 2 on one emulated host, 1 and 3 on the
/// other; every rank orders its rings host by host (0 2 1 3) and every collective of the
/// main algorithms (the rings among them) is right in that order.
#[test]
fn cyclic_ranks_on_emulated_hosts_ring_host_by_host() {
    if !is_root() {
        cannot_run(
            "cyclic_ranks_on_emulated_hosts_ring_host_by_host",
            "network namespaces need root",
        );
        return;
    }
    sweep_on_emulated_hosts(
        &["--cyclic", "--rate", "0"],
        &[("RCOLL_TEST_EXPECT_RING", "0 2 1 3")],
    );
}

/// `RCOLL_LEVEL_ALGO` (root, 2 emulated hosts x 2 ranks): every collective of the main
/// algorithms is right with the hierarchical levels run by other algorithms than the
/// ring (binomial tree inside hosts, mesh across), and every rank reports them.
#[test]
fn forced_level_algorithms_run_every_collective_on_emulated_hosts() {
    if !is_root() {
        cannot_run(
            "forced_level_algorithms_run_every_collective_on_emulated_hosts",
            "network namespaces need root",
        );
        return;
    }
    sweep_on_emulated_hosts(
        &["--rate", "0"],
        &[
            ("RCOLL_LEVEL_ALGO", "binomial_tree/mesh"),
            ("RCOLL_TEST_EXPECT_LEVELS", "binomial_tree/mesh"),
        ],
    );
}

/// `ci/multihost.sh` (root): 2 hosts x 2 ranks as network namespaces behind shaped links,
/// this binary's sweep on each rank (shared memory inside a host, TCP across); every rank
/// succeeds and the script leaves no namespace or link behind.
#[test]
fn the_multihost_script_runs_every_collective_on_2_hosts_x_2_ranks() {
    if !is_root() {
        cannot_run(
            "the_multihost_script_runs_every_collective_on_2_hosts_x_2_ranks",
            "network namespaces need root",
        );
        return;
    }
    // No namespace left behind: checked by on_emulated_hosts for every run.
    let text = sweep_on_emulated_hosts(
        &["--rate", "1gbit"],
        &[("RCOLL_TEST_EXPECT_TRANSPORT", "shm+tcp")],
    );
    eprintln!("{text}");
}

/// A tmpfs of a given size on a fresh directory (root only), unmounted on drop.
struct SmallTmpfs {
    path: String,
}

impl SmallTmpfs {
    fn mount(size: &str) -> Option<SmallTmpfs> {
        let path = format!(
            "{}/rcoll-small-shm-{}",
            std::env::temp_dir().display(),
            std::process::id()
        );
        std::fs::create_dir_all(&path).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", &path])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            cannot_run(
                "shared_memory_that_cannot_be_set_up_is_an_error_or_a_fallback",
                "the small /dev/shm case: cannot mount a tmpfs (not root?)",
            );
            let _ = std::fs::remove_dir(&path);
            return None;
        }
        Some(SmallTmpfs { path })
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(&self.path)
            .status();
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// Sends to several peers at once, each large enough to be read from the sender's memory
/// over shared memory: mesh all_gather (every rank sends its block to all) and a
/// single_root broadcast (the root sends to all), checked element by element. Prints how
/// many sends peers read from this rank's memory (`ZERO-COPY <rank> <sends>`).
pub(super) fn fanout(comm: &mut Communicator) {
    let (n, me) = (comm.size(), comm.rank());
    let count = 64 << 10; // 256 KiB of f32 per block
    let block: Vec<f32> = (0..count).map(|i| (me * count + i) as f32).collect();
    let before = comm.statistics().zero_copy_sends;
    for round in 0..3 {
        let mut all = vec![-1f32; n * count];
        comm.with_algorithm(Algorithm::Mesh)
            .all_gather(&block, &mut all)
            .expect("mesh all_gather");
        let wrong = all.iter().enumerate().filter(|(i, x)| **x != *i as f32);
        assert_eq!(wrong.count(), 0, "rank {me}: mesh all_gather round {round}");
        let root = round % n;
        let mut v = if me == root {
            block.clone()
        } else {
            vec![-1f32; count]
        };
        comm.with_algorithm(Algorithm::SingleRoot)
            .broadcast_in_place(&mut v, root)
            .expect("single_root broadcast");
        let want = (0..count).map(|i| (root * count + i) as f32);
        assert!(
            v.iter().copied().eq(want),
            "rank {me}: broadcast from {root}"
        );
    }
    println!(
        "ZERO-COPY {me} {}",
        comm.statistics().zero_copy_sends - before
    );
}

/// On two ranks, the collectives that only move data, each of 4 MiB and 3 elements more,
/// checked element by element: broadcast from each root and all_gather, in place and out,
/// all_to_all, gather and scatter. Prints how many sends the peer read from this rank's
/// memory (`ZERO-COPY <rank> <sends>`).
pub(super) fn whole(comm: &mut Communicator) {
    let (n, me) = (comm.size(), comm.rank());
    assert_eq!(n, 2, "two ranks");
    let count = (1 << 20) + 3;
    let value = |rank: usize, i: usize| (rank * count + i) as f32;
    let mine: Vec<f32> = (0..count).map(|i| value(me, i)).collect();
    let before = comm.statistics().zero_copy_sends;
    let mut wrong = Vec::new();
    let mut check = |what: &str, got: &[f32], want: &dyn Fn(usize) -> f32| {
        let bad = (0..got.len()).filter(|&i| got[i] != want(i)).count();
        if bad > 0 {
            wrong.push(format!("{what}: {bad} of {} elements wrong", got.len()));
        }
    };
    for root in 0..n {
        let mut out = vec![-1f32; count];
        comm.broadcast(&mine, &mut out, root).expect("broadcast");
        check(&format!("broadcast from {root}"), &out, &|i| value(root, i));
        let mut buf = if me == root {
            mine.clone()
        } else {
            vec![-1f32; count]
        };
        comm.broadcast_in_place(&mut buf, root)
            .expect("broadcast in place");
        check(&format!("broadcast in place from {root}"), &buf, &|i| {
            value(root, i)
        });
    }
    let mut all = vec![-1f32; n * count];
    comm.all_gather(&mine, &mut all).expect("all_gather");
    check("all_gather", &all, &|i| value(i / count, i % count));
    let mut all = vec![-1f32; n * count];
    all[me * count..(me + 1) * count].copy_from_slice(&mine);
    comm.all_gather_in_place(&mut all)
        .expect("all_gather in place");
    check("all_gather in place", &all, &|i| {
        value(i / count, i % count)
    });
    // Block j of rank r's input: r's values of block j.
    let blocks: Vec<f32> = (0..n * count).map(|i| value(me, i)).collect();
    let mut got = vec![-1f32; n * count];
    comm.all_to_all(&blocks, &mut got).expect("all_to_all");
    check("all_to_all", &got, &|i| {
        value(i / count, me * count + i % count)
    });
    let mut gathered = vec![-1f32; if me == 0 { n * count } else { 0 }];
    comm.gather(&mine, &mut gathered, 0).expect("gather");
    check("gather to 0", &gathered, &|i| value(i / count, i % count));
    let mut part = vec![-1f32; count];
    comm.scatter(&blocks, &mut part, 0).expect("scatter");
    check("scatter from 0", &part, &|i| value(0, me * count + i));
    assert!(wrong.is_empty(), "rank {me}: {}", wrong.join("; "));
    println!(
        "ZERO-COPY {me} {}",
        comm.statistics().zero_copy_sends - before
    );
}

/// `cmd` run in a process namespace of its own, with a `/proc` of its own (`unshare`, root):
/// as a container that shares the host's network and a segment directory but not `/proc`.
fn in_own_process_namespace(cmd: &std::process::Command) -> std::process::Command {
    let mut c = std::process::Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc", "--kill-child", "--"])
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// Ranks in process namespaces of their own (containers that share the network and a
/// directory but not `/proc`; `unshare`, root). Without `RCOLL_SHM_DIR` a peer's
/// `/proc/<pid>/fd/<fd>` names another process here, this rank itself among them: every
/// rank fails saying to set it (it took its own segment for its peer's). With it, segments
/// and doorbells are files in that directory, the ranks share memory and run every
/// collective, and the directory is empty after.
#[test]
fn ranks_in_process_namespaces_of_their_own_share_memory_through_a_directory() {
    const NAME: &str = "ranks_in_process_namespaces_of_their_own_share_memory_through_a_directory";
    if !is_root() {
        cannot_run(NAME, "process namespaces (unshare --pid) need root");
        return;
    }
    let dir = std::env::temp_dir().join(format!("rcoll-pidns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a segment directory");
    let run = |scenario: &str, extra: &[(&str, String)]| {
        let root = super::free_root();
        let secret = rcoll::process::format_unique_id(
            rcoll::process::random_unique_id().expect("a job secret"),
        );
        let children = (0..2)
            .map(|r| {
                let cmd =
                    super::rank_command("rcoll", scenario, (r, 2), &root, &secret, extra, None);
                in_own_process_namespace(&cmd).spawn().expect("unshare")
            })
            .collect();
        finish(children, Duration::from_secs(120))
    };
    let shm = ("RCOLL_TRANSPORT", "shm".to_string());
    for (r, (ok, out)) in run("hello", std::slice::from_ref(&shm)).iter().enumerate() {
        assert!(
            !ok && out.contains("RCOLL_SHM_DIR"),
            "rank {r} without RCOLL_SHM_DIR:\n{out}"
        );
    }
    let in_dir = [shm, ("RCOLL_SHM_DIR", dir.display().to_string())];
    all_succeed(
        "a segment directory across process namespaces",
        &run("sweep", &in_dir),
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let _ = std::fs::remove_dir(&dir);
    assert!(left.is_empty(), "left in {}: {left:?}", dir.display());
}
