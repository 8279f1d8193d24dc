//! The topology of three machine shapes read from hwloc XML files (`tests/topologies/`,
//! made by `make.py` from hwloc's own export and read back by hwloc's lstopo): one socket;
//! two sockets with a NIC each; four NUMA nodes with two NICs on one of them. Each local
//! rank gets a NIC on its own NUMA node when one exists, ranks spread evenly over the NICs
//! and the NUMA nodes, and binding follows; where no NIC is near, the placement says so.

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
