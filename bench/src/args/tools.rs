//! Flags of the tool subcommands: `topo`, `simulate`, `calibrate`, `doctor` and `plot`.

use std::path::PathBuf;

use clap::Args;
use rcoll::{Collective, DataType};

use super::{bytes, collective, data_type, ModelArgs};

/// Flags of `rcoll-bench topo`.
#[derive(Debug, Args)]
#[command(after_help = "\
The topology comes from RCOLL_TOPO_FILE (an hwloc XML file) or --input, else from this machine \
(Linux sysfs). RCOLL_TOPO_DUMP_FILE=PATH also writes the report as JSON there (as ranks do at \
setup).")]
pub struct TopoArgs {
    /// Ranks on this host [default: the larger of the NUMA node and RDMA device counts].
    #[arg(long)]
    pub ranks_per_host: Option<usize>,
    /// auto, none, numa or core [default: RCOLL_BIND, else auto].
    #[arg(long)]
    pub bind: Option<String>,
    /// Read this hwloc XML file instead of the machine.
    #[arg(long)]
    pub input: Option<std::path::PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `rcoll-bench simulate`.
#[derive(Debug, Args)]
#[command(after_help = "\
The model is plan's alpha-beta-gamma model with two levels: a round costs the slower of its \
network part (alpha + bytes through the busiest host link / bandwidth) and its part inside \
hosts (the same at the local rates); reductions cost bytes / reduce rate. Schedules are the \
ones ranks run, generated one rank at a time; when a job has too many primitives to visit \
(--budget), a spread sample of hosts is priced and the row is marked *.")]
pub struct SimulateArgs {
    /// The collective.
    #[arg(value_parser = collective, default_value = "all_reduce")]
    pub collective: Collective,
    /// Fewest ranks.
    #[arg(long, default_value_t = 2)]
    pub min_ranks: usize,
    /// Most ranks: the counts are --min-ranks, the powers of two above it, and this.
    #[arg(long, default_value_t = 65536)]
    pub max_ranks: usize,
    /// Ranks per host.
    #[arg(long, default_value_t = 8)]
    pub ranks_per_host: usize,
    /// The latency figure's size in bytes (K, M, G suffixes).
    #[arg(long, default_value = "8", value_parser = bytes)]
    pub small: usize,
    /// The bandwidth figure's size in bytes.
    #[arg(long, default_value = "64M", value_parser = bytes)]
    pub large: usize,
    /// Element type.
    #[arg(long, default_value = "f32", value_parser = data_type)]
    pub dtype: DataType,
    /// Comma-separated algorithms [default: every one that serves the collective].
    #[arg(long)]
    pub algo: Option<String>,
    /// The machine model's rates.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Primitives visited per pricing before hosts are sampled [default: 10000000].
    #[arg(long)]
    pub budget: Option<usize>,
    /// Also draw the table as a PNG.
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// Also write the table as JSON.
    #[arg(short = 'J', long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Flags of `rcoll-bench calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Where to write the tuning file.
    #[arg(short = 'o', long, value_name = "FILE.json")]
    pub output: PathBuf,
    /// Comma-separated rank counts.
    #[arg(long, default_value = "2,3,4")]
    pub ranks: String,
    /// The transport, as the benchmark's --transport.
    #[arg(long, default_value = "tcp")]
    pub transport: String,
    /// Comma-separated collectives.
    #[arg(
        long,
        default_value = "all_reduce,broadcast,reduce,all_gather,reduce_scatter"
    )]
    pub collectives: String,
    /// Smallest size in bytes.
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = bytes)]
    pub minbytes: usize,
    /// Largest size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = bytes)]
    pub maxbytes: usize,
    /// Size factor between measurements. The default, 2, measures every size bucket auto
    /// chooses for (it rounds sizes up to a power of two); with 4, half the buckets follow
    /// the rule of a neighbouring size.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub stepfactor: usize,
    /// Timed iterations per size and algorithm.
    #[arg(short = 'n', long = "iters", default_value_t = 10)]
    pub iters: usize,
    /// Warmup iterations per size and algorithm.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 2)]
    pub warmup_iters: usize,
    /// Times every measurement is repeated, each pass after the whole of the one before
    /// (minutes apart on a full run). A size's rule is the algorithm whose worst time over
    /// the passes, each relative to that pass's fastest, is least: one close to the best in
    /// every pass rather than the winner of one, where the machine's speed drifts.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub passes: u32,
    /// Keep what the file already holds for other transports and rank counts.
    #[arg(long)]
    pub merge: bool,
    /// Write only the fitted rates, no per-size rules (auto then chooses by the model).
    #[arg(long)]
    pub no_rules: bool,
}

/// Flags of `rcoll-bench doctor`.
#[derive(Debug, Args)]
#[command(after_help = "\
Checks, in order: RDMA support in the kernel and user space; every device and port (state, \
link layer, MTU, largest message, GID table, and the GID rcoll would choose and why); the \
locked-memory limit; and, when there are two ACTIVE ports (or with --connect), a 2-rank \
all_reduce over verbs between them, run by two processes of this binary. Without flags the \
GID choice is shown for each port's own interface address, as a rank bound to that \
interface would make it. RCOLL_IB_HCA and RCOLL_IB_GID_INDEX apply as they do to ranks; \
--hca and --gid-index override them.

Exit status: 0 when verbs can be used, 1 when something needed is missing (the last line \
says what).")]
pub struct DoctorArgs {
    /// Only this device (`NAME` or `NAME:PORT`), as RCOLL_IB_HCA.
    #[arg(long, value_name = "NAME[:PORT]")]
    pub hca: Option<String>,
    /// Force this GID index, as RCOLL_IB_GID_INDEX.
    #[arg(long, value_name = "N")]
    pub gid_index: Option<u32>,
    /// Choose GIDs for the address of this network interface (as a rank started with
    /// `--device IFNAME` would) instead of each port's own.
    #[arg(long, value_name = "IFNAME")]
    pub device: Option<String>,
    /// Run the connectivity check even with fewer than two ACTIVE ports (both ranks on the
    /// same port when there is only one).
    #[arg(long)]
    pub connect: bool,
    /// Seconds the connectivity check may take.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub timeout: u64,
}

/// Flags of `rcoll-bench plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// `-J` files of rcoll-bench runs; each becomes one line.
    #[arg(required = true, value_name = "FILE.json")]
    pub files: Vec<PathBuf>,
    /// The PNG to write.
    #[arg(short = 'o', long = "output", value_name = "FILE.png")]
    pub output: PathBuf,
    /// Plot the in-place busbw instead of the out-of-place one.
    #[arg(long)]
    pub in_place: bool,
    /// Legend entry of each file, in order (default: the file's name without extension).
    #[arg(long = "label", value_name = "LABEL")]
    pub labels: Vec<String>,
}
