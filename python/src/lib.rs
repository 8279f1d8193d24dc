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

#[pymodule]
fn _rcoll(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(init, m)?)?;
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
