//! Shared memory between the ranks of one host, layered on the transport that carries
//! the rest of the group (TCP or verbs): per pair, whichever reaches the peer best.
//!
//! # Data path
//!
//! Every rank owns a segment in `/dev/shm` holding one ring per local peer that sends to
//! it (`segment` has the layout). A message to a local peer is copied once, from the
//! caller's memory or a payload, into a free slot of that peer's ring; the receiver lends
//! the slot itself to the engine (a [`Payload`] over the shared bytes: it copies or
//! reduces straight out of it) and the slot goes back when the payload is dropped,
//! recycled or forwarded. So a byte crosses memory once between the two ranks, like
//! Open MPI's copy-in/copy-out path, with no system call on the way while both sides
//! are awake.
//!
//! # Single copy
//!
//! Off by default (`RCOLL_SHM_SINGLE_COPY` turns it on): the kernel's copy between
//! processes can run well below memcpy's rate, while the copy through the ring has the
//! sender and the receiver each copy at memcpy's rate, pipelined segment by segment
//! (measured: docs/src/design.md, "Measurements behind the transports' choices"). Where
//! the kernel copies as fast as user space and ranks contend for memory bandwidth, one
//! copy can win again: measure with the variable set.
//!
//! A large send from the caller's memory of bytes the receiver only copies
//! ([`Lend::ForCopy`], at least [`Options::single_copy`] bytes:
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
//! (its `wait` wakes on the control connections and on this rank's doorbell, a pipe its
//! peers open through `/proc/<pid>/fd` as they open its segment, so only processes that
//! could write the segment can ring). A peer that publishes a message or gives a slot back
//! clears the flag and, if it was set, writes the doorbell one byte. Both sides order flag
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
//! ([`Group::control_check`]), at most every millisecond. A stopped peer is found by
//! the liveness probe when a call stalls ([`Group::unresponsive`]). A peer that
//! writes nonsense into its ring (a slot out of range or lent twice, a length past the
//! slot) is a protocol error naming it.

#[allow(unsafe_code)]
mod cma;
mod epoch;
mod receive;
#[allow(unsafe_code)]
mod segment;
mod setup;
#[cfg(test)]
mod tests;
mod wait;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::TransportError;
use crate::hosts::HostMap;
use crate::transport::{
    stale_in, Endpoint, Group, Lend, Link as TransportLink, Offered, Payload, Registration,
    SendState, Transport,
};
use crate::types::{Rank, Tag};
use segment::{InRing, Lease, OutRing, Remote, Segment, Withdrawal};

#[cfg(any(test, fuzzing))]
pub use segment::hostile_descriptors;
pub use segment::Shape as SegmentShape;
pub use setup::{parse_announcement, prepare, Announcement, Options, Prepared};

/// Default slots per ring (messages in flight from one peer).
pub const DEFAULT_SLOTS: usize = 8;

/// Default bytes of shared memory one rank's segment may take, all rings together: past
/// it, rings get fewer slots (at least 2).
pub const DEFAULT_SEGMENT_BUDGET: usize = 64 << 20;

/// Default busy-wait before blocking.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// Smallest send that goes single-copy when `RCOLL_SHM_SINGLE_COPY=on` (see the module's
/// documentation).
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

/// A message that arrived from a local peer.
#[derive(Debug)]
enum Msg {
    /// Its bytes are here, copied out of the ring (inline, or to free the slot).
    Here(Payload),
    /// Its bytes are in a slot of this rank's segment, lent until copied out.
    Slot(Lease),
    /// Its bytes are still in the sender's memory.
    There(Remote),
}

impl Msg {
    fn len(&self) -> usize {
        match self {
            Msg::Here(p) => p.len(),
            Msg::Slot(l) => l.len(),
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
    me: Endpoint,
    /// The transport beneath: other hosts, and the control plane for every peer.
    inner: Box<dyn Transport>,
    hosts: Arc<HostMap>,
    links: Vec<Option<Link>>,
    mine: Arc<Segment>,
    bell: std::fs::File,
    bell_watched: bool,
    /// Sleeps that ended at their cap with a ring moved and no bell (a lost wake-up).
    pub(crate) late_wakeups: u64,
    /// Waits that went to sleep (past their spin, nothing moved).
    pub(crate) sleeps: u64,
    arrived: crate::transport::Arrivals<(Tag, Arrived)>,
    /// Messages taken off the rings so far, and before this rank's first full look (or
    /// failed send) since its last wait; with the slots given back then: what a spinning
    /// wait compares (local counters and the rings' next descriptors, not the senders'
    /// `head` lines).
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
    /// a spinning rank yields between polls, else it only pauses ([`Group::relax`]).
    crowded: bool,
    /// Some peers are reached through the transport beneath (other hosts): payloads are
    /// then that transport's (registered memory that verbs sends without a copy).
    remote: bool,
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
    /// What this endpoint runs on ([`Endpoint::details`]), once its links are made.
    fn describe(&self) -> String {
        let me = self.me.rank;
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
        if self.me.name != "shm" {
            let inner = &self.inner.endpoint().details;
            d.push_str(&format!(
                "; across hosts {}{}",
                self.inner.endpoint().name,
                if inner.is_empty() {
                    String::new()
                } else {
                    format!(" ({inner})")
                }
            ));
        }
        d
    }

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

    /// Sends `data` to local `peer`; `false` if its ring is full.
    fn send_local(&mut self, peer: Rank, tag: Tag, data: &[u8]) -> Result<bool, TransportError> {
        let len = data.len();
        self.check()?;
        if len > self.slot_bytes {
            return Err(TransportError::MessageTooLarge {
                rank: self.me.rank,
                peer,
                len,
                max: self.slot_bytes,
            });
        }
        for attempt in 0..2 {
            let Some(Some(link)) = self.links.get_mut(peer.index()) else {
                return Err(TransportError::InvalidPeer {
                    rank: self.me.rank,
                    peer,
                    nranks: self.me.nranks,
                });
            };
            if link.outbox.send(tag_words(tag), data) {
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
        if payload.is_plain_within(SMALL_BYTES) {
            // An inline message's buffer (or a plain one like it; never one the transport
            // beneath lent, which must go back there): the next one's while the pool has
            // room, else freed, as the slot-sized ones below.
            if self.small.len() < SMALL_POOL {
                self.small.push(payload.into_storage());
            }
        } else if payload.is_plain_within(self.slot_bytes) && payload.capacity() >= self.slot_bytes
        {
            // One of the pool's buffers (`pooled`), each a slot's size: kept while the
            // pool has room, else freed (never left to another pool to keep).
            if self.large.len() < self.mine.shape().slots {
                self.large.push(payload.into_storage());
            }
        } else {
            self.inner.recycle(payload);
        }
    }
}

impl Transport for ShmTransport {
    fn endpoint(&self) -> &Endpoint {
        &self.me
    }

    fn alloc(&mut self, len: usize) -> Payload {
        // With peers beyond this host, the transport beneath's: a payload may go to one of
        // them (and verbs sends its own registered buffers without a copy).
        if self.remote {
            return self.inner.alloc(len);
        }
        // Else from this layer's pools (small buffers, or slot-sized ones): a payload goes
        // back to the pool it came from, whatever its length (a pool of buffers grown to
        // each length would creep), and a small one never takes a slot-sized buffer.
        if len <= SMALL_BYTES {
            let buf = self
                .small
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(SMALL_BYTES));
            return Payload::reuse(buf, len);
        }
        match len <= self.slot_bytes {
            true => self.pooled(len),
            false => self.inner.alloc(len),
        }
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
        if self.send_local(peer, tag, bytes)? {
            self.dispose(payload);
            Ok(None)
        } else {
            Ok(Some(payload))
        }
    }

    fn register(
        &mut self,
        memory: &mut [u8],
    ) -> Result<Option<Box<dyn Registration>>, TransportError> {
        // For the peers the inner transport reaches (other hosts, over verbs).
        self.inner.register(memory)
    }

    fn try_send_from(
        &mut self,
        peer: Rank,
        tag: Tag,
        data: &[u8],
        lend: Lend,
    ) -> Result<SendState, TransportError> {
        if !self.shares_memory_with(peer) {
            self.check()?;
            let sent = self.inner.try_send_from(peer, tag, data, lend);
            debug_assert!(
                !matches!(sent, Ok(SendState::InFlight(t)) if t & SINGLE_COPY_TOKEN != 0),
                "a token of the transport beneath with the single-copy bit"
            );
            return sent;
        }
        if lend == Lend::ForCopy && data.len() >= self.single_copy {
            self.check()?;
            let slot_bytes = self.slot_bytes;
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
                if link.read_by && data.len() > slot_bytes {
                    // Longer than a slot: only the peer's read moves it, once a ticket frees.
                    self.mark_seen();
                    self.send_blocked = true;
                    return Ok(SendState::NoRoom);
                }
                // No ticket free (or no descriptor: then the copy below finds none either):
                // through the ring.
            }
        }
        self.send_local(peer, tag, data).map(SendState::sent)
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
            Some(Msg::Slot(lease)) => {
                lease.read_into(dst);
                Ok(true)
            }
            Some(Msg::There(remote)) => self.read_remote(peer, remote, dst),
            None => Ok(false),
        }
    }

    fn offer(
        &mut self,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
        with: Option<Tag>,
    ) -> Result<Offered, TransportError> {
        if self.shares_memory_with(peer) {
            // Nothing to offer: the receiver copies out of the ring (or reads the sender).
            return Ok(match with {
                Some(_) => Offered::Later,
                None => Offered::No,
            });
        }
        self.check()?;
        self.inner.offer(peer, tag, dst, with)
    }

    fn link(&self, peer: Rank) -> TransportLink {
        match self.links.get(peer.index()) {
            // Shared memory: no offers (a peer reads or copies), read from the sender's
            // memory where this rank may.
            Some(Some(l)) => TransportLink {
                reads_directly: l.read_from.is_some(),
                moves_whole: l.read_from.is_some() && l.read_by,
                ..TransportLink::default()
            },
            _ => self.inner.link(peer),
        }
    }

    fn recycle(&mut self, payload: Payload) {
        self.dispose(payload);
    }
}

impl Group for ShmTransport {
    /// The inner transport's, with the sends a peer read from this rank's memory (one
    /// token each) and those a peer has yet to finish reading.
    fn statistics(&self) -> crate::Statistics {
        self.inner.statistics()
            + crate::Statistics {
                zero_copy_sends: self.next_token,
                borrowed_in_flight: self.outstanding.len(),
                ..Default::default()
            }
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
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
            "sleeps (shared memory) {}, late wake-ups {}; single-copy sends not yet read {}",
            self.sleeps,
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

    fn control_check(&mut self, peer: Option<Rank>) -> Result<(), TransportError> {
        self.check()?;
        self.inner.control_check(peer)
    }

    fn watch_fd(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<()> {
        self.inner.watch_fd(fd)
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

    fn begin_epoch(&mut self) -> Result<u32, TransportError> {
        self.next_epoch()
    }

    fn commit_epoch(&mut self) {
        self.inner.commit_epoch();
    }

    fn discard_from(&mut self, peer: Rank, old: &dyn Fn(&Tag) -> bool) {
        self.discard(peer, old);
    }

    fn exclude(&mut self, peer: Rank) {
        self.forget(peer);
    }
}

impl Link {
    fn outbox_room(&self) -> bool {
        self.outbox.has_room(self.outbox.slot_bytes())
    }
}
