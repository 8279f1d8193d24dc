//! Fault injection, for the tests of what a peer's device and this transport do with a
//! misbehaving rank.

use super::ffi::Sge;
use super::wire::{wr, Credit, OFFER, WR_DATA, WR_INLINE, WR_WINDOW_WRITE};
use super::VerbsTransport;
use crate::error::TransportError;
use crate::types::{Rank, Tag};

/// What a buggy or hostile rank may do to a peer's slots ([`VerbsTransport::inject`]).
#[doc(hidden)]
#[derive(Clone, Debug)]
pub enum Fault {
    /// Write these bytes (inline) once more into the slot this rank's last `try_send`
    /// used, with the credit it used then.
    StaleWrite(Vec<u8>),
    /// Invalidate once more, with no data, the window of the slot this rank's last
    /// `try_send` used (SEND WITH INVALIDATE behind a zero-length RDMA WRITE): what a
    /// buggy or hostile peer may do with a key it was lent once.
    StaleInvalidate,
    /// Write these bytes as a whole slot's content (header included; longer than the slot
    /// if so) into the peer's next slot, and say the message is there.
    Raw(Rank, Vec<u8>),
    /// Write 8 bytes into the peer's next slot, but say they landed in a destination the
    /// peer never offered (an immediate with the offer bit).
    ForgedOffer(Rank),
    /// Write the whole of the peer's offer for `Tag` (once it holds one) with an
    /// immediate, as into a region, leaving the offer's window open instead of
    /// invalidating it; `Ok(false)` until the offer came.
    ImmediateIntoOffer(Rank, Tag),
}

impl VerbsTransport {
    /// Fault injection, for the tests of what a peer's device and this transport do with
    /// a misbehaving rank: commits `fault`; `Ok(false)` if the peer has lent no slot yet
    /// (call again after `wait`). With windows (the default) a stale write is refused by
    /// the peer's device (a remote access error breaks the pair); with regions it lands
    /// in whatever the slot holds now.
    #[doc(hidden)]
    pub fn inject(&mut self, fault: Fault) -> Result<bool, TransportError> {
        match fault {
            Fault::StaleWrite(bytes) => {
                let Some((p, credit)) = self.last_credit else {
                    return Ok(true);
                };
                let sge = Sge {
                    addr: bytes.as_ptr() as u64,
                    len: bytes.len() as u32,
                    lkey: 0,
                };
                self.next_wr = self.next_wr.wrapping_add(1);
                let wr_id = wr(WR_WINDOW_WRITE, p, self.next_wr);
                let Some(peer) = self.peers[p].as_mut() else {
                    return Ok(true);
                };
                // SAFETY: inline: the bytes are copied during the call, while borrowed.
                let posted = unsafe {
                    peer.qp
                        .post_write_imm(wr_id, &[sge], credit.addr, credit.rkey, credit.id, true)
                };
                match posted {
                    Ok(()) => {
                        peer.sends += 1;
                        Ok(true)
                    }
                    Err(e) => Err(self.broken_by(p, e)),
                }
            }
            Fault::StaleInvalidate => {
                let Some((p, credit)) = self.last_credit else {
                    return Ok(true);
                };
                self.next_wr = self.next_wr.wrapping_add(1);
                let ids = (
                    wr(WR_WINDOW_WRITE, p, self.next_wr),
                    wr(WR_INLINE, p, self.next_wr),
                );
                let Some(peer) = self.peers[p].as_mut() else {
                    return Ok(true);
                };
                let note = credit.id.to_le_bytes();
                // SAFETY: no data (a zero-length write reads no local memory); the note is
                // inline.
                let posted = unsafe {
                    peer.qp
                        .post_write_invalidate(ids, &[], credit.addr, credit.rkey, &note, true)
                };
                match posted {
                    Ok(()) => {
                        peer.sends += 2;
                        Ok(true)
                    }
                    Err((e, _)) => Err(self.broken_by(p, e)),
                }
            }
            Fault::Raw(peer, bytes) => {
                let p = self.peer_index(peer)?;
                if !self.room_for(p)? {
                    return Ok(false);
                }
                let (id, mut v) = self
                    .take_buffer()
                    .map_err(|e| self.verbs_error(Some(p), e))?;
                let n = bytes.len().min(v.len());
                v[..n].copy_from_slice(&bytes[..n]);
                let lkey = self.bufs[id as usize].mr.lkey();
                // Past the buffer: the buffer again (the bytes do not matter there).
                let sges = [
                    Sge {
                        addr: v.as_ptr() as u64,
                        len: n as u32,
                        lkey,
                    },
                    Sge {
                        addr: v.as_ptr() as u64,
                        len: (bytes.len() - n).min(v.len()) as u32,
                        lkey,
                    },
                ];
                self.next_wr = self.next_wr.wrapping_add(1);
                let wr_id = wr(WR_DATA, p, self.next_wr);
                let Some(state) = self.peers[p].as_mut() else {
                    self.free.push((id, v));
                    return Ok(true);
                };
                let Some(credit) = state.credits.pop_front() else {
                    self.free.push((id, v));
                    return Ok(false);
                };
                // SAFETY: `v` is registered and moves into `inflight` until the completion.
                let posted = unsafe { state.post_message(p, wr_id, &sges, &credit, false) };
                self.inflight.insert(wr_id, (id, v));
                posted.map_err(|(e, _)| self.broken_by(p, e))?;
                Ok(true)
            }
            Fault::ForgedOffer(peer) => {
                let p = self.peer_index(peer)?;
                if !self.room_for(p)? {
                    return Ok(false);
                }
                let bytes = [0x5au8; 8];
                let sge = Sge {
                    addr: bytes.as_ptr() as u64,
                    len: bytes.len() as u32,
                    lkey: 0,
                };
                self.next_wr = self.next_wr.wrapping_add(1);
                let wr_id = wr(WR_INLINE, p, self.next_wr);
                let Some(state) = self.peers[p].as_mut() else {
                    return Ok(true);
                };
                let Some(credit) = state.credits.pop_front() else {
                    return Ok(false);
                };
                let forged = Credit {
                    id: OFFER | 0x3039,
                    ..credit
                };
                // SAFETY: inline: the bytes are copied during the call, while alive.
                unsafe { self.post_imm(p, wr_id, sge, &forged, true) }.map(|()| true)
            }
            Fault::ImmediateIntoOffer(peer, tag) => {
                let p = self.peer_index(peer)?;
                self.progress();
                let Some(state) = self.peers[p].as_mut() else {
                    return Ok(true);
                };
                let Some((_, credit)) = state.offers.remove(&tag.key()) else {
                    return Ok(false);
                };
                let (id, mut v) = self
                    .take_buffer()
                    .map_err(|e| self.verbs_error(Some(p), e))?;
                let n = (credit.len as usize).min(v.len());
                v[..n].fill(0x5a);
                let sge = Sge {
                    addr: v.as_ptr() as u64,
                    len: n as u32,
                    lkey: self.bufs[id as usize].mr.lkey(),
                };
                self.next_wr = self.next_wr.wrapping_add(1);
                let wr_id = wr(WR_DATA, p, self.next_wr);
                // SAFETY: `v` is registered and moves into `inflight` (until the completion)
                // once posted.
                match unsafe { self.post_imm(p, wr_id, sge, &credit, false) } {
                    Ok(()) => {
                        self.inflight.insert(wr_id, (id, v));
                        Ok(true)
                    }
                    Err(e) => {
                        self.free.push((id, v));
                        Err(e)
                    }
                }
            }
        }
    }
}

impl VerbsTransport {
    /// Posts `sge` into `credit`'s memory on peer `p` with RDMA WRITE WITH IMM (the
    /// credit's id), as `wr_id`, counting the send.
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_write_imm`](super::ffi::QueuePair::post_write_imm).
    unsafe fn post_imm(
        &mut self,
        p: usize,
        wr_id: u64,
        sge: Sge,
        credit: &Credit,
        inline: bool,
    ) -> Result<(), TransportError> {
        let Some(state) = self.peers[p].as_mut() else {
            return Err(TransportError::InvalidPeer {
                rank: self.me.rank,
                peer: Rank::from(p),
                nranks: self.me.nranks,
            });
        };
        // SAFETY: the caller's contract.
        let posted = unsafe {
            state
                .qp
                .post_write_imm(wr_id, &[sge], credit.addr, credit.rkey, credit.id, inline)
        };
        match posted {
            Ok(()) => {
                state.sends += 1;
                Ok(())
            }
            Err(e) => Err(self.broken_by(p, e)),
        }
    }
}
