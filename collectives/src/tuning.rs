//! Measured tuning (`RCOLL_TUNING_FILE`): cost-model rates fitted per transport, and the
//! algorithm measured fastest per collective, rank count and size, as
//! `rcoll-bench calibrate` writes them.
//!
//! ```json
//! { "version": 1,
//!   "models": { "tcp": { "alpha_us": 31.0, "bandwidth_gbps": 14.2, "reduce_gbytes_per_s": 3.1 } },
//!   "rules": [ { "transport": "tcp", "collective": "all_reduce", "nranks": 4,
//!                "bytes": 65536, "algorithm": "double_binary_tree" } ] }
//! ```
//!
//! `models` are keyed by transport name (`tcp`, `verbs`, `local`; `shm` for the rates
//! inside a host) and replace the built-in rates of that transport. A rule applies to calls
//! on its transport, collective and rank count; among them the rule whose `bytes`
//! (elements times element size, per rank's block for the blocked collectives) is nearest
//! the call's on a log scale decides. A rule's transport is the one every rank of a job
//! agrees on: on one host the communicator's transport (`shm`, `tcp`, `verbs`, `local`),
//! across hosts the network's (`tcp` or `verbs`: a rank alone on its host has no shared
//! memory while its peers do). Auto falls back to the cost model where no rule applies;
//! `RCOLL_ALGO` and per-call forcing still win over both.

use std::collections::BTreeMap;
use std::path::Path;

use crate::algorithm::Algorithm;
use crate::schedule::cost::CostModel;
use crate::schedule::Collective;

/// The format version this build reads and writes.
pub const VERSION: u32 = 1;

/// A tuning file as written.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TuningFile {
    /// [`VERSION`].
    pub version: u32,
    /// Rates per transport name.
    #[serde(default)]
    pub models: BTreeMap<String, CostModel>,
    /// Measured choices.
    #[serde(default)]
    pub rules: Vec<RuleEntry>,
}

/// One measured choice as written.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RuleEntry {
    /// The communicator's transport name.
    pub transport: String,
    /// The collective's name.
    pub collective: String,
    /// Ranks.
    pub nranks: usize,
    /// Bytes of the call measured (count times element size).
    pub bytes: usize,
    /// The fastest algorithm's name.
    pub algorithm: String,
}

/// A checked tuning file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tuning {
    models: BTreeMap<String, CostModel>,
    rules: Vec<Rule>,
}

#[derive(Clone, Debug, PartialEq)]
struct Rule {
    transport: String,
    collective: Collective,
    nranks: usize,
    bytes: usize,
    algorithm: Algorithm,
}

impl Tuning {
    /// Reads and checks `path`; the error names the file and what is wrong.
    pub fn load(path: &Path) -> Result<Tuning, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the tuning file {}: {e}", path.display()))?;
        Tuning::parse(&text).map_err(|e| format!("the tuning file {}{e}", path.display()))
    }

    /// Reads and checks a tuning file's text; the error says what is wrong (after the
    /// file's name, in [`load`](Self::load)'s).
    pub fn parse(text: &str) -> Result<Tuning, String> {
        let file: TuningFile =
            serde_json::from_str(text).map_err(|e| format!(" is not valid: {e}"))?;
        Tuning::from_file(file).map_err(|e| format!(": {e}"))
    }

    /// Checks a parsed file: its version, positive finite rates, known names, and
    /// algorithms that serve their collectives.
    pub fn from_file(file: TuningFile) -> Result<Tuning, String> {
        if file.version != VERSION {
            return Err(format!(
                "version {} (this build reads version {VERSION})",
                file.version
            ));
        }
        for (name, m) in &file.models {
            let rates = [m.bandwidth_gbps, m.reduce_gbytes_per_s];
            if !(m.alpha_us.is_finite() && m.alpha_us >= 0.0)
                || rates.iter().any(|r| !(r.is_finite() && *r > 0.0))
            {
                return Err(format!(
                    "model {name:?}: alpha_us must be finite and >= 0, the rates finite and > 0"
                ));
            }
        }
        let rules = file
            .rules
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let collective: Collective =
                    r.collective.parse().map_err(|e| format!("rule {i}: {e}"))?;
                let algorithm: Algorithm =
                    r.algorithm.parse().map_err(|e| format!("rule {i}: {e}"))?;
                if !algorithm.serves(collective) {
                    return Err(format!(
                        "rule {i}: {algorithm} does not implement {collective}"
                    ));
                }
                Ok(Rule {
                    transport: r.transport,
                    collective,
                    nranks: r.nranks,
                    bytes: r.bytes,
                    algorithm,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Tuning {
            models: file.models,
            rules,
        })
    }

    /// The rates measured for `transport`, if any.
    pub fn model(&self, transport: &str) -> Option<CostModel> {
        self.models.get(transport).copied()
    }

    /// The measured choice for a call of `bytes` on `transport`, if a rule covers it.
    pub fn rule(
        &self,
        transport: &str,
        collective: Collective,
        nranks: usize,
        bytes: usize,
    ) -> Option<Algorithm> {
        let at = (bytes.max(1) as f64).log2();
        self.rules
            .iter()
            .filter(|r| {
                r.transport == transport && r.collective == collective && r.nranks == nranks
            })
            .map(|r| (((r.bytes.max(1) as f64).log2() - at).abs(), r.algorithm))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, a)| a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(rules: &[(&str, &str, usize, usize, &str)]) -> TuningFile {
        TuningFile {
            version: VERSION,
            models: BTreeMap::from([(
                "tcp".to_owned(),
                CostModel {
                    alpha_us: 30.0,
                    bandwidth_gbps: 12.0,
                    reduce_gbytes_per_s: 3.0,
                    overhead_us: 0.0,
                    switch_us: 0.0,
                    cache_speedup: 0.0,
                    polls: true,
                },
            )]),
            rules: rules
                .iter()
                .map(|&(t, c, n, b, a)| RuleEntry {
                    transport: t.to_owned(),
                    collective: c.to_owned(),
                    nranks: n,
                    bytes: b,
                    algorithm: a.to_owned(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_nearest_measured_size_on_a_log_scale_decides() {
        let t = Tuning::from_file(file(&[
            ("tcp", "all_reduce", 4, 8, "double_binary_tree"),
            ("tcp", "all_reduce", 4, 1 << 20, "ring"),
            ("tcp", "all_reduce", 2, 8, "mesh"),
        ]))
        .expect("valid");
        let ar = Collective::AllReduce;
        assert_eq!(t.rule("tcp", ar, 4, 0), Some(Algorithm::DoubleBinaryTree));
        assert_eq!(
            t.rule("tcp", ar, 4, 1000),
            Some(Algorithm::DoubleBinaryTree)
        );
        assert_eq!(t.rule("tcp", ar, 4, 8 << 10), Some(Algorithm::Ring));
        assert_eq!(t.rule("tcp", ar, 4, 1 << 30), Some(Algorithm::Ring));
        assert_eq!(t.rule("tcp", ar, 2, 1 << 30), Some(Algorithm::Mesh));
        assert_eq!(t.rule("tcp", ar, 3, 8), None);
        assert_eq!(t.rule("shm", ar, 4, 8), None);
        assert_eq!(t.rule("tcp", Collective::Broadcast, 4, 8), None);
        assert_eq!(t.model("tcp").map(|m| m.alpha_us), Some(30.0));
        assert_eq!(t.model("verbs"), None);
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let e = Tuning::from_file(file(&[("tcp", "all_gather", 4, 8, "double_binary_tree")]))
            .expect_err("dbt does not serve all_gather");
        assert!(e.contains("rule 0"), "{e}");
        let e = Tuning::from_file(file(&[("tcp", "all_reduce", 4, 8, "fastest")]))
            .expect_err("unknown algorithm");
        assert!(e.contains("rule 0"), "{e}");
        let mut f = file(&[]);
        f.version = 2;
        assert!(Tuning::from_file(f)
            .expect_err("version")
            .contains("version 2"));
        let mut f = file(&[]);
        f.models.get_mut("tcp").expect("tcp").bandwidth_gbps = 0.0;
        assert!(Tuning::from_file(f).expect_err("rate").contains("tcp"));
        let dir = std::env::temp_dir().join(format!("rcoll-tuning-{}", std::process::id()));
        std::fs::write(&dir, "{ not json").expect("write");
        let e = Tuning::load(&dir).expect_err("not json");
        let _ = std::fs::remove_file(&dir);
        assert!(e.contains("not valid"), "{e}");
    }

    #[test]
    fn a_file_round_trips() {
        let f = file(&[("shm", "broadcast", 3, 4096, "ring")]);
        let text = serde_json::to_string(&f).expect("serialise");
        let back: TuningFile = serde_json::from_str(&text).expect("parse");
        assert_eq!(back, f);
    }
}
