#!/usr/bin/env python3
"""Makes the hwloc XML files the topology tests read: hwloc's synthetic topologies
(`lstopo --input "<description>"`) with PCI NICs added below the object they hang from, each
an RDMA device (OpenFabrics OSDev) and its network interface, as lstopo exports a real NIC.
Machines with memory-only NUMA nodes (KNL's MCDRAM in flat mode, HBM in flat mode, a CXL memory
expander) list them beside the CPU nodes, as hwloc exports them: attached to the object whose CPUs
they are near (so with the same cpuset as the CPU node there, or a wider one), named by their
subtype where hwloc knows the kind (hwloc-annotate sets it here, as hwloc's Linux backend does).
Run from this directory with hwloc's lstopo and hwloc-annotate installed (Debian's `hwloc`);
`lstopo --input <file>` reads every result back (checked here)."""
import os
import re
import subprocess
import tempfile

SHAPES = {
    # name: (synthetic description, [(type and index among its kind of the object to hang
    # from, rdma, netdev, pci bus)], optionally {logical index of a NUMANode: its subtype})
    "one-socket": ("pack:1 [numa] core:4 pu:2", [("Package", 0, "mlx5_0", "ens1f0", "0000:17:00.0")]),
    "two-sockets": ("pack:2 [numa] core:4 pu:2", [
        ("Package", 0, "mlx5_0", "ens1f0", "0000:17:00.0"),
        ("Package", 1, "mlx5_1", "ens2f0", "0000:b1:00.0"),
    ]),
    "four-numa-two-nics": ("pack:2 group:2 [numa] core:2 pu:2", [
        ("Group", 2, "mlx5_0", "ens3f0", "0000:81:00.0"),
        ("Group", 2, "mlx5_1", "ens3f1", "0000:81:00.1"),
    ]),
    # Knights Landing, quadrant cluster mode, flat memory mode: DDR (node 0) and MCDRAM
    # (node 1, no CPUs of its own) both local to every core; Omni-Path on the package.
    "knl-quadrant-flat": ("pack:1 [numa] [numa] core:8 pu:4", [
        ("Package", 0, "hfi1_0", "ib0", "0000:01:00.0"),
    ], {1: "MCDRAM"}),
    # Knights Landing, SNC-4, flat: four clusters, each a DDR node with the cores and an
    # MCDRAM node beside it (nodes 1, 3, 5, 7 here).
    "knl-snc4-flat": ("pack:1 group:4 [numa] [numa] core:2 pu:4", [
        ("Package", 0, "hfi1_0", "ib0", "0000:01:00.0"),
    ], {1: "MCDRAM", 3: "MCDRAM", 5: "MCDRAM", 7: "MCDRAM"}),
    # Two sockets with on-package HBM in flat mode (Sapphire Rapids Max): per socket a DRAM
    # node with the cores and an HBM node without.
    "hbm-two-sockets-flat": ("pack:2 [numa] [numa] core:4 pu:2", [
        ("Package", 0, "mlx5_0", "ens1f0", "0000:17:00.0"),
        ("Package", 1, "mlx5_1", "ens2f0", "0000:b1:00.0"),
    ], {0: "DRAM", 1: "HBM", 2: "DRAM", 3: "HBM"}),
    # Two sockets and a CXL memory expander: node 2, no CPUs, near both sockets (attached to
    # the machine), of no kind hwloc names here.
    "cxl-expander": ("[numa] pack:2 [numa] core:4 pu:2", [
        ("Package", 0, "mlx5_0", "ens1f0", "0000:17:00.0"),
    ]),
    # PUs without Core objects (a VM or a platform that reports no cores): eight PUs.
    "no-cores": ("pack:1 [numa] pu:8", [
        ("Package", 0, "mlx5_0", "ens1f0", "0000:17:00.0"),
    ]),
}

gp = [1000]

def next_gp():
    gp[0] += 1
    return gp[0]

def nic(rdma, netdev, bus, indent):
    pad = " " * indent
    return (
        f'{pad}<object type="Bridge" gp_index="{next_gp()}" bridge_type="0-1" depth="0" bridge_pci="0000:[{bus[5:7]}-{bus[5:7]}]">\n'
        f'{pad}  <object type="PCIDev" gp_index="{next_gp()}" pci_busid="{bus}" pci_type="0207 [15b3:1017] [15b3:0020] 00" pci_link_speed="15.753846">\n'
        f'{pad}    <info name="PCIVendor" value="Mellanox Technologies"/>\n'
        f'{pad}    <object type="OSDev" gp_index="{next_gp()}" name="{netdev}" osdev_type="2">\n'
        f'{pad}      <info name="Address" value="00:00:00:00:00:00"/>\n'
        f'{pad}    </object>\n'
        f'{pad}    <object type="OSDev" gp_index="{next_gp()}" name="{rdma}" osdev_type="3">\n'
        f'{pad}      <info name="NodeGUID" value="0000:0000:0000:0000"/>\n'
        f'{pad}    </object>\n'
        f'{pad}  </object>\n'
        f'{pad}</object>\n'
    )

for name, (desc, nics, *more) in SHAPES.items():
    xml = subprocess.run(["lstopo-no-graphics", "--input", desc, "--of", "xml", "-"],
                         check=True, capture_output=True, text=True).stdout
    for node, subtype in (more[0] if more else {}).items():
        with tempfile.TemporaryDirectory() as tmp:
            before, after = os.path.join(tmp, "in.xml"), os.path.join(tmp, "out.xml")
            with open(before, "w") as f:
                f.write(xml)
            subprocess.run(["hwloc-annotate", before, after, f"NUMANode:{node}", "subtype", subtype],
                           check=True)
            with open(after) as f:
                xml = f.read()
    xml = re.sub(r'\s*<info name="ProcessName"[^>]*/>', "", xml)
    lines = xml.split("\n")
    for kind, index, rdma, netdev, bus in nics:
        # The n-th object of this type (Groups have no os_index in synthetic output).
        opens = [i for i, l in enumerate(lines) if f'<object type="{kind}"' in l]
        start = opens[index]
        indent = len(lines[start]) - len(lines[start].lstrip())
        end = next(i for i in range(start + 1, len(lines))
                   if lines[i] == " " * indent + "</object>")
        lines[end:end] = nic(rdma, netdev, bus, indent + 2).rstrip("\n").split("\n")
    out = "\n".join(lines)
    with open(f"{name}.xml", "w") as f:
        f.write(out)
    check = subprocess.run(["lstopo-no-graphics", "--input", f"{name}.xml", "-v", "--of", "console"],
                           check=True, capture_output=True, text=True).stdout
    for _, _, rdma, _, _ in nics:
        assert rdma in check, (name, rdma, check)
    for subtype in set((more[0] if more else {}).values()):
        assert f"NUMANode({subtype})" in check, (name, subtype, check)
    print(f"{name}.xml: {desc} + {len(nics)} NIC(s)")
