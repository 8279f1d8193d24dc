//! The sending side of a ring: descriptors, slots and single-copy tickets in a peer's
//! segment (see the layout in [`super`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::transport::WHOLE_MAX;

use super::{
    Segment, DONE, D_DATA, D_LEN_SLOT, D_SEQ, D_TAG, FREE, FULL, INLINE, NO_SLOT, POSTED, READING,
    REMOTE, REVOKED, TICKETS,
};

/// This rank's side of a ring in a peer's segment: its messages to that peer.
#[derive(Debug)]
pub struct OutRing {
    seg: Arc<Segment>,
    ring: usize,
    head: u64,
    /// `head % slots`: the next descriptor's place.
    at: usize,
    /// Where the ring's descriptors begin.
    descs: usize,
    /// The receiver's `taken` when last read: descriptors up to `taken + slots` are free.
    taken: u64,
    cursor: usize,
    /// Per ticket: the generation of the single-copy send it holds, if any.
    tickets: [Option<u32>; TICKETS],
    /// The last generation handed out.
    generation: u32,
}

/// What became of a single-copy send the sender gives up on ([`OutRing::withdraw`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawal {
    /// The receiver had not begun reading: it never will.
    Withdrawn,
    /// The receiver had read it already.
    Done,
    /// The receiver is reading it now.
    Reading,
}

impl OutRing {
    /// The sending side of `ring` of `seg` (a peer's segment).
    pub fn new(seg: Arc<Segment>, ring: usize) -> OutRing {
        OutRing {
            descs: seg.desc_base(ring),
            seg,
            ring,
            head: 0,
            at: 0,
            taken: 0,
            cursor: 0,
            tickets: [None; TICKETS],
            generation: 0,
        }
    }

    /// Publishes a message of `len` bytes at `addr` in this process's memory, for the
    /// receiver to read from there, under a free ticket: `Some((ticket, generation))`, or
    /// `None` (nothing published) when no descriptor or ticket is free. The memory must
    /// stay unchanged until [`OutRing::ticket_done`] says so.
    /// Messages are at most [`WHOLE_MAX`] long (a slot's length is no limit: the receiver
    /// reads them into the destination it asks them for).
    pub fn send_remote(&mut self, tag: [u64; 3], addr: u64, len: usize) -> Option<(usize, u32)> {
        if len > WHOLE_MAX || !self.desc_free() {
            return None;
        }
        let t = self.tickets.iter().position(Option::is_none)?;
        self.generation = self.generation.wrapping_add(1) & 0x3fff_ffff;
        let generation = self.generation;
        self.tickets[t] = Some(generation);
        let g = u64::from(generation) << 2;
        // Published with the descriptor below (its release store).
        self.seg
            .ticket(self.ring, t)
            .store(g | POSTED, Ordering::Relaxed);
        let d = self.seg.desc_at(self.descs, self.at);
        d[D_DATA].store(addr, Ordering::Relaxed);
        d[D_DATA + 1].store(t as u64 | u64::from(generation) << 32, Ordering::Relaxed);
        self.publish(tag, len, REMOTE);
        Some((t, generation))
    }

    /// Whether the receiver is done with the single-copy send under `ticket` (it read the
    /// bytes, or dropped the message): then the ticket is free again and the memory the
    /// caller's (acquire: after every read of it).
    pub fn ticket_done(&mut self, ticket: usize, generation: u32) -> bool {
        if self.tickets.get(ticket).copied().flatten() != Some(generation) {
            return true;
        }
        let g = u64::from(generation) << 2;
        if self.seg.ticket(self.ring, ticket).load(Ordering::Acquire) == g | DONE {
            self.tickets[ticket] = None;
            return true;
        }
        false
    }

    /// Whether the receiver is reading the single-copy send under `ticket` right now.
    pub fn being_read(&self, ticket: usize, generation: u32) -> bool {
        let g = u64::from(generation) << 2;
        self.tickets.get(ticket).copied().flatten() == Some(generation)
            && self.seg.ticket(self.ring, ticket).load(Ordering::Relaxed) == g | READING
    }

    /// Gives up a single-copy send (the call failed): withdraws it if the receiver has not
    /// begun reading; if it is reading, `abandon` says whether to give the memory up
    /// anyway (the receiver then fails rather than use what it read).
    pub fn withdraw(&mut self, ticket: usize, generation: u32, abandon: bool) -> Withdrawal {
        if self.tickets.get(ticket).copied().flatten() != Some(generation) {
            return Withdrawal::Done;
        }
        let word = self.seg.ticket(self.ring, ticket);
        let g = u64::from(generation) << 2;
        let mut outcome = Withdrawal::Done;
        for from in [POSTED, READING] {
            if from == READING && !abandon {
                if word.load(Ordering::Acquire) == g | READING {
                    return Withdrawal::Reading;
                }
                continue;
            }
            if word
                .compare_exchange(g | from, g | REVOKED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                outcome = Withdrawal::Withdrawn;
            }
        }
        self.tickets[ticket] = None;
        outcome
    }

    /// Slots the peer gave back so far (a counter that only grows, for wake-up checks).
    pub fn released(&self, order: Ordering) -> u64 {
        self.seg.released(self.ring).load(order)
    }

    /// Largest message.
    pub fn slot_bytes(&self) -> usize {
        self.seg.shape.slot_bytes
    }

    /// Whether descriptor `head` is free (the receiver took the one before it there),
    /// reading the receiver's count only when the last one read says no.
    fn desc_free(&mut self) -> bool {
        let slots = self.seg.shape.slots as u64;
        if self.head.wrapping_sub(self.taken) < slots {
            return true;
        }
        self.taken = self.seg.taken(self.ring).load(Ordering::Acquire);
        self.head.wrapping_sub(self.taken) < slots
    }

    /// A free slot, if the peer gave one back.
    fn claim(&self) -> Option<usize> {
        let slots = self.seg.shape.slots;
        (0..slots)
            .map(|i| (self.cursor + i) % slots)
            .find(|&s| self.seg.state(self.ring, s).load(Ordering::Acquire) == FREE)
    }

    /// Descriptors the receiver has read so far (a counter that only grows, for wake-up
    /// checks of a sender that found them all in use).
    pub fn taken(&self, order: Ordering) -> u64 {
        self.seg.taken(self.ring).load(order)
    }

    /// Whether [`OutRing::send`] of `len` bytes would find room now.
    pub fn has_room(&self, len: usize) -> bool {
        let taken = self.seg.taken(self.ring).load(Ordering::Acquire);
        self.head.wrapping_sub(taken) < self.seg.shape.slots as u64
            && (len <= INLINE || self.claim().is_some())
    }

    /// Writes `data` (at most [`OutRing::slot_bytes`]) as a message with tag words `tag`
    /// and publishes it; `false` (nothing written) if there is no room.
    pub fn send(&mut self, tag: [u64; 3], data: &[u8]) -> bool {
        let len = data.len();
        assert!(len <= self.slot_bytes(), "message larger than a slot");
        if !self.desc_free() {
            return false;
        }
        let ring = self.ring;
        let slot = if len <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..len].copy_from_slice(data);
            let d = self.seg.desc_at(self.descs, self.at);
            for (k, chunk) in bytes.chunks_exact(8).enumerate() {
                let w = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
                d[D_DATA + k].store(w, Ordering::Relaxed);
            }
            NO_SLOT
        } else {
            let Some(slot) = self.claim() else {
                return false;
            };
            self.cursor = (slot + 1) % self.seg.shape.slots;
            // SAFETY: the slot is FREE: the receiver gave it back (acquire above: its reads
            // of it are done) and will not touch it until a descriptor naming it is
            // published below; no other sender writes this ring (one ring per sending rank,
            // this one), and this `&mut self` is the only writer in this process. `len` is
            // within the slot, inside the mapping; `data` is this process's own memory. A
            // raw copy, never a slice: the receiver's process can write the slot too.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), self.seg.data_ptr(ring, slot), len);
            }
            self.seg.state(ring, slot).store(FULL, Ordering::Relaxed);
            slot as u64
        };
        self.publish(tag, len, slot);
        true
    }

    /// Writes descriptor `head`'s tag, length and slot (its data words are written), then
    /// publishes it.
    fn publish(&mut self, tag: [u64; 3], len: usize, slot: u64) {
        let d = self.seg.desc_at(self.descs, self.at);
        for (k, w) in tag.iter().enumerate() {
            d[D_TAG + k].store(*w, Ordering::Relaxed);
        }
        d[D_LEN_SLOT].store(len as u64 | slot << 32, Ordering::Relaxed);
        // Everything above is visible to the receiver that sees this number.
        d[D_SEQ].store(self.head + 1, Ordering::Release);
        self.head += 1;
        self.at = self.seg.next_place(self.at);
        // Sequentially consistent: ordered before the check of the receiver's `sleeping`
        // flag that follows (see `ShmTransport::wait`).
        self.seg.head(self.ring).store(self.head, Ordering::SeqCst);
    }
}
