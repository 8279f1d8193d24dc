//! A local peer's shared-memory announcement (its segment's path, bell, shape and whether
//! its memory may be read) from arbitrary bytes: read or refused, never a panic. What a
//! peer announces is checked further before anything is opened (its path's form, the
//! descriptor's kind, owner and size), by code this target does not reach.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rcoll_transport::shm::parse_announcement;

fuzz_target!(|data: &[u8]| {
    let _ = parse_announcement(data);
});
