use super::*;

/// A stranger at the rendezvous answers the challenge with a message of a megabyte
/// (and sends none of it): the connector refuses it at its length, at once, instead
/// of reading it or waiting for it until the deadline.
#[test]
fn an_unproven_acceptor_cannot_make_the_connector_read_a_megabyte() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    let addr = listener.local_addr().expect("address");
    let stranger = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut challenge = [0u8; wire::PREFIX + wire::NONCE];
        s.read_exact(&mut challenge).expect("the challenge");
        let mut prefix = Message::Proof {
            nonce: [0; wire::NONCE],
            mac: [0; wire::MAC],
        }
        .encode()[..wire::PREFIX]
            .to_vec();
        prefix[5..9].copy_from_slice(&(1u32 << 20).to_le_bytes());
        s.write_all(&prefix).expect("the prefix");
        // Held open, silent, until the connector gives up.
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    let mut stream = TcpStream::connect(addr).expect("connect");
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    let hello = Message::Handshake {
        rank: 1,
        mac: [0; wire::MAC],
    };
    let Err(Introduction::Io(e)) = introduce(&mut stream, 0x1234, hello, deadline) else {
        panic!("the stranger's megabyte was taken as an answer");
    };
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    assert!(e.to_string().contains("before it proved"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited for it: {e}"
    );
    drop(stream);
    stranger.join().expect("stranger");
}

/// A relay between rank 1 and the root that forwards every byte but one: it changes
/// rank 1's CPU count in the address table. The table is sealed under the connection's
/// session key, which the relay cannot compute: rank 1 refuses it, saying so, instead
/// of forming the group on what the relay wrote.
#[test]
fn a_relay_that_rewrites_the_table_is_refused() {
    let secret = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;
    let root: SocketAddr = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port");
    let relay = TcpListener::bind("127.0.0.1:0").expect("relay");
    let relay_addr = relay.local_addr().expect("relay address");
    let opts = move |rank: usize, root: SocketAddr| Options {
        rank,
        nranks: 2,
        root,
        unique_id: secret,
        bind: None,
        timeout: Duration::from_secs(5),
        window: 4,
        host: "one host".into(),
        cpus: 2,
    };
    let relaying = std::thread::spawn(move || {
        let (mut member, _) = relay.accept().expect("rank 1");
        let mut upstream =
            connect_until(root, Instant::now() + Duration::from_secs(5)).expect("the root");
        let (mut m2, mut u2) = (
            member.try_clone().expect("clone"),
            upstream.try_clone().expect("clone"),
        );
        let up = std::thread::spawn(move || std::io::copy(&mut m2, &mut u2));
        // Down: the proof as it is, then the table with one byte changed.
        let mut proof = [0u8; wire::PREFIX + wire::NONCE + wire::MAC];
        upstream.read_exact(&mut proof).expect("the proof");
        member.write_all(&proof).expect("forward");
        let mut prefix = [0u8; wire::PREFIX];
        upstream.read_exact(&mut prefix).expect("the table");
        let (_, len) = Message::decode_prefix(&prefix).expect("a prefix");
        let mut body = vec![0u8; len];
        upstream.read_exact(&mut body).expect("the table's body");
        body[len - wire::MAC - 4] ^= 1;
        member.write_all(&prefix).expect("forward");
        member.write_all(&body).expect("forward");
        let _ = std::io::copy(&mut upstream, &mut member);
        let _ = up.join();
    });
    let zero = std::thread::spawn(move || connect(&opts(0, root)));
    let one = connect(&opts(1, relay_addr));
    let e = one
        .err()
        .expect("rank 1 formed the group on a rewritten table");
    assert!(e.to_string().contains("not sealed"), "{e}");
    assert!(
        zero.join().expect("rank 0").is_err(),
        "rank 0 formed a group alone"
    );
    relaying.join().expect("relay");
}
