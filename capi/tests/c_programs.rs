//! The C ABI from C and C++ programs: built against `capi/include/rcoll.h` and librcoll
//! (shared, static, and through pkg-config after `capi/install.sh`), run as real
//! processes — by the environment launcher and under Open MPI's mpirun with 2, 3 and 4
//! ranks — each checking its own results (`capi/examples/`).

mod programs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use programs::{repo, run_all};

/// Builds librcoll.so and librcoll.a (the dev profile, next to this test binary) once.
fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = programs::built("rcoll-capi", "librcoll.so")
            .parent()
            .expect("target dir")
            .to_path_buf();
        assert!(dir.join("librcoll.a").exists(), "librcoll.a missing");
        dir
    })
}

fn scratch() -> PathBuf {
    programs::scratch("capi")
}

/// Compiles `example` (in capi/examples) with `compiler` into `out`, against the shared
/// library unless `flags` say otherwise. Each test names its own `out`: tests run at once,
/// and a compiler writing a binary that another test is starting fails that start
/// (ETXTBSY, "Text file busy").
fn compile(compiler: &str, example: &str, out: &str, flags: &[String]) -> PathBuf {
    let bin = scratch().join(out);
    let src = repo().join("capi/examples").join(example);
    let mut cmd = Command::new(compiler);
    cmd.arg("-Wall").arg("-Wextra").arg("-Werror").arg("-O2");
    if compiler.contains("++") {
        cmd.arg("-std=c++17");
    }
    cmd.arg(&src).arg("-o").arg(&bin).args(flags);
    let o = cmd.output().unwrap_or_else(|e| panic!("{compiler}: {e}"));
    assert!(
        o.status.success(),
        "{compiler} {example}:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    bin
}

/// Against the shared library, without sanitizers (the ThreadSanitizer tests add theirs).
fn plain_flags() -> Vec<String> {
    let lib = lib_dir().display().to_string();
    vec![
        format!("-I{}", repo().join("capi/include").display()),
        format!("-L{lib}"),
        "-lrcoll".into(),
        format!("-Wl,-rpath,{lib}"),
    ]
}

/// Against the shared library, under AddressSanitizer and UndefinedBehaviorSanitizer: every
/// C and C++ program of these tests but the ThreadSanitizer ones, so that a use after free,
/// a double free or an overflow in what the library hands the program fails its test.
fn shared_flags() -> Vec<String> {
    let mut flags = plain_flags();
    flags.extend(sanitizer_flags("address,undefined"));
    flags
}

/// `n` copies of `bin args`, ranks of one group by the environment launcher.
fn env_ranks(bin: &Path, args: &[&str], n: usize) -> Vec<Command> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let secret = rcoll::process::format_unique_id(rcoll::process::random_unique_id().expect("id"));
    (0..n)
        .map(|r| {
            let mut c = Command::new(bin);
            c.args(args)
                .env("RCOLL_RANK", r.to_string())
                .env("RCOLL_WORLD_SIZE", n.to_string())
                .env("RCOLL_ROOT_ADDR", format!("127.0.0.1:{port}"))
                .env("RCOLL_UNIQUE_ID", &secret)
                .env("RCOLL_TIMEOUT", "20");
            sanitize(&mut c);
            c
        })
        .collect()
}

fn all_print(results: &[(Option<i32>, String)], what: &str) {
    for (r, (code, out)) in results.iter().enumerate() {
        assert!(
            *code == Some(0) && out.contains(what),
            "rank {r} exited {code:?} without {what:?}:\n{out}"
        );
    }
}

/// `cargo build -p rcoll-capi` gives librcoll.so and librcoll.a; `capi/install.sh`
/// installs them with rcoll.h and rcoll.pc, and `pkg-config --cflags --libs rcoll` builds
/// a C program that 3 ranks run; the static library links and runs too.
#[test]
fn pkg_config_after_install_and_static_linking_both_work() {
    lib_dir();
    let prefix = scratch().join("prefix");
    let _ = std::fs::remove_dir_all(&prefix);
    let o = Command::new(repo().join("capi/install.sh"))
        .arg(&prefix)
        .env("RCOLL_PROFILE", "debug")
        .output()
        .expect("install.sh");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pc = |args: &[&str]| -> Vec<String> {
        let o = Command::new("pkg-config")
            .args(args)
            .arg("rcoll")
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
            .output()
            .expect("pkg-config");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    let mut flags = pc(&["--cflags", "--libs"]);
    assert!(flags.iter().any(|f| f == "-lrcoll"), "{flags:?}");
    flags.push(format!("-Wl,-rpath,{}", prefix.join("lib").display()));
    flags.extend(sanitizer_flags("address,undefined"));
    let bin = compile("cc", "hello.c", "hello_pc", &flags);
    all_print(
        &run_all(env_ranks(&bin, &[], 3), Duration::from_secs(120)),
        "HELLO-OK",
    );

    let mut flags = pc(&["--cflags"]);
    flags.push(prefix.join("lib/librcoll.a").display().to_string());
    flags.extend(
        pc(&["--static", "--libs-only-l"])
            .into_iter()
            .filter(|f| f != "-lrcoll"),
    );
    flags.extend(sanitizer_flags("address,undefined"));
    let bin = compile("cc", "hello.c", "hello_static", &flags);
    let ldd = Command::new("ldd").arg(&bin).output().expect("ldd");
    assert!(
        !String::from_utf8_lossy(&ldd.stdout).contains("librcoll"),
        "the static build loads librcoll.so"
    );
    all_print(
        &run_all(env_ranks(&bin, &[], 2), Duration::from_secs(120)),
        "HELLO-OK",
    );
}

/// The C++ example (a RAII wrapper, exceptions, std::vector, split) on 4 ranks.
#[test]
fn the_cpp_example_runs_on_4_ranks() {
    let bin = compile("c++", "hello.cpp", "hello_cpp", &shared_flags());
    let results = run_all(env_ranks(&bin, &[], 4), Duration::from_secs(120));
    all_print(&results, "HELLO-CPP-OK");
    assert!(results[0].1.contains("group of 2"), "{}", results[0].1);
}

/// `mpirun -np n bin` (as root too), MPI's own traffic on loopback; rcoll's variables
/// passed to every rank with `-x`. Its exit code and output.
fn mpirun(bin: &Path, n: usize, rcoll_env: &[(&str, String)]) -> (Option<i32>, String) {
    let mut mpirun = programs::open_mpi_run("mpirun", n);
    mpirun.env("RCOLL_SOCKET_IFNAME", "lo");
    for (k, v) in SANITIZER_ENV {
        mpirun.env(k, v).args(["-x", k]);
    }
    for (k, v) in rcoll_env {
        mpirun.env(k, v).args(["-x", k]);
    }
    mpirun.arg(bin);
    run_all(vec![mpirun], Duration::from_secs(300)).remove(0)
}

/// An MPI program gets the unique id by MPI_Bcast and checks every collective, split, the
/// nonblocking rcollIBroadcast, rcollIAllGather and rcollIReduceScatter (every op, in place
/// and not, about 20 queued at once, waited for in reverse order) and an overlapped
/// rcollIAllReduce against MPI, under mpirun with 2, 3 and 4 ranks; the C
/// and C++ examples run under mpirun too (rank and size from Open MPI's environment,
/// `rcollCommInitFromEnv`).
#[test]
fn an_mpi_program_checks_every_collective_against_mpi_on_2_3_4_ranks() {
    let bin = compile("mpicc", "mpi_check.c", "mpi_check", &shared_flags());
    let hello = compile("cc", "hello.c", "hello_mpirun", &shared_flags());
    let hello_cpp = compile("c++", "hello.cpp", "hello_cpp_mpirun", &shared_flags());
    for n in [2, 3, 4] {
        let (code, out) = mpirun(&bin, n, &[]);
        assert_eq!(code, Some(0), "mpirun -np {n}:\n{out}");
        for r in 0..n {
            assert!(
                out.contains(&format!("MPI-CHECK-OK {r} {n}")),
                "mpirun -np {n}: rank {r}:\n{out}"
            );
        }
        for (example, ok) in [(&hello, "HELLO-OK"), (&hello_cpp, "HELLO-CPP-OK")] {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let secret = rcoll::process::random_unique_id().expect("id");
            let env = [
                ("RCOLL_ROOT_ADDR", format!("127.0.0.1:{port}")),
                ("RCOLL_UNIQUE_ID", rcoll::process::format_unique_id(secret)),
            ];
            let (code, out) = mpirun(example, n, &env);
            assert_eq!(
                code,
                Some(0),
                "mpirun -np {n} {}:\n{out}",
                example.display()
            );
            assert_eq!(out.matches(ok).count(), n, "mpirun -np {n}:\n{out}");
        }
    }
}

/// NULL and misaligned pointers, bad datatypes and ops, overflowing counts, overlapping
/// buffers, bad roots and peers: rcollInvalidArgument with a message naming the rank and
/// the argument, before any communication — the communicator then works.
#[test]
fn bad_arguments_are_refused_and_the_communicator_stays_usable() {
    let bin = compile("cc", "errors.c", "errors-args", &shared_flags());
    let results = run_all(env_ranks(&bin, &["args"], 3), Duration::from_secs(120));
    all_print(&results, "ERRORS-ARGS-OK");
}

/// Stale, freed and foreign handles are refused, never read: under AddressSanitizer and
/// UndefinedBehaviorSanitizer (whose reports end the program), so that a use after free
/// or double free in the library's handling of them fails the test too.
#[test]
fn stale_and_foreign_handles_are_refused_under_asan_and_ubsan() {
    let bin = compile("cc", "errors.c", "errors-asan", &shared_flags());
    let cmds = env_ranks(&bin, &["handles"], 3);
    let results = run_all(cmds, Duration::from_secs(120));
    all_print(&results, "ERRORS-HANDLES-OK");
    for (r, (_, out)) in results.iter().enumerate() {
        assert!(
            out.matches("REFUSED").count() >= 10,
            "rank {r}: fewer refusals than the program makes:\n{out}"
        );
    }
}

/// The sanitizers' settings: a report ends the program with status 66.
const SANITIZER_ENV: [(&str, &str); 2] = [
    // Rust's allocations go through the intercepted malloc; leaks are not the question
    // here (the progress threads' stacks are reclaimed at exit).
    (
        "ASAN_OPTIONS",
        "detect_leaks=0:abort_on_error=0:exitcode=66",
    ),
    ("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1"),
];

fn sanitize(c: &mut Command) {
    for (k, v) in SANITIZER_ENV {
        c.env(k, v);
    }
}

/// `-fsanitize=...` if the compiler has that sanitizer's runtime (Debian's gcc does);
/// a compiler without it fails the test rather than skipping the check.
fn sanitizer_flags(which: &str) -> Vec<String> {
    vec![
        format!("-fsanitize={which}"),
        "-fno-omit-frame-pointer".into(),
        "-g".into(),
        "-pthread".into(),
    ]
}

/// `errors <mode>` on `n` ranks, built and run under ThreadSanitizer. The library itself
/// is not instrumented (stable Rust has no -Zsanitizer), so its synchronisation is
/// invisible to ThreadSanitizer: the accesses its interceptors see from inside
/// librcoll.so are left out, and what is checked is the program's side — its threads
/// calling into the API at once, as a C program does.
fn under_tsan(mode: &str, n: usize) -> Vec<Command> {
    let mut flags = plain_flags();
    flags.extend(sanitizer_flags("thread"));
    let bin = compile("cc", "errors.c", &format!("errors-tsan-{mode}"), &flags);
    let suppressions = scratch().join("tsan-uninstrumented-librcoll.supp");
    std::fs::write(&suppressions, "called_from_lib:librcoll.so\n").expect("suppressions");
    let options = format!(
        "halt_on_error=1:exitcode=66:suppressions={}",
        suppressions.display()
    );
    env_ranks(&bin, &[mode], n)
        .into_iter()
        .map(|mut c| {
            c.env("TSAN_OPTIONS", &options);
            c
        })
        .collect()
}

/// Nonblocking calls crossing threads (`errors nonblocking`, under ThreadSanitizer, 2 and
/// 3 ranks): four all-reduces, an all-gather, a broadcast and a reduce-scatter issued by
/// the main thread, completed by a second one with rcollTest and rcollWait while the first
/// computes; every result checked.
#[test]
fn nonblocking_calls_completed_from_another_thread_under_tsan() {
    for n in [2, 3] {
        let results = run_all(under_tsan("nonblocking", n), Duration::from_secs(120));
        all_print(&results, "ERRORS-NONBLOCKING-OK");
    }
}

/// rcollCommAbort from a second thread while the first is blocked in rcollAllReduce (no
/// other rank joins it; RCOLL_TIMEOUT is 20 s): the call returns with an error saying it
/// was aborted (the time from the abort is printed), the handle is no longer live, and the
/// other ranks' blocked receives fail naming rank 0, long before their timeout. Under ThreadSanitizer:
/// the abort crosses threads.
#[test]
fn an_abort_from_another_thread_ends_a_blocked_call_at_once() {
    let results = run_all(under_tsan("abort", 3), Duration::from_secs(120));
    for (r, (code, out)) in results.iter().enumerate() {
        let seen = out
            .lines()
            .find_map(|l| l.strip_prefix("ABORT-SEEN "))
            .unwrap_or_else(|| panic!("rank {r} exited {code:?} without ABORT-SEEN:\n{out}"));
        assert_eq!(*code, Some(0), "rank {r}:\n{out}");
        let mut parts = seen.splitn(3, ' ');
        let (result, ms, message) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        // 6: rcollRemoteError, "aborted by rank 0"; a timeout (8) means the abort did not
        // interrupt the call.
        assert_eq!(result, "6", "rank {r}: {seen}");
        assert!(message.contains("aborted by rank 0"), "rank {r}: {seen}");
        let ms: f64 = ms.parse().unwrap_or_else(|_| panic!("rank {r}: {seen}"));
        if r == 0 {
            // Interrupted, not timed out: the library looks at the flag every 20 ms; the
            // bound leaves room for a loaded machine and ThreadSanitizer's slowdown, and is
            // still a twentieth of the timeout the call would otherwise have waited.
            assert!(
                ms < 1000.0,
                "rank 0's call ended {ms} ms after the abort: {seen}"
            );
            eprintln!("rank 0's blocked call ended {ms} ms after the abort");
        } else {
            assert!(
                ms < 10_000.0,
                "rank {r} waited {ms} ms, as long as a timeout: {seen}"
            );
        }
    }
}

/// A rank that stays away from an all_reduce, alive and silent, for longer than the
/// others' RCOLL_TIMEOUT (1 s): their call returns rcollTimeout (8), naming it.
#[test]
fn a_silent_rank_is_a_timeout_naming_it() {
    let bin = compile("cc", "errors.c", "errors-timeout", &shared_flags());
    let cmds = env_ranks(&bin, &["timeout"], 3)
        .into_iter()
        .map(|mut c| {
            c.env("RCOLL_TIMEOUT", "1");
            c
        })
        .collect();
    let results = run_all(cmds, Duration::from_secs(120));
    for (r, (code, out)) in results.iter().enumerate().take(2) {
        let seen = out
            .lines()
            .find_map(|l| l.strip_prefix("TIMEOUT-SEEN "))
            .unwrap_or_else(|| panic!("rank {r} exited {code:?} without TIMEOUT-SEEN:\n{out}"));
        assert_eq!(*code, Some(0), "rank {r}:\n{out}");
        assert!(
            seen.starts_with("8 ") && seen.contains("rank 2"),
            "rank {r}: not rcollTimeout (8) naming rank 2: {seen}"
        );
    }
}

/// A rank killed by SIGKILL: the others' next call returns rcollRemoteError naming it,
/// within the timeout, and the host process goes on (no abort).
#[test]
fn a_killed_rank_is_a_remote_error_naming_it() {
    let bin = compile("cc", "errors.c", "errors-killed", &shared_flags());
    let started = Instant::now();
    let results = run_all(env_ranks(&bin, &["killed"], 3), Duration::from_secs(120));
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        results[2].0, None,
        "rank 2 was to die by SIGKILL:\n{}",
        results[2].1
    );
    for (r, (code, out)) in results.iter().enumerate().take(2) {
        let seen = out
            .lines()
            .find(|l| l.starts_with("KILLED-SEEN"))
            .unwrap_or_else(|| panic!("rank {r} exited {code:?}:\n{out}"));
        assert_eq!(*code, Some(0), "rank {r}:\n{out}");
        assert!(
            seen.starts_with("KILLED-SEEN 6 ") && seen.contains("rank 2"),
            "rank {r}: not rcollRemoteError (6) naming rank 2: {seen}"
        );
    }
}

/// rcollCommShrink after a rank was killed (capi/examples/shrink.c, 4 ranks): each
/// survivor's queued call on the dead communicator ends with an error and its buffer
/// untouched (RCOLL_SHRINK_ABORT), the new communicator has the 3 survivors in order,
/// rcollCommShrinkExcluded names the dead rank, and an all_reduce gives their sum.
#[test]
fn survivors_shrink_after_a_killed_rank() {
    let bin = compile("cc", "shrink.c", "shrink", &shared_flags());
    let results = run_all(env_ranks(&bin, &[], 4), Duration::from_secs(120));
    assert_eq!(
        results[3].0, None,
        "rank 3 was to die by SIGKILL:\n{}",
        results[3].1
    );
    all_print(&results[..3], "SHRINK-OK 3");
}

/// Registered memory (capi/examples/memory.c, on 3 ranks under AddressSanitizer and
/// UndefinedBehaviorSanitizer): rcollMemAlloc's memory zeroed and page-aligned;
/// all-reduces (blocking and queued, in place and not) and an all-gather on buffers
/// registered with rcollCommRegister give the sums each rank computes itself; registering
/// a range twice, inside and across a registered one works; NULL and zero sizes, freeing
/// foreign or freed memory, stale handles and another communicator's handle are refused
/// (rcollInvalidArgument, a message naming the argument) and the communicator works after.
/// On this host the transport has no device: the verbs suite's zero-copy test covers that.
#[test]
fn registered_memory_alloc_register_use_deregister_free() {
    let bin = compile("cc", "memory.c", "memory-asan", &shared_flags());
    let cmds = env_ranks(&bin, &[], 3);
    let results = run_all(cmds, Duration::from_secs(180));
    all_print(&results, "MEMORY-OK");
    for (r, (_, out)) in results.iter().enumerate() {
        assert_eq!(
            out.matches("REFUSED").count(),
            11,
            "rank {r}: not every misuse was refused:\n{out}"
        );
    }
}
