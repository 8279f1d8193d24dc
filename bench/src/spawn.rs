//! `--ranks N` over TCP without a launcher: rcoll-bench starts N processes of itself on
//! this host, each told its rank by the environment a launcher would set (`RCOLL_RANK`,
//! `RCOLL_WORLD_SIZE`, `RCOLL_ROOT_ADDR` on a free loopback port) and by
//! [`CHILD_MARKER`]; each runs [`crate::rank`]. Rank 0's stdout (the report) comes
//! through this process; the other ranks' stdout is discarded, and every rank's stderr
//! (its errors) is this process's stderr.
//!
//! This process waits for all of them and exits with the status of the first that
//! failed. Once one rank has failed, or rank 0 has finished, the others get [`GRACE`] to
//! finish too; a run whose rank 0 prints nothing for `--timeout` seconds is stopped.
//! Every rank process is killed on the way out of an error, and exits by itself when
//! this process is gone (see [`crate::rank`]).

use std::ffi::OsString;
use std::io::{BufRead as _, BufReader};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::BenchError;
use crate::launch::CHILD_MARKER;
use crate::output;
use crate::progress::Progress;

/// How long the remaining ranks may take to finish once one has failed or rank 0 is done.
pub const GRACE: Duration = Duration::from_secs(10);
/// How often the ranks are polled.
const POLL: Duration = Duration::from_millis(50);

/// Starts `nranks` rank processes of this binary with this process's arguments and waits
/// for them (see the module documentation). `progress_line`, if any, moves on as rank 0's
/// rows arrive.
pub fn run(
    nranks: usize,
    stall_timeout: Option<Duration>,
    progress_line: Option<Progress>,
) -> Result<(), BenchError> {
    let exe = std::env::current_exe().map_err(|e| spawn_error("find this executable", e))?;
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let root = free_root()?;
    // The job's secret, fresh for every run: only these children can join it.
    let secret = rcoll::process::random_unique_id()
        .map_err(|e| spawn_error("make a job secret", std::io::Error::other(e.to_string())))?;
    let secret = rcoll::process::format_unique_id(secret);
    let mut group = Group(Vec::with_capacity(nranks));
    for rank in 0..nranks {
        let mut child = Command::new(&exe)
            .args(&args)
            .env("RCOLL_RANK", rank.to_string())
            .env("RCOLL_WORLD_SIZE", nranks.to_string())
            .env("RCOLL_ROOT_ADDR", &root)
            .env("RCOLL_UNIQUE_ID", &secret)
            .env(CHILD_MARKER, std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(if rank == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| spawn_error(&format!("start rank {rank}"), e))?;
        group.0.push(RankProcess {
            lifeline: child.stdin.take(),
            stdout: child.stdout.take(),
            child,
            end: None,
        });
    }
    let progress = Arc::new(Mutex::new(Instant::now()));
    let relay = group
        .0
        .first_mut()
        .and_then(|p| p.stdout.take())
        .map(|out| {
            let progress = Arc::clone(&progress);
            std::thread::spawn(move || relay(out, &progress, progress_line))
        });
    let outcome = group.wait(&progress, stall_timeout);
    // Rank 0's last lines come before any error this process prints.
    if let Some(relay) = relay {
        let _ = relay.join();
    }
    outcome
}

/// One rank process.
struct RankProcess {
    child: Child,
    /// The write end of the rank's stdin, held until it has exited (see
    /// [`crate::rank`]'s parent watch).
    lifeline: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    end: Option<End>,
}

/// How a rank process ended.
#[derive(Clone, Debug)]
enum End {
    Exited(ExitStatus),
    /// Killed by this process, for the reason given.
    Stopped(String),
}

/// Every rank process; dropping it kills those still running.
struct Group(Vec<RankProcess>);

impl Group {
    /// Polls until every rank has ended, stopping the rest [`GRACE`] after a failure or
    /// rank 0's exit, or all of them when rank 0 has printed nothing for `stall_timeout`.
    fn wait(
        &mut self,
        progress: &Mutex<Instant>,
        stall_timeout: Option<Duration>,
    ) -> Result<(), BenchError> {
        let mut first_failure: Option<usize> = None;
        let mut winding_down: Option<(Instant, String)> = None;
        loop {
            let now = Instant::now();
            for (rank, p) in self.0.iter_mut().enumerate() {
                if p.end.is_some() {
                    continue;
                }
                let status = p
                    .child
                    .try_wait()
                    .map_err(|e| spawn_error(&format!("wait for rank {rank}"), e))?;
                let Some(status) = status else { continue };
                p.end = Some(End::Exited(status));
                p.lifeline = None;
                if !status.success() && first_failure.is_none() {
                    first_failure = Some(rank);
                    winding_down = Some((now, format!("rank {rank} failed")));
                } else if rank == 0 && winding_down.is_none() {
                    winding_down = Some((now, "rank 0 finished".to_owned()));
                }
            }
            if self.0.iter().all(|p| p.end.is_some()) {
                break;
            }
            if let Some((since, why)) = &winding_down {
                if now.duration_since(*since) > GRACE {
                    let reason = format!("still running {} s after {why}", GRACE.as_secs());
                    self.stop_all(&reason);
                }
            }
            let quiet = progress
                .lock()
                .map(|last| now.duration_since(*last))
                .unwrap_or_default();
            if let Some(limit) = stall_timeout.filter(|limit| quiet > *limit) {
                let reason = format!(
                    "rank 0 printed nothing for {} s (--timeout)",
                    limit.as_secs()
                );
                self.stop_all(&reason);
            }
            std::thread::sleep(POLL);
        }
        self.verdict(first_failure)
    }

    /// Kills every rank still running, recording `reason`.
    fn stop_all(&mut self, reason: &str) {
        for p in self.0.iter_mut().filter(|p| p.end.is_none()) {
            let _ = p.child.kill();
            let _ = p.child.wait();
            p.end = Some(End::Stopped(reason.to_owned()));
            p.lifeline = None;
        }
    }

    /// `Ok` if every rank succeeded; otherwise one line per rank that did not, and the
    /// exit status of the first that failed by itself.
    fn verdict(&self, first_failure: Option<usize>) -> Result<(), BenchError> {
        let failures: Vec<String> = self
            .0
            .iter()
            .enumerate()
            .filter_map(|(rank, p)| match &p.end {
                Some(End::Exited(s)) if s.success() => None,
                Some(End::Exited(s)) => Some(format!("rank {rank}: {}", describe(*s))),
                Some(End::Stopped(why)) => Some(format!("rank {rank}: killed: {why}")),
                None => Some(format!("rank {rank}: lost")),
            })
            .collect();
        if failures.is_empty() {
            return Ok(());
        }
        let code = first_failure
            .and_then(|rank| match self.0.get(rank).and_then(|p| p.end.as_ref()) {
                Some(End::Exited(s)) => Some(exit_code(*s)),
                _ => None,
            })
            .unwrap_or(1);
        Err(BenchError::Processes { code, failures })
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.stop_all("rcoll-bench stopped");
    }
}

/// Copies rank 0's stdout to this process's, line by line, noting when each line came
/// (and moving the progress line on, if there is one).
fn relay(from: ChildStdout, progress: &Mutex<Instant>, mut progress_line: Option<Progress>) {
    let mut reader = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                match progress_line.as_mut() {
                    Some(p) => p.print(&String::from_utf8_lossy(&line)),
                    None => output::print_bytes(&line),
                }
                if let Ok(mut last) = progress.lock() {
                    *last = Instant::now();
                }
            }
        }
    }
}

/// A loopback address with a port that was free a moment ago (bound, then released, for
/// rank 0 to listen on).
fn free_root() -> Result<String, BenchError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| spawn_error("find a free port on 127.0.0.1", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| spawn_error("find a free port on 127.0.0.1", e))?;
    Ok(addr.to_string())
}

fn describe(status: ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(signal) = status.signal() {
            return format!("killed by signal {signal}");
        }
    }
    match status.code() {
        Some(code) => format!("exit status {code}"),
        None => status.to_string(),
    }
}

/// The status to exit with for a rank that ended with `status`: its exit code, or 128
/// plus the signal that killed it, as a shell reports it.
fn exit_code(status: ExitStatus) -> u8 {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(signal) = status.signal() {
            return u8::try_from(128 + signal).unwrap_or(1);
        }
    }
    status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .filter(|&c| c != 0)
        .unwrap_or(1)
}

fn spawn_error(what: &str, source: std::io::Error) -> BenchError {
    BenchError::Spawn {
        what: what.to_owned(),
        source,
    }
}
