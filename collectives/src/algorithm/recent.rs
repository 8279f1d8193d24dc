//! Per-thread memory of a few recent results of pure functions used by schedule
//! generators. Every rank of a layout builds the same trees and cuts the vector the same
//! way; generating all `p` schedules (the planner, the verifier, [`crate::simulate`])
//! would otherwise repeat that `O(p)` work `p` times (hours at 65,536 ranks).

use std::cell::RefCell;
use std::thread::LocalKey;

/// The last few `(key, value)` pairs, oldest first.
pub(crate) struct Recent<K, V> {
    keep: usize,
    entries: Vec<(K, V)>,
}

impl<K, V> Recent<K, V> {
    /// Remembers up to `keep` results.
    pub(crate) const fn new(keep: usize) -> Self {
        Recent {
            keep,
            entries: Vec::new(),
        }
    }
}

/// The value for `key` in `cell`, made by `make` (and remembered) unless this thread
/// made it recently. `make` runs with the cell released, so it may use other memories.
pub(crate) fn recall<K: PartialEq + Copy, V: Clone>(
    cell: &'static LocalKey<RefCell<Recent<K, V>>>,
    key: K,
    make: impl FnOnce() -> V,
) -> V {
    let hit = cell.with_borrow(|r| {
        r.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    });
    if let Some(v) = hit {
        return v;
    }
    let v = make();
    cell.with_borrow_mut(|r| {
        if r.entries.len() >= r.keep.max(1) {
            r.entries.remove(0);
        }
        r.entries.push((key, v.clone()));
    });
    v
}
