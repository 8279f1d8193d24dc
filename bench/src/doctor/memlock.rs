//! The locked-memory limit. Registering a buffer with the device pins its pages, and the
//! kernel counts pinned pages against RLIMIT_MEMLOCK (`ulimit -l`) unless the process has
//! CAP_IPC_LOCK in the initial user namespace. Past the limit `ibv_reg_mr` fails with
//! ENOMEM, which surfaces as a failed connection or a failed call, far from its cause.
//!
//! The limit is read from `/proc/self/limits`, the capability from `/proc/self/status`
//! (`CapEff`) and the namespace from `/proc/self/uid_map`: no system calls needed.

use rcoll::transport::verbs::{DEFAULT_WINDOW, HEADER};

use super::{human_bytes, Findings};

/// A limit that fits fewer peers than this is worth a warning.
const COMFORTABLE_PEERS: u64 = 64;
/// `CAP_IPC_LOCK`'s bit in the capability sets.
const CAP_IPC_LOCK: u32 = 14;

/// A resource limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Limit {
    Unlimited,
    Bytes(u64),
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Unlimited => f.write_str("unlimited"),
            Limit::Bytes(b) => f.write_str(&human_bytes(*b)),
        }
    }
}

/// The soft and hard "Max locked memory" limits of a `/proc/PID/limits` text.
fn parse_limits(text: &str) -> Option<(Limit, Limit)> {
    let line = text.lines().find(|l| l.starts_with("Max locked memory"))?;
    let mut fields = line["Max locked memory".len()..].split_whitespace();
    let limit = |field: Option<&str>| match field? {
        "unlimited" => Some(Limit::Unlimited),
        n => n.parse().ok().map(Limit::Bytes),
    };
    Some((limit(fields.next())?, limit(fields.next())?))
}

/// Whether a `/proc/PID/status` text grants CAP_IPC_LOCK (effective set).
fn has_ipc_lock(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// Whether a `/proc/PID/uid_map` text is the initial user namespace's identity map (only
/// there do capabilities count for the kernel's `capable()` check).
fn initial_user_namespace(uid_map: &str) -> bool {
    let fields: Vec<&str> = uid_map.split_whitespace().collect();
    fields == ["0", "0", "4294967295"]
}

/// Bytes a verbs rank registers per peer with `segment`-byte slots: the slots it
/// advertises and as many send buffers (more when traffic outruns the window).
fn per_peer_bytes(segment: usize) -> u64 {
    2 * DEFAULT_WINDOW as u64 * (segment + HEADER) as u64
}

/// Reports the limit against what a rank with `segment`-byte slots registers.
pub(super) fn check(f: &mut Findings, segment: usize) {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let Some((soft, hard)) = parse_limits(&read("/proc/self/limits")) else {
        f.note("cannot read \"Max locked memory\" from /proc/self/limits");
        return;
    };
    let per_peer = per_peer_bytes(segment);
    let need = format!(
        "rcoll registers about {} per peer ({DEFAULT_WINDOW} slots each way of {} segment + \
         {HEADER} B header; RCOLL_SEGMENT_BYTES sets the segment)",
        human_bytes(per_peer),
        human_bytes(segment as u64)
    );
    let capable = has_ipc_lock(&read("/proc/self/status"))
        && initial_user_namespace(&read("/proc/self/uid_map"));
    let fix = |f: &Findings| {
        f.detail(
            "fix: raise it where the ranks start (the hard limit must allow it: \
             `* - memlock unlimited` in /etc/security/limits.conf); in a container, start it \
             with the second (or with --cap-add IPC_LOCK):",
        );
        f.verbatim("    ulimit -l unlimited");
        f.verbatim("    docker run --ulimit memlock=-1 ...");
    };
    match soft {
        Limit::Unlimited => f.ok("Max locked memory: unlimited"),
        Limit::Bytes(bytes) if capable => {
            f.ok(&format!(
                "Max locked memory: {soft} (hard {hard}); this process has CAP_IPC_LOCK, so \
                 the kernel does not hold its registrations to that limit"
            ));
            let peers = bytes / per_peer;
            if peers < COMFORTABLE_PEERS {
                f.detail(&format!(
                    "without CAP_IPC_LOCK (not root, or a container without it) {soft} would \
                     fit about {peers} peer(s): {need}"
                ));
                fix(f);
            }
        }
        Limit::Bytes(bytes) => {
            let peers = bytes / per_peer;
            if peers < COMFORTABLE_PEERS {
                f.warn(&format!(
                    "Max locked memory: {soft} (hard {hard}): enough for about {peers} peer(s); \
                     beyond that ibv_reg_mr fails with ENOMEM"
                ));
                f.detail(&need);
                fix(f);
            } else {
                f.ok(&format!(
                    "Max locked memory: {soft} (hard {hard}): enough for about {peers} peers"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str = "\
Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max locked memory         8388608              16777216             bytes     
Max address space         unlimited            unlimited            bytes     
";

    #[test]
    fn the_memlock_line_is_found_and_parsed() {
        assert_eq!(
            parse_limits(LIMITS),
            Some((Limit::Bytes(8 << 20), Limit::Bytes(16 << 20)))
        );
        let unlimited = "Max locked memory         unlimited            unlimited            bytes";
        assert_eq!(
            parse_limits(unlimited),
            Some((Limit::Unlimited, Limit::Unlimited))
        );
        assert_eq!(parse_limits("Max cpu time  1 1 seconds"), None);
        assert_eq!(Limit::Bytes(8 << 20).to_string(), "8 MiB");
    }

    #[test]
    fn capabilities_count_only_in_the_initial_namespace() {
        assert!(has_ipc_lock("Name:\tx\nCapEff:\t000001fffeffffff\n"));
        assert!(!has_ipc_lock("CapEff:\t00000000a80425fb\n"));
        assert!(!has_ipc_lock("Name:\tx\n"));
        assert!(initial_user_namespace("         0          0 4294967295\n"));
        assert!(!initial_user_namespace(
            "         0       1000          1\n"
        ));
    }

    #[test]
    fn eight_mib_fits_one_peer_at_the_default_segment() {
        let per_peer = per_peer_bytes(128 << 10);
        assert_eq!(per_peer, 2 * 16 * (128 * 1024 + 32));
        assert_eq!((8u64 << 20) / per_peer, 1);
    }
}
