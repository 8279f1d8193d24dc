//! What a rank runs: the benchmark's parameters, as every rank gets them.

use std::path::PathBuf;

use rcoll::{Algorithm, Collective, DataType, ReduceOp};

use crate::sweep::Step;

/// Everything a rank needs to know to run the benchmark.
#[derive(Clone, Debug)]
pub struct BenchSpec {
    /// The collective.
    pub collective: Collective,
    /// Number of ranks.
    pub nranks: usize,
    /// Sizes in bytes, nccl-tests' convention (see [`crate::plan::layout_count`]).
    pub sizes: Vec<usize>,
    /// `-b`, for the header.
    pub minbytes: usize,
    /// `-e`, for the header.
    pub maxbytes: usize,
    /// How sizes grow, for the header.
    pub step: Step,
    /// Timed iterations per size and mode (at least one).
    pub iters: usize,
    /// Warmup iterations per size and mode.
    pub warmup: usize,
    /// Whether to check results.
    pub check: bool,
    /// The reduction.
    pub op: ReduceOp,
    /// Element type.
    pub dtype: DataType,
    /// Root of rooted collectives.
    pub root: usize,
    /// The forced algorithm, `None` for the cost model.
    pub algorithm: Option<Algorithm>,
    /// `--algo all`: every serving algorithm and auto at each size ([`crate::compare`]).
    pub compare: bool,
    /// The transport's name.
    pub transport: &'static str,
    /// What it runs on ([`rcoll::Communicator::transport_details`]).
    pub transport_details: String,
    /// `--device`: the network interfaces of process ranks, dealt out round-robin (empty:
    /// the interface that reaches rank 0); see [`BenchSpec::device_of`].
    pub devices: Vec<String>,
    /// Where to write the JSON records.
    pub json: Option<PathBuf>,
    /// Where to draw the busbw chart (PNG).
    pub plot: Option<PathBuf>,
}

impl BenchSpec {
    /// The interface rank `rank` accepts peer connections on: `--device`'s entry
    /// `rank % length`, or `None` for the default.
    pub fn device_of(&self, rank: usize) -> Option<&str> {
        match self.devices.len() {
            0 => None,
            n => self.devices.get(rank % n).map(String::as_str),
        }
    }
}

/// The bytes a size stands for once rounded down to whole elements (and whole blocks):
/// what nccl-tests prints and divides by the time.
pub(crate) fn size_bytes(
    collective: Collective,
    count: usize,
    elem: usize,
    nranks: usize,
) -> usize {
    match collective {
        Collective::AllGather
        | Collective::ReduceScatter
        | Collective::Gather
        | Collective::Scatter
        | Collective::AllToAll => count * elem * nranks,
        _ => count * elem,
    }
}
