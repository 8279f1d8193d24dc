//! The shared-memory backend between two threads of this process (two ranks of one host
//! over a loopback TCP group): what the rings do when one side runs ahead.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::tcp::bootstrap::{connect, Options as BootOptions};

fn group<R: Send>(n: usize, slots: usize, body: impl Fn(ShmTransport) -> R + Sync) -> Vec<R> {
    let root: SocketAddr = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port");
    let hosts = Arc::new(HostMap::from_keys(&vec!["one host".to_string(); n]));
    std::thread::scope(|s| {
        let (body, hosts) = (&body, &hosts);
        let hs: Vec<_> = (0..n)
            .map(|r| {
                s.spawn(move || {
                    let boot = BootOptions {
                        rank: r,
                        nranks: n,
                        root,
                        unique_id: BootOptions::default_unique_id(root, n),
                        bind: None,
                        timeout: Duration::from_secs(20),
                        window: 4,
                        host: "one host".into(),
                    };
                    let mut tcp = connect(&boot).expect("bootstrap");
                    let opts = Options {
                        slot_bytes: 4096,
                        slots: Some(slots),
                        spin: Duration::from_micros(50),
                        dir: "/dev/shm".into(),
                        required: true,
                    };
                    let deadline = Instant::now() + Duration::from_secs(20);
                    let prepared =
                        prepare(&mut tcp, Arc::clone(hosts), &opts, deadline).expect("prepare");
                    body(prepared.finish(Box::new(tcp)).expect("shared memory"))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank")).collect()
    })
}

fn tag(transfer: u32) -> Tag {
    Tag {
        collective: 1,
        channel: 0,
        transfer,
        segment: 0,
        schedule: 5,
    }
}

/// A sender far ahead of its receiver with small (inline) messages uses up the ring's
/// descriptors, not its slots: when the receiver reads them, the sender must be woken
/// like one waiting for a slot, not find out at its next periodic look (a late wake-up).
#[test]
fn a_sender_out_of_descriptors_is_woken_when_they_are_read() {
    let (slots, messages) = (4, 64u32);
    let results = group(2, slots, |mut t| {
        let deadline = Instant::now() + Duration::from_secs(20);
        let peer = Rank::from(1 - t.rank().index());
        let send = |t: &mut ShmTransport, tag: Tag, bytes: &[u8]| {
            while t.try_send_borrowed(peer, tag, bytes).expect("send") == SendState::NoRoom {
                t.wait(deadline).expect("wait");
            }
        };
        if t.rank().index() == 0 {
            for i in 0..messages {
                send(&mut t, tag(i), &i.to_le_bytes());
            }
        } else {
            for i in 0..messages {
                // Slowly: the sender finds the ring full every time and goes to sleep.
                std::thread::sleep(Duration::from_millis(2));
                let p = loop {
                    if let Some(p) = t.try_recv(peer, tag(i), 4).expect("recv") {
                        break p;
                    }
                    t.wait(deadline).expect("wait");
                };
                assert_eq!(p.as_bytes(), i.to_le_bytes(), "message {i}");
            }
        }
        // Both sides done before either drops its end.
        let done = Tag {
            transfer: u32::MAX,
            ..tag(0)
        };
        send(&mut t, done, &[]);
        while t.try_recv(peer, done, 0).expect("done").is_none() {
            t.wait(deadline).expect("wait");
        }
        t.late_wakeups
    });
    assert_eq!(results, [0, 0], "late wake-ups (sender, receiver)");
}

/// A peer that floods this rank with small messages it never asks for is held to the
/// same budget as one whose slots it holds ([`HEAP_CAP`], an inline message counting
/// [`INLINE_CHARGE`]): past it this rank stops reading the peer's descriptors and the
/// peer waits, instead of the arrival map growing with every message.
#[test]
fn a_flood_of_small_unasked_messages_is_held_to_the_budget() {
    let cap = HEAP_CAP / INLINE_CHARGE;
    let slots = 4;
    let blocked = std::sync::atomic::AtomicBool::new(false);
    let held = group(2, slots, |mut t| {
        let deadline = Instant::now() + Duration::from_secs(60);
        let peer = Rank::from(1 - t.rank().index());
        if t.rank().index() == 0 {
            // As many as the budget and a thousand more, unless the peer stops reading.
            let (mut sent, mut refused) = (0u32, 0);
            while sent < (cap + 1000) as u32 && refused < 20 {
                match t.try_send_borrowed(peer, tag(sent), &[7; 8]).expect("send") {
                    SendState::NoRoom => {
                        refused += 1;
                        t.wait(Instant::now() + Duration::from_millis(5))
                            .expect("wait");
                    }
                    _ => {
                        sent += 1;
                        refused = 0;
                    }
                }
            }
            blocked.store(true, std::sync::atomic::Ordering::SeqCst);
            0
        } else {
            // Waits for a message that never comes: every wait drains the ring.
            while !blocked.load(std::sync::atomic::Ordering::SeqCst) {
                assert!(t.try_recv(peer, tag(u32::MAX), 0).expect("recv").is_none());
                t.wait(Instant::now() + Duration::from_millis(1).min(deadline - Instant::now()))
                    .expect("wait");
            }
            let held = t.arrived.len();
            // The peer's ring stays full but is not read: waiting sleeps (until the
            // deadline) instead of returning at once to spin on it.
            let until = Instant::now() + Duration::from_millis(100);
            let mut wakes = 0;
            while Instant::now() < until {
                t.wait(until).expect("wait");
                wakes += 1;
            }
            assert!(
                wakes < 50,
                "the wait returned {wakes} times in 100 ms: it spins"
            );
            held
        }
    });
    assert!(
        held[1] <= cap + slots,
        "{} messages held, the budget is {cap} (+{slots} in the ring)",
        held[1]
    );
}

/// Buffers handed back to the shared-memory layer are kept for its inline messages only
/// when they are plain heap memory: one the transport beneath lent (a registered verbs
/// slot, with a header in front and a home to go back to) must go back to it, or that
/// transport loses the slot for good and its peer starves.
#[test]
fn only_plain_buffers_are_kept_for_inline_messages() {
    let kept = group(2, 4, |mut t| {
        let home: crate::transport::Returns = Default::default();
        t.recycle(Payload::lent(vec![0; 4096], 64, 8, &home));
        let after_lent = t.small.len();
        t.recycle(Payload::reuse(vec![1; 8], 8));
        (after_lent, t.small.len())
    });
    for (rank, (after_lent, after_plain)) in kept.into_iter().enumerate() {
        assert_eq!(after_lent, 0, "rank {rank} kept a lent buffer");
        assert_eq!(after_plain, 1, "rank {rank} did not keep a plain one");
    }
}
