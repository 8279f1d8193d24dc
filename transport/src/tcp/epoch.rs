//! Carrying on after a failure: epochs, discarding a finished epoch's messages, and
//! leaving a peer out (see [`Group::begin_epoch`], [`Group::discard_from`] and
//! [`Group::exclude`]).
//!
//! An abort frame carries its sender's epoch in its tag: a survivor that already began
//! the next epoch ignores the aborts of the one that ended (its peers' calls failed after
//! its own and said so late), while an abort of the current epoch (a survivor whose
//! agreement failed) still fails it.

use std::io::Read;

use super::TcpTransport;
use crate::error::TransportError;
use crate::transport::Transport;
use crate::types::{Rank, Tag};

impl TcpTransport {
    /// See [`Group::begin_epoch`].
    pub(crate) fn next_epoch(&mut self) -> Result<u32, TransportError> {
        // A broken stream (a protocol error) stays broken: only an abort is undone, and a
        // failed poll, which the abort's error stands for too.
        if let Some(e) = &self.broken {
            if !matches!(e, TransportError::Aborted { .. }) {
                return Err(e.clone());
            }
        }
        self.broken = None;
        self.aborted = None;
        self.abort_sent = false;
        self.held_abort = None;
        self.agreeing = true;
        self.epoch = self.epoch.wrapping_add(1);
        Ok(self.epoch)
    }

    /// See [`Group::commit_epoch`].
    pub(crate) fn settle_epoch(&mut self) {
        self.agreeing = false;
        if let Some(held) = self.held_abort.take() {
            self.aborted.get_or_insert(held);
        }
    }

    /// See [`Group::discard_from`].
    pub(crate) fn discard(&mut self, peer: Rank, old: &dyn Fn(&Tag) -> bool) {
        let dropped: Vec<_> = self
            .arrived
            .iter()
            .filter(|((from, _), (tag, _))| *from == peer && old(tag))
            .map(|(key, _)| *key)
            .collect();
        for key in dropped {
            if let Some((_, payload)) = self.arrived.remove(&key) {
                self.release(peer, payload.len());
                self.recycle(payload);
            }
        }
        // Receives of the ended calls that hoped to take a frame straight into their
        // destinations, or waited for one past the budget: none will ask again.
        if let Some(Some(p)) = self.peers.get_mut(peer.index()) {
            p.direct.wants.clear();
            p.direct.partial.clear();
            p.awaited = false;
        }
    }

    /// See [`Group::exclude`].
    pub(crate) fn forget(&mut self, peer: Rank) {
        let r = peer.index();
        let Some(slot) = self.peers.get_mut(r) else {
            return;
        };
        let Some(mut p) = slot.take() else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut p.stream);
        // Its untaken messages go below (`arrived`): off the budget of all peers.
        self.held_total -= p.held;
        // What it sent is read and dropped first: a socket closed with unread input is
        // reset, which may destroy what this rank queued for it last (the decision that
        // tells a stopped rank, once it wakes, that it was left out).
        let mut sink = [0u8; 4096];
        let mut budget = 1 << 20;
        while budget > 0 {
            match p.stream.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(n) => budget -= n.min(budget),
            }
        }
        let _ = p.stream.shutdown(std::net::Shutdown::Both);
        self.arrived.retain(|(from, _), _| *from != peer);
        self.pinged_by.retain(|&x| x != r);
    }
}
