//! rcoll: collective communication.
#![forbid(unsafe_code)]

pub mod algorithm;
pub mod element;
pub mod op;
pub mod schedule;

pub use algorithm::Algorithm;
pub use element::{DataType, Element};
pub use op::ReduceOp;
pub use rcoll_transport::Rank;
pub use schedule::{Collective, Layout};
