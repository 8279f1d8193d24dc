//! Buffers registered with a communicator's transport, for zero-copy sends: memory rcoll
//! allocates ([`Buffer`]) and the caller's own ([`RegisteredSlice`], [`MemoryRegistration`]).

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use rcoll_transport::{Registered, Registration};

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

/// The caller's own memory registered with a communicator's transport
/// ([`Communicator::register`](crate::Communicator::register)): while the guard lives,
/// collectives sending from the slice go zero-copy on the verbs transport, as from a
/// [`Buffer`]; dropping it deregisters. It holds the slice borrowed, so the memory
/// cannot be freed or moved first, and dereferences to it.
///
/// ```
/// let mut comms = rcoll::local::group(1)?;
/// let comm = &mut comms[0];
/// let mut grads = vec![1.5f32; 1 << 10];
/// let mut registered = comm.register(&mut grads)?;
/// comm.all_reduce_in_place(&mut registered, rcoll::ReduceOp::Sum)?;
/// drop(registered);
/// assert_eq!(grads[7], 1.5);
/// # Ok::<(), rcoll::Error>(())
/// ```
pub struct RegisteredSlice<'a, T: Element> {
    /// Dropped first: the registration goes before the borrow ends.
    registration: MemoryRegistration,
    memory: &'a mut [T],
}

impl<'a, T: Element> RegisteredSlice<'a, T> {
    pub(crate) fn new(memory: &'a mut [T], registration: MemoryRegistration) -> Self {
        RegisteredSlice {
            registration,
            memory,
        }
    }

    /// Whether the transport's device knows this memory (sends from it are zero-copy):
    /// false on transports without a device, and for a range already inside a registered
    /// one (zero-copy already) or across one's edge (copied).
    pub fn is_registered(&self) -> bool {
        self.registration.is_registered()
    }
}

impl<T: Element> Deref for RegisteredSlice<'_, T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.memory
    }
}

impl<T: Element> DerefMut for RegisteredSlice<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.memory
    }
}

impl<T: Element> fmt::Debug for RegisteredSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredSlice")
            .field("len", &self.len())
            .field("registered", &self.is_registered())
            .finish()
    }
}

/// A registration of memory rcoll does not hold: what
/// [`Communicator::register_bytes`](crate::Communicator::register_bytes) gives, for
/// callers that keep their memory themselves (the C API's `rcollCommRegister`). Dropping
/// it deregisters. It must be dropped before the memory is freed, moved or reused, as
/// NCCL asks of `ncclCommDeregister`: the device keeps the pages it registered, so sends
/// from the range after that would read those rather than what the range then holds.
pub struct MemoryRegistration {
    registration: Option<Box<dyn Registration>>,
}

impl MemoryRegistration {
    pub(crate) fn new(registration: Option<Box<dyn Registration>>) -> Self {
        MemoryRegistration { registration }
    }

    /// Whether the transport's device knows the memory (see
    /// [`RegisteredSlice::is_registered`]).
    pub fn is_registered(&self) -> bool {
        self.registration.is_some()
    }
}

impl Drop for MemoryRegistration {
    fn drop(&mut self) {
        if self.registration.as_ref().is_some_and(|r| r.in_use()) {
            // A device may still read the memory (a failed call whose sends could not be
            // reaped): deregistering would fail or pull the pages from under it. Kept.
            tracing::error!("a registration dropped while a device may read its memory: kept");
            std::mem::forget(self.registration.take());
        }
    }
}

impl fmt::Debug for MemoryRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegistration")
            .field("registered", &self.is_registered())
            .finish()
    }
}
