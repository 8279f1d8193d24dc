//! A local peer writing arbitrary words into this rank's shared-memory ring, descriptor
//! after descriptor (`rcoll_transport::shm::hostile_descriptors`): each is taken or
//! refused, no slot is lent twice at once, no message is longer than its slot, never a
//! panic or a read outside the segment.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rcoll_transport::shm::hostile_descriptors(data);
});
