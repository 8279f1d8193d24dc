//! The TCP backend and its bootstrap on loopback: every pair exchanging messages, large
//! ones straight from the caller's memory, strangers and trickling peers at setup, and
//! hostile peers (garbage, a gigabyte header, a flood) held to their budget.
use super::bootstrap::{connect, Options};
use super::*;
use std::net::{SocketAddr, TcpListener};

fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn options(rank: usize, nranks: usize, root: SocketAddr) -> Options {
    Options {
        rank,
        nranks,
        root,
        unique_id: Options::default_unique_id(root, nranks),
        bind: None,
        timeout: Duration::from_secs(20),
        window: 4,
        host: "localhost".into(),
        cpus: 0,
    }
}

/// Runs `body` on every rank of a fresh loopback group, one thread each.
fn group<R: Send>(n: usize, body: impl Fn(TcpTransport) -> R + Sync) -> Vec<R> {
    let root = free_port();
    std::thread::scope(|s| {
        let body = &body;
        let hs: Vec<_> = (0..n)
            .map(|r| s.spawn(move || body(connect(&options(r, n, root)).expect("bootstrap"))))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn tag(transfer: u32, segment: u32) -> Tag {
    Tag {
        collective: 1,
        channel: 0,
        transfer,
        segment,
        schedule: 5,
    }
}

fn recv_blocking(
    t: &mut TcpTransport,
    peer: Rank,
    tag: Tag,
    len: usize,
) -> Result<Payload, TransportError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(p) = t.try_recv(peer, tag, len)? {
            return Ok(p);
        }
        assert!(Instant::now() < deadline, "message never came");
        t.wait(deadline)?;
    }
}

fn send_blocking(
    t: &mut TcpTransport,
    peer: Rank,
    tag: Tag,
    mut p: Payload,
) -> Result<(), TransportError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Some(back) = t.try_send(peer, tag, p)? {
        p = back;
        t.wait(deadline)?;
    }
    Ok(())
}

fn send_slice_blocking(
    t: &mut TcpTransport,
    peer: Rank,
    tag: Tag,
    data: &[u8],
) -> Result<(), TransportError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while t.try_send_from(peer, tag, data, Lend::No)? == SendState::NoRoom {
        t.wait(deadline)?;
    }
    Ok(())
}

#[test]
fn every_pair_exchanges_large_and_empty_messages() {
    let n = 4;
    let results = group(n, |mut t| -> Result<(), TransportError> {
        let me = t.endpoint().rank.index();
        // 40 messages per peer through a window of 4: exercises credits and partial writes.
        for k in 0..40u32 {
            for peer in (0..n).filter(|&p| p != me) {
                let len = if k % 10 == 0 { 0 } else { 100_000 + k as usize };
                let mut p = t.alloc(len);
                p.as_bytes_mut().fill((me * 16 + k as usize) as u8);
                send_blocking(&mut t, Rank::from(peer), tag(k, me as u32), p)?;
            }
            for peer in (0..n).filter(|&p| p != me) {
                let len = if k % 10 == 0 { 0 } else { 100_000 + k as usize };
                let got = recv_blocking(&mut t, Rank::from(peer), tag(k, peer as u32), len)?;
                assert!(got
                    .as_bytes()
                    .iter()
                    .all(|&b| b == (peer * 16 + k as usize) as u8));
                t.recycle(got);
            }
        }
        Ok(())
    });
    for r in results {
        r.unwrap();
    }
}

#[test]
fn messages_larger_than_the_socket_buffers_go_straight_from_the_callers_memory() {
    let big: Vec<u8> = (0..24 << 20).map(|i: usize| (i % 251) as u8).collect();
    let results = group(2, |mut t| -> Result<(), TransportError> {
        if t.endpoint().rank == Rank(0) {
            for k in 0..3 {
                send_slice_blocking(&mut t, Rank(1), tag(k, 0), &big)?;
            }
            held_until_received(&mut t)?;
        } else {
            let all: Vec<_> = (0..3).map(|k| (tag(k, 0), &big[..])).collect();
            receive_then_release(&mut t, &all)?;
        }
        Ok(())
    });
    for r in results {
        r.unwrap();
    }
}

/// Rank 0 keeps its connection up until rank 1 has every message
/// ([`receive_then_release`]).
fn held_until_received(t: &mut TcpTransport) -> Result<(), TransportError> {
    recv_blocking(t, Rank(1), tag(9, 9), 0).map(drop)
}

/// Rank 1 receives `messages` from rank 0 in turn, each intact, then lets rank 0 go.
fn receive_then_release(
    t: &mut TcpTransport,
    messages: &[(Tag, &[u8])],
) -> Result<(), TransportError> {
    for (i, (tag, bytes)) in messages.iter().enumerate() {
        let got = recv_blocking(t, Rank(0), *tag, bytes.len())?;
        assert!(got.as_bytes() == *bytes, "message {i} arrived intact");
    }
    let done = t.alloc(0);
    send_blocking(t, Rank(0), tag(9, 9), done)
}

#[test]
fn a_send_behind_a_queued_message_waits_for_it_and_only_the_rest_is_copied() {
    let big: Vec<u8> = (0..24 << 20).map(|i: usize| (i % 251) as u8).collect();
    let second: Vec<u8> = (0..1 << 20).map(|i: usize| (i % 241) as u8).collect();
    // Rank 1 reads nothing until rank 0 has tried its second send (or 10 s, if rank 0
    // failed before: its transport is gone then, and rank 1 fails too, never hangs).
    let tried = std::sync::atomic::AtomicBool::new(false);
    let results = group(2, |mut t| -> Result<(), TransportError> {
        if t.endpoint().rank == Rank(0) {
            // More than the sockets hold: part written, the rest queued.
            assert_eq!(
                t.try_send_from(Rank(1), tag(0, 0), &big, Lend::No)?,
                SendState::Done
            );
            assert!(t.copied > 0, "the socket took all of 24 MiB at once");
            assert!(
                t.copied < big.len() as u64,
                "the whole message was copied ({} B), not what the socket left",
                t.copied
            );
            let copied = t.copied;
            assert!(
                t.try_send_from(Rank(1), tag(1, 0), &second, Lend::No)? == SendState::NoRoom,
                "a send behind a queued message was taken (copied) instead of waiting"
            );
            assert_eq!(t.copied, copied, "the refused send copied");
            tried.store(true, std::sync::atomic::Ordering::Release);
            send_slice_blocking(&mut t, Rank(1), tag(1, 0), &second)?;
            held_until_received(&mut t)?;
        } else {
            let until = Instant::now() + Duration::from_secs(10);
            while !tried.load(std::sync::atomic::Ordering::Acquire) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            receive_then_release(&mut t, &[(tag(0, 0), &big[..]), (tag(1, 0), &second[..])])?;
        }
        Ok(())
    });
    for r in results {
        r.unwrap();
    }
}

#[test]
fn a_stranger_with_another_unique_id_is_refused() {
    let root = free_port();
    let (a, b) = std::thread::scope(|s| {
        let root_side = s.spawn(move || {
            connect(&Options {
                timeout: Duration::from_millis(1500),
                ..options(0, 2, root)
            })
        });
        let stranger = s.spawn(move || {
            connect(&Options {
                unique_id: 42,
                ..options(1, 2, root)
            })
        });
        (root_side.join().unwrap(), stranger.join().unwrap())
    });
    let stranger_err = b.err().expect("the stranger is refused");
    assert!(
        stranger_err
            .to_string()
            .contains("does not prove this job's secret"),
        "{stranger_err}"
    );
    let root_err = a.err().expect("the root never completes its group");
    assert!(root_err.to_string().contains("ranks 1"), "{root_err}");
}

/// A "root" that answers the challenge one byte every 100 ms: the member's read has a
/// deadline for the whole message (before, each `read()` got the whole timeout again,
/// and 57 bytes stretched a 1 s setup to 5.7 s).
#[test]
fn a_trickling_peer_cannot_stretch_the_setup_deadline() {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let root = listener.local_addr().unwrap();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut challenge = [0u8; bootstrap::wire::PREFIX + bootstrap::wire::NONCE];
        s.read_exact(&mut challenge).unwrap();
        let proof = bootstrap::wire::Message::Proof {
            nonce: [1; bootstrap::wire::NONCE],
            mac: [2; bootstrap::wire::MAC],
        }
        .encode();
        for b in proof {
            if s.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let start = Instant::now();
    let e = connect(&Options {
        timeout: Duration::from_secs(1),
        ..options(1, 2, root)
    })
    .err()
    .expect("no group with a trickling root");
    let took = start.elapsed();
    assert!(took < Duration::from_millis(2500), "took {took:?}: {e}");
    assert!(e.to_string().contains("deadline"), "{e}");
    fake.join().unwrap();
}

/// Rank 0 as a transport, and rank 1 as a raw socket the test writes whatever it likes
/// into (a hostile or broken peer).
/// Until every byte the socket to `peer` sent is acknowledged (`ss` shows no
/// `unacked:` count for the connection; at most 10 s): from then on only the peer reading
/// makes the socket writable again.
/// Waits (up to 10 s) until `bytes` bytes from `peer` wait in `t`'s socket, unread.
fn until_arrived(t: &TcpTransport, peer: Rank, bytes: usize) {
    let stream = &t.peers[peer.index()].as_ref().expect("a peer").stream;
    let until = Instant::now() + Duration::from_secs(10);
    let mut buf = vec![0u8; bytes];
    while stream.peek(&mut buf).map_or(0, |n| n) < bytes {
        assert!(
            Instant::now() < until,
            "{bytes} bytes from {peer} never arrived"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn until_acked(t: &TcpTransport, peer: Rank) {
    let stream = &t.peers[peer.index()].as_ref().expect("a peer").stream;
    let (here, there) = (
        stream.local_addr().expect("local address"),
        stream.peer_addr().expect("peer address"),
    );
    let filter = format!("( sport = :{} and dport = :{} )", here.port(), there.port());
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let out = std::process::Command::new("ss")
            .args(["-tinH", "state", "established", &filter])
            .output()
            .expect("ss (iproute2)");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains(&here.port().to_string()),
            "ss found no connection {here} -> {there}: {text}"
        );
        if !text.contains("unacked:") {
            return;
        }
        assert!(
            Instant::now() < until,
            "still unacknowledged after 10 s: {text}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn with_raw_peer() -> (TcpTransport, std::net::TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let raw = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (ours, _) = l.accept().unwrap();
    let t = TcpTransport::new(Rank(0), vec![None, Some(ours)], 4).unwrap();
    (t, raw)
}

/// Waits for `tag` from rank 1 until an error or `limit`.
fn recv_until_error(t: &mut TcpTransport, limit: Duration) -> Option<TransportError> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        match t.try_recv(Rank(1), tag(7, 7), 0) {
            Err(e) => return Some(e),
            Ok(Some(_)) => panic!("a message that was never sent"),
            Ok(None) => {
                if let Err(e) = t.wait(deadline.min(Instant::now() + Duration::from_millis(50))) {
                    return Some(e);
                }
            }
        }
    }
    None
}

#[test]
fn garbage_from_a_peer_is_a_protocol_error_naming_it() {
    use std::io::Write;
    let (mut t, mut raw) = with_raw_peer();
    raw.write_all(b"GET / HTTP/1.1\r\nHost: rcoll\r\n\r\n-----")
        .unwrap();
    let e = recv_until_error(&mut t, Duration::from_secs(10)).expect("an error");
    match &e {
        TransportError::Protocol { peer, reason, .. } => {
            assert_eq!(*peer, Rank(1));
            assert!(reason.contains("bad magic"), "{reason}");
        }
        other => panic!("expected a protocol error, got {other}"),
    }
    // Every later call says the same.
    assert!(matches!(
        t.try_recv(Rank(1), tag(1, 1), 0),
        Err(TransportError::Protocol { .. })
    ));
}

#[test]
fn a_header_claiming_a_gigabyte_reserves_nothing_until_the_bytes_come() {
    use std::io::Write;
    let (mut t, mut raw) = with_raw_peer();
    let header = Header {
        kind: Kind::Data,
        tag: tag(1, 1),
        len: frame::MAX_PAYLOAD,
    }
    .encode();
    raw.write_all(&header).unwrap();
    raw.write_all(&[0u8; 1000]).unwrap();
    assert!(recv_until_error(&mut t, Duration::from_millis(500)).is_none());
    let reserved = t.peers[1].as_ref().unwrap().decoder.buffered_capacity();
    assert!(
        reserved <= frame::RESERVE,
        "a 1 GiB header made the receiver reserve {} MiB",
        reserved >> 20
    );
}

#[test]
fn a_peer_that_floods_is_held_to_its_budget() {
    use std::io::Write;
    let (mut t, mut raw) = with_raw_peer();
    t.peer_budget = 32 << 20;
    let chunk = vec![7u8; 4 << 20];
    let flood = std::thread::spawn(move || {
        raw.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut sent = 0usize;
        for k in 0..128u32 {
            let header = Header {
                kind: Kind::Data,
                tag: tag(100 + k, 0),
                len: chunk.len() as u64,
            }
            .encode();
            if raw.write_all(&header).is_err() || raw.write_all(&chunk).is_err() {
                break;
            }
            sent += chunk.len();
        }
        (sent, raw)
    });
    // The engine keeps asking for a message the peer never sends.
    assert!(recv_until_error(&mut t, Duration::from_secs(6)).is_none());
    let held_mib = t.peers[1].as_ref().unwrap().held >> 20;
    let (sent, _raw) = flood.join().unwrap();
    assert!(sent < 256 << 20, "the peer got {sent} bytes through");
    assert!(held_mib <= 36, "held {held_mib} MiB past a 32 MiB budget");
    // Taking what arrived lets the rest come.
    let got = t.try_recv(Rank(1), tag(100, 0), 4 << 20).unwrap();
    assert!(got.is_some());
}

/// Rank 0 of a group whose other `n - 1` ranks are raw sockets driven by the test.
fn with_raw_peers(n: usize) -> (TcpTransport, Vec<std::net::TcpStream>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut ours = vec![None];
    let mut raws = Vec::new();
    for _ in 1..n {
        raws.push(std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap());
        ours.push(Some(l.accept().unwrap().0));
    }
    (TcpTransport::new(Rank(0), ours, 4).unwrap(), raws)
}

/// A peer writing `count` messages of `len` bytes (tags from `first`), until the socket
/// stops taking them for 2 s: the bytes it got through, and the socket.
fn flood(
    mut raw: std::net::TcpStream,
    first: u32,
    count: u32,
    len: usize,
) -> std::thread::JoinHandle<(usize, std::net::TcpStream)> {
    use std::io::Write;
    std::thread::spawn(move || {
        raw.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let chunk = vec![7u8; len];
        let mut sent = 0usize;
        for k in 0..count {
            let header = Header {
                kind: Kind::Data,
                tag: tag(first + k, 0),
                len: len as u64,
            }
            .encode();
            if raw.write_all(&header).is_err() || raw.write_all(&chunk).is_err() {
                break;
            }
            sent += len;
        }
        (sent, raw)
    })
}

/// Two peers flood this rank with messages it does not ask for, while it waits for a third:
/// together they are held to the rank's whole budget (16 MiB here), not to a per-peer
/// budget each (64 MiB); then the awaited peer's message, behind 8 MiB of others, still
/// comes past the full budget.
#[test]
fn peers_flooding_together_are_held_to_one_budget_and_the_awaited_one_still_comes() {
    let (mut t, mut raws) = with_raw_peers(4);
    t.peer_budget = 64 << 20;
    t.recv_budget = 16 << 20;
    let third = raws.pop().unwrap();
    let floods: Vec<_> = raws
        .into_iter()
        .enumerate()
        .map(|(i, raw)| flood(raw, 100 + 1000 * i as u32, 128, 4 << 20))
        .collect();
    // The engine asks rank 3, which sends nothing yet, until both floods stall.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !floods.iter().all(|f| f.is_finished()) {
        assert!(Instant::now() < deadline, "the floods never stalled");
        assert!(t.try_recv(Rank(3), tag(7, 7), 8).unwrap().is_none());
        t.wait(Instant::now() + Duration::from_millis(20)).unwrap();
    }
    let sent: Vec<usize> = floods.into_iter().map(|f| f.join().unwrap().0).collect();
    let held = |t: &TcpTransport, r: usize| t.peers[r].as_ref().unwrap().held;
    let (one, two) = (held(&t, 1), held(&t, 2));
    // The budget, and at most a message each that was being read as it filled.
    assert!(
        one + two <= (16 + 2 * 4) << 20,
        "held {} + {} MiB past a 16 MiB budget",
        one >> 20,
        two >> 20
    );
    assert!(sent.iter().all(|&b| b < 256 << 20), "sent {sent:?}");
    // Rank 3: 8 MiB it was not asked for, then the awaited message.
    let third = flood(third, 500, 2, 4 << 20);
    let (_, mut third) = third.join().unwrap();
    {
        use std::io::Write;
        let header = Header {
            kind: Kind::Data,
            tag: tag(7, 7),
            len: 8,
        }
        .encode();
        third.write_all(&header).unwrap();
        third.write_all(&[9u8; 8]).unwrap();
    }
    let got = loop {
        assert!(Instant::now() < deadline, "the awaited message never came");
        if let Some(p) = t.try_recv(Rank(3), tag(7, 7), 8).unwrap() {
            break p;
        }
        t.wait(Instant::now() + Duration::from_millis(20)).unwrap();
    };
    assert_eq!(got.as_bytes(), &[9u8; 8]);
    // Taking what arrived from the floods lets more of it come.
    assert!(t.try_recv(Rank(1), tag(100, 0), 4 << 20).unwrap().is_some());
}

#[test]
fn silent_strangers_at_the_root_hold_up_no_one() {
    // Two connections that never say a word reach the root first; the real ranks,
    // arriving after them, still form the group at once (the root serves connections
    // concurrently instead of waiting for each hello in turn: served in turn, the first
    // stranger alone would use up the whole 5 s setup deadline).
    let root = free_port();
    let opts = |r| Options {
        timeout: Duration::from_secs(5),
        ..options(r, 3, root)
    };
    let ranks = std::thread::scope(|s| {
        let mut hs = vec![s.spawn(move || connect(&opts(0)))];
        // The strangers connect as soon as the root listens; the real ranks only then.
        let until = Instant::now() + Duration::from_secs(10);
        let _silent: Vec<std::net::TcpStream> = (0..2)
            .map(|_| loop {
                match std::net::TcpStream::connect(root) {
                    Ok(c) => break c,
                    Err(e) => assert!(Instant::now() < until, "the root never listened: {e}"),
                }
                std::thread::sleep(Duration::from_millis(1));
            })
            .collect();
        hs.extend((1..3).map(|r| s.spawn(move || connect(&opts(r)))));
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    for (r, t) in ranks.iter().enumerate() {
        assert!(t.is_ok(), "rank {r}: {:?}", t.as_ref().err());
    }
}

#[test]
fn a_rank_that_never_arrives_is_a_bootstrap_timeout() {
    let root = free_port();
    let err = connect(&Options {
        timeout: Duration::from_millis(300),
        ..options(0, 3, root)
    })
    .err()
    .unwrap();
    assert!(matches!(err, TransportError::Bootstrap { .. }), "{err}");
    assert!(err.to_string().contains("1, 2"), "{err}");
}

#[test]
fn a_closed_peer_and_an_abort_are_reported() {
    let results = group(3, |mut t| {
        match t.endpoint().rank.index() {
            0 => {
                t.abort("stop now");
                None
            }
            1 => Some(recv_blocking(&mut t, Rank(0), tag(0, 0), 1).map(|_| ())),
            _ => {
                drop(t); // rank 2 goes away
                None
            }
        }
    });
    let err = results[1].clone().unwrap().unwrap_err();
    assert!(
        matches!(&err, TransportError::Aborted { by: Rank(0), reason, .. } if reason == "stop now")
            || matches!(&err, TransportError::PeerClosed { .. }),
        "{err}"
    );
}

/// Receives `tag` from `peer` into `dst`, waiting up to 20 s.
fn recv_into_blocking(
    t: &mut TcpTransport,
    peer: Rank,
    tag: Tag,
    dst: &mut [u8],
) -> Result<(), TransportError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !t.try_recv_into(peer, tag, dst)? {
        assert!(Instant::now() < deadline, "message {tag} never came");
        t.wait(deadline)?;
    }
    Ok(())
}

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + seed * 7) % 253) as u8)
        .collect()
}

/// Segments of one transfer, asked for before they come: each is read from the socket
/// into its destination (none through a buffer of the transport's), and arrives exact.
#[test]
fn large_messages_asked_for_land_straight_in_their_destinations() {
    let (segments, len) = (12u32, 300_000usize);
    let asked = std::sync::Barrier::new(2);
    let results = group(2, |mut t| -> Result<u64, TransportError> {
        if t.endpoint().rank == Rank(1) {
            asked.wait();
            for k in 0..segments {
                let data = pattern(k as usize, len);
                let deadline = Instant::now() + Duration::from_secs(20);
                while t.try_send_from(Rank(0), tag(3, k), &data, Lend::No)? == SendState::NoRoom {
                    t.wait(deadline)?;
                }
            }
            let _ = recv_blocking(&mut t, Rank(0), tag(9, 9), 0)?;
        } else {
            let mut dst = vec![0u8; segments as usize * len];
            let mut chunks = dst.chunks_mut(len);
            let first = chunks.next().unwrap();
            assert!(!t.try_recv_into(Rank(1), tag(3, 0), first)?);
            asked.wait();
            recv_into_blocking(&mut t, Rank(1), tag(3, 0), first)?;
            for (k, d) in chunks.enumerate() {
                recv_into_blocking(&mut t, Rank(1), tag(3, k as u32 + 1), d)?;
            }
            for (k, d) in dst.chunks(len).enumerate() {
                assert!(d == pattern(k, len), "segment {k} differs");
            }
            let done = t.alloc(0);
            send_blocking(&mut t, Rank(1), tag(9, 9), done)?;
        }
        Ok(t.statistics().placed_receives)
    });
    let placed = results.into_iter().map(Result::unwrap).collect::<Vec<_>>();
    assert_eq!(placed[0], u64::from(segments), "read straight into place");
}

/// Writes the header of a data frame of `tag` carrying `len` bytes to `raw`.
fn raw_header(raw: &mut std::net::TcpStream, tag: Tag, len: usize) {
    let header = Header {
        kind: Kind::Data,
        tag,
        len: len as u64,
    }
    .encode();
    raw.write_all(&header).unwrap();
}

/// Writes a data frame of `tag` carrying `payload` to `raw`.
fn raw_frame(raw: &mut std::net::TcpStream, tag: Tag, payload: &[u8]) {
    raw_header(raw, tag, payload.len());
    raw.write_all(payload).unwrap();
}

/// A message whose receive began reading it into its destination and then waits for
/// something behind it (the engine does when a send of its blocks first): the rest of the
/// message is read aside, the message behind it arrives, and the message is still whole
/// and exact in the destination it began in. Asked with other memory, it is an error
/// naming the peer, never a mix of two buffers.
#[test]
fn a_message_begun_in_place_that_its_receive_stops_asking_for_unblocks_the_stream() {
    let (mut t, raw) = with_raw_peer();
    let len = 1 << 20;
    let data = pattern(5, len);
    let (first, second, behind) = (tag(4, 0), tag(4, 1), tag(4, 2));
    let mut w = raw.try_clone().unwrap();
    // The header and the first 100 kB of the first message, as a sender sends them.
    raw_header(&mut w, first, len);
    w.write_all(&data[..100_000]).unwrap();
    let mut dst = vec![0u8; len];
    let deadline = Instant::now() + Duration::from_secs(5);
    while !matches!(t.peers[1].as_ref().unwrap().direct.claim.as_ref(), Some(c) if c.got >= 100_000)
    {
        assert!(!t.try_recv_into(Rank(1), first, &mut dst).unwrap());
        assert!(Instant::now() < deadline, "the first 100 kB never came");
    }
    // The rest, a second large message and a small one behind them.
    let writer = std::thread::spawn(move || {
        w.write_all(&data[100_000..]).unwrap();
        raw_frame(&mut w, second, &pattern(6, len));
        raw_frame(&mut w, behind, b"behind");
        w
    });
    // The receive of the first stops asking; the rank waits for what is behind.
    let got = recv_blocking(&mut t, Rank(1), behind, 6).expect("the message behind arrives");
    assert_eq!(got.as_bytes(), b"behind");
    let mut w = writer.join().unwrap();
    assert!(t.try_recv_into(Rank(1), first, &mut dst).unwrap());
    assert!(
        dst == pattern(5, len),
        "the first message is whole and exact"
    );
    // The second was read aside whole: it is copied into any destination.
    let mut other = vec![0u8; len];
    assert!(t.try_recv_into(Rank(1), second, &mut other).unwrap());
    assert!(other == pattern(6, len));

    // A third begins in one buffer and is asked for with another.
    let third = tag(4, 3);
    let data = pattern(7, len);
    raw_header(&mut w, third, len);
    w.write_all(&data[..50_000]).unwrap();
    let mut dst = vec![0u8; len];
    let deadline = Instant::now() + Duration::from_secs(5);
    while !matches!(t.peers[1].as_ref().unwrap().direct.claim.as_ref(), Some(c) if c.got >= 50_000)
    {
        assert!(!t.try_recv_into(Rank(1), third, &mut dst).unwrap());
        assert!(Instant::now() < deadline, "the third message never began");
    }
    let mut elsewhere = vec![0u8; len];
    match t.try_recv_into(Rank(1), third, &mut elsewhere) {
        Err(TransportError::Misuse { peer, tag, .. }) => {
            assert_eq!((peer, tag), (Rank(1), third));
        }
        other => panic!("asked with other memory: {other:?}"),
    }
    drop(w);
}

/// A rank waiting on one peer does not read the sockets of the others, idle ones, at
/// every poll (one `poll` for them all); and what those peers send later still arrives.
#[test]
fn idle_peers_cost_one_poll_not_a_read_each() {
    let n = 5;
    let quiet_done = std::sync::Barrier::new(n);
    let received = std::sync::Barrier::new(n);
    let results = group(n, |mut t| {
        let me = t.endpoint().rank.index();
        if me == 0 {
            // Everything the peers sent during setup is read; then nothing comes.
            for _ in 0..10 {
                assert!(t.try_recv(Rank::from(1), tag(0, 0), 8).unwrap().is_none());
            }
            let before = t.reads;
            for _ in 0..100 {
                assert!(t.try_recv(Rank::from(1), tag(0, 0), 8).unwrap().is_none());
            }
            let reads = t.reads - before;
            quiet_done.wait();
            for r in 1..n {
                let p = recv_blocking(&mut t, Rank::from(r), tag(0, 0), 8).unwrap();
                assert_eq!(p.as_bytes(), &[r as u8; 8]);
            }
            received.wait();
            Some(reads)
        } else {
            quiet_done.wait();
            let mut p = t.alloc(8);
            p.as_bytes_mut().fill(me as u8);
            send_blocking(&mut t, Rank::from(0), tag(0, 0), p).unwrap();
            received.wait();
            None
        }
    });
    let reads = results[0].unwrap();
    // Four idle peers read at each of 100 polls would be 400 reads.
    assert!(
        reads < 10,
        "{reads} socket reads for 100 polls of idle peers"
    );
}

/// A wait right after a receive that read another message off its socket ends at once:
/// that message is what the engine may be waiting for, and the socket will not be ready
/// again (read dry; and not writable either, its send buffer full of a message its peer
/// does not read yet), so a wait that slept for the next event slept to its deadline.
#[test]
fn a_frame_read_by_another_receive_ends_the_next_wait_at_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let big: Vec<u8> = (0..24 << 20).map(|i: usize| (i % 251) as u8).collect();
    // Each side waits for the other's flag at most 30 s: a rank that failed sets none,
    // and the other fails too, never hangs.
    let sent = AtomicBool::new(false);
    let waited = AtomicBool::new(false);
    let until = |flag: &AtomicBool| {
        let end = Instant::now() + Duration::from_secs(30);
        while !flag.load(Ordering::Acquire) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let results = group(2, |mut t| -> Result<Option<Duration>, TransportError> {
        if t.endpoint().rank == Rank(0) {
            until(&sent);
            // The socket to rank 1 full: part written, the rest queued.
            assert_eq!(
                t.try_send_from(Rank(1), tag(0, 0), &big, Lend::No)?,
                SendState::Done
            );
            assert!(t.copied > 0, "the socket took all of 24 MiB at once");
            // The acks of what the socket took land (on loopback, at once): from then on
            // nothing makes it writable until rank 1 reads.
            until_acked(&t, Rank(1));
            // A receive for another message reads rank 1's first off the socket.
            assert!(t.try_recv(Rank(1), tag(2, 0), 8)?.is_none());
            let start = Instant::now();
            t.wait(start + Duration::from_secs(20))?;
            let slept = start.elapsed();
            waited.store(true, Ordering::Release);
            let got = recv_blocking(&mut t, Rank(1), tag(1, 0), 8)?;
            assert_eq!(got.as_bytes(), &[7; 8]);
            held_until_received(&mut t)?;
            Ok(Some(slept))
        } else {
            let mut p = t.alloc(8);
            p.as_bytes_mut().fill(7);
            send_blocking(&mut t, Rank(0), tag(1, 0), p)?;
            sent.store(true, Ordering::Release);
            until(&waited);
            receive_then_release(&mut t, &[(tag(0, 0), &big[..])])?;
            Ok(None)
        }
    });
    let results: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    let slept = results[0].expect("rank 0 measures its wait");
    assert!(
        slept < Duration::from_secs(10),
        "the wait slept {slept:?} (its deadline was 20 s) with a message read and filed"
    );
}

/// A wait whose own look at the sockets finds a peer gone (here: it sent garbage) ends at
/// once with the error, even though no socket will be ready again: the garbage was read,
/// and the socket to that peer is not writable (its send buffer full of a message the peer
/// never reads).
#[test]
fn a_peer_found_gone_by_a_wait_ends_it_at_once() {
    use std::io::Write;
    let (mut t, mut raw) = with_raw_peer();
    let big = vec![5u8; 24 << 20];
    assert_eq!(
        t.try_send_from(Rank(1), tag(0, 0), &big, Lend::No).unwrap(),
        SendState::Done
    );
    assert!(t.copied > 0, "the socket took all of 24 MiB at once");
    // The acks of what the socket took land: from then on nothing makes it writable.
    until_acked(&t, Rank(1));
    // More than a header's 32 bytes: the decoder judges a whole header.
    raw.write_all(b"GET / HTTP/1.1\r\nHost: rcoll\r\n\r\n-----")
        .unwrap();
    until_arrived(&t, Rank(1), 36);
    let start = Instant::now();
    let e = t.wait(start + Duration::from_secs(20));
    let slept = start.elapsed();
    assert!(
        matches!(e, Err(TransportError::Protocol { peer: Rank(1), .. })),
        "{e:?}"
    );
    assert!(
        slept < Duration::from_secs(10),
        "the wait slept {slept:?} (its deadline was 20 s) with its peer gone"
    );
}

/// Control messages (segment announcements, verbs endpoints) carry a MAC under the
/// connection's session key over their exchange, sender, receiver, count and bytes: a
/// message sealed right is taken without its seal; the same message again (a replay), one
/// with a byte rewritten, or one sealed under another key is a protocol error naming the
/// peer. What this rank sends carries the seal its peer expects.
#[test]
fn control_messages_are_sealed_under_the_session_key() {
    use super::bootstrap::auth;
    use super::control::{control_tag, seal_head, Exchange};
    use std::io::{Read, Write};
    let key = [9u8; 32];
    let frame = |body: &[u8]| {
        let header = Header {
            kind: Kind::Data,
            tag: control_tag(Exchange::ShmSegment),
            len: body.len() as u64,
        }
        .encode();
        [&header[..], body].concat()
    };
    let sealed = |key: &auth::SessionKey, count: u64, data: &[u8]| {
        let head = seal_head(Exchange::ShmSegment, Rank(1), Rank(0), count);
        [data, &auth::seal(key, &[&head, data])[..]].concat()
    };
    let deadline = || Instant::now() + Duration::from_secs(5);
    let refused = |first: Option<Vec<u8>>, second: Vec<u8>| {
        let (mut t, mut raw) = with_raw_peer();
        t.set_sessions(vec![None, Some(key)]);
        if let Some(f) = first {
            raw.write_all(&frame(&f)).unwrap();
            t.recv_control(Rank(1), Exchange::ShmSegment, deadline())
                .expect("the first message");
        }
        raw.write_all(&frame(&second)).unwrap();
        match t.recv_control(Rank(1), Exchange::ShmSegment, deadline()) {
            Err(TransportError::Protocol { peer, reason, .. }) => {
                assert_eq!(peer, Rank(1));
                assert!(reason.contains("session key"), "{reason}");
            }
            other => panic!("taken: {other:?}"),
        }
    };
    // Sealed right: taken, without the seal.
    let (mut t, mut raw) = with_raw_peer();
    t.set_sessions(vec![None, Some(key)]);
    raw.write_all(&frame(&sealed(&key, 0, b"segment"))).unwrap();
    let got = t.recv_control(Rank(1), Exchange::ShmSegment, deadline());
    assert_eq!(got.expect("a sealed message"), b"segment");
    // What this rank sends: sealed for rank 1 as its first ShmSegment message.
    t.send_control(Rank(1), Exchange::ShmSegment, b"mine", deadline())
        .expect("send");
    let mut buf = vec![0u8; frame(&[0; 4 + 32]).len()];
    raw.read_exact(&mut buf).unwrap();
    let head = seal_head(Exchange::ShmSegment, Rank(0), Rank(1), 0);
    let body = &buf[buf.len() - 36..];
    assert_eq!(&body[..4], b"mine");
    assert!(auth::sealed(&key, &[&head, b"mine"], &body[4..]));
    // A replay, a rewritten byte, another key, no seal at all.
    refused(
        Some(sealed(&key, 0, b"segment")),
        sealed(&key, 0, b"segment"),
    );
    let mut rewritten = sealed(&key, 0, b"segment");
    rewritten[0] ^= 1;
    refused(None, rewritten);
    refused(None, sealed(&[8u8; 32], 0, b"segment"));
    refused(None, b"segment".to_vec());
}

/// The spare buffers stay within their byte budget however large the messages they
/// carried: 256 payloads of 1 MiB given back keep at most 4 MiB, and what is taken again
/// has the room asked for.
#[test]
fn the_buffer_pool_keeps_within_its_byte_budget() {
    let mut pool = Pool::default();
    for _ in 0..POOL_BUFFERS {
        pool.give(Payload::reuse(Vec::new(), 1 << 20));
    }
    assert!(pool.bytes <= POOL_BYTES, "{} bytes pooled", pool.bytes);
    let kept: usize = pool.buffers.iter().map(Vec::capacity).sum();
    assert_eq!(kept, pool.bytes);
    assert_eq!(pool.buffers.len(), POOL_BYTES >> 20);
    // Small ones fill the count, not past it.
    let mut small = Pool::default();
    for _ in 0..2 * POOL_BUFFERS {
        small.give(Payload::reuse(Vec::new(), 64));
    }
    assert_eq!(small.buffers.len(), POOL_BUFFERS);
    let v = small.take(3 << 20);
    assert!(v.capacity() >= 3 << 20);
    assert_eq!(small.buffers.len(), POOL_BUFFERS - 1);
}
