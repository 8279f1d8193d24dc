//! The files a user points rcoll at, from arbitrary text: a tuning file
//! (`RCOLL_TUNING_FILE`) and a rack map (`RCOLL_NET_FILE`). Each is read or refused, never
//! a panic; a tuning file read only ever chooses an algorithm that serves the call; a rack
//! map read always leaves a ring that visits every rank once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rcoll::config::parse_net_file;
use rcoll::tuning::Tuning;
use rcoll::Collective;
use rcoll_transport::hosts::HostMap;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(t) = Tuning::parse(text) {
        for c in Collective::ALL {
            for n in [1, 2, 3, 8, 1 << 16] {
                for bytes in [0, 1, 4096, 1 << 30, usize::MAX] {
                    if let Some(a) = t.rule("tcp", c, n, bytes) {
                        assert!(a.serves(c), "{a} for {c}");
                    }
                }
            }
        }
    }
    if let Ok(racks) = parse_net_file(text) {
        // Two ranks on each host the file names (up to 32 of them) and on one it does
        // not name, cyclically placed.
        let hosts: Vec<&str> = racks
            .iter()
            .map(|(h, _)| h.as_str())
            .take(32)
            .chain(["unnamed"])
            .collect();
        let keys: Vec<&str> = hosts.iter().chain(hosts.iter()).copied().collect();
        let map = HostMap::from_keys(&keys).with_racks(|key| {
            racks
                .iter()
                .find(|(h, _)| h == key)
                .map(|(_, r)| r.clone())
        });
        let mut order: Vec<usize> = map.ring_order().iter().map(|r| r.index()).collect();
        order.sort_unstable();
        assert_eq!(order, (0..keys.len()).collect::<Vec<_>>());
    }
});
