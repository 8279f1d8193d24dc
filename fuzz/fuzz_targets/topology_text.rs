//! The topology readers from arbitrary text: an hwloc XML file (`RCOLL_TOPO_FILE`) and the
//! CPU lists and masks of sysfs must be read or refused, never panic; a CPU list that is
//! read prints back as one that reads the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rcoll_transport::topology::cpuset::CpuSet;
use rcoll_transport::topology::xml;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = xml::parse(text);
    let _ = CpuSet::parse_mask(text);
    if let Ok(set) = CpuSet::parse_list(text) {
        // The empty set prints as "-", which is no list: it reads back from "".
        let shown = set.to_string();
        let list = if shown == "-" { "" } else { &shown };
        let again = CpuSet::parse_list(list).expect("its own list");
        assert_eq!(again, set);
    }
});
