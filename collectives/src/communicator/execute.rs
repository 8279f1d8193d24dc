//! How a [`Communicator`] carries out a call: the arguments checked against the layout,
//! the algorithm chosen and its plan cached, the engine run, and a failure explained.

use std::ops::Range;
use std::sync::Arc;

use rcoll_transport::{Rank, TransportError};

use crate::algorithm::hierarchical::LevelAlgorithms;
use crate::algorithm::Algorithm;
use crate::autotune;
use crate::element::{DataType, Element};
use crate::engine::core::{ExecError, Position};
use crate::engine::driver::{run, RunError};
use crate::engine::memory::Memory;
use crate::error::{Error, Result};
use crate::fingerprint::{explain, Call};
use crate::op::ReduceOp;
use crate::schedule::plan::Plan;
use crate::schedule::{BufferLayout, Collective, Extent, Layout, Primitive, Schedule, Slice};
use crate::select;

use super::{Buffers, Communicator, Request, P2P_BIT, RECENT_CALLS};

/// What a collective call derives from besides its buffers: its layout, element type,
/// operation and forced algorithm.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct CallKey {
    layout: Layout,
    dtype: DataType,
    op: ReduceOp,
    forced: Option<Algorithm>,
}

/// Calls of different arguments whose preparation a communicator keeps, the most recent
/// first: the one cache of what calls derive (the checks, the algorithm and levels chosen,
/// the plan, the fingerprint). An application that takes turns between a few (gradient
/// buckets of several sizes, a loss scalar after the gradients, a barrier between steps)
/// prepares each once; `rcoll-bench --algo all` runs each algorithm and auto in turn at
/// a size (12 at most). Past it, the least recent is prepared anew when it comes back.
pub(super) const PREPARED_CALLS: usize = 64;

/// Everything a call derives from its [`CallKey`], checked, for the next calls with the
/// same one.
pub(super) struct Prepared {
    key: CallKey,
    /// The tuner's generation when this was prepared (0 without one): a settled bucket's
    /// choice kept here is stale once it moved ([`autotune::Tuner::generation`]).
    generation: u64,
    /// The layout of this rank's buffers.
    expect: BufferLayout,
    algorithm: Algorithm,
    /// The size bucket this call is a trial of (selection by trial, [`crate::autotune`]):
    /// such a call is timed, and reused for the next only within its block.
    trial: Option<autotune::Key>,
    plan: Arc<Plan>,
    /// The description the fingerprint is made of: algorithm, levels, segment length.
    call: Call,
    fingerprint: u32,
}

impl Communicator {
    pub(super) fn call<T: Element>(
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

    pub(super) fn layout(
        &self,
        collective: Collective,
        count: usize,
        root: usize,
        in_place: bool,
    ) -> Layout {
        Layout {
            collective,
            nranks: self.nranks,
            count,
            root: Rank::from(root),
            in_place,
        }
    }

    pub(super) fn block_count(&mut self, collective: Collective, len: usize) -> Result<usize> {
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
    pub(super) fn fail(&mut self, err: Error) -> Error {
        self.note_failed_peers(&err);
        if self.poisoned.is_none() {
            tracing::warn!(rank = self.rank.0, error = %err, "aborting the group");
            self.transport.abort(&err.to_string());
            self.poisoned = Some(err.to_string());
        }
        err
    }

    /// The algorithm of a call of `layout`: [`select::choose`]'s precedence over what this
    /// communicator knows (the call's forced algorithm, its configuration, its trials, its
    /// tuning file, its cost model).
    pub(super) fn choose(
        &mut self,
        layout: &Layout,
        elem_size: usize,
        forced: Option<Algorithm>,
    ) -> Result<Algorithm> {
        let bytes = layout.count.saturating_mul(elem_size);
        let sources = select::Sources {
            forced,
            configured: self.config.algorithm,
            tried: self
                .tune_key(layout, elem_size, None)
                .and_then(|k| self.tuner.as_ref()?.settled(&k)),
            rule: (self.config.tuning.as_ref())
                .and_then(|t| t.rule(self.tuning_key, layout.collective, self.nranks, bytes)),
        };
        let levels = self.hosts.as_deref().map(|hosts| self.levels_on(hosts));
        let (selector, model) = (&mut self.selector, &self.config.cost_model);
        select::choose(layout.collective, &sources, || {
            selector.choose(layout, elem_size, model, levels.as_ref())
        })
        .map_err(|algorithm| Error::UnsupportedAlgorithm {
            rank: self.rank.0,
            algorithm,
            collective: layout.collective,
        })
    }

    /// Checks `req` against this group; its layout and this rank's buffers in it.
    pub(super) fn validate<T: Element>(
        &self,
        req: &Request<'_, T>,
    ) -> Result<(Layout, BufferLayout)> {
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
        self.check_lengths(req, &expect)?;
        Ok((layout, expect))
    }

    /// Checks the lengths of `req`'s buffers against `expect`.
    fn check_lengths<T: Element>(&self, req: &Request<'_, T>, expect: &BufferLayout) -> Result<()> {
        let (rank, collective) = (self.rank.0, req.collective);
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
        Ok(())
    }

    /// What pricing knows of the two levels on `hosts`: this group's rates inside a host,
    /// whether receivers read senders' memory there, and any forced level algorithms.
    pub(super) fn levels_on<'h>(
        &self,
        hosts: &'h rcoll_transport::hosts::HostMap,
    ) -> crate::schedule::cost::Levels<'h> {
        crate::schedule::cost::Levels {
            hosts,
            local: self.local_model,
            receivers_read: self.local_reads,
            level_algorithms: self.config.level_algorithms,
        }
    }

    /// The algorithms the hierarchical levels run for `layout` (elements of `elem_size`
    /// bytes; the effective ones, see [`LevelAlgorithms::effective`]): forced by
    /// `RCOLL_LEVEL_ALGO`, else priced per level for the layout's size bucket, as `Auto`
    /// prices the hierarchical schedule. `None` when the group has no two levels.
    pub(super) fn levels_for(
        &mut self,
        layout: &Layout,
        elem_size: usize,
    ) -> Option<LevelAlgorithms> {
        let hosts = self.hosts.clone()?;
        if hosts.nranks() != layout.nranks
            || !crate::algorithm::hierarchical::has_levels(&hosts)
            || !Algorithm::Hierarchical.serves(layout.collective)
        {
            return None;
        }
        let levels = self.levels_on(&hosts);
        Some(
            self.selector
                .levels(layout, elem_size, &self.config.cost_model, &levels),
        )
    }

    /// `algorithm`'s plan for `layout`, its levels run by `levels` where it has them.
    pub(super) fn plan(
        &mut self,
        layout: &Layout,
        algorithm: Algorithm,
        levels: Option<LevelAlgorithms>,
    ) -> Result<Arc<Plan>> {
        let levels = levels.unwrap_or_default();
        // A plan depends on the layout, not on the element type or operation: a call kept
        // with another of those shares its plan.
        let kept = self.prepared.iter().find(|p| {
            p.key.layout == *layout
                && p.algorithm == algorithm
                && p.call.levels.unwrap_or_default() == levels
        });
        if let Some(p) = kept {
            return Ok(Arc::clone(&p.plan));
        }
        let rank = self.rank.0;
        let schedule = algorithm
            .schedule_levels(layout, self.rank, self.hosts.as_deref(), levels)
            .map_err(|e| Error::Internal {
                rank,
                what: e.to_string(),
            })?;
        let plan =
            Plan::new(&schedule, &layout.buffers(self.rank)).map_err(|e| Error::Internal {
                rank,
                what: format!("{algorithm} schedule: {}", e.reason),
            })?;
        Ok(Arc::new(plan))
    }

    pub(super) fn execute<T: Element>(&mut self, req: Request<'_, T>) -> Result<()> {
        let forced = self.next_algorithm.take();
        self.apply_abort();
        if let Some(first) = &self.poisoned {
            return Err(Error::Poisoned {
                rank: self.rank.0,
                first: first.clone(),
            });
        }
        let in_place = matches!(req.buffers, Buffers::InPlace(_));
        let key = CallKey {
            layout: self.layout(req.collective, req.count, req.root, in_place),
            dtype: T::DTYPE,
            op: req.op,
            forced,
        };
        // A call like one of the last few (the common case: a loop of one size, or of a
        // few in turn) reuses all it derived from its arguments: their checks, the
        // choice, the plan, the fingerprint. Taken out for the call and put back first
        // after it (a pointer: two moves of the whole were a tenth of a small call's
        // instructions): a loop of small calls pays no reference count on the plan.
        // Only the buffers' lengths are checked again (`prepare` checks them with the rest).
        let kept = (self.prepared.iter())
            .position(|p| p.key == key)
            .map(|i| self.prepared.remove(i));
        let checked = match kept {
            Some(p) if self.still_holds(&p) => self.check_lengths(&req, &p.expect).map(|()| p),
            _ => self.prepare(&req, key),
        };
        let prepared = match checked {
            Ok(p) => p,
            Err(e) => return Err(self.fail(e)),
        };
        let starts_burst = prepared
            .trial
            .zip(self.tuner.as_ref())
            .is_some_and(|(k, t)| t.starts_burst(&k));
        if starts_burst {
            // A burst of timed calls starts on every rank at once (see `autotune`), from
            // the barrier an application would call (barriers are not tried): the skew it
            // leaves the ranks in is part of what the burst's algorithm is timed on.
            self.barrier()?;
        }
        let seq = self.seq;
        self.seq = (self.seq + 1) & !P2P_BIT;
        tracing::debug!(
            rank = self.rank.0,
            collective = %req.collective,
            seq,
            count = req.count,
            dtype = %T::DTYPE,
            algorithm = %prepared.algorithm,
            transport = self.transport.endpoint().name,
            "call"
        );
        let expect = prepared.expect;
        let (input, output): (&[T], &mut [T]) = match req.buffers {
            Buffers::InPlace(buf) => (&[], buf),
            Buffers::Separate(send, recv) => {
                let send = if expect.input.len > 0 { send } else { &[] };
                let recv = if expect.output.len > 0 { recv } else { &mut [] };
                (send, recv)
            }
        };
        let scratch_len = prepared.plan.scratch_len;
        let words = (scratch_len * std::mem::size_of::<T>()).div_ceil(16);
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
        let started = prepared.trial.map(|k| (k, std::time::Instant::now()));
        let result = self.run_plan(
            &prepared.plan,
            seq,
            prepared.call,
            prepared.fingerprint,
            &mut mem,
        );
        let took = started.map(|(k, t)| (k, t.elapsed().as_secs_f64() * 1e6));
        if result.is_ok() && req.op == ReduceOp::Avg && req.collective.reduces() {
            let out = expect.output;
            if let Some(reduced) = mem.output.get_mut(out.offset..out.end()) {
                T::average(reduced, self.nranks);
            }
        }
        self.scratch = scratch_words;
        let algorithm = prepared.algorithm;
        self.prepared.truncate(PREPARED_CALLS - 1);
        self.prepared.insert(0, prepared);
        match (result, took) {
            (Ok(()), Some((key, us))) => self.after_trial(key, algorithm, us),
            (result, _) => result,
        }
    }

    /// Whether what `p` derived still holds for a call of its arguments: a trial's only
    /// within its block, a choice of the tuner's until its generation moves.
    fn still_holds(&mut self, p: &Prepared) -> bool {
        match p.trial {
            Some(_) => self.trial_goes_on(p.trial, p.algorithm),
            None => p.generation == self.tuner.as_ref().map_or(0, |t| t.generation()),
        }
    }

    /// Everything a call with `key`'s arguments derives from them, checked: its buffers'
    /// layout, the algorithm and levels chosen, the plan, its segment length and
    /// fingerprint.
    fn prepare<T: Element>(&mut self, req: &Request<'_, T>, key: CallKey) -> Result<Box<Prepared>> {
        let (layout, expect) = self.validate(req)?;
        let elem = std::mem::size_of::<T>();
        let (algorithm, trial) = match self.tune_key(&layout, elem, key.forced) {
            Some(k) => {
                let (a, trial) = self.choose_by_trial(k, &layout, elem)?;
                (a, trial.then_some(k))
            }
            None => (self.choose(&layout, elem, key.forced)?, None),
        };
        let levels = match algorithm {
            Algorithm::Hierarchical => self.levels_for(&layout, elem),
            _ => None,
        };
        let plan = self.plan(&layout, algorithm, levels)?;
        let longest = expect
            .input
            .len
            .max(expect.output.len)
            .max(expect.storage_len)
            .max(plan.scratch_len);
        let mut call = Call {
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
            levels,
        };
        let fingerprint = self.settle::<T>(&mut call, longest)?;
        Ok(Box::new(Prepared {
            key,
            generation: self.tuner.as_ref().map_or(0, |t| t.generation()),
            algorithm,
            trial,
            plan,
            expect,
            call,
            fingerprint,
        }))
    }

    /// Point-to-point messages, all in flight at once ([`Communicator::exchange`]): each
    /// `(peer, range)` of `sends` sends `send[range]`, each of `recvs` receives into
    /// `recv[range]`.
    pub(super) fn point_to_point<T: Element>(
        &mut self,
        send: &[T],
        sends: &[(usize, Range<usize>)],
        recv: &mut [T],
        recvs: &[(usize, Range<usize>)],
    ) -> Result<()> {
        self.next_algorithm = None;
        self.apply_abort();
        if let Some(first) = &self.poisoned {
            return Err(Error::Poisoned {
                rank: self.rank.0,
                first: first.clone(),
            });
        }
        let (rank, nranks) = (self.rank.0, self.nranks);
        let all = sends
            .iter()
            .map(|s| ("send", s, send.len()))
            .chain(recvs.iter().map(|r| ("recv", r, recv.len())));
        for (what, (peer, range), len) in all {
            if *peer >= nranks || *peer == self.rank() {
                return Err(self.fail(Error::PeerOutOfRange {
                    rank,
                    what,
                    peer: *peer,
                    nranks,
                }));
            }
            if range.start > range.end || range.end > len {
                return Err(self.fail(Error::BufferLength {
                    rank,
                    collective: Collective::SendRecv,
                    buffer: what,
                    expected: range.end.max(range.start),
                    got: len,
                }));
            }
        }
        // Messages landing on the same elements would race: refused on the rank that
        // asked, which aborts the group.
        let mut landing: Vec<&Range<usize>> = recvs.iter().map(|(_, r)| r).collect();
        landing.sort_by_key(|r| r.start);
        if let Some(w) = landing
            .windows(2)
            .find(|w| w[0].end > w[1].start && !w[1].is_empty())
        {
            return Err(self.fail(Error::Config(format!(
                "rank {rank}: exchange: receives into {:?} and {:?} overlap",
                w[0], w[1]
            ))));
        }
        // One step of Sends and Recvs, all in flight together. Point-to-point messages
        // carry the reserved sequence number P2P_BIT and are numbered per peer and
        // direction, in the order listed, so they match in call order and never collide
        // with collectives.
        let layout = Layout {
            collective: Collective::SendRecv,
            nranks,
            count: 0,
            root: self.rank,
            in_place: false,
        };
        let mut schedule = Schedule::new(layout, self.rank);
        for (to, range) in sends {
            schedule.push(
                0,
                Primitive::Send {
                    to: vec![Rank::from(*to)],
                    src: Slice::input(range.start, range.len()),
                },
            );
        }
        for (from, range) in recvs {
            schedule.push(
                0,
                Primitive::Recv {
                    from: Rank::from(*from),
                    dst: Slice::output(range.start, range.len()),
                },
            );
        }
        let (input, output) = (send, recv);
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
        let mut call = Call {
            collective: Collective::SendRecv,
            dtype: T::DTYPE,
            op: ReduceOp::Sum,
            algorithm: None,
            count: 0,
            root: 0,
            segment_elems: 0,
            levels: None,
        };
        let fingerprint = match self.settle::<T>(&mut call, longest) {
            Ok(f) => f,
            Err(e) => return Err(self.fail(e)),
        };
        let p2p = self.p2p_seq;
        self.run_plan(&plan, p2p, call, fingerprint, &mut mem)
    }

    /// Whether a call of `collective` moves each message in one piece: two ranks whose
    /// transport moves any length with one copy both ways, and a collective that only
    /// moves data (each rank's messages go to the other rank once, from its input or
    /// straight into its output: cutting them buys no pipelining, and costs a read per
    /// segment). Both ranks answer alike: the collective is the same on both, and the
    /// transport answers alike for both ends of a pair.
    fn moves_whole(&self, collective: Collective) -> bool {
        let pure_movement = matches!(
            collective,
            Collective::Broadcast
                | Collective::AllGather
                | Collective::Gather
                | Collective::Scatter
                | Collective::AllToAll
        );
        pure_movement
            && self.nranks == 2
            && !self.config.segment_bytes_set
            && self.transport.link(Rank(1 - self.rank.0)).moves_whole
    }

    /// Sets `call`'s segment length (elements of `T`) and gives its fingerprint; an
    /// error if `longest` elements would take more segments than a tag can count.
    fn settle<T: Element>(&mut self, call: &mut Call, longest: usize) -> Result<u32> {
        call.segment_elems = (self.config.segment_bytes / std::mem::size_of::<T>()).max(1);
        if self.moves_whole(call.collective) {
            // Every message of these is at most `count` elements (a block, or the whole
            // vector of a broadcast), the same on both ranks.
            let whole = rcoll_transport::WHOLE_MAX / std::mem::size_of::<T>();
            call.segment_elems = call.segment_elems.max(call.count.min(whole));
        }
        // Segment indices travel as u32 in tags.
        if longest.div_ceil(call.segment_elems) > u32::MAX as usize {
            return Err(Error::CountOverflow {
                rank: self.rank.0,
                collective: call.collective,
                count: longest,
                nranks: self.nranks,
            });
        }
        // Point-to-point calls in a loop compute their fingerprint once.
        Ok(match self.last_fingerprint {
            Some((last, f)) if last == *call => f,
            _ => {
                let f = call.fingerprint();
                self.last_fingerprint = Some((*call, f));
                f
            }
        })
    }

    /// Runs `plan` on `mem` for `call` (settled: see [`Self::settle`]), whose fingerprint
    /// is `fingerprint`, and turns a failure into an [`Error`] that aborts the group.
    pub(super) fn run_plan<T: Element>(
        &mut self,
        plan: &Plan,
        seq: u32,
        call: Call,
        fingerprint: u32,
        mem: &mut Memory<'_, T>,
    ) -> Result<()> {
        let rank = self.rank.0;
        let timeout = self.config.timeout;
        let io = self.transport.as_mut();
        run(
            plan,
            seq,
            fingerprint,
            call.segment_elems,
            call.op,
            mem,
            io,
            timeout,
            self.abort.flag(),
            &mut self.spare,
        )
        .map_err(|e| {
            let err = self.describe(e, call.collective, seq, call.algorithm);
            self.fail(err)
        })?;
        // A message of this (or an earlier) collective that nobody took: its sender ran a
        // different call, which this rank's part did not need to notice (another root).
        if seq & P2P_BIT == 0 {
            self.recent[seq as usize % RECENT_CALLS] = (seq, fingerprint);
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

    pub(super) fn describe(
        &self,
        e: RunError,
        collective: Collective,
        seq: u32,
        algorithm: Option<Algorithm>,
    ) -> Error {
        let rank = self.rank.0;
        let algorithm = algorithm.map_or_else(|| "p2p".to_owned(), |a| a.to_string());
        // Point-to-point calls share one reserved sequence number; show none.
        let seq = if seq & P2P_BIT != 0 { 0 } else { seq };
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
            RunError::Aborted(blocked_on) => transport(
                blocked_on.map(|(_, at)| at),
                TransportError::Aborted {
                    rank: self.rank,
                    by: self.rank,
                    reason: self.abort.reason().unwrap_or_default(),
                },
            ),
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
