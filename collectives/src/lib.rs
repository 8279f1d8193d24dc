//! # rcoll: collective communication for CPU memory
//!
//! rcoll does for CPU buffers over InfiniBand/RoCE verbs (with a TCP fallback) what NCCL
//! and Gloo do for GPU and CPU clusters: AllReduce, Broadcast, ReduceScatter and the rest,
//! at the speed of the wire.
//!
//! ## Quick start
//!
//! Four ranks as threads of one process (the in-process transport), each summing its
//! vector with everyone else's:
//!
//! ```
//! use rcoll::{local, ReduceOp};
//!
//! let comms = local::group(4)?;
//! let results: Vec<rcoll::Result<Vec<f32>>> = std::thread::scope(|s| {
//!     let ranks: Vec<_> = comms
//!         .into_iter()
//!         .map(|mut comm| {
//!             s.spawn(move || {
//!                 let mut grads = vec![comm.rank() as f32; 1024];
//!                 comm.all_reduce_in_place(&mut grads, ReduceOp::Avg)?;
//!                 Ok(grads)
//!             })
//!         })
//!         .collect();
//!     ranks.into_iter().map(|r| r.join().expect("rank thread")).collect()
//! });
//! for grads in results {
//!     assert!(grads?.iter().all(|&g| g == 1.5)); // (0 + 1 + 2 + 3) / 4 on every rank
//! }
//! # Ok::<(), rcoll::Error>(())
//! ```
//!
//! ## Glossary
//!
//! The same words are used in types, logs and docs (after NCCL's primitives and gloo's
//! ring comments):
//!
//! - **rank**: one participant, `0..nranks` ([`Rank`]); **peer**: another rank.
//! - **collective**: one call every rank makes together ([`Collective`]).
//! - **algorithm**: how a collective is carried out ([`Algorithm`]), a pure function from
//!   the call's [`Layout`] and a rank to that rank's [`schedule::Schedule`].
//! - **channel**: an independent lane of a schedule with its own steps (the two trees of
//!   `double_binary_tree` are two channels).
//! - **step**: one round of a channel. A schedule means "run the steps in order"; the
//!   engine only keeps the order between primitives that touch the same elements, so
//!   steps pipeline segment by segment.
//! - **primitive**: one instruction (`Send`, `RecvReduceSend`, ...; see [`schedule`]).
//! - **chunk**: the part of the vector a primitive moves (for the ring, one per rank).
//! - **segment**: the unit of pipelining: the engine cuts every chunk into segments of
//!   [`Config::segment_bytes`] and keeps several in flight, so that receiving segment k+1,
//!   reducing segment k and sending segment k-1 overlap.
//! - **transfer**: the sequence of segments one primitive sends to one peer.
//!
//! ## The three layers
//!
//! 1. **Definitions**: [`Communicator`]'s methods state each collective's contract — the
//!    buffer lengths, the in-place form, the root — and [`schedule::verify`] checks
//!    schedules against the same definitions symbolically.
//! 2. **Overlay**: [`algorithm`] holds the schedule generators (mesh, single root, tree,
//!    binomial tree, naive ring, ring, double binary tree, halving-doubling);
//!    [`schedule::cost`] prices schedules under the alpha-beta-gamma model and [`select`]
//!    picks the cheapest; [`engine`] executes any schedule on any transport.
//! 3. **Underlay**: [`rcoll_transport`] — the [`rcoll_transport::Transport`] trait and its
//!    backends: in-process ([`local`]) and TCP between processes ([`process`]); verbs next.
//!
//! ## Choosing an algorithm
//!
//! By default every call is priced under the cost model and the cheapest algorithm runs
//! (the same choice on every rank). Force one with `RCOLL_ALGO=<name>`, with
//! [`local::Builder::algorithm`], or per call with [`Communicator::with_algorithm`].
//!
//! ## Errors and failure
//!
//! Every failure is an [`Error`] naming the rank, and where relevant the peer, collective,
//! sequence number, algorithm and step. Bad arguments abort the group so that the other
//! ranks fail at once; a dead or silent peer becomes an error on every rank within
//! [`Config::timeout`]. Library code does not panic. After an error the communicator is
//! unusable ([`Error::Poisoned`]): build a new one.
//!
//! ## Thread safety
//!
//! A [`Communicator`] is `Send`: move it to the thread that drives the rank. Calls take
//! `&mut self`, so one collective runs at a time per communicator.
//!
//! ## Resource cleanup
//!
//! Dropping a communicator closes its endpoint; peers still waiting on it get an error
//! instead of hanging.

#![forbid(unsafe_code)]

pub mod abort;
pub mod algorithm;
pub mod autotune;
pub mod background;
pub mod buffer;
pub mod communicator;
pub mod config;
pub mod element;
pub mod engine;
pub mod error;
pub mod fingerprint;
pub mod local;
mod logging;
pub mod op;
pub mod process;
pub mod schedule;
pub mod select;
pub mod simulate;
mod split;
pub mod tuning;

pub use abort::AbortHandle;
pub use algorithm::Algorithm;
pub use background::{Background, Request};
pub use buffer::Buffer;
pub use communicator::{Communicator, WithAlgorithm};
pub use config::{Config, RingOrder};
pub use element::{DataType, Element};
pub use error::{Error, Result};
pub use op::ReduceOp;
/// The transport layer underneath (`rcoll-transport`), e.g. for its RDMA device probe.
pub use rcoll_transport as transport;
pub use rcoll_transport::Rank;
pub use schedule::{Collective, Layout};
