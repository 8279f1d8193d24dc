//! # rcoll: collective communication for CPU memory
//!
//! rcoll does for CPU buffers what NCCL and Gloo do for GPU and CPU clusters: AllReduce,
//! Broadcast, ReduceScatter, AllGather, Reduce, Gather, Scatter, AllToAll, Barrier and
//! Send/Recv between ranks, over RDMA verbs between hosts, shared memory between the
//! processes of a host, TCP where neither serves, or threads of one process. The book
//! (`docs/` in the repository: `mdbook serve docs`) has the rest: the benchmark, choosing
//! algorithms, topology, every `RCOLL_*` variable, troubleshooting and the design.
//!
//! This page is a tour in six steps, each a program that `cargo test --doc` runs.
//!
//! ## 1. Ranks as threads
//!
//! Four ranks as threads of one process (the in-process transport), each averaging its
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
//! Every collective has an out-of-place form (`send`, `recv`) and an in-place one (`_in_place`,
//! one buffer); [`Communicator`]'s methods state each one's buffer lengths and root.
//!
//! ## 2. Ranks as processes
//!
//! One rank per process, on one host or many: started by `mpirun`, `srun` or `torchrun`, or
//! with `RCOLL_RANK`, `RCOLL_WORLD_SIZE`, `RCOLL_ROOT_ADDR` and the job's secret
//! `RCOLL_UNIQUE_ID` set. Shared memory carries the pairs of a host, verbs (where every
//! rank has a usable RDMA port) or TCP the rest. Memory from [`Communicator::alloc`] is
//! registered once, so verbs sends it without a copy:
//!
//! ```no_run
//! let mut comm = rcoll::process::init()?; // rank, size, root and secret from the launcher
//! let mut grads = comm.alloc::<f32>(1 << 20)?;
//! comm.all_reduce_in_place(&mut grads, rcoll::ReduceOp::Avg)?;
//! println!("rank {} of {} over {}", comm.rank(), comm.size(), comm.transport_details());
//! # Ok::<(), rcoll::Error>(())
//! ```
//!
//! [`process::Builder`] sets the same by hand; [`process::UniqueId`] is NCCL's unique id
//! (a rendezvous on rank 0 and a fresh secret) for programs that hand it out themselves.
//!
//! ## 3. Schedules are data
//!
//! An algorithm is a pure function from the call's [`Layout`] and a rank to that rank's
//! [`schedule::Schedule`]: steps of primitives (`Send`, `RecvReduceSend`, ...) over slices
//! of the buffers. Nothing runs to print, verify or price one:
//!
//! ```
//! use rcoll::schedule::cost::{cost, CostModel};
//! use rcoll::schedule::verify::verify;
//! use rcoll::{Algorithm, Collective, Layout, Rank};
//!
//! let layout = Layout {
//!     collective: Collective::AllReduce,
//!     nranks: 4,
//!     count: 1000,
//!     root: Rank(0),
//!     in_place: false,
//! };
//! let ring = Algorithm::Ring.schedules(&layout)?; // one schedule per rank
//! verify(&layout, &ring)?; // symbolically: every rank ends with the sum of all inputs
//! let priced = cost(&ring, 4, &CostModel::tcp()); // 4-byte elements
//! assert_eq!(priced.steps, 6); // reduce-scatter then all-gather: 2 (p - 1) rounds
//! print!("{}", ring[0]); // rank 0's steps
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `rcoll-bench plan` prints the same for every algorithm; [`select`] picks the cheapest per
//! call (`auto`), and [`engine`] runs any schedule on any transport, segment by segment.
//!
//! ## 4. Choosing the algorithm
//!
//! By default every call is priced under the cost model and the cheapest algorithm runs
//! (the same choice on every rank). Force one with `RCOLL_ALGO=<name>`, for a whole
//! in-process group with [`local::Builder::algorithm`], or for one call:
//!
//! ```
//! use rcoll::{local, Algorithm, ReduceOp};
//!
//! let comms = local::Builder::new(3).build()?;
//! std::thread::scope(|s| {
//!     for mut comm in comms {
//!         s.spawn(move || {
//!             let mut v = vec![1u64; 100];
//!             comm.with_algorithm(Algorithm::Ring)
//!                 .all_reduce_in_place(&mut v, ReduceOp::Sum)
//!                 .expect("all_reduce");
//!             assert!(v.iter().all(|&x| x == 3));
//!         });
//!     }
//! });
//! # Ok::<(), rcoll::Error>(())
//! ```
//!
//! `RCOLL_TUNING_FILE` (from `rcoll-bench calibrate`) and `RCOLL_AUTOTUNE` (trials at run
//! time, [`autotune`]) choose by measurement instead.
//!
//! ## 5. Nonblocking calls
//!
//! [`Background`] drives a communicator from a progress thread: calls return a
//! [`Request`] at once and run in issue order while the caller computes.
//!
//! ```
//! use rcoll::{local, Background, ReduceOp};
//!
//! let comms = local::group(2)?;
//! std::thread::scope(|s| {
//!     for comm in comms {
//!         s.spawn(move || -> rcoll::Result<()> {
//!             let comm = Background::new(comm)?;
//!             let pending = comm.all_reduce(vec![1.0f32; 4096], ReduceOp::Sum);
//!             let busy: f64 = (0..1000).map(|i| f64::from(i).sqrt()).sum(); // overlaps
//!             assert!(busy > 0.0);
//!             assert!(pending.wait()?.iter().all(|&x| x == 2.0));
//!             Ok(())
//!         });
//!     }
//! });
//! # Ok::<(), rcoll::Error>(())
//! ```
//!
//! A process group also splits, as `MPI_Comm_split` does ([`Communicator::split`]).
//!
//! ## 6. Errors are values
//!
//! Every failure is an [`Error`] naming the rank, and where relevant the peer, collective,
//! sequence number, algorithm and step; library code does not panic. Arguments are checked
//! before anything is sent:
//!
//! ```
//! use rcoll::{local, ReduceOp};
//!
//! let mut comms = local::group(1)?;
//! let comm = &mut comms[0];
//! let send = [1.0f32; 8];
//! let mut recv = [0.0f32; 7]; // all_reduce needs recv.len() == send.len()
//! let err = comm.all_reduce(&send, &mut recv, ReduceOp::Sum).unwrap_err();
//! assert!(err.to_string().contains("rank 0"), "{err}");
//! # Ok::<(), rcoll::Error>(())
//! ```
//!
//! Bad arguments abort the group so that the other ranks fail at once; a dead or silent
//! peer becomes an error on every rank within [`Config::timeout`] (`RCOLL_TIMEOUT`); ranks
//! that disagree on a call (count, type, op, root, algorithm) get an error naming the
//! difference ([`fingerprint`]). After an error the communicator is unusable
//! ([`Error::Poisoned`]): the survivors of a process group carry on as a smaller group
//! with [`Communicator::shrink`] (as `MPIX_Comm_shrink`), or build a new one.
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
//!    binomial tree, naive ring, ring, double binary tree, halving-doubling, recursive
//!    doubling, and hierarchical, which embeds them per level); [`schedule::cost`] prices
//!    schedules under the alpha-beta-gamma model and [`select`] picks the cheapest;
//!    [`engine`] executes any schedule on any transport.
//! 3. **Underlay**: [`rcoll_transport`] — the [`rcoll_transport::Transport`] trait and its
//!    backends: in-process ([`local`]), and for process groups ([`process`]) TCP, RDMA
//!    verbs and shared memory between the processes of a host.
//!
//! ## Thread safety
//!
//! A [`Communicator`] is `Send`: move it to the thread that drives the rank. Calls take
//! `&mut self`, so one collective runs at a time per communicator; [`Background`] queues
//! calls from any thread, and [`Communicator::abort_handle`] aborts from any thread.
//!
//! ## Resource cleanup
//!
//! Dropping a communicator closes its endpoint; peers still waiting on it get an error
//! instead of hanging.

#![forbid(unsafe_code)]

pub mod abort;
mod agree;
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
pub mod shrink;
pub mod simulate;
mod split;
pub mod tuning;

pub use abort::AbortHandle;
pub use algorithm::Algorithm;
pub use background::{Background, Request};
pub use buffer::{Buffer, MemoryRegistration, RegisteredSlice};
pub use communicator::{Communicator, Shrunk, WithAlgorithm};
pub use config::{Config, RingOrder};
pub use element::{DataType, Element};
pub use error::{Error, Result};
pub use op::ReduceOp;
/// The transport layer underneath (`rcoll-transport`), e.g. for its RDMA device probe.
pub use rcoll_transport as transport;
pub use rcoll_transport::Rank;
pub use schedule::{Collective, Layout};
