//! Carrying on after a failure (see [`Group::begin_epoch`](crate::Group::begin_epoch),
//! [`Group::discard_from`](crate::Group::discard_from) and
//! [`Group::exclude`](crate::Group::exclude)).
//!
//! Until a group first shrinks, a failed completion or post breaks the whole transport
//! (its calls fail at once, on every rank through the abort). From the first new epoch
//! on, such a failure is its peer's alone (`peer_errors`): the queue pair of a dead peer
//! flushes its work in error, and the survivors' pairs, which share the completion queue,
//! go on; an operation toward that peer returns the error until the peer is excluded,
//! when its queue pair is stopped and its slots come back to the pool.

use super::ffi::MemoryWindow;
use super::VerbsTransport;
use crate::error::TransportError;
use crate::types::{Rank, Tag};

impl VerbsTransport {
    /// See `Group::begin_epoch`: the failure that broke the transport was a peer's
    /// (its queue pair's): from now on errors are kept per peer.
    pub(super) fn next_epoch(&mut self) -> Result<u32, TransportError> {
        let epoch = self.tcp.next_epoch()?;
        if let Some(e) = self.broken.take() {
            let peer = match &e {
                TransportError::Completion { peer, .. } => Some(*peer),
                TransportError::Verbs { peer, .. } => *peer,
                _ => None,
            };
            match peer {
                Some(p) => self.fail_peer(p.index(), e),
                // An abort: this rank's, for the pairs it stopped after the failure
                // (`reap`), or a peer's word standing for a failed completion
                // (`cause_behind`). Each of those pairs is its peer's failure already.
                None if matches!(e, TransportError::Aborted { .. }) => {}
                // Not one peer's: the device or the completion queue itself.
                None => {
                    self.broken = Some(e.clone());
                    return Err(e);
                }
            }
        }
        self.per_peer = true;
        Ok(epoch)
    }

    /// Records `e` as peer `p`'s failure (see the module docs).
    pub(super) fn fail_peer(&mut self, p: usize, e: TransportError) {
        if let Some(slot) = self.peer_errors.get_mut(p) {
            if slot.is_none() {
                tracing::info!(error = %e, "verbs: a peer's queue pair failed");
                *slot = Some(e);
            }
        }
    }

    /// See `Group::discard_from`: each such message's slot is lent again.
    pub(super) fn discard(&mut self, peer: Rank, old: &dyn Fn(&Tag) -> bool) {
        self.progress();
        let keys: Vec<_> = self
            .arrived
            .iter()
            .filter(|((from, _), (tag, _))| *from == peer && old(tag))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some((_, a)) = self.arrived.remove(&k) {
                self.let_go(a);
            }
        }
        self.tcp.discard(peer, old);
    }

    /// See `Group::exclude`: its queue pair goes to the error state (it can no longer
    /// write this rank's slots, and what this rank posted to it is flushed), and the
    /// slots lent to it come back to the pool (registered memory, never freed).
    pub(super) fn forget(&mut self, peer: Rank) {
        let r = peer.index();
        let keys: Vec<_> = self
            .arrived
            .keys()
            .filter(|(from, _)| *from == peer)
            .copied()
            .collect();
        for k in keys {
            if let Some((_, a)) = self.arrived.remove(&k) {
                self.let_go(a);
            }
        }
        if let Some(Some(p)) = self.peers.get_mut(r) {
            let _ = p.qp.stop();
            let lent: Vec<(u32, Vec<u8>)> = p.advertised.drain().collect();
            p.credits.clear();
            p.owed.clear();
            p.deficit = 0;
            for (id, v) in lent {
                // A slot's window is still bound on the stopped pair (never invalidated):
                // it cannot be bound again, so the slot gets a fresh one, or is retired
                // without one (kept, as registered memory is, never lent again).
                let buf = &mut self.bufs[id as usize];
                if buf.window.is_some() {
                    match MemoryWindow::new(&self.pd) {
                        Ok(w) => buf.window = Some(w),
                        Err(e) => {
                            tracing::warn!(error = %e, "verbs: no fresh window for a slot");
                            self.retired.push((id, v));
                            continue;
                        }
                    }
                }
                self.free.push((id, v));
            }
        }
        self.fail_peer(
            r,
            TransportError::InvalidPeer {
                rank: self.me.rank,
                peer,
                nranks: self.me.nranks,
            },
        );
        self.tcp.forget(peer);
    }
}
