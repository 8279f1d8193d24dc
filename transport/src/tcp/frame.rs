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
    /// The frame being received: its header, its buffer, and how many payload bytes
    /// have arrived (the buffer's bytes past those are room, not payload).
    current: Option<(Header, Vec<u8>, usize)>,
    /// A header decoded and held back, its payload still in the stream, for a reader that
    /// takes it straight into its destination (see [`Decoder::feed_holding`]).
    announced: Option<Header>,
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
        self.current.as_ref().map_or(0, |(_, b, _)| b.capacity())
    }

    /// Consumes bytes from `input`, returning how many it used and a frame if one
    /// completed. Call again with the rest of the input until it is used up.
    ///
    /// `alloc(len)` provides the payload buffer (so that the caller can pool buffers): a
    /// vector with room for `len` bytes (at most [`RESERVE`]; it grows as bytes arrive),
    /// whose contents are overwritten (a pooled buffer's length is kept as room, so that
    /// [`Decoder::room`] need not clear it again).
    pub fn feed(
        &mut self,
        input: &[u8],
        alloc: &mut dyn FnMut(usize) -> Vec<u8>,
    ) -> Result<(usize, Option<Frame>), FrameError> {
        self.feed_holding(input, alloc, &mut |_| false)
    }

    /// [`Decoder::feed`], but a header that ends `input` and that `hold` asks for (a
    /// data frame with a payload) is held back ([`Decoder::announced`]): no buffer, and its
    /// payload left in the stream for the caller to read where it belongs. Feeding more
    /// bytes first starts the frame as usual.
    pub fn feed_holding(
        &mut self,
        input: &[u8],
        alloc: &mut dyn FnMut(usize) -> Vec<u8>,
        hold: &mut dyn FnMut(&Header) -> bool,
    ) -> Result<(usize, Option<Frame>), FrameError> {
        let mut used = 0;
        if let Some(header) = self.announced.take() {
            self.resume(header, 0, alloc);
        }
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
            if used == input.len() && header.kind == Kind::Data && header.len > 0 && hold(&header) {
                self.announced = Some(header);
                return Ok((used, None));
            }
            // Memory comes as the bytes do: a header may claim up to MAX_PAYLOAD, but only
            // the first RESERVE is set aside before they arrive.
            let buf = alloc((header.len as usize).min(RESERVE));
            self.current = Some((header, buf, 0));
        }
        let mut frame = None;
        if let Some((header, buf, arrived)) = self.current.as_mut() {
            let want = header.len as usize - *arrived;
            let take = want.min(input.len() - used);
            let bytes = &input[used..used + take];
            match buf.get_mut(*arrived..*arrived + take) {
                Some(room) => room.copy_from_slice(bytes),
                None => {
                    buf.truncate(*arrived);
                    buf.extend_from_slice(bytes);
                }
            }
            used += take;
            frame = self.advance(take);
        }
        Ok((used, frame))
    }

    /// Room in the payload buffer of the frame being received, for a caller that reads
    /// the socket straight into it: the rest of the buffer's capacity, up to the end of
    /// the payload. A full buffer grows as a vector does, by at most what has arrived
    /// (and at least [`RESERVE`]), so memory still comes only as bytes do. `None` between
    /// frames, or when less than `min` bytes of the payload are missing. Report what was
    /// written with [`Decoder::filled`].
    pub fn room(&mut self, min: usize) -> Option<&mut [u8]> {
        let (header, buf, arrived) = self.current.as_mut()?;
        let total = header.len as usize;
        let want = total - *arrived;
        if want == 0 || want < min {
            return None;
        }
        if buf.capacity() <= *arrived {
            buf.truncate(*arrived);
            buf.reserve(want.min(RESERVE));
        }
        let end = buf.capacity().min(total);
        if buf.len() < end {
            buf.resize(end, 0);
        }
        Some(&mut buf[*arrived..end])
    }

    /// The header held back by [`Decoder::feed_holding`], if any.
    pub fn announced(&self) -> Option<&Header> {
        self.announced.as_ref()
    }

    /// Takes the held-back header: the caller reads its payload itself, and the decoder
    /// expects the next header after it.
    pub fn take_announced(&mut self) -> Option<Header> {
        self.announced.take()
    }

    /// Goes on with a frame whose first `got` payload bytes were read elsewhere (they are
    /// not in its buffer: whoever read them keeps them), reading the rest as usual. The
    /// buffer is `alloc(len)`: a frame a reader took on comes from a peer that sent the
    /// length the reader expected.
    pub fn resume(&mut self, header: Header, got: usize, alloc: &mut dyn FnMut(usize) -> Vec<u8>) {
        let len = header.len as usize;
        let mut buf = alloc(if got > 0 { len } else { len.min(RESERVE) });
        if buf.len() < got {
            buf.resize(got, 0);
        }
        self.header_filled = 0;
        self.announced = None;
        self.current = Some((header, buf, got.min(len)));
    }

    /// Bytes of the next header still missing: 0 while a frame's payload is being
    /// received. A reader that expects a large payload next reads only these, so that
    /// the payload can go straight into its buffer ([`Decoder::room`]).
    pub fn header_missing(&self) -> usize {
        match (&self.current, &self.announced) {
            (None, None) => HEADER_LEN - self.header_filled,
            _ => 0,
        }
    }

    /// Counts `n` bytes written at the start of [`Decoder::room`] as arrived; returns
    /// the frame if that completed it. `n` beyond the room is capped.
    pub fn filled(&mut self, n: usize) -> Option<Frame> {
        let room = match &self.current {
            Some((header, buf, arrived)) => buf.len().min(header.len as usize) - arrived,
            None => 0,
        };
        self.advance(n.min(room))
    }

    fn advance(&mut self, n: usize) -> Option<Frame> {
        let (header, _, arrived) = self.current.as_mut()?;
        *arrived += n;
        if *arrived < header.len as usize {
            return None;
        }
        let (header, mut payload, _) = self.current.take()?;
        payload.truncate(header.len as usize);
        Some(Frame { header, payload })
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
        // Read straight into the buffer, the rest grows only as bytes come too.
        let mut arrived = 1000;
        while arrived < 6 * RESERVE {
            let room = d.room(1).expect("room in the payload").len();
            assert!(room > 0);
            let cap = d.buffered_capacity();
            assert!(
                cap <= 2 * arrived.max(RESERVE),
                "{cap} bytes set aside when {arrived} had arrived"
            );
            assert!(d.filled(room).is_none());
            arrived += room;
        }
    }

    /// Large payloads read straight into their buffers (room, then filled) with the next
    /// header behind them through `feed`, from pooled buffers that hold stale bytes
    /// longer than the frame: the frames come out whole and exact.
    #[test]
    fn frames_decode_when_read_straight_into_their_buffers() {
        let sizes = [70_000usize, 0, 5, RESERVE + 3, 64 << 10, 1];
        let frames: Vec<Frame> = sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| Frame {
                header: Header {
                    kind: Kind::Data,
                    tag: tag(i as u32),
                    len: len as u64,
                },
                payload: (0..len).map(|b| (b * 7 + i) as u8).collect(),
            })
            .collect();
        let mut wire = Vec::new();
        for f in &frames {
            wire.extend_from_slice(&f.header.encode());
            wire.extend_from_slice(&f.payload);
        }
        for (step, min) in [(1000usize, 1usize), (4096, 1024), (1 << 20, 16)] {
            let mut d = Decoder::default();
            let mut got = Vec::new();
            let mut pos = 0;
            let mut stale = |n: usize| {
                let mut v = vec![0xee; 100_000];
                v.reserve(n);
                v
            };
            while pos < wire.len() {
                if let Some(room) = d.room(min) {
                    let n = room.len().min(step).min(wire.len() - pos);
                    room[..n].copy_from_slice(&wire[pos..pos + n]);
                    pos += n;
                    got.extend(d.filled(n));
                    // The bytes behind the payload: the next header, through feed.
                    let h = HEADER_LEN.min(wire.len() - pos);
                    let (used, frame) = d.feed(&wire[pos..pos + h], &mut stale).unwrap();
                    pos += used;
                    got.extend(frame);
                } else {
                    let end = (pos + 7).min(wire.len());
                    let (used, frame) = d.feed(&wire[pos..end], &mut stale).unwrap();
                    pos += used;
                    got.extend(frame);
                }
            }
            assert_eq!(got.len(), frames.len(), "step {step}");
            for (g, f) in got.iter().zip(&frames) {
                assert!(g == f, "step {step}: frame {:?} differs", f.header.tag);
            }
            assert_eq!(d.buffered_capacity(), 0);
        }
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
