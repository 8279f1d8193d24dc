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
    /// A verbs call failed (device, memory registration, queue pair setup, posting work).
    #[error("{rank}: {verb} failed{}: {message}", peer.map(|p| format!(" for {p}")).unwrap_or_default())]
    Verbs {
        /// The rank that made the call.
        rank: Rank,
        /// The peer the call was for, if any.
        peer: Option<Rank>,
        /// The verb, e.g. `ibv_reg_mr`.
        verb: &'static str,
        /// The errno it returned (0 when the failure is not an errno).
        errno: i32,
        /// The errno's text and what was asked.
        message: String,
    },
    /// A work completion came back with an error status: the queue pair to `peer` is in
    /// the error state (peer gone, retries exhausted, bad remote key, ...).
    #[error(
        "{rank}: {op} to/from {peer} completed with status {status} (vendor error {vendor_err:#x})"
    )]
    Completion {
        /// The rank that polled the completion.
        rank: Rank,
        /// The peer of the queue pair.
        peer: Rank,
        /// The work request, e.g. `RDMA WRITE WITH IMM`.
        op: &'static str,
        /// The status string (`ibv_wc_status_str`), e.g. "transport retry counter exceeded".
        status: String,
        /// The device's vendor error code.
        vendor_err: u32,
    },
    /// No usable RDMA device, port or GID (or one forced by the environment is unusable).
    #[error("{rank}: no usable RDMA device: {reason}")]
    NoDevice {
        /// The rank that looked.
        rank: Rank,
        /// What was found and why it does not do.
        reason: String,
    },
    /// A message longer than the backend's largest message (the verbs slot size).
    #[error("{rank}: a {len}-byte message to {peer} exceeds the largest message of {max} bytes")]
    MessageTooLarge {
        /// The sending rank.
        rank: Rank,
        /// The destination.
        peer: Rank,
        /// The message length.
        len: usize,
        /// The backend's limit.
        max: usize,
    },
    /// Memory could not be had (the size overflows the address space, or the allocator or
    /// the device refused it). The transport stays usable.
    #[error("{rank}: cannot allocate {bytes} bytes for {what}: {reason}")]
    OutOfMemory {
        /// The calling rank.
        rank: Rank,
        /// The size asked for.
        bytes: usize,
        /// What the memory was for.
        what: &'static str,
        /// Why not.
        reason: String,
    },
    /// A peer broke the wire protocol (a malformed or oversized frame, more than its
    /// grant): the connection to it is closed, and the group is unusable.
    #[error("{rank}: protocol error from {peer}: {reason}")]
    Protocol {
        /// The rank that noticed.
        rank: Rank,
        /// The peer that sent it.
        peer: Rank,
        /// What was wrong.
        reason: String,
    },
    /// The caller broke a call's contract (such as asking for a message with other
    /// memory than the destination it began to land in).
    #[error("{rank}: receive of {tag} from {peer}: {reason}")]
    Misuse {
        /// The calling rank.
        rank: Rank,
        /// The peer the message comes from.
        peer: Rank,
        /// The message.
        tag: Tag,
        /// What the caller did.
        reason: String,
    },
    /// The backend cannot do what was asked (such as continuing after a failure).
    #[error("{rank}: the {transport} transport does not support {what}")]
    Unsupported {
        /// The calling rank.
        rank: Rank,
        /// What was asked.
        what: &'static str,
        /// The backend's name.
        transport: &'static str,
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
        !matches!(
            self,
            TransportError::InvalidPeer { .. } | TransportError::OutOfMemory { .. }
        )
    }
}
