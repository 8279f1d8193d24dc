#!/usr/bin/env python3
"""Makes the hwloc XML files the topology tests read: hwloc's synthetic topologies
(`lstopo --input "<description>"`) with PCI NICs added below the object they hang from, each
an RDMA device (OpenFabrics OSDev) and its network interface, as lstopo exports a real NIC.
Run from this directory with hwloc's lstopo installed; `lstopo --input <file>` reads every
result back (checked here)."""
import re
import subprocess

SHAPES = {
    # name: (synthetic description, [(gp index of the object to hang from, rdma, netdev, pci bus)])
    "one-socket": ("pack:1 [numa] core:4 pu:2", [("Package", 0, "mlx5_0", "ens1f0", "0000:17:00.0")]),
    "two-sockets": ("pack:2 [numa] core:4 pu:2", [
        ("Package", 0, "mlx5_0", "ens1f0", "0000:17:00.0"),
        ("Package", 1, "mlx5_1", "ens2f0", "0000:b1:00.0"),
    ]),
    "four-numa-two-nics": ("pack:2 group:2 [numa] core:2 pu:2", [
        ("Group", 2, "mlx5_0", "ens3f0", "0000:81:00.0"),
        ("Group", 2, "mlx5_1", "ens3f1", "0000:81:00.1"),
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

for name, (desc, nics) in SHAPES.items():
    xml = subprocess.run(["lstopo-no-graphics", "--input", desc, "--of", "xml", "-"],
                         check=True, capture_output=True, text=True).stdout
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
    print(f"{name}.xml: {desc} + {len(nics)} NIC(s)")
