//! Wire framing for the TCP transport: a fixed 32-byte little-endian header, then the
//! payload. Pure code (no I/O), so that it can be tested and fuzzed on its own.
//!
//! ```text
//!  0      4      6         8           12          16          20          24                32
//!  +------+------+---------+-----------+-----------+-----------+-----------+-----------------+
//!  | RCL1 | kind | channel | collective| schedule  | transfer  | segment   | payload length  |
//!  +------+------+---------+-----------+-----------+-----------+-----------+-----------------+
//! ```
//!
//! `kind` is [`Kind::Data`] (a message of a collective), [`Kind::Abort`] (the payload is
//! the UTF-8 reason), or [`Kind::Ping`]/[`Kind::Pong`] (liveness, no payload). A receiver rejects an unknown magic or kind and any length above
//! [`MAX_PAYLOAD`] before allocating anything.

use crate::types::Tag;

/// Header size in bytes.
pub const HEADER_LEN: usize = 32;

/// `"RCL1"`: the protocol and its version.
pub const MAGIC: [u8; 4] = *b"RCL1";

/// Largest payload a frame may carry (1 GiB): far above any segment, low enough that a
/// corrupt length cannot make a receiver allocate without bound.
pub const MAX_PAYLOAD: u64 = 1 << 30;

/// Bytes a frame's buffer is given before its payload arrives (see [`Decoder::feed`]).
pub const RESERVE: usize = 1 << 20;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One segment of a collective or point-to-point transfer.
    Data = 1,
    /// The sender aborted the group; the payload is the reason.
    Abort = 2,
    /// Are you there? (answered with a `Pong` by a rank whose process runs).
    Ping = 3,
    /// Here.
    Pong = 4,
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the frame carries.
    pub kind: Kind,
    /// The message's tag (zero for aborts).
    pub tag: Tag,
    /// Payload bytes that follow.
    pub len: u64,
}

/// Why a header is not acceptable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The first four bytes are not [`MAGIC`]: not an rcoll peer, or another version.
    #[error("bad magic {0:02x?} (not an rcoll peer, or another protocol version)")]
    BadMagic([u8; 4]),
    /// The kind field is unknown.
    #[error("unknown frame kind {0}")]
    BadKind(u16),
    /// The payload length exceeds [`MAX_PAYLOAD`].
    #[error("payload of {0} bytes exceeds the {MAX_PAYLOAD}-byte limit")]
    TooLong(u64),
}

impl Header {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&(self.kind as u16).to_le_bytes());
        b[6..8].copy_from_slice(&self.tag.channel.to_le_bytes());
        b[8..12].copy_from_slice(&self.tag.collective.to_le_bytes());
        b[12..16].copy_from_slice(&self.tag.schedule.to_le_bytes());
        b[16..20].copy_from_slice(&self.tag.transfer.to_le_bytes());
        b[20..24].copy_from_slice(&self.tag.segment.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decodes and validates a header.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, FrameError> {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let magic = [b[0], b[1], b[2], b[3]];
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        let kind = match u16_at(4) {
            1 => Kind::Data,
            2 => Kind::Abort,
            3 => Kind::Ping,
            4 => Kind::Pong,
            k => return Err(FrameError::BadKind(k)),
        };
        let mut len_bytes = [0u8; 8];
        len_bytes.copy_from_slice(&b[24..32]);
        let len = u64::from_le_bytes(len_bytes);
        if len > MAX_PAYLOAD {
            return Err(FrameError::TooLong(len));
        }
        let tag = Tag {
            collective: u32_at(8),
            channel: u16_at(6),
            schedule: u32_at(12),
            transfer: u32_at(16),
            segment: u32_at(20),
        };
        Ok(Header { kind, tag, len })
    }
}

/// Incremental decoder state for one connection: feed it bytes as they arrive, in any
/// chunking, and it yields whole frames.
#[derive(Debug, Default)]
pub struct Decoder {
    header: [u8; HEADER_LEN],
    header_filled: usize,
    current: Option<(Header, Vec<u8>)>,
}

/// One complete frame.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// Its header.
    pub header: Header,
    /// Its payload.
    pub payload: Vec<u8>,
}

impl Decoder {
    /// Capacity of the buffer of the frame being received (0 between frames).
    pub fn buffered_capacity(&self) -> usize {
        self.current.as_ref().map_or(0, |(_, b)| b.capacity())
    }

    /// Consumes bytes from `input`, returning how many it used and a frame if one
    /// completed. Call again with the rest of the input until it is used up.
    ///
    /// `alloc(len)` provides the payload buffer (so that the caller can pool buffers): a
    /// vector with room for `len` bytes (at most [`RESERVE`]; it grows as bytes arrive),
    /// whose contents are discarded.
    pub fn feed(
        &mut self,
        input: &[u8],
        alloc: &mut dyn FnMut(usize) -> Vec<u8>,
    ) -> Result<(usize, Option<Frame>), FrameError> {
        let mut used = 0;
        if self.current.is_none() {
            let want = HEADER_LEN - self.header_filled;
            let take = want.min(input.len());
            self.header[self.header_filled..self.header_filled + take]
                .copy_from_slice(&input[..take]);
            self.header_filled += take;
            used += take;
            if self.header_filled < HEADER_LEN {
                return Ok((used, None));
            }
            self.header_filled = 0;
            let header = Header::decode(&self.header)?;
            // Memory comes as the bytes do: a header may claim up to MAX_PAYLOAD, but only
            // the first RESERVE is set aside before they arrive.
            let mut buf = alloc((header.len as usize).min(RESERVE));
            buf.clear();
            self.current = Some((header, buf));
        }
        if let Some((header, buf)) = self.current.as_mut() {
            let want = header.len as usize - buf.len();
            let take = want.min(input.len() - used);
            buf.extend_from_slice(&input[used..used + take]);
            used += take;
            if buf.len() == header.len as usize {
                if let Some((header, payload)) = self.current.take() {
                    return Ok((used, Some(Frame { header, payload })));
                }
            }
        }
        Ok((used, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(i: u32) -> Tag {
        Tag {
            collective: i,
            channel: 3,
            transfer: i * 7,
            segment: i + 1,
            schedule: 0xbeef,
        }
    }

    #[test]
    fn headers_round_trip() {
        let h = Header {
            kind: Kind::Data,
            tag: tag(42),
            len: 1234,
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn bad_headers_are_rejected_before_allocating() {
        let mut b = Header {
            kind: Kind::Data,
            tag: tag(1),
            len: 1,
        }
        .encode();
        b[0] = b'X';
        assert!(matches!(Header::decode(&b), Err(FrameError::BadMagic(_))));
        let mut b = Header {
            kind: Kind::Data,
            tag: tag(1),
            len: 1,
        }
        .encode();
        b[4] = 9;
        assert_eq!(Header::decode(&b), Err(FrameError::BadKind(9)));
        let b = Header {
            kind: Kind::Data,
            tag: tag(1),
            len: MAX_PAYLOAD + 1,
        }
        .encode();
        assert_eq!(
            Header::decode(&b),
            Err(FrameError::TooLong(MAX_PAYLOAD + 1))
        );
    }

    #[test]
    fn a_header_claiming_a_gigabyte_gets_memory_only_as_bytes_come() {
        let header = Header {
            kind: Kind::Data,
            tag: tag(1),
            len: MAX_PAYLOAD,
        }
        .encode();
        let mut d = Decoder::default();
        let mut asked = Vec::new();
        let mut alloc = |n: usize| {
            asked.push(n);
            Vec::with_capacity(n)
        };
        let (used, frame) = d.feed(&header, &mut alloc).unwrap();
        assert_eq!((used, frame), (HEADER_LEN, None));
        let (used, frame) = d.feed(&[1u8; 1000], &mut alloc).unwrap();
        assert_eq!((used, frame), (1000, None));
        assert_eq!(asked, vec![RESERVE]);
        assert!(
            d.buffered_capacity() <= RESERVE,
            "{}",
            d.buffered_capacity()
        );
    }

    #[test]
    fn frames_decode_from_any_chunking() {
        let frames: Vec<Frame> = (0..5u32)
            .map(|i| Frame {
                header: Header {
                    kind: Kind::Data,
                    tag: tag(i),
                    len: u64::from(i * 3),
                },
                payload: (0..i * 3).map(|b| b as u8).collect(),
            })
            .collect();
        let mut wire = Vec::new();
        for f in &frames {
            wire.extend_from_slice(&f.header.encode());
            wire.extend_from_slice(&f.payload);
        }
        for chunk in [1, 2, 5, 31, 32, 33, 1000] {
            let mut d = Decoder::default();
            let mut got = Vec::new();
            for piece in wire.chunks(chunk) {
                let mut rest = piece;
                while !rest.is_empty() {
                    let (used, frame) = d.feed(rest, &mut |n| vec![0; n]).unwrap();
                    got.extend(frame);
                    rest = &rest[used..];
                }
            }
            assert_eq!(got, frames, "chunk size {chunk}");
        }
    }
}
