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

mod ffi;
pub mod select;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::path::Path as FsPath;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::TransportError;
use crate::tcp::{bootstrap, TcpTransport};
use crate::transport::{check_arrival, Payload, Registered, SendState, Transport};
use crate::types::{Rank, Tag, TagKey};

pub use ffi::{device_names, VerbsError};
use ffi::{
    CompletionChannel, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QueuePair, Remote,
    Sge,
};
use select::{GidChoice, GidKind};

/// Bytes of header in front of every message in a slot.
pub const HEADER: usize = 32;
const MAGIC: u32 = u32::from_be_bytes(*b"RCV1");
/// Immediate of the connectivity check.
const HELLO: u32 = u32::MAX;
/// Bytes of one credit in a credit message.
const CREDIT_BYTES: usize = 20;
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

/// The device, port and GID a rank would use, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// The GID and the reason it was chosen.
    pub gid: GidChoice,
    /// Active MTU (`ibv_mtu` enum).
    pub active_mtu: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// Whether the link layer is Ethernet (RoCE).
    pub roce: bool,
}

/// What one port looks like, for [`probe`] and `rcoll-bench doctor`.
#[derive(Clone, Debug)]
pub struct PortReport {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// Port state text (`ACTIVE`, `DOWN`, ...).
    pub state: &'static str,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// Largest MTU in bytes.
    pub max_mtu: u32,
    /// `Ethernet` or `InfiniBand`.
    pub link_layer: &'static str,
    /// The GID table.
    pub gids: Vec<select::GidEntry>,
    /// The GID rcoll would pick here, or why none.
    pub choice: Result<GidChoice, String>,
    /// Largest message.
    pub max_msg_sz: u32,
}

fn port_state(s: u32) -> &'static str {
    match s {
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "NOP",
    }
}

/// Every port of every device (or of `hca`), with its GID table and the GID rcoll would
/// choose for traffic from `local`. An error when the host has no verbs support at all.
pub fn probe(
    local: Option<(IpAddr, u8)>,
    hca: Option<&str>,
    forced_gid: Option<u32>,
) -> Result<Vec<PortReport>, String> {
    let names = device_names().map_err(|e| {
        if e.errno == libc::ENOSYS {
            "this kernel has no RDMA support (ibv_get_device_list: ENOSYS); load rdma_rxe \
             or use soft-roce/run-in-vm.sh"
                .to_string()
        } else {
            e.to_string()
        }
    })?;
    let (want_dev, want_port) = match hca {
        Some(h) => match h.split_once(':') {
            Some((d, p)) => (Some(d.to_owned()), p.parse::<u8>().ok()),
            None => (Some(h.to_owned()), None),
        },
        None => (None, None),
    };
    if let Some(d) = &want_dev {
        if !names.contains(d) {
            return Err(format!(
                "RCOLL_IB_HCA={d}: no such device (devices: {})",
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                }
            ));
        }
    }
    let mut out = Vec::new();
    for name in names
        .iter()
        .filter(|n| want_dev.as_ref().is_none_or(|d| d == *n))
    {
        let ctx = Context::open(name).map_err(|e| e.to_string())?;
        let dev = ctx.query_device().map_err(|e| e.to_string())?;
        for port in 1..=dev.phys_port_cnt {
            if want_port.is_some_and(|p| p != port) {
                continue;
            }
            let attr = ctx.query_port(port).map_err(|e| e.to_string())?;
            let roce = attr.link_layer != 1;
            let gids = select::read_gid_table(FsPath::new(select::SYSFS), name, port);
            let choice = if attr.state != 4 {
                Err(format!("port is {}", port_state(attr.state)))
            } else if roce {
                select::choose_gid(&gids, local, forced_gid)
            } else {
                // InfiniBand: the LID routes; GID 0 is the port GUID.
                let g = ctx.query_gid(port, 0).map_err(|e| e.to_string())?;
                Ok(GidChoice {
                    entry: select::GidEntry {
                        index: forced_gid.unwrap_or(0),
                        gid: g,
                        kind: GidKind::RoceV1OrIb,
                        netdev: None,
                    },
                    score: 50,
                    why: format!("InfiniBand port, LID {}", attr.lid),
                })
            };
            out.push(PortReport {
                device: name.clone(),
                port,
                state: port_state(attr.state),
                active_mtu: select::mtu_bytes(attr.active_mtu),
                max_mtu: select::mtu_bytes(attr.max_mtu),
                link_layer: if roce { "Ethernet" } else { "InfiniBand" },
                gids,
                choice,
                max_msg_sz: attr.max_msg_sz,
            });
        }
    }
    Ok(out)
}

/// The prefix length of local address `ip` (from the interface list), 32/128 if unknown.
pub fn prefix_of(ip: IpAddr) -> u8 {
    if let Ok(ifs) = if_addrs::get_if_addrs() {
        for i in ifs {
            if i.ip() == ip {
                if let Some(p) = match i.addr {
                    if_addrs::IfAddr::V4(a) => Some(u32::from(a.netmask).count_ones()),
                    if_addrs::IfAddr::V6(a) => Some(u128::from(a.netmask).count_ones()),
                } {
                    return p as u8;
                }
            }
        }
    }
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

/// Chooses device, port and GID for traffic from `local` (see [`select`]).
pub fn choose(local: Option<IpAddr>, opts: &Options) -> Result<Selection, String> {
    let local = local.map(|ip| (ip, prefix_of(ip)));
    let ports = probe(local, opts.hca.as_deref(), opts.gid_index)?;
    if ports.is_empty() {
        return Err("no RDMA devices".into());
    }
    let best = ports
        .iter()
        .filter_map(|p| p.choice.as_ref().ok().map(|c| (c.score, p, c)))
        .max_by_key(|(s, p, _)| (*s, std::cmp::Reverse((p.device.clone(), p.port))));
    match best {
        Some((_, p, c)) => {
            let ctx = Context::open(&p.device).map_err(|e| e.to_string())?;
            let attr = ctx.query_port(p.port).map_err(|e| e.to_string())?;
            Ok(Selection {
                device: p.device.clone(),
                port: p.port,
                gid: c.clone(),
                active_mtu: attr.active_mtu,
                lid: attr.lid,
                roce: attr.link_layer != 1,
            })
        }
        None => Err(ports
            .iter()
            .map(|p| match &p.choice {
                Err(e) => format!("{} port {}: {e}", p.device, p.port),
                Ok(_) => String::new(),
            })
            .collect::<Vec<_>>()
            .join("; ")),
    }
}

/// Chooses device, port and GID for this rank of a connected TCP group: for traffic from
/// `bind`, or else from the address its connections use.
pub fn choose_for(
    tcp: &TcpTransport,
    bind: Option<IpAddr>,
    opts: &Options,
) -> Result<Selection, String> {
    choose(bind.or_else(|| tcp.local_ip()), opts)
}

/// Tells every rank whether this one can use verbs and learns the same from them: the
/// ranks that cannot (empty: the whole group can upgrade). Every rank must call it.
pub fn agree(
    tcp: &mut TcpTransport,
    usable: bool,
    deadline: Instant,
) -> Result<Vec<Rank>, TransportError> {
    let me = tcp.rank();
    let others: Vec<Rank> = (0..tcp.nranks())
        .map(Rank::from)
        .filter(|&r| r != me)
        .collect();
    for &p in &others {
        send_control(tcp, p, endpoint_tag(2), &[u8::from(usable)], deadline)?;
    }
    let mut without: Vec<Rank> = Vec::new();
    if !usable {
        without.push(me);
    }
    for &p in &others {
        if recv_control(tcp, p, endpoint_tag(2), deadline)?.first() != Some(&1) {
            without.push(p);
        }
    }
    without.sort();
    Ok(without)
}

// ---------------------------------------------------------------------------------------
// Wire formats (pure).

/// A slot the receiver lends: the sender may write up to `len` bytes at `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Credit {
    id: u32,
    addr: u64,
    rkey: u32,
    len: u32,
}

impl Credit {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.addr.to_le_bytes());
        out.extend_from_slice(&self.rkey.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Option<Credit> {
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        Some(Credit {
            id: u32_at(0)?,
            addr: u64::from_le_bytes(b.get(4..12)?.try_into().ok()?),
            rkey: u32_at(12)?,
            len: u32_at(16)?,
        })
    }
}

/// What a rank tells a peer about its end of their queue pair.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Endpoint {
    qpn: u32,
    psn: u32,
    lid: u16,
    mtu: u8,
    gid_kind: u8,
    gid: [u8; 16],
    credits: Vec<Credit>,
}

impl Endpoint {
    fn encode(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(32 + self.credits.len() * CREDIT_BYTES);
        o.extend_from_slice(&MAGIC.to_le_bytes());
        o.extend_from_slice(&self.qpn.to_le_bytes());
        o.extend_from_slice(&self.psn.to_le_bytes());
        o.extend_from_slice(&self.lid.to_le_bytes());
        o.push(self.mtu);
        o.push(self.gid_kind);
        o.extend_from_slice(&self.gid);
        o.extend_from_slice(&(self.credits.len() as u32).to_le_bytes());
        for c in &self.credits {
            c.encode(&mut o);
        }
        o
    }

    fn decode(b: &[u8]) -> Option<Endpoint> {
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        if u32_at(0)? != MAGIC {
            return None;
        }
        let n = u32_at(32)? as usize;
        let body = b.get(36..)?;
        if body.len() != n.checked_mul(CREDIT_BYTES)? {
            return None;
        }
        Some(Endpoint {
            qpn: u32_at(4)?,
            psn: u32_at(8)?,
            lid: u16::from_le_bytes(b.get(12..14)?.try_into().ok()?),
            mtu: *b.get(14)?,
            gid_kind: *b.get(15)?,
            gid: b.get(16..32)?.try_into().ok()?,
            credits: body
                .chunks(CREDIT_BYTES)
                .filter_map(Credit::decode)
                .collect(),
        })
    }
}

fn encode_header(tag: Tag, len: usize, out: &mut [u8]) {
    out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    out[4..6].copy_from_slice(&tag.channel.to_le_bytes());
    out[6..8].copy_from_slice(&[0, 0]);
    out[8..12].copy_from_slice(&tag.collective.to_le_bytes());
    out[12..16].copy_from_slice(&tag.transfer.to_le_bytes());
    out[16..20].copy_from_slice(&tag.segment.to_le_bytes());
    out[20..24].copy_from_slice(&tag.schedule.to_le_bytes());
    out[24..28].copy_from_slice(&(len as u32).to_le_bytes());
    out[28..32].copy_from_slice(&[0; 4]);
}

fn decode_header(b: &[u8]) -> Option<(Tag, usize)> {
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    if u32_at(0)? != MAGIC {
        return None;
    }
    let tag = Tag {
        channel: u16::from_le_bytes(b.get(4..6)?.try_into().ok()?),
        collective: u32_at(8)?,
        transfer: u32_at(12)?,
        segment: u32_at(16)?,
        schedule: u32_at(20)?,
    };
    Some((tag, u32_at(24)? as usize))
}

// ---------------------------------------------------------------------------------------
// Registered caller memory.

/// Smallest send from registered caller memory that goes zero-copy: below it, copying into
/// a slot (and inline sends) costs less than a second gather entry and a completion.
pub const ZERO_COPY_MIN: usize = 16 * 1024;

/// Address ranges of registered caller memory, shared with their owners' guards.
#[derive(Clone, Default)]
struct Registry(Arc<Mutex<BTreeMap<usize, (usize, u32)>>>);

impl Registry {
    /// The local key of registered memory covering `[start, start + len)`.
    fn lookup(&self, start: usize, len: usize) -> Option<u32> {
        let map = self.0.lock().ok()?;
        let (_, &(end, lkey)) = map.range(..=start).next_back()?;
        (start + len <= end).then_some(lkey)
    }
}

/// A [`Registered`]'s registration: dropped before its memory, it leaves the registry and
/// deregisters. While a send from the memory is in flight the caller holds a borrow of it
/// (see [`Transport::try_send_borrowed`]), so it cannot be dropped then.
struct Guard {
    start: usize,
    registry: Registry,
    _mr: MemoryRegion,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(mut map) = self.registry.0.lock() {
            map.remove(&self.start);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The transport.

/// Work request ids: kind in the top byte, peer and index below.
const WR_DATA: u64 = 1 << 56;
const WR_INLINE: u64 = 2 << 56;
const WR_CREDIT: u64 = 3 << 56;
const WR_RECV: u64 = 4 << 56;
const WR_HELLO: u64 = 5 << 56;
const WR_KIND: u64 = 0xff << 56;

fn wr(kind: u64, peer: usize, index: u32) -> u64 {
    kind | ((peer as u64 & 0xff_ffff) << 32) | u64::from(index)
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
    /// Slots the peer should get but no buffer was free for.
    deficit: usize,
    /// Send work requests posted and not completed.
    sends: u32,
    /// Receive buffers for credit messages (`depth` × [`CTRL_BYTES`]), registered.
    ctrl: Vec<u8>,
    ctrl_mr: MemoryRegion,
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
    /// Whether to send from registered caller memory (`Options::zero_copy`).
    zero_copy_on: bool,
    cq: CompletionQueue,
    pd: Arc<ProtectionDomain>,
    _channel: Arc<CompletionChannel>,
    /// Last: closes gracefully after the queue pairs are gone.
    tcp: TcpTransport,
}

fn endpoint_tag(step: u32) -> Tag {
    Tag {
        collective: 0xffff_fff0,
        channel: 0,
        transfer: step,
        segment: 0,
        schedule: 0,
    }
}

/// Joins the group over TCP ([`bootstrap::connect`]), then connects every pair with
/// queue pairs ([`upgrade`]).
pub fn connect(
    boot: &bootstrap::Options,
    opts: &Options,
) -> Result<VerbsTransport, TransportError> {
    let tcp = bootstrap::connect(boot)?;
    let sel = choose(boot.bind.or_else(|| tcp.local_ip()), opts).map_err(|reason| {
        TransportError::NoDevice {
            rank: Rank::from(boot.rank),
            reason,
        }
    })?;
    upgrade(tcp, sel, opts, Instant::now() + boot.timeout)
}

/// Turns a connected TCP group into a verbs group using `sel` on this rank: every rank of
/// the group must call it (the TCP connections carry the endpoints and stay as the
/// control plane).
pub fn upgrade(
    mut tcp: TcpTransport,
    sel: Selection,
    opts: &Options,
    deadline: Instant,
) -> Result<VerbsTransport, TransportError> {
    let rank = tcp.rank();
    let nranks = tcp.nranks();
    let verr = |peer: Option<usize>| {
        move |e: VerbsError| TransportError::Verbs {
            rank,
            peer: peer.map(Rank::from),
            verb: e.verb,
            errno: e.errno,
            message: e.message,
        }
    };
    let ctx = Context::open(&sel.device).map_err(verr(None))?;
    let pd = ProtectionDomain::new(&ctx).map_err(verr(None))?;
    let channel = CompletionChannel::new(&ctx).map_err(verr(None))?;
    let window = opts.window.max(2);
    let recv_depth = (2 * window + 8) as u32;
    let send_depth = (2 * window + 8) as u32;
    let dev = ctx.query_device().map_err(verr(None))?;
    let cq_entries = ((nranks.max(2) - 1) as i64 * i64::from(recv_depth + send_depth))
        .clamp(16, i64::from(dev.max_cqe.max(16))) as i32;
    let cq = CompletionQueue::new(&ctx, &channel, cq_entries).map_err(verr(None))?;
    tcp.watch_fd(cq.fd()).map_err(|e| TransportError::Verbs {
        rank,
        peer: None,
        verb: "epoll_ctl",
        errno: e.raw_os_error().unwrap_or(0),
        message: format!("cannot watch the completion channel: {e}"),
    })?;
    let mut t = VerbsTransport {
        rank,
        nranks,
        peers: (0..nranks).map(|_| None).collect(),
        by_qpn: HashMap::new(),
        bufs: Vec::new(),
        free: Vec::new(),
        lent: HashMap::new(),
        inflight: HashMap::new(),
        next_wr: 0,
        arrived: HashMap::new(),
        broken: None,
        completions: Vec::with_capacity(64),
        slot_bytes: opts.slot_bytes,
        send_depth,
        per_credit_msg: 1,
        selection: sel.clone(),
        last_control: Instant::now(),
        spin: opts.spin,
        window,
        registry: Registry::default(),
        zero_copy: 0,
        zero_copy_on: opts.zero_copy,
        cq,
        pd,
        _channel: channel,
        tcp,
    };
    // Queue pairs, receive buffers and first credits for every peer.
    let psn = |peer: usize| ((rank.index() as u32) << 12 ^ (peer as u32) << 2 ^ 0x5a5a) & 0xff_ffff;
    let mut mine = Vec::new();
    for p in (0..nranks).filter(|&p| p != rank.index()) {
        let qp =
            QueuePair::new(&t.pd, &t.cq, send_depth, recv_depth, 256).map_err(verr(Some(p)))?;
        let mut ctrl = vec![0u8; recv_depth as usize * CTRL_BYTES];
        // SAFETY-free: registration goes through `register_vec`, see there.
        let ctrl_mr = t.register_vec(&mut ctrl).map_err(verr(Some(p)))?;
        t.per_credit_msg = ((qp.max_inline as usize).saturating_sub(4) / CREDIT_BYTES).max(1);
        t.by_qpn.insert(qp.qpn(), p);
        let mut credits = Vec::with_capacity(window);
        let mut advertised = HashMap::new();
        for _ in 0..window {
            let (id, v) = t.take_buffer().map_err(verr(Some(p)))?;
            credits.push(t.credit_for(id, &v));
            advertised.insert(id, v);
        }
        mine.push(Endpoint {
            qpn: qp.qpn(),
            psn: psn(p),
            lid: sel.lid,
            mtu: sel.active_mtu as u8,
            gid_kind: sel.gid.entry.kind as u8,
            gid: sel.gid.entry.gid,
            credits,
        });
        t.peers[p] = Some(Peer {
            qp,
            credits: VecDeque::new(),
            advertised,
            owed: Vec::new(),
            deficit: 0,
            sends: 0,
            ctrl,
            ctrl_mr,
            hello: false,
        });
    }
    // Exchange endpoints over TCP.
    let others: Vec<usize> = (0..nranks).filter(|&p| p != rank.index()).collect();
    for (p, ep) in others.iter().zip(&mine) {
        send_control(
            &mut t.tcp,
            Rank::from(*p),
            endpoint_tag(0),
            &ep.encode(),
            deadline,
        )?;
    }
    for &p in &others {
        let bytes = recv_control(&mut t.tcp, Rank::from(p), endpoint_tag(0), deadline)?;
        let ep = Endpoint::decode(&bytes).ok_or_else(|| TransportError::Bootstrap {
            rank,
            reason: format!("malformed verbs endpoint from {}", Rank::from(p)),
        })?;
        let local = &t.selection.gid.entry;
        let their_v4 = std::net::Ipv6Addr::from(ep.gid).to_ipv4_mapped().is_some();
        if sel.roce && local.ipv4().is_some() != their_v4 {
            return Err(TransportError::NoDevice {
                rank,
                reason: format!(
                    "{local} on {} cannot reach {}'s GID {} ({}): one is IPv4-mapped and the \
                     other is not{}",
                    sel.device,
                    Rank::from(p),
                    std::net::Ipv6Addr::from(ep.gid),
                    if ep.gid_kind == GidKind::RoceV2 as u8 {
                        "RoCE v2"
                    } else {
                        "other type"
                    },
                    if opts.gid_index.is_some() {
                        "; check RCOLL_IB_GID_INDEX"
                    } else {
                        ""
                    }
                ),
            });
        }
        let path = ffi::Path {
            port: sel.port,
            gid_index: local.index as u8,
            mtu: u32::from(ep.mtu).min(sel.active_mtu).max(1),
            global: sel.roce,
            timeout: opts.ack_timeout,
        };
        let remote = Remote {
            qpn: ep.qpn,
            psn: ep.psn,
            lid: ep.lid,
            gid: ep.gid,
        };
        let peer = t.peers[p].as_mut().ok_or(TransportError::InvalidPeer {
            rank,
            peer: Rank::from(p),
            nranks,
        })?;
        peer.qp
            .connect(&path, psn(p), &remote)
            .map_err(verr(Some(p)))?;
        peer.credits.extend(ep.credits);
        for i in 0..recv_depth {
            t.post_ctrl_recv(p, i).map_err(verr(Some(p)))?;
        }
    }
    // Everyone's receives are posted before anyone writes; then check the path works.
    for &p in &others {
        send_control(
            &mut t.tcp,
            Rank::from(p),
            endpoint_tag(1),
            b"ready",
            deadline,
        )?;
    }
    for &p in &others {
        recv_control(&mut t.tcp, Rank::from(p), endpoint_tag(1), deadline)?;
    }
    for &p in &others {
        let peer = t.peers[p].as_mut().ok_or(TransportError::InvalidPeer {
            rank,
            peer: Rank::from(p),
            nranks,
        })?;
        let sge = Sge {
            addr: 0,
            len: 0,
            lkey: 0,
        };
        // SAFETY: a zero-length write reads no local memory.
        unsafe {
            peer.qp
                .post_write_imm(wr(WR_HELLO, p, 0), &[sge], 0, 0, HELLO, false)
        }
        .map_err(verr(Some(p)))?;
        peer.sends += 1;
    }
    loop {
        t.progress();
        if let Some(e) = &t.broken {
            return Err(e.clone());
        }
        let pending = t.peers.iter().flatten().any(|p| !p.hello || p.sends > 0);
        if !pending {
            break;
        }
        if Instant::now() >= deadline {
            let missing: Vec<String> = t
                .peers
                .iter()
                .enumerate()
                .filter_map(|(i, p)| {
                    p.as_ref()
                        .filter(|p| !p.hello)
                        .map(|_| Rank::from(i).to_string())
                })
                .collect();
            return Err(TransportError::Bootstrap {
                rank,
                reason: format!(
                    "no RDMA connectivity check from {} before the deadline ({})",
                    missing.join(", "),
                    t.selection.gid.why
                ),
            });
        }
        t.wait_inner(deadline.min(Instant::now() + Duration::from_millis(50)))?;
    }
    tracing::info!(
        rank = %rank,
        device = %sel.device,
        port = sel.port,
        gid = %sel.gid.why,
        mtu = select::mtu_bytes(sel.active_mtu),
        "verbs queue pairs connected"
    );
    Ok(t)
}

fn send_control(
    tcp: &mut TcpTransport,
    peer: Rank,
    tag: Tag,
    data: &[u8],
    deadline: Instant,
) -> Result<(), TransportError> {
    while !tcp.try_send_slice(peer, tag, data)? {
        if Instant::now() >= deadline {
            return Err(TransportError::Timeout {
                rank: tcp.rank(),
                peer,
                what: "sending the verbs endpoint".into(),
                waited: Duration::ZERO,
            });
        }
        tcp.wait(deadline)?;
    }
    Ok(())
}

fn recv_control(
    tcp: &mut TcpTransport,
    peer: Rank,
    tag: Tag,
    deadline: Instant,
) -> Result<Vec<u8>, TransportError> {
    let start = Instant::now();
    loop {
        // The length is not known in advance: take whatever arrived under the tag.
        match tcp.take_any(peer, tag) {
            Some(p) => return Ok(p.as_bytes().to_vec()),
            None => {
                if let Some(e) = tcp.peer_gone(peer) {
                    return Err(e);
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(TransportError::Timeout {
                rank: tcp.rank(),
                peer,
                what: "the peer's verbs endpoint".into(),
                waited: start.elapsed(),
            });
        }
        tcp.wait(deadline)?;
    }
}

impl VerbsTransport {
    /// The device, port and GID this rank uses.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// Registers `v`'s memory (its whole length).
    fn register_vec(&self, v: &mut Vec<u8>) -> Result<MemoryRegion, VerbsError> {
        // SAFETY: every registered Vec is owned by this transport (in `free`, a peer's
        // `advertised` or `ctrl`, or `inflight`) or lent to the caller and tracked in
        // `lent`; the regions are deregistered when the transport drops (peers' queue
        // pairs are destroyed first, so the device no longer touches them). While the
        // device may access a buffer, it is in `advertised`, `ctrl` or `inflight`, where
        // no Rust reference to its bytes is used.
        unsafe { MemoryRegion::register(&self.pd, v.as_mut_ptr(), v.len(), true) }
    }

    /// A free registered buffer of header + slot bytes, registering a new one if needed.
    fn take_buffer(&mut self) -> Result<(u32, Vec<u8>), VerbsError> {
        if let Some(b) = self.free.pop() {
            return Ok(b);
        }
        let mut v = vec![0u8; HEADER + self.slot_bytes];
        let mr = self.register_vec(&mut v)?;
        let id = self.bufs.len() as u32;
        self.bufs.push(Buf {
            mr,
            ptr: v.as_ptr() as usize,
        });
        Ok((id, v))
    }

    fn credit_for(&self, id: u32, v: &[u8]) -> Credit {
        Credit {
            id,
            addr: v.as_ptr() as u64,
            rkey: self.bufs[id as usize].mr.rkey(),
            len: v.len() as u32,
        }
    }

    fn post_ctrl_recv(&mut self, p: usize, i: u32) -> Result<(), VerbsError> {
        let Some(peer) = self.peers[p].as_mut() else {
            return Ok(());
        };
        let sge = Sge {
            addr: peer.ctrl.as_ptr() as u64 + u64::from(i) * CTRL_BYTES as u64,
            len: CTRL_BYTES as u32,
            lkey: peer.ctrl_mr.lkey(),
        };
        // SAFETY: `ctrl` is registered, owned by the peer entry (dropped after its QP) and
        // only read after this receive's completion.
        unsafe { peer.qp.post_recv(wr(WR_RECV, p, i), sge) }
    }

    fn verbs_error(&self, peer: Option<usize>, e: VerbsError) -> TransportError {
        TransportError::Verbs {
            rank: self.rank,
            peer: peer.map(Rank::from),
            verb: e.verb,
            errno: e.errno,
            message: e.message,
        }
    }

    fn fail(&mut self, e: TransportError) {
        if self.broken.is_none() {
            tracing::warn!(error = %e, "verbs transport failed");
            self.broken = Some(e);
        }
    }

    /// Polls completions and handles them; then sends owed credits.
    fn progress(&mut self) {
        loop {
            self.completions.clear();
            let mut batch = std::mem::take(&mut self.completions);
            let n = match self.cq.poll(&mut batch, 16) {
                Ok(n) => n,
                Err(e) => {
                    let e = self.verbs_error(None, e);
                    self.fail(e);
                    0
                }
            };
            for c in &batch {
                self.complete(c);
            }
            self.completions = batch;
            if n < 16 {
                break;
            }
        }
        self.send_credits(false);
    }

    fn complete(&mut self, c: &ffi::Completion) {
        let p = ((c.wr_id >> 32) & 0xff_ffff) as usize;
        let kind = c.wr_id & WR_KIND;
        if c.status != ffi::WC_SUCCESS {
            let op = match kind {
                WR_DATA | WR_INLINE => "RDMA WRITE WITH IMM",
                WR_CREDIT => "SEND (credits)",
                WR_HELLO => "RDMA WRITE WITH IMM (connectivity check)",
                _ => "RECV",
            };
            let mut status = ffi::status_str(c.status);
            if kind == WR_HELLO || c.status == 12 {
                // Retries exhausted at setup is almost always addressing: say what was used.
                status = format!("{status}; local {}", self.selection.gid.why);
            }
            // Flushes after the first error repeat it; keep the first.
            self.fail(TransportError::Completion {
                rank: self.rank,
                peer: Rank::from(p),
                op,
                status,
                vendor_err: c.vendor_err,
            });
            return;
        }
        match kind {
            WR_DATA | WR_INLINE | WR_CREDIT | WR_HELLO => {
                if let Some(Some(peer)) = self.peers.get_mut(p) {
                    peer.sends = peer.sends.saturating_sub(1);
                }
                if let Some((id, v)) = self.inflight.remove(&c.wr_id) {
                    self.free.push((id, v));
                    self.replenish();
                }
            }
            WR_RECV => {
                let Some(&from) = self.by_qpn.get(&c.qp_num) else {
                    return;
                };
                let index = (c.wr_id & 0xffff_ffff) as u32;
                if c.opcode == ffi::WC_RECV_RDMA_WITH_IMM {
                    self.arrival(from, c.imm);
                } else if c.opcode == ffi::WC_RECV {
                    self.credits_arrived(from, index, c.byte_len as usize);
                }
                if let Err(e) = self.post_ctrl_recv(from, index) {
                    let e = self.verbs_error(Some(from), e);
                    self.fail(e);
                }
            }
            _ => {}
        }
    }

    fn arrival(&mut self, from: usize, imm: u32) {
        let me = self.rank;
        let Some(peer) = self.peers[from].as_mut() else {
            return;
        };
        if imm == HELLO {
            peer.hello = true;
            return;
        }
        let Some(v) = peer.advertised.remove(&imm) else {
            self.fail(TransportError::Bootstrap {
                rank: me,
                reason: format!(
                    "{} wrote to slot {imm}, which it was not lent",
                    Rank::from(from)
                ),
            });
            return;
        };
        peer.deficit += 1;
        match decode_header(&v) {
            Some((tag, len)) if len <= v.len() - HEADER => {
                self.lent.insert(v.as_ptr() as usize, imm);
                let payload = Payload::with_head(v, HEADER, len);
                if self
                    .arrived
                    .insert((Rank::from(from), tag.key()), (tag, payload))
                    .is_some()
                {
                    self.fail(TransportError::DuplicateTag {
                        rank: me,
                        peer: Rank::from(from),
                        tag,
                    });
                }
            }
            _ => {
                self.free.push((imm, v));
                self.fail(TransportError::Bootstrap {
                    rank: me,
                    reason: format!("malformed message header from {}", Rank::from(from)),
                });
            }
        }
        self.replenish();
    }

    fn credits_arrived(&mut self, from: usize, index: u32, len: usize) {
        let Some(peer) = self.peers[from].as_mut() else {
            return;
        };
        let at = index as usize * CTRL_BYTES;
        let Some(msg) = peer.ctrl.get(at..at + len.min(CTRL_BYTES)) else {
            return;
        };
        for c in msg.chunks_exact(CREDIT_BYTES) {
            if let Some(c) = Credit::decode(c) {
                peer.credits.push_back(c);
            }
        }
    }

    /// Gives peers that are owed slots a free (or newly registered) buffer each.
    fn replenish(&mut self) {
        for p in 0..self.peers.len() {
            while self.peers[p].as_ref().is_some_and(|x| x.deficit > 0) {
                let (id, mut v) = match self.take_buffer() {
                    Ok(b) => b,
                    Err(e) => {
                        let e = self.verbs_error(Some(p), e);
                        self.fail(e);
                        return;
                    }
                };
                v.resize(HEADER + self.slot_bytes, 0);
                let credit = self.credit_for(id, &v);
                if let Some(peer) = self.peers[p].as_mut() {
                    peer.deficit -= 1;
                    peer.advertised.insert(id, v);
                    peer.owed.push(credit);
                }
            }
        }
    }

    /// Sends owed credits: in batches of a message's worth (or half the window), or all
    /// of them with `all` (before blocking). A sender out of credits has used its whole
    /// window, so this rank owes it at least a batch: batching cannot stall it.
    fn send_credits(&mut self, all: bool) {
        let per = self.per_credit_msg;
        let batch = if all {
            1
        } else {
            per.min(self.window / 2).max(1)
        };
        let depth = self.send_depth;
        for p in 0..self.peers.len() {
            let Some(peer) = self.peers[p].as_mut() else {
                continue;
            };
            while peer.owed.len() >= batch && peer.sends < depth {
                let n = peer.owed.len().min(per);
                let mut msg = Vec::with_capacity(n * CREDIT_BYTES);
                for c in peer.owed.drain(..n) {
                    c.encode(&mut msg);
                }
                match peer.qp.post_send_inline(wr(WR_CREDIT, p, 0), &msg) {
                    Ok(()) => peer.sends += 1,
                    Err(e) => {
                        let e = self.verbs_error(Some(p), e);
                        self.fail(e);
                        return;
                    }
                }
            }
        }
    }

    fn check(&mut self) -> Result<(), TransportError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        Ok(())
    }

    /// Checks the control plane (aborts, dead peers) at most every millisecond.
    fn control(&mut self, force: bool) -> Result<(), TransportError> {
        if force || self.last_control.elapsed() >= Duration::from_millis(1) {
            self.last_control = Instant::now();
            self.tcp.control()?;
        }
        Ok(())
    }

    /// Whether a write to peer `p` can be posted now: a remote slot and send-queue room.
    fn ready_to_send(&self, p: usize) -> bool {
        self.peers[p]
            .as_ref()
            .is_some_and(|x| !x.credits.is_empty() && x.sends < self.send_depth)
    }

    /// Whether a write to peer `p` can be posted, after taking completions if not at
    /// first; an error if the peer is gone (it will never grant room again).
    fn room_for(&mut self, p: usize) -> Result<bool, TransportError> {
        if self.ready_to_send(p) {
            return Ok(true);
        }
        self.progress();
        self.check()?;
        if self.ready_to_send(p) {
            return Ok(true);
        }
        self.control(false)?;
        match self.tcp.peer_gone(Rank::from(p)) {
            Some(e) => Err(e),
            None => Ok(false),
        }
    }

    fn peer_index(&self, peer: Rank) -> Result<usize, TransportError> {
        match self.peers.get(peer.index()) {
            Some(Some(_)) => Ok(peer.index()),
            _ => Err(TransportError::InvalidPeer {
                rank: self.rank,
                peer,
                nranks: self.nranks,
            }),
        }
    }

    fn wait_inner(&mut self, deadline: Instant) -> Result<(), TransportError> {
        self.send_credits(true);
        if let Err(e) = self.cq.arm() {
            let e = self.verbs_error(None, e);
            self.fail(e);
        }
        // A completion that landed before arming raises no event: poll once more.
        let before = (self.arrived.len(), self.free.len(), self.inflight.len());
        self.progress();
        if (self.arrived.len(), self.free.len(), self.inflight.len()) != before {
            return Ok(());
        }
        self.tcp.wait(deadline)?;
        self.cq.drain_events();
        self.progress();
        Ok(())
    }
}

impl TcpTransport {
    /// Takes the message `tag` from `peer` whatever its length (control messages).
    fn take_any(&mut self, peer: Rank, tag: Tag) -> Option<Payload> {
        let _ = self.control();
        self.take_unchecked(peer, tag)
    }
}

impl Transport for VerbsTransport {
    fn name(&self) -> &'static str {
        "verbs"
    }

    fn rank(&self) -> Rank {
        self.rank
    }

    fn nranks(&self) -> usize {
        self.nranks
    }

    fn alloc(&mut self, len: usize) -> Payload {
        if len <= self.slot_bytes {
            if let Ok((id, v)) = self.take_buffer() {
                self.lent.insert(v.as_ptr() as usize, id);
                return Payload::with_head(v, HEADER, len);
            }
        }
        // Too large (try_send refuses it with a typed error) or registration failed
        // (try_send copies it into a registered buffer).
        Payload::with_head(Vec::new(), HEADER, len)
    }

    fn try_send(
        &mut self,
        peer: Rank,
        tag: Tag,
        payload: Payload,
    ) -> Result<Option<Payload>, TransportError> {
        self.check()?;
        let p = self.peer_index(peer)?;
        let len = payload.len();
        if len > self.slot_bytes {
            return Err(TransportError::MessageTooLarge {
                rank: self.rank,
                peer,
                len,
                max: self.slot_bytes,
            });
        }
        if !self.room_for(p)? {
            return Ok(Some(payload));
        }
        // The message must sit in one of this transport's registered buffers.
        let mut payload = payload;
        let id = if payload.head() == HEADER {
            self.lent.remove(&(payload.framed_mut().as_ptr() as usize))
        } else {
            None
        };
        let (id, mut v) = match id {
            Some(id) => (id, payload.into_storage()),
            None => {
                let (id, mut v) = self
                    .take_buffer()
                    .map_err(|e| self.verbs_error(Some(p), e))?;
                v[HEADER..HEADER + len].copy_from_slice(payload.as_bytes());
                (id, v)
            }
        };
        encode_header(tag, len, &mut v[..HEADER]);
        let lkey = self.bufs[id as usize].mr.lkey();
        let total = HEADER + len;
        let Some(peer_state) = self.peers[p].as_mut() else {
            return Err(TransportError::InvalidPeer {
                rank: self.rank,
                peer,
                nranks: self.nranks,
            });
        };
        let Some(credit) = peer_state.credits.pop_front() else {
            return Err(TransportError::InvalidPeer {
                rank: self.rank,
                peer,
                nranks: self.nranks,
            });
        };
        if total > credit.len as usize {
            return Err(TransportError::MessageTooLarge {
                rank: self.rank,
                peer,
                len,
                max: (credit.len as usize).saturating_sub(HEADER),
            });
        }
        let inline = total <= peer_state.qp.max_inline as usize;
        self.next_wr = self.next_wr.wrapping_add(1);
        let wr_id = wr(if inline { WR_INLINE } else { WR_DATA }, p, self.next_wr);
        let sge = Sge {
            addr: v.as_ptr() as u64,
            len: total as u32,
            lkey,
        };
        // SAFETY: `v` is registered (buffer `id`); unless inline it moves into `inflight`
        // below, untouched until this work request completes; inline data is copied
        // during the call while `v` is alive.
        let posted = unsafe {
            peer_state
                .qp
                .post_write_imm(wr_id, &[sge], credit.addr, credit.rkey, credit.id, inline)
        };
        if let Err(e) = posted {
            self.free.push((id, v));
            return Err(self.verbs_error(Some(p), e));
        }
        peer_state.sends += 1;
        if inline {
            self.free.push((id, v));
        } else {
            self.inflight.insert(wr_id, (id, v));
        }
        Ok(None)
    }

    fn alloc_registered(&mut self, bytes: usize) -> Result<Registered, TransportError> {
        let mut words = vec![0u64; bytes.div_ceil(8).max(1)];
        let start = words.as_ptr() as usize;
        // SAFETY: the region covers `words`, which the returned `Registered` owns; the
        // guard holding the region is dropped before `words` (field order of `Registered`).
        // The device only reads the memory, for sends posted by `try_send_borrowed` while
        // the caller holds a borrow of it; no remote access is granted.
        let mr = unsafe {
            MemoryRegion::register(&self.pd, words.as_mut_ptr().cast(), words.len() * 8, false)
        }
        .map_err(|e| self.verbs_error(None, e))?;
        let lkey = mr.lkey();
        if let Ok(mut map) = self.registry.0.lock() {
            map.insert(start, (start + words.len() * 8, lkey));
        }
        let guard = Guard {
            start,
            registry: self.registry.clone(),
            _mr: mr,
        };
        Ok(Registered::with_registration(words, bytes, Box::new(guard)))
    }

    fn try_send_borrowed(
        &mut self,
        peer: Rank,
        tag: Tag,
        data: &[u8],
    ) -> Result<SendState, TransportError> {
        let lkey = match data.len() {
            _ if !self.zero_copy_on => None,
            n if n < ZERO_COPY_MIN || n > self.slot_bytes => None,
            n => self.registry.lookup(data.as_ptr() as usize, n),
        };
        let Some(lkey) = lkey else {
            return self.try_send_slice(peer, tag, data).map(SendState::sent);
        };
        self.check()?;
        let p = self.peer_index(peer)?;
        if !self.room_for(p)? {
            return Ok(SendState::NoRoom);
        }
        // The header from a slot buffer (in flight with the write), the data from the
        // caller's registered memory: one write gathers both into the peer's slot.
        let (id, mut head) = self
            .take_buffer()
            .map_err(|e| self.verbs_error(Some(p), e))?;
        encode_header(tag, data.len(), &mut head[..HEADER]);
        let sges = [
            Sge {
                addr: head.as_ptr() as u64,
                len: HEADER as u32,
                lkey: self.bufs[id as usize].mr.lkey(),
            },
            Sge {
                addr: data.as_ptr() as u64,
                len: data.len() as u32,
                lkey,
            },
        ];
        self.next_wr = self.next_wr.wrapping_add(1);
        let wr_id = wr(WR_DATA, p, self.next_wr);
        let Some(state) = self.peers[p].as_mut() else {
            self.free.push((id, head));
            return Err(TransportError::InvalidPeer {
                rank: self.rank,
                peer,
                nranks: self.nranks,
            });
        };
        let Some(credit) = state.credits.pop_front() else {
            self.free.push((id, head));
            return Ok(SendState::NoRoom);
        };
        // SAFETY: the header buffer is registered and moves into `inflight` until the
        // completion; `data` lies in registered caller memory (`lkey` from the registry),
        // which the caller keeps borrowed and unmodified until `send_complete` reports
        // this work request done (the trait's contract for `InFlight`).
        let posted = unsafe {
            state
                .qp
                .post_write_imm(wr_id, &sges, credit.addr, credit.rkey, credit.id, false)
        };
        if let Err(e) = posted {
            self.free.push((id, head));
            return Err(self.verbs_error(Some(p), e));
        }
        state.sends += 1;
        self.inflight.insert(wr_id, (id, head));
        self.zero_copy += 1;
        Ok(SendState::InFlight(wr_id))
    }

    fn zero_copy_sends(&self) -> u64 {
        self.zero_copy
    }

    fn send_complete(&mut self, token: u64) -> Result<bool, TransportError> {
        if !self.inflight.contains_key(&token) {
            return Ok(true);
        }
        self.progress();
        self.check()?;
        Ok(!self.inflight.contains_key(&token))
    }

    fn try_recv(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Payload>, TransportError> {
        self.check()?;
        let p = self.peer_index(peer)?;
        let key = (peer, tag.key());
        let mut found = self.arrived.remove(&key);
        if found.is_none() {
            self.progress();
            self.check()?;
            found = self.arrived.remove(&key);
        }
        if found.is_none() {
            self.control(false)?;
            if let Some(gone) = self.tcp.peer_gone(Rank::from(p)) {
                // Its last messages may still be in the completion queue.
                self.progress();
                found = Some(self.arrived.remove(&key).ok_or(gone)?);
            }
        }
        match found {
            Some((sent, payload)) => {
                check_arrival(self.rank, peer, tag, sent, payload, len).map(Some)
            }
            None => Ok(None),
        }
    }

    fn recycle(&mut self, mut payload: Payload) {
        if payload.head() != HEADER {
            return;
        }
        let ptr = payload.framed_mut().as_ptr() as usize;
        if let Some(id) = self.lent.remove(&ptr) {
            let v = payload.into_storage();
            if self.bufs.get(id as usize).is_some_and(|b| b.ptr == ptr) {
                self.free.push((id, v));
                self.replenish();
            }
        }
    }

    fn wait(&mut self, deadline: Instant) -> Result<(), TransportError> {
        self.check()?;
        // Aborts and dead peers: checked at most every millisecond here too (a socket read
        // per peer is a system call; blocking below wakes on the sockets anyway).
        self.control(false)?;
        // A bounded busy-poll of the completion queue first: a completion a few
        // microseconds away costs less to spin for than an interrupt and a wake-up.
        // Only while none of this rank's writes are in flight: on a loaded host (Soft-RoCE
        // is the kernel's work on the same CPUs) spinning through a bulk transfer delays
        // the very acknowledgements it waits for.
        let spin = if self.inflight.is_empty() {
            self.spin
        } else {
            Duration::ZERO
        };
        let spin_until = Instant::now() + spin;
        let before = (self.arrived.len(), self.free.len(), self.inflight.len());
        while Instant::now() < spin_until.min(deadline) {
            self.progress();
            self.check()?;
            if (self.arrived.len(), self.free.len(), self.inflight.len()) != before {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        self.wait_inner(deadline)?;
        self.check()
    }

    fn stale(&mut self, current: u32) -> Option<(Rank, Tag)> {
        // Only what has arrived: channels are FIFO, so a stale message is here before
        // anything its sender sent later, and a later call that hears from it sees it.
        crate::transport::stale_in(&self.arrived, current)
    }

    fn abort(&mut self, reason: &str) {
        self.tcp.abort(reason);
    }
}

impl Drop for VerbsTransport {
    /// Waits (briefly) for this rank's sends to complete, so that a peer still gets the
    /// last messages, then destroys queue pairs before the memory they use.
    fn drop(&mut self) {
        let until = Instant::now() + Duration::from_secs(2);
        while self.broken.is_none()
            && self.peers.iter().flatten().any(|p| p.sends > 0)
            && Instant::now() < until
        {
            self.progress();
            std::thread::yield_now();
        }
        // Queue pairs first (the device stops touching every buffer), then the buffers'
        // regions; the CQ, channel, domain and context follow through their `Arc`s.
        self.peers.clear();
        self.inflight.clear();
        self.bufs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_round_trips_and_rejects_garbage() {
        let ep = Endpoint {
            qpn: 0x11,
            psn: 0x22_3344,
            lid: 7,
            mtu: 3,
            gid_kind: 0,
            gid: [9; 16],
            credits: vec![
                Credit {
                    id: 1,
                    addr: 0xdead_beef_0000,
                    rkey: 0x1234,
                    len: 131_104,
                },
                Credit {
                    id: 2,
                    addr: 8,
                    rkey: 9,
                    len: 10,
                },
            ],
        };
        let b = ep.encode();
        assert_eq!(Endpoint::decode(&b), Some(ep));
        assert_eq!(Endpoint::decode(&b[..b.len() - 1]), None);
        assert_eq!(Endpoint::decode(&[0; 40]), None);
    }

    #[test]
    fn header_round_trips() {
        let tag = Tag {
            collective: 5,
            channel: 1,
            transfer: 6,
            segment: 7,
            schedule: 0xabcd,
        };
        let mut h = [0u8; HEADER];
        encode_header(tag, 4096, &mut h);
        assert_eq!(decode_header(&h), Some((tag, 4096)));
        h[0] ^= 1;
        assert_eq!(decode_header(&h), None);
    }

    #[test]
    fn work_request_ids_keep_kind_peer_and_index() {
        let id = wr(WR_CREDIT, 513, 77);
        assert_eq!(id & WR_KIND, WR_CREDIT);
        assert_eq!((id >> 32) & 0xff_ffff, 513);
        assert_eq!(id & 0xffff_ffff, 77);
    }

    #[test]
    fn probing_without_rdma_is_an_explained_error_or_a_list() {
        // On a kernel without RDMA this explains ENOSYS; with devices it lists ports.
        match probe(None, None, None) {
            Err(e) => assert!(!e.is_empty()),
            Ok(ports) => {
                for p in ports {
                    assert!(p.port >= 1);
                }
            }
        }
    }
}
