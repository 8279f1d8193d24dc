//! The small-call executor: runs a plan whose every primitive moves one segment of at
//! most `SMALL_SEGMENT` bytes (an 8-byte all_reduce, a barrier, a small broadcast).
//!
//! Such a call is all fixed cost: the general executor ([`super::core`]) keeps per-segment
//! counters, queues of in-flight segments and dependency arithmetic for pipelining that
//! one segment per primitive never needs. Here a primitive's dependencies are a bit mask of
//! earlier primitives ([`Plan::waits_mask`]), progress is three bit masks and a counter
//! per primitive, and small messages land straight in their destination (or on the stack,
//! to be reduced there), as the general executor lands them. Both executors put the same
//! messages on the wire (same tags, same bytes) and compute the same values in the same
//! order, so ranks may run either: which one a rank runs depends only on its own plan.
//!
//! Like [`super::core::Execution::poll`], [`SmallExecution::poll`] never waits and never
//! reads the clock.

use rcoll_transport::{Lend, Payload, Rank, SendState, Tag, Transport, TransportError};

use super::core::{
    copy_or_reduce, lend_for, position, typed, with_typed_mut, ExecError, Position, Progress,
    SMALL_SEGMENT,
};
use super::memory::{Memory, OutOfRange, SrcDst};
use crate::element::Element;
use crate::op::ReduceOp;
use crate::schedule::plan::{Plan, PlannedPrimitive};
use crate::schedule::Primitive;

/// Whether [`SmallExecution`] runs `plan` with segments of `segment_elems` elements of
/// `T`: one channel of at most 64 primitives, each one segment of at most
/// `SMALL_SEGMENT` bytes.
pub fn fits<T: Element>(plan: &Plan, segment_elems: usize) -> bool {
    !plan.waits_mask.is_empty()
        && plan.longest <= segment_elems
        && plan.longest * std::mem::size_of::<T>() <= SMALL_SEGMENT
}

/// The per-primitive state of a small execution, kept between calls so that a call
/// allocates nothing.
#[derive(Default)]
pub struct SmallSpare {
    /// Per primitive: destinations sent to so far.
    next: Vec<u16>,
    /// Per primitive: sends still reading the caller's memory.
    outstanding: Vec<u16>,
    /// Per primitive that forwards what it received and reduced: the message to send.
    outgoing: Vec<(usize, Payload)>,
    /// Sends still reading the caller's memory: (primitive, token).
    tokens: Vec<(usize, u64)>,
}

/// One rank's run of one small plan.
pub struct SmallExecution<'p, 's> {
    plan: &'p Plan,
    collective: u32,
    schedule: u32,
    op: ReduceOp,
    /// Primitives complete: every later one that waits for them may run.
    done: u64,
    /// Primitives whose receive and local work are done (their sends may still be going).
    worked: u64,
    /// Every primitive's bit.
    all: u64,
    state: &'s mut SmallSpare,
}

impl<'p, 's> SmallExecution<'p, 's> {
    /// Starts `plan` (which must [`fit`](fits)) as collective number `collective` with
    /// fingerprint `schedule`, reducing with `op`; its state's memory comes from `spare`.
    pub fn new(
        plan: &'p Plan,
        collective: u32,
        schedule: u32,
        op: ReduceOp,
        state: &'s mut SmallSpare,
    ) -> Self {
        let n = plan.waits_mask.len();
        if state.next.len() == n {
            state.next.fill(0);
            state.outstanding.fill(0);
        } else {
            state.next.clear();
            state.next.resize(n, 0);
            state.outstanding.clear();
            state.outstanding.resize(n, 0);
        }
        state.outgoing.clear();
        state.tokens.clear();
        SmallExecution {
            plan,
            collective,
            schedule,
            op,
            done: 0,
            worked: 0,
            all: if n == 64 { u64::MAX } else { (1u64 << n) - 1 },
            state,
        }
    }

    /// Ends the execution: messages it still holds after a failure are dropped now.
    pub fn recycle(self) {
        self.state.outgoing.clear();
        self.state.tokens.clear();
    }

    #[inline]
    fn ops(&self) -> &'p [PlannedPrimitive] {
        // `fits` holds: exactly one channel.
        self.plan.channels.first().map_or(&[], |c| &c.ops)
    }

    /// Does all the work possible now.
    pub fn poll<T: Element>(
        &mut self,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<Progress, ExecError> {
        let ops = self.ops();
        let mut moved = false;
        loop {
            let mut progressed = !self.state.tokens.is_empty() && self.reap(io)?;
            let mut open = self.all & !self.done;
            while open != 0 {
                let j = open.trailing_zeros() as usize;
                open &= open - 1;
                let ready = self
                    .plan
                    .waits_mask
                    .get(j)
                    .is_some_and(|w| w & !self.done == 0);
                if ready && self.step(j, &ops[j], mem, io)? {
                    progressed = true;
                }
            }
            if !progressed {
                break;
            }
            moved = true;
        }
        Ok(Progress {
            moved,
            finished: self.done == self.all,
        })
    }

    /// What this rank is waiting for: (peer, position) of the first unfinished primitive
    /// that waits to send or to receive. For timeout errors.
    pub fn blocked_on(&self) -> Option<(Rank, Position)> {
        let ops = self.ops();
        let mut open = self.all & !self.done;
        while open != 0 {
            let j = open.trailing_zeros() as usize;
            open &= open - 1;
            let p = &ops[j];
            let peer = if self.worked & 1 << j == 0 {
                p.prim.recv_from()
            } else {
                let next = usize::from(self.state.next[j]);
                p.prim.send_to().get(next).copied()
            };
            if let Some(peer) = peer {
                return Some((peer, position(0, p)));
            }
        }
        None
    }

    /// Counts as done the primitives whose sends from the caller's memory have completed.
    fn reap(&mut self, io: &mut dyn Transport) -> Result<bool, ExecError> {
        if self.state.tokens.is_empty() {
            return Ok(false);
        }
        let ops = self.ops();
        let mut moved = false;
        let mut i = 0;
        while i < self.state.tokens.len() {
            let (j, token) = self.state.tokens[i];
            let complete = io
                .send_complete(token)
                .map_err(|e| ExecError::Transport(position(0, &ops[j]), e))?;
            if !complete {
                i += 1;
                continue;
            }
            self.state.tokens.swap_remove(i);
            self.state.outstanding[j] -= 1;
            moved = true;
            self.finish_if_sent(j, ops);
        }
        Ok(moved)
    }

    fn finish_if_sent(&mut self, j: usize, ops: &[PlannedPrimitive]) {
        // One transfer number per destination: no look into the primitive.
        let sent = usize::from(self.state.next[j]) == ops[j].send_transfers.len();
        if self.worked & 1 << j != 0 && sent && self.state.outstanding[j] == 0 {
            self.done |= 1 << j;
        }
    }

    fn tag(&self, transfer: u32) -> Tag {
        Tag {
            collective: self.collective,
            channel: 0,
            transfer,
            segment: 0,
            schedule: self.schedule,
        }
    }

    /// Moves primitive `j` as far as it can go now: its receive and local work, then its
    /// sends. Whether anything moved.
    fn step<T: Element>(
        &mut self,
        j: usize,
        p: &PlannedPrimitive,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<bool, ExecError> {
        let at = || position(0, p);
        let mut moved = false;
        if self.worked & 1 << j == 0 {
            if !self.work(j, p, mem, io)? {
                return Ok(false);
            }
            self.worked |= 1 << j;
            moved = true;
        }
        let before = self.state.next[j];
        self.send(j, p, mem, io).map_err(|e| match e {
            Failure::Transport(e) => ExecError::Transport(at(), e),
            Failure::Memory(e) => ExecError::Memory(at(), e),
            Failure::Inconsistent => ExecError::InconsistentPlan(at()),
        })?;
        moved |= self.state.next[j] != before;
        self.finish_if_sent(j, self.ops());
        Ok(moved)
    }

    /// The primitive's receive and local work, as the general executor does them for a
    /// small segment. `Ok(false)`: its message has not arrived.
    fn work<T: Element>(
        &mut self,
        j: usize,
        p: &PlannedPrimitive,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<bool, ExecError> {
        let at = || position(0, p);
        let mem_err = |e: OutOfRange| ExecError::Memory(at(), e);
        let io_err = |e: TransportError| ExecError::Transport(at(), e);
        let op = self.op;
        let received = match (p.prim.recv_from(), p.recv_transfer) {
            (Some(from), Some(t)) => Some((from, self.tag(t))),
            (None, _) => None,
            (Some(_), None) => return Err(ExecError::InconsistentPlan(at())),
        };
        match (&p.prim, received, p.src, p.dst) {
            (Primitive::Send { .. }, None, Some(_), _) => {}
            (
                Primitive::Recv { .. } | Primitive::RecvCopySend { .. },
                Some((from, tag)),
                _,
                Some(dst),
            ) => {
                let d = mem.write(dst).map_err(mem_err)?;
                if !io
                    .try_recv_into(from, tag, bytemuck::cast_slice_mut(d))
                    .map_err(io_err)?
                {
                    return Ok(false);
                }
            }
            (Primitive::RecvReduceCopy { .. }, Some((from, tag)), Some(src), Some(dst)) => {
                let mut stack = [0u64; SMALL_SEGMENT / 8];
                let bytes = dst.len * std::mem::size_of::<T>();
                let landed = bytemuck::cast_slice_mut::<u64, u8>(&mut stack)
                    .get_mut(..bytes)
                    .ok_or_else(|| ExecError::InconsistentPlan(at()))?;
                if !io.try_recv_into(from, tag, landed).map_err(io_err)? {
                    return Ok(false);
                }
                let x = typed::<T>(landed);
                match mem.read_write(src, dst).map_err(mem_err)? {
                    SrcDst::Same(d) => T::reduce_assign(op, d, &x),
                    SrcDst::Disjoint(s, d) => T::reduce_to(op, d, &x, s),
                }
            }
            (
                Primitive::RecvReduceSend { .. } | Primitive::RecvReduceCopySend { .. },
                Some((from, tag)),
                Some(src),
                dst,
            ) => {
                let bytes = src.len * std::mem::size_of::<T>();
                let Some(mut payload) = io.try_recv(from, tag, bytes).map_err(io_err)? else {
                    return Ok(false);
                };
                let s = mem.read(src).map_err(mem_err)?;
                with_typed_mut(payload.as_bytes_mut(), |x: &mut [T]| {
                    T::reduce_assign(op, x, s)
                });
                if let Some(dst) = dst {
                    let d = mem.write(dst).map_err(mem_err)?;
                    bytemuck::cast_slice_mut::<T, u8>(d).copy_from_slice(payload.as_bytes());
                }
                self.state.outgoing.push((j, payload));
            }
            (Primitive::Copy { .. }, None, Some(src), Some(dst)) => {
                copy_or_reduce(None, mem, src, dst, at)?;
            }
            (Primitive::Reduce { .. }, None, Some(src), Some(dst)) => {
                copy_or_reduce(Some(op), mem, src, dst, at)?;
            }
            _ => return Err(ExecError::InconsistentPlan(at())),
        }
        Ok(true)
    }

    /// Sends the primitive's message to each destination not yet sent to, stopping at the
    /// first with no room (retried at the next poll: nothing later writes the memory sent
    /// from until this primitive is done).
    fn send<T: Element>(
        &mut self,
        j: usize,
        p: &PlannedPrimitive,
        mem: &Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<(), Failure> {
        let to = p.prim.send_to();
        // From the caller's memory: what a Send sends, what a RecvCopySend received.
        let (from_memory, lend) = match &p.prim {
            Primitive::Send { .. } => (p.src, lend_for(self.plan)),
            Primitive::RecvCopySend { .. } => (p.dst, Lend::ForCopy),
            _ => (None, Lend::UntilComplete),
        };
        while let Some((&peer, &t)) = {
            let i = usize::from(self.state.next[j]);
            to.get(i).zip(p.send_transfers.get(i))
        } {
            let tag = self.tag(t);
            if let Some(loc) = from_memory {
                let data: &[u8] = bytemuck::cast_slice(mem.read(loc).map_err(Failure::Memory)?);
                let sent = io.try_send_from(peer, tag, data, lend);
                match sent.map_err(Failure::Transport)? {
                    SendState::Done => {}
                    SendState::InFlight(token) => {
                        self.state.tokens.push((j, token));
                        self.state.outstanding[j] += 1;
                    }
                    SendState::NoRoom => return Ok(()),
                }
            } else {
                // A forwarded message: copies for all but the last destination.
                let last = usize::from(self.state.next[j]) + 1 == to.len();
                let Some(at) = self.state.outgoing.iter().position(|(o, _)| *o == j) else {
                    return Err(Failure::Inconsistent);
                };
                let msg = if last {
                    self.state.outgoing.swap_remove(at).1
                } else {
                    let original = &self.state.outgoing[at].1;
                    let mut copy = io.alloc(original.len());
                    copy.as_bytes_mut().copy_from_slice(original.as_bytes());
                    copy
                };
                if let Some(back) = io.try_send(peer, tag, msg).map_err(Failure::Transport)? {
                    if last {
                        self.state.outgoing.push((j, back));
                    } else {
                        io.recycle(back);
                    }
                    return Ok(());
                }
            }
            self.state.next[j] += 1;
        }
        Ok(())
    }
}

/// Why a send failed.
enum Failure {
    Transport(TransportError),
    Memory(OutOfRange),
    /// A forwarding primitive without its message (an rcoll bug).
    Inconsistent,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rcoll_transport::Rank;

    use super::fits;
    use crate::algorithm::Algorithm;
    use crate::engine::driver::{run, Spare};
    use crate::engine::memory::Memory;
    use crate::op::ReduceOp;
    use crate::schedule::plan::Plan;
    use crate::schedule::{Collective, Layout};

    fn plan(
        algorithm: Algorithm,
        collective: Collective,
        nranks: usize,
        count: usize,
        rank: usize,
    ) -> Plan {
        let layout = Layout {
            collective,
            nranks,
            count,
            root: Rank(0),
            in_place: false,
        };
        let schedule = algorithm
            .schedule(&layout, Rank::from(rank))
            .expect("schedule");
        Plan::new(&schedule, &layout.buffers(Rank::from(rank))).expect("plan")
    }

    #[test]
    fn fits_plans_of_one_small_segment_per_primitive_only() {
        let mesh = |count| plan(Algorithm::Mesh, Collective::AllReduce, 2, count, 0);
        // 2 x f32 in segments of 32 Ki elements: one 8-byte segment per primitive.
        assert!(fits::<f32>(&mesh(2), 32 * 1024));
        // The same plan cut in 1-element segments is the general executor's.
        assert!(!fits::<f32>(&mesh(2), 1));
        // 64 bytes fit, 68 do not; the element size counts.
        assert!(fits::<f32>(&mesh(16), 32 * 1024));
        assert!(!fits::<f32>(&mesh(17), 32 * 1024));
        assert!(fits::<f64>(&mesh(8), 32 * 1024));
        assert!(!fits::<f64>(&mesh(9), 32 * 1024));
        // The double binary tree runs two channels: never the small executor's.
        let dbt = plan(Algorithm::DoubleBinaryTree, Collective::AllReduce, 4, 2, 0);
        assert!(dbt.channels.len() > 1);
        assert!(!fits::<f32>(&dbt, 32 * 1024));
    }

    /// Every algorithm's plans for every collective it serves, run by both executors on
    /// 2..=5 threads (queues of one message, so that sends find no room), give the same
    /// bytes: once in one segment per primitive (the small executor), once cut in
    /// 1-element segments (the general one).
    #[test]
    fn gives_what_the_general_executor_gives_for_every_algorithm() {
        const COUNT: usize = 3;
        let mut ran_small = 0;
        for algorithm in Algorithm::ALL {
            for collective in Collective::SCHEDULED {
                if !algorithm.serves(collective) {
                    continue;
                }
                for nranks in 2..=5 {
                    let transports = rcoll_transport::local::group(nranks, 1);
                    let handles: Vec<_> = transports
                        .into_iter()
                        .enumerate()
                        .map(|(rank, mut io)| {
                            std::thread::spawn(move || {
                                let plan = plan(algorithm, collective, nranks, COUNT, rank);
                                let layout = Layout {
                                    collective,
                                    nranks,
                                    count: COUNT,
                                    root: Rank(0),
                                    in_place: false,
                                };
                                let buffers = layout.buffers(Rank::from(rank));
                                let input: Vec<f32> = (0..buffers.input.len)
                                    .map(|i| (rank * 100 + i) as f32 + 0.25)
                                    .collect();
                                let mut spare = Spare::default();
                                let mut outputs = Vec::new();
                                let mut small = false;
                                for (seq, segment) in [(1, 1024), (2, 1)] {
                                    small |= fits::<f32>(&plan, segment);
                                    let mut output = vec![0f32; buffers.output.len];
                                    let mut scratch = vec![0f32; plan.scratch_len];
                                    let mut mem = Memory {
                                        input: &input,
                                        output: &mut output,
                                        scratch: &mut scratch,
                                    };
                                    run(
                                        &plan,
                                        seq,
                                        7,
                                        segment,
                                        ReduceOp::Sum,
                                        &mut mem,
                                        &mut io,
                                        Duration::from_secs(20),
                                        &std::sync::atomic::AtomicBool::new(false),
                                        &mut spare,
                                    )
                                    .unwrap_or_else(|e| {
                                        panic!("{algorithm} {collective} {nranks} ranks, rank {rank}, segment {segment}: {e:?}")
                                    });
                                    outputs.push(output);
                                }
                                (small, outputs)
                            })
                        })
                        .collect();
                    for (rank, h) in handles.into_iter().enumerate() {
                        let (small, outputs) = h.join().expect("rank thread");
                        ran_small += usize::from(small);
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&outputs[0]),
                            bits(&outputs[1]),
                            "{algorithm} {collective} {nranks} ranks, rank {rank}: small vs general"
                        );
                    }
                }
            }
        }
        // Most of these plans are one channel: the small executor ran them.
        assert!(ran_small > 100, "the small executor ran {ran_small} plans");
    }
}
