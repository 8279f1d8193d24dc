//! Shrink: the survivors of a failure carry on as a smaller communicator (as NCCL's
//! `ncclCommShrink`), and what the shrink left out.

use std::ffi::c_int;

use crate::{check_out, comm_ref, entry, invalid, put, rcollComm_t, rcollResult_t, wrap, Fail};

/// [`rcollCommShrink`]'s flags: wait for the calls queued on `comm` to end (each ends,
/// with an error where it needs a failed rank, within the timeout).
pub const RCOLL_SHRINK_DEFAULT: c_int = 0;
/// [`rcollCommShrink`]'s flags: after an error, abort what is queued or running on `comm`
/// first (each such call ends with an error at once; nothing is written into its buffers
/// after it ended), as NCCL's `NCCL_SHRINK_ABORT`.
pub const RCOLL_SHRINK_ABORT: c_int = 1;

/// Makes `*newcomm` from the ranks of `comm` that are neither in `excludeRanks` (its
/// `excludeCount` ranks of `comm`) nor found failed: every surviving rank calls it (after
/// a call failed, or with the same `excludeRanks` everywhere to remove healthy ranks), and
/// they agree on the failed ranks, the same set on every one of them. Ranks keep their
/// order (the new rank `i` is the `i`-th surviving rank); connections, shared memory and
/// queue pairs are reused, with no rendezvous and no root. A rank in `excludeRanks` that
/// calls it gets `*newcomm` NULL; one the survivors left out (stopped past the timeout)
/// gets `rcollRemoteError`. `comm` is unusable afterwards: destroy it. `flags`:
/// [`RCOLL_SHRINK_DEFAULT`] or [`RCOLL_SHRINK_ABORT`].
///
/// # Safety
/// `comm` is a live handle; `excludeRanks` is valid for reading `excludeCount` ints (or
/// NULL with a count of 0); `newcomm` is NULL (an error) or valid for writing a handle.
#[no_mangle]
// NCCL's argument names (ncclCommShrink), which the header shows.
#[allow(non_snake_case)]
pub unsafe extern "C" fn rcollCommShrink(
    comm: rcollComm_t,
    excludeRanks: *mut c_int,
    excludeCount: c_int,
    newcomm: *mut rcollComm_t,
    flags: c_int,
) -> rcollResult_t {
    let c = match comm_ref(comm, "rcollCommShrink") {
        Ok(c) => c,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&c.error), || {
        let me = c.bg.rank();
        let n = c.bg.size();
        let what = |s: &str| format!("rank {me}: rcollCommShrink: {s}");
        check_out(newcomm, &what("newcomm"))?;
        if flags & !RCOLL_SHRINK_ABORT != 0 {
            return Err(invalid(what(&format!("unknown flags {flags:#x}"))));
        }
        let count = usize::try_from(excludeCount)
            .map_err(|_| invalid(what(&format!("excludeCount {excludeCount} is negative"))))?;
        let exclude: Vec<usize> = if count == 0 {
            Vec::new()
        } else {
            if excludeRanks.is_null() {
                return Err(invalid(what("excludeRanks is NULL")));
            }
            if excludeRanks as usize % std::mem::align_of::<c_int>() != 0 {
                return Err(invalid(what("excludeRanks is misaligned")));
            }
            // SAFETY: non-null and aligned (checked); valid for `count` ints (the caller's
            // contract); only read, and copied before anything else runs.
            let given = unsafe { std::slice::from_raw_parts(excludeRanks, count) };
            given
                .iter()
                .map(|&r| {
                    usize::try_from(r).ok().filter(|&r| r < n).ok_or_else(|| {
                        invalid(what(&format!("excluded rank {r} is not one of {n} ranks")))
                    })
                })
                .collect::<Result<_, Fail>>()?
        };
        if exclude.contains(&me) {
            // SAFETY: the caller's contract, passed on.
            return unsafe { put(newcomm, std::ptr::null_mut(), "newcomm") };
        }
        if flags & RCOLL_SHRINK_ABORT != 0 {
            c.bg.abort("rcollCommShrink after an error");
        }
        let shrunk = c.bg.run(|old| old.shrink(&exclude))?;
        let handle = wrap(shrunk)?;
        // SAFETY: the caller's contract, passed on.
        unsafe { put(newcomm, handle, "newcomm") }
    })
}

/// The ranks of its parent that the shrink which made `comm` left out (failed, or
/// excluded), ascending, the same on every member: up to `capacity` of them into
/// `ranks`, and how many there are into `*count` (0 for a communicator no shrink made).
///
/// # Safety
/// `comm` is a live handle; `ranks` is valid for writing `capacity` ints (or NULL with a
/// capacity of 0); `count` is NULL (an error) or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn rcollCommShrinkExcluded(
    comm: rcollComm_t,
    ranks: *mut c_int,
    capacity: c_int,
    count: *mut c_int,
) -> rcollResult_t {
    let c = match comm_ref(comm, "rcollCommShrinkExcluded") {
        Ok(c) => c,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&c.error), || {
        let what = |s: &str| format!("rank {}: rcollCommShrinkExcluded: {s}", c.bg.rank());
        check_out(count, &what("count"))?;
        let room = usize::try_from(capacity)
            .map_err(|_| invalid(what(&format!("capacity {capacity} is negative"))))?;
        if room > 0 && (ranks.is_null() || ranks as usize % std::mem::align_of::<c_int>() != 0) {
            return Err(invalid(what("ranks is NULL or misaligned")));
        }
        let excluded = c.bg.run(|comm| {
            Ok(comm
                .shrunk()
                .map(|s| s.excluded.clone())
                .unwrap_or_default())
        })?;
        for (i, &r) in excluded.iter().take(room).enumerate() {
            let r = c_int::try_from(r).unwrap_or(c_int::MAX);
            // SAFETY: `i < room`: inside the `capacity` ints the caller gave (non-null and
            // aligned, checked).
            unsafe { ranks.add(i).write(r) };
        }
        let n = c_int::try_from(excluded.len()).unwrap_or(c_int::MAX);
        // SAFETY: the caller's contract.
        unsafe { put(count, n, "count") }
    })
}
