//! The safe layer over libibverbs (loaded at run time by [`super::sys`]): with `sys`, the
//! only code in the verbs backend that is `unsafe`.
//!
//! Every verbs object is owned by a Rust value that destroys it on drop, and holds an
//! `Arc` of what it was created from, so destruction happens in dependency order (queue
//! pairs and memory regions before the protection domain, completion queues before their
//! channel, everything before the device context) whatever order the owners drop in.
//!
//! One funnel, [`VerbsError`], turns a failed verb into the verb's name and its errno.
//!
//! Memory regions are the one contract the type system cannot express: the NIC reads and
//! writes registered memory behind Rust's back. [`MemoryRegion::register`] is therefore
//! `unsafe`; its caller (the transport in `super`) keeps every registered buffer alive and
//! untouched by Rust while the device may access it (see the invariants there).

use std::ffi::CStr;
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use super::sys::{self, Lib, LoadError};

mod memory;
mod queues;

pub use memory::{Access, DmaBuffer, MemoryRegion, MemoryWindow};
pub use queues::{
    status_str, Completion, CompletionChannel, CompletionQueue, Path, QueuePair, Remote, Sge,
    WC_RECV, WC_RECV_RDMA_WITH_IMM, WC_SUCCESS,
};

/// A verb that failed: its name, the errno and what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsError {
    /// The verb, e.g. `ibv_reg_mr`.
    pub verb: &'static str,
    /// The errno (0 when none was set).
    pub errno: i32,
    /// The errno's text, and context.
    pub message: String,
}

impl std::fmt::Display for VerbsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.verb, self.message)
    }
}

impl VerbsError {
    pub(in crate::verbs) fn new(verb: &'static str, errno: i32, what: &str) -> VerbsError {
        let text = io::Error::from_raw_os_error(errno);
        let message = if what.is_empty() {
            format!("{text}")
        } else {
            format!("{text} ({what})")
        };
        VerbsError {
            verb,
            errno,
            message,
        }
    }

    /// From a verb that returns an errno directly (0 on success).
    fn check(verb: &'static str, rc: i32, what: &str) -> Result<(), VerbsError> {
        match rc {
            0 => Ok(()),
            // Some providers return -1 and set errno instead.
            rc if rc < 0 => Err(Self::last(verb, what)),
            rc => Err(Self::new(verb, rc, what)),
        }
    }

    /// From a verb that signals failure with NULL or -1 and sets errno.
    fn last(verb: &'static str, what: &str) -> VerbsError {
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        Self::new(verb, errno, what)
    }
}

impl From<LoadError> for VerbsError {
    fn from(e: LoadError) -> VerbsError {
        VerbsError {
            verb: "dlopen",
            errno: libc::ELIBACC,
            message: e.to_string(),
        }
    }
}

fn non_null<T>(p: *mut T, verb: &'static str, what: &str) -> Result<NonNull<T>, VerbsError> {
    NonNull::new(p).ok_or_else(|| VerbsError::last(verb, what))
}

/// The RDMA devices of this host, by name. An empty list when the kernel or the user
/// space has no RDMA support (`ibv_get_device_list` fails with ENOSYS) or none exist;
/// the error text says which.
pub fn device_names() -> Result<Vec<String>, VerbsError> {
    let lib = sys::lib()?;
    let mut n: i32 = 0;
    // SAFETY: `n` is a valid out-pointer; the list is freed below with the matching call.
    let list = unsafe { (lib.ibv_get_device_list)(&mut n) };
    if list.is_null() {
        return Err(VerbsError::last("ibv_get_device_list", ""));
    }
    let mut names = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` valid device pointers until it is freed.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: `dev` is a valid device; the name is a NUL-terminated string it owns.
        let name = unsafe { CStr::from_ptr((lib.ibv_get_device_name)(dev)) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once; the names were copied.
    unsafe { (lib.ibv_free_device_list)(list) };
    Ok(names)
}

/// An open device (`ibv_context`).
pub struct Context {
    ctx: NonNull<sys::ibv_context>,
    name: String,
    lib: &'static Lib,
}

// SAFETY: verbs objects may be used from any thread (rdma-core serialises internally);
// rcoll uses each from one thread at a time through `&mut` owners.
unsafe impl Send for Context {}
// SAFETY: as above; the shared operations (queries) are thread-safe in rdma-core.
unsafe impl Sync for Context {}

/// What a port reports (`ibv_port_attr`), the fields rcoll uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// `IBV_PORT_*` state (4 = ACTIVE).
    pub state: u32,
    /// Active MTU as the `ibv_mtu` enum (1 = 256 ... 5 = 4096).
    pub active_mtu: u32,
    /// Largest MTU of the port, as the enum.
    pub max_mtu: u32,
    /// Entries in the GID table.
    pub gid_table_len: i32,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// 1 = InfiniBand, 2 = Ethernet (RoCE).
    pub link_layer: u8,
    /// Largest message.
    pub max_msg_sz: u32,
}

/// Device limits rcoll sizes its queues by (`ibv_device_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Ports on the device.
    pub phys_port_cnt: u8,
    /// Work requests per queue.
    pub max_qp_wr: i32,
    /// Entries per completion queue.
    pub max_cqe: i32,
    /// Largest memory region.
    pub max_mr_size: u64,
}

impl Context {
    /// Opens the device named `name`.
    pub fn open(name: &str) -> Result<Arc<Context>, VerbsError> {
        let lib = sys::lib()?;
        let mut n: i32 = 0;
        // SAFETY: as in `device_names`.
        let list = unsafe { (lib.ibv_get_device_list)(&mut n) };
        if list.is_null() {
            return Err(VerbsError::last("ibv_get_device_list", name));
        }
        let mut opened: Result<*mut sys::ibv_context, VerbsError> = Err(VerbsError {
            verb: "ibv_open_device",
            errno: libc::ENODEV,
            message: format!("no device named {name:?}"),
        });
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` valid device pointers until it is freed.
            let dev = unsafe { *list.add(i) };
            if dev.is_null() {
                break;
            }
            // SAFETY: `dev` is valid; the name string lives as long as the list.
            let this = unsafe { CStr::from_ptr((lib.ibv_get_device_name)(dev)) };
            if this.to_string_lossy() == name {
                // SAFETY: `dev` is valid; the context outlives the list (rdma-core keeps
                // the device referenced by the open context).
                let ctx = unsafe { (lib.ibv_open_device)(dev) };
                opened = if ctx.is_null() {
                    Err(VerbsError::last("ibv_open_device", name))
                } else {
                    Ok(ctx)
                };
                break;
            }
        }
        // SAFETY: freed once, after the context was opened from it.
        unsafe { (lib.ibv_free_device_list)(list) };
        let ctx = non_null(opened?, "ibv_open_device", name)?;
        Ok(Arc::new(Context {
            ctx,
            name: name.to_owned(),
            lib,
        }))
    }

    /// The device's limits.
    pub fn query_device(&self) -> Result<DeviceAttr, VerbsError> {
        let mut attr = sys::ibv_device_attr::zeroed();
        // SAFETY: the context is open and `attr` is a valid out-pointer.
        let rc = unsafe { (self.lib.ibv_query_device)(self.ctx.as_ptr(), &mut attr) };
        VerbsError::check("ibv_query_device", rc, &self.name)?;
        Ok(DeviceAttr {
            phys_port_cnt: attr.phys_port_cnt,
            max_qp_wr: attr.max_qp_wr,
            max_cqe: attr.max_cqe,
            max_mr_size: attr.max_mr_size,
        })
    }

    /// The attributes of port `port` (numbered from 1).
    pub fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        let mut attr = sys::ibv_port_attr::zeroed();
        // SAFETY: the context is open and `attr` is a valid out-pointer, larger than any
        // version of the struct the provider may fill.
        let rc = unsafe { (self.lib.ibv_query_port)(self.ctx.as_ptr(), port, &mut attr) };
        VerbsError::check("ibv_query_port", rc, &format!("{} port {port}", self.name))?;
        Ok(PortAttr {
            state: attr.state,
            active_mtu: attr.active_mtu,
            max_mtu: attr.max_mtu,
            gid_table_len: attr.gid_tbl_len,
            lid: attr.lid,
            link_layer: attr.link_layer,
            max_msg_sz: attr.max_msg_sz,
        })
    }

    /// GID `index` of port `port`, raw (16 bytes, network order).
    pub fn query_gid(&self, port: u8, index: i32) -> Result<[u8; 16], VerbsError> {
        let mut gid = sys::ibv_gid::zeroed();
        // SAFETY: the context is open and `gid` is a valid out-pointer.
        let rc = unsafe { (self.lib.ibv_query_gid)(self.ctx.as_ptr(), port, index, &mut gid) };
        VerbsError::check(
            "ibv_query_gid",
            rc,
            &format!("{} port {port} index {index}", self.name),
        )?;
        Ok(gid.raw)
    }
}

/// One valid GID table entry as the library reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidTableEntry {
    /// The port.
    pub port: u8,
    /// The index in the port's table.
    pub index: u32,
    /// The GID, 16 bytes in network order.
    pub gid: [u8; 16],
    /// `IBV_GID_TYPE_*`.
    pub kind: u32,
    /// The network interface's name, if it has one and it still exists.
    pub netdev: Option<String>,
}

impl Context {
    /// Every valid GID of every port in one call (`ibv_query_gid_table`, which reads the
    /// kernel's table with one ioctl where sysfs takes three files per entry), with room
    /// for `max` entries. `None` when the library predates it (rdma-core 32).
    pub fn gid_table(&self, max: usize) -> Option<Result<Vec<GidTableEntry>, VerbsError>> {
        let query = self.lib.query_gid_table?;
        let mut raw = vec![
            sys::ibv_gid_entry {
                gid: sys::ibv_gid::zeroed(),
                gid_index: 0,
                port_num: 0,
                gid_type: 0,
                ndev_ifindex: 0,
            };
            max
        ];
        // SAFETY: the context is open; `raw` has room for `max` entries of the size passed.
        let n = unsafe {
            query(
                self.ctx.as_ptr(),
                raw.as_mut_ptr(),
                max,
                0,
                std::mem::size_of::<sys::ibv_gid_entry>(),
            )
        };
        let Ok(n) = usize::try_from(n) else {
            // A negative errno (or -1 with errno set, as other verbs do).
            let errno = if n < -1 {
                i32::try_from(-n).unwrap_or(0)
            } else {
                0
            };
            let what = format!("{}, room for {max} entries", self.name);
            return Some(Err(if errno == 0 {
                VerbsError::last("ibv_query_gid_table", &what)
            } else {
                VerbsError::new("ibv_query_gid_table", errno, &what)
            }));
        };
        raw.truncate(n.min(max));
        Some(Ok(raw
            .iter()
            .map(|e| GidTableEntry {
                port: u8::try_from(e.port_num).unwrap_or(0),
                index: e.gid_index,
                gid: e.gid.raw,
                kind: e.gid_type,
                netdev: interface_name(e.ndev_ifindex),
            })
            .collect()))
    }
}

/// The name of network interface `index` (`if_indextoname`), `None` for 0 or one gone.
fn interface_name(index: u32) -> Option<String> {
    if index == 0 {
        return None;
    }
    let mut buf = [0 as std::ffi::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` has the IF_NAMESIZE bytes the call may write, NUL included.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success the buffer holds a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: opened by ibv_open_device; every object created from it holds an `Arc`
        // of this context, so none is left when it closes.
        unsafe { (self.lib.ibv_close_device)(self.ctx.as_ptr()) };
    }
}

/// A protection domain.
pub struct ProtectionDomain {
    pd: NonNull<sys::ibv_pd>,
    ctx: Arc<Context>,
}

// SAFETY: see `Context`.
unsafe impl Send for ProtectionDomain {}
// SAFETY: see `Context`.
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    /// Allocates a protection domain on `ctx`.
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<ProtectionDomain>, VerbsError> {
        // SAFETY: the context is open.
        let pd = unsafe { (ctx.lib.ibv_alloc_pd)(ctx.ctx.as_ptr()) };
        let pd = non_null(pd, "ibv_alloc_pd", &ctx.name)?;
        Ok(Arc::new(ProtectionDomain {
            pd,
            ctx: ctx.clone(),
        }))
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd; queue pairs and memory regions hold an `Arc`
        // of this domain, so all are gone.
        unsafe { (self.ctx.lib.ibv_dealloc_pd)(self.pd.as_ptr()) };
    }
}
