//! Prices real schedules at scale (thousands to 65,536 ranks) under the two-level
//! alpha-beta-gamma model of [`cost_levels`](crate::schedule::cost::cost_levels), without holding every rank's schedule.
//!
//! [`cost_levels`](crate::schedule::cost::cost_levels) takes all `p` schedules at once and keeps per-round tables of `p`
//! entries: `p^2` primitives and cells for a ring, out of reach at 65,536 ranks. Here the
//! schedules are generated one rank at a time and folded into per-round maxima:
//!
//! - a rank's sends come from its own schedule; what it receives, in the round of the
//!   primitive that sends it (the model's convention), from the schedules of the peers it
//!   receives from, kept in a small cache (a ring's left neighbour is the rank just priced);
//! - a host's link load is summed over its members, so hosts are the unit priced.
//!
//! When every host fits in the budget of primitives visited, the price equals
//! [`cost_levels`](crate::schedule::cost::cost_levels) exactly (tested). Beyond it, a spread sample of whole hosts is priced —
//! the first, the last, then midpoints of the gaps, until the budget is spent (at least
//! three) — and totals are scaled to all hosts. The
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
use crate::schedule::cost::{price_rounds, Cost, CostModel, Levels, Round};
use crate::schedule::{Layout, Schedule};

/// Primitives (or steps, see `work`) visited per pricing before hosts are sampled: about
/// a few seconds of work.
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
    // Hosts in an order whose every prefix is spread over the job (the ends first, then
    // midpoints); pricing stops once the primitives visited pass the budget.
    let order = spread_order(hosts.nhosts());
    let mut visited = 0usize;
    let mut hosts_priced = 0usize;
    let mut acc = Accumulator::default();
    let mut rank_acc = RankLoads::default();
    let mut host_acc = RankLoads::default();
    let mut ranks_priced = 0usize;
    for &h in &order {
        if hosts_priced >= MIN_HOSTS && visited > budget {
            break;
        }
        hosts_priced += 1;
        host_acc.clear();
        for &r in hosts.members(h) {
            ranks_priced += 1;
            rank_acc.clear();
            let own = cache.get(r)?;
            visited += work(&own);
            let mut sent_total = 0u64;
            let mut peers: Vec<Rank> = Vec::new();
            for (_, s, p) in own.primitives() {
                let bytes = (p.len() * elem_size) as u64;
                if p.reduces() {
                    rank_acc.add(s, Load::Reduced, bytes);
                }
                if let Some(from) = p.recv_from() {
                    if !peers.contains(&from) {
                        peers.push(from);
                    }
                }
                for &to in p.send_to() {
                    acc.sends(s);
                    acc.messages += 1;
                    acc.total_bytes += bytes;
                    sent_total += bytes;
                    if hosts.same_host(r, to) {
                        rank_acc.add(s, Load::Sent, bytes);
                        rank_acc.add(s, Load::Messages, 1);
                    } else {
                        rank_acc.add(s, Load::GlobalEnds, 1);
                        host_acc.add(s, Load::Sent, bytes);
                        host_acc.add(s, Load::Messages, 1);
                        acc.cross_host_messages += 1;
                        acc.cross_host_bytes += bytes;
                    }
                }
            }
            acc.max_sent_per_rank = acc.max_sent_per_rank.max(sent_total);
            drop(own);
            for q in peers {
                let theirs = cache.get(q)?;
                visited += work(&theirs);
                let local = hosts.same_host(q, r);
                for (_, s, p) in theirs.primitives() {
                    let n = p.send_to().iter().filter(|&&to| to == r).count() as u64;
                    if n > 0 {
                        // Its round has a sender, priced or not.
                        acc.sends(s);
                        let bytes = n * (p.len() * elem_size) as u64;
                        if !local {
                            rank_acc.add(s, Load::GlobalEnds, n);
                        }
                        let loads = if local { &mut rank_acc } else { &mut host_acc };
                        loads.add(s, Load::Received, bytes);
                        loads.add(s, Load::Messages, n);
                    }
                }
            }
            rank_acc.fold_into(&mut acc, Level::Local);
        }
        host_acc.fold_into(&mut acc, Level::Global);
    }

    let (model, levels) = crate::schedule::cost::rates_for(layout, elem_size, model, Some(levels));
    let local = levels.map(|l| l.local);
    let (predicted_us, max_step) = price_rounds(&acc.rounds, &model, local.as_ref());
    let scale = |x: u64| -> u64 {
        if ranks_priced == layout.nranks {
            x
        } else {
            (x as f64 * layout.nranks as f64 / ranks_priced.max(1) as f64).round() as u64
        }
    };
    Ok(Pricing {
        cost: Cost {
            steps: acc.rounds.iter().filter(|r| r.sends).count(),
            total_bytes: scale(acc.total_bytes),
            max_step_bytes_per_rank: max_step,
            max_bytes_sent_per_rank: acc.max_sent_per_rank,
            messages: scale(acc.messages),
            cross_host_messages: scale(acc.cross_host_messages),
            cross_host_bytes: scale(acc.cross_host_bytes),
            predicted_us,
        },
        hosts_priced,
        hosts: hosts.nhosts(),
        levels: chosen,
    })
}

/// What visiting `s` costs against the budget: its primitives, or its steps where it has
/// more of those (a pipelined schedule over many hosts has thousands of steps, most of
/// them empty for any one rank, and making them is most of its cost).
fn work(s: &Schedule) -> usize {
    let steps: usize = s.channels.iter().map(|c| c.steps.len()).sum();
    s.primitive_count().max(steps)
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

    fn get(&mut self, r: Rank) -> Result<Rc<Schedule>, ScheduleError> {
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

#[derive(Clone, Copy)]
enum Load {
    Sent,
    Received,
    Reduced,
    /// Message ends (sent or received): a rank's inside its host, a host's across.
    Messages,
    /// A rank's message ends across hosts.
    GlobalEnds,
}

#[derive(Clone, Copy)]
enum Level {
    /// A rank's traffic with its own host.
    Local,
    /// A host's traffic with other hosts.
    Global,
}

/// One rank's (or host's) loads per round, sparse: only the rounds it touches are reset.
#[derive(Default)]
struct RankLoads {
    /// `[sent, received, reduced, messages, global ends]` per round.
    rounds: Vec<[u64; 5]>,
    touched: Vec<usize>,
}

impl RankLoads {
    fn add(&mut self, round: usize, load: Load, bytes: u64) {
        if self.rounds.len() <= round {
            self.rounds.resize(round + 1, [0; 5]);
        }
        let cell = &mut self.rounds[round];
        if *cell == [0; 5] {
            self.touched.push(round);
        }
        cell[load as usize] += bytes;
    }

    fn clear(&mut self) {
        for &s in &self.touched {
            self.rounds[s] = [0; 5];
        }
        self.touched.clear();
    }

    /// Raises the job's per-round maxima to this rank's (or host's) loads.
    fn fold_into(&self, acc: &mut Accumulator, level: Level) {
        for &s in &self.touched {
            let [sent, received, reduced, messages, global_ends] = self.rounds[s];
            let round = acc.round(s);
            let busiest = sent.max(received);
            match level {
                Level::Local => {
                    round.local = round.local.max(busiest);
                    round.local_messages |= messages > 0;
                    round.local_ends = round.local_ends.max(messages);
                    round.global_ends = round.global_ends.max(global_ends);
                    round.reduced = round.reduced.max(reduced);
                }
                Level::Global => {
                    round.global = round.global.max(busiest);
                    round.global_messages |= messages > 0;
                }
            }
        }
    }
}

/// The job's per-round maxima and totals over the ranks priced so far.
#[derive(Default)]
struct Accumulator {
    rounds: Vec<Round>,
    total_bytes: u64,
    messages: u64,
    cross_host_messages: u64,
    cross_host_bytes: u64,
    max_sent_per_rank: u64,
}

impl Accumulator {
    fn round(&mut self, s: usize) -> &mut Round {
        if self.rounds.len() <= s {
            self.rounds.resize(s + 1, Round::default());
        }
        &mut self.rounds[s]
    }

    fn sends(&mut self, s: usize) {
        self.round(s).sends = true;
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

    /// Every algorithm, collective and host shape small enough to price the old way: the
    /// streamed price is the same, field by field.
    #[test]
    fn streamed_prices_equal_the_whole_job_prices() {
        let model = CostModel::default();
        let maps = [
            HostMap::single(5),
            HostMap::blocks(&[1, 1, 1]),
            HostMap::blocks(&[2, 2]),
            HostMap::blocks(&[3, 1, 2]),
            HostMap::cyclic(8, 2),
            HostMap::blocks(&[4, 4, 4, 4]),
        ];
        for hosts in &maps {
            let n = hosts.nranks();
            let lv = levels(hosts);
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
                        let what = format!("{a} {c} count {count} on {}", hosts.describe());
                        assert_eq!(streamed.cost.steps, whole.steps, "{what}");
                        assert_eq!(streamed.cost.total_bytes, whole.total_bytes, "{what}");
                        assert_eq!(streamed.cost.messages, whole.messages, "{what}");
                        assert_eq!(
                            streamed.cost.max_step_bytes_per_rank, whole.max_step_bytes_per_rank,
                            "{what}"
                        );
                        assert_eq!(
                            streamed.cost.cross_host_bytes, whole.cross_host_bytes,
                            "{what}"
                        );
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
