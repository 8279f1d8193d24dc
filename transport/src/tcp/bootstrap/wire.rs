//! Bootstrap messages (pure encoding, shared by both sides and fuzzable).
//!
//! Every connection opens with the connector's [`Message::Challenge`], the acceptor's
//! [`Message::Proof`], then the connector's introduction ([`Message::Hello`] to the root,
//! [`Message::Handshake`] to a peer) carrying its own proof (see [`super::auth`]). The job's
//! secret never travels: only nonces and MACs do.

/// `"RCB5"`: bootstrap protocol and version (2: mutual proof of the job secret; 3: host
/// keys in the hello and the table; 4: each rank's machine CPUs with them; 5: the table
/// sealed under the connection's session key).
pub const MAGIC: [u8; 4] = *b"RCB5";
/// Largest message body accepted: the root's address table for the most ranks a group may
/// have (a listener takes far less from a connection that has not proven itself:
/// [`MAX_INTRO`]).
pub const MAX_BODY: usize = 64 << 20;
/// Largest message an acceptor reads from a connection before it proved the secret.
pub const MAX_INTRO: usize = 4096;
/// Bytes of a nonce.
pub const NONCE: usize = 16;
/// Bytes of a MAC (HMAC-SHA-256).
pub const MAC: usize = 32;

/// A bootstrap message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A rank introduces itself to the root.
    Hello {
        /// Sender's rank.
        rank: u32,
        /// Group size the sender expects.
        nranks: u32,
        /// Sender's data listener.
        addr: String,
        /// Sender's host key (ranks with equal keys share a machine).
        host: String,
        /// The CPUs of the sender's machine that its ranks share (0: unknown; see
        /// [`crate::topology::machine_cpus`]).
        cpus: u32,
        /// The sender's proof of the job secret over this connection's nonces and the
        /// fields above.
        mac: [u8; MAC],
    },
    /// The root's answer: every rank's data listener, host key and machine CPUs, by rank.
    Table {
        /// Data listeners.
        addrs: Vec<String>,
        /// Host keys.
        hosts: Vec<String>,
        /// Machine CPUs (0: unknown).
        cpus: Vec<u32>,
        /// The root's MAC over the fields above under the connection's session key
        /// ([`super::auth::seal`]).
        mac: [u8; MAC],
    },
    /// The acceptor refuses the connector.
    Refuse(String),
    /// A rank introduces itself on a data connection.
    Handshake {
        /// Connecting rank.
        rank: u32,
        /// Its proof, as in `Hello`.
        mac: [u8; MAC],
    },
    /// The connector's first message: a fresh nonce for the acceptor to prove itself on.
    Challenge {
        /// Random, never reused.
        nonce: [u8; NONCE],
    },
    /// The acceptor's proof of the job secret, and its own nonce.
    Proof {
        /// Random, never reused.
        nonce: [u8; NONCE],
        /// MAC over both nonces.
        mac: [u8; MAC],
    },
}

/// Why bytes are not a bootstrap message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not `RCB2`.
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
    /// Body longer than its fields.
    #[error("bootstrap message with {0} bytes after its fields")]
    Trailing(usize),
    /// A string field is not UTF-8.
    #[error("bootstrap message has a string that is not UTF-8")]
    BadString,
}

/// The 9-byte prefix: magic, kind, body length.
pub const PREFIX: usize = 9;

const KINDS: std::ops::RangeInclusive<u8> = 1..=6;

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
                rank,
                nranks,
                addr,
                host,
                cpus,
                mac,
            } => {
                body.extend_from_slice(&rank.to_le_bytes());
                body.extend_from_slice(&nranks.to_le_bytes());
                put_str(&mut body, addr);
                put_str(&mut body, host);
                body.extend_from_slice(&cpus.to_le_bytes());
                body.extend_from_slice(mac);
                1
            }
            Message::Table {
                addrs,
                hosts,
                cpus,
                mac,
            } => {
                // As many entries as the shortest list: a rank is all three.
                let n = addrs.len().min(hosts.len()).min(cpus.len());
                body.extend_from_slice(&(n as u32).to_le_bytes());
                for a in &addrs[..n] {
                    put_str(&mut body, a);
                }
                for h in &hosts[..n] {
                    put_str(&mut body, h);
                }
                for c in &cpus[..n] {
                    body.extend_from_slice(&c.to_le_bytes());
                }
                body.extend_from_slice(mac);
                2
            }
            Message::Refuse(reason) => {
                put_str(&mut body, reason);
                3
            }
            Message::Handshake { rank, mac } => {
                body.extend_from_slice(&rank.to_le_bytes());
                body.extend_from_slice(mac);
                4
            }
            Message::Challenge { nonce } => {
                body.extend_from_slice(nonce);
                5
            }
            Message::Proof { nonce, mac } => {
                body.extend_from_slice(nonce);
                body.extend_from_slice(mac);
                6
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
        if !KINDS.contains(&p[4]) {
            return Err(WireError::BadKind(p[4]));
        }
        Ok((p[4], len))
    }

    /// Decodes a body of kind `kind`.
    pub fn decode_body(kind: u8, body: &[u8]) -> Result<Message, WireError> {
        let mut r = Reader(body);
        let m = match kind {
            1 => Message::Hello {
                rank: r.u32()?,
                nranks: r.u32()?,
                addr: r.string()?,
                host: r.string()?,
                cpus: r.u32()?,
                mac: r.array()?,
            },
            2 => {
                let n = r.u32()? as usize;
                // Each entry takes at least its 2-byte length: no more than the body holds.
                let mut addrs = Vec::with_capacity(n.min(r.0.len() / 4));
                for _ in 0..n {
                    addrs.push(r.string()?);
                }
                let mut hosts = Vec::with_capacity(n.min(r.0.len() / 2));
                for _ in 0..n {
                    hosts.push(r.string()?);
                }
                let mut cpus = Vec::with_capacity(n.min(r.0.len() / 4));
                for _ in 0..n {
                    cpus.push(r.u32()?);
                }
                Message::Table {
                    addrs,
                    hosts,
                    cpus,
                    mac: r.array()?,
                }
            }
            3 => Message::Refuse(r.string()?),
            4 => Message::Handshake {
                rank: r.u32()?,
                mac: r.array()?,
            },
            5 => Message::Challenge { nonce: r.array()? },
            6 => Message::Proof {
                nonce: r.array()?,
                mac: r.array()?,
            },
            k => return Err(WireError::BadKind(k)),
        };
        if !r.0.is_empty() {
            return Err(WireError::Trailing(r.0.len()));
        }
        Ok(m)
    }

    /// Splits one whole message off the front of `buf`: the message and the bytes it took,
    /// `None` while it is incomplete.
    pub fn split(buf: &[u8]) -> Result<Option<(Message, usize)>, WireError> {
        let Some(prefix) = buf.first_chunk::<PREFIX>() else {
            return Ok(None);
        };
        let (kind, len) = Message::decode_prefix(prefix)?;
        match buf.get(PREFIX..PREFIX + len) {
            None => Ok(None),
            Some(body) => Message::decode_body(kind, body).map(|m| Some((m, PREFIX + len))),
        }
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

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn string(&mut self) -> Result<String, WireError> {
        let b = self.take(2)?;
        let n = u16::from_le_bytes([b[0], b[1]]) as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| WireError::BadString)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let messages = [
            Message::Hello {
                rank: 3,
                nranks: 8,
                addr: "[::1]:4000".into(),
                host: "node7/5d41402a".into(),
                cpus: 128,
                mac: [7; MAC],
            },
            Message::Table {
                addrs: vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()],
                hosts: vec!["a".into(), "b".into()],
                cpus: vec![2, 0],
                mac: [5; MAC],
            },
            Message::Refuse("no".into()),
            Message::Handshake {
                rank: 1,
                mac: [1; MAC],
            },
            Message::Challenge { nonce: [2; NONCE] },
            Message::Proof {
                nonce: [3; NONCE],
                mac: [4; MAC],
            },
        ];
        for m in messages {
            let bytes = m.encode();
            let (back, used) = Message::split(&bytes).unwrap().unwrap();
            assert_eq!((back, used), (m, bytes.len()));
            assert_eq!(Message::split(&bytes[..bytes.len() - 1]), Ok(None));
        }
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(matches!(
            Message::decode_prefix(b"GET / HTT"),
            Err(WireError::BadMagic(_))
        ));
        assert!(matches!(
            Message::decode_prefix(b"RCB3\x01\x00\x00\x00\x00"),
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
        assert_eq!(
            Message::decode_body(5, &[0; NONCE + 1]),
            Err(WireError::Trailing(1))
        );
        // A table that claims more entries than its body could hold allocates nothing big.
        let mut body = u32::MAX.to_le_bytes().to_vec();
        body.extend_from_slice(&[0, 0]);
        assert_eq!(Message::decode_body(2, &body), Err(WireError::Truncated));
    }
}
