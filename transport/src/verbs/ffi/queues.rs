//! Completion channels and queues, and reliable connected queue pairs: creating,
//! connecting, posting work, and polling what completed.

use std::ffi::CStr;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::{non_null, sys, Context, MemoryRegion, MemoryWindow, ProtectionDomain, VerbsError};

/// A completion channel: the fd that becomes readable when an armed CQ gets a completion.
pub struct CompletionChannel {
    ch: NonNull<sys::ibv_comp_channel>,
    ctx: Arc<Context>,
}

// SAFETY: see `Context`.
unsafe impl Send for CompletionChannel {}
// SAFETY: see `Context`.
unsafe impl Sync for CompletionChannel {}

impl CompletionChannel {
    /// Creates a channel whose fd is non-blocking.
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<CompletionChannel>, VerbsError> {
        // SAFETY: the context is open.
        let ch = unsafe { (ctx.lib.ibv_create_comp_channel)(ctx.ctx.as_ptr()) };
        let ch = non_null(ch, "ibv_create_comp_channel", &ctx.name)?;
        let channel = CompletionChannel {
            ch,
            ctx: ctx.clone(),
        };
        let fd = channel.fd();
        // SAFETY: fcntl on the channel's own open fd.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(VerbsError::last("fcntl(O_NONBLOCK)", "completion channel"));
        }
        Ok(Arc::new(channel))
    }

    /// The fd to poll for readability.
    pub fn fd(&self) -> RawFd {
        // SAFETY: the channel is live; `fd` is immutable.
        unsafe { (*self.ch.as_ptr()).fd }
    }
}

impl Drop for CompletionChannel {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_comp_channel; the CQs using it hold an `Arc` of it
        // and are destroyed first.
        unsafe { (self.ctx.lib.ibv_destroy_comp_channel)(self.ch.as_ptr()) };
    }
}

/// One work completion, copied out of the CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request id it completes.
    pub wr_id: u64,
    /// `IBV_WC_*` status (0 = success).
    pub status: u32,
    /// `IBV_WC_*` opcode.
    pub opcode: u32,
    /// Vendor error code.
    pub vendor_err: u32,
    /// Bytes received (receives).
    pub byte_len: u32,
    /// Immediate data in host order, when the opcode carries one.
    pub imm: u32,
    /// The local queue pair number.
    pub qp_num: u32,
    /// For a receive consumed by a SEND WITH INVALIDATE: the key it invalidated.
    pub invalidated: Option<u32>,
    /// `wc_flags`, as the provider reported them.
    pub flags: u32,
}

/// Status of a successful completion.
pub const WC_SUCCESS: u32 = sys::IBV_WC_SUCCESS;
/// A receive consumed by a send (`IBV_WC_RECV`).
pub const WC_RECV: u32 = sys::IBV_WC_RECV;
/// A receive consumed by an RDMA write with immediate.
pub const WC_RECV_RDMA_WITH_IMM: u32 = sys::IBV_WC_RECV_RDMA_WITH_IMM;

/// The text of a completion status (`ibv_wc_status_str`).
pub fn status_str(status: u32) -> String {
    let Ok(lib) = sys::lib() else {
        return format!("status {status}");
    };
    // SAFETY: returns a static NUL-terminated string for any value.
    let s = unsafe { CStr::from_ptr((lib.ibv_wc_status_str)(status)) };
    s.to_string_lossy().into_owned()
}

/// The CQ itself, shared by the pollable [`CompletionQueue`] and the queue pairs on it, so
/// that it is destroyed after all of them.
struct CqHandle {
    cq: NonNull<sys::ibv_cq>,
    channel: Arc<CompletionChannel>,
}

// SAFETY: see `Context`.
unsafe impl Send for CqHandle {}
// SAFETY: see `Context`; polling happens only through `&mut CompletionQueue`.
unsafe impl Sync for CqHandle {}

impl Drop for CqHandle {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_cq; the queue pairs on it and the pollable owner
        // (which acknowledged every event it took) hold this handle, so all are gone.
        unsafe { (self.channel.ctx.lib.ibv_destroy_cq)(self.cq.as_ptr()) };
    }
}

/// A completion queue bound to a completion channel.
pub struct CompletionQueue {
    handle: Arc<CqHandle>,
    /// Events taken from the channel and not yet acknowledged.
    unacked: u32,
}

impl CompletionQueue {
    /// A CQ of at least `entries` entries whose events go to `channel`.
    pub fn new(
        ctx: &Arc<Context>,
        channel: &Arc<CompletionChannel>,
        entries: i32,
    ) -> Result<CompletionQueue, VerbsError> {
        // SAFETY: context and channel are live; no CQ context pointer is used.
        let cq = unsafe {
            (ctx.lib.ibv_create_cq)(
                ctx.ctx.as_ptr(),
                entries,
                ptr::null_mut(),
                channel.ch.as_ptr(),
                0,
            )
        };
        let cq = non_null(cq, "ibv_create_cq", &format!("{entries} entries"))?;
        Ok(CompletionQueue {
            handle: Arc::new(CqHandle {
                cq,
                channel: channel.clone(),
            }),
            unacked: 0,
        })
    }

    fn cq(&self) -> *mut sys::ibv_cq {
        self.handle.cq.as_ptr()
    }

    /// Polls up to `max` (at most 16) completions, appending them to `out`; returns how many.
    pub fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> Result<usize, VerbsError> {
        let mut wcs = [sys::ibv_wc::zeroed(); 16];
        let want = max.min(wcs.len()) as i32;
        // SAFETY: the CQ is live and `wcs` has room for `want` entries.
        let n = unsafe { sys::ibv_poll_cq(self.cq(), want, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(VerbsError::new("ibv_poll_cq", -n, ""));
        }
        for wc in &wcs[..n as usize] {
            // The provider fills the immediate when the opcode carries one; otherwise it is
            // an arbitrary integer, which the caller ignores.
            let imm = u32::from_be(wc.imm_data);
            // rxe reports the kernel's flag value (see `KERNEL_WC_WITH_INVALIDATE`).
            let inv = sys::IBV_WC_WITH_INV | sys::KERNEL_WC_WITH_INVALIDATE;
            let invalidated = (wc.status == sys::IBV_WC_SUCCESS
                && wc.opcode == sys::IBV_WC_RECV
                && wc.wc_flags & inv != 0)
                .then_some(wc.imm_data);
            out.push(Completion {
                wr_id: wc.wr_id,
                status: wc.status,
                opcode: wc.opcode,
                vendor_err: wc.vendor_err,
                byte_len: wc.byte_len,
                imm,
                qp_num: wc.qp_num,
                invalidated,
                flags: wc.wc_flags,
            });
        }
        Ok(n as usize)
    }

    /// Arms the CQ: the channel's fd becomes readable at the next completion.
    pub fn arm(&mut self) -> Result<(), VerbsError> {
        // SAFETY: the CQ is live.
        let rc = unsafe { sys::ibv_req_notify_cq(self.cq(), 0) };
        VerbsError::check("ibv_req_notify_cq", rc, "")
    }

    /// Takes every pending event from the channel (non-blocking) and acknowledges them.
    pub fn drain_events(&mut self) {
        loop {
            let mut cq: *mut sys::ibv_cq = ptr::null_mut();
            let mut ctx: *mut libc::c_void = ptr::null_mut();
            // SAFETY: the channel's fd is non-blocking, so this returns -1 (EAGAIN) when no
            // event is pending; the out-pointers are valid.
            let rc = unsafe {
                (self.handle.channel.ctx.lib.ibv_get_cq_event)(
                    self.handle.channel.ch.as_ptr(),
                    &mut cq,
                    &mut ctx,
                )
            };
            if rc != 0 {
                break;
            }
            self.unacked += 1;
        }
        if self.unacked > 0 {
            // SAFETY: acknowledges exactly the events taken above for this CQ (the only CQ
            // on this channel).
            unsafe { (self.handle.channel.ctx.lib.ibv_ack_cq_events)(self.cq(), self.unacked) };
            self.unacked = 0;
        }
    }

    /// The channel's fd.
    pub fn fd(&self) -> RawFd {
        self.handle.channel.fd()
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // ibv_destroy_cq waits for every event taken to be acknowledged.
        self.drain_events();
    }
}

/// Where a queue pair's peer is: what travels over the bootstrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    /// Queue pair number.
    pub qpn: u32,
    /// Initial packet sequence number.
    pub psn: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// GID (RoCE; InfiniBand across subnets).
    pub gid: [u8; 16],
}

/// Path parameters chosen locally for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// Port number.
    pub port: u8,
    /// Local GID index.
    pub gid_index: u8,
    /// Path MTU as the `ibv_mtu` enum.
    pub mtu: u32,
    /// Whether to use a global route header (RoCE: always).
    pub global: bool,
    /// Local ACK timeout exponent: 4.096 us * 2^timeout per try.
    pub timeout: u8,
}

/// Scatter/gather entries one send may gather: a message's header, its data from the
/// caller's memory, and the grants behind it.
pub const MAX_SGE: usize = 3;

/// A reliable connected queue pair.
pub struct QueuePair {
    qp: NonNull<sys::ibv_qp>,
    pd: Arc<ProtectionDomain>,
    _cq: Arc<CqHandle>,
    /// Largest inline payload the QP accepted.
    pub max_inline: u32,
}

// SAFETY: see `Context`; posting happens only through `&mut self`.
unsafe impl Send for QueuePair {}

/// One piece of local memory for a work request.
#[derive(Debug, Clone, Copy)]
pub struct Sge {
    /// Address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Local key of its region.
    pub lkey: u32,
}

impl QueuePair {
    /// Creates an RC QP on `cq` with room for `send` and `recv` work requests, asking for
    /// `inline` bytes of inline data (falling back to smaller sizes the device accepts).
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        cq: &CompletionQueue,
        send: u32,
        recv: u32,
        inline: u32,
    ) -> Result<QueuePair, VerbsError> {
        let mut last = None;
        for want in [inline, inline / 2, 64, 0] {
            let mut attr = sys::ibv_qp_init_attr::zeroed();
            attr.send_cq = cq.cq();
            attr.recv_cq = cq.cq();
            attr.qp_type = sys::IBV_QPT_RC;
            attr.cap.max_send_wr = send;
            attr.cap.max_recv_wr = recv;
            attr.cap.max_send_sge = MAX_SGE as u32;
            attr.cap.max_recv_sge = 1;
            attr.cap.max_inline_data = want;
            // SAFETY: domain and CQ are live; `attr` is fully initialised.
            let qp = unsafe { (pd.ctx.lib.ibv_create_qp)(pd.pd.as_ptr(), &mut attr) };
            match NonNull::new(qp) {
                Some(qp) => {
                    return Ok(QueuePair {
                        qp,
                        pd: pd.clone(),
                        _cq: cq.handle.clone(),
                        max_inline: attr.cap.max_inline_data,
                    })
                }
                None => {
                    last = Some(VerbsError::last(
                        "ibv_create_qp",
                        &format!("RC, {send} send / {recv} recv WRs, {want} B inline"),
                    ))
                }
            }
        }
        Err(last.unwrap_or_else(|| VerbsError::new("ibv_create_qp", 0, "")))
    }

    /// The queue pair number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: the QP is live; its number is immutable.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    fn modify(
        &mut self,
        attr: &mut sys::ibv_qp_attr,
        mask: i32,
        to: &str,
    ) -> Result<(), VerbsError> {
        // SAFETY: the QP is live; `attr` is initialised for every field in `mask`.
        let rc = unsafe { (self.pd.ctx.lib.ibv_modify_qp)(self.qp.as_ptr(), attr, mask) };
        VerbsError::check("ibv_modify_qp", rc, to)
    }

    /// Moves the queue pair to the error state: the device stops working on it and flushes
    /// every outstanding work request with an error completion.
    pub fn stop(&mut self) -> Result<(), VerbsError> {
        let mut a = sys::ibv_qp_attr::zeroed();
        a.qp_state = sys::IBV_QPS_ERR;
        self.modify(&mut a, sys::IBV_QP_STATE, "to ERROR")
    }

    /// RESET → INIT → RTR → RTS, connected to `remote` over `path`.
    pub fn connect(
        &mut self,
        path: &Path,
        local_psn: u32,
        remote: &Remote,
    ) -> Result<(), VerbsError> {
        let mut a = sys::ibv_qp_attr::zeroed();
        a.qp_state = sys::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = path.port;
        a.qp_access_flags = (sys::IBV_ACCESS_LOCAL_WRITE | sys::IBV_ACCESS_REMOTE_WRITE) as u32;
        self.modify(
            &mut a,
            sys::IBV_QP_STATE
                | sys::IBV_QP_PKEY_INDEX
                | sys::IBV_QP_PORT
                | sys::IBV_QP_ACCESS_FLAGS,
            "RESET to INIT",
        )?;

        let mut a = sys::ibv_qp_attr::zeroed();
        a.qp_state = sys::IBV_QPS_RTR;
        a.path_mtu = path.mtu;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12; // 0.64 ms
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.sl = 0;
        a.ah_attr.src_path_bits = 0;
        a.ah_attr.port_num = path.port;
        if path.global {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = remote.gid;
            a.ah_attr.grh.sgid_index = path.gid_index;
            a.ah_attr.grh.hop_limit = 64;
            a.ah_attr.grh.traffic_class = 0;
            a.ah_attr.grh.flow_label = 0;
        }
        self.modify(
            &mut a,
            sys::IBV_QP_STATE
                | sys::IBV_QP_AV
                | sys::IBV_QP_PATH_MTU
                | sys::IBV_QP_DEST_QPN
                | sys::IBV_QP_RQ_PSN
                | sys::IBV_QP_MAX_DEST_RD_ATOMIC
                | sys::IBV_QP_MIN_RNR_TIMER,
            "INIT to RTR",
        )?;

        let mut a = sys::ibv_qp_attr::zeroed();
        a.qp_state = sys::IBV_QPS_RTS;
        a.sq_psn = local_psn;
        a.timeout = path.timeout;
        a.retry_cnt = 7;
        a.rnr_retry = 7; // retry forever on receiver-not-ready: the credits prevent it
        a.max_rd_atomic = 1;
        self.modify(
            &mut a,
            sys::IBV_QP_STATE
                | sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_SQ_PSN
                | sys::IBV_QP_MAX_QP_RD_ATOMIC,
            "RTR to RTS",
        )
    }

    /// Posts an RDMA WRITE WITH IMMEDIATE gathering `sges` (at most 2) to
    /// `(remote_addr, rkey)`, signaled. With `inline`, the bytes are copied at post time and
    /// the local keys are not used.
    ///
    /// # Safety
    ///
    /// Unless `inline`, the memory behind `sges` must stay registered, allocated and
    /// unmodified until the completion for `wr_id` is polled. With `inline`, it must be
    /// readable for the duration of the call.
    pub unsafe fn post_write_imm(
        &mut self,
        wr_id: u64,
        sges: &[Sge],
        remote_addr: u64,
        rkey: u32,
        imm: u32,
        inline: bool,
    ) -> Result<(), VerbsError> {
        let (mut list, used) = Self::sge_list(sges)?;
        let mut wr = sys::ibv_send_wr::zeroed();
        wr.wr_id = wr_id;
        wr.sg_list = list.as_mut_ptr();
        wr.num_sge = used;
        wr.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.send_flags = sys::IBV_SEND_SIGNALED | if inline { sys::IBV_SEND_INLINE } else { 0 };
        wr.imm_data = imm.to_be();
        wr.remote_addr = remote_addr;
        wr.rkey = rkey;
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP is live; `wr` and `list` outlive the call; the caller keeps the
        // memory valid as documented.
        let rc = unsafe { sys::ibv_post_send(self.qp.as_ptr(), &mut wr, &mut bad) };
        VerbsError::check("ibv_post_send", rc, "RDMA WRITE WITH IMM")
    }

    /// Posts an unsignaled bind of `window` to `len` bytes at `addr` of `region`, granting
    /// this queue pair's peer remote writes there under a fresh key, which it returns.
    /// Work requests posted after it run after it: a credit sent next reaches the peer
    /// with the window already valid. Only a failure completes (as `wr_id`); otherwise the
    /// completion of a later signaled work request says it is done.
    ///
    /// # Safety
    ///
    /// `addr..addr + len` lies in `region`; until the window is invalidated (the peer's
    /// SEND WITH INVALIDATE completed here) or freed, the peer may write those bytes at any
    /// time, so no Rust reference to them may be used.
    pub unsafe fn post_bind(
        &mut self,
        wr_id: u64,
        window: &mut MemoryWindow,
        region: &MemoryRegion,
        addr: u64,
        len: usize,
    ) -> Result<u32, VerbsError> {
        let old = window.rkey();
        let rkey = window.next_rkey();
        let mut wr = sys::ibv_send_wr::zeroed();
        wr.wr_id = wr_id;
        wr.opcode = sys::IBV_WR_BIND_MW;
        wr.bind_mw = window.as_ptr();
        wr.bind_rkey = rkey;
        wr.bind_mr = region.as_ptr();
        wr.bind_addr = addr;
        wr.bind_length = len as u64;
        wr.bind_access = sys::IBV_ACCESS_REMOTE_WRITE as u32;
        // The provider reads the window's current key from `window.rkey`: the old one.
        // SAFETY: the window is live and exclusively borrowed.
        unsafe { (*window.as_ptr()).rkey = old };
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP, window and region are live; `wr` outlives the call; the caller
        // guarantees the range is in the region and not used by Rust while bound.
        let rc = unsafe { sys::ibv_post_send(self.qp.as_ptr(), &mut wr, &mut bad) };
        VerbsError::check("ibv_post_send", rc, "BIND MW")?;
        // SAFETY: as above; the kernel now holds the new key for this window.
        unsafe { (*window.as_ptr()).rkey = rkey };
        Ok(rkey)
    }

    /// Posts an RDMA WRITE gathering `sges` (at most 2) to `(remote_addr, rkey)`, then a
    /// SEND WITH INVALIDATE of `note` (inline) that revokes `rkey` at the peer. Only the
    /// send is signaled (`note_id`), and its completion means both are done; the write
    /// completes on its own (`write_id`) only if it fails. The peer learns of the message
    /// from the send, after the written bytes (one queue pair delivers in order).
    ///
    /// # Safety
    ///
    /// As [`post_write_imm`](Self::post_write_imm) for `sges` and `inline`. On an error,
    /// whether the write was posted (its completion is still to come) goes with it.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn post_write_invalidate(
        &mut self,
        (write_id, note_id): (u64, u64),
        sges: &[Sge],
        remote_addr: u64,
        rkey: u32,
        note: &[u8],
        inline: bool,
    ) -> Result<(), (VerbsError, bool)> {
        let (mut list, used) = Self::sge_list(sges).map_err(|e| (e, false))?;
        let mut note_sge = inline_sge(note);
        let mut inv = inline_send(note_id, &mut note_sge, sys::IBV_WR_SEND_WITH_INV);
        // `invalidate_rkey` shares the immediate's place, in host order.
        inv.imm_data = rkey;
        let mut wr = sys::ibv_send_wr::zeroed();
        wr.wr_id = write_id;
        wr.next = &mut inv;
        wr.sg_list = list.as_mut_ptr();
        wr.num_sge = used;
        wr.opcode = sys::IBV_WR_RDMA_WRITE;
        wr.send_flags = if inline { sys::IBV_SEND_INLINE } else { 0 };
        wr.remote_addr = remote_addr;
        wr.rkey = rkey;
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP is live; both work requests and their lists outlive the call; the
        // note is inline (copied during the call); the caller keeps `sges` valid.
        let rc = unsafe { sys::ibv_post_send(self.qp.as_ptr(), &mut wr, &mut bad) };
        let write_posted = rc != 0 && std::ptr::eq(bad, &inv);
        VerbsError::check("ibv_post_send", rc, "RDMA WRITE + SEND WITH INVALIDATE")
            .map_err(|e| (e, write_posted))
    }

    /// The provider's scatter/gather list for `sges` (at most [`MAX_SGE`]; empty ones
    /// dropped).
    fn sge_list(sges: &[Sge]) -> Result<([sys::ibv_sge; MAX_SGE], i32), VerbsError> {
        let mut list = [sys::ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; MAX_SGE];
        let mut used = 0;
        for s in sges.iter().filter(|s| s.len > 0) {
            let Some(l) = list.get_mut(used) else {
                return Err(VerbsError::new(
                    "ibv_post_send",
                    libc::EINVAL,
                    "more scatter/gather entries than the queue pair takes",
                ));
            };
            *l = sys::ibv_sge {
                addr: s.addr,
                length: s.len,
                lkey: s.lkey,
            };
            used += 1;
        }
        Ok((list, used as i32))
    }

    /// Posts a signaled LOCAL INVALIDATE of `window`'s current key as `wr_id`: once it
    /// completes, the window is unbound (the peer's writes through it fail with a remote
    /// access error) and may be bound again. Only for a window this side bound and the
    /// peer has not invalidated: a second invalidation is an error on a correct device,
    /// and Soft-RoCE (6.1) dereferences NULL on it.
    pub fn post_local_invalidate(
        &mut self,
        wr_id: u64,
        window: &MemoryWindow,
    ) -> Result<(), VerbsError> {
        let mut wr = sys::ibv_send_wr::zeroed();
        wr.wr_id = wr_id;
        wr.opcode = sys::IBV_WR_LOCAL_INV;
        wr.send_flags = sys::IBV_SEND_SIGNALED;
        // `invalidate_rkey` shares the immediate's place, in host order.
        wr.imm_data = window.rkey();
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP is live and `wr` outlives the call; the request names no memory
        // (the device only revokes a key).
        let rc = unsafe { sys::ibv_post_send(self.qp.as_ptr(), &mut wr, &mut bad) };
        VerbsError::check("ibv_post_send", rc, "LOCAL INVALIDATE")
    }

    /// Posts a signaled SEND of `data`, inline (copied during the call).
    pub fn post_send_inline(&mut self, wr_id: u64, data: &[u8]) -> Result<(), VerbsError> {
        if data.len() > self.max_inline as usize {
            return Err(VerbsError::new(
                "ibv_post_send",
                libc::EINVAL,
                &format!(
                    "{} bytes inline, the QP takes {}",
                    data.len(),
                    self.max_inline
                ),
            ));
        }
        let mut list = inline_sge(data);
        let mut wr = inline_send(wr_id, &mut list, sys::IBV_WR_SEND);
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP is live; inline data is copied by the provider during the call,
        // while `data` is borrowed.
        let rc = unsafe { sys::ibv_post_send(self.qp.as_ptr(), &mut wr, &mut bad) };
        VerbsError::check("ibv_post_send", rc, "SEND inline")
    }

    /// Posts a receive into `sge` (for SENDs; an RDMA write with immediate consumes it
    /// without touching the memory).
    ///
    /// # Safety
    ///
    /// The memory behind `sge` must stay registered and allocated, and not be accessed by
    /// Rust, until the completion for `wr_id` is polled or the QP is destroyed.
    pub unsafe fn post_recv(&mut self, wr_id: u64, sge: Sge) -> Result<(), VerbsError> {
        let mut list = sys::ibv_sge {
            addr: sge.addr,
            length: sge.len,
            lkey: sge.lkey,
        };
        let mut wr = sys::ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: &mut list,
            num_sge: 1,
        };
        let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
        // SAFETY: the QP is live; `wr` and `list` outlive the call; the caller keeps the
        // memory valid as documented.
        let rc = unsafe { sys::ibv_post_recv(self.qp.as_ptr(), &mut wr, &mut bad) };
        VerbsError::check("ibv_post_recv", rc, "")
    }
}

/// The gather entry of inline bytes (no key: the provider copies them at post time).
fn inline_sge(data: &[u8]) -> sys::ibv_sge {
    sys::ibv_sge {
        addr: data.as_ptr() as u64,
        length: data.len() as u32,
        lkey: 0,
    }
}

/// A signaled inline send (`opcode`) of `sge`, which must outlive the post.
fn inline_send(wr_id: u64, sge: &mut sys::ibv_sge, opcode: u32) -> sys::ibv_send_wr {
    let mut wr = sys::ibv_send_wr::zeroed();
    wr.wr_id = wr_id;
    wr.sg_list = sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = sys::IBV_SEND_SIGNALED | sys::IBV_SEND_INLINE;
    wr
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_qp; it holds its CQ and domain, destroyed later.
        unsafe { (self.pd.ctx.lib.ibv_destroy_qp)(self.qp.as_ptr()) };
    }
}
