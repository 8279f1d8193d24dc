//! The in-process backend: `n` ranks as threads of one process.
//!
//! This is the "local" level of burn-collective: one rank per thread (or per device
//! driver thread), sharing the address space. Each ordered pair of ranks has a bounded
//! lock-free channel (`crossbeam_queue::ArrayQueue`) whose capacity is the sender's credit
//! window; each rank has a doorbell (mutex + condvar) that senders ring.
//!
//! Data moves with one copy per hop: the sender fills a pooled buffer straight from its
//! rank buffer, the receiver reduces or copies straight out of it into its own buffer, and
//! a forwarding rank sends the very same buffer on. Safe Rust cannot lend one thread's
//! borrowed slice to another thread for the duration of someone else's call, so the
//! pooled buffer is the meeting point; as segments are small it stays in cache between the
//! two sides.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crossbeam_queue::ArrayQueue;

use crate::error::TransportError;
use crate::transport::{Payload, Transport};
use crate::types::{Rank, Tag};

/// Messages a sender may have queued to one receiver before it must wait for credits.
pub const DEFAULT_WINDOW: usize = 64;

/// Spare buffers kept for reuse, per rank, and bounds on the whole group's pool. A miss
/// costs a fresh allocation (for segment-sized buffers, an mmap and page faults), and
/// receivers hold arrived segments until they consume them, so the pool must cover a few
/// windows' worth; beyond that it would only pin memory.
const POOL_PER_RANK: usize = 32;
const POOL_MIN: usize = 128;
const POOL_MAX: usize = 1024;

struct Message {
    tag: Tag,
    payload: Payload,
}

/// A wake-up counter: senders bump it, a waiting rank sleeps until it moves.
#[derive(Default)]
struct Doorbell {
    rings: Mutex<u64>,
    cond: Condvar,
}

impl Doorbell {
    fn lock(&self) -> MutexGuard<'_, u64> {
        // The counter is a plain integer: a panic elsewhere cannot leave it inconsistent.
        self.rings.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ring(&self) {
        *self.lock() += 1;
        self.cond.notify_all();
    }

    /// Waits until the counter differs from `*seen` or `deadline` passes; updates `*seen`.
    fn wait(&self, seen: &mut u64, deadline: Instant) {
        let mut rings = self.lock();
        while *rings == *seen {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            rings = self
                .cond
                .wait_timeout(rings, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *seen = *rings;
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

/// Creates the `n` endpoints of an in-process group, rank `i` at index `i`.
///
/// `window` is the number of messages a sender may have in flight to one receiver.
pub fn group(n: usize, window: usize) -> Vec<LocalTransport> {
    let window = window.max(1);
    let shared = Arc::new(Shared {
        nranks: n,
        channels: (0..n * n).map(|_| ArrayQueue::new(window)).collect(),
        doorbells: (0..n).map(|_| Doorbell::default()).collect(),
        closed: (0..n).map(|_| AtomicBool::new(false)).collect(),
        aborted: AtomicBool::new(false),
        abort_reason: Mutex::new(None),
        pool: ArrayQueue::new((POOL_PER_RANK * n).clamp(POOL_MIN, POOL_MAX)),
    });
    (0..n)
        .map(|i| LocalTransport {
            shared: Arc::clone(&shared),
            rank: Rank::from(i),
            arrived: HashMap::new(),
            seen: 0,
        })
        .collect()
}

/// One rank's endpoint of an in-process group. See the [module docs](self).
pub struct LocalTransport {
    shared: Arc<Shared>,
    rank: Rank,
    /// Messages taken off the channels before anyone asked for them.
    arrived: HashMap<(Rank, Tag), Payload>,
    /// Doorbell count when this rank last woke.
    seen: u64,
}

impl LocalTransport {
    fn check_aborted(&self) -> Result<(), TransportError> {
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
            .unwrap_or_else(|| (self.rank, "unknown".to_owned()));
        Err(TransportError::Aborted {
            rank: self.rank,
            by,
            reason,
        })
    }

    fn check_peer(&self, peer: Rank) -> Result<(), TransportError> {
        if peer.index() < self.shared.nranks {
            Ok(())
        } else {
            Err(TransportError::InvalidPeer {
                rank: self.rank,
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
            let channel = self.shared.channel(src, self.rank);
            let mut freed = false;
            while let Some(message) = channel.pop() {
                freed = true;
                self.arrived.insert((src, message.tag), message.payload);
            }
            if freed {
                self.shared.doorbells[src.index()].ring();
            }
        }
    }
}

impl Transport for LocalTransport {
    fn name(&self) -> &'static str {
        "local"
    }

    fn rank(&self) -> Rank {
        self.rank
    }

    fn nranks(&self) -> usize {
        self.shared.nranks
    }

    fn alloc(&mut self, len: usize) -> Payload {
        Payload::reuse(self.shared.pool.pop().unwrap_or_default(), len)
    }

    fn try_send(
        &mut self,
        peer: Rank,
        tag: Tag,
        payload: Payload,
    ) -> Result<Option<Payload>, TransportError> {
        self.check_aborted()?;
        self.check_peer(peer)?;
        if self.shared.closed[peer.index()].load(Ordering::Acquire) {
            return Err(TransportError::PeerClosed {
                rank: self.rank,
                peer,
            });
        }
        match self
            .shared
            .channel(self.rank, peer)
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
        self.check_aborted()?;
        self.check_peer(peer)?;
        let key = (peer, tag);
        if !self.arrived.contains_key(&key) {
            self.drain_incoming();
        }
        match self.arrived.remove(&key) {
            Some(payload) if payload.len() == len => Ok(Some(payload)),
            Some(payload) => Err(TransportError::LengthMismatch {
                rank: self.rank,
                peer,
                tag,
                expected: len,
                got: payload.len(),
            }),
            None if self.shared.closed[peer.index()].load(Ordering::Acquire) => {
                // The peer may have queued the message just before closing.
                self.drain_incoming();
                match self.arrived.remove(&key) {
                    Some(payload) => Ok(Some(payload)),
                    None => Err(TransportError::PeerClosed {
                        rank: self.rank,
                        peer,
                    }),
                }
            }
            None => Ok(None),
        }
    }

    fn recycle(&mut self, payload: Payload) {
        // A full pool just drops the buffer.
        let _ = self.shared.pool.push(payload.into_storage());
    }

    fn wait(&mut self, deadline: Instant) -> Result<(), TransportError> {
        self.check_aborted()?;
        self.drain_incoming();
        self.shared.doorbells[self.rank.index()].wait(&mut self.seen, deadline);
        self.check_aborted()
    }

    fn abort(&mut self, reason: &str) {
        {
            let mut slot = self
                .shared
                .abort_reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if slot.is_none() {
                *slot = Some((self.rank, reason.to_owned()));
            }
        }
        self.shared.aborted.store(true, Ordering::Release);
        self.shared.ring_all();
    }
}

impl Drop for LocalTransport {
    fn drop(&mut self) {
        self.shared.closed[self.rank.index()].store(true, Ordering::Release);
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
