//! The completion calls: `MPI_Wait`, `MPI_Test` and their `all`, `any` and `some` forms,
//! and `MPI_Request_free`. A nonblocking call the shim served is a generalized request;
//! below `MPI_THREAD_MULTIPLE` no thread but the application's may complete it, so each of
//! these first settles the shim's requests among the ones it is given ([`pending`]), then
//! hands all of them to the MPI library's own `PMPI_*` call, unchanged.

use std::ffi::{c_int, c_void};

use crate::ffi::guarded;
use crate::ffi::{self, Request};
use crate::pending::{self, Settle};

/// `MPI_Wait`: the shim's request completed once its call ends, then MPI's.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Wait(request: *mut Request, status: *mut c_void) -> c_int {
    guarded("MPI_Wait", || {
        // SAFETY: MPI's contract: `request` points to one request.
        pending::settle(unsafe { pending::requests(request, 1) }, Settle::Wait);
        // SAFETY: the caller's arguments, passed on.
        unsafe { ffi::PMPI_Wait(request, status) }
    })
}

/// `MPI_Test`: the shim's request completed if its call has ended, then MPI's.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Test(
    request: *mut Request,
    flag: *mut c_int,
    status: *mut c_void,
) -> c_int {
    guarded("MPI_Test", || {
        // SAFETY: MPI's contract: `request` points to one request.
        pending::settle(unsafe { pending::requests(request, 1) }, Settle::Ended);
        // SAFETY: the caller's arguments, passed on.
        unsafe { ffi::PMPI_Test(request, flag, status) }
    })
}

/// `MPI_Waitall`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    requests: *mut Request,
    statuses: *mut c_void,
) -> c_int {
    guarded("MPI_Waitall", || {
        // SAFETY: MPI's contract: `count` requests.
        pending::settle(unsafe { pending::requests(requests, count) }, Settle::Wait);
        // SAFETY: the caller's arguments, passed on.
        unsafe { ffi::PMPI_Waitall(count, requests, statuses) }
    })
}

/// `MPI_Testall`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    requests: *mut Request,
    flag: *mut c_int,
    statuses: *mut c_void,
) -> c_int {
    guarded("MPI_Testall", || {
        // SAFETY: MPI's contract: `count` requests.
        pending::settle(unsafe { pending::requests(requests, count) }, Settle::Ended);
        // SAFETY: the caller's arguments, passed on.
        unsafe { ffi::PMPI_Testall(count, requests, flag, statuses) }
    })
}

/// `MPI_Waitany`: polls while any of the shim's requests among them is pending (MPI alone
/// would wait for a request only the shim completes).
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    requests: *mut Request,
    index: *mut c_int,
    status: *mut c_void,
) -> c_int {
    guarded("MPI_Waitany", || loop {
        // SAFETY: MPI's contract: `count` requests.
        let reqs = unsafe { pending::requests(requests, count) };
        if pending::settle(reqs, Settle::Ended) == 0 {
            // SAFETY: the caller's arguments, passed on.
            return unsafe { ffi::PMPI_Waitany(count, requests, index, status) };
        }
        let mut flag: c_int = 0;
        // SAFETY: the caller's arguments, passed on; `flag` writable.
        let rc = unsafe { ffi::PMPI_Testany(count, requests, index, &mut flag, status) };
        if rc != 0 || flag != 0 {
            return rc;
        }
        pending::pause();
    })
}

/// `MPI_Testany`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    requests: *mut Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut c_void,
) -> c_int {
    guarded("MPI_Testany", || {
        // SAFETY: MPI's contract: `count` requests.
        pending::settle(unsafe { pending::requests(requests, count) }, Settle::Ended);
        // SAFETY: the caller's arguments, passed on.
        unsafe { ffi::PMPI_Testany(count, requests, index, flag, status) }
    })
}

/// `MPI_Waitsome`: polls while any of the shim's requests among them is pending.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitsome(
    incount: c_int,
    requests: *mut Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut c_void,
) -> c_int {
    guarded("MPI_Waitsome", || loop {
        // SAFETY: MPI's contract: `incount` requests.
        let reqs = unsafe { pending::requests(requests, incount) };
        if pending::settle(reqs, Settle::Ended) == 0 {
            // SAFETY: the caller's arguments, passed on.
            return unsafe { ffi::PMPI_Waitsome(incount, requests, outcount, indices, statuses) };
        }
        // SAFETY: the caller's arguments, passed on.
        let rc = unsafe { ffi::PMPI_Testsome(incount, requests, outcount, indices, statuses) };
        // SAFETY: set by MPI_Testsome.
        if rc != 0 || unsafe { *outcount } != 0 {
            return rc;
        }
        pending::pause();
    })
}

/// `MPI_Testsome`.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testsome(
    incount: c_int,
    requests: *mut Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut c_void,
) -> c_int {
    guarded("MPI_Testsome", || {
        // SAFETY: MPI's contract: `incount` requests.
        pending::settle(
            unsafe { pending::requests(requests, incount) },
            Settle::Ended,
        );
        // SAFETY: the caller's arguments, passed on.
        unsafe { ffi::PMPI_Testsome(incount, requests, outcount, indices, statuses) }
    })
}

/// `MPI_Request_free`: a pending call of the shim's runs to its end first.
///
/// # Safety
/// MPI's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_free(request: *mut Request) -> c_int {
    guarded("MPI_Request_free", || {
        // SAFETY: MPI's contract: `request` points to one request.
        pending::settle(unsafe { pending::requests(request, 1) }, Settle::Wait);
        // SAFETY: the caller's argument, passed on.
        unsafe { ffi::PMPI_Request_free(request) }
    })
}
