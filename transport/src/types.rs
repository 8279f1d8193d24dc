//! Newtypes for the words every layer shares: [`Rank`] and [`Tag`]; the limits and the
//! deadline arithmetic every layer applies.

use std::fmt;
use std::time::{Duration, Instant};

/// The most ranks a group may have: more than any launcher starts, and what the wire formats
/// carry (the verbs work-request ids hold a peer in 24 bits).
pub const MAX_RANKS: usize = 1 << 20;

/// `timeout` from now; a timeout too large for the clock (`Duration::MAX`, 1e19 s) means
/// no deadline, taken as a century from now.
pub fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(now)
}

/// The index of a participant in a communicator, `0..nranks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Rank(pub u32);

impl Rank {
    /// The rank as an index into per-rank tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl From<usize> for Rank {
    fn from(i: usize) -> Self {
        // Groups are limited to MAX_RANKS ranks when they are built (bootstrap, local
        // groups), so the truncation cannot happen for a valid rank.
        Rank(i as u32)
    }
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {}", self.0)
    }
}

/// Names one message on the channel between two ranks.
///
/// A message is one *segment* of one *transfer* on one *channel* of one *collective*:
/// - `collective`: the sequence number of the collective call on this communicator
///   (every rank numbers its calls the same way);
/// - `channel`: the schedule channel (an independent lane of the collective);
/// - `transfer`: the index of the transfer among all transfers from the sender to the
///   receiver on that channel, in schedule order;
/// - `segment`: the index of the segment inside the transfer;
/// - `schedule`: a fingerprint of the sender's call (collective, element type, operation,
///   count, root) and of how it cut it (algorithm, segment size). It is not part of the
///   match: a message that matches on the other four fields but carries another fingerprint
///   means the ranks disagree, which the receiver reports
///   ([`TransportError::ScheduleMismatch`](crate::TransportError)) instead of combining
///   incompatible data.
///
/// Receivers match messages by `(peer, tag.key())`, so segments may arrive in any order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Tag {
    /// Sequence number of the collective call.
    pub collective: u32,
    /// Schedule channel.
    pub channel: u16,
    /// Index of the transfer between this sender and receiver on that channel.
    pub transfer: u32,
    /// Index of the segment within the transfer.
    pub segment: u32,
    /// Fingerprint of the sender's call and schedule (not matched; checked).
    pub schedule: u32,
}

/// The part of a [`Tag`] that messages are matched on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TagKey {
    collective: u32,
    channel: u16,
    transfer: u32,
    segment: u32,
}

impl Tag {
    /// The fields a receiver matches on (all but the fingerprint).
    pub fn key(&self) -> TagKey {
        TagKey {
            collective: self.collective,
            channel: self.channel,
            transfer: self.transfer,
            segment: self.segment,
        }
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "collective #{} channel {} transfer {} segment {}",
            self.collective, self.channel, self.transfer, self.segment
        )
    }
}
