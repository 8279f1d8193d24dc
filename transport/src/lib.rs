//! Transports for rcoll: the [`Transport`] trait that the collectives engine drives, its
//! backends, and what a process group needs to form (the bootstrap, the launchers' variables,
//! the host map, the topology). Most programs use it through `rcoll`, which re-exports it as
//! `rcoll::transport`.
//!
//! | backend | module | status |
//! |---|---|---|
//! | in-process (ranks are threads) | [`local`] | available |
//! | TCP on mio | [`tcp`] | available (bootstrap by rendezvous at rank 0) |
//! | RDMA verbs (RC, WRITE with immediate) | [`verbs`] | available where libibverbs, a provider and an ACTIVE port exist (loaded at run time: nothing of rdma-core is needed to build) |
//! | shared memory between the processes of one host, over TCP or verbs for the rest | [`shm`] | available on Linux (`/dev/shm`) |
//!
//! Around them: [`launcher`] reads rank, size and root from mpirun, srun, torchrun or
//! `RCOLL_*`; [`tcp::bootstrap`] forms the group and proves the job's secret on every
//! connection; [`hosts`] maps ranks to hosts and racks and orders rings; [`topology`] reads
//! the machine (sysfs, hwloc or an hwloc XML file) and places each local rank on a NUMA
//! node, its cores and an RDMA device.
//!
//! # Quick start: two ranks, one message
//!
//! ```
//! use std::time::{Duration, Instant};
//! use rcoll_transport::{local, Group, Rank, Tag, Transport};
//!
//! let mut ranks = local::group(2, local::DEFAULT_WINDOW);
//! let tag = Tag { collective: 0, channel: 0, transfer: 0, segment: 0, schedule: 0 };
//!
//! let mut message = ranks[0].alloc(5);
//! message.as_bytes_mut().copy_from_slice(b"hello");
//! assert!(ranks[0].try_send(Rank(1), tag, message)?.is_none());
//!
//! let deadline = Instant::now() + Duration::from_secs(5);
//! let received = loop {
//!     if let Some(p) = ranks[1].try_recv(Rank(0), tag, 5)? {
//!         break p;
//!     }
//!     ranks[1].wait(deadline)?;
//! };
//! assert_eq!(received.as_bytes(), b"hello");
//! ranks[1].recycle(received);
//! # Ok::<(), rcoll_transport::TransportError>(())
//! ```
//!
//! Sends and receives never block: `try_send` hands the payload over (or back, when the
//! peer's window is full), `try_recv` returns a message if one is there, and `wait` sleeps
//! until something may have changed or the deadline passes. Payloads belong to the
//! transport and are lent to the caller in place; `recycle` gives them back.
//!
//! # Rings that follow the hosts
//!
//! Launchers that deal ranks out cyclically (rank r on host r % H) would make a ring in
//! rank order cross hosts at every hop; the host map orders rings host by host instead:
//!
//! ```
//! use rcoll_transport::{hosts::HostMap, Rank};
//!
//! let hosts = HostMap::cyclic(4, 2); // ranks 0 and 2 on one host, 1 and 3 on the other
//! assert_eq!(hosts.ring_order(), &[Rank(0), Rank(2), Rank(1), Rank(3)]);
//! assert_eq!(hosts.ring_crossings().0, 2); // a trip around crosses hosts twice, not 4 times
//! ```
//!
//! # Thread safety
//!
//! An endpoint is `Send`: it may move between threads but is used by one at a time.
//!
//! # Resource cleanup
//!
//! Dropping an endpoint closes it: peers waiting for it get
//! [`TransportError::PeerClosed`] instead of hanging.

// `unsafe` is allowed in the verbs module (libibverbs, loaded at run time), in the
// shared-memory segment module (`shm::segment`: the mappings) and in `topology::bind` (one
// `set_mempolicy` system call) alone, each block with a SAFETY comment; everything else,
// and the public API, is safe.
#![deny(unsafe_code)]

pub(crate) mod env;
pub mod error;
pub mod hosts;
pub mod interface;
pub mod launcher;
pub mod local;
pub mod shm;
pub mod subgroup;
pub mod tcp;
pub mod topology;
pub mod transport;
pub mod types;
#[allow(unsafe_code)]
pub mod verbs;

pub use error::TransportError;
pub use transport::{
    is_stale, Endpoint, Group, Lend, Link, Offered, Payload, Registered, Registration, SendState,
    Statistics, Transport, WHOLE_MAX,
};
pub use types::{deadline_after, Rank, Tag, TagKey, MAX_RANKS};
