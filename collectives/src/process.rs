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
use crate::config::Overrides;
use crate::error::{Error, Result};

/// Which transport carries a process group (`RCOLL_TRANSPORT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportKind {
    /// TCP sockets.
    Tcp,
    /// RDMA verbs (reliable connected queue pairs).
    Verbs,
    /// Verbs where an RDMA device is usable, TCP otherwise.
    Auto,
}

impl std::str::FromStr for TransportKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tcp" => Ok(TransportKind::Tcp),
            "verbs" | "ib" | "rdma" => Ok(TransportKind::Verbs),
            "auto" => Ok(TransportKind::Auto),
            other => Err(Error::Config(format!(
                "unknown transport {other:?} (expected tcp, verbs or auto)"
            ))),
        }
    }
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

    /// The job id that ranks must share (default: derived from the root and size).
    pub fn unique_id(mut self, id: u128) -> Builder {
        self.unique_id = Some(id);
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
        let opts = bootstrap::Options {
            rank: self.rank,
            nranks: self.size,
            root: self.root,
            unique_id: self
                .unique_id
                .unwrap_or_else(|| bootstrap::Options::default_unique_id(self.root, self.size)),
            bind: self.bind,
            timeout: config.timeout,
            window: self.window,
        };
        tracing::info!(rank = self.rank, size = self.size, root = %self.root, "joining over tcp");
        let deadline = std::time::Instant::now() + config.timeout;
        let tcp = bootstrap::connect(&opts).map_err(|source| {
            tracing::warn!(%source, "bootstrap failed");
            Error::Bootstrap { source }
        })?;
        let transport = self.choose_transport(tcp, config.segment_bytes, deadline)?;
        tracing::info!(
            rank = self.rank,
            size = self.size,
            transport = transport.name(),
            "communicator ready"
        );
        Communicator::new(transport, config)
    }

    /// TCP, or verbs when asked for (an error if any rank cannot) or when `auto` and every
    /// rank has a usable RDMA port. All ranks take the same decision.
    fn choose_transport(
        &self,
        tcp: tcp::TcpTransport,
        segment_bytes: usize,
        deadline: std::time::Instant,
    ) -> Result<Box<dyn Transport>> {
        if self.transport == TransportKind::Tcp {
            return Ok(Box::new(tcp));
        }
        self.upgrade(tcp, segment_bytes, deadline)
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
