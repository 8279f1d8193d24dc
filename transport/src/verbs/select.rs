//! Device, port and GID selection: which RDMA device a rank uses and with which GID.
//!
//! The GID table comes from `ibv_query_gid_table` (rdma-core 32 and later: one ioctl for
//! the whole table, with each entry's type and interface), else from sysfs
//! (`/sys/class/infiniband/DEV/ports/P/gids/I` with its `gid_attrs/types/I` and
//! `gid_attrs/ndevs/I`), the way NCCL and UCX read it. Both give the same entries
//! ([`from_library`], [`read_gid_table`]). Sysfs takes three files per entry, every slot of
//! the table read: rxe's has 1,024 slots, which took a rank about a second to read under the
//! emulated Soft-RoCE VM. The choice itself is a pure function of the table
//! ([`choose_gid`]) so that it is tested without a device.
//!
//! Rules, in order:
//! 1. `RCOLL_IB_GID_INDEX` forces an index (it must exist and be non-zero).
//! 2. Otherwise a RoCE v2 GID that is the IPv4-mapped address the bootstrap uses;
//! 3. then a RoCE v2 IPv4-mapped GID in the same /24… subnet as that address;
//! 4. then any RoCE v2 IPv4-mapped GID, then RoCE v2 IPv6 (not link-local), then RoCE v1
//!    with the same preferences. Index 0 is never taken blindly: on RoCE it is the
//!    link-local `fe80::` GID, which cannot reach an IPv4 peer (the classic RETRY_EXC).
//! 5. On InfiniBand ports (link layer IB) the LID addresses the peer and GID 0 is used.

use std::fmt;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// The sysfs root of RDMA devices.
pub const SYSFS: &str = "/sys/class/infiniband";

/// The kind of a GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidKind {
    /// RoCE v2 (UDP/IP encapsulation, routable).
    RoceV2,
    /// RoCE v1 or InfiniBand.
    RoceV1OrIb,
    /// Unknown type string.
    Other,
}

impl fmt::Display for GidKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GidKind::RoceV2 => "RoCE v2",
            GidKind::RoceV1OrIb => "IB/RoCE v1",
            GidKind::Other => "unknown type",
        })
    }
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    /// Its index.
    pub index: u32,
    /// The GID, 16 bytes in network order.
    pub gid: [u8; 16],
    /// Its type.
    pub kind: GidKind,
    /// The network device it belongs to (RoCE).
    pub netdev: Option<String>,
}

impl GidEntry {
    /// The GID as an IPv6 address (IPv4-mapped for RoCE v2 over IPv4).
    pub fn address(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.gid)
    }

    /// The IPv4 address, when the GID is IPv4-mapped.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.address().to_ipv4_mapped()
    }

    fn link_local(&self) -> bool {
        self.gid[0] == 0xfe && self.gid[1] & 0xc0 == 0x80
    }
}

impl fmt::Display for GidEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GID index {} {} ({}",
            self.index,
            self.address(),
            self.kind
        )?;
        if let Some(n) = &self.netdev {
            write!(f, " on {n}")?;
        }
        f.write_str(")")
    }
}

/// Parses a sysfs GID (`fe80:0000:...`, eight groups of four hex digits).
pub fn parse_gid(text: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let groups: Vec<&str> = text.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    for (i, g) in groups.iter().enumerate() {
        let v = u16::from_str_radix(g, 16).ok()?;
        out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(out)
}

fn kind_of(text: &str) -> GidKind {
    match text.trim() {
        "RoCE v2" => GidKind::RoceV2,
        "IB/RoCE v1" => GidKind::RoceV1OrIb,
        _ => GidKind::Other,
    }
}

/// Port `port`'s entries of a table from `ibv_query_gid_table` as [`read_gid_table`] gives
/// them: non-zero GIDs, by index.
pub fn from_library(table: &[super::ffi::GidTableEntry], port: u8) -> Vec<GidEntry> {
    let mut out: Vec<GidEntry> = table
        .iter()
        .filter(|e| e.port == port && e.gid != [0; 16])
        .map(|e| GidEntry {
            index: e.index,
            gid: e.gid,
            kind: match e.kind {
                super::sys::IBV_GID_TYPE_ROCE_V2 => GidKind::RoceV2,
                super::sys::IBV_GID_TYPE_IB | super::sys::IBV_GID_TYPE_ROCE_V1 => {
                    GidKind::RoceV1OrIb
                }
                _ => GidKind::Other,
            },
            netdev: e.netdev.clone(),
        })
        .collect();
    out.sort_by_key(|e| e.index);
    out
}

/// Names each entry's interface as sysfs under `root` does (`gid_attrs/ndevs/I`), where it
/// gives one: the library reports the interface's index in the interface's own network
/// namespace, which is not this process's where a container shares the host's devices. A
/// few files, one per valid entry.
pub fn name_netdevs(entries: &mut [GidEntry], root: &Path, dev: &str, port: u8) {
    let ndevs = root
        .join(dev)
        .join("ports")
        .join(port.to_string())
        .join("gid_attrs/ndevs");
    for e in entries {
        if let Ok(name) = fs::read_to_string(ndevs.join(e.index.to_string())) {
            let name = name.trim();
            if !name.is_empty() {
                e.netdev = Some(name.to_owned());
            }
        }
    }
}

/// The non-empty entries of `dev` port `port`'s GID table under `root` (normally [`SYSFS`]).
pub fn read_gid_table(root: &Path, dev: &str, port: u8) -> Vec<GidEntry> {
    let base: PathBuf = root.join(dev).join("ports").join(port.to_string());
    let Ok(dir) = fs::read_dir(base.join("gids")) else {
        return Vec::new();
    };
    let mut out: Vec<GidEntry> = dir
        .flatten()
        .filter_map(|e| {
            let index: u32 = e.file_name().to_str()?.parse().ok()?;
            let gid = parse_gid(&fs::read_to_string(e.path()).ok()?)?;
            if gid == [0; 16] {
                return None;
            }
            // Unused entries fail to read their type (EINVAL).
            let kind = fs::read_to_string(base.join("gid_attrs/types").join(index.to_string()))
                .map(|t| kind_of(&t))
                .ok()?;
            let netdev = fs::read_to_string(base.join("gid_attrs/ndevs").join(index.to_string()))
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty());
            Some(GidEntry {
                index,
                gid,
                kind,
                netdev,
            })
        })
        .collect();
    out.sort_by_key(|e| e.index);
    out
}

/// A GID choice and why it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidChoice {
    /// The entry.
    pub entry: GidEntry,
    /// How good a match (higher is better; 100 = forced, 90 = the bootstrap address).
    pub score: u32,
    /// The reason, for logs and `rcoll-bench doctor`.
    pub why: String,
}

fn same_subnet(a: Ipv4Addr, b: Ipv4Addr, prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    };
    u32::from(a) & mask == u32::from(b) & mask
}

/// The highest GID index a queue pair can send from: its address names the source GID in
/// 8 bits (`ibv_global_route::sgid_index`), though a table may be longer (rxe's has 1,024).
pub const MAX_SGID_INDEX: u32 = 255;

/// Chooses a GID from `table` for traffic from `local` (the address the bootstrap uses,
/// with its prefix length), or the one `forced` names.
pub fn choose_gid(
    table: &[GidEntry],
    local: Option<(IpAddr, u8)>,
    forced: Option<u32>,
) -> Result<GidChoice, String> {
    if let Some(i) = forced {
        if i > MAX_SGID_INDEX {
            return Err(format!(
                "RCOLL_IB_GID_INDEX={i}: a queue pair's address names its source GID in 8 \
                 bits, so only indexes 0-{MAX_SGID_INDEX} can be used"
            ));
        }
        return match table.iter().find(|e| e.index == i) {
            Some(e) => Ok(GidChoice {
                entry: e.clone(),
                score: 100,
                why: format!("{e}, forced by RCOLL_IB_GID_INDEX"),
            }),
            None => Err(format!(
                "RCOLL_IB_GID_INDEX={i} is not a valid GID (the table has {})",
                describe(table)
            )),
        };
    }
    let v4 = match local {
        Some((IpAddr::V4(a), p)) => Some((a, p)),
        Some((IpAddr::V6(a), p)) => a.to_ipv4_mapped().map(|a| (a, p)),
        None => None,
    };
    let score = |e: &GidEntry| -> (u32, &'static str) {
        let v2 = u32::from(e.kind == GidKind::RoceV2) * 10;
        match (e.ipv4(), v4) {
            (Some(ip), Some((me, _))) if ip == me => (80 + v2, "is the bootstrap address"),
            (Some(ip), Some((me, p))) if same_subnet(ip, me, p) => {
                (60 + v2, "is in the bootstrap address's subnet")
            }
            (Some(_), _) => (40 + v2, "is IPv4-mapped"),
            _ if e.link_local() => (0, "is link-local"),
            _ => (20 + v2, "is IPv6"),
        }
    };
    let best = table
        .iter()
        .filter(|e| e.index <= MAX_SGID_INDEX)
        .map(|e| (score(e), e))
        .filter(|((s, _), _)| *s > 0)
        .max_by_key(|((s, _), e)| (*s, std::cmp::Reverse(e.index)));
    match best {
        Some(((s, why), e)) => Ok(GidChoice {
            entry: e.clone(),
            score: s,
            why: format!("{e}: {why}"),
        }),
        None => Err(format!(
            "no routable GID (the table has {}); set RCOLL_IB_GID_INDEX to force one",
            describe(table)
        )),
    }
}

fn describe(table: &[GidEntry]) -> String {
    if table.is_empty() {
        return "no entries".into();
    }
    table
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `ibv_mtu` enum value for an MTU in bytes, and back.
pub fn mtu_bytes(mtu: u32) -> u32 {
    match mtu {
        1..=5 => 128 << mtu,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u32, gid: &str, kind: GidKind) -> GidEntry {
        GidEntry {
            index,
            gid: parse_gid(gid).unwrap(),
            kind,
            netdev: Some("veth0".into()),
        }
    }

    fn rxe_table() -> Vec<GidEntry> {
        vec![
            e(
                0,
                "fe80:0000:0000:0000:0000:00ff:fe00:0001",
                GidKind::RoceV2,
            ),
            e(
                1,
                "0000:0000:0000:0000:0000:ffff:0a63:0001",
                GidKind::RoceV2,
            ),
            e(
                2,
                "0000:0000:0000:0000:0000:ffff:c0a8:0105",
                GidKind::RoceV2,
            ),
            e(
                3,
                "0000:0000:0000:0000:0000:ffff:0a63:0001",
                GidKind::RoceV1OrIb,
            ),
        ]
    }

    #[test]
    fn parses_sysfs_gids() {
        let g = parse_gid("0000:0000:0000:0000:0000:ffff:0a63:0002").unwrap();
        assert_eq!(
            Ipv6Addr::from(g).to_ipv4_mapped(),
            Some(Ipv4Addr::new(10, 99, 0, 2))
        );
        assert!(parse_gid("fe80::1").is_none());
        assert!(parse_gid("zzzz:0000:0000:0000:0000:ffff:0a63:0002").is_none());
    }

    #[test]
    fn picks_the_bootstrap_address_as_roce_v2_never_link_local() {
        let t = rxe_table();
        let c = choose_gid(&t, Some(("10.99.0.1".parse().unwrap(), 24)), None).unwrap();
        assert_eq!(c.entry.index, 1, "{c:?}");
        let c = choose_gid(&t, Some(("192.168.1.9".parse().unwrap(), 24)), None).unwrap();
        assert_eq!(c.entry.index, 2, "same subnet wins: {c:?}");
        // Without an address: an IPv4-mapped RoCE v2 GID, still not index 0.
        let c = choose_gid(&t, None, None).unwrap();
        assert_eq!(c.entry.index, 1);
        // Only link-local: refused with a reason naming the table.
        let err = choose_gid(&t[..1], None, None).unwrap_err();
        assert!(
            err.contains("GID index 0 fe80::") && err.contains("RCOLL_IB_GID_INDEX"),
            "{err}"
        );
    }

    #[test]
    fn forced_index_is_taken_or_refused_by_name() {
        let t = rxe_table();
        let c = choose_gid(&t, Some(("10.99.0.1".parse().unwrap(), 24)), Some(0)).unwrap();
        assert_eq!(c.entry.index, 0);
        assert!(c.why.contains("forced"), "{}", c.why);
        let err = choose_gid(&t, None, Some(9)).unwrap_err();
        assert!(err.contains("RCOLL_IB_GID_INDEX=9"), "{err}");
    }

    /// A queue pair's address names its source GID in 8 bits (`ibv_global_route`'s
    /// `sgid_index`), while rxe's table has 1,024 slots: an entry past 255 is never chosen
    /// (it would connect from whatever entry its low byte names), and forcing one is refused.
    #[test]
    fn a_gid_past_index_255_is_never_used() {
        let mut t = rxe_table();
        let mine = t.iter().position(|e| e.index == 1).unwrap();
        t[mine].index = 257;
        let c = choose_gid(&t, Some(("10.99.0.1".parse().unwrap(), 24)), None).unwrap();
        assert_ne!(c.entry.index, 257, "{c:?}");
        let err = choose_gid(&t, None, Some(257)).unwrap_err();
        assert!(
            err.contains("RCOLL_IB_GID_INDEX=257") && err.contains("255"),
            "{err}"
        );
    }

    #[test]
    fn reads_a_sysfs_tree() {
        let root = std::env::temp_dir().join(format!("rcoll-sysfs-{}", std::process::id()));
        let port = root.join("rxe9/ports/1");
        for d in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
            fs::create_dir_all(port.join(d)).unwrap();
        }
        let w = |p: &str, s: &str| fs::write(port.join(p), s).unwrap();
        w("gids/0", "fe80:0000:0000:0000:0000:00ff:fe00:0001\n");
        w("gid_attrs/types/0", "RoCE v2\n");
        w("gid_attrs/ndevs/0", "veth0\n");
        w("gids/1", "0000:0000:0000:0000:0000:ffff:0a63:0001\n");
        w("gid_attrs/types/1", "RoCE v2\n");
        w("gid_attrs/ndevs/1", "veth0\n");
        w("gids/2", "0000:0000:0000:0000:0000:0000:0000:0000\n");
        let t = read_gid_table(&root, "rxe9", 1);
        // The library's table of the same device: another port's entry and an empty one
        // left out, types mapped, and the interface named as sysfs names it where it does
        // (the index the library gives may be another namespace's).
        let e = |port: u8, index: u32, gid: [u8; 16], kind: u32, netdev: &str| {
            super::super::ffi::GidTableEntry {
                port,
                index,
                gid,
                kind,
                netdev: Some(netdev.into()),
            }
        };
        let mut lib = from_library(
            &[
                e(1, 3, t[1].gid, 1, "eth3"),
                e(2, 1, t[1].gid, 2, "eth2"),
                e(1, 1, t[1].gid, 2, "eth7"),
                e(1, 5, [0; 16], 2, "eth7"),
                e(1, 0, t[0].gid, 2, "eth7"),
            ],
            1,
        );
        name_netdevs(&mut lib, &root, "rxe9", 1);
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1].ipv4(), Some(Ipv4Addr::new(10, 99, 0, 1)));
        assert_eq!(t[1].kind, GidKind::RoceV2);
        assert_eq!(t[1].netdev.as_deref(), Some("veth0"));
        assert_eq!(lib[..2], t[..], "{lib:?}");
        assert_eq!(lib.len(), 3, "{lib:?}");
        assert_eq!(
            (lib[2].index, lib[2].kind, lib[2].netdev.as_deref()),
            (3, GidKind::RoceV1OrIb, Some("eth3")),
            "no sysfs name: the library's stays"
        );
    }

    #[test]
    fn mtu_enum_to_bytes() {
        assert_eq!(mtu_bytes(3), 1024);
        assert_eq!(mtu_bytes(5), 4096);
        assert_eq!(mtu_bytes(0), 0);
    }
}
