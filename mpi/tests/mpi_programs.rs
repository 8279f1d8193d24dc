//! librcoll_mpi.so under real MPI programs: C programs (tests/c/) built with mpicc and
//! run by Open MPI's mpirun with the library preloaded (`-x LD_PRELOAD=...`), so that
//! their MPI_* calls are the shim's while PMPI_* reach MPI itself, which gives each check
//! its reference. Each program prints a completion marker per rank, which the test requires
//! with exit status 0; `RCOLL_MPI_STATS=1` lines are compared with what the program called.

// The C-program harness of the C ABI's tests: a package's library built once, programs
// run to their end under a time limit.
#[path = "../../capi/tests/programs/mod.rs"]
mod programs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn scratch() -> PathBuf {
    programs::scratch("rcoll-mpi")
}

/// Builds librcoll_mpi.so (the dev profile, next to this test binary) once: its path; or
/// `RCOLL_MPI_SHIM`'s, built already (ci/mpi-clients.sh in the VM, where cargo is slow).
fn shim() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| match std::env::var_os("RCOLL_MPI_SHIM") {
        Some(path) => PathBuf::from(path),
        None => programs::built("rcoll-mpi", "librcoll_mpi.so"),
    })
}

/// The MPI the shim was built for, as build.rs chose it: its compiler wrapper
/// (`RCOLL_MPICC`, `mpicc` by default) and its launcher (`RCOLL_MPIEXEC`, by default
/// `mpiexec.mpich` for `mpicc.mpich` and `mpirun` otherwise), and whether that launcher is
/// MPICH's Hydra (`-genv`) rather than Open MPI's (`-x`).
struct Mpi {
    cc: String,
    exec: String,
    hydra: bool,
}

fn mpi() -> &'static Mpi {
    static MPI: OnceLock<Mpi> = OnceLock::new();
    MPI.get_or_init(|| {
        let cc = std::env::var("RCOLL_MPICC").unwrap_or_else(|_| "mpicc".into());
        let exec = std::env::var("RCOLL_MPIEXEC").unwrap_or_else(|_| {
            if cc.ends_with(".mpich") {
                "mpiexec.mpich".into()
            } else {
                "mpirun".into()
            }
        });
        let version = Command::new(&exec)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{exec} --version: {e}"));
        let hydra = String::from_utf8_lossy(&version.stdout).contains("HYDRA");
        Mpi { cc, exec, hydra }
    })
}

/// Compiles tests/c/`name`.c with the MPI's compiler wrapper (warnings are errors).
fn compile(name: &str) -> PathBuf {
    let bin = scratch().join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    let mut cc = Command::new(&mpi().cc);
    cc.args(["-Wall", "-Wextra", "-Werror", "-O2", "-pthread"]);
    if mpi().hydra {
        // GCC reads MPICH's access attributes as MPI_Waitall(n, reqs, ...) writing
        // 20 bytes into a region of size 0 for nb_check's variable count.
        cc.arg("-Wno-stringop-overflow");
    }
    let o = cc
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .unwrap_or_else(|e| panic!("{} (libopenmpi-dev): {e}", mpi().cc));
    assert!(
        o.status.success(),
        "{} {name}.c:\n{}{}",
        mpi().cc,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    bin
}

/// `mpirun -np n bin args` with the shim preloaded (as root too; MPI's own traffic on
/// loopback TCP, which works in every container) and `env` passed to every rank: its
/// exit code (None: killed by a signal or the time limit) and its stdout + stderr.
fn mpirun(bin: &Path, args: &[&str], n: usize, env: &[(&str, &str)]) -> (Option<i32>, String) {
    launch(bin, args, n, env, false)
}

/// [`mpirun`]; with `past_a_death` the launcher is told to let the other ranks live on
/// when one dies (Open MPI's `--enable-recovery`, Hydra's `-disable-auto-cleanup`), so that
/// what they make of the death can be seen.
fn launch(
    bin: &Path,
    args: &[&str],
    n: usize,
    env: &[(&str, &str)],
    past_a_death: bool,
) -> (Option<i32>, String) {
    // One job at a time: ranks poll while they wait, and several jobs' ranks on a
    // machine of few cores slow each other down many times over.
    static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    let mpi = mpi();
    let shim = shim().to_string_lossy();
    // Every size served, the smallest included (which the shim gives MPI inside one host
    // by default): these programs check rcoll's answers. A test of that default names it.
    let serve_all = ("RCOLL_MPI_SHM_MIN", "0");
    let mut env: Vec<(&str, &str)> = [("LD_PRELOAD", &*shim), ("RCOLL_SOCKET_IFNAME", "lo")]
        .into_iter()
        .chain((!env.iter().any(|(k, _)| *k == serve_all.0)).then_some(serve_all))
        .chain(env.iter().copied())
        .collect();
    let mut cmd = if mpi.hydra {
        // Hydra on loopback, MPICH's UCX between the ranks over shared memory: with UCX's
        // default transports the ranks were killed (signal 9) at start in this container,
        // and over TCP MPICH alone (RCOLL_MPI=0) did not finish late_root_check on 8 ranks
        // in 100 s (with posix,sysv: 2 s).
        env.push(("UCX_TLS", "posix,sysv,self"));
        let mut c = Command::new(&mpi.exec);
        c.args(["-n", &n.to_string(), "-iface", "lo"]);
        if past_a_death {
            c.arg("-disable-auto-cleanup");
        }
        for (k, v) in &env {
            c.args(["-genv", k, v]);
        }
        c
    } else {
        let mut c = programs::open_mpi_run(&mpi.exec, n);
        if past_a_death {
            c.arg("--enable-recovery");
        }
        for (k, v) in &env {
            c.env(k, v).args(["-x", k]);
        }
        c
    };
    cmd.arg(bin).args(args);
    run(cmd, Duration::from_secs(300))
}

/// Runs `cmd` to its end, killing it at `limit`.
fn run(cmd: Command, limit: Duration) -> (Option<i32>, String) {
    programs::run_all(vec![cmd], limit)
        .pop()
        .expect("one command, one result")
}

/// Exit status 0 and `marker <rank> <n>` from every rank.
fn completed(what: &str, n: usize, (code, out): &(Option<i32>, String), marker: &str) {
    assert_eq!(
        *code,
        Some(0),
        "{what} on {n} ranks exited {code:?}:\n{out}"
    );
    for r in 0..n {
        let mine = format!("{marker} {r} {n}");
        assert!(
            out.lines()
                .any(|l| l == mine || l.starts_with(&format!("{mine} "))),
            "{what} on {n} ranks: rank {r} did not print {mine:?}:\n{out}"
        );
    }
}

/// The stats lines (`rcoll-mpi: MPI_...`), in order.
fn stats(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with("rcoll-mpi: MPI_"))
        .collect()
}

/// The served collectives, each compared with PMPI's result on the same data: every
/// reduction (MPI_Allreduce, MPI_Reduce from every root with NULL receive buffers off the
/// root, MPI_Reduce_scatter_block, MPI_Reduce_scatter) on the 16 predefined types rcoll
/// serves x every op defined on them (MPI_LAND, MPI_LOR and MPI_LXOR on the integers
/// too) x counts 1, 7, 1000 x out of place and in place;
/// every data movement (MPI_Bcast, MPI_Gather and MPI_Scatter from every root, MPI_Allgather,
/// MPI_Alltoall, in place and not) on 7 types including MPI_BYTE, MPI_CHAR and MPI_SHORT;
/// MPI_Barrier; a root gathering into and scattering from a matrix's columns (a resized
/// vector type) while the others send plain doubles, an Allgather and an Alltoall of
/// columns; a broadcast sent as MPI_INT and received as a derived pair of ints,
/// misaligned buffers, MPI_BOR on MPI_BYTE, count 0, 4 MiB. On 1, 2, 3 (MPI_Init_thread)
/// and 4 ranks; the stats must show every call served.
#[test]
fn every_served_collective_matches_mpi_on_1_2_3_4_ranks() {
    let bin = compile("coll_check");
    for n in [1, 2, 3, 4] {
        let args: &[&str] = if n == 3 { &["thread"] } else { &[] };
        let result = mpirun(&bin, args, n, &[("RCOLL_MPI_STATS", "1")]);
        completed("coll_check", n, &result, "COLL-CHECK-OK");
        let lines = stats(&result.1);
        let served = [
            "MPI_Allreduce",
            "MPI_Reduce",
            "MPI_Bcast",
            "MPI_Allgather",
            "MPI_Reduce_scatter_block",
            "MPI_Reduce_scatter",
            "MPI_Alltoall",
            "MPI_Gather",
            "MPI_Scatter",
            "MPI_Barrier",
        ];
        assert_eq!(lines.len(), served.len(), "{n} ranks: {lines:#?}");
        for (line, name) in lines.iter().zip(served) {
            let count = line
                .strip_prefix(&format!("rcoll-mpi: {name}: "))
                .and_then(|rest| rest.strip_suffix(" served, 0 forwarded"))
                .and_then(|c| c.parse::<u64>().ok());
            assert!(count.is_some_and(|c| c > 0), "{n} ranks: {line}");
        }
    }
}

/// By default, inside one host, a blocking call of fewer bytes than `RCOLL_MPI_SHM_MIN`
/// (2048) goes to MPI, whose own shared memory answers such calls sooner, and larger ones
/// are served (nonblocking ones at every size: nb_check frees an MPI_Ibarrier's request,
/// which Open MPI refuses on its own):
/// coll_check's counts 1 and 7 (at most 56 bytes) and barriers forwarded with that reason,
/// its count 1000 of 4 bytes and more, and 4 MiB, served; every result still right; the
/// nonblocking and split-communicator programs still right with calls of both kinds. Over
/// TCP (`RCOLL_TRANSPORT=tcp`, no shared memory) every size is served. Under MPICH, whose
/// crossover was not measured (and whose `MPI_MIN`/`MPI_MAX` on `MPI_UINT8_T` coll_check
/// catches wrong), the default serves every size; the threshold named still forwards.
#[test]
fn small_calls_inside_one_host_go_to_mpi_by_default() {
    let bin = compile("coll_check");
    let default = [("RCOLL_MPI_STATS", "1"), ("RCOLL_MPI_SHM_MIN", "")];
    let result = mpirun(&bin, &[], 2, &default);
    completed("coll_check", 2, &result, "COLL-CHECK-OK");
    if mpi().hydra {
        all_served("under MPICH by default", &result.1);
    } else {
        forwarded_by_size(&result.1);
        // One rank is inside one host too (a one-rank job, MPI_COMM_SELF's shape): its
        // small calls are a copy, which MPI makes without the shim's setup.
        let result = mpirun(&bin, &[], 1, &default);
        completed("coll_check on one rank", 1, &result, "COLL-CHECK-OK");
        forwarded_by_size(&result.1);
    }
    // Calls given MPI beside calls served, on one communicator and on several: MPI's
    // requests completed beside the shim's (every completion call, progress thread or
    // not), split communicators and two threads at MPI_THREAD_MULTIPLE.
    let named = [("RCOLL_MPI_STATS", "1"), ("RCOLL_MPI_SHM_MIN", "2048")];
    for (program, args, marker) in [
        ("nb_check", &[][..], "NB-CHECK-OK"),
        ("nb_check", &["single"][..], "NB-CHECK-OK"),
        ("split_check", &[][..], "SPLIT-CHECK-OK"),
    ] {
        let result = mpirun(&compile(program), args, 2, &named);
        completed(program, 2, &result, marker);
        assert!(
            result.1.contains(" under 2048 bytes inside one host)"),
            "{program} {args:?}: nothing given MPI for its size:\n{}",
            result.1
        );
    }
    let tcp = [
        ("RCOLL_MPI_STATS", "1"),
        ("RCOLL_MPI_SHM_MIN", "2048"),
        ("RCOLL_TRANSPORT", "tcp"),
    ];
    let result = mpirun(&bin, &[], 2, &tcp);
    completed("coll_check over TCP", 2, &result, "COLL-CHECK-OK");
    all_served("over TCP", &result.1);
}

/// Every one of coll_check's 10 collectives served, none forwarded.
fn all_served(what: &str, out: &str) {
    let lines = stats(out);
    assert_eq!(lines.len(), 10, "{what}: {lines:#?}");
    for line in lines {
        assert!(line.ends_with(" served, 0 forwarded"), "{what}: {line}");
    }
}

/// coll_check's calls under 2048 bytes given MPI, with that reason alone, and the larger
/// ones served: every collective both (barriers, of no bytes, never served).
fn forwarded_by_size(out: &str) {
    let lines = stats(out);
    assert_eq!(lines.len(), 10, "{lines:#?}");
    for line in &lines {
        let (name, counts) = line
            .strip_prefix("rcoll-mpi: ")
            .and_then(|l| l.split_once(": "))
            .unwrap_or_else(|| panic!("{line}"));
        let (served, rest) = counts.split_once(" served, ").expect(line);
        let (forwarded, why) = rest.split_once(" forwarded").expect(line);
        let count = |n: &str| n.parse::<u64>().unwrap_or_else(|e| panic!("{line}: {e}"));
        let (served, forwarded) = (count(served), count(forwarded));
        assert!(forwarded > 0, "{line}");
        assert_eq!(
            why,
            format!(" ({forwarded} under 2048 bytes inside one host)"),
            "{line}"
        );
        match name {
            // No bytes: always MPI's inside one host.
            "MPI_Barrier" => assert_eq!(served, 0, "{line}"),
            _ => assert!(served > 0, "{line}"),
        }
    }
}

/// Ranks told different sizes (`RCOLL_MPI_SHM_MIN=0` on rank 0, 2048 on rank 1) agree on
/// the least when the communicator forms: every call served on every rank, and right.
/// Before they agreed, rank 0 served the small calls rank 1 gave MPI, and both waited.
#[test]
fn ranks_agree_on_which_small_calls_go_to_mpi() {
    let bin = compile("coll_check");
    let rank = "${OMPI_COMM_WORLD_RANK:-$PMI_RANK}";
    let script =
        format!("if [ \"{rank}\" = 0 ]; then export RCOLL_MPI_SHM_MIN=0; fi; exec \"$0\" \"$@\"");
    let bin = bin.to_string_lossy();
    let env = [
        ("RCOLL_MPI_STATS", "1"),
        ("RCOLL_MPI_SHM_MIN", "2048"),
        ("RCOLL_TIMEOUT", "30"),
    ];
    let result = mpirun(Path::new("/bin/sh"), &["-c", &script, &bin], 2, &env);
    completed("coll_check", 2, &result, "COLL-CHECK-OK");
    all_served("rank 0 told 0, rank 1 2048", &result.1);
}

/// What the shim forwards is still right (each result checked) and counted with its
/// reason, in the exact form of the stats line; a strided datatype in MPI_Bcast is served
/// (packed), and right.
#[test]
fn forwarded_calls_are_right_and_counted_with_their_reasons() {
    let bin = compile("forward_check");
    for n in [2, 3] {
        let result = mpirun(&bin, &[], n, &[("RCOLL_MPI_STATS", "1")]);
        completed("forward_check", n, &result, "FORWARD-CHECK-OK");
        assert_eq!(
            stats(&result.1),
            [
                "rcoll-mpi: MPI_Allreduce: 5 served, 8 forwarded (3 MPI_MAXLOC, 2 derived \
                 datatype, 1 MPI_SHORT, 1 intercommunicator, 1 user-defined op)",
                "rcoll-mpi: MPI_Bcast: 1 served, 0 forwarded",
                "rcoll-mpi: MPI_Reduce_scatter: 0 served, 1 forwarded (1 unequal recvcounts)",
                "rcoll-mpi: MPI_Allgatherv: 0 served, 1 forwarded (1 not served by rcoll)",
            ],
            "{n} ranks:\n{}",
            result.1
        );
    }
}

/// `RCOLL_MPI=0`: every call goes to MPI (and is still right); `RCOLL_MPI_COLLS` serves
/// only what it names.
#[test]
fn rcoll_mpi_0_forwards_everything_and_colls_restricts() {
    let bin = compile("forward_check");
    let result = mpirun(
        &bin,
        &[],
        2,
        &[("RCOLL_MPI_STATS", "1"), ("RCOLL_MPI", "0")],
    );
    completed("forward_check", 2, &result, "FORWARD-CHECK-OK");
    assert_eq!(
        stats(&result.1),
        [
            "rcoll-mpi: MPI_Allreduce: 0 served, 13 forwarded (13 RCOLL_MPI=0)",
            "rcoll-mpi: MPI_Bcast: 0 served, 1 forwarded (1 RCOLL_MPI=0)",
            "rcoll-mpi: MPI_Reduce_scatter: 0 served, 1 forwarded (1 RCOLL_MPI=0)",
            "rcoll-mpi: MPI_Allgatherv: 0 served, 1 forwarded (1 RCOLL_MPI=0)",
        ],
        "{}",
        result.1
    );
    let bin = compile("split_check");
    let env = [("RCOLL_MPI_STATS", "1"), ("RCOLL_MPI_COLLS", "bcast")];
    let result = mpirun(&bin, &[], 2, &env);
    completed("split_check", 2, &result, "SPLIT-CHECK-OK");
    let calls = allreduce_calls(&result.1);
    assert_eq!(
        stats(&result.1),
        [
            format!(
                "rcoll-mpi: MPI_Allreduce: 0 served, {calls} forwarded ({calls} not in \
                 RCOLL_MPI_COLLS)"
            )
            .as_str(),
            "rcoll-mpi: MPI_Bcast: 45 served, 0 forwarded",
            "rcoll-mpi: MPI_Allgather: 0 served, 45 forwarded (45 not in RCOLL_MPI_COLLS)",
        ],
        "{}",
        result.1
    );
}

/// The MPI_Allreduce calls split_check made (its marker's third number).
fn allreduce_calls(out: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix("SPLIT-CHECK-OK 0 "))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no call count:\n{out}"))
}

/// Communicators other than the world get rcoll communicators of their own: a split
/// (ranks reversed by key), three dups freed in turn, MPI_COMM_SELF, split_type, their
/// collectives interleaved with the world's and compared with PMPI's; then two threads
/// at MPI_THREAD_MULTIPLE running 300 MPI_Allreduce each, one on the world and one on a
/// split communicator. Every call served.
#[test]
fn split_and_dup_communicators_run_collectives_beside_the_world() {
    let bin = compile("split_check");
    for n in [2, 4] {
        let result = mpirun(&bin, &[], n, &[("RCOLL_MPI_STATS", "1")]);
        completed("split_check", n, &result, "SPLIT-CHECK-OK");
        assert!(
            !result.1.contains("SPLIT-CHECK-NOTE"),
            "no MPI_THREAD_MULTIPLE: the concurrent part did not run:\n{}",
            result.1
        );
        let calls = allreduce_calls(&result.1);
        assert_eq!(
            stats(&result.1),
            [
                format!("rcoll-mpi: MPI_Allreduce: {calls} served, 0 forwarded").as_str(),
                "rcoll-mpi: MPI_Bcast: 45 served, 0 forwarded",
                "rcoll-mpi: MPI_Allgather: 45 served, 0 forwarded",
            ],
            "{n} ranks:\n{}",
            result.1
        );
    }
}

/// A run of errors_check whose ranks write their own output (ERRORS_CHECK_DIR), which no
/// launcher's teardown can lose: the launcher's exit code and output, and each rank's.
struct Witnessed {
    code: Option<i32>,
    launcher: String,
    ranks: Vec<String>,
}

impl Witnessed {
    fn run(args: &[&str], n: usize, env: &[(&str, &str)], past_a_death: bool) -> Self {
        let dir = scratch().join(format!("witness-{}", args.join("-")));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the witness directory");
        let dir_env = dir.to_str().expect("a UTF-8 scratch path");
        // Open MPI's report of an abort goes through mpirun, which loses it when two ranks
        // abort at once ("Data unpack would read past end of buffer" in show_help.c);
        // with this each aborting rank prints its own stack, through ompi_mpi_abort, to
        // its file. MPICH's abort prints "application called MPI_Abort(" there anyway.
        let env: Vec<(&str, &str)> = env
            .iter()
            .copied()
            .chain([
                ("ERRORS_CHECK_DIR", dir_env),
                ("OMPI_MCA_mpi_abort_print_stack", "1"),
            ])
            .collect();
        let (code, launcher) = launch(&compile("errors_check"), args, n, &env, past_a_death);
        let ranks = (0..n)
            .map(|r| std::fs::read_to_string(dir.join(format!("rank-{r}"))).unwrap_or_default())
            .collect();
        Witnessed {
            code,
            launcher,
            ranks,
        }
    }

    /// Everything, for a failed assertion's message.
    fn all(&self) -> String {
        let mut all = format!("exit {:?}; the launcher:\n{}", self.code, self.launcher);
        for (r, out) in self.ranks.iter().enumerate() {
            all += &format!("--- rank {r}'s own output:\n{out}");
        }
        all
    }

    /// Rank `r`'s ERROR-SEEN line (after the prefix), if it printed one.
    fn seen(&self, r: usize) -> Option<&str> {
        self.ranks[r]
            .lines()
            .find_map(|l| l.strip_prefix(&format!("ERROR-SEEN {r} ")))
    }

    /// Whether rank `r` went through MPI's abort, in its own words: Open MPI's stack from
    /// ompi_mpi_abort, MPICH's "application called MPI_Abort(".
    fn aborted(&self, r: usize) -> bool {
        self.ranks[r].contains("ompi_mpi_abort") || self.ranks[r].contains("called MPI_Abort(")
    }

    /// Asserts that with MPI_ERRORS_ARE_FATAL the job ended by the error handler: the
    /// launcher returned (not the time limit); no survivor's call returned (no ERROR-SEEN,
    /// no ERRORS-CHECK-OK or -FAIL); each message printed is rcoll's for `call`, naming the
    /// rank and the late or dead rank 2; and a survivor that printed one went on into
    /// MPI_Abort (another may have been ended by the first one's abort between its message
    /// and its own abort).
    fn ended_by_the_fatal_handler(&self, call: &str, survivors: usize) {
        assert!(self.code.is_some(), "{}", self.all());
        let mut aborted = false;
        for r in 0..survivors {
            let own = &self.ranks[r];
            assert!(self.seen(r).is_none(), "rank {r} returned: {}", self.all());
            assert!(!own.contains("ERRORS-CHECK"), "{}", self.all());
            let prefix = format!("rcoll-mpi: {call} on world rank {r}: ");
            if let Some(message) = own.lines().find(|l| l.starts_with(&prefix)) {
                assert!(message.contains("rank 2"), "rank {r}: {message}");
                aborted |= self.aborted(r);
            }
        }
        assert!(aborted, "no survivor's message and abort: {}", self.all());
    }
}

/// An rcoll failure (a rank 5 s late with RCOLL_TIMEOUT=2) through both error handlers:
/// with MPI_ERRORS_RETURN the punctual ranks' call returns an error code of rcoll's class
/// whose MPI_Error_string is rcoll's message naming the rank and the late peer, and the
/// next call fails too; with MPI_ERRORS_ARE_FATAL the job ends, non-zero, with that
/// message, through MPI_Abort, before the late rank could have finished.
#[test]
fn an_rcoll_failure_reaches_the_communicators_error_handler() {
    let env = [("RCOLL_TIMEOUT", "2")];
    let n = 3;
    let run = Witnessed::run(&["return"], n, &env, false);
    assert_eq!(run.code, Some(0), "{}", run.all());
    for r in 0..n - 1 {
        let seen = run
            .seen(r)
            .unwrap_or_else(|| panic!("rank {r} saw no error: {}", run.all()));
        assert!(
            seen.starts_with(&format!("1 rcoll-mpi: MPI_Allreduce on world rank {r}: "))
                && seen.contains("rank 2"),
            "rank {r}: {seen}"
        );
        assert!(
            run.ranks[r].contains(&format!("ERRORS-CHECK-OK {r}\n")),
            "{}",
            run.all()
        );
    }
    assert!(
        run.ranks[n - 1].contains(&format!("ERRORS-CHECK-OK {} (late: ", n - 1)),
        "{}",
        run.all()
    );

    let started = Instant::now();
    let run = Witnessed::run(&["fatal"], n, &env, false);
    assert!(matches!(run.code, Some(c) if c != 0), "{}", run.all());
    run.ended_by_the_fatal_handler("MPI_Allreduce", n - 1);
    assert!(!run.ranks[n - 1].contains("ERRORS-CHECK"), "{}", run.all());
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// A nonblocking call's failure through the same error handlers, with a killed rank:
/// after one MPI_Iallreduce that works, the last of 3 ranks kills itself (SIGKILL). With
/// MPI_ERRORS_RETURN each survivor's MPI_Wait (or the next MPI_Iallreduce) returns an
/// error code of rcoll's class whose MPI_Error_string is rcoll's message naming the rank
/// and the dead one, and a later call fails too; with MPI_ERRORS_ARE_FATAL the job ends
/// through MPI_Abort with that message. After MPI_Init (the shim's MPI_Wait completes the
/// request) and at MPI_THREAD_MULTIPLE (rcoll's progress thread does).
///
/// Under MPICH's Hydra (4.0.2) the last rank is 5 s late instead (RCOLL_TIMEOUT=2): its
/// proxy kills the survivors when a rank dies, -disable-auto-cleanup or not, in about
/// half the runs before they see the death (strace: `kill(-pgid, SIGKILL)` to each
/// survivor's process group, then the SIGUSR1 that option sends instead).
#[test]
fn a_nonblocking_calls_failure_reaches_the_error_handler_when_a_rank_is_killed() {
    let (env, victim): ([(&str, &str); 1], &[&str]) = if mpi().hydra {
        ([("RCOLL_TIMEOUT", "2")], &["late"])
    } else {
        // A backstop: a dead peer's closed connection is seen at once.
        ([("RCOLL_TIMEOUT", "10")], &[])
    };
    let n = 3;
    for level in [&[][..], &["multiple"]] {
        let args: Vec<&str> = ["killed-return"]
            .iter()
            .chain(level)
            .chain(victim)
            .copied()
            .collect();
        let run = Witnessed::run(&args, n, &env, true);
        for r in 0..n - 1 {
            let seen = run
                .seen(r)
                .unwrap_or_else(|| panic!("{args:?}: rank {r} saw no error: {}", run.all()));
            assert!(
                seen.starts_with(&format!("1 rcoll-mpi: MPI_Iallreduce on world rank {r}: "))
                    && seen.contains("rank 2"),
                "{args:?}: rank {r}: {seen}"
            );
            assert!(
                run.ranks[r].contains(&format!("ERRORS-CHECK-OK {r}\n")),
                "{args:?}: {}",
                run.all()
            );
        }
        assert!(
            run.ranks
                .iter()
                .all(|own| !own.contains("ERRORS-CHECK-FAIL")),
            "{args:?}: {}",
            run.all()
        );

        let args: Vec<&str> = ["killed-fatal"]
            .iter()
            .chain(level)
            .chain(victim)
            .copied()
            .collect();
        Witnessed::run(&args, n, &env, true).ended_by_the_fatal_handler("MPI_Iallreduce", n - 1);
    }
}

/// Nonblocking collectives: MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather,
/// MPI_Ireduce_scatter_block and MPI_Ibarrier as generalized requests, in place and not,
/// seven in flight at once with a forwarded MPI_MAXLOC among them, overlapped with
/// computation and completed by MPI_Wait (in reverse), MPI_Test, MPI_Waitall,
/// MPI_Testall, MPI_Waitany, MPI_Waitsome, MPI_Testany and MPI_Testsome, each result
/// compared with PMPI's; one freed at once by MPI_Request_free; on a split communicator
/// between blocking calls on the world. At MPI_THREAD_MULTIPLE (rcoll's progress thread
/// completes the requests) on 2, 3 and 4 ranks, and after plain MPI_Init (the completion
/// calls do) on 2 and 4; served alike.
#[test]
fn nonblocking_collectives_complete_through_every_completion_call() {
    let bin = compile("nb_check");
    let runs: [(&[&str], usize); 5] = [
        (&[], 2),
        (&[], 3),
        (&[], 4),
        (&["single"], 2),
        (&["single"], 4),
    ];
    for (args, n) in runs {
        let result = mpirun(&bin, args, n, &[("RCOLL_MPI_STATS", "1")]);
        completed("nb_check", n, &result, "NB-CHECK-OK");
        let multiple = u8::from(args.is_empty());
        assert!(
            result
                .1
                .contains(&format!("NB-CHECK-OK 0 {n} 45 {multiple}")),
            "{args:?}: {}",
            result.1
        );
        assert_eq!(
            stats(&result.1),
            [
                "rcoll-mpi: MPI_Allreduce: 10 served, 0 forwarded",
                "rcoll-mpi: MPI_Barrier: 1 served, 0 forwarded",
                "rcoll-mpi: MPI_Iallreduce: 100 served, 45 forwarded (45 MPI_MAXLOC)",
                "rcoll-mpi: MPI_Ibcast: 45 served, 0 forwarded",
                "rcoll-mpi: MPI_Iallgather: 45 served, 0 forwarded",
                "rcoll-mpi: MPI_Ireduce_scatter_block: 45 served, 0 forwarded",
                "rcoll-mpi: MPI_Ibarrier: 46 served, 0 forwarded",
            ],
            "{args:?} on {n} ranks:\n{}",
            result.1
        );
    }
}

/// Ranks that leave a communicator (MPI_Comm_free of a dup, MPI_Finalize) right after a
/// rooted call's contribution is sent, while the root is late, or waiting: the root's
/// MPI_Reduce still completes, right (the shim keeps freed communicators open, and
/// MPI_Finalize closes them after a barrier). On 3 and 8 ranks.
#[test]
fn leaving_after_a_rooted_call_does_not_fail_the_root() {
    let bin = compile("late_root_check");
    for n in [3, 8] {
        let result = mpirun(&bin, &[], n, &[]);
        completed("late_root_check", n, &result, "LATE-ROOT-OK");
    }
}

/// MPI_Alloc_mem memory, which the shim gives (and registers with rcoll as calls use it):
/// MPI_Allreduce (out of place and in place), MPI_Iallreduce, MPI_Bcast and MPI_Allgather
/// of 1 MiB on it equal PMPI's, two rounds of allocate, use, MPI_Free_mem; a zero-byte
/// MPI_Alloc_mem is MPI's own and frees. On 2 and 3 ranks, every call served; the stats
/// count the 4 allocations, and on this host's transports (no device) register nothing.
#[test]
fn collectives_on_mpi_alloc_mem_memory_are_served_and_right() {
    let bin = compile("alloc_mem_check");
    for n in [2, 3] {
        let result = mpirun(&bin, &[], n, &[("RCOLL_MPI_STATS", "1")]);
        completed("alloc_mem_check", n, &result, "ALLOC-CHECK-OK");
        assert_eq!(
            stats(&result.1),
            [
                "rcoll-mpi: MPI_Allreduce: 4 served, 0 forwarded",
                "rcoll-mpi: MPI_Bcast: 2 served, 0 forwarded",
                "rcoll-mpi: MPI_Allgather: 2 served, 0 forwarded",
                "rcoll-mpi: MPI_Iallreduce: 2 served, 0 forwarded",
            ],
            "{n} ranks:\n{}",
            result.1
        );
        let registered = result
            .1
            .lines()
            .find(|l| l.starts_with("rcoll-mpi: registered memory: "))
            .unwrap_or_else(|| panic!("no registered-memory line:\n{}", result.1));
        assert!(
            registered
                .starts_with("rcoll-mpi: registered memory: 4 MPI_Alloc_mem, 0 registrations, "),
            "{registered}"
        );
    }
}

/// MPI_Alloc_mem memory goes zero-copy over RDMA verbs (in the Soft-RoCE VM:
/// `soft-roce/run-in-vm.sh`, as ci/mpi-clients.sh runs it): 2 ranks on rxe0
/// (RCOLL_TRANSPORT=verbs), the calls of alloc_mem_check on MPI_Alloc_mem buffers, then on
/// malloc's. Both right; with MPI_Alloc_mem the allocations are registered and the world's
/// communicator sends zero-copy, with malloc it registers nothing and copies everything.
#[test]
#[ignore = "needs RDMA devices: run in soft-roce/run-in-vm.sh"]
fn mpi_alloc_mem_memory_goes_zero_copy_over_verbs() {
    assert!(
        Path::new("/sys/class/infiniband/rxe0").exists(),
        "no rxe0: run in soft-roce/run-in-vm.sh"
    );
    let bin = compile("alloc_mem_check");
    let env = [
        ("RCOLL_MPI_STATS", "1"),
        ("RCOLL_TRANSPORT", "verbs"),
        ("RCOLL_SOCKET_IFNAME", "veth0"),
        ("RCOLL_TIMEOUT", "60"),
    ];
    let line = |args: &[&str]| {
        let result = mpirun(&bin, args, 2, &env);
        completed("alloc_mem_check", 2, &result, "ALLOC-CHECK-OK");
        let line = result
            .1
            .lines()
            .find_map(|l| l.strip_prefix("rcoll-mpi: registered memory: "))
            .unwrap_or_else(|| panic!("{args:?}: no registered-memory line:\n{}", result.1))
            .to_string();
        // "4 MPI_Alloc_mem, 4 registrations, 56 zero-copy sends on MPI_COMM_WORLD"
        let numbers: Vec<u64> = line
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        (line, numbers)
    };
    let (text, alloc) = line(&[]);
    assert!(
        alloc.len() == 3 && alloc[0] == 4 && alloc[1] >= 2 && alloc[2] > 0,
        "MPI_Alloc_mem: {text}"
    );
    let (text, malloc) = line(&["malloc"]);
    assert_eq!(malloc, [1, 0, 0], "malloc: {text}");
}
