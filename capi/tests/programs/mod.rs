//! Running C programs from tests: the C ABI's (`capi/tests/c_programs.rs`) and the MPI
//! shim's (`mpi/tests/mpi_programs.rs`, which includes this file by path).

#![allow(dead_code)] // each test file uses its part

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The workspace's root.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
}

/// A directory of this test binary's own for the programs it builds.
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Builds `package` in the dev profile (next to this test binary) and returns the path of
/// its `file` there (target/<profile>/`file`). Callers keep it in a `OnceLock`: one build.
pub fn built(package: &str, file: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "-p", package])
        .current_dir(repo())
        .output()
        .expect("cargo");
    assert!(
        out.status.success(),
        "cargo build -p {package}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // target/<profile>/deps/<this test> -> target/<profile>
    let exe = std::env::current_exe().expect("test binary");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join(file);
    assert!(path.exists(), "{} missing", path.display());
    path
}

/// `launcher -np n` for Open MPI's mpirun as these tests run it: oversubscribed, as root
/// too, MPI's own traffic over loopback TCP (which works in every container).
pub fn open_mpi_run(launcher: &str, n: usize) -> Command {
    let mut c = Command::new(launcher);
    c.args(["--oversubscribe", "-np", &n.to_string()])
        .args([
            "--mca",
            "btl",
            "self,tcp",
            "--mca",
            "btl_tcp_if_include",
            "lo",
        ])
        .args(["--mca", "oob_tcp_if_include", "lo"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c
}

/// Runs the commands to their end (killing them at `limit`): each one's exit code (None:
/// killed by a signal or the limit) and its stdout + stderr.
pub fn run_all(cmds: Vec<Command>, limit: Duration) -> Vec<(Option<i32>, String)> {
    let deadline = Instant::now() + limit;
    let mut running: Vec<_> = cmds
        .into_iter()
        .map(|mut c| {
            let mut child = c
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            let pipes: Vec<Box<dyn Read + Send>> = vec![
                Box::new(child.stdout.take().expect("stdout")),
                Box::new(child.stderr.take().expect("stderr")),
            ];
            let readers: Vec<_> = pipes
                .into_iter()
                .map(|mut p| {
                    std::thread::spawn(move || {
                        let mut s = String::new();
                        let _ = p.read_to_string(&mut s);
                        s
                    })
                })
                .collect();
            (child, readers)
        })
        .collect();
    let mut codes = vec![None; running.len()];
    let mut done = vec![false; running.len()];
    while done.iter().any(|d| !d) {
        for (i, (child, _)) in running.iter_mut().enumerate() {
            if !done[i] {
                if let Some(status) = child.try_wait().expect("wait") {
                    codes[i] = status.code();
                    done[i] = true;
                }
            }
        }
        if Instant::now() > deadline {
            for (i, (child, _)) in running.iter_mut().enumerate() {
                if !done[i] {
                    let _ = child.kill();
                    let _ = child.wait();
                    done[i] = true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    running
        .into_iter()
        .zip(codes)
        .map(|((_, readers), code)| {
            let text: Vec<String> = readers
                .into_iter()
                .map(|r| r.join().expect("reader"))
                .collect();
            (code, text.concat())
        })
        .collect()
}
