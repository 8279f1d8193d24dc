//! In-process groups: `n` ranks as threads of one process (burn-collective's "local"
//! level), for tests and for applications with one rank per thread or device.
//!
//! ```
//! let comms = rcoll::local::group(4)?;
//! let results: Vec<Vec<f32>> = std::thread::scope(|s| {
//!     let handles: Vec<_> = comms
//!         .into_iter()
//!         .map(|mut comm| {
//!             s.spawn(move || {
//!                 let mut v = vec![comm.rank() as f32; 3];
//!                 comm.all_reduce_in_place(&mut v, rcoll::ReduceOp::Sum).map(|_| v)
//!             })
//!         })
//!         .collect();
//!     handles.into_iter().map(|h| h.join().expect("rank thread").expect("all_reduce")).collect()
//! });
//! assert!(results.iter().all(|v| v == &[6.0, 6.0, 6.0]));
//! # Ok::<(), rcoll::Error>(())
//! ```

use std::time::Duration;

use rcoll_transport::local as backend;

use crate::algorithm::Algorithm;
use crate::communicator::Communicator;
use crate::config::Overrides;
use crate::error::{Error, Result};

/// `n` communicators of one in-process group, rank `i` at index `i`, configured from the
/// environment (`RCOLL_ALGO`, `RCOLL_TIMEOUT`, `RCOLL_SEGMENT_BYTES`).
pub fn group(n: usize) -> Result<Vec<Communicator>> {
    Builder::new(n).build()
}

/// Builds an in-process group with explicit settings (which override the environment).
#[derive(Clone, Debug)]
pub struct Builder {
    n: usize,
    overrides: Overrides,
    window: usize,
}

impl Builder {
    /// A group of `n` ranks.
    pub fn new(n: usize) -> Builder {
        Builder {
            n,
            overrides: Overrides::default(),
            window: backend::DEFAULT_WINDOW,
        }
    }

    /// Forces `algorithm` (`None`: choose by the cost model) wherever it applies.
    pub fn algorithm(mut self, algorithm: Option<Algorithm>) -> Builder {
        self.overrides.algorithm = Some(algorithm);
        self
    }

    /// Time without progress before a call fails.
    pub fn timeout(mut self, timeout: Duration) -> Builder {
        self.overrides.timeout = Some(timeout);
        self
    }

    /// Bytes per pipelined segment.
    pub fn segment_bytes(mut self, bytes: usize) -> Builder {
        self.overrides.segment_bytes = Some(bytes.max(1));
        self
    }

    /// Segments a rank may have in flight to one peer.
    pub fn window(mut self, segments: usize) -> Builder {
        self.window = segments.max(1);
        self
    }

    /// Creates the communicators.
    pub fn build(self) -> Result<Vec<Communicator>> {
        if self.n == 0 {
            return Err(Error::Config("a group needs at least 1 rank".into()));
        }
        let bytes = backend::footprint(self.n, self.window);
        if bytes.is_none_or(|b| b > backend::MAX_GROUP_BYTES) {
            return Err(Error::Config(format!(
                "an in-process group of {} ranks needs a channel per pair of ranks, {} in \
                 all, more than the {} MiB it may take: use fewer ranks, or one process \
                 per rank (the tcp, shm or verbs transport)",
                self.n,
                bytes.map_or_else(
                    || "more bytes than exist".into(),
                    |b| format!("{} MiB", b >> 20)
                ),
                backend::MAX_GROUP_BYTES >> 20,
            )));
        }
        let config = self.overrides.resolve()?;
        backend::group(self.n, self.window)
            .into_iter()
            .map(|t| Communicator::new(Box::new(t), config.clone()))
            .collect()
    }
}
