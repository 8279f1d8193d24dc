//! The handles C holds: numbers that name an entry of a table, never pointers into Rust's
//! memory, so that a stale, freed or foreign handle is refused instead of read.
//!
//! Each table maps a handle to an `Arc` of what it names. An entry point looks its handle
//! up and holds the `Arc` for the length of the call; destroying or aborting removes the
//! entry (later lookups fail) and what it named is freed when the last call using it ends.
//! Handles carry a generation ([`slotmap`]'s version), so a slot reused for a new object
//! does not answer to an old handle, and each table mixes its own constant into its
//! handles, so that a request handle given as a communicator (or the reverse) names
//! nothing.

use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use slotmap::{DefaultKey, Key, KeyData, SlotMap};

// A handle is a pointer-sized number: C's `rcollComm_t` is a pointer type.
const _: () = assert!(std::mem::size_of::<usize>() == std::mem::size_of::<u64>());

/// Objects named by handles of type `*mut H`.
pub(crate) struct Table<T> {
    slots: LazyLock<Mutex<SlotMap<DefaultKey, Arc<T>>>>,
    /// Mixed into every handle. Even: occupied slots have odd versions, so a handle's low
    /// bit is set and no handle is NULL.
    salt: u64,
}

impl<T> Table<T> {
    pub(crate) const fn new(salt: u64) -> Table<T> {
        Table {
            slots: LazyLock::new(|| Mutex::new(SlotMap::new())),
            salt: salt & !1,
        }
    }

    fn slots(&self) -> MutexGuard<'_, SlotMap<DefaultKey, Arc<T>>> {
        // The map is consistent between calls: no code here panics while holding it.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key<H>(&self, handle: *mut H) -> DefaultKey {
        KeyData::from_ffi(handle as usize as u64 ^ self.salt).into()
    }

    /// A new handle for `value`.
    pub(crate) fn insert<H>(&self, value: T) -> *mut H {
        let key = self.slots().insert(Arc::new(value));
        (key.data().as_ffi() ^ self.salt) as usize as *mut H
    }

    /// What `handle` names, if it is live.
    pub(crate) fn get<H>(&self, handle: *mut H) -> Option<Arc<T>> {
        self.slots().get(self.key(handle)).cloned()
    }

    /// Ends `handle`: later lookups fail. What it named lives on while calls hold it.
    pub(crate) fn remove<H>(&self, handle: *mut H) -> Option<Arc<T>> {
        self.slots().remove(self.key(handle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct A;

    #[test]
    fn stale_and_foreign_handles_name_nothing() {
        static ONE: Table<u32> = Table::new(0x5a5a_0000_1234_0000);
        static TWO: Table<u32> = Table::new(0x0f0f_f0f0_0000_4321);
        let h: *mut A = ONE.insert(7);
        assert!(!h.is_null());
        assert_eq!(ONE.get(h).as_deref(), Some(&7));
        assert!(TWO.get(h).is_none(), "a handle of another table");
        assert!(ONE.get(std::ptr::null_mut::<A>()).is_none());
        assert_eq!(ONE.remove(h).as_deref(), Some(&7));
        assert!(ONE.get(h).is_none() && ONE.remove(h).is_none(), "removed");
        // The slot is reused by the next object: the old handle still names nothing.
        let again: *mut A = ONE.insert(8);
        assert_ne!(again, h);
        assert!(ONE.get(h).is_none());
        assert_eq!(ONE.get(again).as_deref(), Some(&8));
    }
}
