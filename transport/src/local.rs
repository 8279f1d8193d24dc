//! The in-process backend: `n` ranks as threads of one process.
//!
//! This is the "local" level of burn-collective: one rank per thread (or per device
//! driver thread), sharing the address space. Each ordered pair of ranks has a bounded
//! lock-free channel (`crossbeam_queue::ArrayQueue`); each rank has a doorbell that senders
//! ring, which costs a mutex only when the rank is actually asleep.
//!
//! Data moves with one copy per hop: the sender fills a pooled buffer straight from its
//! rank buffer, the receiver reduces or copies straight out of it into its own buffer, and
//! a forwarding rank sends the very same buffer on. Safe Rust cannot lend one thread's
//! borrowed slice to another thread for the duration of someone else's call, so the
//! pooled buffer is the meeting point; as segments are small it stays in cache between the
//! two sides.
//!
//! Flow control: a sender may have `window` messages queued to one receiver. A receiver
//! that looks for a message moves everything queued to it into its own arrival map, which
//! frees the senders' windows whatever it is waiting for (the trait's guarantee that
//! credits never depend on the tag a receiver waits for). The arrival map is therefore not
//! bounded by the window: a sender that runs ahead — a root broadcasting while a receiver
//! is still busy — is buffered at the receiver, up to one collective's worth of data.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crossbeam_queue::ArrayQueue;

use crate::error::TransportError;
use crate::transport::{check_arrival, Endpoint, Group, Payload, Transport};
use crate::types::{Rank, Tag};

/// Messages a sender may have queued to one receiver before it must wait for credits.
pub const DEFAULT_WINDOW: usize = 64;

/// Bytes of spare buffers the group keeps for reuse. A miss costs a fresh allocation (for
/// segment-sized buffers, an mmap and page faults); beyond a few windows' worth the pool
/// would only pin memory.
const POOL_BYTES: usize = 64 << 20;

/// Most buffers the pool holds, whatever their size.
const POOL_BUFFERS: usize = 1024;

struct Message {
    tag: Tag,
    payload: Payload,
}

/// A wake-up counter: senders bump it, a waiting rank sleeps until it moves.
///
/// Ringing is a lock-free increment unless the owner is asleep. The owner announces that
/// it is going to sleep (`sleepers`) and re-checks the counter under the lock; a ringer
/// bumps the counter before it checks `sleepers` and notifies under the lock. With both
/// orders sequentially consistent, either the sleeper sees the new count or the ringer sees
/// the sleeper, so no wake-up is lost.
#[derive(Default)]
struct Doorbell {
    rings: AtomicU64,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cond: Condvar,
}

impl Doorbell {
    fn guard(&self) -> MutexGuard<'_, ()> {
        // The mutex guards no data: a panic elsewhere cannot leave anything inconsistent.
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ring(&self) {
        self.rings.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = self.guard();
            self.cond.notify_all();
        }
    }

    /// Waits until the counter differs from `*seen` or `deadline` passes; updates `*seen`.
    fn wait(&self, seen: &mut u64, deadline: Instant) {
        let mut guard = self.guard();
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        while self.rings.load(Ordering::SeqCst) == *seen {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            guard = self
                .cond
                .wait_timeout(guard, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        *seen = self.rings.load(Ordering::SeqCst);
    }
}

struct Shared {
    nranks: usize,
    /// `channels[src * nranks + dst]`.
    channels: Vec<ArrayQueue<Message>>,
    doorbells: Vec<Doorbell>,
    closed: Vec<AtomicBool>,
    aborted: AtomicBool,
    abort_reason: Mutex<Option<(Rank, String)>>,
    pool: ArrayQueue<Vec<u8>>,
    pooled_bytes: AtomicUsize,
}

impl Shared {
    fn channel(&self, src: Rank, dst: Rank) -> &ArrayQueue<Message> {
        &self.channels[src.index() * self.nranks + dst.index()]
    }

    fn ring_all(&self) {
        for bell in &self.doorbells {
            bell.ring();
        }
    }
}

/// The most memory the channels of an in-process group may take ([`footprint`]): a
/// group of threads in one process has a channel per ordered pair of ranks, so its size
/// grows as the square of the ranks (about 480 ranks at the default window).
pub const MAX_GROUP_BYTES: usize = 1 << 30;

/// Bytes the channels of an `n`-rank group with `window` take (`None`: more than a
/// `usize` counts), to check before [`group`] allocates them.
pub fn footprint(n: usize, window: usize) -> Option<usize> {
    // Each slot holds a message and crossbeam's stamp.
    let slot = std::mem::size_of::<Message>() + std::mem::size_of::<usize>();
    let channel = window
        .max(1)
        .checked_mul(slot)?
        .checked_add(std::mem::size_of::<ArrayQueue<Message>>())?;
    n.checked_mul(n)?.checked_mul(channel)
}

/// Creates the `n` endpoints of an in-process group, rank `i` at index `i`.
///
/// `window` is the number of messages a sender may have queued to one receiver. The
/// caller checks the group's [`footprint`] first: this allocates it.
pub fn group(n: usize, window: usize) -> Vec<LocalTransport> {
    let window = window.max(1);
    let shared = Arc::new(Shared {
        nranks: n,
        channels: (0..n * n).map(|_| ArrayQueue::new(window)).collect(),
        doorbells: (0..n).map(|_| Doorbell::default()).collect(),
        closed: (0..n).map(|_| AtomicBool::new(false)).collect(),
        aborted: AtomicBool::new(false),
        abort_reason: Mutex::new(None),
        pool: ArrayQueue::new(POOL_BUFFERS),
        pooled_bytes: AtomicUsize::new(0),
    });
    (0..n)
        .map(|i| LocalTransport {
            shared: Arc::clone(&shared),
            me: Endpoint::new("local", Rank::from(i), n),
            arrived: Default::default(),
            broken: None,
            seen: 0,
        })
        .collect()
}

/// One rank's endpoint of an in-process group. See the [module docs](self).
pub struct LocalTransport {
    shared: Arc<Shared>,
    me: Endpoint,
    /// Messages taken off the channels before anyone asked for them.
    arrived: crate::transport::Arrivals<Message>,
    /// A protocol violation seen while draining, reported by the next call.
    broken: Option<TransportError>,
    /// Doorbell count when this rank last woke.
    seen: u64,
}

impl LocalTransport {
    fn check_usable(&mut self) -> Result<(), TransportError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        if !self.shared.aborted.load(Ordering::Acquire) {
            return Ok(());
        }
        let guard = self
            .shared
            .abort_reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (by, reason) = guard
            .clone()
            .unwrap_or_else(|| (self.me.rank, "unknown".to_owned()));
        Err(TransportError::Aborted {
            rank: self.me.rank,
            by,
            reason,
        })
    }

    fn check_peer(&self, peer: Rank) -> Result<(), TransportError> {
        if peer.index() < self.shared.nranks {
            Ok(())
        } else {
            Err(TransportError::InvalidPeer {
                rank: self.me.rank,
                peer,
                nranks: self.shared.nranks,
            })
        }
    }

    /// Moves every message waiting on any incoming channel into `arrived`, returning the
    /// senders' credits whatever this rank is waiting for (see the trait docs).
    fn drain_incoming(&mut self) {
        for src in 0..self.shared.nranks {
            let src = Rank::from(src);
            let channel = self.shared.channel(src, self.me.rank);
            let mut freed = false;
            while let Some(message) = channel.pop() {
                freed = true;
                let tag = message.tag;
                if self.arrived.insert((src, tag.key()), message).is_some() {
                    self.broken.get_or_insert(TransportError::DuplicateTag {
                        rank: self.me.rank,
                        peer: src,
                        tag,
                    });
                }
            }
            if freed {
                self.shared.doorbells[src.index()].ring();
            }
        }
    }

    /// Takes the arrived message `(peer, tag)`, checking its length and fingerprint.
    fn take(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Payload>, TransportError> {
        match self.arrived.remove(&(peer, tag.key())) {
            None => Ok(None),
            Some(m) => check_arrival(self.me.rank, peer, tag, m.tag, m.payload, len).map(Some),
        }
    }
}

impl Transport for LocalTransport {
    fn endpoint(&self) -> &Endpoint {
        &self.me
    }

    fn alloc(&mut self, len: usize) -> Payload {
        let storage = match self.shared.pool.pop() {
            Some(v) => {
                self.shared
                    .pooled_bytes
                    .fetch_sub(v.capacity(), Ordering::Relaxed);
                v
            }
            None => Vec::new(),
        };
        Payload::reuse(storage, len)
    }

    fn try_send(
        &mut self,
        peer: Rank,
        tag: Tag,
        payload: Payload,
    ) -> Result<Option<Payload>, TransportError> {
        self.check_usable()?;
        self.check_peer(peer)?;
        if self.shared.closed[peer.index()].load(Ordering::Acquire) {
            return Err(TransportError::PeerClosed {
                rank: self.me.rank,
                peer,
            });
        }
        match self
            .shared
            .channel(self.me.rank, peer)
            .push(Message { tag, payload })
        {
            Ok(()) => {
                self.shared.doorbells[peer.index()].ring();
                Ok(None)
            }
            Err(message) => Ok(Some(message.payload)),
        }
    }

    fn try_recv(
        &mut self,
        peer: Rank,
        tag: Tag,
        len: usize,
    ) -> Result<Option<Payload>, TransportError> {
        self.check_usable()?;
        self.check_peer(peer)?;
        if let Some(p) = self.take(peer, tag, len)? {
            return Ok(Some(p));
        }
        // The peer may have queued the message just before closing: drain, then decide.
        let closed = self.shared.closed[peer.index()].load(Ordering::Acquire);
        self.drain_incoming();
        self.check_usable()?;
        match self.take(peer, tag, len)? {
            Some(p) => Ok(Some(p)),
            None if closed => Err(TransportError::PeerClosed {
                rank: self.me.rank,
                peer,
            }),
            None => Ok(None),
        }
    }

    fn recycle(&mut self, payload: Payload) {
        let storage = payload.into_storage();
        let bytes = storage.capacity();
        let pooled = self.shared.pooled_bytes.fetch_add(bytes, Ordering::Relaxed);
        if pooled + bytes > POOL_BYTES || self.shared.pool.push(storage).is_err() {
            // Over budget or full: let the buffer go.
            self.shared.pooled_bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

impl Group for LocalTransport {
    fn begin_epoch(&mut self) -> Result<u32, TransportError> {
        Err(self.me.cannot_shrink())
    }

    fn wait(&mut self, deadline: Instant) -> Result<(), TransportError> {
        self.check_usable()?;
        self.drain_incoming();
        self.shared.doorbells[self.me.rank.index()].wait(&mut self.seen, deadline);
        self.check_usable()
    }

    fn stale(&mut self, current: u32) -> Option<(Rank, Tag)> {
        // Only what has arrived: channels are FIFO, so a stale message is here before
        // anything its sender sent later, and a later call that hears from it sees it.
        self.arrived
            .iter()
            .find(|(_, m)| crate::transport::is_stale(m.tag.collective, current))
            .map(|((peer, _), m)| (*peer, m.tag))
    }

    fn abort(&mut self, reason: &str) {
        {
            let mut slot = self
                .shared
                .abort_reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if slot.is_none() {
                *slot = Some((self.me.rank, reason.to_owned()));
            }
        }
        self.shared.aborted.store(true, Ordering::Release);
        self.shared.ring_all();
    }
}

impl Drop for LocalTransport {
    fn drop(&mut self) {
        self.shared.closed[self.me.rank.index()].store(true, Ordering::Release);
        self.shared.ring_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tag(segment: u32) -> Tag {
        Tag {
            collective: 0,
            channel: 0,
            transfer: 0,
            segment,
            schedule: 7,
        }
    }

    fn message(t: &mut LocalTransport, bytes: &[u8]) -> Payload {
        let mut p = t.alloc(bytes.len());
        p.as_bytes_mut().copy_from_slice(bytes);
        p
    }

    #[test]
    fn messages_match_by_tag_in_any_order() {
        let mut ranks = group(2, 4);
        let mut b = ranks.pop().unwrap();
        let mut a = ranks.pop().unwrap();
        for s in 0..3u8 {
            let p = message(&mut a, &[s; 5]);
            assert!(a.try_send(Rank(1), tag(s.into()), p).unwrap().is_none());
        }
        for s in (0..3u8).rev() {
            let got = b.try_recv(Rank(0), tag(s.into()), 5).unwrap().unwrap();
            assert_eq!(got.as_bytes(), &[s; 5]);
        }
        assert!(b.try_recv(Rank(0), tag(9), 5).unwrap().is_none());
    }

    #[test]
    fn full_channel_returns_payload_until_receiver_drains() {
        let mut ranks = group(2, 1);
        let mut b = ranks.pop().unwrap();
        let mut a = ranks.pop().unwrap();
        let p = message(&mut a, b"x");
        assert!(a.try_send(Rank(1), tag(0), p).unwrap().is_none());
        let p = message(&mut a, b"y");
        let back = a
            .try_send(Rank(1), tag(1), p)
            .unwrap()
            .expect("window is 1");
        // Asking for an unrelated tag still frees the channel.
        assert!(b.try_recv(Rank(0), tag(7), 1).unwrap().is_none());
        assert!(a.try_send(Rank(1), tag(1), back).unwrap().is_none());
        assert_eq!(
            b.try_recv(Rank(0), tag(1), 1).unwrap().unwrap().as_bytes(),
            b"y"
        );
        assert_eq!(
            b.try_recv(Rank(0), tag(0), 1).unwrap().unwrap().as_bytes(),
            b"x"
        );
    }

    #[test]
    fn wrong_length_is_an_error_not_a_truncation() {
        let mut ranks = group(2, 4);
        let mut b = ranks.pop().unwrap();
        let mut a = ranks.pop().unwrap();
        let p = message(&mut a, b"abc");
        a.try_send(Rank(1), tag(0), p).unwrap();
        let err = b.try_recv(Rank(0), tag(0), 4).unwrap_err();
        assert!(matches!(
            err,
            TransportError::LengthMismatch {
                expected: 4,
                got: 3,
                ..
            }
        ));
    }

    #[test]
    fn dropped_peer_is_reported_after_its_last_messages() {
        let mut ranks = group(2, 4);
        let mut b = ranks.pop().unwrap();
        let mut a = ranks.pop().unwrap();
        let p = message(&mut a, b"last");
        a.try_send(Rank(1), tag(0), p).unwrap();
        drop(a);
        assert_eq!(
            b.try_recv(Rank(0), tag(0), 4).unwrap().unwrap().as_bytes(),
            b"last"
        );
        let err = b.try_recv(Rank(0), tag(1), 4).unwrap_err();
        assert_eq!(
            err,
            TransportError::PeerClosed {
                rank: Rank(1),
                peer: Rank(0)
            }
        );
        let p = b.alloc(1);
        assert!(matches!(
            b.try_send(Rank(0), tag(0), p),
            Err(TransportError::PeerClosed { .. })
        ));
    }

    #[test]
    fn abort_wakes_a_waiting_rank_on_another_thread() {
        let mut ranks = group(2, 4);
        let mut b = ranks.pop().unwrap();
        let mut a = ranks.pop().unwrap();
        let waiter = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Err(e) = b.wait(deadline) {
                    return e;
                }
                assert!(Instant::now() < deadline, "abort did not wake the waiter");
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        a.abort("test abort");
        let err = waiter.join().unwrap();
        assert_eq!(
            err,
            TransportError::Aborted {
                rank: Rank(1),
                by: Rank(0),
                reason: "test abort".into()
            }
        );
    }

    #[test]
    fn a_message_from_another_schedule_is_reported() {
        let mut ranks = group(2, 4);
        let mut b = ranks.pop().unwrap();
        let mut a = ranks.pop().unwrap();
        let p = message(&mut a, b"abc");
        a.try_send(
            Rank(1),
            Tag {
                schedule: 9,
                ..tag(0)
            },
            p,
        )
        .unwrap();
        let err = b.try_recv(Rank(0), tag(0), 3).unwrap_err();
        assert!(
            matches!(
                err,
                TransportError::ScheduleMismatch {
                    expected: 7,
                    got: 9,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_repeated_tag_is_an_error_not_an_overwrite() {
        let mut ranks = group(2, 4);
        let mut b = ranks.pop().unwrap();
        let mut a = ranks.pop().unwrap();
        for _ in 0..2 {
            let p = message(&mut a, b"x");
            a.try_send(Rank(1), tag(0), p).unwrap();
        }
        let err = b.try_recv(Rank(0), tag(5), 1).unwrap_err();
        assert!(matches!(err, TransportError::DuplicateTag { .. }), "{err}");
    }

    #[test]
    fn a_closed_peers_last_message_is_still_length_checked() {
        let mut ranks = group(2, 4);
        let mut b = ranks.pop().unwrap();
        let mut a = ranks.pop().unwrap();
        let p = message(&mut a, b"toolong");
        a.try_send(Rank(1), tag(0), p).unwrap();
        drop(a);
        let err = b.try_recv(Rank(0), tag(0), 3).unwrap_err();
        assert!(
            matches!(err, TransportError::LengthMismatch { .. }),
            "{err}"
        );
    }

    #[test]
    fn the_pool_reuses_buffers() {
        let mut ranks = group(1, 1);
        let p = ranks[0].alloc(1000);
        let ptr = p.as_bytes().as_ptr();
        ranks[0].recycle(p);
        assert_eq!(ranks[0].alloc(10).as_bytes().as_ptr(), ptr);
    }

    #[test]
    fn wait_returns_at_the_deadline() {
        let mut ranks = group(1, 1);
        let start = Instant::now();
        ranks[0].wait(start + Duration::from_millis(30)).unwrap();
        ranks[0].wait(start + Duration::from_millis(30)).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn invalid_peer_is_rejected() {
        let mut ranks = group(2, 1);
        let p = ranks[0].alloc(0);
        let err = ranks[0].try_send(Rank(5), tag(0), p).unwrap_err();
        assert!(!err.is_fatal());
    }
}
