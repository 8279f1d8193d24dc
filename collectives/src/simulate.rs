//! Prices real schedules at scale (thousands to 65,536 ranks) under the two-level
//! alpha-beta-gamma model, without holding every rank's schedule: the schedules are made
//! one rank at a time, as the model's one walk over a job asks for them (the walk that
//! [`cost_levels`](crate::schedule::cost::cost_levels) runs over schedules in memory), and
//! the last few are kept (a ring's left neighbour is the rank just priced).
//!
//! When every host fits in the budget of primitives visited, the price is
//! [`cost_levels`](crate::schedule::cost::cost_levels)'s (tested). Beyond it, a spread
//! sample of whole hosts is priced — the first, the last, then midpoints of the gaps,
//! until the budget is spent (at least three) — and totals are scaled to all hosts. The
//! algorithms whose schedules grow with `p` per rank (ring, mesh) are the symmetric ones,
//! where every host of a uniform map carries the same load up to one element of rounding,
//! so the sample's maxima are the whole job's (tested at 512 ranks against the exact sum).
//! For a rooted or tree-shaped schedule a sample is a lower bound (hosts differ by their
//! place in the tree); those schedules are small per rank and stay exact within the
//! default budget up to 65,536 ranks.

use std::collections::VecDeque;
use std::rc::Rc;

use rcoll_transport::hosts::HostMap;
use rcoll_transport::Rank;

use crate::algorithm::hierarchical::{has_levels, LevelAlgorithms};
use crate::algorithm::{Algorithm, ScheduleError};
use crate::schedule::cost::{Cost, CostModel, Levels, Source, Walk};
use crate::schedule::{Layout, Schedule};

/// Primitives visited per pricing before hosts are sampled (or steps, where a schedule
/// has more of those: a pipelined schedule over many hosts has thousands, most of them
/// empty for any one rank, and making them is most of its cost): a few seconds of work.
pub const DEFAULT_BUDGET: usize = 10_000_000;

/// A price and how much of the job it looked at.
#[derive(Clone, Debug, PartialEq)]
pub struct Pricing {
    /// What the collective costs (totals scaled to every host when sampled).
    pub cost: Cost,
    /// Hosts whose ranks were priced.
    pub hosts_priced: usize,
    /// Hosts in the job.
    pub hosts: usize,
    /// The algorithms [`Algorithm::Hierarchical`]'s levels ran, as the communicator would
    /// choose them for this layout (`None` for the other algorithms).
    pub levels: Option<LevelAlgorithms>,
}

impl Pricing {
    /// Whether every host was priced (the price is then exact).
    pub fn is_exact(&self) -> bool {
        self.hosts_priced == self.hosts
    }
}

/// Prices `algorithm` on `layout` over `levels` (its host map must have `layout.nranks`
/// ranks), visiting at most about `budget` primitives.
pub fn price(
    algorithm: Algorithm,
    layout: &Layout,
    elem_size: usize,
    model: &CostModel,
    levels: &Levels<'_>,
    budget: usize,
) -> Result<Pricing, ScheduleError> {
    let hosts = levels.hosts;
    if hosts.nranks() != layout.nranks {
        return Err(ScheduleError::InvalidLayout {
            layout: *layout,
            reason: format!(
                "the host map has {} ranks, the layout {}",
                hosts.nranks(),
                layout.nranks
            ),
        });
    }
    // The hierarchical levels the communicator would run: chosen per level as `auto`
    // chooses them (or forced by `levels`).
    let chosen = (algorithm == Algorithm::Hierarchical && has_levels(hosts))
        .then(|| crate::select::level_algorithms(layout, elem_size, model, levels));
    let mut cache = Cache::new(algorithm, *layout, hosts, chosen.unwrap_or_default());
    let walk = Walk::new(layout, elem_size, model, Some(levels), layout.nranks);
    // Hosts in an order whose every prefix is spread over the job (the ends first, then
    // midpoints); pricing stops once the work done passes the budget.
    let enough = |visited: usize, priced: usize| priced >= MIN_HOSTS && visited > budget;
    let walked = walk.walk(spread_order(hosts.nhosts()), &mut cache, enough)?;
    Ok(Pricing {
        cost: walk.cost(&walked, layout.nranks),
        hosts_priced: walked.hosts_priced,
        hosts: hosts.nhosts(),
        levels: chosen,
    })
}

/// Hosts priced at least, however large their schedules.
const MIN_HOSTS: usize = 3;

/// `0..n` ordered so that every prefix is spread evenly: the first, the last, then the
/// midpoints of the gaps, breadth first.
fn spread_order(n: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let mut order = vec![0];
    if n > 1 {
        order.push(n - 1);
    }
    let mut gaps = std::collections::VecDeque::from([(0, n - 1)]);
    while let Some((a, b)) = gaps.pop_front() {
        if b - a > 1 {
            let m = a + (b - a) / 2;
            order.push(m);
            gaps.push_back((a, m));
            gaps.push_back((m, b));
        }
    }
    order
}

/// The last few ranks' schedules: a rank priced after its left neighbour finds it here.
struct Cache<'a> {
    algorithm: Algorithm,
    layout: Layout,
    hosts: &'a HostMap,
    levels: LevelAlgorithms,
    recent: VecDeque<(Rank, Rc<Schedule>)>,
}

impl<'a> Cache<'a> {
    const CAPACITY: usize = 16;

    fn new(
        algorithm: Algorithm,
        layout: Layout,
        hosts: &'a HostMap,
        levels: LevelAlgorithms,
    ) -> Cache<'a> {
        Cache {
            algorithm,
            layout,
            hosts,
            levels,
            recent: VecDeque::with_capacity(Self::CAPACITY),
        }
    }
}

impl Source for Cache<'_> {
    type Held = Rc<Schedule>;
    type Error = ScheduleError;

    fn schedule(&mut self, r: Rank) -> Result<Rc<Schedule>, ScheduleError> {
        if let Some((_, s)) = self.recent.iter().find(|(x, _)| *x == r) {
            return Ok(Rc::clone(s));
        }
        let s = Rc::new(self.algorithm.schedule_levels(
            &self.layout,
            r,
            Some(self.hosts),
            self.levels,
        )?);
        if self.recent.len() == Self::CAPACITY {
            self.recent.pop_front();
        }
        self.recent.push_back((r, Rc::clone(&s)));
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::cost::cost_levels;
    use crate::schedule::Collective;

    fn layout(collective: Collective, nranks: usize, count: usize, root: usize) -> Layout {
        Layout {
            collective,
            nranks,
            count,
            root: Rank::from(root),
            in_place: false,
        }
    }

    fn levels(hosts: &HostMap) -> Levels<'_> {
        Levels {
            hosts,
            local: CostModel::shared_memory(),
            receivers_read: false,
            level_algorithms: None,
        }
    }

    /// Every algorithm, collective and host shape small enough to hold every schedule:
    /// made a rank at a time, the price is the one of all schedules at once, field by
    /// field, crowded hosts (more ranks than CPUs) and receivers that read the senders'
    /// memory included.
    #[test]
    fn streamed_prices_equal_the_whole_job_prices() {
        let model = CostModel::default();
        let maps = [
            HostMap::single(5),
            HostMap::single(4).with_cpus(vec![2]),
            HostMap::blocks(&[1, 1, 1]),
            HostMap::blocks(&[2, 2]),
            HostMap::blocks(&[3, 1, 2]).with_cpus(vec![2, 1, 1]),
            HostMap::cyclic(8, 2),
            HostMap::cyclic(8, 2).with_cpus(vec![3, 2]),
            HostMap::blocks(&[4, 4, 4, 4]),
        ];
        for (hosts, receivers_read) in maps.iter().flat_map(|h| [(h, false), (h, true)]) {
            let n = hosts.nranks();
            let lv = Levels {
                receivers_read,
                ..levels(hosts)
            };
            for a in Algorithm::ALL {
                for c in Collective::SCHEDULED {
                    if !a.serves(c) {
                        continue;
                    }
                    for count in [0, 1, 1000 * n + 3] {
                        let l = layout(c, n, count, n - 1);
                        let Ok(streamed) = price(a, &l, 4, &model, &lv, usize::MAX) else {
                            continue;
                        };
                        let chosen = streamed.levels.unwrap_or_default();
                        let all = a
                            .schedules_levels(&l, Some(hosts), chosen)
                            .expect("the schedules priced");
                        let whole = cost_levels(&all, 4, &model, Some(&lv));
                        assert!(streamed.is_exact());
                        let what = format!(
                            "{a} {c} count {count} on {}, receivers read: {receivers_read}",
                            hosts.describe()
                        );
                        // Every count, then the price within rounding.
                        let counts = |c: &Cost| {
                            [
                                c.steps as u64,
                                c.total_bytes,
                                c.messages,
                                c.max_step_bytes_per_rank,
                                c.max_bytes_sent_per_rank,
                                c.cross_host_messages,
                                c.cross_host_bytes,
                            ]
                        };
                        assert_eq!(counts(&streamed.cost), counts(&whole), "{what}");
                        let (x, y) = (streamed.cost.predicted_us, whole.predicted_us);
                        assert!((x - y).abs() <= 1e-9 * y.max(1.0), "{what}: {x} vs {y}");
                    }
                }
            }
        }
    }

    /// Sampling a few hosts of a uniform map prices the symmetric algorithms as the whole
    /// job does, within one element's rounding.
    #[test]
    fn a_sample_of_hosts_prices_symmetric_schedules_like_all_hosts() {
        let model = CostModel::default();
        let hosts = HostMap::blocks(&[4; 128]);
        let lv = levels(&hosts);
        for (a, c) in [
            (Algorithm::Ring, Collective::AllReduce),
            (Algorithm::Ring, Collective::AllGather),
            (Algorithm::HalvingDoubling, Collective::AllReduce),
            (Algorithm::Hierarchical, Collective::AllReduce),
        ] {
            let l = layout(c, 512, 1 << 20, 0);
            let exact = price(a, &l, 4, &model, &lv, usize::MAX).expect("exact");
            let sampled = price(a, &l, 4, &model, &lv, 10_000).expect("sampled");
            assert!(exact.is_exact());
            assert!(
                sampled.hosts_priced < 128,
                "{a} {c}: budget too large to sample"
            );
            let ratio = sampled.cost.predicted_us / exact.cost.predicted_us;
            assert!(
                (0.999..=1.0).contains(&ratio),
                "{a} {c}: sampled {} vs exact {} us",
                sampled.cost.predicted_us,
                exact.cost.predicted_us
            );
            assert_eq!(sampled.cost.steps, exact.cost.steps, "{a} {c}");
        }
    }

    /// The hierarchical schedule is priced with the levels the communicator would run
    /// (not rings at both): what `auto` and `plan` price, and never dearer than rings.
    #[test]
    fn hierarchical_is_priced_with_the_levels_the_communicator_chooses() {
        let model = CostModel::default();
        let hosts = HostMap::blocks(&[4; 4]);
        let lv = levels(&hosts);
        for (count, elem) in [(2, 4), (1 << 20, 4), (16 << 20, 4)] {
            let l = layout(Collective::AllReduce, 16, count, 0);
            let priced =
                price(Algorithm::Hierarchical, &l, elem, &model, &lv, usize::MAX).expect("priced");
            let chosen = crate::select::level_algorithms(&l, elem, &model, &lv);
            assert_eq!(priced.levels, Some(chosen), "count {count}");
            let rings = Levels {
                level_algorithms: Some(LevelAlgorithms::default()),
                ..levels(&hosts)
            };
            let ring_ring = price(
                Algorithm::Hierarchical,
                &l,
                elem,
                &model,
                &rings,
                usize::MAX,
            )
            .expect("priced");
            assert_eq!(ring_ring.levels, Some(LevelAlgorithms::default()));
            assert!(
                priced.cost.predicted_us <= ring_ring.cost.predicted_us,
                "count {count}: {chosen} {} us, ring/ring {} us",
                priced.cost.predicted_us,
                ring_ring.cost.predicted_us
            );
            if count == 2 {
                assert_ne!(chosen, LevelAlgorithms::default(), "8 B keeps rings");
                assert!(priced.cost.steps < ring_ring.cost.steps);
            }
        }
        // A flat algorithm has no levels.
        let l = layout(Collective::AllReduce, 16, 2, 0);
        let ring = price(Algorithm::Ring, &l, 4, &model, &lv, usize::MAX).expect("priced");
        assert_eq!(ring.levels, None);
    }

    #[test]
    fn a_host_map_of_another_size_is_an_error() {
        let hosts = HostMap::single(4);
        let l = layout(Collective::AllReduce, 8, 10, 0);
        let e = price(
            Algorithm::Ring,
            &l,
            4,
            &CostModel::default(),
            &levels(&hosts),
            usize::MAX,
        );
        assert!(
            matches!(e, Err(ScheduleError::InvalidLayout { .. })),
            "{e:?}"
        );
    }

    #[test]
    fn every_prefix_of_the_order_is_spread_and_the_whole_is_every_host() {
        assert_eq!(spread_order(5), vec![0, 4, 2, 1, 3]);
        assert_eq!(&spread_order(100)[..3], &[0, 99, 49]);
        assert_eq!(spread_order(1), vec![0]);
        for n in [2, 7, 64, 1000] {
            let mut all = spread_order(n);
            all.sort_unstable();
            assert_eq!(all, (0..n).collect::<Vec<_>>());
        }
    }
}
