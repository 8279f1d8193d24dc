//! Aborting a communicator from another thread.
//!
//! A [`Communicator`](crate::Communicator) is `&mut` while a call runs, so nothing else can
//! reach its transport then. An [`AbortHandle`] (from
//! [`Communicator::abort_handle`](crate::Communicator::abort_handle)) is the one thing that
//! can: it raises a flag that the call's driver reads between polls and before every sleep,
//! and the driver sleeps at most [`ABORT_POLL`] at a time, so a blocked call ends within
//! that of the abort with an error naming this rank. The call then aborts the group through
//! its transport, so the other ranks' calls fail too, naming this rank. When no call is
//! running, the next call (or dropping the communicator) applies the abort.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The longest a blocked call sleeps before it looks at the abort flag again: an abort
/// ends a blocked call within this (plus the call's own unwinding), and an idle rank
/// wakes this often, which costs nothing measurable.
pub const ABORT_POLL: Duration = Duration::from_millis(20);

/// Aborts a communicator from any thread (see the [module](self)). Cheap to clone; every
/// clone aborts the same communicator.
#[derive(Clone, Default)]
pub struct AbortHandle {
    signal: Arc<Signal>,
}

#[derive(Default)]
struct Signal {
    raised: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl AbortHandle {
    /// Aborts the communicator: a call running on it ends within [`ABORT_POLL`] with an
    /// error naming this rank and `reason`, and so do every later call on it and the other
    /// ranks' calls. The first reason given is kept.
    pub fn abort(&self, reason: &str) {
        let mut held = self.signal.reason.lock().unwrap_or_else(|p| p.into_inner());
        held.get_or_insert_with(|| reason.to_owned());
        // Release: whoever sees the flag finds the reason written.
        self.signal.raised.store(true, Ordering::Release);
    }

    /// Whether [`abort`](Self::abort) was called.
    pub fn is_aborted(&self) -> bool {
        self.signal.raised.load(Ordering::Acquire)
    }

    /// The reason given to [`abort`](Self::abort), once it was called.
    pub fn reason(&self) -> Option<String> {
        if !self.is_aborted() {
            return None;
        }
        self.signal
            .reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The flag itself, for the driver's loop (a load per poll).
    pub(crate) fn flag(&self) -> &AtomicBool {
        &self.signal.raised
    }
}

impl std::fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AbortHandle")
            .field("aborted", &self.is_aborted())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_is_kept_and_every_clone_sees_it() {
        let a = AbortHandle::default();
        let b = a.clone();
        assert!(!b.is_aborted());
        assert_eq!(b.reason(), None);
        a.abort("first");
        b.abort("second");
        assert!(a.is_aborted() && b.is_aborted());
        assert_eq!(a.reason().as_deref(), Some("first"));
    }
}
