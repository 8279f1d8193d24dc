//! The shared mappings and every access to them: the one place of the shared-memory
//! backend where `unsafe` lives. Above it, [`Segment`], [`InRing`], [`OutRing`] and
//! [`Lease`] are safe.
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
//!          released: slots given back (the receiver's)         (line 1)
//!          desc[slots]: slot numbers in publication order      (lines 2..)
//!          state[slots]: FREE (the sender's) / FULL (the receiver's), a line each
//!          slot[slots]: a 64-byte message header, then slot bytes
//! ```
//!
//! A message goes in by: claim a FREE slot, write its bytes and header, mark it FULL,
//! write its number at `desc[head % slots]`, then `head += 1` (release). The receiver reads
//! `head` (acquire), takes the descriptors it has not seen, and lends each slot's bytes to
//! the engine as a [`Lease`]; dropping the lease marks the slot FREE (release) and counts
//! it in `released`. There are as many descriptors as slots, so they never overflow.
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
/// Bytes in front of each slot's data.
pub const SLOT_HEADER: usize = 64;

const MAGIC: u64 = u64::from_le_bytes(*b"rcollshm");
const VERSION: u32 = 1;
const FREE: u32 = 0;
const FULL: u32 = 1;

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
        (SLOT_HEADER + self.slot_bytes).next_multiple_of(LINE)
    }

    fn ring_bytes(&self) -> usize {
        2 * LINE
            + (4 * self.slots).next_multiple_of(LINE)
            + self.slots * LINE
            + self.slots * self.slot_stride()
    }

    /// Bytes of the whole segment; `None` past the address space.
    pub fn bytes(&self) -> Option<usize> {
        let stride = (SLOT_HEADER.checked_add(self.slot_bytes)?).checked_next_multiple_of(LINE)?;
        let ring = self
            .slots
            .checked_mul(stride + LINE)?
            .checked_add(2 * LINE + (4 * self.slots).next_multiple_of(LINE))?;
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

    fn desc(&self, ring: usize, i: usize) -> &AtomicU32 {
        self.u32_at(self.ring_field(ring, 2 * LINE + 4 * (i % self.shape.slots)))
    }

    fn state(&self, ring: usize, slot: usize) -> &AtomicU32 {
        let states = 2 * LINE + (4 * self.shape.slots).next_multiple_of(LINE);
        self.u32_at(self.ring_field(ring, states + slot * LINE))
    }

    fn slot_offset(&self, ring: usize, slot: usize) -> usize {
        let s = self.shape;
        let slots = 2 * LINE + (4 * s.slots).next_multiple_of(LINE) + s.slots * LINE;
        self.ring_field(ring, slots + slot * s.slot_stride())
    }

    /// The header words of a slot (8 little-endian u64 as atomics: written by the sender
    /// before it publishes, read once by the receiver after).
    fn slot_word(&self, ring: usize, slot: usize, word: usize) -> &AtomicU64 {
        self.u64_at(self.slot_offset(ring, slot) + 8 * word)
    }

    fn data_ptr(&self, ring: usize, slot: usize) -> *mut u8 {
        let off = self.slot_offset(ring, slot) + SLOT_HEADER;
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
    /// The tag's words: collective, channel, transfer, segment, schedule.
    pub tag: [u64; 5],
    /// Bytes of the message.
    pub len: usize,
}

/// Why a descriptor was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The descriptor named a slot that does not exist.
    NoSuchSlot(u32),
    /// The descriptor named a slot lent already (a second lease would alias it).
    SlotLent(u32),
    /// The header's length is more than the slot holds.
    TooLong(u64),
    /// More descriptors published than there are slots.
    Overrun(u64),
}

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

    /// Descriptors published (a counter that only grows, for wake-up checks).
    pub fn head(&self) -> u64 {
        self.seg.head(self.ring).load(Ordering::Acquire)
    }

    /// Whether a message is waiting.
    pub fn pending(&self) -> bool {
        self.head() != self.tail
    }

    /// Slots of this ring lent to the engine now.
    pub fn lent(&self) -> usize {
        self.lent.count.load(Ordering::Relaxed)
    }

    /// Takes the next message, if one was published: its header and its bytes, lent
    /// until the [`Lease`] drops. `on_release` runs when it does (to wake the sender).
    pub fn take(
        &mut self,
        on_release: Arc<dyn Fn() + Send + Sync>,
    ) -> Option<Result<(Header, Lease), Refused>> {
        let head = self.head();
        if head == self.tail {
            return None;
        }
        let slots = self.seg.shape.slots;
        if head.wrapping_sub(self.tail) > slots as u64 {
            return Some(Err(Refused::Overrun(head.wrapping_sub(self.tail))));
        }
        let n = self
            .seg
            .desc(self.ring, self.tail as usize)
            .load(Ordering::Relaxed);
        self.tail += 1;
        let slot = n as usize;
        if slot >= slots {
            return Some(Err(Refused::NoSuchSlot(n)));
        }
        if self.lent.slots[slot].swap(true, Ordering::AcqRel) {
            return Some(Err(Refused::SlotLent(n)));
        }
        let mut words = [0u64; 6];
        for (i, w) in words.iter_mut().enumerate() {
            *w = self
                .seg
                .slot_word(self.ring, slot, i)
                .load(Ordering::Relaxed);
        }
        if words[5] > self.seg.shape.slot_bytes as u64 {
            self.lent.slots[slot].store(false, Ordering::Release);
            self.seg
                .state(self.ring, slot)
                .store(FREE, Ordering::Release);
            return Some(Err(Refused::TooLong(words[5])));
        }
        self.lent.count.fetch_add(1, Ordering::Relaxed);
        let header = Header {
            tag: [words[0], words[1], words[2], words[3], words[4]],
            len: words[5] as usize,
        };
        Some(Ok((
            header,
            Lease {
                seg: Arc::clone(&self.seg),
                lent: Arc::clone(&self.lent),
                ring: self.ring,
                slot,
                len: header.len,
                on_release,
            },
        )))
    }
}

/// This rank's side of a ring in a peer's segment: its messages to that peer.
#[derive(Debug)]
pub struct OutRing {
    seg: Arc<Segment>,
    ring: usize,
    head: u64,
    cursor: usize,
}

impl OutRing {
    /// The sending side of `ring` of `seg` (a peer's segment).
    pub fn new(seg: Arc<Segment>, ring: usize) -> OutRing {
        OutRing {
            seg,
            ring,
            head: 0,
            cursor: 0,
        }
    }

    /// Slots the peer gave back so far (a counter that only grows, for wake-up checks).
    pub fn released(&self) -> u64 {
        self.seg.released(self.ring).load(Ordering::Acquire)
    }

    /// Largest message.
    pub fn slot_bytes(&self) -> usize {
        self.seg.shape.slot_bytes
    }

    /// A free slot, if the peer gave one back.
    fn claim(&self) -> Option<usize> {
        let slots = self.seg.shape.slots;
        (0..slots)
            .map(|i| (self.cursor + i) % slots)
            .find(|&s| self.seg.state(self.ring, s).load(Ordering::Acquire) == FREE)
    }

    /// Whether [`OutRing::send`] would find a slot now.
    pub fn has_room(&self) -> bool {
        self.claim().is_some()
    }

    /// Writes a message of `len` bytes (at most [`OutRing::slot_bytes`]) with header
    /// `tag`, its bytes filled by `fill`, and publishes it; `false` (nothing written) if
    /// no slot is free.
    pub fn send(&mut self, tag: [u64; 5], len: usize, fill: impl FnOnce(&mut [u8])) -> bool {
        assert!(len <= self.slot_bytes(), "message larger than a slot");
        let Some(slot) = self.claim() else {
            return false;
        };
        let slots = self.seg.shape.slots;
        self.cursor = (slot + 1) % slots;
        let data = self.seg.data_ptr(self.ring, slot);
        // SAFETY: the slot is FREE: the receiver gave it back (acquire above: its reads of
        // it are done) and will not touch it until its descriptor is published below; no
        // other sender writes this ring (one ring per sending rank, this one), and this
        // `&mut self` is the only writer in this process. `len` is within the slot.
        let bytes = unsafe { std::slice::from_raw_parts_mut(data, len) };
        fill(bytes);
        for (i, w) in tag.iter().chain(std::iter::once(&(len as u64))).enumerate() {
            self.seg
                .slot_word(self.ring, slot, i)
                .store(*w, Ordering::Relaxed);
        }
        self.seg
            .state(self.ring, slot)
            .store(FULL, Ordering::Relaxed);
        self.seg
            .desc(self.ring, self.head as usize)
            .store(slot as u32, Ordering::Relaxed);
        self.head += 1;
        // Sequentially consistent: ordered before the check of the receiver's `sleeping`
        // flag that follows (see `ShmTransport::wait`).
        self.seg.head(self.ring).store(self.head, Ordering::SeqCst);
        true
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

    #[test]
    fn messages_arrive_in_order_and_slots_come_back_out_of_order() {
        let (owner, peer) = pair(SHAPE);
        let mut inbox = InRing::new(Arc::clone(&owner), 1);
        let mut outbox = OutRing::new(peer, 1);
        let mut held = Vec::new();
        // Ten rounds through a ring of four slots, holding some messages across rounds
        // and giving them back out of order.
        for i in 0..40u64 {
            if !outbox.has_room() {
                // The oldest held message goes back: room again.
                held.remove(0);
                assert!(outbox.has_room(), "message {i}");
            }
            let len = (i as usize * 7) % 101;
            assert!(outbox.send([i, 1, 2, 3, 4], len, |b| b.fill(i as u8)));
            let (h, lease) = inbox.take(nothing()).expect("published").expect("valid");
            assert_eq!((h.tag[0], h.len), (i, len));
            assert!(lease.bytes().iter().all(|&b| b == i as u8), "message {i}");
            if i % 3 == 0 {
                held.push(lease);
            }
            assert!(inbox.take(nothing()).is_none());
        }
        assert_eq!(inbox.lent(), held.len());
        held.clear();
        assert_eq!(inbox.lent(), 0);
        // Every slot free again.
        for i in 0..4 {
            assert!(outbox.send([i, 0, 0, 0, 0], 1, |b| b[0] = 1));
        }
        assert!(
            !outbox.send([9, 0, 0, 0, 0], 1, |_| {}),
            "a fifth message in 4 slots"
        );
        // The other ring is untouched.
        assert!(!InRing::new(owner, 0).pending());
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
        assert!(outbox.send([0; 5], 3, |b| b.copy_from_slice(b"abc")));
        let (_, mut lease) = inbox.take(wake).expect("published").expect("valid");
        lease.bytes_mut()[0] = b'x';
        assert_eq!(lease.bytes(), b"xbc");
        let before = outbox.released();
        drop(lease);
        assert_eq!(outbox.released(), before + 1);
        assert_eq!(woken.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_peer_that_writes_nonsense_into_its_ring_is_refused() {
        let (owner, peer) = pair(SHAPE);
        let publish = |slot: u32, len: u64| {
            let h = peer.head(0).load(Ordering::Relaxed);
            peer.slot_word(0, (slot as usize) % SHAPE.slots, 5)
                .store(len, Ordering::Relaxed);
            peer.desc(0, h as usize).store(slot, Ordering::Relaxed);
            peer.head(0).store(h + 1, Ordering::Release);
        };
        let mut inbox = InRing::new(Arc::clone(&owner), 0);
        // A slot that does not exist.
        publish(7, 1);
        assert_eq!(
            inbox.take(nothing()).map(|r| r.err()),
            Some(Some(Refused::NoSuchSlot(7)))
        );
        // A slot lent already: a second lease would alias the first.
        publish(1, 10);
        let first = inbox.take(nothing()).expect("published").expect("valid");
        publish(1, 10);
        assert_eq!(
            inbox.take(nothing()).map(|r| r.err()),
            Some(Some(Refused::SlotLent(1)))
        );
        drop(first);
        // A length past the slot.
        publish(2, 101);
        assert_eq!(
            inbox.take(nothing()).map(|r| r.err()),
            Some(Some(Refused::TooLong(101)))
        );
        // More published than there are slots.
        let h = peer.head(0).load(Ordering::Relaxed);
        peer.head(0).store(h + 5, Ordering::Release);
        assert_eq!(
            inbox.take(nothing()).map(|r| r.err()),
            Some(Some(Refused::Overrun(5)))
        );
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
