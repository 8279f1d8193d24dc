//! The verbs backend's wire formats from arbitrary bytes — an endpoint (from the TCP
//! bootstrap), a credit message (slots and offers), a slot header and the grants it counts
//! behind its message — as a hostile peer could send them:
//! decoding must never panic, and whatever decodes must encode back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rcoll_transport::verbs::wire::{
    decode_header, encode_header, trailing_grants, Credit, Endpoint, Grant, CREDIT_BYTES,
    HEADER,
};

fuzz_target!(|data: &[u8]| {
    if let Some(ep) = Endpoint::decode(data) {
        assert_eq!(Endpoint::decode(&ep.encode()), Some(ep));
    }
    for c in data.chunks_exact(CREDIT_BYTES) {
        if let Some(credit) = Credit::decode(c) {
            let mut out = Vec::new();
            credit.encode(&mut out);
            assert_eq!(out, c);
        }
    }
    if let Some(grants) = Grant::decode_all(data) {
        let mut out = Vec::new();
        for g in &grants {
            g.encode(&mut out);
        }
        assert_eq!(Grant::decode_all(&out), Some(grants));
    }
    if let Some((tag, len)) = decode_header(data) {
        let mut h = [0u8; HEADER];
        encode_header(tag, len.min(u32::MAX as usize), &mut h);
        assert_eq!(decode_header(&h), Some((tag, len)));
        // Grants behind the message lie inside the slot, and are what their records say.
        if let Some(grants) = trailing_grants(data, len) {
            let mut out = Vec::new();
            for g in &grants {
                g.encode(&mut out);
            }
            let from = HEADER + len;
            assert!(grants.is_empty() || data.get(from..from + out.len()) == Some(&out[..]));
        }
    }
});
