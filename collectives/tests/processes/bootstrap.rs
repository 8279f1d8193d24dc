//! The bootstrap against strangers, scarcity and departures, with real processes: a job
//! without a secret, strangers first at the root or at a member's listener (driven by hand
//! with [`RawRank`]), a root out of file descriptors, the root or a member dying on the way.
//! Part of the `processes` test binary (`../processes.rs`), whose `rank_main` runs the
//! scenarios.

use std::net::TcpListener;
use std::time::Duration;

use rcoll_transport::tcp::bootstrap::{auth, wire::Message, Options};

use super::common::{finish, signal};
use super::{free_root, spawn};

/// One end of a bootstrap connection driven by hand, as a stranger or a departing member
/// would.
pub(super) struct RawRank {
    stream: std::net::TcpStream,
    got: Vec<u8>,
}

impl RawRank {
    /// Connects to `root`, retrying while it does not listen yet.
    pub(super) fn connect(root: &str) -> RawRank {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let stream = loop {
            match std::net::TcpStream::connect(root) {
                Ok(s) => break s,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => panic!("the root never listened: {e}"),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        RawRank {
            stream,
            got: Vec::new(),
        }
    }

    pub(super) fn send(&mut self, m: &Message) {
        use std::io::Write;
        self.stream.write_all(&m.encode()).expect("send");
    }

    pub(super) fn receive(&mut self) -> Message {
        use std::io::Read;
        loop {
            if let Some((m, used)) = Message::split(&self.got).expect("a bootstrap message") {
                self.got.drain(..used);
                return m;
            }
            let mut b = [0u8; 4096];
            let n = self.stream.read(&mut b).expect("read");
            assert!(n > 0, "the root closed without a word");
            self.got.extend_from_slice(&b[..n]);
        }
    }

    /// Challenges the acceptor: our nonce and its.
    pub(super) fn challenge(&mut self) -> ([u8; 16], [u8; 16]) {
        let nonce_c = auth::nonce().expect("nonce");
        self.send(&Message::Challenge { nonce: nonce_c });
        let Message::Proof { nonce, .. } = self.receive() else {
            panic!("no proof from the root");
        };
        (nonce_c, nonce)
    }
}

#[test]
fn a_job_without_a_secret_is_refused_unless_explicitly_insecure() {
    let no_secret = [("RCOLL_UNIQUE_ID", String::new())];
    let results = finish(spawn("hello", 2, &no_secret), Duration::from_secs(60));
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(!ok, "rank {r} ran without a secret:\n{out}");
        assert!(
            out.contains("no job secret") && out.contains("RCOLL_UNIQUE_ID"),
            "rank {r}:\n{out}"
        );
    }
    let insecure = [
        ("RCOLL_UNIQUE_ID", String::new()),
        ("RCOLL_INSECURE_ID", "1".to_string()),
    ];
    let results = finish(spawn("hello", 2, &insecure), Duration::from_secs(60));
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(ok, "rank {r}:\n{out}");
    }
}

/// A stranger at `listener` introduces itself with `intro` signed with `id` (not the
/// job's secret): it must be refused for not proving the secret.
fn refused_with(listener: &str, id: u128, intro: Message) {
    let mut stranger = RawRank::connect(listener);
    let (nonce_c, nonce_s) = stranger.challenge();
    stranger.send(&auth::sign_intro(id, &nonce_c, &nonce_s, intro));
    match stranger.receive() {
        Message::Refuse(reason) => assert!(
            reason.contains("does not prove this job's secret"),
            "{reason}"
        ),
        other => panic!("the stranger was answered with {other:?}"),
    }
}

/// A stranger reaches the root first and claims rank 1 with the id anyone can compute from
/// the root address and size (the old default): it cannot prove the job's secret, is
/// refused, and the real rank 1 takes its place.
#[test]
fn a_stranger_first_at_the_root_cannot_take_a_rank() {
    let root = free_root();
    let go = std::env::temp_dir().join(format!("rcoll-go-first-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let extra = [
        ("RCOLL_ROOT_ADDR", root.clone()),
        // Ranks 1 and 2 wait until the stranger was refused: it is first.
        ("RCOLL_TEST_HOLD", format!("1,2:{}", go.display())),
    ];
    let children = spawn("hello", 3, &extra);
    let public_id = Options::default_unique_id(root.parse().expect("addr"), 3);
    let hello = Message::Hello {
        rank: 1,
        nranks: 3,
        addr: "127.0.0.1:9".into(),
        host: "localhost".into(),
        cpus: 0,
        mac: [0; 32],
    };
    refused_with(&root, public_id, hello);
    std::fs::write(&go, b"").expect("go");
    let results = finish(children, Duration::from_secs(60));
    let _ = std::fs::remove_file(&go);
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(ok, "rank {r}:\n{out}");
    }
    assert!(
        results[0].1.contains("refused connection from"),
        "the root logs the stranger:\n{}",
        results[0].1
    );
}

/// The root runs out of file descriptors while ranks arrive (a limit of what it has open
/// plus 3): accept(2) fails with EMFILE, which it retries rather than abort on; when the
/// limit never lets it take everyone, every rank fails within the timeout and the root
/// says why.
#[test]
fn a_root_out_of_file_descriptors_fails_within_the_timeout_saying_so() {
    let root = free_root();
    let extra = [
        ("RCOLL_ROOT_ADDR", root.clone()),
        ("RCOLL_TIMEOUT", "3".to_string()),
        ("RCOLL_TEST_NOFILE_SLACK", "3".to_string()),
    ];
    let start = std::time::Instant::now();
    let results = finish(spawn("hello", 6, &extra), Duration::from_secs(60));
    let took = start.elapsed();
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(
            !ok && out.contains("RANK-INIT-ERROR"),
            "rank {r} should fail its setup:\n{out}"
        );
    }
    assert!(
        results[0].1.contains("Too many open files") && results[0].1.contains("ulimit -n"),
        "the root should name the cause:\n{}",
        results[0].1
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

/// The TCP ports process `pid` listens on, once it listens on `count` of them.
fn listening_ports(pid: u32, count: usize, within: Duration) -> Vec<u16> {
    let until = std::time::Instant::now() + within;
    loop {
        let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .filter_map(|l| {
                        let l = l.to_string_lossy().into_owned();
                        Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        let tables = ["/proc/net/tcp", "/proc/net/tcp6"]
            .map(|t| std::fs::read_to_string(t).unwrap_or_default());
        // sl local_address rem_address st ... inode: the port is hex after the colon,
        // state 0A is LISTEN, the inode is the tenth field.
        let ports: Vec<u16> = tables
            .iter()
            .flat_map(|t| t.lines().skip(1))
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                (f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]))
                    .then(|| u16::from_str_radix(f[1].rsplit(':').next()?, 16).ok())
                    .flatten()
            })
            .collect();
        if ports.len() >= count {
            return ports;
        }
        assert!(
            std::time::Instant::now() < until,
            "process {pid} never listened on {count} ports (has {ports:?})"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Strangers at the members' data listeners (rank 0's and rank 1's) while the group
/// cannot form yet (rank 2 is held back until they are done): one that proves an id
/// anyone can compute is refused at once, not left in the backlog until the address table
/// comes; one that connects and says nothing holds up no one, and is told so when the
/// listener closes. The group forms regardless.
#[test]
fn strangers_at_a_members_listener_cannot_take_a_rank() {
    let root = free_root();
    let go = std::env::temp_dir().join(format!("rcoll-go-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let extra = [
        ("RCOLL_ROOT_ADDR", root.clone()),
        ("RCOLL_TEST_HOLD", format!("2:{}", go.display())),
    ];
    let children = spawn("hello", 3, &extra);
    let root_port: u16 = root
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let data_port = |pid: u32, count: usize| {
        let ports = listening_ports(pid, count, Duration::from_secs(10));
        let port = ports
            .into_iter()
            .find(|&p| p != root_port)
            .expect("a data port");
        format!("127.0.0.1:{port}")
    };
    let listeners = [
        data_port(children[0].id(), 2),
        data_port(children[1].id(), 1),
    ];
    let public_id = Options::default_unique_id(root.parse().expect("addr"), 3);
    let mut silent = Vec::new();
    for member in &listeners {
        silent.push(RawRank::connect(member));
        refused_with(
            member,
            public_id,
            Message::Handshake {
                rank: 2,
                mac: [0; 32],
            },
        );
    }
    std::fs::write(&go, b"go").expect("go file");
    let results = finish(children, Duration::from_secs(60));
    let _ = std::fs::remove_file(&go);
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(ok, "rank {r}:\n{out}");
    }
    for (r, out) in results.iter().take(2).map(|(_, o)| o).enumerate() {
        assert!(
            out.contains("refused connection from"),
            "rank {r} logs the stranger:\n{out}"
        );
    }
    for (member, mut s) in listeners.iter().zip(silent) {
        match s.receive() {
            Message::Refuse(reason) => assert!(reason.contains("connected"), "{member}: {reason}"),
            other => panic!("the silent stranger at {member} was answered with {other:?}"),
        }
    }
}

/// The root dies while the rendezvous is under way: a rank that reached it learns at
/// once, one that comes later fails within its timeout; both say the root is the cause.
#[test]
fn the_root_dying_mid_bootstrap_fails_every_rank_within_the_timeout() {
    let root = free_root();
    let go = std::env::temp_dir().join(format!("rcoll-go-root-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let mut children = spawn(
        "hello",
        3,
        &[
            ("RCOLL_ROOT_ADDR", root.clone()),
            ("RCOLL_TIMEOUT", "3".to_string()),
            // Rank 1 reaches the root before it dies, rank 2 after.
            ("RCOLL_TEST_HOLD", format!("2:{}", go.display())),
        ],
    );
    // Rank 1 reached the root: a connection to the root's port is established.
    let port = root.rsplit(':').next().expect("a port").to_string();
    let until = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let out = std::process::Command::new("ss")
            .args([
                "-tnH",
                "state",
                "established",
                &format!("( sport = :{port} )"),
            ])
            .output()
            .expect("ss (iproute2)");
        if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "rank 1 never reached the root"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut root_rank = children.remove(0);
    signal(&root_rank, "KILL");
    let _ = root_rank.wait();
    std::fs::write(&go, b"").expect("go");
    let start = std::time::Instant::now();
    let results = finish(children, Duration::from_secs(60));
    let took = start.elapsed();
    for (i, (ok, out)) in results.iter().enumerate() {
        assert!(
            !ok && out.contains("RANK-INIT-ERROR") && out.contains("root"),
            "rank {} should fail naming the root:\n{out}",
            i + 1
        );
    }
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let _ = std::fs::remove_file(&go);
}

/// A member passes the rendezvous (it knows the secret: a real member, then gone) and
/// dies before the mesh: the others fail within the timeout naming it.
#[test]
fn a_member_dying_between_rendezvous_and_mesh_is_named_within_the_timeout() {
    let root = free_root();
    let secret = rcoll::process::random_unique_id().expect("secret");
    let children = spawn(
        "hello",
        2,
        &[
            ("RCOLL_ROOT_ADDR", root.clone()),
            ("RCOLL_WORLD_SIZE", "3".to_string()),
            ("RCOLL_TIMEOUT", "4".to_string()),
            ("RCOLL_UNIQUE_ID", rcoll::process::format_unique_id(secret)),
        ],
    );
    // Rank 2: hello to the root with the right proof, take the table, die.
    let mut member = RawRank::connect(&root);
    let (nonce_c, nonce_s) = member.challenge();
    // Its data listener exists while the root collects the table, then goes with it.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let hello = Message::Hello {
        rank: 2,
        nranks: 3,
        addr: listener.local_addr().expect("addr").to_string(),
        host: "localhost".into(),
        cpus: 0,
        mac: [0; 32],
    };
    member.send(&auth::sign_intro(secret, &nonce_c, &nonce_s, hello));
    assert!(matches!(member.receive(), Message::Table { .. }));
    drop(listener);
    drop(member);
    let start = std::time::Instant::now();
    let results = finish(children, Duration::from_secs(60));
    let took = start.elapsed();
    for (r, (ok, out)) in results.iter().enumerate() {
        assert!(
            !ok && out.contains("RANK-INIT-ERROR") && out.contains("ranks 2"),
            "rank {r} should fail naming rank 2:\n{out}"
        );
    }
    assert!(took < Duration::from_secs(10), "took {took:?}");
}
