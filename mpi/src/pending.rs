//! Nonblocking calls below `MPI_THREAD_MULTIPLE`: the progress thread may not call MPI,
//! so it cannot complete the generalized request. The shim's `MPI_Wait`, `MPI_Test`,
//! `MPI_Waitall`, `MPI_Testall`, `MPI_Waitany`, `MPI_Testany`, `MPI_Waitsome`,
//! `MPI_Testsome` and `MPI_Request_free` complete, on the application's thread, each of
//! the shim's requests among theirs whose rcoll call has ended (or, where the call waits
//! for them all, once it ends), then hand the array to MPI's own function. A call that
//! waits for any one of several polls instead of blocking in MPI: MPI would wait for a
//! request only the shim can complete.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::ffi::{self, Request};

/// The shim's requests not yet completed, by handle, with their rcoll calls.
static PENDING: Mutex<Option<HashMap<usize, rcoll::Request<()>>>> = Mutex::new(None);
/// Their number: completion calls of programs without any look no further.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn key(r: Request) -> usize {
    r as usize
}

/// Keeps `request` (a generalized request whose call `call` runs) for the completion
/// calls to complete.
pub fn keep(request: Request, call: rcoll::Request<()>) {
    let mut map = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    map.get_or_insert_with(HashMap::new)
        .insert(key(request), call);
    COUNT.store(map.as_ref().map_or(0, HashMap::len), Ordering::Release);
}

/// Whether to wait for the shim's requests' calls, or only take those that ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Wait for each call to end.
    Wait,
    /// Only those already ended.
    Ended,
}

/// Completes the shim's requests among `requests` whose calls have ended (`Ended`) or
/// once they end (`Wait`). Returns how many of the shim's requests are left among them.
pub fn settle(requests: &[Request], how: Settle) -> usize {
    if COUNT.load(Ordering::Acquire) == 0 {
        return 0;
    }
    let mut left = 0;
    for &r in requests {
        let call = {
            let mut map = PENDING.lock().unwrap_or_else(|p| p.into_inner());
            let Some(m) = map.as_mut() else { return 0 };
            let take = match m.get(&key(r)) {
                None => false,
                Some(c) => how == Settle::Wait || c.test(),
            };
            let call = if take { m.remove(&key(r)) } else { None };
            if !take && m.contains_key(&key(r)) {
                left += 1;
            }
            COUNT.store(m.len(), Ordering::Release);
            call
        };
        if let Some(call) = call {
            // The outcome is the generalized request's (its query function reports it).
            let _ = call.wait();
            // SAFETY: a request the shim started and has not completed (it was pending).
            unsafe { ffi::rcoll_mpi_grequest_complete(r) };
        }
    }
    left
}

/// The requests of an MPI array argument (none for a NULL pointer or a count below 1).
///
/// # Safety
/// `array` holds `count` requests (MPI's contract), unchanged while the slice lives.
pub unsafe fn requests<'a>(array: *const Request, count: c_int) -> &'a [Request] {
    match usize::try_from(count) {
        Ok(n) if n > 0 && !array.is_null() => {
            // SAFETY: the caller's contract.
            unsafe { std::slice::from_raw_parts(array, n) }
        }
        _ => &[],
    }
}

/// A pause between polls of a call waiting for any one request: a yield, so that the
/// progress thread (which runs the rcoll call) and MPI's progress both advance.
pub fn pause() {
    std::thread::yield_now();
}
