//! [`Subgroup`]: some ranks of a group, renumbered in order, over the group's own
//! endpoint — the connections, shared-memory rings and queue pairs it already has.
//!
//! A shrink (the survivors of a failure carrying on, as ULFM's `MPIX_Comm_shrink` and
//! NCCL's `ncclCommShrink` do) keeps each survivor's endpoint: the peers left out were
//! [excluded](Group::exclude) from it, the survivors began a new
//! [epoch](Group::begin_epoch), and this view gives the survivors ranks `0..k` in the
//! order of their ranks in the group (`members[i]` is the group's rank of member `i`).
//! Every peer, tag and error passes through with its ranks translated; nothing is copied.
//! A subgroup of a subgroup is one view over the first endpoint ([`Subgroup::new`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::TransportError;
use crate::transport::{Endpoint, Group, Lend, Link, Offered, Payload, SendState, Transport};
use crate::types::{Rank, Tag};

/// Members of a group as a group of their own (see the [module](self)).
pub struct Subgroup {
    inner: Box<dyn Transport>,
    /// Member `i`'s rank in `inner`.
    members: Vec<Rank>,
    /// A rank of `inner` -> its member index, if a member.
    index: Vec<Option<Rank>>,
    me: Endpoint,
}

impl Subgroup {
    /// `members` (ranks of `inner`'s group, ascending, this rank among them) as ranks
    /// `0..members.len()`. A subgroup given a subgroup views the endpoint beneath it.
    pub fn new(
        mut inner: Box<dyn Transport>,
        members: &[Rank],
    ) -> Result<Subgroup, TransportError> {
        let mut members = members.to_vec();
        if let Some(sub) = inner
            .as_any_mut()
            .and_then(|a| a.downcast_mut::<Subgroup>())
        {
            members = members.iter().map(|m| sub.members[m.index()]).collect();
            let below = std::mem::replace(&mut sub.inner, Box::new(Detached::default()));
            inner = below;
        }
        let n = inner.endpoint().nranks;
        let me = inner.endpoint().rank;
        let mut index = vec![None; n];
        for (i, m) in members.iter().enumerate() {
            match index.get_mut(m.index()) {
                Some(slot @ None) => *slot = Some(Rank::from(i)),
                _ => {
                    return Err(TransportError::InvalidPeer {
                        rank: me,
                        peer: *m,
                        nranks: n,
                    })
                }
            }
        }
        let rank = index[me.index()].ok_or(TransportError::InvalidPeer {
            rank: me,
            peer: me,
            nranks: members.len(),
        })?;
        let below = inner.endpoint();
        let hosts = below
            .hosts
            .as_ref()
            .filter(|h| h.nranks() == n)
            .map(|h| Arc::new(h.subset(&members)));
        let me = Endpoint {
            details: below.details.clone(),
            hosts,
            ..Endpoint::new(below.name, rank, members.len())
        };
        Ok(Subgroup {
            inner,
            members,
            index,
            me,
        })
    }

    /// Member `i`'s rank in the group beneath (the first group, for a subgroup of one).
    pub fn parent_rank(&self, i: usize) -> Option<usize> {
        self.members.get(i).map(|r| r.index())
    }

    fn below(&self, peer: Rank) -> Result<Rank, TransportError> {
        self.members
            .get(peer.index())
            .copied()
            .ok_or(TransportError::InvalidPeer {
                rank: self.me.rank,
                peer,
                nranks: self.members.len(),
            })
    }

    fn above(&self, r: Rank) -> Option<Rank> {
        self.index.get(r.index()).copied().flatten()
    }

    /// `r` as a member, or as it was if not one (an error about a rank left out).
    fn name(&self, r: Rank) -> Rank {
        self.above(r).unwrap_or(r)
    }

    /// `e` with its ranks as members.
    fn up(&self, e: TransportError) -> TransportError {
        use TransportError as E;
        let n = |r: Rank| self.name(r);
        match e {
            E::Timeout {
                rank,
                peer,
                what,
                waited,
            } => E::Timeout {
                rank: n(rank),
                peer: n(peer),
                what,
                waited,
            },
            E::PeerClosed { rank, peer } => E::PeerClosed {
                rank: n(rank),
                peer: n(peer),
            },
            E::Aborted { rank, by, reason } => E::Aborted {
                rank: n(rank),
                by: n(by),
                reason,
            },
            E::LengthMismatch {
                rank,
                peer,
                tag,
                expected,
                got,
            } => E::LengthMismatch {
                rank: n(rank),
                peer: n(peer),
                tag,
                expected,
                got,
            },
            E::ScheduleMismatch {
                rank,
                peer,
                tag,
                expected,
                got,
            } => E::ScheduleMismatch {
                rank: n(rank),
                peer: n(peer),
                tag,
                expected,
                got,
            },
            E::DuplicateTag { rank, peer, tag } => E::DuplicateTag {
                rank: n(rank),
                peer: n(peer),
                tag,
            },
            E::Completion {
                rank,
                peer,
                op,
                status,
                vendor_err,
            } => E::Completion {
                rank: n(rank),
                peer: n(peer),
                op,
                status,
                vendor_err,
            },
            E::Verbs {
                rank,
                peer,
                verb,
                errno,
                message,
            } => E::Verbs {
                rank: n(rank),
                peer: peer.map(n),
                verb,
                errno,
                message,
            },
            E::MessageTooLarge {
                rank,
                peer,
                len,
                max,
            } => E::MessageTooLarge {
                rank: n(rank),
                peer: n(peer),
                len,
                max,
            },
            E::Protocol { rank, peer, reason } => E::Protocol {
                rank: n(rank),
                peer: n(peer),
                reason,
            },
            E::Misuse {
                rank,
                peer,
                tag,
                reason,
            } => E::Misuse {
                rank: n(rank),
                peer: n(peer),
                tag,
                reason,
            },
            E::InvalidPeer { rank, peer, .. } => E::InvalidPeer {
                rank: n(rank),
                peer: n(peer),
                nranks: self.members.len(),
            },
            other => other,
        }
    }
}

impl Transport for Subgroup {
    fn endpoint(&self) -> &Endpoint {
        &self.me
    }

    fn alloc(&mut self, len: usize) -> Payload {
        self.inner.alloc(len)
    }

    fn try_send(
        &mut self,
        peer: Rank,
        tag: Tag,
        payload: Payload,
    ) -> Result<Option<Payload>, TransportError> {
        let p = self.below(peer)?;
        self.inner.try_send(p, tag, payload).map_err(|e| self.up(e))
    }

    fn try_send_from(
        &mut self,
        peer: Rank,
        tag: Tag,
        data: &[u8],
        lend: Lend,
    ) -> Result<SendState, TransportError> {
        let p = self.below(peer)?;
        self.inner
            .try_send_from(p, tag, data, lend)
            .map_err(|e| self.up(e))
    }

    fn register(
        &mut self,
        memory: &mut [u8],
    ) -> Result<Option<Box<dyn crate::transport::Registration>>, TransportError> {
        self.inner.register(memory).map_err(|e| self.up(e))
    }

    fn send_complete(&mut self, token: u64) -> Result<bool, TransportError> {
        self.inner.send_complete(token).map_err(|e| self.up(e))
    }

    fn reap_borrowed(&mut self) {
        self.inner.reap_borrowed()
    }

    fn try_recv(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Payload>, TransportError> {
        let p = self.below(peer)?;
        self.inner.try_recv(p, tag, len).map_err(|e| self.up(e))
    }

    fn try_recv_into(
        &mut self,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        let p = self.below(peer)?;
        self.inner
            .try_recv_into(p, tag, dst)
            .map_err(|e| self.up(e))
    }

    fn offer(
        &mut self,
        peer: Rank,
        tag: Tag,
        dst: &mut [u8],
        with: Option<Tag>,
    ) -> Result<Offered, TransportError> {
        let p = self.below(peer)?;
        self.inner.offer(p, tag, dst, with).map_err(|e| self.up(e))
    }

    fn link(&self, peer: Rank) -> Link {
        self.below(peer)
            .map_or(Link::default(), |p| self.inner.link(p))
    }

    fn recycle(&mut self, payload: Payload) {
        self.inner.recycle(payload)
    }
}

impl Group for Subgroup {
    fn statistics(&self) -> crate::Statistics {
        self.inner.statistics()
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn relax(&self) {
        self.inner.relax()
    }

    fn unresponsive(&mut self, within: Duration) -> Vec<Rank> {
        let silent = self.inner.unresponsive(within);
        silent.into_iter().filter_map(|r| self.above(r)).collect()
    }

    fn stall_report(&self, peer: Option<Rank>) -> String {
        let p = peer.and_then(|p| self.members.get(p.index()).copied());
        self.inner.stall_report(p)
    }

    fn control_check(&mut self, peer: Option<Rank>) -> Result<(), TransportError> {
        let p = match peer {
            Some(p) => Some(self.below(p)?),
            None => None,
        };
        self.inner.control_check(p).map_err(|e| self.up(e))
    }

    fn known_gone(&mut self, peer: Rank) -> Option<TransportError> {
        let p = self.below(peer).ok()?;
        self.inner.known_gone(p).map(|e| self.up(e))
    }

    fn watch_fd(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<()> {
        self.inner.watch_fd(fd)
    }

    fn wait(&mut self, deadline: Instant) -> Result<(), TransportError> {
        self.inner.wait(deadline).map_err(|e| self.up(e))
    }

    fn stale(&mut self, current: u32) -> Option<(Rank, Tag)> {
        let (r, tag) = self.inner.stale(current)?;
        Some((self.name(r), tag))
    }

    fn abort(&mut self, reason: &str) {
        self.inner.abort(reason)
    }

    fn begin_epoch(&mut self) -> Result<u32, TransportError> {
        self.inner.begin_epoch().map_err(|e| self.up(e))
    }

    fn commit_epoch(&mut self) {
        self.inner.commit_epoch()
    }

    fn discard_from(&mut self, peer: Rank, old: &dyn Fn(&Tag) -> bool) {
        if let Ok(p) = self.below(peer) {
            self.inner.discard_from(p, old)
        }
    }

    fn exclude(&mut self, peer: Rank) {
        if let Ok(p) = self.below(peer) {
            self.inner.exclude(p)
        }
    }
}

/// The endpoint of a communicator whose endpoint moved on (to its shrunk successor): every
/// operation fails, saying so.
pub struct Detached {
    me: Endpoint,
}

impl Default for Detached {
    fn default() -> Detached {
        Detached::new(Rank(0), 0)
    }
}

impl Detached {
    /// Stands in for an endpoint of rank `rank` of `nranks`.
    pub fn new(rank: Rank, nranks: usize) -> Detached {
        Detached {
            me: Endpoint::new("detached", rank, nranks),
        }
    }

    fn gone(&self) -> TransportError {
        TransportError::Aborted {
            rank: self.me.rank,
            by: self.me.rank,
            reason: "this communicator was shrunk: its connections belong to the new one".into(),
        }
    }
}

impl Transport for Detached {
    fn endpoint(&self) -> &Endpoint {
        &self.me
    }

    fn alloc(&mut self, len: usize) -> Payload {
        Payload::reuse(Vec::new(), len)
    }

    fn try_send(
        &mut self,
        _peer: Rank,
        _tag: Tag,
        _payload: Payload,
    ) -> Result<Option<Payload>, TransportError> {
        Err(self.gone())
    }

    fn try_recv(
        &mut self,
        _peer: Rank,
        _tag: Tag,
        _len: usize,
    ) -> Result<Option<Payload>, TransportError> {
        Err(self.gone())
    }

    fn recycle(&mut self, _payload: Payload) {}
}

impl Group for Detached {
    fn begin_epoch(&mut self) -> Result<u32, TransportError> {
        Err(self.me.cannot_shrink())
    }

    fn wait(&mut self, _deadline: Instant) -> Result<(), TransportError> {
        Err(self.gone())
    }

    fn control_check(&mut self, _peer: Option<Rank>) -> Result<(), TransportError> {
        Err(self.gone())
    }

    fn stale(&mut self, _current: u32) -> Option<(Rank, Tag)> {
        None
    }

    fn abort(&mut self, _reason: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local;

    #[test]
    fn members_are_renumbered_in_order_and_a_subgroup_of_one_views_the_first() {
        let mut ends = local::group(4, local::DEFAULT_WINDOW);
        let third = ends.remove(3);
        let sub = Subgroup::new(Box::new(third), &[Rank(0), Rank(1), Rank(3)]).unwrap();
        assert_eq!((sub.endpoint().rank, sub.endpoint().nranks), (Rank(2), 3));
        let subsub = Subgroup::new(Box::new(sub), &[Rank(0), Rank(2)]).unwrap();
        assert_eq!(
            (subsub.endpoint().rank, subsub.endpoint().nranks),
            (Rank(1), 2)
        );
        assert_eq!(subsub.parent_rank(1), Some(3), "the first group's rank");
        assert_eq!(subsub.parent_rank(0), Some(0));
        // A member's error names members.
        let e = subsub.up(TransportError::PeerClosed {
            rank: Rank(3),
            peer: Rank(0),
        });
        assert_eq!(
            e,
            TransportError::PeerClosed {
                rank: Rank(1),
                peer: Rank(0)
            }
        );
    }

    #[test]
    fn a_rank_outside_its_own_subgroup_or_a_repeated_member_is_refused() {
        let mut ends = local::group(3, local::DEFAULT_WINDOW);
        let e = ends.remove(2);
        assert!(Subgroup::new(Box::new(e), &[Rank(0), Rank(1)]).is_err());
        let e = ends.remove(1);
        assert!(Subgroup::new(Box::new(e), &[Rank(1), Rank(1)]).is_err());
    }
}
