//! Registered caller memory: address ranges and their local keys, for zero-copy sends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::ffi::MemoryRegion;

/// Smallest send from registered caller memory that goes zero-copy: below it, copying into
/// a slot (and inline sends) costs less than a second gather entry and a completion.
pub const ZERO_COPY_MIN: usize = 16 * 1024;

/// Address ranges of registered caller memory, shared with their owners' guards.
#[derive(Clone, Default)]
pub(super) struct Registry(pub(super) Arc<Mutex<BTreeMap<usize, (usize, u32)>>>);

impl Registry {
    /// The local key of registered memory covering `[start, start + len)`.
    pub(super) fn lookup(&self, start: usize, len: usize) -> Option<u32> {
        let map = self.0.lock().ok()?;
        let (_, &(end, lkey)) = map.range(..=start).next_back()?;
        (start + len <= end).then_some(lkey)
    }
}

/// A [`Registered`]'s registration: dropped before its memory, it leaves the registry and
/// deregisters. While a send from the memory is in flight the caller holds a borrow of it
/// (see [`Transport::try_send_borrowed`]), so it cannot be dropped then.
pub(super) struct Guard {
    pub(super) start: usize,
    pub(super) registry: Registry,
    pub(super) _mr: MemoryRegion,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(mut map) = self.registry.0.lock() {
            map.remove(&self.start);
        }
    }
}
