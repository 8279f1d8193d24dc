//! The collectives and point to point, blocking and nonblocking, and the requests of the
//! nonblocking ones: each call's arguments checked ([`Raw::check`]) before any
//! communication.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use crate::call::{Kind, Raw};
use crate::{
    check_out, comm_ref, entry, invalid, put, rcollComm_t, rcollRequest, rcollRequest_t,
    rcollResult_t, DataTypeArg, Fail, RedOpArg, REQUESTS,
};

/// A blocking call: checked, then run in issue order on the calling thread.
///
/// # Safety
/// `comm` is NULL or a live handle; the buffers are valid for the call (the API's
/// contract).
unsafe fn blocking(comm: rcollComm_t, raw: Raw) -> rcollResult_t {
    let c = match comm_ref(comm, "a collective") {
        Ok(c) => c,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&c.error), || {
        let call = raw.check(c.bg.rank(), c.bg.size()).map_err(invalid)?;
        // SAFETY: the buffers `check` accepted are valid for the call (the caller's
        // contract), and this call blocks until the collective is done with them.
        c.bg.run(|comm| unsafe { call.run(comm) })?;
        Ok(())
    })
}

/// A nonblocking call: checked now, queued, `*request` set.
///
/// # Safety
/// `comm` is NULL or a live handle; `request` NULL or writable; the buffers stay valid
/// until the request completes (the API's contract).
unsafe fn nonblocking(comm: rcollComm_t, raw: Raw, request: *mut rcollRequest_t) -> rcollResult_t {
    let c = match comm_ref(comm, "a nonblocking collective") {
        Ok(c) => c,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&c.error), || {
        check_out(
            request,
            &format!("rank {}: a nonblocking collective: request", c.bg.rank()),
        )?;
        let raw = Raw {
            nonblocking: true,
            ..raw
        };
        let call = raw.check(c.bg.rank(), c.bg.size()).map_err(invalid)?;
        // SAFETY: the buffers stay valid until the request completes (the caller's
        // contract for nonblocking calls); the job runs before it completes.
        let pending = c.bg.submit(move |comm| unsafe { call.run(comm) });
        let handle = REQUESTS.insert(rcollRequest {
            pending: Mutex::new(Some(pending)),
            error: Arc::clone(&c.error),
        });
        // SAFETY: the caller's contract, passed on.
        unsafe { put(request, handle, "request") }
    })
}

/// AllReduce: every rank's `recvbuff` becomes the reduction of all ranks' `sendbuff`
/// (`count` elements). In place: `sendbuff == recvbuff`.
///
/// # Safety
/// `comm` is a live handle; the buffers hold `count` elements.
#[no_mangle]
pub unsafe extern "C" fn rcollAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: DataTypeArg,
    op: RedOpArg,
    comm: rcollComm_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        blocking(
            comm,
            Raw::new(
                Kind::AllReduce,
                sendbuff,
                recvbuff,
                count,
                datatype.0,
                op.0,
                0,
            ),
        )
    }
}

/// Broadcast: every rank's `recvbuff` becomes the root's `sendbuff` (`count` elements;
/// `sendbuff` is read on the root only). In place: `sendbuff == recvbuff`.
///
/// # Safety
/// `comm` is a live handle; the buffers hold `count` elements.
#[no_mangle]
pub unsafe extern "C" fn rcollBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: DataTypeArg,
    root: c_int,
    comm: rcollComm_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        blocking(
            comm,
            Raw::new(
                Kind::Broadcast,
                sendbuff,
                recvbuff,
                count,
                datatype.0,
                0,
                root,
            ),
        )
    }
}

/// Reduce: the root's `recvbuff` becomes the reduction of all ranks' `sendbuff`
/// (`recvbuff` is written on the root only). In place: `sendbuff == recvbuff`.
///
/// # Safety
/// `comm` is a live handle; the buffers hold `count` elements.
#[no_mangle]
pub unsafe extern "C" fn rcollReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: DataTypeArg,
    op: RedOpArg,
    root: c_int,
    comm: rcollComm_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        blocking(
            comm,
            Raw::new(
                Kind::Reduce,
                sendbuff,
                recvbuff,
                count,
                datatype.0,
                op.0,
                root,
            ),
        )
    }
}

/// AllGather: `recvbuff` (nranks * `sendcount` elements) becomes every rank's
/// `sendbuff` in rank order. In place: `sendbuff == recvbuff + rank * sendcount`.
///
/// # Safety
/// `comm` is a live handle; the buffers hold their element counts.
#[no_mangle]
pub unsafe extern "C" fn rcollAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: DataTypeArg,
    comm: rcollComm_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        blocking(
            comm,
            Raw::new(
                Kind::AllGather,
                sendbuff,
                recvbuff,
                sendcount,
                datatype.0,
                0,
                0,
            ),
        )
    }
}

/// ReduceScatter: rank r's `recvbuff` (`recvcount` elements) becomes block r of the
/// reduction of every rank's `sendbuff` (nranks * `recvcount`). In place:
/// `sendbuff + rank * recvcount == recvbuff`.
///
/// # Safety
/// `comm` is a live handle; the buffers hold their element counts.
#[no_mangle]
pub unsafe extern "C" fn rcollReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: DataTypeArg,
    op: RedOpArg,
    comm: rcollComm_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        blocking(
            comm,
            Raw::new(
                Kind::ReduceScatter,
                sendbuff,
                recvbuff,
                recvcount,
                datatype.0,
                op.0,
                0,
            ),
        )
    }
}

/// AllToAll: block j (`count` elements) of rank i's `sendbuff` becomes block i of rank
/// j's `recvbuff`; both hold nranks * `count`. In place: `sendbuff == recvbuff`.
///
/// # Safety
/// `comm` is a live handle; the buffers hold nranks * `count` elements.
#[no_mangle]
pub unsafe extern "C" fn rcollAllToAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: DataTypeArg,
    comm: rcollComm_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        blocking(
            comm,
            Raw::new(Kind::AllToAll, sendbuff, recvbuff, count, datatype.0, 0, 0),
        )
    }
}

/// Gather: the root's `recvbuff` (nranks * `sendcount`) becomes every rank's `sendbuff`
/// in rank order. In place on the root: `sendbuff == recvbuff + root * sendcount`.
///
/// # Safety
/// `comm` is a live handle; the buffers hold their element counts.
#[no_mangle]
pub unsafe extern "C" fn rcollGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: DataTypeArg,
    root: c_int,
    comm: rcollComm_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        blocking(
            comm,
            Raw::new(
                Kind::Gather,
                sendbuff,
                recvbuff,
                sendcount,
                datatype.0,
                0,
                root,
            ),
        )
    }
}

/// Scatter: rank r's `recvbuff` (`recvcount`) becomes block r of the root's `sendbuff`
/// (nranks * `recvcount`). In place on the root: `sendbuff + root * recvcount ==
/// recvbuff`.
///
/// # Safety
/// `comm` is a live handle; the buffers hold their element counts.
#[no_mangle]
pub unsafe extern "C" fn rcollScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: DataTypeArg,
    root: c_int,
    comm: rcollComm_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        blocking(
            comm,
            Raw::new(
                Kind::Scatter,
                sendbuff,
                recvbuff,
                recvcount,
                datatype.0,
                0,
                root,
            ),
        )
    }
}

/// Barrier: returns once every rank has entered it.
///
/// # Safety
/// `comm` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcollBarrier(comm: rcollComm_t) -> rcollResult_t {
    let r = Raw::new(
        Kind::Barrier,
        std::ptr::null(),
        std::ptr::null(),
        0,
        0,
        0,
        0,
    );
    // SAFETY: the caller's contract, passed on.
    unsafe { blocking(comm, r) }
}

/// Sends `count` elements to `peer`, which calls rcollRecv with the same count; messages
/// between two ranks match in call order.
///
/// # Safety
/// `comm` is a live handle; `sendbuff` holds `count` elements.
#[no_mangle]
pub unsafe extern "C" fn rcollSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: DataTypeArg,
    peer: c_int,
    comm: rcollComm_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        blocking(
            comm,
            Raw::new(
                Kind::Send,
                sendbuff,
                std::ptr::null(),
                count,
                datatype.0,
                0,
                peer,
            ),
        )
    }
}

/// Receives `count` elements from `peer` (see rcollSend).
///
/// # Safety
/// `comm` is a live handle; `recvbuff` holds `count` elements.
#[no_mangle]
pub unsafe extern "C" fn rcollRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: DataTypeArg,
    peer: c_int,
    comm: rcollComm_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        blocking(
            comm,
            Raw::new(
                Kind::Recv,
                std::ptr::null(),
                recvbuff,
                count,
                datatype.0,
                0,
                peer,
            ),
        )
    }
}

/// Nonblocking rcollAllReduce.
///
/// # Safety
/// As rcollAllReduce, with the buffers valid until the request completes; `request` is
/// valid for writing a handle.
#[no_mangle]
pub unsafe extern "C" fn rcollIAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: DataTypeArg,
    op: RedOpArg,
    comm: rcollComm_t,
    request: *mut rcollRequest_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        nonblocking(
            comm,
            Raw::new(
                Kind::AllReduce,
                sendbuff,
                recvbuff,
                count,
                datatype.0,
                op.0,
                0,
            ),
            request,
        )
    }
}

/// Nonblocking rcollBroadcast.
///
/// # Safety
/// As rcollBroadcast, with the buffers valid until the request completes; `request` is
/// valid for writing a handle.
#[no_mangle]
pub unsafe extern "C" fn rcollIBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: DataTypeArg,
    root: c_int,
    comm: rcollComm_t,
    request: *mut rcollRequest_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        nonblocking(
            comm,
            Raw::new(
                Kind::Broadcast,
                sendbuff,
                recvbuff,
                count,
                datatype.0,
                0,
                root,
            ),
            request,
        )
    }
}

/// Nonblocking rcollAllGather.
///
/// # Safety
/// As rcollAllGather, with the buffers valid until the request completes; `request` is
/// valid for writing a handle.
#[no_mangle]
pub unsafe extern "C" fn rcollIAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: DataTypeArg,
    comm: rcollComm_t,
    request: *mut rcollRequest_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        nonblocking(
            comm,
            Raw::new(
                Kind::AllGather,
                sendbuff,
                recvbuff,
                sendcount,
                datatype.0,
                0,
                0,
            ),
            request,
        )
    }
}

/// Nonblocking rcollReduceScatter.
///
/// # Safety
/// As rcollReduceScatter, with the buffers valid until the request completes; `request`
/// is valid for writing a handle.
#[no_mangle]
pub unsafe extern "C" fn rcollIReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: DataTypeArg,
    op: RedOpArg,
    comm: rcollComm_t,
    request: *mut rcollRequest_t,
) -> rcollResult_t {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        nonblocking(
            comm,
            Raw::new(
                Kind::ReduceScatter,
                sendbuff,
                recvbuff,
                recvcount,
                datatype.0,
                op.0,
                0,
            ),
            request,
        )
    }
}

/// Sets `*done` to 1 and ends `request` if its call has finished (returning the call's
/// result), else sets `*done` to 0 and returns rcollSuccess. Never blocks. After done,
/// `request` is no longer live: a later rcollTest or rcollWait on it returns
/// rcollInvalidArgument (as MPI_Test sets a completed request to MPI_REQUEST_NULL).
///
/// # Safety
/// `done` is NULL (an error) or writable; any value of `request` is checked.
#[no_mangle]
pub unsafe extern "C" fn rcollTest(request: rcollRequest_t, done: *mut c_int) -> rcollResult_t {
    let req = match request_ref(request, "rcollTest") {
        Ok(r) => r,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&req.error), || {
        check_out(done, "rcollTest: done")?;
        let finished = lock(&req.pending).as_ref().is_some_and(|p| p.test());
        if !finished {
            // SAFETY: the caller's contract, passed on.
            return unsafe { put(done, 0, "done") };
        }
        // Two threads testing one request: one completes it, the other finds it gone.
        let pending = REQUESTS
            .remove(request)
            .and_then(|r| lock(&r.pending).take())
            .ok_or_else(|| gone(request, "rcollTest"))?;
        // SAFETY: the caller's contract, passed on.
        unsafe { put(done, 1, "done") }?;
        pending.wait()?;
        Ok(())
    })
}

/// Waits for `request`'s call to finish, ends `request` and returns the call's result.
/// `request` is no longer live afterwards.
///
/// # Safety
/// None beyond the types: any value of `request` is checked.
#[no_mangle]
pub unsafe extern "C" fn rcollWait(request: rcollRequest_t) -> rcollResult_t {
    let req = match request_ref(request, "rcollWait") {
        Ok(r) => r,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&req.error), || {
        let pending = REQUESTS
            .remove(request)
            .and_then(|r| lock(&r.pending).take())
            .ok_or_else(|| gone(request, "rcollWait"))?;
        pending.wait()?;
        Ok(())
    })
}

/// What `request` names, held for the length of a call.
fn request_ref(request: rcollRequest_t, call: &str) -> Result<Arc<rcollRequest>, Fail> {
    if request.is_null() {
        return Err(invalid(format!("{call}: request is NULL")));
    }
    REQUESTS.get(request).ok_or_else(|| gone(request, call))
}

fn gone(request: rcollRequest_t, call: &str) -> Fail {
    invalid(format!(
        "{call}: request {request:p} is not live (completed by rcollTest or rcollWait \
         already, or never one)"
    ))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
