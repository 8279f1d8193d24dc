//! The verifier matrix: every algorithm x every collective it serves x nranks 1..=16 x
//! awkward counts x roots 0 and n-1 x in place and out of place, run symbolically.

use rcoll::schedule::verify::verify;
use rcoll::schedule::{Collective, Layout};
use rcoll::{Algorithm, Rank};
use rcoll_transport::hosts::HostMap;

const COUNTS: [usize; 7] = [0, 1, 2, 7, 100, 1000, 10007];

fn sweep(algorithm: Algorithm) {
    let mut checked = 0;
    for collective in Collective::SCHEDULED {
        if !algorithm.serves(collective) {
            continue;
        }
        for n in 1..=16usize {
            // Every listed count, plus one that no n divides evenly.
            let counts = COUNTS.iter().copied().chain([3 * n + 1]);
            for count in counts {
                // Large counts with all-to-all-shaped collectives cost n^2 * count symbolic
                // elements; keep the matrix quick by taking 10007 only up to 8 ranks there.
                let quadratic = matches!(
                    (algorithm, collective),
                    (Algorithm::Mesh, _)
                        | (Algorithm::SingleRoot, _)
                        | (_, Collective::AllToAll)
                        | (_, Collective::AllGather | Collective::ReduceScatter)
                );
                if count == 10007 && quadratic && n > 8 {
                    continue;
                }
                let roots = if collective.is_rooted() {
                    vec![0, n - 1]
                } else {
                    vec![0]
                };
                for root in roots {
                    checked += check_both_ways(collective, n, count, root, &|layout| {
                        let schedules = algorithm.schedules(layout).expect("served");
                        (schedules, algorithm.to_string())
                    });
                }
            }
        }
    }
    assert!(checked > 0);
}

/// Verifies the schedules `make` gives for the layout out of place and in place; the
/// number of layouts checked.
fn check_both_ways(
    collective: Collective,
    nranks: usize,
    count: usize,
    root: usize,
    make: &dyn Fn(&Layout) -> (Vec<rcoll::schedule::Schedule>, String),
) -> usize {
    for in_place in [false, true] {
        let layout = Layout {
            collective,
            nranks,
            count,
            root: Rank::from(root),
            in_place,
        };
        let (schedules, what) = make(&layout);
        if let Err(e) = verify(&layout, &schedules) {
            let s = &schedules[e.rank.index()];
            let shown = if s.primitive_count() < 60 {
                s.to_string()
            } else {
                String::new()
            };
            panic!("{what} {layout:?}: {e}\n{shown}");
        }
    }
    2
}

#[test]
fn mesh() {
    sweep(Algorithm::Mesh);
}

#[test]
fn single_root() {
    sweep(Algorithm::SingleRoot);
}

#[test]
fn tree() {
    sweep(Algorithm::Tree);
}

#[test]
fn binomial_tree() {
    sweep(Algorithm::BinomialTree);
}

#[test]
fn naive_ring() {
    sweep(Algorithm::NaiveRing);
}

#[test]
fn ring() {
    sweep(Algorithm::Ring);
}

#[test]
fn double_binary_tree() {
    sweep(Algorithm::DoubleBinaryTree);
}

#[test]
fn halving_doubling() {
    sweep(Algorithm::HalvingDoubling);
}

#[test]
fn recursive_doubling() {
    sweep(Algorithm::RecursiveDoubling);
}

#[test]
fn hierarchical_on_one_host() {
    // No host map: one level, the flat ring.
    sweep(Algorithm::Hierarchical);
}

/// Host maps: 1 to 4 hosts of 1 to 4 ranks each, placed in blocks and cyclically, and
/// uneven ones.
fn host_maps() -> Vec<HostMap> {
    let mut maps = Vec::new();
    for hosts in 1..=4usize {
        for local in 1..=4usize {
            maps.push(HostMap::blocks(&vec![local; hosts]));
            let keys: Vec<String> = (0..hosts * local)
                .map(|r| format!("h{}", r % hosts))
                .collect();
            maps.push(HostMap::from_keys(&keys));
        }
    }
    for sizes in [
        vec![3, 1],
        vec![1, 3],
        vec![2, 3, 1],
        vec![4, 1, 2, 3],
        vec![1, 1, 4],
    ] {
        maps.push(HostMap::blocks(&sizes));
    }
    // Uneven and interleaved: 3 + 2 + 1 placed a, b, c, a, b, a.
    maps.push(HostMap::from_keys(&["a", "b", "c", "a", "b", "a"]));
    maps
}

/// The rings (ring, naive ring) in the network's order (host by host, rack by rack) on every host shape — in
/// blocks, cyclic, uneven, under racks: every collective it serves stays correct, and on
/// the cyclic shapes each step crosses hosts only where the order moves to another host.
#[test]
fn ring_in_network_order_on_every_host_shape() {
    let mut maps = host_maps();
    maps.push(HostMap::cyclic(8, 4).with_racks(|k| {
        Some(
            if k == "host0" || k == "host2" {
                "A"
            } else {
                "B"
            }
            .into(),
        )
    }));
    let mut checked = 0;
    for hosts in maps {
        let n = hosts.nranks();
        for algorithm in [Algorithm::Ring, Algorithm::NaiveRing] {
            for collective in Collective::SCHEDULED
                .into_iter()
                .filter(|c| algorithm.serves(*c))
            {
                let roots: Vec<usize> = if collective.is_rooted() {
                    (0..n).collect()
                } else {
                    vec![0]
                };
                for count in [0, 1, 7, 3 * n + 1] {
                    for &root in &roots {
                        checked += check_both_ways(collective, n, count, root, &|layout| {
                            let schedules = algorithm
                                .schedules_on(layout, Some(&hosts))
                                .expect("served");
                            (schedules, format!("{algorithm} on {}", hosts.describe()))
                        });
                    }
                }
            }
        }
        // Sends of an all_reduce that leave the host: as many per step as the ring
        // crosses hosts, not one per rank.
        let layout = Layout {
            collective: Collective::AllReduce,
            nranks: n,
            count: 4 * n,
            root: Rank(0),
            in_place: false,
        };
        let schedules = Algorithm::Ring.schedules_on(&layout, Some(&hosts)).unwrap();
        let crossing: usize = schedules
            .iter()
            .map(|s| {
                s.channels
                    .iter()
                    .flat_map(|c| c.steps.iter())
                    .flat_map(|st| st.iter())
                    .flat_map(|p| p.send_to().to_vec())
                    .filter(|&to| !hosts.same_host(s.rank, to))
                    .count()
            })
            .sum();
        let (host_hops, _) = hosts.ring_crossings();
        assert_eq!(crossing, host_hops * 2 * (n - 1), "{}", hosts.describe());
    }
    assert!(checked > 1000, "{checked}");
}

#[test]
fn hierarchical_on_every_host_shape() {
    let mut checked = 0;
    for hosts in host_maps() {
        let n = hosts.nranks();
        for collective in Collective::SCHEDULED
            .into_iter()
            .filter(|c| Algorithm::Hierarchical.serves(*c))
        {
            let roots: Vec<usize> = if collective.is_rooted() {
                (0..n).collect()
            } else {
                vec![0]
            };
            for count in [0, 1, 2, 7, 100, 3 * n + 1] {
                for &root in &roots {
                    checked += check_both_ways(collective, n, count, root, &|layout| {
                        let schedules = Algorithm::Hierarchical
                            .schedules_on(layout, Some(&hosts))
                            .expect("served");
                        (schedules, format!("hierarchical on {}", hosts.describe()))
                    });
                }
            }
        }
    }
    assert!(checked > 1000, "{checked}");
}

/// Every pair of level algorithms (`RCOLL_LEVEL_ALGO`) gives valid hierarchical schedules
/// on every host shape, uneven ones included; a level's algorithm that does not serve one
/// of its sub-collectives runs the ring there.
#[test]
fn hierarchical_with_every_pair_of_level_algorithms() {
    use rcoll::algorithm::hierarchical::{LevelAlgorithms, LEVEL_CANDIDATES};
    let mut checked = 0;
    for hosts in host_maps() {
        let n = hosts.nranks();
        for local in LEVEL_CANDIDATES {
            for global in LEVEL_CANDIDATES {
                let levels = LevelAlgorithms { local, global };
                for collective in Collective::SCHEDULED
                    .into_iter()
                    .filter(|c| Algorithm::Hierarchical.serves(*c))
                {
                    let roots: Vec<usize> = if collective.is_rooted() {
                        vec![0, n - 1]
                    } else {
                        vec![0]
                    };
                    for count in [1, 3 * n + 1] {
                        for &root in &roots {
                            checked += check_both_ways(collective, n, count, root, &|layout| {
                                let schedules = Algorithm::Hierarchical
                                    .schedules_levels(layout, Some(&hosts), levels)
                                    .expect("served");
                                (
                                    schedules,
                                    format!("hierarchical {levels} on {}", hosts.describe()),
                                )
                            });
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
}

/// Elements that cross into (`into`) or out of each host, by host: every send to a peer
/// on another host counts its slice once per such peer.
fn host_traffic(
    schedules: &[rcoll::schedule::Schedule],
    hosts: &HostMap,
    into: bool,
) -> Vec<usize> {
    let mut per_host = vec![0; hosts.nhosts()];
    for s in schedules {
        for p in s.channels.iter().flat_map(|c| c.steps.iter()).flatten() {
            let len = p.src().or(p.dst()).map_or(0, |x| x.len);
            for &to in p
                .send_to()
                .iter()
                .filter(|&&to| !hosts.same_host(s.rank, to))
            {
                per_host[hosts.host_of(if into { to } else { s.rank })] += len;
            }
        }
    }
    per_host
}

/// Hierarchical all_gather and reduce_scatter move each block across the network once per
/// host that needs it: into every host (all_gather) or out of it (reduce_scatter) go
/// exactly the blocks of the other hosts' ranks, `(p - L) * count` elements, where the
/// flat ring in host order moves `(p - 1) * count` through each host boundary.
#[test]
fn hierarchical_all_gather_and_reduce_scatter_send_each_block_across_once_per_host() {
    let count = 10;
    for hosts in [
        HostMap::blocks(&[2, 2]),
        HostMap::blocks(&[4, 4]),
        HostMap::blocks(&[3, 3, 3]),
        HostMap::cyclic(6, 2),
        HostMap::blocks(&[4, 2, 1]),
    ] {
        let n = hosts.nranks();
        for (collective, into) in [
            (Collective::AllGather, true),
            (Collective::ReduceScatter, false),
        ] {
            let layout = Layout {
                collective,
                nranks: n,
                count,
                root: Rank(0),
                in_place: false,
            };
            let traffic = |a: Algorithm| {
                let schedules = a.schedules_on(&layout, Some(&hosts)).expect("served");
                host_traffic(&schedules, &hosts, into)
            };
            let (hier, ring) = (traffic(Algorithm::Hierarchical), traffic(Algorithm::Ring));
            let what = format!("{collective:?} on {}", hosts.describe());
            let even =
                (0..hosts.nhosts()).all(|h| hosts.members(h).len() == hosts.members(0).len());
            for h in 0..hosts.nhosts() {
                let missing = (n - hosts.members(h).len()) * count;
                if even {
                    assert_eq!(hier[h], missing, "{what}: host {h}, hierarchical");
                    assert_eq!(ring[h], (n - 1) * count, "{what}: host {h}, ring");
                } else {
                    // Hosts without a column take (or give) its blocks once more.
                    assert!(
                        hier[h] >= missing && hier[h] <= 2 * missing,
                        "{what}: {hier:?}"
                    );
                }
            }
            assert!(
                hier.iter().sum::<usize>() < ring.iter().sum::<usize>(),
                "{what}"
            );
        }
    }
}
