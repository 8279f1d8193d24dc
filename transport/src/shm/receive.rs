//! Receiving from local peers: messages taken off the rings (inline, in a lent slot, or
//! left in the sender's memory), held in the arrival map until the engine asks for them,
//! and the slots and budgets that keep a sender moving whatever order they are asked in.

use super::segment::{self, Body, Refused, Remote};
use super::{cma, tag_of, Arrived, Msg, ShmTransport, HEAP_CAP, INLINE_CHARGE, QUICK_MISSES};
use crate::error::TransportError;
use crate::transport::{check_tag, Payload};
use crate::types::{Rank, Tag};

impl ShmTransport {
    /// Takes every published message off every ring into the arrival map, each one's
    /// slot lent to it until it is copied out (into the destination, or a payload). Slots
    /// a full ring holds for messages nobody asked for yet are freed by
    /// [`ShmTransport::unpin`] when this rank is about to block.
    pub(super) fn drain(&mut self) -> Result<(), TransportError> {
        let slots = self.mine.shape().slots;
        for p in 0..self.links.len() {
            // At most a ring's worth per call (a peer that keeps publishing cannot hold
            // this rank here), and nothing past what this rank holds for the peer: it
            // waits then, its descriptors in use.
            let mut took = 0;
            while took < slots {
                let Some((tag, (payload, charge))) = self.take_next(p)? else {
                    break;
                };
                took += 1;
                self.hold(Rank::from(p), tag, payload, charge)?;
            }
            if took > 0 {
                if let Some(Some(link)) = self.links.get(p) {
                    // Descriptors were freed: a sender that found none may sleep.
                    (link.wake)();
                }
            }
        }
        Ok(())
    }

    /// Keeps a message that arrived for the call that will ask for it.
    fn hold(
        &mut self,
        peer: Rank,
        tag: Tag,
        msg: Msg,
        charge: usize,
    ) -> Result<(), TransportError> {
        if let Some(Some(link)) = self.links.get_mut(peer.index()) {
            link.copied += charge;
        }
        if self
            .arrived
            .insert((peer, tag.key()), (tag, (msg, charge)))
            .is_some()
        {
            let e = TransportError::DuplicateTag {
                rank: self.me.rank,
                peer,
                tag,
            };
            return Err(self.fail(e));
        }
        Ok(())
    }

    /// The next message on peer `p`'s ring, unless none is published or this rank holds
    /// its budget of the peer's messages: its tag, payload and what it would count
    /// against the budget. A descriptor that breaks the rules fails the transport.
    fn take_next(&mut self, p: usize) -> Result<Option<(Tag, Arrived)>, TransportError> {
        let Some(link) = self.links.get_mut(p).and_then(Option::as_mut) else {
            return Ok(None);
        };
        if link.copied >= HEAP_CAP {
            return Ok(None);
        }
        let Some(next) = link.inbox.take(&link.wake, link.read_from.is_some()) else {
            return Ok(None);
        };
        self.drained += 1;
        let peer = Rank::from(p);
        let (header, body) = match next {
            Ok(m) => m,
            Err(why) => {
                let reason = match why {
                    Refused::NoSuchSlot(n) => format!("published slot {n}, which does not exist"),
                    Refused::SlotLent(n) => {
                        format!("published slot {n} while this rank still held it")
                    }
                    Refused::TooLong(n) => format!(
                        "wrote a {n}-byte message into a slot of {} bytes",
                        self.slot_bytes
                    ),
                    Refused::RemoteTooLong(n) => format!(
                        "left a {n}-byte message in its memory, more than {} bytes",
                        crate::transport::WHOLE_MAX
                    ),
                    Refused::InlineTooLong(n) => format!(
                        "published a {n}-byte message in a descriptor, which holds {}",
                        segment::INLINE
                    ),
                    Refused::RemoteNotAllowed => {
                        "left a message in its own memory, which this rank cannot read".into()
                    }
                    Refused::NoSuchTicket(n) => {
                        format!(
                            "left a message in its memory under ticket {n}, which does not exist"
                        )
                    }
                };
                let e = TransportError::Protocol {
                    rank: self.me.rank,
                    peer,
                    reason,
                };
                return Err(self.fail(e));
            }
        };
        let Some(tag) = tag_of(header.tag) else {
            let e = TransportError::Protocol {
                rank: self.me.rank,
                peer,
                reason: format!("wrote a malformed tag {:x?}", header.tag),
            };
            return Err(self.fail(e));
        };
        Ok(Some(match body {
            Body::Lent(lease) => (tag, (Msg::Slot(lease), 0)),
            Body::Inline(bytes, len) => {
                let mut buf = self.small.pop().unwrap_or_default();
                buf.clear();
                buf.extend_from_slice(&bytes[..len]);
                (tag, (Msg::Here(Payload::reuse(buf, len)), INLINE_CHARGE))
            }
            Body::Remote(remote) => (tag, (Msg::There(remote), INLINE_CHARGE)),
        }))
    }

    /// Frees the slots of every full ring whose messages wait here unasked for (the
    /// trait's promise: a sender's credits never depend on the tag this rank waits for):
    /// they are copied out of the ring, up to [`HEAP_CAP`] bytes per peer; past that the
    /// peer waits. Rare: only a rank about to block with a peer's whole ring in hand.
    pub(super) fn unpin(&mut self) {
        let slots = self.mine.shape().slots;
        let full: Vec<usize> = (0..self.links.len())
            .filter(|&p| {
                self.links[p]
                    .as_ref()
                    .is_some_and(|l| l.inbox.lent() >= slots && l.copied < HEAP_CAP)
            })
            .collect();
        for p in full {
            let peer = Rank::from(p);
            let mut copied = 0;
            for ((from, _), (_, (msg, charge))) in self.arrived.iter_mut() {
                let Msg::Slot(lease) = msg else {
                    continue;
                };
                if *from != peer {
                    continue;
                }
                let len = lease.len();
                let mut copy = pooled(&mut self.large, self.slot_bytes, len);
                lease.read_into(copy.as_bytes_mut());
                // The slot goes back as the lease drops.
                *msg = Msg::Here(copy);
                *charge = len;
                copied += len;
                if copied >= HEAP_CAP {
                    break;
                }
            }
            if let Some(Some(l)) = self.links.get_mut(p) {
                l.copied += copied;
            }
        }
    }

    fn take(&mut self, peer: Rank, tag: Tag) -> Option<(Tag, Msg)> {
        let (sent, (msg, charge)) = self.arrived.remove(&(peer, tag.key()))?;
        if charge > 0 {
            if let Some(Some(l)) = self.links.get_mut(peer.index()) {
                l.copied = l.copied.saturating_sub(charge);
            }
        }
        Some((sent, msg))
    }

    /// Reads a message left in `peer`'s memory into `dst` (exactly its length), and gives
    /// the peer its memory back. `Ok(false)` if the peer withdrew it: it failed, and its
    /// cause reaches this rank through the control plane (or its connection closes); the
    /// message never arrives, like any message of a failed peer.
    pub(super) fn read_remote(
        &mut self,
        peer: Rank,
        mut remote: Remote,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        let protocol = |rank, reason: String| TransportError::Protocol { rank, peer, reason };
        let Some(pid) = self.links[peer.index()].as_ref().and_then(|l| l.read_from) else {
            return Err(self.fail(protocol(
                self.me.rank,
                "left a message in its memory".into(),
            )));
        };
        // A peer known gone is not read (its process number may be another's by now).
        if let Some(e) = self.inner.known_gone(peer) {
            return Err(e);
        }
        if remote.begin().is_err() {
            self.note_withdrawn(peer);
            return Ok(false);
        }
        if let Err(e) = cma::read(pid, remote.addr, dst) {
            drop(remote);
            self.control(Some(peer), true)?;
            let e = protocol(
                self.me.rank,
                format!("reading its message from its memory failed: {e}"),
            );
            return Err(self.fail(e));
        }
        if remote.finish().is_err() {
            // Given up during the read: what `dst` holds may not be the message.
            self.note_withdrawn(peer);
            return Ok(false);
        }
        Ok(true)
    }

    fn note_withdrawn(&mut self, peer: Rank) {
        if !self.withdrawn.contains(&peer) {
            self.withdrawn.push(peer);
        }
    }

    /// A payload of `len` bytes for a message copied out of a slot or read from its
    /// sender's memory: a buffer of the pool, which holds buffers of a slot's size only
    /// (up to one per slot), so that what it keeps is the same whatever lengths came
    /// before (buffers grown to each new length would creep up over a run). Longer
    /// messages get a buffer of their own, freed after.
    pub(super) fn pooled(&mut self, len: usize) -> Payload {
        pooled(&mut self.large, self.slot_bytes, len)
    }

    /// A message's bytes as a payload: copied into a buffer of this transport's if they
    /// are in a slot or still in the sender's memory.
    /// `None` if the sender withdrew it (see [`Self::read_remote`]).
    pub(super) fn here(&mut self, peer: Rank, msg: Msg) -> Result<Option<Payload>, TransportError> {
        match msg {
            Msg::Here(p) => Ok(Some(p)),
            Msg::Slot(lease) => {
                let mut p = self.pooled(lease.len());
                lease.read_into(p.as_bytes_mut());
                Ok(Some(p))
            }
            Msg::There(remote) => {
                let mut p = self.pooled(remote.len);
                if !self.read_remote(peer, remote, p.as_bytes_mut())? {
                    return Ok(None);
                }
                Ok(Some(p))
            }
        }
    }

    /// Reads every message held here that is still in its sender's memory into a buffer
    /// of this rank's (up to [`HEAP_CAP`] per peer), so that no sender waits on the order
    /// in which this rank's schedule asks for them. Whether any was.
    pub(super) fn settle_remote(&mut self) -> Result<bool, TransportError> {
        let there: Vec<(Rank, crate::types::TagKey)> = self
            .arrived
            .iter()
            // Longer than a slot: left where it is until asked for, into its destination
            // (its sender's tickets bound how many wait so).
            .filter(|(_, (_, (m, _)))| matches!(m, Msg::There(r) if r.len <= self.slot_bytes))
            .map(|(k, _)| *k)
            .collect();
        let mut any = false;
        for key in there {
            // Whatever this rank holds already: these are bounded by the sender's tickets
            // and slot size, and a sender waits on each.
            let peer = key.0;
            let Some((tag, (msg, charge))) = self.arrived.remove(&key) else {
                continue;
            };
            if let Some(Some(l)) = self.links.get_mut(peer.index()) {
                l.copied = l.copied.saturating_sub(charge);
            }
            let Some(payload) = self.here(peer, msg)? else {
                any = true;
                continue;
            };
            let len = payload.len();
            self.hold(peer, tag, Msg::Here(payload), len)?;
            any = true;
        }
        Ok(any)
    }

    /// The message `tag` of `len` bytes from local `peer`, if it arrived.
    pub(super) fn find_local(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Msg>, TransportError> {
        self.check()?;
        // The common case first: nothing held here, and the peer's next message is the
        // one asked for: straight from its ring, not through the arrival map.
        if self.arrived.is_empty() {
            match self.take_next(peer.index())? {
                Some((sent, (msg, charge))) => {
                    if let Some(Some(link)) = self.links.get(peer.index()) {
                        (link.wake)();
                    }
                    if sent.key() == tag.key() {
                        check_tag(self.me.rank, peer, tag, sent, msg.len(), len)?;
                        return Ok(Some(msg));
                    }
                    // Off its ring for another receive, which may be waiting: news for
                    // the next wait, which compares with counters from before it moved
                    // (a quick look records none).
                    if !self.marked {
                        self.mark_seen();
                        self.seen_drained = self.seen_drained.wrapping_sub(1);
                    }
                    self.hold(peer, sent, msg, charge)?;
                }
                // Nothing from the peer and nothing held: a small call spinning for its
                // message. The full look (every ring, the counters a wait compares, the
                // control plane) is for every few such misses and for the wait: what it
                // finds then is no later than a wait would find it.
                None if self.quick_misses < QUICK_MISSES => {
                    self.quick_misses += 1;
                    return Ok(None);
                }
                None => {}
            }
        }
        self.quick_misses = 0;
        // Counters first, then look: a wait after this sleeps only if nothing arrived
        // since. Before the rings are drained: what this look moves off them for another
        // receive (one that missed quickly, recording nothing) is news for the next wait.
        self.mark_seen();
        let mut found = self.take(peer, tag);
        if found.is_none() {
            self.drain()?;
            found = self.take(peer, tag);
        }
        match found {
            Some((sent, msg)) => {
                check_tag(self.me.rank, peer, tag, sent, msg.len(), len)?;
                Ok(Some(msg))
            }
            None => {
                self.control(Some(peer), false)?;
                Ok(None)
            }
        }
    }
}

/// [`ShmTransport::pooled`], from `large`, a pool of buffers of `slot_bytes`.
fn pooled(large: &mut Vec<Vec<u8>>, slot_bytes: usize, len: usize) -> Payload {
    let buf = large
        .pop()
        .unwrap_or_else(|| Vec::with_capacity(slot_bytes.max(len)));
    Payload::reuse(buf, len)
}
