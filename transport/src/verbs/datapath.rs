//! The data path: [`Transport`] for [`VerbsTransport`]. Sends go by RDMA WRITE WITH IMM
//! into a slot the peer lent, from one of this rank's registered buffers or (zero copy)
//! straight from registered caller memory; receives are the slots themselves.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::ffi::{MemoryRegion, Sge};
use super::wire::{encode_header, wr, HEADER, WR_DATA, WR_INLINE};
use super::{VerbsTransport, ZERO_COPY_MIN};

/// How long [`Transport::reap_borrowed`] waits for stopped queue pairs to flush.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);
use crate::error::TransportError;
use crate::transport::{check_arrival, Payload, Registered, SendState, Transport};
use crate::types::{Rank, Tag};

impl Transport for VerbsTransport {
    fn name(&self) -> &'static str {
        "verbs"
    }

    fn rank(&self) -> Rank {
        self.rank
    }

    fn nranks(&self) -> usize {
        self.nranks
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
        self.check()?;
        let p = self.peer_index(peer)?;
        let len = payload.len();
        if len > self.slot_bytes {
            return Err(TransportError::MessageTooLarge {
                rank: self.rank,
                peer,
                len,
                max: self.slot_bytes,
            });
        }
        if !self.room_for(p)? {
            return Ok(Some(payload));
        }
        // The peer's slot must hold it (peers configured with smaller segments lend smaller
        // slots): checked before any buffer changes hands.
        self.check_slot_fits(p, HEADER + len)?;
        // The message must sit in one of this transport's registered buffers.
        let mut payload = payload;
        let id = if payload.head() == HEADER {
            self.lent.remove(&(payload.framed_mut().as_ptr() as usize))
        } else {
            None
        };
        let (id, mut v) = match id {
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
        if let Some(h) = v.first_chunk_mut::<HEADER>() {
            encode_header(tag, len, h);
        }
        let lkey = self.bufs[id as usize].mr.lkey();
        let total = HEADER + len;
        // `room_for` and `check_slot_fits` saw the peer and its first credit.
        let Some((peer_state, credit)) = self.peers[p]
            .as_mut()
            .and_then(|s| s.credits.pop_front().map(|c| (s, c)))
        else {
            // Registered memory is never freed behind the device's back: back to the pool.
            self.free.push((id, v));
            return Err(TransportError::InvalidPeer {
                rank: self.rank,
                peer,
                nranks: self.nranks,
            });
        };
        let inline = total <= peer_state.qp.max_inline as usize;
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
        let posted = unsafe {
            peer_state
                .qp
                .post_write_imm(wr_id, &[sge], credit.addr, credit.rkey, credit.id, inline)
        };
        if let Err(e) = posted {
            self.free.push((id, v));
            return Err(self.verbs_error(Some(p), e));
        }
        peer_state.sends += 1;
        if inline {
            self.free.push((id, v));
        } else {
            self.inflight.insert(wr_id, (id, v));
        }
        Ok(None)
    }

    fn alloc_registered(&mut self, bytes: usize) -> Result<Registered, TransportError> {
        let mut words = Registered::zeroed_words(self.rank, bytes, "a registered buffer")?;
        let start = words.as_ptr() as usize;
        // SAFETY: the region covers `words`, which the returned `Registered` owns; the
        // guard holding the region is dropped before `words` (field order of `Registered`),
        // and neither is dropped while a posted send may read them (the guard counts them;
        // `Registered` leaks both instead). The device only reads the memory, for sends
        // posted by `try_send_borrowed`; no remote access is granted.
        let mr = unsafe {
            MemoryRegion::register(&self.pd, words.as_mut_ptr().cast(), words.len() * 8, false)
        }
        .map_err(|e| self.verbs_error(None, e))?;
        let guard = self.registry.enter(start, start + words.len() * 8, mr);
        Ok(Registered::with_registration(words, bytes, Box::new(guard)))
    }

    fn try_send_borrowed(
        &mut self,
        peer: Rank,
        tag: Tag,
        data: &[u8],
    ) -> Result<SendState, TransportError> {
        let region = match data.len() {
            _ if !self.zero_copy_on => None,
            n if n < ZERO_COPY_MIN || n > self.slot_bytes => None,
            n => self.registry.lookup(data.as_ptr() as usize, n),
        };
        let Some(region) = region else {
            return self.try_send_slice(peer, tag, data).map(SendState::sent);
        };
        self.check()?;
        let p = self.peer_index(peer)?;
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
        let sges = [
            Sge {
                addr: head.as_ptr() as u64,
                len: HEADER as u32,
                lkey: self.bufs[id as usize].mr.lkey(),
            },
            Sge {
                addr: data.as_ptr() as u64,
                len: data.len() as u32,
                lkey: region.lkey,
            },
        ];
        self.next_wr = self.next_wr.wrapping_add(1);
        let wr_id = wr(WR_DATA, p, self.next_wr);
        let Some(state) = self.peers[p].as_mut() else {
            self.free.push((id, head));
            return Err(TransportError::InvalidPeer {
                rank: self.rank,
                peer,
                nranks: self.nranks,
            });
        };
        let Some(credit) = state.credits.pop_front() else {
            self.free.push((id, head));
            return Ok(SendState::NoRoom);
        };
        // Counted before the device can read: the memory is not freed while it is nonzero.
        region.reading.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the header buffer is registered and moves into `inflight` until the
        // completion; `data` lies in registered caller memory (`lkey` from the registry),
        // which stays allocated while its count is nonzero (`Registered` leaks it rather
        // than free it), and which the engine does not return to the caller before this
        // work request completed or was reaped (`reap_borrowed`).
        let posted = unsafe {
            state
                .qp
                .post_write_imm(wr_id, &sges, credit.addr, credit.rkey, credit.id, false)
        };
        if let Err(e) = posted {
            region.reading.fetch_sub(1, Ordering::Release);
            self.free.push((id, head));
            return Err(self.verbs_error(Some(p), e));
        }
        state.sends += 1;
        self.inflight.insert(wr_id, (id, head));
        self.borrowed.insert(wr_id, (p, region.reading));
        self.zero_copy += 1;
        Ok(SendState::InFlight(wr_id))
    }

    fn zero_copy_sends(&self) -> u64 {
        self.zero_copy
    }

    fn reap_borrowed(&mut self) {
        if self.borrowed.is_empty() {
            return;
        }
        // Most complete on their own within a moment.
        let soon = Instant::now() + Duration::from_millis(50);
        while !self.borrowed.is_empty() && Instant::now() < soon {
            self.progress();
            std::thread::yield_now();
        }
        if self.borrowed.is_empty() {
            return;
        }
        // The rest may wait on a dead peer for the whole retry budget (7 ACK timeouts):
        // stop their queue pairs, and the device flushes every work request at once.
        let stuck: std::collections::BTreeSet<usize> =
            self.borrowed.values().map(|(p, _)| *p).collect();
        for &p in &stuck {
            if let Some(peer) = self.peers[p].as_mut() {
                if let Err(e) = peer.qp.stop() {
                    tracing::warn!(peer = p, error = %e, "cannot stop the queue pair");
                }
            }
        }
        let stopped: Vec<String> = stuck.iter().map(|&p| Rank::from(p).to_string()).collect();
        self.fail(TransportError::Aborted {
            rank: self.rank,
            by: self.rank,
            reason: format!(
                "queue pairs to {} stopped to reclaim sends from caller memory after a failure",
                stopped.join(", ")
            ),
        });
        let until = Instant::now() + REAP_TIMEOUT;
        while !self.borrowed.is_empty() && Instant::now() < until {
            self.progress();
            std::thread::sleep(Duration::from_micros(200));
        }
        if !self.borrowed.is_empty() {
            // The memory they read stays allocated and registered (see `Registered`).
            tracing::error!(
                sends = self.borrowed.len(),
                "the device did not flush sends from caller memory: that memory is leaked"
            );
        }
    }

    fn unresponsive(&mut self, within: Duration) -> Vec<Rank> {
        // The TCP connections are the control plane: the probe travels there.
        self.tcp.unresponsive(within)
    }

    fn borrowed_in_flight(&self) -> usize {
        self.borrowed.len()
    }

    fn send_complete(&mut self, token: u64) -> Result<bool, TransportError> {
        if !self.inflight.contains_key(&token) {
            return Ok(true);
        }
        self.progress();
        self.check()?;
        Ok(!self.inflight.contains_key(&token))
    }

    fn try_recv(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Payload>, TransportError> {
        self.check()?;
        let p = self.peer_index(peer)?;
        let key = (peer, tag.key());
        let mut found = self.arrived.remove(&key);
        if found.is_none() {
            self.progress();
            self.check()?;
            found = self.arrived.remove(&key);
        }
        if found.is_none() {
            self.control(false)?;
            if let Some(gone) = self.tcp.peer_gone(Rank::from(p)) {
                // Its last messages may still be in the completion queue.
                self.progress();
                found = Some(self.arrived.remove(&key).ok_or(gone)?);
            }
        }
        match found {
            Some((sent, payload)) => {
                check_arrival(self.rank, peer, tag, sent, payload, len).map(Some)
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

    fn wait(&mut self, deadline: Instant) -> Result<(), TransportError> {
        self.check()?;
        // Aborts and dead peers: checked at most every millisecond here too (a socket read
        // per peer is a system call; blocking below wakes on the sockets anyway).
        self.control(false)?;
        // A bounded busy-poll of the completion queue first: a completion a few
        // microseconds away costs less to spin for than an interrupt and a wake-up.
        // Only while none of this rank's writes are in flight: on a loaded host (Soft-RoCE
        // is the kernel's work on the same CPUs) spinning through a bulk transfer delays
        // the very acknowledgements it waits for.
        let spin = if self.inflight.is_empty() {
            self.spin
        } else {
            Duration::ZERO
        };
        let spin_until = Instant::now() + spin;
        let before = (self.arrived.len(), self.free.len(), self.inflight.len());
        while Instant::now() < spin_until.min(deadline) {
            self.progress();
            self.check()?;
            if (self.arrived.len(), self.free.len(), self.inflight.len()) != before {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        self.wait_inner(deadline)?;
        self.check()
    }

    fn stale(&mut self, current: u32) -> Option<(Rank, Tag)> {
        // Only what has arrived: channels are FIFO, so a stale message is here before
        // anything its sender sent later, and a later call that hears from it sees it.
        crate::transport::stale_in(&self.arrived, current)
    }

    fn abort(&mut self, reason: &str) {
        self.tcp.abort(reason);
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
        // Queue pairs first (the device stops touching every buffer), then the regions,
        // then the memory they covered; the CQ, channel, domain and context follow through
        // their `Arc`s.
        let mut graveyard: Vec<Vec<u8>> = Vec::new();
        for peer in self.peers.iter_mut().flatten() {
            graveyard.extend(peer.advertised.drain().map(|(_, v)| v));
        }
        self.peers.clear();
        for (_, (_, reading)) in self.borrowed.drain() {
            // Its queue pair is destroyed: the device reads nothing more.
            reading.fetch_sub(1, Ordering::Release);
        }
        graveyard.extend(self.inflight.drain().map(|(_, (_, v))| v));
        graveyard.extend(self.free.drain(..).map(|(_, v)| v));
        graveyard.extend(self.arrived.drain().map(|(_, (_, p))| p.into_storage()));
        while let Some(v) = self.returns.pop() {
            graveyard.push(v);
        }
        self.bufs.clear();
        drop(graveyard);
    }
}
