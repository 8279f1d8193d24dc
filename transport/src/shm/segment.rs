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

use crate::transport::WHOLE_MAX;

mod out_ring;
pub use out_ring::{OutRing, Withdrawal};

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

    /// Where a ring's descriptors begin (see [`Segment::desc_at`]).
    fn desc_base(&self, ring: usize) -> usize {
        self.ring_field(ring, RING_HEAD * LINE)
    }

    /// Descriptor `k` (below `slots`) of the ring whose descriptors begin at `base`
    /// ([`Segment::desc_base`]): eight u64 as atomics (see the `D_*` words). One offset and
    /// one bounds check for the whole line: a message reads or writes most of its words.
    /// The rings keep `k` as they count: no division (one per word was a fifth of an
    /// 8-byte send's instructions; one per line still made five per 8-byte call).
    fn desc_at(&self, base: usize, k: usize) -> &[AtomicU64; 8] {
        debug_assert!(k < self.shape.slots);
        let at = base + k * LINE;
        assert!(at % LINE == 0 && at + LINE <= self.map.len());
        // SAFETY: as in `u32_at`: a whole line in bounds, aligned (checked), accessed only
        // through atomics.
        unsafe { &*self.map.as_mut_ptr().add(at).cast::<[AtomicU64; 8]>() }
    }

    /// The descriptor place after `k`: `(k + 1) % slots`, without a division.
    fn next_place(&self, k: usize) -> usize {
        if k + 1 == self.shape.slots {
            0
        } else {
            k + 1
        }
    }

    /// Descriptor `i % slots` of a ring (what a peer writes for its `i`-th message).
    #[cfg(any(test, fuzzing))]
    fn desc(&self, ring: usize, i: u64) -> &[AtomicU64; 8] {
        self.desc_at(self.desc_base(ring), (i % self.shape.slots as u64) as usize)
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

/// A new anonymous memory file (`memfd_create`, close-on-exec) named `name`: no path
/// anywhere, gone when the last descriptor and mapping of it go.
pub fn memory_file(name: &str) -> std::io::Result<File> {
    let name = std::ffi::CString::new(name)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL in the name"))?;
    // SAFETY: a plain system call with a NUL-terminated name that lives across it.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just made by memfd_create and nothing else owns it.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
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
    /// `tail % slots`: the next descriptor's place.
    at: usize,
    /// Where the ring's descriptors begin.
    descs: usize,
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
    /// A message left in the sender's memory longer than [`WHOLE_MAX`].
    RemoteTooLong(u64),
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
            descs: seg.desc_base(ring),
            seg,
            ring,
            tail: 0,
            at: 0,
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

    /// Counts the next descriptor as taken.
    fn advance(&mut self) {
        self.tail += 1;
        self.at = self.seg.next_place(self.at);
    }

    /// Whether a message is waiting.
    pub fn pending(&self) -> bool {
        self.seg.desc_at(self.descs, self.at)[D_SEQ].load(Ordering::Acquire) == self.tail + 1
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
        let ring = self.ring;
        let d = self.seg.desc_at(self.descs, self.at);
        let word = |w: usize| d[w].load(Ordering::Relaxed);
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
        self.advance();
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
        let ring = self.ring;
        let d = self.seg.desc_at(self.descs, self.at);
        let word = |w: usize| d[w].load(Ordering::Relaxed);
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
        self.advance();
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
            if len > WHOLE_MAX as u64 {
                return Some(Err(Refused::RemoteTooLong(len)));
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

/// A message's bytes in a shared slot, lent to this rank until the lease drops (which
/// gives the slot back to its sender); read by copying them out.
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
    /// The message's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Copies the message into `dst` (exactly its length). The slot is copied through raw
    /// pointers, never borrowed as a slice: its sender's process can write it, and a
    /// reference to memory written from elsewhere is undefined behaviour however it is
    /// checked. A sender that breaks the protocol (writes a lent slot) makes the copied
    /// bytes meaningless, never this process's memory unsound.
    pub fn read_into(&self, dst: &mut [u8]) {
        assert_eq!(
            dst.len(),
            self.len,
            "a lease read into a destination of another length"
        );
        // SAFETY: the slot is `len` bytes inside the mapping (`len` was checked against
        // the slot's size when taken), which lives while `seg` does; `dst` is this
        // process's own memory, which the mapping cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.seg.data_ptr(self.ring, self.slot),
                dst.as_mut_ptr(),
                self.len,
            );
        }
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

/// A peer that writes whatever it likes into the descriptors of this rank's ring: `data`
/// read as descriptors of eight little-endian words each (a short tail padded with
/// zeros), each published in turn and taken as the receiver takes messages; leases are
/// kept for a while (as the engine keeps them), up to the ring's slots. Whatever the
/// words, each is taken or refused with a [`Refused`], no slot is lent twice at once, and
/// no lease is longer than a slot. For the fuzz target `shm_descriptors` and a unit test.
#[cfg(any(test, fuzzing))]
pub fn hostile_descriptors(data: &[u8]) {
    const SHAPE: Shape = Shape {
        rings: 1,
        slots: 4,
        slot_bytes: 200,
    };
    let file = memory_file("rcoll-hostile-descriptors").expect("memfd");
    let bytes = SHAPE.bytes().expect("size");
    file.set_len(bytes as u64).expect("length");
    let owner = Arc::new(Segment::create(&file, SHAPE).expect("the receiver's mapping"));
    let peer = Segment::open(&file, SHAPE).expect("the peer's mapping");
    let mut inbox = InRing::new(Arc::clone(&owner), 0);
    let nothing: Arc<dyn Fn() + Send + Sync> = Arc::new(|| {});
    let mut held: Vec<Lease> = Vec::new();
    for (i, chunk) in data.chunks(64).enumerate() {
        let mut words = [0u64; 8];
        for (w, b) in words.iter_mut().zip(chunk.chunks(8)) {
            let mut le = [0u8; 8];
            le[..b.len()].copy_from_slice(b);
            *w = u64::from_le_bytes(le);
        }
        let i = i as u64;
        let d = peer.desc(0, i);
        for (k, w) in words.iter().enumerate().skip(1) {
            d[k].store(*w, Ordering::Relaxed);
        }
        // Published in order, except where the peer's own first word says otherwise.
        let seq = if words[D_SEQ] % 7 == 0 {
            words[D_SEQ]
        } else {
            i + 1
        };
        d[D_SEQ].store(seq, Ordering::Release);
        let got = inbox.take(&nothing, words[D_SEQ] & 1 == 1);
        if seq != i + 1 {
            assert!(got.is_none(), "took a descriptor published out of order");
            return;
        }
        match got.expect("a published descriptor") {
            Ok((header, Body::Lent(lease))) => {
                assert!(lease.len() == header.len && header.len <= SHAPE.slot_bytes);
                assert!(held.iter().all(|l| l.slot != lease.slot), "slot lent twice");
                held.push(lease);
            }
            Ok((header, Body::Inline(_, len))) => assert!(len == header.len && len <= INLINE),
            // Not read: that is the single-copy path's (process_vm_readv of the sender).
            Ok((header, Body::Remote(_))) => assert!(header.len <= WHOLE_MAX),
            Err(_) => {}
        }
        // The engine gives leases back in its own order.
        if held.len() >= SHAPE.slots || words[7] & 1 == 1 {
            let k = (words[7] >> 1) as usize % held.len().max(1);
            if k < held.len() {
                held.swap_remove(k);
            }
        }
    }
}

#[cfg(test)]
mod tests;
