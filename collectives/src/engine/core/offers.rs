//! Offers ([`Transport::offer`]): the destinations of a receive's segments lent to the
//! peer ahead of its message, so that its device writes them in place; as soon as nothing
//! else uses their memory, or, where the transport delivers offers behind earlier sends,
//! as soon as the sends that read it are handed over, or with them.

use rcoll_transport::{Offered, Rank, Tag, Transport};

use super::{position, ExecError, Execution, Memory, NO_MORE_OFFERS, OFFER_AHEAD, SMALL_SEGMENT};
use crate::element::Element;
use crate::schedule::plan::PlannedPrimitive;
use crate::schedule::Primitive;

impl Execution<'_> {
    /// At the start of channel `c`, before anything is sent: the receives that may write
    /// their destinations from the start offer their first segments, so that the offers
    /// reach the peers ahead of the first messages that the peers answer.
    pub(super) fn offer_first<T: Element>(
        &mut self,
        c: usize,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<(), ExecError> {
        let plan = self.plan;
        for (j, p) in plan.channels[c].ops.iter().enumerate() {
            let (Primitive::Recv { .. } | Primitive::RecvCopySend { .. }, Some(from), Some(t)) =
                (&p.prim, p.prim.recv_from(), p.recv_transfer)
            else {
                continue;
            };
            let bytes = p.prim.len().min(self.segment_elems) * std::mem::size_of::<T>();
            if bytes > SMALL_SEGMENT && self.ready(c, 0, &p.waits) && io.link(from).places_directly
            {
                self.offer_ahead(c, j, p, 0, from, t, mem, io, None)?;
            }
        }
        Ok(())
    }

    /// Whether segment `k` of receive `p` from `from` may be offered now: the segments of
    /// earlier primitives it depends on are done, or, when the transport delivers offers
    /// behind earlier sends (`ordered`), handed to it where they are sends to `from` alone
    /// (a pure send only reads the memory, and `from` can write there only once it has
    /// received them). `sending`: a primitive whose next segment goes now, with the offer
    /// ([`Transport::offer`] with `with`), counted as handed over.
    fn may_offer(
        &self,
        c: usize,
        k: usize,
        p: &PlannedPrimitive,
        from: Rank,
        ordered: bool,
        sending: Option<usize>,
    ) -> bool {
        let state = &self.channels[c];
        let ops = &self.plan.channels[c].ops;
        p.waits.iter().all(|d| {
            let theirs = state.segments[d.op];
            let earlier = &ops[d.op].prim;
            let count = if sending == Some(d.op) {
                state.issued[d.op] + 1
            } else if ordered && earlier.recv_from().is_none() && earlier.send_to() == [from] {
                state.issued[d.op]
            } else {
                state.done[d.op]
            };
            count >= theirs || count >= d.needs(k, self.segment_elems, theirs)
        })
    }

    /// Offers the transport the destinations of receive `p`'s segments from `k` on, as far
    /// as [`OFFER_AHEAD`] and their dependencies allow (a segment whose memory an earlier
    /// primitive still uses is offered once it is free, see [`Self::may_offer`]), so that
    /// its peer's device may write them in place. An offered segment's memory is left alone
    /// until `try_recv_into` takes it, which this primitive does segment by segment.
    /// `with`: the send (primitive, and its segment's tag) about to go, which the offers
    /// travel with ([`Self::offer_with_send`]).
    #[allow(clippy::too_many_arguments)] // the receive's full description
    pub(super) fn offer_ahead<T: Element>(
        &mut self,
        c: usize,
        j: usize,
        p: &PlannedPrimitive,
        k: usize,
        from: Rank,
        transfer: u32,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
        with: Option<(usize, Tag)>,
    ) -> Result<(), ExecError> {
        let state = &self.channels[c];
        let Some(dst) = p.dst else {
            return Ok(());
        };
        if state.offered[j] & NO_MORE_OFFERS != 0 {
            return Ok(());
        }
        let end = state.segments[j].min(k + OFFER_AHEAD);
        let mut next = state.offered[j].max(k);
        let at = || position(c, p);
        let ordered = with.is_some() || io.link(from).offers_follow_sends;
        while next < end && self.may_offer(c, next, p, from, ordered, with.map(|w| w.0)) {
            let lo = next * self.segment_elems;
            let mut l = dst;
            l.offset += lo;
            l.len = p.prim.len().saturating_sub(lo).min(self.segment_elems);
            let d = mem.write(l).map_err(|e| ExecError::Memory(at(), e))?;
            let tag = Tag {
                collective: self.collective,
                channel: c as u16,
                transfer,
                segment: next as u32,
                schedule: self.schedule,
            };
            let d = bytemuck::cast_slice_mut(d);
            let offered = io.offer(from, tag, d, with.map(|(_, w)| w));
            match offered.map_err(|e| ExecError::Transport(at(), e))? {
                Offered::Yes => next += 1,
                // With a send: offered the usual way once it has gone, if it can be then.
                Offered::Later => break,
                // The segments before it stay offered: they are taken where they land.
                Offered::No => {
                    next |= NO_MORE_OFFERS;
                    break;
                }
            }
        }
        self.channels[c].offered[j] = next;
        Ok(())
    }

    /// Before segment `k` of send `i` (`p`, to `to` alone) goes: offers to travel with it
    /// ([`Transport::offer`] with `with`) the destinations of later receives from `to` that wait
    /// for that segment (their memory is what it sends, as in an in-place all_reduce on 2
    /// ranks: the half sent in the reduce-scatter is the one the all-gather fills). Offered
    /// only after the send, they would reach the peer after it had already answered it.
    #[allow(clippy::too_many_arguments)] // the segment's full description; one caller
    pub(super) fn offer_with_send<T: Element>(
        &mut self,
        c: usize,
        i: usize,
        p: &PlannedPrimitive,
        to: Rank,
        with: Tag,
        mem: &mut Memory<'_, T>,
        io: &mut dyn Transport,
    ) -> Result<(), ExecError> {
        let link = io.link(to);
        if p.offers_with.is_empty() || !link.places_directly || !link.offers_follow_sends {
            return Ok(());
        }
        let plan = self.plan;
        for &j in &p.offers_with {
            let r = &plan.channels[c].ops[j];
            if let Some(transfer) = r.recv_transfer {
                let first = self.channels[c].issued[j];
                self.offer_ahead(c, j, r, first, to, transfer, mem, io, Some((i, with)))?;
            }
        }
        Ok(())
    }
}
