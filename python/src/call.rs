//! One collective on byte buffers: the element type chosen at run time from the buffers'
//! format, then rcoll's generic call. Shared by blocking calls and queued ones.

use rcoll::{Communicator, DataType, Element, ReduceOp};

use crate::buffer::Buffer;

/// A collective (or point-to-point call) and its scalar arguments.
#[derive(Clone, Debug)]
pub(crate) enum Call {
    AllReduce(ReduceOp),
    Broadcast(usize),
    Reduce(ReduceOp, usize),
    AllGather,
    /// MPI's `Reduce_scatter_block`; in place, the result moves to the buffer's start.
    ReduceScatter(ReduceOp),
    AllToAll,
    /// MPI's `Alltoallv` with packed blocks: this rank sends `send_counts[j]` elements
    /// to rank j, in rank order from the start of its buffer, and receives
    /// `recv_counts[i]` from rank i the same way (counts checked against the buffers).
    AllToAllV {
        send_counts: Vec<usize>,
        recv_counts: Vec<usize>,
    },
    Gather(usize),
    Scatter(usize),
    Barrier,
    Send(usize),
    Recv(usize),
    /// Sends and receives all in flight at once: `(peer, elements)` of the send buffer to
    /// each peer, and from each peer into the receive buffer.
    Exchange {
        sends: Vec<(usize, std::ops::Range<usize>)>,
        recvs: Vec<(usize, std::ops::Range<usize>)>,
    },
}

/// What a call reads and writes: in place, `recv` is both; a buffer the call does not use
/// on this rank (a non-root's, or the send side in place) is `None`, read as empty.
pub(crate) struct Operands {
    pub(crate) send: Option<Buffer>,
    pub(crate) recv: Option<Buffer>,
    pub(crate) in_place: bool,
    pub(crate) dtype: DataType,
}

/// Runs `call` on `comm` with `ops`' memory as elements of `ops.dtype`.
pub(crate) fn run(comm: &mut Communicator, call: &Call, ops: &mut Operands) -> rcoll::Result<()> {
    macro_rules! typed {
        ($($dtype:ident => $t:ty),*) => {
            match ops.dtype {
                $(DataType::$dtype => typed::<$t>(comm, call, ops),)*
                other => Err(rcoll::Error::Config(format!("element type {other} has no binding"))),
            }
        };
    }
    typed!(I8 => i8, U8 => u8, I32 => i32, U32 => u32, I64 => i64, U64 => u64,
        F16 => half::f16, Bf16 => half::bf16, F32 => f32, F64 => f64)
}

fn typed<T: Element>(
    comm: &mut Communicator,
    call: &Call,
    ops: &mut Operands,
) -> rcoll::Result<()> {
    let send: &[T] = match &ops.send {
        Some(b) => elements(b.bytes(), comm)?,
        None => &[],
    };
    let recv: &mut [T] = match &mut ops.recv {
        Some(b) => elements_mut(b.bytes_mut(), comm)?,
        None => &mut [],
    };
    match (call, ops.in_place) {
        (&Call::AllReduce(op), false) => comm.all_reduce(send, recv, op),
        (&Call::AllReduce(op), true) => comm.all_reduce_in_place(recv, op),
        (&Call::Broadcast(root), _) => comm.broadcast_in_place(recv, root),
        (&Call::Reduce(op, root), false) => comm.reduce(send, recv, op, root),
        (&Call::Reduce(op, root), true) => comm.reduce_in_place(recv, op, root),
        (Call::AllGather, false) => comm.all_gather(send, recv),
        (Call::AllGather, true) => comm.all_gather_in_place(recv),
        (&Call::ReduceScatter(op), false) => comm.reduce_scatter(send, recv, op),
        (&Call::ReduceScatter(op), true) => {
            comm.reduce_scatter_in_place(recv, op)?;
            // rcoll leaves rank r's block at block r; MPI (and so mpi4py's users) expects
            // it at the start of the buffer.
            let block = recv.len() / comm.size();
            let at = comm.rank() * block;
            recv.copy_within(at..at + block, 0);
            Ok(())
        }
        (Call::AllToAll, false) => comm.all_to_all(send, recv),
        (Call::AllToAll, true) => comm.all_to_all_in_place(recv),
        (
            Call::AllToAllV {
                send_counts,
                recv_counts,
            },
            _,
        ) => all_to_all_v(comm, send, send_counts, recv, recv_counts),
        (&Call::Gather(root), false) => comm.gather(send, recv, root),
        (&Call::Gather(root), true) => comm.gather_in_place(recv, root),
        (&Call::Scatter(root), false) => comm.scatter(send, recv, root),
        (&Call::Scatter(root), true) => comm.scatter_in_place(recv, root),
        (Call::Barrier, _) => comm.barrier(),
        (&Call::Send(peer), _) => comm.send(send, peer),
        (&Call::Recv(peer), _) => comm.recv(recv, peer),
        (Call::Exchange { sends, recvs }, _) => comm.exchange(send, sends, recv, recvs),
    }
}

/// `Alltoallv` as pairwise exchanges: at step k this rank sends to rank + k and receives
/// from rank - k, so every pair meets once and no step waits on a third rank. A pair
/// with nothing to move either way skips the step on both sides (the counts agree, as
/// MPI requires); one-way steps are a plain send or receive.
fn all_to_all_v<T: Element>(
    comm: &mut Communicator,
    send: &[T],
    send_counts: &[usize],
    recv: &mut [T],
    recv_counts: &[usize],
) -> rcoll::Result<()> {
    let (rank, size) = (comm.rank(), comm.size());
    let offsets = |counts: &[usize]| -> Vec<usize> {
        counts
            .iter()
            .scan(0, |at, &c| {
                let start = *at;
                *at += c;
                Some(start)
            })
            .collect()
    };
    let (send_at, recv_at) = (offsets(send_counts), offsets(recv_counts));
    let own = send_counts[rank];
    recv[recv_at[rank]..recv_at[rank] + own]
        .copy_from_slice(&send[send_at[rank]..send_at[rank] + own]);
    for k in 1..size {
        let (to, from) = ((rank + k) % size, (rank + size - k) % size);
        let out = &send[send_at[to]..send_at[to] + send_counts[to]];
        let into = &mut recv[recv_at[from]..recv_at[from] + recv_counts[from]];
        match (out.is_empty(), into.is_empty()) {
            (false, false) => comm.send_recv(out, to, into, from)?,
            (false, true) => comm.send(out, to)?,
            (true, false) => comm.recv(into, from)?,
            (true, true) => {}
        }
    }
    Ok(())
}

/// `bytes` as `T`s. `Buffer::new` checked the alignment and that the length is whole
/// items of the format's size, which is `T`'s: a failure here is a binding bug.
/// An empty buffer casts to no elements whatever its address (an empty `&[u8]` sits at
/// address 1, misaligned for wider types).
fn elements<'a, T: Element>(bytes: &'a [u8], comm: &Communicator) -> rcoll::Result<&'a [T]> {
    if bytes.is_empty() {
        return Ok(&[]);
    }
    bytemuck::try_cast_slice(bytes).map_err(|e| internal(comm, e))
}

fn elements_mut<'a, T: Element>(
    bytes: &'a mut [u8],
    comm: &Communicator,
) -> rcoll::Result<&'a mut [T]> {
    if bytes.is_empty() {
        return Ok(&mut []);
    }
    bytemuck::try_cast_slice_mut(bytes).map_err(|e| internal(comm, e))
}

fn internal(comm: &Communicator, e: bytemuck::PodCastError) -> rcoll::Error {
    rcoll::Error::Internal {
        rank: comm.rank() as u32,
        what: format!("a checked buffer does not cast to its element type: {e:?}"),
    }
}
