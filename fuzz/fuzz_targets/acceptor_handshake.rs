//! The acceptor's handshake from arbitrary bytes, as a stranger would send them, fed in
//! the pieces it asks for: it answers, waits or refuses, never panics, never asks for more
//! than an introduction's size, and never hands over an introduction — that needs the
//! job's secret, which the fuzzer does not have (the proof's nonce is fresh every time).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rcoll_transport::tcp::bootstrap::accept::{Handshake, Step};
use rcoll_transport::tcp::bootstrap::wire::{MAX_INTRO, PREFIX};

const SECRET: u128 = 0x5eed_0fa5_ec2e_7000_0000_0000_0000_0001;

fuzz_target!(|data: &[u8]| {
    let mut h = Handshake::new(SECRET);
    let mut rest = data;
    while !rest.is_empty() {
        let Ok(want) = h.want() else { return };
        assert!(want >= 1 && want <= PREFIX + MAX_INTRO, "wants {want}");
        // The first byte of each piece sets how much of what it wants comes at once, as
        // reads of any size would bring it.
        let n = want.min(rest.len()).min(1 + usize::from(rest[0]) * 4);
        match h.feed(&rest[..n]) {
            Err(_) => return,
            Ok(Some(Step::Introduced(..))) => panic!("introduced without the secret"),
            Ok(_) => {}
        }
        rest = &rest[n..];
    }
});
