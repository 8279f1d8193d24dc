//! The engine core: runs a [`Plan`] segment by segment without ever blocking.
//!
//! [`Execution::poll`] does every piece of work that can be done now — take arrived
//! segments, reduce or copy them, hand segments to the transport — and returns. It never
//! waits and never reads the clock; the [driver](super::driver) owns waiting and deadlines.
//!
//! Every primitive of a channel advances one segment at a time, round-robin, in schedule
//! order: segment k of a primitive runs once its message has arrived and the segments of
//! earlier primitives that touch the same elements are done ([`Dependency::needs`]). Steps
//! are not barriers: a ring's step s+1 starts on its first segment while step s finishes its
//! last, and a tree root forwards the first reduced segment while later ones are still on
//! their way up. While one segment is reduced the next is arriving and the previous one is
//! on its way out. Channels advance independently.

mod offers;

use std::borrow::Cow;
use std::collections::VecDeque;

use rcoll_transport::{Lend, Payload, Rank, SendState, Tag, Transport, TransportError};

use super::memory::{Memory, OutOfRange, SrcDst};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::schedule::plan::{Dependency, Plan, PlannedPrimitive};
use crate::schedule::Primitive;

/// Where in the plan something went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// Channel.
    pub channel: usize,
    /// Step within the channel.
    pub step: usize,
    /// The primitive, displayed.
    pub primitive: String,
}

/// Why an execution stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecError {
    /// The transport failed.
    Transport(Position, TransportError),
    /// The buffers do not match the plan (an rcoll bug: lengths are checked before).
    Memory(Position, OutOfRange),
    /// A planned primitive lacks the slice or message its kind needs (an rcoll bug: plans
    /// are built from well-formed primitives).
    InconsistentPlan(Position),
}

/// What one call of [`Execution::poll`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Whether any segment moved.
    pub moved: bool,
    /// Whether the whole plan has completed.
    pub finished: bool,
}

struct ChannelState {
    /// Segments completed, per primitive.
    done: Vec<usize>,
    /// Segments started, per primitive: ahead of `done` by the segments in `in_flight`.
    issued: Vec<usize>,
    /// Per primitive, in order, its started segments not yet complete: a token while the
    /// transport still reads the caller's memory ([`SendState::InFlight`]), `None` for a
    /// segment that finished behind one; the flag ends a segment (a segment sent to
    /// several peers has a token per peer). A segment counts as done (for dependencies,
    /// and for the call to return) only when it and every earlier one have completed, so
    /// no primitive writes memory a device is still reading.
    in_flight: Vec<VecDeque<(Option<u64>, bool)>>,
    /// Segments per primitive (its length cut at the execution's segment size).
    segments: Vec<usize>,
    /// Per primitive, the segments offered to the transport as destinations so far
    /// ([`Transport::offer`]), with [`NO_MORE_OFFERS`] set once it refused one for good.
    offered: Vec<usize>,
    /// Entries in `in_flight`, all primitives together.
    in_flight_len: usize,
    /// Whether the receives free from the start have offered their first segments
    /// ([`Execution::offer_first`]).
    offered_first: bool,
    /// Every primitive before this one has completed.
    first_open: usize,
    /// Segments the transport refused for now (no credits), with the primitive that sent
    /// them; retried first. While any is pending the channel starts no new segment: the
    /// transport guarantees that receivers always drain (see `rcoll_transport::Transport`),
    /// so the refusal is temporary, and stopping keeps a channel from running ahead of
    /// its slowest peer.
    pending: VecDeque<(usize, Rank, Tag, Payload)>,
}

/// The per-channel state of an execution, kept between calls so that a call allocates
/// nothing ([`Execution::new`], [`Execution::recycle`]).
#[derive(Default)]
pub struct Spare {
    channels: Vec<ChannelState>,
    /// The plan and segment size `channels` last ran: their segment counts still hold.
    ran: Option<(u64, usize)>,
}

/// One rank's run of one plan.
pub struct Execution<'p> {
    plan: &'p Plan,
    collective: u32,
    schedule: u32,
    segment_elems: usize,
    op: ReduceOp,
    channels: Vec<ChannelState>,
}

impl<'p> Execution<'p> {
    /// Starts `plan` as collective number `collective`, cutting transfers into segments of
    /// `segment_elems` elements and reducing with `op`. `schedule` is the fingerprint every
    /// message carries (see [`rcoll_transport::Tag`]).
    /// The state's memory comes from `spare` (what an earlier execution left there).
    pub fn new(
        plan: &'p Plan,
        collective: u32,
        schedule: u32,
        segment_elems: usize,
        op: ReduceOp,
        spare: &mut Spare,
    ) -> Self {
        let segment_elems = segment_elems.max(1);
        let mut channels = std::mem::take(&mut spare.channels);
        // The same plan again (a loop of one call): its segment counts hold, and what
        // `recycle` left is cleared; only the counters start over.
        if spare.ran.take() == Some((plan.id, segment_elems))
            && channels.len() == plan.channels.len()
        {
            for state in &mut channels {
                state.done.fill(0);
                state.issued.fill(0);
                state.offered.fill(0);
                state.offered_first = false;
                state.first_open = 0;
            }
        } else {
            channels.truncate(plan.channels.len());
            for (i, c) in plan.channels.iter().enumerate() {
                let n = c.ops.len();
                if i == channels.len() {
                    channels.push(ChannelState {
                        done: Vec::new(),
                        issued: Vec::new(),
                        in_flight: Vec::new(),
                        segments: Vec::new(),
                        offered: Vec::new(),
                        in_flight_len: 0,
                        offered_first: false,
                        first_open: 0,
                        pending: VecDeque::new(),
                    });
                }
                let state = &mut channels[i];
                state.done.clear();
                state.done.resize(n, 0);
                state.issued.clear();
                state.issued.resize(n, 0);
                state.offered.clear();
                state.offered.resize(n, 0);
                state.in_flight.iter_mut().for_each(VecDeque::clear);
                state.in_flight.resize_with(n, VecDeque::new);
                state.in_flight_len = 0;
                state.offered_first = false;
                state.segments.clear();
                state
                    .segments
                    .extend(c.ops.iter().map(|p| segments(p.prim.len(), segment_elems)));
                state.first_open = 0;
                state.pending.clear();
            }
        }
        Execution {
            plan,
            collective,
            schedule,
            segment_elems,
            op,
            channels,
        }
    }

    /// Gives the state's memory back to `spare` for the next execution (what it still
    /// holds, such as refused segments after a failure, is dropped now).
    pub fn recycle(mut self, spare: &mut Spare) {
        for c in &mut self.channels {
            c.pending.clear();
            c.in_flight.iter_mut().for_each(VecDeque::clear);
            c.in_flight_len = 0;
        }
        spare.channels = self.channels;
        spare.ran = Some((self.plan.id, self.segment_elems));
    }

    /// Does all the work possible now.
    pub fn poll<T: Element>(
        &mut self,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<Progress, ExecError> {
        let mut moved = false;
        let mut finished = true;
        for c in 0..self.channels.len() {
            moved |= self.poll_channel(c, mem, io)?;
            let state = &self.channels[c];
            finished &=
                state.first_open >= self.plan.channels[c].ops.len() && state.pending.is_empty();
        }
        Ok(Progress { moved, finished })
    }

    /// What this rank is waiting for: (peer, position) of a refused send, or of the first
    /// unfinished primitive that receives. For timeout errors.
    pub fn blocked_on(&self) -> Option<(Rank, Position)> {
        for (c, state) in self.channels.iter().enumerate() {
            let ops = &self.plan.channels[c].ops;
            if let Some((j, peer, _, _)) = state.pending.front() {
                return ops.get(*j).map(|p| (*peer, position(c, p)));
            }
            for (j, p) in ops.iter().enumerate().skip(state.first_open) {
                let unfinished = state.done[j] < state.segments[j];
                if let (true, Some(from)) = (unfinished, p.prim.recv_from()) {
                    return Some((from, position(c, p)));
                }
            }
        }
        None
    }

    fn poll_channel<T: Element>(
        &mut self,
        c: usize,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<bool, ExecError> {
        let plan = self.plan;
        let ops = &plan.channels[c].ops;
        if !self.channels[c].offered_first {
            self.channels[c].offered_first = true;
            self.offer_first(c, mem, io)?;
        }
        let mut moved = self.flush_pending(c, ops, io)?;
        moved |= self.reap(c, ops, io)?;
        let mut again = true;
        while again && self.channels[c].pending.is_empty() {
            again = false;
            if self.reap(c, ops, io)? {
                moved = true;
            }
            for (j, p) in ops.iter().enumerate().skip(self.channels[c].first_open) {
                if self.try_segment(c, j, p, mem, io)? {
                    again = true;
                    moved = true;
                }
            }
            let state = &mut self.channels[c];
            while state.first_open < ops.len()
                && state.done[state.first_open] >= state.segments[state.first_open]
            {
                state.first_open += 1;
            }
        }
        Ok(moved)
    }

    fn flush_pending(
        &mut self,
        c: usize,
        ops: &[PlannedPrimitive],
        io: &mut dyn Transport,
    ) -> Result<bool, ExecError> {
        let mut moved = false;
        while let Some((j, peer, tag, payload)) = self.channels[c].pending.pop_front() {
            let at = || {
                ExecError::InconsistentPlan(Position {
                    channel: c,
                    step: 0,
                    primitive: String::new(),
                })
            };
            let Some(p) = ops.get(j) else {
                return Err(at());
            };
            match io
                .try_send(peer, tag, payload)
                .map_err(|e| ExecError::Transport(position(c, p), e))?
            {
                None => moved = true,
                Some(back) => {
                    self.channels[c].pending.push_front((j, peer, tag, back));
                    break;
                }
            }
        }
        Ok(moved)
    }

    /// Counts as done the segments whose sends from the caller's memory have completed.
    fn reap(
        &mut self,
        c: usize,
        ops: &[PlannedPrimitive],
        io: &mut dyn Transport,
    ) -> Result<bool, ExecError> {
        let mut moved = false;
        let state = &mut self.channels[c];
        if state.in_flight_len == 0 {
            return Ok(false);
        }
        for (j, queue) in state.in_flight.iter_mut().enumerate() {
            while let Some(&(front, ends)) = queue.front() {
                if let Some(token) = front {
                    let complete = io.send_complete(token).map_err(|e| {
                        let p = &ops[j];
                        ExecError::Transport(position(c, p), e)
                    })?;
                    if !complete {
                        break;
                    }
                }
                queue.pop_front();
                state.in_flight_len -= 1;
                if ends {
                    state.done[j] += 1;
                    moved = true;
                }
            }
        }
        Ok(moved)
    }

    /// Whether segment `k` of a primitive with dependencies `waits` may run now.
    fn ready(&self, c: usize, k: usize, waits: &[Dependency]) -> bool {
        let state = &self.channels[c];
        waits.iter().all(|d| {
            let theirs = state.segments[d.op];
            // All of it done: whatever segment k needs (the common case of small calls).
            state.done[d.op] >= theirs || state.done[d.op] >= d.needs(k, self.segment_elems, theirs)
        })
    }

    /// Runs the next segment of primitive `j` if it can run now.
    fn try_segment<T: Element>(
        &mut self,
        c: usize,
        j: usize,
        p: &PlannedPrimitive,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<bool, ExecError> {
        let len = p.prim.len();
        let k = self.channels[c].issued[j];
        if k >= self.channels[c].segments[j]
            || !self.channels[c].pending.is_empty()
            || !self.ready(c, k, &p.waits)
        {
            return Ok(false);
        }
        let at = || position(c, p);
        let lo = k * self.segment_elems;
        let seg_len = len.saturating_sub(lo).min(self.segment_elems);
        let bytes = seg_len * std::mem::size_of::<T>();
        let (collective, schedule) = (self.collective, self.schedule);
        // Plan::new bounds channels by u16 and the communicator bounds segments per
        // transfer by u32, so these conversions are exact.
        let tag = move |transfer: u32| Tag {
            collective,
            channel: c as u16,
            transfer,
            segment: k as u32,
            schedule,
        };
        // Straight into the destination (and forwarded from there) when the transport
        // reads the peer's memory, or when the segment is small: no payload to hand back.
        let small = bytes <= SMALL_SEGMENT;
        // Or when the transport can have the peer write it there ([`Transport::offer`]):
        // while offers may still be made, and for every segment that was offered. Past a
        // refusal (memory not registered, a segment too small), a segment to forward goes
        // on as the payload it came in, with no copy back out.
        let (direct, placed) = match (&p.prim, p.prim.recv_from()) {
            (Primitive::Recv { .. } | Primitive::RecvCopySend { .. }, Some(from)) => {
                let offered = self.channels[c].offered[j];
                let placed = !small
                    && (offered & NO_MORE_OFFERS == 0 || k < offered & !NO_MORE_OFFERS)
                    && io.link(from).places_directly;
                (small || placed || io.link(from).reads_directly, placed)
            }
            _ => (false, false),
        };
        // A small segment to reduce into the destination lands here first.
        let mut stack = [0u64; SMALL_SEGMENT / 8];
        let stacked = small && matches!(p.prim, Primitive::RecvReduceCopy { .. });
        let received = match (p.prim.recv_from(), p.recv_transfer) {
            _ if direct || stacked => None,
            (Some(from), Some(t)) => {
                match io
                    .try_recv(from, tag(t), bytes)
                    .map_err(|e| ExecError::Transport(at(), e))?
                {
                    Some(payload) => Some(payload),
                    None => return Ok(false),
                }
            }
            _ => None,
        };
        let sub = |l: Option<crate::schedule::plan::Location>| {
            l.map(|mut l| {
                l.offset += lo;
                l.len = seg_len;
                l
            })
        };
        let (src, dst) = (sub(p.src), sub(p.dst));
        let mem_err = |e: OutOfRange| ExecError::Memory(at(), e);
        let op = self.op;
        // The payload to forward, if the primitive sends what it received.
        let mut outgoing: Option<Payload> = None;
        // Sends the transport still reads from the caller's memory.
        let mut tokens = Tokens::default();
        match (&p.prim, received, src, dst) {
            (Primitive::Recv { .. } | Primitive::RecvCopySend { .. }, None, _, Some(dst))
                if direct =>
            {
                let (Some(from), Some(t)) = (p.prim.recv_from(), p.recv_transfer) else {
                    return Err(ExecError::InconsistentPlan(at()));
                };
                if placed {
                    self.offer_ahead(c, j, p, k, from, t, mem, io, None)?;
                }
                let d = mem.write(dst).map_err(mem_err)?;
                if !io
                    .try_recv_into(from, tag(t), bytemuck::cast_slice_mut(d))
                    .map_err(|e| ExecError::Transport(at(), e))?
                {
                    return Ok(false);
                }
                // Forwarded from where it landed: final bytes, which the next ranks copy.
                let data = mem.read(dst).map_err(mem_err)?;
                let sent = self
                    .send_borrowed(
                        c,
                        j,
                        p,
                        bytemuck::cast_slice(data),
                        Lend::ForCopy,
                        false,
                        &mut None,
                        &tag,
                        io,
                    )
                    .map_err(|e| ExecError::Transport(at(), e))?;
                tokens = sent.unwrap_or_default();
            }
            // Straight from the caller's memory to every destination where the transport
            // can (several receivers may read it there).
            (Primitive::Send { to, .. }, None, Some(src), _) => {
                if let ([to], Some(&t)) = (to.as_slice(), p.send_transfers.first()) {
                    self.offer_with_send(c, j, p, *to, tag(t), mem, io)?;
                }
                let data = mem.read(src).map_err(mem_err)?;
                let lend = lend_for(self.plan);
                let bytes = bytemuck::cast_slice(data);
                match self
                    .send_borrowed(c, j, p, bytes, lend, true, &mut None, &tag, io)
                    .map_err(|e| ExecError::Transport(at(), e))?
                {
                    Some(t) => tokens = t,
                    None => return Ok(false), // this segment runs again later
                }
            }
            (Primitive::RecvReduceCopy { .. }, None, Some(src), Some(dst)) if stacked => {
                let (Some(from), Some(t)) = (p.prim.recv_from(), p.recv_transfer) else {
                    return Err(ExecError::InconsistentPlan(at()));
                };
                let landed = bytemuck::cast_slice_mut::<u64, u8>(&mut stack)
                    .get_mut(..bytes)
                    .ok_or_else(|| ExecError::InconsistentPlan(at()))?;
                if !io
                    .try_recv_into(from, tag(t), landed)
                    .map_err(|e| ExecError::Transport(at(), e))?
                {
                    return Ok(false);
                }
                let x = typed::<T>(landed);
                match mem.read_write(src, dst).map_err(mem_err)? {
                    SrcDst::Same(d) => T::reduce_assign(op, d, &x),
                    SrcDst::Disjoint(s, d) => T::reduce_to(op, d, &x, s),
                }
            }
            (Primitive::Recv { .. }, Some(payload), _, Some(dst)) => {
                let d = mem.write(dst).map_err(mem_err)?;
                bytemuck::cast_slice_mut::<T, u8>(d).copy_from_slice(payload.as_bytes());
                io.recycle(payload);
            }
            (Primitive::RecvReduceSend { .. }, Some(mut payload), Some(src), _) => {
                let s = mem.read(src).map_err(mem_err)?;
                with_typed_mut(payload.as_bytes_mut(), |x: &mut [T]| {
                    T::reduce_assign(op, x, s)
                });
                outgoing = Some(payload);
            }
            (Primitive::RecvReduceCopy { .. }, Some(payload), Some(src), Some(dst)) => {
                let x = typed::<T>(payload.as_bytes());
                match mem.read_write(src, dst).map_err(mem_err)? {
                    SrcDst::Same(d) => T::reduce_assign(op, d, &x),
                    SrcDst::Disjoint(s, d) => T::reduce_to(op, d, &x, s),
                }
                drop(x);
                io.recycle(payload);
            }
            (Primitive::RecvCopySend { .. }, Some(payload), _, Some(dst)) => {
                let d = mem.write(dst).map_err(mem_err)?;
                bytemuck::cast_slice_mut::<T, u8>(d).copy_from_slice(payload.as_bytes());
                outgoing = Some(payload);
            }
            // Reduced straight into the destination and sent from there (one pass over
            // the segment fewer than reducing into the payload and copying it out); a
            // transport with no room for it now gets the payload back, refilled.
            (Primitive::RecvReduceCopySend { .. }, Some(payload), Some(src), Some(dst)) => {
                {
                    let x = typed::<T>(payload.as_bytes());
                    match mem.read_write(src, dst).map_err(mem_err)? {
                        SrcDst::Same(d) => T::reduce_assign(op, d, &x),
                        SrcDst::Disjoint(s, d) => T::reduce_to(op, d, &x, s),
                    }
                }
                let data = mem.read(dst).map_err(mem_err)?;
                let mut spare = Some(payload);
                let sent = self
                    .send_borrowed(
                        c,
                        j,
                        p,
                        bytemuck::cast_slice(data),
                        Lend::UntilComplete,
                        false,
                        &mut spare,
                        &tag,
                        io,
                    )
                    .map_err(|e| ExecError::Transport(at(), e))?;
                tokens = sent.unwrap_or_default();
                if let Some(unused) = spare {
                    io.recycle(unused);
                }
            }
            (Primitive::Copy { .. }, None, Some(src), Some(dst)) => {
                copy_or_reduce(None, mem, src, dst, at)?;
            }
            (Primitive::Reduce { .. }, None, Some(src), Some(dst)) => {
                copy_or_reduce(Some(op), mem, src, dst, at)?;
            }
            // Every primitive has exactly the slices and message its kind names, by
            // construction of `Plan`.
            _ => return Err(ExecError::InconsistentPlan(at())),
        }
        if let Some(payload) = outgoing {
            self.send_all(c, j, p, payload, &tag, io)
                .map_err(|e| ExecError::Transport(at(), e))?;
        }
        let state = &mut self.channels[c];
        state.issued[j] += 1;
        let queue = &mut state.in_flight[j];
        if tokens.first.is_none() && tokens.more.is_empty() && queue.is_empty() {
            state.done[j] += 1;
        } else {
            state.in_flight_len += tokens.more.len() + 1;
            queue.extend(tokens.more.into_iter().map(|t| (Some(t), false)));
            queue.push_back((tokens.first, true));
        }
        Ok(true)
    }

    /// Sends `data`, the caller's memory, to every destination of `p`: from that memory
    /// where the transport can (as long as `lend` allows: [`Lend::ForCopy`] where the
    /// receivers only copy it, so they may read it there), else copied. Returns the tokens of the sends that still read it; `None`
    /// when the first destination has no room yet and `may_wait` (nothing was sent: run
    /// the segment again later). A destination refused after others were sent, or the
    /// first one when the segment cannot wait, gets a copy that waits with the refused:
    /// into `spare` when it is a payload of the data's length (taken), else a new one.
    #[allow(clippy::too_many_arguments)] // the segment's full description; three callers
    fn send_borrowed(
        &mut self,
        c: usize,
        j: usize,
        p: &PlannedPrimitive,
        data: &[u8],
        lend: Lend,
        may_wait: bool,
        spare: &mut Option<Payload>,
        tag: &dyn Fn(u32) -> Tag,
        io: &mut dyn Transport,
    ) -> Result<Option<Tokens>, TransportError> {
        let to = p.prim.send_to();
        let mut tokens = Tokens::default();
        for (i, (&peer, &t)) in to.iter().zip(&p.send_transfers).enumerate() {
            let sent = io.try_send_from(peer, tag(t), data, lend)?;
            match sent {
                SendState::Done => {}
                SendState::InFlight(token) if tokens.first.is_none() => tokens.first = Some(token),
                SendState::InFlight(token) => tokens.more.push(token),
                SendState::NoRoom if i == 0 && may_wait => return Ok(None),
                SendState::NoRoom => {
                    for (&peer, &t) in to[i..].iter().zip(&p.send_transfers[i..]) {
                        let mut payload = match spare.take() {
                            Some(s) if s.len() == data.len() => s,
                            other => {
                                if let Some(s) = other {
                                    io.recycle(s);
                                }
                                io.alloc(data.len())
                            }
                        };
                        payload.as_bytes_mut().copy_from_slice(data);
                        if let Some(back) = io.try_send(peer, tag(t), payload)? {
                            self.channels[c].pending.push_back((j, peer, tag(t), back));
                        }
                    }
                    break;
                }
            }
        }
        Ok(Some(tokens))
    }

    /// Sends `payload` to every destination of `p` (copies for all but the last).
    fn send_all(
        &mut self,
        c: usize,
        j: usize,
        p: &PlannedPrimitive,
        payload: Payload,
        tag: &dyn Fn(u32) -> Tag,
        io: &mut dyn Transport,
    ) -> Result<(), TransportError> {
        let to = p.prim.send_to();
        let last = to.len().saturating_sub(1);
        let mut payload = Some(payload);
        for (i, (&peer, &t)) in to.iter().zip(&p.send_transfers).enumerate() {
            let msg = if i == last {
                match payload.take() {
                    Some(m) => m,
                    None => break,
                }
            } else {
                let Some(original) = payload.as_ref() else {
                    break;
                };
                let mut copy = io.alloc(original.len());
                copy.as_bytes_mut().copy_from_slice(original.as_bytes());
                copy
            };
            if let Some(back) = io.try_send(peer, tag(t), msg)? {
                self.channels[c].pending.push_back((j, peer, tag(t), back));
            }
        }
        Ok(())
    }
}

/// How long a send straight from the caller's memory may leave the transport reading it:
/// until the send completes, and where the plan only moves data (its receivers copy, never
/// reduce), in a way the receiver reads itself ([`Lend::ForCopy`]).
pub(super) fn lend_for(plan: &Plan) -> Lend {
    if plan.reduces {
        Lend::UntilComplete
    } else {
        Lend::ForCopy
    }
}

/// The primitives that move no message: a copy (`op` `None`) or a reduction of `src` into
/// `dst`; `at` names the primitive in errors.
pub(super) fn copy_or_reduce<T: Element>(
    op: Option<ReduceOp>,
    mem: &mut Memory<'_, T>,
    src: crate::schedule::plan::Location,
    dst: crate::schedule::plan::Location,
    at: impl Fn() -> Position,
) -> Result<(), ExecError> {
    match (
        op,
        mem.read_write(src, dst)
            .map_err(|e| ExecError::Memory(at(), e))?,
    ) {
        (None, SrcDst::Disjoint(s, d)) => d.copy_from_slice(s),
        (None, SrcDst::Same(_)) => {}
        (Some(op), SrcDst::Disjoint(s, d)) => T::reduce_assign(op, d, s),
        // Nothing to do for an empty slice (a barrier's token).
        (Some(_), SrcDst::Same([])) => {}
        // x op x: Plan::new rejects it (it would count a contribution twice).
        (Some(_), SrcDst::Same(_)) => return Err(ExecError::InconsistentPlan(at())),
    }
    Ok(())
}

/// Segments of a receive offered ahead of the one it waits for ([`Transport::offer`]).
const OFFER_AHEAD: usize = 64;

/// The flag of `ChannelState::offered` that says the transport refused an offer for good.
const NO_MORE_OFFERS: usize = 1 << (usize::BITS - 1);

/// Segments of at most this many bytes are received into their destination (or, to be
/// reduced there, onto the stack) rather than as a payload: nothing to allocate or hand
/// back, and a shared-memory transport copies them straight out of its ring.
pub(super) const SMALL_SEGMENT: usize = 64;

/// Segments of a transfer of `len` elements cut every `segment_elems`: at least one (an
/// empty primitive still runs once).
fn segments(len: usize, segment_elems: usize) -> usize {
    len.div_ceil(segment_elems.max(1)).max(1)
}

/// The sends of one segment that still read the caller's memory.
#[derive(Debug, Default)]
struct Tokens {
    first: Option<u64>,
    more: Vec<u64>,
}

pub(super) fn position(channel: usize, p: &PlannedPrimitive) -> Position {
    Position {
        channel,
        step: p.step,
        primitive: p.prim.to_string(),
    }
}

/// The payload's bytes as elements: borrowed when aligned, copied when not.
pub(super) fn typed<T: Element>(bytes: &[u8]) -> Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

/// Runs `f` on the payload's bytes as elements, through an aligned copy if need be.
pub(super) fn with_typed_mut<T: Element>(bytes: &mut [u8], f: impl FnOnce(&mut [T])) {
    match bytemuck::try_cast_slice_mut(bytes) {
        Ok(s) => f(s),
        Err(_) => {
            let mut copy: Vec<T> = bytemuck::pod_collect_to_vec(bytes);
            f(&mut copy);
            bytes.copy_from_slice(bytemuck::cast_slice(&copy));
        }
    }
}
