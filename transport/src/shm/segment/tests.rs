//! The rings between two mappings of one segment, and what a hostile peer can write.

use super::*;

/// An unlinked file of this test's own.
fn scratch_file() -> std::fs::File {
    let path = std::env::temp_dir().join(format!(
        "rcoll-segment-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("file");
    std::fs::remove_file(&path).expect("unlink");
    file
}

/// A segment file of `shape`, mapped twice: as its owner (receiver) and as a peer
/// (sender) would, through two mappings of one file.
fn pair(shape: Shape) -> (Arc<Segment>, Arc<Segment>) {
    let file = scratch_file();
    let bytes = shape.bytes().expect("size");
    file.set_len(bytes as u64).expect("len");
    allocate(&file, bytes).expect("allocate");
    let owner = Segment::create(&file, shape).expect("create");
    let peer = Segment::open(&file, shape).expect("open");
    (Arc::new(owner), Arc::new(peer))
}

fn nothing() -> Arc<dyn Fn() + Send + Sync> {
    Arc::new(|| {})
}

const SHAPE: Shape = Shape {
    rings: 2,
    slots: 4,
    slot_bytes: 100,
};

/// The lease of a message that went through a slot.
fn lease(body: Body) -> Lease {
    match body {
        Body::Lent(l) => l,
        other => panic!("expected a slot, got {other:?}"),
    }
}

#[test]
fn messages_arrive_in_order_and_slots_come_back_out_of_order() {
    let (owner, peer) = pair(SHAPE);
    let mut inbox = InRing::new(Arc::clone(&owner), 1);
    let mut outbox = OutRing::new(peer, 1);
    let mut held = Vec::new();
    // Ten rounds through a ring of four slots, holding some messages across rounds
    // and giving them back out of order; the small ones travel inline.
    for i in 0..40u64 {
        let len = (i as usize * 7) % 101;
        if !outbox.has_room(len) {
            // The oldest held message goes back: room again.
            held.remove(0);
            assert!(outbox.has_room(len), "message {i}");
        }
        assert!(outbox.send([i, 1, 2], &vec![i as u8; len]));
        let (h, body) = inbox
            .take(&nothing(), false)
            .expect("published")
            .expect("valid");
        assert_eq!((h.tag[0], h.len), (i, len));
        let bytes = match &body {
            Body::Lent(l) => {
                let mut v = vec![0; l.len()];
                l.read_into(&mut v);
                v
            }
            Body::Inline(b, n) => b[..*n].to_vec(),
            Body::Remote(r) => panic!("{r:?} was not sent"),
        };
        assert_eq!(bytes.len(), len);
        assert!(bytes.iter().all(|&b| b == i as u8), "message {i}");
        assert_eq!(
            matches!(body, Body::Inline(..)),
            len <= INLINE,
            "message {i}"
        );
        if let (Body::Lent(l), 0) = (body, i % 3) {
            held.push(l);
        }
        assert!(inbox.take(&nothing(), false).is_none());
    }
    assert_eq!(inbox.lent(), held.len());
    held.clear();
    assert_eq!(inbox.lent(), 0);
    // Every slot free again: four large messages, and no fifth.
    let mut leases = Vec::new();
    for i in 0..4 {
        assert!(outbox.send([i, 0, 0], &[1; 50]));
        leases.push(lease(
            inbox.take(&nothing(), false).expect("sent").expect("ok").1,
        ));
    }
    assert!(
        !outbox.send([9, 0, 0], &[0; 50]),
        "a fifth message in 4 slots"
    );
    // Inline messages need no slot, only descriptors the receiver has read.
    for i in 0..4 {
        assert!(outbox.send([i, 0, 0], &[7; 8]), "inline {i}");
    }
    assert!(
        !outbox.send([9, 0, 0], &[0; 8]),
        "a fifth unread descriptor"
    );
    assert!(matches!(
        inbox.take(&nothing(), false),
        Some(Ok((Header { len: 8, .. }, Body::Inline(..))))
    ));
    assert!(outbox.send([9, 0, 0], &[0; 8]), "a descriptor was read");
    // The other ring is untouched.
    assert!(!InRing::new(owner, 0).pending());
}

#[test]
fn take_inline_takes_only_the_inline_message_asked_for() {
    let (owner, peer) = pair(SHAPE);
    let mut inbox = InRing::new(owner, 1);
    let mut outbox = OutRing::new(peer, 1);
    let mut dst = [0u8; 5];
    assert!(!inbox.take_inline([1, 2, 3], &mut dst), "nothing sent");
    assert!(outbox.send([1, 2, 3], b"hello"));
    // Another tag (any word of it), another length, a longer destination: left there.
    for tag in [[9, 2, 3], [1, 9, 3], [1, 2, 9]] {
        assert!(!inbox.take_inline(tag, &mut dst), "{tag:?}");
    }
    assert!(!inbox.take_inline([1, 2, 3], &mut [0u8; 4]));
    assert!(!inbox.take_inline([1, 2, 3], &mut [0u8; INLINE + 1]));
    assert_eq!(dst, [0; 5], "nothing written by a refusal");
    assert!(inbox.take_inline([1, 2, 3], &mut dst));
    assert_eq!(&dst, b"hello");
    assert!(!inbox.pending(), "taken");
    // A message through a slot is never taken inline, even of the asked length; the
    // general path takes it, in order, with what follows.
    assert!(outbox.send([4, 0, 0], &[4; 50]));
    assert!(outbox.send([5, 0, 0], &[5; 3]));
    assert!(!inbox.take_inline([4, 0, 0], &mut [0u8; 50]));
    let (h, body) = inbox.take(&nothing(), false).expect("sent").expect("ok");
    assert_eq!((h.tag[0], h.len), (4, 50));
    drop(body);
    let mut three = [0u8; 3];
    assert!(inbox.take_inline([5, 0, 0], &mut three));
    assert_eq!(three, [5; 3]);
    // Descriptors read inline go back to the sender like any other.
    for i in 0..SHAPE.slots as u64 {
        assert!(outbox.send([i, 0, 0], &[1; 8]), "descriptor {i}");
    }
    assert!(!outbox.send([9, 0, 0], &[0; 8]), "every descriptor unread");
    assert!(inbox.take_inline([0, 0, 0], &mut [0u8; 8]));
    assert!(outbox.send([9, 0, 0], &[0; 8]), "one read inline");
}

#[test]
fn a_released_slot_counts_and_wakes_its_sender() {
    let (owner, peer) = pair(SHAPE);
    let mut inbox = InRing::new(owner, 0);
    let mut outbox = OutRing::new(peer, 0);
    let woken = Arc::new(AtomicUsize::new(0));
    let w = Arc::clone(&woken);
    let wake: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        w.fetch_add(1, Ordering::Relaxed);
    });
    let text = b"abcdefghijklmnopqrstuvwxyz0123456789";
    assert!(outbox.send([0; 3], text));
    let (_, body) = inbox.take(&wake, false).expect("published").expect("valid");
    let lease = lease(body);
    let mut got = vec![0; text.len()];
    lease.read_into(&mut got);
    assert_eq!(got, text);
    let before = outbox.released(Ordering::Acquire);
    drop(lease);
    assert_eq!(outbox.released(Ordering::Acquire), before + 1);
    assert_eq!(woken.load(Ordering::Relaxed), 1);
}

#[test]
fn a_peer_that_writes_nonsense_into_its_ring_is_refused() {
    let (owner, peer) = pair(SHAPE);
    let mut published = 0u64;
    let mut publish = |slot: u64, len: u64| {
        peer.desc(0, published)[D_LEN_SLOT].store(len | slot << 32, Ordering::Relaxed);
        published += 1;
        peer.desc(0, published - 1)[D_SEQ].store(published, Ordering::Release);
    };
    let mut inbox = InRing::new(Arc::clone(&owner), 0);
    // A slot that does not exist.
    publish(7, 100);
    assert_eq!(
        inbox.take(&nothing(), false).map(|r| r.err()),
        Some(Some(Refused::NoSuchSlot(7)))
    );
    // A slot lent already: a second lease would alias the first.
    publish(1, 30);
    let first = inbox
        .take(&nothing(), false)
        .expect("published")
        .expect("valid");
    publish(1, 30);
    assert_eq!(
        inbox.take(&nothing(), false).map(|r| r.err()),
        Some(Some(Refused::SlotLent(1)))
    );
    drop(first);
    // A length past the slot.
    publish(2, 101);
    assert_eq!(
        inbox.take(&nothing(), false).map(|r| r.err()),
        Some(Some(Refused::TooLong(101)))
    );
    // An inline message longer than a descriptor holds.
    publish(NO_SLOT, INLINE as u64 + 1);
    assert_eq!(
        inbox.take(&nothing(), false).map(|r| r.err()),
        Some(Some(Refused::InlineTooLong(INLINE as u64 + 1)))
    );
    // A sequence number that is not the next one: nothing arrived.
    peer.desc(0, published)[D_SEQ].store(published + 5, Ordering::Release);
    assert!(inbox.take(&nothing(), false).is_none());
}

/// The remote message of a body.
fn remote(body: Body) -> Remote {
    match body {
        Body::Remote(r) => r,
        other => panic!("expected a message in the sender's memory, got {other:?}"),
    }
}

#[test]
fn a_single_copy_ticket_is_done_only_once_its_message_was_read_or_dropped() {
    let (owner, peer) = pair(SHAPE);
    let mut inbox = InRing::new(Arc::clone(&owner), 0);
    let mut outbox = OutRing::new(peer, 0);
    let (t, g) = outbox.send_remote([1, 2, 3], 0x1000, 100).expect("sent");
    let (h, body) = inbox
        .take(&nothing(), true)
        .expect("published")
        .expect("valid");
    assert_eq!((h.tag, h.len), ([1, 2, 3], 100));
    let mut r = remote(body);
    assert_eq!((r.addr, r.len), (0x1000, 100));
    assert!(!outbox.ticket_done(t, g), "done before the read");
    let released = outbox.released(Ordering::Acquire);
    r.begin().expect("posted");
    assert!(!outbox.ticket_done(t, g), "done during the read");
    assert_eq!(outbox.withdraw(t, g, false), Withdrawal::Reading);
    r.finish().expect("not withdrawn");
    assert!(outbox.ticket_done(t, g));
    assert_eq!(outbox.released(Ordering::Acquire), released + 1);
    // Dropped unread (a failed call): done too.
    let (t, g) = outbox.send_remote([0; 3], 0x2000, 10).expect("sent");
    drop(remote(
        inbox.take(&nothing(), true).expect("sent").expect("ok").1,
    ));
    assert!(outbox.ticket_done(t, g));
    // Every ticket in flight: no more sends until one is done.
    let mut held = Vec::new();
    for i in 0..TICKETS {
        let sent = outbox
            .send_remote([i as u64, 0, 0], 0x3000, 10)
            .expect("a ticket");
        held.push((
            sent,
            remote(inbox.take(&nothing(), true).expect("sent").expect("ok").1),
        ));
    }
    assert!(
        outbox.send_remote([0; 3], 0x3000, 10).is_none(),
        "a ticket too many"
    );
    let ((t, g), r) = held.pop().expect("held");
    drop(r);
    assert!(outbox.ticket_done(t, g));
    assert!(outbox.send_remote([0; 3], 0x3000, 10).is_some());
}

#[test]
fn a_withdrawn_or_abandoned_single_copy_send_fails_its_reader() {
    let (owner, peer) = pair(SHAPE);
    let mut inbox = InRing::new(Arc::clone(&owner), 0);
    let mut outbox = OutRing::new(peer, 0);
    // Withdrawn before the read began.
    let (t, g) = outbox.send_remote([0; 3], 0x1000, 100).expect("sent");
    let mut r = remote(inbox.take(&nothing(), true).expect("sent").expect("ok").1);
    assert_eq!(outbox.withdraw(t, g, false), Withdrawal::Withdrawn);
    assert_eq!(r.begin(), Err(Withdrawn::Before));
    // Given up during the read.
    let (t, g) = outbox.send_remote([0; 3], 0x1000, 100).expect("sent");
    let mut r = remote(inbox.take(&nothing(), true).expect("sent").expect("ok").1);
    r.begin().expect("posted");
    assert_eq!(outbox.withdraw(t, g, true), Withdrawal::Withdrawn);
    assert_eq!(r.finish(), Err(Withdrawn::During));
    // Read already: nothing to withdraw.
    let (t, g) = outbox.send_remote([0; 3], 0x1000, 100).expect("sent");
    let mut r = remote(inbox.take(&nothing(), true).expect("sent").expect("ok").1);
    r.begin().expect("posted");
    r.finish().expect("read");
    assert_eq!(outbox.withdraw(t, g, true), Withdrawal::Done);
}

#[test]
fn a_message_in_the_senders_memory_is_refused_unless_allowed_or_with_a_bad_ticket() {
    let (owner, peer) = pair(SHAPE);
    let mut inbox = InRing::new(Arc::clone(&owner), 0);
    let mut outbox = OutRing::new(Arc::clone(&peer), 0);
    outbox.send_remote([0; 3], 0x1000, 100).expect("sent");
    assert_eq!(
        inbox.take(&nothing(), false).map(|r| r.err()),
        Some(Some(Refused::RemoteNotAllowed))
    );
    // A ticket past the table, written by hand.
    let i = 1;
    peer.desc(0, i)[D_LEN_SLOT].store(100 | REMOTE << 32, Ordering::Relaxed);
    peer.desc(0, i)[D_DATA + 1].store(TICKETS as u64 | 7 << 32, Ordering::Relaxed);
    peer.desc(0, i)[D_SEQ].store(i + 1, Ordering::Release);
    assert_eq!(
        inbox.take(&nothing(), true).map(|r| r.err()),
        Some(Some(Refused::NoSuchTicket(TICKETS as u64)))
    );
    // Longer than WHOLE_MAX: refused, and never sent so. (Longer than a slot is no
    // limit: the receiver reads it into the destination it asks it for.)
    let too_long = WHOLE_MAX as u64 + 1;
    let i = 2;
    peer.desc(0, i)[D_LEN_SLOT].store(too_long | REMOTE << 32, Ordering::Relaxed);
    peer.desc(0, i)[D_SEQ].store(i + 1, Ordering::Release);
    assert_eq!(
        inbox.take(&nothing(), true).map(|r| r.err()),
        Some(Some(Refused::RemoteTooLong(too_long)))
    );
    let mut outbox = OutRing::new(peer, 1);
    assert!(outbox.send_remote([0; 3], 0x1000, WHOLE_MAX + 1).is_none());
    assert!(outbox.send_remote([0; 3], 0x1000, 101).is_some());
}

#[test]
fn a_mapping_checks_the_file_and_its_header() {
    let file = scratch_file();
    // Too short for the layout: refused before anything is mapped.
    file.set_len(100).expect("len");
    assert!(Segment::open(&file, SHAPE).is_err());
    // Long enough but no header: not a segment.
    file.set_len(SHAPE.bytes().expect("size") as u64)
        .expect("len");
    let e = Segment::open(&file, SHAPE).expect_err("no magic");
    assert!(e.to_string().contains("not an rcoll segment"), "{e}");
    // A header of another shape.
    Segment::create(&file, SHAPE).expect("create");
    let other = Shape { slots: 2, ..SHAPE };
    assert!(Segment::open(&file, other).is_err());
    assert!(Shape {
        rings: usize::MAX,
        ..SHAPE
    }
    .bytes()
    .is_none());
}

/// [`hostile_descriptors`] over 2,000 descriptors of generated words (a fixed xorshift
/// sequence), and over words made to hit each refusal and the lending of every slot: the
/// receiver takes or refuses each, never lends a slot twice (the fuzz target
/// `shm_descriptors` runs the same on what libFuzzer makes).
#[test]
fn a_stream_of_hostile_descriptors_is_taken_or_refused() {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut data = Vec::new();
    for i in 0..2000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len_slot = match i % 5 {
            // A real slot and a fitting length, a slot too far, an inline message,
            // a remote one, and noise.
            0 => ((x % 4) << 32) | ((x >> 40) % 201),
            1 => (4 + x % 100) << 32 | 10,
            2 => (NO_SLOT << 32) | ((x >> 40) % 80),
            3 => REMOTE << 32 | x >> 40,
            _ => x,
        };
        // The first word: published in order (not a multiple of 7), single copy allowed
        // on odd ones.
        let words = [1 + i % 2, x, x >> 3, x >> 5, len_slot, x, x >> 11, x >> 17];
        data.extend(words.iter().flat_map(|w| w.to_le_bytes()));
    }
    hostile_descriptors(&data);
}
