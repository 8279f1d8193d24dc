//! [`Communicator`]: one rank's handle on a group, and every collective it can call.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use rcoll_transport::{Rank, Transport, TransportError};

use crate::algorithm::Algorithm;
use crate::buffer::Buffer;
use crate::config::Config;
use crate::element::Element;
use crate::engine::core::{ExecError, Position};
use crate::engine::driver::{run, RunError};
use crate::engine::memory::Memory;
use crate::error::{Error, Result};
use crate::fingerprint::{explain, Call};
use crate::op::ReduceOp;
use crate::schedule::cost::CostModel;
use crate::schedule::plan::Plan;
use crate::schedule::{BufferLayout, Collective, Extent, Layout, Primitive, Schedule, Slice};
use crate::select::Selector;

/// Tags of point-to-point messages have this bit set in their sequence number, so that
/// they never collide with collectives (whose numbers stay below it).
const P2P_BIT: u32 = 1 << 31;

/// Collectives whose fingerprints a communicator remembers (see `recent`).
const RECENT_CALLS: usize = 8;

/// Plans kept per communicator before the cache starts over.
const PLAN_CACHE_LIMIT: usize = 256;

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
    transport: Box<dyn Transport>,
    rank: Rank,
    nranks: usize,
    config: Config,
    selector: Selector,
    seq: u32,
    p2p_sent: Vec<u32>,
    p2p_received: Vec<u32>,
    plans: HashMap<(Layout, Algorithm), Arc<Plan>>,
    scratch: Vec<u128>,
    next_algorithm: Option<Algorithm>,
    /// `(sequence, fingerprint)` of the last few collectives, to explain a stale message
    /// that arrives after its call has ended here.
    recent: [(u32, u32); RECENT_CALLS],
    poisoned: Option<String>,
    /// Where every rank runs (from the transport's bootstrap), if known.
    hosts: Option<Arc<rcoll_transport::hosts::HostMap>>,
    /// Rates inside a host: shared memory's when the transport shares it, else the
    /// network's.
    local_model: crate::schedule::cost::CostModel,
    /// How a process group was built, for [`split`](Communicator::split) (`None` for
    /// in-process groups and bare transports).
    pub(crate) origin: Option<crate::process::Builder>,
    /// Where this rank runs on its host (process groups).
    pub(crate) placement: Option<rcoll_transport::topology::Placement>,
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
        let rank = transport.rank();
        let nranks = transport.nranks();
        if nranks == 0 || rank.index() >= nranks {
            return Err(Error::Config(format!(
                "transport endpoint is rank {} of {nranks}",
                rank.0
            )));
        }
        let hosts = match transport.hosts().filter(|h| h.nranks() == nranks) {
            Some(h) => Some(Arc::new(config.network(&h)?)),
            None => None,
        };
        // Default rates follow the transport of each level (a model set by the caller
        // stays as it is).
        let mut config = config;
        let name = transport.name();
        if config.cost_model == CostModel::default() && name.ends_with("tcp") {
            config.cost_model = CostModel::tcp();
        }
        let local_model = if name.starts_with("shm") {
            CostModel::shared_memory()
        } else {
            config.cost_model
        };
        Ok(Communicator {
            hosts,
            local_model,
            transport,
            rank,
            nranks,
            config,
            selector: Selector::default(),
            seq: 0,
            p2p_sent: vec![0; nranks],
            p2p_received: vec![0; nranks],
            plans: HashMap::new(),
            scratch: Vec::new(),
            next_algorithm: None,
            recent: [(u32::MAX, 0); RECENT_CALLS],
            poisoned: None,
            origin: None,
            placement: None,
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
        self.transport.name()
    }

    /// What the transport runs on (for verbs: device, port, MTU and how slots are lent;
    /// empty for the others).
    pub fn transport_details(&self) -> String {
        self.transport.details()
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
        self.transport
            .alloc_registered(bytes)
            .map(Buffer::new)
            .map_err(|source| Error::Registration { bytes, source })
    }

    /// How many segments this communicator's transport sent zero-copy from registered
    /// memory ([`Communicator::alloc`]) so far.
    pub fn zero_copy_sends(&self) -> u64 {
        self.transport.zero_copy_sends()
    }

    /// Sends from this communicator's registered buffers that a device may still be
    /// reading: 0 whenever no call is running (a call returns, successfully or not, only
    /// once the device is done with the caller's memory).
    pub fn borrowed_in_flight(&self) -> usize {
        self.transport.borrowed_in_flight()
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

    /// Fails every pending and future call of every rank with an error naming this rank and
    /// `reason`, and makes this communicator unusable.
    pub fn abort(&mut self, reason: &str) {
        self.transport.abort(reason);
        self.poisoned
            .get_or_insert_with(|| format!("aborted: {reason}"));
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
        self.point_to_point(Some((buf, peer)), None::<(&mut [T], usize)>)
    }

    /// **Receive** into `buf` from `peer` (see [`Communicator::send`]).
    pub fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize) -> Result<()> {
        self.point_to_point(None::<(&[T], usize)>, Some((buf, peer)))
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
        self.point_to_point(Some((send, to)), Some((recv, from)))
    }

    fn call<T: Element>(
        &mut self,
        collective: Collective,
        count: usize,
        root: usize,
        op: ReduceOp,
        buffers: Buffers<'_, T>,
    ) -> Result<()> {
        self.execute(Request {
            collective,
            count,
            root,
            op,
            buffers,
        })
    }

    fn layout(&self, collective: Collective, count: usize, root: usize, in_place: bool) -> Layout {
        Layout {
            collective,
            nranks: self.nranks,
            count,
            root: Rank::from(root),
            in_place,
        }
    }

    fn block_count(&mut self, collective: Collective, len: usize) -> Result<usize> {
        if len % self.nranks == 0 {
            return Ok(len / self.nranks);
        }
        let expected = len.div_ceil(self.nranks) * self.nranks;
        let buffer = "in-place or send";
        Err(self.fail(Error::BufferLength {
            rank: self.rank.0,
            collective,
            buffer,
            expected,
            got: len,
        }))
    }

    /// Records `err` as fatal: aborts the group so that the other ranks fail too.
    fn fail(&mut self, err: Error) -> Error {
        if self.poisoned.is_none() {
            tracing::warn!(rank = self.rank.0, error = %err, "aborting the group");
            self.transport.abort(&err.to_string());
            self.poisoned = Some(err.to_string());
        }
        err
    }

    fn choose(
        &mut self,
        layout: &Layout,
        elem_size: usize,
        forced: Option<Algorithm>,
    ) -> Result<Algorithm> {
        if let Some(a) = forced {
            if !a.serves(layout.collective) {
                return Err(Error::UnsupportedAlgorithm {
                    rank: self.rank.0,
                    algorithm: a,
                    collective: layout.collective,
                });
            }
            return Ok(a);
        }
        match self.config.algorithm {
            Some(a) if a.serves(layout.collective) => Ok(a),
            _ => {
                let levels = self
                    .hosts
                    .as_deref()
                    .map(|hosts| crate::schedule::cost::Levels {
                        hosts,
                        local: self.local_model,
                    });
                Ok(self.selector.choose(
                    layout,
                    elem_size,
                    &self.config.cost_model,
                    levels.as_ref(),
                ))
            }
        }
    }

    fn validate<T: Element>(&self, req: &Request<'_, T>) -> Result<Layout> {
        let rank = self.rank.0;
        let collective = req.collective;
        if collective.is_rooted() && req.root >= self.nranks {
            return Err(Error::RootOutOfRange {
                rank,
                collective,
                root: req.root,
                nranks: self.nranks,
            });
        }
        if collective.reduces() && !T::DTYPE.supports(req.op) {
            return Err(Error::UnsupportedOp {
                rank,
                collective,
                op: req.op,
                dtype: T::DTYPE,
            });
        }
        if req
            .count
            .checked_mul(self.nranks)
            .is_none_or(|b| b.checked_mul(std::mem::size_of::<T>()).is_none())
        {
            return Err(Error::CountOverflow {
                rank,
                collective,
                count: req.count,
                nranks: self.nranks,
            });
        }
        let in_place = matches!(req.buffers, Buffers::InPlace(_));
        let layout = self.layout(collective, req.count, req.root, in_place);
        let expect = layout.buffers(self.rank);
        let check = |buffer: &'static str, expected: usize, got: usize| {
            if expected == got {
                Ok(())
            } else {
                Err(Error::BufferLength {
                    rank,
                    collective,
                    buffer,
                    expected,
                    got,
                })
            }
        };
        match &req.buffers {
            Buffers::InPlace(buf) => check("in-place", expect.storage_len, buf.len())?,
            Buffers::Separate(send, recv) => {
                // Zero-length extents are the insignificant buffers: ignored.
                if expect.input.len > 0 || collective == Collective::AllReduce {
                    check("send", expect.input.len, send.len())?;
                }
                if expect.output.len > 0 || collective == Collective::AllReduce {
                    check("recv", expect.output.len, recv.len())?;
                }
            }
        }
        Ok(layout)
    }

    fn plan(&mut self, layout: &Layout, algorithm: Algorithm) -> Result<Arc<Plan>> {
        if let Some(p) = self.plans.get(&(*layout, algorithm)) {
            return Ok(Arc::clone(p));
        }
        let rank = self.rank.0;
        let schedule = algorithm
            .schedule_on(layout, self.rank, self.hosts.as_deref())
            .map_err(|e| Error::Internal {
                rank,
                what: e.to_string(),
            })?;
        let plan =
            Plan::new(&schedule, &layout.buffers(self.rank)).map_err(|e| Error::Internal {
                rank,
                what: format!("{algorithm} schedule: {}", e.reason),
            })?;
        let plan = Arc::new(plan);
        if self.plans.len() >= PLAN_CACHE_LIMIT {
            self.plans.clear();
        }
        self.plans.insert((*layout, algorithm), Arc::clone(&plan));
        Ok(plan)
    }

    fn execute<T: Element>(&mut self, req: Request<'_, T>) -> Result<()> {
        let forced = self.next_algorithm.take();
        if let Some(first) = &self.poisoned {
            return Err(Error::Poisoned {
                rank: self.rank.0,
                first: first.clone(),
            });
        }
        let layout = match self.validate(&req) {
            Ok(l) => l,
            Err(e) => return Err(self.fail(e)),
        };
        let elem = std::mem::size_of::<T>();
        let algorithm = match self.choose(&layout, elem, forced) {
            Ok(a) => a,
            Err(e) => return Err(self.fail(e)),
        };
        let plan = match self.plan(&layout, algorithm) {
            Ok(p) => p,
            Err(e) => return Err(self.fail(e)),
        };
        let seq = self.seq;
        self.seq = (self.seq + 1) & !P2P_BIT;
        tracing::debug!(
            rank = self.rank.0,
            collective = %req.collective,
            seq,
            count = req.count,
            dtype = %T::DTYPE,
            algorithm = %algorithm,
            transport = self.transport.name(),
            "call"
        );
        let expect = layout.buffers(self.rank);
        let (input, output): (&[T], &mut [T]) = match req.buffers {
            Buffers::InPlace(buf) => (&[], buf),
            Buffers::Separate(send, recv) => {
                let send = if expect.input.len > 0 { send } else { &[] };
                let recv = if expect.output.len > 0 { recv } else { &mut [] };
                (send, recv)
            }
        };
        let scratch_len = plan.scratch_len;
        let words = (scratch_len * elem).div_ceil(16);
        // Lent out for the call: the engine borrows it while `run_plan` borrows `self`.
        let mut scratch_words = std::mem::take(&mut self.scratch);
        if scratch_words.len() < words {
            scratch_words.resize(words, 0);
        }
        let scratch: &mut [T] = bytemuck::cast_slice_mut(&mut scratch_words[..words]);
        let mut mem = Memory {
            input,
            output,
            scratch: &mut scratch[..scratch_len],
        };
        let longest = mem.input.len().max(mem.output.len()).max(scratch_len);
        let call = Call {
            collective: req.collective,
            dtype: T::DTYPE,
            op: req.op,
            algorithm: Some(algorithm),
            count: req.count,
            root: if req.collective.is_rooted() {
                req.root
            } else {
                0
            },
            segment_elems: 0,
        };
        let result = self.run_plan(&plan, seq, call, &mut mem, longest);
        if result.is_ok() && req.op == ReduceOp::Avg && req.collective.reduces() {
            let out = expect.output;
            if let Some(reduced) = mem.output.get_mut(out.offset..out.end()) {
                T::average(reduced, self.nranks);
            }
        }
        self.scratch = scratch_words;
        result
    }

    fn point_to_point<T: Element>(
        &mut self,
        send: Option<(&[T], usize)>,
        recv: Option<(&mut [T], usize)>,
    ) -> Result<()> {
        self.next_algorithm = None;
        if let Some(first) = &self.poisoned {
            return Err(Error::Poisoned {
                rank: self.rank.0,
                first: first.clone(),
            });
        }
        let (rank, nranks) = (self.rank.0, self.nranks);
        for (what, peer) in [
            ("send", send.as_ref().map(|s| s.1)),
            ("recv", recv.as_ref().map(|r| r.1)),
        ] {
            if let Some(peer) = peer.filter(|&p| p >= nranks || p == self.rank()) {
                return Err(self.fail(Error::PeerOutOfRange {
                    rank,
                    what,
                    peer,
                    nranks,
                }));
            }
        }
        // One step with a Send and/or a Recv. Point-to-point messages carry the reserved
        // sequence number P2P_BIT and are numbered per peer and direction, so they match in
        // call order and never collide with collectives.
        let layout = Layout {
            collective: Collective::SendRecv,
            nranks,
            count: 0,
            root: self.rank,
            in_place: false,
        };
        let mut schedule = Schedule::new(layout, self.rank);
        let input: &[T] = match send {
            Some((buf, to)) => {
                schedule.push(
                    0,
                    Primitive::Send {
                        to: vec![Rank::from(to)],
                        src: Slice::input(0, buf.len()),
                    },
                );
                buf
            }
            None => &[],
        };
        let output: &mut [T] = match recv {
            Some((buf, from)) => {
                schedule.push(
                    0,
                    Primitive::Recv {
                        from: Rank::from(from),
                        dst: Slice::output(0, buf.len()),
                    },
                );
                buf
            }
            None => &mut [],
        };
        let buffers = BufferLayout {
            input: Extent::new(0, input.len()),
            output: Extent::new(0, output.len()),
            storage_len: 0,
            in_place: false,
        };
        let mut plan = match Plan::new(&schedule, &buffers) {
            Ok(plan) => plan,
            Err(e) => {
                return Err(self.fail(Error::Internal {
                    rank,
                    what: e.reason,
                }))
            }
        };
        for p in plan.channels.iter_mut().flat_map(|c| c.ops.iter_mut()) {
            if let Some(&to) = p.prim.send_to().first() {
                p.send_transfers = vec![self.p2p_sent[to.index()]];
                self.p2p_sent[to.index()] = self.p2p_sent[to.index()].wrapping_add(1);
            }
            if let Some(from) = p.prim.recv_from() {
                p.recv_transfer = Some(self.p2p_received[from.index()]);
                self.p2p_received[from.index()] = self.p2p_received[from.index()].wrapping_add(1);
            }
        }
        let mut mem = Memory {
            input,
            output,
            scratch: &mut [],
        };
        let longest = mem.input.len().max(mem.output.len());
        // Lengths are checked per message; the two directions of a send_recv may differ.
        let call = Call {
            collective: Collective::SendRecv,
            dtype: T::DTYPE,
            op: ReduceOp::Sum,
            algorithm: None,
            count: 0,
            root: 0,
            segment_elems: 0,
        };
        self.run_plan(&plan, P2P_BIT, call, &mut mem, longest)
    }

    /// Runs `plan` on `mem` for `call` and turns a failure into an [`Error`] that aborts
    /// the group. `longest` bounds the length of a transfer.
    fn run_plan<T: Element>(
        &mut self,
        plan: &Plan,
        seq: u32,
        mut call: Call,
        mem: &mut Memory<'_, T>,
        longest: usize,
    ) -> Result<()> {
        let rank = self.rank.0;
        call.segment_elems = (self.config.segment_bytes / std::mem::size_of::<T>()).max(1);
        // Segment indices travel as u32 in tags.
        if longest.div_ceil(call.segment_elems) > u32::MAX as usize {
            let (collective, count, nranks) = (call.collective, longest, self.nranks);
            return Err(self.fail(Error::CountOverflow {
                rank,
                collective,
                count,
                nranks,
            }));
        }
        let timeout = self.config.timeout;
        let io = self.transport.as_mut();
        run(
            plan,
            seq,
            call.fingerprint(),
            call.segment_elems,
            call.op,
            mem,
            io,
            timeout,
        )
        .map_err(|e| {
            let err = self.describe(e, call.collective, seq, call.algorithm);
            self.fail(err)
        })?;
        // A message of this (or an earlier) collective that nobody took: its sender ran a
        // different call, which this rank's part did not need to notice (another root).
        if seq & P2P_BIT == 0 {
            self.recent[seq as usize % RECENT_CALLS] = (seq, call.fingerprint());
            if let Some((peer, tag)) = self.transport.stale(seq) {
                let old = tag.collective;
                let ours = self.recent.iter().find(|(s, _)| *s == old).map(|(_, f)| *f);
                let what = match ours {
                    Some(f) => format!(
                        "it sent collective #{old} a message this rank's call did not expect ({})",
                        explain(f, tag.schedule)
                    ),
                    None => format!(
                        "it sent a message for collective #{old} that no call here expected"
                    ),
                };
                let (peer, collective) = (peer.0, call.collective);
                let err = Error::Mismatch {
                    rank,
                    peer,
                    collective,
                    seq,
                    what,
                };
                return Err(self.fail(err));
            }
        }
        Ok(())
    }

    fn describe(
        &self,
        e: RunError,
        collective: Collective,
        seq: u32,
        algorithm: Option<Algorithm>,
    ) -> Error {
        let rank = self.rank.0;
        let algorithm = algorithm.map_or_else(|| "p2p".to_owned(), |a| a.to_string());
        // Point-to-point calls share one reserved sequence number; show none.
        let seq = if seq == P2P_BIT { 0 } else { seq };
        let transport = |at: Option<Position>, source| {
            let at = at.unwrap_or_else(|| Position {
                channel: 0,
                step: 0,
                primitive: String::new(),
            });
            Error::Transport {
                rank,
                collective,
                seq,
                algorithm: algorithm.clone(),
                channel: at.channel,
                step: at.step,
                primitive: at.primitive,
                source,
            }
        };
        match e {
            RunError::Exec(ExecError::Transport(
                _,
                TransportError::ScheduleMismatch {
                    peer,
                    expected,
                    got,
                    ..
                },
            )) => Error::Mismatch {
                rank,
                peer: peer.0,
                collective,
                seq,
                what: explain(expected, got),
            },
            RunError::Exec(ExecError::Transport(at, source)) => transport(Some(at), source),
            RunError::Wait(blocked_on, source) => transport(blocked_on.map(|(_, at)| at), source),
            RunError::Exec(ExecError::Memory(at, loc)) => Error::Internal {
                rank,
                what: format!(
                    "{algorithm} channel {} step {} {}: buffers do not match the plan at {:?}",
                    at.channel, at.step, at.primitive, loc.0
                ),
            },
            RunError::Exec(ExecError::InconsistentPlan(at)) => Error::Internal {
                rank,
                what: format!(
                    "{algorithm} channel {} step {} {}: inconsistent plan",
                    at.channel, at.step, at.primitive
                ),
            },
            RunError::Stalled {
                waited,
                blocked_on,
                unresponsive,
                transport: state,
            } => Error::Timeout {
                transport: state,
                unresponsive: unresponsive.iter().map(|r| r.0).collect(),
                rank,
                collective,
                seq,
                algorithm: algorithm.clone(),
                peer: blocked_on.as_ref().map(|(p, _)| p.0),
                waiting_for: match blocked_on {
                    Some((peer, at)) => format!(
                        "rank {} (channel {} step {}: {})",
                        peer.0, at.channel, at.step, at.primitive
                    ),
                    None => "nothing identifiable".into(),
                },
                waited,
            },
        }
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
