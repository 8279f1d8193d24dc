//! Large messages read straight from the socket into the receiver's destination
//! ([`Transport::try_recv_into`]), saving the copy out of a pooled buffer.
//!
//! A receive that misses registers what it wants ([`Want`]). When the next frame from
//! that peer is wanted, or is the next segment of the transfer whose segment was just taken
//! this way, the reader stops at its header and leaves its payload in the socket: the frame
//! is *claimed* ([`Claim`]). The receive then reads it into its destination as the bytes
//! come, across calls (the caller leaves the destination alone until the call returns
//! `true`, and asks with the same memory; other memory is an error, never a silent mix).
//!
//! A claimed frame holds up everything behind it on that connection. So a claim whose
//! receive did not ask between two [`Group::wait`]s (the engine waits on something
//! else, which may be queued behind it) is *spilled*: the rest of its payload is read
//! into a pooled buffer as any frame's, and the receive later copies only that rest (the
//! bytes it already read stay in its destination). A wait while anything is claimed
//! sleeps at most [`CLAIMED_WAIT`], so a spill never waits for the call's deadline.
//!
//! [`Transport::try_recv_into`]: crate::transport::Transport::try_recv_into
//! [`Group::wait`]: crate::transport::Group::wait

use std::io::{self, IoSliceMut, Read};
use std::time::Duration;

use super::frame::{Header, HEADER_LEN};
use super::{TcpTransport, DIRECT_MIN};
use crate::error::TransportError;
use crate::transport::{check_tag, Transport};
use crate::types::{Rank, Tag, TagKey};

/// Longest sleep of a wait while a frame is claimed (see the module documentation).
pub(super) const CLAIMED_WAIT: Duration = Duration::from_millis(1);

/// A receive that missed and will ask again, with the length it expects.
#[derive(Debug)]
pub(super) struct Want {
    key: TagKey,
    len: usize,
    /// Asked since the last wait.
    asked: bool,
}

/// A frame whose payload is read straight into its receive's destination.
#[derive(Debug)]
pub(super) struct Claim {
    header: Header,
    /// Payload bytes already in the destination.
    pub(super) got: usize,
    /// The destination's address, once a receive began reading into it.
    dst: Option<usize>,
    /// Asked for (or claimed) since the last wait.
    asked: bool,
    /// To be read into a pooled buffer (its receive stopped asking).
    spill: bool,
    /// Not read until the socket had nothing more since it was claimed: its payload may
    /// already be there, and no readiness event would tell a wait so.
    fresh: bool,
}

/// A spilled claim: the first `got` bytes of its payload are in the destination at `dst`.
#[derive(Debug)]
pub(super) struct Partial {
    key: TagKey,
    got: usize,
    dst: usize,
}

/// What a peer's connection knows of receives taken straight into their destinations.
#[derive(Debug, Default)]
pub(super) struct Direct {
    pub(super) wants: Vec<Want>,
    pub(super) claim: Option<Claim>,
    pub(super) partial: Vec<Partial>,
    /// The last frame taken straight of each of the latest transfers (channels interleave
    /// on a connection): a transfer's next segment is held too.
    last: Vec<Tag>,
}

/// Transfers whose last segment taken straight [`Direct`] remembers.
const TRANSFERS_KEPT: usize = 8;

impl Direct {
    /// Whether the reader should stop at `header` and leave its payload in the socket.
    pub(super) fn holds(&self, header: &Header) -> bool {
        let (key, len) = (header.tag.key(), header.len);
        let next_of_last = self.last.iter().any(|t| {
            let t = Tag {
                segment: t.segment.wrapping_add(1),
                ..*t
            };
            t.key() == key
        });
        len as usize >= DIRECT_MIN
            && (next_of_last
                || self
                    .wants
                    .iter()
                    .any(|w| w.key == key && w.len as u64 == len))
    }

    /// Records that `tag` was taken straight into its destination.
    fn taken(&mut self, tag: Tag) {
        let same = |t: &Tag| {
            (t.collective, t.channel, t.transfer) == (tag.collective, tag.channel, tag.transfer)
        };
        match self.last.iter_mut().find(|t| same(t)) {
            Some(t) => *t = tag,
            None => {
                if self.last.len() == TRANSFERS_KEPT {
                    self.last.remove(0);
                }
                self.last.push(tag);
            }
        }
    }

    /// Claims the header the decoder held back.
    pub(super) fn claim(&mut self, header: Header) {
        self.wants.retain(|w| w.key != header.tag.key());
        self.claim = Some(Claim {
            header,
            got: 0,
            dst: None,
            asked: true,
            spill: false,
            fresh: true,
        });
    }

    /// Whether a claim is being read: the connection is not read for anything else.
    pub(super) fn blocks(&self, draining: bool) -> bool {
        self.claim.as_ref().is_some_and(|c| !c.spill && !draining)
    }

    /// Takes the claim to go on reading its frame into a pooled buffer, remembering what
    /// its receive already has.
    pub(super) fn spill(&mut self) -> Option<(Header, usize)> {
        let c = self.claim.take()?;
        if let (Some(dst), true) = (c.dst, c.got > 0) {
            self.partial.push(Partial {
                key: c.header.tag.key(),
                got: c.got,
                dst,
            });
        }
        Some((c.header, c.got))
    }

    /// At a wait: claims and wants nobody asked for since the last one are let go.
    /// Whether a claim remains.
    fn settle(&mut self) -> bool {
        self.wants.retain_mut(|w| std::mem::take(&mut w.asked));
        match &mut self.claim {
            Some(c) => {
                c.spill |= !std::mem::take(&mut c.asked);
                !c.spill
            }
            None => false,
        }
    }
}

impl TcpTransport {
    /// Takes message `tag` from `peer` (index `r`) into `dst` if it is whole: arrived (a
    /// copy), or claimed and now read to its end.
    pub(super) fn take_into(
        &mut self,
        r: usize,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        if let Some((sent, payload)) = self.remove_arrived(peer, tag) {
            check_tag(self.me.rank, peer, tag, sent, payload.len(), dst.len())?;
            let from = self.partial_prefix(r, peer, tag, dst)?;
            dst[from..].copy_from_slice(&payload.as_bytes()[from..]);
            self.recycle(payload);
            if let Some(Some(p)) = self.peers.get_mut(r) {
                p.direct.wants.retain(|w| w.key != tag.key());
            }
            return Ok(true);
        }
        if dst.len() < DIRECT_MIN {
            return Ok(false);
        }
        self.read_claimed(r, peer, tag, dst)
    }

    /// Registers that the receive of `tag` (`len` bytes) from peer `r` missed and will ask
    /// again.
    pub(super) fn want(&mut self, r: usize, tag: Tag, len: usize) {
        let Some(Some(p)) = self.peers.get_mut(r) else {
            return;
        };
        let key = tag.key();
        if let Some(c) = p
            .direct
            .claim
            .as_mut()
            .filter(|c| c.header.tag.key() == key)
        {
            c.asked = true;
        } else if let Some(w) = p.direct.wants.iter_mut().find(|w| w.key == key) {
            w.asked = true;
        } else {
            p.direct.wants.push(Want {
                key,
                len,
                asked: true,
            });
        }
    }

    /// How many leading bytes of `dst` a spilled claim already filled (0 if none); an
    /// error if the receive asks with other memory than the one it began with.
    fn partial_prefix(
        &mut self,
        r: usize,
        peer: Rank,
        tag: Tag,
        dst: &[u8],
    ) -> Result<usize, TransportError> {
        let Some(Some(p)) = self.peers.get_mut(r) else {
            return Ok(0);
        };
        let key = tag.key();
        let Some(i) = p.direct.partial.iter().position(|x| x.key == key) else {
            return Ok(0);
        };
        let part = p.direct.partial.swap_remove(i);
        if part.dst != dst.as_ptr() as usize {
            return Err(self.moved(peer, tag));
        }
        Ok(part.got)
    }

    /// The error of a receive that asked with other memory than the one its message
    /// began to land in.
    pub(super) fn moved(&self, peer: Rank, tag: Tag) -> TransportError {
        TransportError::Misuse {
            rank: self.me.rank,
            peer,
            tag,
            reason: "asked with other memory than the destination its message began to land in"
                .into(),
        }
    }

    /// Whether `tag` had begun to land straight in a destination before it spilled: it
    /// must then be taken with `try_recv_into` and that destination.
    pub(super) fn spilled(&self, r: usize, tag: Tag) -> bool {
        matches!(self.peers.get(r), Some(Some(p)) if p.direct.partial.iter().any(|x| x.key == tag.key()))
    }

    /// Reads the claimed frame `tag` from peer `r` into `dst` as far as the socket has it;
    /// whether it is whole. A claim of another frame reads nothing.
    fn read_claimed(
        &mut self,
        r: usize,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        let rank = self.me.rank;
        let Some(Some(p)) = self.peers.get_mut(r) else {
            return Ok(false);
        };
        let Some(c) = p.direct.claim.as_mut() else {
            return Ok(false);
        };
        if c.header.tag.key() != tag.key() || c.spill {
            return Ok(false);
        }
        c.asked = true;
        let addr = dst.as_ptr() as usize;
        match c.dst {
            None => {
                check_tag(
                    rank,
                    peer,
                    tag,
                    c.header.tag,
                    c.header.len as usize,
                    dst.len(),
                )?;
                c.dst = Some(addr);
            }
            Some(a) if a != addr => return Err(self.moved(peer, tag)),
            Some(_) => {}
        }
        let len = dst.len();
        let mut behind = 0;
        while c.got < len {
            let head = &mut self.read_buf[..HEADER_LEN];
            let mut bufs = [IoSliceMut::new(&mut dst[c.got..]), IoSliceMut::new(head)];
            match p.stream.read_vectored(&mut bufs) {
                Ok(0) => {
                    p.gone = Some("connection closed by peer".into());
                    break;
                }
                Ok(n) => {
                    let d = n.min(len - c.got);
                    c.got += d;
                    behind = n - d;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.fresh = false;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    p.gone = Some(format!("read failed: {e}"));
                    break;
                }
            }
        }
        if c.got < len {
            return Ok(false);
        }
        p.direct.claim = None;
        p.direct.taken(tag);
        p.large = true;
        self.placed += 1;
        self.progressed += 1;
        // The next header's first bytes came with the payload's last.
        let mut frames = std::mem::take(&mut self.frames);
        let rest = &self.read_buf[..behind];
        let at = (rank, peer);
        let draining = self.draining;
        super::sockets::feed(
            p,
            rest,
            &mut self.pool,
            draining,
            &mut frames,
            &mut self.broken,
            at,
        );
        for frame in frames.drain(..) {
            self.accept(r, frame);
        }
        self.frames = frames;
        Ok(true)
    }

    /// Whether a claim's socket was not read dry since it was claimed (a wait then only
    /// looks: its payload may be there already).
    pub(super) fn fresh_claims(&self) -> bool {
        self.peers
            .iter()
            .flatten()
            .any(|p| p.direct.claim.as_ref().is_some_and(|c| c.fresh && !c.spill))
    }

    /// At a wait: spills the claims nobody asked for since the last wait. Whether a claim
    /// remains (the wait then sleeps at most [`CLAIMED_WAIT`]).
    pub(super) fn settle_claims(&mut self) -> bool {
        let mut claimed = false;
        for p in self.peers.iter_mut().flatten() {
            claimed |= p.direct.settle();
        }
        claimed
    }
}
