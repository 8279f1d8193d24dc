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
//! - **Registered memory** ([`rcollMemAlloc`], [`rcollCommRegister`]): sends from a
//!   buffer registered with a communicator go zero-copy over RDMA verbs; deregister it
//!   before freeing it, as NCCL asks.
//! - A communicator may be used from several threads (calls are serialised in the order
//!   they arrive); its last error is one per communicator.
//!
//! `unsafe` lives in this crate only where C hands over pointers: every block has a
//! `SAFETY` comment, every pointer and length is checked first.

#![allow(non_camel_case_types)]

mod call;
mod collectives;
mod comm;
mod handles;
mod memory;
mod shrink;

pub use shrink::{RCOLL_SHRINK_ABORT, RCOLL_SHRINK_DEFAULT};

pub use collectives::*;
pub use comm::*;
pub use memory::*;

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use rcoll::process::UNIQUE_ID_BYTES;
use rcoll::{Background, Communicator, Error, Request};

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
    /// Taken by whoever removed the request from its table: it completes once.
    pending: Mutex<Option<Request<()>>>,
    error: Arc<Mutex<CString>>,
}

/// A nonblocking call's handle. Once [`rcollTest`] reported it done, or [`rcollWait`]
/// returned, it is no longer live: using it again returns `rcollInvalidArgument`.
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
            Error::Transport { .. }
            | Error::Bootstrap { .. }
            | Error::Excluded { .. }
            | Error::Agreement { .. } => rcollRemoteError,
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

/// Keeps `text` as the communicator's last error, and this thread's: a call that ended
/// its communicator (an abort from another thread) is still explained through the handle
/// that is no longer live.
fn record(error: Option<&Mutex<CString>>, text: &str) {
    let text = c_text(text);
    if let Some(e) = error {
        *e.lock().unwrap_or_else(|p| p.into_inner()) = text.clone();
    }
    let _ = LAST.try_with(|l| *l.borrow_mut() = text);
}

/// The communicator behind a handle, or an error for NULL.
///
/// # Safety
/// `comm` is NULL or a handle from this library that has not been destroyed.
/// Live communicators, by handle.
static COMMS: handles::Table<rcollComm> = handles::Table::new(0x7263_6f6c_6c43_0000);
/// Live requests, by handle.
static REQUESTS: handles::Table<rcollRequest> = handles::Table::new(0x7263_6f6c_6c52_0000);

/// What `comm` names, held for the length of a call.
fn comm_ref(comm: rcollComm_t, call: &str) -> Result<Arc<rcollComm>, Fail> {
    if comm.is_null() {
        return Err(invalid(format!("{call}: comm is NULL")));
    }
    COMMS.get(comm).ok_or_else(|| {
        invalid(format!(
            "{call}: comm {comm:p} is not a live communicator (destroyed or aborted \
             already, or never one)"
        ))
    })
}

fn wrap(comm: Communicator) -> Result<rcollComm_t, Fail> {
    let bg = Background::new(comm)?;
    Ok(COMMS.insert(rcollComm {
        bg,
        error: Arc::new(Mutex::new(CString::default())),
    }))
}

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
/// A handle that is not live (destroyed or aborted) reads this thread's last error.
#[no_mangle]
pub extern "C" fn rcollGetLastError(comm: rcollComm_t) -> *const c_char {
    let text = match COMMS.get(comm) {
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
