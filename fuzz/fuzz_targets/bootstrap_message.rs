//! Bootstrap messages from arbitrary bytes: decoding must never panic, and whatever
//! decodes must encode back and decode to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rcoll_transport::tcp::bootstrap::wire::{Message, PREFIX};

fuzz_target!(|data: &[u8]| {
    if data.len() < PREFIX {
        return;
    }
    let mut prefix = [0u8; PREFIX];
    prefix.copy_from_slice(&data[..PREFIX]);
    let Ok((kind, len)) = Message::decode_prefix(&prefix) else { return };
    let body = &data[PREFIX..];
    let body = &body[..len.min(body.len())];
    if let Ok(m) = Message::decode_body(kind, body) {
        let bytes = m.encode();
        let mut p = [0u8; PREFIX];
        p.copy_from_slice(&bytes[..PREFIX]);
        let (k, l) = Message::decode_prefix(&p).expect("own prefix");
        assert_eq!(l, bytes.len() - PREFIX);
        assert_eq!(Message::decode_body(k, &bytes[PREFIX..]).expect("own body"), m);
    }
});
