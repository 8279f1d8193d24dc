//! Mutual proof of the job secret on every connection, bootstrap and data alike.
//!
//! ```text
//!   connector                                  acceptor
//!   Challenge { nonce_c }           ────────►
//!                                   ◄────────  Proof { nonce_s, HMAC(k, "acceptor" | nonce_c | nonce_s) }
//!   checks the acceptor's MAC
//!   Hello/Handshake { fields,       ────────►  checks the connector's MAC, and only then
//!     HMAC(k, "connector" | nonce_c | nonce_s | fields) }    gives it a rank slot
//! ```
//!
//! `k` is the job's 128-bit secret (the unique id). Both nonces are fresh random bytes, so
//! a recorded exchange proves nothing on another connection, and neither side learns
//! anything about `k` from the other's MAC. The secret itself never travels.
//!
//! After the handshake both ends hold a **session key**, HKDF-SHA-256 of `k` salted with
//! both nonces ([`session_key`]): every control message on the connection — the root's
//! address table, verbs endpoints, shared-memory announcements — carries a MAC under it
//! ([`seal`]), over its kind, sender, receiver, count and bytes, so a relay between two
//! ranks can drop or delay the job but not steer it (rewrite, replay, reorder or move a
//! message to another connection). Collective payloads are not authenticated.

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::wire::{Message, MAC, NONCE};

type HmacSha256 = Hmac<Sha256>;

/// A connection's session key (see the module).
pub type SessionKey = [u8; 32];

/// The session key of the connection whose handshake used these nonces.
pub fn session_key(secret: u128, nonce_c: &[u8; NONCE], nonce_s: &[u8; NONCE]) -> SessionKey {
    let mut salt = [0u8; 2 * NONCE];
    salt[..NONCE].copy_from_slice(nonce_c);
    salt[NONCE..].copy_from_slice(nonce_s);
    let hk = Hkdf::<Sha256>::new(Some(&salt), &secret.to_le_bytes());
    let mut key = [0u8; 32];
    // 32 bytes is far below HKDF-SHA-256's limit (255 * 32): expand cannot fail.
    let _ = hk.expand(b"rcoll-session-v1", &mut key);
    key
}

/// The MAC of a control message under a session key: over `parts`, each length-prefixed.
pub fn seal(key: &SessionKey, parts: &[&[u8]]) -> [u8; MAC] {
    session_mac(key, parts).finalize().into_bytes().into()
}

/// Whether `mac` is [`seal`]'s for `parts` (constant time).
pub fn sealed(key: &SessionKey, parts: &[&[u8]], mac: &[u8]) -> bool {
    session_mac(key, parts).verify_slice(mac).is_ok()
}

fn session_mac(key: &SessionKey, parts: &[&[u8]]) -> HmacSha256 {
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        // Unreachable: HMAC accepts every key length.
        Err(_) => HmacSha256::new(&Default::default()),
    };
    mac.update(b"rcoll-control-v1");
    for p in parts {
        mac.update(&(p.len() as u32).to_le_bytes());
        mac.update(p);
    }
    mac
}

/// A fresh random nonce.
pub fn nonce() -> std::io::Result<[u8; NONCE]> {
    let mut n = [0u8; NONCE];
    getrandom::fill(&mut n).map_err(std::io::Error::other)?;
    Ok(n)
}

/// A fresh random 128-bit job secret.
pub fn random_secret() -> std::io::Result<u128> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(std::io::Error::other)?;
    Ok(u128::from_le_bytes(b))
}

fn mac_over(secret: u128, role: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // A 16-byte key: HMAC takes keys of any length.
    let mut mac = match HmacSha256::new_from_slice(&secret.to_le_bytes()) {
        Ok(m) => m,
        // Unreachable: HMAC accepts every key length.
        Err(_) => HmacSha256::new(&Default::default()),
    };
    mac.update(b"rcoll-bootstrap-v2/");
    mac.update(role);
    for p in parts {
        mac.update(&(p.len() as u32).to_le_bytes());
        mac.update(p);
    }
    mac
}

/// The fields of an introduction that its MAC covers (everything but the MAC).
fn bound_fields(m: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    match m {
        Message::Hello {
            rank,
            nranks,
            addr,
            host,
            cpus,
            ..
        } => {
            out.push(1);
            out.extend_from_slice(&rank.to_le_bytes());
            out.extend_from_slice(&nranks.to_le_bytes());
            out.extend_from_slice(&(addr.len() as u32).to_le_bytes());
            out.extend_from_slice(addr.as_bytes());
            out.extend_from_slice(&(host.len() as u32).to_le_bytes());
            out.extend_from_slice(host.as_bytes());
            out.extend_from_slice(&cpus.to_le_bytes());
        }
        Message::Handshake { rank, .. } => {
            out.push(4);
            out.extend_from_slice(&rank.to_le_bytes());
        }
        _ => out.push(0),
    }
    out
}

/// The acceptor's MAC over both nonces.
pub fn acceptor_mac(secret: u128, nonce_c: &[u8; NONCE], nonce_s: &[u8; NONCE]) -> [u8; MAC] {
    mac_over(secret, b"acceptor", &[nonce_c, nonce_s])
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `mac` is the acceptor's MAC for these nonces (constant time).
pub fn acceptor_mac_ok(
    secret: u128,
    nonce_c: &[u8; NONCE],
    nonce_s: &[u8; NONCE],
    mac: &[u8; MAC],
) -> bool {
    mac_over(secret, b"acceptor", &[nonce_c, nonce_s])
        .verify_slice(mac)
        .is_ok()
}

/// `intro` (a `Hello` or `Handshake`) with the connector's MAC filled in.
pub fn sign_intro(
    secret: u128,
    nonce_c: &[u8; NONCE],
    nonce_s: &[u8; NONCE],
    intro: Message,
) -> Message {
    let fields = bound_fields(&intro);
    let mac: [u8; MAC] = mac_over(secret, b"connector", &[nonce_c, nonce_s, &fields])
        .finalize()
        .into_bytes()
        .into();
    match intro {
        Message::Hello {
            rank,
            nranks,
            addr,
            host,
            cpus,
            ..
        } => Message::Hello {
            rank,
            nranks,
            addr,
            host,
            cpus,
            mac,
        },
        Message::Handshake { rank, .. } => Message::Handshake { rank, mac },
        other => other,
    }
}

/// Whether an introduction carries the connector's MAC for these nonces (constant time).
pub fn intro_ok(
    secret: u128,
    nonce_c: &[u8; NONCE],
    nonce_s: &[u8; NONCE],
    intro: &Message,
) -> bool {
    let mac = match intro {
        Message::Hello { mac, .. } | Message::Handshake { mac, .. } => mac,
        _ => return false,
    };
    mac_over(
        secret,
        b"connector",
        &[nonce_c, nonce_s, &bound_fields(intro)],
    )
    .verify_slice(mac)
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_hold_only_for_the_same_secret_nonces_and_fields() {
        let (k, other) = (0x1234_u128, 0x1235_u128);
        let (c, s) = ([1u8; NONCE], [2u8; NONCE]);
        let m = acceptor_mac(k, &c, &s);
        assert!(acceptor_mac_ok(k, &c, &s, &m));
        assert!(!acceptor_mac_ok(other, &c, &s, &m));
        assert!(!acceptor_mac_ok(k, &s, &c, &m));

        // Rank 2 of 4 on host `a` of 64 CPUs, but for what `change` makes of it.
        let hello_with = |mac: [u8; MAC], change: &dyn Fn(&mut Message)| {
            let mut m = Message::Hello {
                rank: 2,
                nranks: 4,
                addr: "127.0.0.1:5".into(),
                host: "a".into(),
                cpus: 64,
                mac,
            };
            change(&mut m);
            m
        };
        let hello = sign_intro(k, &c, &s, hello_with([0; MAC], &|_| {}));
        assert!(intro_ok(k, &c, &s, &hello));
        assert!(!intro_ok(other, &c, &s, &hello));
        assert!(!intro_ok(k, &c, &[9; NONCE], &hello));
        let Message::Hello { mac, .. } = hello.clone() else {
            unreachable!()
        };
        // With the same MAC, every field is bound: another rank, another host key, other
        // CPUs (a rank claiming its host is crowded, or not).
        let changes: [&dyn Fn(&mut Message); 3] = [
            &|m| {
                if let Message::Hello { rank, .. } = m {
                    *rank = 3;
                }
            },
            &|m| {
                if let Message::Hello { host, .. } = m {
                    *host = "b".into();
                }
            },
            &|m| {
                if let Message::Hello { cpus, .. } = m {
                    *cpus = 2;
                }
            },
        ];
        for (i, change) in changes.iter().enumerate() {
            let forged = hello_with(mac, *change);
            assert_ne!(forged, hello, "change {i}");
            assert!(!intro_ok(k, &c, &s, &forged), "change {i}");
        }
        // The acceptor's MAC is not a connector's.
        let as_handshake = Message::Handshake { rank: 2, mac: m };
        assert!(!intro_ok(k, &c, &s, &as_handshake));
    }

    #[test]
    fn nonces_and_secrets_are_fresh() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
        assert_ne!(random_secret().unwrap(), random_secret().unwrap());
    }
}
