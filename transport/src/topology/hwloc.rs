//! The topology from hwloc itself (cargo feature `hwloc`, which needs `libhwloc-dev`,
//! `libudev-dev` and `pkg-config` at build time): the running machine with its important
//! I/O devices, or an XML file, turned into the same [`Topology`] as the sysfs path and the
//! XML reader give.

use hwlocality::object::attributes::ObjectAttributes;
use hwlocality::object::types::{OSDeviceType, ObjectType};
use hwlocality::object::TopologyObject;
use hwlocality::topology::builder::TypeFilter;

use super::{Core, CpuSet, Device, DeviceKind, NumaNode, Package, Topology};

/// The running machine.
pub fn discover() -> Result<super::Topology, String> {
    let t = hwlocality::Topology::builder()
        .with_io_type_filter(TypeFilter::KeepImportant)
        .map_err(|e| format!("hwloc: {e}"))?
        .build()
        .map_err(|e| format!("hwloc: {e}"))?;
    let mut topo = convert(&t);
    topo.source = "hwloc".into();
    Ok(topo)
}

/// An hwloc XML file.
pub fn load_xml(path: &std::path::Path) -> Result<super::Topology, String> {
    let fail = |e: String| format!("RCOLL_TOPO_FILE {}: hwloc: {e}", path.display());
    // Read here: hwlocality panics on some file errors (a missing file, in 1.0.0-alpha.13).
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("RCOLL_TOPO_FILE {}: {e}", path.display()))?;
    let t = hwlocality::Topology::builder()
        .from_xml(&text)
        .map_err(|e| fail(e.to_string()))?
        .with_io_type_filter(TypeFilter::KeepAll)
        .map_err(|e| fail(e.to_string()))?
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let mut topo = convert(&t);
    topo.source = format!("XML file {} (hwloc)", path.display());
    Ok(topo)
}

fn cpus(o: &TopologyObject) -> CpuSet {
    o.cpuset()
        .map(|c| CpuSet::of(c.iter_set().map(|i| usize::from(i) as u32)))
        .unwrap_or_default()
}

fn os_index(o: &TopologyObject) -> u32 {
    o.os_index().unwrap_or(0) as u32
}

fn osdev(o: &TopologyObject) -> Option<DeviceKind> {
    match o.attributes() {
        Some(ObjectAttributes::OSDevice(a)) => match a.device_type() {
            OSDeviceType::OpenFabrics => Some(DeviceKind::Rdma),
            OSDeviceType::Network => Some(DeviceKind::Network),
            _ => None,
        },
        _ => None,
    }
}

fn convert(t: &hwlocality::Topology) -> Topology {
    let mut topo = Topology {
        packages: t
            .objects_with_type(ObjectType::Package)
            .map(|o| Package {
                os_index: os_index(o),
                cpus: cpus(o),
            })
            .collect(),
        numa: super::own_cpus(
            t.objects_with_type(ObjectType::NUMANode)
                .map(|o| NumaNode {
                    os_index: os_index(o),
                    cpus: cpus(o),
                    near: CpuSet::new(),
                    memory: o.subtype().map(|s| s.to_string_lossy().into_owned()),
                })
                .collect(),
        ),
        cores: t
            .objects_with_type(ObjectType::Core)
            .map(|o| Core {
                package: o
                    .first_ancestor_with_type(ObjectType::Package)
                    .map(os_index)
                    .unwrap_or(0),
                cpus: cpus(o),
            })
            .collect(),
        ..Topology::default()
    };
    for o in t.objects_with_type(ObjectType::OSDevice) {
        let name = o
            .name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(ObjectAttributes::OSDevice(a)) = o.attributes() {
            if let OSDeviceType::Unknown(t) = a.device_type() {
                let osdev_type = t.get();
                tracing::warn!(
                    device = %name,
                    osdev_type,
                    "hwloc: OS device {name} has osdev_type {osdev_type}, which rcoll does \
                     not know (hwloc's are 0 to 5; 2 a network interface, 3 an RDMA \
                     device): left out of the topology and the placement"
                );
            }
        }
        let Some(kind) = osdev(o) else { continue };
        let local = o.first_non_io_ancestor().map(cpus);
        let numa = local.as_ref().and_then(|c| topo.node_of_attachment(c));
        let netdev = match kind {
            DeviceKind::Rdma => o
                .parent()
                .filter(|p| p.object_type() == ObjectType::PCIDevice)
                .and_then(|p| {
                    p.io_children()
                        .find(|c| osdev(c) == Some(DeviceKind::Network))
                })
                .and_then(|c| c.name())
                .map(|n| n.to_string_lossy().into_owned()),
            DeviceKind::Network => None,
        };
        topo.devices.push(Device {
            name,
            kind,
            numa,
            cpus: numa.and(local),
            netdev,
        });
    }
    topo.inherit_locality();
    topo
}
