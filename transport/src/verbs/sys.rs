//! libibverbs, loaded at run time: the functions rcoll calls, resolved from
//! `libibverbs.so.1` with the symbol versions rdma-core exports, and the few struct layouts
//! it touches, copied from `<infiniband/verbs.h>`.
//!
//! Nothing here is needed at build time: a binary built without rdma-core runs everywhere,
//! uses RDMA where the library, a provider and a device exist, and reports the missing piece
//! elsewhere ([`LoadError`]). The hot-path verbs that the header defines `static inline`
//! (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`) go through the
//! context's ops table exactly as the header does.
//!
//! Layouts: each struct declares the fields rcoll uses at their C offsets; structs rcoll
//! allocates (work requests, attributes, completions) have the C size, or more where a newer
//! rdma-core may write more (`ibv_port_attr`). `tests::layouts_match_the_c_headers` checks
//! every offset, size and constant against the installed headers.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

/// Why libibverbs cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No `libibverbs.so.1` (or `RCOLL_IBVERBS_LIB`) could be opened.
    #[error(
        "{tried} not found: install rdma-core / ibverbs-providers (Debian/Ubuntu: libibverbs1 \
         ibverbs-providers; RHEL: rdma-core libibverbs) ({dlerror})"
    )]
    Library {
        /// The names tried.
        tried: String,
        /// What the dynamic loader said.
        dlerror: String,
    },
    /// The library lacks a function at the version rcoll needs.
    #[error(
        "{library} has no {symbol}@{version}: rdma-core is too old or not rdma-core ({dlerror})"
    )]
    Symbol {
        /// The library that was opened.
        library: String,
        /// The function.
        symbol: &'static str,
        /// The symbol version asked for.
        version: &'static str,
        /// What the dynamic loader said.
        dlerror: String,
    },
}

// ---------------------------------------------------------------------------------------
// Layouts (rdma-core's `verbs.h`; offsets in the comments).

/// `struct ibv_device`: only ever behind a pointer.
#[repr(C)]
pub struct ibv_device {
    _opaque: [u8; 0],
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    /// Its context (0).
    pub context: *mut ibv_context,
    handle: u32,
}

/// `struct ibv_mw`: a memory window.
#[repr(C)]
pub struct ibv_mw {
    /// Its context (0).
    pub context: *mut ibv_context,
    pd: *mut ibv_pd,
    /// The remote key of its current binding (16): not updated by a bind posted as a work
    /// request; the caller tracks it.
    pub rkey: u32,
    handle: u32,
    mw_type: c_uint,
}

type Unused = Option<unsafe extern "C" fn()>;

/// `struct ibv_context_ops`: the entries the inline verbs call.
#[repr(C)]
pub struct ibv_context_ops {
    _compat_0_6: [Unused; 7],
    /// `ops.alloc_mw` (56).
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, c_uint) -> *mut ibv_mw>,
    _bind_mw: Unused,
    /// `ops.dealloc_mw` (72).
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    _compat_10: Unused,
    /// `ops.poll_cq` (88).
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    /// `ops.req_notify_cq` (96).
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    _compat_13_24: [Unused; 12],
    /// `ops.post_send` (200).
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    /// `ops.post_recv` (208).
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    _compat_27_31: [Unused; 5],
}

/// `struct ibv_context` up to the ops table (the rest is the library's).
#[repr(C)]
pub struct ibv_context {
    /// The device (0).
    pub device: *mut ibv_device,
    /// The provider's entry points (8).
    pub ops: ibv_context_ops,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    /// Its context (0).
    pub context: *mut ibv_context,
    /// The fd that becomes readable on an event (8).
    pub fd: c_int,
    refcnt: c_int,
}

/// `struct ibv_cq` up to `context` (the rest is the library's).
#[repr(C)]
pub struct ibv_cq {
    /// Its context (0).
    pub context: *mut ibv_context,
}

/// `struct ibv_qp` up to `qp_num`.
#[repr(C)]
pub struct ibv_qp {
    /// Its context (0).
    pub context: *mut ibv_context,
    qp_context: *mut c_void,
    pd: *mut ibv_pd,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut c_void,
    handle: u32,
    /// The queue pair number (52).
    pub qp_num: u32,
}

/// `struct ibv_mr` up to `rkey`.
#[repr(C)]
pub struct ibv_mr {
    context: *mut ibv_context,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    handle: u32,
    /// Local key (36).
    pub lkey: u32,
    /// Remote key (40).
    pub rkey: u32,
}

/// `union ibv_gid`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct ibv_gid {
    /// The 16 bytes, network order.
    pub raw: [u8; 16],
}

/// `struct ibv_gid_entry` (rdma-core 32 and later): one valid entry of a GID table.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_entry {
    /// The GID (0).
    pub gid: ibv_gid,
    /// Its index in the port's table (16).
    pub gid_index: u32,
    /// The port (20).
    pub port_num: u32,
    /// `enum ibv_gid_type` (24).
    pub gid_type: u32,
    /// The network device's interface index, 0 for none (28).
    pub ndev_ifindex: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    /// Address.
    pub addr: u64,
    /// Length.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// `struct ibv_send_wr`, with the `wr` union as its `rdma` member.
#[repr(C)]
pub struct ibv_send_wr {
    /// Work request id (0).
    pub wr_id: u64,
    /// Next in the list (8).
    pub next: *mut ibv_send_wr,
    /// Scatter/gather list (16).
    pub sg_list: *mut ibv_sge,
    /// Entries in it (24).
    pub num_sge: c_int,
    /// `IBV_WR_*` (28).
    pub opcode: c_uint,
    /// `IBV_SEND_*` (32).
    pub send_flags: c_uint,
    /// Immediate data, network order; or the key to invalidate (`invalidate_rkey`, host
    /// order) (36).
    pub imm_data: u32,
    /// `wr.rdma.remote_addr` (40).
    pub remote_addr: u64,
    /// `wr.rdma.rkey` (48).
    pub rkey: u32,
    /// The rest of the `wr` union (atomic, ud) and `qp_type`.
    _wr_rest: [u32; 7],
    /// `bind_mw.mw` (80).
    pub bind_mw: *mut ibv_mw,
    /// `bind_mw.rkey`: the window's key after the bind (88).
    pub bind_rkey: u32,
    _pad92: u32,
    /// `bind_mw.bind_info.mr` (96).
    pub bind_mr: *mut ibv_mr,
    /// `bind_mw.bind_info.addr` (104).
    pub bind_addr: u64,
    /// `bind_mw.bind_info.length` (112).
    pub bind_length: u64,
    /// `bind_mw.bind_info.mw_access_flags` (120).
    pub bind_access: c_uint,
    _pad124: u32,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    /// Work request id (0).
    pub wr_id: u64,
    /// Next in the list (8).
    pub next: *mut ibv_recv_wr,
    /// Scatter/gather list (16).
    pub sg_list: *mut ibv_sge,
    /// Entries in it (24).
    pub num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    /// Work request id (0).
    pub wr_id: u64,
    /// `IBV_WC_*` status (8).
    pub status: c_uint,
    /// `IBV_WC_*` opcode (12).
    pub opcode: c_uint,
    /// Vendor error (16).
    pub vendor_err: u32,
    /// Bytes received (20).
    pub byte_len: u32,
    /// Immediate data, network order; or the invalidated key (`invalidated_rkey`, host
    /// order) (24).
    pub imm_data: u32,
    /// Local queue pair number (28).
    pub qp_num: u32,
    src_qp: u32,
    /// `IBV_WC_*` flags (36).
    pub wc_flags: c_uint,
    pkey_index: u16,
    slid: u16,
    sl: u8,
    dlid_path_bits: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_cap {
    /// Send work requests.
    pub max_send_wr: u32,
    /// Receive work requests.
    pub max_recv_wr: u32,
    /// Gather entries per send.
    pub max_send_sge: u32,
    /// Scatter entries per receive.
    pub max_recv_sge: u32,
    /// Inline bytes.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    qp_context: *mut c_void,
    /// Send completion queue (8).
    pub send_cq: *mut ibv_cq,
    /// Receive completion queue (16).
    pub recv_cq: *mut ibv_cq,
    srq: *mut c_void,
    /// Capacities asked, and granted (32).
    pub cap: ibv_qp_cap,
    /// `IBV_QPT_*` (52).
    pub qp_type: c_uint,
    sq_sig_all: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    /// Destination GID (0).
    pub dgid: ibv_gid,
    /// Flow label (16).
    pub flow_label: u32,
    /// Source GID index (20).
    pub sgid_index: u8,
    /// Hop limit (21).
    pub hop_limit: u8,
    /// Traffic class (22).
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    /// Global route header (0).
    pub grh: ibv_global_route,
    /// Destination LID (24).
    pub dlid: u16,
    /// Service level (26).
    pub sl: u8,
    /// Source path bits (27).
    pub src_path_bits: u8,
    static_rate: u8,
    /// Whether `grh` is used (29).
    pub is_global: u8,
    /// Port (30).
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
pub struct ibv_qp_attr {
    /// `IBV_QPS_*` (0).
    pub qp_state: c_uint,
    cur_qp_state: c_uint,
    /// `IBV_MTU_*` (8).
    pub path_mtu: c_uint,
    path_mig_state: c_uint,
    qkey: u32,
    /// Receive PSN (20).
    pub rq_psn: u32,
    /// Send PSN (24).
    pub sq_psn: u32,
    /// Remote QPN (28).
    pub dest_qp_num: u32,
    /// `IBV_ACCESS_*` (32).
    pub qp_access_flags: c_uint,
    cap: ibv_qp_cap,
    /// Address vector (56).
    pub ah_attr: ibv_ah_attr,
    alt_ah_attr: ibv_ah_attr,
    /// P_Key index (120).
    pub pkey_index: u16,
    alt_pkey_index: u16,
    en_sqd_async_notify: u8,
    sq_draining: u8,
    /// Outstanding RDMA reads/atomics as initiator (126).
    pub max_rd_atomic: u8,
    /// ... as target (127).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer (128).
    pub min_rnr_timer: u8,
    /// Port (129).
    pub port_num: u8,
    /// ACK timeout exponent (130).
    pub timeout: u8,
    /// Transport retries (131).
    pub retry_cnt: u8,
    /// RNR retries (132).
    pub rnr_retry: u8,
    alt_port_num: u8,
    alt_timeout: u8,
    rate_limit: u32,
}

/// `struct ibv_port_attr`, with room to spare: the exported `ibv_query_port` lets the
/// provider write the layout of the library's own version, which grows (rdma-core 45 added
/// `active_speed_ex`).
#[repr(C)]
pub struct ibv_port_attr {
    /// `IBV_PORT_*` (0).
    pub state: c_uint,
    /// Largest MTU, `IBV_MTU_*` (4).
    pub max_mtu: c_uint,
    /// Active MTU (8).
    pub active_mtu: c_uint,
    /// GID table entries (12).
    pub gid_tbl_len: c_int,
    port_cap_flags: u32,
    /// Largest message (20).
    pub max_msg_sz: u32,
    bad_pkey_cntr: u32,
    qkey_viol_cntr: u32,
    pkey_tbl_len: u16,
    /// LID (34).
    pub lid: u16,
    sm_lid: u16,
    lmc: u8,
    max_vl_num: u8,
    sm_sl: u8,
    subnet_timeout: u8,
    init_type_reply: u8,
    active_width: u8,
    active_speed: u8,
    phys_state: u8,
    /// `IBV_LINK_LAYER_*` (46).
    pub link_layer: u8,
    flags: u8,
    port_cap_flags2: u16,
    _newer: [u32; 16],
}

/// `struct ibv_device_attr`.
#[repr(C)]
pub struct ibv_device_attr {
    fw_ver: [c_char; 64],
    node_guid: u64,
    sys_image_guid: u64,
    /// Largest memory region (80).
    pub max_mr_size: u64,
    page_size_cap: u64,
    vendor_id: u32,
    vendor_part_id: u32,
    hw_ver: u32,
    max_qp: c_int,
    /// Work requests per queue (112).
    pub max_qp_wr: c_int,
    device_cap_flags: c_uint,
    max_sge: c_int,
    max_sge_rd: c_int,
    max_cq: c_int,
    /// Entries per completion queue (132).
    pub max_cqe: c_int,
    _limits: [c_int; 22],
    max_pkeys: u16,
    local_ca_ack_delay: u8,
    /// Ports (227).
    pub phys_port_cnt: u8,
}

macro_rules! zeroed_plain_data {
    ($($t:ty),*) => {$(
        impl $t {
            /// All fields zero (null pointers, zero integers), as C code starts them.
            pub fn zeroed() -> $t {
                // SAFETY: every field is an integer, an array of integers, a raw pointer or
                // an `Option` of a function pointer, for all of which all-zero bits are a
                // valid value (0, null, `None`).
                unsafe { std::mem::zeroed() }
            }
        }
    )*};
}
zeroed_plain_data!(
    ibv_send_wr,
    ibv_wc,
    ibv_qp_init_attr,
    ibv_qp_attr,
    ibv_port_attr,
    ibv_device_attr,
    ibv_gid
);

// ---------------------------------------------------------------------------------------
// Constants (checked against the headers by the layout test).

/// `IBV_ACCESS_LOCAL_WRITE`.
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 2;
/// `IBV_ACCESS_MW_BIND`.
pub const IBV_ACCESS_MW_BIND: c_int = 16;
/// `IBV_MW_TYPE_2`.
pub const IBV_MW_TYPE_2: c_uint = 2;
/// `IBV_WR_RDMA_WRITE`.
pub const IBV_WR_RDMA_WRITE: c_uint = 0;
/// `IBV_WR_LOCAL_INV`.
pub const IBV_WR_LOCAL_INV: c_uint = 7;
/// `IBV_WR_BIND_MW`.
pub const IBV_WR_BIND_MW: c_uint = 8;
/// `IBV_WR_SEND_WITH_INV`.
pub const IBV_WR_SEND_WITH_INV: c_uint = 9;
/// `IBV_WC_WITH_INV`.
pub const IBV_WC_WITH_INV: c_uint = 8;
/// The kernel's `IB_WC_WITH_INVALIDATE`, which some providers (rxe) pass on unconverted,
/// where libibverbs has `IBV_WC_IP_CSUM_OK` (never set on a connected queue pair).
pub const KERNEL_WC_WITH_INVALIDATE: c_uint = 4;
/// `IBV_QPT_RC`.
pub const IBV_QPT_RC: c_uint = 2;
/// `IBV_QPS_INIT`.
pub const IBV_QPS_INIT: c_uint = 1;
/// `IBV_QPS_RTR`.
pub const IBV_QPS_RTR: c_uint = 2;
/// `IBV_QPS_RTS`.
pub const IBV_QPS_RTS: c_uint = 3;
/// `IBV_QPS_ERR`.
pub const IBV_QPS_ERR: c_uint = 6;
/// `IBV_WR_RDMA_WRITE_WITH_IMM`.
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
/// `IBV_WR_SEND`.
pub const IBV_WR_SEND: c_uint = 2;
/// `IBV_SEND_SIGNALED`.
pub const IBV_SEND_SIGNALED: c_uint = 2;
/// `IBV_SEND_INLINE`.
pub const IBV_SEND_INLINE: c_uint = 8;
/// `IBV_WC_SUCCESS`.
pub const IBV_WC_SUCCESS: c_uint = 0;
/// `IBV_WC_RECV`.
pub const IBV_WC_RECV: c_uint = 128;
/// `IBV_WC_RECV_RDMA_WITH_IMM`.
pub const IBV_WC_RECV_RDMA_WITH_IMM: c_uint = 129;
/// `IBV_QP_STATE`.
pub const IBV_QP_STATE: c_int = 1;
/// `IBV_QP_ACCESS_FLAGS`.
pub const IBV_QP_ACCESS_FLAGS: c_int = 8;
/// `IBV_QP_PKEY_INDEX`.
pub const IBV_QP_PKEY_INDEX: c_int = 16;
/// `IBV_QP_PORT`.
pub const IBV_QP_PORT: c_int = 32;
/// `IBV_QP_AV`.
pub const IBV_QP_AV: c_int = 128;
/// `IBV_QP_PATH_MTU`.
pub const IBV_QP_PATH_MTU: c_int = 256;
/// `IBV_QP_TIMEOUT`.
pub const IBV_QP_TIMEOUT: c_int = 512;
/// `IBV_QP_RETRY_CNT`.
pub const IBV_QP_RETRY_CNT: c_int = 1024;
/// `IBV_QP_RNR_RETRY`.
pub const IBV_QP_RNR_RETRY: c_int = 2048;
/// `IBV_QP_RQ_PSN`.
pub const IBV_QP_RQ_PSN: c_int = 4096;
/// `IBV_QP_MAX_QP_RD_ATOMIC`.
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 8192;
/// `IBV_QP_DEST_QPN`.
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;
/// `IBV_QP_MIN_RNR_TIMER`.
pub const IBV_QP_MIN_RNR_TIMER: c_int = 32768;
/// `IBV_QP_SQ_PSN`.
pub const IBV_QP_SQ_PSN: c_int = 65536;
/// `IBV_QP_MAX_DEST_RD_ATOMIC`.
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 131072;
/// `IBV_LINK_LAYER_INFINIBAND`.
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_PORT_ACTIVE`.
pub const IBV_PORT_ACTIVE: c_uint = 4;
/// `IBV_GID_TYPE_IB` (also RoCE v1's wire format on Ethernet ports).
pub const IBV_GID_TYPE_IB: u32 = 0;
/// `IBV_GID_TYPE_ROCE_V1`.
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
/// `IBV_GID_TYPE_ROCE_V2`.
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;

/// `_ibv_query_gid_table@IBVERBS_1.11` (the function behind the header's inline
/// `ibv_query_gid_table`): context, entries, their number, flags (0), the entry size.
pub type QueryGidTable =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_gid_entry, usize, u32, usize) -> isize;

// The functions: `load.rs`.
mod load;
pub use load::*;

#[cfg(test)]
mod tests;
