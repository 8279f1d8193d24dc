//! Slots and credits: registered buffers, the slots lent to each peer, offers of caller
//! memory, credits and offers sent as inline SENDs in batches, and the room a sender needs
//! before it posts a write.

use super::ffi::{Access, MemoryRegion, MemoryWindow, Sge};
use super::wire::{
    set_trailing_grants, wr, Credit, Grant, CREDIT_BYTES, HEADER, TRAILER, WR_BIND, WR_CREDIT,
    WR_RECV,
};
use super::{Buf, VerbsError, VerbsTransport, CTRL_BYTES, OFFERS_HELD_MAX};
use crate::error::TransportError;
use crate::types::Rank;

impl VerbsTransport {
    /// Registers slot `v`'s memory (its whole length) for peers to write: through windows
    /// when scoped, else as a region they may write.
    pub(super) fn register_vec(&self, v: &mut Vec<u8>) -> Result<MemoryRegion, VerbsError> {
        let access = if self.scoped {
            Access::Windows
        } else {
            Access::RemoteWrite
        };
        // SAFETY: every registered slot is owned by this transport (in `free`, a peer's
        // `advertised`, `inflight` or `arrived`) or lent to the caller as a payload that comes back
        // even when dropped (`returns`), so it is never freed while registered; the
        // transport's `Drop` destroys the queue pairs, then deregisters, then frees. While
        // the device may access a buffer, it is in `advertised` or `inflight`, where no
        // Rust reference to its bytes is used.
        unsafe { MemoryRegion::register(&self.pd, v.as_mut_ptr(), v.len(), access) }
    }

    /// A free registered buffer of header + slot bytes, registering a new one if needed.
    pub(super) fn take_buffer(&mut self) -> Result<(u32, Vec<u8>), VerbsError> {
        self.reclaim_returned();
        if let Some(b) = self.free.pop() {
            return Ok(b);
        }
        let mut v = vec![0u8; HEADER + self.slot_bytes + TRAILER];
        let mr = self.register_vec(&mut v)?;
        let window = if self.scoped {
            Some(MemoryWindow::new(&self.pd)?)
        } else {
            None
        };
        let id = self.bufs.len() as u32;
        self.bufs.push(Buf {
            mr,
            ptr: v.as_ptr() as usize,
            window,
        });
        Ok((id, v))
    }

    /// Takes back the buffers of lent payloads that were dropped rather than recycled;
    /// whether there were any.
    pub(super) fn reclaim_returned(&mut self) -> bool {
        let mut any = false;
        while let Some(v) = self.returns.pop() {
            let ptr = v.as_ptr() as usize;
            if let Some(id) = self.lent.remove(&ptr) {
                self.released(id);
                if self.bufs.get(id as usize).is_some_and(|b| b.ptr == ptr) {
                    self.free.push((id, v));
                    any = true;
                }
            }
        }
        any
    }

    /// Buffer `id` is no longer lent to the engine: its peer holds one message fewer. If
    /// that is what held its owed slots back, the next [`progress`](Self::progress) grants
    /// them (not here: the caller may still own the buffer that should serve them).
    pub(super) fn released(&mut self, id: u32) {
        if let Some(p) = self.lent_from.remove(&id) {
            self.holds_one_fewer(p);
        }
    }

    /// This rank holds one message fewer of peer `p`'s: if that is what held its owed
    /// slots back, they are due.
    pub(super) fn holds_one_fewer(&mut self, p: usize) {
        let limit = self.hold_limit;
        if let Some(peer) = self.peers[p].as_mut() {
            peer.held = peer.held.saturating_sub(1);
            if peer.deficit > 0 && peer.held < limit {
                self.replenish_due = true;
            }
        }
    }

    /// Whether peer `p`'s next slot holds `total` bytes (header included); an error naming
    /// both sizes if not. Call after `room_for` said a credit is there.
    pub(super) fn check_slot_fits(&self, p: usize, total: usize) -> Result<(), TransportError> {
        // A slot holds its peer's largest message and the grants behind it (`TRAILER`).
        let fits = |c: &Credit| (c.len as usize).saturating_sub(TRAILER);
        match self.peers[p].as_ref().and_then(|s| s.credits.front()) {
            Some(credit) if total > fits(credit) => Err(TransportError::MessageTooLarge {
                rank: self.me.rank,
                peer: Rank::from(p),
                len: total - HEADER,
                max: fits(credit).saturating_sub(HEADER),
            }),
            _ => Ok(()),
        }
    }

    /// The credit lending slot `id` (memory `v`) to peer `p`: its region's key, or, when
    /// scoped, the key of its window freshly bound on `p`'s queue pair (ahead of the
    /// credit message on the same queue, so valid when the peer reads it).
    pub(super) fn credit_for(&mut self, p: usize, id: u32, v: &[u8]) -> Result<Credit, VerbsError> {
        let buf = &mut self.bufs[id as usize];
        let rkey = match (buf.window.as_mut(), self.peers[p].as_mut()) {
            (Some(window), Some(peer)) => {
                // SAFETY: `v` is buffer `id`, covered by its region; the caller moves it into
                // the peer's `advertised` set, where no Rust reference to its bytes is used,
                // until the peer's invalidation of this window completes here.
                let rkey = unsafe {
                    peer.qp.post_bind(
                        wr(WR_BIND, p, id),
                        window,
                        &buf.mr,
                        v.as_ptr() as u64,
                        v.len(),
                    )
                }?;
                peer.sends += 1;
                peer.binds += 1;
                rkey
            }
            _ => buf.mr.rkey(),
        };
        Ok(Credit {
            id,
            addr: v.as_ptr() as u64,
            rkey,
            len: v.len() as u32,
        })
    }

    pub(super) fn post_ctrl_recv(&mut self, p: usize, i: u32) -> Result<(), VerbsError> {
        let Some(peer) = self.peers[p].as_mut() else {
            return Ok(());
        };
        let sge = Sge {
            addr: peer.ctrl.addr(i as usize * CTRL_BYTES),
            len: CTRL_BYTES as u32,
            lkey: peer.ctrl.lkey(),
        };
        // SAFETY: `ctrl` is registered, owned by the peer entry (dropped after its QP) and
        // only read after this receive's completion.
        unsafe { peer.qp.post_recv(wr(WR_RECV, p, i), sge) }
    }

    pub(super) fn credits_arrived(&mut self, from: usize, index: u32, len: usize) {
        let Some(peer) = self.peers[from].as_mut() else {
            return;
        };
        let at = index as usize * CTRL_BYTES;
        // SAFETY: receive `index` completed (this is its completion) and is re-posted only
        // after this returns, so the device is not writing these bytes.
        let msg = unsafe { peer.ctrl.copy_out(at, len.min(CTRL_BYTES)) };
        let Some(grants) = Grant::decode_all(&msg) else {
            return self.fail(TransportError::Protocol {
                rank: self.me.rank,
                peer: Rank::from(from),
                reason: format!("sent a credit message that does not decode: {msg:02x?}"),
            });
        };
        self.take_grants(from, grants);
    }

    /// Slots and offers peer `from` lent this rank, from a credit message or from behind
    /// a message it wrote.
    pub(super) fn take_grants(&mut self, from: usize, grants: Vec<Grant>) {
        let Some(peer) = self.peers[from].as_mut() else {
            return;
        };
        for g in grants {
            match g {
                Grant::Slot(c) => peer.credits.push_back(c),
                // Dropping an offer is always safe: the message goes to a slot.
                Grant::Offer(..) if peer.offers.len() >= OFFERS_HELD_MAX => {}
                Grant::Offer(c, tag) => {
                    peer.offers.insert(tag.key(), (tag, c));
                }
            }
        }
    }

    /// Gives peers that are owed slots a free (or newly registered) buffer each.
    pub(super) fn replenish(&mut self) {
        self.replenish_due = false;
        let limit = self.hold_limit;
        // A bind takes a place in the send queue, and leaves one for the credit message
        // that retires it. And binds go only on a queue with nothing but binds in flight:
        // rxe's retransmission (`req_retry`) restarts at the oldest work request not yet
        // completed and executes again the binds it meets, which wedges the queue pair (a
        // message written and never delivered, seen under packet loss). With nothing
        // before them, binds complete at once and no retry reaches them. A peer that must
        // wait gets its slots when its sends complete.
        let scoped = self.scoped;
        let room = self.send_depth.saturating_sub(1);
        let may_lend = |x: &super::Peer| {
            x.deficit > 0 && x.held < limit && (!scoped || (x.sends < room && x.sends == x.binds))
        };
        for p in 0..self.peers.len() {
            while self.peers[p].as_ref().is_some_and(may_lend) {
                let (id, mut v) = match self.take_buffer() {
                    Ok(b) => b,
                    Err(e) => {
                        let e = self.verbs_error(Some(p), e);
                        self.fail(e);
                        return;
                    }
                };
                v.resize(HEADER + self.slot_bytes + TRAILER, 0);
                let credit = match self.credit_for(p, id, &v) {
                    Ok(c) => c,
                    Err(e) => {
                        self.free.push((id, v));
                        let e = self.verbs_error(Some(p), e);
                        self.fail(e);
                        return;
                    }
                };
                if let Some(peer) = self.peers[p].as_mut() {
                    peer.deficit -= 1;
                    peer.advertised.insert(id, v);
                    peer.owed.push(Grant::Slot(credit));
                }
            }
        }
    }

    /// Sends owed credits: in batches of a message's worth (or half the window), or all
    /// of them with `all` (before blocking). A sender out of credits has used its whole
    /// window, so this rank owes it at least a batch: batching cannot stall it.
    pub(super) fn send_credits(&mut self, all: bool) {
        let per = self.per_credit_msg;
        let batch = if all {
            1
        } else {
            per.min(self.window / 2).max(1)
        };
        let depth = self.send_depth;
        for p in 0..self.peers.len() {
            let Some(peer) = self.peers[p].as_mut() else {
                continue;
            };
            while peer.owed.len() >= batch && peer.sends < depth {
                // As many grants as fit in one inline message (an offer takes two records;
                // `offer` makes none where a message holds fewer).
                let n = peer.owed_within(per).max(1);
                let mut msg = Vec::with_capacity(per * CREDIT_BYTES);
                for g in peer.owed.drain(..n) {
                    g.encode(&mut msg);
                }
                // Its completion retires the binds posted before it.
                match peer.qp.post_send_inline(wr(WR_CREDIT, p, peer.binds), &msg) {
                    Ok(()) => {
                        peer.sends += 1;
                        peer.binds = 0;
                        self.credit_messages += 1;
                    }
                    Err(e) => {
                        let e = self.verbs_error(Some(p), e);
                        self.fail(e);
                        return;
                    }
                }
            }
        }
    }

    /// Whether a write to peer `p` can be posted now: a remote slot and send-queue room.
    pub(super) fn ready_to_send(&self, p: usize) -> bool {
        self.peers[p].as_ref().is_some_and(|x| {
            !x.credits.is_empty() && x.sends + x.wrs_per_message() <= self.send_depth
        })
    }

    /// Whether a write to peer `p` can be posted, after taking completions if not at
    /// first; an error if the peer is gone (it will never grant room again).
    pub(super) fn room_for(&mut self, p: usize) -> Result<bool, TransportError> {
        if self.ready_to_send(p) {
            return Ok(true);
        }
        self.progress();
        self.check()?;
        if self.ready_to_send(p) {
            return Ok(true);
        }
        self.control(false)?;
        match self.tcp.peer_gone(Rank::from(p)) {
            Some(e) => Err(e),
            None => Ok(false),
        }
    }
}

impl super::Peer {
    /// The offers that were to go with this rank's message `key` ([`Self::riding`]), owed
    /// from now, ahead of the rest: called as that message is posted, they go behind it
    /// (or right after it). Whether there were any.
    pub(super) fn release_riding(&mut self, key: crate::types::TagKey) -> bool {
        if self.riding.is_empty() {
            return false;
        }
        let mut first = Vec::new();
        self.riding.retain(|&(k, g)| {
            let go = k == key;
            if go {
                first.push(g);
            }
            !go
        });
        let any = !first.is_empty();
        self.owed.splice(0..0, first);
        any
    }

    /// How many of the owed grants, from the first, take at most `records` records.
    fn owed_within(&self, records: usize) -> usize {
        let mut taken = 0;
        self.owed
            .iter()
            .take_while(|g| {
                taken += g.records();
                taken <= records
            })
            .count()
    }

    /// Moves the owed grants that fit before `end` behind the message that ends at `total`
    /// in `v` (header first), and counts them in its header: lent with the message, at no
    /// cost of a credit message of their own. Returns the new end of what to write and how
    /// many grants went.
    pub(super) fn lend_behind(&mut self, v: &mut [u8], total: usize, end: usize) -> (usize, usize) {
        let fit = end.saturating_sub(total) / CREDIT_BYTES;
        let n = self.owed_within(fit);
        if n == 0 || v.len() < HEADER {
            return (total, 0);
        }
        // Encoded into a buffer kept from the last time: no allocation per message.
        let mut bytes = std::mem::take(&mut self.behind);
        bytes.clear();
        for g in self.owed.drain(..n) {
            g.encode(&mut bytes);
        }
        if let Some(h) = v.first_chunk_mut::<HEADER>() {
            set_trailing_grants(h, (bytes.len() / CREDIT_BYTES) as u32);
        }
        v[total..total + bytes.len()].copy_from_slice(&bytes);
        let end = total + bytes.len();
        self.behind = bytes;
        (end, n)
    }

    /// Send-queue places one message takes: the write, and its invalidation if scoped.
    pub(super) fn wrs_per_message(&self) -> u32 {
        if self.scoped {
            2
        } else {
            1
        }
    }
}
