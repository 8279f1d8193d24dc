//! The command line: nccl-tests' flags for the benchmark and the `plan` subcommand; the
//! tool subcommands' flags are in [`tools`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use rcoll::schedule::cost::CostModel;
use rcoll::{Algorithm, Collective, DataType, ReduceOp};

use crate::error::{usage, BenchError};
use crate::plan::PlanSpec;
use crate::spec::BenchSpec;
use crate::sweep::{sizes, Step};

mod tools;
pub use tools::{CalibrateArgs, DoctorArgs, PlotArgs, SimulateArgs, TopoArgs};

/// `rcoll-bench <collective> [flags]` measures; `rcoll-bench plan <collective>` prices.
#[derive(Debug, Parser)]
#[command(
    name = "rcoll-bench",
    version,
    about = "Bus-bandwidth benchmark (nccl-tests style) and schedule planner for rcoll",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "\
Sizes follow nccl-tests: the vector for all_reduce, reduce, broadcast and sendrecv; the \
whole buffer for all_gather and gather (output), reduce_scatter and scatter (input) and \
all_to_all, each rank's block being size / (type size) / ranks elements.

time is the mean per-iteration time of the slowest rank; algbw = size / time; busbw = \
algbw times nccl-tests' bus factor. With -c 1 an extra untimed iteration runs from freshly \
written inputs and its output is checked; #wrong counts differing elements over all ranks \
and any makes the exit status non-zero.

Run `rcoll-bench plan --help` for the planner, `rcoll-bench doctor` to check RDMA."
)]
pub struct Cli {
    /// The planner; without it, the benchmark runs.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The benchmark's flags.
    #[command(flatten)]
    pub bench: BenchArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Price and symbolically verify every algorithm's schedule for one collective
    /// (no data moves).
    Plan(PlanArgs),
    /// Draw the bus bandwidth of one or more `-J` files as a PNG, one line per file.
    Plot(PlotArgs),
    /// Check whether this host can run rcoll over RDMA verbs, and explain what is missing
    /// (exit status 0: ready, 1: not).
    Doctor(DoctorArgs),
    /// What this host has — NUMA nodes, cores, RDMA devices and interfaces with their NUMA
    /// node — and the NUMA node, CPUs and device each local rank would get.
    Topo(TopoArgs),
    /// Price every algorithm's real schedules from 2 to 65,536 ranks on a two-level
    /// network (hosts x ranks per host): a table of small-message time and large-message
    /// bus bandwidth per rank count, and a PNG with --plot.
    Simulate(SimulateArgs),
    /// Measure this machine: `--algo all` for each rank count and collective, then write
    /// a tuning file (the fastest algorithm per size, and alpha/beta/gamma fitted to every
    /// time) that RCOLL_TUNING_FILE loads.
    Calibrate(CalibrateArgs),
    /// One rank of `doctor`'s connectivity check (started by `doctor` itself).
    #[command(hide = true)]
    DoctorRank,
}

/// Flags of the benchmark, named as in nccl-tests.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// all_reduce, all_gather, reduce_scatter, broadcast, reduce, gather, scatter,
    /// all_to_all or sendrecv.
    #[arg(value_parser = collective, required = true)]
    pub collective: Option<Collective>,
    /// Smallest size in bytes (K, M, G suffixes: powers of 1024).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = bytes)]
    pub minbytes: usize,
    /// Largest size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = bytes)]
    pub maxbytes: usize,
    /// Multiply the size by this factor between runs. A factor above 1 wins over -i; with
    /// neither flag the factor is 2; with -i alone (or -f 0 or 1) sizes grow by -i bytes.
    #[arg(short = 'f', long = "stepfactor")]
    pub stepfactor: Option<usize>,
    /// Add this many bytes between runs when no factor above 1 is given (default 1M).
    #[arg(short = 'i', long = "stepbytes", value_parser = bytes)]
    pub stepbytes: Option<usize>,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Untimed warmup iterations per size.
    #[arg(
        short = 'w',
        long = "warmup_iters",
        alias = "warmup-iters",
        default_value_t = 5
    )]
    pub warmup_iters: usize,
    /// Check results (1) or not (0).
    #[arg(short = 'c', long = "check", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,
    /// Reduction: sum, prod, min, max, avg (band, bor, bxor on integer types).
    #[arg(short = 'o', long = "op", default_value = "sum", value_parser = reduce_op)]
    pub op: ReduceOp,
    /// Element type: i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64 (or nccl-tests' names:
    /// int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double).
    #[arg(short = 'd', long = "datatype", default_value = "f32", value_parser = data_type)]
    pub datatype: DataType,
    /// Root of reduce, broadcast, gather and scatter.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// Also write the results to FILE as a JSON array, one record per size.
    #[arg(short = 'J', long = "json", value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also draw busbw against size (out of place and in place) as a PNG in FILE.png.
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
    /// Number of ranks [default: 2]. With processes (the default when this flag is given:
    /// see --transport), rcoll-bench starts this many of itself on this host. Under a launcher
    /// (mpirun, srun, torchrun, RCOLL_RANK) leave it out: the launcher's ranks are used.
    #[arg(long)]
    pub ranks: Option<usize>,
    /// `auto` (the cost model chooses per size), an algorithm name (mesh, single_root,
    /// tree, binomial_tree, naive_ring, ring, double_binary_tree, halving_doubling, recursive_doubling,
    /// hierarchical), or `all`: every algorithm that serves the collective and auto,
    /// interleaved at each size (out of place), with auto's regret (its time over the best).
    #[arg(long, default_value = "auto")]
    pub algo: String,
    /// How ranks connect: `tcp` (one process per rank), `verbs` (one process per rank over
    /// RDMA; fails when a rank has no usable device: see `rcoll-bench doctor`), `shm`
    /// (one process per rank, shared memory between the ranks of a host, tcp across
    /// hosts), `local` (ranks as threads of this process) or `auto` (rcoll's choice for
    /// processes: shared memory inside each host; across hosts verbs where every rank can
    /// use it, else tcp). Default: processes with rcoll's choice (RCOLL_TRANSPORT, else
    /// auto) when --ranks is given or under a launcher, local otherwise.
    #[arg(long, value_parser = transport)]
    pub transport: Option<TransportFlag>,
    /// The network interface ranks accept peer connections on (as RCOLL_SOCKET_IFNAME),
    /// such as `eth0`; with verbs the RDMA device and GID follow its address. A
    /// comma-separated list is dealt out round-robin: rank r gets entry r % length, so
    /// `veth0,veth1` puts even ranks on veth0 and odd ranks on veth1. Default: the
    /// interface that reaches rank 0.
    #[arg(long, value_name = "NAME[,NAME...]")]
    pub device: Option<String>,
    /// With processes: stop every rank and fail when rank 0 prints no new row for this
    /// many seconds (0: wait forever).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub timeout: u64,
}

/// `--transport`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportFlag {
    /// Ranks are threads of this process.
    Local,
    /// One process per rank over TCP.
    Tcp,
    /// One process per rank over RDMA verbs.
    Verbs,
    /// One process per rank, shared memory inside hosts.
    Shm,
    /// One process per rank, rcoll chooses the transport.
    Auto,
}

/// How to launch, as the command line asks (see [`crate::launch::mode`]).
#[derive(Clone, Debug)]
pub struct LaunchArgs {
    /// `--ranks`, if given.
    pub ranks: Option<usize>,
    /// `--transport`, if given.
    pub transport: Option<TransportFlag>,
    /// `--timeout` (`None`: wait forever).
    pub stall_timeout: Option<Duration>,
}

/// Flags of `rcoll-bench plan`.
#[derive(Debug, Args)]
#[command(after_help = "\
Sizes: --bytes is the whole buffer, as in the benchmark. For all_reduce, reduce and \
broadcast each rank's vector has D / (dtype size) elements. For all_gather, \
reduce_scatter, gather, scatter and all_to_all rcoll counts per-rank blocks, so each \
rank's block has D / (dtype size) / P elements and the full buffer is D (rounded down \
to a multiple of P elements).

verified: the symbolic verifier's verdict; `-` when not run (more than 64 ranks, or a \
buffer too large to model in memory).")]
pub struct PlanArgs {
    /// all_reduce, reduce, broadcast, all_gather, reduce_scatter, gather, scatter,
    /// all_to_all or barrier.
    #[arg(value_parser = collective)]
    pub collective: Collective,
    /// Number of ranks P.
    #[arg(long)]
    pub ranks: usize,
    /// Size D in bytes (K, M, G suffixes: powers of 1024); see below.
    #[arg(long, value_parser = bytes)]
    pub bytes: usize,
    /// Element type.
    #[arg(long, default_value = "f32", value_parser = data_type)]
    pub dtype: DataType,
    /// Root of rooted collectives.
    #[arg(long, default_value_t = 0)]
    pub root: usize,
    /// Plan the in-place variant.
    #[arg(long)]
    pub in_place: bool,
    /// Spread the ranks over this many hosts, in blocks (the first hosts take one more
    /// when they do not divide evenly): pairs inside a host are priced at the local
    /// rates, each host's traffic to the others shares one link, the hierarchical
    /// algorithm gets two levels, and the table counts the messages that cross hosts.
    #[arg(long)]
    pub hosts: Option<usize>,
    /// With --hosts: place the ranks cyclically (rank r on host r % hosts), as many
    /// launchers do, instead of in blocks.
    #[arg(long)]
    pub cyclic: bool,
    /// With --hosts: group the hosts into this many racks (in blocks of hosts), a level of
    /// the network above them.
    #[arg(long)]
    pub racks: Option<usize>,
    /// Order of the ranks on rings: `topology` (rack by rack, host by host: each level is
    /// crossed the fewest times) or `rank` (RCOLL_RING_ORDER).
    #[arg(long, default_value = "topology", value_parser = ["topology", "rank"])]
    pub ring_order: String,
    /// The machine model's rates.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The rates of the alpha-beta-gamma model, across hosts and inside one (`plan`,
/// `simulate`).
#[derive(Debug, Default, Args)]
pub struct ModelArgs {
    /// Latency per round in microseconds (across hosts, with hosts) [default: 2].
    #[arg(long, allow_negative_numbers = true)]
    pub alpha_us: Option<f64>,
    /// Link bandwidth in Gbit/s (each host's link, with hosts) [default: 100].
    #[arg(long, allow_negative_numbers = true)]
    pub bandwidth_gbps: Option<f64>,
    /// Reduction throughput in GB/s [default: 10].
    #[arg(long, allow_negative_numbers = true)]
    pub reduce_gbps: Option<f64>,
    /// Microseconds per message a rank sends or receives (across hosts, with hosts)
    /// [default: 0.25].
    #[arg(long, allow_negative_numbers = true)]
    pub overhead_us: Option<f64>,
    /// Latency per round inside a host in microseconds [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    pub local_alpha_us: Option<f64>,
    /// Bandwidth between two ranks of a host in Gbit/s [default: 100; 4 times that for a
    /// vector of at most 1 MiB, which stays in cache].
    #[arg(long, allow_negative_numbers = true)]
    pub local_bandwidth_gbps: Option<f64>,
    /// Microseconds per message a rank sends or receives inside a host [default: 0.1].
    #[arg(long, allow_negative_numbers = true)]
    pub local_overhead_us: Option<f64>,
}

impl ModelArgs {
    /// The rates across hosts and inside one: the library's defaults where a flag is
    /// absent, each checked finite and positive (latencies may be zero).
    pub fn resolve(&self) -> Result<(CostModel, CostModel), BenchError> {
        let defaults = CostModel::default();
        let model = CostModel {
            alpha_us: positive("--alpha-us", self.alpha_us, defaults.alpha_us, true)?,
            bandwidth_gbps: positive(
                "--bandwidth-gbps",
                self.bandwidth_gbps,
                defaults.bandwidth_gbps,
                false,
            )?,
            reduce_gbytes_per_s: positive(
                "--reduce-gbps",
                self.reduce_gbps,
                defaults.reduce_gbytes_per_s,
                false,
            )?,
            overhead_us: positive(
                "--overhead-us",
                self.overhead_us,
                defaults.overhead_us,
                true,
            )?,
            switch_us: defaults.switch_us,
            cache_speedup: defaults.cache_speedup,
            polls: defaults.polls,
        };
        let local = CostModel::shared_memory();
        let local_model = CostModel {
            alpha_us: positive(
                "--local-alpha-us",
                self.local_alpha_us,
                local.alpha_us,
                true,
            )?,
            bandwidth_gbps: positive(
                "--local-bandwidth-gbps",
                self.local_bandwidth_gbps,
                local.bandwidth_gbps,
                false,
            )?,
            reduce_gbytes_per_s: model.reduce_gbytes_per_s,
            overhead_us: positive(
                "--local-overhead-us",
                self.local_overhead_us,
                local.overhead_us,
                true,
            )?,
            switch_us: local.switch_us,
            cache_speedup: local.cache_speedup,
            polls: local.polls,
        };
        Ok((model, local_model))
    }
}

impl BenchArgs {
    /// Checks the flags against each other and resolves names. The checks that depend on
    /// the number of ranks wait for [`BenchSpec::with_ranks`], since under a launcher that
    /// number comes from the environment.
    pub fn into_spec(self) -> Result<(LaunchArgs, BenchSpec), BenchError> {
        let collective = self
            .collective
            .ok_or_else(|| usage("name a collective, e.g. `rcoll-bench all_reduce`"))?;
        if matches!(collective, Collective::Barrier) {
            return Err(usage(
                "barrier moves no data, so it has no bus bandwidth to measure",
            ));
        }
        if self.ranks == Some(0) {
            return Err(usage("--ranks must be at least 1"));
        }
        if self.iters == 0 {
            return Err(usage("-n/--iters must be at least 1"));
        }
        if collective.reduces() && !self.datatype.supports(self.op) {
            return Err(usage(format!(
                "-o {} is not defined on -d {}",
                self.op, self.datatype
            )));
        }
        let compare = self.algo.eq_ignore_ascii_case("all");
        let algorithm = if compare {
            None
        } else {
            rcoll::config::parse_algorithm(&self.algo).map_err(|e| usage(format!("--algo: {e}")))?
        };
        if compare && collective == Collective::SendRecv {
            return Err(usage(
                "--algo all: sendrecv is point-to-point, no algorithm to compare",
            ));
        }
        if let Some(a) = algorithm.filter(|a| !a.serves(collective)) {
            return Err(usage(format!(
                "--algo {a} does not implement {collective}; it serves: {}",
                serving(collective)
            )));
        }
        let step = Step::from_flags(self.stepfactor, self.stepbytes);
        let launch = LaunchArgs {
            ranks: self.ranks,
            transport: self.transport,
            stall_timeout: (self.timeout > 0).then(|| Duration::from_secs(self.timeout)),
        };
        let spec = BenchSpec {
            collective,
            nranks: self.ranks.unwrap_or(DEFAULT_RANKS),
            sizes: sizes(self.minbytes, self.maxbytes, step)?,
            minbytes: self.minbytes,
            maxbytes: self.maxbytes,
            step,
            iters: self.iters,
            warmup: self.warmup_iters,
            check: self.check == 1,
            op: self.op,
            dtype: self.datatype,
            root: self.root,
            algorithm,
            compare,
            transport: "local",
            transport_details: String::new(),
            devices: device_list(self.device.as_deref())?,
            json: self.json,
            plot: self.plot,
        };
        Ok((launch, spec))
    }
}

/// Ranks when neither `--ranks` nor a launcher says.
pub const DEFAULT_RANKS: usize = 2;

impl BenchSpec {
    /// This spec on `nranks` ranks, if the flags make sense there.
    pub fn with_ranks(mut self, nranks: usize) -> Result<BenchSpec, BenchError> {
        if nranks == 0 {
            return Err(usage("a group needs at least 1 rank"));
        }
        if nranks > rcoll::transport::MAX_RANKS {
            return Err(usage(format!(
                "{nranks} ranks: rcoll takes at most {} ranks",
                rcoll::transport::MAX_RANKS
            )));
        }
        if self.collective == Collective::SendRecv && nranks < 2 {
            return Err(usage("sendrecv needs 2 ranks or more"));
        }
        if self.collective.is_rooted() && self.root >= nranks {
            return Err(usage(format!(
                "--root {} is not a rank of a {nranks}-rank group",
                self.root
            )));
        }
        self.nranks = nranks;
        Ok(self)
    }
}

impl PlanArgs {
    /// Checks the flags and fills in the default cost model.
    pub fn into_spec(self) -> Result<PlanSpec, BenchError> {
        if self.collective == Collective::SendRecv {
            return Err(usage(
                "sendrecv is point-to-point: no algorithm schedules it",
            ));
        }
        if self.ranks == 0 {
            return Err(usage("--ranks must be at least 1"));
        }
        if self.collective.is_rooted() && self.root >= self.ranks {
            return Err(usage(format!(
                "--root {} is not a rank of a {}-rank group",
                self.root, self.ranks
            )));
        }
        let (model, local_model) = self.model.resolve()?;
        let hosts = match self.hosts {
            None => None,
            Some(h) if h == 0 || h > self.ranks => {
                return Err(usage(format!(
                    "--hosts {h}: 1 to {} hosts for {} ranks",
                    self.ranks, self.ranks
                )))
            }
            Some(h) => {
                use rcoll::transport::hosts::HostMap;
                let map = if self.cyclic {
                    HostMap::cyclic(self.ranks, h)
                } else {
                    let sizes: Vec<usize> = (0..h)
                        .map(|i| self.ranks / h + usize::from(i < self.ranks % h))
                        .collect();
                    HostMap::blocks(&sizes)
                };
                let map = match self.racks {
                    None => map,
                    Some(r) if r == 0 || r > h => {
                        return Err(usage(format!("--racks {r}: 1 to {h} racks for {h} hosts")))
                    }
                    Some(r) => map.with_racks(|key| {
                        let host: usize = key.trim_start_matches("host").parse().ok()?;
                        // Hosts in blocks: rack i holds hosts [i*h/r, (i+1)*h/r).
                        Some(format!("rack{}", host * r / h))
                    }),
                };
                Some(if self.ring_order == "rank" {
                    map.with_rank_order()
                } else {
                    map
                })
            }
        };
        if self.hosts.is_none() && (self.cyclic || self.racks.is_some()) {
            return Err(usage("--cyclic and --racks need --hosts"));
        }
        Ok(PlanSpec {
            collective: self.collective,
            nranks: self.ranks,
            bytes: self.bytes,
            dtype: self.dtype,
            root: self.root,
            in_place: self.in_place,
            model,
            hosts,
            local_model,
        })
    }
}

/// `value`, or `default`, if it is a finite number above zero (or zero when allowed).
fn positive(
    flag: &str,
    value: Option<f64>,
    default: f64,
    zero_ok: bool,
) -> Result<f64, BenchError> {
    let v = value.unwrap_or(default);
    if v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0)) {
        Ok(v)
    } else {
        Err(usage(format!(
            "{flag} must be a finite positive number, not {v}"
        )))
    }
}

/// `--transport`, with rcoll's names for verbs (`RCOLL_TRANSPORT`).
fn transport(s: &str) -> Result<TransportFlag, String> {
    match s.to_ascii_lowercase().as_str() {
        "local" => Ok(TransportFlag::Local),
        "tcp" => Ok(TransportFlag::Tcp),
        "verbs" | "ib" | "rdma" => Ok(TransportFlag::Verbs),
        "shm" | "sm" => Ok(TransportFlag::Shm),
        "auto" => Ok(TransportFlag::Auto),
        other => Err(format!(
            "unknown transport {other:?} (expected tcp, verbs, shm, local or auto)"
        )),
    }
}

/// `--device a,b,c`: the interface names in order (empty without the flag).
fn device_list(flag: Option<&str>) -> Result<Vec<String>, BenchError> {
    let Some(flag) = flag else {
        return Ok(Vec::new());
    };
    let names: Vec<String> = flag.split(',').map(|n| n.trim().to_owned()).collect();
    if names.iter().any(String::is_empty) {
        return Err(usage(format!(
            "--device {flag:?}: name an interface, or several separated by commas \
             (e.g. veth0,veth1)"
        )));
    }
    Ok(names)
}

/// The algorithms that implement `collective`, comma-separated.
fn serving(collective: Collective) -> String {
    let names: Vec<&str> = Algorithm::ALL
        .into_iter()
        .filter(|a| a.serves(collective))
        .map(Algorithm::name)
        .collect();
    names.join(", ")
}

fn collective(s: &str) -> Result<Collective, String> {
    s.parse()
}

fn reduce_op(s: &str) -> Result<ReduceOp, String> {
    s.to_ascii_lowercase().parse()
}

/// rcoll's names, or the ones nccl-tests prints.
fn data_type(s: &str) -> Result<DataType, String> {
    let s = s.to_ascii_lowercase();
    let name = match s.as_str() {
        "int8" | "char" => "i8",
        "uint8" => "u8",
        "int32" | "int" => "i32",
        "uint32" => "u32",
        "int64" => "i64",
        "uint64" => "u64",
        "half" | "float16" => "f16",
        "bfloat16" => "bf16",
        "float" | "float32" => "f32",
        "double" | "float64" => "f64",
        other => other,
    };
    name.parse()
}

/// A byte count with an optional K, M or G suffix (rcoll's own parser).
pub fn bytes(s: &str) -> Result<usize, String> {
    rcoll::config::parse_bytes(s)
        .ok_or_else(|| format!("{s:?} is not a size in bytes (e.g. 8, 64K, 16M, 1G)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(bytes("8"), Ok(8));
        assert_eq!(bytes("1K"), Ok(1024));
        assert_eq!(bytes("64M"), Ok(64 << 20));
        assert_eq!(bytes("2g"), Ok(2 << 30));
        assert_eq!(bytes("5000000"), Ok(5_000_000));
        assert!(bytes("1.5M").is_err());
        assert!(bytes("M").is_err());
        assert!(bytes("").is_err());
    }

    #[test]
    fn planner_help_states_the_library_defaults() {
        let m = CostModel::default();
        assert_eq!(
            (m.alpha_us, m.bandwidth_gbps, m.reduce_gbytes_per_s),
            (2.0, 100.0, 10.0),
            "update the [default: ...] texts of PlanArgs"
        );
    }

    #[test]
    fn nccl_tests_type_names_are_accepted() {
        assert_eq!(data_type("float"), Ok(DataType::F32));
        assert_eq!(data_type("bfloat16"), Ok(DataType::Bf16));
        assert_eq!(data_type("u64"), Ok(DataType::U64));
        assert!(data_type("f128").is_err());
    }

    #[test]
    fn the_benchmark_and_the_planner_parse() {
        let cli = Cli::try_parse_from([
            "rcoll-bench",
            "all_reduce",
            "-b",
            "8",
            "-e",
            "1M",
            "-f",
            "4",
            "-c",
            "1",
            "--ranks",
            "4",
            "-J",
            "out.json",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        let (launch, spec) = cli.bench.into_spec().unwrap();
        assert_eq!(spec.sizes.first(), Some(&8));
        assert_eq!(spec.sizes.last(), Some(&(512 << 10)));
        assert_eq!(spec.nranks, 4);
        assert_eq!(launch.ranks, Some(4));
        assert_eq!(launch.transport, None);
        assert_eq!(launch.stall_timeout, Some(Duration::from_secs(600)));

        let cli = Cli::try_parse_from([
            "rcoll-bench",
            "plan",
            "all_reduce",
            "--ranks",
            "5",
            "--bytes",
            "5000000",
        ])
        .unwrap();
        let Some(Command::Plan(plan)) = cli.command else {
            panic!("plan subcommand not recognised");
        };
        assert_eq!(plan.into_spec().unwrap().bytes, 5_000_000);
    }

    #[test]
    fn contradictory_flags_are_usage_errors() {
        let spec = |args: &[&str]| {
            let mut argv = vec!["rcoll-bench"];
            argv.extend_from_slice(args);
            let cli = Cli::try_parse_from(argv).map_err(|e| usage(e.to_string()))?;
            let (launch, spec) = cli.bench.into_spec()?;
            spec.with_ranks(launch.ranks.unwrap_or(DEFAULT_RANKS))
        };
        assert!(spec(&["broadcast", "--ranks", "2", "-r", "2"]).is_err());
        assert!(spec(&["all_gather", "--algo", "double_binary_tree"]).is_err());
        assert!(spec(&["all_reduce", "--transport", "carrier-pigeon"]).is_err());
        assert!(spec(&["all_reduce", "-o", "band", "-d", "f32"]).is_err());
        assert!(spec(&["sendrecv", "--ranks", "1"]).is_err());
        assert!(spec(&["all_reduce", "--ranks", "0"]).is_err());
        assert!(spec(&["all_reduce", "--device", "veth0,,veth1"]).is_err());
        assert!(spec(&["all_reduce", "--device", ""]).is_err());
        assert!(spec(&["all_reduce", "--algo", "ring"]).is_ok());
        assert!(spec(&["all_reduce", "--transport", "tcp", "--ranks", "3"]).is_ok());
    }

    #[test]
    fn verbs_is_a_process_transport() {
        for name in ["verbs", "VERBS", "ib", "rdma"] {
            let argv = ["rcoll-bench", "all_reduce", "--transport", name];
            let (launch, spec) = Cli::try_parse_from(argv)
                .unwrap()
                .bench
                .into_spec()
                .unwrap();
            assert_eq!(launch.transport, Some(TransportFlag::Verbs), "{name}");
            assert_eq!(spec.nranks, DEFAULT_RANKS);
        }
    }

    #[test]
    fn devices_are_dealt_to_ranks_round_robin() {
        let spec = |device: &str| {
            let argv = ["rcoll-bench", "all_reduce", "--device", device];
            Cli::try_parse_from(argv)
                .unwrap()
                .bench
                .into_spec()
                .unwrap()
                .1
        };
        let two = spec("veth0, veth1");
        assert_eq!(two.devices, ["veth0", "veth1"]);
        let dealt: Vec<Option<&str>> = (0..5).map(|r| two.device_of(r)).collect();
        assert_eq!(
            dealt,
            [
                Some("veth0"),
                Some("veth1"),
                Some("veth0"),
                Some("veth1"),
                Some("veth0")
            ]
        );
        assert_eq!(spec("eth0").device_of(3), Some("eth0"));
        let argv = ["rcoll-bench", "all_reduce"];
        let (_, none) = Cli::try_parse_from(argv)
            .unwrap()
            .bench
            .into_spec()
            .unwrap();
        assert_eq!(none.device_of(0), None);
    }

    #[test]
    fn the_root_is_checked_against_the_group_it_runs_on() {
        let argv = ["rcoll-bench", "broadcast", "-r", "3"];
        let (launch, spec) = Cli::try_parse_from(argv)
            .unwrap()
            .bench
            .into_spec()
            .unwrap();
        assert_eq!(launch.ranks, None);
        assert!(spec.clone().with_ranks(3).is_err());
        assert_eq!(spec.with_ranks(4).unwrap().nranks, 4);
    }
}
