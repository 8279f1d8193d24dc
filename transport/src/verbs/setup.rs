//! Forming a verbs group over a connected TCP group: agreeing whether every rank can use
//! RDMA, queue pairs and first credits per peer, endpoints exchanged over TCP, and a
//! connectivity check each way before the group is handed out.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ffi::{
    self, CompletionChannel, CompletionQueue, Context, ProtectionDomain, QueuePair, Remote, Sge,
};
use super::registry::Registry;
use super::select::{self, GidKind};
use super::wire::CREDIT_BYTES;
use super::wire::{wr, Endpoint, HELLO, WR_HELLO};
use super::{choose, Options, Peer, Selection, VerbsError, VerbsTransport, CTRL_BYTES};
use crate::error::TransportError;
use crate::tcp::control::Exchange;
use crate::tcp::{bootstrap, TcpTransport};
use crate::transport::Group;
use crate::transport::Transport;
use crate::types::Rank;

/// Tells every rank whether this one can use verbs and learns the same from them: the
/// ranks that cannot (empty: the whole group can upgrade). Every rank must call it.
pub fn agree(
    tcp: &mut TcpTransport,
    usable: bool,
    deadline: Instant,
) -> Result<Vec<Rank>, TransportError> {
    let me = tcp.endpoint().rank;
    let others: Vec<Rank> = (0..tcp.endpoint().nranks)
        .map(Rank::from)
        .filter(|&r| r != me)
        .collect();
    for &p in &others {
        tcp.send_control(p, Exchange::VerbsUsable, &[u8::from(usable)], deadline)?;
    }
    let mut without: Vec<Rank> = Vec::new();
    if !usable {
        without.push(me);
    }
    for &p in &others {
        if tcp
            .recv_control(p, Exchange::VerbsUsable, deadline)?
            .first()
            != Some(&1)
        {
            without.push(p);
        }
    }
    without.sort();
    Ok(without)
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
    upgrade(tcp, sel, opts, crate::types::deadline_after(boot.timeout))
}

/// Turns a connected TCP group into a verbs group using `sel` on this rank: every rank of
/// the group must call it (the TCP connections carry the endpoints and stay as the
/// control plane).
pub fn upgrade(
    tcp: TcpTransport,
    sel: Selection,
    opts: &Options,
    deadline: Instant,
) -> Result<VerbsTransport, TransportError> {
    upgrade_for(tcp, sel, opts, deadline, &|_| true)
}

/// [`upgrade`] with queue pairs only to the peers `reach` names, which must be symmetric
/// (rank a reaches b over verbs exactly when b reaches a): the others are carried by
/// another transport (shared memory inside a host) and cost no queue pair, receive
/// buffers or lent slots here.
pub fn upgrade_for(
    mut tcp: TcpTransport,
    sel: Selection,
    opts: &Options,
    deadline: Instant,
    reach: &dyn Fn(Rank) -> bool,
) -> Result<VerbsTransport, TransportError> {
    // A rank that fails here tells the others why before it closes (memlock, a device
    // error): they would otherwise see only that it closed.
    let window = opts.window.max(2);
    let me = tcp.endpoint().rank;
    let others: Vec<usize> = (0..tcp.endpoint().nranks)
        .filter(|&p| p != me.index() && reach(Rank::from(p)))
        .collect();
    let (pd, channel, cq) = match open_device(&mut tcp, &sel, window, others.len()) {
        Ok(r) => r,
        Err(e) => {
            tcp.abort(&e.to_string());
            return Err(e);
        }
    };
    let rank = tcp.endpoint().rank;
    let nranks = tcp.endpoint().nranks;
    let (_, send_depth) = depths(window);
    // Scoped grants need type 2 memory windows: a device without them lends regions.
    let scoped = opts.scoped.unwrap_or(!sel.device.starts_with("rxe"))
        && match ffi::MemoryWindow::new(&pd) {
            Ok(_) => true,
            Err(e) => {
                tracing::info!(
                    rank = %tcp.endpoint().rank,
                    error = %e,
                    "no memory windows: peers write this rank's slots as registered regions"
                );
                false
            }
        };
    let mut t = VerbsTransport {
        scoped,
        last_credit: None,
        me: crate::transport::Endpoint {
            hosts: tcp.endpoint().hosts.clone(),
            ..crate::transport::Endpoint::new("verbs", rank, nranks)
        },
        peers: (0..nranks).map(|_| None).collect(),
        by_qpn: Default::default(),
        bufs: Vec::new(),
        free: Vec::new(),
        retired: Vec::new(),
        lent: Default::default(),
        lent_from: Default::default(),
        // Generous: at least 8 windows, and at least 64 MiB of slots per peer. A peer past
        // it (far ahead of what this rank consumes) waits for credits instead of making this
        // rank register memory without bound.
        hold_limit: (8 * window).max((64usize << 20) / opts.slot_bytes.max(1)),
        replenish_due: false,
        returns: Default::default(),
        inflight: Default::default(),
        next_wr: 0,
        arrived: Default::default(),
        broken: None,
        per_peer: false,
        peer_errors: vec![None; nranks],
        completions: Vec::with_capacity(64),
        slot_bytes: opts.slot_bytes,
        send_depth,
        per_credit_msg: 1,
        selection: sel.clone(),
        last_control: Instant::now(),
        spin: opts.spin,
        wake_check: opts.wake_check,
        crowded: tcp
            .endpoint()
            .hosts
            .as_ref()
            .is_none_or(|h| h.crowds_cpus_of(rank, opts.cpus)),
        taken: 0,
        taken_seen: 0,
        late_wakeups: 0,
        credit_messages: 0,
        grants_carried: 0,
        window,
        registry: Registry::default(),
        zero_copy: 0,
        borrowed: Default::default(),
        zero_copy_on: opts.zero_copy,
        direct: opts.direct.unwrap_or(scoped),
        offers: Default::default(),
        withdrawing: Default::default(),
        voided: Default::default(),
        offer_windows: Vec::new(),
        offered: Default::default(),
        placed: Default::default(),
        next_offer: 0,
        offers_due: false,
        placed_count: 0,
        cq,
        pd,
        _channel: channel,
        tcp,
    };
    match connect_peers(&mut t, &sel, opts, &others, deadline) {
        Ok(()) => {
            t.me.details = t.describe();
            Ok(t)
        }
        Err(e) => {
            t.tcp.abort(&e.to_string());
            Err(e)
        }
    }
}

/// The converter of a failed verb into this rank's error.
fn verbs_failure(rank: Rank, peer: Option<usize>) -> impl Fn(VerbsError) -> TransportError {
    move |e: VerbsError| TransportError::Verbs {
        rank,
        peer: peer.map(Rank::from),
        verb: e.verb,
        errno: e.errno,
        message: e.message,
    }
}

/// Slots per receive queue and send queue. A receive is taken by each write into a slot
/// (at most `window` lent), each write into an offered destination and each credit
/// message (at most one per slot or offer out): offers add twice their limit.
fn depths(window: usize) -> (u32, u32) {
    let offers = super::VerbsTransport::offer_limit_for(window);
    (
        (2 * window + 8 + 2 * offers) as u32,
        (2 * window + 8) as u32,
    )
}

/// Opens the device and makes the domain, channel and completion queue this rank uses.
fn open_device(
    tcp: &mut TcpTransport,
    sel: &Selection,
    window: usize,
    peers: usize,
) -> Result<
    (
        Arc<ProtectionDomain>,
        Arc<CompletionChannel>,
        CompletionQueue,
    ),
    TransportError,
> {
    let rank = tcp.endpoint().rank;
    let verr = |peer| verbs_failure(rank, peer);
    let ctx = Context::open(&sel.device).map_err(verr(None))?;
    let pd = ProtectionDomain::new(&ctx).map_err(verr(None))?;
    let channel = CompletionChannel::new(&ctx).map_err(verr(None))?;
    let (recv_depth, send_depth) = depths(window);
    let dev = ctx.query_device().map_err(verr(None))?;
    let cq_entries = (peers.max(1) as i64 * i64::from(recv_depth + send_depth))
        .clamp(16, i64::from(dev.max_cqe.max(16))) as i32;
    let cq = CompletionQueue::new(&ctx, &channel, cq_entries).map_err(verr(None))?;
    tcp.register_fd(cq.fd())
        .map_err(|e| TransportError::Verbs {
            rank,
            peer: None,
            verb: "epoll_ctl",
            errno: e.raw_os_error().unwrap_or(0),
            message: format!("cannot watch the completion channel: {e}"),
        })?;
    Ok((pd, channel, cq))
}

/// Queue pairs, receive buffers and first credits for every peer in `others`; endpoints
/// exchanged over TCP; a connectivity check each way.
fn connect_peers(
    t: &mut VerbsTransport,
    sel: &Selection,
    opts: &Options,
    others: &[usize],
    deadline: Instant,
) -> Result<(), TransportError> {
    let (rank, nranks, window) = (t.me.rank, t.me.nranks, t.window);
    let (recv_depth, send_depth) = depths(window);
    let verr = |peer| verbs_failure(rank, peer);
    let psn = |peer: usize| ((rank.index() as u32) << 12 ^ (peer as u32) << 2 ^ 0x5a5a) & 0xff_ffff;
    let mut mine = Vec::new();
    for &p in others {
        let qp =
            QueuePair::new(&t.pd, &t.cq, send_depth, recv_depth, 256).map_err(verr(Some(p)))?;
        let ctrl =
            ffi::DmaBuffer::new(&t.pd, recv_depth as usize * CTRL_BYTES).map_err(verr(Some(p)))?;
        t.per_credit_msg = ((qp.max_inline as usize).saturating_sub(4) / CREDIT_BYTES).max(1);
        t.by_qpn.insert(qp.qpn(), p);
        t.peers[p] = Some(Peer {
            qp,
            scoped: false,
            credits: VecDeque::new(),
            advertised: Default::default(),
            owed: Vec::new(),
            riding: Vec::new(),
            behind: Vec::new(),
            offers: Default::default(),
            offers_out: 0,
            deficit: 0,
            held: 0,
            sends: 0,
            binds: 0,
            ctrl,
            hello: false,
        });
        // Regions are lent in the endpoint; windows are bound on a connected queue pair,
        // so their first credits go once the queue pairs are up.
        let mut credits = Vec::with_capacity(window);
        for _ in 0..if t.scoped { 0 } else { window } {
            let (id, v) = t.take_buffer().map_err(verr(Some(p)))?;
            credits.push(t.credit_for(p, id, &v).map_err(verr(Some(p)))?);
            if let Some(peer) = t.peers[p].as_mut() {
                peer.advertised.insert(id, v);
            }
        }
        let qpn = t.peers[p].as_ref().map_or(0, |x| x.qp.qpn());
        mine.push(Endpoint {
            scoped: t.scoped,
            qpn,
            psn: psn(p),
            lid: sel.lid,
            mtu: sel.active_mtu as u8,
            gid_kind: sel.gid.entry.kind as u8,
            gid: sel.gid.entry.gid,
            gid_index: sel.gid.entry.index,
            gid_forced: opts.gid_index.is_some(),
            credits,
        });
    }
    // Exchange endpoints over TCP.
    for (p, ep) in others.iter().zip(&mine) {
        t.tcp.send_control(
            Rank::from(*p),
            Exchange::VerbsEndpoint,
            &ep.encode(),
            deadline,
        )?;
    }
    for &p in others {
        let bytes = t
            .tcp
            .recv_control(Rank::from(p), Exchange::VerbsEndpoint, deadline)?;
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
                    "{local} on {} cannot reach {}'s GID index {} {} ({}{}): one is \
                     IPv4-mapped and the other is not{}",
                    sel.device,
                    Rank::from(p),
                    ep.gid_index,
                    std::net::Ipv6Addr::from(ep.gid),
                    if ep.gid_kind == GidKind::RoceV2 as u8 {
                        "RoCE v2"
                    } else {
                        "other type"
                    },
                    if ep.gid_forced {
                        ", forced by its RCOLL_IB_GID_INDEX"
                    } else {
                        ""
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
            // choose_gid takes none past MAX_SGID_INDEX.
            gid_index: u8::try_from(local.index).map_err(|_| TransportError::NoDevice {
                rank,
                reason: format!("{local}: a GID index past 255 cannot be a source GID"),
            })?,
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
        peer.scoped = ep.scoped;
        for i in 0..recv_depth {
            t.post_ctrl_recv(p, i).map_err(verr(Some(p)))?;
        }
    }
    // Everyone's receives are posted before anyone writes; then check the path works.
    for &p in others {
        t.tcp
            .send_control(Rank::from(p), Exchange::VerbsReady, b"ready", deadline)?;
    }
    for &p in others {
        t.tcp
            .recv_control(Rank::from(p), Exchange::VerbsReady, deadline)?;
    }
    if t.scoped {
        // Every peer's receives are posted: bind and lend the first windows.
        for peer in t.peers.iter_mut().flatten() {
            peer.deficit = window;
        }
        t.replenish();
        t.send_credits(true);
        // A registration that failed (memlock) fails the setup here, before the
        // connectivity check could let a peer finish its own.
        if let Some(e) = &t.broken {
            return Err(e.clone());
        }
    }
    for &p in others {
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
    Ok(())
}
