//! Registered memory: regions over memory rcoll owns, and receive buffers the device
//! writes while Rust code runs.

use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::{non_null, sys, ProtectionDomain, VerbsError};

/// What a region lets the device do with its memory besides reading it for sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Local writes (receives) only: no peer can reach it.
    Local,
    /// Any peer holding the region's remote key may write all of it, for as long as it
    /// is registered.
    RemoteWrite,
    /// Local writes, and memory windows over it ([`MemoryWindow`]) that grant one peer's
    /// queue pair remote writes until the peer invalidates the window: the region itself
    /// has no remote key.
    Windows,
}

/// A registered memory region.
pub struct MemoryRegion {
    mr: NonNull<sys::ibv_mr>,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: see `Context`.
unsafe impl Send for MemoryRegion {}
// SAFETY: through `&self` a region is only read: its keys (fields the provider wrote at
// registration and never changes) and its pointer, which binds pass to the provider (that
// reads the same fields). Deregistration takes it by value (`Drop`).
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers `len` bytes at `addr` for local writes and `access`.
    ///
    /// # Safety
    ///
    /// The memory must stay allocated until the region is dropped, and while a remote
    /// peer or a posted work request may access it, no Rust reference to it may be used
    /// (the device reads and writes it concurrently).
    pub unsafe fn register(
        pd: &Arc<ProtectionDomain>,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<MemoryRegion, VerbsError> {
        let access = sys::IBV_ACCESS_LOCAL_WRITE
            | match access {
                Access::Local => 0,
                Access::RemoteWrite => sys::IBV_ACCESS_REMOTE_WRITE,
                Access::Windows => sys::IBV_ACCESS_MW_BIND,
            };
        // SAFETY: the domain is live; the caller guarantees the memory outlives the region.
        let mr = unsafe { (pd.ctx.lib.ibv_reg_mr)(pd.pd.as_ptr(), addr.cast(), len, access) };
        let mr = non_null(mr, "ibv_reg_mr", &format!("{len} bytes")).map_err(|mut e| {
            if e.errno == libc::ENOMEM || e.errno == libc::EPERM {
                e.message.push_str(&memlock_hint());
            }
            e
        })?;
        Ok(MemoryRegion { mr, pd: pd.clone() })
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the region is registered; its keys are immutable.
        unsafe { (*self.mr.as_ptr()).lkey }
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as for `lkey`.
        unsafe { (*self.mr.as_ptr()).rkey }
    }

    pub(super) fn as_ptr(&self) -> *mut sys::ibv_mr {
        self.mr.as_ptr()
    }
}

/// A type 2 memory window: bound by a work request on one queue pair to a piece of a
/// region registered with [`Access::Windows`], it lets that queue pair's peer write there
/// under a fresh remote key, until the peer invalidates it with its SEND WITH INVALIDATE
/// (or the window is freed). Another queue pair, or a stale key, gets a remote access
/// error instead.
pub struct MemoryWindow {
    mw: NonNull<sys::ibv_mw>,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: see `Context`; the window is used only through `&mut self` or by the device.
unsafe impl Send for MemoryWindow {}

impl MemoryWindow {
    /// Allocates an unbound window on `pd`.
    pub fn new(pd: &Arc<ProtectionDomain>) -> Result<MemoryWindow, VerbsError> {
        // SAFETY: the domain is live and points at its live context, whose ops the
        // provider filled (as `ibv_alloc_mw` in verbs.h reads them).
        let mw = unsafe {
            match (*(*pd.pd.as_ptr()).context).ops.alloc_mw {
                Some(f) => f(pd.pd.as_ptr(), sys::IBV_MW_TYPE_2),
                None => {
                    return Err(VerbsError::new(
                        "ibv_alloc_mw",
                        libc::EOPNOTSUPP,
                        "the provider has no memory windows",
                    ))
                }
            }
        };
        let mw = non_null(mw, "ibv_alloc_mw", "type 2")?;
        Ok(MemoryWindow { mw, pd: pd.clone() })
    }

    /// The remote key of the current (or last) binding.
    pub fn rkey(&self) -> u32 {
        // SAFETY: the window is live; only `&mut self` methods change the key.
        unsafe { (*self.mw.as_ptr()).rkey }
    }

    /// The next binding's key (`ibv_inc_rkey`): same index, key byte plus one, recorded
    /// as the window's key (a bind posted as a work request leaves that to the caller).
    pub(super) fn next_rkey(&mut self) -> u32 {
        let old = self.rkey();
        let new = (old & !0xff) | (old.wrapping_add(1) & 0xff);
        // SAFETY: the window is live and this is the only reference to it.
        unsafe { (*self.mw.as_ptr()).rkey = new };
        new
    }

    pub(super) fn as_ptr(&self) -> *mut sys::ibv_mw {
        self.mw.as_ptr()
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        // SAFETY: allocated by the provider's alloc_mw; freeing a bound window invalidates
        // it (a later write to it fails remotely, touching nothing).
        unsafe {
            if let Some(f) = (*(*self.pd.pd.as_ptr()).context).ops.dealloc_mw {
                f(self.mw.as_ptr());
            }
        }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: registered by ibv_reg_mr; the owner has no work request using it left.
        unsafe { (self.pd.ctx.lib.ibv_dereg_mr)(self.mr.as_ptr()) };
    }
}

/// Memory a device writes into while Rust code runs (receive buffers): never seen through a
/// Rust reference as a whole, only copied out a piece at a time once the device is done
/// with that piece. Registered for local writes only: no peer can write it remotely.
pub struct DmaBuffer {
    ptr: NonNull<u8>,
    len: usize,
    /// Declared after nothing it outlives: dropped (deregistered) in `Drop` before the
    /// memory is freed.
    mr: Option<MemoryRegion>,
}

// SAFETY: the buffer owns its allocation; the device's writes are synchronised with reads
// by the completions (`copy_out`'s contract), not by the thread that holds it.
unsafe impl Send for DmaBuffer {}

impl DmaBuffer {
    /// `len` zeroed bytes (at least 1), registered on `pd` for receives.
    pub fn new(pd: &Arc<ProtectionDomain>, len: usize) -> Result<DmaBuffer, VerbsError> {
        let boxed: Box<[u8]> = vec![0u8; len.max(1)].into_boxed_slice();
        let len = boxed.len();
        let raw = Box::into_raw(boxed).cast::<u8>();
        let ptr = NonNull::new(raw).ok_or_else(|| VerbsError::new("malloc", 0, "null"))?;
        let mut buf = DmaBuffer { ptr, len, mr: None };
        // SAFETY: the memory is owned by `buf`, which deregisters the region before it
        // frees the memory (`Drop`), and Rust reads it only through `copy_out`, for bytes
        // the device has finished writing.
        buf.mr = Some(unsafe { MemoryRegion::register(pd, raw, len, Access::Local) }?);
        Ok(buf)
    }

    /// The address of byte `at`, for a work request.
    pub fn addr(&self, at: usize) -> u64 {
        self.ptr.as_ptr() as u64 + at.min(self.len) as u64
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.mr.as_ref().map_or(0, MemoryRegion::lkey)
    }

    /// Copies bytes `at..at + len` out (clipped to the buffer).
    ///
    /// # Safety
    ///
    /// The device must not be writing those bytes: the receive that filled them has
    /// completed and none is posted on them. (It may be writing other parts of the buffer.)
    pub unsafe fn copy_out(&self, at: usize, len: usize) -> Vec<u8> {
        let at = at.min(self.len);
        let len = len.min(self.len - at);
        let mut out = vec![0u8; len];
        // SAFETY: `at..at + len` lies inside the allocation; the caller guarantees no
        // concurrent write to it; `out` is a distinct allocation of `len` bytes.
        unsafe { ptr::copy_nonoverlapping(self.ptr.as_ptr().add(at), out.as_mut_ptr(), len) };
        out
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        // Deregistered first, then freed.
        self.mr = None;
        let slice = ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: `ptr`/`len` came from `Box::into_raw` of a boxed slice of `len` bytes,
        // freed here once; the region over it is gone.
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// What to do when registration runs into the locked-memory limit.
fn memlock_hint() -> String {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let limit = if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } == 0 {
        if lim.rlim_cur == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            format!("{} KiB", lim.rlim_cur / 1024)
        }
    } else {
        "unknown".to_string()
    };
    format!(
        "; registration pins memory against the locked-memory limit ({limit}, `ulimit -l`): \
         raise it, or give the process CAP_IPC_LOCK (containers: --ulimit memlock=-1 \
         --cap-add IPC_LOCK)"
    )
}
