//! The chunk engine: runs any schedule against any [`rcoll_transport::Transport`].
//!
//! [`core`] is the non-blocking state machine (it never waits and never reads the clock),
//! [`driver`] the thin loop that pumps it, sleeps, and enforces the timeout, and [`memory`]
//! the view of a rank's buffers that both work on. [`small`] runs plans of one small
//! segment per primitive with less bookkeeping than [`core`].

pub mod core;
pub mod driver;
pub mod memory;
pub mod small;
