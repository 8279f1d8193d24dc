//! Communicators: the unique id, joining a group, split, the size and rank, abort and
//! destroy.

use std::ffi::{c_char, c_int};

use rcoll::process::{Builder, UniqueId, UNIQUE_ID_BYTES};

use crate::{
    check_out, comm_ref, entry, invalid, put, rcollComm_t, rcollResult_t, rcollUniqueId, wrap,
    COMMS, RCOLL_UNIQUE_ID_BYTES,
};

/// Starts a rendezvous on this process, which must be rank 0 of the new group, and
/// describes it in `id` (its address, on `RCOLL_SOCKET_IFNAME` or the host's first
/// non-loopback interface, and a fresh secret). Hand `id` to every rank.
///
/// # Safety
/// `id` is NULL (an error) or valid for writing an rcollUniqueId.
#[no_mangle]
pub unsafe extern "C" fn rcollGetUniqueId(id: *mut rcollUniqueId) -> rcollResult_t {
    entry(None, || {
        check_out(id, "rcollGetUniqueId: id")?;
        let made = UniqueId::new()?;
        let bytes = made.to_bytes();
        let mut out = rcollUniqueId {
            internal: [0; RCOLL_UNIQUE_ID_BYTES],
        };
        for (o, b) in out.internal.iter_mut().zip(bytes) {
            *o = b as c_char;
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { put(id, out, "id") }
    })
}

/// Joins the group of `nranks` that `id` names as rank `rank` (transport and interface
/// from `RCOLL_TRANSPORT` and `RCOLL_SOCKET_IFNAME`). Blocks until every rank has joined
/// or `RCOLL_TIMEOUT` passes.
///
/// # Safety
/// `comm` is NULL (an error) or valid for writing a handle.
#[no_mangle]
pub unsafe extern "C" fn rcollCommInitRank(
    comm: *mut rcollComm_t,
    nranks: c_int,
    id: rcollUniqueId,
    rank: c_int,
) -> rcollResult_t {
    entry(None, || {
        let n = usize::try_from(nranks)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| invalid(format!("rcollCommInitRank: nranks {nranks} < 1")))?;
        let r = usize::try_from(rank)
            .ok()
            .filter(|&r| r < n)
            .ok_or_else(|| {
                invalid(format!(
                    "rcollCommInitRank: rank {rank} is not in a group of {nranks}"
                ))
            })?;
        check_out(comm, "rcollCommInitRank: comm")?;
        let bytes: [u8; UNIQUE_ID_BYTES] = id.internal.map(|c| c as u8);
        let id = UniqueId::from_bytes(&bytes)
            .map_err(|e| invalid(format!("rcollCommInitRank: rank {rank}: {e}")))?;
        let built = Builder::from_unique_id(&id, r, n)?.build()?;
        let handle = wrap(built)?;
        // SAFETY: the caller's contract, passed on.
        unsafe { put(comm, handle, "comm") }
    })
}

/// Joins the group the environment describes: `mpirun` (Open MPI), `srun`, `torchrun`
/// or `RCOLL_RANK`/`RCOLL_WORLD_SIZE`/`RCOLL_ROOT_ADDR`, with the job secret in
/// `RCOLL_UNIQUE_ID` (see the README).
///
/// # Safety
/// `comm` is NULL (an error) or valid for writing a handle.
#[no_mangle]
pub unsafe extern "C" fn rcollCommInitFromEnv(comm: *mut rcollComm_t) -> rcollResult_t {
    entry(None, || {
        check_out(comm, "rcollCommInitFromEnv: comm")?;
        let handle = wrap(rcoll::process::init()?)?;
        // SAFETY: the caller's contract, passed on.
        unsafe { put(comm, handle, "comm") }
    })
}

/// Splits `comm`: ranks with the same `color` form `*newcomm`, ranked by `key` and then
/// by rank in `comm`; `color` RCOLL_SPLIT_NOCOLOR (any negative) gives NULL. Every rank of
/// `comm` must call it; `comm` stays usable.
///
/// # Safety
/// `comm` is a live handle; `newcomm` is NULL (an error) or valid for writing a handle.
#[no_mangle]
pub unsafe extern "C" fn rcollCommSplit(
    comm: rcollComm_t,
    color: c_int,
    key: c_int,
    newcomm: *mut rcollComm_t,
) -> rcollResult_t {
    let c = match comm_ref(comm, "rcollCommSplit") {
        Ok(c) => c,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&c.error), || {
        check_out(
            newcomm,
            &format!("rank {}: rcollCommSplit: newcomm", c.bg.rank()),
        )?;
        let color = u32::try_from(color).ok();
        let made = c.bg.run(|parent| parent.split(color, i64::from(key)))?;
        let handle = match made {
            Some(m) => wrap(m)?,
            None => std::ptr::null_mut(),
        };
        // SAFETY: the caller's contract, passed on.
        unsafe { put(newcomm, handle, "newcomm") }
    })
}

/// The number of ranks.
///
/// # Safety
/// `comm` is a live handle; `count` is NULL (an error) or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn rcollCommCount(comm: rcollComm_t, count: *mut c_int) -> rcollResult_t {
    let c = match comm_ref(comm, "rcollCommCount") {
        Ok(c) => c,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&c.error), || {
        let n = c_int::try_from(c.bg.size()).unwrap_or(c_int::MAX);
        // SAFETY: the caller's contract.
        unsafe { put(count, n, "rcollCommCount: count") }
    })
}

/// This rank.
///
/// # Safety
/// `comm` is a live handle; `rank` is NULL (an error) or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn rcollCommUserRank(comm: rcollComm_t, rank: *mut c_int) -> rcollResult_t {
    let c = match comm_ref(comm, "rcollCommUserRank") {
        Ok(c) => c,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&c.error), || {
        let r = c_int::try_from(c.bg.rank()).unwrap_or(c_int::MAX);
        // SAFETY: the caller's contract.
        unsafe { put(rank, r, "rcollCommUserRank: rank") }
    })
}

/// Aborts the group from any thread: a call running on `comm` (on another thread, or
/// queued) ends within 100 ms with an error, the other ranks' calls fail at once naming
/// this rank, and `comm` is no longer live (later calls with it return
/// rcollInvalidArgument). Returns without waiting for the calls it ends; the communicator
/// is freed when the last of them has returned.
///
/// # Safety
/// None beyond the types: any value of `comm` is checked.
#[no_mangle]
pub unsafe extern "C" fn rcollCommAbort(comm: rcollComm_t) -> rcollResult_t {
    entry(None, || {
        let c = comm_ref(comm, "rcollCommAbort")?;
        // Ended first, so that no new call starts on it; the running one is interrupted.
        COMMS.remove(comm);
        c.bg.abort("rcollCommAbort");
        Ok(())
    })
}

/// Frees `comm` once its queued calls have finished; a call still running on another
/// thread keeps it until it returns. `comm` is no longer live afterwards.
///
/// # Safety
/// None beyond the types: any value of `comm` is checked.
#[no_mangle]
pub unsafe extern "C" fn rcollCommDestroy(comm: rcollComm_t) -> rcollResult_t {
    entry(None, || {
        let c = comm_ref(comm, "rcollCommDestroy")?;
        COMMS.remove(comm);
        drop(c);
        Ok(())
    })
}
