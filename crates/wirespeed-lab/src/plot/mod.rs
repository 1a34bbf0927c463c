//! Figures people would rather look at than read: latency heat maps (and, later, the benchmark
//! charts), each drawn once as PNG and once as SVG from the same data.
//!
//! Every figure is drawn by one function generic over plotters' `DrawingBackend`, so the PNG
//! (for chat and slides) and the SVG (for zooming into 200,000 cells) are the same picture.
//! Text in the PNG is rasterised from DejaVu Sans embedded in the binary: a figure made on a
//! headless box with no fonts installed still has its labels. Nothing here panics on odd data:
//! empty, all-zero or degenerate input gives a valid figure that says "no data".
//!
//! This file holds what callers see (the figure types and the functions that write them) and
//! the look they share (sizes, colours); the rooms below are one concern each: `files`
//! (writing PNG/SVG safely), `text` (labels, measured with ab_glyph like plotters draws them),
//! `axis` (ranges, ticks, tick labels), `heatmap` and `lines` (one figure kind each). A
//! new kind of figure is one new file beside the last two.

mod axis;
mod files;
mod heatmap;
mod lines;
mod text;

use std::path::{Path, PathBuf};

use plotters::style::RGBColor;

use wirespeed::error::Error;

pub use axis::linear_y_range;
pub use heatmap::at_least_a_decade;
pub use lines::line_chart_axes;

use files::{check_size, with_suffix, write_png, write_svg};
use heatmap::draw_heatmap;
use lines::draw_line_chart;
use text::TextMode;

/// One latency heat map: time on x, latency on a log y axis, colour = count per cell on a log
/// scale.
///
/// A heat map rather than a percentile line because it shows what percentiles hide: a second
/// mode, a slow drift, a burst of outliers at one moment. The log scales let one figure hold
/// both the 40 µs band and the 2 ms stall, and both the cell with 5,000 packets and the one
/// with a single straggler.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeatMap {
    /// The headline, naming what was measured and under which load, e.g.
    /// "Round-trip time, 10,000 pps, 64 B, loopback".
    pub title: String,
    /// The numbers a reader wants before reading the picture, e.g.
    /// "p50 41.2 µs  p99 55.0 µs  max 1.21 ms  lost 0 of 100,000".
    pub subtitle: String,
    /// The x axis label, e.g. "time since start (s)".
    pub x_label: String,
    /// The y axis label including the unit the edges are in, e.g. "round-trip time (µs)".
    pub y_label: String,
    /// `n_cols + 1` increasing column edges in seconds.
    pub x_edges: Vec<f64>,
    /// `n_rows + 1` increasing row edges, all `> 0` since the axis is logarithmic.
    pub y_edges: Vec<f64>,
    /// `n_cols * n_rows` packet counts, index `col * n_rows + row`: column-major so a
    /// recorder can append one finished time column at a time.
    pub counts: Vec<u64>,
    /// Time ranges in seconds to flag in red in a strip under the plot, labelled "lost":
    /// losses have no latency, so they cannot be cells, but must not be invisible.
    pub marks: Vec<(f64, f64)>,
    /// Overlay polylines, e.g. `("p99", [(t, µs), ...])`, drawn in white/grey over the cells,
    /// with a small legend; the parts outside the plotted latency range are cut off.
    pub lines: Vec<(String, Vec<(f64, f64)>)>,
}

/// One line of an x/y chart (e.g. received vs offered rate for one packet size).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// The legend entry; an empty name leaves the series out of the legend.
    pub name: String,
    /// The measured points in drawing order; non-finite points (and `y <= 0` on a log axis)
    /// break the line rather than failing the figure.
    pub points: Vec<(f64, f64)>,
}

/// An x/y chart of a few series, for the benchmark report (rates, loss, latency percentiles
/// against offered load).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LineChart {
    /// The headline above the chart.
    pub title: String,
    /// The x axis label with its unit.
    pub x_label: String,
    /// The y axis label with its unit.
    pub y_label: String,
    /// The lines, each in its own colour with its points marked.
    pub series: Vec<Series>,
    /// A log y axis, for quantities spanning decades (latency, loss ratio).
    pub log_y: bool,
    /// Draw `y = x` dashed, so "received = offered" can be read at a glance.
    pub diagonal: bool,
    /// One line under the title saying how to read the chart: what the axis starts at, what a
    /// flat line or the band means, or the plain result ("0 lost in every row"). A figure is
    /// passed around without the text that came with it, so it must say this itself.
    pub note: String,
    /// A reference band across the plot, e.g. the rate asked with its tolerance: a reader sees
    /// at a glance whether the line stays inside it, on an axis that starts at zero.
    pub band: Option<Band>,
    /// The y values are counts (datagrams lost): ticks only at whole numbers, so a run that lost
    /// nothing is a line at 0 on an axis of 0 and 1, not of 0, 0.2, 0.4 ... datagrams.
    pub y_integer: bool,
}

/// A horizontal band on a line chart, from `lo` to `hi` on the y axis, with a dashed line at
/// `at` (the reference value itself) and a legend entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Band {
    /// Bottom of the band.
    pub lo: f64,
    /// Top of the band.
    pub hi: f64,
    /// The reference value, drawn dashed (e.g. the rate asked).
    pub at: f64,
    /// The legend entry, e.g. "asked 942 Mb/s; shaded: 98-100 %".
    pub label: String,
}

/// Default heat map size: wide enough for a few hundred time columns at 2+ px each.
const HEATMAP_SIZE: (u32, u32) = (1200, 700);
/// Default line chart size.
const LINE_CHART_SIZE: (u32, u32) = (1000, 650);
/// Below this the fixed margins, labels and colour bar leave no room for the plot.
const MIN_SIZE: (u32, u32) = (480, 320);
/// Above this the PNG buffer alone would be hundreds of MB.
const MAX_SIDE: u32 = 16_000;
const MAX_PIXELS: u64 = 64_000_000;

const FONT: &str = "sans-serif";
const INK: RGBColor = RGBColor(30, 30, 30);
const SOFT_INK: RGBColor = RGBColor(90, 90, 90);
const NOTE_INK: RGBColor = RGBColor(140, 140, 140);
const GRID: RGBColor = RGBColor(225, 225, 225);
const STRIP_BG: RGBColor = RGBColor(236, 236, 236);
const LOST_RED: RGBColor = RGBColor(214, 39, 40);
/// A line chart's reference band (the rate asked and its tolerance): a green that no series of
/// the palette's first colours is confused with, shaded light.
const BAND: RGBColor = RGBColor(120, 190, 120);
const BAND_LINE: RGBColor = RGBColor(40, 120, 40);
const HALO: RGBColor = RGBColor(35, 35, 35);
const OVERLAY: [RGBColor; 3] = [RGBColor(255, 255, 255), RGBColor(200, 200, 200), RGBColor(150, 150, 150)];
/// Tableau 10: distinct, tolerable for colour-blind readers, familiar from matplotlib.
const PALETTE: [RGBColor; 10] = [
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
/// Matplotlib's viridis at t = 0, 1/8, ..., 1: perceptually uniform, readable in grey scale
/// and by most colour-blind readers (plotters' own colormaps feature is not enabled).
const VIRIDIS: [(u8, u8, u8); 9] = [
    (68, 1, 84),
    (72, 40, 120),
    (62, 73, 137),
    (49, 104, 142),
    (38, 130, 142),
    (31, 158, 137),
    (53, 183, 121),
    (110, 206, 88),
    (253, 231, 37),
];

/// Draw `h` as a PNG of `width` x `height` pixels; text uses the embedded DejaVu Sans, so the
/// result does not depend on the fonts installed on the host.
pub fn heatmap_png(h: &HeatMap, path: &Path, width: u32, height: u32) -> Result<(), Error> {
    let what = "heat map";
    check_size(what, path, width, height)?;
    write_png(what, path, (width, height), |root| draw_heatmap(root, TextMode::Glyphs, h))
}

/// Draw `h` as an SVG of `width` x `height` pixels, the same picture as [`heatmap_png`] but
/// zoomable: every non-empty cell is its own rectangle.
pub fn heatmap_svg(h: &HeatMap, path: &Path, width: u32, height: u32) -> Result<(), Error> {
    let what = "heat map";
    check_size(what, path, width, height)?;
    write_svg(what, path, (width, height), |root| draw_heatmap(root, TextMode::Whole, h))
}

/// Both files from one call: PATH_BASE.png and PATH_BASE.svg, default size 1200x700; returns
/// the two paths.
///
/// The extensions are appended, not substituted, so a base like `rtt.10kpps` keeps its dot.
pub fn heatmap_files(h: &HeatMap, base: &Path) -> Result<(PathBuf, PathBuf), Error> {
    let (png, svg) = (with_suffix(base, ".png"), with_suffix(base, ".svg"));
    heatmap_png(h, &png, HEATMAP_SIZE.0, HEATMAP_SIZE.1)?;
    heatmap_svg(h, &svg, HEATMAP_SIZE.0, HEATMAP_SIZE.1)?;
    Ok((png, svg))
}

/// Both files from one call: BASE.png and BASE.svg at 1000x650; returns the two paths. The
/// extensions are appended, as in [`heatmap_files`].
pub fn line_chart_files(c: &LineChart, base: &Path) -> Result<(PathBuf, PathBuf), Error> {
    let what = "chart";
    let (png, svg) = (with_suffix(base, ".png"), with_suffix(base, ".svg"));
    write_png(what, &png, LINE_CHART_SIZE, |root| draw_line_chart(root, TextMode::Glyphs, c))?;
    write_svg(what, &svg, LINE_CHART_SIZE, |root| draw_line_chart(root, TextMode::Whole, c))?;
    Ok((png, svg))
}

/// plotters' errors as the message text every drawing step returns.
fn de<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}
