//! [`Communicator::shrink`]: the survivors of a failure agree on who failed and carry on
//! as a smaller group, over the connections, shared-memory rings and queue pairs they
//! already have (as ULFM's `MPIX_Comm_agree` + `MPIX_Comm_shrink`, and NCCL's
//! `ncclCommShrink`).
//!
//! 1. A failed call aborts the group (its transport tells every rank, so their calls fail
//!    at once: ULFM's revoke is [`Communicator::abort`] / [`crate::AbortHandle`]).
//! 2. Each survivor calls `shrink`: its transport begins a new epoch (the abort is
//!    cleared, and late aborts of the old epoch are ignored), and the survivors agree on
//!    the failed set (`crate::agree`) with messages of their own (tagged with the
//!    epoch, never mistaken for a collective's), suspecting peers whose connection closes
//!    or that stay silent past the timeout.
//! 3. Each member's `DECIDE` is the last message it sends in the old epoch: once it is
//!    taken, whatever that member sent before it (a failed call's leftovers) is dropped.
//! 4. The excluded ranks are cut off in the transport (connections closed, queue pairs
//!    stopped, rings unmapped), and the members become ranks `0..k` in order of their old
//!    ranks, over the same endpoint ([`rcoll_transport::subgroup`]): host map, rings,
//!    hierarchy and the cost model's choices are computed afresh for them.
//!
//! No rendezvous and no root: the agreement's coordinator is the lowest rank still
//! believed alive. Cost: a few small messages per pair; see the figures in the commit
//! that introduced it (`rcoll-bench shrink`).

use std::time::{Duration, Instant};

use rcoll_transport::subgroup::{Detached, Subgroup};
use rcoll_transport::{deadline_after, Lend, Rank, SendState, Tag, TransportError};

use crate::abort::ABORT_POLL;
use crate::agree::{wire_len, Agreement, Message, Refusal};
use crate::communicator::{Communicator, Shrunk, P2P_BIT};
use crate::error::{Error, Result};

/// The channel of agreement messages: no schedule has this many channels.
const AGREE_CHANNEL: u16 = u16::MAX;
/// Their fingerprint ("shrk").
const AGREE_FINGERPRINT: u32 = 0x7368_726b;
const PROPOSE: u32 = 0;
const DECIDE: u32 = 1;

impl Communicator {
    /// The survivors' communicator after a failure (or a planned removal), as
    /// `MPIX_Comm_shrink` and `ncclCommShrink`: every surviving rank calls it after its
    /// call failed (or, to remove healthy ranks, with the same `exclude` everywhere); they
    /// agree on the ranks that failed — the same set on every survivor, whatever each saw,
    /// also when another rank fails during the agreement — and those and `exclude` are
    /// left out. The members keep their order (rank `i` of the new communicator is the
    /// `i`-th surviving rank) and reuse this communicator's connections, shared-memory
    /// rings and queue pairs: no rendezvous, no root (rank 0 may be the dead one).
    ///
    /// This communicator is unusable afterwards (its endpoint moved on); a rank left out
    /// gets [`Error::Excluded`]. It takes milliseconds when the failed ranks died (their
    /// connections close) or some survivor's call already named them; a stopped rank that
    /// no survivor named yet is found by the liveness probe after the timeout; past three
    /// timeouts, [`Error::Agreement`]. The agreed set: [`Communicator::shrunk`] on the new
    /// communicator.
    ///
    /// Needs a transport that can carry on after a failure (TCP, shared memory, verbs; not
    /// the in-process groups).
    pub fn shrink(&mut self, exclude: &[usize]) -> Result<Communicator> {
        let me = self.rank();
        let n = self.size();
        let rank = me as u32;
        if let Some(&bad) = exclude.iter().find(|&&r| r >= n) {
            return Err(Error::PeerOutOfRange {
                rank,
                what: "exclude",
                peer: bad,
                nranks: n,
            });
        }
        if exclude.contains(&me) {
            return Err(Error::Excluded { rank, peer: rank });
        }
        // An abort raised through a handle reaches the others first: their calls end.
        // (Raised before, it is what ended this communicator's calls: only one raised
        // during the agreement stops it.)
        self.apply_abort();
        let aborted_before = self.abort.is_aborted();
        let started = Instant::now();
        let epoch = self
            .transport
            .begin_epoch()
            .map_err(|e| agreement_failed(rank, Vec::new(), e.to_string()))?;
        let mut suspects: Vec<usize> = exclude.to_vec();
        suspects.extend(&self.failed_peers);
        for p in (0..n).filter(|&p| p != me) {
            if self.transport.known_gone(Rank::from(p)).is_some() {
                suspects.push(p);
            }
        }
        tracing::info!(
            rank = me,
            epoch,
            ?suspects,
            "shrink: agreeing on the failed ranks"
        );
        let mut agreement = Agreement::new(n, me, &suspects, self.seq);
        let agreed = self.agree(&mut agreement, epoch, started, aborted_before);
        // An abort of the new group that came during the agreement fails its calls now.
        self.transport.commit_epoch();
        let decision = agreed?;
        // Alone, with every other rank lost only during the agreement: more likely this rank
        // was cut off (stopped, then woken after the others left it out and closed their
        // connections before it read their decision) than the last one standing.
        let alone = (0..n).all(|r| r == me || decision.excluded[r]);
        if alone && n > 1 && (0..n).any(|r| r != me && !suspects.contains(&r)) {
            return Err(agreement_failed(
                rank,
                Vec::new(),
                "every other rank went away during the agreement: this rank was probably \
                 left out by the others"
                    .into(),
            ));
        }
        for x in (0..n).filter(|&x| decision.excluded[x]) {
            self.transport.exclude(Rank::from(x));
        }
        let members: Vec<Rank> = (0..n)
            .filter(|&r| !decision.excluded[r])
            .map(Rank::from)
            .collect();
        let transport =
            std::mem::replace(&mut self.transport, Box::new(Detached::new(self.rank, n)));
        self.poisoned = Some("shrunk: its connections moved to the new communicator".into());
        let parent_ranks: Vec<usize> = members.iter().map(|r| r.index()).collect();
        let sub = Subgroup::new(transport, &members)
            .map_err(|e| agreement_failed(rank, Vec::new(), e.to_string()))?;
        let mut comm = Communicator::new(Box::new(sub), self.config.clone())?;
        comm.seq = decision.base & !P2P_BIT;
        comm.p2p_seq = P2P_BIT | (epoch & !P2P_BIT);
        comm.origin = self.origin.clone();
        comm.placement = self.placement.clone();
        let excluded: Vec<usize> = (0..n).filter(|&x| decision.excluded[x]).collect();
        tracing::info!(
            rank = me,
            new_rank = comm.rank(),
            size = comm.size(),
            ?excluded,
            took = ?started.elapsed(),
            "shrink: done"
        );
        comm.shrunk = Some(Shrunk {
            excluded,
            parent_ranks,
        });
        Ok(comm)
    }

    /// How this communicator came from its parent, if [`Communicator::shrink`] made it:
    /// the ranks left out and each member's rank in the parent.
    pub fn shrunk(&self) -> Option<&Shrunk> {
        self.shrunk.as_ref()
    }

    /// Records the peers `err` finds dead or silent, for a later shrink.
    pub(crate) fn note_failed_peers(&mut self, err: &Error) {
        let mut found: Vec<u32> = Vec::new();
        match err {
            Error::Timeout { unresponsive, .. } => found.extend(unresponsive),
            Error::Transport { source, .. } => match source {
                TransportError::PeerClosed { peer, .. }
                | TransportError::Completion { peer, .. }
                | TransportError::Protocol { peer, .. } => found.push(peer.0),
                TransportError::Verbs {
                    peer: Some(peer), ..
                } => found.push(peer.0),
                _ => {}
            },
            _ => {}
        }
        for p in found.into_iter().map(|p| p as usize) {
            if p != self.rank() && !self.failed_peers.contains(&p) {
                self.failed_peers.push(p);
            }
        }
    }

    /// Runs `agreement` over the transport until this rank is done (see [`crate::agree`]).
    fn agree(
        &mut self,
        agreement: &mut Agreement,
        epoch: u32,
        started: Instant,
        aborted_before: bool,
    ) -> Result<crate::agree::Decision> {
        let (me, n, rank) = (self.rank(), self.size(), self.rank.0);
        let timeout = self.config.timeout;
        let tag = |kind| Tag {
            collective: P2P_BIT | (epoch & !P2P_BIT),
            channel: AGREE_CHANNEL,
            transfer: kind,
            segment: 0,
            schedule: AGREE_FINGERPRINT,
        };
        let len = wire_len(n);
        // A member silent this long is probed; past three timeouts the agreement fails.
        let hard = deadline_after(timeout.saturating_mul(3));
        let mut next_probe = deadline_after(timeout);
        let probe_window = (timeout / 4).clamp(Duration::from_millis(200), Duration::from_secs(2));
        let mut unsent: Vec<(usize, u32, Vec<u8>)> = Vec::new();
        loop {
            // What arrived first (a decision already here is adopted before this rank
            // would decide anything itself), then what follows from it, sent before this
            // rank is done: its relays are what the others wait for.
            for r in (0..n).filter(|&r| r != me) {
                for kind in [PROPOSE, DECIDE] {
                    let got = match self.transport.try_recv(Rank::from(r), tag(kind), len) {
                        Ok(Some(p)) => {
                            let m = Message::decode(p.as_bytes(), n);
                            self.transport.recycle(p);
                            m
                        }
                        Ok(None) => continue,
                        Err(e) => {
                            self.aborted_during(&e, agreement)?;
                            if !agreement.suspects().contains(&r) {
                                tracing::debug!(rank = me, peer = r, error = %e, "shrink: suspects");
                            }
                            agreement.suspect(r);
                            continue;
                        }
                    };
                    tracing::debug!(rank = me, from = r, msg = ?got, "shrink: received");
                    match got {
                        Some(Message::Decide(d)) => {
                            // Everything `r` sent before this belongs to the old epoch.
                            let base = d.base;
                            self.transport
                                .discard_from(Rank::from(r), &|t| ended(t, epoch, base));
                            agreement.handle(r, Message::Decide(d));
                        }
                        Some(m) => agreement.handle(r, m),
                        // Not a message of the agreement's: the peer is not one to trust.
                        None => agreement.suspect(r),
                    }
                }
            }
            agreement.step();
            for (to, msg) in agreement.outgoing() {
                let kind = match msg {
                    Message::Propose { .. } => PROPOSE,
                    Message::Decide(_) => DECIDE,
                };
                tracing::debug!(rank = me, to, ?msg, "shrink: sends");
                unsent.push((to, kind, msg.encode()));
            }
            let mut still = Vec::new();
            for (to, kind, bytes) in unsent.drain(..) {
                match self
                    .transport
                    .try_send_from(Rank::from(to), tag(kind), &bytes, Lend::No)
                {
                    Ok(SendState::NoRoom) => still.push((to, kind, bytes)),
                    Ok(_) => {}
                    Err(e) => {
                        self.aborted_during(&e, agreement)?;
                        tracing::debug!(rank = me, peer = to, error = %e, "shrink: suspects");
                        agreement.suspect(to);
                    }
                }
            }
            // A rank suspected or left out gets what it can take at once, no more: a
            // stopped one's full ring must not hold this rank back.
            let gone = agreement.suspects();
            still.retain(|(to, _, _)| !gone.contains(to));
            unsent = still;
            match agreement.outcome() {
                Some(Ok(d)) if unsent.is_empty() => return Ok(d.clone()),
                Some(Err(Refusal::Excluded)) => {
                    let peer = agreement.decider().map_or(rank, |p| p as u32);
                    return Err(Error::Excluded { rank, peer });
                }
                Some(Err(Refusal::Conflict { first, other })) => {
                    return Err(agreement_failed(
                        rank,
                        Vec::new(),
                        format!("ranks {first} and {other} sent different decisions"),
                    ))
                }
                _ => {}
            }
            for w in agreement.waiting_on() {
                if self.transport.known_gone(Rank::from(w)).is_some() {
                    agreement.suspect(w);
                }
            }
            let now = Instant::now();
            if now >= next_probe {
                let silent = self.transport.unresponsive(probe_window);
                for w in agreement.waiting_on() {
                    if silent.contains(&Rank::from(w)) {
                        tracing::info!(rank = me, peer = w, "shrink: no answer to the probe");
                        agreement.suspect(w);
                    }
                }
                next_probe = deadline_after(timeout / 2);
            }
            if now >= hard {
                return Err(agreement_failed(
                    rank,
                    waiting(agreement),
                    format!(
                        "no agreement after {:?} (suspects: {:?})",
                        started.elapsed(),
                        agreement.suspects()
                    ),
                ));
            }
            if self.abort.is_aborted() && !aborted_before {
                return Err(agreement_failed(
                    rank,
                    waiting(agreement),
                    format!(
                        "aborted during the agreement: {}",
                        self.abort.reason().unwrap_or_default()
                    ),
                ));
            }
            let until = (now + ABORT_POLL).min(next_probe).min(hard);
            if let Err(e) = self.transport.wait(until) {
                self.aborted_during(&e, agreement)?;
                // A peer's failure, which the next look names: not a reason to spin.
                std::thread::yield_now();
            }
        }
    }

    /// Ends the agreement if `e` says the new epoch was aborted (a survivor gave up).
    fn aborted_during(&self, e: &TransportError, agreement: &Agreement) -> Result<()> {
        match e {
            TransportError::Aborted { .. } => Err(agreement_failed(
                self.rank.0,
                agreement.waiting_on().iter().map(|&r| r as u32).collect(),
                format!("a survivor gave up: {e}"),
            )),
            _ => Ok(()),
        }
    }
}

fn waiting(a: &Agreement) -> Vec<u32> {
    a.waiting_on().iter().map(|&r| r as u32).collect()
}

fn agreement_failed(rank: u32, waiting_for: Vec<u32>, reason: String) -> Error {
    Error::Agreement {
        rank,
        waiting_for,
        reason,
    }
}

/// Whether a message tagged `t`, taken from a member before its `DECIDE`, belongs to the
/// epoch that ended: the agreement's own messages up to this epoch, point-to-point
/// messages of earlier epochs, and collectives numbered before the new group's `base`.
fn ended(t: &Tag, epoch: u32, base: u32) -> bool {
    let epoch = epoch & !P2P_BIT;
    if t.collective & P2P_BIT != 0 {
        let of = t.collective & !P2P_BIT;
        return if t.channel == AGREE_CHANNEL {
            of <= epoch
        } else {
            of < epoch
        };
    }
    let behind = base.wrapping_sub(t.collective) & !P2P_BIT;
    behind != 0 && behind < 1 << 30
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_old_epochs_messages_are_dropped() {
        let t = |collective, channel| Tag {
            collective,
            channel,
            ..Tag::default()
        };
        let (epoch, base) = (2, 100);
        // The old group's collectives and point-to-point messages, the agreement's.
        assert!(ended(&t(99, 0), epoch, base));
        assert!(ended(&t(0, 3), epoch, base));
        assert!(ended(&t(P2P_BIT, 0), epoch, base));
        assert!(ended(&t(P2P_BIT | 1, 0), epoch, base));
        assert!(ended(&t(P2P_BIT | 2, AGREE_CHANNEL), epoch, base));
        // The new group's, and the next agreement's.
        assert!(!ended(&t(100, 0), epoch, base));
        assert!(!ended(&t(101, 1), epoch, base));
        assert!(!ended(&t(P2P_BIT | 2, 0), epoch, base));
        assert!(!ended(&t(P2P_BIT | 3, AGREE_CHANNEL), epoch, base));
    }

    #[test]
    fn an_in_process_group_cannot_shrink_and_says_so() {
        let mut comms = crate::local::group(2).unwrap();
        let Err(e) = comms[0].shrink(&[1]) else {
            panic!("an in-process group shrank")
        };
        assert!(
            matches!(e, Error::Agreement { rank: 0, .. }) && e.to_string().contains("shrink"),
            "{e}"
        );
        let Err(e) = comms[1].shrink(&[1]) else {
            panic!("a rank excluding itself got a group")
        };
        assert!(matches!(e, Error::Excluded { rank: 1, peer: 1 }), "{e}");
    }
}
