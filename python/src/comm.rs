//! `rcoll.Comm` and `rcoll.Request`: mpi4py's buffer API over an rcoll [`Background`].
//!
//! Each communicator runs on a [`Background`]: blocking calls run on the caller's thread
//! (after any queued ones, in issue order) with the GIL released; nonblocking ones are
//! queued to its progress thread, their [`Buffer`]s moved into the job and handed back
//! with its result, so Python's memory stays exported until the call is over.

use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;
use rcoll::{Background, Communicator, ReduceOp};

use crate::buffer::Buffer;
use crate::call::{self, Call, Operands};
use crate::error::{to_py, InvalidArgumentError};

/// A reduction operation (`rcoll.SUM`, ...).
#[pyclass(module = "rcoll", frozen, eq)]
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct Op(pub(crate) ReduceOp);

#[pymethods]
impl Op {
    /// rcoll's name of the operation (`sum`, `band`, ...).
    #[getter]
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn __repr__(&self) -> String {
        format!("rcoll.{}", self.0.name().to_uppercase())
    }
}

/// The type of `rcoll.IN_PLACE`, passed where the send buffer goes (the receive buffer
/// of a root's `Scatter`) for the in-place form.
#[pyclass(module = "rcoll", frozen)]
pub(crate) struct InPlace;

#[pymethods]
impl InPlace {
    fn __repr__(&self) -> &'static str {
        "rcoll.IN_PLACE"
    }
}

/// One rank's communicator.
#[pyclass(module = "rcoll", frozen)]
pub(crate) struct Comm {
    bg: Background,
    rank: usize,
    size: usize,
}

/// A nonblocking call in flight, holding its buffers until it is over.
#[pyclass(module = "rcoll", frozen)]
pub(crate) struct Request {
    pending: Mutex<Option<Pending>>,
}

/// A queued call's outcome: its buffers back, and what rcoll said.
type Pending = rcoll::Request<(Operands, rcoll::Result<()>)>;

type Arg<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

impl Comm {
    pub(crate) fn new(comm: Communicator) -> PyResult<Comm> {
        let (rank, size) = (comm.rank(), comm.size());
        let py_err = |e| Python::attach(|py| to_py(py, e));
        let bg = Background::new(comm).map_err(py_err)?;
        Ok(Comm { bg, rank, size })
    }

    fn blocking(&self, py: Python<'_>, call: Call, mut ops: Operands) -> PyResult<()> {
        let bg = &self.bg;
        let r = py.detach(|| bg.run(|c| call::run(c, &call, &mut ops)));
        // `ops` is dropped here, with the GIL: the buffers' exports end.
        r.map_err(|e| to_py(py, e))
    }

    fn nonblocking(&self, call: Call, mut ops: Operands) -> Request {
        let pending = self.bg.submit(move |c| {
            let r = call::run(c, &call, &mut ops);
            Ok((ops, r))
        });
        Request {
            pending: Mutex::new(Some(pending)),
        }
    }

    /// `Reduce`'s and `Gather`'s operands: the root's `recvbuf` (or `IN_PLACE` as its
    /// `sendbuf`); the other ranks' `sendbuf` alone.
    fn gathered_to_root(&self, sendbuf: Arg, recvbuf: Arg, root: usize) -> PyResult<Operands> {
        if self.is_root(root)? {
            send_recv(sendbuf, recvbuf)
        } else {
            pair(Some(take(sendbuf, "sendbuf", false)?), None, false)
        }
    }

    /// `Scatter`'s operands: the root's `sendbuf` (and `IN_PLACE` as its `recvbuf`); the
    /// other ranks' `recvbuf` alone.
    fn scattered_from_root(&self, sendbuf: Arg, recvbuf: Arg, root: usize) -> PyResult<Operands> {
        if !self.is_root(root)? {
            pair(None, Some(take(recvbuf, "recvbuf", true)?), false)
        } else if is_in_place(recvbuf) {
            pair(None, Some(take(sendbuf, "sendbuf", true)?), true)
        } else {
            let send = take(sendbuf, "sendbuf", false)?;
            pair(Some(send), Some(take(recvbuf, "recvbuf", true)?), false)
        }
    }

    /// `Alltoallv`'s call and operands, the counts checked against the buffers.
    fn all_to_all_v_call(
        &self,
        sendbuf: Arg,
        sendcounts: Vec<usize>,
        recvbuf: Arg,
        recvcounts: Vec<usize>,
    ) -> PyResult<(Call, Operands)> {
        let ops = send_recv(sendbuf, recvbuf)?;
        if ops.in_place {
            return Err(InvalidArgumentError::new_err(
                "Alltoallv has no in-place form here: pass a separate sendbuf",
            ));
        }
        let item = ops.dtype.size();
        for (what, counts, buf) in [
            ("sendcounts", &sendcounts, &ops.send),
            ("recvcounts", &recvcounts, &ops.recv),
        ] {
            if counts.len() != self.size {
                return Err(InvalidArgumentError::new_err(format!(
                    "{what} has {} entries, one per rank is {}",
                    counts.len(),
                    self.size
                )));
            }
            let total = counts.iter().try_fold(0usize, |a, &c| a.checked_add(c));
            let held = buf.as_ref().map_or(0, |b| b.bytes().len() / item);
            if total != Some(held) {
                return Err(InvalidArgumentError::new_err(format!(
                    "{what} add up to {total:?} elements, the buffer holds {held}"
                )));
            }
        }
        let call = Call::AllToAllV {
            send_counts: sendcounts,
            recv_counts: recvcounts,
        };
        Ok((call, ops))
    }

    fn is_peer(&self, peer: usize) -> PyResult<()> {
        if peer >= self.size || peer == self.rank {
            return Err(InvalidArgumentError::new_err(format!(
                "peer {peer} is not another rank of this {}-rank communicator (this is rank {})",
                self.size, self.rank
            )));
        }
        Ok(())
    }

    fn is_root(&self, root: usize) -> PyResult<bool> {
        if root >= self.size {
            return Err(InvalidArgumentError::new_err(format!(
                "root {root} is not a rank of this {}-rank communicator",
                self.size
            )));
        }
        Ok(root == self.rank)
    }
}

/// `sendbuf` and `recvbuf` of a call without a root: `IN_PLACE` as `sendbuf` for the
/// in-place form.
fn send_recv(sendbuf: Arg, recvbuf: Arg) -> PyResult<Operands> {
    if is_in_place(sendbuf) {
        pair(None, Some(take(recvbuf, "recvbuf", true)?), true)
    } else {
        let send = take(sendbuf, "sendbuf", false)?;
        pair(Some(send), Some(take(recvbuf, "recvbuf", true)?), false)
    }
}

fn is_in_place(obj: Arg) -> bool {
    obj.is_some_and(|o| o.is_instance_of::<InPlace>())
}

/// `obj`'s buffer, which the call needs (`what` names it).
fn take(obj: Arg, what: &str, writable: bool) -> PyResult<Buffer> {
    match obj {
        Some(o) if !o.is_none() && !o.is_instance_of::<InPlace>() => Buffer::new(o, what, writable),
        Some(o) if o.is_instance_of::<InPlace>() => Err(InvalidArgumentError::new_err(format!(
            "{what} cannot be IN_PLACE here"
        ))),
        _ => Err(InvalidArgumentError::new_err(format!(
            "{what} is required on this rank"
        ))),
    }
}

/// The operands of a call, checked as a pair: one element type, no shared memory.
fn pair(send: Option<Buffer>, recv: Option<Buffer>, in_place: bool) -> PyResult<Operands> {
    if let (Some(s), Some(r)) = (&send, &recv) {
        if s.dtype() != r.dtype() {
            return Err(InvalidArgumentError::new_err(format!(
                "sendbuf holds {} and recvbuf {}: the element types must match",
                s.dtype_name(),
                r.dtype_name()
            )));
        }
        if s.overlaps(r) {
            return Err(InvalidArgumentError::new_err(
                "sendbuf and recvbuf overlap: pass rcoll.IN_PLACE as sendbuf for the in-place form",
            ));
        }
    }
    let dtype = recv
        .as_ref()
        .or(send.as_ref())
        .map_or(rcoll::DataType::U8, Buffer::dtype);
    Ok(Operands {
        send,
        recv,
        in_place,
        dtype,
    })
}

fn reduce_op(op: Option<&Bound<'_, Op>>) -> ReduceOp {
    op.map_or(ReduceOp::Sum, |o| o.get().0)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Only `Request`'s own code takes the lock, and it panics nowhere while holding it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[pymethods]
impl Comm {
    /// This rank, `0 .. size`.
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    #[pyo3(name = "Get_rank")]
    fn get_rank(&self) -> usize {
        self.rank
    }

    #[pyo3(name = "Get_size")]
    fn get_size(&self) -> usize {
        self.size
    }

    fn __repr__(&self) -> String {
        format!("<rcoll.Comm rank {} of {}>", self.rank, self.size)
    }

    /// Every rank's `recvbuf` becomes the reduction of all ranks' `sendbuf`.
    #[pyo3(name = "Allreduce", signature = (sendbuf, recvbuf, op = None))]
    fn all_reduce(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, Op>>,
    ) -> PyResult<()> {
        let ops = send_recv(Some(sendbuf), Some(recvbuf))?;
        self.blocking(py, Call::AllReduce(reduce_op(op)), ops)
    }

    /// The root's `buf` is copied into every other rank's.
    #[pyo3(name = "Bcast", signature = (buf, root = 0))]
    fn broadcast(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, root: usize) -> PyResult<()> {
        self.is_root(root)?;
        let ops = pair(None, Some(take(Some(buf), "buf", true)?), true)?;
        self.blocking(py, Call::Broadcast(root), ops)
    }

    /// The root's `recvbuf` becomes the reduction of all ranks' `sendbuf` (`recvbuf` is
    /// ignored on other ranks; `IN_PLACE` as the root's `sendbuf`).
    #[pyo3(name = "Reduce", signature = (sendbuf, recvbuf = None, op = None, root = 0))]
    fn reduce(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        op: Option<&Bound<'_, Op>>,
        root: usize,
    ) -> PyResult<()> {
        let ops = self.gathered_to_root(Some(sendbuf), recvbuf, root)?;
        self.blocking(py, Call::Reduce(reduce_op(op), root), ops)
    }

    /// Every rank's `recvbuf` becomes all ranks' `sendbuf` in rank order.
    #[pyo3(name = "Allgather")]
    fn all_gather(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let ops = send_recv(Some(sendbuf), Some(recvbuf))?;
        self.blocking(py, Call::AllGather, ops)
    }

    /// Rank r's `recvbuf` becomes block r of the reduction of all ranks' `sendbuf`.
    #[pyo3(name = "Reduce_scatter_block", signature = (sendbuf, recvbuf, op = None))]
    fn reduce_scatter(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, Op>>,
    ) -> PyResult<()> {
        let ops = send_recv(Some(sendbuf), Some(recvbuf))?;
        self.blocking(py, Call::ReduceScatter(reduce_op(op)), ops)
    }

    /// Block j of rank i's `sendbuf` becomes block i of rank j's `recvbuf`.
    #[pyo3(name = "Alltoall")]
    fn all_to_all(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let ops = send_recv(Some(sendbuf), Some(recvbuf))?;
        self.blocking(py, Call::AllToAll, ops)
    }

    /// The root's `recvbuf` becomes all ranks' `sendbuf` in rank order.
    #[pyo3(name = "Gather", signature = (sendbuf, recvbuf = None, root = 0))]
    fn gather(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        root: usize,
    ) -> PyResult<()> {
        let ops = self.gathered_to_root(Some(sendbuf), recvbuf, root)?;
        self.blocking(py, Call::Gather(root), ops)
    }

    /// Rank r's `recvbuf` becomes block r of the root's `sendbuf` (`IN_PLACE` as the
    /// root's `recvbuf`: its block stays where it is).
    #[pyo3(name = "Scatter", signature = (sendbuf, recvbuf, root = 0))]
    fn scatter(
        &self,
        py: Python<'_>,
        sendbuf: Option<&Bound<'_, PyAny>>,
        recvbuf: &Bound<'_, PyAny>,
        root: usize,
    ) -> PyResult<()> {
        let ops = self.scattered_from_root(sendbuf, Some(recvbuf), root)?;
        self.blocking(py, Call::Scatter(root), ops)
    }

    /// Returns once every rank has entered it.
    #[pyo3(name = "Barrier")]
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        self.blocking(py, Call::Barrier, pair(None, None, false)?)
    }

    /// Sends `buf` to rank `dest`, which receives it with `Recv` of the same length.
    #[pyo3(name = "Send")]
    fn send(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, dest: usize) -> PyResult<()> {
        let ops = pair(Some(take(Some(buf), "buf", false)?), None, false)?;
        self.blocking(py, Call::Send(dest), ops)
    }

    /// Receives into `buf` from rank `source`.
    #[pyo3(name = "Recv")]
    fn recv(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, source: usize) -> PyResult<()> {
        let ops = pair(None, Some(take(Some(buf), "buf", true)?), false)?;
        self.blocking(py, Call::Recv(source), ops)
    }

    /// Nonblocking `Allreduce`.
    #[pyo3(name = "Iallreduce", signature = (sendbuf, recvbuf, op = None))]
    fn iall_reduce(
        &self,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, Op>>,
    ) -> PyResult<Request> {
        let ops = send_recv(Some(sendbuf), Some(recvbuf))?;
        Ok(self.nonblocking(Call::AllReduce(reduce_op(op)), ops))
    }

    /// Nonblocking `Bcast`.
    #[pyo3(name = "Ibcast", signature = (buf, root = 0))]
    fn ibroadcast(&self, buf: &Bound<'_, PyAny>, root: usize) -> PyResult<Request> {
        self.is_root(root)?;
        let ops = pair(None, Some(take(Some(buf), "buf", true)?), true)?;
        Ok(self.nonblocking(Call::Broadcast(root), ops))
    }

    /// Nonblocking `Allgather`.
    #[pyo3(name = "Iallgather")]
    fn iall_gather(
        &self,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
    ) -> PyResult<Request> {
        let ops = send_recv(Some(sendbuf), Some(recvbuf))?;
        Ok(self.nonblocking(Call::AllGather, ops))
    }

    /// Nonblocking `Reduce_scatter_block`.
    #[pyo3(name = "Ireduce_scatter", signature = (sendbuf, recvbuf, op = None))]
    fn ireduce_scatter(
        &self,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, Op>>,
    ) -> PyResult<Request> {
        let ops = send_recv(Some(sendbuf), Some(recvbuf))?;
        Ok(self.nonblocking(Call::ReduceScatter(reduce_op(op)), ops))
    }

    /// Nonblocking `Reduce_scatter_block` (the same as `Ireduce_scatter`).
    #[pyo3(name = "Ireduce_scatter_block", signature = (sendbuf, recvbuf, op = None))]
    fn ireduce_scatter_block(
        &self,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, Op>>,
    ) -> PyResult<Request> {
        self.ireduce_scatter(sendbuf, recvbuf, op)
    }

    /// Nonblocking `Barrier`.
    #[pyo3(name = "Ibarrier")]
    fn ibarrier(&self) -> PyResult<Request> {
        Ok(self.nonblocking(Call::Barrier, pair(None, None, false)?))
    }

    /// Rank j's `recvbuf` gets `sendcounts[j]` elements of this rank's `sendbuf` (blocks
    /// packed in rank order), at its offset for this rank; `recvcounts[i]` elements come
    /// from rank i. Counts are in elements, one per rank, and must agree pairwise.
    #[pyo3(name = "Alltoallv")]
    fn all_to_all_v(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        sendcounts: Vec<usize>,
        recvbuf: &Bound<'_, PyAny>,
        recvcounts: Vec<usize>,
    ) -> PyResult<()> {
        let (call, ops) =
            self.all_to_all_v_call(Some(sendbuf), sendcounts, Some(recvbuf), recvcounts)?;
        self.blocking(py, call, ops)
    }

    /// Nonblocking `Reduce`.
    #[pyo3(name = "Ireduce", signature = (sendbuf, recvbuf = None, op = None, root = 0))]
    fn ireduce(
        &self,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        op: Option<&Bound<'_, Op>>,
        root: usize,
    ) -> PyResult<Request> {
        let ops = self.gathered_to_root(Some(sendbuf), recvbuf, root)?;
        Ok(self.nonblocking(Call::Reduce(reduce_op(op), root), ops))
    }

    /// Nonblocking `Gather`.
    #[pyo3(name = "Igather", signature = (sendbuf, recvbuf = None, root = 0))]
    fn igather(
        &self,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        root: usize,
    ) -> PyResult<Request> {
        let ops = self.gathered_to_root(Some(sendbuf), recvbuf, root)?;
        Ok(self.nonblocking(Call::Gather(root), ops))
    }

    /// Nonblocking `Scatter`.
    #[pyo3(name = "Iscatter", signature = (sendbuf, recvbuf, root = 0))]
    fn iscatter(
        &self,
        sendbuf: Option<&Bound<'_, PyAny>>,
        recvbuf: &Bound<'_, PyAny>,
        root: usize,
    ) -> PyResult<Request> {
        let ops = self.scattered_from_root(sendbuf, Some(recvbuf), root)?;
        Ok(self.nonblocking(Call::Scatter(root), ops))
    }

    /// Nonblocking `Alltoall`.
    #[pyo3(name = "Ialltoall")]
    fn iall_to_all(
        &self,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
    ) -> PyResult<Request> {
        let ops = send_recv(Some(sendbuf), Some(recvbuf))?;
        Ok(self.nonblocking(Call::AllToAll, ops))
    }

    /// Nonblocking `Alltoallv`.
    #[pyo3(name = "Ialltoallv")]
    fn iall_to_all_v(
        &self,
        sendbuf: &Bound<'_, PyAny>,
        sendcounts: Vec<usize>,
        recvbuf: &Bound<'_, PyAny>,
        recvcounts: Vec<usize>,
    ) -> PyResult<Request> {
        let (call, ops) =
            self.all_to_all_v_call(Some(sendbuf), sendcounts, Some(recvbuf), recvcounts)?;
        Ok(self.nonblocking(call, ops))
    }

    /// Nonblocking `Send`: queued behind this communicator's earlier calls, as every
    /// nonblocking call is.
    #[pyo3(name = "Isend")]
    fn isend(&self, buf: &Bound<'_, PyAny>, dest: usize) -> PyResult<Request> {
        self.is_peer(dest)?;
        let ops = pair(Some(take(Some(buf), "buf", false)?), None, false)?;
        Ok(self.nonblocking(Call::Send(dest), ops))
    }

    /// Nonblocking `Recv`.
    #[pyo3(name = "Irecv")]
    fn irecv(&self, buf: &Bound<'_, PyAny>, source: usize) -> PyResult<Request> {
        self.is_peer(source)?;
        let ops = pair(None, Some(take(Some(buf), "buf", true)?), false)?;
        Ok(self.nonblocking(Call::Recv(source), ops))
    }

    /// Nonblocking group of sends and receives, all in flight at once (NCCL's group of
    /// `ncclSend`/`ncclRecv`, torch's `batch_isend_irecv`): each `(peer, offset, count)` of
    /// `sends` sends `count` elements of `sendbuf` from `offset` to `peer`, each of `recvs`
    /// receives `count` from `peer` into `recvbuf` at `offset` (ranges that do not
    /// overlap). The lists' order never deadlocks; messages between a pair match in order.
    #[pyo3(name = "Iexchange")]
    fn iexchange(
        &self,
        sendbuf: &Bound<'_, PyAny>,
        sends: Vec<(usize, usize, usize)>,
        recvbuf: &Bound<'_, PyAny>,
        recvs: Vec<(usize, usize, usize)>,
    ) -> PyResult<Request> {
        let ranges =
            |list: Vec<(usize, usize, usize)>| -> PyResult<Vec<(usize, std::ops::Range<usize>)>> {
                list.into_iter()
                    .map(|(peer, offset, count)| {
                        self.is_peer(peer)?;
                        let end = offset.checked_add(count).ok_or_else(|| {
                            InvalidArgumentError::new_err(format!(
                                "offset {offset} + count {count} overflows"
                            ))
                        })?;
                        Ok((peer, offset..end))
                    })
                    .collect()
            };
        let (sends, recvs) = (ranges(sends)?, ranges(recvs)?);
        let ops = pair(
            Some(take(Some(sendbuf), "sendbuf", false)?),
            Some(take(Some(recvbuf), "recvbuf", true)?),
            false,
        )?;
        Ok(self.nonblocking(Call::Exchange { sends, recvs }, ops))
    }

    /// Ends the group: every rank's calls on it, running or later, fail at once with an
    /// error naming this rank and `reason` (as MPI_Abort, for this communicator alone).
    #[pyo3(name = "Abort", signature = (reason = "aborted from Python"))]
    fn abort(&self, py: Python<'_>, reason: &str) {
        let bg = &self.bg;
        py.detach(|| bg.abort(reason));
    }

    /// `nbytes` bytes of memory registered with this communicator's transport (see
    /// `rcoll.alloc`, which makes a numpy array of it).
    fn _alloc(&self, py: Python<'_>, nbytes: usize) -> PyResult<crate::alloc::Memory> {
        let bg = &self.bg;
        let buffer = py
            .detach(|| bg.run(|c| c.alloc::<u8>(nbytes)))
            .map_err(|e| to_py(py, e))?;
        Ok(crate::alloc::Memory::new(buffer))
    }

    /// A new communicator of the ranks passing the same `color`, ranked by `key` then by
    /// rank here; `None` (or a negative color) joins none and returns `None`.
    #[pyo3(name = "Split", signature = (color = None, key = 0))]
    fn split(&self, py: Python<'_>, color: Option<i64>, key: i64) -> PyResult<Option<Comm>> {
        let color = match color {
            Some(c) if c >= 0 => Some(u32::try_from(c).map_err(|_| {
                InvalidArgumentError::new_err(format!("color {c} does not fit in 32 bits"))
            })?),
            _ => None,
        };
        let bg = &self.bg;
        let made = py
            .detach(|| bg.run(|c| c.split(color, key)))
            .map_err(|e| to_py(py, e))?;
        made.map(Comm::new).transpose()
    }

    /// The survivors' communicator after a failure (or without the healthy ranks of
    /// `exclude`), as `MPIX_Comm_shrink` / `ncclCommShrink`: every surviving rank calls
    /// it; they agree on the failed ranks and keep their order, over the same connections.
    /// `abort=True` first ends whatever is queued on this communicator (each such call
    /// fails). This communicator is unusable afterwards.
    #[pyo3(signature = (exclude = Vec::new(), abort = false))]
    fn shrink(&self, py: Python<'_>, exclude: Vec<usize>, abort: bool) -> PyResult<Comm> {
        let bg = &self.bg;
        let made = py
            .detach(|| {
                if abort {
                    bg.abort("shrink after an error");
                }
                bg.run(|c| c.shrink(&exclude))
            })
            .map_err(|e| to_py(py, e))?;
        Comm::new(made)
    }

    /// The ranks of the parent that the shrink which made this communicator left out
    /// (failed or excluded), the same on every member; empty if no shrink made it.
    #[getter]
    fn excluded(&self, py: Python<'_>) -> PyResult<Vec<usize>> {
        let bg = &self.bg;
        py.detach(|| bg.run(|c| Ok(c.shrunk().map(|s| s.excluded.clone()).unwrap_or_default())))
            .map_err(|e| to_py(py, e))
    }
}

#[pymethods]
impl Request {
    /// Blocks (the GIL released) until the call is over; raises its error if it failed.
    /// Returns at once if it was already waited for.
    #[pyo3(name = "Wait")]
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        let pending = lock(&self.pending).take();
        match pending {
            Some(p) => finish(py, py.detach(|| p.wait())),
            None => Ok(()),
        }
    }

    /// Whether the call is over, without blocking; raises its error if it failed.
    #[pyo3(name = "Test")]
    fn test(&self, py: Python<'_>) -> PyResult<bool> {
        let mut pending = lock(&self.pending);
        match pending.take() {
            Some(p) if p.test() => {
                drop(pending);
                finish(py, p.wait()).map(|()| true)
            }
            Some(p) => {
                *pending = Some(p);
                Ok(false)
            }
            None => Ok(true),
        }
    }

    /// Waits for every request of `requests`, then raises the first error among them.
    #[staticmethod]
    #[pyo3(name = "Waitall")]
    fn wait_all(py: Python<'_>, requests: Vec<Py<Request>>) -> PyResult<()> {
        let mut first = None;
        for r in requests {
            if let Err(e) = r.get().wait(py) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// A finished call's outcome; its buffers, dropped here with the GIL held, are released.
fn finish(py: Python<'_>, outcome: rcoll::Result<(Operands, rcoll::Result<()>)>) -> PyResult<()> {
    let result = outcome.and_then(|(_buffers, r)| r);
    result.map_err(|e| to_py(py, e))
}

impl Drop for Request {
    /// A request dropped in flight first waits for its call: its buffers must stay
    /// exported until rcoll is done with them (every call ends within the timeout).
    fn drop(&mut self) {
        let pending = self.pending.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = pending.take() {
            let _ = p.wait();
        }
    }
}
