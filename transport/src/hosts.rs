//! Hosts: which ranks share a machine, learnt at bootstrap.
//!
//! Each rank reports a host key in its bootstrap hello, and the root's table gives every
//! rank all of them ([`crate::tcp::bootstrap`]): `RCOLL_HOST` if set (containers whose hostnames collide,
//! emulated hosts in network namespaces, tests), else the hostname and the kernel's boot
//! id (so two machines cloned with one hostname differ, and one machine is one host
//! whatever the interface each rank used). Ranks with equal keys are one host: they can
//! share memory. Hosts are numbered by their lowest rank; local ranks by rank order.

use crate::types::Rank;

/// Longest host key accepted (bytes).
pub const MAX_KEY: usize = 255;

/// Where every rank of a group runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMap {
    /// Each host's key and members (ascending), hosts by lowest member.
    hosts: Vec<(String, Vec<Rank>)>,
    /// Rank -> (host, local rank).
    place: Vec<(usize, usize)>,
}

impl HostMap {
    /// The map of ranks whose host keys are `keys` (rank `r` has `keys[r]`).
    pub fn from_keys<S: AsRef<str>>(keys: &[S]) -> HostMap {
        let mut hosts: Vec<(String, Vec<Rank>)> = Vec::new();
        let mut place = Vec::with_capacity(keys.len());
        for (r, key) in keys.iter().enumerate() {
            let key = key.as_ref();
            let h = match hosts.iter().position(|(k, _)| k == key) {
                Some(h) => h,
                None => {
                    hosts.push((key.to_owned(), Vec::new()));
                    hosts.len() - 1
                }
            };
            place.push((h, hosts[h].1.len()));
            hosts[h].1.push(Rank::from(r));
        }
        HostMap { hosts, place }
    }

    /// `n` ranks on one host.
    pub fn single(n: usize) -> HostMap {
        HostMap::from_keys(&vec!["localhost"; n])
    }

    /// Hosts of `sizes[h]` ranks each, numbered in blocks (host 0 has the lowest ranks).
    pub fn blocks(sizes: &[usize]) -> HostMap {
        let keys: Vec<String> = sizes
            .iter()
            .enumerate()
            .flat_map(|(h, &n)| std::iter::repeat_n(format!("host{h}"), n))
            .collect();
        HostMap::from_keys(&keys)
    }

    /// Number of ranks.
    pub fn nranks(&self) -> usize {
        self.place.len()
    }

    /// Number of hosts.
    pub fn nhosts(&self) -> usize {
        self.hosts.len()
    }

    /// The host rank `r` runs on.
    pub fn host_of(&self, r: Rank) -> usize {
        self.place[r.index()].0
    }

    /// Rank `r`'s index among the ranks of its host.
    pub fn local_rank(&self, r: Rank) -> usize {
        self.place[r.index()].1
    }

    /// Number of ranks on rank `r`'s host.
    pub fn local_size(&self, r: Rank) -> usize {
        self.members(self.host_of(r)).len()
    }

    /// The ranks of host `h`, ascending.
    pub fn members(&self, h: usize) -> &[Rank] {
        &self.hosts[h].1
    }

    /// Host `h`'s key.
    pub fn key(&self, h: usize) -> &str {
        &self.hosts[h].0
    }

    /// Whether ranks `a` and `b` share a host.
    pub fn same_host(&self, a: Rank, b: Rank) -> bool {
        self.host_of(a) == self.host_of(b)
    }

    /// The other ranks on `r`'s host.
    pub fn neighbours(&self, r: Rank) -> impl Iterator<Item = Rank> + '_ {
        self.members(self.host_of(r))
            .iter()
            .copied()
            .filter(move |&x| x != r)
    }

    /// One line: `2 hosts x 2 ranks: a (0-1), b (2-3)`; uneven hosts list their sizes.
    pub fn describe(&self) -> String {
        let sizes: Vec<usize> = self.hosts.iter().map(|(_, m)| m.len()).collect();
        let shape = if sizes.windows(2).all(|w| w[0] == w[1]) {
            format!(
                "{} host{} x {} rank{}",
                sizes.len(),
                if sizes.len() == 1 { "" } else { "s" },
                sizes.first().copied().unwrap_or(0),
                if sizes.first() == Some(&1) { "" } else { "s" }
            )
        } else {
            let list: Vec<String> = sizes.iter().map(usize::to_string).collect();
            format!("{} hosts of {} ranks", sizes.len(), list.join("+"))
        };
        let hosts: Vec<String> = self
            .hosts
            .iter()
            .map(|(key, members)| format!("{} ({})", short(key), ranges(members)))
            .collect();
        format!("{shape}: {}", hosts.join(", "))
    }
}

/// A host key for display: the hostname part.
fn short(key: &str) -> &str {
    key.split('/').next().unwrap_or(key)
}

/// `0-3,6,8-9`.
fn ranges(members: &[Rank]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < members.len() {
        let mut j = i;
        while j + 1 < members.len() && members[j + 1].0 == members[j].0 + 1 {
            j += 1;
        }
        out.push(if j == i {
            members[i].0.to_string()
        } else {
            format!("{}-{}", members[i].0, members[j].0)
        });
        i = j + 1;
    }
    out.join(",")
}

/// This process's host key: `RCOLL_HOST`, or hostname and boot id.
pub fn local_key() -> Result<String, String> {
    if let Ok(k) = std::env::var("RCOLL_HOST") {
        let k = k.trim();
        if k.is_empty() || k.len() > MAX_KEY {
            return Err(format!(
                "RCOLL_HOST={k:?}: a host key is 1 to {MAX_KEY} bytes"
            ));
        }
        return Ok(k.to_owned());
    }
    let read = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_owned());
    let hostname = read("/proc/sys/kernel/hostname")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    // Without a boot id (not Linux), the hostname alone.
    let key = match read("/proc/sys/kernel/random/boot_id") {
        Ok(id) if !id.is_empty() => format!("{hostname}/{id}"),
        _ => hostname,
    };
    Ok(key.chars().take(MAX_KEY).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_placed_cyclically_group_by_host() {
        let m = HostMap::from_keys(&["a", "b", "a", "b", "a"]);
        assert_eq!(m.nhosts(), 2);
        assert_eq!(m.members(0), &[Rank(0), Rank(2), Rank(4)]);
        assert_eq!(m.members(1), &[Rank(1), Rank(3)]);
        assert_eq!(
            (
                m.host_of(Rank(3)),
                m.local_rank(Rank(3)),
                m.local_size(Rank(3))
            ),
            (1, 1, 2)
        );
        assert!(m.same_host(Rank(0), Rank(4)) && !m.same_host(Rank(0), Rank(1)));
        assert_eq!(
            m.neighbours(Rank(2)).collect::<Vec<_>>(),
            [Rank(0), Rank(4)]
        );
        assert_eq!(m.describe(), "2 hosts of 3+2 ranks: a (0,2,4), b (1,3)");
        assert_eq!(
            HostMap::blocks(&[2, 2]).describe(),
            "2 hosts x 2 ranks: host0 (0-1), host1 (2-3)"
        );
        assert_eq!(
            HostMap::single(1).describe(),
            "1 host x 1 rank: localhost (0)"
        );
    }
}
