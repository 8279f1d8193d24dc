//! `rcoll-bench doctor`: can this host run rcoll over RDMA verbs, and if not, what is
//! missing and how to fix it.
//!
//! ```text
//! RDMA support        ibv_get_device_list: the kernel's and rdma-core's view
//! <device> port <n>   state, link layer, MTU, largest message, GID table, rcoll's GID
//! rank on --device    the device and GID a rank bound to that interface would use
//! locked memory       RLIMIT_MEMLOCK against what rcoll registers per peer
//! connectivity        a 2-rank all_reduce over verbs between two ports (two processes)
//! summary             ready or not, and the problems
//! ```
//!
//! Each finding is one line led by its verdict (`ok`, `note`, `WARN`, `FAIL`), with
//! indented detail lines under it. A `FAIL` is something verbs cannot work without; the
//! exit status is 1 when there is one, 0 otherwise. Warnings (a low memlock limit, an MTU
//! below what the link carries) cost performance or larger groups, not correctness.

pub mod connect;
mod memlock;
mod ports;

use std::process::ExitCode;

use crate::args::DoctorArgs;
use crate::output::print;

/// The verdict column of a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Ok,
    Note,
    Warn,
    Fail,
}

impl Verdict {
    fn tag(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Note => "note",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        }
    }
}

/// Prints findings as they are made and keeps count for the summary.
#[derive(Debug, Default)]
struct Findings {
    /// One short phrase per `FAIL`, for the summary.
    problems: Vec<String>,
    warnings: usize,
}

impl Findings {
    fn section(&self, title: &str) {
        print(&format!("\n{title}\n"));
    }

    fn say(&mut self, verdict: Verdict, text: &str) {
        if verdict == Verdict::Warn {
            self.warnings += 1;
        }
        print(&wrap(&format!("  {:<5} ", verdict.tag()), text));
    }

    fn ok(&mut self, text: &str) {
        self.say(Verdict::Ok, text);
    }

    fn note(&mut self, text: &str) {
        self.say(Verdict::Note, text);
    }

    fn warn(&mut self, text: &str) {
        self.say(Verdict::Warn, text);
    }

    /// A finding that makes verbs unusable; `problem` is its phrase in the summary.
    fn fail(&mut self, problem: &str, text: &str) {
        self.problems.push(problem.to_owned());
        self.say(Verdict::Fail, text);
    }

    /// A paragraph under the last finding.
    fn detail(&self, text: &str) {
        print(&wrap(INDENT, text));
    }

    /// A line under the last finding that must stay whole (a command, a table row).
    fn verbatim(&self, text: &str) {
        print(&format!("{INDENT}{text}\n"));
    }

    /// The last line, and the exit status.
    fn conclude(&self, ready: &str) -> ExitCode {
        let warnings = match self.warnings {
            0 => String::new(),
            1 => " (1 warning above)".to_owned(),
            n => format!(" ({n} warnings above)"),
        };
        if self.problems.is_empty() {
            print(&format!("\nsummary: OK: {ready}{warnings}\n"));
            ExitCode::SUCCESS
        } else {
            print(&format!(
                "\nsummary: FAIL: rcoll cannot use RDMA verbs here: {}{warnings}; \
                 RCOLL_TRANSPORT=auto falls back to tcp\n",
                self.problems.join("; ")
            ));
            ExitCode::FAILURE
        }
    }
}

/// Where the text of a finding starts.
const INDENT: &str = "        ";
/// Lines are wrapped at this many characters.
const WIDTH: usize = 100;

/// `text` after `first` (whose width is [`INDENT`]'s), wrapped at [`WIDTH`] with the
/// continuation lines indented by [`INDENT`].
fn wrap(first: &str, text: &str) -> String {
    let mut out = String::from(first);
    let mut column = first.chars().count();
    let mut line_empty = true;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if !line_empty && column + 1 + len > WIDTH {
            out.push('\n');
            out.push_str(INDENT);
            column = INDENT.len();
            line_empty = true;
        }
        if !line_empty {
            out.push(' ');
            column += 1;
        }
        out.push_str(word);
        column += len;
        line_empty = false;
    }
    out.push('\n');
    out
}

/// Runs every check (see the module documentation) and returns the exit status.
pub fn run(args: &DoctorArgs) -> ExitCode {
    let mut f = Findings::default();
    print(&format!(
        "rcoll-bench doctor: can host {} run rcoll over RDMA verbs?\n",
        host_name()
    ));
    let segment = match rcoll::Config::from_env() {
        Ok(config) => config.segment_bytes,
        Err(e) => {
            f.section("configuration");
            f.fail("bad configuration", &e.to_string());
            rcoll::config::DEFAULT_SEGMENT_BYTES
        }
    };
    let ready = rdma(&mut f, args, segment);
    f.conclude(&ready)
}

/// Checks RDMA itself: devices, ports, GIDs and connectivity. Returns what the summary
/// says when nothing failed.
fn rdma(f: &mut Findings, args: &DoctorArgs, segment: usize) -> String {
    let endpoints = ports::check(f, args, segment);
    f.section("locked memory");
    memlock::check(f, segment);
    f.section("connectivity");
    let roce = endpoints.iter().filter(|e| e.roce).count();
    let pair = match endpoints.as_slice() {
        [a, b, ..] if roce >= 2 || args.connect => Some([a, b]),
        [a] if args.connect => Some([a, a]),
        _ => None,
    };
    let connectivity = match pair {
        Some(pair) => {
            let timeout = std::time::Duration::from_secs(args.timeout.max(1));
            match connect::check(f, pair, args.gid_index, timeout) {
                true => format!(
                    ", all_reduce {} <-> {} works",
                    pair[0].name(),
                    pair[1].name()
                ),
                false => String::new(),
            }
        }
        None if args.connect => {
            f.fail(
                "no port to test connectivity on",
                "--connect: no ACTIVE port with a usable GID to run the test on",
            );
            String::new()
        }
        None if endpoints.is_empty() => {
            f.note("skipped: no usable RDMA port");
            String::new()
        }
        None => {
            f.note(&format!(
                "skipped: the test needs two ACTIVE RoCE ports and this host has {roce}; \
                 --connect runs it anyway (both ranks on one port if there is only one)"
            ));
            String::new()
        }
    };
    let names: Vec<String> = endpoints.iter().map(connect::Endpoint::name).collect();
    format!(
        "{} usable port(s) ({}){connectivity}",
        endpoints.len(),
        names.join(", ")
    )
}

/// Whether `--transport verbs` can start at all: RDMA support and at least one ACTIVE
/// port. The ranks make the full choice (device, GID) themselves; this only spares
/// starting them on a host where none could succeed.
pub fn verbs_precheck() -> Result<(), String> {
    use rcoll::transport::verbs;
    let opts = verbs::Options::from_env(rcoll::config::DEFAULT_SEGMENT_BYTES)?;
    let ports = verbs::probe(None, opts.hca.as_deref(), opts.gid_index)?;
    if ports.is_empty() {
        return Err("no RDMA devices (create Soft-RoCE ones with soft-roce/setup.sh)".into());
    }
    if ports.iter().any(|p| p.choice.is_ok()) {
        return Ok(());
    }
    let why: Vec<String> = ports
        .iter()
        .filter_map(|p| {
            let e = p.choice.as_ref().err()?;
            Some(format!("{} port {}: {e}", p.device, p.port))
        })
        .collect();
    Err(format!("no usable RDMA port: {}", why.join("; ")))
}

/// This machine's name, for the first line.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// `bytes` in the largest binary unit that keeps it whole or above 1 (`8 MiB`, `1.5 KiB`).
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_wrap_under_their_text() {
        let text = "word ".repeat(40);
        let out = wrap("  FAIL  ", &text);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 1, "{out}");
        assert!(lines[0].starts_with("  FAIL  word"));
        for line in &lines {
            assert!(line.len() <= WIDTH, "{line:?}");
        }
        for line in &lines[1..] {
            assert!(line.starts_with("        word"), "{line:?}");
        }
        assert_eq!(wrap(INDENT, "short"), "        short\n");
    }

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(32), "32 B");
        assert_eq!(human_bytes(8 << 20), "8 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(128 * 1024 + 32), "128.0 KiB");
    }
}
