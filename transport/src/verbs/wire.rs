//! The verbs backend's wire formats, pure (and fuzzed: `fuzz/fuzz_targets/verbs_wire.rs`):
//! credits (a slot lent to a peer), endpoints (what a rank tells a peer about its queue
//! pair, over the TCP bootstrap), the message header at the front of every slot, and work
//! request ids.

use crate::types::Tag;

/// Bytes of header in front of every message in a slot.
pub const HEADER: usize = 32;
/// Magic at the front of endpoints and slot headers (`RCV1`).
pub const MAGIC: u32 = u32::from_be_bytes(*b"RCV1");
/// Immediate of the connectivity check.
pub const HELLO: u32 = u32::MAX;
/// Bytes of one credit in a credit message.
pub const CREDIT_BYTES: usize = 20;
/// Room in every slot behind a message of the largest size for grants that ride with it
/// (32 records: 16 offers).
pub const TRAILER: usize = 32 * CREDIT_BYTES;

/// A slot the receiver lends: the sender may write up to `len` bytes at `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credit {
    /// The slot's id (the immediate the sender writes with).
    pub id: u32,
    /// Its address on the receiver.
    pub addr: u64,
    /// Its remote key.
    pub rkey: u32,
    /// Its length (header included).
    pub len: u32,
}

impl Credit {
    /// Appends the 20-byte encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.addr.to_le_bytes());
        out.extend_from_slice(&self.rkey.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
    }

    /// Decodes one credit (`None` if short).
    pub fn decode(b: &[u8]) -> Option<Credit> {
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        Some(Credit {
            id: u32_at(0)?,
            addr: u64::from_le_bytes(b.get(4..12)?.try_into().ok()?),
            rkey: u32_at(12)?,
            len: u32_at(16)?,
        })
    }
}

/// What a rank tells a peer about its end of their queue pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Queue pair number.
    pub qpn: u32,
    /// Initial packet sequence number.
    pub psn: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// Active MTU (`ibv_mtu`).
    pub mtu: u8,
    /// GID type.
    pub gid_kind: u8,
    /// GID.
    pub gid: [u8; 16],
    /// The GID's index in its port's table (named in errors).
    pub gid_index: u32,
    /// Whether `RCOLL_IB_GID_INDEX` chose that GID (named in errors).
    pub gid_forced: bool,
    /// Whether its slots are memory windows (written, then invalidated by a SEND WITH
    /// INVALIDATE), not regions (written with immediate).
    pub scoped: bool,
    /// The receiver's first slots.
    pub credits: Vec<Credit>,
}

impl Endpoint {
    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(44 + self.credits.len() * CREDIT_BYTES);
        o.extend_from_slice(&MAGIC.to_le_bytes());
        o.extend_from_slice(&self.qpn.to_le_bytes());
        o.extend_from_slice(&self.psn.to_le_bytes());
        o.extend_from_slice(&self.lid.to_le_bytes());
        o.push(self.mtu);
        o.push(self.gid_kind);
        o.extend_from_slice(&self.gid);
        let flags = u32::from(self.scoped) | u32::from(self.gid_forced) << 1;
        o.extend_from_slice(&flags.to_le_bytes());
        o.extend_from_slice(&self.gid_index.to_le_bytes());
        o.extend_from_slice(&(self.credits.len() as u32).to_le_bytes());
        for c in &self.credits {
            c.encode(&mut o);
        }
        o
    }

    /// Decodes an endpoint (`None` if malformed).
    pub fn decode(b: &[u8]) -> Option<Endpoint> {
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        if u32_at(0)? != MAGIC {
            return None;
        }
        // Bit 0: scoped; bit 1: the GID forced. Nothing else.
        let flags = u32_at(32)?;
        if flags > 3 {
            return None;
        }
        let n = u32_at(40)? as usize;
        let body = b.get(44..)?;
        if body.len() != n.checked_mul(CREDIT_BYTES)? {
            return None;
        }
        Some(Endpoint {
            qpn: u32_at(4)?,
            scoped: flags & 1 != 0,
            gid_forced: flags & 2 != 0,
            gid_index: u32_at(36)?,
            psn: u32_at(8)?,
            lid: u16::from_le_bytes(b.get(12..14)?.try_into().ok()?),
            mtu: *b.get(14)?,
            gid_kind: *b.get(15)?,
            gid: b.get(16..32)?.try_into().ok()?,
            credits: body
                .chunks(CREDIT_BYTES)
                .filter_map(Credit::decode)
                .collect(),
        })
    }
}

/// The bit of a credit's id that makes it an offer: not a slot but a range of the receiver's
/// registered destination, for one message (its tag follows in the next record). Written
/// with the data alone (no header), and with this id as the immediate.
pub const OFFER: u32 = 1 << 30;

/// What a credit message lends, record by record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// A slot, for any message.
    Slot(Credit),
    /// A destination for the message `Tag` only, of exactly `len` bytes (its id has
    /// [`OFFER`] set).
    Offer(Credit, Tag),
}

impl Grant {
    /// Appends its records: one for a slot, two for an offer (the credit, then the tag).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Grant::Slot(c) => c.encode(out),
            Grant::Offer(c, tag) => {
                c.encode(out);
                let mut h = [0u8; HEADER];
                encode_header(*tag, 0, &mut h);
                // The tag's fields, past the magic: 20 bytes.
                out.extend_from_slice(&h[4..4 + CREDIT_BYTES]);
            }
        }
    }

    /// Records it takes in a credit message.
    pub fn records(&self) -> usize {
        match self {
            Grant::Slot(_) => 1,
            Grant::Offer(..) => 2,
        }
    }

    /// Decodes a credit message (`None` if its length is not whole records, or an offer
    /// lacks its tag, or a slot's id has the offer bit).
    pub fn decode_all(b: &[u8]) -> Option<Vec<Grant>> {
        if b.len() % CREDIT_BYTES != 0 {
            return None;
        }
        let mut records = b.chunks_exact(CREDIT_BYTES);
        let mut out = Vec::with_capacity(b.len() / CREDIT_BYTES);
        while let Some(r) = records.next() {
            let c = Credit::decode(r)?;
            if c.id & OFFER == 0 {
                out.push(Grant::Slot(c));
                continue;
            }
            let t = records.next()?;
            let mut h = [0u8; HEADER];
            h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            h[4..4 + CREDIT_BYTES].copy_from_slice(t);
            // The record is the header's bytes 4..24 (its length, 24..28, stays 0); its
            // padding (header 6..8) must be zero.
            match decode_header(&h) {
                Some((tag, 0)) if h[6..8] == [0, 0] => out.push(Grant::Offer(c, tag)),
                _ => return None,
            }
        }
        Some(out)
    }
}

/// Writes a slot header for `tag` and `len` bytes into `out`.
pub fn encode_header(tag: Tag, len: usize, out: &mut [u8; HEADER]) {
    out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    out[4..6].copy_from_slice(&tag.channel.to_le_bytes());
    out[6..8].copy_from_slice(&[0, 0]);
    out[8..12].copy_from_slice(&tag.collective.to_le_bytes());
    out[12..16].copy_from_slice(&tag.transfer.to_le_bytes());
    out[16..20].copy_from_slice(&tag.segment.to_le_bytes());
    out[20..24].copy_from_slice(&tag.schedule.to_le_bytes());
    out[24..28].copy_from_slice(&(len as u32).to_le_bytes());
    out[28..32].copy_from_slice(&[0; 4]);
}

/// Says in a slot header that `records` grant records (see [`Grant`]) follow the message:
/// slots and offers lent back to the peer written with it, instead of in a credit message
/// of their own.
pub fn set_trailing_grants(out: &mut [u8; HEADER], records: u32) {
    out[28..32].copy_from_slice(&records.to_le_bytes());
}

/// The grants that follow the `len`-byte message in `slot` (header first), as its header
/// counts them: none for a header that counts none; `None` if they overrun the slot or do
/// not decode.
pub fn trailing_grants(slot: &[u8], len: usize) -> Option<Vec<Grant>> {
    let records = u32::from_le_bytes(slot.get(28..32)?.try_into().ok()?) as usize;
    if records == 0 {
        return Some(Vec::new());
    }
    let from = HEADER.checked_add(len)?;
    let to = from.checked_add(records.checked_mul(CREDIT_BYTES)?)?;
    Grant::decode_all(slot.get(from..to)?)
}

/// Reads a slot header: its tag and message length (`None` if not one).
pub fn decode_header(b: &[u8]) -> Option<(Tag, usize)> {
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    if u32_at(0)? != MAGIC {
        return None;
    }
    let tag = Tag {
        channel: u16::from_le_bytes(b.get(4..6)?.try_into().ok()?),
        collective: u32_at(8)?,
        transfer: u32_at(12)?,
        segment: u32_at(16)?,
        schedule: u32_at(20)?,
    };
    Some((tag, u32_at(24)? as usize))
}

/// Work request ids: kind in the top byte, peer and index below.
/// Work request kinds (top byte of an id).
pub const WR_DATA: u64 = 1 << 56;
/// An inline data write.
pub const WR_INLINE: u64 = 2 << 56;
/// A credit message.
pub const WR_CREDIT: u64 = 3 << 56;
/// A receive.
pub const WR_RECV: u64 = 4 << 56;
/// The connectivity check.
pub const WR_HELLO: u64 = 5 << 56;
/// The unsignaled RDMA WRITE into a window ahead of its message's SEND WITH INVALIDATE
/// (which carries the message's `WR_DATA` / `WR_INLINE` id): completes only on failure.
pub const WR_WINDOW_WRITE: u64 = 6 << 56;
/// An unsignaled bind of a window for a grant: completes only on failure (the next credit
/// message's completion retires it).
pub const WR_BIND: u64 = 7 << 56;
/// A signaled LOCAL INVALIDATE of the window of an offer a slot overtook (its index: the
/// offer's id).
pub const WR_INVALIDATE: u64 = 8 << 56;
/// The mask of the kind.
pub const WR_KIND: u64 = 0xff << 56;

/// A work request id: kind, peer (24 bits) and index.
pub fn wr(kind: u64, peer: usize, index: u32) -> u64 {
    kind | ((peer as u64 & 0xff_ffff) << 32) | u64::from(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_round_trips_and_rejects_garbage() {
        let ep = Endpoint {
            qpn: 0x11,
            psn: 0x22_3344,
            lid: 7,
            mtu: 3,
            gid_kind: 0,
            gid: [9; 16],
            gid_index: 300,
            gid_forced: true,
            scoped: true,
            credits: vec![
                Credit {
                    id: 1,
                    addr: 0xdead_beef_0000,
                    rkey: 0x1234,
                    len: 131_104,
                },
                Credit {
                    id: 2,
                    addr: 8,
                    rkey: 9,
                    len: 10,
                },
            ],
        };
        let b = ep.encode();
        assert_eq!(Endpoint::decode(&b), Some(ep));
        assert_eq!(Endpoint::decode(&b[..b.len() - 1]), None);
        assert_eq!(Endpoint::decode(&[0; 44]), None);
        // Flags other than scoped and forced: refused.
        let mut bad = b.clone();
        bad[32] = 4;
        assert_eq!(Endpoint::decode(&bad), None);
        for flags in 0..4u8 {
            let mut b = b.clone();
            b[32] = flags;
            let got = Endpoint::decode(&b).expect("valid flags");
            assert_eq!(
                (got.scoped, got.gid_forced),
                (flags & 1 != 0, flags & 2 != 0)
            );
        }
    }

    /// A slot, an offer and a slot again.
    fn grants_of_each_kind() -> [Grant; 3] {
        let tag = Tag {
            collective: 9,
            channel: 2,
            transfer: 3,
            segment: 4,
            schedule: 0xfeed,
        };
        let slot = Credit {
            id: 7,
            addr: 0x1000,
            rkey: 5,
            len: 64,
        };
        let offer = Credit {
            id: OFFER | 1,
            addr: 0x7f00_0000_0000,
            rkey: 6,
            len: 131_072,
        };
        [
            Grant::Slot(slot),
            Grant::Offer(offer, tag),
            Grant::Slot(slot),
        ]
    }

    #[test]
    fn offers_and_slots_round_trip_in_one_message_and_garbage_is_refused() {
        let grants = grants_of_each_kind();
        let mut msg = Vec::new();
        for g in &grants {
            g.encode(&mut msg);
        }
        let records: usize = grants.iter().map(Grant::records).sum();
        assert_eq!(msg.len(), records * CREDIT_BYTES);
        assert_eq!(Grant::decode_all(&msg).as_deref(), Some(&grants[..]));
        // An offer cut from its tag, a ragged length, nonzero padding in the tag record.
        assert_eq!(Grant::decode_all(&msg[..2 * CREDIT_BYTES]), None);
        assert_eq!(Grant::decode_all(&msg[..msg.len() - 1]), None);
        let mut bad = msg.clone();
        bad[2 * CREDIT_BYTES + 2] = 1;
        assert_eq!(Grant::decode_all(&bad), None);
    }

    #[test]
    fn header_round_trips() {
        let tag = Tag {
            collective: 5,
            channel: 1,
            transfer: 6,
            segment: 7,
            schedule: 0xabcd,
        };
        let mut h = [0u8; HEADER];
        encode_header(tag, 4096, &mut h);
        assert_eq!(decode_header(&h), Some((tag, 4096)));
        h[0] ^= 1;
        assert_eq!(decode_header(&h), None);
    }

    #[test]
    fn grants_ride_behind_a_message_and_an_overrun_is_refused() {
        let tag = Tag {
            collective: 5,
            ..Tag::default()
        };
        let grants = &grants_of_each_kind()[..2];
        let mut v = vec![0u8; HEADER + 128];
        let mut h = [0u8; HEADER];
        encode_header(tag, 8, &mut h);
        // A header that counts none: no grants, whatever follows the message.
        v[..HEADER].copy_from_slice(&h);
        assert_eq!(trailing_grants(&v, 8), Some(vec![]));
        set_trailing_grants(&mut h, 3);
        v[..HEADER].copy_from_slice(&h);
        let mut records = Vec::new();
        for g in grants {
            g.encode(&mut records);
        }
        v[HEADER + 8..HEADER + 8 + records.len()].copy_from_slice(&records);
        assert_eq!(decode_header(&v), Some((tag, 8)));
        assert_eq!(trailing_grants(&v, 8).as_deref(), Some(grants));
        // Past the slot's end, a count that overflows, records that do not decode.
        assert_eq!(trailing_grants(&v[..HEADER + 8 + 59], 8), None);
        set_trailing_grants(&mut h, u32::MAX);
        v[..HEADER].copy_from_slice(&h);
        assert_eq!(trailing_grants(&v, usize::MAX - 8), None);
        assert_eq!(trailing_grants(&v, 8), None);
        set_trailing_grants(&mut h, 2);
        v[..HEADER].copy_from_slice(&h);
        assert_eq!(trailing_grants(&v, 8), None, "an offer cut from its tag");
    }

    #[test]
    fn work_request_ids_keep_kind_peer_and_index() {
        let id = wr(WR_CREDIT, 513, 77);
        assert_eq!(id & WR_KIND, WR_CREDIT);
        assert_eq!((id >> 32) & 0xff_ffff, 513);
        assert_eq!(id & 0xffff_ffff, 77);
    }
}
