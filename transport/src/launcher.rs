//! Rank, size and rendezvous address from the environment of common launchers, so that a
//! process started by mpirun, srun or torchrun knows its place without arguments.
//!
//! | launcher | rank | size | root address |
//! |---|---|---|---|
//! | rcoll | `RCOLL_RANK` | `RCOLL_WORLD_SIZE` | `RCOLL_ROOT_ADDR` (host:port) |
//! | torchrun | `RANK` | `WORLD_SIZE` | `MASTER_ADDR`:`MASTER_PORT` |
//! | Open MPI | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `RCOLL_ROOT_ADDR` |
//! | PMI (MPICH, Hydra) | `PMI_RANK` | `PMI_SIZE` | `RCOLL_ROOT_ADDR` |
//! | Slurm | `SLURM_PROCID` | `SLURM_NTASKS` | `RCOLL_ROOT_ADDR` |
//!
//! The first launcher whose rank and size are both set wins, in the order above. MPI and
//! Slurm do not publish a rendezvous address, so `RCOLL_ROOT_ADDR` names rank 0's; it
//! defaults to `127.0.0.1:29500` (all ranks on one host). `RCOLL_UNIQUE_ID` (32 hex
//! digits) is the job's secret id, which every rank must be given (no launcher publishes a
//! secret); `RCOLL_INSECURE_ID=1` allows one derived from the root address and size instead,
//! for tests on a trusted host.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::types::MAX_RANKS;

/// How long resolving the rendezvous host name may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where this process stands in its job.
#[derive(Clone, PartialEq, Eq)]
pub struct Placement {
    /// This process's rank.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
    /// Rank 0's rendezvous address.
    pub root: SocketAddr,
    /// The job's secret id, if the environment sets one.
    pub unique_id: Option<u128>,
    /// Whether the environment allows the public default id (`RCOLL_INSECURE_ID=1`).
    pub insecure_id: bool,
    /// Which convention supplied rank and size.
    pub launcher: &'static str,
}

/// The rendezvous address used when none is given: all ranks on this host.
pub const DEFAULT_ROOT: &str = "127.0.0.1:29500";

/// Each launcher's name and its variables for rank and size, in the order they are read:
/// the first whose two variables are both set supplies the placement.
pub const LAUNCHERS: [(&str, &str, &str); 5] = [
    ("rcoll", "RCOLL_RANK", "RCOLL_WORLD_SIZE"),
    ("torchrun", "RANK", "WORLD_SIZE"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI", "PMI_RANK", "PMI_SIZE"),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS"),
];

/// Reads the placement from variables looked up by `var` (the process environment in
/// [`Placement::from_env`]). `Ok(None)` when no launcher's variables are set.
pub fn placement(var: impl Fn(&str) -> Option<String>) -> Result<Option<Placement>, String> {
    let number = |name: &str| -> Result<Option<usize>, String> {
        var(name)
            .map(|v| {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("{name}={v:?} is not a number"))
            })
            .transpose()
    };
    for (launcher, rank_var, size_var) in LAUNCHERS {
        let (Some(rank), Some(size)) = (number(rank_var)?, number(size_var)?) else {
            continue;
        };
        if size > MAX_RANKS {
            return Err(format!(
                "{size_var}={size}: rcoll takes at most {MAX_RANKS} ranks"
            ));
        }
        if size == 0 || rank >= size {
            return Err(format!(
                "{rank_var}={rank} is not a rank of {size_var}={size}"
            ));
        }
        let root_text = match (
            var("RCOLL_ROOT_ADDR"),
            launcher,
            var("MASTER_ADDR"),
            var("MASTER_PORT"),
        ) {
            (Some(r), _, _, _) => r,
            (None, "torchrun", Some(host), Some(port)) => format!("{host}:{port}"),
            _ => DEFAULT_ROOT.to_owned(),
        };
        // Within the job's setup deadline when it is shorter (`RCOLL_TIMEOUT`, seconds;
        // a malformed value is the configuration's to report).
        let within = var("RCOLL_TIMEOUT")
            .and_then(|t| t.trim().parse::<f64>().ok())
            .filter(|t| t.is_finite() && *t > 0.0)
            .map_or(RESOLVE_TIMEOUT, |t| {
                RESOLVE_TIMEOUT.min(Duration::from_secs_f64(t.min(1e6)))
            });
        let root = resolve_within(&root_text, within)?;
        let unique_id = var("RCOLL_UNIQUE_ID")
            .map(|v| parse_unique_id(&v).map_err(|why| format!("RCOLL_UNIQUE_ID {why}")))
            .transpose()?;
        let insecure_id = matches!(
            var("RCOLL_INSECURE_ID").as_deref().map(str::trim),
            Some("1" | "yes" | "true" | "on")
        );
        return Ok(Some(Placement {
            rank,
            size,
            root,
            unique_id,
            insecure_id,
            launcher,
        }));
    }
    Ok(None)
}

/// A job secret as `RCOLL_UNIQUE_ID` gives it: exactly 32 hexadecimal digits (an `0x`
/// in front allowed), not all zero, so that a secret is never a small number anyone
/// would guess. The error does not repeat the text (it may be a secret with a typo).
pub fn parse_unique_id(text: &str) -> Result<u128, String> {
    let t = text.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if digits.len() != 32 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "must be exactly 32 hexadecimal digits (a 128-bit random secret, e.g. from \
             `od -An -N16 -tx1 /dev/urandom | tr -d ' \\n'`); it has {} characters{}",
            digits.chars().count(),
            if digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                ""
            } else {
                " and not only hexadecimal digits"
            }
        ));
    }
    match u128::from_str_radix(digits, 16) {
        Ok(0) => Err("is all zeros: not a secret".into()),
        Ok(id) => Ok(id),
        Err(e) => Err(format!("is not a 128-bit number: {e}")),
    }
}

/// What a secret looks like in `{:?}` and logs.
pub const REDACTED: &str = "<redacted>";

impl std::fmt::Debug for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placement")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("root", &self.root)
            .field("unique_id", &self.unique_id.map(|_| REDACTED))
            .field("insecure_id", &self.insecure_id)
            .field("launcher", &self.launcher)
            .finish()
    }
}

impl Placement {
    /// [`placement`] from the process environment.
    pub fn from_env() -> Result<Option<Placement>, String> {
        placement(|name| std::env::var(name).ok())
    }
}

/// Resolves `host:port` (names, IPv4, or `[IPv6]:port`).
pub fn resolve(text: &str) -> Result<SocketAddr, String> {
    text.to_socket_addrs()
        .map_err(|e| format!("cannot resolve rendezvous address {text:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("rendezvous address {text:?} resolves to nothing"))
}

/// [`resolve`] with a deadline: the system resolver has none of its own (a dead DNS server
/// blocks `getaddrinfo` for as long as its configuration says), so it runs on a thread of
/// its own and is abandoned after `timeout`.
pub fn resolve_within(text: &str, timeout: Duration) -> Result<SocketAddr, String> {
    // Addresses need no resolver, and no thread.
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let owned = text.to_owned();
    std::thread::Builder::new()
        .name("rcoll-resolve".into())
        .spawn(move || {
            let _ = tx.send(resolve(&owned));
        })
        .map_err(|e| format!("cannot start resolving {text:?}: {e}"))?;
    match rx.recv_timeout(timeout) {
        Ok(result) => result,
        Err(_) => Err(format!(
            "resolving rendezvous address {text:?} took longer than {timeout:?} (is DNS \
             reachable? an IP address needs no resolver)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            owned
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    /// Environment variables, and the launcher, rank and size they should give.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, usize, usize);

    #[test]
    fn each_launchers_convention_is_understood() {
        let cases: [Case; 5] = [
            (
                &[("RCOLL_RANK", "1"), ("RCOLL_WORLD_SIZE", "4")],
                "rcoll",
                1,
                4,
            ),
            (
                &[
                    ("RANK", "2"),
                    ("WORLD_SIZE", "3"),
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", "4242"),
                ],
                "torchrun",
                2,
                3,
            ),
            (
                &[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")],
                "Open MPI",
                0,
                2,
            ),
            (&[("PMI_RANK", "5"), ("PMI_SIZE", "6")], "PMI", 5, 6),
            (
                &[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "8")],
                "Slurm",
                3,
                8,
            ),
        ];
        for (vars, launcher, rank, size) in cases {
            let p = placement(env(vars)).unwrap().unwrap();
            assert_eq!((p.launcher, p.rank, p.size), (launcher, rank, size));
        }
        let torch = placement(env(cases[1].0)).unwrap().unwrap();
        assert_eq!(torch.root, "127.0.0.1:4242".parse().unwrap());
    }

    #[test]
    fn root_and_unique_id_overrides() {
        let p = placement(env(&[
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2"),
            ("RCOLL_ROOT_ADDR", "[::1]:7000"),
            ("RCOLL_UNIQUE_ID", "0x00000000000000000000000000000abc"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(p.root, "[::1]:7000".parse().unwrap());
        assert_eq!(p.unique_id, Some(0xabc));
        assert!(!format!("{p:?}").contains("abc"), "{p:?}");
    }

    /// A secret anyone could guess is refused, naming the variable and not echoing it.
    #[test]
    fn weak_or_malformed_secrets_are_refused() {
        let base = [("RCOLL_RANK", "0"), ("RCOLL_WORLD_SIZE", "2")];
        let zeros = "0".repeat(32);
        let short = "f".repeat(31);
        let long = "1".repeat(33);
        let bad = format!("{}g", "a".repeat(31));
        for weak in ["0", "1", "+1", "abc", "", " ", &zeros, &short, &long, &bad] {
            let mut vars = base.to_vec();
            vars.push(("RCOLL_UNIQUE_ID", weak));
            let e = placement(env(&vars)).expect_err(weak);
            assert!(e.contains("RCOLL_UNIQUE_ID"), "{e}");
            if weak.len() > 3 {
                assert!(!e.contains(weak.trim()), "echoes the secret: {e}");
            }
        }
        let good = "0123456789abcdefABCDEF0123456789";
        assert_eq!(
            parse_unique_id(&format!(" 0x{good}\n")),
            Ok(0x0123456789abcdefabcdef0123456789)
        );
        assert_eq!(
            parse_unique_id(good),
            Ok(0x0123456789abcdefabcdef0123456789)
        );
    }

    #[test]
    fn nonsense_is_an_error_and_nothing_is_none() {
        assert!(placement(env(&[])).unwrap().is_none());
        assert!(placement(env(&[("RCOLL_RANK", "4"), ("RCOLL_WORLD_SIZE", "4")])).is_err());
        assert!(placement(env(&[("SLURM_PROCID", "x"), ("SLURM_NTASKS", "2")])).is_err());
        assert!(placement(env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("RCOLL_UNIQUE_ID", "zz")
        ]))
        .is_err());
    }
}
