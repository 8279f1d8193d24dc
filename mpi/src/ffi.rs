//! The boundary with C: MPI's handle types as this MPI represents them (build.rs's probe),
//! the helpers of src/shim.c, and the PMPI entry points the shim forwards to.
//!
//! Nothing here decides anything; it only names what C has.

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

#[cfg(mpi_handles = "pointer")]
mod handles {
    use std::ffi::c_void;
    /// `MPI_Comm`: a pointer to the library's struct (Open MPI).
    pub type Comm = *mut c_void;
    /// `MPI_Datatype`.
    pub type Datatype = *mut c_void;
    /// `MPI_Op`.
    pub type Op = *mut c_void;
    /// `MPI_Request`.
    pub type Request = *mut c_void;
    /// `MPI_Info`.
    pub type Info = *mut c_void;
    /// A datatype argument nobody reads (a barrier's).
    pub const NO_DATATYPE: Datatype = std::ptr::null_mut();
}

#[cfg(mpi_handles = "int")]
mod handles {
    use std::ffi::c_int;
    /// `MPI_Comm`: an integer (MPICH).
    pub type Comm = c_int;
    /// `MPI_Datatype`.
    pub type Datatype = c_int;
    /// `MPI_Op`.
    pub type Op = c_int;
    /// `MPI_Request`.
    pub type Request = c_int;
    /// `MPI_Info`.
    pub type Info = c_int;
    /// A datatype argument nobody reads (a barrier's).
    pub const NO_DATATYPE: Datatype = 0;
}

pub use handles::{Comm, Datatype, Info, Op, Request, NO_DATATYPE};

/// `MPI_Aint`: an address-sized signed integer in both (`ptrdiff_t`, `long`).
pub type Aint = isize;

/// A handle sent to rcoll's progress thread, which calls MPI with it (at
/// `MPI_THREAD_MULTIPLE`, where any thread may).
#[derive(Clone, Copy)]
pub struct Sent<H>(pub H);

// SAFETY: an MPI handle is a name for an object inside MPI (a pointer Open MPI never lets
// the application dereference, or an integer); any thread may pass it to MPI at
// MPI_THREAD_MULTIPLE, the only level at which the shim sends one to another thread.
unsafe impl<H> Send for Sent<H> {}

/// Codes of `rcoll_mpi_type_info` (src/shim.c's `RT_*`).
pub mod type_code {
    /// Made by `MPI_Type_*`.
    pub const DERIVED: i32 = -2;
    /// Predefined, without an rcoll type.
    pub const OTHER: i32 = -3;
    /// `MPI_BYTE`.
    pub const BYTE: i32 = 20;
    /// `MPI_CHAR`.
    pub const CHAR: i32 = 21;
}

/// What `rcoll_mpi_type_info` says of one datatype.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TypeInfo {
    /// rcoll's C code (0 i8 ... 8 f64, as `rcollDataType_t`) or a [`type_code`].
    pub code: i32,
    /// 1 when its bytes are one run (size == extent, lower bounds 0).
    pub contiguous: i32,
    /// Bytes of data in one element.
    pub size: i64,
    /// Bytes from one element to the next.
    pub extent: i64,
}

/// The delete callback of the attribute that carries a communicator's rcoll entry.
pub type DeleteAttr = unsafe extern "C" fn(Comm, c_int, *mut c_void, *mut c_void) -> c_int;

extern "C" {
    // src/shim.c
    pub fn rcoll_mpi_type_info(t: Datatype, out: *mut TypeInfo) -> c_int;
    pub fn rcoll_mpi_pack(
        inbuf: *const c_void,
        count: c_int,
        t: Datatype,
        out: *mut c_void,
        outsize: c_int,
        c: Comm,
    ) -> c_int;
    pub fn rcoll_mpi_unpack(
        inbuf: *const c_void,
        insize: c_int,
        out: *mut c_void,
        count: c_int,
        t: Datatype,
        c: Comm,
    ) -> c_int;
    pub fn rcoll_mpi_type_dup(t: Datatype, out: *mut Datatype) -> c_int;
    pub fn rcoll_mpi_type_free(t: *mut Datatype) -> c_int;
    pub fn rcoll_mpi_type_name(t: Datatype, buf: *mut c_char, len: c_int);
    pub fn rcoll_mpi_op_code(op: Op) -> c_int;
    pub fn rcoll_mpi_is_in_place(p: *const c_void) -> c_int;
    pub fn rcoll_mpi_comm_world() -> Comm;
    pub fn rcoll_mpi_comm_info(c: Comm, rank: *mut c_int, size: *mut c_int) -> c_int;
    pub fn rcoll_mpi_bcast_bytes(buf: *mut c_void, len: c_int, root: c_int, c: Comm) -> c_int;
    pub fn rcoll_mpi_all_min(v: *mut c_int, n: c_int, c: Comm) -> c_int;
    pub fn rcoll_mpi_keyval_create(del: DeleteAttr, keyval: *mut c_int) -> c_int;
    pub fn rcoll_mpi_attr_get(c: Comm, keyval: c_int, value: *mut *mut c_void) -> c_int;
    pub fn rcoll_mpi_attr_set(c: Comm, keyval: c_int, value: *mut c_void) -> c_int;
    pub fn rcoll_mpi_keyval_free(keyval: *mut c_int) -> c_int;
    pub fn rcoll_mpi_errors_are_fatal(c: Comm) -> c_int;
    pub fn rcoll_mpi_error_class(klass: *mut c_int) -> c_int;
    pub fn rcoll_mpi_raise(c: Comm, klass: c_int, message: *const c_char) -> c_int;
    pub fn rcoll_mpi_abort(c: Comm, code: c_int) -> c_int;
    pub fn rcoll_mpi_world_rank() -> c_int;
    pub fn rcoll_mpi_world_barrier() -> c_int;
    pub fn rcoll_mpi_grequest_start(state: *mut c_void, request: *mut Request) -> c_int;
    pub fn rcoll_mpi_grequest_complete(request: Request) -> c_int;
    pub fn rcoll_mpi_thread_multiple() -> c_int;
    pub fn rcoll_mpi_is_open_mpi() -> c_int;

    // The MPI library's own entry points (the profiling interface).
    pub fn PMPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int;
    pub fn PMPI_Init_thread(
        argc: *mut c_int,
        argv: *mut *mut *mut c_char,
        required: c_int,
        provided: *mut c_int,
    ) -> c_int;
    pub fn PMPI_Finalize() -> c_int;
    pub fn PMPI_Alloc_mem(size: Aint, info: Info, baseptr: *mut c_void) -> c_int;
    pub fn PMPI_Free_mem(base: *mut c_void) -> c_int;
    pub fn PMPI_Allreduce(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: Datatype,
        op: Op,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Reduce(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: Datatype,
        op: Op,
        root: c_int,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Bcast(
        buffer: *mut c_void,
        count: c_int,
        datatype: Datatype,
        root: c_int,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Allgather(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: Datatype,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: Datatype,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Reduce_scatter_block(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcount: c_int,
        datatype: Datatype,
        op: Op,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Reduce_scatter(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        datatype: Datatype,
        op: Op,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Alltoall(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: Datatype,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: Datatype,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Gather(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: Datatype,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: Datatype,
        root: c_int,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Scatter(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: Datatype,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: Datatype,
        root: c_int,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Barrier(comm: Comm) -> c_int;
    pub fn PMPI_Iallreduce(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: Datatype,
        op: Op,
        comm: Comm,
        request: *mut Request,
    ) -> c_int;
    pub fn PMPI_Ibcast(
        buffer: *mut c_void,
        count: c_int,
        datatype: Datatype,
        root: c_int,
        comm: Comm,
        request: *mut Request,
    ) -> c_int;
    pub fn PMPI_Iallgather(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: Datatype,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: Datatype,
        comm: Comm,
        request: *mut Request,
    ) -> c_int;
    pub fn PMPI_Ireduce_scatter_block(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcount: c_int,
        datatype: Datatype,
        op: Op,
        comm: Comm,
        request: *mut Request,
    ) -> c_int;
    pub fn PMPI_Ibarrier(comm: Comm, request: *mut Request) -> c_int;
    pub fn PMPI_Wait(request: *mut Request, status: *mut c_void) -> c_int;
    pub fn PMPI_Test(request: *mut Request, flag: *mut c_int, status: *mut c_void) -> c_int;
    pub fn PMPI_Waitall(count: c_int, requests: *mut Request, statuses: *mut c_void) -> c_int;
    pub fn PMPI_Testall(
        count: c_int,
        requests: *mut Request,
        flag: *mut c_int,
        statuses: *mut c_void,
    ) -> c_int;
    pub fn PMPI_Waitany(
        count: c_int,
        requests: *mut Request,
        index: *mut c_int,
        status: *mut c_void,
    ) -> c_int;
    pub fn PMPI_Testany(
        count: c_int,
        requests: *mut Request,
        index: *mut c_int,
        flag: *mut c_int,
        status: *mut c_void,
    ) -> c_int;
    pub fn PMPI_Waitsome(
        incount: c_int,
        requests: *mut Request,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut c_void,
    ) -> c_int;
    pub fn PMPI_Testsome(
        incount: c_int,
        requests: *mut Request,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut c_void,
    ) -> c_int;
    pub fn PMPI_Request_free(request: *mut Request) -> c_int;
    pub fn PMPI_Allgatherv(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: Datatype,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        displs: *const c_int,
        recvtype: Datatype,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Gatherv(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: Datatype,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        displs: *const c_int,
        recvtype: Datatype,
        root: c_int,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Scatterv(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        displs: *const c_int,
        sendtype: Datatype,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: Datatype,
        root: c_int,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Alltoallv(
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        sdispls: *const c_int,
        sendtype: Datatype,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        rdispls: *const c_int,
        recvtype: Datatype,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Scan(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: Datatype,
        op: Op,
        comm: Comm,
    ) -> c_int;
    pub fn PMPI_Exscan(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: Datatype,
        op: Op,
        comm: Comm,
    ) -> c_int;
}

/// Runs `f`; a panic (a bug in the shim) ends the job rather than unwinding into C.
pub(crate) fn guarded(what: &str, f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(_) => {
            eprintln!("rcoll-mpi: internal error in {what}: aborting the job");
            // SAFETY: ends the job; a panic leaves nothing to return to.
            unsafe { rcoll_mpi_abort(rcoll_mpi_comm_world(), 1) };
            std::process::abort()
        }
    }
}
