//! Shared memory between the ranks of one host, layered on the transport that carries
//! the rest of the group (TCP or verbs): per pair, whichever reaches the peer best.
//!
//! # Data path
//!
//! Every rank owns a segment in `/dev/shm` holding one ring per local peer that sends to
//! it ([`segment`] has the layout). A message to a local peer is copied once, from the
//! caller's memory or a payload, into a free slot of that peer's ring; the receiver lends
//! the slot itself to the engine (a [`Payload`] over the shared bytes: it copies or
//! reduces straight out of it) and the slot goes back when the payload is dropped,
//! recycled or forwarded. So a byte crosses memory once between the two ranks, like
//! Open MPI's copy-in/copy-out path, with no system call on the way while both sides
//! are awake.
//!
//! # Single copy
//!
//! A large send from the caller's memory of bytes the receiver only copies
//! ([`Transport::try_send_borrowed_for_copy`], at least [`Options::single_copy`] bytes:
//! broadcast, gathers, the all-gather half of all_reduce) is not copied at all on the
//! sending side: its
//! descriptor names the caller's memory, and the receiver copies it from there straight
//! into its destination with `process_vm_readv` ([`Transport::try_recv_into`]), once, as
//! Open MPI's CMA path does. The send stays in flight until the receiver has read it (a
//! rendezvous: a large send completes once its receiver takes part in the call). A
//! message nobody asks for yet is left where it is while the receiver works, and read
//! into a buffer of its own when it is about to block (so a sender never waits on the
//! order in which its receiver's schedule asks). Setup checks both ways that the peer may
//! be read (same user, Yama and seccomp permitting) and is the process it says it is;
//! pairs that cannot fall back to the copy through the ring.
//!
//! # Waiting
//!
//! A rank that finds nothing spins briefly on the rings' counters, then sets the
//! `sleeping` flag of its segment, checks once more, and blocks in the transport beneath
//! (its `wait` wakes on the control connections and on a datagram socket in the abstract
//! namespace, this rank's doorbell). A peer that publishes a message or gives a slot back
//! clears the flag and, if it was set, sends the doorbell one byte. Both sides order flag
//! and counter with sequentially consistent operations, so no wake-up is lost.
//!
//! # Setup and cleanup
//!
//! After the host map is known ([`crate::hosts`]), each rank creates its segment (mode
//! 0600, a random name, memory reserved with `posix_fallocate` so a full `/dev/shm` is an
//! error at setup rather than SIGBUS later), sends each local peer its name over the
//! control connection, maps theirs, and says so; the segment is unlinked as soon as every
//! local peer answered, so nothing is left in `/dev/shm` by a rank that crashes later. A
//! pair that could not map each other's segment falls back to the transport beneath
//! (or fails the setup, naming the peer, when shared memory was required).
//!
//! # Failures
//!
//! Liveness is the control plane's: a local peer that dies closes its connection, and a
//! rank that finds nothing from it (or no room toward it) asks the transport beneath
//! ([`Transport::control_check`]), at most every millisecond. A stopped peer is found by
//! the liveness probe when a call stalls ([`Transport::unresponsive`]). A peer that
//! writes nonsense into its ring (a slot out of range or lent twice, a length past the
//! slot) is a protocol error naming it.

#[allow(unsafe_code)]
mod cma;
#[allow(unsafe_code)]
mod segment;
mod setup;
#[cfg(test)]
mod tests;

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::TransportError;
use crate::hosts::HostMap;
use crate::transport::{check_tag, stale_in, Foreign, Payload, Registered, SendState, Transport};
use crate::types::{Rank, Tag};
use segment::{Body, InRing, Lease, OutRing, Refused, Remote, Segment, Withdrawal};

pub use segment::Shape as SegmentShape;
pub use setup::{prepare, Options, Prepared};

/// Default slots per ring (messages in flight from one peer).
pub const DEFAULT_SLOTS: usize = 8;

/// Default bytes of shared memory one rank's segment may take, all rings together: past
/// it, rings get fewer slots (at least 2).
pub const DEFAULT_SEGMENT_BUDGET: usize = 64 << 20;

/// Default busy-wait before blocking.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// Default smallest send that goes single-copy (see the module's documentation).
pub const DEFAULT_SINGLE_COPY: usize = 32 << 10;

/// Tokens of single-copy sends carry this bit (the transport beneath never sets it).
const SINGLE_COPY_TOKEN: u64 = 1 << 63;

/// How long [`Transport::reap_borrowed`] waits for a receiver in the middle of reading a
/// single-copy send before it gives the memory up anyway.
const READ_GRACE: Duration = Duration::from_secs(1);

/// Bytes of one peer's messages this rank copies out of its ring to free slots while the
/// engine waits for others (inline messages count [`INLINE_CHARGE`] each); past it the
/// peer waits for slots and descriptors.
const HEAP_CAP: usize = 64 << 20;

/// Buffers of inline messages kept for the next ones, and the largest kept.
const SMALL_POOL: usize = 64;
const SMALL_BYTES: usize = 64;

/// What an inline message held here counts against [`HEAP_CAP`]: its entry in the
/// arrival map more than its few bytes.
const INLINE_CHARGE: usize = 256;

/// Receives in a row that may look at their own peer's ring alone, finding nothing
/// there and nothing held, before one looks at every ring and the control plane.
const QUICK_MISSES: u32 = 8;

/// Name prefix of every segment (cleanup scripts and tests look for it).
pub const PREFIX: &str = "rcoll-";

/// The longest a wait sleeps before it looks at the rings again (see `wait`).
const WAKE_CHECK: Duration = Duration::from_millis(10);

/// A local peer: its messages in this rank's segment, this rank's in its.
struct Link {
    inbox: InRing,
    outbox: OutRing,
    /// Wakes the peer if it sleeps (after a message to it, or a slot given back).
    wake: Arc<dyn Fn() + Send + Sync>,
    /// Bytes of its messages copied out of the ring and not yet taken.
    copied: usize,
    /// The peer's process, when this rank may read its memory (it may leave messages
    /// there: single copy).
    read_from: Option<i32>,
    /// Whether the peer reads this rank's memory (this rank's large borrowed sends stay
    /// in place).
    read_by: bool,
}

impl Foreign for Lease {
    fn bytes(&self) -> &[u8] {
        Lease::bytes(self)
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        Lease::bytes_mut(self)
    }
}

/// A message that arrived from a local peer.
#[derive(Debug)]
enum Msg {
    /// Its bytes are here (a lent slot, or copied out).
    Here(Payload),
    /// Its bytes are still in the sender's memory.
    There(Remote),
}

impl Msg {
    fn len(&self) -> usize {
        match self {
            Msg::Here(p) => p.len(),
            Msg::There(r) => r.len,
        }
    }
}

/// A message here, and the bytes it counts against its sender's [`HEAP_CAP`] (0 while it
/// is a slot lent from the ring).
type Arrived = (Msg, usize);

/// One rank's endpoint: shared memory with the ranks of its host, `inner` with the rest.
/// Built by [`prepare`] and [`Prepared::finish`].
pub struct ShmTransport {
    rank: Rank,
    nranks: usize,
    /// The transport beneath: other hosts, and the control plane for every peer.
    inner: Box<dyn Transport>,
    hosts: Arc<HostMap>,
    links: Vec<Option<Link>>,
    mine: Arc<Segment>,
    bell: UnixDatagram,
    bell_watched: bool,
    /// Sleeps that ended at their cap with a ring moved and no bell (a lost wake-up).
    pub(crate) late_wakeups: u64,
    arrived: crate::transport::Arrivals<(Tag, Arrived)>,
    /// The rings' counters when this rank last looked and found nothing.
    /// Messages taken off the rings so far, and when this rank last found nothing; with
    /// the slots given back then: what a spinning wait compares (local counters and the
    /// rings' next descriptors, not the senders' `head` lines).
    drained: u64,
    seen_drained: u64,
    seen_released: u64,
    /// A send found its peer's ring without room: waits also watch what the receivers
    /// took (a sender blocked on descriptors gets no slot back to wake it), from
    /// `seen_taken` on, until the wait returns and the send is tried again.
    send_blocked: bool,
    seen_taken: u64,
    /// Whether the counters above were recorded since the last wait.
    marked: bool,
    /// Receives that looked at their peer's ring alone since the last full look
    /// ([`QUICK_MISSES`]).
    quick_misses: u32,
    /// Buffers for inline messages ([`SMALL_POOL`] at most).
    small: Vec<Vec<u8>>,
    /// Buffers that single-copy messages were read into, for the next ones.
    large: Vec<Vec<u8>>,
    /// Single-copy sends in flight: token, peer, ticket, generation.
    outstanding: Vec<(u64, Rank, usize, u32)>,
    next_token: u64,
    /// Smallest borrowed send that goes single-copy.
    single_copy: usize,
    /// Peers that withdrew a message before this rank read it (they failed), for the
    /// stall report.
    withdrawn: Vec<Rank>,
    broken: Option<TransportError>,
    last_control: Instant,
    slot_bytes: usize,
    spin: Duration,
    /// Whether this host has fewer cores (that this process may run on) than ranks: then
    /// a spinning rank yields between polls, else it only pauses ([`Transport::relax`]).
    crowded: bool,
    name: &'static str,
}

/// A tag in a descriptor's three words: collective and transfer, segment and schedule,
/// channel.
fn tag_words(tag: Tag) -> [u64; 3] {
    [
        u64::from(tag.collective) | u64::from(tag.transfer) << 32,
        u64::from(tag.segment) | u64::from(tag.schedule) << 32,
        u64::from(tag.channel),
    ]
}

fn tag_of(words: [u64; 3]) -> Option<Tag> {
    Some(Tag {
        collective: words[0] as u32,
        transfer: (words[0] >> 32) as u32,
        segment: words[1] as u32,
        schedule: (words[1] >> 32) as u32,
        channel: u16::try_from(words[2]).ok()?,
    })
}

impl ShmTransport {
    /// The transport beneath (other hosts, control plane).
    pub fn inner_mut(&mut self) -> &mut dyn Transport {
        &mut *self.inner
    }

    /// Whether `peer` is reached through shared memory.
    pub fn shares_memory_with(&self, peer: Rank) -> bool {
        matches!(self.links.get(peer.index()), Some(Some(_)))
    }

    fn check(&self) -> Result<(), TransportError> {
        match &self.broken {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn fail(&mut self, e: TransportError) -> TransportError {
        if self.broken.is_none() {
            tracing::warn!(error = %e, "shared memory transport failed");
            self.broken = Some(e.clone());
        }
        e
    }

    /// The control plane's word on `peer`: whether it is known to be gone, on every call
    /// (no I/O: its death may already have been read off its connection by another check,
    /// and then no event would wake this rank), and the full check (reading the
    /// connections) at most every millisecond.
    fn control(&mut self, peer: Option<Rank>, force: bool) -> Result<(), TransportError> {
        if let Some(e) = peer.and_then(|p| self.inner.known_gone(p)) {
            return Err(e);
        }
        if force || self.last_control.elapsed() >= Duration::from_millis(1) {
            self.last_control = Instant::now();
            self.inner.control_check(peer)?;
        }
        Ok(())
    }

    /// Records the counters of "nothing found" (see [`Self::moved`]): messages taken
    /// and slots given back so far; only at the first failure since the last wait (a
    /// later one would hide what moved in between, and the wait would sleep through it).
    fn mark_seen(&mut self) {
        if self.marked {
            return;
        }
        self.marked = true;
        self.seen_drained = self.drained;
        self.seen_released = self.released_total(Ordering::Acquire);
        self.seen_taken = self.taken_total(Ordering::Acquire);
    }

    fn taken_total(&self, order: Ordering) -> u64 {
        self.links
            .iter()
            .flatten()
            .fold(0u64, |g, l| g.wrapping_add(l.outbox.taken(order)))
    }

    fn released_total(&self, order: Ordering) -> u64 {
        self.links
            .iter()
            .flatten()
            .fold(0u64, |g, l| g.wrapping_add(l.outbox.released(order)))
    }

    /// After this rank raised its `sleeping` flag: whether a message was published that it
    /// has not taken, or a slot came back since it last found nothing. Sequentially
    /// consistent loads of the counters a sender or receiver stores (sequentially
    /// consistent) before it checks the flag: one of the two sees the other.
    fn unseen(&self) -> bool {
        self.links
            .iter()
            .flatten()
            .any(|l| l.copied < HEAP_CAP && l.inbox.unread())
            || self.drained != self.seen_drained
            || self.released_total(Ordering::SeqCst) != self.seen_released
            || (self.send_blocked && self.taken_total(Ordering::SeqCst) != self.seen_taken)
    }

    /// Whether anything moved since this rank last found nothing: a message waits on a
    /// ring (one cache line per ring, the one its sender writes anyway), one was taken
    /// since, or a slot came back.
    fn moved(&self) -> bool {
        self.links
            .iter()
            .flatten()
            .any(|l| l.copied < HEAP_CAP && l.inbox.pending())
            || self.drained != self.seen_drained
            || self.released_total(Ordering::Acquire) != self.seen_released
            || (self.send_blocked && self.taken_total(Ordering::Acquire) != self.seen_taken)
    }

    /// Takes every published message off every ring into the arrival map, each one's
    /// slot lent to its payload (the engine reads it in place). Slots a full ring holds
    /// for messages nobody asked for yet are freed by [`ShmTransport::unpin`] when this
    /// rank is about to block.
    fn drain(&mut self) -> Result<(), TransportError> {
        let slots = self.mine.shape().slots;
        for p in 0..self.links.len() {
            // At most a ring's worth per call (a peer that keeps publishing cannot hold
            // this rank here), and nothing past what this rank holds for the peer: it
            // waits then, its descriptors in use.
            let mut took = 0;
            while took < slots {
                let Some((tag, (payload, charge))) = self.take_next(p)? else {
                    break;
                };
                took += 1;
                self.hold(Rank::from(p), tag, payload, charge)?;
            }
            if took > 0 {
                if let Some(Some(link)) = self.links.get(p) {
                    // Descriptors were freed: a sender that found none may sleep.
                    (link.wake)();
                }
            }
        }
        Ok(())
    }

    /// Keeps a message that arrived for the call that will ask for it.
    fn hold(
        &mut self,
        peer: Rank,
        tag: Tag,
        msg: Msg,
        charge: usize,
    ) -> Result<(), TransportError> {
        if let Some(Some(link)) = self.links.get_mut(peer.index()) {
            link.copied += charge;
        }
        if self
            .arrived
            .insert((peer, tag.key()), (tag, (msg, charge)))
            .is_some()
        {
            let e = TransportError::DuplicateTag {
                rank: self.rank,
                peer,
                tag,
            };
            return Err(self.fail(e));
        }
        Ok(())
    }

    /// The next message on peer `p`'s ring, unless none is published or this rank holds
    /// its budget of the peer's messages: its tag, payload and what it would count
    /// against the budget. A descriptor that breaks the rules fails the transport.
    fn take_next(&mut self, p: usize) -> Result<Option<(Tag, Arrived)>, TransportError> {
        let Some(link) = self.links.get_mut(p).and_then(Option::as_mut) else {
            return Ok(None);
        };
        if link.copied >= HEAP_CAP {
            return Ok(None);
        }
        let Some(next) = link.inbox.take(&link.wake, link.read_from.is_some()) else {
            return Ok(None);
        };
        self.drained += 1;
        let peer = Rank::from(p);
        let (header, body) = match next {
            Ok(m) => m,
            Err(why) => {
                let reason = match why {
                    Refused::NoSuchSlot(n) => format!("published slot {n}, which does not exist"),
                    Refused::SlotLent(n) => {
                        format!("published slot {n} while this rank still held it")
                    }
                    Refused::TooLong(n) => format!(
                        "wrote a {n}-byte message into a slot of {} bytes",
                        self.slot_bytes
                    ),
                    Refused::InlineTooLong(n) => format!(
                        "published a {n}-byte message in a descriptor, which holds {}",
                        segment::INLINE
                    ),
                    Refused::RemoteNotAllowed => {
                        "left a message in its own memory, which this rank cannot read".into()
                    }
                    Refused::NoSuchTicket(n) => {
                        format!(
                            "left a message in its memory under ticket {n}, which does not exist"
                        )
                    }
                };
                let e = TransportError::Protocol {
                    rank: self.rank,
                    peer,
                    reason,
                };
                return Err(self.fail(e));
            }
        };
        let Some(tag) = tag_of(header.tag) else {
            let e = TransportError::Protocol {
                rank: self.rank,
                peer,
                reason: format!("wrote a malformed tag {:x?}", header.tag),
            };
            return Err(self.fail(e));
        };
        Ok(Some(match body {
            Body::Lent(lease) => (tag, (Msg::Here(Payload::foreign(Box::new(lease))), 0)),
            Body::Inline(bytes, len) => {
                let mut buf = self.small.pop().unwrap_or_default();
                buf.clear();
                buf.extend_from_slice(&bytes[..len]);
                (tag, (Msg::Here(Payload::reuse(buf, len)), INLINE_CHARGE))
            }
            Body::Remote(remote) => (tag, (Msg::There(remote), INLINE_CHARGE)),
        }))
    }

    /// Frees the slots of every full ring whose messages wait here unasked for (the
    /// trait's promise: a sender's credits never depend on the tag this rank waits for):
    /// they are copied out of the ring, up to [`HEAP_CAP`] bytes per peer; past that the
    /// peer waits. Rare: only a rank about to block with a peer's whole ring in hand.
    fn unpin(&mut self) {
        let slots = self.mine.shape().slots;
        let full: Vec<usize> = (0..self.links.len())
            .filter(|&p| {
                self.links[p]
                    .as_ref()
                    .is_some_and(|l| l.inbox.lent() >= slots && l.copied < HEAP_CAP)
            })
            .collect();
        for p in full {
            let peer = Rank::from(p);
            let mut copied = 0;
            for ((from, _), (_, (msg, charge))) in self.arrived.iter_mut() {
                let Msg::Here(payload) = msg else {
                    continue;
                };
                if *from != peer || !payload.is_foreign() {
                    continue;
                }
                let len = payload.len();
                // The slot goes back as the lease drops.
                *payload = Payload::reuse(payload.as_bytes().to_vec(), len);
                *charge = len;
                copied += len;
                if copied >= HEAP_CAP {
                    break;
                }
            }
            if let Some(Some(l)) = self.links.get_mut(p) {
                l.copied += copied;
            }
        }
    }

    fn take(&mut self, peer: Rank, tag: Tag) -> Option<(Tag, Msg)> {
        let (sent, (msg, charge)) = self.arrived.remove(&(peer, tag.key()))?;
        if charge > 0 {
            if let Some(Some(l)) = self.links.get_mut(peer.index()) {
                l.copied = l.copied.saturating_sub(charge);
            }
        }
        Some((sent, msg))
    }

    /// Reads a message left in `peer`'s memory into `dst` (exactly its length), and gives
    /// the peer its memory back. `Ok(false)` if the peer withdrew it: it failed, and its
    /// cause reaches this rank through the control plane (or its connection closes); the
    /// message never arrives, like any message of a failed peer.
    fn read_remote(
        &mut self,
        peer: Rank,
        mut remote: Remote,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        let protocol = |rank, reason: String| TransportError::Protocol { rank, peer, reason };
        let Some(pid) = self.links[peer.index()].as_ref().and_then(|l| l.read_from) else {
            return Err(self.fail(protocol(self.rank, "left a message in its memory".into())));
        };
        // A peer known gone is not read (its process number may be another's by now).
        if let Some(e) = self.inner.known_gone(peer) {
            return Err(e);
        }
        if remote.begin().is_err() {
            self.note_withdrawn(peer);
            return Ok(false);
        }
        if let Err(e) = cma::read(pid, remote.addr, dst) {
            drop(remote);
            self.control(Some(peer), true)?;
            let e = protocol(
                self.rank,
                format!("reading its message from its memory failed: {e}"),
            );
            return Err(self.fail(e));
        }
        if remote.finish().is_err() {
            // Given up during the read: what `dst` holds may not be the message.
            self.note_withdrawn(peer);
            return Ok(false);
        }
        Ok(true)
    }

    fn note_withdrawn(&mut self, peer: Rank) {
        if !self.withdrawn.contains(&peer) {
            self.withdrawn.push(peer);
        }
    }

    /// A message's bytes as a payload: read into a buffer of this transport's if they
    /// are still in the sender's memory.
    /// `None` if the sender withdrew it (see [`Self::read_remote`]).
    fn here(&mut self, peer: Rank, msg: Msg) -> Result<Option<Payload>, TransportError> {
        match msg {
            Msg::Here(p) => Ok(Some(p)),
            Msg::There(remote) => {
                let mut p = Payload::reuse(self.large.pop().unwrap_or_default(), remote.len);
                if !self.read_remote(peer, remote, p.as_bytes_mut())? {
                    return Ok(None);
                }
                Ok(Some(p))
            }
        }
    }

    /// Reads every message held here that is still in its sender's memory into a buffer
    /// of this rank's (up to [`HEAP_CAP`] per peer), so that no sender waits on the order
    /// in which this rank's schedule asks for them. Whether any was.
    fn settle_remote(&mut self) -> Result<bool, TransportError> {
        let there: Vec<(Rank, crate::types::TagKey)> = self
            .arrived
            .iter()
            .filter(|(_, (_, (m, _)))| matches!(m, Msg::There(_)))
            .map(|(k, _)| *k)
            .collect();
        let mut any = false;
        for key in there {
            // Whatever this rank holds already: these are bounded by the sender's tickets
            // and slot size, and a sender waits on each.
            let peer = key.0;
            let Some((tag, (msg, charge))) = self.arrived.remove(&key) else {
                continue;
            };
            if let Some(Some(l)) = self.links.get_mut(peer.index()) {
                l.copied = l.copied.saturating_sub(charge);
            }
            let Some(payload) = self.here(peer, msg)? else {
                any = true;
                continue;
            };
            let len = payload.len();
            self.hold(peer, tag, Msg::Here(payload), len)?;
            any = true;
        }
        Ok(any)
    }

    /// The message `tag` of `len` bytes from local `peer`, if it arrived.
    fn find_local(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Msg>, TransportError> {
        self.check()?;
        // The common case first: nothing held here, and the peer's next message is the
        // one asked for: straight from its ring, not through the arrival map.
        if self.arrived.is_empty() {
            match self.take_next(peer.index())? {
                Some((sent, (msg, charge))) => {
                    if let Some(Some(link)) = self.links.get(peer.index()) {
                        (link.wake)();
                    }
                    if sent.key() == tag.key() {
                        check_tag(self.rank, peer, tag, sent, msg.len(), len)?;
                        return Ok(Some(msg));
                    }
                    self.hold(peer, sent, msg, charge)?;
                }
                // Nothing from the peer and nothing held: a small call spinning for its
                // message. The full look (every ring, the counters a wait compares, the
                // control plane) is for every few such misses and for the wait: what it
                // finds then is no later than a wait would find it.
                None if self.quick_misses < QUICK_MISSES => {
                    self.quick_misses += 1;
                    return Ok(None);
                }
                None => {}
            }
        }
        self.quick_misses = 0;
        let mut found = self.take(peer, tag);
        if found.is_none() {
            self.drain()?;
            found = self.take(peer, tag);
        }
        if found.is_none() {
            // Counters first, then look again: a wait after this sleeps only if nothing
            // arrived since.
            self.mark_seen();
            self.drain()?;
            found = self.take(peer, tag);
        }
        match found {
            Some((sent, msg)) => {
                check_tag(self.rank, peer, tag, sent, msg.len(), len)?;
                Ok(Some(msg))
            }
            None => {
                self.control(Some(peer), false)?;
                Ok(None)
            }
        }
    }

    /// Sends `len` bytes filled by `fill` to local peer `p`; `false` if its ring is full.
    fn send_local(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
        fill: &dyn Fn(&mut [u8]),
    ) -> Result<bool, TransportError> {
        self.check()?;
        if len > self.slot_bytes {
            return Err(TransportError::MessageTooLarge {
                rank: self.rank,
                peer,
                len,
                max: self.slot_bytes,
            });
        }
        for attempt in 0..2 {
            let Some(Some(link)) = self.links.get_mut(peer.index()) else {
                return Err(TransportError::InvalidPeer {
                    rank: self.rank,
                    peer,
                    nranks: self.nranks,
                });
            };
            if link.outbox.send(tag_words(tag), len, fill) {
                (link.wake)();
                return Ok(true);
            }
            if attempt == 0 {
                // Counters first, then the check again: a wait after this sleeps only if
                // nothing changed since.
                self.mark_seen();
                self.send_blocked = true;
            }
        }
        // No room: take what peers sent (they may be blocked the same way), and the
        // peer may be gone for good.
        self.drain()?;
        self.control(Some(peer), false)?;
        Ok(false)
    }

    /// Disposes of a payload this transport is done with.
    fn dispose(&mut self, payload: Payload) {
        if payload.is_foreign() {
            drop(payload);
        } else if payload.is_plain_within(SMALL_BYTES) && self.small.len() < SMALL_POOL {
            // An inline message's buffer (or a plain one like it; never one the transport
            // beneath lent, which must go back there): the next one's.
            self.small.push(payload.into_storage());
        } else if payload.len() > SMALL_BYTES
            && payload.is_plain_within(self.slot_bytes)
            && self.large.len() < self.mine.shape().slots
        {
            // A single-copy message's buffer, or one like it.
            self.large.push(payload.into_storage());
        } else {
            self.inner.recycle(payload);
        }
    }
}

impl Transport for ShmTransport {
    fn name(&self) -> &'static str {
        self.name
    }

    fn rank(&self) -> Rank {
        self.rank
    }

    fn nranks(&self) -> usize {
        self.nranks
    }

    fn alloc(&mut self, len: usize) -> Payload {
        self.inner.alloc(len)
    }

    fn try_send(
        &mut self,
        peer: Rank,
        tag: Tag,
        payload: Payload,
    ) -> Result<Option<Payload>, TransportError> {
        if !self.shares_memory_with(peer) {
            self.check()?;
            return self.inner.try_send(peer, tag, payload);
        }
        let bytes = payload.as_bytes();
        if self.send_local(peer, tag, bytes.len(), &|dst| dst.copy_from_slice(bytes))? {
            self.dispose(payload);
            Ok(None)
        } else {
            Ok(Some(payload))
        }
    }

    fn try_send_slice(
        &mut self,
        peer: Rank,
        tag: Tag,
        data: &[u8],
    ) -> Result<bool, TransportError> {
        if !self.shares_memory_with(peer) {
            self.check()?;
            return self.inner.try_send_slice(peer, tag, data);
        }
        self.send_local(peer, tag, data.len(), &|dst| dst.copy_from_slice(data))
    }

    fn alloc_registered(&mut self, bytes: usize) -> Result<Registered, TransportError> {
        self.inner.alloc_registered(bytes)
    }

    fn try_send_borrowed(
        &mut self,
        peer: Rank,
        tag: Tag,
        data: &[u8],
    ) -> Result<SendState, TransportError> {
        if !self.shares_memory_with(peer) {
            self.check()?;
            let sent = self.inner.try_send_borrowed(peer, tag, data);
            debug_assert!(
                !matches!(sent, Ok(SendState::InFlight(t)) if t & SINGLE_COPY_TOKEN != 0),
                "a token of the transport beneath with the single-copy bit"
            );
            return sent;
        }
        self.try_send_slice(peer, tag, data).map(SendState::sent)
    }

    fn try_send_borrowed_for_copy(
        &mut self,
        peer: Rank,
        tag: Tag,
        data: &[u8],
    ) -> Result<SendState, TransportError> {
        let single = (self.single_copy..=self.slot_bytes).contains(&data.len());
        if !single || !self.shares_memory_with(peer) {
            return self.try_send_borrowed(peer, tag, data);
        }
        self.check()?;
        if let Some(Some(link)) = self.links.get_mut(peer.index()) {
            let sent = link.read_by.then(|| {
                link.outbox
                    .send_remote(tag_words(tag), data.as_ptr() as u64, data.len())
            });
            if let Some(Some((ticket, generation))) = sent {
                (link.wake)();
                self.next_token += 1;
                let token = SINGLE_COPY_TOKEN | self.next_token;
                self.outstanding.push((token, peer, ticket, generation));
                return Ok(SendState::InFlight(token));
            }
            // No ticket free (or no descriptor: then the copy below finds none either):
            // through the ring.
        }
        self.try_send_slice(peer, tag, data).map(SendState::sent)
    }

    fn send_complete(&mut self, token: u64) -> Result<bool, TransportError> {
        if token & SINGLE_COPY_TOKEN == 0 {
            return self.inner.send_complete(token);
        }
        let Some(i) = self.outstanding.iter().position(|o| o.0 == token) else {
            return Ok(true);
        };
        // Counters first, then the ticket: a wait after this sleeps only if the receiver
        // had not finished before. (A receiver that died is the wait's to find.)
        self.mark_seen();
        let (_, peer, ticket, generation) = self.outstanding[i];
        let done = self.links[peer.index()]
            .as_mut()
            .is_some_and(|l| l.outbox.ticket_done(ticket, generation));
        if done {
            self.outstanding.swap_remove(i);
            return Ok(true);
        }
        self.check()?;
        match self.inner.known_gone(peer) {
            Some(e) => Err(e),
            None => Ok(false),
        }
    }

    /// The inner transport's, and the sends a peer read from this rank's memory (one
    /// token each).
    fn zero_copy_sends(&self) -> u64 {
        self.next_token + self.inner.zero_copy_sends()
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn details(&self) -> String {
        let me = self.rank;
        let local = self.hosts.local_size(me);
        let shape = self.mine.shape();
        let peers = self.links.iter().flatten().count();
        let direct = self
            .links
            .iter()
            .flatten()
            .filter(|l| l.read_from.is_some())
            .count();
        let mut d = format!(
            "{}; shared memory among the {local} ranks of each host ({} slots of {} KiB per \
             peer; {})",
            self.hosts.describe(),
            shape.slots,
            shape.slot_bytes / 1024,
            if self.single_copy == usize::MAX {
                "single copy off".to_owned()
            } else {
                format!(
                    "single copy from {direct} of {peers} peers from {} KiB",
                    self.single_copy.div_ceil(1024)
                )
            }
        );
        d.push_str(if self.crowded {
            "; waits yield (more ranks than CPUs)"
        } else {
            "; waits spin"
        });
        if self.name != "shm" {
            let inner = self.inner.details();
            d.push_str(&format!(
                "; across hosts {}{}",
                self.inner.name(),
                if inner.is_empty() {
                    String::new()
                } else {
                    format!(" ({inner})")
                }
            ));
        }
        d
    }

    fn reap_borrowed(&mut self) {
        // Withdrawn where the read has not begun; a read under way is waited for a
        // little, then given up (its reader fails rather than use what it read).
        let until = Instant::now() + READ_GRACE;
        while !self.outstanding.is_empty() {
            let abandon = Instant::now() >= until;
            let links = &mut self.links;
            self.outstanding.retain(|&(_, peer, ticket, generation)| {
                links[peer.index()].as_mut().is_some_and(|l| {
                    l.outbox.withdraw(ticket, generation, abandon) == Withdrawal::Reading
                })
            });
            std::thread::yield_now();
        }
        self.inner.reap_borrowed();
    }

    fn unresponsive(&mut self, within: Duration) -> Vec<Rank> {
        self.inner.unresponsive(within)
    }

    fn stall_report(&self, peer: Option<Rank>) -> String {
        let one = |p: usize| {
            self.links[p].as_ref().map(|l| {
                format!(
                    "{} (shared memory): {} of its messages waiting, {} of its slots held \
                     here, {} bytes of its copied out; its ring for this rank {}",
                    Rank::from(p),
                    if l.inbox.pending() { "some" } else { "none" },
                    l.inbox.lent(),
                    l.copied,
                    if l.outbox_room() {
                        "has room"
                    } else {
                        "is full"
                    }
                )
            })
        };
        let mut parts: Vec<String> = match peer {
            Some(p) if self.shares_memory_with(p) => one(p.index()).into_iter().collect(),
            Some(_) => Vec::new(),
            None => (0..self.links.len()).filter_map(one).collect(),
        };
        parts.push(format!(
            "late wake-ups (shared memory) {}; single-copy sends not yet read {}",
            self.late_wakeups,
            self.outstanding.len()
        ));
        if !self.withdrawn.is_empty() {
            let who: Vec<String> = self.withdrawn.iter().map(Rank::to_string).collect();
            parts.push(format!(
                "withdrew a message before it was read (they failed): {}",
                who.join(", ")
            ));
        }
        let below = self.inner.stall_report(peer);
        if !below.is_empty() && peer.is_none_or(|p| !self.shares_memory_with(p)) {
            parts.push(below);
        }
        parts.join("; ")
    }

    fn borrowed_in_flight(&self) -> usize {
        self.outstanding.len() + self.inner.borrowed_in_flight()
    }

    fn control_check(&mut self, peer: Option<Rank>) -> Result<(), TransportError> {
        self.check()?;
        self.inner.control_check(peer)
    }

    fn watch_fd(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<()> {
        self.inner.watch_fd(fd)
    }

    fn hosts(&self) -> Option<Arc<HostMap>> {
        Some(Arc::clone(&self.hosts))
    }

    fn try_recv(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Payload>, TransportError> {
        if !self.shares_memory_with(peer) {
            self.check()?;
            return self.inner.try_recv(peer, tag, len);
        }
        match self.find_local(peer, tag, len)? {
            Some(msg) => self.here(peer, msg),
            None => Ok(None),
        }
    }

    fn try_recv_into(
        &mut self,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        if !self.shares_memory_with(peer) {
            self.check()?;
            return self.inner.try_recv_into(peer, tag, dst);
        }
        // The common small case first: nothing held here, and the peer's next message is
        // this one, in its descriptor.
        if self.arrived.is_empty() && self.broken.is_none() {
            if let Some(Some(link)) = self.links.get_mut(peer.index()) {
                if link.inbox.take_inline(tag_words(tag), dst) {
                    self.drained += 1;
                    (link.wake)();
                    return Ok(true);
                }
            }
        }
        match self.find_local(peer, tag, dst.len())? {
            Some(Msg::Here(payload)) => {
                dst.copy_from_slice(payload.as_bytes());
                self.dispose(payload);
                Ok(true)
            }
            Some(Msg::There(remote)) => self.read_remote(peer, remote, dst),
            None => Ok(false),
        }
    }

    fn reads_directly(&self, peer: Rank) -> bool {
        matches!(self.links.get(peer.index()), Some(Some(l)) if l.read_from.is_some())
    }

    fn recycle(&mut self, payload: Payload) {
        self.dispose(payload);
    }

    fn relax(&self) {
        if self.crowded {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    fn wait(&mut self, deadline: Instant) -> Result<(), TransportError> {
        // A wait with no failure before it (the engine waits on something else): the
        // counters as they are now.
        self.mark_seen();
        let r = self.wait_rings(deadline);
        // The engine tries its blocked sends and receives again next; what still fails
        // records its counters anew.
        self.send_blocked = false;
        self.marked = false;
        // The first look after a wait is a full one (the control plane's word on the peer
        // included: a peer that died while this rank slept is named then).
        self.quick_misses = QUICK_MISSES;
        r
    }

    fn stale(&mut self, current: u32) -> Option<(Rank, Tag)> {
        stale_in(&self.arrived, current).or_else(|| self.inner.stale(current))
    }

    fn abort(&mut self, reason: &str) {
        self.inner.abort(reason);
    }
}

impl ShmTransport {
    /// [`Transport::wait`]: until a ring moves, the deadline, or the transport beneath
    /// has news.
    fn wait_rings(&mut self, deadline: Instant) -> Result<(), TransportError> {
        self.check()?;
        self.control(None, false)?;
        // Whatever this rank waits for, its peers' messages come off the rings, and a
        // full ring's slots are freed, so that a peer blocked on it moves on.
        self.drain()?;
        self.unpin();
        let spin_until = Instant::now() + self.spin;
        loop {
            if self.moved() {
                return Ok(());
            }
            let now = Instant::now();
            if now >= spin_until || now >= deadline {
                break;
            }
            self.relax();
        }
        // About to block: messages left in their senders' memory are read now (their
        // senders may be waiting for that to go on).
        if self.settle_remote()? {
            return Ok(());
        }
        let sleeping = self.mine.sleeping();
        sleeping.store(1, Ordering::SeqCst);
        if self.unseen() {
            sleeping.store(0, Ordering::Relaxed);
            return Ok(());
        }
        // Unwatched, the bell is polled every millisecond; watched, the rings are looked
        // at again every WAKE_CHECK whatever the bell says, so a lost ring costs that much,
        // never the whole timeout (and is counted for the stall report).
        let until = if self.bell_watched {
            deadline.min(Instant::now() + WAKE_CHECK)
        } else {
            deadline.min(Instant::now() + Duration::from_millis(1))
        };
        let r = self.inner.wait(until);
        self.mine.sleeping().store(0, Ordering::Relaxed);
        let mut sink = [0u8; 64];
        let mut rung = false;
        while self.bell.recv(&mut sink).is_ok() {
            rung = true;
        }
        if self.bell_watched
            && !rung
            && until < deadline
            && Instant::now() >= until
            && self.unseen()
        {
            self.late_wakeups += 1;
        }
        r
    }
}

impl Link {
    fn outbox_room(&self) -> bool {
        self.outbox.has_room(self.outbox.slot_bytes())
    }
}
