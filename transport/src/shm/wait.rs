//! Sleeping and waking: the counters a rank records when it finds nothing, what it checks
//! after raising its `sleeping` flag, and the wait itself (spin, then the doorbell).

use std::io::Read;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{ShmTransport, HEAP_CAP, WAKE_CHECK};
use crate::error::TransportError;
use crate::transport::Group;

/// Rings (bytes) taken off the doorbell per wait, at most, in one read: a peer rings once
/// per sleep it ends, and one ring is enough to know the wait was rung.
pub(super) const BELL_DRAIN: usize = 64;

/// Looks at the rings per clock read while a wait spins.
const CLOCK_EVERY: u32 = 16;

/// How much longer than its spin a wait spins while a peer reads this rank's memory:
/// longer than a 64 MiB read takes at memory speed; past this, sleeping costs little beside
/// the read (and a stopped reader burns no core).
const READ_SPIN: Duration = Duration::from_millis(20);

impl ShmTransport {
    /// Records the counters a wait compares (see [`Self::moved`]): messages taken and
    /// slots given back so far; only at the first full look, or failed send, since the
    /// last wait (a later one would hide what moved in between, and the wait would sleep
    /// through it), and before that look takes anything off a ring.
    pub(super) fn mark_seen(&mut self) {
        if self.marked {
            return;
        }
        self.marked = true;
        self.seen_drained = self.drained;
        self.seen_released = self.released_total(Ordering::Acquire);
        self.seen_taken = self.taken_total(Ordering::Acquire);
    }

    fn taken_total(&self, order: Ordering) -> u64 {
        self.links
            .iter()
            .flatten()
            .fold(0u64, |g, l| g.wrapping_add(l.outbox.taken(order)))
    }

    fn released_total(&self, order: Ordering) -> u64 {
        self.links
            .iter()
            .flatten()
            .fold(0u64, |g, l| g.wrapping_add(l.outbox.released(order)))
    }

    /// After this rank raised its `sleeping` flag: whether a message was published that it
    /// has not taken, or a slot came back since it last found nothing. Sequentially
    /// consistent loads of the counters a sender or receiver stores (sequentially
    /// consistent) before it checks the flag: one of the two sees the other.
    fn unseen(&self) -> bool {
        self.links
            .iter()
            .flatten()
            .any(|l| l.copied < HEAP_CAP && l.inbox.unread())
            || self.counted_since_seen(Ordering::SeqCst)
    }

    /// Whether anything moved since this rank last found nothing: a message waits on a
    /// ring (one cache line per ring, the one its sender writes anyway), one was taken
    /// since, or a slot came back.
    fn moved(&self) -> bool {
        self.links
            .iter()
            .flatten()
            .any(|l| l.copied < HEAP_CAP && l.inbox.pending())
            || self.counted_since_seen(Ordering::Acquire)
    }

    /// Whether the counters moved since [`Self::mark_seen`]: a message taken, a slot given
    /// back, or (for a sender that found no room) a descriptor read; loaded with `order`.
    fn counted_since_seen(&self, order: Ordering) -> bool {
        self.drained != self.seen_drained
            || self.released_total(order) != self.seen_released
            || (self.send_blocked && self.taken_total(order) != self.seen_taken)
    }

    /// Whether a wait past its spin should spin on: a peer is reading this rank's memory
    /// right now (it is done in the time a copy takes, and a sleeper would pay a wakeup on
    /// top), and this rank has a core to itself. The control plane's word on that reader
    /// is asked too (its connections read at most every millisecond): a reader that died
    /// never finishes, and its death is this wait's error.
    fn keep_spinning(&mut self) -> Result<bool, TransportError> {
        if self.crowded {
            return Ok(false);
        }
        let links = &self.links;
        let reader = self.outstanding.iter().find_map(|&(_, peer, ticket, generation)| {
            matches!(links.get(peer.index()), Some(Some(l)) if l.outbox.being_read(ticket, generation))
                .then_some(peer)
        });
        match reader {
            Some(peer) => self.control(Some(peer), false).map(|()| true),
            None => Ok(false),
        }
    }

    /// [`Group::wait`]: until a ring moves, the deadline, or the transport beneath
    /// has news.
    pub(super) fn wait_rings(&mut self, deadline: Instant) -> Result<(), TransportError> {
        self.check()?;
        self.control(None, false)?;
        // Whatever this rank waits for, its peers' messages come off the rings, and a
        // full ring's slots are freed, so that a peer blocked on it moves on.
        self.drain()?;
        self.unpin();
        let spin_until = Instant::now() + self.spin;
        // The clock every few looks, not every one: a look is a few cache lines, a clock
        // read as much again (and a message that lands between two reads is seen at once).
        for looks in 0u32.. {
            if self.moved() {
                return Ok(());
            }
            if looks % CLOCK_EVERY == 0 {
                let now = Instant::now();
                let past = now.saturating_duration_since(spin_until);
                if now >= deadline
                    || now >= spin_until && (past >= READ_SPIN || !self.keep_spinning()?)
                {
                    break;
                }
            }
            self.relax();
        }
        // About to block: messages left in their senders' memory are read now (their
        // senders may be waiting for that to go on).
        if self.settle_remote()? {
            return Ok(());
        }
        let sleeping = self.mine.sleeping();
        sleeping.store(1, Ordering::SeqCst);
        if self.unseen() {
            sleeping.store(0, Ordering::Relaxed);
            return Ok(());
        }
        // Unwatched, the bell is polled every millisecond; watched, the rings are looked
        // at again every WAKE_CHECK whatever the bell says, so a lost ring costs that much,
        // never the whole timeout (and is counted for the stall report).
        let until = if self.bell_watched {
            deadline.min(Instant::now() + WAKE_CHECK)
        } else {
            deadline.min(Instant::now() + Duration::from_millis(1))
        };
        self.sleeps += 1;
        let r = self.inner.wait(until);
        self.mine.sleeping().store(0, Ordering::Relaxed);
        // One read of at most BELL_DRAIN rings: a flood costs a bounded look, never keeps
        // the wait here (what is left wakes the next wait at once, which looks at the rings).
        let mut sink = [0u8; BELL_DRAIN];
        let rung = matches!((&self.bell).read(&mut sink), Ok(1..));
        if self.bell_watched
            && !rung
            && until < deadline
            && Instant::now() >= until
            && self.unseen()
        {
            self.late_wakeups += 1;
        }
        r
    }
}
