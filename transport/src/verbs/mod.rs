//! RDMA verbs backend: reliable connected queue pairs and RDMA WRITE WITH IMMEDIATE into
//! buffers the receiver advertises (cargo feature `verbs`, on by default).
//!
//! # Protocol
//!
//! The group first forms over TCP ([`crate::tcp::bootstrap`]); those connections stay as
//! the control plane (liveness, abort relay) and carry each pair's endpoints: QPN, PSN,
//! LID, GID, active MTU and the receiver's first credits. Then, per peer, one RC queue pair:
//!
//! ```text
//!   receiver                                   sender
//!   registers slot buffers (header + slot)
//!   credits: (slot id, addr, rkey, len) ─────► queue of remote slots
//!                                              header + message written in place in a
//!                                              registered buffer; RDMA WRITE WITH IMM
//!   ◄──────────────────────────────────────── into the slot, imm = slot id
//!   recv completion: imm → slot → (tag, len)
//!   the slot's bytes become the Payload (no copy); a fresh slot is advertised at once
//! ```
//!
//! - Credits travel as inline SENDs on the same queue pair, batched.
//! - A received payload is the registered slot itself: the engine reduces into it and may
//!   forward it with `try_send`, which writes it to the next peer straight from that memory
//!   (zero copy on forward). Messages that fit inline go inline.
//! - Receivers replenish on arrival, not on consumption: like the TCP backend, this rank
//!   accepts every message a peer sends whatever tag it waits for (the trait's contract),
//!   registering more slots when the pool runs dry.
//! - A completion with an error status, a dead peer (its TCP connection closes when its
//!   process dies) or an abort fails every later call with a typed error naming the peer.
//!
//! Buffers: every slot is a `Vec<u8>` registered as its own memory region. While the
//! device may write a buffer (advertised to a peer) or read it (a posted send), the buffer
//! is owned by this transport and no Rust reference to its bytes is used; the engine only
//! ever holds buffers that are neither advertised nor in flight.

mod completions;
mod credits;
mod datapath;
mod device;
mod ffi;
mod registry;
pub mod select;
mod setup;
mod sys;
pub mod wire;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::TransportError;
use crate::tcp::TcpTransport;
use crate::transport::Payload;
use crate::types::{Rank, Tag, TagKey};

pub use device::{choose, choose_for, library, prefix_of, probe, PortReport, Selection};
pub use ffi::{device_names, VerbsError};
pub use registry::ZERO_COPY_MIN;
pub use setup::{agree, connect, upgrade};
pub use sys::LoadError;
pub use wire::HEADER;

use ffi::{CompletionChannel, CompletionQueue, MemoryRegion, ProtectionDomain, QueuePair};
use registry::Registry;
use wire::Credit;

/// Bytes of each receive buffer for credit messages.
const CTRL_BYTES: usize = 256;

/// Default slots advertised to each peer.
pub const DEFAULT_WINDOW: usize = 16;

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
    /// ACK timeout exponent of the queue pairs (`RCOLL_IB_TIMEOUT`): a try waits
    /// 4.096 us * 2^n for its acknowledgement, 7 tries in all.
    pub ack_timeout: u8,
    /// Whether sends from registered caller memory go zero-copy (`RCOLL_IB_ZERO_COPY`,
    /// default on; `0` copies them into slots like other sends).
    pub zero_copy: bool,
}

/// Default ACK timeout exponent: 2^16 * 4.096 us = 268 ms per try. Emulated devices
/// (Soft-RoCE under a busy CPU) acknowledge late; a shorter timeout retransmits whole
/// windows that had arrived (rxe's `duplicate_request` counter).
pub const DEFAULT_ACK_TIMEOUT: u8 = 16;

/// Default busy-poll before blocking.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(100);

impl Options {
    /// Defaults for messages up to `slot_bytes`, overridden by `RCOLL_IB_HCA` and
    /// `RCOLL_IB_GID_INDEX`. A GID index that is not a number is an error.
    pub fn from_env(slot_bytes: usize) -> Result<Options, String> {
        let hca = std::env::var("RCOLL_IB_HCA").ok().filter(|s| !s.is_empty());
        let gid_index = match std::env::var("RCOLL_IB_GID_INDEX") {
            Ok(s) if !s.trim().is_empty() => Some(
                s.trim()
                    .parse()
                    .map_err(|_| format!("RCOLL_IB_GID_INDEX={s:?} is not a GID index"))?,
            ),
            _ => None,
        };
        let spin = match std::env::var("RCOLL_IB_SPIN_US") {
            Ok(s) if !s.trim().is_empty() => {
                Duration::from_micros(s.trim().parse().map_err(|_| {
                    format!("RCOLL_IB_SPIN_US={s:?} is not a number of microseconds")
                })?)
            }
            _ => DEFAULT_SPIN,
        };
        let ack_timeout = match std::env::var("RCOLL_IB_TIMEOUT") {
            Ok(s) if !s.trim().is_empty() => s
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|t| (1..=31).contains(t))
                .ok_or_else(|| format!("RCOLL_IB_TIMEOUT={s:?} is not an exponent in 1..=31"))?,
            _ => DEFAULT_ACK_TIMEOUT,
        };
        let zero_copy = !matches!(
            std::env::var("RCOLL_IB_ZERO_COPY")
                .as_deref()
                .map(str::trim),
            Ok("0" | "false" | "off" | "no")
        );
        Ok(Options {
            zero_copy,
            ack_timeout,
            slot_bytes: slot_bytes.max(64),
            window: DEFAULT_WINDOW,
            hca,
            gid_index,
            spin,
        })
    }
}

/// A registered buffer: header room + slot.
struct Buf {
    mr: MemoryRegion,
    ptr: usize,
}

struct Peer {
    qp: QueuePair,
    /// Remote slots this rank may write.
    credits: VecDeque<Credit>,
    /// This rank's slots lent to the peer, by id.
    advertised: HashMap<u32, Vec<u8>>,
    /// Slots to advertise to the peer.
    owed: Vec<Credit>,
    /// Slots the peer should get but no buffer was free for, or that wait until this rank
    /// holds fewer of its messages.
    deficit: usize,
    /// Its messages that arrived and are lent to the engine (not yet recycled or sent on):
    /// past [`VerbsTransport::hold_limit`] the peer gets no new slots until some return.
    held: usize,
    /// Send work requests posted and not completed.
    sends: u32,
    /// Receive buffers for credit messages (`depth` × [`CTRL_BYTES`]), registered.
    ctrl: ffi::DmaBuffer,
    hello: bool,
}

/// One rank's endpoint of a verbs group. Built by [`connect`] or [`upgrade`].
pub struct VerbsTransport {
    rank: Rank,
    nranks: usize,
    peers: Vec<Option<Peer>>,
    by_qpn: HashMap<u32, usize>,
    /// Registered buffers by id; `free` holds the ones nobody uses.
    bufs: Vec<Buf>,
    free: Vec<(u32, Vec<u8>)>,
    /// Buffers lent to the caller (as payloads), by address.
    lent: HashMap<usize, u32>,
    /// Of those, the ones that arrived from a peer (which it counts in `held`), by id.
    lent_from: HashMap<u32, usize>,
    /// Most messages of one peer held at once (see `Peer::held`).
    hold_limit: usize,
    /// A peer held back by `hold_limit` dropped under it and is owed slots.
    replenish_due: bool,
    /// Lent buffers whose payloads were dropped instead of recycled: they come back here,
    /// never freed while registered (a freed slot's address, reused by the allocator, would
    /// alias a region the device still maps to the old pages).
    returns: crate::transport::Returns,
    /// Sends in flight: their buffers, by work request id.
    inflight: HashMap<u64, (u32, Vec<u8>)>,
    next_wr: u32,
    arrived: HashMap<(Rank, TagKey), (Tag, Payload)>,
    broken: Option<TransportError>,
    completions: Vec<ffi::Completion>,
    slot_bytes: usize,
    send_depth: u32,
    per_credit_msg: usize,
    selection: Selection,
    last_control: Instant,
    /// How long `wait` busy-polls before blocking on the completion channel.
    spin: Duration,
    /// Slots advertised to each peer.
    window: usize,
    /// Caller memory registered by `alloc_registered`: start address -> (end, lkey).
    /// Entries leave when their [`Registered`] drops (before its memory is freed).
    registry: Registry,
    /// Sends posted straight from registered caller memory.
    zero_copy: u64,
    /// Those not completed yet, by work request id: the peer, and their region's count.
    borrowed: HashMap<u64, (usize, Arc<std::sync::atomic::AtomicUsize>)>,
    /// Whether to send from registered caller memory (`Options::zero_copy`).
    zero_copy_on: bool,
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
}
