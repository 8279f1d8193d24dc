//! Carrying on after a failure (see [`Group::begin_epoch`](crate::Group::begin_epoch),
//! [`Group::discard_from`](crate::Group::discard_from) and [`Group::exclude`](crate::Group::exclude)): shared memory holds no
//! epoch of its own (aborts travel on the transport beneath), only messages and rings.

use super::{Msg, ShmTransport};
use crate::error::TransportError;
use crate::types::{Rank, Tag};

impl ShmTransport {
    /// See [`Group::begin_epoch`](crate::Group::begin_epoch). A ring that broke the protocol broke this rank's
    /// transport whoever wrote it: the survivors' rings are checked afresh as they are
    /// read, and a peer left out is never read again.
    pub(super) fn next_epoch(&mut self) -> Result<u32, TransportError> {
        let epoch = self.inner.begin_epoch()?;
        self.broken = None;
        self.withdrawn.clear();
        Ok(epoch)
    }

    /// See [`Group::discard_from`](crate::Group::discard_from): what its ring holds goes too, once read off it.
    pub(super) fn discard(&mut self, peer: Rank, old: &dyn Fn(&Tag) -> bool) {
        if self.shares_memory_with(peer) {
            // Off the ring first (in order: what the peer sent before the message that
            // ended its epoch is all there by now), then dropped.
            let _ = self.drain();
            let gone: Vec<_> = self
                .arrived
                .iter()
                .filter(|((from, _), (tag, _))| *from == peer && old(tag))
                .map(|(key, _)| *key)
                .collect();
            for key in gone {
                if let Some((_, (msg, charge))) = self.arrived.remove(&key) {
                    if let Some(Some(l)) = self.links.get_mut(peer.index()) {
                        l.copied = l.copied.saturating_sub(charge);
                    }
                    // A lent slot goes back to its ring, a message left in the sender's
                    // memory is handed back unread, as they drop.
                    match msg {
                        Msg::Here(p) => self.dispose(p),
                        Msg::Slot(lease) => drop(lease),
                        Msg::There(remote) => drop(remote),
                    }
                }
            }
        }
        self.inner.discard_from(peer, old);
    }

    /// See [`Group::exclude`](crate::Group::exclude): its ring here is never read again and its segment is
    /// unmapped once nothing of it is held; its rings' memory in this rank's segment stays
    /// this rank's, which it reads no more.
    pub(super) fn forget(&mut self, peer: Rank) {
        self.arrived.retain(|(from, _), _| *from != peer);
        // Sends it would have read from this rank's memory: it never will.
        let links = &mut self.links;
        self.outstanding.retain(|&(_, p, ticket, generation)| {
            if p != peer {
                return true;
            }
            if let Some(Some(l)) = links.get_mut(p.index()) {
                let _ = l.outbox.withdraw(ticket, generation, true);
            }
            false
        });
        if let Some(slot) = self.links.get_mut(peer.index()) {
            *slot = None;
        }
        self.inner.exclude(peer);
        // The links it counts changed.
        self.me.details = self.describe();
    }
}
