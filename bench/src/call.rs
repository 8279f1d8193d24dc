//! One call of the benchmarked collective on a rank's buffers, for the plain run and the
//! comparison of algorithms alike.

use rcoll::schedule::BufferLayout;
use rcoll::{Collective, Communicator, Element};

use crate::data::Reference;
use crate::error::BenchError;
use crate::spec::BenchSpec;

/// A rank's buffers for one call, allocated through the communicator
/// ([`Communicator::alloc`]): registered with the device on verbs, so that sends go
/// zero-copy, as an application that allocates its buffers that way gets.
pub(crate) enum Buffers<T: Element> {
    Separate {
        send: rcoll::Buffer<T>,
        recv: rcoll::Buffer<T>,
    },
    InPlace(rcoll::Buffer<T>),
}

impl<T: Element> Buffers<T> {
    /// Buffers for `extents`, one in place or two.
    pub(crate) fn new(
        comm: &mut Communicator,
        extents: &BufferLayout,
        in_place: bool,
    ) -> Result<Buffers<T>, BenchError> {
        Ok(if in_place {
            Buffers::InPlace(comm.alloc(extents.storage_len)?)
        } else {
            Buffers::Separate {
                send: comm.alloc(extents.input.len)?,
                recv: comm.alloc(extents.output.len)?,
            }
        })
    }

    /// The reference input where the call reads it, the sentinel everywhere else.
    pub(crate) fn fill(&mut self, reference: &Reference<T>, rank: usize, extents: &BufferLayout) {
        let sentinel = reference.sentinel();
        match self {
            Buffers::Separate { send, recv } => {
                reference.fill_input(rank, send);
                recv.fill(sentinel);
            }
            Buffers::InPlace(buf) => {
                buf.fill(sentinel);
                if let Some(input) = buf.get_mut(extents.input.offset..extents.input.end()) {
                    reference.fill_input(rank, input);
                }
            }
        }
    }

    /// The call's output.
    pub(crate) fn output(&self, extents: &BufferLayout) -> Option<&[T]> {
        match self {
            Buffers::Separate { recv, .. } => recv.get(..extents.output.len),
            Buffers::InPlace(buf) => buf.get(extents.output.offset..extents.output.end()),
        }
    }
}

/// One call of the collective on `buffers`.
pub(crate) fn call<T: Element>(
    comm: &mut Communicator,
    spec: &BenchSpec,
    buffers: &mut Buffers<T>,
) -> Result<(), BenchError> {
    use Collective as C;
    let (op, root) = (spec.op, spec.root);
    let (n, rank) = (comm.size(), comm.rank());
    let result = match buffers {
        Buffers::Separate { send, recv } => match spec.collective {
            C::AllReduce => comm.all_reduce(send, recv, op),
            C::Reduce => comm.reduce(send, recv, op, root),
            C::Broadcast => comm.broadcast(send, recv, root),
            C::AllGather => comm.all_gather(send, recv),
            C::ReduceScatter => comm.reduce_scatter(send, recv, op),
            C::Gather => comm.gather(send, recv, root),
            C::Scatter => comm.scatter(send, recv, root),
            C::AllToAll => comm.all_to_all(send, recv),
            C::SendRecv => comm.send_recv(send, (rank + 1) % n, recv, (rank + n - 1) % n),
            other => return Err(unsupported(other)),
        },
        Buffers::InPlace(buf) => match spec.collective {
            C::AllReduce => comm.all_reduce_in_place(buf, op),
            C::Reduce => comm.reduce_in_place(buf, op, root),
            C::Broadcast => comm.broadcast_in_place(buf, root),
            C::AllGather => comm.all_gather_in_place(buf),
            C::ReduceScatter => comm.reduce_scatter_in_place(buf, op),
            C::Gather => comm.gather_in_place(buf, root),
            C::Scatter => comm.scatter_in_place(buf, root),
            C::AllToAll => comm.all_to_all_in_place(buf),
            other => return Err(unsupported(other)),
        },
    };
    result.map_err(BenchError::from)
}

fn unsupported(collective: Collective) -> BenchError {
    BenchError::Usage(format!("rcoll-bench cannot run {collective} in this mode"))
}
