//! The TCP frame decoder on arbitrary bytes in arbitrary chunkings, copied in (`feed`) or,
//! when the first byte's top bit is set, written straight into the payload's buffer where
//! it offers room (`room`, `filled`, as the transport's reads do): it must never panic,
//! never ask for more than a header allows, and every frame it yields must re-encode to
//! the bytes it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rcoll_transport::tcp::frame::{Decoder, Header, HEADER_LEN, MAX_PAYLOAD, RESERVE};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunk size, the rest is the wire.
    let Some((&chunk, wire)) = data.split_first() else { return };
    let direct = chunk & 0x80 != 0;
    let chunk = usize::from(chunk & 0x7f).max(1);
    let mut decoder = Decoder::default();
    let mut offset = 0;
    let check = |offset: usize, f: &rcoll_transport::tcp::frame::Frame| {
        let start = offset - HEADER_LEN - f.payload.len();
        assert_eq!(&wire[start..start + HEADER_LEN], &f.header.encode()[..]);
        assert_eq!(&wire[start + HEADER_LEN..offset], &f.payload[..]);
        let _ = Header::decode(&f.header.encode()).expect("re-decodes");
    };
    for piece in wire.chunks(chunk) {
        let mut rest = piece;
        while !rest.is_empty() {
            let room = if direct { decoder.room(1) } else { None };
            if let Some(room) = room {
                let n = room.len().min(rest.len());
                assert!(n > 0);
                room[..n].copy_from_slice(&rest[..n]);
                rest = &rest[n..];
                offset += n;
                if let Some(f) = decoder.filled(n) {
                    check(offset, &f);
                }
                continue;
            }
            // The decoder asks for at most RESERVE up front, whatever a header claims:
            // memory comes as bytes do (no cap here, so that a bigger ask would show).
            let mut alloc = |len: usize| {
                assert!(len as u64 <= MAX_PAYLOAD && len <= RESERVE);
                Vec::with_capacity(len)
            };
            match decoder.feed(rest, &mut alloc) {
                Ok((used, frame)) => {
                    assert!(used > 0 && used <= rest.len());
                    rest = &rest[used..];
                    offset += used;
                    if let Some(f) = frame {
                        check(offset, &f);
                    }
                }
                Err(_) => return,
            }
        }
    }
});
