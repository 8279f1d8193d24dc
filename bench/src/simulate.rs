//! `rcoll-bench simulate`: every algorithm's real schedules priced from 2 to 65,536 ranks
//! on a two-level network (hosts of `--ranks-per-host` ranks), a table and a PNG.
//!
//! Each rank count is priced with [`rcoll::simulate::price`], which streams the schedules
//! one rank at a time (exactly, or over a spread sample of hosts when the job is too large
//! to visit every primitive: the table marks those). Two figures per algorithm: the time
//! of a small message (latency: how the number of rounds grows with p) and the bus
//! bandwidth of a large one (how the bytes through the busiest link grow with p).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use plotters::prelude::*;
use rcoll::schedule::cost::{CostModel, Levels};
use rcoll::simulate::{price, Pricing, DEFAULT_BUDGET};
use rcoll::transport::hosts::HostMap;
use rcoll::{Algorithm, Collective, DataType, Layout, Rank};

use crate::args::SimulateArgs;
use crate::busbw;
use crate::error::{usage, BenchError};
use crate::output::print;
use crate::plan::{layout_count, left_out, ALL_TO_ALL_LIMIT, CHAIN_LIMIT};
use crate::plot;
use rcoll::select::QUADRATIC_LIMIT;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimulateSpec {
    /// The collective.
    pub collective: Collective,
    /// Rank counts, ascending.
    pub ranks: Vec<usize>,
    /// Ranks per host (the last host of a count that is not a multiple has fewer).
    pub ranks_per_host: usize,
    /// The small size (latency), bytes.
    pub small: usize,
    /// The large size (bandwidth), bytes.
    pub large: usize,
    /// Element type.
    pub dtype: DataType,
    /// The algorithms compared.
    pub algorithms: Vec<Algorithm>,
    /// Rates across hosts.
    pub model: CostModel,
    /// Rates inside a host.
    pub local_model: CostModel,
    /// Primitives visited per pricing before hosts are sampled.
    pub budget: usize,
}

/// One algorithm at one rank count.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Cell {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Ranks.
    pub ranks: usize,
    /// Hosts.
    pub hosts: usize,
    /// Predicted time of the small size, microseconds.
    pub small_us: f64,
    /// Rounds of the small size.
    pub small_steps: usize,
    /// Predicted time of the large size, microseconds.
    pub large_us: f64,
    /// Bus bandwidth of the large size, GB/s.
    pub large_busbw: f64,
    /// Hosts priced (all of them, or a sample) for the large size.
    pub hosts_priced: usize,
    /// Seconds the two pricings took.
    pub seconds: f64,
    /// Hierarchical only: the levels' algorithms (local/global) at the small and the large
    /// size, as the communicator chooses them.
    pub levels: Option<(String, String)>,
}

impl SimulateArgs {
    /// Checks the flags and builds the spec.
    pub fn into_spec(self) -> Result<SimulateSpec, BenchError> {
        if self.ranks_per_host == 0 {
            return Err(usage("--ranks-per-host must be at least 1"));
        }
        if self.min_ranks < 2 || self.min_ranks > self.max_ranks {
            return Err(usage(format!(
                "--min-ranks {} and --max-ranks {}: need 2 <= min <= max",
                self.min_ranks, self.max_ranks
            )));
        }
        if self.max_ranks > 1 << 20 {
            return Err(usage("--max-ranks is at most 1048576"));
        }
        let mut ranks = Vec::new();
        let mut p = self.min_ranks.next_power_of_two();
        if p != self.min_ranks {
            ranks.push(self.min_ranks);
        }
        while p <= self.max_ranks {
            ranks.push(p);
            p *= 2;
        }
        if ranks.last() != Some(&self.max_ranks) {
            ranks.push(self.max_ranks);
        }
        let algorithms: Vec<Algorithm> = match &self.algo {
            Some(list) => list
                .split(',')
                .map(|a| {
                    a.trim()
                        .parse::<Algorithm>()
                        .map_err(|e| usage(e.to_string()))
                })
                .collect::<Result<_, _>>()?,
            None => Algorithm::ALL.to_vec(),
        };
        let algorithms: Vec<Algorithm> = algorithms
            .into_iter()
            .filter(|a| a.serves(self.collective))
            .collect();
        if algorithms.is_empty() {
            return Err(usage(format!(
                "no chosen algorithm serves {}",
                self.collective
            )));
        }
        let (model, local_model) = self.model.resolve()?;
        if self.large < self.small {
            return Err(usage("--large must be at least --small"));
        }
        Ok(SimulateSpec {
            collective: self.collective,
            ranks,
            ranks_per_host: self.ranks_per_host,
            small: self.small,
            large: self.large,
            dtype: self.dtype,
            algorithms,
            model,
            local_model,
            budget: self.budget.unwrap_or(DEFAULT_BUDGET),
        })
    }
}

/// Hosts of `per_host` ranks in blocks, the last one short if `p` is not a multiple.
pub fn host_map(p: usize, per_host: usize) -> HostMap {
    let full = p / per_host;
    let mut sizes = vec![per_host; full];
    if p % per_host != 0 {
        sizes.push(p % per_host);
    }
    HostMap::blocks(&sizes)
}

/// Prices every algorithm at every rank count, calling `row` after each rank count.
pub fn simulate(
    spec: &SimulateSpec,
    mut row: impl FnMut(&[Cell]),
) -> Result<Vec<Cell>, BenchError> {
    let elem = spec.dtype.size();
    let mut cells = Vec::new();
    for &p in &spec.ranks {
        let hosts = host_map(p, spec.ranks_per_host);
        let levels = Levels {
            hosts: &hosts,
            local: spec.local_model,
            receivers_read: false,
            level_algorithms: None,
        };
        let mut this_row = Vec::new();
        for &a in &spec.algorithms {
            if left_out(a, spec.collective, p).is_some() {
                continue;
            }
            if a == Algorithm::Hierarchical && !rcoll::algorithm::hierarchical::has_levels(&hosts) {
                continue;
            }
            let layout = |bytes: usize| Layout {
                collective: spec.collective,
                nranks: p,
                count: layout_count(spec.collective, bytes, elem, p),
                root: Rank(0),
                in_place: false,
            };
            let started = Instant::now();
            let priced = |bytes: usize| -> Result<Pricing, BenchError> {
                price(a, &layout(bytes), elem, &spec.model, &levels, spec.budget)
                    .map_err(|e| usage(format!("{a} on {p} ranks: {e}")))
            };
            let small = priced(spec.small)?;
            let large = priced(spec.large)?;
            let algbw = busbw::gbytes_per_s(spec.large, large.cost.predicted_us);
            this_row.push(Cell {
                algorithm: a,
                ranks: p,
                hosts: hosts.nhosts(),
                small_us: small.cost.predicted_us,
                small_steps: small.cost.steps,
                large_us: large.cost.predicted_us,
                large_busbw: algbw * busbw::factor(spec.collective, p),
                hosts_priced: large.hosts_priced.min(small.hosts_priced),
                seconds: started.elapsed().as_secs_f64(),
                levels: small
                    .levels
                    .zip(large.levels)
                    .map(|(s, l)| (s.to_string(), l.to_string())),
            });
        }
        row(&this_row);
        cells.extend(this_row);
    }
    Ok(cells)
}

/// The table's header lines.
pub fn header(spec: &SimulateSpec) -> String {
    let mut s = String::new();
    let m = &spec.model;
    let l = &spec.local_model;
    let _ = writeln!(
        s,
        "# rcoll simulate {}: {} ranks per host; across hosts {} us, {} Gbit/s per host link; \
         inside {} us, {} Gbit/s; reduce {} GB/s; {} / {} us per message across / inside; {}",
        spec.collective,
        spec.ranks_per_host,
        m.alpha_us,
        m.bandwidth_gbps,
        l.alpha_us,
        l.bandwidth_gbps,
        m.reduce_gbytes_per_s,
        m.overhead_us,
        l.overhead_us,
        spec.dtype
    );
    let _ = writeln!(
        s,
        "# per algorithm: {} time (us) and rounds | {} busbw (GB/s); * = hosts sampled; \
         seconds = time to price both; mesh and single_root only up to {QUADRATIC_LIMIT} ranks \
         (as auto), naive_ring up to {CHAIN_LIMIT}, all_to_all up to {ALL_TO_ALL_LIMIT}; levels = hierarchical's local/global \
         algorithms at each size, chosen per level as auto chooses them",
        size_name(spec.small),
        size_name(spec.large)
    );
    let _ = writeln!(
        s,
        "# {:>7} {:>6}  {:<18} {:>12} {:>7} {:>11} {:>8}  levels",
        "ranks", "hosts", "algorithm", "small_us", "rounds", "busbw", "seconds"
    );
    s
}

/// One rank count's lines.
pub fn render_row(cells: &[Cell]) -> String {
    let mut s = String::new();
    for c in cells {
        let sampled = if c.hosts_priced < c.hosts { "*" } else { " " };
        let levels = c
            .levels
            .as_ref()
            .map_or_else(String::new, |(small, large)| format!("  {small}, {large}"));
        let _ = writeln!(
            s,
            "  {:>7} {:>6}  {:<18} {:>12.2} {:>7} {:>10.2}{sampled} {:>8.3}{levels}",
            c.ranks,
            c.hosts,
            c.algorithm.name(),
            c.small_us,
            c.small_steps,
            c.large_busbw,
            c.seconds
        );
    }
    s
}

fn size_name(bytes: usize) -> String {
    const UNITS: [(&str, usize); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, scale) in UNITS {
        if bytes >= scale && bytes % scale == 0 {
            return format!("{} {unit}", bytes / scale);
        }
    }
    format!("{bytes} B")
}

/// `rcoll-bench simulate`.
pub fn run(args: SimulateArgs) -> Result<(), BenchError> {
    let plot_path = args.plot.clone();
    let json_path = args.json.clone();
    let spec = args.into_spec()?;
    if let Some(path) = &plot_path {
        plot::prepare(path)?;
    }
    print(&header(&spec));
    let cells = simulate(&spec, |row| print(&render_row(row)))?;
    let slowest = cells
        .iter()
        .filter(|c| c.ranks == *spec.ranks.last().unwrap_or(&0))
        .map(|c| (c.seconds, c.algorithm))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((secs, a)) = slowest {
        print(&format!(
            "# slowest pricing at {} ranks: {a}, {secs:.2} s for both sizes\n",
            spec.ranks.last().unwrap_or(&0)
        ));
    }
    if let Some(path) = &json_path {
        let text = serde_json::to_string_pretty(&cells)?;
        std::fs::write(path, text).map_err(|source| BenchError::Write {
            path: path.clone(),
            source,
        })?;
    }
    if let Some(path) = &plot_path {
        chart(&spec, &cells, path)?;
        print(&format!("# chart: {}\n", path.display()));
    }
    Ok(())
}

/// Two panels over ranks (log2): the small size's time (log scale) and the large size's
/// busbw, one line per algorithm.
fn chart(spec: &SimulateSpec, cells: &[Cell], path: &Path) -> Result<(), BenchError> {
    let plot_error = |e: &dyn std::fmt::Display| BenchError::Plot {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let lines: Vec<(Algorithm, Vec<&Cell>)> = spec
        .algorithms
        .iter()
        .map(|&a| (a, cells.iter().filter(|c| c.algorithm == a).collect()))
        .filter(|(_, v): &(Algorithm, Vec<&Cell>)| !v.is_empty())
        .collect();
    let x = |c: &Cell| (c.ranks as f64).log2();
    let (lo, hi) = cells
        .iter()
        .map(x)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if !lo.is_finite() {
        return Err(plot_error(&"nothing to plot"));
    }
    let (lo, hi) = (lo - 0.3, hi + 0.3);
    let positive = |v: f64| v.is_finite() && v > 0.0;
    let t_lo = cells
        .iter()
        .map(|c| c.small_us)
        .filter(|v| positive(*v))
        .fold(f64::INFINITY, f64::min);
    let t_hi = cells
        .iter()
        .map(|c| c.small_us)
        .filter(|v| positive(*v))
        .fold(0.0, f64::max);
    let (t_lo, t_hi) = if t_lo.is_finite() {
        (t_lo / 1.5, t_hi * 1.5)
    } else {
        (1.0, 10.0)
    };
    let b_hi = cells
        .iter()
        .map(|c| c.large_busbw)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let b_hi = if b_hi > 0.0 { b_hi * 1.15 } else { 1.0 };

    let root = BitMapBackend::new(path, (1800, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(&e))?;
    let title = format!(
        "rcoll {} simulated: {} ranks per host, {} Gbit/s host links",
        spec.collective, spec.ranks_per_host, spec.model.bandwidth_gbps
    );
    let root = root
        .titled(&title, ("sans-serif", 30))
        .map_err(|e| plot_error(&e))?;
    let (left, right) = root.split_horizontally(900);
    let labels = ((hi - lo).ceil() as usize).clamp(2, 17);

    let mut time = ChartBuilder::on(&left)
        .caption(
            format!("{} time (us, log scale)", size_name(spec.small)),
            ("sans-serif", 22),
        )
        .margin(20)
        .x_label_area_size(56)
        .y_label_area_size(80)
        .build_cartesian_2d(lo..hi, (t_lo..t_hi).log_scale())
        .map_err(|e| plot_error(&e))?;
    time.configure_mesh()
        .x_desc("ranks (log2 scale)")
        .y_desc("time (us)")
        .axis_desc_style(("sans-serif", 20))
        .label_style(("sans-serif", 16))
        .x_labels(labels)
        .x_label_formatter(&|v| plot::bytes_label(*v))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(|e| plot_error(&e))?;
    let mut bw = ChartBuilder::on(&right)
        .caption(
            format!("{} busbw (GB/s)", size_name(spec.large)),
            ("sans-serif", 22),
        )
        .margin(20)
        .x_label_area_size(56)
        .y_label_area_size(80)
        .build_cartesian_2d(lo..hi, 0.0..b_hi)
        .map_err(|e| plot_error(&e))?;
    bw.configure_mesh()
        .x_desc("ranks (log2 scale)")
        .y_desc("busbw (GB/s)")
        .axis_desc_style(("sans-serif", 20))
        .label_style(("sans-serif", 16))
        .x_labels(labels)
        .x_label_formatter(&|v| plot::bytes_label(*v))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(|e| plot_error(&e))?;
    for (i, (a, line)) in lines.iter().enumerate() {
        let colour = plot::COLOURS[i % plot::COLOURS.len()];
        let t: Vec<(f64, f64)> = line
            .iter()
            .filter(|c| positive(c.small_us))
            .map(|c| (x(c), c.small_us))
            .collect();
        let b: Vec<(f64, f64)> = line.iter().map(|c| (x(c), c.large_busbw)).collect();
        time.draw_series(LineSeries::new(t, colour.stroke_width(3)).point_size(4))
            .map_err(|e| plot_error(&e))?
            .label(a.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 28, y)], colour.stroke_width(3))
            });
        bw.draw_series(LineSeries::new(b, colour.stroke_width(3)).point_size(4))
            .map_err(|e| plot_error(&e))?;
    }
    time.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 18))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(|e| plot_error(&e))?;
    root.present().map_err(|e| plot_error(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(collective: Collective, max: usize) -> SimulateSpec {
        SimulateSpec {
            collective,
            ranks: (1..=max.trailing_zeros()).map(|k| 1 << k).collect(),
            ranks_per_host: 8,
            small: 8,
            large: 64 << 20,
            dtype: DataType::F32,
            algorithms: vec![Algorithm::Ring, Algorithm::DoubleBinaryTree],
            model: CostModel::default(),
            local_model: CostModel::shared_memory(),
            budget: DEFAULT_BUDGET,
        }
    }

    /// The two shapes the simulation exists to show: the ring's bus bandwidth does not
    /// fall as ranks are added while the size is bandwidth-bound (here to 256 ranks at
    /// 64 MiB, 256 KiB per ring step: beyond, its 2(p-1) latencies take over), and the
    /// double binary tree's rounds grow as log p.
    #[test]
    fn ring_busbw_is_flat_and_tree_rounds_grow_as_log_p() {
        let cells = simulate(&spec(Collective::AllReduce, 4096), |_| {}).expect("simulated");
        let of =
            |a: Algorithm| -> Vec<&Cell> { cells.iter().filter(|c| c.algorithm == a).collect() };
        let ring = of(Algorithm::Ring);
        let across: Vec<f64> = ring
            .iter()
            .filter(|c| c.hosts > 1 && c.ranks <= 256)
            .map(|c| c.large_busbw)
            .collect();
        assert!(across.len() >= 5, "{across:?}");
        let (lo, hi) = across
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(*v), h.max(*v)));
        assert!(
            hi / lo < 1.1,
            "ring busbw across hosts not flat: {across:?}"
        );
        let tree = of(Algorithm::DoubleBinaryTree);
        for c in &tree {
            let log = (c.ranks as f64).log2();
            let per_level = c.small_steps as f64 / log;
            assert!(
                (0.5..=4.0).contains(&per_level),
                "{} ranks: {} rounds is not O(log p)",
                c.ranks,
                c.small_steps
            );
        }
        let ring_small = ring.last().expect("ring").small_steps;
        let tree_small = tree.last().expect("tree").small_steps;
        assert!(
            ring_small > 100 * tree_small,
            "{ring_small} vs {tree_small}"
        );
    }

    /// Hierarchical rows name the levels they priced, chosen per level and size (at 8
    /// bytes not rings: fewer rounds than ring/ring would take).
    #[test]
    fn hierarchical_rows_name_the_levels_chosen_per_size() {
        let spec = SimulateSpec {
            algorithms: vec![Algorithm::Ring, Algorithm::Hierarchical],
            ..spec(Collective::AllReduce, 64)
        };
        let cells = simulate(&spec, |_| {}).expect("simulated");
        let hier: Vec<&Cell> = cells
            .iter()
            .filter(|c| c.algorithm == Algorithm::Hierarchical)
            .collect();
        assert!(!hier.is_empty(), "no hierarchical row");
        for c in &hier {
            let (small, large) = c.levels.as_ref().expect("levels");
            assert_ne!(small, "ring/ring", "{} ranks: 8 B on rings", c.ranks);
            assert!(!large.is_empty());
            assert!(
                render_row(std::slice::from_ref(*c)).contains(&format!("{small}, {large}")),
                "the row shows the levels"
            );
        }
        assert!(cells
            .iter()
            .filter(|c| c.algorithm == Algorithm::Ring)
            .all(|c| c.levels.is_none()));
    }

    #[test]
    fn rank_counts_are_powers_of_two_between_the_bounds() {
        let args = |min: usize, max: usize| SimulateArgs {
            collective: Collective::AllReduce,
            min_ranks: min,
            max_ranks: max,
            ranks_per_host: 8,
            small: 8,
            large: 1 << 20,
            dtype: DataType::F32,
            algo: None,
            model: crate::args::ModelArgs::default(),
            budget: None,
            plot: None,
            json: None,
        };
        assert_eq!(
            args(2, 16).into_spec().expect("ok").ranks,
            vec![2, 4, 8, 16]
        );
        assert_eq!(
            args(3, 20).into_spec().expect("ok").ranks,
            vec![3, 4, 8, 16, 20]
        );
        assert!(args(1, 4).into_spec().is_err());
        assert!(args(8, 4).into_spec().is_err());
    }

    #[test]
    fn uneven_last_hosts() {
        let m = host_map(20, 8);
        assert_eq!(m.nhosts(), 3);
        assert_eq!(m.members(2).len(), 4);
    }
}
