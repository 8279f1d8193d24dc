//! The connectivity check: two processes of this binary (`rcoll-bench doctor-rank`) form a
//! 2-rank group over verbs, rank 0 on one port and rank 1 on the other, and run a few
//! checked all_reduces. Each rank is told its port as a launched rank would be:
//! `RCOLL_TRANSPORT=verbs`, `RCOLL_IB_HCA=<device>:<port>`, `RCOLL_SOCKET_IFNAME=<netdev>`
//! (so its GID follows that interface's address), and `RCOLL_RANK`, `RCOLL_WORLD_SIZE`,
//! `RCOLL_ROOT_ADDR` (a free loopback port; the ranks' own listeners are on their
//! interfaces). Rank 0 prints one line per size; the parent reads them.

use std::io::Read;
use std::net::{IpAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rcoll::ReduceOp;

use super::Findings;
use crate::error::BenchError;

/// A port a rank can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// Its network interface (RoCE).
    pub netdev: Option<String>,
    /// That interface's address.
    pub address: Option<IpAddr>,
    /// Whether the link layer is Ethernet.
    pub roce: bool,
}

impl Endpoint {
    /// `rxe0:1`.
    pub fn name(&self) -> String {
        format!("{}:{}", self.device, self.port)
    }

    /// `rxe0:1 (veth0 10.99.0.1)`.
    fn describe(&self) -> String {
        match (&self.netdev, self.address) {
            (Some(n), Some(a)) => format!("{} ({n} {a})", self.name()),
            (Some(n), None) => format!("{} ({n})", self.name()),
            _ => self.name(),
        }
    }
}

/// Elements per all_reduce (f32): 4 B, 4 KiB and 1 MiB.
const COUNTS: [usize; 3] = [1, 1024, 256 * 1024];
/// Timed iterations per size, after one untimed.
const ITERS: usize = 5;
/// The launcher variables a rank would otherwise inherit from the doctor's environment.
const INHERITED: [&str; 11] = [
    "RANK",
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RCOLL_INSECURE_ID",
];

/// Runs the check between `pair` and reports it; true when it worked.
pub(super) fn check(
    f: &mut Findings,
    pair: [&Endpoint; 2],
    gid_index: Option<u32>,
    timeout: Duration,
) -> bool {
    let what = format!(
        "2-rank all_reduce over verbs, rank 0 on {}, rank 1 on {}",
        pair[0].describe(),
        pair[1].describe()
    );
    let started = Instant::now();
    match run(pair, gid_index, timeout) {
        Ok(rows) => {
            let wrong: u64 = rows.iter().map(|r| r.wrong).sum();
            let timings: Vec<String> = rows
                .iter()
                .map(|r| {
                    format!(
                        "{} in {}",
                        super::human_bytes(r.bytes as u64),
                        micros(r.time_us)
                    )
                })
                .collect();
            if wrong > 0 {
                f.fail(
                    "wrong all_reduce results over verbs",
                    &format!("{what}: {wrong} wrong element(s)"),
                );
                return false;
            }
            f.ok(&format!("{what}: OK"));
            f.detail(&format!(
                "checked results; mean of {ITERS} iterations: {}; {:.1} s in all, with start-up",
                timings.join(", "),
                started.elapsed().as_secs_f64()
            ));
            true
        }
        Err(e) => {
            f.fail(
                &format!(
                    "no verbs connectivity {} <-> {}",
                    pair[0].name(),
                    pair[1].name()
                ),
                &format!("{what}: failed"),
            );
            for line in e.lines() {
                f.detail(line);
            }
            false
        }
    }
}

/// `us` microseconds as `812 us` or `45.2 ms`.
fn micros(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.0} us")
    } else {
        format!("{:.1} ms", us / 1000.0)
    }
}

/// One size's result, as rank 0 prints it.
#[derive(Debug, PartialEq)]
struct Row {
    bytes: usize,
    time_us: f64,
    wrong: u64,
}

/// Rank 0's line for one size.
fn format_row(row: &Row) -> String {
    format!(
        "size {} time_us {:.3} wrong {}",
        row.bytes, row.time_us, row.wrong
    )
}

fn parse_row(line: &str) -> Option<Row> {
    let f: Vec<&str> = line.split_whitespace().collect();
    match f.as_slice() {
        ["size", bytes, "time_us", time, "wrong", wrong] => Some(Row {
            bytes: bytes.parse().ok()?,
            time_us: time.parse().ok()?,
            wrong: wrong.parse().ok()?,
        }),
        _ => None,
    }
}

/// Starts the two ranks and collects rank 0's rows, or says what went wrong.
fn run(
    pair: [&Endpoint; 2],
    gid_index: Option<u32>,
    timeout: Duration,
) -> Result<Vec<Row>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let root = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port on 127.0.0.1: {e}"))?;
    let secret = rcoll::process::random_unique_id()
        .map(rcoll::process::format_unique_id)
        .map_err(|e| e.to_string())?;
    let mut ranks = Vec::new();
    for (rank, endpoint) in pair.iter().enumerate() {
        let mut cmd = Command::new(&exe);
        cmd.arg("doctor-rank")
            .env("RCOLL_TRANSPORT", "verbs")
            .env("RCOLL_RANK", rank.to_string())
            .env("RCOLL_WORLD_SIZE", "2")
            .env("RCOLL_ROOT_ADDR", root.to_string())
            .env("RCOLL_UNIQUE_ID", &secret)
            .env("RCOLL_IB_HCA", endpoint.name())
            // Slightly less than the parent's deadline, so that a stuck rank says where.
            .env("RCOLL_TIMEOUT", (timeout.as_secs_f64() * 0.8).to_string())
            .env_remove("RCOLL_SOCKET_IFNAME")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in INHERITED {
            cmd.env_remove(var);
        }
        if let Some(netdev) = &endpoint.netdev {
            cmd.env("RCOLL_SOCKET_IFNAME", netdev);
        }
        if let Some(i) = gid_index {
            cmd.env("RCOLL_IB_GID_INDEX", i.to_string());
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start rank {rank}: {e}"))?;
        ranks.push(RankProcess::new(child));
    }
    let deadline = rcoll::transport::deadline_after(timeout);
    let mut timed_out = false;
    for p in &mut ranks {
        timed_out |= !p.wait_until(deadline);
    }
    let outputs: Vec<(String, String, Option<std::process::ExitStatus>)> =
        ranks.into_iter().map(RankProcess::finish).collect();
    let failed = timed_out
        || outputs
            .iter()
            .any(|(_, _, s)| !s.is_some_and(|s| s.success()));
    if failed {
        let mut why = Vec::new();
        if timed_out {
            why.push(format!("stopped after {} s (--timeout)", timeout.as_secs()));
        }
        for (rank, (_, stderr, status)) in outputs.iter().enumerate() {
            let status = status.map_or("killed".to_owned(), |s| s.to_string());
            why.push(format!("rank {rank}: {status}"));
            why.extend(
                stderr
                    .lines()
                    .rev()
                    .take(6)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .map(|l| format!("  {l}")),
            );
        }
        return Err(why.join("\n"));
    }
    let rows: Vec<Row> = outputs[0].0.lines().filter_map(parse_row).collect();
    if rows.len() != COUNTS.len() {
        return Err(format!("rank 0 printed {:?}", outputs[0].0));
    }
    Ok(rows)
}

/// A rank process with its output drained on threads (so that a chatty rank cannot
/// block on a full pipe), killed if still running when dropped.
struct RankProcess {
    child: Child,
    /// Held until the rank exits: its end of file tells the rank the doctor is gone.
    lifeline: Option<std::process::ChildStdin>,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
    status: Option<std::process::ExitStatus>,
}

impl RankProcess {
    fn new(mut child: Child) -> RankProcess {
        fn drain(mut from: impl Read + Send + 'static) -> JoinHandle<String> {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = from.read_to_end(&mut bytes);
                String::from_utf8_lossy(&bytes).into_owned()
            })
        }
        RankProcess {
            lifeline: child.stdin.take(),
            stdout: child.stdout.take().map(drain),
            stderr: child.stderr.take().map(drain),
            child,
            status: None,
        }
    }

    /// Waits for the exit until `deadline`; false if it had to be killed.
    fn wait_until(&mut self, deadline: Instant) -> bool {
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
                return true;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stdout, stderr and the exit status (`None`: killed).
    fn finish(mut self) -> (String, String, Option<std::process::ExitStatus>) {
        self.lifeline = None;
        let join =
            |h: Option<JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
        (
            join(self.stdout.take()),
            join(self.stderr.take()),
            self.status,
        )
    }
}

impl Drop for RankProcess {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `rcoll-bench doctor-rank`: one rank of the check, configured by the environment the
/// doctor sets. Rank 0 prints a [`Row`] per size.
pub fn rank() -> Result<(), BenchError> {
    crate::rank::watch_parent();
    let mut comm = rcoll::process::Builder::from_env()?.build()?;
    if comm.transport_name() != "verbs" {
        return Err(crate::error::usage(format!(
            "the group formed over {}, not verbs",
            comm.transport_name()
        )));
    }
    let (rank, n) = (comm.rank(), comm.size());
    for count in COUNTS {
        let send: Vec<f32> = (0..count).map(|i| value(rank, i)).collect();
        let mut recv = vec![0f32; count];
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
        let started = Instant::now();
        for _ in 0..ITERS {
            comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
        }
        let time_us = started.elapsed().as_secs_f64() * 1e6 / ITERS as f64;
        let wrong = (0..count)
            .filter(|&i| recv[i] != (0..n).map(|r| value(r, i)).sum::<f32>())
            .count() as u64;
        if rank == 0 {
            crate::output::print(&format!(
                "{}\n",
                format_row(&Row {
                    bytes: count * std::mem::size_of::<f32>(),
                    time_us,
                    wrong
                })
            ));
        }
    }
    Ok(())
}

/// Rank `rank`'s element `i`: small integers, so that sums are exact in f32.
fn value(rank: usize, i: usize) -> f32 {
    ((rank + 1) * (i % 7 + 1)) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip() {
        let row = Row {
            bytes: 4096,
            time_us: 81.25,
            wrong: 0,
        };
        assert_eq!(parse_row(&format_row(&row)), Some(row));
        assert_eq!(parse_row("size x time_us 1 wrong 0"), None);
        assert_eq!(parse_row("rcoll: something"), None);
        assert_eq!(micros(81.25), "81 us");
        assert_eq!(micros(45_204.0), "45.2 ms");
    }
}
