//! `rcoll-bench plan`: every algorithm's schedules for one collective, priced under the
//! alpha-beta-gamma model and checked by the symbolic verifier, without moving data.

use std::fmt::Write as _;

use rcoll::algorithm::hierarchical::has_levels;
use rcoll::schedule::cost::{Cost, CostModel, Levels};
use rcoll::schedule::verify::{verify, MAX_RANKS};
use rcoll::select::{quadratic_beyond_limit, QUADRATIC_LIMIT};
use rcoll::simulate::{price, Pricing, DEFAULT_BUDGET};
use rcoll::transport::hosts::HostMap;
use rcoll::{Algorithm, Collective, DataType, Layout, Rank};

use crate::error::{usage, BenchError};

/// Symbolic elements (16 bytes each) the verifier may hold across all ranks' buffers
/// before we skip it: half a GiB, plus what is in flight.
const VERIFY_BUDGET_ELEMENTS: usize = 1 << 25;

/// What to plan.
#[derive(Clone, Debug)]
pub struct PlanSpec {
    /// The collective.
    pub collective: Collective,
    /// Number of ranks P.
    pub nranks: usize,
    /// The whole buffer D in bytes (see [`layout_count`]).
    pub bytes: usize,
    /// Element type.
    pub dtype: DataType,
    /// Root of rooted collectives.
    pub root: usize,
    /// Whether to plan the in-place variant.
    pub in_place: bool,
    /// The machine model (across hosts, with `hosts`).
    pub model: CostModel,
    /// Where the ranks run, if planned on several hosts.
    pub hosts: Option<HostMap>,
    /// Rates inside a host (with `hosts`).
    pub local_model: CostModel,
}

/// One algorithm's plan.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PlanRow {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Steps, bytes, messages and predicted time.
    #[serde(flatten)]
    pub cost: Cost,
    /// The verifier's verdict; `None` when it was not run.
    pub verified: Option<bool>,
    /// Why verification failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_error: Option<String>,
    /// Whether this is the cheapest predicted algorithm.
    pub cheapest: bool,
    /// Whether every host was priced; `false`: a spread sample of hosts, totals scaled
    /// to the whole job (as `simulate` marks it).
    pub exact: bool,
    /// The hierarchical schedule's level algorithms, each priced at its level's rates
    /// (`local/global`); `None` for flat algorithms and one-level groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub levels: Option<String>,
}

/// Every algorithm that serves the collective, in [`Algorithm::ALL`] order.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The layout planned.
    pub layout: Layout,
    /// One row per algorithm.
    pub rows: Vec<PlanRow>,
    /// The serving algorithms left out at this size, and why ([`left_out`]).
    pub left_out: Vec<(Algorithm, String)>,
}

/// rcoll's `Layout::count` for a whole buffer of `bytes`: the vector for all_reduce,
/// reduce and broadcast, but the per-rank block for the collectives with one block per
/// rank (so that `bytes` is the whole buffer there too, as in nccl-tests).
pub fn layout_count(
    collective: Collective,
    bytes: usize,
    elem_size: usize,
    nranks: usize,
) -> usize {
    let elems = bytes / elem_size.max(1);
    match collective {
        Collective::AllGather
        | Collective::ReduceScatter
        | Collective::Gather
        | Collective::Scatter
        | Collective::AllToAll => elems / nranks.max(1),
        Collective::Barrier => 0,
        _ => elems,
    }
}

/// Why `algorithm` is left out of a plan of `collective` on `nranks` ranks, if it is:
/// what takes p^2 work per rank to price would take minutes and gigabytes at scale
/// ([`rcoll::simulate::price`] builds a rank's schedule and those of the peers it hears
/// from), and `auto` never runs the quadratic algorithms there.
pub fn left_out(algorithm: Algorithm, collective: Collective, nranks: usize) -> Option<String> {
    if quadratic_beyond_limit(algorithm, nranks) {
        Some(format!(
            "over {QUADRATIC_LIMIT} ranks: p^2 messages (auto leaves it out there too)"
        ))
    } else if algorithm == Algorithm::NaiveRing && nranks > CHAIN_LIMIT {
        Some(format!(
            "over {CHAIN_LIMIT} ranks: p steps per rank, p^2 to price, and the slowest \
             algorithm long before"
        ))
    } else if collective == Collective::AllToAll && nranks > ALL_TO_ALL_LIMIT {
        Some(format!(
            "all_to_all over {ALL_TO_ALL_LIMIT} ranks: every rank hears from every other, \
             p schedules of p steps to price each rank"
        ))
    } else {
        None
    }
}

/// Beyond this many ranks naive_ring is left out: its chains give every rank a schedule
/// of p steps (see [`left_out`]).
pub const CHAIN_LIMIT: usize = 4096;

/// Beyond this many ranks all_to_all is not priced (see [`left_out`]): at this size a plan
/// takes a few seconds.
pub const ALL_TO_ALL_LIMIT: usize = 2048;

/// Prices every serving algorithm with [`rcoll::simulate::price`] (the pricer `simulate`
/// and `auto` use: schedules streamed one rank at a time, exact while the job fits its
/// budget, a spread sample of hosts beyond it) and verifies those the verifier can model.
/// Without `hosts` every rank is a host of its own: every pair at the model's rates.
pub fn plan(spec: &PlanSpec) -> Result<Plan, BenchError> {
    let elem_size = spec.dtype.size();
    let layout = Layout {
        collective: spec.collective,
        nranks: spec.nranks,
        count: layout_count(spec.collective, spec.bytes, elem_size, spec.nranks),
        root: Rank::from(spec.root),
        in_place: spec.in_place,
    };
    let flat;
    let (hosts, local) = match &spec.hosts {
        Some(hosts) => (hosts, spec.local_model),
        None => {
            flat = HostMap::blocks(&vec![1; spec.nranks]);
            // No pair shares a host, so the local rates price nothing; without a cache
            // speedup they leave the model's reduction rate as it is.
            let local = CostModel {
                cache_speedup: 1.0,
                ..spec.model
            };
            (&flat, local)
        }
    };
    let levels = Levels {
        hosts,
        local,
        receivers_read: false,
        level_algorithms: None,
    };
    let mut rows = Vec::new();
    let mut omitted = Vec::new();
    let mut ring: Option<Pricing> = None;
    for algorithm in Algorithm::ALL
        .into_iter()
        .filter(|a| a.serves(layout.collective))
    {
        if let Some(why) = left_out(algorithm, layout.collective, layout.nranks) {
            omitted.push((algorithm, why));
            continue;
        }
        // With one level the hierarchical schedule is the flat ring's: priced once.
        let reuse = (algorithm == Algorithm::Hierarchical && !has_levels(hosts))
            .then(|| ring.clone())
            .flatten();
        let priced = match reuse {
            Some(priced) => priced,
            None => price(
                algorithm,
                &layout,
                elem_size,
                &spec.model,
                &levels,
                DEFAULT_BUDGET,
            )
            .map_err(|e| usage(e.to_string()))?,
        };
        if algorithm == Algorithm::Ring {
            ring = Some(priced.clone());
        }
        let (verified, verify_error) = if layout.nranks <= MAX_RANKS {
            let schedules = algorithm
                .schedules_levels(
                    &layout,
                    spec.hosts.as_ref(),
                    priced.levels.unwrap_or_default(),
                )
                .map_err(|e| usage(e.to_string()))?;
            if verifiable(&layout, &schedules) {
                match verify(&layout, &schedules) {
                    Ok(()) => (Some(true), None),
                    Err(e) => (Some(false), Some(e.to_string())),
                }
            } else {
                (None, None)
            }
        } else {
            (None, None)
        };
        let mut cost = priced.cost.clone();
        if spec.hosts.is_none() {
            // Hosts of one rank are how a flat plan is priced, not hosts: nothing crosses.
            cost.cross_host_messages = 0;
            cost.cross_host_bytes = 0;
        }
        rows.push(PlanRow {
            algorithm,
            exact: priced.is_exact(),
            cost,
            verified,
            verify_error,
            cheapest: false,
            levels: priced.levels.map(|l| l.to_string()),
        });
    }
    let cheapest = rows
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.cost.predicted_us.total_cmp(&b.1.cost.predicted_us))
        .map(|(i, _)| i);
    if let Some(row) = cheapest.and_then(|i| rows.get_mut(i)) {
        row.cheapest = true;
    }
    Ok(Plan {
        layout,
        rows,
        left_out: omitted,
    })
}

/// Whether the verifier can model these schedules: at most [`MAX_RANKS`] ranks and
/// buffers that fit the memory budget.
fn verifiable(layout: &Layout, schedules: &[rcoll::schedule::Schedule]) -> bool {
    if layout.nranks > MAX_RANKS {
        return false;
    }
    let elements: usize = schedules
        .iter()
        .map(|s| {
            let b = layout.buffers(s.rank);
            b.input.len + b.output.len + b.storage_len + s.scratch_len
        })
        .fold(0, usize::saturating_add);
    elements <= VERIFY_BUDGET_ELEMENTS
}

/// The plan as a table, with a header line naming the collective, size and model.
pub fn render_text(spec: &PlanSpec, plan: &Plan) -> String {
    let l = &plan.layout;
    let per_block = matches!(
        l.collective,
        Collective::AllGather
            | Collective::ReduceScatter
            | Collective::Gather
            | Collective::Scatter
            | Collective::AllToAll
    );
    let shape = if per_block {
        format!(
            "{} x {} per rank block, {} in all",
            l.count,
            spec.dtype,
            l.count * l.nranks
        )
    } else {
        format!("{} x {}", l.count, spec.dtype)
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# plan {}: ranks {}, bytes {} ({shape}){}{}",
        l.collective,
        l.nranks,
        spec.bytes,
        if l.collective.is_rooted() {
            format!(", root {}", spec.root)
        } else {
            String::new()
        },
        if l.in_place { ", in place" } else { "" },
    );
    let m = &spec.model;
    let _ = writeln!(
        out,
        "# model: alpha {} us, bandwidth {} Gbit/s, reduce {} GB/s, {} us per message sent or received",
        m.alpha_us, m.bandwidth_gbps, m.reduce_gbytes_per_s, m.overhead_us
    );
    if let Some(hosts) = &spec.hosts {
        let lm = &spec.local_model;
        let _ = writeln!(
            out,
            "# hosts: {}; inside a host: alpha {} us, bandwidth {} Gbit/s, {} us per message; \
             across: the model above, one link per host",
            hosts.describe(),
            lm.alpha_us,
            lm.bandwidth_gbps,
            lm.overhead_us
        );
        let order: Vec<String> = hosts.ring_order().iter().map(|r| r.0.to_string()).collect();
        let (host_hops, rack_hops) = hosts.ring_crossings();
        let racks = if hosts.nracks() > 1 {
            format!(", {rack_hops} between racks ({} racks)", hosts.nracks())
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "# ring order ({}): {}; a trip around it crosses hosts {host_hops} times{racks}",
            if hosts.ring_is_rank_order() {
                "rank order"
            } else {
                "by network"
            },
            order.join(" "),
        );
    }
    let header = [
        "algorithm",
        "steps",
        "total_bytes",
        "max_step_bytes_per_rank",
        "max_bytes_sent_per_rank",
        "messages",
        "cross_host_messages",
        "predicted_us",
        "verified",
    ];
    let cells: Vec<[String; 9]> = plan
        .rows
        .iter()
        .map(|r| {
            [
                match &r.levels {
                    Some(l) => format!(
                        "{} {}({l})",
                        if r.cheapest { '*' } else { ' ' },
                        r.algorithm
                    ),
                    None => format!("{} {}", if r.cheapest { '*' } else { ' ' }, r.algorithm),
                },
                r.cost.steps.to_string(),
                r.cost.total_bytes.to_string(),
                r.cost.max_step_bytes_per_rank.to_string(),
                r.cost.max_bytes_sent_per_rank.to_string(),
                r.cost.messages.to_string(),
                if spec.hosts.is_some() {
                    r.cost.cross_host_messages.to_string()
                } else {
                    "-".into()
                },
                format!(
                    "{:.2}{}",
                    r.cost.predicted_us,
                    if r.exact { "" } else { "~" }
                ),
                match r.verified {
                    Some(true) => "yes".into(),
                    Some(false) => "NO".into(),
                    None => "-".into(),
                },
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    widths[0] += 2;
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let line = |row: &[String]| {
        let mut s = format!("{:<w$}", row[0], w = widths[0]);
        for (c, w) in row.iter().zip(widths).skip(1) {
            let _ = write!(s, "  {c:>w$}");
        }
        s
    };
    let head: Vec<String> = std::iter::once(format!("  {}", header[0]))
        .chain(header[1..].iter().map(|h| (*h).to_owned()))
        .collect();
    let _ = writeln!(out, "{}", line(&head));
    for row in &cells {
        let _ = writeln!(out, "{}", line(row));
    }
    let _ = writeln!(out, "# * = cheapest predicted; verified - = not verified (over {MAX_RANKS} ranks or too large to model)");
    if plan.rows.iter().any(|r| !r.exact) {
        let _ = writeln!(
            out,
            "# ~ = priced on a spread sample of hosts, totals scaled to the whole job"
        );
    }
    for (a, why) in &plan.left_out {
        let _ = writeln!(out, "# {a} left out: {why}");
    }
    for r in &plan.rows {
        if let Some(e) = &r.verify_error {
            let _ = writeln!(out, "# {} failed verification: {e}", r.algorithm);
        }
    }
    out
}

/// The plan as a JSON array, one object per algorithm.
pub fn render_json(plan: &Plan) -> Result<String, BenchError> {
    Ok(serde_json::to_string_pretty(&plan.rows)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lecture() -> Plan {
        plan(&PlanSpec {
            collective: Collective::AllReduce,
            nranks: 5,
            bytes: 5_000_000,
            dtype: DataType::F32,
            root: 0,
            in_place: false,
            model: CostModel::default(),
            hosts: None,
            local_model: CostModel::shared_memory(),
        })
        .unwrap()
    }

    fn row(plan: &Plan, a: Algorithm) -> &PlanRow {
        plan.rows.iter().find(|r| r.algorithm == a).unwrap()
    }

    #[test]
    fn all_reduce_of_5_ranks_matches_the_lecture() {
        let (d, p) = (5_000_000u64, 5u64);
        let plan = lecture();
        assert_eq!(plan.layout.count, 1_250_000);
        let names: Vec<Algorithm> = plan.rows.iter().map(|r| r.algorithm).collect();
        assert_eq!(names, Algorithm::ALL, "every algorithm serves all_reduce");

        let mesh = &row(&plan, Algorithm::Mesh).cost;
        assert_eq!(mesh.steps, 1);
        assert_eq!(mesh.total_bytes, d * p * (p - 1));
        assert_eq!(mesh.total_bytes, 100_000_000);

        let single_root = &row(&plan, Algorithm::SingleRoot).cost;
        assert_eq!(single_root.steps, 2);
        assert_eq!(single_root.total_bytes, 2 * d * (p - 1));

        let ring = &row(&plan, Algorithm::Ring).cost;
        assert_eq!(ring.steps, 2 * (p as usize - 1));
        assert_eq!(ring.max_step_bytes_per_rank, d / p);
        assert_eq!(ring.total_bytes, 40_000_000);

        let naive = &row(&plan, Algorithm::NaiveRing).cost;
        assert_eq!(naive.steps, 8);
        assert_eq!(naive.max_step_bytes_per_rank, d);

        // A binary tree over 5 ranks is 3 levels deep: up and down is O(log p) steps.
        let tree = &row(&plan, Algorithm::Tree).cost;
        assert!(tree.steps >= 2 && tree.steps <= 6, "{}", tree.steps);

        assert!(plan.rows.iter().all(|r| r.verified == Some(true)));
        assert_eq!(plan.rows.iter().filter(|r| r.cheapest).count(), 1);
    }

    /// 2 hosts x 2 ranks: the hierarchical all_reduce sends each host's link 2(h-1)/h of
    /// the vector (half of it here, both ways), the flat ring the whole of it; the mesh
    /// of 8 bytes crosses hosts 8 times (each rank to the 2 ranks of the other host).
    #[test]
    fn on_two_hosts_the_table_counts_what_crosses_them() {
        let spec = |bytes: usize| PlanSpec {
            collective: Collective::AllReduce,
            nranks: 4,
            bytes,
            dtype: DataType::F32,
            root: 0,
            in_place: false,
            model: CostModel::tcp(),
            hosts: Some(HostMap::blocks(&[2, 2])),
            local_model: CostModel::shared_memory(),
        };
        let big = plan(&spec(64 << 20)).unwrap();
        let d = 64u64 << 20;
        let hier = &row(&big, Algorithm::Hierarchical).cost;
        let ring = &row(&big, Algorithm::Ring).cost;
        assert_eq!(hier.cross_host_bytes, 2 * d, "{hier:?}");
        // Ranks 1 and 3 send every one of their 6 chunks of d/4 to the other host.
        assert_eq!(ring.cross_host_bytes, 2 * 6 * (d / 4), "{ring:?}");
        assert!(hier.predicted_us < ring.predicted_us);
        assert!(big.rows.iter().all(|r| r.verified != Some(false)));
        let small = plan(&spec(8)).unwrap();
        assert_eq!(row(&small, Algorithm::Mesh).cost.cross_host_messages, 8);
        assert!(small.rows.iter().all(|r| r.verified == Some(true)));
        assert!(render_text(&spec(8), &small).contains("cross_host_messages"));
        // The hierarchical row names the algorithm each level got: at 8 bytes the mesh
        // at both (one round each), verified like the others.
        let hier = row(&small, Algorithm::Hierarchical);
        assert_eq!(hier.levels.as_deref(), Some("mesh/mesh"));
        assert_eq!(hier.cost.steps, 3, "{:?}", hier.cost);
        assert!(render_text(&spec(8), &small).contains("hierarchical(mesh/mesh)"));
        assert_eq!(row(&small, Algorithm::Ring).levels, None);
    }

    /// Plans price with `simulate`'s streaming pricer; within its budget that is exactly
    /// what pricing every rank's schedule at once gives (`cost_levels`, the pricer plans
    /// used before), flat and over hosts, for every algorithm and collective.
    #[test]
    fn plans_price_as_every_schedule_priced_at_once() {
        use rcoll::schedule::cost::cost_levels;
        for hosts in [
            None,
            Some(HostMap::blocks(&[3, 2])),
            Some(HostMap::cyclic(8, 2)),
        ] {
            let n = hosts.as_ref().map_or(5, HostMap::nranks);
            for collective in Collective::SCHEDULED {
                for bytes in [8, 1 << 20] {
                    let spec = PlanSpec {
                        collective,
                        nranks: n,
                        bytes,
                        dtype: DataType::F32,
                        root: n - 1,
                        in_place: false,
                        model: CostModel::tcp(),
                        hosts: hosts.clone(),
                        local_model: CostModel::shared_memory(),
                    };
                    let planned = plan(&spec).unwrap();
                    assert!(planned.left_out.is_empty());
                    for r in &planned.rows {
                        let lv = hosts.as_ref().map(|h| Levels {
                            hosts: h,
                            local: spec.local_model,
                            receivers_read: false,
                            level_algorithms: None,
                        });
                        let chosen = match (&lv, r.algorithm) {
                            (Some(l), Algorithm::Hierarchical) if has_levels(l.hosts) => {
                                rcoll::select::level_algorithms(&planned.layout, 4, &spec.model, l)
                            }
                            _ => Default::default(),
                        };
                        let all = r
                            .algorithm
                            .schedules_levels(&planned.layout, hosts.as_ref(), chosen)
                            .unwrap();
                        let whole = cost_levels(&all, 4, &spec.model, lv.as_ref());
                        let what = format!("{} {collective} {bytes} B on {hosts:?}", r.algorithm);
                        assert!(r.exact, "{what}");
                        assert_eq!(r.cost.steps, whole.steps, "{what}");
                        assert_eq!(r.cost.total_bytes, whole.total_bytes, "{what}");
                        assert_eq!(r.cost.messages, whole.messages, "{what}");
                        assert_eq!(r.cost.cross_host_bytes, whole.cross_host_bytes, "{what}");
                        let (x, y) = (r.cost.predicted_us, whole.predicted_us);
                        assert!((x - y).abs() <= 1e-9 * y.max(1.0), "{what}: {x} vs {y}");
                    }
                }
            }
        }
    }

    /// Past the verifier and the quadratic limit: the quadratic algorithms are left out
    /// with a line saying why, the rest priced (sampled hosts marked), in bounded memory.
    #[test]
    fn thousands_of_ranks_are_planned_and_the_quadratic_left_out() {
        let spec = PlanSpec {
            collective: Collective::AllReduce,
            nranks: 2048,
            bytes: 1 << 20,
            dtype: DataType::F32,
            root: 0,
            in_place: false,
            model: CostModel::default(),
            hosts: None,
            local_model: CostModel::shared_memory(),
        };
        let planned = plan(&spec).unwrap();
        let out: Vec<Algorithm> = planned.left_out.iter().map(|(a, _)| *a).collect();
        assert_eq!(out, [Algorithm::Mesh, Algorithm::SingleRoot]);
        let rows: Vec<Algorithm> = planned.rows.iter().map(|r| r.algorithm).collect();
        assert!(rows.contains(&Algorithm::Ring) && rows.contains(&Algorithm::NaiveRing));
        // A ring of 2048 ranks: 2(p-1) steps, each rank sending 2(p-1)/p of the vector.
        let ring = row(&planned, Algorithm::Ring);
        assert_eq!(ring.cost.steps, 2 * 2047);
        let d = (1u64 << 20) / 4 / 2048 * 2048 * 4;
        assert_eq!(ring.cost.max_bytes_sent_per_rank, 2 * 2047 * (d / 2048));
        let text = render_text(&spec, &planned);
        assert!(text.contains("# mesh left out: over 64 ranks"), "{text}");
        assert!(text.contains("# single_root left out"), "{text}");
    }

    #[test]
    fn per_block_collectives_split_the_whole_buffer() {
        assert_eq!(layout_count(Collective::AllGather, 4000, 4, 5), 200);
        assert_eq!(layout_count(Collective::AllToAll, 4000, 4, 5), 200);
        assert_eq!(layout_count(Collective::Broadcast, 4000, 4, 5), 1000);
        assert_eq!(layout_count(Collective::Barrier, 4000, 4, 5), 0);
    }

    #[test]
    fn beyond_the_verifier_rows_say_not_verified() {
        let plan = plan(&PlanSpec {
            collective: Collective::AllReduce,
            nranks: 65,
            bytes: 1 << 10,
            dtype: DataType::F32,
            root: 0,
            in_place: false,
            model: CostModel::default(),
            hosts: None,
            local_model: CostModel::shared_memory(),
        })
        .unwrap();
        assert!(plan.rows.iter().all(|r| r.verified.is_none()));
        let text = render_json(&plan).unwrap();
        assert!(text.contains("\"verified\": null"));
    }
}
