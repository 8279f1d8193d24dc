//! The shared-memory backend between two threads of this process (two ranks of one host
//! over a loopback TCP group): what the rings do when one side runs ahead.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::wait::BELL_DRAIN;
use super::*;
use crate::tcp::bootstrap::{connect, Options as BootOptions};

fn group<R: Send>(n: usize, slots: usize, body: impl Fn(ShmTransport) -> R + Sync) -> Vec<R> {
    group_with(n, slots, |_| Some(SINGLE_COPY), body)
}

/// Smallest single-copy send in these tests (slots hold 4096 bytes).
const SINGLE_COPY: usize = 1024;

/// [`group`], with rank `r`'s single-copy setting `single_copy(r)`.
fn group_with<R: Send>(
    n: usize,
    slots: usize,
    single_copy: impl Fn(usize) -> Option<usize> + Sync,
    body: impl Fn(ShmTransport) -> R + Sync,
) -> Vec<R> {
    let root: SocketAddr = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port");
    let hosts = Arc::new(HostMap::from_keys(&vec!["one host".to_string(); n]));
    std::thread::scope(|s| {
        let (body, hosts, single_copy) = (&body, &hosts, &single_copy);
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
                        cpus: 0,
                    };
                    let mut tcp = connect(&boot).expect("bootstrap");
                    let opts = Options {
                        slot_bytes: 4096,
                        slots: Some(slots),
                        spin: Duration::from_micros(50),
                        dir: None,
                        required: true,
                        single_copy: single_copy(r),
                        cpus: crate::topology::host_cpus().expect("the host's CPUs"),
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

/// Waits (at most 30 s: a test that fails elsewhere must not hang here) until `flag`.
fn until(flag: &std::sync::atomic::AtomicBool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !flag.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "never {what}");
        std::thread::yield_now();
    }
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
        let peer = Rank::from(1 - t.endpoint().rank.index());
        let send = |t: &mut ShmTransport, tag: Tag, bytes: &[u8]| {
            while t
                .try_send_from(peer, tag, bytes, Lend::UntilComplete)
                .expect("send")
                == SendState::NoRoom
            {
                t.wait(deadline).expect("wait");
            }
        };
        if t.endpoint().rank.index() == 0 {
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

/// Rank 0 misses P's message (tag 1) quickly, P sends it, and then `other` (receives of
/// something else) takes it off P's ring and holds it. The wait after that must not sleep
/// through it: the receive waiting for it missed before it came, and a quick miss records
/// nothing. Three ranks (P = 1, Q = 2); returns the number of times that wait slept.
fn sleeps_after_another_receive_took_it(other: impl Fn(&mut ShmTransport) + Sync) -> u64 {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    /// Lets the other ranks go when rank 0 is done, or failed.
    struct Done<'a>(&'a AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }
    let (send_now, sent, done) = (
        AtomicBool::new(false),
        AtomicBool::new(false),
        AtomicBool::new(false),
    );
    let p = Rank::from(1);
    let results = group(3, 4, |mut t| {
        let deadline = Instant::now() + Duration::from_secs(20);
        match t.endpoint().rank.index() {
            0 => {
                let _done = Done(&done);
                // A new transport records nothing and has no misses yet: a quick miss.
                assert!(t.try_recv(p, tag(1), 8).expect("recv").is_none());
                send_now.store(true, SeqCst);
                until(&sent, "P sent");
                other(&mut t);
                let sleeps = t.sleeps;
                t.wait(deadline).expect("wait");
                let slept = t.sleeps - sleeps;
                let msg = t
                    .try_recv(p, tag(1), 8)
                    .expect("recv")
                    .expect("P's message");
                assert_eq!(msg.as_bytes(), 7u64.to_le_bytes());
                slept
            }
            r => {
                if r == 1 {
                    until(&send_now, "told to send");
                    let state = t
                        .try_send_from(
                            Rank::from(0),
                            tag(1),
                            &7u64.to_le_bytes(),
                            Lend::UntilComplete,
                        )
                        .expect("send");
                    assert_eq!(state, SendState::Done, "an 8-byte send goes out at once");
                    sent.store(true, SeqCst);
                }
                until(&done, "rank 0 done");
                0
            }
        }
    });
    results[0]
}

/// A receive from Q, after its quick misses, looks at every ring: it drains P's message.
#[test]
fn a_message_drained_for_another_receive_ends_the_next_wait_at_once() {
    let q = Rank::from(2);
    let slept = sleeps_after_another_receive_took_it(|t| {
        for _ in 0..2 * QUICK_MISSES {
            assert!(t.try_recv(q, tag(2), 8).expect("recv").is_none());
        }
    });
    assert_eq!(
        slept, 0,
        "rank 0 slept with P's message drained and not asked for"
    );
}

/// A receive from P with another tag takes P's message off the ring in its quick look.
#[test]
fn a_message_taken_in_a_quick_look_for_another_tag_ends_the_next_wait_at_once() {
    let p = Rank::from(1);
    let slept = sleeps_after_another_receive_took_it(|t| {
        assert!(t.try_recv(p, tag(2), 8).expect("recv").is_none());
    });
    assert_eq!(
        slept, 0,
        "rank 0 slept with P's message held and not asked for"
    );
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
    let counted = std::sync::atomic::AtomicBool::new(false);
    let held = group(2, slots, |mut t| {
        let deadline = Instant::now() + Duration::from_secs(60);
        let peer = Rank::from(1 - t.endpoint().rank.index());
        if t.endpoint().rank.index() == 0 {
            // As many as the budget and a thousand more, unless the peer stops reading.
            let (mut sent, mut refused) = (0u32, 0);
            while sent < (cap + 1000) as u32 && refused < 20 {
                match t
                    .try_send_from(peer, tag(sent), &[7; 8], Lend::UntilComplete)
                    .expect("send")
                {
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
            // Alive until the receiver is done (else it may find this rank gone).
            until(&counted, "counted");
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
            counted.store(true, std::sync::atomic::Ordering::SeqCst);
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
        // Room in the pool, which starts full.
        t.small.clear();
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

/// Waits until `token`'s send has completed.
fn complete(t: &mut ShmTransport, token: u64, deadline: Instant) {
    while !t.send_complete(token).expect("send") {
        t.wait(deadline).expect("waiting for the read");
    }
}

/// Receives `tag` into `dst`, waiting for it.
fn recv_into(t: &mut ShmTransport, peer: Rank, tag: Tag, dst: &mut [u8], deadline: Instant) {
    while !t.try_recv_into(peer, tag, dst).expect("recv") {
        t.wait(deadline).expect("waiting for the message");
    }
}

/// A large send from the caller's memory is not copied when it is sent: the receiver
/// reads it from there when it takes it (so it sees what the memory holds then), and
/// the send is in flight until it has.
#[test]
fn a_large_send_is_read_from_the_senders_memory_when_taken() {
    let sent = std::sync::atomic::AtomicBool::new(false);
    let len = 3000;
    let got = group(2, 4, |mut t| {
        let deadline = Instant::now() + Duration::from_secs(20);
        let peer = Rank::from(1 - t.endpoint().rank.index());
        assert!(
            t.link(peer).reads_directly,
            "{} reads {peer} directly",
            t.endpoint().rank
        );
        if t.endpoint().rank.index() == 0 {
            let mut buf: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let SendState::InFlight(token) = t
                .try_send_from(peer, tag(1), &buf, Lend::ForCopy)
                .expect("send")
            else {
                panic!("a {len}-byte send was copied");
            };
            assert_eq!(t.statistics().borrowed_in_flight, 1);
            assert!(
                !t.send_complete(token).expect("send"),
                "complete before the read"
            );
            // Changed after the send: the receiver reads the memory, not a copy.
            buf[0] = 0xee;
            sent.store(true, std::sync::atomic::Ordering::SeqCst);
            complete(&mut t, token, deadline);
            assert_eq!(t.statistics().borrowed_in_flight, 0);
            // A small one still goes through the ring, and so does a large one the
            // receiver may reduce into.
            assert_eq!(
                t.try_send_from(peer, tag(2), &buf[..100], Lend::ForCopy)
                    .expect("send"),
                SendState::Done
            );
            assert_eq!(
                t.try_send_from(peer, tag(3), &buf, Lend::UntilComplete)
                    .expect("send"),
                SendState::Done
            );
            Vec::new()
        } else {
            until(&sent, "sent");
            let mut dst = vec![0u8; len];
            recv_into(&mut t, peer, tag(1), &mut dst, deadline);
            let mut small = vec![0u8; 100];
            recv_into(&mut t, peer, tag(2), &mut small, deadline);
            assert_eq!(small, dst[..100]);
            let mut reduced = vec![0u8; len];
            recv_into(&mut t, peer, tag(3), &mut reduced, deadline);
            assert_eq!(reduced, dst);
            dst
        }
    });
    let mut expected: Vec<u8> = (0..len).map(|i| i as u8).collect();
    expected[0] = 0xee;
    assert_eq!(got[1], expected);
}

/// A message longer than a slot moves whole when the peer reads this rank's memory: the
/// transport says so for the pair (both ends alike), a sender with every ticket taken is
/// told to wait (not refused), and each arrives whole and right. One too long for the
/// ring, to a peer that cannot read it, is refused.
#[test]
fn a_message_longer_than_a_slot_is_read_whole_and_waits_for_a_ticket() {
    let len = 3 * 4096 + 5; // slots hold 4096 bytes
    let got = group(2, 4, |mut t| {
        let deadline = Instant::now() + Duration::from_secs(20);
        let peer = Rank::from(1 - t.endpoint().rank.index());
        assert!(
            t.link(peer).moves_whole,
            "{} moves whole with {peer}",
            t.endpoint().rank
        );
        if t.endpoint().rank.index() == 0 {
            let bufs: Vec<Vec<u8>> = (0..=segment::TICKETS)
                .map(|m| (0..len).map(|i| (i + m) as u8).collect())
                .collect();
            // More messages than tickets: once tickets (or descriptors) run out, the
            // sender is told to wait, not refused and not copied into a slot.
            // A ticket is free again once its send is complete.
            let (mut tokens, mut waited) = (std::collections::VecDeque::new(), 0);
            for (m, buf) in bufs.iter().enumerate() {
                loop {
                    assert!(Instant::now() < deadline, "message {m} never went");
                    match t.try_send_from(peer, tag(m as u32), buf, Lend::ForCopy) {
                        Ok(SendState::InFlight(token)) => break tokens.push_back(token),
                        Ok(SendState::NoRoom) => {
                            waited += 1;
                            let oldest = tokens.pop_front().expect("a send in flight");
                            complete(&mut t, oldest, deadline);
                        }
                        other => panic!("message {m}: {other:?}"),
                    }
                }
            }
            assert!(waited > 0, "{} messages, none waited", bufs.len());
            for token in tokens {
                complete(&mut t, token, deadline);
            }
            Vec::new()
        } else {
            (0..=segment::TICKETS)
                .map(|m| {
                    let mut dst = vec![0u8; len];
                    recv_into(&mut t, peer, tag(m as u32), &mut dst, deadline);
                    dst
                })
                .collect()
        }
    });
    for (m, dst) in got[1].iter().enumerate() {
        let want: Vec<u8> = (0..len).map(|i| (i + m) as u8).collect();
        assert!(*dst == want, "message {m} arrived wrong");
    }
    // Rank 1 cannot read rank 0's memory: rank 0's long message has no way to go.
    group_with(
        2,
        4,
        |r| (r == 1).then_some(SINGLE_COPY),
        |mut t| {
            let peer = Rank::from(1 - t.endpoint().rank.index());
            assert!(
                !t.link(peer).moves_whole,
                "{} moves whole with {peer}",
                t.endpoint().rank
            );
            if t.endpoint().rank.index() == 0 {
                let buf = vec![7u8; len];
                let refused = t.try_send_from(peer, tag(1), &buf, Lend::ForCopy);
                assert!(
                    matches!(refused, Err(TransportError::MessageTooLarge { .. })),
                    "{refused:?}"
                );
            }
        },
    );
}

/// A receiver that waits for another message than the one a sender left in its memory
/// reads that one before it blocks: the sender, waiting for the read before it sends
/// what the receiver waits for, must not wait forever.
#[test]
fn a_message_left_in_memory_that_nobody_asks_for_is_read_before_the_receiver_blocks() {
    let len = 2000;
    let got = group(2, 4, |mut t| {
        let deadline = Instant::now() + Duration::from_secs(10);
        let peer = Rank::from(1 - t.endpoint().rank.index());
        if t.endpoint().rank.index() == 0 {
            let mut buf = vec![5u8; len];
            let SendState::InFlight(token) = t
                .try_send_from(peer, tag(1), &buf, Lend::ForCopy)
                .expect("send")
            else {
                panic!("copied");
            };
            complete(&mut t, token, deadline);
            // The memory is the caller's again: the receiver must hold its own copy.
            buf.fill(6);
            assert_eq!(
                t.try_send_from(peer, tag(2), &[1], Lend::UntilComplete)
                    .expect("send"),
                SendState::Done
            );
            Vec::new()
        } else {
            let mut one = [0u8; 1];
            recv_into(&mut t, peer, tag(2), &mut one, deadline);
            let mut dst = vec![0u8; len];
            recv_into(&mut t, peer, tag(1), &mut dst, deadline);
            dst
        }
    });
    assert_eq!(got[1], vec![5u8; len]);
}

/// A sender that gives up (its call failed) withdraws what it left in its memory: the
/// message is never delivered (no read of memory that is the caller's again), the stall
/// report says why, and the receiver fails with the sender's own failure, naming it.
#[test]
fn a_withdrawn_send_is_never_delivered_and_the_senders_failure_reaches_the_receiver() {
    let withdrawn = std::sync::atomic::AtomicBool::new(false);
    let looked = std::sync::atomic::AtomicBool::new(false);
    let errors = group(2, 4, |mut t| {
        let peer = Rank::from(1 - t.endpoint().rank.index());
        if t.endpoint().rank.index() == 0 {
            let buf = vec![1u8; 2048];
            assert!(matches!(
                t.try_send_from(peer, tag(1), &buf, Lend::ForCopy)
                    .expect("send"),
                SendState::InFlight(_)
            ));
            t.reap_borrowed();
            assert_eq!(t.statistics().borrowed_in_flight, 0);
            withdrawn.store(true, std::sync::atomic::Ordering::SeqCst);
            // Alive until the receiver has looked (then it goes, as a failed rank does).
            until(&looked, "looked");
            String::new()
        } else {
            until(&withdrawn, "withdrawn");
            let mut dst = vec![0u8; 2048];
            assert!(
                !t.try_recv_into(peer, tag(1), &mut dst).expect("recv"),
                "a withdrawn message was delivered"
            );
            let report = t.stall_report(None);
            assert!(
                report.contains("withdrew a message before it was read (they failed): rank 0"),
                "{report}"
            );
            looked.store(true, std::sync::atomic::Ordering::SeqCst);
            let deadline = Instant::now() + Duration::from_secs(10);
            let e = loop {
                match t.try_recv_into(peer, tag(1), &mut dst) {
                    Err(e) => break e,
                    Ok(true) => panic!("read a withdrawn message"),
                    Ok(false) => {
                        if let Err(e) = t.wait(deadline) {
                            break e;
                        }
                    }
                }
            };
            e.to_string()
        }
    });
    assert!(errors[1].contains("rank 0"), "{}", errors[1]);
}

/// A pair where one side has single copy off copies through the ring both ways.
#[test]
fn single_copy_off_on_one_side_copies_through_the_ring_both_ways() {
    let len = 3000;
    let got = group_with(
        2,
        4,
        |r| (r == 0).then_some(SINGLE_COPY),
        |mut t| {
            let deadline = Instant::now() + Duration::from_secs(20);
            let peer = Rank::from(1 - t.endpoint().rank.index());
            assert!(
                !t.link(peer).reads_directly,
                "{} reads {peer} directly",
                t.endpoint().rank
            );
            let buf = vec![t.endpoint().rank.index() as u8 + 1; len];
            assert_eq!(
                t.try_send_from(peer, tag(1), &buf, Lend::ForCopy)
                    .expect("send"),
                SendState::Done,
                "{} left its message in memory",
                t.endpoint().rank
            );
            let mut dst = vec![0u8; len];
            recv_into(&mut t, peer, tag(1), &mut dst, deadline);
            dst
        },
    );
    assert_eq!(got, [vec![2u8; len], vec![1u8; len]]);
}

/// A flood of rings (a peer that rang on every message, or anything else holding the bell):
/// a wait takes at most [`BELL_DRAIN`] of them off the bell, whatever is queued, so a
/// flood costs each wait a bounded look instead of holding it for as long as it lasts.
#[test]
fn a_wait_takes_a_bounded_number_of_rings() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let done = AtomicBool::new(false);
    let counts = group(2, 4, |mut t| {
        if t.endpoint().rank.index() == 1 {
            until(&done, "rank 0's wait");
            return (0, 0);
        }
        let ringer = setup::open_bell(None, &bell_path(&t)).expect("the bell, as a peer opens it");
        // As many rings as the bell takes.
        let mut queued = 0;
        while queued < 1_000_000 && (&ringer).write(&[1]).is_ok() {
            queued += 1;
        }
        t.wait(Instant::now() + Duration::from_millis(20))
            .expect("wait");
        let mut left = 0;
        let mut sink = [0u8; 4096];
        while let Ok(n @ 1..) = (&t.bell).read(&mut sink) {
            left += n;
        }
        done.store(true, SeqCst);
        (queued, left)
    });
    let (queued, left) = counts[0];
    assert!(queued > BELL_DRAIN, "only {queued} rings queued");
    assert_eq!(
        queued - left,
        BELL_DRAIN,
        "one wait took {} of {queued} rings",
        queued - left
    );
}

/// Where a rank's bell is announced to its peers.
fn bell_path(t: &ShmTransport) -> String {
    format!("/proc/{}/fd/{}", std::process::id(), t.bell.as_raw_fd())
}

/// The doorbell is reached only as the segment is, through `/proc/<pid>/fd`: a process of
/// this rank's user rings it, one of another user cannot (an abstract socket, the bell's
/// old form, took datagrams from every process of the host).
#[test]
fn only_a_process_of_this_user_rings_the_bell() {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    let rung = group(2, 4, |t| {
        if t.endpoint().rank.index() == 1 {
            return Vec::new();
        }
        let path = bell_path(&t);
        let ring = |uid: Option<u32>| {
            // What any program can do with the path: open it for writing, write a byte.
            let mut sh = std::process::Command::new("/bin/sh");
            sh.args(["-c", r#"exec 3<>"$1" && printf x >&3"#, "sh", &path])
                .stderr(std::process::Stdio::null());
            if let Some(uid) = uid {
                sh.uid(uid).gid(uid);
            }
            let ran = sh.status().expect("/bin/sh").success();
            let mut sink = [0u8; 8];
            let got = (&t.bell).read(&mut sink).unwrap_or(0);
            (uid, ran, got)
        };
        let mut rung = vec![ring(None)];
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        if root {
            rung.push(ring(Some(65534)));
        } else {
            assert!(
                std::env::var_os("CI").is_none(),
                "another user's ring needs root to become that user (CI runs as root)"
            );
            eprintln!(
                "RCOLL-SKIP: only_a_process_of_this_user_rings_the_bell: another user's \
                 ring needs root to become that user"
            );
        }
        rung
    });
    let rung = &rung[0];
    assert_eq!(rung[0], (None, true, 1), "this user's ring");
    if let Some(other) = rung.get(1) {
        assert_eq!(*other, (Some(65534), false, 0), "another user's ring");
    }
}
