//! Communicator configuration: defaults, then the environment, then explicit settings.

use std::time::Duration;

use crate::algorithm::hierarchical::LevelAlgorithms;
use crate::algorithm::Algorithm;
use crate::error::{Error, Result};
use crate::schedule::cost::CostModel;

/// Default time without progress before a collective fails.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest segment: a message is one segment, and every transport's message length
/// must fit 32 bits with room for headers.
pub const MAX_SEGMENT_BYTES: usize = 1 << 30;

/// Segment size over TCP alone for 2 ranks, unless one is set: larger segments mean fewer
/// system calls and wake-ups per byte; 256 KiB moved more than 128 KiB on 4 ranks and more
/// than 512 KiB on 2 (measured: docs/src/algorithms.md, "How the model's constants were
/// set"). More ranks take [`TCP_SEGMENT_BYTES_MANY`].
pub const TCP_SEGMENT_BYTES: usize = 256 * 1024;

/// Segment size over TCP alone for more than 2 ranks, unless one is set: 512 KiB ran faster
/// than 256 KiB on 3 and 4 ranks at some sizes and no slower at the others, and slower on 2
/// (measured: docs/src/algorithms.md, "How the model's constants were set").
pub const TCP_SEGMENT_BYTES_MANY: usize = 512 * 1024;

/// The segment size over TCP alone for a group of `nranks`, unless one is set.
pub fn tcp_segment_bytes(nranks: usize) -> usize {
    match nranks {
        0..=2 => TCP_SEGMENT_BYTES,
        _ => TCP_SEGMENT_BYTES_MANY,
    }
}

/// Default segment size: small enough that a segment stays in L2 between the rank that
/// writes it and the rank that reduces it, large enough to amortise per-message work.
pub const DEFAULT_SEGMENT_BYTES: usize = 128 * 1024;

/// How a communicator runs its collectives.
///
/// Precedence, lowest first: [`Config::default`], the environment ([`Config::from_env`]),
/// explicit builder settings, and finally a per-call
/// [`Communicator::with_algorithm`](crate::Communicator::with_algorithm).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The algorithm to use where it applies; `None` chooses by the cost model
    /// (`RCOLL_ALGO=auto|<name>`). A forced algorithm that does not implement a collective
    /// leaves that collective to the cost model.
    pub algorithm: Option<Algorithm>,
    /// Time without progress before a collective fails (`RCOLL_TIMEOUT`, seconds).
    pub timeout: Duration,
    /// Bytes per segment, the unit of pipelining (`RCOLL_SEGMENT_BYTES`).
    pub segment_bytes: usize,
    /// Whether `RCOLL_SEGMENT_BYTES` or a builder chose [`Config::segment_bytes`]. If
    /// not, a process group asked to run over TCP alone (`RCOLL_TRANSPORT=tcp`) uses
    /// [`tcp_segment_bytes`] instead.
    pub segment_bytes_set: bool,
    /// The machine model used to choose algorithms.
    pub cost_model: CostModel,
    /// The order ranks stand in on rings (`RCOLL_RING_ORDER`).
    pub ring_order: RingOrder,
    /// Racks or switches above the hosts: a file of `<host> <rack>` lines, `#` comments
    /// (`RCOLL_NET_FILE`); a host is named by its key or its hostname part.
    pub net_file: Option<std::path::PathBuf>,
    /// Measured rates and choices (`RCOLL_TUNING_FILE`, written by `rcoll-bench
    /// calibrate`); see [`crate::tuning`].
    pub tuning: Option<std::sync::Arc<crate::tuning::Tuning>>,
    /// Whether the ranks of a host share memory (set by [`crate::process::Builder`] from
    /// `RCOLL_TRANSPORT`): then every rank prices pairs inside a host at shared memory's
    /// rates, a rank alone on its host (whose own transport is only TCP or verbs)
    /// included, so that all ranks choose alike.
    pub shared_memory_inside_hosts: bool,
    /// The algorithms of a hierarchical schedule's two levels, `local/global`
    /// (`RCOLL_LEVEL_ALGO`, for example `mesh/ring`); `None` (`auto`) prices each level
    /// with its own rates.
    pub level_algorithms: Option<LevelAlgorithms>,
    /// Trials per candidate algorithm of selection at run time, 0 for none
    /// (`RCOLL_AUTOTUNE=off|on|<trials>`, `on` being [`crate::autotune::DEFAULT_TRIALS`]):
    /// see [`crate::autotune`]. Every rank must set the same.
    pub autotune: u32,
}

/// The order ranks stand in on rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingOrder {
    /// Rack by rack, host by host, local rank within a host: each level of the network is
    /// crossed the fewest times (`topology`, the default).
    Topology,
    /// Rank order (`rank`), whatever the placement.
    Rank,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            algorithm: None,
            timeout: DEFAULT_TIMEOUT,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            segment_bytes_set: false,
            cost_model: CostModel::default(),
            ring_order: RingOrder::Topology,
            net_file: None,
            tuning: None,
            shared_memory_inside_hosts: false,
            level_algorithms: None,
            autotune: 0,
        }
    }
}

impl Config {
    /// Defaults overridden by `RCOLL_ALGO`, `RCOLL_TIMEOUT` and `RCOLL_SEGMENT_BYTES`.
    pub fn from_env() -> Result<Config> {
        Config::default().with_vars(|name| std::env::var(name).ok())
    }

    /// Applies variables looked up by `var` (the environment, or a map in tests).
    pub fn with_vars(mut self, var: impl Fn(&str) -> Option<String>) -> Result<Config> {
        if let Some(v) = var("RCOLL_ALGO") {
            self.algorithm = parse_algorithm(&v)?;
        }
        if let Some(v) = var("RCOLL_LEVEL_ALGO") {
            self.level_algorithms = match v.trim() {
                v if v.is_empty() || v.eq_ignore_ascii_case("auto") => None,
                v => Some(
                    v.parse()
                        .map_err(|e| Error::Config(format!("RCOLL_LEVEL_ALGO={v:?}: {e}")))?,
                ),
            };
        }
        if let Some(v) = var("RCOLL_TIMEOUT") {
            self.timeout = v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| *s > 0.0)
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .ok_or_else(|| {
                    Error::Config(format!(
                        "RCOLL_TIMEOUT={v:?} is not a positive number of seconds"
                    ))
                })?;
        }
        if let Some(v) = var("RCOLL_SEGMENT_BYTES") {
            self.segment_bytes = parse_bytes(&v).filter(|b| *b > 0).ok_or_else(|| {
                Error::Config(format!("RCOLL_SEGMENT_BYTES={v:?} is not a positive size"))
            })?;
            self.segment_bytes_set = true;
        }
        if let Some(v) = var("RCOLL_RING_ORDER") {
            self.ring_order = match v.trim().to_ascii_lowercase().as_str() {
                "topology" | "network" | "auto" => RingOrder::Topology,
                "rank" => RingOrder::Rank,
                _ => {
                    return Err(Error::Config(format!(
                        "RCOLL_RING_ORDER={v:?}: topology or rank"
                    )))
                }
            };
        }
        if let Some(v) = var("RCOLL_NET_FILE").filter(|v| !v.trim().is_empty()) {
            self.net_file = Some(v.trim().into());
        }
        if let Some(v) = var("RCOLL_AUTOTUNE") {
            self.autotune = parse_autotune(&v)?;
        }
        if let Some(v) = var("RCOLL_TUNING_FILE").filter(|v| !v.trim().is_empty()) {
            let tuning = crate::tuning::Tuning::load(std::path::Path::new(v.trim()))
                .map_err(|e| Error::Config(format!("RCOLL_TUNING_FILE: {e}")))?;
            self.tuning = Some(std::sync::Arc::new(tuning));
        }
        self.check()?;
        Ok(self)
    }

    /// `hosts` with the racks of [`Config::net_file`] and the ring order of
    /// [`Config::ring_order`].
    pub fn network(
        &self,
        hosts: &rcoll_transport::hosts::HostMap,
    ) -> Result<rcoll_transport::hosts::HostMap> {
        let mut map = hosts.clone();
        if let Some(path) = &self.net_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::Config(format!("RCOLL_NET_FILE {}: {e}", path.display())))?;
            let racks = parse_net_file(&text)
                .map_err(|e| Error::Config(format!("RCOLL_NET_FILE {} {e}", path.display())))?;
            map = map.with_racks(|key| {
                let short = key.split('/').next().unwrap_or(key);
                racks
                    .iter()
                    .find(|(h, _)| h == key || h == short)
                    .map(|(_, r)| r.clone())
            });
        }
        if self.ring_order == RingOrder::Rank {
            map = map.with_rank_order();
        }
        Ok(map)
    }

    /// The limits every setting must respect, whatever set it.
    pub fn check(&self) -> Result<()> {
        if self.segment_bytes == 0 || self.segment_bytes > MAX_SEGMENT_BYTES {
            return Err(Error::Config(format!(
                "a segment of {} bytes: the segment size (RCOLL_SEGMENT_BYTES, \
                 Builder::segment_bytes) must be 1 byte to {} MiB",
                self.segment_bytes,
                MAX_SEGMENT_BYTES >> 20
            )));
        }
        Ok(())
    }
}

/// The `<host> <rack>` lines of an `RCOLL_NET_FILE` (`#` starts a comment; blank lines
/// are skipped), in order; the error names the first line that is not one.
pub fn parse_net_file(text: &str) -> std::result::Result<Vec<(String, String)>, String> {
    let mut racks = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some(h), Some(r), None) => racks.push((h.to_string(), r.to_string())),
            _ => return Err(format!("line {}: {line:?} is not `<host> <rack>`", i + 1)),
        }
    }
    Ok(racks)
}

/// Settings a builder makes explicitly, applied over the environment.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Overrides {
    pub algorithm: Option<Option<Algorithm>>,
    pub timeout: Option<Duration>,
    pub segment_bytes: Option<usize>,
}

impl Overrides {
    /// Defaults, then the environment, then these settings; also turns on `RCOLL_DEBUG`
    /// logging, as every builder does before it connects anything.
    pub fn resolve(&self) -> Result<Config> {
        crate::logging::init_from_env();
        let mut config = Config::from_env()?;
        if let Some(a) = self.algorithm {
            config.algorithm = a;
        }
        if let Some(t) = self.timeout {
            config.timeout = t;
        }
        if let Some(b) = self.segment_bytes {
            config.segment_bytes = b;
            config.segment_bytes_set = true;
        }
        config.check()?;
        Ok(config)
    }
}

/// `auto` or an algorithm name.
pub fn parse_algorithm(v: &str) -> Result<Option<Algorithm>> {
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    v.parse::<Algorithm>().map(Some).map_err(Error::Config)
}

/// `off` (or empty, or 0), `on`, or a number of trials per candidate (at most
/// [`crate::autotune::MAX_TRIALS`]).
fn parse_autotune(v: &str) -> Result<u32> {
    use crate::autotune::{DEFAULT_TRIALS, MAX_TRIALS};
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "off" | "no" | "false" => Ok(0),
        "on" | "yes" | "true" => Ok(DEFAULT_TRIALS),
        n => n
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= MAX_TRIALS)
            .ok_or_else(|| {
                Error::Config(format!(
                    "RCOLL_AUTOTUNE={v:?}: off, on or a number of trials per candidate \
                     up to {MAX_TRIALS}"
                ))
            }),
    }
}

/// A byte count with an optional K, M or G suffix (powers of 1024).
pub fn parse_bytes(v: &str) -> Option<usize> {
    let v = v.trim();
    let (digits, shift) = match v.chars().last()?.to_ascii_uppercase() {
        'K' => (&v[..v.len() - 1], 10),
        'M' => (&v[..v.len() - 1], 20),
        'G' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    digits.trim().parse::<usize>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn environment_overrides_defaults() {
        let c = Config::default()
            .with_vars(vars(&[
                ("RCOLL_ALGO", "ring"),
                ("RCOLL_TIMEOUT", "2.5"),
                ("RCOLL_SEGMENT_BYTES", "64K"),
            ]))
            .unwrap();
        assert_eq!(c.algorithm, Some(Algorithm::Ring));
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert_eq!(c.segment_bytes, 65536);
        let c = Config::default()
            .with_vars(vars(&[("RCOLL_ALGO", "AUTO")]))
            .unwrap();
        assert_eq!(c.algorithm, None);
        assert_eq!(c.autotune, 0);
        let on = crate::autotune::DEFAULT_TRIALS;
        for (v, trials) in [("on", on), ("OFF", 0), ("", 0), ("5", 5), (" 0 ", 0)] {
            let owned = v.to_string();
            let c = Config::default()
                .with_vars(|n| (n == "RCOLL_AUTOTUNE").then(|| owned.clone()))
                .unwrap();
            assert_eq!(c.autotune, trials, "{v:?}");
        }
    }

    #[test]
    fn bad_values_are_config_errors() {
        for bad in [
            &[("RCOLL_ALGO", "fastest")][..],
            &[("RCOLL_TIMEOUT", "-1")],
            &[("RCOLL_TIMEOUT", "1e300")],
            &[("RCOLL_SEGMENT_BYTES", "0")],
            &[("RCOLL_AUTOTUNE", "101")],
            &[("RCOLL_AUTOTUNE", "sometimes")],
        ] {
            let owned: Vec<(String, String)> = bad
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let r = Config::default()
                .with_vars(|n| owned.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()));
            assert!(matches!(r, Err(Error::Config(_))), "{bad:?}");
        }
    }

    #[test]
    fn sizes_take_suffixes() {
        assert_eq!(parse_bytes("8"), Some(8));
        assert_eq!(parse_bytes("64M"), Some(64 << 20));
        assert_eq!(parse_bytes("1g"), Some(1 << 30));
        assert_eq!(parse_bytes("x"), None);
    }
}
