//! Process groups: one rank per process, on one host or many: shared memory between the
//! ranks of a host, and between hosts verbs where every rank has a usable RDMA port, TCP
//! otherwise (`RCOLL_TRANSPORT`, [`TransportKind`]).
//!
//! ```no_run
//! // Started by mpirun, srun, torchrun or with RCOLL_RANK / RCOLL_WORLD_SIZE /
//! // RCOLL_ROOT_ADDR and the job's secret RCOLL_UNIQUE_ID set: every process runs the
//! // same code.
//! let mut comm = rcoll::process::init()?;
//! let mut grads = vec![comm.rank() as f32; 1 << 20];
//! comm.all_reduce_in_place(&mut grads, rcoll::ReduceOp::Avg)?;
//! # Ok::<(), rcoll::Error>(())
//! ```
//!
//! Rank 0 listens on the root address; the others connect to it, proving the job's secret,
//! and then every pair of ranks opens its own connection (see
//! [`rcoll_transport::tcp::bootstrap`]), over which shared memory and verbs are set up.
//! The environment conventions of the common launchers are in
//! [`rcoll_transport::launcher`].

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rcoll_transport::launcher::Placement;
use rcoll_transport::tcp::{self, bootstrap};
use rcoll_transport::topology;
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
#[derive(Clone)]
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

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = rcoll_transport::launcher::REDACTED;
        f.debug_struct("Builder")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("root", &self.root)
            .field("unique_id", &self.unique_id.map(|_| redacted))
            .field("insecure_id", &self.insecure_id)
            .field("bind", &self.bind)
            .field("transport", &self.transport)
            .field("overrides", &self.overrides)
            .field("window", &self.window)
            .finish()
    }
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
        b.env_settings()
    }

    /// Rank `rank` of `size` in the group that `id` names ([`UniqueId`]: its rendezvous
    /// and secret), with the transport and interface from the environment
    /// (`RCOLL_TRANSPORT`, `RCOLL_SOCKET_IFNAME`), as `ncclCommInitRank` takes them.
    pub fn from_unique_id(id: &UniqueId, rank: usize, size: usize) -> Result<Builder> {
        let mut b = Builder::new(rank, size, id.root);
        b.unique_id = Some(id.secret);
        b.env_settings()
    }

    /// `RCOLL_TRANSPORT` and `RCOLL_SOCKET_IFNAME`.
    fn env_settings(mut self) -> Result<Builder> {
        if let Ok(t) = std::env::var("RCOLL_TRANSPORT") {
            self.transport = t.parse()?;
        }
        if let Ok(name) = std::env::var("RCOLL_SOCKET_IFNAME") {
            let ip = rcoll_transport::interface::address_of(&name, self.root.ip())
                .map_err(Error::Config)?;
            self.bind = Some(ip);
        }
        Ok(self)
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
        let mut config = self.overrides.resolve()?;
        config.shared_memory_inside_hosts =
            matches!(self.transport, TransportKind::Shm | TransportKind::Auto);
        // TCP alone moves fewer, larger segments faster (fewer system calls and wake-ups
        // per byte). Decided by what the group asks for, the same on every rank, not by
        // what each rank's connections turn out to be; shared memory's and verbs' slots
        // are sized by the setting.
        if self.transport == TransportKind::Tcp && !config.segment_bytes_set {
            config.segment_bytes = crate::config::tcp_segment_bytes(self.size);
        }
        let (transport, ip, placement) = self.connect(&config)?;
        let mut comm = Communicator::new(transport, config)?;
        comm.placement = placement;
        comm.check_network()?;
        // What `split` needs to build a subgroup the same way: every setting of this one,
        // and the address the other ranks reach this rank at.
        let mut origin = self;
        origin.bind = Some(ip);
        comm.origin = Some(crate::communicator::Origin {
            ip,
            form: std::sync::Arc::new(move |rank, size, root, id| {
                origin.subgroup(rank, size, root, id).build()
            }),
        });
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

    /// Connects to the group and returns this rank's transport alone (TCP or verbs, as
    /// [`build`](Self::build) would choose): for point-to-point protocols of one's own and
    /// for testing a transport under the engine's feet.
    pub fn build_transport(self) -> Result<Box<dyn Transport>> {
        let config = self.overrides.resolve()?;
        Ok(self.connect(&config)?.0)
    }

    /// The transport, the address this rank is reached at, and where it runs on its host.
    fn connect(
        &self,
        config: &Config,
    ) -> Result<(Box<dyn Transport>, IpAddr, Option<topology::Placement>)> {
        let unique_id = match (self.unique_id, self.insecure_id) {
            // A one-member group (a split's lone color) connects to nobody: no secret.
            (Some(0), _) if self.size > 1 => {
                return Err(Error::Config(format!(
                    "rank {}: the job secret (Builder::unique_id) is zero: not a secret",
                    self.rank
                )))
            }
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
            cpus: rcoll_transport::topology::machine_cpus().map_err(Error::Config)?,
        };
        tracing::info!(rank = self.rank, size = self.size, root = %self.root, "joining over tcp");
        let deadline = rcoll_transport::deadline_after(config.timeout);
        let tcp = bootstrap::connect(&opts).map_err(|source| {
            tracing::warn!(%source, "bootstrap failed");
            Error::Bootstrap { source }
        })?;
        let ip = tcp.local_ip().or(self.bind).unwrap_or(self.root.ip());
        let hosts = tcp.endpoint().hosts.clone().unwrap_or_else(|| {
            std::sync::Arc::new(rcoll_transport::hosts::HostMap::single(self.size))
        });
        tracing::info!(rank = self.rank, hosts = %hosts.describe(), "host map");
        let placement = self.place(&hosts)?;
        let device = placement.as_ref().and_then(|p| p.device.clone());
        let transport = self.choose_transport(
            tcp,
            hosts,
            config.segment_bytes,
            device.as_deref(),
            deadline,
        )?;
        tracing::info!(
            rank = self.rank,
            size = self.size,
            transport = transport.endpoint().name,
            details = %transport.endpoint().details,
            "communicator ready"
        );
        Ok((transport, ip, placement))
    }

    /// This rank's place on its host ([`topology::place`]): bound as `RCOLL_BIND` says,
    /// with the device it should drive. A machine whose topology cannot be read leaves the
    /// rank where it is (logged); a bad `RCOLL_BIND`, or an `RCOLL_TOPO_FILE` that cannot be
    /// read, is an error.
    fn place(
        &self,
        hosts: &rcoll_transport::hosts::HostMap,
    ) -> Result<Option<topology::Placement>> {
        let bind = topology::Bind::from_env().map_err(Error::Config)?;
        let topo = match topology::discover() {
            Ok(t) => t,
            // The error names the file (`RCOLL_TOPO_FILE <path>: ...`).
            Err(why) if topology::topo_file().is_some() => return Err(Error::Config(why)),
            Err(why) => {
                tracing::warn!(rank = self.rank, %why, "no topology: the rank stays where it is");
                return Ok(None);
            }
        };
        let me = rcoll_transport::Rank::from(self.rank);
        let allowed = topology::bind::launcher_affinity();
        let (local, size) = (hosts.local_rank(me), hosts.local_size(me));
        if let Ok(path) = std::env::var("RCOLL_TOPO_DUMP_FILE") {
            if local == 0 {
                let report = topology::Report::new(topo.clone(), size, bind, &allowed);
                if let Err(e) = std::fs::write(&path, report.to_json()) {
                    tracing::warn!(rank = self.rank, %path, %e, "cannot write RCOLL_TOPO_DUMP_FILE");
                }
            }
        }
        let mut p = topology::place(&topo, local, size, &allowed, bind);
        if let Err(why) = topology::bind::apply(&p) {
            tracing::warn!(rank = self.rank, %why, "binding failed: the rank stays where it is");
            p.notes.push(format!("not bound: {why}"));
            p.bind = false;
            p.cpus = topology::bind::current_affinity().unwrap_or(allowed);
        }
        tracing::info!(
            rank = self.rank,
            numa = ?p.numa,
            cpus = %p.cpus,
            bound = p.bind,
            device = ?p.device,
            notes = %p.notes.join("; "),
            "placement ({})",
            topo.source
        );
        Ok(Some(p))
    }

    /// TCP; verbs everywhere when asked for (an error if any rank cannot); shared memory
    /// inside hosts (`shm`, `auto`) over TCP, or over verbs when `auto` and every rank has
    /// a usable RDMA port. All ranks take the same decision.
    fn choose_transport(
        &self,
        mut tcp: tcp::TcpTransport,
        hosts: std::sync::Arc<rcoll_transport::hosts::HostMap>,
        segment_bytes: usize,
        device: Option<&str>,
        deadline: std::time::Instant,
    ) -> Result<Box<dyn Transport>> {
        use rcoll_transport::shm;
        let bootstrap = |source| Error::Bootstrap { source };
        let prepared = match self.transport {
            TransportKind::Tcp => return Ok(Box::new(tcp)),
            TransportKind::Verbs => {
                return self.upgrade(tcp, segment_bytes, device, &|_| true, deadline)
            }
            TransportKind::Shm | TransportKind::Auto => {
                let mut sopts = shm::Options::from_env(segment_bytes).map_err(Error::Config)?;
                sopts.required = self.transport == TransportKind::Shm;
                shm::prepare(&mut tcp, hosts, &sopts, deadline).map_err(bootstrap)?
            }
        };
        let inner: Box<dyn Transport> = if self.transport == TransportKind::Shm {
            Box::new(tcp)
        } else {
            // Queue pairs only where shared memory does not reach.
            let reach = |p| !prepared.shares_memory_with(p);
            self.upgrade(tcp, segment_bytes, device, &reach, deadline)?
        };
        if prepared.pairs() == 0 {
            return Ok(inner);
        }
        Ok(Box::new(prepared.finish(inner).map_err(bootstrap)?))
    }

    /// Verbs to the peers `reach` names (symmetric), if every rank can (see
    /// `choose_transport`).
    fn upgrade(
        &self,
        mut tcp: tcp::TcpTransport,
        segment_bytes: usize,
        device: Option<&str>,
        reach: &dyn Fn(rcoll_transport::Rank) -> bool,
        deadline: std::time::Instant,
    ) -> Result<Box<dyn Transport>> {
        use rcoll_transport::verbs;
        let bootstrap = |source| Error::Bootstrap { source };
        let mut vopts = verbs::Options::from_env(segment_bytes).map_err(Error::Config)?;
        // A list in RCOLL_IB_HCA: the local ranks of a host dealt over it.
        let local = tcp
            .endpoint()
            .hosts
            .clone()
            .map_or(0, |h| h.local_rank(rcoll_transport::Rank::from(self.rank)));
        vopts.hca = vopts.hca.as_deref().and_then(|l| deal(l, local));
        // The device near this rank (topology) unless RCOLL_IB_HCA names one; if it has no
        // usable port, the choice by address.
        let near = match (&vopts.hca, device) {
            (None, Some(d)) => {
                let mut o = vopts.clone();
                o.hca = Some(d.to_string());
                verbs::choose_for(&tcp, self.bind, &o)
                    .inspect_err(|why| {
                        tracing::info!(rank = self.rank, device = d, %why, "the device near this rank is unusable")
                    })
                    .ok()
                    .map(|sel| (o, sel))
            }
            _ => None,
        };
        let selection = match near {
            Some((o, sel)) => {
                vopts = o;
                Ok(sel)
            }
            None => verbs::choose_for(&tcp, self.bind, &vopts),
        };
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
                let t = verbs::upgrade_for(tcp, sel, &vopts, deadline, reach).map_err(bootstrap)?;
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

/// Entry `local % n` of a comma-separated list of `n` devices (`RCOLL_IB_HCA=mlx5_0,mlx5_1`:
/// a host's local ranks dealt over them); a single name as it is.
fn deal(list: &str, local: usize) -> Option<String> {
    let entries: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    (!entries.is_empty()).then(|| entries[local % entries.len()].to_string())
}

/// What the ranks of one group need to find each other, made by one of them (its rank 0)
/// and handed to the others by any means (an MPI broadcast, a file): the rendezvous
/// address, where this process already listens, and a fresh job secret. The same as
/// `ncclUniqueId`; [`to_bytes`](UniqueId::to_bytes) gives the 128 bytes of
/// `rcollUniqueId`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId {
    root: SocketAddr,
    secret: u128,
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret stays out of logs.
        f.debug_struct("UniqueId")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// Bytes of a [`UniqueId`] (`RCOLL_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = 128;

const UNIQUE_ID_MAGIC: &[u8; 4] = b"RCI1";

impl UniqueId {
    /// Starts a rendezvous on this process, which must then be the group's rank 0: listens
    /// on the address of `RCOLL_SOCKET_IFNAME`, else on the host's first non-loopback
    /// address (loopback if it has none), at a port the system picks.
    pub fn new() -> Result<UniqueId> {
        let ip = match std::env::var("RCOLL_SOCKET_IFNAME") {
            Ok(name) => rcoll_transport::interface::address_of(
                &name,
                IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            )
            .map_err(Error::Config)?,
            Err(_) => rcoll_transport::interface::default_address(),
        };
        let fail = |what: &str, e: std::io::Error| Error::Config(format!("{what}: {e}"));
        let root = bootstrap::listen_root(ip)
            .map_err(|e| fail(&format!("cannot listen for the rendezvous on {ip}"), e))?;
        let secret =
            bootstrap::auth::random_secret().map_err(|e| fail("no random job secret", e))?;
        Ok(UniqueId { root, secret })
    }

    /// Where rank 0 listens.
    pub fn root(&self) -> SocketAddr {
        self.root
    }

    /// The 128 bytes that carry it: `RCI1`, the address family (4 or 6), the port
    /// (big-endian), the address (16 bytes, IPv4 mapped), the secret (16 bytes), zeros.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_BYTES] {
        let mut b = [0u8; UNIQUE_ID_BYTES];
        b[..4].copy_from_slice(UNIQUE_ID_MAGIC);
        let (family, ip) = match self.root.ip() {
            IpAddr::V4(v4) => (4, v4.to_ipv6_mapped()),
            IpAddr::V6(v6) => (6, v6),
        };
        b[4] = family;
        b[6..8].copy_from_slice(&self.root.port().to_be_bytes());
        b[8..24].copy_from_slice(&ip.octets());
        b[24..40].copy_from_slice(&self.secret.to_le_bytes());
        b
    }

    /// Reads [`to_bytes`](Self::to_bytes)' form; anything else is an error.
    pub fn from_bytes(b: &[u8; UNIQUE_ID_BYTES]) -> Result<UniqueId> {
        let bad = |why: &str| Error::Config(format!("not an rcoll unique id: {why}"));
        if &b[..4] != UNIQUE_ID_MAGIC {
            return Err(bad(
                "wrong magic (was it made by rcollGetUniqueId and passed whole?)",
            ));
        }
        if b[5] != 0 || b[40..].iter().any(|&x| x != 0) {
            return Err(bad("reserved bytes are set"));
        }
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&b[8..24]);
        let v6 = std::net::Ipv6Addr::from(octets);
        let ip = match b[4] {
            4 => IpAddr::V4(v6.to_ipv4_mapped().ok_or_else(|| bad("IPv4 not mapped"))?),
            6 => IpAddr::V6(v6),
            _ => return Err(bad("unknown address family")),
        };
        let port = u16::from_be_bytes([b[6], b[7]]);
        if port == 0 {
            return Err(bad("port 0"));
        }
        let mut s = [0u8; 16];
        s.copy_from_slice(&b[24..40]);
        let secret = u128::from_le_bytes(s);
        if secret == 0 {
            return Err(bad("the secret is zero"));
        }
        Ok(UniqueId {
            root: SocketAddr::new(ip, port),
            secret,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_list_is_dealt_over_the_local_ranks() {
        assert_eq!(deal("mlx5_0", 3).as_deref(), Some("mlx5_0"));
        assert_eq!(deal("mlx5_0:1, mlx5_1:1", 0).as_deref(), Some("mlx5_0:1"));
        assert_eq!(deal("mlx5_0:1, mlx5_1:1", 3).as_deref(), Some("mlx5_1:1"));
        assert_eq!(deal(" , ", 0), None);
    }

    #[test]
    fn a_unique_id_survives_its_bytes_and_garbage_is_refused() {
        let id = UniqueId::new().expect("unique id");
        let b = id.to_bytes();
        assert_eq!(UniqueId::from_bytes(&b).expect("decoded"), id);
        assert!(!format!("{id:?}").contains(&format!("{:x}", id.secret)));
        let mut wrong = b;
        wrong[0] = b'X';
        assert!(UniqueId::from_bytes(&wrong).is_err());
        let mut wrong = b;
        wrong[100] = 1;
        assert!(UniqueId::from_bytes(&wrong).is_err());
        let mut zero = b;
        zero[24..40].fill(0);
        let e = UniqueId::from_bytes(&zero).expect_err("a zero secret");
        assert!(e.to_string().contains("secret is zero"), "{e}");
        assert!(UniqueId::from_bytes(&[0; UNIQUE_ID_BYTES]).is_err());
    }

    /// Debug output (and so every log line that prints a builder) never shows the secret;
    /// a zero secret is refused before anything connects.
    #[test]
    fn the_builder_keeps_its_secret_and_refuses_zero() {
        let root: SocketAddr = "127.0.0.1:1".parse().expect("address");
        let secret = 0x5ec2_e75e_c2e7_5ec2_e75e_c2e7_5ec2_e75e_u128;
        let shown = format!("{:?}", Builder::new(0, 2, root).unique_id(secret));
        assert!(!shown.contains("5ec2e75e") && !shown.contains(&secret.to_string()));
        assert!(shown.contains("<redacted>"), "{shown}");
        let e = Builder::new(0, 2, root)
            .unique_id(0)
            .build()
            .err()
            .expect("a zero secret");
        assert!(e.to_string().contains("zero"), "{e}");
    }

    /// Two ranks (threads) meet through a unique id: rank 0 on the listener the id
    /// reserved, rank 1 at its address; a rank given another id's secret is refused.
    #[test]
    fn ranks_meet_through_a_unique_id() {
        let id = UniqueId::new().expect("unique id");
        let sums: Vec<Result<Vec<u32>>> = std::thread::scope(|s| {
            let ranks: Vec<_> = (0..2)
                .map(|r| {
                    s.spawn(move || {
                        let mut comm = Builder::from_unique_id(&id, r, 2)?
                            .transport(TransportKind::Tcp)
                            .build()?;
                        let mut v = vec![r as u32 + 1; 4];
                        comm.all_reduce_in_place(&mut v, crate::ReduceOp::Sum)?;
                        Ok(v)
                    })
                })
                .collect();
            ranks.into_iter().map(|h| h.join().expect("rank")).collect()
        });
        for s in sums {
            assert_eq!(s.expect("rank"), vec![3; 4]);
        }
        let id = UniqueId::new().expect("unique id");
        let mut other = UniqueId::from_bytes(&id.to_bytes()).expect("copy");
        other.secret ^= 1;
        let results: Vec<Result<Communicator>> = std::thread::scope(|s| {
            let a = s.spawn(|| {
                Builder::from_unique_id(&id, 0, 2)?
                    .transport(TransportKind::Tcp)
                    .timeout(Duration::from_secs(2))
                    .build()
            });
            let b = s.spawn(|| {
                Builder::from_unique_id(&other, 1, 2)?
                    .transport(TransportKind::Tcp)
                    .timeout(Duration::from_secs(2))
                    .build()
            });
            vec![a.join().expect("0"), b.join().expect("1")]
        });
        assert!(
            results.iter().all(|r| r.is_err()),
            "a rank of another id joined"
        );
    }
}
