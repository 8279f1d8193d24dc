//! Algorithm selection: `Auto` prices every algorithm that serves a collective under the
//! cost model, from the schedules themselves, and takes the cheapest.
//!
//! The choice depends only on the collective, the number of ranks, the root, whether the
//! call is in place, the message size rounded up to a power of two, and the cost model, so
//! every rank of a communicator makes the same choice without talking. Choices are cached
//! per size bucket.

use std::collections::HashMap;

use rcoll_transport::Rank;

use crate::algorithm::hierarchical::{self, LevelAlgorithms};
use crate::algorithm::Algorithm;
use crate::schedule::cost::{cost_levels, Cost, CostModel, Levels};
use crate::schedule::{Collective, Layout};

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
            hierarchical::choose_levels(
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

/// Caches `Auto` choices for one communicator.
#[derive(Debug, Default)]
pub struct Selector {
    cache: HashMap<Key, Algorithm, foldhash::fast::RandomState>,
}

impl Selector {
    /// The algorithm `Auto` picks for `layout`.
    pub fn choose(
        &mut self,
        layout: &Layout,
        elem_size: usize,
        model: &CostModel,
        levels: Option<&Levels<'_>>,
    ) -> Algorithm {
        let bytes = layout.count.saturating_mul(elem_size);
        let bucket_bytes = bytes.checked_next_power_of_two().unwrap_or(usize::MAX);
        let key = Key {
            collective: layout.collective,
            nranks: layout.nranks,
            root: layout.root,
            in_place: layout.in_place,
            bucket_bytes,
            elem_size,
        };
        if let Some(a) = self.cache.get(&key) {
            return *a;
        }
        let representative = bucket(layout, elem_size);
        let choice = rank_algorithms(&representative, elem_size, model, levels)
            .first()
            .map_or(Algorithm::Ring, |(a, _)| *a);
        if self.cache.len() > 1024 {
            self.cache.clear();
        }
        self.cache.insert(key, choice);
        choice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
