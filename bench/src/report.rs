//! What rank 0 reports: per-size records, the nccl-tests table, and the JSON file.

use std::fmt::Write as _;

use rcoll::{Collective, DataType};

use crate::busbw;
use crate::hosts::{self, RankHost};
use crate::spec::BenchSpec;
use crate::sweep::Step;

/// One size, out of place and in place.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SizeReport {
    /// The collective.
    pub collective: Collective,
    /// Number of ranks.
    pub nranks: usize,
    /// Bytes, nccl-tests' convention: the whole buffer for the blocked collectives.
    pub size: usize,
    /// Elements per rank (the block, for the blocked collectives), as nccl-tests prints.
    pub count: usize,
    /// Element type.
    #[serde(rename = "type")]
    pub dtype: DataType,
    /// The reduction, or `none`.
    pub redop: String,
    /// The root, or -1 for unrooted collectives.
    pub root: i64,
    /// The algorithm rank 0 would use (`p2p` for sendrecv).
    pub algorithm: String,
    /// The transport.
    pub transport: String,
    /// Out of place.
    pub oop: ModeReport,
    /// In place (`None` for sendrecv, which has no in-place form in rcoll's API).
    pub ip: Option<ModeReport>,
    /// `--algo all`: auto and every algorithm, their median times out of place.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compared: Option<Vec<VariantTime>>,
}

impl SizeReport {
    /// One size of `spec`'s run: what every size shares, and this one's measurements.
    pub fn new(
        spec: &BenchSpec,
        nranks: usize,
        (size, count): (usize, usize),
        algorithm: String,
        oop: ModeReport,
        ip: Option<ModeReport>,
    ) -> SizeReport {
        SizeReport {
            collective: spec.collective,
            nranks,
            size,
            count,
            dtype: spec.dtype,
            redop: if spec.collective.reduces() {
                spec.op.to_string()
            } else {
                "none".to_owned()
            },
            root: if spec.collective.is_rooted() {
                spec.root as i64
            } else {
                -1
            },
            algorithm,
            transport: spec.transport.to_owned(),
            oop,
            ip,
            compared: None,
        }
    }
}

/// One variant of an `--algo all` comparison.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct VariantTime {
    /// `auto` or an algorithm's name.
    pub algorithm: String,
    /// Median microseconds of the slowest rank; `None` when a result was wrong.
    pub time_us: Option<f64>,
}

/// Timings of one mode of one size.
///
/// `time_us` is nccl-tests' time: the mean per-iteration time of the slowest rank (the
/// largest of the ranks' means). `min_us`, `max_us` and `p99_us` describe that same rank's
/// individual iterations, so they bracket `time_us`; calls shorter than
/// [`crate::run::BATCH_BELOW`] are timed in batches of [`crate::run::BATCH`], and each
/// then counts its batch's mean (a clock read would be a tenth of such a call).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ModeReport {
    /// Mean microseconds per iteration on the slowest rank.
    pub time_us: f64,
    /// `size / time_us`, GB/s (1e9 bytes per second).
    pub algbw: f64,
    /// `algbw` times the collective's bus factor.
    pub busbw: f64,
    /// Wrong elements summed over ranks (`None`: not checked).
    pub wrong: Option<u64>,
    /// Fastest iteration of the slowest rank.
    pub min_us: f64,
    /// Slowest iteration of the slowest rank.
    pub max_us: f64,
    /// 99th percentile (nearest rank) of the slowest rank's iterations.
    pub p99_us: f64,
    /// The rank whose mean is `time_us`.
    pub slowest_rank: usize,
}

impl ModeReport {
    /// Summarises per-iteration times (`per_rank[r]`, microseconds) of `size` bytes.
    pub fn from_ranks(
        per_rank: &[&[f64]],
        wrong: Option<u64>,
        size: usize,
        collective: Collective,
    ) -> ModeReport {
        let mean = |t: &[f64]| t.iter().sum::<f64>() / t.len().max(1) as f64;
        let (slowest_rank, time_us) = per_rank
            .iter()
            .enumerate()
            .map(|(r, t)| (r, mean(t)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, 0.0));
        let mut times: Vec<f64> = per_rank
            .get(slowest_rank)
            .map_or(Vec::new(), |t| t.to_vec());
        times.sort_by(f64::total_cmp);
        let p99_index = (times.len() * 99).div_ceil(100).saturating_sub(1);
        let algbw = busbw::gbytes_per_s(size, time_us);
        ModeReport {
            time_us,
            algbw,
            busbw: algbw * busbw::factor(collective, per_rank.len()),
            wrong,
            min_us: times.first().copied().unwrap_or(0.0),
            max_us: times.last().copied().unwrap_or(0.0),
            p99_us: times.get(p99_index).copied().unwrap_or(0.0),
            slowest_rank,
        }
    }
}

/// Widths of the table's columns, nccl-tests' `%12li  %12li  %8s  %6s  %6i` and, per mode,
/// `%7s  %6.2f  %6.2f  %6s`.
const PREFIX_WIDTH: usize = 12 + 2 + 12 + 2 + 8 + 2 + 6 + 2 + 6;
const MODE_WIDTH: usize = 2 + 7 + 2 + 6 + 2 + 6 + 2 + 6;
/// The tails after both modes, as OSU's t_min and t_max: each mode's fastest and slowest
/// iteration (`%7s  %7s`), so that a stall of one call in twenty shows beside the mean.
/// After nccl-tests' thirteen columns, which scripts read by position.
const TAILS_WIDTH: usize = 2 * (2 + 7 + 2 + 7);

/// The lines printed before the first row; `ranks[r]` is where rank `r` runs.
pub fn header(spec: &BenchSpec, ranks: &[RankHost]) -> String {
    let algorithm = spec.algorithm.map_or("auto".to_owned(), |a| a.to_string());
    let step = match spec.step {
        Step::Factor(f) => format!("{f}(factor)"),
        Step::Bytes(b) => format!("{b}(bytes)"),
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# rcoll-bench {}: ranks {}, hosts {}, transport {}{}, device {}, algorithm {algorithm}, \
         dtype {}, op {}, root {}",
        spec.collective,
        spec.nranks,
        hosts::count(ranks),
        spec.transport,
        match spec.transport_details.as_str() {
            "" => String::new(),
            d => format!(" ({d})"),
        },
        match (spec.transport, spec.devices.as_slice()) {
            ("local", _) => "-".to_owned(),
            (_, []) => "default".to_owned(),
            (_, names) => names.join(","),
        },
        spec.dtype,
        spec.op,
        spec.root
    );
    let _ = writeln!(
        s,
        "#  minBytes {} maxBytes {} step: {step} warmup iters: {} iters: {} validation: {}",
        spec.minbytes,
        spec.maxbytes,
        spec.warmup,
        spec.iters,
        u8::from(spec.check)
    );
    let _ = writeln!(s, "#");
    let _ = writeln!(s, "# Using ranks");
    for (rank, r) in ranks.iter().enumerate() {
        let _ = write!(s, "#  Rank {rank:>2} Pid {:>7} on {}", r.pid, r.host);
        if !r.place.is_empty() {
            let _ = write!(s, " {}", r.place);
        }
        // With one device the first line says it; with several, each rank's own.
        match spec.device_of(rank) {
            Some(device) if spec.devices.len() > 1 => {
                let _ = writeln!(s, " device {device}");
            }
            _ => s.push('\n'),
        }
    }
    let _ = writeln!(s, "#");
    let groups = format!(
        "#{:pw$}  {:^mw$}  {:^mw$}  {:^tw$}",
        "",
        "out-of-place",
        "in-place",
        "out-of-place    in-place",
        pw = PREFIX_WIDTH - 1,
        mw = MODE_WIDTH - 2,
        tw = TAILS_WIDTH - 2
    );
    let _ = writeln!(s, "{}", groups.trim_end());
    let names = columns(
        ["size", "count", "type", "redop", "root"],
        ["time", "algbw", "busbw", "#wrong"],
        ["min", "max"],
    );
    let units = columns(
        ["(B)", "(elements)", "", "", ""],
        ["(us)", "(GB/s)", "(GB/s)", ""],
        ["(us)", "(us)"],
    );
    let _ = writeln!(s, "#{}  algorithm", &names[1..]);
    let _ = writeln!(s, "#{}", units[1..].trim_end());
    s
}

/// The header cells laid out like a row (the first character becomes `#`).
fn columns(prefix: [&str; 5], mode: [&str; 4], tails: [&str; 2]) -> String {
    let mut s = format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}",
        prefix[0], prefix[1], prefix[2], prefix[3], prefix[4]
    );
    for _ in 0..2 {
        let _ = write!(
            s,
            "  {:>7}  {:>6}  {:>6}  {:>6}",
            mode[0], mode[1], mode[2], mode[3]
        );
    }
    for _ in 0..2 {
        let _ = write!(s, "  {:>7}  {:>7}", tails[0], tails[1]);
    }
    s
}

/// One table row.
pub fn row(r: &SizeReport) -> String {
    let mut s = format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}",
        r.size,
        r.count,
        r.dtype.name(),
        r.redop,
        r.root
    );
    for mode in [Some(&r.oop), r.ip.as_ref()] {
        match mode {
            Some(m) => {
                let wrong = m.wrong.map_or("N/A".to_owned(), |w| w.to_string());
                let _ = write!(
                    s,
                    "  {:>7}  {:>6.2}  {:>6.2}  {:>6}",
                    time(m.time_us),
                    m.algbw,
                    m.busbw,
                    wrong
                );
            }
            None => {
                let _ = write!(s, "  {:>7}  {:>6}  {:>6}  {:>6}", "-", "-", "-", "-");
            }
        }
    }
    for mode in [Some(&r.oop), r.ip.as_ref()] {
        let (min, max) = mode.map_or(("-".to_owned(), "-".to_owned()), |m| {
            (time(m.min_us), time(m.max_us))
        });
        let _ = write!(s, "  {min:>7}  {max:>7}");
    }
    let _ = write!(s, "  {}", r.algorithm);
    s
}

/// nccl-tests' time format: about four significant digits in seven columns.
fn time(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{us:.0}")
    } else if us >= 100.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

/// Wrong elements over every size and mode.
pub fn total_wrong(reports: &[SizeReport]) -> u64 {
    reports
        .iter()
        .flat_map(|r| [Some(&r.oop), r.ip.as_ref()])
        .flatten()
        .filter_map(|m| m.wrong)
        .sum()
}

/// The lines printed after the last row: wrong elements and the mean bus bandwidth over
/// every size and mode (nccl-tests' "Avg bus bandwidth").
pub fn footer(spec: &BenchSpec, reports: &[SizeReport]) -> String {
    let busbws: Vec<f64> = reports
        .iter()
        .flat_map(|r| [Some(&r.oop), r.ip.as_ref()])
        .flatten()
        .map(|m| m.busbw)
        .collect();
    let avg = busbws.iter().sum::<f64>() / busbws.len().max(1) as f64;
    let wrong = total_wrong(reports);
    let verdict = if !spec.check {
        "N/A (-c 0)".to_owned()
    } else if wrong == 0 {
        "0 OK".to_owned()
    } else {
        format!("{wrong} FAILED")
    };
    format!("# Out of bounds values : {verdict}\n# Avg bus bandwidth    : {avg:.4}\n#\n")
}

/// The JSON file: an array with one record per size.
pub fn json(reports: &[SizeReport]) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_rank_sets_the_time() {
        let fast = [1.0, 1.0, 1.0, 1.0];
        let slow: Vec<f64> = (1..=100).map(f64::from).collect();
        let m = ModeReport::from_ranks(&[&fast, &slow], Some(0), 1_000_000, Collective::AllReduce);
        assert_eq!(m.slowest_rank, 1);
        assert!((m.time_us - 50.5).abs() < 1e-9);
        assert_eq!((m.min_us, m.max_us, m.p99_us), (1.0, 100.0, 99.0));
        // 1 MB in 50.5 us is 19.8 GB/s; all_reduce on 2 ranks has factor 1.
        assert!((m.algbw - 1e6 / 50.5e3).abs() < 1e-9);
        assert!((m.busbw - m.algbw).abs() < 1e-12);
    }

    /// One stalled iteration in twenty shows in the row's slowest column, beside a mean
    /// it barely moves; nccl-tests' thirteen columns keep their places.
    #[test]
    fn rows_show_each_modes_fastest_and_slowest_iteration() {
        let mut oop = vec![10.0; 19];
        oop.push(5000.0);
        let ip = [12.0, 11.0, 13.0];
        let mode = |t: &[f64]| ModeReport::from_ranks(&[t], Some(0), 8, Collective::AllReduce);
        let r = SizeReport {
            collective: Collective::AllReduce,
            nranks: 2,
            size: 8,
            count: 2,
            dtype: DataType::F32,
            redop: "sum".into(),
            root: -1,
            algorithm: "ring".into(),
            transport: "local".into(),
            oop: mode(&oop),
            ip: Some(mode(&ip)),
            compared: None,
        };
        let line = row(&r);
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[5], "259.5", "the mean: (19 x 10 + 5000) / 20");
        assert_eq!(f[9], "12.00");
        assert_eq!(&f[13..], ["10.00", "5000.0", "11.00", "13.00", "ring"]);
        let names = columns(
            ["size", "count", "type", "redop", "root"],
            ["time", "algbw", "busbw", "#wrong"],
            ["min", "max"],
        );
        assert_eq!(names.len(), line.len() - "  ring".len());
    }

    #[test]
    fn header_columns_line_up_with_rows() {
        let names = columns(
            ["size", "count", "type", "redop", "root"],
            ["time", "algbw", "busbw", "#wrong"],
            ["min", "max"],
        );
        assert_eq!(names.len(), PREFIX_WIDTH + 2 * MODE_WIDTH + TAILS_WIDTH);
        assert_eq!(time(12.345), "12.35");
        assert_eq!(time(123.45), "123.5");
        assert_eq!(time(12345.6), "12346");
    }
}
