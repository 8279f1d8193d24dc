//! The data path: [`Transport`] for [`VerbsTransport`]. Sends go by RDMA WRITE WITH IMM
//! into a slot the peer lent, or into a destination it offered for that message, from one
//! of this rank's registered buffers or (zero copy) straight from registered caller memory;
//! receives are the slots themselves, or already in place.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::ffi::{Access, MemoryRegion, Sge, VerbsError};
use super::registry::Remote;
use super::wire::{
    encode_header, wr, Credit, HEADER, TRAILER, WR_DATA, WR_INLINE, WR_WINDOW_WRITE,
};
use super::{Peer, VerbsTransport, ZERO_COPY_MIN};
use crate::error::TransportError;
use crate::transport::{
    check_arrival, is_stale, Group, Lend, Link, Offered, Payload, Registration, SendState,
    Transport,
};
use crate::types::{Rank, Tag};

impl Transport for VerbsTransport {
    fn endpoint(&self) -> &crate::transport::Endpoint {
        &self.me
    }

    fn alloc(&mut self, len: usize) -> Payload {
        if len <= self.slot_bytes {
            if let Ok((id, v)) = self.take_buffer() {
                self.lent.insert(v.as_ptr() as usize, id);
                return Payload::lent(v, HEADER, len, &self.returns);
            }
        }
        // Too large (try_send refuses it with a typed error) or registration failed
        // (try_send copies it into a registered buffer).
        Payload::with_head(Vec::new(), HEADER, len)
    }

    fn try_send(
        &mut self,
        peer: Rank,
        tag: Tag,
        payload: Payload,
    ) -> Result<Option<Payload>, TransportError> {
        let Some((p, offer)) = self.ready_for(peer, tag, payload.len())? else {
            return Ok(Some(payload));
        };
        let len = payload.len();
        // The message must sit in one of this transport's registered buffers.
        let mut payload = payload;
        let id = if payload.head() == HEADER {
            self.lent.remove(&(payload.framed_mut().as_ptr() as usize))
        } else {
            None
        };
        let (id, v) = match id {
            Some(id) => {
                self.released(id);
                (id, payload.into_storage())
            }
            None => {
                let (id, mut v) = self
                    .take_buffer()
                    .map_err(|e| self.verbs_error(Some(p), e))?;
                v[HEADER..HEADER + len].copy_from_slice(payload.as_bytes());
                (id, v)
            }
        };
        self.send_in(p, tag, len, id, v, offer).map(|()| None)
    }

    fn register(
        &mut self,
        memory: &mut [u8],
    ) -> Result<Option<Box<dyn Registration>>, TransportError> {
        let (start, len) = (memory.as_ptr() as usize, memory.len());
        // Ranges never overlap in the registry: one inside a registered range is zero-copy
        // already, one across a range's edge stays as it is (copied).
        if len == 0 || !self.registry.is_free(start, len) {
            return Ok(None);
        }
        // Peers write it only where this rank offers it (and only when it offers at all):
        // with scoped grants through a window bound over each offer, else under the
        // region's key.
        let remote = match (self.direct, self.scoped) {
            (false, _) => Remote::None,
            (true, false) => Remote::Region,
            (true, true) => Remote::Windows,
        };
        // SAFETY:
        // - The device touches the range only for sends posted from it and offers of it,
        //   both made while a call holds the caller's slice borrowed and settled before
        //   the call returns (or stopped by `reap_borrowed`, the guard counting what is
        //   left: a guard dropped then is leaked, never deregistered under the device).
        // - The caller owns the memory while it is registered (the trait's contract;
        //   rcoll's `RegisteredSlice` holds the borrow, C callers deregister before
        //   free). If a registration outlives it anyway, the region still holds the pages
        //   it pinned at registration: the device reads and writes those, never memory
        //   this process has since reused.
        let mr = unsafe {
            MemoryRegion::register(
                &self.pd,
                memory.as_mut_ptr(),
                len,
                match remote {
                    Remote::None => Access::Local,
                    Remote::Region => Access::RemoteWrite,
                    Remote::Windows => Access::Windows,
                },
            )
        }
        .map_err(|e| self.verbs_error(None, e))?;
        Ok(Some(Box::new(self.registry.enter(
            start,
            start + len,
            mr,
            remote,
        ))))
    }

    fn try_send_from(
        &mut self,
        peer: Rank,
        tag: Tag,
        data: &[u8],
        lend: Lend,
    ) -> Result<SendState, TransportError> {
        let region = match data.len() {
            _ if !self.zero_copy_on || lend == Lend::No => None,
            n if n < ZERO_COPY_MIN || n > self.slot_bytes => None,
            n => self.registry.lookup(data.as_ptr() as usize, n),
        };
        let Some(region) = region else {
            return self.send_copied(peer, tag, data).map(SendState::sent);
        };
        self.check()?;
        let p = self.peer_index(peer)?;
        if let Some(credit) = self.take_offer(p, tag, data.len()) {
            self.next_wr = self.next_wr.wrapping_add(1);
            let wr_id = wr(WR_DATA, p, self.next_wr);
            let sge = Sge {
                addr: data.as_ptr() as u64,
                len: data.len() as u32,
                lkey: region.lkey,
            };
            // Counted before the device can read: the memory is not freed while nonzero.
            region.reading.fetch_add(1, Ordering::Relaxed);
            // SAFETY: `data` lies in registered caller memory (`lkey` from the registry),
            // which stays allocated while its count is nonzero and which the engine does
            // not return to the caller before this work request completed or was reaped.
            return match unsafe { self.post_offered(p, wr_id, sge, &credit) } {
                Ok(()) => {
                    self.borrowed.insert(wr_id, (p, region.reading));
                    self.zero_copy += 1;
                    self.send_riding(p, tag);
                    Ok(SendState::InFlight(wr_id))
                }
                Err((e, posted)) => {
                    // A posted write still reads the memory: its completion (or flush,
                    // or the reap) releases it.
                    if posted {
                        self.borrowed.insert(wr_id, (p, region.reading));
                    } else {
                        region.reading.fetch_sub(1, Ordering::Release);
                    }
                    Err(e)
                }
            };
        }
        if !self.room_for(p)? {
            return Ok(SendState::NoRoom);
        }
        self.check_slot_fits(p, HEADER + data.len())?;
        // The header from a slot buffer (in flight with the write), the data from the
        // caller's registered memory: one write gathers both into the peer's slot.
        let (id, mut head) = self
            .take_buffer()
            .map_err(|e| self.verbs_error(Some(p), e))?;
        if let Some(h) = head.first_chunk_mut::<HEADER>() {
            encode_header(tag, data.len(), h);
        }
        self.next_wr = self.next_wr.wrapping_add(1);
        let wr_id = wr(WR_DATA, p, self.next_wr);
        let Some(state) = self.peers[p].as_mut() else {
            self.free.push((id, head));
            return Err(TransportError::InvalidPeer {
                rank: self.me.rank,
                peer,
                nranks: self.me.nranks,
            });
        };
        let Some(credit) = state.credits.pop_front() else {
            self.free.push((id, head));
            return Ok(SendState::NoRoom);
        };
        // Grants ride behind the data in the peer's slot, gathered from the header's
        // buffer (with regions, as in `send_in`): first the offers that go with this
        // message, which the peer then holds before it learns the data.
        let rode = state.release_riding(tag.key());
        let mut grants = HEADER;
        if !self.scoped && !state.owed.is_empty() {
            let room = (credit.len as usize).saturating_sub(HEADER + data.len());
            let carried;
            let end = head.len().min(HEADER + room);
            (grants, carried) = state.lend_behind(&mut head, HEADER, end);
            self.grants_carried += carried as u64;
        }
        let lkey = self.bufs[id as usize].mr.lkey();
        let sges = [
            Sge {
                addr: head.as_ptr() as u64,
                len: HEADER as u32,
                lkey,
            },
            Sge {
                addr: data.as_ptr() as u64,
                len: data.len() as u32,
                lkey: region.lkey,
            },
            Sge {
                addr: head.as_ptr() as u64 + HEADER as u64,
                len: (grants - HEADER) as u32,
                lkey,
            },
        ];
        // Counted before the device can read: the memory is not freed while it is nonzero.
        region.reading.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the header buffer (header and grants) is registered and moves into
        // `inflight` until the completion; `data` lies in registered caller memory (`lkey`
        // from the registry),
        // which stays allocated while its count is nonzero (`Registered` leaks it rather
        // than free it), and which the engine does not return to the caller before this
        // work request completed or was reaped (`reap_borrowed`).
        let posted = unsafe { state.post_message(p, wr_id, &sges, &credit, false) };
        if let Err((e, write_posted)) = posted {
            if write_posted {
                // Its completion (or flush) returns the header and releases the region.
                self.inflight.insert(wr_id, (id, head));
                self.borrowed.insert(wr_id, (p, region.reading));
            } else {
                region.reading.fetch_sub(1, Ordering::Release);
                self.free.push((id, head));
            }
            return Err(self.broken_by(p, e));
        }
        self.inflight.insert(wr_id, (id, head));
        self.borrowed.insert(wr_id, (p, region.reading));
        self.zero_copy += 1;
        if rode {
            // Those that did not fit behind it go right after it.
            self.send_credits(true);
        }
        Ok(SendState::InFlight(wr_id))
    }

    fn reap_borrowed(&mut self) {
        self.reap();
    }

    fn send_complete(&mut self, token: u64) -> Result<bool, TransportError> {
        // A zero-copy write into an offer has no slot buffer in flight: only its region's
        // count.
        let pending = |t: &Self| t.inflight.contains_key(&token) || t.borrowed.contains_key(&token);
        if !pending(self) {
            return Ok(true);
        }
        self.progress();
        self.check()?;
        Ok(!pending(self))
    }

    fn offer(
        &mut self,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
        with: Option<Tag>,
    ) -> Result<Offered, TransportError> {
        self.make_offer(peer, tag, dst, with)
    }

    fn link(&self, peer: Rank) -> Link {
        let places_directly = self.direct && matches!(self.peers.get(peer.index()), Some(Some(_)));
        Link {
            places_directly,
            // One queue pair per peer carries sends and the credit messages (or messages)
            // that carry offers, in the order posted, and its responder executes them in
            // that order. A retransmission that reads the memory again is a duplicate
            // there, which rxe acknowledges without writing; a device that wrote it again
            // would write the slot that message landed in, followed by everything sent
            // after it, as for any slot. (Scoped offers wait for nothing but binds in
            // flight anyway.)
            offers_follow_sends: !self.scoped && places_directly,
            ..Link::default()
        }
    }

    fn try_recv_into(
        &mut self,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        self.take_into(peer, tag, dst)
    }

    fn try_recv(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Payload>, TransportError> {
        match self.take_arrival(peer, tag)? {
            Some((sent, a)) => {
                let payload = self.lend(a);
                check_arrival(self.me.rank, peer, tag, sent, payload, len).map(Some)
            }
            None => Ok(None),
        }
    }

    fn recycle(&mut self, mut payload: Payload) {
        if payload.head() != HEADER {
            return;
        }
        let ptr = payload.framed_mut().as_ptr() as usize;
        if let Some(id) = self.lent.remove(&ptr) {
            self.released(id);
            let v = payload.into_storage();
            if self.bufs.get(id as usize).is_some_and(|b| b.ptr == ptr) {
                self.free.push((id, v));
                self.replenish();
            }
        }
    }
}

impl Group for VerbsTransport {
    fn statistics(&self) -> crate::Statistics {
        let advertised: usize = self
            .peers
            .iter()
            .flatten()
            .map(|p| p.advertised.len())
            .sum();
        crate::Statistics {
            zero_copy_sends: self.zero_copy,
            placed_receives: self.placed_count,
            borrowed_in_flight: self.borrowed.len() + self.offers.len() + self.withdrawing.len(),
            pool_buffers: self.bufs.len(),
            pool_bytes: self.bufs.len() * (HEADER + self.slot_bytes + TRAILER),
            pool_accounted: self.free.len()
                + self.retired.len()
                + advertised
                + self.inflight.len()
                + self.arrived.len()
                // Lent to the caller, and (until taken back) on their way home if dropped.
                + self.lent.len(),
        }
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn control_check(&mut self, peer: Option<Rank>) -> Result<(), TransportError> {
        self.check()?;
        self.control(true)?;
        match peer.and_then(|p| self.tcp.peer_gone(p)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn known_gone(&mut self, peer: Rank) -> Option<TransportError> {
        self.tcp.peer_gone(peer)
    }

    fn watch_fd(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<()> {
        self.tcp.register_fd(fd)
    }

    fn stall_report(&self, peer: Option<Rank>) -> String {
        let one = |p: usize| {
            self.peers[p].as_ref().map(|x| {
                format!(
                    "{}: {} of its slots to write, {} lent to it, {} owed ({} unsent), {} of \
                     its messages held, {} send-queue places taken ({} binds), {} \
                     destinations offered to it, {} of its offers held",
                    Rank::from(p),
                    x.credits.len(),
                    x.advertised.len(),
                    x.deficit,
                    x.owed.len(),
                    x.held,
                    x.sends,
                    x.binds,
                    x.offers_out,
                    x.offers.len()
                )
            })
        };
        // The peer waited for, then (in small groups) the others: a stall is often a
        // third rank's.
        let mut order: Vec<usize> = peer.map(Rank::index).into_iter().collect();
        if self.me.nranks <= 8 || peer.is_none() {
            order.extend((0..self.me.nranks).filter(|&p| Some(p) != peer.map(Rank::index)));
        }
        let mut parts: Vec<String> = order.into_iter().filter_map(one).collect();
        parts.push(format!(
            "{} buffers free, {} sends in flight, slots due: {}, late wake-ups {}",
            self.free.len(),
            self.inflight.len(),
            self.replenish_due,
            self.late_wakeups
        ));
        parts.join("; ")
    }

    fn unresponsive(&mut self, within: Duration) -> Vec<Rank> {
        // The TCP connections are the control plane: the probe travels there.
        self.tcp.unresponsive(within)
    }

    fn relax(&self) {
        // A system call per poll only delays the answer when every rank of this host has
        // a CPU: a peer's message is the device's work (with rxe, done in the sender's
        // system call), not this CPU's. While this rank's own writes are in flight rxe
        // may need this CPU for them (as in `wait`), and on a crowded host a peer may; an
        // unknown host counts as crowded.
        if self.crowded || !self.inflight.is_empty() {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    fn wait(&mut self, deadline: Instant) -> Result<(), TransportError> {
        self.check()?;
        // Aborts and dead peers: checked at most every millisecond here too (a socket read
        // per peer is a system call; blocking below wakes on the sockets anyway).
        self.control(false)?;
        // Completions taken since the last wait (by the engine's own polls: a send's
        // `room_for` or a receive's `take_arrival`) may be what another of its operations
        // waits for: the engine looks again before this rank sleeps.
        if self.taken != self.taken_seen {
            self.taken_seen = self.taken;
            return Ok(());
        }
        // A bounded busy-poll of the completion queue first: a completion a few
        // microseconds away costs less to spin for than an interrupt and a wake-up.
        // Only while none of this rank's sends from slot buffers are in flight: on a
        // loaded host (Soft-RoCE is the kernel's work on the same CPUs) spinning through a
        // bulk transfer delays the very acknowledgements it waits for. (Zero-copy writes
        // from the caller's memory do not stop it: measured in the VM, it made no
        // difference either way.)
        let spin = if self.inflight.is_empty() {
            self.spin
        } else {
            Duration::ZERO
        };
        // (A spin of years ends at the deadline.)
        let spin_until = Instant::now().checked_add(spin).unwrap_or(deadline);
        let before = self.mark();
        while Instant::now() < spin_until.min(deadline) {
            self.progress();
            self.check()?;
            if self.mark() != before {
                self.taken_seen = self.taken;
                return Ok(());
            }
            std::hint::spin_loop();
        }
        self.wait_inner(deadline)?;
        self.taken_seen = self.taken;
        self.check()
    }

    fn stale(&mut self, current: u32) -> Option<(Rank, Tag)> {
        // Offers for this call or earlier ones were not used: each tag is sent once, and
        // this rank's call is over.
        for peer in self.peers.iter_mut().flatten() {
            if !peer.offers.is_empty() {
                peer.offers
                    .retain(|_, (tag, _)| !is_stale(tag.collective, current));
            }
        }
        // Only what has arrived: channels are FIFO, so a stale message is here before
        // anything its sender sent later, and a later call that hears from it sees it.
        crate::transport::stale_in(&self.arrived, current)
    }

    fn abort(&mut self, reason: &str) {
        self.tcp.abort(reason);
    }

    fn begin_epoch(&mut self) -> Result<u32, TransportError> {
        self.next_epoch()
    }

    fn commit_epoch(&mut self) {
        self.tcp.settle_epoch();
    }

    fn discard_from(&mut self, peer: Rank, old: &dyn Fn(&Tag) -> bool) {
        self.discard(peer, old);
    }

    fn exclude(&mut self, peer: Rank) {
        self.forget(peer);
    }
}

impl Drop for VerbsTransport {
    /// Waits (briefly) for this rank's sends to complete, so that a peer still gets the
    /// last messages, then destroys queue pairs before the memory they use.
    fn drop(&mut self) {
        let until = Instant::now() + Duration::from_secs(2);
        while self.broken.is_none()
            && self.peers.iter().flatten().any(|p| p.sends > 0)
            && Instant::now() < until
        {
            self.progress();
            std::thread::yield_now();
        }
        // Windows first (a bound window holds its queue pair and region), then queue pairs
        // (the device stops touching every buffer), then the regions, then the memory they
        // covered; the CQ, channel, domain and context follow through their `Arc`s.
        // Queue pairs to the error state first: a peer's write in flight then times out
        // on its side, as with a process that died, instead of meeting a freed window (a
        // remote access error that would hide why this rank went).
        for peer in self.peers.iter_mut().flatten() {
            let _ = peer.qp.stop();
        }
        for b in &mut self.bufs {
            b.window = None;
        }
        for o in self
            .offers
            .values_mut()
            .chain(self.withdrawing.values_mut())
        {
            o.window = None;
        }
        self.offer_windows.clear();
        let mut graveyard: Vec<Vec<u8>> = Vec::new();
        for peer in self.peers.iter_mut().flatten() {
            graveyard.extend(peer.advertised.drain().map(|(_, v)| v));
        }
        self.peers.clear();
        for (_, (_, reading)) in self.borrowed.drain() {
            // Its queue pair is destroyed: the device reads nothing more.
            reading.fetch_sub(1, Ordering::Release);
        }
        for (_, o) in self.offers.drain().chain(self.withdrawing.drain()) {
            // Likewise: no peer writes through a destroyed queue pair.
            o.reading.fetch_sub(1, Ordering::Release);
        }
        graveyard.extend(self.inflight.drain().map(|(_, (_, v))| v));
        graveyard.extend(self.free.drain(..).map(|(_, v)| v));
        graveyard.extend(self.arrived.drain().map(|(_, (_, a))| a.v));
        while let Some(v) = self.returns.pop() {
            graveyard.push(v);
        }
        self.bufs.clear();
        drop(graveyard);
    }
}

impl VerbsTransport {
    /// What this endpoint runs on ([`crate::transport::Endpoint::details`]), once its
    /// queue pairs are connected.
    pub(super) fn describe(&self) -> String {
        let s = &self.selection;
        format!(
            "{}:{}, MTU {}, queue pairs to {} of {} peers, slots lent as {}; {}",
            s.device,
            s.port,
            super::select::mtu_bytes(s.active_mtu),
            self.peers.iter().flatten().count(),
            self.me.nranks - 1,
            if self.scoped && self.direct {
                "memory windows (one peer, one write), and destinations offered through \
                 windows over registered buffers"
            } else if self.scoped {
                "memory windows (one peer, one write)"
            } else if self.direct {
                "registered regions, and destinations offered in registered buffers"
            } else {
                "registered regions"
            },
            if self.crowded {
                "waits yield (more ranks than CPUs)"
            } else {
                "waits spin"
            }
        )
    }

    /// Sends `data` copied into a registered buffer of the pool: no payload lent and taken
    /// back on the way. `false`: no room yet.
    fn send_copied(&mut self, peer: Rank, tag: Tag, data: &[u8]) -> Result<bool, TransportError> {
        let Some((p, offer)) = self.ready_for(peer, tag, data.len())? else {
            return Ok(false);
        };
        let (id, mut v) = self
            .take_buffer()
            .map_err(|e| self.verbs_error(Some(p), e))?;
        v[HEADER..HEADER + data.len()].copy_from_slice(data);
        self.send_in(p, tag, data.len(), id, v, offer)
            .map(|()| true)
    }

    /// Whether a message of `len` bytes with `tag` can go to `peer` now: its index and the
    /// destination it offered for the tag, if any; `None` when there is no room yet.
    fn ready_for(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<(usize, Option<Credit>)>, TransportError> {
        self.check()?;
        let p = self.peer_index(peer)?;
        if len > self.slot_bytes {
            return Err(TransportError::MessageTooLarge {
                rank: self.me.rank,
                peer,
                len,
                max: self.slot_bytes,
            });
        }
        let offer = self.take_offer(p, tag, len);
        if offer.is_none() {
            if !self.room_for(p)? {
                return Ok(None);
            }
            // The peer's slot must hold it (peers configured with smaller segments lend
            // smaller slots): checked before any buffer changes hands.
            self.check_slot_fits(p, HEADER + len)?;
        }
        Ok(Some((p, offer)))
    }

    /// Sends the `len` bytes after the header room of registered buffer `id` (`v`) to peer
    /// `p` as `tag`: into the destination `offer`ed for it, or into the peer's next slot.
    fn send_in(
        &mut self,
        p: usize,
        tag: Tag,
        len: usize,
        id: u32,
        mut v: Vec<u8>,
        offer: Option<Credit>,
    ) -> Result<(), TransportError> {
        let lkey = self.bufs[id as usize].mr.lkey();
        if let Some(credit) = offer {
            // The data alone, into the destination offered for it.
            self.next_wr = self.next_wr.wrapping_add(1);
            let wr_id = wr(WR_DATA, p, self.next_wr);
            let sge = Sge {
                addr: v.as_ptr() as u64 + HEADER as u64,
                len: len as u32,
                lkey,
            };
            // SAFETY: `v` is registered (buffer `id`) and moves into `inflight` below,
            // untouched until this work request completes or is flushed.
            return match unsafe { self.post_offered(p, wr_id, sge, &credit) } {
                Ok(()) => {
                    self.inflight.insert(wr_id, (id, v));
                    self.send_riding(p, tag);
                    Ok(())
                }
                Err((e, posted)) => {
                    // A posted write still reads `v`: it stays in flight until then.
                    if posted {
                        self.inflight.insert(wr_id, (id, v));
                    } else {
                        self.free.push((id, v));
                    }
                    Err(e)
                }
            };
        }
        if let Some(h) = v.first_chunk_mut::<HEADER>() {
            encode_header(tag, len, h);
        }
        let mut total = HEADER + len;
        // Grants ride behind the message only with regions: a window's bind is retired by
        // the completion of the credit message that lends it.
        let scoped = self.scoped;
        // `room_for` and `check_slot_fits` saw the peer and its first credit.
        let Some((peer_state, credit)) = self.peers[p]
            .as_mut()
            .and_then(|s| s.credits.pop_front().map(|c| (s, c)))
        else {
            // Registered memory is never freed behind the device's back: back to the pool.
            self.free.push((id, v));
            return Err(TransportError::InvalidPeer {
                rank: self.me.rank,
                peer: Rank::from(p),
                nranks: self.me.nranks,
            });
        };
        let max_inline = peer_state.qp.max_inline as usize;
        let mut carried = 0;
        let rode = peer_state.release_riding(tag.key());
        if !scoped && !peer_state.owed.is_empty() {
            // Into the peer's slot and this buffer, and inline still if the message is.
            let mut end = v.len().min(credit.len as usize);
            if total <= max_inline {
                end = end.min(max_inline);
            }
            (total, carried) = peer_state.lend_behind(&mut v, total, end);
        }
        self.grants_carried += carried as u64;
        let inline = total <= max_inline;
        self.next_wr = self.next_wr.wrapping_add(1);
        let wr_id = wr(if inline { WR_INLINE } else { WR_DATA }, p, self.next_wr);
        let sge = Sge {
            addr: v.as_ptr() as u64,
            len: total as u32,
            lkey,
        };
        // SAFETY: `v` is registered (buffer `id`); unless inline it moves into `inflight`
        // below, untouched until this work request completes; inline data is copied
        // during the call while `v` is alive.
        let posted = unsafe { peer_state.post_message(p, wr_id, &[sge], &credit, inline) };
        if let Err((e, write_posted)) = posted {
            if write_posted && !inline {
                self.inflight.insert(wr_id, (id, v));
            } else {
                self.free.push((id, v));
            }
            return Err(self.broken_by(p, e));
        }
        self.last_credit = Some((p, credit));
        if inline {
            self.free.push((id, v));
        } else {
            self.inflight.insert(wr_id, (id, v));
        }
        if rode {
            // Those that did not fit behind it go right after it.
            self.send_credits(true);
        }
        Ok(())
    }

    /// After this rank's message `tag` to peer `p` was posted with no room for grants:
    /// the offers that were to go with it ([`Transport::offer`] with `with`) go now, behind it.
    fn send_riding(&mut self, p: usize, tag: Tag) {
        if self.peers[p]
            .as_mut()
            .is_some_and(|x| x.release_riding(tag.key()))
        {
            self.send_credits(true);
        }
    }

    /// A failure to post to peer `p`: the transport is broken (a message may be half
    /// posted), and the error names the peer.
    pub(super) fn broken_by(&mut self, p: usize, e: VerbsError) -> TransportError {
        let e = self.verbs_error(Some(p), e);
        if self.per_peer {
            self.fail_peer(p, e.clone());
        } else {
            self.fail(e.clone());
        }
        e
    }
}

impl Peer {
    /// Posts one message, `sges` (header first), into the slot of `credit` as `wr_id`:
    /// RDMA WRITE WITH IMM (the slot id), or into a window RDMA WRITE and then SEND WITH
    /// INVALIDATE of the slot id. On an error, whether the write was posted.
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_write_imm`](super::ffi::QueuePair::post_write_imm).
    pub(super) unsafe fn post_message(
        &mut self,
        p: usize,
        wr_id: u64,
        sges: &[Sge],
        credit: &Credit,
        inline: bool,
    ) -> Result<(), (VerbsError, bool)> {
        if self.scoped {
            let note = credit.id.to_le_bytes();
            // The message's id goes on the signaled send; the write completes only on error.
            let ids = (wr(WR_WINDOW_WRITE, p, wr_id as u32), wr_id);
            // SAFETY: the caller's contract; the note is inline.
            let r = unsafe {
                self.qp
                    .post_write_invalidate(ids, sges, credit.addr, credit.rkey, &note, inline)
            };
            self.sends += match &r {
                Ok(()) => 2,
                Err((_, true)) => 1,
                Err((_, false)) => 0,
            };
            r
        } else {
            // SAFETY: the caller's contract.
            unsafe {
                self.qp
                    .post_write_imm(wr_id, sges, credit.addr, credit.rkey, credit.id, inline)
            }
            .map_err(|e| (e, false))?;
            self.sends += 1;
            Ok(())
        }
    }
}
