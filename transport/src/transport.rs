//! The transport traits: the one seam every backend (in-process, TCP, verbs, shared
//! memory) plugs into. [`Transport`] is what a schedule's steps do peer by peer (send,
//! receive, offer a destination, register memory); its supertrait [`Group`] is the group
//! as one object (waiting, abort, liveness, epochs after a shrink, statistics), which the
//! driver of a call and the layers above ask.
//!
//! The model follows NCCL's net plugin and gloo's pairs, reduced to what a schedule engine
//! needs: tagged, non-blocking, point-to-point messages between ranks, with the buffers
//! owned by the transport so that no borrowed memory outlives a call.
//!
//! - A sender asks the transport for a [`Payload`] ([`Transport::alloc`]), fills it and hands
//!   it back with [`Transport::try_send`]. The transport may refuse for now (no credits); the
//!   payload then comes back and the caller retries after [`Group::wait`].
//! - A receiver takes a message by `(peer, tag)` with [`Transport::try_recv`] once it has
//!   arrived, consumes the bytes in place (copy or reduce), and either forwards the same
//!   payload with `try_send` or returns it with [`Transport::recycle`].
//! - [`Group::wait`] blocks until something may have changed or a deadline passes; the
//!   caller owns every deadline.
//!
//! Messages on one `(sender, receiver)` channel may be matched in any order: receivers
//! match by tag, and a transport keeps messages that arrive before they are asked for.
//! A transport always accepts messages from every peer while any call is in progress, so
//! a sender's credits never depend on which tag the receiver happens to wait for.

use std::sync::Arc;
use std::time::Instant;

use crate::error::TransportError;
use crate::types::{Rank, Tag};

/// An owned message buffer, lent by a transport and given back to it (or forwarded).
///
/// Its contents are whatever the transport last held in it: fill every byte before sending.
/// A payload whose memory the transport must get back (a registered RDMA slot) returns it
/// there even when dropped instead of recycled, so that memory a device knows is never
/// freed behind the transport's back.
#[derive(Debug, Default)]
pub struct Payload {
    bytes: Vec<u8>,
    /// Bytes in front of the message that belong to the transport (the verbs backend's
    /// slot header, written in place so that one RDMA write carries header and data).
    head: usize,
    /// End of the message in `bytes`: the allocation may be longer (a registered slot
    /// keeps its full length, so reusing it never re-zeroes it).
    end: usize,
    /// Where the storage goes if the payload is dropped (lent by a transport).
    home: Option<Returns>,
}

/// What a transport has done and holds, for diagnostics and tests
/// ([`Group::statistics`]); a layered transport adds its own to the one beneath's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Statistics {
    /// Sends that went zero-copy from the caller's memory so far: from registered memory
    /// over verbs, read by the receiver over shared memory.
    pub zero_copy_sends: u64,
    /// Messages written straight into offered destinations so far.
    pub placed_receives: u64,
    /// Sends from caller memory that a device may still be reading, and caller memory
    /// offered to a peer's device to write ([`Transport::offer`]): 0 after every call
    /// returns.
    pub borrowed_in_flight: usize,
    /// Buffers of the transport's own pool: registered slots over verbs, spare payload
    /// buffers over TCP. Over verbs the pool grows to the most messages in flight and
    /// waiting at once, which the protocol bounds (credits, the hold limit) and the timing
    /// of a run sets; it never shrinks, so that a burst does not register memory again
    /// (freeing what a burst took beyond a fixed number made a 4-rank all_to_all of 4 MiB
    /// in place 3x slower on Soft-RoCE). Over TCP it keeps the buffers messages were
    /// received into, up to a count and a total capacity, and how full it is after a call
    /// is the timing's too.
    pub pool_buffers: usize,
    /// Their bytes.
    pub pool_bytes: usize,
    /// Of those buffers, the ones found where the transport keeps them (free, lent to a
    /// peer, in flight, arrived, lent to the caller or on their way back): always all of
    /// them, or a buffer was lost.
    pub pool_accounted: usize,
}

impl std::ops::Add for Statistics {
    type Output = Statistics;
    fn add(self, o: Statistics) -> Statistics {
        Statistics {
            zero_copy_sends: self.zero_copy_sends + o.zero_copy_sends,
            placed_receives: self.placed_receives + o.placed_receives,
            borrowed_in_flight: self.borrowed_in_flight + o.borrowed_in_flight,
            pool_buffers: self.pool_buffers + o.pool_buffers,
            pool_bytes: self.pool_bytes + o.pool_bytes,
            pool_accounted: self.pool_accounted + o.pool_accounted,
        }
    }
}

/// What a link to one peer does, stated by the backend per peer ([`Transport::link`]):
/// the engine's choices of how to take and forward messages follow it. All false by
/// default (a link that only carries tagged messages).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// [`Transport::offer`] may place messages from the peer (take them with
    /// [`Transport::try_recv_into`] then).
    pub places_directly: bool,
    /// An offer to the peer reaches it only behind everything this rank already sent it,
    /// on one ordered channel whose messages the peer has received before it can use the
    /// offer. Then memory that a send to the peer alone still reads may be offered to it
    /// at once: its device has put the send's bytes on the wire before the peer can write
    /// there. (An in-place all_reduce on 2 ranks offers the half it sends in the
    /// reduce-scatter for the peer's half of the all-gather: waiting for the send's
    /// completion first, the peer's write comes before the offer.)
    pub offers_follow_sends: bool,
    /// Messages from the peer are best taken with [`Transport::try_recv_into`] (and
    /// forwarded from where they landed with [`Transport::try_send_from`]) than as a
    /// payload: the backend reads them from the sender's memory, once.
    pub reads_directly: bool,
    /// A message of any length up to [`WHOLE_MAX`] bytes moves between this rank and the
    /// peer, both ways, in one piece and with one copy (each reads the other's memory): a
    /// call whose every message is to or from the peer then gains nothing by cutting them
    /// into segments, and loses a read per segment. Both ranks of the pair answer alike.
    pub moves_whole: bool,
}

/// A transport's queue of lent storage that came back by being dropped.
pub(crate) type Returns = Arc<crossbeam_queue::SegQueue<Vec<u8>>>;

impl Drop for Payload {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            home.push(std::mem::take(&mut self.bytes));
        }
    }
}

impl Payload {
    /// A payload of `len` bytes reusing `storage`'s allocation.
    ///
    /// Stale bytes are kept rather than zeroed (the sender overwrites all of them), so a
    /// recycled buffer costs no memset.
    pub fn reuse(mut storage: Vec<u8>, len: usize) -> Payload {
        if storage.len() >= len {
            storage.truncate(len);
        } else {
            storage.resize(len, 0);
        }
        Payload {
            bytes: storage,
            head: 0,
            end: len,
            home: None,
        }
    }

    /// The bytes its storage holds without growing.
    pub(crate) fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// Whether this is plain heap memory of at most `capacity` bytes that no transport
    /// wants back (not lent, no header): any transport may keep it.
    pub(crate) fn is_plain_within(&self, capacity: usize) -> bool {
        self.home.is_none() && self.head == 0 && self.bytes.capacity() <= capacity
    }

    /// A payload of `len` bytes after `head` bytes of transport header, in `storage`.
    pub(crate) fn with_head(mut storage: Vec<u8>, head: usize, len: usize) -> Payload {
        if storage.len() < head + len {
            storage.resize(head + len, 0);
        }
        Payload {
            bytes: storage,
            head,
            end: head + len,
            home: None,
        }
    }

    /// Like [`Payload::with_head`], for storage that must come back to `home` if the
    /// payload is dropped rather than recycled or sent. `storage` must already hold
    /// `head + len` bytes (it is never reallocated).
    pub(crate) fn lent(storage: Vec<u8>, head: usize, len: usize, home: &Returns) -> Payload {
        let end = (head + len).min(storage.len());
        Payload {
            bytes: storage,
            head: head.min(end),
            end,
            home: Some(home.clone()),
        }
    }

    /// Header room and message together (see [`Payload::with_head`]).
    pub(crate) fn framed_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.end]
    }

    /// The header room in front of the message.
    pub(crate) fn head(&self) -> usize {
        self.head
    }

    /// Number of bytes in the message.
    pub fn len(&self) -> usize {
        self.end - self.head
    }

    /// Whether the message is empty (zero-length messages carry only their tag).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The message bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.head..self.end]
    }

    /// The message bytes, to fill or to reduce into in place.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.head..self.end]
    }

    /// The allocation (header room included), for a transport's pool; a copy of the
    /// message if its bytes live elsewhere (which go back where they came from).
    pub fn into_storage(mut self) -> Vec<u8> {
        self.home = None;
        std::mem::take(&mut self.bytes)
    }
}

/// Memory allocated through a transport ([`Registered::alloc`]): registered with
/// the device where the backend has one, so that sends from it go zero-copy; plain heap
/// memory otherwise. 8-byte aligned.
pub struct Registered {
    /// Dropped first: the backend's registration (deregisters, and leaves its cache)
    /// goes before the memory it covers.
    registration: Option<Box<dyn Registration>>,
    words: Vec<u64>,
    len: usize,
}

/// A backend's hold on registered memory.
pub trait Registration: Send {
    /// Whether a device may still read the memory (a zero-copy send that was neither
    /// completed nor reaped, see [`Transport::reap_borrowed`]). Such memory is never freed.
    fn in_use(&self) -> bool;
}

impl Drop for Registered {
    fn drop(&mut self) {
        if self.registration.as_ref().is_some_and(|r| r.in_use()) {
            // A device could still read it: freeing (or deregistering) would let it read
            // whatever the allocator puts there next, or fail the peer. Keep both, leaked.
            tracing::error!(
                bytes = self.len,
                "registered memory dropped while a device may read it: leaked, not freed"
            );
            std::mem::forget(std::mem::take(&mut self.words));
            std::mem::forget(self.registration.take());
        }
    }
}

impl Registered {
    /// `bytes` zeroed bytes that no device knows about.
    pub fn plain(bytes: usize) -> Registered {
        Registered {
            registration: None,
            words: vec![0; bytes.div_ceil(8)],
            len: bytes,
        }
    }

    /// `bytes` of zeroed 8-byte words for `rank`'s `what`, or why they cannot be had (a
    /// size past the address space, or an allocator that refuses): never a panic or an
    /// abort.
    pub(crate) fn zeroed_words(
        rank: Rank,
        bytes: usize,
        what: &'static str,
    ) -> Result<Vec<u64>, TransportError> {
        let fail = |reason: String| TransportError::OutOfMemory {
            rank,
            bytes,
            what,
            reason,
        };
        let words = bytes.div_ceil(8).max(1);
        if words > isize::MAX as usize / 8 {
            return Err(fail("more than the address space".into()));
        }
        let mut v: Vec<u64> = Vec::new();
        v.try_reserve_exact(words)
            .map_err(|e| fail(e.to_string()))?;
        v.resize(words, 0);
        Ok(v)
    }

    /// `bytes` of zeroed memory registered with `t`'s device ([`Transport::register`]),
    /// so that sends from it go zero-copy; plain memory where `t` registers nothing.
    pub fn alloc<T: Transport + ?Sized>(
        t: &mut T,
        bytes: usize,
    ) -> Result<Registered, TransportError> {
        let mut words = Registered::zeroed_words(t.endpoint().rank, bytes, "a registered buffer")?;
        // The registration covers the whole words; moving the Vec into `Registered` does
        // not move its heap memory.
        let registration = t.register(bytemuck::cast_slice_mut(&mut words))?;
        Ok(Registered {
            registration,
            words,
            len: bytes,
        })
    }

    /// Whether a device knows this memory (sends from it are zero-copy).
    pub fn is_registered(&self) -> bool {
        self.registration.is_some()
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    /// The bytes, to write.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("len", &self.len)
            .field("registered", &self.is_registered())
            .finish()
    }
}

/// What became of a send from the caller's memory ([`Transport::try_send_from`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendState {
    /// Sent (or copied): the memory may be reused.
    Done,
    /// No room yet: call again after [`Group::wait`].
    NoRoom,
    /// The device is still reading the memory: it must stay unmodified until
    /// [`Transport::send_complete`] says this token is complete.
    InFlight(u64),
}

impl SendState {
    /// [`SendState::Done`] if `sent`, else [`SendState::NoRoom`].
    pub fn sent(sent: bool) -> SendState {
        if sent {
            SendState::Done
        } else {
            SendState::NoRoom
        }
    }
}

/// How long a send may keep reading the caller's memory after
/// [`Transport::try_send_from`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lend {
    /// Not at all: the bytes are sent or copied before the call returns.
    No,
    /// Until [`Transport::send_complete`] reports the send's token
    /// ([`SendState::InFlight`]): a device may read registered memory in place (or, over
    /// shared memory, a large message may wait there for the receiver). The caller keeps
    /// the memory borrowed and unmodified until then.
    UntilComplete,
    /// As `UntilComplete`, for bytes the receiver only copies (never reduces into): a
    /// backend whose receivers can read the sender's memory may leave them there for that
    /// ([`Link::reads_directly`]), which saves the sender its copy but makes the receiver's
    /// read a system call, a loss where the receiver would then reduce out of a buffer of
    /// its own.
    ForCopy,
}

/// Who a transport endpoint is in its group: what headers, logs and the layers above read,
/// fixed when it connected (never asked per message).
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Short backend name, e.g. `"local"`, `"tcp"`, `"verbs"`.
    pub name: &'static str,
    /// This endpoint's rank.
    pub rank: Rank,
    /// Number of ranks in the group.
    pub nranks: usize,
    /// What it runs on, for headers and logs (device, port, how slots are lent); empty
    /// when the name says it all.
    pub details: String,
    /// Where every rank of the group runs, when the bootstrap learnt it.
    pub hosts: Option<Arc<crate::hosts::HostMap>>,
}

impl Endpoint {
    /// An endpoint of `name` with no details and no host map.
    pub fn new(name: &'static str, rank: Rank, nranks: usize) -> Endpoint {
        Endpoint {
            name,
            rank,
            nranks,
            details: String::new(),
            hosts: None,
        }
    }

    /// The answer of a backend that cannot continue after a failure to
    /// [`Group::begin_epoch`].
    pub fn cannot_shrink(&self) -> TransportError {
        TransportError::Unsupported {
            rank: self.rank,
            what: "continuing after a failure (shrink)",
            transport: self.name,
        }
    }
}

/// A connected group endpoint: this rank's view of the channels to every peer.
///
/// Implementations are used from one thread at a time (`&mut self`) but may be moved
/// between threads.
pub trait Transport: Group {
    /// Who this endpoint is in its group ([`Endpoint`]), stated once when it connected.
    fn endpoint(&self) -> &Endpoint;

    /// A buffer of `len` bytes to fill and send. Contents are unspecified.
    fn alloc(&mut self, len: usize) -> Payload;

    /// Hands a message to the transport.
    ///
    /// Returns `Ok(None)` when accepted, or `Ok(Some(payload))` when there is no room on the
    /// channel yet: call again after [`Group::wait`].
    fn try_send(
        &mut self,
        peer: Rank,
        tag: Tag,
        payload: Payload,
    ) -> Result<Option<Payload>, TransportError>;

    /// Sends `data` as one message straight from the caller's memory where the backend can
    /// (TCP writes it with the header in one vectored write when nothing is queued ahead;
    /// verbs, with `lend` allowing it, has the device read registered memory in place),
    /// copying only what it cannot send at once. `lend` says how long the backend may
    /// keep reading `data` after the call ([`Lend`]); [`SendState::InFlight`] only where it
    /// allows that. [`SendState::NoRoom`]: call again after [`Group::wait`].
    ///
    /// The default copies `data` into a payload and calls [`Transport::try_send`].
    fn try_send_from(
        &mut self,
        peer: Rank,
        tag: Tag,
        data: &[u8],
        lend: Lend,
    ) -> Result<SendState, TransportError> {
        let _ = lend;
        copy_and_send(self, peer, tag, data).map(SendState::sent)
    }

    /// Registers `memory`, which the caller owns, with this transport's device, so that
    /// sends from it go zero-copy as from [`Registered::alloc`] memory (the
    /// backend finds a send's range by its address). `None` where there is nothing to
    /// register: a backend without a device (the default), an empty range, a range inside
    /// one already registered (sends from it are zero-copy already), or one overlapping a
    /// registered range in part (sends from it are copied, as from any memory).
    ///
    /// The registration must be dropped before `memory` is freed, moved or reused
    /// (NCCL's rule: deregister before free): the device holds on to the pages it was
    /// given, so sends from the range after that would read those, not what the range
    /// holds then. A registration dropped while a device may still read the range is kept
    /// (leaked), never undone under it.
    fn register(
        &mut self,
        memory: &mut [u8],
    ) -> Result<Option<Box<dyn Registration>>, TransportError> {
        let _ = memory;
        Ok(None)
    }

    /// Whether the send of `token` ([`SendState::InFlight`]) has completed: the device
    /// no longer reads its memory. Fails if the transport failed (the send may never
    /// complete).
    fn send_complete(&mut self, token: u64) -> Result<bool, TransportError> {
        let _ = token;
        Ok(true)
    }

    /// Makes sure no device reads caller memory lent by [`Transport::try_send_from`],
    /// or writes caller memory offered by [`Transport::offer`], any more, before the engine
    /// hands the caller its buffer back after a failure: waits for those sends, revokes
    /// the offers, and stops the queues where that cannot be waited for (a dead peer's),
    /// reaping what they flush. The transport may be unusable afterwards (it failed
    /// anyway). Backends that never leave a device reading caller memory have nothing to
    /// do.
    fn reap_borrowed(&mut self) {}

    /// Takes the message `tag` from `peer` if it has arrived.
    ///
    /// `len` is the length the caller expects; a message of another length is an error
    /// ([`TransportError::LengthMismatch`]), never a silent truncation.
    fn try_recv(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Payload>, TransportError>;

    /// Takes the message `tag` from `peer` straight into `dst` (exactly `dst.len()` bytes,
    /// checked as [`Transport::try_recv`] checks), if it has arrived: `Ok(false)` if not.
    /// The default copies out of [`Transport::try_recv`]'s payload; a backend that can
    /// read the message from where its sender left it saves that copy (see
    /// [`Link::reads_directly`]).
    ///
    /// A backend may begin writing a large message into `dst` before it is whole (TCP
    /// reads it from the socket as it comes) and answer `Ok(false)` meanwhile: the caller
    /// leaves `dst` alone until a call answers `true`, and asks with the same `dst` (other
    /// memory is an error).
    fn try_recv_into(
        &mut self,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        match self.try_recv(peer, tag, dst.len())? {
            Some(payload) => {
                dst.copy_from_slice(payload.as_bytes());
                self.recycle(payload);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Offers `dst`, memory of a [`Registered`] from this transport, as the place where
    /// `peer`'s message `tag` (exactly `dst.len()` bytes) may land: the peer's device then
    /// writes it there, and [`Transport::try_recv_into`] finds it in place rather than
    /// copying it out of a slot. [`Offered::Later`]: not now (enough offers are out), ask
    /// again; [`Offered::No`]: this destination cannot be offered at all (the backend
    /// cannot, the memory is not registered for it, the message is too small). The
    /// message arrives as usual either way.
    ///
    /// `with`: memory that this rank's message `with` to `peer`, not yet sent, will read.
    /// The offer then goes to the peer with that message or behind it, never before it, so
    /// that the peer can write `dst` only once it has that message (where
    /// [`Link::offers_follow_sends`]; [`Offered::Later`] elsewhere, and then the caller
    /// offers `dst` without `with` once the send no longer reads it). Made with the
    /// message, the offer is there when the peer learns the data its own message to this
    /// rank may depend on.
    ///
    /// After an offer the caller leaves `dst` alone (neither reads nor writes it) until
    /// `try_recv_into` with the same `peer`, `tag` and `dst` returned `true`, however the
    /// message came, or until [`Transport::reap_borrowed`] after a failure, which withdraws
    /// every offer; and it keeps `dst`'s memory allocated that long.
    fn offer(
        &mut self,
        _peer: Rank,
        _tag: Tag,
        _dst: &mut [u8],
        with: Option<Tag>,
    ) -> Result<Offered, TransportError> {
        Ok(match with {
            Some(_) => Offered::Later,
            None => Offered::No,
        })
    }

    /// What the link to `peer` does, which the engine's choices follow ([`Link`]).
    fn link(&self, _peer: Rank) -> Link {
        Link::default()
    }

    /// Returns a payload that is no longer needed.
    fn recycle(&mut self, payload: Payload);
}

/// The group an endpoint belongs to, as one object: waiting, abort, liveness, epochs and
/// statistics — what the driver of a call and the layers above ask of the group as a
/// whole, where [`Transport`] is what a schedule's steps do peer by peer.
pub trait Group: Send {
    /// Blocks until a message may have arrived or send room may have opened, or until
    /// `deadline`. Spurious wake-ups are allowed; the caller re-checks and owns the deadline.
    fn wait(&mut self, deadline: Instant) -> Result<(), TransportError>;

    /// What a rank does between two polls while it spins for a message: give the CPU
    /// away (the default: a peer of this rank may need it), or only pause the pipeline
    /// when every rank of this host has a core of its own, where a system call per poll
    /// would only delay the answer.
    fn relax(&self) {
        std::thread::yield_now();
    }

    /// Makes [`Group::wait`] also return when `fd` becomes readable (a layer above
    /// waits for its own events this way). `Unsupported` where the backend does not block
    /// on file descriptors. The fd must stay open while the transport lives.
    fn watch_fd(&mut self, _fd: std::os::fd::RawFd) -> std::io::Result<()> {
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }

    /// Fails every pending and future operation of every rank in the group with
    /// [`TransportError::Aborted`], waking all waiters.
    fn abort(&mut self, reason: &str);

    /// An arrived message that nobody asked for although its collective — number
    /// `current` or an earlier one — is over on this rank: a peer ran a different call
    /// (such as another root). Messages of later collectives (peers run ahead) and
    /// point-to-point messages (high bit set) are not stale.
    fn stale(&mut self, current: u32) -> Option<(Rank, Tag)>;

    /// What this transport has done and holds ([`Statistics`]).
    fn statistics(&self) -> Statistics {
        Statistics::default()
    }

    /// What this endpoint knows of its exchange with `peer` (or with every peer), in one
    /// line, for the error of a call that stalled: credits, queued work, what it owes.
    /// Empty when there is nothing beyond what the error already says.
    fn stall_report(&self, _peer: Option<Rank>) -> String {
        String::new()
    }

    /// The peers that do not answer a liveness probe within `within` (their process is
    /// stopped, hung, or gone): asked when a call stalls, so that its error names the cause
    /// rather than the neighbour that waits on it. Backends without a probe answer none.
    fn unresponsive(&mut self, _within: std::time::Duration) -> Vec<Rank> {
        Vec::new()
    }

    /// The group's state as the control plane knows it, without blocking: an error if the
    /// group was aborted or this endpoint failed, or if `peer` (when given) is gone (its
    /// process died or closed). A layer that carries some peers itself (shared memory,
    /// over TCP or verbs) asks the transport beneath it. Backends without a control plane
    /// answer `Ok`.
    fn control_check(&mut self, _peer: Option<Rank>) -> Result<(), TransportError> {
        Ok(())
    }

    /// Whether `peer` is known to be gone (its connection closed or broke) from what this
    /// endpoint has already read: no I/O, so a layer above may ask on every miss, between
    /// its rate-limited [`Group::control_check`]s. `None` where nothing says so.
    fn known_gone(&mut self, _peer: Rank) -> Option<TransportError> {
        None
    }

    /// Starts the group's next epoch, so that its survivors can carry on after a failure
    /// or an abort (a shrink, see [`crate::subgroup`]): clears this endpoint's abort, and
    /// ignores from now on the aborts of earlier epochs that are still on their way (a
    /// peer that aborted before it too began the new epoch). Every survivor calls it once
    /// per shrink, so their epochs stay equal; returns the new epoch. A backend that
    /// cannot continue: [`TransportError::Unsupported`].
    fn begin_epoch(&mut self) -> Result<u32, TransportError>;

    /// Ends the survivors' agreement that [`Group::begin_epoch`] began: an abort of the
    /// new epoch that arrived meanwhile (a survivor done agreeing whose first call in the
    /// new group failed) takes effect now, failing the new group's calls, where during the
    /// agreement it would have cut off the messages that still had to be read before it.
    fn commit_epoch(&mut self) {}

    /// Drops the messages that arrived from `peer` and that `old` picks (the calls of an
    /// epoch that ended there), giving back whatever they hold (slots, credits, budget).
    /// Channels are FIFO: called once a message that `peer` sent after its last call of
    /// that epoch was taken, it leaves none of them behind.
    fn discard_from(&mut self, _peer: Rank, _old: &dyn Fn(&Tag) -> bool) {}

    /// Leaves `peer` out of the group for good (it failed, or the survivors excluded it):
    /// closes the connection to it, stops its queue pair, unmaps its ring, drops its
    /// messages. Nothing it sends later is read, and it can no longer write this rank's
    /// memory; an operation toward it is [`TransportError::InvalidPeer`].
    fn exclude(&mut self, _peer: Rank) {}

    /// The concrete transport, for calls particular to one backend (downcast it).
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
}

/// What [`Transport::offer`] did with a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offered {
    /// Offered (or already offered): leave it alone until the message is taken.
    Yes,
    /// Not now (enough offers are out): ask again later.
    Later,
    /// Never: this backend, peer, memory or size does not allow it.
    No,
}

/// The longest message [`Link::moves_whole`] promises to move in one piece: lengths
/// travel as 32 bits.
pub const WHOLE_MAX: usize = 1 << 31;

/// Whether a message of collective `seq` is stale once collective `current` is over:
/// `seq` is `current` or up to 2^30 calls before it (sequence numbers are 31-bit and wrap),
/// and it is not point-to-point.
pub fn is_stale(seq: u32, current: u32) -> bool {
    seq & P2P == 0 && current.wrapping_sub(seq) & !P2P < 1 << 30
}

/// The bit of a tag's sequence number that marks point-to-point messages.
pub(crate) const P2P: u32 = 1 << 31;

/// Messages that arrived and wait for the call that asks for them, by sender and tag
/// (bounded by each transport's credits or slots, so a hostile sender cannot grow it).
pub type Arrivals<V> =
    std::collections::HashMap<(Rank, crate::types::TagKey), V, foldhash::fast::RandomState>;

/// The first stale message in a backend's arrival map: [`Group::stale`] for backends
/// that keep arrived messages by `(peer, tag)`.
pub fn stale_in<V>(arrived: &Arrivals<(Tag, V)>, current: u32) -> Option<(Rank, Tag)> {
    // Checked after every call: an empty map that once held many entries would otherwise
    // be scanned bucket by bucket.
    if arrived.is_empty() {
        return None;
    }
    arrived
        .iter()
        .find(|(_, (tag, _))| is_stale(tag.collective, current))
        .map(|((peer, _), (tag, _))| (*peer, *tag))
}

/// Checks that a message taken for `(peer, expected)` is the one the receiver expects:
/// the same call fingerprint and `len` bytes. Shared by every backend's `try_recv`.
pub fn check_arrival(
    rank: Rank,
    peer: Rank,
    expected: Tag,
    sent: Tag,
    payload: Payload,
    len: usize,
) -> Result<Payload, TransportError> {
    check_tag(rank, peer, expected, sent, payload.len(), len)?;
    Ok(payload)
}

/// [`check_arrival`] for a message of `got` bytes that is not (yet) a payload.
pub fn check_tag(
    rank: Rank,
    peer: Rank,
    expected: Tag,
    sent: Tag,
    got: usize,
    len: usize,
) -> Result<(), TransportError> {
    if sent.schedule != expected.schedule {
        return Err(TransportError::ScheduleMismatch {
            rank,
            peer,
            tag: expected,
            expected: expected.schedule,
            got: sent.schedule,
        });
    }
    if got != len {
        return Err(TransportError::LengthMismatch {
            rank,
            peer,
            tag: expected,
            expected: len,
            got,
        });
    }
    Ok(())
}

/// Sends `data` by copying it into a payload: [`Transport::try_send_from`] for backends
/// that cannot send from the caller's memory. `Ok(false)`: no room yet.
pub fn copy_and_send<T: Transport + ?Sized>(
    t: &mut T,
    peer: Rank,
    tag: Tag,
    data: &[u8],
) -> Result<bool, TransportError> {
    let mut payload = t.alloc(data.len());
    payload.as_bytes_mut().copy_from_slice(data);
    match t.try_send(peer, tag, payload)? {
        None => Ok(true),
        Some(back) => {
            t.recycle(back);
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_payload_comes_home_when_dropped_and_not_when_handed_back() {
        let home: Returns = Default::default();
        let storage = vec![7u8; 64];
        let at = storage.as_ptr();
        let p = Payload::lent(storage, 32, 10, &home);
        assert_eq!(p.len(), 10);
        drop(p);
        let back = home
            .pop()
            .expect("the dropped payload's storage comes back");
        assert_eq!(
            (back.as_ptr(), back.len()),
            (at, 64),
            "the same allocation, whole"
        );
        assert!(home.pop().is_none());
        // Handed back to the transport (recycled or sent): nothing comes home twice.
        let p = Payload::lent(back, 32, 10, &home);
        let storage = p.into_storage();
        assert_eq!(storage.as_ptr(), at);
        assert!(home.pop().is_none());
    }
}
