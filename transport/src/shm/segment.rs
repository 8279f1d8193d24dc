//! The shared mappings and every access to them: with [`super::cma`] (reading a peer's
//! memory), the only place of the shared-memory backend where `unsafe` lives. Above it,
//! [`Segment`], [`InRing`], [`OutRing`], [`Lease`] and [`Remote`] are safe.
//!
//! # Layout
//!
//! A rank's segment is a file in `/dev/shm` that its local peers map: one ring per peer
//! that sends to this rank. Everything is 64-byte aligned, so no two writers share a
//! cache line.
//!
//! ```text
//! header   magic, version, rings, slots, slot bytes          (line 0, written once)
//!          sleeping: the owner is about to block               (line 1)
//! ring i   head: descriptors published (the sender's)          (line 0)
//!          released, taken: slots given back, descriptors read  (line 1, the receiver's)
//!          ticket[TICKETS]: single-copy sends, a word each     (lines 2-3, both sides')
//!          desc[slots]: a line each, in publication order:
//!              sequence number, tag (3 words), length and slot, 24 bytes inline
//!          state[slots]: FREE (the sender's) / FULL (the receiver's), a line each
//!          slot[slots]: slot bytes
//! ```
//!
//! A message goes into descriptor `head % slots` once the receiver has taken the one
//! before it there (`taken`): up to [`INLINE`] bytes inside the descriptor itself, larger
//! ones in a FREE slot that it claims, fills and marks FULL. Its tag, length and slot
//! follow, then its sequence number `head + 1` (release), then `head += 1`. The receiver
//! polls the next descriptor's sequence number (acquire): a small message costs it one
//! cache line. It lends a slot's bytes to the engine as a [`Lease`]; dropping the lease
//! marks the slot FREE (release) and counts it in `released`.
//!
//! # Single copy
//!
//! A large message can instead stay in the sender's own memory ([`OutRing::send_remote`]):
//! its descriptor carries the address, and a ticket the sender posted (generation and
//! state POSTED). The receiver moves the ticket to READING, copies the bytes straight
//! from the sender's address space into their destination (`process_vm_readv`, see
//! [`super::cma`]), then to DONE (release) and counts it in `released`: the sender may
//! change or free that memory once it sees DONE (acquire). A sender giving up after a
//! failure withdraws a posted ticket, or gives up one being read if the read never ends
//! (REVOKED either way); the receiver then fails instead of handing on bytes that may have
//! changed.
//!
//! # What a peer can do
//!
//! A local peer maps the segment read-write and can write anything anywhere in it: the
//! receiver reads every field once, checks it (a slot number in range and not already
//! lent, a length within the slot), and a bad one is a protocol error naming the peer. A
//! peer that keeps writing into a slot it published can change the bytes of its own
//! message under the receiver (as an RDMA peer can), never the receiver's own memory,
//! its other peers' rings, or the layout.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};

/// Alignment of everything in a segment.
pub const LINE: usize = 64;
/// Largest message carried inside its descriptor (no slot).
pub const INLINE: usize = 24;

/// The length-and-slot word's slot for a message carried inline.
const NO_SLOT: u64 = u32::MAX as u64;
/// The length-and-slot word's slot for a message left in the sender's memory.
const REMOTE: u64 = u32::MAX as u64 - 1;

/// Tickets per ring: single-copy sends in flight from one sender to one receiver.
pub const TICKETS: usize = 16;
/// Lines in front of a ring's descriptors: head; released and taken; the tickets.
const RING_HEAD: usize = 2 + TICKETS * 8 / LINE;

const MAGIC: u64 = u64::from_le_bytes(*b"rcollshm");
const VERSION: u32 = 3;
const FREE: u32 = 0;
const FULL: u32 = 1;

// A ticket's states, in its low two bits (its generation above them).
const POSTED: u64 = 1;
const READING: u64 = 2;
const DONE: u64 = 3;
/// Withdrawn by the sender before the read began, or given up during it.
const REVOKED: u64 = 0;

/// A segment's shape: what both sides must agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Rings (one per sending peer).
    pub rings: usize,
    /// Slots per ring.
    pub slots: usize,
    /// Bytes of data per slot.
    pub slot_bytes: usize,
}

impl Shape {
    fn slot_stride(&self) -> usize {
        self.slot_bytes.next_multiple_of(LINE)
    }

    /// Bytes one slot costs in a ring: its data, its state line and its descriptor.
    pub fn per_slot(slot_bytes: usize) -> usize {
        slot_bytes.next_multiple_of(LINE) + 2 * LINE
    }

    fn ring_bytes(&self) -> usize {
        RING_HEAD * LINE + self.slots * Shape::per_slot(self.slot_bytes)
    }

    /// Bytes of the whole segment; `None` past the address space, or for slots of 4 GiB
    /// or more (a descriptor holds a length of 32 bits).
    pub fn bytes(&self) -> Option<usize> {
        if self.slot_bytes > u32::MAX as usize {
            return None;
        }
        let stride = self.slot_bytes.checked_next_multiple_of(LINE)?;
        let ring = self
            .slots
            .checked_mul(stride.checked_add(2 * LINE)?)?
            .checked_add(RING_HEAD * LINE)?;
        ring.checked_mul(self.rings)?.checked_add(2 * LINE)
    }

    fn ring_offset(&self, ring: usize) -> usize {
        2 * LINE + ring * self.ring_bytes()
    }
}

/// A mapped segment: this rank's own (it receives there) or a peer's (it sends there).
#[derive(Debug)]
pub struct Segment {
    map: MmapRaw,
    shape: Shape,
}

// The header's fields, as offsets.
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_RINGS: usize = 12;
const H_SLOTS: usize = 16;
const H_SLOT_BYTES: usize = 24;
const H_SLEEPING: usize = LINE;

impl Segment {
    /// Maps `file` (already `shape.bytes()` long and allocated) and, as its owner, writes
    /// the header.
    pub fn create(file: &File, shape: Shape) -> std::io::Result<Segment> {
        let seg = Segment::map(file, shape)?;
        seg.u64_at(H_SLOT_BYTES)
            .store(shape.slot_bytes as u64, Ordering::Relaxed);
        seg.u32_at(H_SLOTS)
            .store(shape.slots as u32, Ordering::Relaxed);
        seg.u32_at(H_RINGS)
            .store(shape.rings as u32, Ordering::Relaxed);
        seg.u32_at(H_VERSION).store(VERSION, Ordering::Relaxed);
        seg.u64_at(H_MAGIC).store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Maps a peer's segment `file`, which must have `shape` (read from its header).
    pub fn open(file: &File, shape: Shape) -> std::io::Result<Segment> {
        let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
        let seg = Segment::map(file, shape)?;
        if seg.u64_at(H_MAGIC).load(Ordering::Acquire) != MAGIC
            || seg.u32_at(H_VERSION).load(Ordering::Relaxed) != VERSION
        {
            return Err(invalid("not an rcoll segment of this version".into()));
        }
        let theirs = Shape {
            rings: seg.u32_at(H_RINGS).load(Ordering::Relaxed) as usize,
            slots: seg.u32_at(H_SLOTS).load(Ordering::Relaxed) as usize,
            slot_bytes: seg.u64_at(H_SLOT_BYTES).load(Ordering::Relaxed) as usize,
        };
        if theirs != shape {
            return Err(invalid(format!(
                "its header says {theirs:?}, its owner said {shape:?}"
            )));
        }
        Ok(seg)
    }

    fn map(file: &File, shape: Shape) -> std::io::Result<Segment> {
        let bytes = shape.bytes().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "segment too large")
        })?;
        // The file must hold the whole layout: touching a page past its end would raise
        // SIGBUS.
        let len = file.metadata()?.len();
        if len < bytes as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{len} bytes, the layout needs {bytes}"),
            ));
        }
        let map = MmapOptions::new().len(bytes).map_raw(file)?;
        if map.as_ptr() as usize % LINE != 0 {
            return Err(std::io::Error::other("mapping not aligned"));
        }
        Ok(Segment { map, shape })
    }

    /// The segment's shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The owner's "about to block" flag.
    pub fn sleeping(&self) -> &AtomicU32 {
        self.u32_at(H_SLEEPING)
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        assert!(offset % 4 == 0 && offset + 4 <= self.map.len());
        // SAFETY: in bounds and aligned (checked; the mapping is line-aligned); the mapping
        // lives as long as `self`, and shared memory is only ever accessed here through
        // atomics (header and ring fields) or lent slot bytes, never both at one offset.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.map.len());
        // SAFETY: as in `u32_at`.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    fn ring_field(&self, ring: usize, field: usize) -> usize {
        self.shape.ring_offset(ring) + field
    }

    fn head(&self, ring: usize) -> &AtomicU64 {
        self.u64_at(self.ring_field(ring, 0))
    }

    fn released(&self, ring: usize) -> &AtomicU64 {
        self.u64_at(self.ring_field(ring, LINE))
    }

    fn taken(&self, ring: usize) -> &AtomicU64 {
        self.u64_at(self.ring_field(ring, LINE + 8))
    }

    /// Ticket `t` (below [`TICKETS`]) of a ring.
    fn ticket(&self, ring: usize, t: usize) -> &AtomicU64 {
        self.u64_at(self.ring_field(ring, 2 * LINE + 8 * t))
    }

    /// Word `word` of descriptor `i % slots` (eight u64 as atomics; see the `D_*` words).
    fn desc(&self, ring: usize, i: u64, word: usize) -> &AtomicU64 {
        let at = RING_HEAD * LINE + (i % self.shape.slots as u64) as usize * LINE + 8 * word;
        self.u64_at(self.ring_field(ring, at))
    }

    fn state(&self, ring: usize, slot: usize) -> &AtomicU32 {
        let states = RING_HEAD * LINE + self.shape.slots * LINE;
        self.u32_at(self.ring_field(ring, states + slot * LINE))
    }

    fn slot_offset(&self, ring: usize, slot: usize) -> usize {
        let s = self.shape;
        self.ring_field(
            ring,
            RING_HEAD * LINE + 2 * s.slots * LINE + slot * s.slot_stride(),
        )
    }

    fn data_ptr(&self, ring: usize, slot: usize) -> *mut u8 {
        let off = self.slot_offset(ring, slot);
        debug_assert!(off + self.shape.slot_bytes <= self.map.len());
        // SAFETY: `off` is within the mapping (the layout is `shape.bytes()` long, checked
        // at mapping), so the pointer stays inside one allocation.
        unsafe { self.map.as_mut_ptr().add(off) }
    }

    /// Fills the whole mapping with its pages now (a missing page would otherwise be a
    /// fault in the middle of a collective).
    pub fn prefault(&self) {
        let page = 4096;
        let mut off = 0;
        while off + 8 <= self.map.len() {
            self.u64_at(off).fetch_add(0, Ordering::Relaxed);
            off += page;
        }
    }
}

/// Reserves `bytes` of memory for `file` now: on tmpfs a file that only has a length would
/// fail later, with SIGBUS, when a page cannot be had; this fails here, with ENOSPC.
pub fn allocate(file: &File, bytes: usize) -> std::io::Result<()> {
    let len = libc::off_t::try_from(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "segment too large"))?;
    // SAFETY: a plain system call on an open descriptor that `file` owns.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// What the receiver of a ring keeps in its own memory: which slots it lent.
#[derive(Debug)]
pub struct Lent {
    slots: Vec<AtomicBool>,
    /// Slots lent now.
    count: AtomicUsize,
}

/// This rank's side of ring `ring` in its own segment: the messages of one peer.
#[derive(Debug)]
pub struct InRing {
    seg: Arc<Segment>,
    ring: usize,
    /// Descriptors taken so far.
    tail: u64,
    lent: Arc<Lent>,
}

/// A message's header, as the receiver read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The tag's three words (the transport packs and unpacks them).
    pub tag: [u64; 3],
    /// Bytes of the message.
    pub len: usize,
}

/// A message's bytes: in a slot, lent until the lease drops, or carried in its
/// descriptor (copied out: the descriptor is free again at once).
#[derive(Debug)]
pub enum Body {
    /// A slot's bytes.
    Lent(Lease),
    /// The first `.1` bytes.
    Inline([u8; INLINE], usize),
    /// Bytes left in the sender's memory, to be read from there.
    Remote(Remote),
}

/// A message left in its sender's memory: where, how long, and the sender's ticket,
/// which says when the sender may have that memory back. Dropping it unread (or after
/// the read) gives the memory back.
pub struct Remote {
    seg: Arc<Segment>,
    ring: usize,
    ticket: usize,
    generation: u64,
    /// The message's address in the sender's address space.
    pub addr: u64,
    /// Its length.
    pub len: usize,
    /// Whether the ticket was moved on (to DONE, or found withdrawn): nothing to give back.
    settled: bool,
    on_release: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("ring", &self.ring)
            .field("ticket", &self.ticket)
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}

/// Why a read of a message left in its sender's memory may not go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawn {
    /// Before the read began (the sender failed and took its memory back).
    Before,
    /// During the read: the bytes read may have changed under it.
    During,
}

impl Remote {
    fn word(&self) -> &AtomicU64 {
        self.seg.ticket(self.ring, self.ticket)
    }

    /// Claims the ticket for the read: the sender keeps the memory until [`Remote::finish`].
    pub fn begin(&mut self) -> Result<(), Withdrawn> {
        let g = self.generation << 2;
        match self.word().compare_exchange(
            g | POSTED,
            g | READING,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => Ok(()),
            Err(_) => {
                self.settled = true;
                Err(Withdrawn::Before)
            }
        }
    }

    /// Ends the read: the sender may have its memory back. `Err` if it gave up waiting
    /// (the bytes read may not be the message).
    pub fn finish(mut self) -> Result<(), Withdrawn> {
        let g = self.generation << 2;
        self.settled = true;
        let r = self.word().compare_exchange(
            g | READING,
            g | DONE,
            Ordering::Release,
            Ordering::Relaxed,
        );
        self.released();
        r.map(|_| ()).map_err(|_| Withdrawn::During)
    }

    /// Counts the memory as given back and wakes the sender.
    fn released(&self) {
        // Sequentially consistent: before the check of the sender's `sleeping` flag.
        self.seg.released(self.ring).fetch_add(1, Ordering::SeqCst);
        (self.on_release)();
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // Never read (a failed call, a length refused): the sender may have it back.
        let g = self.generation << 2;
        let word = self.word();
        let _ = word.compare_exchange(g | POSTED, g | DONE, Ordering::Release, Ordering::Relaxed);
        let _ = word.compare_exchange(g | READING, g | DONE, Ordering::Release, Ordering::Relaxed);
        self.released();
    }
}

/// Why a descriptor was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The descriptor named a slot that does not exist.
    NoSuchSlot(u64),
    /// The descriptor named a slot lent already (a second lease would alias it).
    SlotLent(u64),
    /// The header's length is more than the slot holds.
    TooLong(u64),
    /// An inline message longer than a descriptor holds.
    InlineTooLong(u64),
    /// A message left in the sender's memory, from a sender that was not allowed to.
    RemoteNotAllowed,
    /// A message left in the sender's memory with a ticket that does not exist.
    NoSuchTicket(u64),
}

// A descriptor's words.
const D_SEQ: usize = 0;
const D_TAG: usize = 1;
const D_LEN_SLOT: usize = 4;
const D_DATA: usize = 5;

impl InRing {
    /// The receiving side of `ring` of `seg` (this rank's own segment).
    pub fn new(seg: Arc<Segment>, ring: usize) -> InRing {
        let slots = seg.shape.slots;
        InRing {
            seg,
            ring,
            tail: 0,
            lent: Arc::new(Lent {
                slots: (0..slots).map(|_| AtomicBool::new(false)).collect(),
                count: AtomicUsize::new(0),
            }),
        }
    }

    /// Whether the sender published more than this side took (sequentially consistent:
    /// for the check after raising the `sleeping` flag).
    pub fn unread(&self) -> bool {
        self.seg.head(self.ring).load(Ordering::SeqCst) != self.tail
    }

    /// Whether a message is waiting.
    pub fn pending(&self) -> bool {
        self.seg
            .desc(self.ring, self.tail, D_SEQ)
            .load(Ordering::Acquire)
            == self.tail + 1
    }

    /// Slots of this ring lent to the engine now.
    pub fn lent(&self) -> usize {
        self.lent.count.load(Ordering::Relaxed)
    }

    /// Takes the next message into `dst` if it is one carried in its descriptor, tagged
    /// `tag` and exactly `dst.len()` bytes long; else leaves it (and any other) to
    /// [`InRing::take`]. Whether it took one.
    pub fn take_inline(&mut self, tag: [u64; 3], dst: &mut [u8]) -> bool {
        if dst.len() > INLINE || !self.pending() {
            return false;
        }
        let (ring, i) = (self.ring, self.tail);
        let word = |w: usize| self.seg.desc(ring, i, w).load(Ordering::Relaxed);
        let ours = word(D_LEN_SLOT) == dst.len() as u64 | NO_SLOT << 32
            && (0..3).all(|k| word(D_TAG + k) == tag[k]);
        if !ours {
            return false;
        }
        for (k, chunk) in dst.chunks_mut(8).enumerate() {
            let bytes = word(D_DATA + k).to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        // Read: the sender may reuse the descriptor (as in `take`).
        self.tail += 1;
        self.seg.taken(ring).store(self.tail, Ordering::SeqCst);
        true
    }

    /// Takes the next message, if one was published: its header and its bytes (a slot's
    /// lent until the [`Lease`] drops; `on_release` runs when it does, to wake the sender).
    /// A message left in the sender's memory is refused unless `remote_ok`.
    pub fn take(
        &mut self,
        on_release: &Arc<dyn Fn() + Send + Sync>,
        remote_ok: bool,
    ) -> Option<Result<(Header, Body), Refused>> {
        if !self.pending() {
            return None;
        }
        let (ring, i) = (self.ring, self.tail);
        let word = |w: usize| self.seg.desc(ring, i, w).load(Ordering::Relaxed);
        let tag = [word(D_TAG), word(D_TAG + 1), word(D_TAG + 2)];
        let len_slot = word(D_LEN_SLOT);
        let (len, slot) = (len_slot & 0xffff_ffff, len_slot >> 32);
        let inline = (slot == NO_SLOT).then(|| {
            let mut bytes = [0u8; INLINE];
            for (k, chunk) in bytes.chunks_exact_mut(8).enumerate() {
                chunk.copy_from_slice(&word(D_DATA + k).to_le_bytes());
            }
            bytes
        });
        // A single-copy message's address and ticket, read before the descriptor goes
        // back to the sender too.
        let (addr, ticket) = (word(D_DATA), word(D_DATA + 1));
        // Read: the sender may reuse the descriptor. Sequentially consistent: before the
        // check of the sender's `sleeping` flag that follows (the caller wakes it).
        self.tail += 1;
        self.seg.taken(ring).store(self.tail, Ordering::SeqCst);
        let header = Header {
            tag,
            len: len as usize,
        };
        if let Some(bytes) = inline {
            if header.len > INLINE {
                return Some(Err(Refused::InlineTooLong(len)));
            }
            return Some(Ok((header, Body::Inline(bytes, header.len))));
        }
        if slot == REMOTE {
            if !remote_ok {
                return Some(Err(Refused::RemoteNotAllowed));
            }
            if len > self.seg.shape.slot_bytes as u64 {
                return Some(Err(Refused::TooLong(len)));
            }
            let (t, generation) = (ticket & 0xffff_ffff, ticket >> 32);
            if t >= TICKETS as u64 {
                return Some(Err(Refused::NoSuchTicket(t)));
            }
            return Some(Ok((
                header,
                Body::Remote(Remote {
                    seg: Arc::clone(&self.seg),
                    ring,
                    ticket: t as usize,
                    generation,
                    addr,
                    len: header.len,
                    settled: false,
                    on_release: Arc::clone(on_release),
                }),
            )));
        }
        let slots = self.seg.shape.slots;
        if slot >= slots as u64 {
            return Some(Err(Refused::NoSuchSlot(slot)));
        }
        let slot = slot as usize;
        if len > self.seg.shape.slot_bytes as u64 {
            return Some(Err(Refused::TooLong(len)));
        }
        if self.lent.slots[slot].swap(true, Ordering::AcqRel) {
            return Some(Err(Refused::SlotLent(slot as u64)));
        }
        self.lent.count.fetch_add(1, Ordering::Relaxed);
        Some(Ok((
            header,
            Body::Lent(Lease {
                seg: Arc::clone(&self.seg),
                lent: Arc::clone(&self.lent),
                ring,
                slot,
                len: header.len,
                on_release: Arc::clone(on_release),
            }),
        )))
    }
}

/// This rank's side of a ring in a peer's segment: its messages to that peer.
#[derive(Debug)]
pub struct OutRing {
    seg: Arc<Segment>,
    ring: usize,
    head: u64,
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
            seg,
            ring,
            head: 0,
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
    /// Messages are at most [`OutRing::slot_bytes`] long, like those through a slot.
    pub fn send_remote(&mut self, tag: [u64; 3], addr: u64, len: usize) -> Option<(usize, u32)> {
        if len > self.slot_bytes() || !self.desc_free() {
            return None;
        }
        let t = self.tickets.iter().position(Option::is_none)?;
        self.generation = self.generation.wrapping_add(1) & 0x3fff_ffff;
        let generation = self.generation;
        self.tickets[t] = Some(generation);
        let (ring, i) = (self.ring, self.head);
        let g = u64::from(generation) << 2;
        // Published with the descriptor below (its release store).
        self.seg
            .ticket(ring, t)
            .store(g | POSTED, Ordering::Relaxed);
        self.seg
            .desc(ring, i, D_DATA)
            .store(addr, Ordering::Relaxed);
        self.seg
            .desc(ring, i, D_DATA + 1)
            .store(t as u64 | u64::from(generation) << 32, Ordering::Relaxed);
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

    /// Writes a message of `len` bytes (at most [`OutRing::slot_bytes`]) with tag words
    /// `tag`, its bytes filled by `fill`, and publishes it; `false` (nothing written) if
    /// there is no room.
    pub fn send(&mut self, tag: [u64; 3], len: usize, fill: impl FnOnce(&mut [u8])) -> bool {
        assert!(len <= self.slot_bytes(), "message larger than a slot");
        if !self.desc_free() {
            return false;
        }
        let (ring, i) = (self.ring, self.head);
        let slot = if len <= INLINE {
            let mut bytes = [0u8; INLINE];
            fill(&mut bytes[..len]);
            for (k, chunk) in bytes.chunks_exact(8).enumerate() {
                let w = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
                self.seg
                    .desc(ring, i, D_DATA + k)
                    .store(w, Ordering::Relaxed);
            }
            NO_SLOT
        } else {
            let Some(slot) = self.claim() else {
                return false;
            };
            self.cursor = (slot + 1) % self.seg.shape.slots;
            let data = self.seg.data_ptr(ring, slot);
            // SAFETY: the slot is FREE: the receiver gave it back (acquire above: its reads
            // of it are done) and will not touch it until a descriptor naming it is
            // published below; no other sender writes this ring (one ring per sending rank,
            // this one), and this `&mut self` is the only writer in this process. `len` is
            // within the slot.
            let bytes = unsafe { std::slice::from_raw_parts_mut(data, len) };
            fill(bytes);
            self.seg.state(ring, slot).store(FULL, Ordering::Relaxed);
            slot as u64
        };
        self.publish(tag, len, slot);
        true
    }

    /// Writes descriptor `head`'s tag, length and slot (its data words are written), then
    /// publishes it.
    fn publish(&mut self, tag: [u64; 3], len: usize, slot: u64) {
        let (ring, i) = (self.ring, self.head);
        for (k, w) in tag.iter().enumerate() {
            self.seg
                .desc(ring, i, D_TAG + k)
                .store(*w, Ordering::Relaxed);
        }
        self.seg
            .desc(ring, i, D_LEN_SLOT)
            .store(len as u64 | slot << 32, Ordering::Relaxed);
        // Everything above is visible to the receiver that sees this number.
        self.seg
            .desc(ring, i, D_SEQ)
            .store(i + 1, Ordering::Release);
        self.head += 1;
        // Sequentially consistent: ordered before the check of the receiver's `sleeping`
        // flag that follows (see `ShmTransport::wait`).
        self.seg.head(ring).store(self.head, Ordering::SeqCst);
    }
}

/// A message's bytes in a shared slot, lent to the engine: reading and writing them is
/// safe; dropping the lease gives the slot back to its sender.
pub struct Lease {
    seg: Arc<Segment>,
    lent: Arc<Lent>,
    ring: usize,
    slot: usize,
    len: usize,
    on_release: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("ring", &self.ring)
            .field("slot", &self.slot)
            .field("len", &self.len)
            .finish()
    }
}

impl Lease {
    /// The message's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the slot is lent to this lease alone (`Lent` refuses a second lease of
        // it) and its sender does not reuse it until the lease drops (it is FULL); the
        // mapping lives while `seg` does; `len` was checked against the slot's size.
        unsafe { std::slice::from_raw_parts(self.seg.data_ptr(self.ring, self.slot), self.len) }
    }

    /// The message's bytes, to reduce into.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.seg.data_ptr(self.ring, self.slot), self.len) }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.lent.slots[self.slot].store(false, Ordering::Relaxed);
        self.lent.count.fetch_sub(1, Ordering::Relaxed);
        self.seg
            .state(self.ring, self.slot)
            .store(FREE, Ordering::Release);
        // Sequentially consistent: before the check of the sender's `sleeping` flag.
        self.seg.released(self.ring).fetch_add(1, Ordering::SeqCst);
        (self.on_release)();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment file of `shape`, mapped twice: as its owner (receiver) and as a peer
    /// (sender) would, through two mappings of one file.
    /// An unlinked file of this test's own.
    fn scratch_file() -> std::fs::File {
        let path = std::env::temp_dir().join(format!(
            "rcoll-segment-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("file");
        std::fs::remove_file(&path).expect("unlink");
        file
    }

    fn pair(shape: Shape) -> (Arc<Segment>, Arc<Segment>) {
        let file = scratch_file();
        let bytes = shape.bytes().expect("size");
        file.set_len(bytes as u64).expect("len");
        allocate(&file, bytes).expect("allocate");
        let owner = Segment::create(&file, shape).expect("create");
        let peer = Segment::open(&file, shape).expect("open");
        (Arc::new(owner), Arc::new(peer))
    }

    fn nothing() -> Arc<dyn Fn() + Send + Sync> {
        Arc::new(|| {})
    }

    const SHAPE: Shape = Shape {
        rings: 2,
        slots: 4,
        slot_bytes: 100,
    };

    /// The lease of a message that went through a slot.
    fn lease(body: Body) -> Lease {
        match body {
            Body::Lent(l) => l,
            other => panic!("expected a slot, got {other:?}"),
        }
    }

    #[test]
    fn messages_arrive_in_order_and_slots_come_back_out_of_order() {
        let (owner, peer) = pair(SHAPE);
        let mut inbox = InRing::new(Arc::clone(&owner), 1);
        let mut outbox = OutRing::new(peer, 1);
        let mut held = Vec::new();
        // Ten rounds through a ring of four slots, holding some messages across rounds
        // and giving them back out of order; the small ones travel inline.
        for i in 0..40u64 {
            let len = (i as usize * 7) % 101;
            if !outbox.has_room(len) {
                // The oldest held message goes back: room again.
                held.remove(0);
                assert!(outbox.has_room(len), "message {i}");
            }
            assert!(outbox.send([i, 1, 2], len, |b| b.fill(i as u8)));
            let (h, body) = inbox
                .take(&nothing(), false)
                .expect("published")
                .expect("valid");
            assert_eq!((h.tag[0], h.len), (i, len));
            let bytes = match &body {
                Body::Lent(l) => l.bytes().to_vec(),
                Body::Inline(b, n) => b[..*n].to_vec(),
                Body::Remote(r) => panic!("{r:?} was not sent"),
            };
            assert_eq!(bytes.len(), len);
            assert!(bytes.iter().all(|&b| b == i as u8), "message {i}");
            assert_eq!(
                matches!(body, Body::Inline(..)),
                len <= INLINE,
                "message {i}"
            );
            if let (Body::Lent(l), 0) = (body, i % 3) {
                held.push(l);
            }
            assert!(inbox.take(&nothing(), false).is_none());
        }
        assert_eq!(inbox.lent(), held.len());
        held.clear();
        assert_eq!(inbox.lent(), 0);
        // Every slot free again: four large messages, and no fifth.
        let mut leases = Vec::new();
        for i in 0..4 {
            assert!(outbox.send([i, 0, 0], 50, |b| b[0] = 1));
            leases.push(lease(
                inbox.take(&nothing(), false).expect("sent").expect("ok").1,
            ));
        }
        assert!(
            !outbox.send([9, 0, 0], 50, |_| {}),
            "a fifth message in 4 slots"
        );
        // Inline messages need no slot, only descriptors the receiver has read.
        for i in 0..4 {
            assert!(outbox.send([i, 0, 0], 8, |b| b.fill(7)), "inline {i}");
        }
        assert!(
            !outbox.send([9, 0, 0], 8, |_| {}),
            "a fifth unread descriptor"
        );
        assert!(matches!(
            inbox.take(&nothing(), false),
            Some(Ok((Header { len: 8, .. }, Body::Inline(..))))
        ));
        assert!(outbox.send([9, 0, 0], 8, |_| {}), "a descriptor was read");
        // The other ring is untouched.
        assert!(!InRing::new(owner, 0).pending());
    }

    #[test]
    fn take_inline_takes_only_the_inline_message_asked_for() {
        let (owner, peer) = pair(SHAPE);
        let mut inbox = InRing::new(owner, 1);
        let mut outbox = OutRing::new(peer, 1);
        let mut dst = [0u8; 5];
        assert!(!inbox.take_inline([1, 2, 3], &mut dst), "nothing sent");
        assert!(outbox.send([1, 2, 3], 5, |b| b.copy_from_slice(b"hello")));
        // Another tag (any word of it), another length, a longer destination: left there.
        for tag in [[9, 2, 3], [1, 9, 3], [1, 2, 9]] {
            assert!(!inbox.take_inline(tag, &mut dst), "{tag:?}");
        }
        assert!(!inbox.take_inline([1, 2, 3], &mut [0u8; 4]));
        assert!(!inbox.take_inline([1, 2, 3], &mut [0u8; INLINE + 1]));
        assert_eq!(dst, [0; 5], "nothing written by a refusal");
        assert!(inbox.take_inline([1, 2, 3], &mut dst));
        assert_eq!(&dst, b"hello");
        assert!(!inbox.pending(), "taken");
        // A message through a slot is never taken inline, even of the asked length; the
        // general path takes it, in order, with what follows.
        assert!(outbox.send([4, 0, 0], 50, |b| b.fill(4)));
        assert!(outbox.send([5, 0, 0], 3, |b| b.fill(5)));
        assert!(!inbox.take_inline([4, 0, 0], &mut [0u8; 50]));
        let (h, body) = inbox.take(&nothing(), false).expect("sent").expect("ok");
        assert_eq!((h.tag[0], h.len), (4, 50));
        drop(body);
        let mut three = [0u8; 3];
        assert!(inbox.take_inline([5, 0, 0], &mut three));
        assert_eq!(three, [5; 3]);
        // Descriptors read inline go back to the sender like any other.
        for i in 0..SHAPE.slots as u64 {
            assert!(outbox.send([i, 0, 0], 8, |b| b.fill(1)), "descriptor {i}");
        }
        assert!(
            !outbox.send([9, 0, 0], 8, |_| {}),
            "every descriptor unread"
        );
        assert!(inbox.take_inline([0, 0, 0], &mut [0u8; 8]));
        assert!(outbox.send([9, 0, 0], 8, |_| {}), "one read inline");
    }

    #[test]
    fn a_released_slot_counts_and_wakes_its_sender() {
        let (owner, peer) = pair(SHAPE);
        let mut inbox = InRing::new(owner, 0);
        let mut outbox = OutRing::new(peer, 0);
        let woken = Arc::new(AtomicUsize::new(0));
        let w = Arc::clone(&woken);
        let wake: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            w.fetch_add(1, Ordering::Relaxed);
        });
        let text = b"abcdefghijklmnopqrstuvwxyz0123456789";
        assert!(outbox.send([0; 3], text.len(), |b| b.copy_from_slice(text)));
        let (_, body) = inbox.take(&wake, false).expect("published").expect("valid");
        let mut lease = lease(body);
        lease.bytes_mut()[0] = b'x';
        assert_eq!(lease.bytes()[..3], *b"xbc");
        let before = outbox.released(Ordering::Acquire);
        drop(lease);
        assert_eq!(outbox.released(Ordering::Acquire), before + 1);
        assert_eq!(woken.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_peer_that_writes_nonsense_into_its_ring_is_refused() {
        let (owner, peer) = pair(SHAPE);
        let mut published = 0u64;
        let mut publish = |slot: u64, len: u64| {
            peer.desc(0, published, D_LEN_SLOT)
                .store(len | slot << 32, Ordering::Relaxed);
            published += 1;
            peer.desc(0, published - 1, D_SEQ)
                .store(published, Ordering::Release);
        };
        let mut inbox = InRing::new(Arc::clone(&owner), 0);
        // A slot that does not exist.
        publish(7, 100);
        assert_eq!(
            inbox.take(&nothing(), false).map(|r| r.err()),
            Some(Some(Refused::NoSuchSlot(7)))
        );
        // A slot lent already: a second lease would alias the first.
        publish(1, 30);
        let first = inbox
            .take(&nothing(), false)
            .expect("published")
            .expect("valid");
        publish(1, 30);
        assert_eq!(
            inbox.take(&nothing(), false).map(|r| r.err()),
            Some(Some(Refused::SlotLent(1)))
        );
        drop(first);
        // A length past the slot.
        publish(2, 101);
        assert_eq!(
            inbox.take(&nothing(), false).map(|r| r.err()),
            Some(Some(Refused::TooLong(101)))
        );
        // An inline message longer than a descriptor holds.
        publish(NO_SLOT, INLINE as u64 + 1);
        assert_eq!(
            inbox.take(&nothing(), false).map(|r| r.err()),
            Some(Some(Refused::InlineTooLong(INLINE as u64 + 1)))
        );
        // A sequence number that is not the next one: nothing arrived.
        peer.desc(0, published, D_SEQ)
            .store(published + 5, Ordering::Release);
        assert!(inbox.take(&nothing(), false).is_none());
    }

    /// The remote message of a body.
    fn remote(body: Body) -> Remote {
        match body {
            Body::Remote(r) => r,
            other => panic!("expected a message in the sender's memory, got {other:?}"),
        }
    }

    #[test]
    fn a_single_copy_ticket_is_done_only_once_its_message_was_read_or_dropped() {
        let (owner, peer) = pair(SHAPE);
        let mut inbox = InRing::new(Arc::clone(&owner), 0);
        let mut outbox = OutRing::new(peer, 0);
        let (t, g) = outbox.send_remote([1, 2, 3], 0x1000, 100).expect("sent");
        let (h, body) = inbox
            .take(&nothing(), true)
            .expect("published")
            .expect("valid");
        assert_eq!((h.tag, h.len), ([1, 2, 3], 100));
        let mut r = remote(body);
        assert_eq!((r.addr, r.len), (0x1000, 100));
        assert!(!outbox.ticket_done(t, g), "done before the read");
        let released = outbox.released(Ordering::Acquire);
        r.begin().expect("posted");
        assert!(!outbox.ticket_done(t, g), "done during the read");
        assert_eq!(outbox.withdraw(t, g, false), Withdrawal::Reading);
        r.finish().expect("not withdrawn");
        assert!(outbox.ticket_done(t, g));
        assert_eq!(outbox.released(Ordering::Acquire), released + 1);
        // Dropped unread (a failed call): done too.
        let (t, g) = outbox.send_remote([0; 3], 0x2000, 10).expect("sent");
        drop(remote(
            inbox.take(&nothing(), true).expect("sent").expect("ok").1,
        ));
        assert!(outbox.ticket_done(t, g));
        // Every ticket in flight: no more sends until one is done.
        let mut held = Vec::new();
        for i in 0..TICKETS {
            let sent = outbox
                .send_remote([i as u64, 0, 0], 0x3000, 10)
                .expect("a ticket");
            held.push((
                sent,
                remote(inbox.take(&nothing(), true).expect("sent").expect("ok").1),
            ));
        }
        assert!(
            outbox.send_remote([0; 3], 0x3000, 10).is_none(),
            "a ticket too many"
        );
        let ((t, g), r) = held.pop().expect("held");
        drop(r);
        assert!(outbox.ticket_done(t, g));
        assert!(outbox.send_remote([0; 3], 0x3000, 10).is_some());
    }

    #[test]
    fn a_withdrawn_or_abandoned_single_copy_send_fails_its_reader() {
        let (owner, peer) = pair(SHAPE);
        let mut inbox = InRing::new(Arc::clone(&owner), 0);
        let mut outbox = OutRing::new(peer, 0);
        // Withdrawn before the read began.
        let (t, g) = outbox.send_remote([0; 3], 0x1000, 100).expect("sent");
        let mut r = remote(inbox.take(&nothing(), true).expect("sent").expect("ok").1);
        assert_eq!(outbox.withdraw(t, g, false), Withdrawal::Withdrawn);
        assert_eq!(r.begin(), Err(Withdrawn::Before));
        // Given up during the read.
        let (t, g) = outbox.send_remote([0; 3], 0x1000, 100).expect("sent");
        let mut r = remote(inbox.take(&nothing(), true).expect("sent").expect("ok").1);
        r.begin().expect("posted");
        assert_eq!(outbox.withdraw(t, g, true), Withdrawal::Withdrawn);
        assert_eq!(r.finish(), Err(Withdrawn::During));
        // Read already: nothing to withdraw.
        let (t, g) = outbox.send_remote([0; 3], 0x1000, 100).expect("sent");
        let mut r = remote(inbox.take(&nothing(), true).expect("sent").expect("ok").1);
        r.begin().expect("posted");
        r.finish().expect("read");
        assert_eq!(outbox.withdraw(t, g, true), Withdrawal::Done);
    }

    #[test]
    fn a_message_in_the_senders_memory_is_refused_unless_allowed_or_with_a_bad_ticket() {
        let (owner, peer) = pair(SHAPE);
        let mut inbox = InRing::new(Arc::clone(&owner), 0);
        let mut outbox = OutRing::new(Arc::clone(&peer), 0);
        outbox.send_remote([0; 3], 0x1000, 100).expect("sent");
        assert_eq!(
            inbox.take(&nothing(), false).map(|r| r.err()),
            Some(Some(Refused::RemoteNotAllowed))
        );
        // A ticket past the table, written by hand.
        let i = 1;
        peer.desc(0, i, D_LEN_SLOT)
            .store(100 | REMOTE << 32, Ordering::Relaxed);
        peer.desc(0, i, D_DATA + 1)
            .store(TICKETS as u64 | 7 << 32, Ordering::Relaxed);
        peer.desc(0, i, D_SEQ).store(i + 1, Ordering::Release);
        assert_eq!(
            inbox.take(&nothing(), true).map(|r| r.err()),
            Some(Some(Refused::NoSuchTicket(TICKETS as u64)))
        );
        // Longer than a slot: refused like a slot's message (the receiver would allocate
        // it), and never sent so.
        let i = 2;
        peer.desc(0, i, D_LEN_SLOT)
            .store(101 | REMOTE << 32, Ordering::Relaxed);
        peer.desc(0, i, D_SEQ).store(i + 1, Ordering::Release);
        assert_eq!(
            inbox.take(&nothing(), true).map(|r| r.err()),
            Some(Some(Refused::TooLong(101)))
        );
        let mut outbox = OutRing::new(peer, 1);
        assert!(outbox.send_remote([0; 3], 0x1000, 101).is_none());
    }

    #[test]
    fn a_mapping_checks_the_file_and_its_header() {
        let file = scratch_file();
        // Too short for the layout: refused before anything is mapped.
        file.set_len(100).expect("len");
        assert!(Segment::open(&file, SHAPE).is_err());
        // Long enough but no header: not a segment.
        file.set_len(SHAPE.bytes().expect("size") as u64)
            .expect("len");
        let e = Segment::open(&file, SHAPE).expect_err("no magic");
        assert!(e.to_string().contains("not an rcoll segment"), "{e}");
        // A header of another shape.
        Segment::create(&file, SHAPE).expect("create");
        let other = Shape { slots: 2, ..SHAPE };
        assert!(Segment::open(&file, other).is_err());
        assert!(Shape {
            rings: usize::MAX,
            ..SHAPE
        }
        .bytes()
        .is_none());
    }
}
