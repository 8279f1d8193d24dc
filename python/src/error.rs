//! rcoll's errors as Python exceptions: `rcoll.Error` and one subclass per kind a caller
//! handles differently.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    rcoll,
    Error,
    PyException,
    "Any rcoll failure. After one (but InvalidArgumentError raised by the binding's own \
     checks) the communicator is unusable: build a new one."
);
create_exception!(
    rcoll,
    TimeoutError,
    Error,
    "Nothing moved for RCOLL_TIMEOUT: the message names the peer waited for and the ranks \
     that did not answer."
);
create_exception!(
    rcoll,
    PeerError,
    Error,
    "A peer died, closed its end, aborted or sent something wrong: the message names it, \
     and so does the `peer` attribute."
);
create_exception!(
    rcoll,
    InvalidArgumentError,
    Error,
    "A bad argument, named in the message: a buffer's length, type, layout or \
     writability, a root or peer out of range, an operation the type lacks."
);
create_exception!(
    rcoll,
    MismatchError,
    Error,
    "Another rank called a different collective or the same one with other arguments \
     (the message names it and what differs)."
);

/// The exception for `e`, its message rcoll's own.
pub(crate) fn to_py(py: Python<'_>, e: rcoll::Error) -> PyErr {
    use rcoll::Error as E;
    let message = e.to_string();
    let peer = e.peer().map(|p| p.0);
    let err = match e {
        E::BufferLength { .. }
        | E::RootOutOfRange { .. }
        | E::PeerOutOfRange { .. }
        | E::UnsupportedOp { .. }
        | E::UnsupportedAlgorithm { .. }
        | E::CountOverflow { .. }
        | E::Config(_) => InvalidArgumentError::new_err(message),
        E::Timeout { .. } => TimeoutError::new_err(message),
        E::Mismatch { .. } => MismatchError::new_err(message),
        E::Transport { .. } | E::Bootstrap { .. } if peer.is_some() => PeerError::new_err(message),
        _ => Error::new_err(message),
    };
    if let Some(p) = peer {
        // An attribute on a fresh exception instance: cannot fail but for lack of memory,
        // and the exception says the same in its message.
        let _ = err.value(py).setattr("peer", p);
    }
    err
}
