//! Bootstrap: how the ranks of a TCP group find and connect to each other.
//!
//! 1. Rank 0 listens on the root address. Every other rank connects to it (retrying until
//!    the deadline, as the root may start last), and the two prove to each other that they
//!    know the job's secret (the 128-bit unique id) without sending it ([`auth`]). Then the
//!    rank presents a `Hello`: its rank, the group size, the address of its own data
//!    listener (bound on the interface that reaches the root), its host key and its
//!    machine's CPUs.
//! 2. The root checks each proven hello — rank in range and not seen before, same group
//!    size — and refuses the others with a reason (logged on both sides). A rank slot is
//!    taken only after proof, so a stranger cannot take one. Once every rank has arrived the
//!    root sends everyone the table of data addresses, host keys and CPUs.
//! 3. Each rank connects to every lower rank and accepts from every higher one, with the
//!    same mutual proof before a `Handshake` names the connecting rank.
//!
//! Listeners serve every connection concurrently ([`accept`]); every read has a deadline
//! for the whole message, not per `read()`; every wait ends at [`Options::timeout`], and an
//! absent rank becomes a [`TransportError::Bootstrap`] naming what was missing.

pub mod accept;
pub mod auth;
pub mod wire;

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::TcpTransport;
use crate::error::TransportError;
use crate::types::{deadline_after, Rank, MAX_RANKS};
use accept::{kind, Acceptor, Introduced};
use wire::Message;

/// What a rank needs to join a group.
#[derive(Clone, PartialEq, Eq)]
pub struct Options {
    /// This rank.
    pub rank: usize,
    /// Group size.
    pub nranks: usize,
    /// Where rank 0 listens for the rendezvous.
    pub root: SocketAddr,
    /// The job's secret id: every connection proves knowledge of it both ways, and ranks of
    /// other jobs (or strangers) that reach the same address are refused.
    pub unique_id: u128,
    /// Address to bind this rank's data listener to; by default the local address of the
    /// connection to the root (the interface that reaches it).
    pub bind: Option<IpAddr>,
    /// Deadline for the whole setup.
    pub timeout: Duration,
    /// Credit window per peer (messages).
    pub window: usize,
    /// This rank's host key ([`crate::hosts::local_key`]): ranks with equal keys share a
    /// machine.
    pub host: String,
    /// The CPUs of this rank's machine ([`crate::topology::machine_cpus`]; 0: unknown):
    /// every rank learns every host's, so that all price a crowded host alike.
    pub cpus: usize,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .field("root", &self.root)
            .field("unique_id", &crate::launcher::REDACTED)
            .field("bind", &self.bind)
            .field("timeout", &self.timeout)
            .field("window", &self.window)
            .field("host", &self.host)
            .field("cpus", &self.cpus)
            .finish()
    }
}

impl Options {
    /// A job id derived from the root address and the group size: ranks of the same job
    /// agree on it without being told, and jobs on other roots differ. It is no secret
    /// (anyone can compute it): for tests on a trusted host only.
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

/// Joins the group described by `opts`, returning this rank's connected transport.
pub fn connect(opts: &Options) -> Result<TcpTransport, TransportError> {
    let me = Rank::from(opts.rank.min(u32::MAX as usize));
    let fail = |reason: String| TransportError::Bootstrap { rank: me, reason };
    if opts.nranks == 0 || opts.nranks > MAX_RANKS {
        return Err(fail(format!(
            "a group of {} ranks: rcoll takes 1 to {MAX_RANKS} ranks",
            opts.nranks
        )));
    }
    if opts.rank >= opts.nranks {
        return Err(fail(format!(
            "rank {} is not in a group of {} ranks",
            opts.rank, opts.nranks
        )));
    }
    let deadline = deadline_after(opts.timeout);
    match (opts.nranks, opts.rank) {
        (1, _) => {
            let mut t = TcpTransport::new(me, vec![None], opts.window)
                .map_err(|e| fail(format!("cannot create the poller: {e}")))?;
            t.set_hosts(std::sync::Arc::new(
                crate::hosts::HostMap::from_keys(&[opts.host.as_str()])
                    .with_reported_cpus(&[cpus_word(opts.cpus)]),
            ));
            Ok(t)
        }
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

/// Reads one message, all of it before `deadline`: the timeout of each `read()` is what is
/// left of the deadline, so a peer that trickles bytes cannot stretch it.
/// Waits until `stream` has bytes to read (or is closed), running `meanwhile` (which says
/// whether it did anything) every couple of milliseconds; past `deadline`, a timeout.
fn wait_readable(
    stream: &TcpStream,
    deadline: Instant,
    mut meanwhile: impl FnMut() -> Result<bool, TransportError>,
) -> Result<io::Result<()>, TransportError> {
    if let Err(e) = stream.set_nonblocking(true) {
        return Ok(Err(e));
    }
    let heard = loop {
        match stream.peek(&mut [0u8; 1]) {
            Ok(_) => break Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(e),
        }
        if Instant::now() >= deadline {
            break Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no word before the deadline",
            ));
        }
        if !meanwhile()? {
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    Ok(heard.and_then(|()| stream.set_nonblocking(false)))
}

/// Reads one message of at most `limit` bytes of body: [`wire::MAX_INTRO`] from a peer that
/// has not yet proven the secret, so that a stranger cannot make this rank read (and hold)
/// megabytes before it proved anything.
fn receive(stream: &mut TcpStream, deadline: Instant, limit: usize) -> io::Result<Message> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((m, used)) =
            Message::split(&buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
        {
            if used != buf.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "bytes after a bootstrap message",
                ));
            }
            return Ok(m);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no whole message before the deadline",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        // At most the rest of one message: never read into the next.
        let want = match buf.first_chunk::<{ wire::PREFIX }>() {
            Some(p) => {
                let (_, len) = Message::decode_prefix(p)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                if len > limit {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "it announced a message of {len} bytes before it proved the job's \
                             secret (at most {limit} then)"
                        ),
                    ));
                }
                wire::PREFIX + len - buf.len()
            }
            None => wire::PREFIX - buf.len(),
        };
        match stream.read(&mut chunk[..want.min(4096)]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed the connection",
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no whole message before the deadline",
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Why a connection to an acceptor did not become a member connection.
enum Introduction {
    /// An I/O failure.
    Io(io::Error),
    /// The acceptor refused us, saying why.
    Refused(String),
    /// The acceptor does not know the secret, or spoke nonsense.
    Impostor(String),
}

/// The connector's side of [`auth`]: challenge, check the acceptor's proof, then send
/// `intro` (a `Hello` or `Handshake`) with this rank's proof; the connection's session key.
fn introduce(
    stream: &mut TcpStream,
    secret: u128,
    intro: Message,
    deadline: Instant,
) -> Result<auth::SessionKey, Introduction> {
    let nonce_c = auth::nonce().map_err(Introduction::Io)?;
    send(stream, &Message::Challenge { nonce: nonce_c }).map_err(Introduction::Io)?;
    match receive(stream, deadline, wire::MAX_INTRO).map_err(Introduction::Io)? {
        Message::Proof { nonce, mac } if auth::acceptor_mac_ok(secret, &nonce_c, &nonce, &mac) => {
            send(stream, &auth::sign_intro(secret, &nonce_c, &nonce, intro))
                .map_err(Introduction::Io)?;
            Ok(auth::session_key(secret, &nonce_c, &nonce))
        }
        Message::Proof { .. } => Err(Introduction::Impostor(
            "it does not prove this job's secret: it belongs to another job, or this rank's \
             RCOLL_UNIQUE_ID differs from the others'"
                .into(),
        )),
        Message::Refuse(reason) => Err(Introduction::Refused(reason)),
        other => Err(Introduction::Impostor(format!(
            "it answered the challenge with {}",
            kind(&other)
        ))),
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

/// Whether a proven hello joins the group (its address, host key and CPUs go into
/// `table`), or why not.
fn judge(opts: &Options, table: &mut [Option<Member>], m: Message) -> Result<(), String> {
    let Message::Hello {
        rank,
        nranks,
        addr,
        host,
        cpus,
        ..
    } = m
    else {
        return Err(format!("expected a hello, got {}", kind(&m)));
    };
    let r = rank as usize;
    if nranks as usize != opts.nranks {
        Err(format!(
            "rank {rank} expects {nranks} ranks, this group has {}",
            opts.nranks
        ))
    } else if r == 0 || r >= opts.nranks {
        Err(format!("rank {rank} is out of range 1..{}", opts.nranks))
    } else if table[r].is_some() {
        Err(format!("rank {rank} has already joined"))
    } else if host.is_empty() || host.len() > crate::hosts::MAX_KEY {
        Err(format!(
            "rank {rank}'s host key is not 1 to {} bytes",
            crate::hosts::MAX_KEY
        ))
    } else {
        table[r] = Some(Member { addr, host, cpus });
        Ok(())
    }
}

/// Serves `acceptor` until `done(state)`, handing each authenticated introduction to
/// `handle`; past `deadline`, the error `timed_out(state)` says what is missing. The
/// listener `ahead`, if any, is served meanwhile (see [`Acceptor::poll_ahead`]).
fn serve<S>(
    acceptor: &mut Acceptor,
    mut ahead: Option<&mut Acceptor>,
    deadline: Instant,
    done: impl Fn(&S) -> bool,
    state: &mut S,
    timed_out: impl Fn(&S) -> TransportError,
    mut handle: impl FnMut(&mut S, Introduced),
) -> Result<(), TransportError> {
    while !done(state) {
        if Instant::now() >= deadline {
            let mut e = timed_out(state);
            if let (Some(why), TransportError::Bootstrap { reason, .. }) =
                (acceptor.starvation(), &mut e)
            {
                reason.push_str(&format!("; {why}"));
            }
            return Err(e);
        }
        let (introduced, busy) = acceptor
            .poll(deadline)
            .map_err(|e| io_fail(acceptor.rank(), "accept", e))?;
        for i in introduced {
            handle(state, i);
        }
        let busy = match ahead.as_deref_mut() {
            Some(a) => {
                a.poll_ahead(deadline)
                    .map_err(|e| io_fail(a.rank(), "accept", e))?
                    || busy
            }
            None => busy,
        };
        if !busy {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    Ok(())
}

/// Root listeners bound ahead of their group by [`listen_root`], by address.
static RESERVED: std::sync::Mutex<Vec<(SocketAddr, TcpListener)>> =
    std::sync::Mutex::new(Vec::new());

/// Binds a rendezvous listener on `ip` at a port the system picks and keeps it for the
/// rank 0 of this process that will [`connect`] with that address as its root: the
/// address can be handed to the other ranks before rank 0 joins (as a unique id does),
/// and no other process can take the port in between. Returns the address.
pub fn listen_root(ip: IpAddr) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind((ip, 0))?;
    let addr = listener.local_addr()?;
    RESERVED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((addr, listener));
    Ok(addr)
}

/// Closes the listener [`listen_root`] reserved for `addr`, if no group took it (a
/// rendezvous given up).
pub fn release_root(addr: SocketAddr) {
    drop(reserved(addr));
}

/// The listener [`listen_root`] reserved for `addr`, if any (taken: one group uses it).
fn reserved(addr: SocketAddr) -> Option<TcpListener> {
    let mut held = RESERVED.lock().unwrap_or_else(|p| p.into_inner());
    let at = held.iter().position(|(a, _)| *a == addr)?;
    Some(held.swap_remove(at).1)
}

fn root(opts: &Options, deadline: Instant) -> Result<TcpTransport, TransportError> {
    let me = Rank(0);
    let listener = match reserved(opts.root) {
        Some(l) => l,
        None => TcpListener::bind(opts.root)
            .map_err(|e| io_fail(me, &format!("cannot listen on {}", opts.root), e))?,
    };
    let data = TcpListener::bind((opts.bind.unwrap_or(opts.root.ip()), 0))
        .map_err(|e| io_fail(me, "cannot open the data listener", e))?;
    let mut table: Vec<Option<Member>> = vec![None; opts.nranks];
    table[0] = Some(Member {
        addr: data
            .local_addr()
            .map_err(|e| io_fail(me, "data listener", e))?
            .to_string(),
        host: opts.host.clone(),
        cpus: cpus_word(opts.cpus),
    });
    let mut data =
        Acceptor::new(data, opts.unique_id, me).map_err(|e| io_fail(me, "listener", e))?;
    let mut acceptor =
        Acceptor::new(listener, opts.unique_id, me).map_err(|e| io_fail(me, "listener", e))?;
    let mut members: Vec<(TcpStream, auth::SessionKey)> = Vec::new();
    serve(
        &mut acceptor,
        Some(&mut data),
        deadline,
        |table: &Vec<Option<Member>>| table.iter().all(Option::is_some),
        &mut table,
        |table| {
            let missing: Vec<String> = table
                .iter()
                .enumerate()
                .filter(|(_, a)| a.is_none())
                .map(|(r, _)| r.to_string())
                .collect();
            TransportError::Bootstrap {
                rank: me,
                reason: format!(
                    "timed out after {:?} waiting for ranks {} to reach {}",
                    opts.timeout,
                    missing.join(", "),
                    opts.root
                ),
            }
        },
        |table,
         Introduced {
             stream,
             from,
             intro,
             session,
         }| match judge(opts, table, intro) {
            Ok(()) => members.push((stream, session)),
            Err(reason) => accept::refuse(me, stream, from, &reason),
        },
    )?;
    acceptor.close("every rank has connected to the root");
    let table: Vec<Member> = table.into_iter().flatten().collect();
    let addrs: Vec<String> = table.iter().map(|m| m.addr.clone()).collect();
    let hosts: Vec<String> = table.iter().map(|m| m.host.clone()).collect();
    let cpus: Vec<u32> = table.iter().map(|m| m.cpus).collect();
    tracing::debug!(
        rank = 0,
        ?addrs,
        ?hosts,
        ?cpus,
        "every rank arrived; sending the address table"
    );
    let left = deadline.saturating_duration_since(Instant::now());
    for (m, session) in &mut members {
        let message = seal_table(session, addrs.clone(), hosts.clone(), cpus.clone());
        // A member that stops reading cannot hold the root past the deadline.
        m.set_write_timeout(Some(left.max(Duration::from_millis(1))))
            .and_then(|()| send(m, &message))
            .map_err(|e| io_fail(me, "sending the address table", e))?;
    }
    mesh(opts, me, data, &addrs, &hosts, &cpus, deadline)
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
    let mut data =
        Acceptor::new(data, opts.unique_id, me).map_err(|e| io_fail(me, "listener", e))?;
    let hello = Message::Hello {
        rank: opts.rank as u32,
        nranks: opts.nranks as u32,
        addr,
        host: opts.host.clone(),
        cpus: cpus_word(opts.cpus),
        mac: [0; wire::MAC],
    };
    let fail = |reason: String| TransportError::Bootstrap { rank: me, reason };
    let session = match introduce(&mut s, opts.unique_id, hello, deadline) {
        Ok(session) => session,
        Err(Introduction::Io(e)) => {
            return Err(io_fail(
                me,
                &format!("introducing this rank to the root at {}", opts.root),
                e,
            ))
        }
        Err(Introduction::Refused(reason)) => {
            return Err(fail(format!(
                "the root at {} refused this rank: {reason}",
                opts.root
            )))
        }
        Err(Introduction::Impostor(reason)) => {
            return Err(fail(format!(
                "the rendezvous at {} is not this job's root: {reason}",
                opts.root
            )))
        }
    };
    // The table comes when every rank has arrived; strangers at the data listener are
    // answered meanwhile.
    let heard = wait_readable(&s, deadline, || {
        data.poll_ahead(deadline)
            .map_err(|e| io_fail(me, "accept", e))
    })?;
    // The root proved the secret in `introduce`: its table may be long.
    match heard.and_then(|()| receive(&mut s, deadline, wire::MAX_BODY)) {
        Ok(table @ Message::Table { .. }) if !table_sealed(&session, &table) => Err(fail(format!(
            "the address table from the root at {} is not sealed under this connection's \
             session key: something between this rank and the root rewrote it",
            opts.root
        ))),
        Ok(Message::Table {
            addrs, hosts, cpus, ..
        }) if addrs.len() == opts.nranks
            && hosts.len() == opts.nranks
            && cpus.len() == opts.nranks =>
        {
            mesh(opts, me, data, &addrs, &hosts, &cpus, deadline)
        }
        Ok(Message::Refuse(reason)) => Err(fail(format!(
            "the root at {} refused this rank: {reason}",
            opts.root
        ))),
        Ok(other) => Err(fail(format!(
            "unexpected answer from the root: {}",
            kind(&other)
        ))),
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
    mut acceptor: Acceptor,
    table: &[String],
    hosts: &[String],
    cpus: &[u32],
    deadline: Instant,
) -> Result<TcpTransport, TransportError> {
    let n = opts.nranks;
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut sessions: Vec<Option<auth::SessionKey>> = vec![None; n];
    let fail = |reason: String| TransportError::Bootstrap { rank: me, reason };
    for (j, addr) in table.iter().enumerate().take(opts.rank) {
        let a: SocketAddr = addr
            .parse()
            .map_err(|_| fail(format!("rank {j} advertised a bad address {addr:?}")))?;
        acceptor
            .poll_ahead(deadline)
            .map_err(|e| io_fail(me, "accept", e))?;
        let mut s = connect_until(a, deadline)
            .map_err(|e| io_fail(me, &format!("cannot connect to rank {j} at {a}"), e))?;
        let handshake = Message::Handshake {
            rank: opts.rank as u32,
            mac: [0; wire::MAC],
        };
        match introduce(&mut s, opts.unique_id, handshake, deadline) {
            Ok(session) => sessions[j] = Some(session),
            Err(Introduction::Io(e)) => {
                return Err(io_fail(me, &format!("handshake with rank {j} at {a}"), e))
            }
            Err(Introduction::Refused(reason)) => {
                return Err(fail(format!("rank {j} at {a} refused this rank: {reason}")))
            }
            Err(Introduction::Impostor(reason)) => {
                return Err(fail(format!(
                    "the listener at {a} that the root named for rank {j} is not rank {j}: \
                     {reason}"
                )))
            }
        }
        tracing::debug!(rank = me.0, peer = j, %a, "connected to peer");
        streams[j] = Some(s);
    }
    serve(
        &mut acceptor,
        None,
        deadline,
        |streams: &Vec<Option<TcpStream>>| streams[opts.rank + 1..].iter().all(Option::is_some),
        &mut streams,
        |streams| {
            let missing: Vec<String> = (opts.rank + 1..n)
                .filter(|&j| streams[j].is_none())
                .map(|j| j.to_string())
                .collect();
            fail(format!(
                "timed out waiting for ranks {} to connect",
                missing.join(", ")
            ))
        },
        |streams,
         Introduced {
             stream,
             from,
             intro,
             session,
         }| {
            let r = match intro {
                Message::Handshake { rank, .. } => rank as usize,
                other => {
                    let reason = format!("expected a handshake, got {}", kind(&other));
                    return accept::refuse(me, stream, from, &reason);
                }
            };
            if r <= opts.rank || r >= n || streams[r].is_some() {
                accept::refuse(me, stream, from, &format!("rank {r} may not connect here"));
            } else {
                tracing::debug!(rank = me.0, peer = r, %from, "accepted peer");
                streams[r] = Some(stream);
                sessions[r] = Some(session);
            }
        },
    )?;
    acceptor.close("every rank this one waits for has connected");
    for s in streams.iter().flatten() {
        s.set_read_timeout(None)
            .map_err(|e| io_fail(me, "socket", e))?;
    }
    tracing::info!(
        rank = me.0,
        peers = n - 1,
        "connected to every peer over tcp"
    );
    let mut t = TcpTransport::new(me, streams, opts.window)
        .map_err(|e| io_fail(me, "cannot register the connections", e))?;
    t.set_sessions(sessions);
    t.set_hosts(std::sync::Arc::new(
        crate::hosts::HostMap::from_keys(hosts).with_reported_cpus(cpus),
    ));
    Ok(t)
}

/// The address table for a member, sealed under its connection's session key.
fn seal_table(
    session: &auth::SessionKey,
    addrs: Vec<String>,
    hosts: Vec<String>,
    cpus: Vec<u32>,
) -> Message {
    let mut table = Message::Table {
        addrs,
        hosts,
        cpus,
        mac: [0; wire::MAC],
    };
    let fields = table.encode();
    if let Message::Table { mac, .. } = &mut table {
        *mac = auth::seal(session, &[b"table", &fields]);
    }
    table
}

/// Whether `table` carries the root's seal under `session` (constant time).
fn table_sealed(session: &auth::SessionKey, table: &Message) -> bool {
    let Message::Table {
        addrs,
        hosts,
        cpus,
        mac,
    } = table
    else {
        return false;
    };
    let unsealed = Message::Table {
        addrs: addrs.clone(),
        hosts: hosts.clone(),
        cpus: cpus.clone(),
        mac: [0; wire::MAC],
    };
    auth::sealed(session, &[b"table", &unsealed.encode()], mac)
}

/// What a rank told the root: its data listener, host key and machine CPUs.
#[derive(Clone)]
struct Member {
    addr: String,
    host: String,
    cpus: u32,
}

/// A CPU count as the wire carries it (a count past `u32` is no count a machine has).
fn cpus_word(cpus: usize) -> u32 {
    u32::try_from(cpus).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
