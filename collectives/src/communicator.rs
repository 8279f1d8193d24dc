//! [`Communicator`]: one rank's handle on a group, and every collective it can call.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use rcoll_transport::{Rank, Transport};

use crate::algorithm::hierarchical::LevelAlgorithms;
use crate::algorithm::Algorithm;
use crate::buffer::{Buffer, MemoryRegistration, RegisteredSlice};
use crate::config::Config;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::op::ReduceOp;
use crate::schedule::cost::CostModel;
use crate::schedule::Collective;
use crate::select::Selector;

mod execute;
mod trials;

/// Tags of point-to-point messages have this bit set in their sequence number, so that
/// they never collide with collectives (whose numbers stay below it).
pub(crate) const P2P_BIT: u32 = 1 << 31;

/// Collectives whose fingerprints a communicator remembers (see `recent`).
const RECENT_CALLS: usize = 8;

/// How to build a sibling process group the way this one was built (every setting: the
/// transport, interface, timeouts, overrides), for [`split`](Communicator::split): the
/// process layer's builder, behind a function so that the communicator needs no process
/// layer of its own.
#[derive(Clone)]
pub(crate) struct Origin {
    /// The address the other ranks reach this rank at.
    pub(crate) ip: std::net::IpAddr,
    /// Rank `rank` of `size` of a new group meeting at `root` with the secret `id`.
    pub(crate) form: Arc<FormGroup>,
}

pub(crate) type FormGroup =
    dyn Fn(usize, usize, std::net::SocketAddr, u128) -> Result<Communicator> + Send + Sync;

/// How a shrunk communicator came from its parent ([`Communicator::shrunk`]): the same on
/// every member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shrunk {
    /// The parent's ranks left out (failed, or excluded by the callers), ascending.
    pub excluded: Vec<usize>,
    /// `parent_ranks[i]`: this communicator's rank `i` in the parent.
    pub parent_ranks: Vec<usize>,
}

/// One rank's endpoint of a group of `size()` ranks.
///
/// Every rank of the group must call the same collectives in the same order with matching
/// arguments (count, element type, operation, root); a disagreement that the transport can
/// see (a message of the wrong length) is an error on the ranks that see it, and they abort
/// the group. Calls block until this rank's part is done, or fail after
/// [`Config::timeout`] without progress.
///
/// Buffer lengths are in elements. "Insignificant" buffers (the send buffer of a broadcast
/// on a non-root rank, the receive buffer of a reduce or gather on a non-root rank) are
/// ignored whatever their length, so SPMD code can pass the same buffers everywhere.
pub struct Communicator {
    pub(crate) transport: Box<dyn Transport>,
    pub(crate) rank: Rank,
    pub(crate) nranks: usize,
    pub(crate) config: Config,
    selector: Selector,
    /// Selection by trial (`RCOLL_AUTOTUNE`), if on.
    tuner: Option<crate::autotune::Tuner>,
    pub(crate) seq: u32,
    p2p_sent: Vec<u32>,
    p2p_received: Vec<u32>,
    scratch: Vec<u128>,
    /// What the last few collective calls of different arguments derived from them, the
    /// last call's first ([`execute::PREPARED_CALLS`]). Boxed: each call takes its entry
    /// out and puts it back first, moving pointers, not the whole.
    #[allow(clippy::vec_box)]
    prepared: Vec<Box<execute::Prepared>>,
    /// The engine's per-channel state, kept between calls.
    spare: crate::engine::driver::Spare,
    /// The last point-to-point call's description and fingerprint.
    last_fingerprint: Option<(crate::fingerprint::Call, u32)>,
    next_algorithm: Option<Algorithm>,
    /// `(sequence, fingerprint)` of the last few collectives, to explain a stale message
    /// that arrives after its call has ended here.
    recent: [(u32, u32); RECENT_CALLS],
    pub(crate) poisoned: Option<String>,
    /// Raised from any thread to end the call running here ([`Communicator::abort_handle`]).
    pub(crate) abort: crate::abort::AbortHandle,
    /// Where every rank runs (from the transport's bootstrap), if known.
    hosts: Option<Arc<rcoll_transport::hosts::HostMap>>,
    /// Rates inside a host: shared memory's when the transport shares it, else the
    /// network's.
    local_model: crate::schedule::cost::CostModel,
    /// Whether pricing lets the receivers of a fan-out inside a host do its copying, in
    /// parallel (shared memory): with single copy each reads the sender's memory; through
    /// the rings the sender's copies into them are cheap (from cache, at memcpy's rate;
    /// measured: 4-rank broadcast is fastest on mesh either way, and a fan-out priced at
    /// the sender made auto take the ring, 1.15-3x slower from 32 KiB to 16 MiB). Every
    /// rank assumes the same, whatever its own pairs could set up.
    local_reads: bool,
    /// The transport name tuning rules are looked up by, the same on every rank.
    tuning_key: &'static str,
    /// How a process group was built, for [`split`](Communicator::split) (`None` for
    /// in-process groups and bare transports).
    pub(crate) origin: Option<Origin>,
    /// Where this rank runs on its host (process groups).
    pub(crate) placement: Option<rcoll_transport::topology::Placement>,
    /// The sequence number of point-to-point messages: [`P2P_BIT`] and the transport's
    /// epoch, so that a shrunk group's never match its parent's.
    pub(crate) p2p_seq: u32,
    /// Peers that this rank's failed calls found dead or silent: its suspects when the
    /// survivors agree ([`Communicator::shrink`]).
    pub(crate) failed_peers: Vec<usize>,
    /// How this communicator came from its parent, if a shrink made it.
    pub(crate) shrunk: Option<Shrunk>,
}

enum Buffers<'a, T> {
    Separate(&'a [T], &'a mut [T]),
    InPlace(&'a mut [T]),
}

struct Request<'a, T> {
    collective: Collective,
    count: usize,
    root: usize,
    op: ReduceOp,
    buffers: Buffers<'a, T>,
}

impl Communicator {
    /// Wraps a connected transport endpoint.
    pub fn new(transport: Box<dyn Transport>, config: Config) -> Result<Communicator> {
        let rank = transport.endpoint().rank;
        let nranks = transport.endpoint().nranks;
        if nranks == 0 || rank.index() >= nranks {
            return Err(Error::Config(format!(
                "transport endpoint is rank {} of {nranks}",
                rank.0
            )));
        }
        let hosts = match transport
            .endpoint()
            .hosts
            .clone()
            .filter(|h| h.nranks() == nranks)
        {
            Some(h) => Some(Arc::new(with_machine_cpus(config.network(&h)?, rank)?)),
            None => None,
        };
        // Default rates follow the transport of each level, measured ones
        // (`RCOLL_TUNING_FILE`) first (a model set by the caller stays as it is).
        let mut config = config;
        let name = transport.endpoint().name;
        let across = name.rsplit('+').next().unwrap_or(name);
        // What every rank agrees on: on one host, the transport (all ranks' is the same);
        // across hosts, the network's (a rank alone on its host has no shared memory,
        // its peers `shm+...`).
        let tuning_key = match &hosts {
            Some(h) if h.nhosts() > 1 => across,
            _ => name,
        };
        let measured = |kind: &str| config.tuning.as_ref().and_then(|t| t.model(kind));
        if config.cost_model == CostModel::default() {
            if let Some(m) = measured(across) {
                config.cost_model = m;
            } else if across == "tcp" {
                config.cost_model = CostModel::tcp();
            }
        }
        let local_reads = name.starts_with("shm") || config.shared_memory_inside_hosts;
        let local_model = if local_reads {
            measured("shm").unwrap_or_else(CostModel::shared_memory)
        } else if config.cost_model == CostModel::tcp() {
            // TCP between ranks of one host is loopback, not a network.
            CostModel::tcp_loopback()
        } else {
            config.cost_model
        };
        let tuner = (config.autotune > 0).then(|| crate::autotune::Tuner::new(config.autotune));
        Ok(Communicator {
            hosts,
            local_model,
            local_reads,
            tuning_key,
            transport,
            rank,
            nranks,
            config,
            selector: Selector::default(),
            tuner,
            seq: 0,
            p2p_sent: vec![0; nranks],
            p2p_received: vec![0; nranks],
            scratch: Vec::new(),
            spare: Default::default(),
            last_fingerprint: None,
            prepared: Vec::new(),
            next_algorithm: None,
            recent: [(u32::MAX, 0); RECENT_CALLS],
            poisoned: None,
            abort: Default::default(),
            origin: None,
            placement: None,
            p2p_seq: P2P_BIT,
            failed_peers: Vec::new(),
            shrunk: None,
        })
    }

    /// Where this rank runs on its host — NUMA node, CPUs, device — and what was not ideal
    /// (process groups).
    pub fn placement(&self) -> Option<&rcoll_transport::topology::Placement> {
        self.placement.as_ref()
    }

    /// Checks that every rank orders its rings alike: they must, and they could differ
    /// only by settings read on each rank (`RCOLL_NET_FILE`, `RCOLL_RING_ORDER`).
    pub(crate) fn check_network(&mut self) -> Result<()> {
        let configured = self.config.net_file.is_some()
            || self.config.ring_order != crate::config::RingOrder::Topology;
        let Some(order) = self.hosts.as_ref().map(|h| h.ring_order().to_vec()) else {
            return Ok(());
        };
        if !configured || self.nranks < 2 {
            return Ok(());
        }
        // FNV-1a over the order.
        let mine = order.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, r| {
            (h ^ u64::from(r.0)).wrapping_mul(0x0100_0000_01b3)
        });
        let mut all = vec![0u64; self.nranks];
        self.all_gather(&[mine], &mut all)?;
        match all.iter().position(|&x| x != all[0]) {
            None => Ok(()),
            Some(r) => Err(Error::Config(format!(
                "rank {}: rank {r} orders its rings unlike rank 0: RCOLL_NET_FILE (the same \
                 content) and RCOLL_RING_ORDER must be the same on every rank",
                self.rank.0
            ))),
        }
    }

    /// Where every rank runs, when the transport learnt it at bootstrap (process groups).
    pub fn hosts(&self) -> Option<&rcoll_transport::hosts::HostMap> {
        self.hosts.as_deref()
    }

    /// This rank, `0..size()`.
    pub fn rank(&self) -> usize {
        self.rank.index()
    }

    /// Number of ranks in the group.
    pub fn size(&self) -> usize {
        self.nranks
    }

    /// The transport's name (`"local"`, `"tcp"`, `"verbs"`).
    pub fn transport_name(&self) -> &'static str {
        self.transport.endpoint().name
    }

    /// What the transport runs on (for verbs: device, port, MTU and how slots are lent;
    /// empty for the others).
    pub fn transport_details(&self) -> String {
        self.transport.endpoint().details.clone()
    }

    /// `len` zeroed elements of memory registered with the transport (see [`Buffer`]):
    /// collectives that send from it go zero-copy on the verbs transport, and it is
    /// registered once however many collectives use it. Ordinary memory on the other
    /// transports. Like NCCL's `ncclMemAlloc` / MPI's `MPI_Alloc_mem`.
    pub fn alloc<T: Element>(&mut self, len: usize) -> Result<Buffer<T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::Config(format!(
                "{len} elements overflow the address space"
            )))?;
        rcoll_transport::Registered::alloc(self.transport.as_mut(), bytes)
            .map(Buffer::new)
            .map_err(|source| Error::Registration { bytes, source })
    }

    /// Registers the caller's `memory` with the transport, as [`Communicator::alloc`]'s
    /// memory is: while the returned guard lives, collectives sending from it go zero-copy
    /// on the verbs transport; dropping it deregisters. The guard holds `memory`
    /// borrowed and dereferences to it. Like NCCL's `ncclCommRegister`.
    pub fn register<'a, T: Element>(
        &mut self,
        memory: &'a mut [T],
    ) -> Result<RegisteredSlice<'a, T>> {
        let registration = self.register_bytes(bytemuck::cast_slice_mut(memory))?;
        Ok(RegisteredSlice::new(memory, registration))
    }

    /// Registers `memory` with the transport for as long as the returned registration
    /// lives, which does not hold the memory: the caller must drop it before the memory
    /// is freed, moved or reused (see [`MemoryRegistration`]). For memory rcoll cannot
    /// borrow, such as a C caller's (`rcollCommRegister`); Rust code has
    /// [`Communicator::register`].
    pub fn register_bytes(&mut self, memory: &mut [u8]) -> Result<MemoryRegistration> {
        let bytes = memory.len();
        self.transport
            .register(memory)
            .map(MemoryRegistration::new)
            .map_err(|source| Error::Registration { bytes, source })
    }

    /// What this communicator's transport has done and holds
    /// ([`rcoll_transport::Statistics`]): segments sent zero-copy from the caller's memory
    /// (registered memory, [`Communicator::alloc`], over verbs; read by the receiving rank
    /// over shared memory), segments peers' devices wrote straight into this rank's
    /// registered destinations, caller memory a device may still touch (0 whenever no
    /// call is running: a call returns, successfully or not, only once no device touches
    /// it any more), and the transport's buffer pool.
    pub fn statistics(&self) -> rcoll_transport::Statistics {
        self.transport.statistics()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Forces `algorithm` for the next collective called through the returned handle:
    /// `comm.with_algorithm(Algorithm::Ring).all_reduce(&x, &mut y, ReduceOp::Sum)`.
    /// That call fails with [`Error::UnsupportedAlgorithm`] if the algorithm does not
    /// implement the collective.
    pub fn with_algorithm(&mut self, algorithm: Algorithm) -> WithAlgorithm<'_> {
        self.next_algorithm = Some(algorithm);
        WithAlgorithm { comm: self }
    }

    /// The algorithm the next call of `collective` with `count` elements of `T` (per the
    /// collective's count convention) would use, in place or not.
    pub fn algorithm_for<T: Element>(
        &mut self,
        collective: Collective,
        count: usize,
        root: usize,
        in_place: bool,
    ) -> Algorithm {
        let layout = self.layout(collective, count, root, in_place);
        self.choose(&layout, std::mem::size_of::<T>(), None)
            .unwrap_or(Algorithm::Ring)
    }

    /// Whether selection by trial (`RCOLL_AUTOTUNE`, [`crate::autotune`]) chooses for calls
    /// of `collective` with `count` elements of `T` (it is on, nothing is forced, the call
    /// moves something, and there are two ranks or more).
    pub fn autotunes<T: Element>(&self, collective: Collective, count: usize) -> bool {
        let layout = self.layout(collective, count, 0, false);
        self.tune_key(&layout, std::mem::size_of::<T>(), None)
            .is_some()
    }

    /// The algorithm selection by trial (`RCOLL_AUTOTUNE`, [`crate::autotune`]) settled on
    /// for calls like [`Communicator::algorithm_for`]'s, once the ranks agreed on it;
    /// `None` before, or when it is off or not deciding (an algorithm forced).
    pub fn autotuned<T: Element>(
        &self,
        collective: Collective,
        count: usize,
        root: usize,
    ) -> Option<Algorithm> {
        let layout = self.layout(collective, count, root, false);
        let key = self.tune_key(&layout, std::mem::size_of::<T>(), None)?;
        self.tuner.as_ref()?.settled(&key)
    }

    /// The algorithms the hierarchical schedule runs its two levels with, inside hosts and
    /// across them, for a call like [`Communicator::algorithm_for`]'s: forced by
    /// `RCOLL_LEVEL_ALGO`, else each level priced with its own rates. `None` when the
    /// ranks do not form two levels (one host, or one rank per host).
    pub fn level_algorithms_for<T: Element>(
        &mut self,
        collective: Collective,
        count: usize,
        root: usize,
        in_place: bool,
    ) -> Option<LevelAlgorithms> {
        let layout = self.layout(collective, count, root, in_place);
        self.levels_for(&layout, std::mem::size_of::<T>())
    }

    /// Fails every pending and future call of every rank with an error naming this rank and
    /// `reason`, and makes this communicator unusable.
    pub fn abort(&mut self, reason: &str) {
        self.abort.abort(reason);
        self.apply_abort();
    }

    /// A handle that aborts this communicator from any thread, also while a call runs on
    /// it: the call ends within [`ABORT_POLL`](crate::abort::ABORT_POLL) with an error
    /// naming this rank, and the other ranks' calls fail naming it too (see
    /// [`abort`](crate::abort)).
    pub fn abort_handle(&self) -> crate::abort::AbortHandle {
        self.abort.clone()
    }

    /// Carries out an abort raised through the handle: the group's transport fails every
    /// rank's calls, and this communicator is unusable. Once only.
    pub(crate) fn apply_abort(&mut self) {
        if self.poisoned.is_some() {
            return;
        }
        if let Some(reason) = self.abort.reason() {
            self.transport.abort(&reason);
            self.poisoned = Some(format!("aborted: {reason}"));
        }
    }

    /// **AllReduce**: every rank's `recv` becomes the element-wise reduction of all ranks'
    /// `send`. `send.len() == recv.len()`.
    pub fn all_reduce<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let count = send.len();
        self.call(
            Collective::AllReduce,
            count,
            0,
            op,
            Buffers::Separate(send, recv),
        )
    }

    /// AllReduce in place: `buf` is both input and output.
    pub fn all_reduce_in_place<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let count = buf.len();
        self.call(Collective::AllReduce, count, 0, op, Buffers::InPlace(buf))
    }

    /// **Reduce**: the root's `recv` becomes the reduction of all ranks' `send`.
    /// `recv.len() == send.len()` on the root; `recv` is ignored elsewhere.
    pub fn reduce<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let count = send.len();
        self.call(
            Collective::Reduce,
            count,
            root,
            op,
            Buffers::Separate(send, recv),
        )
    }

    /// Reduce in place: the root's `buf` is replaced by the reduction; other ranks' `buf`
    /// is their input and is left unchanged.
    pub fn reduce_in_place<T: Element>(
        &mut self,
        buf: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let count = buf.len();
        self.call(Collective::Reduce, count, root, op, Buffers::InPlace(buf))
    }

    /// **Broadcast**: every rank's `recv` becomes the root's `send`. `send.len() ==
    /// recv.len()` on the root; `send` is ignored elsewhere.
    pub fn broadcast<T: Element>(&mut self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        let count = recv.len();
        self.call(
            Collective::Broadcast,
            count,
            root,
            ReduceOp::Sum,
            Buffers::Separate(send, recv),
        )
    }

    /// Broadcast in place: the root's `buf` is sent; every other rank's `buf` receives it.
    pub fn broadcast_in_place<T: Element>(&mut self, buf: &mut [T], root: usize) -> Result<()> {
        let count = buf.len();
        self.call(
            Collective::Broadcast,
            count,
            root,
            ReduceOp::Sum,
            Buffers::InPlace(buf),
        )
    }

    /// **AllGather**: every rank's `recv` becomes all ranks' `send` concatenated in rank
    /// order. `recv.len() == size() * send.len()`.
    pub fn all_gather<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<()> {
        let count = send.len();
        self.call(
            Collective::AllGather,
            count,
            0,
            ReduceOp::Sum,
            Buffers::Separate(send, recv),
        )
    }

    /// AllGather in place: `buf.len() == size() * count`, and rank r's contribution is
    /// already at `buf[r * count..(r + 1) * count]`.
    pub fn all_gather_in_place<T: Element>(&mut self, buf: &mut [T]) -> Result<()> {
        let count = self.block_count(Collective::AllGather, buf.len())?;
        self.call(
            Collective::AllGather,
            count,
            0,
            ReduceOp::Sum,
            Buffers::InPlace(buf),
        )
    }

    /// **ReduceScatter**: rank r's `recv` becomes block r of the reduction of all ranks'
    /// `send`. `send.len() == size() * recv.len()`.
    pub fn reduce_scatter<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let count = recv.len();
        self.call(
            Collective::ReduceScatter,
            count,
            0,
            op,
            Buffers::Separate(send, recv),
        )
    }

    /// ReduceScatter in place: `buf.len() == size() * count`; rank r's result lands in
    /// `buf[r * count..(r + 1) * count]` and the rest of `buf` is left unchanged.
    pub fn reduce_scatter_in_place<T: Element>(
        &mut self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let count = self.block_count(Collective::ReduceScatter, buf.len())?;
        self.call(
            Collective::ReduceScatter,
            count,
            0,
            op,
            Buffers::InPlace(buf),
        )
    }

    /// **Gather**: the root's `recv` becomes all ranks' `send` concatenated in rank order.
    /// `recv.len() == size() * send.len()` on the root; `recv` is ignored elsewhere.
    pub fn gather<T: Element>(&mut self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        let count = send.len();
        self.call(
            Collective::Gather,
            count,
            root,
            ReduceOp::Sum,
            Buffers::Separate(send, recv),
        )
    }

    /// Gather in place: on the root `buf.len() == size() * count` with the root's own block
    /// already in place; on other ranks `buf` is the `count`-element contribution.
    pub fn gather_in_place<T: Element>(&mut self, buf: &mut [T], root: usize) -> Result<()> {
        let count = if root == self.rank() {
            self.block_count(Collective::Gather, buf.len())?
        } else {
            buf.len()
        };
        self.call(
            Collective::Gather,
            count,
            root,
            ReduceOp::Sum,
            Buffers::InPlace(buf),
        )
    }

    /// **Scatter**: rank r's `recv` becomes block r of the root's `send`.
    /// `send.len() == size() * recv.len()` on the root; `send` is ignored elsewhere.
    pub fn scatter<T: Element>(&mut self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        let count = recv.len();
        self.call(
            Collective::Scatter,
            count,
            root,
            ReduceOp::Sum,
            Buffers::Separate(send, recv),
        )
    }

    /// Scatter in place: on the root `buf.len() == size() * count` and its own block stays
    /// in place; on other ranks `buf` is the `count`-element destination.
    pub fn scatter_in_place<T: Element>(&mut self, buf: &mut [T], root: usize) -> Result<()> {
        let count = if root == self.rank() {
            self.block_count(Collective::Scatter, buf.len())?
        } else {
            buf.len()
        };
        self.call(
            Collective::Scatter,
            count,
            root,
            ReduceOp::Sum,
            Buffers::InPlace(buf),
        )
    }

    /// **AllToAll**: block j of rank i's `send` becomes block i of rank j's `recv`.
    /// `send.len() == recv.len() == size() * count`.
    pub fn all_to_all<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<()> {
        let count = self.block_count(Collective::AllToAll, send.len())?;
        self.call(
            Collective::AllToAll,
            count,
            0,
            ReduceOp::Sum,
            Buffers::Separate(send, recv),
        )
    }

    /// AllToAll in place (`buf.len() == size() * count`; the input is staged in scratch).
    pub fn all_to_all_in_place<T: Element>(&mut self, buf: &mut [T]) -> Result<()> {
        let count = self.block_count(Collective::AllToAll, buf.len())?;
        self.call(
            Collective::AllToAll,
            count,
            0,
            ReduceOp::Sum,
            Buffers::InPlace(buf),
        )
    }

    /// **Barrier**: returns once every rank has entered it.
    pub fn barrier(&mut self) -> Result<()> {
        let mut none: [u8; 0] = [];
        self.call(
            Collective::Barrier,
            0,
            0,
            ReduceOp::Sum,
            Buffers::InPlace(&mut none),
        )
    }

    /// **Send** `buf` to `peer`, which must call [`Communicator::recv`] with the same
    /// length. Messages between a pair of ranks are matched in call order.
    pub fn send<T: Element>(&mut self, buf: &[T], peer: usize) -> Result<()> {
        self.point_to_point(buf, &[(peer, 0..buf.len())], &mut [], &[])
    }

    /// **Receive** into `buf` from `peer` (see [`Communicator::send`]).
    pub fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize) -> Result<()> {
        let all = 0..buf.len();
        self.point_to_point(&[], &[], buf, &[(peer, all)])
    }

    /// Sends `send` to `to` and receives `recv` from `from` at the same time (no deadlock
    /// when every rank does it, as in a ring shift).
    pub fn send_recv<T: Element>(
        &mut self,
        send: &[T],
        to: usize,
        recv: &mut [T],
        from: usize,
    ) -> Result<()> {
        let (sent, received) = (0..send.len(), 0..recv.len());
        self.point_to_point(send, &[(to, sent)], recv, &[(from, received)])
    }

    /// **Exchange**: a group of sends and receives, all in flight at once, as NCCL's
    /// `ncclGroupStart` ... `ncclGroupEnd` around `ncclSend`/`ncclRecv` (torch's
    /// `batch_isend_irecv`). Each `(peer, range)` of `sends` sends `send[range]` to `peer`;
    /// each of `recvs` receives from `peer` into `recv[range]` (the ranges of `recvs`
    /// must not overlap). The order within the lists never deadlocks — every rank may list
    /// its receives first — and messages between a pair match in order, as with
    /// [`Communicator::send`]: after the pair's earlier messages, in list order. A rank
    /// takes part only with its peers: ranks not named wait for nothing.
    pub fn exchange<T: Element>(
        &mut self,
        send: &[T],
        sends: &[(usize, std::ops::Range<usize>)],
        recv: &mut [T],
        recvs: &[(usize, std::ops::Range<usize>)],
    ) -> Result<()> {
        self.point_to_point(send, sends, recv, recvs)
    }
}

impl Drop for Communicator {
    /// An abort raised through a handle while no call ran reaches the other ranks now.
    fn drop(&mut self) {
        self.apply_abort();
    }
}

/// A communicator with an algorithm forced for the next call (see
/// [`Communicator::with_algorithm`]); dropping it without a call clears the choice.
pub struct WithAlgorithm<'c> {
    comm: &'c mut Communicator,
}

impl Deref for WithAlgorithm<'_> {
    type Target = Communicator;

    fn deref(&self) -> &Communicator {
        self.comm
    }
}

impl DerefMut for WithAlgorithm<'_> {
    fn deref_mut(&mut self) -> &mut Communicator {
        self.comm
    }
}

impl Drop for WithAlgorithm<'_> {
    fn drop(&mut self) {
        self.comm.next_algorithm = None;
    }
}

/// `hosts` with its hosts' CPUs: as the transport's bootstrap gave them (every rank's
/// machine's, in the table every rank got), else, for a group on one host, this machine's
/// ([`machine_cpus`]: the same on every rank of a machine). Either way every rank prices
/// alike.
///
/// [`machine_cpus`]: rcoll_transport::topology::machine_cpus
fn with_machine_cpus(
    hosts: rcoll_transport::hosts::HostMap,
    rank: Rank,
) -> Result<rcoll_transport::hosts::HostMap> {
    let known = (0..hosts.nhosts()).any(|h| hosts.cpus(h).is_some());
    let hosts = if !known && hosts.nhosts() == 1 {
        let cpus = rcoll_transport::topology::machine_cpus().map_err(Error::Config)?;
        hosts.with_cpus(vec![cpus])
    } else {
        hosts
    };
    for h in 0..hosts.nhosts() {
        let ranks = hosts.members(h).len();
        if let Some(cpus) = hosts.cpus(h).filter(|&c| ranks > c) {
            tracing::info!(
                rank = rank.0,
                host = hosts.key(h),
                ranks,
                cpus,
                "more ranks than CPUs on a host: choices count their turns on the CPUs"
            );
        }
    }
    Ok(hosts)
}
