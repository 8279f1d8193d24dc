//! The error type of `rcoll`.

use std::time::Duration;

use rcoll_transport::{Rank, TransportError};

use crate::algorithm::Algorithm;
use crate::element::DataType;
use crate::op::ReduceOp;
use crate::schedule::Collective;

/// Everything that can go wrong in a collective, naming the rank that saw it.
///
/// Argument errors ([`Error::BufferLength`], [`Error::RootOutOfRange`],
/// [`Error::PeerOutOfRange`], [`Error::UnsupportedOp`], [`Error::UnsupportedAlgorithm`],
/// [`Error::CountOverflow`]) are detected before any data moves; the communicator then
/// aborts the group so that the other ranks, which cannot know, fail at once instead of
/// waiting for a rank that will not come. Every error except [`Error::Config`] leaves the
/// communicator unusable: later calls return [`Error::Poisoned`]. Rebuild it to continue.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// A buffer has the wrong number of elements.
    #[error("rank {rank}: {collective}: {buffer} buffer has {got} elements, expected {expected}")]
    BufferLength {
        /// The calling rank.
        rank: u32,
        /// The collective.
        collective: Collective,
        /// Which buffer (`"send"`, `"recv"`, `"in-place"`).
        buffer: &'static str,
        /// Required length.
        expected: usize,
        /// Given length.
        got: usize,
    },
    /// The root is not a rank of the communicator.
    #[error("rank {rank}: {collective}: root {root} is out of range for {nranks} ranks")]
    RootOutOfRange {
        /// The calling rank.
        rank: u32,
        /// The collective.
        collective: Collective,
        /// The bad root.
        root: usize,
        /// Communicator size.
        nranks: usize,
    },
    /// A point-to-point peer is not another rank of the communicator.
    #[error(
        "rank {rank}: {what}: peer {peer} is not another rank of this {nranks}-rank communicator"
    )]
    PeerOutOfRange {
        /// The calling rank.
        rank: u32,
        /// `"send"` or `"recv"`.
        what: &'static str,
        /// The bad peer.
        peer: usize,
        /// Communicator size.
        nranks: usize,
    },
    /// The reduction is not defined on the element type.
    #[error("rank {rank}: {collective}: {op} is not defined on {dtype}")]
    UnsupportedOp {
        /// The calling rank.
        rank: u32,
        /// The collective.
        collective: Collective,
        /// The reduction.
        op: ReduceOp,
        /// The element type.
        dtype: DataType,
    },
    /// The algorithm forced for this call does not implement the collective.
    #[error("rank {rank}: algorithm {algorithm} does not implement {collective}")]
    UnsupportedAlgorithm {
        /// The calling rank.
        rank: u32,
        /// The algorithm.
        algorithm: Algorithm,
        /// The collective.
        collective: Collective,
    },
    /// `count * nranks` does not fit in memory.
    #[error("rank {rank}: {collective}: count {count} times {nranks} ranks overflows")]
    CountOverflow {
        /// The calling rank.
        rank: u32,
        /// The collective.
        collective: Collective,
        /// The per-rank count.
        count: usize,
        /// Communicator size.
        nranks: usize,
    },
    /// The transport failed during the collective.
    #[error("rank {rank}: {collective} #{seq} ({algorithm}, channel {channel} step {step}, {primitive}): {source}")]
    Transport {
        /// The calling rank.
        rank: u32,
        /// The collective.
        collective: Collective,
        /// Its sequence number on this communicator.
        seq: u32,
        /// The algorithm running it.
        algorithm: String,
        /// Channel of the failing primitive.
        channel: usize,
        /// Step of the failing primitive.
        step: usize,
        /// The failing primitive.
        primitive: String,
        /// What the transport said.
        #[source]
        source: TransportError,
    },
    /// Another rank called a different collective, or the same one with other arguments
    /// (count, element type, operation, root) or another algorithm or segment size.
    #[error("rank {rank}: {collective} #{seq}: rank {peer} disagrees: {what}")]
    Mismatch {
        /// The calling rank.
        rank: u32,
        /// The rank whose message disagreed.
        peer: u32,
        /// This rank's collective.
        collective: Collective,
        /// Its sequence number on this communicator.
        seq: u32,
        /// What differs.
        what: String,
    },
    /// Nothing moved for the timeout.
    #[error(
        "rank {rank}: {collective} #{seq} ({algorithm}): no progress for {waited:?}; waiting for {waiting_for}{}{}",
        silent(unresponsive),
        state(transport)
    )]
    Timeout {
        /// The calling rank.
        rank: u32,
        /// The collective.
        collective: Collective,
        /// Its sequence number on this communicator.
        seq: u32,
        /// The algorithm running it.
        algorithm: String,
        /// The peer waited for, if known.
        peer: Option<u32>,
        /// What it waited for, in words.
        waiting_for: String,
        /// The timeout.
        waited: Duration,
        /// The ranks that did not answer a liveness probe when it expired (stopped or hung:
        /// the likely cause, when the peer waited for is itself waiting).
        unresponsive: Vec<u32>,
        /// The transport's state toward the peer waited for (credits, queues), when it has
        /// one to tell ([`rcoll_transport::Group::stall_report`]).
        transport: String,
    },
    /// An earlier error made this communicator unusable.
    #[error("rank {rank}: communicator unusable after an earlier error: {first}")]
    Poisoned {
        /// The calling rank.
        rank: u32,
        /// The first error, displayed.
        first: String,
    },
    /// The group could not be set up (rendezvous, peer connections).
    #[error("{source}")]
    Bootstrap {
        /// What the transport said.
        #[source]
        source: TransportError,
    },
    /// Allocating or registering memory with the transport failed.
    #[error("cannot allocate or register {bytes} bytes of memory with the transport: {source}")]
    Registration {
        /// Bytes asked for.
        bytes: usize,
        /// What the transport said.
        #[source]
        source: TransportError,
    },
    /// Bad configuration (environment variable or builder value).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The survivors of a failure left this rank out of the group they carry on in
    /// ([`Communicator::shrink`](crate::Communicator::shrink)): it was excluded by the
    /// callers, or found failed (stopped past the timeout, say) while they agreed.
    #[error("rank {rank}: shrink: the survivors left this rank out of the new group (rank {peer} said so)")]
    Excluded {
        /// This rank (in the communicator being shrunk).
        rank: u32,
        /// The rank whose decision said so (this rank, if it excluded itself).
        peer: u32,
    },
    /// The survivors could not agree on who failed ([`Communicator::shrink`](crate::Communicator::shrink)).
    #[error("rank {rank}: shrink: {reason}{}", waiting(waiting_for))]
    Agreement {
        /// This rank (in the communicator being shrunk).
        rank: u32,
        /// The ranks it still waited for when it gave up.
        waiting_for: Vec<u32>,
        /// What went wrong.
        reason: String,
    },
    /// An internal invariant failed; please report it.
    #[error("rank {rank}: internal error: {what}")]
    Internal {
        /// The calling rank.
        rank: u32,
        /// What failed.
        what: String,
    },
}

impl Error {
    /// The peer involved, when the error names one.
    pub fn peer(&self) -> Option<Rank> {
        match self {
            Error::Timeout { peer, .. } => peer.map(Rank),
            Error::Transport { source, .. } => match source {
                TransportError::Timeout { peer, .. }
                | TransportError::PeerClosed { peer, .. }
                | TransportError::LengthMismatch { peer, .. }
                | TransportError::InvalidPeer { peer, .. }
                | TransportError::Completion { peer, .. }
                | TransportError::MessageTooLarge { peer, .. }
                | TransportError::ScheduleMismatch { peer, .. }
                | TransportError::DuplicateTag { peer, .. }
                | TransportError::Protocol { peer, .. }
                | TransportError::Misuse { peer, .. } => Some(*peer),
                TransportError::Verbs { peer, .. } => *peer,
                TransportError::Aborted { by, .. } => Some(*by),
                _ => None,
            },
            Error::Excluded { peer, .. } => Some(Rank(*peer)),
            Error::Agreement { waiting_for, .. } => waiting_for.first().map(|&r| Rank(r)),
            _ => None,
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn waiting(ranks: &[u32]) -> String {
    if ranks.is_empty() {
        return String::new();
    }
    let list: Vec<String> = ranks.iter().map(|r| format!("rank {r}")).collect();
    format!(" (waiting for {})", list.join(", "))
}

/// The end of a timeout's text naming the ranks that did not answer a liveness probe.
fn state(transport: &str) -> String {
    if transport.is_empty() {
        String::new()
    } else {
        format!(" [transport: {transport}]")
    }
}

fn silent(ranks: &[u32]) -> String {
    match ranks {
        [] => String::new(),
        [r] => format!("; rank {r} does not respond (stopped or hung)"),
        many => {
            let list: Vec<String> = many.iter().map(|r| format!("rank {r}")).collect();
            format!("; {} do not respond (stopped or hung)", list.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transport failure that names a peer names it through [`Error::peer`] too.
    #[test]
    fn transport_failures_name_their_peer() {
        let tag = rcoll_transport::Tag::default();
        let wrap = |source| Error::Transport {
            rank: 0,
            collective: Collective::AllReduce,
            seq: 1,
            algorithm: "ring".into(),
            channel: 0,
            step: 0,
            primitive: String::new(),
            source,
        };
        let (rank, peer) = (Rank(0), Rank(2));
        for source in [
            TransportError::Protocol {
                rank,
                peer,
                reason: "garbage".into(),
            },
            TransportError::Misuse {
                rank,
                peer,
                tag,
                reason: "other memory".into(),
            },
            TransportError::DuplicateTag { rank, peer, tag },
            TransportError::PeerClosed { rank, peer },
        ] {
            assert_eq!(wrap(source.clone()).peer(), Some(peer), "{source}");
        }
    }
}
