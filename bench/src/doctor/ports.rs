//! RDMA support, devices, ports and GIDs, as `rcoll_transport::verbs::probe` sees them,
//! with the reading of each that a user needs: is the port usable, which GID would rcoll
//! pick and why, and what limits bandwidth.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr};

use rcoll::transport::interface;
use rcoll::transport::verbs::{self, select, Options, PortReport};

use super::connect::Endpoint;
use super::{human_bytes, Findings};
use crate::args::DoctorArgs;

/// Bytes of RoCE headers inside the Ethernet MTU (IP, UDP, BTH, extended headers, ICRC)
/// that a driver reserves when it derives the RDMA MTU (rxe's `RXE_MAX_HDR_LENGTH`).
const ROCE_HEADER_BYTES: u32 = 80;
/// The RDMA MTUs, largest first.
const RDMA_MTUS: [u32; 5] = [4096, 2048, 1024, 512, 256];

/// Prints the RDMA sections and returns the ports a rank could use (ACTIVE, with a GID
/// rcoll would choose), in the probe's order.
pub(super) fn check(f: &mut Findings, args: &DoctorArgs, segment: usize) -> Vec<Endpoint> {
    f.section("RDMA support");
    if !devices_exist(f) {
        return Vec::new();
    }
    let opts = match options(args, segment) {
        Ok(opts) => opts,
        Err(e) => {
            f.fail("bad RCOLL_IB_* setting", &e);
            return Vec::new();
        }
    };
    // With --device, every GID choice is for that interface's address; otherwise each
    // port's choice is for its own interface's address, as a rank bound there makes it.
    let device_local = match &args.device {
        Some(name) => match interface::address_of(name, Ipv4Addr::UNSPECIFIED.into()) {
            Ok(ip) => Some((name.as_str(), ip)),
            Err(e) => {
                f.fail(&format!("no interface {name}"), &format!("--device: {e}"));
                return Vec::new();
            }
        },
        None => None,
    };
    let local = device_local.map(|(_, ip)| (ip, verbs::prefix_of(ip)));
    let reports = match verbs::probe(local, opts.hca.as_deref(), opts.gid_index) {
        Ok(reports) => reports,
        Err(e) => {
            f.fail("cannot query the RDMA devices", &e);
            if !std::path::Path::new("/dev/infiniband").exists() {
                f.detail(
                    "/dev/infiniband does not exist: in a container, pass the devices in \
                     (docker run --device /dev/infiniband ...)",
                );
            }
            return Vec::new();
        }
    };
    if reports.is_empty() {
        f.fail("no RDMA ports", "the devices have no ports");
    }
    let mut usable = Vec::new();
    for report in &reports {
        f.section(&format!("{} port {}", report.device, report.port));
        if let Some(endpoint) = port(f, report, device_local, &opts, segment) {
            usable.push(endpoint);
        }
    }
    if !reports.is_empty() && usable.is_empty() {
        f.fail(
            "no usable port",
            "no port is ACTIVE with a GID rcoll can use (see each port above)",
        );
    }
    if let Some((name, ip)) = device_local {
        f.section(&format!("a rank with --device {name}"));
        match verbs::choose(Some(ip), &opts) {
            Ok(sel) => f.ok(&format!(
                "binds {ip} and uses {} port {}: {}",
                sel.device, sel.port, sel.gid.why
            )),
            Err(e) => f.fail(
                &format!("no RDMA port for --device {name}"),
                &format!("a rank bound to {ip} has no usable RDMA port: {e}"),
            ),
        }
    }
    usable
}

/// The first finding: does the kernel and rdma-core see any device?
fn devices_exist(f: &mut Findings) -> bool {
    match verbs::library() {
        Ok(library) => f.ok(&format!("{library} loaded (rdma-core's user space)")),
        Err(e) => {
            f.fail("libibverbs not found", &e.to_string());
            f.detail(
                "rcoll loads libibverbs at run time, so the same binary runs everywhere; RDMA \
                 needs the library and a provider for the device (Debian/Ubuntu: apt install \
                 libibverbs1 ibverbs-providers; RHEL/Fedora: dnf install rdma-core \
                 libibverbs). RCOLL_IBVERBS_LIB names another file.",
            );
            f.detail("tcp needs none of this: --transport tcp (or auto) works here.");
            return false;
        }
    }
    match verbs::device_names() {
        Err(e) if std::io::Error::from_raw_os_error(e.errno).kind() == ErrorKind::Unsupported => {
            f.fail(
                "no RDMA support in this kernel (ENOSYS)",
                "this kernel has no RDMA support: ibv_get_device_list failed with ENOSYS",
            );
            f.detail(
                "ENOSYS (\"function not implemented\"): the kernel was built without \
                 InfiniBand/RDMA support (CONFIG_INFINIBAND), so no RDMA device can exist on \
                 it, not even a Soft-RoCE (rxe) one.",
            );
            f.detail(
                "fix, on this machine: run inside the Soft-RoCE VM, which boots a kernel with rxe:",
            );
            let exe = std::env::current_exe()
                .map_or_else(|_| "rcoll-bench".to_owned(), |p| p.display().to_string());
            f.verbatim(&format!("    soft-roce/run-in-vm.sh '{exe} doctor'"));
            f.detail(
                "fix, on a host whose kernel has rdma_rxe (most distributions): create \
                 Soft-RoCE devices (modprobe rdma_rxe; rdma link add rxe0 type rxe netdev \
                 <eth>), or a veth pair with two of them:",
            );
            f.verbatim("    sudo soft-roce/setup.sh");
            f.detail("tcp needs none of this: --transport tcp (or auto) works here.");
            false
        }
        Err(e) => {
            f.fail(
                "ibv_get_device_list failed",
                &format!("the RDMA device list cannot be read: {e}"),
            );
            f.detail(
                "is rdma-core's user space installed (libibverbs1 and ibverbs-providers)? \
                 `ibv_devices` should list the devices",
            );
            false
        }
        Ok(names) if names.is_empty() && !kernel_devices().is_empty() => {
            f.fail(
                "no provider for the RDMA devices",
                &format!(
                    "the kernel has RDMA device(s) {} but libibverbs lists none: the provider \
                     library for them is missing",
                    kernel_devices().join(", ")
                ),
            );
            f.detail(
                "fix: install the providers (Debian/Ubuntu: ibverbs-providers; RHEL: \
                 libibverbs), which put lib<driver>-rdmav*.so under \
                 /usr/lib/*/libibverbs/ and a driver file under /etc/libibverbs.d/",
            );
            false
        }
        Ok(names) if names.is_empty() => {
            f.fail(
                "no RDMA devices",
                "the kernel supports RDMA but there are no RDMA devices",
            );
            f.detail(
                "fix: load the NIC's RDMA driver (e.g. mlx5_ib), or create Soft-RoCE devices \
                 (modprobe rdma_rxe; rdma link add rxe0 type rxe netdev <eth>), or a veth pair \
                 with two of them:",
            );
            f.verbatim("    sudo soft-roce/setup.sh");
            false
        }
        Ok(names) => {
            f.ok(&format!(
                "{} RDMA device(s): {}",
                names.len(),
                names.join(", ")
            ));
            true
        }
    }
}

/// The RDMA devices the kernel has (`/sys/class/infiniband`), whatever user space sees.
fn kernel_devices() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|dir| {
            dir.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The verbs options ranks would use, with the flags over the environment.
fn options(args: &DoctorArgs, segment: usize) -> Result<Options, String> {
    let mut opts = Options::from_env(segment)?;
    if args.hca.is_some() {
        opts.hca.clone_from(&args.hca);
    }
    if args.gid_index.is_some() {
        opts.gid_index = args.gid_index;
    }
    Ok(opts)
}

/// One port's findings; the port as an [`Endpoint`] when a rank could use it.
fn port(
    f: &mut Findings,
    report: &PortReport,
    device_local: Option<(&str, IpAddr)>,
    opts: &Options,
    segment: usize,
) -> Option<Endpoint> {
    let roce = report.link_layer == "Ethernet";
    let active = report.state == "ACTIVE";
    let state = format!(
        "{}, link layer {}{}, active MTU {} (max {}), largest message {}",
        report.state,
        report.link_layer,
        if roce { " (RoCE)" } else { "" },
        report.active_mtu,
        report.max_mtu,
        human_bytes(u64::from(report.max_msg_sz)),
    );
    if active {
        f.ok(&state);
    } else {
        f.warn(&state);
        f.detail(if roce {
            "the port is not ACTIVE: is its network interface up? (`ip link set <netdev> up`)"
        } else {
            "the port is not ACTIVE: is a subnet manager running on the fabric (opensm)?"
        });
    }
    let netdev = report.gids.iter().find_map(|g| g.netdev.clone());
    if let Some(name) = &netdev {
        mtu(f, report, name);
    }
    let slot = segment + verbs::HEADER;
    if u64::try_from(slot).unwrap_or(u64::MAX) > u64::from(report.max_msg_sz) {
        f.fail(
            &format!("segment too large for {}", report.device),
            &format!(
                "rcoll's messages ({} segment + {} B header) exceed the port's largest \
                 message: lower RCOLL_SEGMENT_BYTES",
                human_bytes(segment as u64),
                verbs::HEADER
            ),
        );
    }
    gid_table(f, report);

    // The address the choice is for, and the choice.
    let own = netdev.as_deref().and_then(|name| {
        interface::address_of(name, Ipv4Addr::UNSPECIFIED.into())
            .ok()
            .map(|ip| (name, ip))
    });
    let (whose, choice) = match (device_local, own) {
        (Some((name, ip)), _) => (
            Some(format!("{ip} (--device {name})")),
            report.choice.clone(),
        ),
        (None, Some((name, ip))) if active && roce => {
            let hca = format!("{}:{}", report.device, report.port);
            let local = Some((ip, verbs::prefix_of(ip)));
            let choice = match verbs::probe(local, Some(&hca), opts.gid_index) {
                Ok(mut reports) if reports.len() == 1 => reports.remove(0).choice,
                Ok(_) => report.choice.clone(),
                Err(e) => Err(e),
            };
            (Some(format!("{ip} ({name}'s address)")), choice)
        }
        (None, _) => (None, report.choice.clone()),
    };
    let for_whom = whose.map_or(String::new(), |w| format!(" for {w}"));
    match choice {
        Ok(c) => {
            // Only a forced index can land here: rcoll never picks a link-local GID itself.
            if roce && c.entry.address().is_unicast_link_local() {
                f.warn(&format!("rcoll would use{for_whom}: {}", c.why));
                f.detail(
                    "GID 0 on RoCE is the link-local fe80:: GID, which cannot reach IPv4 \
                     peers (connections fail with RETRY_EXC); unset RCOLL_IB_GID_INDEX",
                );
            } else {
                f.ok(&format!("rcoll would use{for_whom}: {}", c.why));
            }
            if !active {
                return None;
            }
            Some(Endpoint {
                device: report.device.clone(),
                port: report.port,
                address: own.map(|(_, ip)| ip),
                netdev: netdev.clone(),
                roce,
            })
        }
        Err(e) if active => {
            f.warn(&format!("no GID rcoll can use{for_whom}: {e}"));
            None
        }
        Err(e) => {
            f.note(&format!("not usable: {e}"));
            None
        }
    }
}

/// The active MTU against what the port's network interface carries.
fn mtu(f: &mut Findings, report: &PortReport, netdev: &str) {
    let path = format!("/sys/class/net/{netdev}/mtu");
    let Some(netdev_mtu) = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    else {
        return;
    };
    let carried = rdma_mtu_for(netdev_mtu).min(report.max_mtu);
    let text = format!(
        "netdev {netdev}: MTU {netdev_mtu}, which carries RDMA MTU {carried}; rcoll uses the \
         active MTU, {}",
        report.active_mtu
    );
    if report.active_mtu < carried {
        f.warn(&text);
        f.detail(
            "the port did not follow the interface's MTU change; recreate the device \
             (soft-roce/setup.sh for rxe) or check the driver, since bandwidth grows with the MTU",
        );
    } else if report.active_mtu < report.max_mtu {
        f.note(&text);
        f.detail(&format!(
            "an interface MTU of 9000 would allow {} (on rxe here about 1.6x the bandwidth \
             of 1024): soft-roce/setup.sh --mtu 9000, or RCOLL_VM_MTU=9000 for the VM",
            rdma_mtu_for(9000).min(report.max_mtu)
        ));
    } else {
        f.ok(&text);
    }
}

/// The largest RDMA MTU a RoCE port can use over an Ethernet MTU of `netdev_mtu` bytes.
fn rdma_mtu_for(netdev_mtu: u32) -> u32 {
    RDMA_MTUS
        .into_iter()
        .find(|m| m + ROCE_HEADER_BYTES <= netdev_mtu)
        .unwrap_or(RDMA_MTUS[RDMA_MTUS.len() - 1])
}

/// The port's GID table as a small table of detail lines.
fn gid_table(f: &mut Findings, report: &PortReport) {
    if report.gids.is_empty() {
        f.detail("GID table: empty (or unreadable in /sys/class/infiniband)");
        return;
    }
    f.detail("GID table:");
    f.verbatim(&format!(
        "  {:>5}  {:<40}  {:<11}  {}",
        "index", "GID", "type", "netdev"
    ));
    for g in &report.gids {
        f.verbatim(&gid_row(g));
    }
}

fn gid_row(g: &select::GidEntry) -> String {
    format!(
        "  {:>5}  {:<40}  {:<11}  {}",
        g.index,
        g.address().to_string(),
        g.kind.to_string(),
        g.netdev.as_deref().unwrap_or("-")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rdma_mtu_follows_the_ethernet_mtu() {
        assert_eq!(rdma_mtu_for(1500), 1024);
        assert_eq!(rdma_mtu_for(9000), 4096);
        assert_eq!(rdma_mtu_for(4200), 4096);
        assert_eq!(rdma_mtu_for(2100), 1024);
        assert_eq!(rdma_mtu_for(576), 256);
    }

    #[test]
    fn a_gid_row_shows_address_type_and_netdev() {
        let g = select::GidEntry {
            index: 1,
            gid: select::parse_gid("0000:0000:0000:0000:0000:ffff:0a63:0001").unwrap(),
            kind: select::GidKind::RoceV2,
            netdev: Some("veth0".into()),
        };
        let row = gid_row(&g);
        assert!(row.contains("    1  ::ffff:10.99.0.1"), "{row}");
        assert!(row.contains("RoCE v2      veth0"), "{row}");
    }
}
