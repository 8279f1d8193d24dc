//! What a host has — packages, NUMA nodes, cores and their PUs, and every RDMA device and
//! network interface with the NUMA node and CPUs it is attached to — and where a rank should
//! run on it ([`place()`]).
//!
//! Sources, in order:
//! 1. `RCOLL_TOPO_FILE`: an hwloc XML file ([`xml`]), to plan for other machines and to test
//!    multi-socket, multi-NIC shapes on any host;
//! 2. the running machine: with the `hwloc` feature, hwloc itself (the `hwlocality` crate);
//!    by default Linux sysfs ([`sysfs`]), which needs no library at build or run time.
//!
//! The sysfs path is the default so that a fresh machine builds and runs with nothing but
//! Rust (hwloc would need `libhwloc-dev` at build time): what rcoll uses from the topology —
//! NUMA nodes, cores, PUs and the NUMA node of each device — is what the kernel exports
//! there, and the hwloc path and the XML reader give the same [`Topology`] (the tests
//! compare them on the same files when the feature is on).
//!
//! Soft-RoCE devices (rxe) have no PCI parent: they take the locality of the interface they
//! run over, and count as "anywhere" when that has none either.

// The memory policy is one system call: the only unsafe code of the topology.
#[allow(unsafe_code)]
pub mod bind;
pub mod cpuset;
pub mod place;
pub mod probe;
pub mod sysfs;
pub mod xml;

pub use cpuset::CpuSet;
pub use place::{place, Bind, Placement};

/// A host's hardware as rcoll uses it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Topology {
    /// Where it was read from (`sysfs`, `hwloc`, `XML file <path>`).
    pub source: String,
    /// Processor packages (sockets).
    pub packages: Vec<Package>,
    /// NUMA nodes, by OS index.
    pub numa: Vec<NumaNode>,
    /// Cores, each with its PUs (hardware threads).
    pub cores: Vec<Core>,
    /// RDMA devices and network interfaces.
    pub devices: Vec<Device>,
}

/// A processor package.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Package {
    /// OS index.
    pub os_index: u32,
    /// Its PUs.
    pub cpus: CpuSet,
}

/// A NUMA node.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NumaNode {
    /// OS index (as `numactl` and `set_mempolicy` name it).
    pub os_index: u32,
    /// The PUs whose own node it is (as Linux's `cpulist` gives them): empty for a
    /// memory-only node (KNL's MCDRAM in flat or hybrid mode, HBM in flat mode, a CXL
    /// memory expander), which no rank is placed on.
    pub cpus: CpuSet,
    /// For a memory-only node, the CPUs it is near (hwloc's locality of it); empty for a
    /// node with CPUs of its own, or when not known.
    #[serde(default, skip_serializing_if = "CpuSet::is_empty")]
    pub near: CpuSet,
    /// The kind of memory as hwloc names it (its subtype: `DRAM`, `HBM`, `MCDRAM`, `NVM`,
    /// `SPM`, `CXL-DRAM`, `GPUMemory`, ...), when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

/// The kinds of memory (hwloc's subtypes) faster than the ordinary: KNL's on-package
/// MCDRAM and the high-bandwidth memory of later parts (hwloc names a node `HBM` when
/// Linux's HMAT gives it more bandwidth than the DRAM beside it).
const FAST_MEMORY: [&str; 2] = ["HBM", "MCDRAM"];

impl NumaNode {
    /// Whether its memory is of a kind other than the ordinary (named, and not `DRAM`).
    fn special(&self) -> bool {
        self.memory.as_deref().is_some_and(|m| m != "DRAM")
    }

    /// Whether it is memory-only and of a fast kind (`FAST_MEMORY`).
    pub fn fast_memory_only(&self) -> bool {
        self.cpus.is_empty()
            && self
                .memory
                .as_deref()
                .is_some_and(|m| FAST_MEMORY.contains(&m))
    }
}

/// The NUMA nodes as hwloc lists them, each with the CPUs it is near (its `cpuset`, its
/// parent's): a memory-only node has the locality of the CPU node beside it (KNL's MCDRAM,
/// HBM) or a wider one (a CXL expander attached to the machine), so that CPUs would appear
/// under two nodes. Each CPU is given to one node, as Linux does: the nearest one holding
/// it (the smallest locality), of ordinary memory before a named other kind, then the
/// lowest index. A node left without CPUs is memory-only, and keeps its locality in `near`.
pub(crate) fn own_cpus(mut nodes: Vec<NumaNode>) -> Vec<NumaNode> {
    nodes.sort_by_key(|n| n.os_index);
    let all = nodes.iter().fold(CpuSet::new(), |a, n| a.union(&n.cpus));
    let mut own: Vec<Vec<u32>> = vec![Vec::new(); nodes.len()];
    for &cpu in all.ids() {
        let owner = (0..nodes.len())
            .filter(|&i| nodes[i].cpus.contains(cpu))
            .min_by_key(|&i| (nodes[i].cpus.len(), nodes[i].special(), nodes[i].os_index));
        if let Some(i) = owner {
            own[i].push(cpu);
        }
    }
    for (n, own) in nodes.iter_mut().zip(own) {
        let own = CpuSet::of(own);
        if own.is_empty() {
            n.near = std::mem::take(&mut n.cpus);
        } else {
            n.cpus = own;
        }
    }
    nodes
}

/// A core.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Core {
    /// The package it is in.
    pub package: u32,
    /// Its PUs (one per hardware thread).
    pub cpus: CpuSet,
}

/// What a device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// An RDMA device (`/sys/class/infiniband`, hwloc's OpenFabrics).
    Rdma,
    /// A network interface.
    Network,
}

/// An RDMA device or network interface and where it is attached.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Device {
    /// Its name (`mlx5_0`, `rxe0`, `eth0`).
    pub name: String,
    /// RDMA device or network interface.
    pub kind: DeviceKind,
    /// The NUMA node it is attached to; `None`: no locality known ("anywhere": a virtual
    /// device such as Soft-RoCE over an interface without one).
    pub numa: Option<u32>,
    /// The CPUs local to it, when known.
    pub cpus: Option<CpuSet>,
    /// For an RDMA device, the network interface it runs over (RoCE), when known.
    pub netdev: Option<String>,
}

impl Topology {
    /// Every PU.
    pub fn cpus(&self) -> CpuSet {
        self.numa
            .iter()
            .fold(CpuSet::new(), |all, n| all.union(&n.cpus))
            .union(
                &self
                    .cores
                    .iter()
                    .fold(CpuSet::new(), |a, c| a.union(&c.cpus)),
            )
    }

    /// The memory-only node of fast memory near node `node`'s CPUs (KNL's MCDRAM beside
    /// its DDR, HBM beside DRAM), the nearest (smallest locality, then lowest index), if
    /// there is one.
    pub fn near_fast_memory(&self, node: u32) -> Option<&NumaNode> {
        let cpus = &self.numa.iter().find(|n| n.os_index == node)?.cpus;
        if cpus.is_empty() {
            return None;
        }
        self.numa
            .iter()
            .filter(|m| m.fast_memory_only() && cpus.is_subset(&m.near))
            .min_by_key(|m| (m.near.len(), m.os_index))
    }

    /// The RDMA devices.
    pub fn rdma(&self) -> impl Iterator<Item = &Device> {
        self.devices.iter().filter(|d| d.kind == DeviceKind::Rdma)
    }

    /// The NUMA node whose CPUs contain most of `cpus` (the lowest on a tie).
    pub fn numa_of(&self, cpus: &CpuSet) -> Option<u32> {
        self.numa
            .iter()
            .map(|n| {
                (
                    n.cpus.intersection(cpus).len(),
                    std::cmp::Reverse(n.os_index),
                )
            })
            .filter(|(k, _)| *k > 0)
            .max()
            .map(|(_, std::cmp::Reverse(i))| i)
    }

    /// The NUMA node of a device attached where `cpus` are: the one node those CPUs
    /// touch, or none when they span several (attached to the whole machine).
    pub(crate) fn node_of_attachment(&self, cpus: &CpuSet) -> Option<u32> {
        let mut touching = self
            .numa
            .iter()
            .filter(|n| !n.cpus.intersection(cpus).is_empty());
        match (touching.next(), touching.next()) {
            (Some(one), None) => Some(one.os_index),
            _ => None,
        }
    }

    /// Gives RDMA devices without a locality of their own the one of their network
    /// interface (Soft-RoCE).
    pub(crate) fn inherit_locality(&mut self) {
        let nets: Vec<(String, Option<u32>, Option<CpuSet>)> = self
            .devices
            .iter()
            .filter(|d| d.kind == DeviceKind::Network)
            .map(|d| (d.name.clone(), d.numa, d.cpus.clone()))
            .collect();
        for d in self
            .devices
            .iter_mut()
            .filter(|d| d.kind == DeviceKind::Rdma)
        {
            if d.numa.is_some() {
                continue;
            }
            if let Some((_, numa, cpus)) =
                nets.iter().find(|(n, _, _)| Some(n) == d.netdev.as_ref())
            {
                d.numa = *numa;
                d.cpus = cpus.clone();
            }
        }
    }

    /// A compact picture, one line per NUMA node with its cores and devices (like a
    /// small `lstopo`).
    pub fn describe(&self) -> String {
        let mut out = format!(
            "topology ({}): {} package(s), {} NUMA node(s), {} core(s), {} PU(s)\n",
            self.source,
            self.packages.len().max(1),
            self.numa.len(),
            self.cores.len(),
            self.cpus().len()
        );
        for n in &self.numa {
            if n.cpus.is_empty() {
                out += &format!(
                    "  NUMA node {}: memory only ({}), near cpus {}\n",
                    n.os_index,
                    n.memory.as_deref().unwrap_or("kind not named"),
                    if n.near.is_empty() {
                        "not known".to_string()
                    } else {
                        n.near.to_string()
                    }
                );
                continue;
            }
            let cores = self
                .cores
                .iter()
                .filter(|c| c.cpus.is_subset(&n.cpus))
                .count();
            let devs: Vec<String> = self
                .devices
                .iter()
                .filter(|d| d.numa == Some(n.os_index))
                .map(Device::label)
                .collect();
            out += &format!(
                "  NUMA node {}{}: cpus {} ({} cores); devices: {}\n",
                n.os_index,
                n.memory
                    .as_deref()
                    .map_or(String::new(), |m| format!(" ({m})")),
                n.cpus,
                cores,
                if devs.is_empty() {
                    "none".into()
                } else {
                    devs.join(", ")
                }
            );
        }
        let anywhere: Vec<String> = self
            .devices
            .iter()
            .filter(|d| d.numa.is_none())
            .map(Device::label)
            .collect();
        if !anywhere.is_empty() {
            out += &format!("  no NUMA locality: {}\n", anywhere.join(", "));
        }
        out
    }
}

impl Device {
    fn label(&self) -> String {
        match (self.kind, &self.netdev) {
            (DeviceKind::Rdma, Some(n)) => format!("{} (rdma over {n})", self.name),
            (DeviceKind::Rdma, None) => format!("{} (rdma)", self.name),
            (DeviceKind::Network, _) => self.name.clone(),
        }
    }
}

/// What `rcoll-bench topo` shows and `RCOLL_TOPO_DUMP_FILE` holds: a host's topology and
/// where each of its local ranks would run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// The host.
    pub topology: Topology,
    /// `RCOLL_BIND`.
    pub bind: Bind,
    /// Local rank i's placement, `placements[i]`.
    pub placements: Vec<Placement>,
}

impl Report {
    /// Places `local_size` ranks on `topology` (each with CPU affinity `allowed`).
    pub fn new(topology: Topology, local_size: usize, bind: Bind, allowed: &CpuSet) -> Report {
        let placements = (0..local_size)
            .map(|r| place(&topology, r, local_size, allowed, bind))
            .collect();
        Report {
            topology,
            bind,
            placements,
        }
    }

    /// The topology, then one line per local rank: NUMA node, CPUs, the node of its memory
    /// when another, device, notes.
    pub fn describe(&self) -> String {
        let mut out = self.topology.describe();
        out += &format!(
            "placement of {} local rank(s), RCOLL_BIND={}:\n",
            self.placements.len(),
            self.bind.name()
        );
        for p in &self.placements {
            let memory = match p.memory {
                Some(m) if p.memory != p.numa => {
                    let kind = self
                        .topology
                        .numa
                        .iter()
                        .find(|n| n.os_index == m)
                        .and_then(|n| n.memory.as_deref());
                    match kind {
                        Some(k) => format!(", memory on node {m} ({k})"),
                        None => format!(", memory on node {m}"),
                    }
                }
                _ => String::new(),
            };
            out += &format!(
                "  local rank {}: NUMA node {}, cpus {}{}{memory}, device {}{}\n",
                p.local_rank,
                p.numa.map_or("-".into(), |n| n.to_string()),
                p.cpus,
                if p.bind { "" } else { " (not bound)" },
                p.device.as_deref().unwrap_or("by address"),
                if p.notes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", p.notes.join("; "))
                }
            );
        }
        out
    }

    /// As JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

/// The CPUs the ranks of this host share: [`machine_cpus`], within those this process
/// may run on when a launcher bound it (`RCOLL_HOST_CPUS` overrides both). Not this
/// thread's affinity alone: a rank that rcoll bound to a core of its own sees one CPU, and
/// its neighbours are on others.
///
/// A bad `RCOLL_HOST_CPUS` is an error naming it.
pub fn host_cpus() -> Result<usize, String> {
    if let Some(n) = cpus_override()? {
        return Ok(n);
    }
    let machine = machine_cpus()?;
    Ok(match bind::launcher_affinity().len() {
        0 => machine,
        l => machine.min(l),
    })
}

/// The CPUs of this machine that its ranks may share, the same for every process on it
/// (so that every rank prices schedules alike): the online CPUs, within a container's CPU
/// quota (cgroup v2 `cpu.max`, rounded up); `RCOLL_HOST_CPUS` overrides it (set it alike on
/// every rank). A launcher's binding is not counted: ranks bound to a core each may still
/// have a core of their own. A bad `RCOLL_HOST_CPUS` is an error naming it.
pub fn machine_cpus() -> Result<usize, String> {
    if let Some(n) = cpus_override()? {
        return Ok(n);
    }
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| CpuSet::parse_list(&s).ok())
        .map(|s| s.len())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let quota = std::fs::read_to_string("/sys/fs/cgroup/cpu.max")
        .ok()
        .and_then(|s| cpu_quota(&s));
    Ok(quota.map_or(online, |q| online.min(q)).max(1))
}

/// `RCOLL_HOST_CPUS`, if set: a positive count, or an error naming it.
fn cpus_override() -> Result<Option<usize>, String> {
    crate::env::parsed(
        "RCOLL_HOST_CPUS",
        "a positive number of CPUs",
        |&n: &usize| n > 0,
    )
}

/// The CPUs a cgroup v2 `cpu.max` (`"<quota> <period>"`, or `"max <period>"`) allows,
/// rounded up; `None` without a limit.
pub fn cpu_quota(cpu_max: &str) -> Option<usize> {
    let mut it = cpu_max.split_whitespace();
    let quota: u64 = it.next()?.parse().ok()?;
    let period: u64 = it.next()?.parse().ok().filter(|&p| p > 0)?;
    Some(quota.div_ceil(period).max(1) as usize)
}

/// This host's topology: `RCOLL_TOPO_FILE` if set, else the running machine (hwloc with
/// the `hwloc` feature, sysfs otherwise).
pub fn discover() -> Result<Topology, String> {
    if let Some(path) = topo_file() {
        return load_xml(&path);
    }
    #[cfg(feature = "hwloc")]
    {
        hwloc::discover()
    }
    #[cfg(not(feature = "hwloc"))]
    {
        sysfs::discover(std::path::Path::new("/sys"))
    }
}

/// `RCOLL_TOPO_FILE`, unless unset or blank.
pub fn topo_file() -> Option<std::path::PathBuf> {
    crate::env::var("RCOLL_TOPO_FILE").map(std::path::PathBuf::from)
}

/// An hwloc XML file (with hwloc itself under the `hwloc` feature).
pub fn load_xml(path: &std::path::Path) -> Result<Topology, String> {
    #[cfg(feature = "hwloc")]
    {
        hwloc::load_xml(path)
    }
    #[cfg(not(feature = "hwloc"))]
    {
        xml::load(path)
    }
}

#[cfg(feature = "hwloc")]
pub mod hwloc;

#[cfg(test)]
mod tests {
    use super::{cpu_quota, own_cpus, CpuSet, NumaNode};

    fn node(os_index: u32, cpus: std::ops::Range<u32>, memory: Option<&str>) -> NumaNode {
        NumaNode {
            os_index,
            cpus: CpuSet::of(cpus),
            near: CpuSet::new(),
            memory: memory.map(String::from),
        }
    }

    /// Two nodes of one locality: the CPUs go to the node of ordinary memory, whatever
    /// its index; without kinds named, to the lower index. A node of a wider locality
    /// (attached higher up) gets none. The node left without CPUs keeps its locality.
    #[test]
    fn each_cpu_goes_to_one_node_the_nearest_of_ordinary_memory() {
        let nodes = own_cpus(vec![node(1, 0..8, None), node(0, 0..8, Some("HBM"))]);
        assert_eq!((nodes[0].os_index, nodes[0].cpus.len()), (0, 0));
        assert_eq!(nodes[0].near, CpuSet::of(0..8));
        assert_eq!(nodes[1].cpus, CpuSet::of(0..8));
        let plain = own_cpus(vec![node(0, 0..4, None), node(1, 0..4, None)]);
        assert_eq!((plain[0].cpus.len(), plain[1].cpus.len()), (4, 0));
        let wide = own_cpus(vec![
            node(0, 0..4, None),
            node(1, 4..8, None),
            node(2, 0..8, None),
        ]);
        let own: Vec<String> = wide.iter().map(|n| n.cpus.to_string()).collect();
        assert_eq!(own, ["0-3", "4-7", "-"]);
        assert_eq!(wide[2].near, CpuSet::of(0..8));
    }

    /// cgroup v2 `cpu.max`: a quota over a period, rounded up to whole CPUs; "max" is no
    /// limit; garbage is no limit either.
    #[test]
    fn a_cgroup_quota_counts_whole_cpus() {
        assert_eq!(cpu_quota("200000 100000\n"), Some(2));
        assert_eq!(cpu_quota("150000 100000"), Some(2));
        assert_eq!(cpu_quota("1000 100000"), Some(1));
        assert_eq!(cpu_quota("max 100000\n"), None);
        assert_eq!(cpu_quota("100000 0"), None);
        assert_eq!(cpu_quota(""), None);
    }
}
