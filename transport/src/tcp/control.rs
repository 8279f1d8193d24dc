//! Setup messages over a connected TCP group: what layers built on its connections (the
//! host map, verbs endpoints, shared-memory segments) exchange before their own data path
//! exists. Each kind of exchange has its own tag ([`control_tag`]), outside the space of
//! collective sequence numbers, and every wait ends at the caller's deadline.

use std::time::{Duration, Instant};

use super::TcpTransport;
use crate::error::TransportError;
use crate::transport::{Payload, Transport};
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
        while !self.try_send_slice(peer, tag, data)? {
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout {
                    rank: self.rank(),
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
                Some(p) => return Ok(take_bytes(p)),
                None => {
                    if let Some(e) = self.peer_gone(peer) {
                        return Err(e);
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout {
                    rank: self.rank(),
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

fn take_bytes(p: Payload) -> Vec<u8> {
    p.as_bytes().to_vec()
}
