//! `rcoll-bench topo`: what this host has (a compact lstopo: NUMA nodes, cores, RDMA
//! devices and interfaces with their NUMA node) and where its local ranks would run.

use std::time::Duration;

use rcoll::transport::topology::{self, bind, probe, Bind, Report};

use crate::args::TopoArgs;
use crate::error::BenchError;
use crate::output::print;

/// Runs it.
pub fn run(args: &TopoArgs) -> Result<(), BenchError> {
    let topo = match &args.input {
        Some(path) => topology::load_xml(path),
        None => topology::discover(),
    }
    .map_err(BenchError::Usage)?;
    let bind: Bind = match &args.bind {
        Some(b) => b.parse().map_err(BenchError::Usage)?,
        None => Bind::from_env().map_err(BenchError::Usage)?,
    };
    let local = args
        .ranks_per_host
        .unwrap_or_else(|| topo.numa.len().max(topo.rdma().count()).max(1));
    // The affinity ranks would inherit from this process (the launcher's, if any).
    let allowed = bind::launcher_affinity();
    let report = Report::new(topo, local, bind, &allowed);
    if let Ok(path) = std::env::var("RCOLL_TOPO_DUMP_FILE") {
        std::fs::write(&path, report.to_json())
            .map_err(|e| BenchError::Usage(format!("RCOLL_TOPO_DUMP_FILE {path}: {e}")))?;
    }
    if args.json {
        print(&format!("{}\n", report.to_json()));
    } else {
        print(&report.describe());
        // Only the machine's own layout names its CPUs (not a file's, from --input or
        // RCOLL_TOPO_FILE).
        if !report.topology.source.starts_with("XML file") {
            print(&round_trips(&report.topology));
        }
    }
    Ok(())
}

/// How far apart this machine's CPUs are, measured ([`probe::line_round_trip`]) between
/// the pairs [`probe::pairs`] picks among the CPUs this process may use: a line each.
fn round_trips(topo: &topology::Topology) -> String {
    let allowed = bind::current_affinity().unwrap_or_default();
    let mut out = String::new();
    for (a, b, what) in probe::pairs(topo, &allowed) {
        let took = match probe::line_round_trip(a, b, Duration::from_secs(2)) {
            Ok(t) => format!("{} ns", t.as_nanos()),
            Err(e) => format!("not measured: {e}"),
        };
        out += &format!("cache line round trip between CPUs {a} and {b} ({what}): {took}\n");
    }
    out
}
