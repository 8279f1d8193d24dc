//! The functions rcoll calls in libibverbs: the table of them, filled at run time with
//! `dlopen` and versioned `dlvsym`, and the hot-path verbs the header defines inline.

use super::*;

/// The library's file names, in the order tried (`RCOLL_IBVERBS_LIB` first, when set).
const LIBRARY_NAMES: [&str; 2] = ["libibverbs.so.1", "libibverbs.so"];

/// Declares the exported functions: the table's fields and the loader that fills them.
macro_rules! verbs_functions {
    ($( $name:ident @ $version:literal : fn($($arg:ty),*) $(-> $ret:ty)?; )*) => {
        /// The exported functions of libibverbs that rcoll calls.
        pub struct Lib {
            /// The file that was opened.
            pub library: String,
            /// `_ibv_query_gid_table@IBVERBS_1.11`, absent before rdma-core 32: the whole
            /// GID table with types and interfaces in one call (else sysfs is read).
            pub query_gid_table: Option<QueryGidTable>,
            $(
                #[doc = concat!("`", stringify!($name), "@", $version, "`.")]
                pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,
            )*
        }

        impl Lib {
            pub(super) fn resolve(handle: *mut c_void, library: String) -> Result<Lib, LoadError> {
                Ok(Lib {
                    $(
                        // SAFETY: the symbol, found at the version whose ABI the signature
                        // above copies from verbs.h, is a function of that signature.
                        $name: unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(
                                symbol(handle, &library, stringify!($name), $version)?,
                            )
                        },
                    )*
                    query_gid_table: symbol(handle, &library, "_ibv_query_gid_table", "IBVERBS_1.11")
                        .ok()
                        .map(|p| {
                            // SAFETY: the symbol at IBVERBS_1.11 has the signature of
                            // `QueryGidTable`, copied from verbs.h.
                            unsafe { std::mem::transmute::<*mut c_void, QueryGidTable>(p) }
                        }),
                    library,
                })
            }
        }
    };
}

verbs_functions! {
    ibv_get_device_list @ "IBVERBS_1.1": fn(*mut c_int) -> *mut *mut ibv_device;
    ibv_free_device_list @ "IBVERBS_1.1": fn(*mut *mut ibv_device);
    ibv_get_device_name @ "IBVERBS_1.1": fn(*mut ibv_device) -> *const c_char;
    ibv_open_device @ "IBVERBS_1.1": fn(*mut ibv_device) -> *mut ibv_context;
    ibv_close_device @ "IBVERBS_1.1": fn(*mut ibv_context) -> c_int;
    ibv_query_device @ "IBVERBS_1.1": fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
    ibv_query_port @ "IBVERBS_1.1": fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
    ibv_query_gid @ "IBVERBS_1.1": fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    ibv_alloc_pd @ "IBVERBS_1.1": fn(*mut ibv_context) -> *mut ibv_pd;
    ibv_dealloc_pd @ "IBVERBS_1.1": fn(*mut ibv_pd) -> c_int;
    ibv_reg_mr @ "IBVERBS_1.1": fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
    ibv_dereg_mr @ "IBVERBS_1.1": fn(*mut ibv_mr) -> c_int;
    ibv_create_comp_channel @ "IBVERBS_1.0": fn(*mut ibv_context) -> *mut ibv_comp_channel;
    ibv_destroy_comp_channel @ "IBVERBS_1.0": fn(*mut ibv_comp_channel) -> c_int;
    ibv_create_cq @ "IBVERBS_1.1":
        fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
    ibv_destroy_cq @ "IBVERBS_1.1": fn(*mut ibv_cq) -> c_int;
    ibv_get_cq_event @ "IBVERBS_1.1":
        fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
    ibv_ack_cq_events @ "IBVERBS_1.1": fn(*mut ibv_cq, c_uint);
    ibv_create_qp @ "IBVERBS_1.1": fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    ibv_destroy_qp @ "IBVERBS_1.1": fn(*mut ibv_qp) -> c_int;
    ibv_modify_qp @ "IBVERBS_1.1": fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
    ibv_wc_status_str @ "IBVERBS_1.1": fn(c_uint) -> *const c_char;
}

/// libibverbs, opened on first use and kept for the life of the process (never closed:
/// providers it loaded may have threads and atexit handlers).
pub fn lib() -> Result<&'static Lib, LoadError> {
    static LIB: OnceLock<Result<Lib, LoadError>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Lib, LoadError> {
    let custom = std::env::var("RCOLL_IBVERBS_LIB")
        .ok()
        .filter(|s| !s.is_empty());
    let names: Vec<String> = match custom {
        Some(name) => vec![name],
        None => LIBRARY_NAMES.iter().map(|s| s.to_string()).collect(),
    };
    let mut dlerror = String::new();
    for name in &names {
        let Ok(cname) = std::ffi::CString::new(name.as_str()) else {
            dlerror = format!("{name:?} has a NUL byte");
            continue;
        };
        // SAFETY: a NUL-terminated name; RTLD_NOW resolves everything now, so a broken
        // library fails here rather than at a later call.
        let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            dlerror = last_dlerror();
            continue;
        }
        return Lib::resolve(handle, name.clone());
    }
    Err(LoadError::Library {
        tried: names.join(" or "),
        dlerror,
    })
}

fn symbol(
    handle: *mut c_void,
    library: &str,
    name: &'static str,
    version: &'static str,
) -> Result<*mut c_void, LoadError> {
    let missing = |dlerror| LoadError::Symbol {
        library: library.to_owned(),
        symbol: name,
        version,
        dlerror,
    };
    let cname = std::ffi::CString::new(name).map_err(|_| missing(String::new()))?;
    let cversion = std::ffi::CString::new(version).map_err(|_| missing(String::new()))?;
    // SAFETY: a live handle from dlopen and NUL-terminated strings.
    let p = unsafe { versioned_symbol(handle, &cname, &cversion) };
    if p.is_null() {
        return Err(missing(last_dlerror()));
    }
    Ok(p)
}

/// `dlvsym` where the C library versions symbols (glibc); plain `dlsym` elsewhere.
///
/// # Safety
///
/// `handle` must come from `dlopen` and not be closed.
#[cfg(target_env = "gnu")]
unsafe fn versioned_symbol(handle: *mut c_void, name: &CStr, version: &CStr) -> *mut c_void {
    // SAFETY: the caller's handle; NUL-terminated strings.
    unsafe { libc::dlvsym(handle, name.as_ptr(), version.as_ptr()) }
}

/// See the glibc version.
///
/// # Safety
///
/// `handle` must come from `dlopen` and not be closed.
#[cfg(not(target_env = "gnu"))]
unsafe fn versioned_symbol(handle: *mut c_void, name: &CStr, _version: &CStr) -> *mut c_void {
    // SAFETY: the caller's handle; a NUL-terminated string.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}

pub(super) fn last_dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call
    // on this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return String::new();
    }
    // SAFETY: as above.
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

// ---------------------------------------------------------------------------------------
// The inline verbs, through the ops table as verbs.h does.

/// `ibv_post_send`.
///
/// # Safety
///
/// `qp` is a live queue pair; `wr` a valid list whose memory follows the verbs rules.
pub unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: a live QP points at its live context, whose ops the provider filled.
    match unsafe { (*(*qp).context).ops.post_send } {
        // SAFETY: the caller's contract.
        Some(f) => unsafe { f(qp, wr, bad) },
        None => libc::ENOSYS,
    }
}

/// `ibv_post_recv`.
///
/// # Safety
///
/// As [`ibv_post_send`].
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: as in `ibv_post_send`.
    match unsafe { (*(*qp).context).ops.post_recv } {
        // SAFETY: the caller's contract.
        Some(f) => unsafe { f(qp, wr, bad) },
        None => libc::ENOSYS,
    }
}

/// `ibv_poll_cq`.
///
/// # Safety
///
/// `cq` is a live completion queue and `wc` has room for `n` entries.
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: a live CQ points at its live context.
    match unsafe { (*(*cq).context).ops.poll_cq } {
        // SAFETY: the caller's contract.
        Some(f) => unsafe { f(cq, n, wc) },
        None => -libc::ENOSYS,
    }
}

/// `ibv_req_notify_cq`.
///
/// # Safety
///
/// `cq` is a live completion queue.
pub unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: a live CQ points at its live context.
    match unsafe { (*(*cq).context).ops.req_notify_cq } {
        // SAFETY: the caller's contract.
        Some(f) => unsafe { f(cq, solicited_only) },
        None => libc::ENOSYS,
    }
}
