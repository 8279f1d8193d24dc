//! Bootstrap: how the ranks of a TCP group find and connect to each other.
//!
//! 1. Rank 0 listens on the root address. Every other rank connects to it (retrying until
//!    the deadline, as the root may start last) and presents a `Hello`: the job's 128-bit
//!    unique id, its rank, the group size and the address of its own data listener, bound
//!    on the interface that reaches the root.
//! 2. The root checks each hello — right id, rank in range and not seen before, same group
//!    size — and refuses strangers with a reason (logged on both sides). Once every rank
//!    has arrived it sends everyone the table of data addresses.
//! 3. Each rank connects to every lower rank and accepts from every higher one, opening
//!    each connection with a `Handshake` (unique id and rank) that the acceptor checks.
//!
//! Every wait has the deadline given in [`Options::timeout`]; an absent rank becomes a
//! [`TransportError::Bootstrap`] naming what was missing.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::TcpTransport;
use crate::error::TransportError;
use crate::types::Rank;

/// What a rank needs to join a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// This rank.
    pub rank: usize,
    /// Group size.
    pub nranks: usize,
    /// Where rank 0 listens for the rendezvous.
    pub root: SocketAddr,
    /// The job's id: ranks of other jobs that reach the same address are refused.
    pub unique_id: u128,
    /// Address to bind this rank's data listener to; by default the local address of the
    /// connection to the root (the interface that reaches it).
    pub bind: Option<IpAddr>,
    /// Deadline for the whole setup.
    pub timeout: Duration,
    /// Credit window per peer (messages).
    pub window: usize,
}

impl Options {
    /// A job id derived from the root address and the group size: ranks of the same job
    /// agree on it without being told, and jobs on other roots differ.
    pub fn default_unique_id(root: SocketAddr, nranks: usize) -> u128 {
        // FNV-1a over the textual address and size; stable across processes and builds.
        let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
        for b in format!("{root}/{nranks}").bytes() {
            h ^= u128::from(b);
            h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
        }
        h
    }
}

/// Bootstrap messages (pure encoding, shared by both sides and fuzzable).
pub mod wire {
    /// `"RCB1"`: bootstrap protocol and version.
    pub const MAGIC: [u8; 4] = *b"RCB1";
    /// Largest message body accepted.
    pub const MAX_BODY: usize = 1 << 20;

    /// A bootstrap message.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Message {
        /// A rank introduces itself to the root.
        Hello {
            /// Job id.
            unique_id: u128,
            /// Sender's rank.
            rank: u32,
            /// Group size the sender expects.
            nranks: u32,
            /// Sender's data listener.
            addr: String,
        },
        /// The root's answer: every rank's data listener, by rank.
        Table(Vec<String>),
        /// The root refuses the sender.
        Refuse(String),
        /// The first message on a data connection.
        Handshake {
            /// Job id.
            unique_id: u128,
            /// Connecting rank.
            rank: u32,
        },
    }

    /// Why bytes are not a bootstrap message.
    #[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
    pub enum WireError {
        /// Not `RCB1`.
        #[error("not an rcoll bootstrap message (magic {0:02x?})")]
        BadMagic([u8; 4]),
        /// Unknown message kind.
        #[error("unknown bootstrap message kind {0}")]
        BadKind(u8),
        /// Body longer than [`MAX_BODY`].
        #[error("bootstrap message of {0} bytes is too long")]
        TooLong(usize),
        /// Body shorter than its fields.
        #[error("truncated bootstrap message")]
        Truncated,
        /// A string field is not UTF-8.
        #[error("bootstrap message has a string that is not UTF-8")]
        BadString,
    }

    /// The 9-byte prefix: magic, kind, body length.
    pub const PREFIX: usize = 9;

    fn put_str(out: &mut Vec<u8>, s: &str) {
        let b = s.as_bytes();
        let len = b.len().min(u16::MAX as usize);
        out.extend_from_slice(&(len as u16).to_le_bytes());
        out.extend_from_slice(&b[..len]);
    }

    impl Message {
        /// Encodes prefix and body.
        pub fn encode(&self) -> Vec<u8> {
            let mut body = Vec::new();
            let kind = match self {
                Message::Hello {
                    unique_id,
                    rank,
                    nranks,
                    addr,
                } => {
                    body.extend_from_slice(&unique_id.to_le_bytes());
                    body.extend_from_slice(&rank.to_le_bytes());
                    body.extend_from_slice(&nranks.to_le_bytes());
                    put_str(&mut body, addr);
                    1
                }
                Message::Table(addrs) => {
                    body.extend_from_slice(&(addrs.len() as u32).to_le_bytes());
                    for a in addrs {
                        put_str(&mut body, a);
                    }
                    2
                }
                Message::Refuse(reason) => {
                    put_str(&mut body, reason);
                    3
                }
                Message::Handshake { unique_id, rank } => {
                    body.extend_from_slice(&unique_id.to_le_bytes());
                    body.extend_from_slice(&rank.to_le_bytes());
                    4
                }
            };
            let mut out = Vec::with_capacity(PREFIX + body.len());
            out.extend_from_slice(&MAGIC);
            out.push(kind);
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&body);
            out
        }

        /// Decodes a prefix: the kind and body length to read next.
        pub fn decode_prefix(p: &[u8; PREFIX]) -> Result<(u8, usize), WireError> {
            let magic = [p[0], p[1], p[2], p[3]];
            if magic != MAGIC {
                return Err(WireError::BadMagic(magic));
            }
            let len = u32::from_le_bytes([p[5], p[6], p[7], p[8]]) as usize;
            if len > MAX_BODY {
                return Err(WireError::TooLong(len));
            }
            if !(1..=4).contains(&p[4]) {
                return Err(WireError::BadKind(p[4]));
            }
            Ok((p[4], len))
        }

        /// Decodes a body of kind `kind`.
        pub fn decode_body(kind: u8, body: &[u8]) -> Result<Message, WireError> {
            let mut r = Reader(body);
            let m = match kind {
                1 => Message::Hello {
                    unique_id: r.u128()?,
                    rank: r.u32()?,
                    nranks: r.u32()?,
                    addr: r.string()?,
                },
                2 => {
                    let n = r.u32()? as usize;
                    let mut addrs = Vec::with_capacity(n.min(4096));
                    for _ in 0..n {
                        addrs.push(r.string()?);
                    }
                    Message::Table(addrs)
                }
                3 => Message::Refuse(r.string()?),
                4 => Message::Handshake {
                    unique_id: r.u128()?,
                    rank: r.u32()?,
                },
                k => return Err(WireError::BadKind(k)),
            };
            Ok(m)
        }
    }

    struct Reader<'a>(&'a [u8]);

    impl Reader<'_> {
        fn take(&mut self, n: usize) -> Result<&[u8], WireError> {
            if self.0.len() < n {
                return Err(WireError::Truncated);
            }
            let (a, b) = self.0.split_at(n);
            self.0 = b;
            Ok(a)
        }

        fn u32(&mut self) -> Result<u32, WireError> {
            let b = self.take(4)?;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }

        fn u128(&mut self) -> Result<u128, WireError> {
            let mut a = [0u8; 16];
            a.copy_from_slice(self.take(16)?);
            Ok(u128::from_le_bytes(a))
        }

        fn string(&mut self) -> Result<String, WireError> {
            let b = self.take(2)?;
            let n = u16::from_le_bytes([b[0], b[1]]) as usize;
            String::from_utf8(self.take(n)?.to_vec()).map_err(|_| WireError::BadString)
        }
    }
}

use wire::Message;

/// Joins the group described by `opts`, returning this rank's connected transport.
pub fn connect(opts: &Options) -> Result<TcpTransport, TransportError> {
    let me = Rank::from(opts.rank);
    let fail = |reason: String| TransportError::Bootstrap { rank: me, reason };
    if opts.nranks == 0 || opts.rank >= opts.nranks {
        return Err(fail(format!(
            "rank {} is not in a group of {}",
            opts.rank, opts.nranks
        )));
    }
    let deadline = Instant::now() + opts.timeout;
    match (opts.nranks, opts.rank) {
        (1, _) => TcpTransport::new(me, vec![None], opts.window)
            .map_err(|e| fail(format!("cannot create the poller: {e}"))),
        (_, 0) => root(opts, deadline),
        _ => member(opts, deadline),
    }
}

fn io_fail(me: Rank, what: &str, e: io::Error) -> TransportError {
    TransportError::Bootstrap {
        rank: me,
        reason: format!("{what}: {e}"),
    }
}

fn send(stream: &mut TcpStream, m: &Message) -> io::Result<()> {
    stream.write_all(&m.encode())
}

fn receive(stream: &mut TcpStream, deadline: Instant) -> io::Result<Message> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    stream.set_read_timeout(Some(left))?;
    let mut prefix = [0u8; wire::PREFIX];
    stream.read_exact(&mut prefix)?;
    let (kind, len) = Message::decode_prefix(&prefix)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    Message::decode_body(kind, &body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Accepts one connection before `deadline` (None when it passes).
fn accept_until(
    listener: &TcpListener,
    deadline: Instant,
) -> io::Result<Option<(TcpStream, SocketAddr)>> {
    listener.set_nonblocking(true)?;
    loop {
        match listener.accept() {
            Ok((s, a)) => {
                s.set_nonblocking(false)?;
                return Ok(Some((s, a)));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Connects to `addr`, retrying until `deadline` (the listener may not exist yet).
fn connect_until(addr: SocketAddr, deadline: Instant) -> io::Result<TcpStream> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(
            &addr,
            left.max(Duration::from_millis(1))
                .min(Duration::from_secs(1)),
        ) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// How long a connection to the root may take to present itself.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to the root that has not presented itself yet.
struct Pending {
    stream: TcpStream,
    from: SocketAddr,
    buf: Vec<u8>,
    since: Instant,
}

impl Pending {
    /// Reads what has arrived; the hello once it is complete.
    fn poll(&mut self) -> io::Result<Option<Message>> {
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "closed before its hello",
                    ))
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if self.buf.len() > wire::PREFIX + wire::MAX_BODY {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, "too long"));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let Some(prefix) = self.buf.first_chunk::<{ wire::PREFIX }>() else {
            return Ok(None);
        };
        let (kind, len) = Message::decode_prefix(prefix)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        match self.buf.get(wire::PREFIX..wire::PREFIX + len) {
            None => Ok(None),
            Some(body) => Message::decode_body(kind, body)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }
}

/// Whether a hello joins the group (its address goes into `table`), or why not.
fn judge(opts: &Options, table: &mut [Option<String>], m: Message) -> Result<(), String> {
    let Message::Hello {
        unique_id,
        rank,
        nranks,
        addr,
    } = m
    else {
        return Err(format!("expected a hello, got {m:?}"));
    };
    let r = rank as usize;
    if unique_id != opts.unique_id {
        Err(format!(
            "unique id {unique_id:#034x} is not this job's {:#034x}",
            opts.unique_id
        ))
    } else if nranks as usize != opts.nranks {
        Err(format!(
            "rank {rank} expects {nranks} ranks, this group has {}",
            opts.nranks
        ))
    } else if r == 0 || r >= opts.nranks {
        Err(format!("rank {rank} is out of range 1..{}", opts.nranks))
    } else if table[r].is_some() {
        Err(format!("rank {rank} has already joined"))
    } else {
        table[r] = Some(addr);
        Ok(())
    }
}

/// Refusals are always printed (they mean a misconfigured or foreign job is knocking),
/// and also go to `tracing`.
fn log_refusal(me: Rank, from: SocketAddr, reason: &str) {
    eprintln!("rcoll bootstrap ({me}): refused connection from {from}: {reason}");
    tracing::warn!(rank = me.0, %from, reason, "refused a connection");
}

fn root(opts: &Options, deadline: Instant) -> Result<TcpTransport, TransportError> {
    let me = Rank(0);
    let listener = TcpListener::bind(opts.root)
        .map_err(|e| io_fail(me, &format!("cannot listen on {}", opts.root), e))?;
    let data = TcpListener::bind((opts.bind.unwrap_or(opts.root.ip()), 0))
        .map_err(|e| io_fail(me, "cannot open the data listener", e))?;
    let mut table: Vec<Option<String>> = vec![None; opts.nranks];
    table[0] = Some(
        data.local_addr()
            .map_err(|e| io_fail(me, "data listener", e))?
            .to_string(),
    );
    // Connections are served concurrently, each non-blocking with its own buffer: a
    // stranger that connects and says nothing (or trickles bytes) holds up no one, and is
    // refused once it has been silent for `HELLO_TIMEOUT`.
    listener
        .set_nonblocking(true)
        .map_err(|e| io_fail(me, "listener", e))?;
    let mut members: Vec<TcpStream> = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    while table.iter().any(Option::is_none) {
        if Instant::now() >= deadline {
            let missing: Vec<String> = table
                .iter()
                .enumerate()
                .filter(|(_, a)| a.is_none())
                .map(|(r, _)| r.to_string())
                .collect();
            return Err(TransportError::Bootstrap {
                rank: me,
                reason: format!(
                    "timed out after {:?} waiting for ranks {} to reach {}",
                    opts.timeout,
                    missing.join(", "),
                    opts.root
                ),
            });
        }
        let mut busy = false;
        loop {
            match listener.accept() {
                Ok((s, from)) => {
                    s.set_nonblocking(true)
                        .map_err(|e| io_fail(me, "accept", e))?;
                    pending.push(Pending {
                        stream: s,
                        from,
                        buf: Vec::new(),
                        since: Instant::now(),
                    });
                    busy = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_fail(me, "accept", e)),
            }
        }
        let mut i = 0;
        while i < pending.len() {
            let verdict = match pending[i].poll() {
                Ok(None) if pending[i].since.elapsed() < HELLO_TIMEOUT.min(opts.timeout) => {
                    i += 1;
                    continue;
                }
                Ok(None) => Err(format!("no hello within {HELLO_TIMEOUT:?}")),
                Ok(Some(m)) => judge(opts, &mut table, m),
                Err(e) => Err(format!("unreadable hello: {e}")),
            };
            busy = true;
            let Pending {
                stream: mut s,
                from,
                ..
            } = pending.swap_remove(i);
            match verdict {
                Ok(()) => {
                    s.set_nonblocking(false)
                        .map_err(|e| io_fail(me, "accept", e))?;
                    members.push(s);
                }
                Err(reason) => {
                    log_refusal(me, from, &reason);
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                    let _ = send(&mut s, &Message::Refuse(reason));
                }
            }
        }
        if !busy {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let table: Vec<String> = table.into_iter().flatten().collect();
    tracing::debug!(
        rank = 0,
        ?table,
        "every rank arrived; sending the address table"
    );
    for m in &mut members {
        send(m, &Message::Table(table.clone()))
            .map_err(|e| io_fail(me, "sending the address table", e))?;
    }
    mesh(opts, me, data, &table, deadline)
}

fn member(opts: &Options, deadline: Instant) -> Result<TcpTransport, TransportError> {
    let me = Rank::from(opts.rank);
    let mut s = connect_until(opts.root, deadline)
        .map_err(|e| io_fail(me, &format!("cannot reach the root at {}", opts.root), e))?;
    let local = s.local_addr().map_err(|e| io_fail(me, "socket", e))?;
    let data = TcpListener::bind((opts.bind.unwrap_or(local.ip()), 0))
        .map_err(|e| io_fail(me, "cannot open the data listener", e))?;
    let addr = data
        .local_addr()
        .map_err(|e| io_fail(me, "data listener", e))?
        .to_string();
    let hello = Message::Hello {
        unique_id: opts.unique_id,
        rank: opts.rank as u32,
        nranks: opts.nranks as u32,
        addr,
    };
    send(&mut s, &hello).map_err(|e| io_fail(me, "sending hello to the root", e))?;
    match receive(&mut s, deadline) {
        Ok(Message::Table(table)) if table.len() == opts.nranks => {
            mesh(opts, me, data, &table, deadline)
        }
        Ok(Message::Refuse(reason)) => Err(TransportError::Bootstrap {
            rank: me,
            reason: format!("the root at {} refused this rank: {reason}", opts.root),
        }),
        Ok(other) => Err(TransportError::Bootstrap {
            rank: me,
            reason: format!("unexpected answer from the root: {other:?}"),
        }),
        Err(e) => Err(io_fail(
            me,
            "waiting for the address table from the root",
            e,
        )),
    }
}

fn mesh(
    opts: &Options,
    me: Rank,
    data: TcpListener,
    table: &[String],
    deadline: Instant,
) -> Result<TcpTransport, TransportError> {
    let n = opts.nranks;
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    for (j, addr) in table.iter().enumerate().take(opts.rank) {
        let a: SocketAddr = addr.parse().map_err(|_| TransportError::Bootstrap {
            rank: me,
            reason: format!("rank {j} advertised a bad address {addr:?}"),
        })?;
        let mut s = connect_until(a, deadline)
            .map_err(|e| io_fail(me, &format!("cannot connect to rank {j} at {a}"), e))?;
        send(
            &mut s,
            &Message::Handshake {
                unique_id: opts.unique_id,
                rank: opts.rank as u32,
            },
        )
        .map_err(|e| io_fail(me, &format!("handshake with rank {j}"), e))?;
        tracing::debug!(rank = me.0, peer = j, %a, "connected to peer");
        streams[j] = Some(s);
    }
    let mut expected = n - 1 - opts.rank;
    while expected > 0 {
        let Some((mut s, from)) =
            accept_until(&data, deadline).map_err(|e| io_fail(me, "accept", e))?
        else {
            let missing: Vec<String> = (opts.rank + 1..n)
                .filter(|&j| streams[j].is_none())
                .map(|j| j.to_string())
                .collect();
            return Err(TransportError::Bootstrap {
                rank: me,
                reason: format!(
                    "timed out waiting for ranks {} to connect",
                    missing.join(", ")
                ),
            });
        };
        let refusal = match receive(&mut s, deadline) {
            Ok(Message::Handshake { unique_id, rank }) => {
                let r = rank as usize;
                if unique_id != opts.unique_id {
                    Some(format!("unique id {unique_id:#034x} is not this job's"))
                } else if r <= opts.rank || r >= n || streams[r].is_some() {
                    Some(format!("rank {rank} may not connect here"))
                } else {
                    tracing::debug!(rank = me.0, peer = r, %from, "accepted peer");
                    streams[r] = Some(s);
                    expected -= 1;
                    None
                }
            }
            Ok(other) => Some(format!("expected a handshake, got {other:?}")),
            Err(e) => Some(format!("unreadable handshake: {e}")),
        };
        if let Some(reason) = refusal {
            log_refusal(me, from, &reason);
        }
    }
    for s in streams.iter().flatten() {
        s.set_read_timeout(None)
            .map_err(|e| io_fail(me, "socket", e))?;
    }
    tracing::info!(
        rank = me.0,
        peers = n - 1,
        "connected to every peer over tcp"
    );
    TcpTransport::new(me, streams, opts.window)
        .map_err(|e| io_fail(me, "cannot register the connections", e))
}

#[cfg(test)]
mod tests {
    use super::wire::*;

    #[test]
    fn messages_round_trip() {
        let messages = [
            Message::Hello {
                unique_id: 0x1234_5678_9abc_def0_1122_3344_5566_7788,
                rank: 3,
                nranks: 8,
                addr: "[::1]:4000".into(),
            },
            Message::Table(vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()]),
            Message::Refuse("no".into()),
            Message::Handshake {
                unique_id: 7,
                rank: 1,
            },
        ];
        for m in messages {
            let bytes = m.encode();
            let mut prefix = [0u8; PREFIX];
            prefix.copy_from_slice(&bytes[..PREFIX]);
            let (kind, len) = Message::decode_prefix(&prefix).unwrap();
            assert_eq!(len, bytes.len() - PREFIX);
            assert_eq!(Message::decode_body(kind, &bytes[PREFIX..]).unwrap(), m);
        }
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(matches!(
            Message::decode_prefix(b"GET / HTT"),
            Err(WireError::BadMagic(_))
        ));
        let mut p = [0u8; PREFIX];
        p[..4].copy_from_slice(&MAGIC);
        p[4] = 1;
        p[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Message::decode_prefix(&p),
            Err(WireError::TooLong(_))
        ));
        assert_eq!(Message::decode_body(1, &[0; 5]), Err(WireError::Truncated));
    }
}
