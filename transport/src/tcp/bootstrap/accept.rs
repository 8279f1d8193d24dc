//! Serving a listener during setup: every connection at once, each non-blocking with its
//! own buffer, so a stranger that connects and stays silent (or trickles bytes) holds up no
//! one. A connection first has to prove the job secret ([`super::auth`]); only its
//! authenticated introduction reaches the caller, who then gives it a rank slot or refuses it.
//!
//! Limits: [`INTRO_TIMEOUT`] per connection, [`MAX_PENDING`] connections at once (the
//! oldest is dropped past it), a message's size ([`wire::MAX_BODY`]); running out of file
//! descriptors while accepting is waited out, not fatal.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::auth;
use super::wire::{self, Message, NONCE};
use crate::types::Rank;

/// How long a connection may take to prove itself and introduce itself.
pub const INTRO_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once before the oldest unproven one is dropped.
pub const MAX_PENDING: usize = 1024;

enum Stage {
    /// Waiting for the connector's challenge.
    Challenge,
    /// Proof sent; waiting for the introduction.
    Intro {
        nonce_c: [u8; NONCE],
        nonce_s: [u8; NONCE],
    },
}

/// The acceptor's side of one connection's handshake, without I/O: told the bytes the
/// connection sent, it says how many more to read (never past the message being read:
/// what follows the introduction belongs to the transport), what to answer, and the
/// introduction once the connection proved the job's secret.
pub struct Handshake {
    secret: u128,
    buf: Vec<u8>,
    stage: Stage,
}

/// What a [`Handshake`] made of the bytes it was given.
pub enum Step {
    /// Bytes to write back to the connection (the proof answering its challenge).
    Answer(Vec<u8>),
    /// The connection's authenticated introduction and its session key: the handshake
    /// is over.
    Introduced(Message, auth::SessionKey),
}

impl Handshake {
    /// The handshake of a fresh connection to a rank of the job whose secret is `secret`.
    pub fn new(secret: u128) -> Handshake {
        Handshake {
            secret,
            buf: Vec::new(),
            stage: Stage::Challenge,
        }
    }

    /// How many bytes to read next: the rest of the message being read (its prefix
    /// first). An error if the prefix announces a message no introduction needs.
    pub fn want(&self) -> Result<usize, String> {
        Ok(match self.buf.first_chunk::<{ wire::PREFIX }>() {
            Some(prefix) => {
                let (_, len) = Message::decode_prefix(prefix).map_err(|e| e.to_string())?;
                if len > wire::MAX_INTRO {
                    return Err(format!("a {len}-byte message before proving itself"));
                }
                wire::PREFIX + len - self.buf.len()
            }
            None => wire::PREFIX - self.buf.len(),
        })
    }

    /// Takes `bytes` read from the connection (at most [`want`](Self::want) of them) and
    /// answers a message they complete; `None` while the message is incomplete. An error
    /// refuses the connection: garbage, the wrong message, or no proof of the secret.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Option<Step>, String> {
        let want = self.want()?;
        if bytes.len() > want {
            return Err(format!("{} bytes given, {want} wanted", bytes.len()));
        }
        self.buf.extend_from_slice(bytes);
        // The prefix alone may announce a message whose size `want` refuses.
        self.want()?;
        let Some((m, used)) = Message::split(&self.buf).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        self.buf.drain(..used);
        match (&self.stage, m) {
            (Stage::Challenge, Message::Challenge { nonce: nonce_c }) => {
                let nonce_s = auth::nonce().map_err(|e| format!("no randomness: {e}"))?;
                let proof = Message::Proof {
                    nonce: nonce_s,
                    mac: auth::acceptor_mac(self.secret, &nonce_c, &nonce_s),
                };
                self.stage = Stage::Intro { nonce_c, nonce_s };
                Ok(Some(Step::Answer(proof.encode())))
            }
            (Stage::Intro { nonce_c, nonce_s }, intro) => {
                if !matches!(intro, Message::Hello { .. } | Message::Handshake { .. }) {
                    return Err(format!("expected an introduction, got {}", kind(&intro)));
                }
                if !auth::intro_ok(self.secret, nonce_c, nonce_s, &intro) {
                    return Err("it does not prove this job's secret (RCOLL_UNIQUE_ID): \
                                another job, or a stranger"
                        .into());
                }
                let session = auth::session_key(self.secret, nonce_c, nonce_s);
                Ok(Some(Step::Introduced(intro, session)))
            }
            (Stage::Challenge, other) => Err(format!(
                "expected a challenge, got {} (an older rcoll, or not rcoll)",
                kind(&other)
            )),
        }
    }
}

struct Pending {
    stream: TcpStream,
    from: SocketAddr,
    since: Instant,
    handshake: Handshake,
}

/// A listener and the connections it is serving.
pub struct Acceptor {
    listener: TcpListener,
    secret: u128,
    me: Rank,
    pending: Vec<Pending>,
    /// Since when, and why, accept has been failing for lack of descriptors or memory
    /// (logged once per episode; named in a timeout).
    starved: Option<(Instant, String)>,
    /// Introductions completed by [`poll_ahead`](Self::poll_ahead), for the next `poll`.
    held: Vec<Introduced>,
}

/// An authenticated introduction: the stream (blocking again) and what it said.
pub struct Introduced {
    /// The connection.
    pub stream: TcpStream,
    /// Its peer address.
    pub from: SocketAddr,
    /// Its `Hello` or `Handshake`, MAC checked.
    pub intro: Message,
    /// The connection's session key ([`auth::session_key`]).
    pub session: auth::SessionKey,
}

impl Acceptor {
    /// Serves `listener` for rank `me` of the job whose secret is `secret`.
    pub fn new(listener: TcpListener, secret: u128, me: Rank) -> io::Result<Acceptor> {
        listener.set_nonblocking(true)?;
        Ok(Acceptor {
            listener,
            secret,
            me,
            pending: Vec::new(),
            starved: None,
            held: Vec::new(),
        })
    }

    /// The rank it serves.
    pub fn rank(&self) -> Rank {
        self.me
    }

    /// If accept(2) is failing (out of descriptors, memory...): since how long and why.
    pub fn starvation(&self) -> Option<String> {
        self.starved.as_ref().map(|(since, why)| {
            format!(
                "accept(2) has failed for {:.1?} with \"{why}\" (too many open files? raise \
                 `ulimit -n`)",
                since.elapsed()
            )
        })
    }

    /// The listener's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts what is waiting, advances every connection, and returns the introductions
    /// that completed (authenticated), and whether anything happened. Connections that fail
    /// to prove the secret, time out or send garbage are refused and logged here.
    pub fn poll(&mut self, deadline: Instant) -> io::Result<(Vec<Introduced>, bool)> {
        let mut done = std::mem::take(&mut self.held);
        let mut busy = self.accept_waiting()? || !done.is_empty();
        let mut i = 0;
        while i < self.pending.len() {
            let limit =
                INTRO_TIMEOUT.min(deadline.saturating_duration_since(self.pending[i].since));
            let verdict = match self.advance(i) {
                Ok(None)
                    if self.pending[i].since.elapsed() < limit.max(Duration::from_millis(1)) =>
                {
                    i += 1;
                    continue;
                }
                Ok(None) => Err(format!(
                    "no introduction within {:?}",
                    self.pending[i].since.elapsed()
                )),
                Ok(Some(introduced)) => Ok(introduced),
                Err(e) => Err(e),
            };
            busy = true;
            let Pending { stream, from, .. } = self.pending.swap_remove(i);
            match verdict {
                Ok((intro, session)) => {
                    stream.set_nonblocking(false)?;
                    done.push(Introduced {
                        stream,
                        from,
                        intro,
                        session,
                    });
                }
                Err(reason) => refuse(self.me, stream, from, &reason),
            }
        }
        Ok((done, busy))
    }

    /// Serves the listener before its owner can use what it hears (a member waiting for
    /// the address table, or for another rank's listener): strangers are answered and
    /// refused at once instead of waiting in the backlog; authenticated introductions are
    /// kept for the next [`poll`](Self::poll). Whether anything happened.
    pub fn poll_ahead(&mut self, deadline: Instant) -> io::Result<bool> {
        let (done, busy) = self.poll(deadline)?;
        self.held.extend(done);
        Ok(busy)
    }

    /// Closes the listener, refusing with `reason` every connection it has not served:
    /// those being introduced, kept, or still in the backlog. A stranger learns why rather
    /// than seeing its connection reset.
    pub fn close(mut self, reason: &str) {
        if let Err(e) = self.accept_waiting() {
            tracing::debug!(rank = self.me.0, error = %e, "accept while closing");
        }
        for p in std::mem::take(&mut self.pending) {
            refuse(self.me, p.stream, p.from, reason);
        }
        for i in std::mem::take(&mut self.held) {
            refuse(self.me, i.stream, i.from, reason);
        }
    }

    fn accept_waiting(&mut self) -> io::Result<bool> {
        let mut busy = false;
        loop {
            match self.listener.accept() {
                Ok((stream, from)) => {
                    self.starved = None;
                    stream.set_nonblocking(true)?;
                    if self.pending.len() >= MAX_PENDING {
                        let oldest = (0..self.pending.len())
                            .min_by_key(|&i| self.pending[i].since)
                            .unwrap_or(0);
                        let oldest = self.pending.swap_remove(oldest);
                        refuse(
                            self.me,
                            oldest.stream,
                            oldest.from,
                            &format!("more than {MAX_PENDING} connections waiting"),
                        );
                    }
                    self.pending.push(Pending {
                        stream,
                        from,
                        since: Instant::now(),
                        handshake: Handshake::new(self.secret),
                    });
                    busy = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(busy),
                Err(e) if transient(&e) => {
                    // Out of descriptors or buffers: the connection waits in the backlog;
                    // serving the others frees some. Not a reason to fail the rendezvous.
                    if self.starved.is_none() {
                        tracing::warn!(rank = self.me.0, error = %e, "accept failed; retrying");
                        eprintln!(
                            "rcoll bootstrap ({}): accept failed ({e}); retrying",
                            self.me
                        );
                    }
                    self.starved
                        .get_or_insert_with(|| (Instant::now(), e.to_string()));
                    return Ok(busy);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads what connection `i` sent and answers it; its introduction once it proved the
    /// secret, or why it is refused.
    fn advance(&mut self, i: usize) -> Result<Option<(Message, auth::SessionKey)>, String> {
        let p = &mut self.pending[i];
        let mut chunk = [0u8; 4096];
        loop {
            let want = p.handshake.want()?.min(chunk.len());
            let n = match p.stream.read(&mut chunk[..want]) {
                Ok(0) => return Err("closed before introducing itself".into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("read failed: {e}")),
            };
            match p.handshake.feed(&chunk[..n])? {
                None => {}
                // A few dozen bytes on a fresh connection: the socket buffer takes them.
                Some(Step::Answer(bytes)) => p
                    .stream
                    .write_all(&bytes)
                    .map_err(|e| format!("cannot answer its challenge: {e}"))?,
                Some(Step::Introduced(intro, session)) => return Ok(Some((intro, session))),
            }
        }
    }
}

/// Accept errors that mean "try again later" rather than a broken listener.
fn transient(e: &io::Error) -> bool {
    // Out of descriptors or memory, and (accept(2), "Error handling") the errors already
    // pending on the new connection, which Linux passes on: retry, as the man page says.
    matches!(
        e.raw_os_error(),
        Some(
            libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::ECONNABORTED
                | libc::EPROTO
                | libc::ENETDOWN
                | libc::ENOPROTOOPT
                | libc::EHOSTDOWN
                | libc::ENONET
                | libc::EHOSTUNREACH
                | libc::EOPNOTSUPP
                | libc::ENETUNREACH
                | libc::EPERM
        )
    ) || e.kind() == io::ErrorKind::Interrupted
}

/// A message's kind, for refusals (never its contents: they may be a stranger's bytes).
pub fn kind(m: &Message) -> &'static str {
    match m {
        Message::Hello { .. } => "a hello",
        Message::Table { .. } => "an address table",
        Message::Refuse(_) => "a refusal",
        Message::Handshake { .. } => "a handshake",
        Message::Challenge { .. } => "a challenge",
        Message::Proof { .. } => "a proof",
    }
}

/// Refusals are printed (they mean a misconfigured or foreign job is knocking), and also
/// go to `tracing`, at most [`REFUSALS_SHOWN`] a second: a flood of strangers would
/// otherwise bury the job's own output; the count of those not shown follows. The
/// connector is told why, briefly.
pub fn refuse(me: Rank, mut stream: TcpStream, from: SocketAddr, reason: &str) {
    let admitted = REFUSAL_LOG
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .admit(Instant::now());
    if let Admit::Show { unshown } = admitted {
        if unshown > 0 {
            eprintln!("rcoll bootstrap ({me}): {unshown} more refused connections not shown");
            tracing::warn!(rank = me.0, unshown, "refused connections not shown");
        }
        eprintln!("rcoll bootstrap ({me}): refused connection from {from}: {reason}");
        tracing::warn!(rank = me.0, %from, reason, "refused a connection");
    }
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = stream.write_all(&Message::Refuse(reason.to_owned()).encode());
}

/// Refusal lines shown per second, at most.
pub const REFUSALS_SHOWN: u32 = 10;

static REFUSAL_LOG: std::sync::Mutex<Throttle> = std::sync::Mutex::new(Throttle {
    window: None,
    shown: 0,
    unshown: 0,
});

/// Lets [`REFUSALS_SHOWN`] lines through per second and counts the rest.
#[derive(Debug)]
struct Throttle {
    /// Start of the current second.
    window: Option<Instant>,
    shown: u32,
    /// Lines not shown since the last one shown.
    unshown: u64,
}

#[derive(Debug, PartialEq, Eq)]
enum Admit {
    /// Show the line, after a count of the lines not shown before it.
    Show {
        unshown: u64,
    },
    Hide,
}

impl Throttle {
    fn admit(&mut self, now: Instant) -> Admit {
        let fresh = self
            .window
            .is_none_or(|w| now.duration_since(w) >= Duration::from_secs(1));
        if fresh {
            self.window = Some(now);
            self.shown = 0;
        }
        if self.shown < REFUSALS_SHOWN {
            self.shown += 1;
            Admit::Show {
                unshown: std::mem::take(&mut self.unshown),
            }
        } else {
            self.unshown += 1;
            Admit::Hide
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` to `h` a byte at a time, as reads of any size would bring them: the
    /// steps it took.
    fn trickle(h: &mut Handshake, bytes: &[u8]) -> Result<Vec<Step>, String> {
        let mut steps = Vec::new();
        for b in bytes {
            assert!(h.want()? >= 1, "wants nothing with bytes still to come");
            steps.extend(h.feed(std::slice::from_ref(b))?);
        }
        Ok(steps)
    }

    fn hello() -> Message {
        Message::Hello {
            rank: 1,
            nranks: 2,
            addr: "127.0.0.1:9".into(),
            host: "h".into(),
            cpus: 2,
            mac: [0; wire::MAC],
        }
    }

    /// A connector that knows the secret: challenge, proof, introduction — fed a byte at a
    /// time, the handshake answers once and then hands over the introduction with the
    /// session key both sides derive; the proof it sent checks against the secret.
    #[test]
    fn a_connector_with_the_secret_is_introduced_byte_by_byte() {
        let secret = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef_u128;
        let mut h = Handshake::new(secret);
        let nonce_c = auth::nonce().expect("nonce");
        let steps = trickle(&mut h, &Message::Challenge { nonce: nonce_c }.encode()).unwrap();
        let [Step::Answer(answer)] = steps.as_slice() else {
            panic!("one answer to the challenge");
        };
        let (proof, used) = Message::split(answer).unwrap().expect("a whole message");
        assert_eq!(used, answer.len());
        let Message::Proof {
            nonce: nonce_s,
            mac,
        } = proof
        else {
            panic!("a proof");
        };
        assert!(auth::acceptor_mac_ok(secret, &nonce_c, &nonce_s, &mac));
        let intro = auth::sign_intro(secret, &nonce_c, &nonce_s, hello());
        let steps = trickle(&mut h, &intro.encode()).unwrap();
        let [Step::Introduced(got, session)] = steps.as_slice() else {
            panic!("the introduction");
        };
        assert_eq!(got, &intro);
        assert!(*session == auth::session_key(secret, &nonce_c, &nonce_s));
    }

    /// Without the secret, or out of order, or too large before any proof: refused.
    #[test]
    fn strangers_garbage_and_the_wrong_order_are_refused() {
        let secret = 7u128 << 64 | 9;
        let nonce_c = [3u8; NONCE];
        // Signed with another secret.
        let mut h = Handshake::new(secret);
        let steps = trickle(&mut h, &Message::Challenge { nonce: nonce_c }.encode()).unwrap();
        let Some(Step::Answer(answer)) = steps.into_iter().next() else {
            panic!("an answer");
        };
        let Some((Message::Proof { nonce: nonce_s, .. }, _)) = Message::split(&answer).unwrap()
        else {
            panic!("a proof");
        };
        let forged = auth::sign_intro(secret + 1, &nonce_c, &nonce_s, hello());
        let e = trickle(&mut h, &forged.encode()).err().expect("refused");
        assert!(e.contains("does not prove"), "{e}");
        // An introduction before any challenge.
        let e = trickle(&mut Handshake::new(secret), &hello().encode())
            .err()
            .expect("refused");
        assert!(e.contains("expected a challenge"), "{e}");
        // A prefix announcing more than an introduction takes: refused on the prefix.
        let big = Message::Refuse("x".repeat(wire::MAX_INTRO + 1)).encode();
        let e = trickle(&mut Handshake::new(secret), &big[..wire::PREFIX])
            .err()
            .expect("refused");
        assert!(e.contains("before proving itself"), "{e}");
        // More bytes than it asked for.
        let mut h = Handshake::new(secret);
        let e = h.feed(&[0; wire::PREFIX + 1]).err().expect("refused");
        assert!(e.contains("wanted"), "{e}");
    }

    /// A flood of 29,000 refusals in 2 s shows 10 lines a second, and the first line of
    /// each later second counts those hidden before it.
    #[test]
    fn a_flood_of_refusals_shows_ten_lines_a_second() {
        let mut t = Throttle {
            window: None,
            shown: 0,
            unshown: 0,
        };
        let start = Instant::now();
        let mut shown = Vec::new();
        for i in 0..29_000u64 {
            let at = start + Duration::from_micros(i * 2_000_000 / 29_000);
            if let Admit::Show { unshown } = t.admit(at) {
                shown.push(unshown);
            }
        }
        assert_eq!(shown.len(), 20, "{shown:?}");
        assert_eq!(shown[..10], [0; 10]);
        assert_eq!(
            shown[10],
            14_500 - 10,
            "the count hidden in the first second"
        );
        assert_eq!(shown[11..], [0; 9]);
        // A quiet second later: the count of the rest comes with the next line.
        let later = start + Duration::from_secs(5);
        assert_eq!(t.admit(later), Admit::Show { unshown: 14_490 });
    }
}
