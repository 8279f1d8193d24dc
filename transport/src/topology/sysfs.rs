//! The topology from Linux sysfs (`/sys`, or a copy of its layout for tests):
//! `devices/system/node/node*/cpulist` (and for a node without CPUs its `access0/initiators`
//! and `distance`), `devices/system/cpu/online` and each CPU's
//! `topology/{physical_package_id,core_id}`, `class/infiniband/*` and `class/net/*` with
//! their `device/numa_node` and `device/local_cpulist`; an RDMA device's interface from its
//! `parent` (Soft-RoCE) or `ports/1/gid_attrs/ndevs/0` (RoCE).

use std::collections::BTreeMap;
use std::path::Path;

use super::{Core, CpuSet, Device, DeviceKind, NumaNode, Package, Topology};

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A device's NUMA node and local CPUs (`numa_node` -1 or absent: none).
fn locality(device: &Path) -> (Option<u32>, Option<CpuSet>) {
    let numa = read(&device.join("numa_node"))
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|n| u32::try_from(n).ok());
    let cpus = read(&device.join("local_cpulist")).and_then(|s| CpuSet::parse_list(&s).ok());
    (numa, cpus)
}

/// Gives each memory-only node (an empty `cpulist`: KNL's MCDRAM, HBM in flat mode, a CXL
/// expander) the CPUs it is near: those of the nodes Linux lists as its initiators (HMAT,
/// `access0/initiators/node*`), else of the CPU nodes at the least SLIT `distance` from it.
/// One that gives its initiators more read bandwidth than their own memory does is fast
/// memory, named `HBM` as hwloc names such a node.
fn memory_only(node_dir: &Path, numa: &mut [NumaNode]) {
    let order: Vec<u32> = numa.iter().map(|n| n.os_index).collect();
    let hmat = |i: u32| node_dir.join(format!("node{i}/access0/initiators"));
    let bandwidth = |i: u32| -> Option<u64> { read(&hmat(i).join("read_bandwidth"))?.parse().ok() };
    let with_cpus: Vec<(u32, CpuSet)> = numa
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .map(|n| (n.os_index, n.cpus.clone()))
        .collect();
    for m in numa.iter_mut().filter(|n| n.cpus.is_empty()) {
        let mut near: Vec<u32> = names(&hmat(m.os_index))
            .iter()
            .filter_map(|n| n.strip_prefix("node")?.parse().ok())
            .filter(|i| with_cpus.iter().any(|(c, _)| c == i))
            .collect();
        if near.is_empty() {
            // `distance`: one number per online node, in the order of their indices.
            let distances: Vec<u64> = read(&node_dir.join(format!("node{}/distance", m.os_index)))
                .map(|d| {
                    d.split_whitespace()
                        .filter_map(|x| x.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            let to = |i: u32| {
                let at = order.iter().position(|&o| o == i)?;
                distances.get(at).copied()
            };
            let least = with_cpus.iter().filter_map(|(i, _)| to(*i)).min();
            near = with_cpus
                .iter()
                .filter(|(i, _)| least.is_some() && to(*i) == least)
                .map(|(i, _)| *i)
                .collect();
        }
        m.near = with_cpus
            .iter()
            .filter(|(i, _)| near.contains(i))
            .fold(CpuSet::new(), |a, (_, c)| a.union(c));
        let own = near.iter().filter_map(|&i| bandwidth(i)).max();
        if let (Some(mine), Some(own)) = (bandwidth(m.os_index), own) {
            if mine > own {
                m.memory = Some("HBM".into());
            }
        }
    }
}

/// Reads the topology under `root` (normally `/sys`).
pub fn discover(root: &Path) -> Result<Topology, String> {
    let cpu_dir = root.join("devices/system/cpu");
    let online = read(&cpu_dir.join("online"))
        .ok_or_else(|| format!("{}: no devices/system/cpu/online", root.display()))
        .and_then(|s| CpuSet::parse_list(&s))?;
    let mut cores: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    let mut packages: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &cpu in online.ids() {
        let t = cpu_dir.join(format!("cpu{cpu}/topology"));
        let num = |f: &str| read(&t.join(f)).and_then(|s| s.parse::<i64>().ok());
        // Without topology files every CPU is its own core of package 0.
        let package = num("physical_package_id")
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or(0);
        let core = num("core_id")
            .and_then(|c| u32::try_from(c).ok())
            .unwrap_or(cpu);
        cores.entry((package, core)).or_default().push(cpu);
        packages.entry(package).or_default().push(cpu);
    }
    let node_dir = root.join("devices/system/node");
    let mut numa: Vec<NumaNode> = names(&node_dir)
        .iter()
        .filter_map(|n| n.strip_prefix("node")?.parse::<u32>().ok())
        .filter_map(|i| {
            let cpus =
                CpuSet::parse_list(&read(&node_dir.join(format!("node{i}/cpulist")))?).ok()?;
            Some(NumaNode {
                os_index: i,
                cpus,
                near: CpuSet::new(),
                memory: None,
            })
        })
        .collect();
    numa.sort_by_key(|n| n.os_index);
    memory_only(&node_dir, &mut numa);
    if numa.is_empty() {
        // A kernel without NUMA: one node holds everything.
        numa.push(NumaNode {
            os_index: 0,
            cpus: online.clone(),
            near: CpuSet::new(),
            memory: None,
        });
    }
    let mut devices = Vec::new();
    let ib = root.join("class/infiniband");
    for name in names(&ib) {
        let d = ib.join(&name);
        let (numa, cpus) = locality(&d.join("device"));
        let netdev = read(&d.join("parent"))
            .or_else(|| read(&d.join("ports/1/gid_attrs/ndevs/0")))
            .filter(|n| !n.is_empty());
        devices.push(Device {
            name,
            kind: DeviceKind::Rdma,
            numa,
            cpus,
            netdev,
        });
    }
    let net = root.join("class/net");
    for name in names(&net).into_iter().filter(|n| n != "lo") {
        let (numa, cpus) = locality(&net.join(&name).join("device"));
        devices.push(Device {
            name,
            kind: DeviceKind::Network,
            numa,
            cpus,
            netdev: None,
        });
    }
    let mut t = Topology {
        source: if root == Path::new("/sys") {
            "sysfs".into()
        } else {
            format!("sysfs at {}", root.display())
        },
        packages: packages
            .into_iter()
            .map(|(os_index, cpus)| Package {
                os_index,
                cpus: CpuSet::of(cpus),
            })
            .collect(),
        numa,
        cores: cores
            .into_iter()
            .map(|((package, _), cpus)| Core {
                package,
                cpus: CpuSet::of(cpus),
            })
            .collect(),
        devices,
    };
    // A device on a node that does not exist (a firmware quirk) has no locality.
    let nodes: Vec<u32> = t.numa.iter().map(|n| n.os_index).collect();
    for d in &mut t.devices {
        if d.numa.is_some_and(|n| !nodes.contains(&n)) {
            d.numa = None;
        }
    }
    t.inherit_locality();
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A two-socket machine copied into a directory: 2 nodes x 2 cores x 2 threads, mlx5_0
    /// on node 1, Soft-RoCE over eth0 (node 0) and over a bridge (no locality).
    #[test]
    fn a_two_socket_tree_reads_back() {
        let root = std::env::temp_dir().join(format!("rcoll-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        put(&root, "devices/system/cpu/online", "0-7\n");
        for cpu in 0..8u32 {
            let (pkg, core) = (cpu / 4, (cpu % 4) / 2);
            put(
                &root,
                &format!("devices/system/cpu/cpu{cpu}/topology/physical_package_id"),
                &pkg.to_string(),
            );
            put(
                &root,
                &format!("devices/system/cpu/cpu{cpu}/topology/core_id"),
                &core.to_string(),
            );
        }
        put(&root, "devices/system/node/node0/cpulist", "0-3\n");
        put(&root, "devices/system/node/node1/cpulist", "4-7\n");
        put(&root, "class/infiniband/mlx5_0/device/numa_node", "1\n");
        put(
            &root,
            "class/infiniband/mlx5_0/device/local_cpulist",
            "4-7\n",
        );
        put(
            &root,
            "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0",
            "ens2\n",
        );
        put(&root, "class/infiniband/rxe0/parent", "eth0\n");
        put(&root, "class/infiniband/rxe1/parent", "br0\n");
        put(&root, "class/net/eth0/device/numa_node", "0\n");
        put(&root, "class/net/ens2/device/numa_node", "1\n");
        put(&root, "class/net/br0/mtu", "1500\n");
        put(&root, "class/net/lo/mtu", "65536\n");
        let t = discover(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(t.packages.len(), 2);
        assert_eq!(t.numa.len(), 2);
        assert_eq!(t.numa[1].cpus.to_string(), "4-7");
        assert_eq!(t.cores.len(), 4);
        assert_eq!(t.cores[3].cpus.to_string(), "6-7");
        let dev = |n: &str| t.devices.iter().find(|d| d.name == n).unwrap();
        assert_eq!(dev("mlx5_0").numa, Some(1));
        assert_eq!(dev("mlx5_0").netdev.as_deref(), Some("ens2"));
        assert_eq!(
            dev("rxe0").numa,
            Some(0),
            "Soft-RoCE takes its interface's node"
        );
        assert_eq!(dev("rxe1").numa, None, "over a bridge: anywhere");
        assert!(t.devices.iter().all(|d| d.name != "lo"));
        assert_eq!(t.numa_of(&CpuSet::of([5, 6])), Some(1));
        let text = t.describe();
        assert!(
            text.contains(
                "NUMA node 1: cpus 4-7 (2 cores); devices: mlx5_0 (rdma over ens2), ens2"
            ),
            "{text}"
        );
        assert!(
            text.contains("no NUMA locality: rxe1 (rdma over br0), br0"),
            "{text}"
        );
    }

    /// Memory-only nodes (an empty `cpulist`): node 2 lists node 0 as its initiator
    /// (HMAT, `access0/initiators`) with more read bandwidth than node 0's own memory, so it
    /// is fast memory near node 0's CPUs (HBM, as hwloc names it); node 3 has no HMAT and
    /// is nearest node 1 by its SLIT `distance`, with no kind. A rank on node 0 prefers
    /// node 2's memory; one on node 1 keeps its own. Was: neither had a locality or kind,
    /// so no fast memory was ever chosen on this path.
    #[test]
    fn memory_only_nodes_are_near_their_initiators_or_the_nearest_cpus() {
        let root = std::env::temp_dir().join(format!("rcoll-sysfs-mem-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        put(&root, "devices/system/cpu/online", "0-7\n");
        let node = "devices/system/node";
        put(&root, &format!("{node}/node0/cpulist"), "0-3\n");
        put(&root, &format!("{node}/node1/cpulist"), "4-7\n");
        put(&root, &format!("{node}/node2/cpulist"), "\n");
        put(&root, &format!("{node}/node3/cpulist"), "\n");
        let hmat = "access0/initiators";
        put(&root, &format!("{node}/node0/{hmat}/node0"), "");
        put(
            &root,
            &format!("{node}/node0/{hmat}/read_bandwidth"),
            "90000\n",
        );
        put(&root, &format!("{node}/node2/{hmat}/node0"), "");
        put(
            &root,
            &format!("{node}/node2/{hmat}/read_bandwidth"),
            "400000\n",
        );
        put(&root, &format!("{node}/node3/distance"), "30 20 40 10\n");
        let t = discover(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(t.numa.len(), 4);
        let (hbm, cxl) = (&t.numa[2], &t.numa[3]);
        assert!(hbm.cpus.is_empty() && cxl.cpus.is_empty());
        assert_eq!(
            (hbm.near.to_string(), hbm.memory.as_deref()),
            ("0-3".into(), Some("HBM"))
        );
        assert_eq!(
            (cxl.near.to_string(), cxl.memory.as_deref()),
            ("4-7".into(), None)
        );
        let rank = |r| super::super::place(&t, r, 2, &t.cpus(), super::super::Bind::Auto);
        assert_eq!((rank(0).numa, rank(0).memory), (Some(0), Some(2)));
        assert_eq!((rank(1).numa, rank(1).memory), (Some(1), Some(1)));
    }

    /// This machine reads too, whatever it has.
    #[test]
    fn the_running_machine_reads() {
        let t = discover(Path::new("/sys")).unwrap();
        assert!(!t.numa.is_empty() && !t.cores.is_empty());
        assert!(t.cpus().len() >= t.cores.len());
    }
}
