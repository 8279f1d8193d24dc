//! The error type of `rcoll-bench`: what failed, in words a user can act on.

use std::path::PathBuf;

/// Everything that makes `rcoll-bench` exit non-zero.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The command line asks for something that cannot be run.
    #[error("{0}")]
    Usage(String),
    /// rcoll refused or failed: building a group, or a collective on some rank.
    #[error("rcoll: {0}")]
    Rcoll(#[from] rcoll::Error),
    /// One or more ranks failed; one line per rank that did.
    #[error("{} rank(s) failed:{}", .0.len(), .0.iter().map(|l| format!("\n  {l}")).collect::<String>())]
    Ranks(Vec<String>),
    /// Writing a report file failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Reading an input file failed.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file given to `rcoll-bench plot` is not a `-J` report.
    #[error("{} is not an rcoll-bench -J file: {source}", path.display())]
    NotAReport {
        /// The file.
        path: PathBuf,
        /// Where parsing stopped.
        #[source]
        source: serde_json::Error,
    },
    /// No font to draw a chart's text with (the message names the package to install).
    #[error("{0}")]
    Font(String),
    /// Drawing or writing a chart failed.
    #[error("cannot draw {}: {reason}", path.display())]
    Plot {
        /// The PNG file.
        path: PathBuf,
        /// What plotters reported.
        reason: String,
    },
    /// Serialising a report failed.
    #[error("cannot serialise the report: {0}")]
    Json(#[from] serde_json::Error),
    /// `--transport verbs` on a host where RDMA cannot work (found before any rank starts).
    #[error("--transport verbs: {0}\n(`rcoll-bench doctor` explains what is missing)")]
    NoVerbs(String),
    /// Starting or watching the rank processes failed.
    #[error("cannot {what}: {source}")]
    Spawn {
        /// What this process was doing.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// Rank processes failed (each printed its own error above); one line per rank that
    /// did, and the exit status to pass on.
    #[error("{} rank process(es) failed:{}", .failures.len(), .failures.iter().map(|l| format!("\n  {l}")).collect::<String>())]
    Processes {
        /// The exit status of the first rank that failed by itself.
        code: u8,
        /// One line per failed rank.
        failures: Vec<String>,
    },
    /// A rank's thread panicked (its message was printed when it did).
    #[error("the benchmark thread panicked (see above)")]
    Panicked,
    /// The check found elements that differ from the definition of the collective.
    #[error("{0} wrong element(s) (see #wrong)")]
    Wrong(u64),
}

/// Shorthand for a usage error.
pub fn usage(what: impl Into<String>) -> BenchError {
    BenchError::Usage(what.into())
}
