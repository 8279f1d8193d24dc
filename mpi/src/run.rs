//! A served call run on an rcoll [`Communicator`]: slices made from MPI's buffer pointers.
//!
//! rcoll takes `&[T]` and `&mut [T]`; MPI's buffers are only what the caller passed. So a
//! buffer that is not aligned for `T`, or a send buffer that overlaps the receive buffer
//! (erroneous in MPI, but no reason for undefined behaviour here), is staged through an
//! aligned copy: a local fact must never change the decision, which every rank takes alike.

use std::borrow::Cow;
use std::ffi::c_void;

use rcoll::{Communicator, DataType, Element};

use crate::decide::{Action, Plan};

/// Runs `plan` on `comm` with MPI's buffers (a broadcast's one buffer is `recv`).
///
/// # Safety
/// `send` is valid for reads and `recv` for reads and writes of the elements
/// [`Plan::lengths`] gives for this rank (in `plan.dtype`), and nothing else touches them
/// until this returns: MPI's contract for a blocking collective.
pub unsafe fn execute(
    comm: &mut Communicator,
    plan: &Plan,
    send: *const c_void,
    recv: *mut c_void,
) -> rcoll::Result<()> {
    type Typed =
        unsafe fn(&mut Communicator, &Plan, *const c_void, *mut c_void) -> rcoll::Result<()>;
    if plan.logical {
        let logical: Typed = match plan.dtype {
            DataType::I8 => logical::<i8>,
            DataType::U8 => logical::<u8>,
            DataType::I32 => logical::<i32>,
            DataType::U32 => logical::<u32>,
            DataType::I64 => logical::<i64>,
            DataType::U64 => logical::<u64>,
            other => return Err(rcoll::Error::Config(format!("no logical op on {other}"))),
        };
        // SAFETY: the caller's contract, passed on; instantiated at the plan's type.
        return unsafe { logical(comm, plan, send, recv) };
    }
    let typed: Typed = match plan.dtype {
        DataType::I8 => typed::<i8>,
        DataType::U8 => typed::<u8>,
        DataType::I32 => typed::<i32>,
        DataType::U32 => typed::<u32>,
        DataType::I64 => typed::<i64>,
        DataType::U64 => typed::<u64>,
        DataType::F32 => typed::<f32>,
        DataType::F64 => typed::<f64>,
        other => return Err(rcoll::Error::Config(format!("{other} is not served"))),
    };
    // SAFETY: the caller's contract, passed on; `typed` is instantiated at the plan's type.
    unsafe { typed(comm, plan, send, recv) }
}

/// An integer as a truth value: 1 if it is not 0.
trait Truth: Element {
    fn truth(self) -> Self;
}

macro_rules! truth {
    ($($t:ty),*) => {$(
        impl Truth for $t {
            fn truth(self) -> Self {
                <$t>::from(self != 0)
            }
        }
    )*};
}
truth!(i8, u8, i32, u32, i64, u64);

/// A logical op: the inputs become 0 or 1 (in place, the one buffer, which the result
/// overwrites anyway; otherwise a copy of the send buffer), then `plan.op` (min, max or
/// xor) reduces them. On one rank there is nothing to reduce and the result is the input
/// as it is, as MPI libraries give it (Open MPI and MPICH copy it).
///
/// # Safety
/// As [`execute`], and `T` is `plan.dtype`.
unsafe fn logical<T: Truth>(
    comm: &mut Communicator,
    plan: &Plan,
    send: *const c_void,
    recv: *mut c_void,
) -> rcoll::Result<()> {
    if comm.size() == 1 {
        // SAFETY: the caller's contract, passed on.
        return unsafe { typed::<T>(comm, plan, send, recv) };
    }
    let (send_len, recv_len) = plan.lengths(comm.rank(), comm.size());
    if plan.in_place && plan.action == Action::ReduceScatter {
        // The blocks after the first keep the input (see `typed`): the truths of a copy of
        // the whole buffer, reduced out of place into its first block.
        // SAFETY: the caller's contract: `recv` holds `recv_len` elements, read here.
        let all = unsafe { input::<T>(recv, recv_len, (std::ptr::null(), 0)) };
        let truths: Vec<T> = all.iter().map(|x| x.truth()).collect();
        let out_of_place = Plan {
            in_place: false,
            ..*plan
        };
        // SAFETY: `truths` holds the whole input, aligned, alive for the call; `recv` as
        // the caller's contract says (its first block written).
        return unsafe { typed::<T>(comm, &out_of_place, truths.as_ptr().cast(), recv) };
    }
    if plan.in_place {
        // SAFETY: the caller's contract: `recv` holds `recv_len` elements, ours for the call.
        let mut buf = unsafe { Out::<T>::new(recv, recv_len) };
        for x in buf.slice() {
            *x = x.truth();
        }
        buf.finish();
        // SAFETY: the caller's contract, passed on.
        return unsafe { typed::<T>(comm, plan, send, recv) };
    }
    // SAFETY: the caller's contract: `send` holds `send_len` elements, read only.
    let input = unsafe { input::<T>(send, send_len, (std::ptr::null(), 0)) };
    let truths: Vec<T> = input.iter().map(|x| x.truth()).collect();
    // SAFETY: `truths` holds `send_len` elements of `T`, aligned, alive for the call;
    // `recv` as the caller's contract says.
    unsafe { typed::<T>(comm, plan, truths.as_ptr().cast(), recv) }
}

/// A receive buffer as rcoll takes it: the caller's memory, or an aligned copy written
/// back at the end.
enum Out<'a, T> {
    Direct(&'a mut [T]),
    Staged(Vec<T>, *mut T),
}

impl<T: Element> Out<'_, T> {
    /// # Safety
    /// `ptr` is valid for reads and writes of `len` elements of `T` (not necessarily
    /// aligned), used by no one else while the result lives.
    unsafe fn new(ptr: *mut c_void, len: usize) -> Self {
        let ptr = ptr.cast::<T>();
        if len == 0 {
            return Out::Direct(&mut []);
        }
        if ptr.is_aligned() {
            // SAFETY: non-null (the decision forwards NULL buffers that hold data) and
            // aligned; valid and exclusively ours for `len` elements (the caller's contract).
            return Out::Direct(unsafe { std::slice::from_raw_parts_mut(ptr, len) });
        }
        // SAFETY: valid for reads of `len` elements (the caller's contract); unaligned reads.
        let copy = (0..len)
            .map(|i| unsafe { ptr.add(i).read_unaligned() })
            .collect();
        Out::Staged(copy, ptr)
    }

    fn slice(&mut self) -> &mut [T] {
        match self {
            Out::Direct(s) => s,
            Out::Staged(v, _) => v,
        }
    }

    /// Writes a staged copy back.
    fn finish(self) {
        if let Out::Staged(v, ptr) = self {
            for (i, x) in v.into_iter().enumerate() {
                // SAFETY: valid for writes of the staged length (see `new`); unaligned writes.
                unsafe { ptr.add(i).write_unaligned(x) };
            }
        }
    }
}

/// A send buffer as rcoll takes it: the caller's memory, or an aligned copy when it is
/// misaligned or overlaps `recv` (`recv_bytes` long).
///
/// # Safety
/// `ptr` is valid for reads of `len` elements of `T`, not written while the result lives.
unsafe fn input<'a, T: Element>(
    ptr: *const c_void,
    len: usize,
    recv: (*const c_void, usize),
) -> Cow<'a, [T]> {
    let ptr = ptr.cast::<T>();
    if len == 0 {
        return Cow::Borrowed(&[]);
    }
    let (start, end) = (ptr as usize, ptr as usize + len * size_of::<T>());
    let (r_start, r_end) = (recv.0 as usize, recv.0 as usize + recv.1);
    let overlaps = recv.1 > 0 && start < r_end && r_start < end;
    if ptr.is_aligned() && !overlaps {
        // SAFETY: non-null, aligned, valid for reads of `len` elements and not written
        // meanwhile (the caller's contract), disjoint from the receive slice (checked).
        return Cow::Borrowed(unsafe { std::slice::from_raw_parts(ptr, len) });
    }
    // SAFETY: valid for reads of `len` elements (the caller's contract); unaligned reads.
    Cow::Owned(
        (0..len)
            .map(|i| unsafe { ptr.add(i).read_unaligned() })
            .collect(),
    )
}

/// # Safety
/// As [`execute`], and `T` is `plan.dtype`.
unsafe fn typed<T: Element>(
    comm: &mut Communicator,
    plan: &Plan,
    send: *const c_void,
    recv: *mut c_void,
) -> rcoll::Result<()> {
    let (rank, size) = (comm.rank(), comm.size());
    let (send_len, recv_len) = plan.lengths(rank, size);
    let (op, root, count) = (plan.op, plan.root, plan.count);
    if plan.in_place && plan.action == Action::Scatter {
        // The root's blocks stay in its send buffer, its own included: rcoll's scatter
        // from that buffer, the root's own block received into scratch and dropped.
        // SAFETY: the send buffer holds `send_len` elements (the caller's contract).
        let all = unsafe { input::<T>(send, send_len, (std::ptr::null(), 0)) };
        let mut own = all[root * count..(root + 1) * count].to_vec();
        return comm.scatter(&all, &mut own, root);
    }
    // SAFETY: the caller's contract: `recv` holds `recv_len` elements, ours for the call.
    let mut out = unsafe { Out::<T>::new(recv, recv_len) };
    // SAFETY: the caller's contract: `send` holds `send_len` elements, read only.
    let input = unsafe { input::<T>(send, send_len, (recv, recv_len * size_of::<T>())) };
    let buf = out.slice();
    let done = match (plan.action, plan.in_place) {
        (Action::AllReduce, true) => comm.all_reduce_in_place(buf, op),
        (Action::AllReduce, false) => comm.all_reduce(&input, buf, op),
        (Action::Reduce, true) => comm.reduce_in_place(buf, op, root),
        (Action::Reduce, false) => comm.reduce(&input, buf, op, root),
        (Action::Broadcast, _) => comm.broadcast_in_place(buf, root),
        (Action::AllGather, true) => comm.all_gather_in_place(buf),
        (Action::AllGather, false) => comm.all_gather(&input, buf),
        (Action::ReduceScatter, true) => {
            // MPI's in-place result is the buffer's first block, and the other blocks keep
            // the input (Open MPI and MPICH leave them, mpi4py's tests check it); rcoll's
            // in-place form leaves its result in block `rank` and partial results in
            // others: its out-of-place form, from a copy of the input.
            let all = buf.to_vec();
            let mut mine = all[..count].to_vec();
            let r = comm.reduce_scatter(&all, &mut mine, op);
            if r.is_ok() {
                buf[..count].copy_from_slice(&mine);
            }
            r
        }
        (Action::ReduceScatter, false) => comm.reduce_scatter(&input, buf, op),
        (Action::AllToAll, true) => comm.all_to_all_in_place(buf),
        (Action::AllToAll, false) => comm.all_to_all(&input, buf),
        (Action::Gather, true) => comm.gather_in_place(buf, root),
        (Action::Gather, false) => comm.gather(&input, buf, root),
        (Action::Scatter, _) => comm.scatter(&input, buf, root),
        (Action::Barrier, _) => comm.barrier(),
        (Action::Nothing, _) => Ok(()),
    };
    out.finish();
    done
}
