//! rcoll: collective communication.
#![forbid(unsafe_code)]

pub mod algorithm;
pub mod communicator;
pub mod config;
pub mod element;
pub mod engine;
pub mod error;
pub mod local;
pub mod op;
pub mod schedule;
pub mod select;

pub use algorithm::Algorithm;
pub use communicator::{Communicator, WithAlgorithm};
pub use config::Config;
pub use element::{DataType, Element};
pub use error::{Error, Result};
pub use op::ReduceOp;
pub use rcoll_transport::Rank;
pub use schedule::{Collective, Layout};
