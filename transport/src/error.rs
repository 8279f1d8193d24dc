//! The transport error type.

use std::time::Duration;

use crate::types::{Rank, Tag};

/// What went wrong in a transport, naming the rank that saw it and the peer involved.
///
/// Every variant except [`TransportError::InvalidPeer`] leaves the transport unusable:
/// the communicator built on it must be rebuilt (the same contract as gloo's I/O errors).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportError {
    /// Waited longer than the deadline for a message or for room to send one.
    #[error("{rank}: timed out after {waited:?} waiting for {peer} ({what})")]
    Timeout {
        /// The rank that waited.
        rank: Rank,
        /// The peer it waited for.
        peer: Rank,
        /// What it waited for.
        what: String,
        /// How long it waited.
        waited: Duration,
    },
    /// The peer closed its end (its communicator was dropped or its thread/process ended).
    #[error("{rank}: {peer} closed its end of the connection")]
    PeerClosed {
        /// The rank that noticed.
        rank: Rank,
        /// The peer that went away.
        peer: Rank,
    },
    /// Some rank aborted the group; every rank's pending and future operations fail.
    #[error("{rank}: aborted by {by}: {reason}")]
    Aborted {
        /// The rank that noticed.
        rank: Rank,
        /// The rank that called abort.
        by: Rank,
        /// Why it aborted.
        reason: String,
    },
    /// A message arrived with a different length than the receive posted for its tag:
    /// the ranks disagree about the collective (count, type or algorithm).
    #[error("{rank}: message from {peer} for {tag} has {got} bytes, expected {expected}")]
    LengthMismatch {
        /// The receiving rank.
        rank: Rank,
        /// The sender.
        peer: Rank,
        /// The message's tag.
        tag: Tag,
        /// Bytes the receiver expected.
        expected: usize,
        /// Bytes that arrived.
        got: usize,
    },
    /// A message matched a receive but comes from another call or schedule (its
    /// fingerprint differs): the ranks disagree about the collective or how to run it.
    #[error("{rank}: message from {peer} for {tag} has fingerprint {got:#010x}, this rank expects {expected:#010x}")]
    ScheduleMismatch {
        /// The receiving rank.
        rank: Rank,
        /// The sender.
        peer: Rank,
        /// The message's tag (as the receiver expected it).
        tag: Tag,
        /// The receiver's fingerprint.
        expected: u32,
        /// The sender's fingerprint.
        got: u32,
    },
    /// Two messages arrived with the same tag from the same peer: a protocol violation
    /// (the second would silently replace the first).
    #[error("{rank}: {peer} sent two messages with {tag}")]
    DuplicateTag {
        /// The receiving rank.
        rank: Rank,
        /// The sender.
        peer: Rank,
        /// The repeated tag.
        tag: Tag,
    },
    /// Setting up the group failed: the rendezvous or a peer connection.
    #[error("{rank}: bootstrap failed: {reason}")]
    Bootstrap {
        /// The rank that failed.
        rank: Rank,
        /// What went wrong.
        reason: String,
    },
    /// A peer index outside the communicator.
    #[error("{rank}: {peer} is not a member of this {nranks}-rank group")]
    InvalidPeer {
        /// The calling rank.
        rank: Rank,
        /// The bad peer.
        peer: Rank,
        /// The group size.
        nranks: usize,
    },
}

impl TransportError {
    /// Whether the transport is still usable after this error.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, TransportError::InvalidPeer { .. })
    }
}
