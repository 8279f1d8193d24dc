//! Where local rank i of a host runs: its NUMA node, the CPUs it binds to and the RDMA
//! device it drives.
//!
//! - Without an affinity from the launcher, the local ranks are spread over the NUMA nodes
//!   that have CPUs in blocks (ranks 0..k on the first node, ...), each node's block in
//!   proportion to its cores (as evenly as their number allows on nodes of equal cores), so
//!   that no two ranks share a core while a core is free. Memory-only nodes (no CPUs of
//!   their own: KNL's MCDRAM, HBM in flat mode, CXL expanders) take no ranks. With an
//!   affinity (mpirun's `--bind-to`, srun's `--cpu-bind`, `taskset`), it is kept, and the
//!   node is the one holding most of those CPUs.
//! - `RCOLL_BIND`: `numa` binds the rank to its node's CPUs, `core` to one core of it
//!   (the rank's index among the node's ranks, modulo its cores: more ranks than cores
//!   take them in turn), `none` leaves it; `auto` (the default) is `core` when the node
//!   has cores, else `numa`. A PU that no core holds (hwloc knows no cores on the machine)
//!   counts as a core of its own. Ranks that spin for each other's messages must not share a
//!   core: the scheduler may leave two of them on one core long enough to slow a call many
//!   times over. Where they must share (more ranks than cores), an even split that stays
//!   put is reproducible where the scheduler's is not: which ranks share a core, and so
//!   the fastest algorithm, would change from run to run, and a choice measured in one run
//!   would not hold in the next (measured: docs/src/topology.md, "Why ranks are bound,
//!   measured"). The price: ranks busy at the same time may sit on one core while
//!   another idles; `numa` lets them float.
//! - Memory is preferred (`set_mempolicy(MPOL_PREFERRED)`, when bound) on the rank's node,
//!   or on a memory-only node of fast memory near it where there is one (KNL's MCDRAM in
//!   flat or hybrid mode, HBM in flat mode: the bandwidth a collective's copies and
//!   reductions run at), the placement's notes saying so; past its capacity, pages go
//!   elsewhere. A memory-only node of another kind (a CXL expander, NVM) is not chosen.
//! - The device is an RDMA device on the rank's node, the node's ranks spread round-robin
//!   over all of them (every rail used). With none there (devices on other nodes only, or
//!   without locality, as Soft-RoCE's), the transport chooses by address as it would
//!   without a topology, and the placement says so.

use super::{CpuSet, Topology};

/// `RCOLL_BIND`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bind {
    /// Leave the CPUs and memory policy alone.
    None,
    /// The NUMA node's CPUs, memory preferred there.
    Numa,
    /// One core of the NUMA node, memory preferred there.
    Core,
    /// `Core` when the rank's NUMA node has cores (taken in turn if it has fewer than
    /// ranks), else `Numa`.
    Auto,
}

/// What `RCOLL_BIND` (and `--bind`) take.
const BIND_VALUES: &str = "none, numa, core or auto";

impl std::str::FromStr for Bind {
    type Err = String;
    fn from_str(s: &str) -> Result<Bind, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "no" | "0" => Ok(Bind::None),
            "numa" => Ok(Bind::Numa),
            "core" => Ok(Bind::Core),
            "auto" => Ok(Bind::Auto),
            _ => Err(format!("{s:?} is not {BIND_VALUES}")),
        }
    }
}

impl Bind {
    /// `RCOLL_BIND`, `auto` when unset or blank; another value is an error naming it.
    pub fn from_env() -> Result<Bind, String> {
        Ok(crate::env::parsed("RCOLL_BIND", BIND_VALUES, |_| true)?.unwrap_or(Bind::Auto))
    }

    /// Its name, as `RCOLL_BIND` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Bind::None => "none",
            Bind::Numa => "numa",
            Bind::Core => "core",
            Bind::Auto => "auto",
        }
    }
}

/// One local rank's place.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Placement {
    /// The local rank.
    pub local_rank: usize,
    /// Its NUMA node.
    pub numa: Option<u32>,
    /// The NUMA node its memory is preferred on when rcoll binds it: its own node, or a
    /// memory-only node of fast memory near it (KNL's MCDRAM, HBM in flat mode; the notes
    /// say so); `None` when it is not bound.
    #[serde(default)]
    pub memory: Option<u32>,
    /// The CPUs it runs on (after binding).
    pub cpus: CpuSet,
    /// Whether rcoll binds it (`false`: `RCOLL_BIND=none`, or the launcher's affinity kept).
    pub bind: bool,
    /// The RDMA device it should drive: one on its NUMA node (`None` when its node has
    /// none: the transport then chooses by address, as without a topology).
    pub device: Option<String>,
    /// What was not ideal, and a memory preferred off the rank's node with the reason, in
    /// words (empty when every rank got a device on its node and its node's memory).
    pub notes: Vec<String>,
}

/// Places local rank `local_rank` of `local_size` on `topo`; `allowed` is the CPU
/// affinity a launcher gave the rank ([`super::bind::launcher_affinity`]; empty: none).
pub fn place(
    topo: &Topology,
    local_rank: usize,
    local_size: usize,
    allowed: &CpuSet,
    bind: Bind,
) -> Placement {
    let mut notes = Vec::new();
    let all = topo.cpus();
    let nodes: Vec<&super::NumaNode> = topo.numa.iter().filter(|n| !n.cpus.is_empty()).collect();
    let launcher_bound = !allowed.is_empty() && !all.is_subset(allowed);
    let size = local_size.max(1);
    let local_rank = local_rank.min(size - 1);
    // The node, and this rank's index among the node's ranks.
    let (node, index, peers) = if launcher_bound {
        let node = topo.numa_of(allowed);
        notes.push(format!("CPU affinity {allowed} set by the launcher: kept"));
        (node, local_rank, size)
    } else if nodes.is_empty() {
        (None, local_rank, size)
    } else {
        // Node i takes the ranks from ceil(size * c / total), c the cores of the nodes
        // before it: at most ceil(size * its cores / total) of them, so no more than its
        // cores while the ranks are no more than the machine's.
        let cores: Vec<usize> = nodes
            .iter()
            .map(|n| cores_within(topo, &n.cpus).len())
            .collect();
        let total: usize = cores.iter().sum::<usize>().max(1);
        let mut starts = vec![0];
        let mut before = 0;
        for c in &cores {
            before += c;
            starts.push((size * before).div_ceil(total));
        }
        // starts[k] == size > local_rank: some node's block holds it.
        let i = (0..nodes.len())
            .find(|&i| local_rank < starts[i + 1])
            .unwrap_or(nodes.len() - 1);
        (
            Some(nodes[i].os_index),
            local_rank - starts[i],
            starts[i + 1] - starts[i],
        )
    };
    let node_cpus = node
        .and_then(|n| topo.numa.iter().find(|x| x.os_index == n))
        .map(|n| n.cpus.clone())
        .unwrap_or_else(|| all.clone());
    let cores = cores_within(topo, &node_cpus);
    let bind = match bind {
        Bind::Auto if !cores.is_empty() => Bind::Core,
        Bind::Auto => Bind::Numa,
        b => b,
    };
    let (cpus, binds) = match (launcher_bound, bind) {
        (true, _) | (false, Bind::None) => (
            if allowed.is_empty() {
                all.clone()
            } else {
                allowed.clone()
            },
            false,
        ),
        (false, Bind::Numa | Bind::Auto) => (node_cpus.clone(), true),
        (false, Bind::Core) => {
            if cores.is_empty() {
                (node_cpus.clone(), true)
            } else {
                if peers > cores.len() {
                    notes.push(format!(
                        "{peers} ranks on NUMA node {} share its {} cores",
                        node.map_or("-".into(), |n| n.to_string()),
                        cores.len()
                    ));
                }
                (cores[index % cores.len()].clone(), true)
            }
        }
    };
    // Memory: the rank's node, or the fast memory-only node near it; nothing when unbound.
    let memory = match (binds, node) {
        (false, _) => None,
        (true, Some(n)) => match topo.near_fast_memory(n) {
            Some(fast) => {
                notes.push(format!(
                    "memory preferred on NUMA node {}: {} without CPUs, the fast memory near \
                     node {n}",
                    fast.os_index,
                    fast.memory.as_deref().unwrap_or("memory")
                ));
                Some(fast.os_index)
            }
            None => Some(n),
        },
        (true, None) => None,
    };
    let rdma: Vec<&super::Device> = topo.rdma().collect();
    let here: Vec<&&super::Device> = rdma
        .iter()
        .filter(|d| node.is_some() && d.numa == node)
        .collect();
    let anywhere: Vec<&&super::Device> = rdma.iter().filter(|d| d.numa.is_none()).collect();
    // A device near the rank when there is one; otherwise the transport chooses by the
    // address the rank's connections use, as without a topology.
    let device = if !here.is_empty() {
        Some(here[index % here.len()].name.clone())
    } else {
        let node = node.map_or("-".into(), |n| n.to_string());
        if rdma.is_empty() {
            notes.push("no RDMA device".into());
        } else if !anywhere.is_empty() {
            let names: Vec<&str> = anywhere.iter().map(|d| d.name.as_str()).collect();
            notes.push(format!(
                "no RDMA device on NUMA node {node}; {} without locality (attached across \
                 nodes, or virtual such as Soft-RoCE): the device is chosen by address",
                names.join(", ")
            ));
        } else {
            let far: Vec<String> = rdma
                .iter()
                .map(|d| {
                    format!(
                        "{} on node {}",
                        d.name,
                        d.numa.map_or("-".into(), |n| n.to_string())
                    )
                })
                .collect();
            notes.push(format!(
                "no RDMA device on NUMA node {node} ({}): the device is chosen by address and \
                 its traffic crosses the sockets",
                far.join(", ")
            ));
        }
        None
    };
    Placement {
        local_rank,
        numa: node,
        memory,
        cpus,
        bind: binds,
        device,
        notes,
    }
}

/// The cores of `cpus`: the machine's cores within them, then each PU that none of those
/// holds as a core of its own (hwloc knows no cores on some machines: a PU is then the
/// unit a rank can have to itself).
fn cores_within(topo: &Topology, cpus: &CpuSet) -> Vec<CpuSet> {
    let mut cores: Vec<CpuSet> = topo
        .cores
        .iter()
        .filter(|c| !c.cpus.is_empty() && c.cpus.is_subset(cpus))
        .map(|c| c.cpus.clone())
        .collect();
    let held = cores.iter().fold(CpuSet::new(), |a, c| a.union(c));
    cores.extend(
        cpus.ids()
            .iter()
            .filter(|&&c| !held.contains(c))
            .map(|&c| CpuSet::of([c])),
    );
    cores
}

#[cfg(test)]
mod tests {
    use super::super::{Core, Device, DeviceKind, NumaNode};
    use super::*;

    /// `nodes` NUMA nodes of 4 cores each; RDMA devices `(name, node)`.
    fn machine(nodes: u32, devices: &[(&str, Option<u32>)]) -> Topology {
        Topology {
            source: "test".into(),
            packages: vec![],
            numa: (0..nodes)
                .map(|n| NumaNode {
                    os_index: n,
                    cpus: CpuSet::of(n * 4..n * 4 + 4),
                    near: CpuSet::new(),
                    memory: None,
                })
                .collect(),
            cores: (0..nodes * 4)
                .map(|c| Core {
                    package: c / 4,
                    cpus: CpuSet::of([c]),
                })
                .collect(),
            devices: devices
                .iter()
                .map(|(name, numa)| Device {
                    name: name.to_string(),
                    kind: DeviceKind::Rdma,
                    numa: *numa,
                    cpus: None,
                    netdev: None,
                })
                .collect(),
        }
    }

    fn all(t: &Topology, size: usize, bind: Bind) -> Vec<Placement> {
        (0..size)
            .map(|r| place(t, r, size, &t.cpus(), bind))
            .collect()
    }

    #[test]
    fn ranks_spread_over_nodes_and_the_nics_of_their_node() {
        let t = machine(4, &[("mlx5_0", Some(1)), ("mlx5_1", Some(1))]);
        let p = all(&t, 8, Bind::Numa);
        let nodes: Vec<u32> = p.iter().map(|p| p.numa.unwrap()).collect();
        assert_eq!(nodes, vec![0, 0, 1, 1, 2, 2, 3, 3]);
        assert_eq!(p[2].device.as_deref(), Some("mlx5_0"));
        assert_eq!(
            p[3].device.as_deref(),
            Some("mlx5_1"),
            "both rails of node 1"
        );
        assert!(p[2].notes.is_empty() && p[3].notes.is_empty());
        assert_eq!(p[0].device, None);
        assert!(
            p[0].notes[0].contains("crosses the sockets"),
            "{:?}",
            p[0].notes
        );
        assert_eq!(p[5].cpus.to_string(), "8-11");
        let c = all(&t, 8, Bind::Core);
        assert_eq!(c[4].cpus.to_string(), "8");
        assert_eq!(c[5].cpus.to_string(), "9");
        // The default: a core each while the node has enough (2 ranks per 4-core node),
        // its cores in turn past that (5 per node: the fifth shares the first's core).
        let auto = all(&t, 8, Bind::Auto);
        assert_eq!(
            (auto[4].cpus.to_string(), auto[5].cpus.to_string()),
            ("8".into(), "9".into())
        );
        let crowded = all(&t, 20, Bind::Auto);
        let cores: Vec<String> = crowded[..5].iter().map(|p| p.cpus.to_string()).collect();
        assert_eq!(cores, ["0", "1", "2", "3", "0"]);
        assert!(
            crowded[0]
                .notes
                .iter()
                .any(|n| n.contains("share its 4 cores")),
            "{:?}",
            crowded[0].notes
        );
        let uneven = all(&t, 3, Bind::Numa);
        let nodes: Vec<u32> = uneven.iter().map(|p| p.numa.unwrap()).collect();
        assert_eq!(nodes, vec![0, 1, 2]);
    }

    /// Nodes of unequal cores (KNL SNC-4 with 68 cores: clusters of 18, 18, 16 and 16):
    /// ranks go to each node in proportion to its cores, so that none shares a core while
    /// another node has one free. Here node 0 has 6 cores and node 1 has 2: 8 ranks are 6
    /// and 2, a core each. Was: 4 and 4, two pairs sharing node 1's cores while 2 of node
    /// 0's idled.
    #[test]
    fn ranks_follow_the_cores_of_unequal_nodes() {
        let mut t = machine(2, &[]);
        t.numa[0].cpus = CpuSet::of(0..6);
        t.numa[1].cpus = CpuSet::of(6..8);
        for c in &mut t.cores {
            c.package = 0;
        }
        let p = all(&t, 8, Bind::Auto);
        let nodes: Vec<u32> = p.iter().map(|p| p.numa.unwrap()).collect();
        assert_eq!(nodes, [0, 0, 0, 0, 0, 0, 1, 1]);
        let cpus: Vec<String> = p.iter().map(|p| p.cpus.to_string()).collect();
        assert_eq!(cpus, ["0", "1", "2", "3", "4", "5", "6", "7"]);
        assert!(p
            .iter()
            .all(|p| p.notes.iter().all(|n| !n.contains("share"))));
        // Four ranks: three and one.
        let four: Vec<u32> = all(&t, 4, Bind::Auto)
            .iter()
            .map(|p| p.numa.unwrap())
            .collect();
        assert_eq!(four, [0, 0, 0, 1]);
        // Sixteen: twice the cores, 12 and 4, each core twice.
        let sixteen = all(&t, 16, Bind::Auto);
        let on_1 = sixteen.iter().filter(|p| p.numa == Some(1)).count();
        assert_eq!(on_1, 4);
    }

    #[test]
    fn a_launchers_affinity_is_kept_and_soft_roce_is_anywhere() {
        let t = machine(2, &[("rxe0", None)]);
        let p = place(&t, 0, 2, &CpuSet::of([5]), Bind::Numa);
        assert_eq!(
            (p.numa, p.bind, p.cpus.to_string()),
            (Some(1), false, "5".into())
        );
        assert!(p.notes.iter().any(|n| n.contains("launcher")));
        assert_eq!(p.device, None);
        assert!(
            p.notes.iter().any(|n| n.contains("rxe0 without locality")),
            "{:?}",
            p.notes
        );
        let none = place(&machine(1, &[]), 0, 1, &CpuSet::of(0..4), Bind::None);
        assert_eq!((none.bind, none.device.is_none()), (false, true));
        assert!(none.notes.iter().any(|n| n == "no RDMA device"));
    }
}
