//! The buffer boundary: a Python object's memory, held for as long as rcoll uses it.
//!
//! PyO3's safe `PyBuffer`, and its `ffi` declarations of the buffer protocol, are compiled
//! only for the full API or the limited API of 3.11 and later (the protocol joined the
//! stable ABI in 3.11). This crate is built for abi3-py39, so [`sys`] declares the three
//! functions and the `Py_buffer` struct itself: the layout 3.11 made stable, unchanged since
//! 3.3, and the functions every CPython 3 exports, so one wheel serves CPython 3.9 and later.
//!
//! Everything is checked when the buffer is taken, before any communication: the format
//! names an rcoll element type, the memory is C-contiguous and aligned for it, and an output
//! is writable. Holding a [`Buffer`] keeps the exporter from moving or freeing its memory (a
//! `bytearray` refuses to resize, a numpy array to reallocate, while it is exported).

use std::ffi::CStr;

use pyo3::ffi::PyObject;
use pyo3::prelude::*;
use rcoll::DataType;

use crate::error::InvalidArgumentError;

/// A Python object's contiguous memory, exported to rcoll until dropped.
pub(crate) struct Buffer {
    /// Boxed: the exporter may keep pointers into the view (its `shape`, `strides`).
    view: Box<sys::Py_buffer>,
    dtype: DataType,
    bytes: usize,
    writable: bool,
}

// SAFETY:
// - `Py_buffer` is plain pointers into memory the exporter keeps alive and in place until
//   `PyBuffer_Release`; nothing in it is tied to the thread that took it.
// - Reads and writes through it happen on a thread holding the `Buffer` by `&` or `&mut`
//   ([`Buffer::bytes`], [`Buffer::bytes_mut`]), so Rust's rules order them; Python code that
//   touches the same memory during a call races as it would with MPI (the values are then
//   unspecified; the memory stays valid).
// - The release, the only call into Python, takes the GIL first (see `Drop`).
unsafe impl Send for Buffer {}
// SAFETY: as for `Send`: `&Buffer` only reads the view's fields and the memory.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// `obj`'s memory as elements of the type its format names, checked as the module says;
    /// `what` names the argument in errors. bfloat16 has no buffer format, so two forms
    /// name it: `rcoll.as_bfloat16(x)` around any buffer of 2-byte items, and an array
    /// whose `dtype` is called `bfloat16` (ml_dtypes' numpy type), taken through its
    /// `view("uint16")`.
    pub(crate) fn new(obj: &Bound<'_, PyAny>, what: &str, writable: bool) -> PyResult<Buffer> {
        if let Ok(wrapped) = obj.cast::<AsBfloat16>() {
            let inner = wrapped.get().0.bind(obj.py()).clone();
            return Buffer::export(&inner, what, writable, true);
        }
        match Buffer::export(obj, what, writable, false) {
            // Asked only when the buffer itself names no rcoll type: reading numpy's dtype
            // name runs Python code (7 us a buffer here, more than the call it checks).
            Err(_) if is_bfloat16_array(obj) => {
                let bits = obj.call_method1("view", ("uint16",))?;
                Buffer::export(&bits, what, writable, true)
            }
            taken => taken,
        }
    }

    /// `obj`'s memory, its items of the type the format names or, `as_bfloat16`, 2-byte
    /// items of any format taken as bfloat16.
    fn export(
        obj: &Bound<'_, PyAny>,
        what: &str,
        writable: bool,
        as_bfloat16: bool,
    ) -> PyResult<Buffer> {
        let mut view = Box::new(sys::Py_buffer::default());
        // Strides and format: contiguity and the element type are checked here, with errors
        // naming the argument, rather than in the exporter's words.
        let flags = sys::PyBUF_RECORDS_RO;
        // SAFETY:
        // - `obj` is a live object (a `Bound` holds a reference) and the GIL is held (`Bound`).
        // - `view` points to a writable `Py_buffer` that outlives the export (boxed, owned
        //   by the `Buffer` made below, released in its `Drop`).
        if unsafe { sys::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } != 0 {
            let cause = PyErr::fetch(obj.py());
            return Err(InvalidArgumentError::new_err(format!(
                "{what} does not export a buffer ({cause}): pass a numpy array, bytearray or \
                 memoryview"
            )));
        }
        // From here on, dropping `buffer` releases the export.
        let mut buffer = Buffer {
            view,
            dtype: DataType::U8,
            bytes: 0,
            writable: false,
        };
        // A copy of the view's fields (plain pointers and numbers): `buffer` stays free to
        // fill in.
        let v: sys::Py_buffer = *buffer.view;
        // SAFETY: `v.format` is null or a NUL-terminated string the exporter keeps until
        // the release (PEP 3118; requested with PyBUF_FORMAT).
        let format = (!v.format.is_null()).then(|| unsafe { CStr::from_ptr(v.format) });
        let format = format.map_or("B", |f| f.to_str().unwrap_or("?"));
        buffer.dtype = match (as_bfloat16, v.itemsize) {
            (true, 2) => DataType::Bf16,
            (true, n) => {
                return Err(InvalidArgumentError::new_err(format!(
                    "{what}: as_bfloat16 needs 2-byte items, the buffer's are {n} bytes"
                )))
            }
            (false, _) => dtype_of(format, v.itemsize).map_err(|why| {
                InvalidArgumentError::new_err(format!("{what}: buffer format {format:?} {why}"))
            })?,
        };
        // SAFETY: `v` holds the fields `PyObject_GetBuffer` just filled in, still exported.
        if unsafe { sys::PyBuffer_IsContiguous(&v, b'C' as std::os::raw::c_char) } == 0 {
            return Err(InvalidArgumentError::new_err(format!(
                "{what} is not C-contiguous: pass a contiguous copy (numpy.ascontiguousarray)"
            )));
        }
        if writable && v.readonly != 0 {
            return Err(InvalidArgumentError::new_err(format!(
                "{what} is read-only, and rcoll writes its result there"
            )));
        }
        let size = buffer.dtype.size();
        if v.len > 0 && (v.buf as usize) % size != 0 {
            return Err(InvalidArgumentError::new_err(format!(
                "{what} is not aligned for {} (address {:#x})",
                buffer.dtype_name(),
                v.buf as usize
            )));
        }
        buffer.bytes = usize::try_from(v.len).unwrap_or(0);
        buffer.writable = writable;
        Ok(buffer)
    }

    /// The element type the buffer's format names.
    pub(crate) fn dtype(&self) -> DataType {
        self.dtype
    }

    /// numpy's name of the element type, for messages.
    pub(crate) fn dtype_name(&self) -> &'static str {
        match self.dtype {
            DataType::I8 => "int8",
            DataType::U8 => "uint8",
            DataType::I32 => "int32",
            DataType::U32 => "uint32",
            DataType::I64 => "int64",
            DataType::U64 => "uint64",
            DataType::F16 => "float16",
            DataType::Bf16 => "bfloat16",
            DataType::F32 => "float32",
            DataType::F64 => "float64",
            _ => self.dtype.name(),
        }
    }

    /// The buffer's memory.
    pub(crate) fn bytes(&self) -> &[u8] {
        if self.bytes == 0 {
            return &[];
        }
        // SAFETY:
        // - `buf` points to `len` bytes the exporter keeps valid and in place until the
        //   release in `Drop`, which cannot run while `self` is borrowed.
        // - No `&mut` to the same memory exists: `bytes_mut` needs `&mut self`, and two
        //   buffers over overlapping memory are refused as a pair (`overlap`).
        unsafe { std::slice::from_raw_parts(self.view.buf as *const u8, self.bytes) }
    }

    /// The buffer's memory, to write (taken as an output: checked writable).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        if self.bytes == 0 || !self.writable {
            return &mut [];
        }
        // SAFETY: as in `bytes`, and: the exporter said the memory is writable (checked in
        // `new`), and `&mut self` makes this the only reference into it.
        unsafe { std::slice::from_raw_parts_mut(self.view.buf as *mut u8, self.bytes) }
    }

    /// Whether the two buffers share memory (then one cannot be read while the other is
    /// written: the caller meant `IN_PLACE`).
    pub(crate) fn overlaps(&self, other: &Buffer) -> bool {
        let (a, b) = (self.view.buf as usize, other.view.buf as usize);
        self.bytes > 0 && other.bytes > 0 && a < b + other.bytes && b < a + self.bytes
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // Normally dropped with the GIL held (attaching is then a counter increment); a
        // request's buffers come back to a Python thread before they are dropped.
        Python::attach(|_| {
            // SAFETY: the view was filled by a successful `PyObject_GetBuffer` and is
            // released once, here, with the GIL held.
            unsafe { sys::PyBuffer_Release(&mut *self.view) }
        });
    }
}

/// `rcoll.as_bfloat16(buf)`: `buf`'s 2-byte items taken as bfloat16 (numpy has no such
/// type, so a buffer cannot say it holds one: `torch.bfloat16` tensors reach rcoll as
/// `as_bfloat16(t.view(torch.int16).numpy())`).
#[pyclass(module = "rcoll", frozen)]
pub(crate) struct AsBfloat16(Py<PyAny>);

#[pymethods]
impl AsBfloat16 {
    #[new]
    fn new(buf: Py<PyAny>) -> AsBfloat16 {
        AsBfloat16(buf)
    }
}

/// Whether `obj` is an array of ml_dtypes' `bfloat16` (its dtype's name).
fn is_bfloat16_array(obj: &Bound<'_, PyAny>) -> bool {
    obj.getattr("dtype")
        .and_then(|d| d.str())
        .is_ok_and(|name| name.to_cow().is_ok_and(|n| n == "bfloat16"))
}

/// The element type of a PEP 3118 format (struct module syntax, one item) with items of
/// `itemsize` bytes, or why it is none.
fn dtype_of(format: &str, itemsize: isize) -> Result<DataType, String> {
    let native = cfg!(target_endian = "little");
    let (order_ok, code) = match format.as_bytes() {
        [b'@' | b'=', c] | [c] => (true, *c),
        [b'<', c] => (native, *c),
        [b'>' | b'!', c] => (!native || itemsize == 1, *c),
        _ => return Err("is not a single scalar type".into()),
    };
    if !order_ok {
        return Err("has the other byte order than this machine".into());
    }
    let t = match (code, itemsize) {
        (b'b', 1) => DataType::I8,
        (b'B' | b'c', 1) => DataType::U8,
        (b'h' | b'i' | b'l' | b'q' | b'n', 4) => DataType::I32,
        (b'h' | b'i' | b'l' | b'q' | b'n', 8) => DataType::I64,
        (b'H' | b'I' | b'L' | b'Q' | b'N', 4) => DataType::U32,
        (b'H' | b'I' | b'L' | b'Q' | b'N', 8) => DataType::U64,
        (b'e', 2) => DataType::F16,
        (b'f', 4) => DataType::F32,
        (b'd', 8) => DataType::F64,
        _ => {
            return Err(format!(
                "({itemsize}-byte items) is not an rcoll element type: int8, uint8, \
                 int32, uint32, int64, uint64, float16, float32, float64"
            ))
        }
    };
    Ok(t)
}

/// The buffer protocol's C declarations (CPython's `Include/pybuffer.h`).
// CPython's names, so that the declarations read as the header does.
#[allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
mod sys {
    use std::os::raw::{c_char, c_int, c_void};

    use super::PyObject;

    /// `Py_buffer`, as CPython 3.3 and later lay it out.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub(super) struct Py_buffer {
        pub(super) buf: *mut c_void,
        pub(super) obj: *mut PyObject,
        pub(super) len: isize,
        pub(super) itemsize: isize,
        pub(super) readonly: c_int,
        pub(super) ndim: c_int,
        pub(super) format: *mut c_char,
        pub(super) shape: *mut isize,
        pub(super) strides: *mut isize,
        pub(super) suboffsets: *mut isize,
        pub(super) internal: *mut c_void,
    }

    impl Default for Py_buffer {
        fn default() -> Self {
            let null = std::ptr::null_mut();
            Py_buffer {
                buf: null,
                obj: std::ptr::null_mut(),
                len: 0,
                itemsize: 0,
                readonly: 0,
                ndim: 0,
                format: std::ptr::null_mut(),
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                suboffsets: std::ptr::null_mut(),
                internal: null,
            }
        }
    }

    /// `PyBUF_STRIDES | PyBUF_FORMAT`: any layout (checked after), with its item format.
    pub(super) const PyBUF_RECORDS_RO: c_int = 0x0010 | 0x0008 | 0x0004;

    extern "C" {
        pub(super) fn PyObject_GetBuffer(
            obj: *mut PyObject,
            view: *mut Py_buffer,
            flags: c_int,
        ) -> c_int;
        pub(super) fn PyBuffer_IsContiguous(view: *const Py_buffer, order: c_char) -> c_int;
        pub(super) fn PyBuffer_Release(view: *mut Py_buffer);
    }
}
