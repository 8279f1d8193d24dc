//! The topology of machine shapes read from hwloc XML files (`tests/topologies/`, made by
//! `make.py` from hwloc's own export and read back by hwloc's lstopo): one socket; two
//! sockets with a NIC each; four NUMA nodes with two NICs on one of them; and machines
//! whose NUMA nodes do not all have CPUs (KNL's MCDRAM in flat mode, quadrant and SNC-4;
//! HBM in flat mode; a CXL memory expander). Each local rank gets a NIC on its own NUMA
//! node when one exists, ranks spread evenly over the NICs and the NUMA nodes that have
//! CPUs, a core each while cores are free, and binding follows; where no NIC is near, the
//! placement says so.

use std::path::PathBuf;

use rcoll_transport::topology::{self, Bind, CpuSet, DeviceKind, Placement, Topology};

fn shape(name: &str) -> Topology {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "topologies", name]
        .iter()
        .collect();
    topology::load_xml(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn placements(t: &Topology, local: usize, bind: Bind) -> Vec<Placement> {
    (0..local)
        .map(|r| topology::place(t, r, local, &t.cpus(), bind))
        .collect()
}

fn devices(p: &[Placement]) -> Vec<Option<&str>> {
    p.iter().map(|p| p.device.as_deref()).collect()
}

#[test]
fn one_socket_every_rank_on_its_one_nic() {
    let t = shape("one-socket.xml");
    assert_eq!((t.packages.len(), t.numa.len(), t.cores.len()), (1, 1, 4));
    assert_eq!(t.cpus(), CpuSet::of(0..8));
    let nic = t
        .devices
        .iter()
        .find(|d| d.name == "mlx5_0")
        .expect("mlx5_0");
    assert_eq!((nic.kind, nic.numa), (DeviceKind::Rdma, Some(0)));
    assert_eq!(nic.netdev.as_deref(), Some("ens1f0"));
    let p = placements(&t, 4, Bind::Core);
    assert_eq!(devices(&p), vec![Some("mlx5_0"); 4]);
    let cores: Vec<String> = p.iter().map(|p| p.cpus.to_string()).collect();
    assert_eq!(cores, ["0-1", "2-3", "4-5", "6-7"], "one core each");
    assert!(p.iter().all(|p| p.bind && p.notes.is_empty()), "{p:?}");
}

#[test]
fn two_sockets_each_rank_drives_the_nic_of_its_socket() {
    let t = shape("two-sockets.xml");
    assert_eq!((t.packages.len(), t.numa.len(), t.cores.len()), (2, 2, 8));
    let p = placements(&t, 4, Bind::Numa);
    let nodes: Vec<Option<u32>> = p.iter().map(|p| p.numa).collect();
    assert_eq!(nodes, [Some(0), Some(0), Some(1), Some(1)]);
    assert_eq!(
        devices(&p),
        [
            Some("mlx5_0"),
            Some("mlx5_0"),
            Some("mlx5_1"),
            Some("mlx5_1")
        ]
    );
    assert_eq!(p[0].cpus.to_string(), "0-7");
    assert_eq!(p[3].cpus.to_string(), "8-15");
    assert!(p.iter().all(|p| p.notes.is_empty()), "{p:?}");
    // Two ranks: one per socket, each on its own NIC.
    let two = placements(&t, 2, Bind::Numa);
    assert_eq!(devices(&two), [Some("mlx5_0"), Some("mlx5_1")]);
}

#[test]
fn four_numa_nodes_the_nics_of_node_2_serve_its_ranks_and_the_others_are_told() {
    let t = shape("four-numa-two-nics.xml");
    assert_eq!((t.packages.len(), t.numa.len(), t.cores.len()), (2, 4, 8));
    for d in t.rdma() {
        assert_eq!(d.numa, Some(2), "{d:?}");
    }
    let p = placements(&t, 8, Bind::Numa);
    let nodes: Vec<u32> = p.iter().map(|p| p.numa.unwrap()).collect();
    assert_eq!(nodes, [0, 0, 1, 1, 2, 2, 3, 3]);
    // Both rails of node 2 used, one rank each.
    assert_eq!(devices(&p)[4..6], [Some("mlx5_0"), Some("mlx5_1")]);
    for (r, pl) in p.iter().enumerate().filter(|(r, _)| !(4..6).contains(r)) {
        assert_eq!(pl.device, None, "rank {r}");
        assert!(
            pl.notes
                .iter()
                .any(|n| n.contains("crosses the sockets") && n.contains("mlx5_0 on node 2")),
            "rank {r}: {:?}",
            pl.notes
        );
    }
    assert_eq!(p[5].cpus.to_string(), "8-11");
    // Four ranks: one per node.
    let four = placements(&t, 4, Bind::Numa);
    let nodes: Vec<u32> = four.iter().map(|p| p.numa.unwrap()).collect();
    assert_eq!(nodes, [0, 1, 2, 3]);
    assert_eq!(four[2].device.as_deref(), Some("mlx5_0"));
}

/// The report `rcoll-bench topo` prints and `RCOLL_TOPO_DUMP_FILE` writes, round trip.
#[test]
fn the_report_describes_and_round_trips_as_json() {
    let t = shape("two-sockets.xml");
    let r = topology::Report::new(t.clone(), 2, Bind::Numa, &t.cpus());
    let text = r.describe();
    assert!(
        text.contains(
            "NUMA node 1: cpus 8-15 (4 cores); devices: ens2f0, mlx5_1 (rdma over ens2f0)"
        ),
        "{text}"
    );
    assert!(
        text.contains("local rank 1: NUMA node 1, cpus 8-15, device mlx5_1"),
        "{text}"
    );
    let back: topology::Report = serde_json::from_str(&r.to_json()).expect("json");
    assert_eq!(back, r);
}

/// A file that is no hwloc topology is a clear error.
#[test]
fn a_bad_file_is_named() {
    let dir = std::env::temp_dir().join(format!("rcoll-topo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.xml");
    std::fs::write(&bad, "<html></html>").unwrap();
    let e = topology::load_xml(&bad).unwrap_err();
    assert!(e.contains("bad.xml"), "{e}");
    let e = topology::load_xml(&dir.join("missing.xml")).unwrap_err();
    assert!(e.contains("missing.xml"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With hwloc built in, rcoll's XML reader and hwloc read every shape alike, and sysfs and
/// hwloc see this machine's NUMA nodes, packages and cores alike.
#[cfg(feature = "hwloc")]
#[test]
fn hwloc_and_rcolls_readers_agree() {
    use rcoll_transport::topology::{hwloc, sysfs, xml};
    for name in [
        "one-socket.xml",
        "two-sockets.xml",
        "four-numa-two-nics.xml",
        "knl-quadrant-flat.xml",
        "knl-snc4-flat.xml",
        "hbm-two-sockets-flat.xml",
        "cxl-expander.xml",
        "no-cores.xml",
    ] {
        let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "topologies", name]
            .iter()
            .collect();
        let mut ours = xml::load(&path).unwrap();
        let mut theirs = hwloc::load_xml(&path).unwrap();
        ours.source.clear();
        theirs.source.clear();
        assert_eq!(ours, theirs, "{name}");
    }
    let ours = sysfs::discover(std::path::Path::new("/sys")).unwrap();
    let theirs = hwloc::discover().unwrap();
    assert_eq!(ours.numa, theirs.numa);
    assert_eq!(ours.packages, theirs.packages);
    assert_eq!(ours.cores, theirs.cores);
}

/// Every node with CPUs of its own, by OS index, with those CPUs, as the shape's
/// description in make.py gives them.
fn cpu_nodes(nodes: &[(u32, std::ops::Range<u32>)]) -> Vec<(u32, CpuSet)> {
    nodes
        .iter()
        .map(|(n, cpus)| (*n, CpuSet::of(cpus.clone())))
        .collect()
}

/// For every count of ranks from 1 to the machine's `cores` (the default binding): each
/// rank is on a node with CPUs of its own and within that node's CPUs, and no two ranks
/// share a core (their CPU sets are disjoint), since a core is free for each.
fn one_core_each(name: &str, t: &Topology, nodes: &[(u32, CpuSet)], cores: usize) {
    for n in 1..=cores {
        let p = placements(t, n, Bind::Auto);
        for pl in &p {
            let node = pl.numa.expect("a node");
            let (_, cpus) = nodes
                .iter()
                .find(|(i, _)| *i == node)
                .unwrap_or_else(|| panic!("{name}, {n} ranks: node {node} has no CPUs: {pl:?}"));
            assert!(
                pl.bind && !pl.cpus.is_empty() && pl.cpus.is_subset(cpus),
                "{name}, {n} ranks: {pl:?} outside node {node}'s CPUs {cpus}"
            );
        }
        for (i, a) in p.iter().enumerate() {
            for b in &p[i + 1..] {
                assert!(
                    a.cpus.intersection(&b.cpus).is_empty(),
                    "{name}, {n} ranks on {cores} cores: local ranks {} and {} share CPUs \
                     ({} and {})",
                    a.local_rank,
                    b.local_rank,
                    a.cpus,
                    b.cpus
                );
            }
        }
    }
}

/// The shapes that were placed right before memory-only nodes: one core each too.
#[test]
fn the_plain_shapes_give_each_rank_a_core_of_its_own() {
    for (name, nodes, cores) in [
        ("one-socket.xml", cpu_nodes(&[(0, 0..8)]), 4),
        ("two-sockets.xml", cpu_nodes(&[(0, 0..8), (1, 8..16)]), 8),
        (
            "four-numa-two-nics.xml",
            cpu_nodes(&[(0, 0..4), (1, 4..8), (2, 8..12), (3, 12..16)]),
            8,
        ),
    ] {
        one_core_each(name, &shape(name), &nodes, cores);
    }
}

/// Knights Landing in quadrant and flat mode: node 0 (DDR) has the 8 cores x 4 threads,
/// node 1 (MCDRAM) no CPUs of its own though hwloc gives it the same locality. Every rank
/// is on node 0 and on a core of its own; the Omni-Path NIC on the package is node 0's.
/// Was: ranks alternated between nodes 0 and 1, whose CPU sets are the same, so local
/// ranks 0 and 1 both took core 0 (PUs 0-3) while 7 cores idled, and the NIC had no node
/// (its package touched two).
#[test]
fn knl_quadrant_flat_every_rank_on_the_ddr_node_a_core_each() {
    let t = shape("knl-quadrant-flat.xml");
    assert_eq!((t.numa.len(), t.cores.len()), (2, 8));
    assert_eq!(t.numa[0].cpus, CpuSet::of(0..32));
    assert!(t.numa[1].cpus.is_empty(), "MCDRAM: {:?}", t.numa[1]);
    assert_eq!(t.cpus(), CpuSet::of(0..32));
    let hfi = t.rdma().next().expect("hfi1_0");
    assert_eq!((hfi.name.as_str(), hfi.numa), ("hfi1_0", Some(0)));
    let p = placements(&t, 2, Bind::Auto);
    assert_eq!(p[0].cpus.to_string(), "0-3");
    assert_eq!(p[1].cpus.to_string(), "4-7");
    assert!(p.iter().all(|p| p.numa == Some(0)), "{p:?}");
    assert_eq!(devices(&p), [Some("hfi1_0"); 2]);
    one_core_each("knl-quadrant-flat.xml", &t, &cpu_nodes(&[(0, 0..32)]), 8);
}

/// Knights Landing in SNC-4 and flat mode: four clusters, each a DDR node with 2 cores x 4
/// threads (nodes 0, 2, 4, 6) beside an MCDRAM node of the same locality (1, 3, 5, 7).
/// Ranks spread over the four DDR nodes, two to a cluster for 8 ranks, a core each.
#[test]
fn knl_snc4_flat_ranks_spread_over_the_four_ddr_nodes() {
    let t = shape("knl-snc4-flat.xml");
    assert_eq!((t.numa.len(), t.cores.len()), (8, 8));
    let with_cpus: Vec<u32> = t
        .numa
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .map(|n| n.os_index)
        .collect();
    assert_eq!(with_cpus, [0, 2, 4, 6]);
    let p = placements(&t, 4, Bind::Auto);
    let nodes: Vec<Option<u32>> = p.iter().map(|p| p.numa).collect();
    assert_eq!(nodes, [Some(0), Some(2), Some(4), Some(6)]);
    let p = placements(&t, 8, Bind::Numa);
    let nodes: Vec<u32> = p.iter().map(|p| p.numa.unwrap()).collect();
    assert_eq!(nodes, [0, 0, 2, 2, 4, 4, 6, 6]);
    assert_eq!(p[2].cpus.to_string(), "8-15", "cluster 1's CPUs");
    let nodes = cpu_nodes(&[(0, 0..8), (2, 8..16), (4, 16..24), (6, 24..32)]);
    one_core_each("knl-snc4-flat.xml", &t, &nodes, 8);
}

/// Two sockets with HBM in flat mode: per socket a DRAM node with 4 cores x 2 threads
/// (nodes 0 and 2) and an HBM node without CPUs (1 and 3). Two ranks: one per socket,
/// each on its socket's NIC.
#[test]
fn hbm_flat_ranks_on_the_dram_nodes_one_per_socket() {
    let t = shape("hbm-two-sockets-flat.xml");
    assert_eq!((t.numa.len(), t.cores.len()), (4, 8));
    for hbm in [1, 3] {
        assert!(t.numa[hbm].cpus.is_empty(), "{:?}", t.numa[hbm]);
    }
    let two = placements(&t, 2, Bind::Auto);
    let nodes: Vec<Option<u32>> = two.iter().map(|p| p.numa).collect();
    assert_eq!(nodes, [Some(0), Some(2)]);
    assert_eq!(devices(&two), [Some("mlx5_0"), Some("mlx5_1")]);
    let nodes = cpu_nodes(&[(0, 0..8), (2, 8..16)]);
    one_core_each("hbm-two-sockets-flat.xml", &t, &nodes, 8);
}

/// Two sockets and a CXL memory expander: node 2 has no CPUs and is near both sockets
/// (hwloc attaches it to the machine). Ranks are on nodes 0 and 1 only, a core each.
#[test]
fn a_cxl_expander_takes_no_ranks() {
    let t = shape("cxl-expander.xml");
    assert_eq!((t.numa.len(), t.cores.len()), (3, 8));
    assert!(t.numa[2].cpus.is_empty(), "{:?}", t.numa[2]);
    let three = placements(&t, 3, Bind::Numa);
    let nodes: Vec<Option<u32>> = three.iter().map(|p| p.numa).collect();
    assert_eq!(nodes, [Some(0), Some(0), Some(1)]);
    assert_eq!(t.rdma().next().map(|d| d.numa), Some(Some(0)));
    one_core_each(
        "cxl-expander.xml",
        &t,
        &cpu_nodes(&[(0, 0..8), (1, 8..16)]),
        8,
    );
}

/// Eight PUs and no Core objects (hwloc knows no cores there): each PU counts as a core,
/// so ranks get a PU each. Was: no core, so `auto` bound every rank to the node's 8 PUs,
/// all ranks sharing one set.
#[test]
fn pus_without_cores_give_each_rank_a_pu_of_its_own() {
    let t = shape("no-cores.xml");
    assert_eq!((t.numa.len(), t.cores.len()), (1, 0));
    assert_eq!(t.cpus(), CpuSet::of(0..8));
    let p = placements(&t, 4, Bind::Auto);
    let cpus: Vec<String> = p.iter().map(|p| p.cpus.to_string()).collect();
    assert_eq!(cpus, ["0", "1", "2", "3"]);
    assert!(p.iter().all(|p| p.bind), "{p:?}");
    one_core_each("no-cores.xml", &t, &cpu_nodes(&[(0, 0..8)]), 8);
    // Past 8 ranks they share, in turn, and are told.
    let crowded = placements(&t, 9, Bind::Core);
    assert_eq!(crowded[8].cpus.to_string(), "0");
    assert!(
        crowded[8].notes.iter().any(|n| n.contains("share")),
        "{:?}",
        crowded[8].notes
    );
}

/// Where a memory-only node is the fast memory near a rank's CPUs (KNL's MCDRAM, HBM in
/// flat mode), the rank's memory is preferred there, and its placement and `topo` say why;
/// a memory-only node of another kind (the CXL expander) is listed, never preferred.
#[test]
fn near_fast_memory_is_preferred_and_the_report_says_why() {
    let knl = shape("knl-quadrant-flat.xml");
    let p = placements(&knl, 2, Bind::Auto);
    assert_eq!(
        (p[0].numa, p[0].memory, p[1].memory),
        (Some(0), Some(1), Some(1))
    );
    let text = topology::Report::new(knl.clone(), 2, Bind::Auto, &knl.cpus()).describe();
    assert!(
        text.contains("NUMA node 1: memory only (MCDRAM), near cpus 0-31"),
        "{text}"
    );
    assert!(
        text.contains(
            "local rank 1: NUMA node 0, cpus 4-7, memory on node 1 (MCDRAM), device hfi1_0"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "memory preferred on NUMA node 1: MCDRAM without CPUs, the fast memory near node 0"
        ),
        "{text}"
    );
    // SNC-4: each cluster's own MCDRAM.
    let snc = shape("knl-snc4-flat.xml");
    let memory: Vec<Option<u32>> = placements(&snc, 4, Bind::Auto)
        .iter()
        .map(|p| p.memory)
        .collect();
    assert_eq!(memory, [Some(1), Some(3), Some(5), Some(7)]);
    // HBM, one socket's each.
    let hbm = shape("hbm-two-sockets-flat.xml");
    let memory: Vec<Option<u32>> = placements(&hbm, 4, Bind::Numa)
        .iter()
        .map(|p| p.memory)
        .collect();
    assert_eq!(memory, [Some(1), Some(1), Some(3), Some(3)]);
    // Not bound: no memory policy either.
    assert_eq!(placements(&hbm, 1, Bind::None)[0].memory, None);
    // CXL: slower or of unknown kind, not chosen; the report lists it.
    let cxl = shape("cxl-expander.xml");
    let p = placements(&cxl, 2, Bind::Auto);
    assert_eq!((p[0].memory, p[1].memory), (Some(0), Some(1)));
    assert!(
        p.iter()
            .all(|p| p.notes.iter().all(|n| !n.contains("memory"))),
        "{p:?}"
    );
    let text = topology::Report::new(cxl.clone(), 2, Bind::Auto, &cxl.cpus()).describe();
    assert!(
        text.contains("NUMA node 2: memory only (kind not named), near cpus 0-15"),
        "{text}"
    );
}

/// The messages and fields of the warnings logged on this thread while it runs `f`.
fn warnings_of<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    use std::fmt::Write as _;
    use std::sync::{Arc, Mutex};
    use tracing::{span, Event, Level, Metadata};

    struct Fields(String);
    impl tracing::field::Visit for Fields {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            let _ = write!(self.0, "{}={value:?} ", field.name());
        }
    }
    struct Warnings(Arc<Mutex<Vec<String>>>);
    impl tracing::Subscriber for Warnings {
        fn enabled(&self, m: &Metadata<'_>) -> bool {
            *m.level() <= Level::WARN
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, e: &Event<'_>) {
            let mut fields = Fields(String::new());
            e.record(&mut fields);
            self.0.lock().expect("not poisoned").push(fields.0);
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = tracing::subscriber::with_default(Warnings(Arc::clone(&seen)), f);
    let seen = seen.lock().expect("not poisoned").clone();
    (out, seen)
}

/// An XML whose OS devices use a type number hwloc 2 does not define (here 32 for the
/// RDMA device) is read without them, and a warning names each: the device and the
/// number. A type that is known but not used (0, a block device) is left out quietly.
/// Was: both left out without a word, so a machine's NICs vanished from its placement.
#[test]
fn an_unknown_os_device_type_is_a_warning_naming_it() {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "topologies",
        "one-socket.xml",
    ]
    .iter()
    .collect();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(r#"name="mlx5_0" osdev_type="3""#));
    let text = text
        .replace(
            r#"name="mlx5_0" osdev_type="3""#,
            r#"name="mlx5_0" osdev_type="32""#,
        )
        .replace(
            r#"name="ens1f0" osdev_type="2""#,
            r#"name="sda" osdev_type="0""#,
        );
    let dir = std::env::temp_dir().join(format!("rcoll-osdev-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("unknown-osdev.xml");
    std::fs::write(&file, text).unwrap();
    let (t, warnings) = warnings_of(|| topology::load_xml(&file));
    std::fs::remove_dir_all(&dir).unwrap();
    let t = t.unwrap();
    assert!(t.devices.is_empty(), "{:?}", t.devices);
    let named: Vec<&String> = warnings
        .iter()
        .filter(|w| w.contains("mlx5_0") && w.contains("32"))
        .collect();
    assert_eq!(named.len(), 1, "{warnings:?}");
    assert!(warnings.iter().all(|w| !w.contains("sda")), "{warnings:?}");
}
