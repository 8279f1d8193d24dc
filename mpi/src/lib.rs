//! # librcoll_mpi: MPI programs' collectives on rcoll, unchanged
//!
//! A library that defines `MPI_Allreduce`, `MPI_Bcast`, ... and calls the MPI library's
//! own `PMPI_*` for whatever it does not serve (the MPI profiling interface, as mpiP
//! does). Preloaded, it is the whole integration:
//!
//! ```text
//! cargo build --release -p rcoll-mpi          # needs mpicc (or RCOLL_MPICC=mpicc.mpich)
//! mpirun -np 4 -x LD_PRELOAD=$PWD/target/release/librcoll_mpi.so ./app      # Open MPI
//! mpiexec -np 4 -genv LD_PRELOAD $PWD/target/release/librcoll_mpi.so ./app  # MPICH
//! ```
//!
//! or link it before the MPI library (`mpicc app.c -lrcoll_mpi`).
//!
//! ## What is served
//! On intracommunicators: `MPI_Allreduce`, `MPI_Reduce`, `MPI_Reduce_scatter_block`,
//! `MPI_Reduce_scatter` (all counts equal) on the predefined integer and floating types
//! rcoll has (`MPI_INT8_T`…`MPI_UINT64_T`, `MPI_INT`, `MPI_UNSIGNED`, `MPI_LONG`,
//! `MPI_LONG_LONG`, `MPI_FLOAT`, `MPI_DOUBLE`, ...; `MPI_BYTE` for the bitwise ops) with
//! `MPI_SUM`, `MPI_PROD`, `MPI_MIN`, `MPI_MAX`, `MPI_BAND`, `MPI_BOR`, `MPI_BXOR`, and on
//! the integers `MPI_LAND`, `MPI_LOR`, `MPI_LXOR`; `MPI_Bcast`, `MPI_Allgather`,
//! `MPI_Alltoall`, `MPI_Gather`, `MPI_Scatter` on any datatype (moved as bytes; a
//! non-contiguous one packed with `MPI_Pack` and unpacked after, since another rank may
//! pass a contiguous one for the same bytes); `MPI_Barrier`; `MPI_IN_PLACE` wherever MPI
//! allows it. `MPI_Iallreduce`, `MPI_Ibcast`, `MPI_Iallgather`,
//! `MPI_Ireduce_scatter_block` and `MPI_Ibarrier` are generalized requests
//! (`MPI_Grequest_start`) run on the communicator's rcoll progress thread, so that
//! `MPI_Wait`, `MPI_Test`, `MPI_Waitall`, ... work unchanged: at `MPI_THREAD_MULTIPLE` the
//! progress thread completes them (`MPI_Grequest_complete`); below it, where no other
//! thread may call MPI, the shim's completion calls do (`pending.rs`).
//!
//! Everything else goes to MPI unchanged (v-variants, scans, derived datatypes in
//! reductions, `MPI_MAXLOC`/`MINLOC`, logical ops on floats, user ops,
//! intercommunicators). The rules, and why a rank may look only at arguments every rank
//! agrees on, are in `decide.rs`; the one rule that needs the communicator (small calls
//! inside one host, from facts its members agreed on when it formed) is in `comms.rs`.
//!
//! ## Communicators
//! `MPI_COMM_WORLD`'s rcoll communicator is formed in `MPI_Init`/`MPI_Init_thread`; any
//! other's at its first served collective, kept as an MPI attribute that `MPI_Comm_free`
//! and `MPI_Finalize` drop. If forming one fails, each failing rank prints one line why,
//! and that communicator's calls go to MPI on every rank.
//!
//! ## Control
//! - `RCOLL_MPI=0`: every call goes to MPI.
//! - `RCOLL_MPI_COLLS=allreduce,bcast,...`: only these are served.
//! - `RCOLL_MPI_SHM_MIN=2048` (the default under Open MPI, 0 under another MPI): on a
//!   communicator inside one host (rcoll's shared memory to every member), blocking calls
//!   of fewer bytes and `MPI_Barrier` go to MPI, whose own shared memory answers them
//!   sooner; `0` serves every size.
//! - `RCOLL_MPI_STATS=1`: at `MPI_Finalize`, world rank 0 prints one line per MPI
//!   collective it called: `rcoll-mpi: MPI_Allreduce: 1234 served, 5 forwarded (3
//!   MPI_MAXLOC, 2 derived datatype)`.
//! - rcoll's own variables: `RCOLL_TRANSPORT` (default `auto`: shared memory inside a
//!   host), `RCOLL_SOCKET_IFNAME`, `RCOLL_TIMEOUT`, ...
//!
//! ## Errors
//! An rcoll failure (a dead peer, a timeout) goes to the communicator's error handler:
//! with `MPI_ERRORS_ARE_FATAL` (the default) the message, naming the rank, is printed and
//! the job aborted; with `MPI_ERRORS_RETURN` the call returns an error code of rcoll's own
//! class whose `MPI_Error_string` is rcoll's message. The communicator's later calls
//! return that error too.
//!
//! ## Safety
//! Unsafe code is this crate's boundary with C (`ffi.rs`, `entry.rs`, `run.rs`), each
//! block saying what it relies on; decisions and bookkeeping are safe Rust.

mod comms;
mod completion;
mod control;
mod decide;
mod entry;
mod ffi;
mod memory;
mod pending;
mod run;
mod stage;
mod stats;
