//! RDMA verbs backend: reliable connected queue pairs, and RDMA writes into buffers the
//! receiver lends, one grant at a time.
//!
//! # Protocol
//!
//! The group first forms over TCP ([`crate::tcp::bootstrap`]); those connections stay as
//! the control plane (liveness, abort relay) and carry each pair's endpoints: QPN, PSN,
//! LID, GID, active MTU and whether the receiver lends memory windows. Then, per peer, one
//! RC queue pair:
//!
//! ```text
//!   receiver                                   sender
//!   registers slot buffers (header + slot)
//!   binds a memory window over one slot
//!   on the peer's queue pair (fresh key)
//!   credits: (slot id, addr, rkey, len) ─────► queue of remote slots
//!                                              header + message written in place in a
//!                                              registered buffer; RDMA WRITE into the
//!   ◄──────────────────────────────────────── window, then SEND WITH INVALIDATE (slot id)
//!   recv completion: the window is revoked;
//!   slot id → (tag, len)
//!   the slot's bytes become the Payload (no copy); a fresh slot is lent at once
//! ```
//!
//! - **Scoped access** (`RCOLL_IB_SCOPED`, default on except on Soft-RoCE, see
//!   [`Options::scoped`]): slot regions have no remote key
//!   of their own. Each grant is a type 2 memory window bound on that peer's queue pair
//!   only, and its key is revoked by the peer's SEND WITH INVALIDATE before this rank
//!   reads the slot. So a peer can write only the slot it holds a credit for, only until
//!   it says the message is there, and a stale or forged credit is a remote access error
//!   that breaks the pair (named on both sides), never a write into memory lent to someone
//!   else or being reduced into. The notice must revoke exactly the window of the slot it
//!   names, or it is a protocol error naming the peer. Without windows (or with
//!   `RCOLL_IB_SCOPED=0`), slots are regions written with RDMA WRITE WITH IMM (slot id),
//!   as in rcoll 0.1. Measured cost: see the closing note of the hardening issue.
//! - Credits travel as inline SENDs on the same queue pair, batched; the bind of a
//!   window precedes its credit on the same send queue, so it is valid when the peer
//!   reads the credit. With regions, the grants a rank owes a peer go behind the next
//!   message it writes there instead, as far as the slot (and the inline limit) has room:
//!   the header counts them, and the receiver takes them with the message. A 2-rank
//!   exchange of small messages then posts no credit message at all (one SEND of 8 grants
//!   per 8 messages before: a send, a receive and an acknowledgement on each side).
//! - **Offers** (`RCOLL_IB_DIRECT`, default on with windows, off without them unless set to
//!   1, see [`Options::direct`]): a message the engine will
//!   only copy (a broadcast's, an all-gather's) can land straight in its destination. The
//!   receiver offers a range of its registered output for one tag — a credit with the
//!   [`wire::OFFER`] bit, followed by the tag, in a credit message — and a sender that holds
//!   the offer when it sends that tag writes the data alone there with RDMA WRITE WITH IMM
//!   (the offer's id); the receiver takes it in place, with no copy out of a slot. An offer
//!   is one message's: a sender without it (yet) uses a slot as before, and the receiver then
//!   withdraws the offer when the message arrives; the sender forgets offers it never used
//!   once its call is over (each tag is sent once). Memory that a send to the same peer
//!   still reads may be offered with that send ([`crate::Transport::offer`] with `with`): the
//!   offer rides behind the message in the peer's slot (every slot has [`wire::TRAILER`]
//!   bytes of room for that behind a message of the largest size; a zero-copy send gathers
//!   header, data and grants from three places), or goes right after it, never before.
//!   The peer then holds the offer before it can answer the message: in an in-place
//!   all_reduce on 2 ranks, its reduced half, written where this rank's half came from.
//!   Offered once the send had completed, 0-17 of 48 such segments landed in place. The engine offers a receive's segments
//!   ahead of their arrival as soon as nothing else uses their memory, up to twice the
//!   window per peer: more than the slots a sender
//!   may fill ahead, so that after the first window the offers are there first. Caller
//!   memory is then registered for remote writes, as slots are without windows. With windows (scoped),
//!   it is registered for windows instead: each offer binds a window over its range on the
//!   peer's queue pair (only while nothing but binds is in flight there, as for slots), the
//!   sender writes through it and invalidates it with a SEND WITH INVALIDATE naming the
//!   offer, and an offer a slot overtook is invalidated here (LOCAL INVALIDATE) before the
//!   receive returns, so the peer can write only the one range, once, and only while the
//!   receive is under way.
//! - **After a failure**, before the call returns ([`crate::Transport::reap_borrowed`]):
//!   the sends from caller memory finish (acknowledged, or failed once their retries run
//!   out) and the windows of the offers out are invalidated here, so no device touches a
//!   buffer given back. A pair stops only where its peer is gone, an offer to it went out
//!   without a window (nothing else revokes it), or its device neither finishes nor fails
//!   that work in time; the stop is that peer's failure alone, and the survivors of a
//!   shrink keep every other pair. A survivor's write into an offer racing its
//!   invalidation breaks their pair (its write meets a revoked key, or the invalidation
//!   comes second): the shrink then leaves one of the two out. A write that landed before
//!   the void and is found after it is ignored (`voided`).
//! - A received payload is the registered slot itself: the engine reduces into it and may
//!   forward it with `try_send`, which writes it to the next peer straight from that memory
//!   (zero copy on forward). A receive into the engine's memory (`try_recv_into`, every
//!   small call's) copies the message out of its slot and lends the slot again at once,
//!   and a send from the engine's memory (`try_send_from`, where it does not lend
//!   registered memory) copies into a registered buffer and posts it: no payload is lent
//!   and taken back on the way, which a small call would otherwise pay for on each
//!   message (measured: docs/src/design.md, "Measurements behind the transports'
//!   choices"). Messages that fit inline go inline.
//! - Receivers replenish on arrival, not on consumption: like the TCP backend, this rank
//!   accepts every message a peer sends whatever tag it waits for (the trait's contract),
//!   up to a per-peer hold limit past which the peer waits for slots until this rank
//!   lets some of its messages go.
//! - A completion with an error status, a dead peer (its TCP connection closes when its
//!   process dies) or an abort fails every later call with a typed error naming the peer.
//!
//! Buffers: every slot is a `Vec<u8>` registered as its own memory region. While the
//! device may write a buffer (lent to a peer) or read it (a posted send), the buffer
//! is owned by this transport and no Rust reference to its bytes is used; the engine only
//! ever holds buffers that are neither lent nor in flight.

mod completions;
mod credits;
mod datapath;
mod device;
mod epoch;
// Test-only: a hostile peer's writes, left out of every build that does not ask for them.
#[cfg(feature = "fault-injection")]
mod faults;
mod ffi;
mod offers;
mod registry;
pub mod select;
mod setup;
mod sys;
pub mod wire;

use std::collections::VecDeque;

/// The maps of the data path, hashed with foldhash (seeded per process): every message
/// looks some up, and std's SipHash is several times slower on these small keys.
type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::TransportError;
use crate::tcp::TcpTransport;
use crate::types::Tag;

pub use device::{
    choose, choose_for, gid_tables, library, prefix_of, probe, PortReport, Selection,
};
#[cfg(feature = "fault-injection")]
pub use faults::Fault;
pub use ffi::{device_names, GidTableEntry, VerbsError};
pub use registry::ZERO_COPY_MIN;
pub use setup::{agree, connect, upgrade, upgrade_for};
pub use sys::LoadError;
pub use wire::HEADER;

use ffi::{
    CompletionChannel, CompletionQueue, MemoryRegion, MemoryWindow, ProtectionDomain, QueuePair,
};
use registry::Registry;
use wire::{Credit, Grant};

/// Bytes of each receive buffer for credit messages.
const CTRL_BYTES: usize = 256;

/// Default slots advertised to each peer.
pub const DEFAULT_WINDOW: usize = 16;

/// Smallest message offered a destination: below it a copy out of a slot costs less than a
/// credit message of its own.
pub const OFFER_MIN: usize = 16 * 1024;

/// Most offers a sender keeps: past it new ones are dropped (their messages go to slots).
/// Honest receivers stay far below (see [`VerbsTransport::offer_limit`]); within one call a
/// sender may hold some it will not use, until the call is over.
const OFFERS_HELD_MAX: usize = 1 << 16;

/// Tunables of the verbs backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Largest message (a slot's payload): the communicator's segment size.
    pub slot_bytes: usize,
    /// Slots advertised to each peer.
    pub window: usize,
    /// Device (and optionally `:port`) to use (`RCOLL_IB_HCA`).
    pub hca: Option<String>,
    /// GID index to use (`RCOLL_IB_GID_INDEX`).
    pub gid_index: Option<u32>,
    /// How long a wait busy-polls the completion queue before it blocks
    /// (`RCOLL_IB_SPIN_US`, microseconds).
    pub spin: Duration,
    /// The longest a wait sleeps on the completion channel before it polls the queue
    /// anyway (`RCOLL_IB_WAKE_CHECK_MS`, default [`WAKE_CHECK`]): a safety net for a wake-up
    /// that never comes. Zero turns it off, so that a lost wake-up shows as a timeout
    /// (tests do).
    pub wake_check: Duration,
    /// ACK timeout exponent of the queue pairs (`RCOLL_IB_TIMEOUT`): a try waits
    /// 4.096 us * 2^n for its acknowledgement, 7 tries in all.
    pub ack_timeout: u8,
    /// Whether sends from registered caller memory go zero-copy (`RCOLL_IB_ZERO_COPY`,
    /// default on; `0` copies them into slots like other sends).
    pub zero_copy: bool,
    /// Whether this rank offers peers ranges of its registered destinations to write
    /// messages into (`RCOLL_IB_DIRECT=1|0`; see the module docs): with
    /// [`Options::scoped`] through a window per offer, so a peer can write the one range
    /// offered, once, while the receive is under way. `None` (unset): offers exactly when
    /// windows are in use. Without windows an offer is made under the region's key, and
    /// every peer could then write the whole registered buffer for as long as it stays
    /// registered: only an explicit `RCOLL_IB_DIRECT=1` accepts that.
    pub direct: Option<bool>,
    /// Whether peers write this rank's slots through memory windows, one per grant, which
    /// they invalidate with the message (`RCOLL_IB_SCOPED=1|0`): a peer can write only the
    /// slot it was lent, only once, and only from its own queue pair. Off, every slot is a
    /// region any peer of the job may write while it is registered. `None` (unset): on,
    /// except on Soft-RoCE (`rxe*` devices), whose windows have two kernel defects: a bind
    /// behind an unacknowledged request is executed again on retransmission (worked
    /// around: binds go only on a queue with nothing else in flight), and a second
    /// invalidation of a window dereferences NULL in the receiver's kernel (Linux 6.1
    /// `rxe_do_invalidate_mw`): any peer could panic the host, which is worse than the
    /// stale write into this job's own memory that regions allow. Devices without type 2
    /// windows use regions either way.
    pub scoped: Option<bool>,
    /// The CPUs this host's ranks share ([`crate::topology::host_cpus`]): with more ranks
    /// than that, a waiting rank yields its CPU rather than spin.
    pub cpus: usize,
}

/// Default ACK timeout exponent: 2^16 * 4.096 us = 268 ms per try. Emulated devices
/// (Soft-RoCE under a busy CPU) acknowledge late; a shorter timeout retransmits whole
/// windows that had arrived (rxe's `duplicate_request` counter).
pub const DEFAULT_ACK_TIMEOUT: u8 = 16;

/// Default busy-poll before blocking.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(100);

impl Options {
    /// Defaults for messages up to `slot_bytes`, overridden by the `RCOLL_IB_*` variables
    /// (`crate::env`): a value that does not parse, a GID index that is not a number or a
    /// switch that is neither on nor off, is an error naming the variable.
    pub fn from_env(slot_bytes: usize) -> Result<Options, String> {
        let hca = crate::env::var("RCOLL_IB_HCA");
        let gid_index = crate::env::parsed("RCOLL_IB_GID_INDEX", "a GID index", |_| true)?;
        let spin = crate::env::duration("RCOLL_IB_SPIN_US", Duration::from_micros, "microseconds")?
            .unwrap_or(DEFAULT_SPIN);
        let wake_check = crate::env::duration(
            "RCOLL_IB_WAKE_CHECK_MS",
            Duration::from_millis,
            "milliseconds",
        )?
        .unwrap_or(WAKE_CHECK);
        let ack_timeout =
            crate::env::parsed("RCOLL_IB_TIMEOUT", "an exponent in 1..=31", |t: &u8| {
                (1..=31).contains(t)
            })?
            .unwrap_or(DEFAULT_ACK_TIMEOUT);
        let zero_copy = crate::env::switch("RCOLL_IB_ZERO_COPY")?.unwrap_or(true);
        let direct = crate::env::switch("RCOLL_IB_DIRECT")?;
        let scoped = crate::env::switch("RCOLL_IB_SCOPED")?;
        Ok(Options {
            cpus: crate::topology::host_cpus()?,
            scoped,
            zero_copy,
            direct,
            ack_timeout,
            slot_bytes: slot_bytes.max(64),
            window: DEFAULT_WINDOW,
            hca,
            gid_index,
            spin,
            wake_check,
        })
    }
}

/// A destination this rank offered a peer (see the module docs).
struct Offer {
    peer: usize,
    key: crate::types::TagKey,
    addr: usize,
    len: usize,
    /// Its region's count of device accesses (the memory is not freed while nonzero).
    reading: Arc<std::sync::atomic::AtomicUsize>,
    /// With scoped grants, the window bound over it on the peer's queue pair.
    window: Option<MemoryWindow>,
}

/// A registered buffer: header room + slot.
struct Buf {
    mr: MemoryRegion,
    ptr: usize,
    /// The window peers write it through (scoped mode); its key is the current grant's.
    window: Option<MemoryWindow>,
}

struct Peer {
    qp: QueuePair,
    /// Whether the peer's slots are windows: this rank writes them with RDMA WRITE and
    /// then a SEND WITH INVALIDATE (two work requests), else with RDMA WRITE WITH IMM.
    scoped: bool,
    /// Remote slots this rank may write.
    credits: VecDeque<Credit>,
    /// This rank's slots lent to the peer, by id.
    advertised: Map<u32, Vec<u8>>,
    /// Slots and offers to send the peer.
    owed: Vec<Grant>,
    /// Grants encoded behind a message ([`Peer::lend_behind`]), kept for the next one.
    behind: Vec<u8>,
    /// Offers of memory that this rank's message with that tag to the peer will read
    /// ([`crate::Transport::offer`] with `with`): owed once that message is posted
    /// ([`Peer::release_riding`]), never before.
    riding: Vec<(crate::types::TagKey, Grant)>,
    /// Destinations the peer offered this rank for one message each, by tag (see the module
    /// docs): used by the send of that tag, forgotten once this rank's call is over.
    offers: Map<crate::types::TagKey, (Tag, Credit)>,
    /// This rank's offers to the peer neither taken nor withdrawn.
    offers_out: usize,
    /// Slots the peer should get but no buffer was free for, or that wait until this rank
    /// holds fewer of its messages.
    deficit: usize,
    /// Its messages that arrived and are lent to the engine (not yet recycled or sent on):
    /// past [`VerbsTransport::hold_limit`] the peer gets no new slots until some return.
    held: usize,
    /// Send-queue places taken by work requests posted and not completed.
    sends: u32,
    /// Unsignaled binds posted since the last credit message (which retires them).
    binds: u32,
    /// Receive buffers for credit messages (`depth` × [`CTRL_BYTES`]), registered.
    ctrl: ffi::DmaBuffer,
    hello: bool,
}

/// A message that arrived in this rank's slot `id` (`v`, header first) from peer `from`:
/// `len` bytes. Lent to the engine as a payload only if it asks for one
/// ([`VerbsTransport::lend`]); a receive into the engine's memory copies it out and lends
/// the slot to the peer again at once, with no payload on the way.
struct Arrival {
    id: u32,
    from: usize,
    v: Vec<u8>,
    len: usize,
}

/// The longest a wait sleeps before it looks at the completion queue again, whatever
/// events say: a lost event costs this much, never the whole timeout
/// ([`Options::wake_check`]).
pub const WAKE_CHECK: Duration = Duration::from_millis(10);

/// One rank's endpoint of a verbs group. Built by [`connect`] or [`upgrade`].
pub struct VerbsTransport {
    me: crate::transport::Endpoint,
    peers: Vec<Option<Peer>>,
    by_qpn: Map<u32, usize>,
    /// Registered buffers by id; `free` holds the ones nobody uses.
    bufs: Vec<Buf>,
    free: Vec<(u32, Vec<u8>)>,
    /// Slots taken out of use: lent to an excluded peer, with no fresh window to bind
    /// (`epoch`). Kept, never freed while registered.
    retired: Vec<(u32, Vec<u8>)>,
    /// Buffers lent to the caller (as payloads), by address.
    lent: Map<usize, u32>,
    /// Of those, the ones that arrived from a peer (which it counts in `held`), by id.
    lent_from: Map<u32, usize>,
    /// Most messages of one peer held at once (see `Peer::held`).
    hold_limit: usize,
    /// A peer held back by `hold_limit` dropped under it and is owed slots.
    replenish_due: bool,
    /// Lent buffers whose payloads were dropped instead of recycled: they come back here,
    /// never freed while registered (a freed slot's address, reused by the allocator, would
    /// alias a region the device still maps to the old pages).
    returns: crate::transport::Returns,
    /// Sends in flight: their buffers, by work request id.
    inflight: Map<u64, (u32, Vec<u8>)>,
    next_wr: u32,
    arrived: crate::transport::Arrivals<(Tag, Arrival)>,
    broken: Option<TransportError>,
    /// Since the group first shrank: a queue pair's failure is its peer's alone
    /// (`peer_errors[p]`), not the transport's ([`epoch`]).
    per_peer: bool,
    peer_errors: Vec<Option<TransportError>>,
    completions: Vec<ffi::Completion>,
    slot_bytes: usize,
    send_depth: u32,
    per_credit_msg: usize,
    selection: Selection,
    last_control: Instant,
    /// How long `wait` busy-polls before blocking on the completion channel.
    spin: Duration,
    /// The longest a blocked wait sleeps before it polls anyway; zero: until the deadline.
    wake_check: Duration,
    /// More ranks on this host than CPUs: a rank spinning for a message gives its CPU
    /// away between polls (`relax`).
    crowded: bool,
    /// Completions taken, of every kind: a wait that took one returns, whatever it freed
    /// (a slot buffer, caller memory a zero-copy write read, a receive).
    taken: u64,
    /// `taken` when the last wait returned.
    taken_seen: u64,
    /// Sleeps that ended at their cap with work waiting (a completion whose event never
    /// woke this rank): healed within `wake_check`, counted for the stall report.
    late_wakeups: u64,
    /// Credit messages posted (SENDs of grants alone).
    credit_messages: u64,
    /// Grants that went behind a message instead ([`Peer::lend_behind`]).
    grants_carried: u64,
    /// Slots advertised to each peer.
    window: usize,
    /// Memory registered by `register` (and so by `Registered::alloc`): start address ->
    /// (end, lkey).
    /// Entries leave when their [`Registered`] drops (before its memory is freed).
    registry: Registry,
    /// Sends posted straight from registered caller memory.
    zero_copy: u64,
    /// Those not completed yet, by work request id: the peer, and their region's count.
    borrowed: Map<u64, (usize, Arc<std::sync::atomic::AtomicUsize>)>,
    /// Whether to send from registered caller memory (`Options::zero_copy`).
    zero_copy_on: bool,
    /// Whether to offer destinations (`Options::direct`).
    direct: bool,
    /// This rank's offers out (neither written nor withdrawn), by id.
    offers: Map<u32, Offer>,
    /// Offers a slot overtook whose windows are being invalidated here, by id.
    withdrawing: Map<u32, Offer>,
    /// Offers a failure voided after they went out ([`VerbsTransport::reap`]), by id: the
    /// peer's. A write into one that completed before the void is reported late, and
    /// is no protocol error.
    voided: Map<u32, usize>,
    /// Unbound windows for offers (scoped grants).
    offer_windows: Vec<MemoryWindow>,
    /// The same, by peer and tag.
    offered: crate::transport::Arrivals<u32>,
    /// Messages written into their offered destination and not yet taken: where.
    placed: crate::transport::Arrivals<(usize, usize)>,
    /// The next offer's id (below [`wire::OFFER`]).
    next_offer: u32,
    /// An offer was made since offers last went out: they go at the next progress.
    offers_due: bool,
    /// Messages that landed in offered destinations.
    placed_count: u64,
    /// The peer and credit of the last message sent (for the fault injection's stale write).
    #[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
    last_credit: Option<(usize, Credit)>,
    /// Whether this rank's slots are lent through memory windows (`Options::scoped`, and
    /// the device has them).
    scoped: bool,
    cq: CompletionQueue,
    pd: Arc<ProtectionDomain>,
    _channel: Arc<CompletionChannel>,
    /// Last: closes gracefully after the queue pairs are gone.
    tcp: TcpTransport,
}

impl VerbsTransport {
    /// The device, port and GID this rank uses.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// How this rank has lent its slots back so far: credit messages posted, and grants
    /// that went behind its own messages instead.
    pub fn credit_flow(&self) -> (u64, u64) {
        (self.credit_messages, self.grants_carried)
    }
}
