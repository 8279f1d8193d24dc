//! Process groups: one rank per process, on one host or many, over TCP.
//!
//! ```no_run
//! // Started by mpirun, srun, torchrun or with RCOLL_RANK / RCOLL_WORLD_SIZE /
//! // RCOLL_ROOT_ADDR set: every process runs the same code.
//! let mut comm = rcoll::process::init()?;
//! let mut grads = vec![comm.rank() as f32; 1 << 20];
//! comm.all_reduce_in_place(&mut grads, rcoll::ReduceOp::Avg)?;
//! # Ok::<(), rcoll::Error>(())
//! ```
//!
//! Rank 0 listens on the root address; the others connect to it, and then every pair of
//! ranks opens its own connection (see [`rcoll_transport::tcp::bootstrap`]). The
//! environment conventions of the common launchers are in [`rcoll_transport::launcher`].

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rcoll_transport::launcher::Placement;
use rcoll_transport::tcp::{self, bootstrap};
use rcoll_transport::Transport;

use crate::algorithm::Algorithm;
use crate::communicator::Communicator;
use crate::config::{Config, Overrides};
use crate::error::{Error, Result};

/// Which transport carries a process group (`RCOLL_TRANSPORT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportKind {
    /// TCP sockets.
    Tcp,
    /// RDMA verbs (reliable connected queue pairs) between every pair of ranks.
    Verbs,
    /// Shared memory between the ranks of each host (required: a pair that cannot map
    /// its segments fails the setup), TCP across hosts.
    Shm,
    /// Shared memory between the ranks of each host where it can be set up; across hosts
    /// verbs where every rank has a usable RDMA device, TCP otherwise.
    Auto,
}

impl std::str::FromStr for TransportKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tcp" => Ok(TransportKind::Tcp),
            "verbs" | "ib" | "rdma" => Ok(TransportKind::Verbs),
            "shm" | "sm" => Ok(TransportKind::Shm),
            "auto" => Ok(TransportKind::Auto),
            other => Err(Error::Config(format!(
                "unknown transport {other:?} (expected tcp, verbs, shm or auto)"
            ))),
        }
    }
}

/// A fresh random job secret for [`Builder::unique_id`] (and `RCOLL_UNIQUE_ID`, as
/// [`format_unique_id`] writes it).
pub fn random_unique_id() -> Result<u128> {
    bootstrap::auth::random_secret()
        .map_err(|e| Error::Config(format!("no randomness for a job secret: {e}")))
}

/// A job secret as `RCOLL_UNIQUE_ID` takes it: 32 hex digits.
pub fn format_unique_id(id: u128) -> String {
    format!("{id:032x}")
}

/// Joins the job described by the environment (see [`Builder::from_env`]).
pub fn init() -> Result<Communicator> {
    Builder::from_env()?.build()
}

/// Builds a process-group communicator.
#[derive(Clone, Debug)]
pub struct Builder {
    rank: usize,
    size: usize,
    root: SocketAddr,
    unique_id: Option<u128>,
    insecure_id: bool,
    bind: Option<IpAddr>,
    transport: TransportKind,
    overrides: Overrides,
    window: usize,
}

impl Builder {
    /// Rank `rank` of `size`, meeting at rank 0's `root` address.
    pub fn new(rank: usize, size: usize, root: SocketAddr) -> Builder {
        Builder {
            rank,
            size,
            root,
            unique_id: None,
            insecure_id: false,
            bind: None,
            transport: TransportKind::Auto,
            overrides: Overrides::default(),
            window: tcp::DEFAULT_WINDOW,
        }
    }

    /// Rank, size and root from the launcher environment (RCOLL_*, torchrun, Open MPI,
    /// PMI, Slurm), transport from `RCOLL_TRANSPORT`, and the interface to accept peers on
    /// from `RCOLL_SOCKET_IFNAME` (a name that does not exist is an error listing those
    /// that do).
    pub fn from_env() -> Result<Builder> {
        let placement = Placement::from_env()
            .map_err(Error::Config)?
            .ok_or_else(|| {
                Error::Config(
                    "no rank and size in the environment: set RCOLL_RANK, RCOLL_WORLD_SIZE and \
                 RCOLL_ROOT_ADDR, or start under mpirun, srun or torchrun"
                        .into(),
                )
            })?;
        let mut b = Builder::new(placement.rank, placement.size, placement.root);
        b.unique_id = placement.unique_id;
        b.insecure_id = placement.insecure_id;
        if let Ok(t) = std::env::var("RCOLL_TRANSPORT") {
            b.transport = t.parse()?;
        }
        if let Ok(name) = std::env::var("RCOLL_SOCKET_IFNAME") {
            let ip = rcoll_transport::interface::address_of(&name, placement.root.ip())
                .map_err(Error::Config)?;
            b.bind = Some(ip);
        }
        Ok(b)
    }

    /// The job's secret id, which every rank must be given: connections prove knowledge of
    /// it both ways (it never travels), so no process without it can join or impersonate a
    /// rank. Make one with [`random_unique_id`] on one process and hand it to the others
    /// (`RCOLL_UNIQUE_ID`, 32 hex digits, in the environment of every rank).
    pub fn unique_id(mut self, id: u128) -> Builder {
        self.unique_id = Some(id);
        self
    }

    /// Allows the job id derived from public values (the root address and the group size)
    /// when no secret one is given (like `RCOLL_INSECURE_ID=1`): anyone who can reach the
    /// root can then join the job, so only for tests on a trusted host.
    pub fn insecure_default_id(mut self) -> Builder {
        self.insecure_id = true;
        self
    }

    /// The local address to accept peer connections on (default: the interface that
    /// reaches the root).
    pub fn bind(mut self, ip: IpAddr) -> Builder {
        self.bind = Some(ip);
        self
    }

    /// Accepts peer connections on network interface `name` (like `RCOLL_SOCKET_IFNAME`);
    /// a name that does not exist is an error listing those that do.
    pub fn interface(mut self, name: &str) -> Result<Builder> {
        let ip =
            rcoll_transport::interface::address_of(name, self.root.ip()).map_err(Error::Config)?;
        self.bind = Some(ip);
        Ok(self)
    }

    /// The transport.
    pub fn transport(mut self, kind: TransportKind) -> Builder {
        self.transport = kind;
        self
    }

    /// Forces `algorithm` (`None`: choose by the cost model) wherever it applies.
    pub fn algorithm(mut self, algorithm: Option<Algorithm>) -> Builder {
        self.overrides.algorithm = Some(algorithm);
        self
    }

    /// Time without progress before a call (or the bootstrap) fails.
    pub fn timeout(mut self, timeout: Duration) -> Builder {
        self.overrides.timeout = Some(timeout);
        self
    }

    /// Bytes per pipelined segment.
    pub fn segment_bytes(mut self, bytes: usize) -> Builder {
        self.overrides.segment_bytes = Some(bytes.max(1));
        self
    }

    /// Connects to the group and returns this rank's communicator.
    pub fn build(self) -> Result<Communicator> {
        let config = self.overrides.resolve()?;
        let (transport, ip) = self.connect(&config)?;
        let mut comm = Communicator::new(transport, config)?;
        // What `split` needs to build a subgroup the same way: every setting of this one,
        // and the address the other ranks reach this rank at.
        let mut origin = self;
        origin.bind = Some(ip);
        comm.origin = Some(origin);
        Ok(comm)
    }

    /// This group's builder for a subgroup: rank `rank` of `size`, meeting at `root` with
    /// the secret `unique_id`; every other setting (transport, interface, timeouts,
    /// overrides) stays.
    pub(crate) fn subgroup(&self, rank: usize, size: usize, root: SocketAddr, id: u128) -> Builder {
        let mut b = self.clone();
        b.rank = rank;
        b.size = size;
        b.root = root;
        b.unique_id = Some(id);
        b.insecure_id = false;
        b
    }

    /// The address this rank accepts connections on (set once built).
    pub(crate) fn bound_ip(&self) -> IpAddr {
        self.bind.unwrap_or(self.root.ip())
    }

    /// Connects to the group and returns this rank's transport alone (TCP or verbs, as
    /// [`build`](Self::build) would choose): for point-to-point protocols of one's own and
    /// for testing a transport under the engine's feet.
    pub fn build_transport(self) -> Result<Box<dyn Transport>> {
        let config = self.overrides.resolve()?;
        Ok(self.connect(&config)?.0)
    }

    /// The transport, and the address this rank is reached at.
    fn connect(&self, config: &Config) -> Result<(Box<dyn Transport>, IpAddr)> {
        let unique_id = match (self.unique_id, self.insecure_id) {
            (Some(id), _) => id,
            (None, true) => bootstrap::Options::default_unique_id(self.root, self.size),
            // One rank connects to nobody: there is nothing to prove.
            (None, false) if self.size == 1 => 0,
            (None, false) => {
                return Err(Error::Config(
                    "no job secret: give every rank the same RCOLL_UNIQUE_ID (32 hex digits, \
                     e.g. `export RCOLL_UNIQUE_ID=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')` \
                     before mpirun, passed on with `mpirun -x RCOLL_UNIQUE_ID`), or \
                     Builder::unique_id; RCOLL_INSECURE_ID=1 accepts an id anyone can compute, \
                     for tests on a trusted host"
                        .into(),
                ))
            }
        };
        let opts = bootstrap::Options {
            rank: self.rank,
            nranks: self.size,
            root: self.root,
            unique_id,
            bind: self.bind,
            timeout: config.timeout,
            window: self.window,
            host: rcoll_transport::hosts::local_key().map_err(Error::Config)?,
        };
        tracing::info!(rank = self.rank, size = self.size, root = %self.root, "joining over tcp");
        let deadline = rcoll_transport::deadline_after(config.timeout);
        let tcp = bootstrap::connect(&opts).map_err(|source| {
            tracing::warn!(%source, "bootstrap failed");
            Error::Bootstrap { source }
        })?;
        let ip = tcp.local_ip().or(self.bind).unwrap_or(self.root.ip());
        let hosts = tcp.hosts().unwrap_or_else(|| {
            std::sync::Arc::new(rcoll_transport::hosts::HostMap::single(self.size))
        });
        tracing::info!(rank = self.rank, hosts = %hosts.describe(), "host map");
        let transport = self.choose_transport(tcp, hosts, config.segment_bytes, deadline)?;
        tracing::info!(
            rank = self.rank,
            size = self.size,
            transport = transport.name(),
            details = %transport.details(),
            "communicator ready"
        );
        Ok((transport, ip))
    }

    /// TCP; verbs everywhere when asked for (an error if any rank cannot); shared memory
    /// inside hosts (`shm`, `auto`) over TCP, or over verbs when `auto` and every rank has
    /// a usable RDMA port. All ranks take the same decision.
    fn choose_transport(
        &self,
        mut tcp: tcp::TcpTransport,
        hosts: std::sync::Arc<rcoll_transport::hosts::HostMap>,
        segment_bytes: usize,
        deadline: std::time::Instant,
    ) -> Result<Box<dyn Transport>> {
        use rcoll_transport::shm;
        let bootstrap = |source| Error::Bootstrap { source };
        let prepared = match self.transport {
            TransportKind::Tcp => return Ok(Box::new(tcp)),
            TransportKind::Verbs => return self.upgrade(tcp, segment_bytes, deadline),
            TransportKind::Shm | TransportKind::Auto => {
                let mut sopts = shm::Options::from_env(segment_bytes).map_err(Error::Config)?;
                sopts.required = self.transport == TransportKind::Shm;
                shm::prepare(&mut tcp, hosts, &sopts, deadline).map_err(bootstrap)?
            }
        };
        let inner: Box<dyn Transport> = if self.transport == TransportKind::Shm {
            Box::new(tcp)
        } else {
            self.upgrade(tcp, segment_bytes, deadline)?
        };
        if prepared.pairs() == 0 {
            return Ok(inner);
        }
        Ok(Box::new(prepared.finish(inner).map_err(bootstrap)?))
    }

    fn upgrade(
        &self,
        mut tcp: tcp::TcpTransport,
        segment_bytes: usize,
        deadline: std::time::Instant,
    ) -> Result<Box<dyn Transport>> {
        use rcoll_transport::verbs;
        let bootstrap = |source| Error::Bootstrap { source };
        let vopts = verbs::Options::from_env(segment_bytes).map_err(Error::Config)?;
        let selection = verbs::choose_for(&tcp, self.bind, &vopts);
        if let Err(why) = &selection {
            tracing::info!(rank = self.rank, %why, "no usable RDMA device");
        }
        let without = verbs::agree(&mut tcp, selection.is_ok(), deadline).map_err(bootstrap)?;
        match (selection, without.is_empty()) {
            (Ok(sel), true) => {
                tracing::info!(
                    rank = self.rank,
                    device = %sel.device,
                    port = sel.port,
                    gid = %sel.gid.why,
                    "upgrading to verbs"
                );
                let t = verbs::upgrade(tcp, sel, &vopts, deadline).map_err(bootstrap)?;
                Ok(Box::new(t))
            }
            (sel, _) if self.transport == TransportKind::Verbs => {
                let mine = match sel {
                    Err(why) => format!("; this rank: {why}"),
                    Ok(_) => String::new(),
                };
                let list: Vec<String> = without.iter().map(|r| r.to_string()).collect();
                Err(Error::Config(format!(
                    "RCOLL_TRANSPORT=verbs, but {} cannot use RDMA{mine}",
                    list.join(", ")
                )))
            }
            _ => {
                tracing::info!(rank = self.rank, ?without, "auto: staying on tcp");
                Ok(Box::new(tcp))
            }
        }
    }
}
