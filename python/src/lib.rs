//! `rcoll._rcoll`: the native module of the Python package `rcoll` (see
//! `python/rcoll/_rcoll.pyi` for the API and `python/README.md` for its use).
//!
//! A thin binding: rank, size and rendezvous come from [`rcoll::process::init`], every call
//! is one of [`rcoll::Communicator`]'s on the memory of buffer-protocol objects (numpy
//! arrays, `bytearray`, `memoryview`), and nonblocking calls run on rcoll's
//! [`rcoll::Background`]. What the binding adds: reading the element type from the buffer's
//! format and checking the buffers before any communication (`buffer`), mpi4py's argument
//! shapes (`comm`), and rcoll's errors as exceptions (`error`). Blocking calls release
//! the GIL.

mod alloc;
mod buffer;
mod call;
mod comm;
mod error;

use pyo3::prelude::*;
use rcoll::ReduceOp;

use comm::{Comm, InPlace, Op, Request};

/// Joins the job the environment describes (`RCOLL_RANK`/`RCOLL_WORLD_SIZE`/
/// `RCOLL_ROOT_ADDR`/`RCOLL_UNIQUE_ID`, torchrun, mpirun, srun), as
/// `rcoll::process::init`; blocks, the GIL released, until every rank has joined.
#[pyfunction]
fn init(py: Python<'_>) -> PyResult<Comm> {
    let comm = py
        .detach(rcoll::process::init)
        .map_err(|e| error::to_py(py, e))?;
    Comm::new(comm)
}

/// A fresh rendezvous for a new group, made on the process that will be its rank 0 (which
/// listens from now on): 128 bytes to hand to every member's `init_rank`.
#[pyfunction]
fn unique_id(py: Python<'_>) -> PyResult<Vec<u8>> {
    let id = py
        .detach(rcoll::process::UniqueId::new)
        .map_err(|e| error::to_py(py, e))?;
    Ok(id.to_bytes().to_vec())
}

/// Joins, as rank `rank` of `size`, the group that `unique_id` (from rank 0's `unique_id()`)
/// names; `timeout` (seconds) bounds every wait without progress, the rendezvous's too.
#[pyfunction]
#[pyo3(signature = (unique_id, rank, size, timeout = None))]
fn init_rank(
    py: Python<'_>,
    unique_id: Vec<u8>,
    rank: usize,
    size: usize,
    timeout: Option<f64>,
) -> PyResult<Comm> {
    let bytes: [u8; rcoll::process::UNIQUE_ID_BYTES] =
        unique_id.as_slice().try_into().map_err(|_| {
            error::InvalidArgumentError::new_err(format!(
                "a unique id is {} bytes, not {}",
                rcoll::process::UNIQUE_ID_BYTES,
                unique_id.len()
            ))
        })?;
    let timeout = match timeout {
        Some(t) if t.is_finite() && t > 0.0 => Some(std::time::Duration::from_secs_f64(t)),
        Some(t) => {
            return Err(error::InvalidArgumentError::new_err(format!(
                "timeout {t} s: give a positive number of seconds"
            )))
        }
        None => None,
    };
    let comm = py
        .detach(|| {
            let id = rcoll::process::UniqueId::from_bytes(&bytes)?;
            let builder = rcoll::process::Builder::from_unique_id(&id, rank, size)?;
            match timeout {
                Some(t) => builder.timeout(t),
                None => builder,
            }
            .build()
        })
        .map_err(|e| error::to_py(py, e))?;
    Comm::new(comm)
}

#[pymodule]
fn _rcoll(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(unique_id, m)?)?;
    m.add_function(wrap_pyfunction!(init_rank, m)?)?;
    m.add_class::<alloc::Memory>()?;
    m.add_class::<buffer::AsBfloat16>()?;
    m.add_class::<Comm>()?;
    m.add_class::<Request>()?;
    m.add_class::<Op>()?;
    m.add_class::<InPlace>()?;
    m.add("IN_PLACE", InPlace)?;
    for (name, op) in [
        ("SUM", ReduceOp::Sum),
        ("PROD", ReduceOp::Prod),
        ("MIN", ReduceOp::Min),
        ("MAX", ReduceOp::Max),
        ("AVG", ReduceOp::Avg),
        ("BAND", ReduceOp::BitAnd),
        ("BOR", ReduceOp::BitOr),
        ("BXOR", ReduceOp::BitXor),
    ] {
        m.add(name, Op(op))?;
    }
    m.add("Error", py.get_type::<error::Error>())?;
    m.add("TimeoutError", py.get_type::<error::TimeoutError>())?;
    m.add("PeerError", py.get_type::<error::PeerError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<error::InvalidArgumentError>(),
    )?;
    m.add("MismatchError", py.get_type::<error::MismatchError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
