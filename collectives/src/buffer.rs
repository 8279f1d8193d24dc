//! Buffers registered with a communicator's transport, for zero-copy sends.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use rcoll_transport::Registered;

use crate::element::Element;

/// `len` elements allocated through [`Communicator::alloc`](crate::Communicator::alloc):
/// on the verbs transport the memory is registered with the device once, when it is
/// allocated, so every collective sending from it writes straight from it to the peers
/// (zero copy) without registering again; dropping the buffer deregisters it. On other
/// transports it is ordinary memory. It dereferences to `[T]`, so it is passed to the
/// collectives like any slice.
///
/// ```
/// let mut comms = rcoll::local::group(1)?;
/// let comm = &mut comms[0];
/// let mut grads = comm.alloc::<f32>(1 << 10)?;
/// grads.fill(1.5);
/// comm.all_reduce_in_place(&mut grads, rcoll::ReduceOp::Sum)?;
/// assert_eq!(grads[7], 1.5);
/// # Ok::<(), rcoll::Error>(())
/// ```
pub struct Buffer<T: Element> {
    memory: Registered,
    _element: PhantomData<T>,
}

impl<T: Element> Buffer<T> {
    pub(crate) fn new(memory: Registered) -> Buffer<T> {
        Buffer {
            memory,
            _element: PhantomData,
        }
    }

    /// Whether the transport's device knows this memory (sends from it are zero-copy).
    pub fn is_registered(&self) -> bool {
        self.memory.is_registered()
    }
}

impl<T: Element> Deref for Buffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // The memory is 8-byte aligned and a whole number of elements long.
        bytemuck::cast_slice(self.memory.as_bytes())
    }
}

impl<T: Element> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        bytemuck::cast_slice_mut(self.memory.as_bytes_mut())
    }
}

impl<T: Element> fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("len", &self.len())
            .field("registered", &self.is_registered())
            .finish()
    }
}
