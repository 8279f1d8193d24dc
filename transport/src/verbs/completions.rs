//! Completions: polling the completion queue, what each completion means (a send done, a
//! message or credits arrived, an error), and blocking on the completion channel.

use std::time::{Duration, Instant};

use super::ffi::{self, VerbsError};
use super::wire::CREDIT_BYTES;
use super::wire::{
    decode_header, trailing_grants, HEADER, HELLO, OFFER, WR_BIND, WR_CREDIT, WR_DATA, WR_HELLO,
    WR_INLINE, WR_INVALIDATE, WR_KIND, WR_RECV, WR_WINDOW_WRITE,
};
use super::{Arrival, VerbsTransport, CTRL_BYTES};
use crate::error::TransportError;
use crate::transport::Group;
use crate::transport::Payload;
use crate::types::{Rank, Tag};

impl VerbsTransport {
    pub(super) fn verbs_error(&self, peer: Option<usize>, e: VerbsError) -> TransportError {
        TransportError::Verbs {
            rank: self.me.rank,
            peer: peer.map(Rank::from),
            verb: e.verb,
            errno: e.errno,
            message: e.message,
        }
    }

    pub(super) fn fail(&mut self, e: TransportError) {
        if self.broken.is_none() {
            tracing::warn!(error = %e, "verbs transport failed");
            self.broken = Some(e);
        }
    }

    /// Polls completions and handles them; then sends owed credits.
    pub(super) fn progress(&mut self) {
        if self.reclaim_returned() || self.replenish_due {
            self.replenish();
        }
        loop {
            self.completions.clear();
            let mut batch = std::mem::take(&mut self.completions);
            let n = match self.cq.poll(&mut batch, 16) {
                Ok(n) => n,
                Err(e) => {
                    let e = self.verbs_error(None, e);
                    self.fail(e);
                    0
                }
            };
            for c in &batch {
                self.complete(c);
            }
            self.completions = batch;
            if n < 16 {
                break;
            }
        }
        // Offers go out at once (with any credits owed behind them): a peer's write that
        // overtakes its offer lands in a slot and is copied out.
        let offers = std::mem::take(&mut self.offers_due);
        self.send_credits(offers);
    }

    pub(super) fn complete(&mut self, c: &ffi::Completion) {
        self.taken += 1;
        // (Most sends borrow nothing: no hashing then.)
        if let Some((_, reading)) = match self.borrowed.is_empty() {
            true => None,
            false => self.borrowed.remove(&c.wr_id),
        } {
            // Done, or flushed: either way the device no longer reads that memory.
            reading.fetch_sub(1, std::sync::atomic::Ordering::Release);
        }
        let p = ((c.wr_id >> 32) & 0xff_ffff) as usize;
        let kind = c.wr_id & WR_KIND;
        if c.status != ffi::WC_SUCCESS {
            let scoped = matches!(self.peers.get(p), Some(Some(x)) if x.scoped);
            let op = match kind {
                WR_DATA | WR_INLINE if scoped => "SEND WITH INVALIDATE (after its RDMA WRITE)",
                WR_DATA | WR_INLINE => "RDMA WRITE WITH IMM",
                WR_WINDOW_WRITE => "RDMA WRITE (into a window)",
                WR_BIND => "BIND MW (lending a slot or offering a destination)",
                WR_INVALIDATE => "LOCAL INVALIDATE (withdrawing an offer)",
                WR_CREDIT => "SEND (credits)",
                WR_HELLO => "RDMA WRITE WITH IMM (connectivity check)",
                _ => "RECV",
            };
            if kind == WR_INVALIDATE {
                self.withdrawn((c.wr_id & 0xffff_ffff) as u32, false);
            }
            let mut status = ffi::status_str(c.status);
            if kind == WR_HELLO || c.status == 12 {
                // Retries exhausted at setup is almost always addressing: say what was used.
                status = format!("{status}; local {}", self.selection.gid.why);
            }
            if self.per_peer {
                // The peer's alone (see `epoch`): its buffer comes back, the others go on.
                if let Some(Some(peer)) = self.peers.get_mut(p) {
                    peer.sends = peer.sends.saturating_sub(1);
                }
                if let Some((id, v)) = self.inflight.remove(&c.wr_id) {
                    self.free.push((id, v));
                }
                let e = TransportError::Completion {
                    rank: self.me.rank,
                    peer: Rank::from(p),
                    op,
                    status,
                    vendor_err: c.vendor_err,
                };
                self.fail_peer(p, e);
                return;
            }
            let failed = TransportError::Completion {
                rank: self.me.rank,
                peer: Rank::from(p),
                op,
                status,
                vendor_err: c.vendor_err,
            };
            // The pair is broken, whatever the transport's error names (a new epoch
            // carries on without it).
            self.fail_peer(p, failed.clone());
            // Flushes after the first error repeat it; keep the first.
            if self.broken.is_none() {
                let e = self.cause_behind(p, failed);
                self.fail(e);
            }
            return;
        }
        match kind {
            // A window write completes on its own only when signaled (fault injection).
            WR_DATA | WR_INLINE | WR_CREDIT | WR_HELLO | WR_WINDOW_WRITE => {
                if let Some(Some(peer)) = self.peers.get_mut(p) {
                    // A message into a window retires its write too; a credit message the
                    // binds posted before it (its index).
                    let retired = match kind {
                        WR_DATA | WR_INLINE => peer.wrs_per_message(),
                        WR_CREDIT => 1 + (c.wr_id & 0xffff_ffff) as u32,
                        _ => 1,
                    };
                    peer.sends = peer.sends.saturating_sub(retired);
                    // Binds wait for send-queue room (`replenish`).
                    if self.scoped && peer.deficit > 0 {
                        self.replenish_due = true;
                    }
                }
                // An inline message's buffer went back to the pool when it was posted.
                let buffer = match kind {
                    WR_INLINE => None,
                    _ => self.inflight.remove(&c.wr_id),
                };
                if let Some((id, v)) = buffer {
                    self.free.push((id, v));
                    self.replenish_due = true;
                }
            }
            WR_INVALIDATE => {
                if let Some(Some(peer)) = self.peers.get_mut(p) {
                    peer.sends = peer.sends.saturating_sub(1);
                }
                self.withdrawn((c.wr_id & 0xffff_ffff) as u32, true);
            }
            WR_RECV => {
                let Some(&from) = self.by_qpn.get(&c.qp_num) else {
                    return;
                };
                let index = (c.wr_id & 0xffff_ffff) as u32;
                if c.opcode == ffi::WC_RECV_RDMA_WITH_IMM {
                    if self.scoped && c.imm != HELLO {
                        // A write with immediate leaves the window (a slot's or an offer's)
                        // open behind it.
                        let what = if c.imm & OFFER != 0 {
                            "destination"
                        } else {
                            "slot"
                        };
                        self.fail(TransportError::Protocol {
                            rank: self.me.rank,
                            peer: Rank::from(from),
                            reason: format!(
                                "wrote {what} {:#x} with an immediate instead of invalidating \
                                 its window",
                                c.imm
                            ),
                        });
                    } else if c.imm != HELLO && c.imm & OFFER != 0 {
                        self.landed(from, c.imm, c.byte_len as usize);
                    } else {
                        self.arrival(from, c.imm);
                    }
                } else if let (ffi::WC_RECV, Some(rkey)) = (c.opcode, c.invalidated) {
                    self.notice(from, index, c.byte_len as usize, rkey);
                } else if c.opcode == ffi::WC_RECV {
                    if c.byte_len as usize % CREDIT_BYTES != 0 {
                        self.fail(TransportError::Protocol {
                            rank: self.me.rank,
                            peer: Rank::from(from),
                            reason: format!(
                                "sent {} bytes, not credits (flags {:#x}, imm {:#x})",
                                c.byte_len, c.flags, c.imm
                            ),
                        });
                    } else {
                        self.credits_arrived(from, index, c.byte_len as usize);
                    }
                }
                if let Err(e) = self.post_ctrl_recv(from, index) {
                    let e = self.verbs_error(Some(from), e);
                    self.fail(e);
                }
            }
            _ => {}
        }
    }

    /// A SEND WITH INVALIDATE from `from` (receive `index`, `len` bytes) that revoked
    /// `rkey`: the message written into the slot it names is complete, and the peer can
    /// no longer write there. The named slot must be lent to that peer under that key.
    pub(super) fn notice(&mut self, from: usize, index: u32, len: usize, rkey: u32) {
        let me = self.me.rank;
        let Some(peer) = self.peers[from].as_ref() else {
            return;
        };
        // SAFETY: receive `index` completed (this is its completion) and is re-posted only
        // after this returns, so the device is not writing these bytes.
        let note = unsafe { peer.ctrl.copy_out(index as usize * CTRL_BYTES, len.min(4)) };
        let id = <[u8; 4]>::try_from(note.as_slice()).map(u32::from_le_bytes);
        // A write into an offered destination: its window must be the one revoked.
        if let Some(id) = id.ok().filter(|id| id & OFFER != 0) {
            let offered = self
                .offers
                .get(&id)
                .filter(|o| o.peer == from)
                .and_then(|o| o.window.as_ref().map(|w| (w.rkey(), o.len)));
            if let Some((_, len)) = offered.filter(|&(key, _)| key == rkey) {
                return self.landed(from, id, len);
            }
            // Into an offer a failure voided (see `landed`).
            if offered.is_none() && self.voided.get(&id) == Some(&from) {
                return;
            }
            return self.fail(TransportError::Protocol {
                rank: me,
                peer: Rank::from(from),
                reason: format!(
                    "its notice for destination {id:#x} invalidated key {rkey:#x}, which is \
                     not the window of a destination offered to it"
                ),
            });
        }
        let lent_key = id.ok().and_then(|id| {
            peer.advertised.contains_key(&id).then(|| {
                self.bufs[id as usize]
                    .window
                    .as_ref()
                    .map(ffi::MemoryWindow::rkey)
            })
        });
        match (id, lent_key) {
            (Ok(id), Some(Some(key))) if key == rkey && self.scoped => self.arrival(from, id),
            _ => self.fail(TransportError::Protocol {
                rank: me,
                peer: Rank::from(from),
                reason: format!(
                    "its notice {note:02x?} invalidated key {rkey:#x}, which is not the window \
                     of a slot lent to it"
                ),
            }),
        }
    }

    /// The message `tag` from `peer` with the tag it was sent with, if it has arrived
    /// (taken out of the arrivals); the peer's error if it is gone and the message is not
    /// here.
    pub(super) fn take_arrival(
        &mut self,
        peer: Rank,
        tag: Tag,
    ) -> Result<Option<(Tag, Arrival)>, TransportError> {
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
        Ok(found)
    }

    /// Lends arrival `a`'s slot to the engine as the payload it holds, until the engine
    /// recycles it, sends it on, or drops it (then it comes back through `returns`).
    pub(super) fn lend(&mut self, a: Arrival) -> Payload {
        self.lent_from.insert(a.id, a.from);
        self.lent.insert(a.v.as_ptr() as usize, a.id);
        Payload::lent(a.v, HEADER, a.len, &self.returns)
    }

    /// Arrival `a` was copied out (or refused): its peer holds one message fewer, and its
    /// slot is free to lend again at once.
    pub(super) fn let_go(&mut self, a: Arrival) {
        self.holds_one_fewer(a.from);
        if self
            .bufs
            .get(a.id as usize)
            .is_some_and(|b| b.ptr == a.v.as_ptr() as usize)
        {
            self.free.push((a.id, a.v));
            self.replenish();
        }
    }

    pub(super) fn arrival(&mut self, from: usize, imm: u32) {
        let me = self.me.rank;
        let Some(peer) = self.peers[from].as_mut() else {
            return;
        };
        if imm == HELLO {
            peer.hello = true;
            return;
        }
        let Some(v) = peer.advertised.remove(&imm) else {
            self.fail(TransportError::Protocol {
                rank: me,
                peer: Rank::from(from),
                reason: format!("wrote to slot {imm}, which it was not lent"),
            });
            return;
        };
        peer.deficit += 1;
        // No longer than this rank's messages: the rest of the slot is for grants.
        let header = decode_header(&v).filter(|&(_, len)| len <= self.slot_bytes);
        let grants = header.map(|(_, len)| trailing_grants(&v, len));
        if let Some(None) = grants {
            self.free.push((imm, v));
            self.fail(TransportError::Protocol {
                rank: me,
                peer: Rank::from(from),
                reason: format!(
                    "slot {imm}: the grants its header counts behind the message overrun the \
                     slot or do not decode"
                ),
            });
            return;
        }
        match header {
            Some((tag, len)) => {
                peer.held += 1;
                let a = Arrival {
                    id: imm,
                    from,
                    v,
                    len,
                };
                let key = (Rank::from(from), tag.key());
                if let Some((_, twin)) = self.arrived.insert(key, (tag, a)) {
                    // Registered memory is never freed behind the device's back.
                    self.free.push((twin.id, twin.v));
                    self.fail(TransportError::DuplicateTag {
                        rank: me,
                        peer: Rank::from(from),
                        tag,
                    });
                }
            }
            _ => {
                self.free.push((imm, v));
                self.fail(TransportError::Protocol {
                    rank: me,
                    peer: Rank::from(from),
                    reason: "malformed message header in its slot".into(),
                });
            }
        }
        if let Some(Some(grants)) = grants {
            if !grants.is_empty() {
                self.take_grants(from, grants);
            }
        }
        // Lent at the next `progress` (or before blocking): after this rank's own sends
        // that the arrival lets the engine post, which would otherwise queue behind the
        // bind and the credit.
        self.replenish_due = true;
    }

    /// What lies behind a failed completion with peer `p`: a peer that aborted the group
    /// says why over the control plane just before it tears down its queue pairs and
    /// windows (which is what failed here), so give that word a moment to arrive and
    /// prefer it; otherwise the completion error itself.
    fn cause_behind(&mut self, p: usize, failed: TransportError) -> TransportError {
        let until = Instant::now() + Duration::from_millis(100);
        loop {
            if let Err(cause) = self.tcp.control() {
                return cause;
            }
            if Instant::now() >= until || self.tcp.peer_gone(Rank::from(p)).is_some() {
                return failed;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub(super) fn check(&mut self) -> Result<(), TransportError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        Ok(())
    }

    /// Checks the control plane (aborts, dead peers) at most every millisecond.
    pub(super) fn control(&mut self, force: bool) -> Result<(), TransportError> {
        if force || self.last_control.elapsed() >= Duration::from_millis(1) {
            self.last_control = Instant::now();
            self.tcp.control()?;
        }
        Ok(())
    }

    pub(super) fn peer_index(&self, peer: Rank) -> Result<usize, TransportError> {
        if let Some(Some(e)) = self.peer_errors.get(peer.index()) {
            return Err(e.clone());
        }
        match self.peers.get(peer.index()) {
            Some(Some(_)) => Ok(peer.index()),
            _ => Err(TransportError::InvalidPeer {
                rank: self.me.rank,
                peer,
                nranks: self.me.nranks,
            }),
        }
    }

    /// Everything this rank owes its peers goes out: the slots due (`replenish`) and
    /// every owed credit, whatever the batch. Before blocking, a peer must never be left
    /// waiting for slots this rank only meant to lend.
    fn lend_all_due(&mut self) {
        if self.replenish_due {
            self.replenish();
        }
        self.send_credits(true);
    }

    /// What a wait watches for: arrivals, free buffers and completions taken (a send's,
    /// which may be all the engine waits for: a zero-copy write into an offered destination
    /// frees nothing but the caller's memory).
    pub(super) fn mark(&self) -> (usize, usize, u64) {
        (self.arrived.len(), self.free.len(), self.taken)
    }

    pub(super) fn wait_inner(&mut self, deadline: Instant) -> Result<(), TransportError> {
        self.lend_all_due();
        if let Err(e) = self.cq.arm() {
            let e = self.verbs_error(None, e);
            self.fail(e);
        }
        // A completion that landed before arming raises no event: poll once more. What it
        // brought may make slots due (an arrival, a send done that frees room for binds):
        // lend them now, since nothing else would before this rank wakes up.
        let before = self.mark();
        self.progress();
        self.lend_all_due();
        if self.mark() != before {
            return Ok(());
        }
        let cap = match self.wake_check {
            Duration::ZERO => deadline,
            check => Instant::now()
                .checked_add(check)
                .map_or(deadline, |t| t.min(deadline)),
        };
        self.tcp.wait(cap)?;
        self.cq.drain_events();
        self.progress();
        if cap < deadline && Instant::now() >= cap && self.mark() != before {
            self.late_wakeups += 1;
        }
        Ok(())
    }
}
