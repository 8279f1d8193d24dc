//! Choosing the network interface a rank listens on (`RCOLL_SOCKET_IFNAME`).

use std::net::IpAddr;

/// The address of interface `name`, preferring the address family of `like` (the root's),
/// so that IPv4 and IPv6 jobs both work. An unknown name is an error that lists the
/// interfaces that exist, with their addresses.
pub fn address_of(name: &str, like: IpAddr) -> Result<IpAddr, String> {
    let interfaces =
        if_addrs::get_if_addrs().map_err(|e| format!("cannot list network interfaces: {e}"))?;
    let mut candidates: Vec<IpAddr> = interfaces
        .iter()
        .filter(|i| i.name == name)
        .map(|i| i.ip())
        .collect();
    if candidates.is_empty() {
        let mut known: Vec<String> = interfaces
            .iter()
            .map(|i| format!("{} ({})", i.name, i.ip()))
            .collect();
        known.sort();
        known.dedup();
        return Err(format!(
            "RCOLL_SOCKET_IFNAME={name:?}: no such interface; interfaces: {}",
            known.join(", ")
        ));
    }
    // Same family as the root first; link-local IPv6 addresses need a scope, so last.
    candidates.sort_by_key(|ip| {
        let link_local = matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80);
        (ip.is_ipv4() != like.is_ipv4(), link_local)
    });
    Ok(candidates[0])
}

/// The first address of an interface that is not loopback (IPv4 first, no link-local
/// IPv6), else 127.0.0.1: where other hosts can reach this one, for a rendezvous that has
/// no address given.
pub fn default_address() -> IpAddr {
    let mut found: Vec<IpAddr> = if_addrs::get_if_addrs()
        .unwrap_or_default()
        .into_iter()
        .filter(|i| !i.is_loopback())
        .map(|i| i.ip())
        .filter(|ip| !matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80))
        .collect();
    found.sort_by_key(|ip| !ip.is_ipv4());
    found
        .first()
        .copied()
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_in_both_families() {
        let v4 = address_of("lo", "127.0.0.1".parse().unwrap()).unwrap();
        assert!(v4.is_loopback() && v4.is_ipv4(), "{v4}");
        let v6 = address_of("lo", "::1".parse().unwrap()).unwrap();
        assert!(v6.is_loopback() && v6.is_ipv6(), "{v6}");
    }

    #[test]
    fn an_unknown_interface_lists_the_real_ones() {
        let err = address_of("nosuch0", "127.0.0.1".parse().unwrap()).unwrap_err();
        assert!(
            err.contains("nosuch0") && err.contains("lo (127.0.0.1)"),
            "{err}"
        );
    }
}
