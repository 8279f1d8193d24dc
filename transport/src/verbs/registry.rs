//! Registered caller memory: address ranges, their keys, and how many device accesses may
//! still be under way in each — sends reading it, offers a peer may write (so that memory
//! is never freed under the NIC).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::ffi::MemoryRegion;
use crate::transport::Registration;

/// Smallest send from registered caller memory that goes zero-copy: below it, copying into
/// a slot (and inline sends) costs less than a second gather entry and a completion.
pub const ZERO_COPY_MIN: usize = 16 * 1024;

/// One registered range.
#[derive(Clone)]
pub(super) struct Region {
    pub(super) end: usize,
    pub(super) lkey: u32,
    /// The remote key, when peers may write it (offered destinations).
    pub(super) rkey: Option<u32>,
    /// The region itself, when registered for memory windows (offered destinations, with
    /// scoped grants: each offer binds a window over its range).
    pub(super) windows: Option<Arc<MemoryRegion>>,
    /// Posted sends from this range not yet completed or flushed, and offers of it out.
    pub(super) reading: Arc<AtomicUsize>,
}

/// Address ranges of registered caller memory, shared with their owners' guards.
#[derive(Clone, Default)]
pub(super) struct Registry(Arc<Mutex<BTreeMap<usize, Region>>>);

impl Registry {
    /// The region covering `[start, start + len)`.
    pub(super) fn lookup(&self, start: usize, len: usize) -> Option<Region> {
        let map = self.0.lock().ok()?;
        let (_, region) = map.range(..=start).next_back()?;
        (start.checked_add(len)? <= region.end).then(|| region.clone())
    }

    /// Whether `[start, start + len)` touches no registered range (a range may be entered).
    pub(super) fn is_free(&self, start: usize, len: usize) -> bool {
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        let Ok(map) = self.0.lock() else {
            return false;
        };
        // The last range starting before `end` is the only one that can reach into it
        // (ranges never overlap).
        map.range(..end)
            .next_back()
            .is_none_or(|(_, region)| region.end <= start)
    }

    /// Enters `[start, end)` registered as `mr`, for `remote` writes; the guard takes it
    /// out again.
    pub(super) fn enter(
        &self,
        start: usize,
        end: usize,
        mr: MemoryRegion,
        remote: Remote,
    ) -> Guard {
        let reading = Arc::new(AtomicUsize::new(0));
        let mr = Arc::new(mr);
        if let Ok(mut map) = self.0.lock() {
            map.insert(
                start,
                Region {
                    end,
                    lkey: mr.lkey(),
                    rkey: (remote == Remote::Region).then(|| mr.rkey()),
                    windows: (remote == Remote::Windows).then(|| mr.clone()),
                    reading: reading.clone(),
                },
            );
        }
        Guard {
            start,
            registry: self.clone(),
            reading,
            _mr: mr,
        }
    }
}

/// How peers may write a registered range: not at all, anywhere under the region's key,
/// or through windows bound over pieces of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Remote {
    None,
    Region,
    Windows,
}

/// A [`crate::Registered`]'s registration: dropped before its memory, it leaves the
/// registry and deregisters — unless a device may still read the memory, in which case the
/// owner leaks both ([`Registration::in_use`]).
pub(super) struct Guard {
    start: usize,
    registry: Registry,
    reading: Arc<AtomicUsize>,
    _mr: Arc<MemoryRegion>,
}

impl Registration for Guard {
    fn in_use(&self) -> bool {
        // Acquire: pairs with the release of the completion (or withdrawal) that brought it
        // to zero, after which no device touches the memory.
        self.reading.load(Ordering::Acquire) > 0
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(mut map) = self.registry.0.lock() {
            map.remove(&self.start);
        }
    }
}
