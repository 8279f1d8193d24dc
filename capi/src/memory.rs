//! Memory for zero-copy sends, in NCCL's shape: [`rcollMemAlloc`] / [`rcollMemFree`]
//! (page-aligned memory, as `ncclMemAlloc` gives memory fit for registration) and
//! [`rcollCommRegister`] / [`rcollCommDeregister`] (a buffer registered with one
//! communicator's transport, as `ncclCommRegister`).

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

use rcoll::MemoryRegistration;

use crate::{check_out, comm_ref, entry, handles, invalid, put, rcollComm_t, rcollResult_t, Fail};

/// The alignment of rcollMemAlloc's memory: a page, so that registering it pins no
/// neighbour's memory.
const PAGE: usize = 4096;

/// rcollMemAlloc's allocations: start address -> layout (for rcollMemFree).
static ALLOCATIONS: Mutex<BTreeMap<usize, Layout>> = Mutex::new(BTreeMap::new());

/// Live registrations, by handle.
static REGISTRATIONS: handles::Table<Registration> = handles::Table::new(0x7263_6f6c_6c4d_0000);

/// What a registration handle names: the registration, and the communicator it was made
/// with (rcollCommDeregister must name the same one).
struct Registration {
    comm: usize,
    /// Taken by rcollCommDeregister (or dropped with the table entry).
    registration: Mutex<Option<MemoryRegistration>>,
}

fn allocations() -> MutexGuard<'static, BTreeMap<usize, Layout>> {
    // The map is consistent between calls: nothing here panics while holding it.
    ALLOCATIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Allocates `size` zeroed bytes, page-aligned, into `*ptr`: memory to register with
/// communicators ([`rcollCommRegister`]) or to use as any other. Free it with
/// [`rcollMemFree`], after deregistering it from every communicator.
///
/// # Safety
/// `ptr` is NULL (an error) or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn rcollMemAlloc(ptr: *mut *mut c_void, size: usize) -> rcollResult_t {
    entry(None, || {
        check_out(ptr, "rcollMemAlloc: ptr")?;
        if size == 0 {
            return Err(invalid("rcollMemAlloc: size is 0".into()));
        }
        let layout = Layout::from_size_align(size, PAGE).map_err(|_| {
            invalid(format!(
                "rcollMemAlloc: {size} bytes overflow the address space"
            ))
        })?;
        // SAFETY: the layout's size is not zero (checked).
        let memory = unsafe { std::alloc::alloc_zeroed(layout) };
        if memory.is_null() {
            return Err(Fail(
                rcollResult_t::rcollSystemError,
                format!("rcollMemAlloc: cannot allocate {size} bytes"),
            ));
        }
        allocations().insert(memory as usize, layout);
        // SAFETY: the caller's contract, passed on.
        unsafe { put(ptr, memory.cast(), "ptr") }
    })
}

/// Frees memory from [`rcollMemAlloc`] (NULL: nothing to do). Deregister it from every
/// communicator first: a registration outliving its memory makes sends from that range
/// read the pages registered, not what the addresses later hold.
///
/// # Safety
/// `ptr` is NULL, or memory from rcollMemAlloc that no call and no thread still uses
/// (any other pointer is refused: rcollInvalidArgument).
#[no_mangle]
pub unsafe extern "C" fn rcollMemFree(ptr: *mut c_void) -> rcollResult_t {
    entry(None, || {
        if ptr.is_null() {
            return Ok(());
        }
        let layout = allocations().remove(&(ptr as usize)).ok_or_else(|| {
            invalid(format!(
                "rcollMemFree: {ptr:p} was not allocated by rcollMemAlloc (or is freed already)"
            ))
        })?;
        // SAFETY: allocated by rcollMemAlloc with this layout (its entry, now removed, so
        // that it is freed once); unused (the caller's contract).
        unsafe { std::alloc::dealloc(ptr.cast(), layout) };
        Ok(())
    })
}

/// Registers `size` bytes at `buff` with `comm`'s transport into `*handle`: collectives
/// on `comm` that send from the range then go zero-copy over RDMA verbs (the device reads
/// the caller's memory, no copy into rcoll's buffers); over shared memory and TCP it
/// changes nothing. Any memory can be registered (rcollMemAlloc's, malloc's,
/// MPI_Alloc_mem's), the same range with several communicators. A range inside one
/// already registered with `comm` is zero-copy already, and one overlapping a registered
/// range in part stays as it is: both succeed.
///
/// Lifetime, as NCCL's: the memory must stay allocated, and must not move, until
/// [`rcollCommDeregister`] has released the handle; free it only after that. The buffer
/// must not be in use by a call in flight while it is registered or deregistered.
///
/// # Safety
/// `buff` is valid for reads and writes of `size` bytes until the handle is
/// deregistered; `handle` is NULL (an error) or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn rcollCommRegister(
    comm: rcollComm_t,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> rcollResult_t {
    let c = match comm_ref(comm, "rcollCommRegister") {
        Ok(c) => c,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&c.error), || {
        let rank = c.bg.rank();
        check_out(handle, &format!("rank {rank}: rcollCommRegister: handle"))?;
        if buff.is_null() || size == 0 {
            return Err(invalid(format!(
                "rank {rank}: rcollCommRegister: buff {buff:p}, size {size}: nothing to register"
            )));
        }
        if (buff as usize).checked_add(size).is_none() || size > isize::MAX as usize {
            return Err(invalid(format!(
                "rank {rank}: rcollCommRegister: {size} bytes at {buff:p} pass the end of the address space"
            )));
        }
        let (start, len) = (buff as usize, size);
        // After the communicator's queued calls, so that none uses the buffer meanwhile.
        let made = c.bg.run(move |comm| {
            // SAFETY: the caller's contract: `size` bytes at `buff`, valid for reads and
            // writes, and used by no call in flight; the slice lives for this call only
            // (the registration outlives it, which the caller's contract covers: it
            // deregisters before freeing).
            let memory = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
            comm.register_bytes(memory)
        })?;
        let named = REGISTRATIONS.insert::<c_void>(Registration {
            comm: comm as usize,
            registration: Mutex::new(Some(made)),
        });
        // SAFETY: the caller's contract, passed on.
        let written = unsafe { put(handle, named, "handle") };
        if written.is_err() {
            REGISTRATIONS.remove(named);
        }
        written
    })
}

/// Releases a registration made by [`rcollCommRegister`] on the same `comm`, after
/// `comm`'s queued calls; the handle is no longer live afterwards. The memory may be
/// freed once this returns.
///
/// # Safety
/// None beyond the types: any value of `comm` and `handle` is checked.
#[no_mangle]
pub unsafe extern "C" fn rcollCommDeregister(
    comm: rcollComm_t,
    handle: *mut c_void,
) -> rcollResult_t {
    let c = match comm_ref(comm, "rcollCommDeregister") {
        Ok(c) => c,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&c.error), || {
        let rank = c.bg.rank();
        let named = REGISTRATIONS.get(handle).ok_or_else(|| {
            invalid(format!(
                "rank {rank}: rcollCommDeregister: handle {handle:p} is not a live registration"
            ))
        })?;
        if named.comm != comm as usize {
            return Err(invalid(format!(
                "rank {rank}: rcollCommDeregister: handle {handle:p} was registered with another communicator"
            )));
        }
        REGISTRATIONS.remove(handle);
        let registration = take(&named);
        // Dropped after the queued calls, which may still send from the memory.
        c.bg.run(move |_| {
            drop(registration);
            Ok(())
        })?;
        Ok(())
    })
}

fn take(named: &Arc<Registration>) -> Option<MemoryRegistration> {
    named
        .registration
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
}
