//! Helpers of the CLI tests: run the built `rcoll-bench` with a deadline, and read its
//! table.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `rcoll-bench` binary cargo built for these tests.
pub fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rcoll-bench"))
}

/// Rows of the table: every line that is not a comment, split into columns.
pub fn rows(stdout: &str) -> Vec<Vec<&str>> {
    stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// A JSON file name of its own for each test.
pub fn json_path(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "rcoll-bench-cli-{test}-{}.json",
        std::process::id()
    ))
}

/// Runs `cmd` with a deadline, so that a hang fails the test instead of stalling it.
pub fn output(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rcoll-bench");
    let deadline = Instant::now() + Duration::from_secs(240);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "rcoll-bench hung:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// The standard output of a run that must have succeeded (else both outputs, failing).
pub fn succeeded(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
