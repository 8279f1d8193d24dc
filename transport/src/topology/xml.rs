//! hwloc's XML export (`lstopo topo.xml`, `hwloc-gather-topology`), read without hwloc:
//! `object` elements by `type` — `Package` (`Socket` in hwloc 1.x), `NUMANode` (with its
//! `subtype`, the kind of memory, where hwloc names it), `Core`,
//! `PU`, and the I/O tree `Bridge` > `PCIDev` > `OSDev` (`osdev_type` 2: a network
//! interface, 3: an OpenFabrics (RDMA) device; a type number hwloc does not define is a
//! warning naming the device) — with their `os_index`, `cpuset` (a mask)
//! and `name`. A device's locality is its nearest ancestor outside the I/O tree: the NUMA
//! node whose CPUs that ancestor's cpuset lies in, or none when it spans several.

use std::path::Path;

use super::{Core, CpuSet, Device, DeviceKind, NumaNode, Package, Topology};

/// hwloc's `HWLOC_OBJ_OSDEV_NETWORK` and `HWLOC_OBJ_OSDEV_OPENFABRICS`.
const OSDEV_NETWORK: &str = "2";
const OSDEV_OPENFABRICS: &str = "3";
/// hwloc's other OS device types (1.x and 2.x): block, GPU, DMA, co-processor. rcoll uses
/// none; any number beyond these is a warning naming the device (a NIC of a type number
/// this reader does not know would otherwise vanish from the placement in silence).
const OSDEV_OTHER: [&str; 4] = ["0", "1", "4", "5"];

/// An object's `type`.
fn kind<'a>(n: &roxmltree::Node<'a, '_>) -> &'a str {
    n.attribute("type").unwrap_or("")
}

fn is_io(t: &str) -> bool {
    matches!(t, "Bridge" | "PCIDev" | "OSDev" | "Misc")
}

/// Reads an hwloc XML file.
pub fn load(path: &Path) -> Result<Topology, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("RCOLL_TOPO_FILE {}: {e}", path.display()))?;
    let mut t = parse(&text).map_err(|e| format!("RCOLL_TOPO_FILE {}: {e}", path.display()))?;
    t.source = format!("XML file {}", path.display());
    Ok(t)
}

/// Reads hwloc XML text.
pub fn parse(text: &str) -> Result<Topology, String> {
    // hwloc's exports declare their DTD (`<!DOCTYPE topology SYSTEM "hwloc2.dtd">`).
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let doc = roxmltree::Document::parse_with_options(text, options)
        .map_err(|e| format!("not XML: {e}"))?;
    let root = doc.root_element();
    if root.tag_name().name() != "topology" {
        return Err(format!(
            "the root element is <{}>, not hwloc's <topology>",
            root.tag_name().name()
        ));
    }
    let objects = || {
        root.descendants()
            .filter(|n| n.is_element() && n.tag_name().name() == "object")
    };
    let os_index = |n: &roxmltree::Node| -> Result<u32, String> {
        n.attribute("os_index")
            .ok_or_else(|| format!("a {} object without os_index", kind(n)))?
            .parse()
            .map_err(|_| format!("a {} object with a bad os_index", kind(n)))
    };
    // An object's CPUs: its cpuset, else the PUs below it.
    let cpus = |n: &roxmltree::Node| -> Result<CpuSet, String> {
        match n.attribute("cpuset") {
            Some(mask) => CpuSet::parse_mask(mask),
            None => {
                let pus: Result<Vec<u32>, String> = n
                    .descendants()
                    .filter(|d| d.is_element() && kind(d) == "PU")
                    .map(|d| os_index(&d))
                    .collect();
                Ok(CpuSet::of(pus?))
            }
        }
    };
    let mut t = Topology::default();
    for n in objects() {
        match kind(&n) {
            "Package" | "Socket" => t.packages.push(Package {
                os_index: os_index(&n)?,
                cpus: cpus(&n)?,
            }),
            "NUMANode" => t.numa.push(NumaNode {
                os_index: os_index(&n)?,
                cpus: cpus(&n)?,
                near: CpuSet::new(),
                memory: n.attribute("subtype").map(String::from),
            }),
            "Core" => {
                let package = n
                    .ancestors()
                    .find(|a| matches!(kind(a), "Package" | "Socket"))
                    .map(|p| os_index(&p))
                    .transpose()?
                    .unwrap_or(0);
                t.cores.push(Core {
                    package,
                    cpus: cpus(&n)?,
                })
            }
            _ => {}
        }
    }
    t.numa = super::own_cpus(std::mem::take(&mut t.numa));
    if t.numa.is_empty() {
        // hwloc always has one; an XML without any is treated as one node of every CPU.
        let all = objects()
            .filter(|n| kind(n) == "PU")
            .map(|n| os_index(&n))
            .collect::<Result<Vec<u32>, String>>()?;
        t.numa.push(NumaNode {
            os_index: 0,
            cpus: CpuSet::of(all),
            near: CpuSet::new(),
            memory: None,
        });
    }
    for n in objects().filter(|n| kind(n) == "OSDev") {
        let dkind = match n.attribute("osdev_type") {
            Some(OSDEV_OPENFABRICS) => DeviceKind::Rdma,
            Some(OSDEV_NETWORK) => DeviceKind::Network,
            Some(t) if OSDEV_OTHER.contains(&t) => continue,
            t => {
                let device = n.attribute("name").unwrap_or("(no name)");
                let osdev_type = t.unwrap_or("(none)");
                tracing::warn!(
                    device,
                    osdev_type,
                    "hwloc XML: OS device {device} has osdev_type {osdev_type}, which rcoll \
                     does not know (hwloc's are 0 to 5; 2 a network interface, 3 an RDMA \
                     device): left out of the topology and the placement"
                );
                continue;
            }
        };
        let name = n
            .attribute("name")
            .ok_or("an OSDev object without a name")?
            .to_string();
        let anchor = n
            .ancestors()
            .find(|a| a.is_element() && !kind(a).is_empty() && !is_io(kind(a)));
        let local = anchor.map(|a| cpus(&a)).transpose()?;
        let numa = local.as_ref().and_then(|c| t.node_of_attachment(c));
        // The network interface of the same PCI function (RoCE).
        let netdev = match dkind {
            DeviceKind::Rdma => n
                .parent()
                .filter(|p| kind(p) == "PCIDev")
                .and_then(|p| {
                    p.children().find(|c| {
                        kind(c) == "OSDev" && c.attribute("osdev_type") == Some(OSDEV_NETWORK)
                    })
                })
                .and_then(|c| c.attribute("name"))
                .map(String::from),
            DeviceKind::Network => None,
        };
        t.devices.push(Device {
            name,
            kind: dkind,
            numa,
            cpus: numa.and(local),
            netdev,
        });
    }
    t.inherit_locality();
    Ok(t)
}
