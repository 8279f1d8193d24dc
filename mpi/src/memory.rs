//! `MPI_Alloc_mem` and `MPI_Free_mem`: memory the application asks MPI for because it
//! will communicate from it, given by the shim and registered with rcoll, so that served
//! collectives sending from it go zero-copy over RDMA verbs (the device reads the
//! application's memory; no copy into rcoll's buffers). MPI implementations do the same
//! with their own networks (Open MPI registers `MPI_Alloc_mem` memory with its BTLs).
//!
//! An allocation is registered with a communicator's rcoll communicator at the first
//! served call on that communicator that uses it (registering is local, but the
//! communicator's transport is only known then), once per communicator; `MPI_Free_mem`
//! deregisters it from all of them, then frees it — the order NCCL asks for. Over shared
//! memory and TCP registration changes nothing, and costs nothing.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use rcoll::{Communicator, MemoryRegistration};

use crate::ffi::{self, Aint, Info};

/// The alignment of the shim's allocations: a page, so that registering one pins no
/// neighbour's memory.
const PAGE: usize = 4096;

/// One `MPI_Alloc_mem` allocation.
struct Allocation {
    layout: Layout,
    /// Its registrations, by communicator (see [`register_for`]'s `comm`).
    registrations: Vec<(usize, MemoryRegistration)>,
}

/// Live allocations by start address.
static ALLOCATIONS: Mutex<BTreeMap<usize, Allocation>> = Mutex::new(BTreeMap::new());
/// How many are live: a served call looks its buffers up only when some are.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// `MPI_Alloc_mem` calls served, and registrations made (for the stats line).
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static REGISTERED: AtomicU64 = AtomicU64::new(0);

fn allocations() -> MutexGuard<'static, BTreeMap<usize, Allocation>> {
    // A panic while held is caught at the C boundary, which ends the job.
    ALLOCATIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers, with the rcoll communicator `rcoll` (named by `comm`, stable while it
/// lives), the allocations that hold `buffers` and are not registered with it yet. A
/// failure to register costs only the zero copy: the call copies, as from any memory.
pub fn register_for(rcoll: &mut Communicator, comm: usize, buffers: [*const c_void; 2]) {
    if LIVE.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut map = allocations();
    for b in buffers {
        let at = b as usize;
        let Some((&start, allocation)) = map.range_mut(..=at).next_back() else {
            continue;
        };
        let len = allocation.layout.size();
        if at >= start + len || allocation.registrations.iter().any(|(c, _)| *c == comm) {
            continue;
        }
        // SAFETY: the allocation's memory, live until MPI_Free_mem, which drops this
        // registration before freeing it; the slice lives for this call only, before the
        // collective makes its own of the same memory.
        let memory = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
        if let Ok(r) = rcoll.register_bytes(memory) {
            REGISTERED.fetch_add(u64::from(r.is_registered()), Ordering::Relaxed);
            allocation.registrations.push((comm, r));
        }
    }
}

/// Drops every registration (before the communicators close at `MPI_Finalize`); the
/// memory stays allocated until `MPI_Free_mem`.
pub fn deregister_all() {
    for allocation in allocations().values_mut() {
        allocation.registrations.clear();
    }
}

/// The stats line (`RCOLL_MPI_STATS=1`) when the program allocated through
/// `MPI_Alloc_mem`, with the world communicator's zero-copy sends.
pub fn stats_line(zero_copy_sends: u64) -> Option<String> {
    let allocated = ALLOCATED.load(Ordering::Relaxed);
    (allocated > 0).then(|| {
        format!(
            "rcoll-mpi: registered memory: {allocated} MPI_Alloc_mem, {} registrations, \
             {zero_copy_sends} zero-copy sends on MPI_COMM_WORLD",
            REGISTERED.load(Ordering::Relaxed)
        )
    })
}

/// `MPI_Alloc_mem`: page-aligned memory the shim registers as collectives use it, or
/// MPI's own where the shim serves nothing (before `MPI_Init`, `RCOLL_MPI=0`, a size of
/// 0 or less).
///
/// # Safety
/// MPI's contract for this call: `baseptr` points to a `void *` to write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Alloc_mem(size: Aint, info: Info, baseptr: *mut c_void) -> c_int {
    crate::ffi::guarded("MPI_Alloc_mem", || {
        let serving = crate::comms::control().is_some_and(|c| c.enabled);
        let layout = usize::try_from(size)
            .ok()
            .filter(|&n| n > 0)
            .and_then(|n| Layout::from_size_align(n, PAGE).ok());
        let (Some(layout), true, false) = (layout, serving, baseptr.is_null()) else {
            // SAFETY: the caller's arguments, passed on.
            return unsafe { ffi::PMPI_Alloc_mem(size, info, baseptr) };
        };
        // SAFETY: the layout's size is not zero (filtered above).
        let memory = unsafe { std::alloc::alloc_zeroed(layout) };
        if memory.is_null() {
            // MPI's answer to memory it cannot give.
            // SAFETY: the caller's arguments, passed on.
            return unsafe { ffi::PMPI_Alloc_mem(size, info, baseptr) };
        }
        allocations().insert(
            memory as usize,
            Allocation {
                layout,
                registrations: Vec::new(),
            },
        );
        LIVE.fetch_add(1, Ordering::Release);
        ALLOCATED.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract: `baseptr` points to a writable `void *`
        // (unaligned allowed: Fortran passes any address).
        unsafe { baseptr.cast::<*mut c_void>().write_unaligned(memory.cast()) };
        0
    })
}

/// `MPI_Free_mem`: the shim's allocations deregistered from every communicator, then
/// freed; anything else (MPI's own) to MPI.
///
/// # Safety
/// MPI's contract for this call: `base` came from `MPI_Alloc_mem` and no call in flight
/// uses it.
#[no_mangle]
pub unsafe extern "C" fn MPI_Free_mem(base: *mut c_void) -> c_int {
    crate::ffi::guarded("MPI_Free_mem", || {
        let Some(allocation) = allocations().remove(&(base as usize)) else {
            // SAFETY: the caller's argument, passed on.
            return unsafe { ffi::PMPI_Free_mem(base) };
        };
        LIVE.fetch_sub(1, Ordering::Release);
        let Allocation {
            layout,
            registrations,
        } = allocation;
        // Deregistered before the memory goes (NCCL's order).
        drop(registrations);
        // SAFETY: allocated by MPI_Alloc_mem above with this layout, its entry removed (so
        // freed once); unused (the caller's contract).
        unsafe { std::alloc::dealloc(base.cast(), layout) };
        0
    })
}
