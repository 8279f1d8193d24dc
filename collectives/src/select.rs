//! Algorithm selection: `Auto` prices every algorithm that serves a collective under the
//! cost model, from the schedules themselves, and takes the cheapest.
//!
//! The choice depends only on the collective, the number of ranks, the root, whether the
//! call is in place, the message size rounded up to a power of two, and the cost model, so
//! every rank of a communicator makes the same choice without talking. Choices are cached
//! per size bucket.

use std::collections::HashMap;

use rcoll_transport::Rank;

use rcoll_transport::hosts::HostMap;

use crate::algorithm::hierarchical::{
    self, level_algorithm, sub_layout, widest, LevelAlgorithms, LEVEL_CANDIDATES,
};
use crate::algorithm::Algorithm;
use crate::schedule::cost::{cost_levels, Cost, CostModel, Levels};
use crate::schedule::{Collective, Layout, Schedule};

/// What may name a call's algorithm besides the cost model, each `None` where it says
/// nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sources {
    /// Named for this call (`Communicator::all_reduce_with` and the like).
    pub forced: Option<Algorithm>,
    /// Configured for every call (`RCOLL_ALGO`, the builder's).
    pub configured: Option<Algorithm>,
    /// Settled by selection by trial (`RCOLL_AUTOTUNE`) for the call's size.
    pub tried: Option<Algorithm>,
    /// The tuning file's rule for the call's transport, ranks and size.
    pub rule: Option<Algorithm>,
}

/// The one precedence of a call's algorithm: forced, then configured, then settled by
/// trial, then the tuning file's rule, then `model` (the cost model, asked only when none
/// of those answers). A configured algorithm or a rule that does not serve `collective`
/// is passed over; a forced one is an error (`Err` with it): the caller asked for it.
pub fn choose(
    collective: Collective,
    sources: &Sources,
    model: impl FnOnce() -> Algorithm,
) -> Result<Algorithm, Algorithm> {
    let serves = |a: &Algorithm| a.serves(collective);
    if let Some(a) = sources.forced {
        return if serves(&a) { Ok(a) } else { Err(a) };
    }
    Ok(sources
        .configured
        .filter(serves)
        .or(sources.tried)
        .or(sources.rule.filter(serves))
        .unwrap_or_else(model))
}

/// Beyond this many ranks the quadratic algorithms are not even priced.
pub const QUADRATIC_LIMIT: usize = 64;

/// Whether `algorithm` is left out on `nranks` ranks for sending p^2 messages (every rank
/// to every rank, or all through one root): beyond [`QUADRATIC_LIMIT`] ranks they are never
/// the cheapest, and their schedules alone grow as p^2.
pub fn quadratic_beyond_limit(algorithm: Algorithm, nranks: usize) -> bool {
    nranks > QUADRATIC_LIMIT && matches!(algorithm, Algorithm::Mesh | Algorithm::SingleRoot)
}

/// Every algorithm that serves `layout`, with its cost, cheapest first.
/// With `levels`, pairs on one host are priced at the local rates and the hierarchical
/// algorithm competes where the group has two levels.
pub fn rank_algorithms(
    layout: &Layout,
    elem_size: usize,
    model: &CostModel,
    levels: Option<&Levels<'_>>,
) -> Vec<(Algorithm, Cost)> {
    let hosts = levels.map(|l| l.hosts);
    let mut priced: Vec<(Algorithm, Cost)> = Algorithm::ALL
        .into_iter()
        .filter(|a| a.serves(layout.collective))
        .filter(|a| !quadratic_beyond_limit(*a, layout.nranks))
        .filter(|a| *a != Algorithm::Hierarchical || hosts.is_some_and(hierarchical::has_levels))
        .filter_map(|a| {
            let schedules = match (a, levels) {
                (Algorithm::Hierarchical, Some(l)) => {
                    let lv = level_algorithms(layout, elem_size, model, l);
                    a.schedules_levels(layout, hosts, lv).ok()?
                }
                _ => a.schedules_on(layout, hosts).ok()?,
            };
            Some((a, cost_levels(&schedules, elem_size, model, levels)))
        })
        .collect();
    priced.sort_by(|x, y| x.1.predicted_us.total_cmp(&y.1.predicted_us));
    priced
}

/// The algorithms the hierarchical schedule's levels run for `layout` (elements of
/// `elem_size` bytes, the network at `model`'s rates): the forced ones, else each level
/// priced with its own rates; the effective ones for the collective
/// ([`LevelAlgorithms::effective`]). The choice looks at neither the root nor whether
/// the call is in place, which ranks of one call may differ in (the C API).
pub fn level_algorithms(
    layout: &Layout,
    elem_size: usize,
    model: &CostModel,
    levels: &Levels<'_>,
) -> LevelAlgorithms {
    let layout = &Layout {
        root: Rank::from(0usize),
        in_place: false,
        ..*layout
    };
    let chosen = levels.level_algorithms.unwrap_or_else(|| {
        if levels.hosts.nranks() == layout.nranks && hierarchical::has_levels(levels.hosts) {
            choose_levels(
                layout,
                levels.hosts,
                elem_size,
                model,
                &levels.local,
                levels.receivers_read,
            )
        } else {
            LevelAlgorithms::default()
        }
    });
    chosen.effective(layout.collective)
}

/// `layout` with its count rounded up to a power of two bytes: what `Auto` prices, so
/// that every size of one bucket gets one choice.
pub fn bucket(layout: &Layout, elem_size: usize) -> Layout {
    let bytes = layout.count.saturating_mul(elem_size);
    let bucket_bytes = bytes.checked_next_power_of_two().unwrap_or(usize::MAX);
    Layout {
        count: bucket_bytes / elem_size.max(1),
        ..*layout
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    collective: Collective,
    nranks: usize,
    root: Rank,
    in_place: bool,
    bucket_bytes: usize,
    elem_size: usize,
}

/// What pricing chose for one size bucket: `Auto`'s algorithm and the hierarchical
/// levels' algorithms, each once asked for.
#[derive(Clone, Copy, Debug, Default)]
struct Choice {
    auto: Option<Algorithm>,
    levels: Option<LevelAlgorithms>,
}

/// Caches what pricing chose per size bucket for one communicator (a call's own
/// preparation is kept apart, per call: the communicator's prepared calls).
#[derive(Debug, Default)]
pub struct Selector {
    cache: HashMap<Key, Choice, foldhash::fast::RandomState>,
}

impl Selector {
    /// The cache's entry for `layout`'s size bucket (elements of `elem_size` bytes).
    fn entry(&mut self, layout: &Layout, elem_size: usize) -> &mut Choice {
        let bytes = layout.count.saturating_mul(elem_size);
        let key = Key {
            collective: layout.collective,
            nranks: layout.nranks,
            root: layout.root,
            in_place: layout.in_place,
            bucket_bytes: bytes.checked_next_power_of_two().unwrap_or(usize::MAX),
            elem_size,
        };
        if self.cache.len() > 1024 && !self.cache.contains_key(&key) {
            self.cache.clear();
        }
        self.cache.entry(key).or_default()
    }

    /// The algorithm `Auto` picks for `layout`.
    pub fn choose(
        &mut self,
        layout: &Layout,
        elem_size: usize,
        model: &CostModel,
        levels: Option<&Levels<'_>>,
    ) -> Algorithm {
        if let Some(a) = self.entry(layout, elem_size).auto {
            return a;
        }
        let representative = bucket(layout, elem_size);
        let choice = rank_algorithms(&representative, elem_size, model, levels)
            .first()
            .map_or(Algorithm::Ring, |(a, _)| *a);
        self.entry(layout, elem_size).auto = Some(choice);
        choice
    }

    /// The algorithms the hierarchical levels run for `layout` ([`level_algorithms`] at
    /// its size bucket).
    pub fn levels(
        &mut self,
        layout: &Layout,
        elem_size: usize,
        model: &CostModel,
        levels: &Levels<'_>,
    ) -> LevelAlgorithms {
        if let Some(l) = self.entry(layout, elem_size).levels {
            return l;
        }
        let representative = bucket(layout, elem_size);
        let choice = level_algorithms(&representative, elem_size, model, levels);
        self.entry(layout, elem_size).levels = Some(choice);
        choice
    }
}

/// Beyond this many ranks at a level, `choose_levels` keeps the ring there without
/// pricing (pricing every rank's schedule of a level of thousands costs more than a
/// call).
const PRICED_LEVEL_LIMIT: usize = 256;

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
/// `receivers_read` as in [`Levels`]; the global level's
/// at `global`'s, its bandwidth shared by the phases that cross one host's link at
/// once. Ties keep the ring; beyond [`QUADRATIC_LIMIT`] ranks at a level
/// the quadratic algorithms are not priced there (as flat selection does), beyond
/// `PRICED_LEVEL_LIMIT` (256) nothing is. Every rank of a communicator must pass the same
/// arguments (the models and `receivers_read` are the group's, not a pair's); a rank
/// that chose otherwise fails its call with a mismatch naming the level algorithms (they
/// are in every message's fingerprint).
pub fn choose_levels(
    layout: &Layout,
    hosts: &HostMap,
    elem_size: usize,
    global: &CostModel,
    local: &CostModel,
    receivers_read: bool,
) -> LevelAlgorithms {
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
        for a in LEVEL_CANDIDATES {
            if subs.iter().any(|s| quadratic_beyond_limit(a, s.nranks)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each source in turn, the ones before it absent: forced beats everything (and is an
    /// error where it does not serve), then configured, tried, the rule, the model; a
    /// configured algorithm or a rule that does not serve the collective is passed over.
    #[test]
    fn sources_take_precedence_in_one_order() {
        use Algorithm::{Mesh, Ring, SingleRoot, Tree};
        let all = Sources {
            forced: Some(Ring),
            configured: Some(Tree),
            tried: Some(Mesh),
            rule: Some(SingleRoot),
        };
        let model = || Algorithm::HalvingDoubling;
        let c = Collective::AllReduce;
        assert_eq!(choose(c, &all, model), Ok(Ring));
        let s = Sources {
            forced: None,
            ..all
        };
        assert_eq!(choose(c, &s, model), Ok(Tree));
        let s = Sources {
            configured: None,
            ..s
        };
        assert_eq!(choose(c, &s, model), Ok(Mesh));
        let s = Sources { tried: None, ..s };
        assert_eq!(choose(c, &s, model), Ok(SingleRoot));
        let s = Sources { rule: None, ..s };
        assert_eq!(choose(c, &s, model), Ok(Algorithm::HalvingDoubling));
        // The tree does not serve all_to_all: forced, an error; configured or a rule,
        // passed over for what comes next.
        let tree = Some(Tree);
        let c = Collective::AllToAll;
        assert!(!Tree.serves(c) && Mesh.serves(c));
        let forced = Sources {
            forced: tree,
            ..Sources::default()
        };
        assert_eq!(choose(c, &forced, || Mesh), Err(Tree));
        let configured = Sources {
            configured: tree,
            rule: Some(Mesh),
            ..Sources::default()
        };
        assert_eq!(choose(c, &configured, || Ring), Ok(Mesh));
        let rule = Sources {
            rule: tree,
            ..Sources::default()
        };
        assert_eq!(choose(c, &rule, || Mesh), Ok(Mesh));
    }

    fn layout(collective: Collective, nranks: usize, count: usize) -> Layout {
        Layout {
            collective,
            nranks,
            count,
            root: Rank(0),
            in_place: false,
        }
    }

    #[test]
    fn latency_bound_and_bandwidth_bound_sizes_choose_differently() {
        let model = CostModel::default();
        let mut s = Selector::default();
        let small = s.choose(&layout(Collective::AllReduce, 16, 2), 4, &model, None);
        let large = s.choose(
            &layout(Collective::AllReduce, 16, 64 << 20),
            4,
            &model,
            None,
        );
        assert_ne!(small, large);
        assert!(
            matches!(large, Algorithm::Ring | Algorithm::HalvingDoubling),
            "{large}"
        );
    }

    #[test]
    fn choices_only_use_algorithms_that_serve_the_collective() {
        let model = CostModel::default();
        let mut s = Selector::default();
        for c in Collective::SCHEDULED {
            for n in [2, 3, 8] {
                let a = s.choose(&layout(c, n, 1000), 8, &model, None);
                assert!(a.serves(c), "{a} chosen for {c}");
            }
        }
    }
}
