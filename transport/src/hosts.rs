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

/// Where every rank of a group runs, the racks (or switches) above the hosts, and the order
/// ranks stand in on rings.
///
/// The ring order lists the ranks rack by rack, host by host, by local rank within a host,
/// so that a ring crosses each level of the network the fewest times: with H hosts it
/// enters and leaves each host once per round (H host crossings), whatever order the
/// launcher numbered the ranks in (cyclic placement, rank r on host r % H, would cross
/// hosts at every one of the n hops in rank order). [`HostMap::with_rank_order`] keeps
/// rank order instead (`RCOLL_RING_ORDER=rank`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMap {
    /// Each host's key and members (ascending), hosts by lowest member.
    hosts: Vec<(String, Vec<Rank>)>,
    /// Rank -> (host, local rank).
    place: Vec<(usize, usize)>,
    /// Host -> rack (an index into `racks`); all 0 when no racks are known.
    rack_of: Vec<usize>,
    /// Rack names, in order of first appearance among the hosts.
    racks: Vec<String>,
    /// The ring order, and each rank's position in it.
    ring: Vec<Rank>,
    ring_pos: Vec<usize>,
    /// Each host's CPUs, as its ranks agreed on them; empty when unknown.
    cpus: Vec<usize>,
}

impl HostMap {
    /// The map of ranks whose host keys are `keys` (rank `r` has `keys[r]`).
    pub fn from_keys<S: AsRef<str>>(keys: &[S]) -> HostMap {
        let mut hosts: Vec<(String, Vec<Rank>)> = Vec::new();
        // Key -> host index: tens of thousands of ranks (simulations) in linear time.
        let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        let mut place = Vec::with_capacity(keys.len());
        for (r, key) in keys.iter().enumerate() {
            let key = key.as_ref();
            let h = *index.entry(key).or_insert_with(|| {
                hosts.push((key.to_owned(), Vec::new()));
                hosts.len() - 1
            });
            place.push((h, hosts[h].1.len()));
            hosts[h].1.push(Rank::from(r));
        }
        let nhosts = hosts.len();
        let mut m = HostMap {
            hosts,
            place,
            rack_of: vec![0; nhosts],
            racks: vec![String::new()],
            ring: Vec::new(),
            ring_pos: Vec::new(),
            cpus: Vec::new(),
        };
        m.order_ring();
        m
    }

    /// Ranks placed cyclically on `nhosts` hosts (rank r on host r % nhosts), as many
    /// launchers place them.
    pub fn cyclic(nranks: usize, nhosts: usize) -> HostMap {
        let keys: Vec<String> = (0..nranks)
            .map(|r| format!("host{}", r % nhosts.max(1)))
            .collect();
        HostMap::from_keys(&keys)
    }

    /// The same hosts under racks: `rack(key)` names a host's rack (or switch); hosts it
    /// does not know form a rack of their own. The ring is ordered again, rack by rack.
    pub fn with_racks(mut self, rack: impl Fn(&str) -> Option<String>) -> HostMap {
        let mut names: Vec<String> = Vec::new();
        let mut of = Vec::with_capacity(self.hosts.len());
        for (key, _) in &self.hosts {
            let name = rack(key).unwrap_or_else(|| format!("({})", short(key)));
            let i = match names.iter().position(|n| *n == name) {
                Some(i) => i,
                None => {
                    names.push(name);
                    names.len() - 1
                }
            };
            of.push(i);
        }
        self.rack_of = of;
        self.racks = names;
        self.order_ring();
        self
    }

    /// The same hosts with rings in rank order (`RCOLL_RING_ORDER=rank`).
    pub fn with_rank_order(mut self) -> HostMap {
        self.ring = (0..self.nranks()).map(Rank::from).collect();
        self.ring_pos = (0..self.nranks()).collect();
        self
    }

    fn order_ring(&mut self) {
        let mut ring: Vec<Rank> = (0..self.nranks()).map(Rank::from).collect();
        ring.sort_by_key(|&r| {
            let (h, l) = self.place[r.index()];
            (self.rack_of[h], h, l)
        });
        let mut pos = vec![0; ring.len()];
        for (i, r) in ring.iter().enumerate() {
            pos[r.index()] = i;
        }
        self.ring = ring;
        self.ring_pos = pos;
    }

    /// The order ranks stand in on rings.
    pub fn ring_order(&self) -> &[Rank] {
        &self.ring
    }

    /// Whether rings run in rank order.
    pub fn ring_is_rank_order(&self) -> bool {
        self.ring.iter().enumerate().all(|(i, r)| r.index() == i)
    }

    /// The rank `delta` places after `r` on the ring (before, for negative `delta`).
    pub fn ring_peer(&self, r: Rank, delta: isize) -> Rank {
        let n = self.ring.len() as isize;
        self.ring[(self.ring_pos[r.index()] as isize + delta).rem_euclid(n) as usize]
    }

    /// How many hops of one trip around the ring cross hosts, and racks.
    pub fn ring_crossings(&self) -> (usize, usize) {
        let n = self.ring.len();
        if n < 2 {
            return (0, 0);
        }
        let mut hosts = 0;
        let mut racks = 0;
        for i in 0..n {
            let (a, b) = (self.ring[i], self.ring[(i + 1) % n]);
            let (ha, hb) = (self.host_of(a), self.host_of(b));
            hosts += usize::from(ha != hb);
            racks += usize::from(self.rack_of[ha] != self.rack_of[hb]);
        }
        (hosts, racks)
    }

    /// Number of racks (1 when none are known).
    pub fn nracks(&self) -> usize {
        self.racks.len()
    }

    /// The rack of host `h` (an index; its name: [`HostMap::rack_name`]).
    pub fn rack_of_host(&self, h: usize) -> usize {
        self.rack_of[h]
    }

    /// Rack `i`'s name (empty when no racks are known).
    pub fn rack_name(&self, i: usize) -> &str {
        &self.racks[i]
    }

    /// The map with host `h`'s CPUs `cpus[h]` (the CPUs its ranks share: see
    /// [`crate::topology::host_cpus`]), which every rank must know alike (they price
    /// schedules with them). Ignored unless there is one count per host.
    pub fn with_cpus(mut self, cpus: Vec<usize>) -> HostMap {
        if cpus.len() == self.nhosts() {
            self.cpus = cpus;
        }
        self
    }

    /// The map with each host's CPUs from what its ranks reported (`reported[r]` from rank
    /// `r`, 0 when it did not know): the fewest any of them reported, so that every rank
    /// given the same reports (the bootstrap's table) prices alike. Ignored unless there
    /// is one report per rank.
    pub fn with_reported_cpus(self, reported: &[u32]) -> HostMap {
        if reported.len() != self.nranks() {
            return self;
        }
        let cpus = self
            .hosts
            .iter()
            .map(|(_, members)| {
                members
                    .iter()
                    .filter_map(|r| reported.get(r.index()).copied().filter(|&c| c > 0))
                    .min()
                    .map_or(0, |c| c as usize)
            })
            .collect();
        self.with_cpus(cpus)
    }

    /// Host `h`'s CPUs, when known ([`HostMap::with_cpus`]).
    pub fn cpus(&self, h: usize) -> Option<usize> {
        self.cpus.get(h).copied().filter(|&c| c > 0)
    }

    /// Whether some host runs more ranks than it has CPUs (they then take turns on them).
    pub fn crowded(&self) -> bool {
        (0..self.nhosts()).any(|h| self.cpus(h).is_some_and(|c| self.members(h).len() > c))
    }

    /// Whether `rank`'s host runs more ranks of the group than the `cpus` this process's
    /// ranks share ([`crate::topology::host_cpus`]): they take turns on them, so a waiting
    /// rank yields its CPU rather than spin.
    pub fn crowds_cpus_of(&self, rank: Rank, cpus: usize) -> bool {
        self.members(self.host_of(rank)).len() > cpus
    }

    /// The map of a subgroup: `members[i]`, a rank here, is rank `i` there (survivors of a
    /// shrink, in order). Hosts keep their keys and CPUs; a host none of whose ranks is a
    /// member is gone, and the ring is ordered again over those left (racks are the
    /// caller's to apply again, as for any map).
    pub fn subset(&self, members: &[Rank]) -> HostMap {
        let keys: Vec<&str> = members.iter().map(|&r| self.key(self.host_of(r))).collect();
        let mut sub = HostMap::from_keys(&keys);
        if !self.cpus.is_empty() {
            let cpus = sub
                .hosts
                .iter()
                .map(|(_, m)| self.cpus[self.host_of(members[m[0].index()])])
                .collect();
            sub = sub.with_cpus(cpus);
        }
        sub
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
            .enumerate()
            .map(|(h, (key, members))| match self.cpus(h) {
                Some(c) => format!("{} ({}; {c} CPUs)", short(key), ranges(members)),
                None => format!("{} ({})", short(key), ranges(members)),
            })
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
    fn a_subset_keeps_hosts_and_cpus_and_rings_over_those_left() {
        // host0: 0 2, host1: 1 3; rank 2 leaves: host0 keeps 0, host1 keeps 1 and 3.
        let m = HostMap::cyclic(4, 2).with_cpus(vec![8, 4]);
        let sub = m.subset(&[Rank(0), Rank(1), Rank(3)]);
        assert_eq!(sub.nranks(), 3);
        assert_eq!(sub.nhosts(), 2);
        assert_eq!(sub.members(0), &[Rank(0)]);
        assert_eq!(sub.members(1), &[Rank(1), Rank(2)]);
        assert_eq!((sub.cpus(0), sub.cpus(1)), (Some(8), Some(4)));
        assert_eq!(sub.ring_order(), &[Rank(0), Rank(1), Rank(2)]);
        // A host that lost all its ranks is gone.
        let sub = m.subset(&[Rank(1), Rank(3)]);
        assert_eq!((sub.nhosts(), sub.cpus(0)), (1, Some(4)));
    }

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

    #[test]
    fn rings_follow_hosts_then_racks_and_cross_each_level_the_fewest_times() {
        let m = HostMap::cyclic(4, 2);
        assert_eq!(m.ring_order(), &[Rank(0), Rank(2), Rank(1), Rank(3)]);
        assert_eq!(m.ring_crossings(), (2, 0));
        assert_eq!(m.ring_peer(Rank(2), 1), Rank(1));
        assert_eq!(m.ring_peer(Rank(0), -1), Rank(3));
        let plain = m.clone().with_rank_order();
        assert!(plain.ring_is_rank_order() && !m.ring_is_rank_order());
        assert_eq!(plain.ring_crossings(), (4, 0));
        // 8 ranks on 4 hosts cyclically, hosts 0 and 2 in rack A, 1 and 3 in rack B.
        let racked = HostMap::cyclic(8, 4).with_racks(|k| {
            Some(
                if k == "host0" || k == "host2" {
                    "A"
                } else {
                    "B"
                }
                .into(),
            )
        });
        assert_eq!(racked.nracks(), 2);
        assert_eq!(racked.ring_crossings(), (4, 2));
        let order: Vec<u32> = racked.ring_order().iter().map(|r| r.0).collect();
        assert_eq!(order, vec![0, 4, 2, 6, 1, 5, 3, 7]);
        assert_eq!(
            HostMap::cyclic(8, 4).with_rank_order().ring_crossings(),
            (8, 0)
        );
    }

    /// Each host gets the fewest CPUs its ranks reported, unknown (0) reports left out;
    /// a host none of whose ranks knew stays unknown, and reports of the wrong length
    /// change nothing.
    #[test]
    fn a_host_takes_the_fewest_cpus_its_ranks_reported() {
        let m = HostMap::from_keys(&["a", "b", "a", "b", "c"]);
        let counted = m.clone().with_reported_cpus(&[8, 2, 6, 0, 0]);
        assert_eq!(
            (counted.cpus(0), counted.cpus(1), counted.cpus(2)),
            (Some(6), Some(2), None)
        );
        // Host b runs 2 ranks on 2 CPUs: not crowded; with 1 CPU it is.
        assert!(!counted.crowded());
        assert!(m.clone().with_reported_cpus(&[8, 1, 6, 0, 0]).crowded());
        assert_eq!(
            counted.describe(),
            "3 hosts of 2+2+1 ranks: a (0,2; 6 CPUs), b (1,3; 2 CPUs), c (4)"
        );
        assert_eq!(m.clone().with_reported_cpus(&[8, 2]), m);
    }
}
