//! Non-contiguous datatypes in data movements: the side of such a datatype is packed into
//! contiguous bytes (`MPI_Pack`) before rcoll moves it and unpacked (`MPI_Unpack`) after,
//! so that a root gathering into a matrix's column while the others send plain vectors
//! is served on every rank alike (forwarding on the root alone would leave the others
//! waiting in rcoll). Within one MPI library the packed form is the data's bytes in order,
//! which is what a contiguous datatype on another rank holds.

use std::ffi::{c_int, c_void};

use crate::decide::{Args, Plan, Ty};
use crate::ffi::{self, Comm, Datatype, Sent};

/// The packed copies of one call's staged sides.
pub struct Stage {
    send: Option<Vec<u8>>,
    recv: Option<Unpack>,
}

/// Where the receive side's bytes go at the end.
struct Unpack {
    bytes: Vec<u8>,
    /// The application's buffer.
    to: usize,
    /// The shim's own reference to the datatype (the application may free its handle
    /// before a nonblocking call completes).
    dtype: Sent<Datatype>,
    comm: Sent<Comm>,
}

impl Stage {
    /// Packs the staged sides this rank uses (a receive side only when it is also the
    /// input: in place).
    ///
    /// # Safety
    /// `send` and `recv` hold what the plan says this rank uses, in the call's datatypes
    /// (MPI's contract); `args` are the call's.
    pub unsafe fn new(
        plan: &Plan,
        args: &Args<'_, Datatype>,
        comm: Comm,
        (send, recv): (*const c_void, *mut c_void),
        (rank, size): (usize, usize),
    ) -> Result<Stage, String> {
        let (send_len, recv_len) = plan.lengths(rank, size);
        let mut stage = Stage {
            send: None,
            recv: None,
        };
        if plan.staged.0 && send_len > 0 {
            // SAFETY: the caller's contract: `send` holds `send_len` bytes of data.
            stage.send = Some(unsafe { pack(send, send_len, args.send.dtype, comm)? });
        }
        if plan.staged.1 && recv_len > 0 {
            let bytes = if plan.in_place {
                // SAFETY: the caller's contract: in place, `recv` holds the input too.
                unsafe { pack(recv, recv_len, args.recv.dtype, comm)? }
            } else {
                vec![0; recv_len]
            };
            let mut dup = std::mem::MaybeUninit::<Datatype>::uninit();
            // SAFETY: a valid datatype (the caller's), `dup` writable.
            if unsafe { ffi::rcoll_mpi_type_dup(args.recv.dtype, dup.as_mut_ptr()) } != 0 {
                return Err("MPI_Type_dup of the receive datatype failed".into());
            }
            stage.recv = Some(Unpack {
                bytes,
                to: recv as usize,
                // SAFETY: set by the successful MPI_Type_dup.
                dtype: Sent(unsafe { dup.assume_init() }),
                comm: Sent(comm),
            });
        }
        Ok(stage)
    }

    /// The buffers rcoll runs on: the packed copies where there are some.
    pub fn buffers(
        &mut self,
        send: *const c_void,
        recv: *mut c_void,
    ) -> (*const c_void, *mut c_void) {
        (
            self.send
                .as_ref()
                .map_or(send, |b| b.as_ptr().cast::<c_void>()),
            self.recv
                .as_mut()
                .map_or(recv, |u| u.bytes.as_mut_ptr().cast::<c_void>()),
        )
    }

    /// Unpacks the receive side into the application's buffer (`done`: rcoll's call
    /// succeeded; otherwise only the shim's datatype reference is released).
    ///
    /// # Safety
    /// The application's receive buffer is still valid (until the call or its request
    /// completes, by MPI's contract).
    pub unsafe fn finish(self, done: bool) -> Result<(), String> {
        let Some(mut u) = self.recv else {
            return Ok(());
        };
        let unpacked = if done {
            // SAFETY: the caller's contract; the datatype is the shim's live duplicate.
            unsafe { unpack(&u.bytes, u.to as *mut c_void, u.dtype.0, u.comm.0) }
        } else {
            Ok(())
        };
        // SAFETY: the duplicate made in `new`, freed once.
        unsafe { ffi::rcoll_mpi_type_free(&mut u.dtype.0) };
        unpacked
    }
}

/// Elements of `dtype` per `MPI_Pack` call: its byte counts are `int`s.
fn chunk(size: usize) -> usize {
    (c_int::MAX as usize / size.max(1)).max(1)
}

/// `bytes` of data of `dtype` at `from` as contiguous bytes.
///
/// # Safety
/// `from` holds `bytes / size(dtype)` elements of `dtype`.
unsafe fn pack(
    from: *const c_void,
    bytes: usize,
    dtype: Datatype,
    comm: Comm,
) -> Result<Vec<u8>, String> {
    let ty = type_of(dtype);
    let mut out = vec![0u8; bytes];
    let elements = bytes / ty.size.max(1);
    let mut done = 0;
    while done < elements {
        let k = chunk(ty.size).min(elements - done);
        let want = k * ty.size;
        // SAFETY: element `done` of the application's buffer (its extent apart), `k`
        // elements read; `out` has room for `want` bytes from `done * size`.
        let wrote = unsafe {
            ffi::rcoll_mpi_pack(
                from.cast::<u8>()
                    .wrapping_offset(done as isize * ty.extent)
                    .cast(),
                k as c_int,
                dtype,
                out.as_mut_ptr().add(done * ty.size).cast(),
                want as c_int,
                comm,
            )
        };
        if usize::try_from(wrote).ok() != Some(want) {
            return Err(format!(
                "MPI_Pack of {k} elements gave {wrote} bytes, not {want}"
            ));
        }
        done += k;
    }
    Ok(out)
}

/// Contiguous `bytes` back into `dtype`'s layout at `to`.
///
/// # Safety
/// `to` has room for `bytes.len() / size(dtype)` elements of `dtype`.
unsafe fn unpack(bytes: &[u8], to: *mut c_void, dtype: Datatype, comm: Comm) -> Result<(), String> {
    let ty = type_of(dtype);
    let elements = bytes.len() / ty.size.max(1);
    let mut done = 0;
    while done < elements {
        let k = chunk(ty.size).min(elements - done);
        let have = k * ty.size;
        // SAFETY: `have` bytes of `bytes` from `done * size`; element `done` of the
        // application's buffer, room for `k` elements.
        let read = unsafe {
            ffi::rcoll_mpi_unpack(
                bytes.as_ptr().add(done * ty.size).cast(),
                have as c_int,
                to.cast::<u8>()
                    .wrapping_offset(done as isize * ty.extent)
                    .cast(),
                k as c_int,
                dtype,
                comm,
            )
        };
        if usize::try_from(read).ok() != Some(have) {
            return Err(format!(
                "MPI_Unpack of {k} elements read {read} bytes, not {have}"
            ));
        }
        done += k;
    }
    Ok(())
}

/// A datatype as MPI describes it: one the application passed for a side MPI says this
/// rank uses (valid by MPI's contract; MPI_DATATYPE_NULL is checked).
pub(crate) fn type_of(h: Datatype) -> Ty {
    let mut info = ffi::TypeInfo::default();
    // SAFETY: `info` is writable; the handle is valid or MPI_DATATYPE_NULL, which the
    // call checks.
    let ok = unsafe { ffi::rcoll_mpi_type_info(h, &mut info) } == 0;
    Ty::from_info(ok.then_some(info))
}
