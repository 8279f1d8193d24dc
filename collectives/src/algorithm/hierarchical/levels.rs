//! The algorithm of each level of a hierarchical schedule: which flat algorithms can run
//! a level ([`LEVEL_CANDIDATES`], [`LevelAlgorithms::effective`]) and how `auto` prices
//! each level at its own rates ([`choose_levels`]).

use rcoll_transport::hosts::HostMap;
use rcoll_transport::Rank;

use super::{sub_layout, widest};
use crate::algorithm::Algorithm;
use crate::schedule::{Collective, Layout, Schedule};

/// The flat algorithm of each level: `local` inside every host, `global` across hosts.
/// Each must use one channel, so that a phase's primitives can share one channel with
/// the phases around it ([`LEVEL_CANDIDATES`]). The default is the ring at both
/// levels; `Auto` prices each level with its own rates ([`choose_levels`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LevelAlgorithms {
    /// Inside every host (shared memory).
    pub local: Algorithm,
    /// Across hosts, one rank per host (the network).
    pub global: Algorithm,
}

impl Default for LevelAlgorithms {
    fn default() -> Self {
        LevelAlgorithms {
            local: Algorithm::Ring,
            global: Algorithm::Ring,
        }
    }
}

impl std::fmt::Display for LevelAlgorithms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.local, self.global)
    }
}

impl std::str::FromStr for LevelAlgorithms {
    type Err = String;

    /// `local/global`, for example `mesh/ring` (`RCOLL_LEVEL_ALGO`).
    fn from_str(s: &str) -> Result<Self, String> {
        let (local, global) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not local/global (for example mesh/ring)"))?;
        let level = |name: &str| -> Result<Algorithm, String> {
            let a: Algorithm = name.trim().parse()?;
            if LEVEL_CANDIDATES.contains(&a) {
                Ok(a)
            } else {
                Err(format!(
                    "{a} cannot run a level (one of: {})",
                    LEVEL_CANDIDATES.map(Algorithm::name).join(", ")
                ))
            }
        };
        Ok(LevelAlgorithms {
            local: level(local)?,
            global: level(global)?,
        })
    }
}

impl LevelAlgorithms {
    /// What runs at each level of `collective`'s hierarchical schedule when these are
    /// asked for: a level's algorithm where it serves that level's sub-collectives (see
    /// `level_algorithm`), else the ring. For example `tree/tree` runs all_gather as
    /// `tree/ring` (across hosts only ring and mesh move one block per message), and
    /// `halving_doubling` never runs inside a host (it serves neither reduce nor
    /// broadcast).
    pub fn effective(self, collective: Collective) -> LevelAlgorithms {
        use Collective as C;
        let (locals, globals): (&[Collective], &[Collective]) = match collective {
            C::AllReduce => (&[C::Reduce, C::Broadcast], &[C::AllReduce]),
            C::Broadcast => (&[C::Broadcast], &[C::Broadcast]),
            C::Reduce => (&[C::Reduce], &[C::Reduce]),
            C::AllGather => (&[C::Broadcast], &[C::AllGather]),
            C::ReduceScatter => (&[C::Reduce], &[C::ReduceScatter]),
            _ => return self,
        };
        let at = |wanted: Algorithm, subs: &[Collective]| {
            let runs = |c: Collective| level_algorithm(wanted, &sub_layout(c, 2, 1, 0, false));
            if subs.iter().all(|&c| runs(c) == wanted) {
                wanted
            } else {
                Algorithm::Ring
            }
        };
        LevelAlgorithms {
            local: at(self.local, locals),
            global: at(self.global, globals),
        }
    }
}

/// Beyond this many ranks at a level, `choose_levels` keeps the ring there without
/// pricing (pricing every rank's schedule of a level of thousands costs more than a
/// call).
const PRICED_LEVEL_LIMIT: usize = 256;

/// The flat algorithms that can run a level: each schedules every collective a level
/// needs on one channel.
pub const LEVEL_CANDIDATES: [Algorithm; 6] = [
    Algorithm::Ring,
    Algorithm::Mesh,
    Algorithm::SingleRoot,
    Algorithm::Tree,
    Algorithm::BinomialTree,
    Algorithm::HalvingDoubling,
];

/// Each level's sub-collectives for `layout` on `hosts`, at the largest host's size and
/// the largest block: `(local, global, phases sharing a host's link)`.
fn level_layouts(layout: &Layout, hosts: &HostMap) -> (Vec<Layout>, Vec<Layout>, usize) {
    let (h, l) = (hosts.nhosts(), widest(hosts));
    let c = layout.count;
    let shard = c.div_ceil(l.max(1));
    let ip = layout.in_place;
    match layout.collective {
        Collective::AllReduce => (
            vec![
                sub_layout(Collective::Reduce, l, shard, 0, ip),
                sub_layout(Collective::Broadcast, l, shard, 0, true),
            ],
            vec![sub_layout(Collective::AllReduce, h, shard, 0, true)],
            l,
        ),
        Collective::Broadcast => (
            vec![sub_layout(Collective::Broadcast, l, c, 0, true)],
            vec![sub_layout(Collective::Broadcast, h, c, 0, ip)],
            1,
        ),
        Collective::Reduce => (
            vec![sub_layout(Collective::Reduce, l, c, 0, false)],
            vec![sub_layout(Collective::Reduce, h, c, 0, true)],
            1,
        ),
        Collective::AllGather => (
            vec![sub_layout(Collective::Broadcast, l, c, 0, true)],
            vec![sub_layout(Collective::AllGather, h, c, 0, ip)],
            l,
        ),
        Collective::ReduceScatter => (
            vec![sub_layout(Collective::Reduce, l, c, 0, false)],
            vec![sub_layout(Collective::ReduceScatter, h, c, 0, false)],
            l,
        ),
        _ => (Vec::new(), Vec::new(), 1),
    }
}

/// The algorithm of each level the cost model prices cheapest for `layout` on `hosts`
/// (elements of `elem_size` bytes): the local level's sub-collectives (a host's reduce
/// to a shard's owner, its broadcast from it) at `local`'s rates on one host, with
/// `receivers_read` as in [`Levels`](crate::schedule::cost::Levels); the global level's
/// at `global`'s, its bandwidth shared by the phases that cross one host's link at
/// once. Ties keep the ring; beyond [`crate::select::QUADRATIC_LIMIT`] ranks at a level
/// the quadratic algorithms are not priced there (as flat selection does), beyond
/// `PRICED_LEVEL_LIMIT` (256) nothing is. Every rank of a communicator must pass the same
/// arguments (the models and `receivers_read` are the group's, not a pair's); a rank
/// that chose otherwise fails its call with a mismatch naming the level algorithms (they
/// are in every message's fingerprint).
pub fn choose_levels(
    layout: &Layout,
    hosts: &HostMap,
    elem_size: usize,
    global: &crate::schedule::cost::CostModel,
    local: &crate::schedule::cost::CostModel,
    receivers_read: bool,
) -> LevelAlgorithms {
    use crate::schedule::cost::{cost_levels, CostModel, Levels};
    let (locals, globals, sharing) = level_layouts(layout, hosts);
    let one_host = HostMap::single(widest(hosts));
    let inside = Levels {
        hosts: &one_host,
        local: *local,
        receivers_read,
        level_algorithms: None,
    };
    let across = CostModel {
        bandwidth_gbps: global.bandwidth_gbps / sharing.max(1) as f64,
        ..*global
    };
    // The cheapest candidate for these sub-layouts, priced by `price`.
    let cheapest = |subs: &[Layout], price: &dyn Fn(&[Schedule]) -> f64| {
        if subs.iter().any(|s| s.nranks > PRICED_LEVEL_LIMIT) {
            return Algorithm::Ring;
        }
        let mut best = (Algorithm::Ring, f64::INFINITY);
        let quadratic = |a: Algorithm| matches!(a, Algorithm::Mesh | Algorithm::SingleRoot);
        for a in LEVEL_CANDIDATES {
            if quadratic(a)
                && subs
                    .iter()
                    .any(|s| s.nranks > crate::select::QUADRATIC_LIMIT)
            {
                continue;
            }
            let total: f64 = subs
                .iter()
                .map(|sub| {
                    let a = level_algorithm(a, sub);
                    let all: Vec<Schedule> = (0..sub.nranks)
                        .map(|v| a.generate_checked(sub, Rank::from(v)))
                        .collect();
                    price(&all)
                })
                .sum();
            if total < best.1 {
                best = (a, total);
            }
        }
        best.0
    };
    LevelAlgorithms {
        local: cheapest(&locals, &|all| {
            cost_levels(all, elem_size, local, Some(&inside)).predicted_us
        }),
        global: cheapest(&globals, &|all| {
            cost_levels(all, elem_size, &across, None).predicted_us
        }),
    }
}

/// The algorithm that runs `sub` at a level asked to run `wanted`: `wanted` where it
/// serves the sub-collective (on one channel), else the ring. An all_gather or
/// reduce_scatter across hosts works on blocks that lie apart in the call's buffers (one
/// local rank's on every host), so only algorithms that move one block per message can
/// run it: ring and mesh for all_gather; the ring alone for reduce_scatter, whose output
/// on a rank alone on its host lies inside its input when the call is in place.
pub(super) fn level_algorithm(wanted: Algorithm, sub: &Layout) -> Algorithm {
    let fits = match sub.collective {
        Collective::AllGather => matches!(wanted, Algorithm::Ring | Algorithm::Mesh),
        Collective::ReduceScatter => wanted == Algorithm::Ring,
        _ => true,
    };
    if LEVEL_CANDIDATES.contains(&wanted) && wanted.serves(sub.collective) && fits {
        wanted
    } else {
        Algorithm::Ring
    }
}
