//! `rcoll.alloc`'s memory: an rcoll [`Buffer`](rcoll::Buffer) (registered with the
//! transport's device on verbs, ordinary memory elsewhere) that numpy arrays view.
//!
//! numpy makes an array of an object's `__array_interface__` and keeps the object as the
//! array's `base`, so the memory lives as long as any array over it; the transport finds
//! it registered by its address when a collective is called on such an array (no second
//! registration, zero-copy sends).

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Registered memory, viewed by numpy through `__array_interface__` (bytes, `|u1`).
#[pyclass(module = "rcoll", frozen)]
pub(crate) struct Memory {
    /// Never touched from Rust once made: Python's arrays read and write it by address.
    /// A `Mutex` only to make the holder `Sync` (the registration is `Send` alone).
    _buffer: Mutex<rcoll::Buffer<u8>>,
    address: usize,
    nbytes: usize,
    registered: bool,
}

impl Memory {
    pub(crate) fn new(mut buffer: rcoll::Buffer<u8>) -> Memory {
        // The heap memory behind the buffer does not move when the buffer does.
        let address = buffer.as_mut_ptr() as usize;
        Memory {
            address,
            nbytes: buffer.len(),
            registered: buffer.is_registered(),
            _buffer: Mutex::new(buffer),
        }
    }
}

#[pymethods]
impl Memory {
    /// numpy's array interface (version 3): `nbytes` writable bytes at the buffer's address.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", (self.nbytes,))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.address, false))?;
        Ok(d)
    }

    /// Whether the transport's device knows this memory (sends from it are zero-copy).
    #[getter]
    fn registered(&self) -> bool {
        self.registered
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    fn __repr__(&self) -> String {
        format!(
            "<rcoll memory of {} bytes, {}registered>",
            self.nbytes,
            if self.registered { "" } else { "not " }
        )
    }
}
