//! Setup messages over a connected TCP group: what layers built on its connections (the
//! host map, verbs endpoints, shared-memory segments) exchange before their own data path
//! exists. Each kind of exchange has its own tag ([`control_tag`]), outside the space of
//! collective sequence numbers, and every wait ends at the caller's deadline.
//!
//! Every control message carries a MAC under its connection's session key (see
//! [`super::bootstrap::auth`]) over the exchange, the sender, the receiver, how many of
//! that exchange the sender sent before, and the bytes: a message rewritten, replayed,
//! reordered within its exchange or moved from another connection is refused as a
//! protocol error naming the peer.

use std::time::{Duration, Instant};

use super::bootstrap::auth;
use super::bootstrap::wire::MAC;
use super::TcpTransport;
use crate::error::TransportError;
use crate::transport::Group;
use crate::transport::Payload;
use crate::types::{Rank, Tag};

/// The exchanges carried over the control connections, one tag each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exchange {
    /// A verbs queue pair's endpoint.
    VerbsEndpoint = 0,
    /// Every peer's receives are posted (verbs).
    VerbsReady = 1,
    /// Whether this rank can use RDMA.
    VerbsUsable = 2,
    /// A shared-memory segment's name and shape.
    ShmSegment = 4,
    /// The peer mapped this rank's segment (or why not).
    ShmMapped = 5,
}

/// One more than the largest [`Exchange`]: the count of per-exchange counters.
pub(crate) const EXCHANGES: usize = 6;

/// The tag of an exchange: the high bit of the collective number marks it point to point,
/// so it is never taken for a stale collective message.
pub(crate) fn control_tag(exchange: Exchange) -> Tag {
    Tag {
        collective: 0xffff_fff0,
        channel: 0,
        transfer: exchange as u32,
        segment: 0,
        schedule: 0,
    }
}

impl TcpTransport {
    /// Sends `data` to `peer` as the message of `exchange`, waiting for room until
    /// `deadline`.
    pub(crate) fn send_control(
        &mut self,
        peer: Rank,
        exchange: Exchange,
        data: &[u8],
        deadline: Instant,
    ) -> Result<(), TransportError> {
        let tag = control_tag(exchange);
        let me = self.me.rank;
        let sealed = match self.peers.get_mut(peer.index()) {
            Some(Some(p)) => {
                let n = p.controls_sent[exchange as usize];
                p.controls_sent[exchange as usize] += 1;
                p.session.map(|key| {
                    let mut m = data.to_vec();
                    let head = seal_head(exchange, me, peer, n);
                    m.extend_from_slice(&auth::seal(&key, &[&head, data]));
                    m
                })
            }
            _ => None,
        };
        let data = sealed.as_deref().unwrap_or(data);
        while !self.send_slice(peer, tag, data)? {
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout {
                    rank: self.me.rank,
                    peer,
                    what: format!("sending its {exchange:?} message"),
                    waited: Duration::ZERO,
                });
            }
            self.wait(deadline)?;
        }
        Ok(())
    }

    /// The message of `exchange` from `peer`, whatever its length, waiting until
    /// `deadline`; an error naming the peer if it goes away first.
    pub(crate) fn recv_control(
        &mut self,
        peer: Rank,
        exchange: Exchange,
        deadline: Instant,
    ) -> Result<Vec<u8>, TransportError> {
        let start = Instant::now();
        let tag = control_tag(exchange);
        loop {
            let _ = self.control();
            match self.take_unchecked(peer, tag) {
                Some(p) => return self.unseal(peer, exchange, take_bytes(p)),
                None => {
                    if let Some(e) = self.peer_gone(peer) {
                        return Err(e);
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout {
                    rank: self.me.rank,
                    peer,
                    what: format!("its {exchange:?} message"),
                    waited: start.elapsed(),
                });
            }
            self.wait(deadline)?;
        }
    }

    /// Sends `mine` to each of `peers` and returns theirs, in the order of `peers`.
    pub(crate) fn exchange_control(
        &mut self,
        peers: &[Rank],
        exchange: Exchange,
        mine: &[u8],
        deadline: Instant,
    ) -> Result<Vec<Vec<u8>>, TransportError> {
        for &p in peers {
            self.send_control(p, exchange, mine, deadline)?;
        }
        peers
            .iter()
            .map(|&p| self.recv_control(p, exchange, deadline))
            .collect()
    }
}

impl TcpTransport {
    /// `message` without its seal, if the seal is right for the next message of `exchange`
    /// from `peer`; else a protocol error naming the peer.
    fn unseal(
        &mut self,
        peer: Rank,
        exchange: Exchange,
        mut message: Vec<u8>,
    ) -> Result<Vec<u8>, TransportError> {
        let me = self.me.rank;
        let Some(Some(p)) = self.peers.get_mut(peer.index()) else {
            return Ok(message);
        };
        let n = p.controls_taken[exchange as usize];
        p.controls_taken[exchange as usize] += 1;
        let Some(key) = p.session else {
            return Ok(message);
        };
        let body = message.len().checked_sub(MAC);
        let head = seal_head(exchange, peer, me, n);
        let ok = body.is_some_and(|b| auth::sealed(&key, &[&head, &message[..b]], &message[b..]));
        match body {
            Some(b) if ok => {
                message.truncate(b);
                Ok(message)
            }
            _ => Err(TransportError::Protocol {
                rank: me,
                peer,
                reason: format!(
                    "its {exchange:?} message is not sealed under the connection's session \
                     key: something between the ranks rewrote, replayed or moved it"
                ),
            }),
        }
    }
}

/// What a control message's seal covers besides its bytes: the exchange, the sender,
/// the receiver and how many of that exchange the sender sent before.
pub(crate) fn seal_head(exchange: Exchange, from: Rank, to: Rank, count: u64) -> [u8; 20] {
    let mut head = [0u8; 20];
    head[..4].copy_from_slice(&(exchange as u32).to_le_bytes());
    head[4..8].copy_from_slice(&from.0.to_le_bytes());
    head[8..12].copy_from_slice(&to.0.to_le_bytes());
    head[12..].copy_from_slice(&count.to_le_bytes());
    head
}

fn take_bytes(p: Payload) -> Vec<u8> {
    p.as_bytes().to_vec()
}
