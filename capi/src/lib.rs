//! # librcoll: rcoll's C ABI
//!
//! NCCL's shape without the stream (`capi/include/rcoll.h`, generated from this crate by
//! cbindgen): rank 0 makes an [`rcollUniqueId`] with [`rcollGetUniqueId`], the program
//! hands it to every rank (with `MPI_Bcast`, for example), each calls
//! [`rcollCommInitRank`], then collectives on the caller's buffers.
//!
//! - **Arguments are checked before any communication**: a NULL or misaligned pointer, a
//!   bad datatype, op, root or peer, a count whose byte size overflows, or buffers that
//!   overlap without being the in-place form return `rcollInvalidArgument`, and the
//!   communicator stays usable. Errors during a collective (a dead peer, a timeout) leave
//!   it unusable, as in Rust; [`rcollGetLastError`] says what failed, naming the ranks.
//! - **No panic crosses the boundary**: every entry point catches one and returns
//!   `rcollInternalError`.
//! - **Nonblocking calls** (`rcollI*`) are queued and run on the communicator's progress
//!   thread in issue order, so the caller's computation overlaps them; blocking calls run
//!   on the calling thread once the queued ones are done. The buffers of a nonblocking call
//!   must stay valid, and neither be written, until [`rcollTest`] says it is done or
//!   [`rcollWait`] returns.
//! - A communicator may be used from several threads (calls are serialised in the order
//!   they arrive); its last error is one per communicator.
//!
//! `unsafe` lives in this crate only where C hands over pointers: every block has a
//! `SAFETY` comment, every pointer and length is checked first.

#![allow(non_camel_case_types)]

mod call;

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use rcoll::process::{Builder, UniqueId, UNIQUE_ID_BYTES};
use rcoll::{Background, Communicator, Error, Request};

use call::{Kind, Raw};

/// Bytes of an [`rcollUniqueId`].
pub const RCOLL_UNIQUE_ID_BYTES: usize = 128;
const _: () = assert!(RCOLL_UNIQUE_ID_BYTES == UNIQUE_ID_BYTES);

/// `rcollSplit`'s color for a rank that joins no new communicator.
pub const RCOLL_SPLIT_NOCOLOR: c_int = -1;

/// What a call returned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum rcollResult_t {
    /// Done.
    rcollSuccess = 0,
    /// The system refused something (a socket, memory, a thread).
    rcollSystemError = 2,
    /// A bug in rcoll (a panic caught at the boundary).
    rcollInternalError = 3,
    /// A bad argument, found before any communication: the communicator stays usable.
    rcollInvalidArgument = 4,
    /// A call that cannot be made now (a communicator that failed earlier, ranks that
    /// disagree, a configuration rcoll refuses).
    rcollInvalidUsage = 5,
    /// Another rank failed, died or broke the protocol.
    rcollRemoteError = 6,
    /// Not finished yet.
    rcollInProgress = 7,
    /// No progress within the communicator's timeout (`RCOLL_TIMEOUT`).
    rcollTimeout = 8,
}

/// Element types.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum rcollDataType_t {
    /// `int8_t`
    rcollInt8 = 0,
    /// `uint8_t`
    rcollUint8 = 1,
    /// `int32_t`
    rcollInt32 = 2,
    /// `uint32_t`
    rcollUint32 = 3,
    /// `int64_t`
    rcollInt64 = 4,
    /// `uint64_t`
    rcollUint64 = 5,
    /// IEEE binary16 (`_Float16`); reductions accumulate in float.
    rcollFloat16 = 6,
    /// `float`
    rcollFloat32 = 7,
    /// `double`
    rcollFloat64 = 8,
    /// bfloat16; reductions accumulate in float.
    rcollBfloat16 = 9,
}

/// Reductions.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum rcollRedOp_t {
    /// Sum (integers wrap).
    rcollSum = 0,
    /// Product (integers wrap).
    rcollProd = 1,
    /// Maximum.
    rcollMax = 2,
    /// Minimum.
    rcollMin = 3,
    /// Sum divided by the number of ranks (integers truncate).
    rcollAvg = 4,
}

/// A datatype as C passes it: any int, checked before use (an out-of-range value is an
/// error, not undefined behaviour). Declared as `rcollDataType_t` in the header.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct DataTypeArg(c_int);

/// A reduction as C passes it (see [`DataTypeArg`]). Declared as `rcollRedOp_t`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct RedOpArg(c_int);

/// A result code as C passes it back (any int). Declared as `rcollResult_t`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct ResultArg(c_int);

/// Everything ranks need to find each other: the rendezvous address and a job secret.
/// Made by [`rcollGetUniqueId`] on rank 0, copied whole to the others.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rcollUniqueId {
    /// Opaque.
    pub internal: [c_char; RCOLL_UNIQUE_ID_BYTES],
}

/// A communicator (opaque).
pub struct rcollComm {
    bg: Background,
    error: Arc<Mutex<CString>>,
}

/// A communicator handle.
pub type rcollComm_t = *mut rcollComm;

/// A nonblocking call in flight (opaque).
pub struct rcollRequest {
    pending: Request<()>,
    error: Arc<Mutex<CString>>,
}

/// A nonblocking call's handle: freed by [`rcollTest`] once done, or by [`rcollWait`].
pub type rcollRequest_t = *mut rcollRequest;

/// A failed call: its code and text.
struct Fail(rcollResult_t, String);

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        use rcollResult_t::*;
        // Arguments are checked here before any communication ([`Raw::check`]); what the
        // library itself refuses past that has aborted the group: invalid usage.
        let code = match &e {
            Error::Timeout { .. } => rcollTimeout,
            Error::Transport { .. } | Error::Bootstrap { .. } => rcollRemoteError,
            Error::Registration { .. } => rcollSystemError,
            Error::Internal { .. } => rcollInternalError,
            _ => rcollInvalidUsage,
        };
        // A collective that found a peer dead says so inside its text; the code follows
        // what went wrong, not where it was noticed.
        Fail(code, e.to_string())
    }
}

fn invalid(what: String) -> Fail {
    Fail(rcollResult_t::rcollInvalidArgument, what)
}

thread_local! {
    /// The last error of a call that had no communicator (or failed to make one).
    static LAST: RefCell<CString> = RefCell::new(CString::default());
    /// What rcollGetLastError last returned on this thread (its pointer points here).
    static SHOWN: RefCell<CString> = RefCell::new(CString::default());
}

fn c_text(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

/// Runs an entry point: its error recorded (in `error`, or this thread's), a panic
/// caught.
fn entry(error: Option<&Mutex<CString>>, f: impl FnOnce() -> Result<(), Fail>) -> rcollResult_t {
    let outcome = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return rcollResult_t::rcollSuccess,
        Ok(Err(fail)) => fail,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Fail(
                rcollResult_t::rcollInternalError,
                format!("internal error (a panic, caught at the C boundary): {what}"),
            )
        }
    };
    record(error, &outcome.1);
    outcome.0
}

fn record(error: Option<&Mutex<CString>>, text: &str) {
    match error {
        Some(e) => *e.lock().unwrap_or_else(|p| p.into_inner()) = c_text(text),
        None => {
            let _ = LAST.try_with(|l| *l.borrow_mut() = c_text(text));
        }
    }
}

/// The communicator behind a handle, or an error for NULL.
///
/// # Safety
/// `comm` is NULL or a handle from this library that has not been destroyed.
unsafe fn comm_ref<'a>(comm: rcollComm_t, call: &str) -> Result<&'a rcollComm, Fail> {
    // SAFETY: the caller's contract: a live handle (a Box we leaked) or NULL.
    unsafe { comm.as_ref() }.ok_or_else(|| invalid(format!("{call}: comm is NULL")))
}

fn wrap(comm: Communicator) -> Result<rcollComm_t, Fail> {
    let bg = Background::new(comm)?;
    Ok(Box::into_raw(Box::new(rcollComm {
        bg,
        error: Arc::new(Mutex::new(CString::default())),
    })))
}

/// Whether `out` can take a `T`: not NULL, aligned. Checked before any work, so that a
/// bad out-pointer fails the call with nothing done.
fn check_out<T>(out: *mut T, what: &str) -> Result<(), Fail> {
    if out.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    if out as usize % std::mem::align_of::<T>() != 0 {
        return Err(invalid(format!("{what} is misaligned")));
    }
    Ok(())
}

/// Writes `value` to `out`, or fails for NULL or misaligned (see [`check_out`]).
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), Fail> {
    check_out(out, what)?;
    // SAFETY: non-null and aligned (checked), valid for writes (the caller's contract).
    unsafe { out.write(value) };
    Ok(())
}

/// The library's version: major * 10000 + minor * 100 + patch.
///
/// # Safety
/// `version` is NULL (an error) or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn rcollGetVersion(version: *mut c_int) -> rcollResult_t {
    entry(None, || {
        let part = |s: &str| s.parse::<c_int>().unwrap_or(0);
        let v = part(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
            + part(env!("CARGO_PKG_VERSION_MINOR")) * 100
            + part(env!("CARGO_PKG_VERSION_PATCH"));
        // SAFETY: the caller's contract, passed on.
        unsafe { put(version, v, "version") }
    })
}

/// A static description of a result code.
#[no_mangle]
pub extern "C" fn rcollGetErrorString(result: ResultArg) -> *const c_char {
    let text: &'static CStr = match result.0 {
        0 => c"success",
        2 => c"system error (a socket, memory or thread the system refused)",
        3 => c"internal error (a bug in rcoll)",
        4 => c"invalid argument",
        5 => c"invalid usage",
        6 => c"remote error (another rank failed, died or broke the protocol)",
        7 => c"in progress",
        8 => c"timeout",
        _ => c"unknown result code",
    };
    text.as_ptr()
}

/// The text of the last error on `comm` (NULL: of the last call on this thread that had
/// no communicator, such as a failed rcollCommInitRank), naming the ranks involved; ""
/// if none. The text is copied for this thread: the pointer stays valid until this
/// thread calls rcollGetLastError again, whatever other threads do.
///
/// # Safety
/// `comm` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rcollGetLastError(comm: rcollComm_t) -> *const c_char {
    // SAFETY: the caller's contract.
    let text = match unsafe { comm.as_ref() } {
        Some(c) => c.error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        None => LAST.try_with(|l| l.borrow().clone()).unwrap_or_default(),
    };
    SHOWN
        .try_with(|s| {
            *s.borrow_mut() = text;
            s.borrow().as_ptr()
        })
        .unwrap_or(c"".as_ptr())
}

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
    // SAFETY: the caller's contract.
    let Ok(c) = (unsafe { comm_ref(comm, "rcollCommSplit") }) else {
        return entry(None, || Err(invalid("rcollCommSplit: comm is NULL".into())));
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
    // SAFETY: the caller's contract.
    let c = match unsafe { comm_ref(comm, "rcollCommCount") } {
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
    // SAFETY: the caller's contract.
    let c = match unsafe { comm_ref(comm, "rcollCommUserRank") } {
        Ok(c) => c,
        Err(f) => return entry(None, || Err(f)),
    };
    entry(Some(&c.error), || {
        let r = c_int::try_from(c.bg.rank()).unwrap_or(c_int::MAX);
        // SAFETY: the caller's contract.
        unsafe { put(rank, r, "rcollCommUserRank: rank") }
    })
}

/// Aborts the group (the other ranks' calls fail at once, naming this rank) and frees
/// `comm`; queued nonblocking calls fail. A collective already running on the progress
/// thread ends first, at its next failure or timeout.
///
/// # Safety
/// `comm` is NULL (an error) or a live handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn rcollCommAbort(comm: rcollComm_t) -> rcollResult_t {
    entry(None, || {
        if comm.is_null() {
            return Err(invalid("rcollCommAbort: comm is NULL".into()));
        }
        // SAFETY: a live handle (the caller's contract), made by Box::into_raw in wrap.
        let c = unsafe { Box::from_raw(comm) };
        c.bg.abort("rcollCommAbort");
        drop(c);
        Ok(())
    })
}

/// Frees `comm` once its queued calls have finished.
///
/// # Safety
/// `comm` is NULL (an error) or a live handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn rcollCommDestroy(comm: rcollComm_t) -> rcollResult_t {
    entry(None, || {
        if comm.is_null() {
            return Err(invalid("rcollCommDestroy: comm is NULL".into()));
        }
        // SAFETY: a live handle (the caller's contract), made by Box::into_raw in wrap.
        drop(unsafe { Box::from_raw(comm) });
        Ok(())
    })
}

/// A blocking call: checked, then run in issue order on the calling thread.
///
/// # Safety
/// `comm` is NULL or a live handle; the buffers are valid for the call (the API's
/// contract).
unsafe fn blocking(comm: rcollComm_t, raw: Raw) -> rcollResult_t {
    // SAFETY: the caller's contract.
    let c = match unsafe { comm_ref(comm, "a collective") } {
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
    // SAFETY: the caller's contract.
    let c = match unsafe { comm_ref(comm, "a nonblocking collective") } {
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
        let handle = Box::into_raw(Box::new(rcollRequest {
            pending,
            error: Arc::clone(&c.error),
        }));
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

/// Sets `*done` to 1 and frees `request` if its call has finished (returning the call's
/// result), else sets `*done` to 0 and returns rcollSuccess. Never blocks.
///
/// # Safety
/// `request` is NULL (an error) or a live request; `done` is NULL (an error) or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn rcollTest(request: rcollRequest_t, done: *mut c_int) -> rcollResult_t {
    // SAFETY: the caller's contract: NULL or a live request.
    let Some(req) = (unsafe { request.as_ref() }) else {
        return entry(None, || Err(invalid("rcollTest: request is NULL".into())));
    };
    if !req.pending.test() {
        // SAFETY: the caller's contract, passed on.
        return entry(Some(&req.error), || unsafe { put(done, 0, "done") });
    }
    let error = Arc::clone(&req.error);
    entry(Some(&error), || {
        // SAFETY: the caller's contract, passed on.
        unsafe { put(done, 1, "done") }?;
        // SAFETY: a live request made by Box::into_raw in `nonblocking`; freed here,
        // once, and the caller does not use it again after done.
        let req = unsafe { Box::from_raw(request) };
        req.pending.wait()?;
        Ok(())
    })
}

/// Waits for `request`'s call to finish, frees it and returns the call's result.
///
/// # Safety
/// `request` is NULL (an error) or a live request, not used again.
#[no_mangle]
pub unsafe extern "C" fn rcollWait(request: rcollRequest_t) -> rcollResult_t {
    if request.is_null() {
        return entry(None, || Err(invalid("rcollWait: request is NULL".into())));
    }
    // SAFETY: a live request made by Box::into_raw in `nonblocking` (the caller's
    // contract); freed here, once.
    let req = unsafe { Box::from_raw(request) };
    let error = Arc::clone(&req.error);
    entry(Some(&error), || {
        req.pending.wait()?;
        Ok(())
    })
}
