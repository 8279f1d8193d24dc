//! PNG charts of bus bandwidth against size: `--plot FILE.png` after a run, and
//! `rcoll-bench plot A.json B.json -o out.png` from `-J` files. Both draw through
//! [`draw`], one line per [`Series`].
//!
//! Text is rasterised by plotters' pure-Rust `ab_glyph` path from a TrueType font read at
//! run time (DejaVu Sans from Debian's `fonts-dejavu-core`, or `RCOLL_BENCH_FONT`), so the
//! binary links no fontconfig or freetype.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::args::PlotArgs;
use crate::error::{usage, BenchError};
use crate::report::SizeReport;
use crate::spec::BenchSpec;

/// The font every label is drawn in, unless `RCOLL_BENCH_FONT` names another.
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// The Debian package that ships [`FONT`].
const FONT_PACKAGE: &str = "fonts-dejavu-core";
/// Names a TrueType font to use instead of [`FONT`].
const FONT_ENV: &str = "RCOLL_BENCH_FONT";

/// Width and height of the PNG, pixels.
pub const SIZE: (u32, u32) = (1200, 720);

/// Tableau 10: distinct for lines next to each other, and legible on white.
pub const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One line of the chart: `(bytes, busbw GB/s)` points, in size order.
#[derive(Clone, Debug)]
pub struct Series {
    /// The legend entry.
    pub label: String,
    /// Size in bytes and bus bandwidth in GB/s.
    pub points: Vec<(usize, f64)>,
}

/// Checks that a chart can be written to `path`: a `.png` name, a font, and a file that
/// can be created. Called before a run, so that a bad `--plot` fails before it, not after.
pub fn prepare(path: &Path) -> Result<(), BenchError> {
    check_extension(path)?;
    load_font()?;
    File::create(path).map_err(|source| BenchError::Write {
        path: path.to_owned(),
        source,
    })?;
    Ok(())
}

/// `--plot`: out-of-place and in-place bus bandwidth of one run.
pub fn run_chart(spec: &BenchSpec, reports: &[SizeReport], path: &Path) -> Result<(), BenchError> {
    let oop = Series {
        label: "out-of-place".to_owned(),
        points: reports.iter().map(|r| (r.size, r.oop.busbw)).collect(),
    };
    let ip = Series {
        label: "in-place".to_owned(),
        points: reports
            .iter()
            .filter_map(|r| r.ip.as_ref().map(|m| (r.size, m.busbw)))
            .collect(),
    };
    let series: Vec<Series> = [oop, ip]
        .into_iter()
        .filter(|s| !s.points.is_empty())
        .collect();
    let title = format!(
        "rcoll {}: {} ranks, {}, {}",
        spec.collective, spec.nranks, spec.transport, spec.dtype
    );
    draw(path, &title, &series)
}

/// `rcoll-bench plot`: one line per `-J` file.
pub fn files_chart(args: &PlotArgs) -> Result<(), BenchError> {
    if !args.labels.is_empty() && args.labels.len() != args.files.len() {
        return Err(usage(format!(
            "{} --label for {} file(s): give one per file, or none",
            args.labels.len(),
            args.files.len()
        )));
    }
    check_extension(&args.output)?;
    load_font()?;
    let mut runs = Vec::with_capacity(args.files.len());
    for (i, path) in args.files.iter().enumerate() {
        let records = read_records(path)?;
        let label = args.labels.get(i).cloned().unwrap_or_else(|| {
            path.file_stem().map_or_else(
                || path.display().to_string(),
                |s| s.to_string_lossy().into_owned(),
            )
        });
        let points: Vec<(usize, f64)> = records
            .iter()
            .filter_map(|r| {
                let mode = if args.in_place {
                    r.ip.as_ref()
                } else {
                    Some(&r.oop)
                };
                mode.map(|m| (r.size, m.busbw))
            })
            .collect();
        if points.is_empty() {
            return Err(usage(format!(
                "{} has no {} results to plot",
                path.display(),
                mode_name(args.in_place)
            )));
        }
        runs.push((records, Series { label, points }));
    }
    let title = files_title(&runs, args.in_place);
    let series: Vec<Series> = runs.into_iter().map(|(_, s)| s).collect();
    draw(&args.output, &title, &series)
}

/// The fields of a `-J` record the chart needs.
#[derive(Debug, serde::Deserialize)]
struct Record {
    collective: String,
    nranks: usize,
    size: usize,
    #[serde(rename = "type")]
    dtype: String,
    transport: String,
    oop: ModeRecord,
    ip: Option<ModeRecord>,
}

/// One mode of a `-J` record.
#[derive(Debug, serde::Deserialize)]
struct ModeRecord {
    busbw: f64,
}

fn read_records(path: &Path) -> Result<Vec<Record>, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BenchError::Read {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| BenchError::NotAReport {
        path: path.to_owned(),
        source,
    })
}

fn mode_name(in_place: bool) -> &'static str {
    if in_place {
        "in-place"
    } else {
        "out-of-place"
    }
}

/// "rcoll all_reduce, in-place: 4 ranks, tcp, f32", naming only what every file shares.
fn files_title(runs: &[(Vec<Record>, Series)], in_place: bool) -> String {
    let common = |field: &dyn Fn(&Record) -> String| -> Option<String> {
        let mut values = runs
            .iter()
            .flat_map(|(records, _)| records.iter().map(field));
        let first = values.next()?;
        values.all(|v| v == first).then_some(first)
    };
    let collective = common(&|r| r.collective.clone()).unwrap_or_else(|| "busbw".to_owned());
    let details: Vec<String> = [
        common(&|r| r.nranks.to_string()).map(|n| format!("{n} ranks")),
        common(&|r| r.transport.clone()),
        common(&|r| r.dtype.clone()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut title = format!("rcoll {collective}, {}", mode_name(in_place));
    if !details.is_empty() {
        title = format!("{title}: {}", details.join(", "));
    }
    title
}

/// Draws `series` as lines of busbw (GB/s) over size (bytes, log2 axis) into the PNG
/// `path`. Sizes of 0 bytes have no place on a log axis and are left out.
pub fn draw(path: &Path, title: &str, series: &[Series]) -> Result<(), BenchError> {
    check_extension(path)?;
    load_font()?;
    let plot_error = |e: &dyn std::fmt::Display| BenchError::Plot {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let points: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter(|(size, busbw)| *size > 0 && busbw.is_finite())
                .map(|&(size, busbw)| ((size as f64).log2(), busbw))
                .collect()
        })
        .collect();
    let all = || points.iter().flatten();
    let (lo, hi) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
        (lo.min(p.0), hi.max(p.0))
    });
    if !lo.is_finite() {
        return Err(plot_error(&"no sizes above 0 bytes to plot"));
    }
    let (lo, hi) = if hi - lo < 1.0 {
        (lo - 1.0, hi + 1.0)
    } else {
        (lo - 0.3, hi + 0.3)
    };
    let top = all().map(|p| p.1).fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.12 } else { 1.0 };

    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 30))
        .margin(24)
        .x_label_area_size(64)
        .y_label_area_size(90)
        .build_cartesian_2d(lo..hi, 0.0..top)
        .map_err(|e| plot_error(&e))?;
    chart
        .configure_mesh()
        .x_desc("size (bytes, log2 scale)")
        .y_desc("busbw (GB/s)")
        .axis_desc_style(("sans-serif", 22))
        .label_style(("sans-serif", 18))
        .x_labels(size_labels(lo, hi))
        .x_label_formatter(&|x| bytes_label(*x))
        .y_label_formatter(&|y| gbps_label(*y, top))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .map_err(|e| plot_error(&e))?;
    for (i, (s, pts)) in series.iter().zip(&points).enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(3)).point_size(4))
            .map_err(|e| plot_error(&e))?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 28, y)], colour.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 20))
        .legend_area_size(40)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .margin(12)
        .draw()
        .map_err(|e| plot_error(&e))?;
    root.present().map_err(|e| plot_error(&e))?;
    Ok(())
}

/// How many x labels to ask plotters for: one per power of two in range, at most 16,
/// so that its evenly spaced "nice" steps fall on whole powers.
fn size_labels(lo: f64, hi: f64) -> usize {
    let powers = (hi.floor() - lo.ceil() + 1.0).max(2.0);
    (powers as usize).min(16)
}

/// `log2(bytes)` as "8", "512", "4K", "64M", "1G"; nothing between powers of two.
pub fn bytes_label(log2: f64) -> String {
    if (log2 - log2.round()).abs() > 1e-6 {
        return String::new();
    }
    let bytes = log2.exp2().round();
    const UNITS: [(&str, f64); 3] = [("G", 1_073_741_824.0), ("M", 1_048_576.0), ("K", 1024.0)];
    for (unit, scale) in UNITS {
        if bytes >= scale && (bytes / scale).fract() == 0.0 {
            return format!("{}{unit}", bytes / scale);
        }
    }
    format!("{bytes}")
}

/// GB/s with as many decimals as the scale needs.
fn gbps_label(gbps: f64, top: f64) -> String {
    match top {
        t if t >= 10.0 => format!("{gbps:.0}"),
        t if t >= 1.0 => format!("{gbps:.1}"),
        t if t >= 0.1 => format!("{gbps:.2}"),
        _ => format!("{gbps:.3}"),
    }
}

fn check_extension(path: &Path) -> Result<(), BenchError> {
    let png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if png {
        Ok(())
    } else {
        Err(usage(format!(
            "{}: charts are written as PNG; name the file *.png",
            path.display()
        )))
    }
}

/// Reads and registers the font once per process. plotters keeps registered fonts for
/// the life of the process, so the bytes are leaked on purpose (once, about 700 KB).
fn load_font() -> Result<(), BenchError> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let path =
                std::env::var_os(FONT_ENV).map_or_else(|| PathBuf::from(FONT), PathBuf::from);
            let bytes = std::fs::read(&path).map_err(|e| {
                format!(
                    "cannot read the font {} ({e}): install the Debian package {FONT_PACKAGE} \
                     (apt-get install {FONT_PACKAGE}) or set {FONT_ENV} to a TrueType font",
                    path.display()
                )
            })?;
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{} is not a TrueType font", path.display()))
        })
        .clone()
        .map_err(BenchError::Font)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels_use_binary_units() {
        assert_eq!(bytes_label(3.0), "8");
        assert_eq!(bytes_label(9.0), "512");
        assert_eq!(bytes_label(12.0), "4K");
        assert_eq!(bytes_label(26.0), "64M");
        assert_eq!(bytes_label(30.0), "1G");
    }

    #[test]
    fn sizes_between_powers_of_two_are_not_labelled() {
        assert_eq!(bytes_label(3.5), "");
        assert_eq!(size_labels(2.7, 6.3), 4);
        assert_eq!(size_labels(2.7, 30.3), 16);
        assert_eq!(size_labels(2.0, 3.0), 2);
    }

    #[test]
    fn only_png_names_are_accepted() {
        assert!(check_extension(Path::new("a.png")).is_ok());
        assert!(check_extension(Path::new("a.PNG")).is_ok());
        assert!(check_extension(Path::new("a.jpg")).is_err());
        assert!(check_extension(Path::new("a")).is_err());
    }
}
