//! Which device, port and GID a rank uses: every port with its GID table ([`probe`]), and
//! the choice for the rank's bootstrap address ([`choose`]). The GID rules themselves are
//! pure functions in [`super::select`].

use std::net::IpAddr;
use std::path::Path as FsPath;

use super::ffi::{self, Context};
use super::select::{self, GidChoice, GidKind};
use super::{sys, Options};
use crate::tcp::TcpTransport;

/// The device, port and GID a rank would use, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// The GID and the reason it was chosen.
    pub gid: GidChoice,
    /// Active MTU (`ibv_mtu` enum).
    pub active_mtu: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// Whether the link layer is Ethernet (RoCE).
    pub roce: bool,
}

/// What one port looks like, for [`probe`] and `rcoll-bench doctor`.
#[derive(Clone, Debug)]
pub struct PortReport {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// Port state text (`ACTIVE`, `DOWN`, ...).
    pub state: &'static str,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// Largest MTU in bytes.
    pub max_mtu: u32,
    /// `Ethernet` or `InfiniBand`.
    pub link_layer: &'static str,
    /// The GID table.
    pub gids: Vec<select::GidEntry>,
    /// The GID rcoll would pick here, or why none.
    pub choice: Result<GidChoice, String>,
    /// Largest message.
    pub max_msg_sz: u32,
}

fn port_state(s: u32) -> &'static str {
    match s {
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "NOP",
    }
}

/// Every port of every device (or of `hca`), with its GID table and the GID rcoll would
/// choose for traffic from `local`. An error when the host has no verbs support at all.
pub fn probe(
    local: Option<(IpAddr, u8)>,
    hca: Option<&str>,
    forced_gid: Option<u32>,
) -> Result<Vec<PortReport>, String> {
    library().map_err(|e| e.to_string())?;
    let names = ffi::device_names().map_err(|e| {
        if e.errno == libc::ENOSYS {
            "this kernel has no RDMA support (ibv_get_device_list: ENOSYS); load rdma_rxe \
             or use soft-roce/run-in-vm.sh"
                .to_string()
        } else {
            e.to_string()
        }
    })?;
    let (want_dev, want_port) = match hca {
        Some(h) => match h.split_once(':') {
            Some((d, p)) => (Some(d.to_owned()), p.parse::<u8>().ok()),
            None => (Some(h.to_owned()), None),
        },
        None => (None, None),
    };
    if let Some(d) = &want_dev {
        if !names.contains(d) {
            return Err(format!(
                "RCOLL_IB_HCA={d}: no such device (devices: {})",
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                }
            ));
        }
    }
    let mut out = Vec::new();
    for name in names
        .iter()
        .filter(|n| want_dev.as_ref().is_none_or(|d| d == *n))
    {
        let ctx = Context::open(name).map_err(|e| e.to_string())?;
        let dev = ctx.query_device().map_err(|e| e.to_string())?;
        let mut table = None;
        for port in 1..=dev.phys_port_cnt {
            if want_port.is_some_and(|p| p != port) {
                continue;
            }
            let attr = ctx.query_port(port).map_err(|e| e.to_string())?;
            let roce = attr.link_layer != sys::IBV_LINK_LAYER_INFINIBAND;
            let gids = gid_table(
                &ctx,
                name,
                port,
                dev.phys_port_cnt,
                attr.gid_table_len,
                &mut table,
            )
            .unwrap_or_else(|| select::read_gid_table(FsPath::new(select::SYSFS), name, port));
            let choice = if attr.state != sys::IBV_PORT_ACTIVE {
                Err(format!("port is {}", port_state(attr.state)))
            } else if roce {
                select::choose_gid(&gids, local, forced_gid)
            } else {
                // InfiniBand: the LID routes; GID 0 is the port GUID.
                let g = ctx.query_gid(port, 0).map_err(|e| e.to_string())?;
                Ok(GidChoice {
                    entry: select::GidEntry {
                        index: forced_gid.unwrap_or(0),
                        gid: g,
                        kind: GidKind::RoceV1OrIb,
                        netdev: None,
                    },
                    score: 50,
                    why: format!("InfiniBand port, LID {}", attr.lid),
                })
            };
            out.push(PortReport {
                device: name.clone(),
                port,
                state: port_state(attr.state),
                active_mtu: select::mtu_bytes(attr.active_mtu),
                max_mtu: select::mtu_bytes(attr.max_mtu),
                link_layer: if roce { "Ethernet" } else { "InfiniBand" },
                gids,
                choice,
                max_msg_sz: attr.max_msg_sz,
            });
        }
    }
    Ok(out)
}

/// Port `port`'s GID table from the library's table of the whole device (read at the first
/// port asked, with room for `ports` tables of `per_port` entries, and kept in `table`), its
/// interfaces named as sysfs names them ([`select::name_netdevs`]); `None` when the library
/// cannot give it (rdma-core before 32, or the call failed), for sysfs to be read instead.
fn gid_table(
    ctx: &Context,
    dev: &str,
    port: u8,
    ports: u8,
    per_port: i32,
    table: &mut Option<Option<Vec<ffi::GidTableEntry>>>,
) -> Option<Vec<select::GidEntry>> {
    let table = table.get_or_insert_with(|| {
        let room = usize::from(ports) * usize::try_from(per_port).unwrap_or(0);
        match ctx.gid_table(room)? {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::debug!(error = %e, "reading the GID table from sysfs instead");
                None
            }
        }
    });
    table.as_deref().map(|t| {
        let mut gids = select::from_library(t, port);
        select::name_netdevs(&mut gids, FsPath::new(select::SYSFS), dev, port);
        gids
    })
}

/// Port `port` of device `dev`'s GID table as `ibv_query_gid_table` gives it, interfaces
/// named by the index it reports (`None` when the library has no such call), and as sysfs
/// does: the two sources [`probe`] uses, the first where it can. For tests.
pub fn gid_tables(
    dev: &str,
    port: u8,
) -> Result<(Option<Vec<select::GidEntry>>, Vec<select::GidEntry>), String> {
    let ctx = Context::open(dev).map_err(|e| e.to_string())?;
    let ports = ctx.query_device().map_err(|e| e.to_string())?.phys_port_cnt;
    let attr = ctx.query_port(port).map_err(|e| e.to_string())?;
    let library = match ctx
        .gid_table(usize::from(ports) * usize::try_from(attr.gid_table_len).unwrap_or(0))
    {
        None => None,
        Some(t) => Some(select::from_library(&t.map_err(|e| e.to_string())?, port)),
    };
    Ok((
        library,
        select::read_gid_table(FsPath::new(select::SYSFS), dev, port),
    ))
}

/// The libibverbs this process uses (its file name), loading it on first use; the error
/// names what to install.
pub fn library() -> Result<&'static str, sys::LoadError> {
    sys::lib().map(|lib| lib.library.as_str())
}

/// The prefix length of local address `ip` (from the interface list), 32/128 if unknown.
pub fn prefix_of(ip: IpAddr) -> u8 {
    if let Ok(ifs) = if_addrs::get_if_addrs() {
        for i in ifs {
            if i.ip() == ip {
                if let Some(p) = match i.addr {
                    if_addrs::IfAddr::V4(a) => Some(u32::from(a.netmask).count_ones()),
                    if_addrs::IfAddr::V6(a) => Some(u128::from(a.netmask).count_ones()),
                } {
                    return p as u8;
                }
            }
        }
    }
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

/// Chooses device, port and GID for traffic from `local` (see [`select`]).
pub fn choose(local: Option<IpAddr>, opts: &Options) -> Result<Selection, String> {
    let local = local.map(|ip| (ip, prefix_of(ip)));
    let ports = probe(local, opts.hca.as_deref(), opts.gid_index)?;
    if ports.is_empty() {
        return Err("no RDMA devices".into());
    }
    let best = ports
        .iter()
        .filter_map(|p| p.choice.as_ref().ok().map(|c| (c.score, p, c)))
        .max_by_key(|(s, p, _)| (*s, std::cmp::Reverse((p.device.clone(), p.port))));
    match best {
        Some((_, p, c)) => {
            let ctx = Context::open(&p.device).map_err(|e| e.to_string())?;
            let attr = ctx.query_port(p.port).map_err(|e| e.to_string())?;
            Ok(Selection {
                device: p.device.clone(),
                port: p.port,
                gid: c.clone(),
                active_mtu: attr.active_mtu,
                lid: attr.lid,
                roce: attr.link_layer != sys::IBV_LINK_LAYER_INFINIBAND,
            })
        }
        None => Err(ports
            .iter()
            .map(|p| match &p.choice {
                Err(e) => format!("{} port {}: {e}", p.device, p.port),
                Ok(_) => String::new(),
            })
            .collect::<Vec<_>>()
            .join("; ")),
    }
}

/// Chooses device, port and GID for this rank of a connected TCP group: for traffic from
/// `bind`, or else from the address its connections use.
pub fn choose_for(
    tcp: &TcpTransport,
    bind: Option<IpAddr>,
    opts: &Options,
) -> Result<Selection, String> {
    choose(bind.or_else(|| tcp.local_ip()), opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The devices libibverbs lists are the kernel's (read apart from it, in sysfs), each
    /// port numbered from 1; with none, the error says why: no RDMA in the kernel
    /// (ENOSYS) or no libibverbs (the packages to install).
    #[test]
    fn probing_lists_the_kernels_devices_or_explains_why_there_are_none() {
        let mut kernel: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        kernel.sort();
        match probe(None, None, None) {
            Ok(ports) => {
                let mut listed: Vec<String> = ports.iter().map(|p| p.device.clone()).collect();
                listed.sort();
                listed.dedup();
                assert_eq!(listed, kernel, "the devices listed against the kernel's");
                assert!(ports.iter().all(|p| p.port >= 1));
            }
            Err(e) => {
                assert!(kernel.is_empty(), "the kernel has {kernel:?}, yet: {e}");
                assert!(
                    e.contains("ENOSYS") || e.contains("install rdma-core"),
                    "no reason given: {e}"
                );
            }
        }
    }
}
