//! Offers: ranges of this rank's registered destinations lent to a peer for one message
//! each, and the sender's side of them (see the module docs of [`super`]): making them,
//! writing into them, taking what landed, withdrawing what a slot overtook, and voiding
//! them (with the sends from caller memory) after a failure.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::ffi::{MemoryWindow, Sge, VerbsError};
use super::wire::{wr, Credit, Grant, HEADER, OFFER, WR_BIND, WR_INVALIDATE};
use super::{Offer, VerbsTransport, OFFER_MIN};
use crate::error::TransportError;
use crate::transport::{check_tag, Offered, P2P};
use crate::types::{Rank, Tag, TagKey};

/// How long [`crate::Transport::reap_borrowed`] waits for sends from caller memory and the
/// invalidations of offers' windows to finish, before it stops their pairs, and then for
/// the stopped pairs to flush.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a withdrawal waits for the local invalidation of its window.
const INVALIDATE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl VerbsTransport {
    /// [`Transport::offer`]: `dst` offered to `peer` for `tag`, if it can be; with `with`,
    /// [`Transport::offer`] with `with`: the offer waits to go with this rank's message `with`.
    pub(super) fn make_offer(
        &mut self,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
        with: Option<Tag>,
    ) -> Result<Offered, TransportError> {
        self.check()?;
        if with.is_some() && self.scoped {
            // A window is bound behind nothing but binds: once the send has gone.
            return Ok(Offered::Later);
        }
        let n = dst.len();
        // An offer and its tag take two records of one credit message.
        if !self.direct || n < OFFER_MIN || n > self.slot_bytes || self.per_credit_msg < 2 {
            return Ok(Offered::No);
        }
        // Point-to-point tags are never stale (`is_stale`), so a sender would keep an
        // offer it did not use until the tag came round again: collectives only.
        if tag.collective & P2P != 0 {
            return Ok(Offered::No);
        }
        let p = self.peer_index(peer)?;
        let key = (peer, tag.key());
        // Already offered, or already here: `try_recv_into` takes it either way.
        if self.offered.contains_key(&key)
            || self.placed.contains_key(&key)
            || self.arrived.contains_key(&key)
        {
            return Ok(Offered::Yes);
        }
        let limit = self.offer_limit();
        let id = OFFER | (self.next_offer & (OFFER - 1));
        let (scoped, depth) = (self.scoped, self.send_depth);
        match self.peers[p].as_ref() {
            None => return Ok(Offered::No),
            Some(x) if x.offers_out >= limit || self.offers.contains_key(&id) => {
                return Ok(Offered::Later)
            }
            // A window is bound only behind nothing but binds (Soft-RoCE executes a bind
            // again when it retransmits a request ahead of it), with room for the bind
            // and the credit message that carries the offer.
            Some(x) if scoped && (x.sends != x.binds || x.sends + 2 > depth) => {
                return Ok(Offered::Later)
            }
            Some(_) => {}
        }
        let addr = dst.as_ptr() as usize;
        let Some(region) = self.registry.lookup(addr, n) else {
            return Ok(Offered::No);
        };
        let (window, rkey) = match (scoped, region.rkey, &region.windows) {
            (false, Some(rkey), _) => (None, rkey),
            (true, _, Some(mr)) => {
                let mut window = match self.offer_windows.pop() {
                    Some(w) => w,
                    None => match MemoryWindow::new(&self.pd) {
                        Ok(w) => w,
                        Err(_) => return Ok(Offered::No),
                    },
                };
                let Some(state) = self.peers[p].as_mut() else {
                    self.offer_windows.push(window);
                    return Ok(Offered::No);
                };
                // SAFETY: `addr..addr + n` lies in `mr` (the registry's lookup); the engine
                // leaves it alone until the message is taken or the call fails (the
                // contract of `offer`), and the window stays bound until the peer's
                // invalidation of it completes here (`landed`), or this rank's
                // (`withdraw`, or after a failure `reap_borrowed`), or its queue pair is
                // stopped (`reap_borrowed`): in each case before the receive or the call
                // returns.
                match unsafe {
                    state
                        .qp
                        .post_bind(wr(WR_BIND, p, id), &mut window, mr, addr as u64, n)
                } {
                    Ok(rkey) => {
                        state.sends += 1;
                        state.binds += 1;
                        (Some(window), rkey)
                    }
                    Err(e) => {
                        // Not bound: the window is as it was.
                        self.offer_windows.push(window);
                        return Err(self.broken_by(p, e));
                    }
                }
            }
            _ => return Ok(Offered::No),
        };
        let Some(state) = self.peers[p].as_mut() else {
            return Ok(Offered::No);
        };
        self.next_offer = self.next_offer.wrapping_add(1);
        state.offers_out += 1;
        // The id comes round again: a late write into its voided namesake is long done.
        self.voided.remove(&id);
        let credit = Credit {
            id,
            addr: addr as u64,
            rkey,
            len: n as u32,
        };
        match with {
            Some(w) => state.riding.push((w.key(), Grant::Offer(credit, tag))),
            None => {
                state.owed.push(Grant::Offer(credit, tag));
                self.offers_due = true;
            }
        }
        // Counted before the peer can write: the memory is not freed while nonzero.
        region.reading.fetch_add(1, Ordering::Relaxed);
        self.offers.insert(
            id,
            Offer {
                peer: p,
                key: tag.key(),
                addr,
                len: n,
                reading: region.reading,
                window,
            },
        );
        self.offered.insert(key, id);
        Ok(Offered::Yes)
    }

    /// [`Transport::try_recv_into`]: the message in place if it landed in its offered
    /// destination, else copied out of its slot (withdrawing its offer).
    pub(super) fn take_into(
        &mut self,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        // Offers made since the last look go out before anything else.
        if self.offers_due {
            self.offers_due = false;
            self.send_credits(true);
        }
        let key = (peer, tag.key());
        // (Most receives have no offer: no hashing then.)
        if self.placed.is_empty() || !self.placed.contains_key(&key) {
            if let Some((sent, a)) = self.take_arrival(peer, tag)? {
                // Copied out of its slot, which goes back to the peer at once.
                let taken =
                    check_tag(self.me.rank, peer, tag, sent, a.len, dst.len()).and_then(|()| {
                        match self.offered.is_empty() {
                            true => Ok(()),
                            false => self.withdraw(peer, tag.key()),
                        }
                    });
                if taken.is_ok() {
                    dst.copy_from_slice(&a.v[HEADER..HEADER + a.len]);
                }
                self.let_go(a);
                return taken.map(|()| true);
            }
            if self.placed.is_empty() {
                return Ok(false);
            }
        }
        match self.placed.remove(&key) {
            Some((addr, len)) if addr == dst.as_ptr() as usize && len == dst.len() => Ok(true),
            Some((addr, len)) => Err(TransportError::Protocol {
                rank: self.me.rank,
                peer,
                reason: format!(
                    "its message {tag} was written into the {len} bytes offered at {addr:#x}, \
                     but asked for into {} bytes at {:#x}",
                    dst.len(),
                    dst.as_ptr() as usize
                ),
            }),
            None => Ok(false),
        }
    }

    /// Most offers out to one peer: twice the slots it may fill ahead, so that once its
    /// first window is written the offers of what follows are there before it sends.
    pub(super) fn offer_limit(&self) -> usize {
        Self::offer_limit_for(self.window)
    }

    /// [`offer_limit`](Self::offer_limit) for `window` slots per peer.
    pub(super) fn offer_limit_for(window: usize) -> usize {
        2 * window
    }

    /// The message `key` from `from` arrived in a slot: its offer, if one is out, is
    /// withdrawn here (and not sent, if it has not gone yet). The peer sent that tag, so it
    /// will never use the offer; it forgets it when its call is over. A window bound for
    /// it is invalidated before this returns: the peer can no longer write there.
    pub(super) fn withdraw(&mut self, from: Rank, key: TagKey) -> Result<(), TransportError> {
        let Some(id) = self.offered.remove(&(from, key)) else {
            return Ok(());
        };
        let Some(mut o) = self.offers.remove(&id) else {
            return Ok(());
        };
        let p = o.peer;
        let Some(peer) = self.peers.get_mut(p).and_then(Option::as_mut) else {
            o.reading.fetch_sub(1, Ordering::Release);
            return Ok(());
        };
        peer.offers_out = peer.offers_out.saturating_sub(1);
        peer.owed
            .retain(|g| !matches!(g, Grant::Offer(c, _) if c.id == id));
        peer.riding
            .retain(|(_, g)| !matches!(g, Grant::Offer(c, _) if c.id == id));
        let Some(window) = o.window.take() else {
            o.reading.fetch_sub(1, Ordering::Release);
            return Ok(());
        };
        // The peer never invalidates it (it sent this tag to a slot), so this is the
        // window's only invalidation.
        if let Err(e) = peer
            .qp
            .post_local_invalidate(wr(WR_INVALIDATE, p, id), &window)
        {
            o.window = Some(window);
            self.withdrawing.insert(id, o);
            return Err(self.broken_by(p, e));
        }
        peer.sends += 1;
        o.window = Some(window);
        self.withdrawing.insert(id, o);
        // A local operation: done within moments, or the transport fails (the failure's
        // reap stops the pair).
        let until = std::time::Instant::now() + INVALIDATE_WAIT;
        while self.withdrawing.contains_key(&id) {
            self.check()?;
            if std::time::Instant::now() >= until {
                return Err(self.broken_by(
                    p,
                    VerbsError::new(
                        "LOCAL INVALIDATE",
                        libc::ETIMEDOUT,
                        "the window of an offer a slot overtook was not invalidated in time",
                    ),
                ));
            }
            self.progress();
        }
        self.check()
    }

    /// The invalidation of withdrawn offer `id`'s window completed (`ok`) or was flushed:
    /// either way no peer writes through it any more.
    pub(super) fn withdrawn(&mut self, id: u32, ok: bool) {
        let Some(mut o) = self.withdrawing.remove(&id) else {
            return;
        };
        if let Some(w) = o.window.take() {
            // Unbound: ready for another offer. Flushed, its state is unknown: freed.
            if ok {
                self.offer_windows.push(w);
            }
        }
        o.reading.fetch_sub(1, Ordering::Release);
    }

    /// A write into offer `id` from `from`, of `len` bytes, completed: the message is in
    /// place. Into an offer this rank did not make to `from`, or of another length, it is
    /// a protocol error naming the peer (the offer stays out: the failure's reap voids
    /// it).
    pub(super) fn landed(&mut self, from: usize, id: u32, len: usize) {
        let reason = match self.offers.get(&id) {
            Some(o) if o.peer == from && o.len == len => None,
            Some(o) if o.peer != from => Some(format!(
                "wrote into destination {id:#x}, which this rank offered rank {}",
                o.peer
            )),
            Some(o) => Some(format!(
                "wrote {len} bytes into a destination of {} offered for one message",
                o.len
            )),
            // Written before a failure voided it (`reap`), found only now: the caller's
            // memory was given back after the write, and nobody takes the message.
            None if self.voided.get(&id) == Some(&from) => return,
            None => Some(format!(
                "wrote into destination {id:#x}, which it does not hold"
            )),
        };
        if let Some(reason) = reason {
            return self.fail(TransportError::Protocol {
                rank: self.me.rank,
                peer: Rank::from(from),
                reason,
            });
        }
        let Some(mut o) = self.offers.remove(&id) else {
            return;
        };
        // The peer's invalidation unbound the window (`notice` checked its key).
        if let Some(w) = o.window.take() {
            self.offer_windows.push(w);
        }
        o.reading.fetch_sub(1, Ordering::Release);
        if let Some(Some(peer)) = self.peers.get_mut(from) {
            peer.offers_out = peer.offers_out.saturating_sub(1);
        }
        let key = (Rank::from(from), o.key);
        self.offered.remove(&key);
        self.placed.insert(key, (o.addr, o.len));
        self.placed_count += 1;
    }

    /// The destination peer `p` offered for `tag`, taken if it is for a message of `len`
    /// bytes of this call (the fingerprint) and the send queue has room. An offer for
    /// another fingerprint or length is dropped: the message goes to a slot, whose header
    /// the peer checks (and names the mismatch).
    pub(super) fn take_offer(&mut self, p: usize, tag: Tag, len: usize) -> Option<Credit> {
        let depth = self.send_depth;
        let peer = self.peers[p].as_mut()?;
        if peer.offers.is_empty() {
            return None;
        }
        let key = tag.key();
        let &(offered, credit) = peer.offers.get(&key)?;
        if offered.schedule != tag.schedule || credit.len as usize != len {
            peer.offers.remove(&key);
            return None;
        }
        // The write (and, into a window, its invalidation) must fit the send queue.
        if peer.sends + peer.wrs_per_message() > depth {
            return None;
        }
        peer.offers.remove(&key);
        Some(credit)
    }

    /// Posts `sge` into the destination `credit` offers, as `wr_id`: the data alone, with
    /// RDMA WRITE WITH IMM (the offer's id), or into the window of a peer with scoped
    /// grants RDMA WRITE and then SEND WITH INVALIDATE of the offer's id. On an error,
    /// whether the write was posted (its completion is still to come).
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_write_imm`](super::ffi::QueuePair::post_write_imm).
    pub(super) unsafe fn post_offered(
        &mut self,
        p: usize,
        wr_id: u64,
        sge: Sge,
        credit: &Credit,
    ) -> Result<(), (TransportError, bool)> {
        let Some(peer) = self.peers[p].as_mut() else {
            let e = TransportError::InvalidPeer {
                rank: self.me.rank,
                peer: Rank::from(p),
                nranks: self.me.nranks,
            };
            return Err((e, false));
        };
        // SAFETY: the caller's contract.
        match unsafe { peer.post_message(p, wr_id, &[sge], credit, false) } {
            Ok(()) => Ok(()),
            Err((e, posted)) => Err((self.broken_by(p, e), posted)),
        }
    }

    /// [`crate::Transport::reap_borrowed`]: after a failure, no send still reads caller
    /// memory and no peer can still write it. A pair stops only where that cannot be waited
    /// for, and that stop is its peer's failure alone (the survivors of a shrink keep every
    /// other pair): the peer is gone (its connection closed, so its device acknowledges
    /// nothing more), an offer to it cannot be revoked (no window), or its device neither
    /// acknowledged nor failed the sends within [`REAP_TIMEOUT`]. A live peer's sends
    /// finish on their own, acknowledged or failed once its retries run out.
    pub(super) fn reap(&mut self) {
        // Landed and never taken: nothing more to do with them.
        self.placed.clear();
        // Offers not sent yet never reach the peer: nothing to stop for them (a window
        // bound for one is invalidated below all the same).
        let unsent: std::collections::BTreeSet<u32> = self
            .peers
            .iter_mut()
            .flatten()
            .flat_map(|peer| {
                peer.offers_out = 0;
                let owed = peer.owed.iter().filter_map(|g| match g {
                    Grant::Offer(c, _) => Some(c.id),
                    Grant::Slot(_) => None,
                });
                let riding = peer.riding.drain(..).filter_map(|(_, g)| match g {
                    Grant::Offer(c, _) => Some(c.id),
                    Grant::Slot(_) => None,
                });
                let ids: Vec<u32> = owed.chain(riding).collect();
                peer.owed.retain(|g| matches!(g, Grant::Slot(_)));
                ids
            })
            .collect();
        self.offers_due = false;
        if self.reclaimed() {
            return;
        }
        let mut stopped: Vec<usize> = Vec::new();
        // Most sends complete on their own within a moment.
        self.settle(
            Instant::now() + Duration::from_millis(50),
            false,
            &mut stopped,
        );
        self.stop_gone(&mut stopped);
        // Writes into offers that completed are taken first: those offers need no void.
        self.progress();
        // The offers still out: a window is invalidated here (the peer can no longer
        // write through it); one made under its region's key can be revoked only by
        // stopping the pair, unless it never went out.
        let ids: Vec<u32> = self.offers.keys().copied().collect();
        for id in ids {
            let Some(mut o) = self.offers.remove(&id) else {
                continue;
            };
            let p = o.peer;
            if !unsent.contains(&id) {
                self.voided.insert(id, p);
            }
            let Some(window) = o.window.take() else {
                o.reading.fetch_sub(1, Ordering::Release);
                if !unsent.contains(&id) {
                    let e = self.pair_stopped(
                        p,
                        "a destination offered under its region's key (no window) can be \
                         revoked only by stopping the pair",
                    );
                    self.stop_pair(p, e, &mut stopped);
                }
                continue;
            };
            let posted = match self.peers[p].as_mut() {
                Some(peer) if !stopped.contains(&p) => peer
                    .qp
                    .post_local_invalidate(wr(WR_INVALIDATE, p, id), &window)
                    .map(|()| peer.sends += 1)
                    .is_ok(),
                _ => false,
            };
            o.window = Some(window);
            self.withdrawing.insert(id, o);
            if !posted {
                let e = self.pair_stopped(p, "the window of an offer could not be invalidated");
                self.stop_pair(p, e, &mut stopped);
            }
        }
        self.offered.clear();
        // The rest finish on their own: a live peer's device acknowledges, a silent one's
        // retries run out (7 ACK timeouts) and the sends fail; either way they complete.
        self.settle(Instant::now() + REAP_TIMEOUT, true, &mut stopped);
        let late: std::collections::BTreeSet<usize> = self
            .borrowed
            .values()
            .map(|(p, _)| *p)
            .chain(self.withdrawing.values().map(|o| o.peer))
            .filter(|p| !stopped.contains(p))
            .collect();
        for p in late {
            let e = TransportError::Timeout {
                rank: self.me.rank,
                peer: Rank::from(p),
                what: "its device to finish this rank's writes of caller memory, or the \
                       invalidation of an offer to it, after a failure: the pair is stopped"
                    .into(),
                waited: REAP_TIMEOUT,
            };
            self.stop_pair(p, e, &mut stopped);
        }
        if !stopped.is_empty() {
            // Their work is flushed at once.
            self.settle(Instant::now() + REAP_TIMEOUT, false, &mut stopped);
            let names: Vec<String> = stopped.iter().map(|&p| Rank::from(p).to_string()).collect();
            self.fail(TransportError::Aborted {
                rank: self.me.rank,
                by: self.me.rank,
                reason: format!(
                    "queue pairs to {} stopped to reclaim sends from, and offers of, caller \
                     memory after a failure",
                    names.join(", ")
                ),
            });
        }
        // Invalidations on stopped pairs: their windows' state is unknown, so they are
        // freed, not reused.
        for (_, mut o) in self.withdrawing.drain() {
            drop(o.window.take());
            o.reading.fetch_sub(1, Ordering::Release);
        }
        if !self.borrowed.is_empty() {
            // The memory they read stays allocated and registered (see `Registered`).
            tracing::error!(
                sends = self.borrowed.len(),
                "the device did not flush sends from caller memory: that memory is leaked"
            );
        }
    }

    /// Whether no send reads caller memory and no offer or invalidation is out.
    fn reclaimed(&self) -> bool {
        self.borrowed.is_empty() && self.offers.is_empty() && self.withdrawing.is_empty()
    }

    /// Polls completions until sends from caller memory (and, with `invalidations`, the
    /// invalidations of offers' windows) are done, or `until`, stopping the pairs of the
    /// peers found gone meanwhile ([`stop_gone`](Self::stop_gone)).
    fn settle(&mut self, until: Instant, invalidations: bool, stopped: &mut Vec<usize>) {
        while !(self.borrowed.is_empty() && (!invalidations || self.withdrawing.is_empty()))
            && Instant::now() < until
        {
            self.stop_gone(stopped);
            self.progress();
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Stops the pair of every peer that a send, an offer or an invalidation involves and
    /// whose connection closed: its device acknowledges nothing more, and the stop flushes
    /// that work at once instead of after its retries.
    fn stop_gone(&mut self, stopped: &mut Vec<usize>) {
        // The control plane: where a dead peer's connection is seen to close.
        let _ = self.control(false);
        let involved: std::collections::BTreeSet<usize> = self
            .borrowed
            .values()
            .map(|(p, _)| *p)
            .chain(self.offers.values().map(|o| o.peer))
            .chain(self.withdrawing.values().map(|o| o.peer))
            .filter(|p| !stopped.contains(p))
            .collect();
        for p in involved {
            if self.tcp.gone(p) {
                // Its own failure, not the abort that may have ended the call.
                let e = TransportError::PeerClosed {
                    rank: self.me.rank,
                    peer: Rank::from(p),
                };
                self.stop_pair(p, e, stopped);
            }
        }
    }

    /// Stops the pair to `p` (its device flushes every work request on it) and records `e`
    /// as `p`'s failure, also if the survivors carry on (`epoch`).
    fn stop_pair(&mut self, p: usize, e: TransportError, stopped: &mut Vec<usize>) {
        if stopped.contains(&p) {
            return;
        }
        if let Some(peer) = self.peers[p].as_mut() {
            if let Err(err) = peer.qp.stop() {
                tracing::warn!(peer = p, error = %err, "cannot stop the queue pair");
            }
        }
        self.fail_peer(p, e);
        stopped.push(p);
    }

    /// The error of a pair this rank stops after a failure because `why`.
    fn pair_stopped(&self, p: usize, why: &str) -> TransportError {
        TransportError::Verbs {
            rank: self.me.rank,
            peer: Some(Rank::from(p)),
            verb: "reclaiming caller memory after a failure",
            errno: 0,
            message: format!("{why}: the queue pair to it is stopped"),
        }
    }
}
