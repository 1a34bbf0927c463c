//! Figures people would rather look at than read: latency heat maps (and, later, the benchmark
//! charts), each drawn once as PNG and once as SVG from the same data.
//!
//! Every figure is drawn by one function generic over plotters' `DrawingBackend`, so the PNG
//! (for chat and slides) and the SVG (for zooming into 200,000 cells) are the same picture.
//! Text in the PNG is rasterised from DejaVu Sans embedded in the binary: a figure made on a
//! headless box with no fonts installed still has its labels. Nothing here panics on odd data:
//! empty, all-zero or degenerate input gives a valid figure that says "no data".

use std::ffi::OsString;
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use plotters::coord::ranged1d::{AsRangedCoord, KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::Error;

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

// ---------------------------------------------------------------------------------------------
// Files

fn with_suffix(base: &Path, suffix: &str) -> PathBuf {
    let mut s: OsString = base.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn check_size(what: &str, path: &Path, w: u32, h: u32) -> Result<(), Error> {
    let ok = w >= MIN_SIZE.0
        && h >= MIN_SIZE.1
        && w <= MAX_SIDE
        && h <= MAX_SIDE
        && u64::from(w) * u64::from(h) <= MAX_PIXELS;
    if ok {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "cannot draw {what} {}: size {w}x{h} is outside {}x{} to {MAX_SIDE}x{MAX_SIDE} (at most {MAX_PIXELS} pixels): choose a size in that range",
        path.display(),
        MIN_SIZE.0,
        MIN_SIZE.1
    )))
}

/// Register DejaVu Sans once per process; plotters' ab_glyph text looks fonts up by family
/// name, and without this every label would fail to render.
fn ensure_fonts() -> Result<(), String> {
    static FONTS: OnceLock<bool> = OnceLock::new();
    let ok = *FONTS.get_or_init(|| {
        let regular = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok();
        let bold = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold()).is_ok();
        regular && bold
    });
    if ok {
        Ok(())
    } else {
        Err("the embedded DejaVu Sans font could not be loaded".to_string())
    }
}

/// A sibling name for drawing into, renamed over the target when complete so nobody ever
/// opens a half-written figure. It ends in `.png`/`.svg` because the PNG encoder picks its
/// format from the extension, whatever the caller named the target.
fn temp_sibling(path: &Path, ext: &str) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}-{seq}.tmp.{ext}", std::process::id()))
}

fn write_png<F>(what: &str, path: &Path, size: (u32, u32), draw: F) -> Result<(), Error>
where
    F: FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), String>,
{
    let fail = |e: String| Error::Runtime(format!("cannot write {what} {}: {e}", path.display()));
    ensure_fonts().map_err(fail)?;
    let tmp = temp_sibling(path, "png");
    let drawn = (|| {
        let root = BitMapBackend::new(&tmp, size).into_drawing_area();
        draw(&root)?;
        root.present().map_err(de)
    })();
    let done = drawn.and_then(|()| fs::rename(&tmp, path).map_err(|e| e.to_string()));
    if done.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    done.map_err(fail)
}

fn write_svg<F>(what: &str, path: &Path, size: (u32, u32), draw: F) -> Result<(), Error>
where
    F: FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String>,
{
    let fail = |e: String| Error::Runtime(format!("cannot write {what} {}: {e}", path.display()));
    ensure_fonts().map_err(fail)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(&root).map_err(fail)?;
        root.present().map_err(|e| fail(de(e)))?;
    }
    let svg = slim_svg(&svg);
    let tmp = temp_sibling(path, "svg");
    let done = fs::write(&tmp, svg).and_then(|()| fs::rename(&tmp, path));
    if done.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    done.map_err(|e| fail(e.to_string()))
}

/// Shrink plotters' SVG without changing the picture: `opacity="1"` and `stroke="none"` are
/// SVG defaults and are most of each cell's bytes; crisp edges stop hairline seams between
/// abutting cells; the font family names the face the layout was measured with, at the size
/// the PNG draws it.
fn slim_svg(svg: &str) -> String {
    let slim = svg
        .replace(" opacity=\"1\"", "")
        .replace(" stroke=\"none\"", "")
        .replace("font-family=\"sans-serif\"", "font-family=\"DejaVu Sans,Verdana,sans-serif\"");
    let slim = rescale_font_sizes(&slim);
    match slim.find(">\n") {
        Some(end) if slim.starts_with("<svg") => {
            let (head, body) = slim.split_at(end + 2);
            format!("{head}<style>rect{{shape-rendering:crispEdges}}</style>\n{body}")
        }
        _ => slim,
    }
}

/// plotters writes `font-size` as its size / 1.24, while ab_glyph draws the PNG with an em of
/// size x units-per-em / (ascent - descent): about 6% larger for DejaVu. Scale the SVG's
/// sizes to match, so text fills the same room in both files.
fn rescale_font_sizes(svg: &str) -> String {
    const KEY: &str = "font-size=\"";
    let Some(m) = FontMetrics::get(false) else { return svg.to_string() };
    let k = 1.24 * m.upem / m.height;
    let mut out = String::with_capacity(svg.len());
    let mut rest = svg;
    while let Some(at) = rest.find(KEY) {
        let (before, after) = rest.split_at(at + KEY.len());
        out.push_str(before);
        let end = after.find('"').unwrap_or(after.len());
        match after[..end].parse::<f64>() {
            Ok(size) if size.is_finite() => out.push_str(&format!("{:.1}", size * k)),
            _ => out.push_str(&after[..end]),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn de<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

// ---------------------------------------------------------------------------------------------
// Text
//
// plotters 0.3.7 rasterises a string with ab_glyph but drops each glyph's left side bearing
// and truncates every pen position to whole pixels, so PNG letter spacing wobbles by up to
// two pixels ("packetsper cell"). It gives no way to fix that inside the backend from here,
// so for the PNG our own labels are set one glyph at a time at positions computed from the
// font's metrics; the SVG keeps whole `<text>` elements, which the viewer lays out itself.
// Tick numbers are still plotters' own; digits are regular enough not to show it.

/// How labels reach the backend: whole strings (SVG) or glyph by glyph (PNG, see above).
#[derive(Clone, Copy, PartialEq, Eq)]
enum TextMode {
    Whole,
    Glyphs,
}

/// A character, its pen offset from the start of the text and its left side bearing, in
/// pixels.
type Glyph = (char, f64, f64);

/// One piece of text and how to set it.
#[derive(Clone, Copy)]
struct Label<'a> {
    text: &'a str,
    size: f64,
    bold: bool,
    colour: RGBColor,
    anchor: (HPos, VPos),
    /// Rotated to read bottom to top, for vertical axis titles.
    up: bool,
}

impl<'a> Label<'a> {
    fn new(text: &'a str, size: f64) -> Label<'a> {
        Label { text, size, bold: false, colour: INK, anchor: (HPos::Left, VPos::Top), up: false }
    }

    fn bold(self) -> Self {
        Label { bold: true, ..self }
    }

    fn colour(self, colour: RGBColor) -> Self {
        Label { colour, ..self }
    }

    fn at(self, h: HPos, v: VPos) -> Self {
        Label { anchor: (h, v), ..self }
    }

    fn up(self) -> Self {
        Label { up: true, ..self }
    }

    fn style(&self) -> TextStyle<'static> {
        let weight = if self.bold { FontStyle::Bold } else { FontStyle::Normal };
        let font = (FONT, self.size, weight).into_font();
        let font = if self.up { font.transform(FontTransform::Rotate270) } else { font };
        font.color(&self.colour).pos(Pos::new(self.anchor.0, self.anchor.1))
    }

    /// Pen offset before each glyph and the total advance, in pixels, as ab_glyph would lay
    /// it out (advances plus kerning); `None` if the font tables cannot be read.
    fn layout(&self) -> Option<(Vec<Glyph>, f64)> {
        let m = FontMetrics::get(self.bold)?;
        let scale = self.size / m.height;
        let mut pen = 0.0;
        let mut prev = None;
        let mut glyphs = Vec::new();
        for c in self.text.chars() {
            let gid = m.glyph(c);
            if let Some(p) = prev {
                pen += f64::from(m.kern(p, gid)) * scale;
            }
            let (advance, lsb) = m.h_metrics(gid);
            glyphs.push((c, pen, f64::from(lsb) * scale));
            pen += f64::from(advance) * scale;
            prev = Some(gid);
        }
        Some((glyphs, pen))
    }

    fn width<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<i32, String> {
        match self.layout() {
            Some((_, w)) => Ok(w.round() as i32),
            None => Ok(root.estimate_text_size(self.text, &self.style()).map_err(de)?.0 as i32),
        }
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        mode: TextMode,
        pos: (i32, i32),
    ) -> Result<(), String> {
        if self.text.is_empty() {
            return Ok(());
        }
        let layout = if mode == TextMode::Glyphs { self.layout() } else { None };
        let Some((glyphs, total)) = layout else {
            return root.draw_text(self.text, &self.style(), pos).map_err(de);
        };
        let start = match self.anchor.0 {
            HPos::Left => 0.0,
            HPos::Center => -total / 2.0,
            HPos::Right => -total,
        };
        let style = self.style().pos(Pos::new(HPos::Left, self.anchor.1));
        let mut buf = [0u8; 4];
        for (c, pen, lsb) in glyphs {
            if c.is_whitespace() {
                continue;
            }
            // ab_glyph puts the glyph's bitmap where its ink begins, less the fraction of a
            // pixel it keeps inside the bitmap: shift by the whole pixels of the bearing.
            let along = (start + pen).round() as i32 + lsb.floor() as i32;
            let at = if self.up { (pos.0, pos.1 - along) } else { (pos.0 + along, pos.1) };
            root.draw_text(c.encode_utf8(&mut buf), &style, at).map_err(de)?;
        }
        Ok(())
    }
}

/// Style for plotters' own tick labels.
fn tick_style(size: f64) -> TextStyle<'static> {
    (FONT, size).into_font().color(&INK)
}

/// The few TrueType tables needed to lay text out like ab_glyph does: character to glyph
/// (`cmap` format 4), advance and left side bearing (`hhea`/`hmtx`), pair kerning (`kern`).
/// Every read is bounds-checked; a malformed table degrades to plotters' own layout.
struct FontMetrics {
    font: &'static [u8],
    /// ab_glyph's pixel scale divides by ascent - descent (hhea), not by units per em.
    height: f64,
    /// Font units per em (`head`), to convert to the em size an SVG viewer uses.
    upem: f64,
    cmap4: usize,
    hmtx: usize,
    n_hmetrics: u16,
    /// Offset and count of the format 0 pair table, if any.
    kern: Option<(usize, usize)>,
}

impl FontMetrics {
    fn get(bold: bool) -> Option<&'static FontMetrics> {
        static REGULAR: OnceLock<Option<FontMetrics>> = OnceLock::new();
        static BOLD: OnceLock<Option<FontMetrics>> = OnceLock::new();
        if bold {
            BOLD.get_or_init(|| FontMetrics::parse(dejavu::sans::bold())).as_ref()
        } else {
            REGULAR.get_or_init(|| FontMetrics::parse(dejavu::sans::regular())).as_ref()
        }
    }

    fn parse(font: &'static [u8]) -> Option<FontMetrics> {
        let table = |tag: &[u8; 4]| -> Option<(usize, usize)> {
            (0..usize::from(be16(font, 4)?)).find_map(|i| {
                let rec = 12 + 16 * i;
                (font.get(rec..rec + 4)? == tag)
                    .then(|| Some((be32(font, rec + 8)? as usize, be32(font, rec + 12)? as usize)))
                    .flatten()
            })
        };
        let (head, _) = table(b"head")?;
        let upem = f64::from(be16(font, head + 18)?);
        let (hhea, _) = table(b"hhea")?;
        let height = f64::from(be16(font, hhea + 4)? as i16) - f64::from(be16(font, hhea + 6)? as i16);
        let n_hmetrics = be16(font, hhea + 34)?;
        let (hmtx, _) = table(b"hmtx")?;
        let (cmap, _) = table(b"cmap")?;
        let cmap4 = (0..usize::from(be16(font, cmap + 2)?)).find_map(|i| {
            let rec = cmap + 4 + 8 * i;
            let id = (be16(font, rec)?, be16(font, rec + 2)?);
            let sub = cmap + be32(font, rec + 4)? as usize;
            (matches!(id, (3, 1) | (0, 3)) && be16(font, sub)? == 4).then_some(sub)
        })?;
        let kern = table(b"kern").and_then(|(k, _)| {
            // Version 0 header, first subtable: format 0 (coverage high byte) and horizontal.
            let coverage = be16(font, k + 8)?;
            (be16(font, k)? == 0 && coverage >> 8 == 0 && coverage & 1 == 1)
                .then(|| Some((k + 18, usize::from(be16(font, k + 10)?))))
                .flatten()
        });
        (height > 0.0 && upem > 0.0 && n_hmetrics > 0).then_some(FontMetrics {
            font,
            height,
            upem,
            cmap4,
            hmtx,
            n_hmetrics,
            kern,
        })
    }

    /// Glyph id for `c`, 0 (the missing-glyph box, as ab_glyph draws it) if none.
    fn glyph(&self, c: char) -> u16 {
        let Ok(c) = u16::try_from(u32::from(c)) else { return 0 };
        let (f, sub) = (self.font, self.cmap4);
        let lookup = || -> Option<u16> {
            let seg_x2 = usize::from(be16(f, sub + 6)?);
            for s in (0..seg_x2).step_by(2) {
                if be16(f, sub + 14 + s)? < c {
                    continue;
                }
                let start = be16(f, sub + 16 + seg_x2 + s)?;
                if start > c {
                    return Some(0);
                }
                let delta = be16(f, sub + 16 + 2 * seg_x2 + s)?;
                let range_at = sub + 16 + 3 * seg_x2 + s;
                let range = usize::from(be16(f, range_at)?);
                if range == 0 {
                    return Some(c.wrapping_add(delta));
                }
                let g = be16(f, range_at + range + 2 * usize::from(c - start))?;
                return Some(if g == 0 { 0 } else { g.wrapping_add(delta) });
            }
            Some(0)
        };
        lookup().unwrap_or(0)
    }

    /// (advance width, left side bearing) in font units.
    fn h_metrics(&self, gid: u16) -> (u16, i16) {
        let n = self.n_hmetrics;
        let advance = be16(self.font, self.hmtx + 4 * usize::from(gid.min(n - 1)));
        let lsb = if gid < n {
            be16(self.font, self.hmtx + 4 * usize::from(gid) + 2)
        } else {
            be16(self.font, self.hmtx + 4 * usize::from(n) + 2 * usize::from(gid - n))
        };
        (advance.unwrap_or(0), lsb.unwrap_or(0) as i16)
    }

    /// Kerning between glyphs `l` and `r` in font units (0 if none).
    fn kern(&self, l: u16, r: u16) -> i16 {
        let Some((pairs, n)) = self.kern else { return 0 };
        let key = (u32::from(l) << 16) | u32::from(r);
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let at = pairs + 6 * mid;
            let Some(k) = be32(self.font, at) else { return 0 };
            match k.cmp(&key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return be16(self.font, at + 4).unwrap_or(0) as i16,
            }
        }
        0
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

// ---------------------------------------------------------------------------------------------
// Heat map

/// The drawable part of a [`HeatMap`]: which columns and rows have sane edges, where the
/// counts are, and the axis ranges that follow from them.
struct Grid {
    cols: Vec<Option<(f64, f64)>>,
    rows: Vec<Option<(f64, f64)>>,
    /// `(col, row, count)` for every non-zero count in a drawable cell.
    cells: Vec<(usize, usize, u64)>,
    max_count: u64,
    x: (f64, f64),
    y: (f64, f64),
}

impl Grid {
    fn new(h: &HeatMap) -> Grid {
        let cols: Vec<_> = h.x_edges.windows(2).map(|w| sane_interval(w[0], w[1], f64::NEG_INFINITY)).collect();
        let rows: Vec<_> = h.y_edges.windows(2).map(|w| sane_interval(w[0], w[1], 0.0)).collect();
        let n_rows = rows.len();
        let mut cells = Vec::new();
        let mut max_count = 0;
        let (mut r0, mut r1) = (usize::MAX, 0);
        if n_rows > 0 {
            let n = cols.len().saturating_mul(n_rows).min(h.counts.len());
            for (i, &count) in h.counts[..n].iter().enumerate() {
                let (c, r) = (i / n_rows, i % n_rows);
                if count == 0 || cols[c].is_none() || rows[r].is_none() {
                    continue;
                }
                cells.push((c, r, count));
                max_count = max_count.max(count);
                r0 = r0.min(r);
                r1 = r1.max(r);
            }
        }
        let x = axis_span(h.x_edges.iter().copied().filter(|v| v.is_finite()));
        let y = if cells.is_empty() {
            let lo = rows.iter().flatten().map(|r| r.0).fold(f64::INFINITY, f64::min);
            let hi = rows.iter().flatten().map(|r| r.1).fold(f64::NEG_INFINITY, f64::max);
            if lo < hi {
                (lo, hi)
            } else {
                (1.0, 1000.0)
            }
        } else {
            // One row of margin either side, borrowed from the neighbour row when it exists
            // and extrapolated geometrically from the edge row when it does not.
            let below = r0.checked_sub(1).and_then(|r| rows[r]).map(|r| r.0);
            let above = rows.get(r1 + 1).copied().flatten().map(|r| r.1);
            let (e0, e1) = rows[r0].unwrap_or((1.0, 10.0));
            let (f0, f1) = rows[r1].unwrap_or((1.0, 10.0));
            let lo = below.unwrap_or(e0 * e0 / e1);
            let hi = above.unwrap_or(f1 * f1 / f0);
            if lo > 0.0 && lo < hi && hi.is_finite() {
                at_least_a_decade(lo, hi)
            } else {
                (e0, f1)
            }
        };
        Grid { cols, rows, cells, max_count, x, y }
    }
}

/// A log axis range holding `lo..hi` that spans at least a factor of ten, widened evenly (on
/// the log scale) around the data. Fitted tightly, a steady 40-44 µs band would fill the plot
/// from top to bottom and read as a spread of latencies; on a decade it is the thin band it is,
/// and a 2 ms stall stands out above it.
pub fn at_least_a_decade(lo: f64, hi: f64) -> (f64, f64) {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) || hi / lo >= 10.0 {
        return (lo, hi);
    }
    let widen = (10.0 / (hi / lo)).sqrt();
    (lo / widen, hi * widen)
}

/// `Some((a, b))` when the interval can be drawn: finite, increasing, above `floor`.
fn sane_interval(a: f64, b: f64, floor: f64) -> Option<(f64, f64)> {
    (a.is_finite() && b.is_finite() && a > floor && b > a).then_some((a, b))
}

/// The full span of `values`, widened when it is empty or a single point so an axis can
/// still be drawn.
fn axis_span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !(lo.is_finite() && hi.is_finite()) {
        (0.0, 1.0)
    } else if lo < hi {
        (lo, hi)
    } else {
        let pad = (lo.abs() * 0.1).max(0.5);
        (lo - pad, hi + pad)
    }
}

/// Draw the heat map on any backend; the caller owns writing the result.
fn draw_heatmap<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, mode: TextMode, h: &HeatMap) -> Result<(), String> {
    let grid = Grid::new(h);
    root.fill(&WHITE).map_err(de)?;
    let width = root.dim_in_pixel().0 as i32;
    let pad = 16;

    let title = Label::new(&h.title, 24.0).bold();
    let subtitle = Label::new(&h.subtitle, 16.0).colour(SOFT_INK);
    title.draw(root, mode, (pad, 12))?;
    subtitle.draw(root, mode, (pad, 44))?;
    let header = 76;

    let colour_bar_w = 150;
    let (main, _) = root.split_vertically(header).1.split_horizontally(width - colour_bar_w);
    // The lost strip is drawn whenever there is data, empty ("0 lost") when nothing was lost:
    // without it a reader cannot tell "nothing lost" from "losses not shown".
    let has_marks = !h.marks.is_empty() || !grid.cells.is_empty();
    let x_label_area = 48;
    let (strip_h, strip_gap) = (14, 6);
    let y_label_area = 90;
    let (upper, lower) = if has_marks {
        let lower_h = strip_gap + strip_h + x_label_area + 10;
        let (u, l) = main.split_vertically(main.dim_in_pixel().1 as i32 - lower_h);
        (u, Some(l))
    } else {
        (main, None)
    };

    // The plot itself: mesh and tick labels from plotters, axis titles our own.
    let plot_h = upper.dim_in_pixel().1 as i32 - if has_marks { 10 } else { x_label_area + 20 };
    let (ylo, yhi) = grid.y;
    let yticks = nice_log_ticks(ylo, yhi, (plot_h / 34).max(2) as usize);
    let (xlo, xhi) = grid.x;
    let mut chart = ChartBuilder::on(&upper)
        .margin_top(10)
        .margin_left(8)
        .margin_right(16)
        .margin_bottom(if has_marks { 0 } else { 10 })
        .y_label_area_size(y_label_area)
        .x_label_area_size(if has_marks { 0 } else { x_label_area })
        .build_cartesian_2d(xlo..xhi, (ylo..yhi).log_scale().with_key_points(yticks))
        .map_err(de)?;
    let (plot_xs, plot_ys) = chart.plotting_area().get_pixel_range();
    let x_labels = ((plot_xs.end - plot_xs.start) / 90).max(2) as usize;
    let fmt = |v: &f64| fmt_tick(*v);
    chart
        .configure_mesh()
        .disable_y_mesh()
        .bold_line_style(GRID)
        .axis_style(SOFT_INK)
        .x_labels(x_labels)
        .x_max_light_lines(0)
        .x_label_formatter(&fmt)
        .y_label_formatter(&fmt)
        .label_style(tick_style(14.0))
        .draw()
        .map_err(de)?;
    let mid_y = (plot_ys.start + plot_ys.end) / 2;
    Label::new(&h.y_label, 15.0).at(HPos::Center, VPos::Top).up().draw(root, mode, (10, mid_y))?;

    // The cells, placed in pixels so that even a sub-pixel cell stays visible (1 px) in SVG.
    let col_px: Vec<Option<(i32, i32)>> = grid
        .cols
        .iter()
        .map(|c| c.map(|(a, b)| (chart.backend_coord(&(a, ylo)).0, chart.backend_coord(&(b, ylo)).0)))
        .collect();
    let row_px: Vec<Option<(i32, i32)>> = grid
        .rows
        .iter()
        .map(|r| r.map(|(a, b)| (chart.backend_coord(&(xlo, b)).1, chart.backend_coord(&(xlo, a)).1)))
        .collect();
    let log_max = (grid.max_count as f64).ln();
    for &(c, r, count) in &grid.cells {
        let (Some((x0, x1)), Some((y0, y1))) = (col_px[c], row_px[r]) else { continue };
        let t = if grid.max_count <= 1 { 1.0 } else { (count as f64).ln() / log_max };
        let rect = Rectangle::new([(x0, y0), (x1.max(x0 + 1), y1.max(y0 + 1))], viridis(t).filled());
        root.draw(&rect).map_err(de)?;
    }

    // Overlay lines, white/grey on a dark halo so they read over both yellow cells and the
    // white background.
    let mut legend = Vec::new();
    for (i, (name, points)) in h.lines.iter().enumerate() {
        let colour = OVERLAY[i % OVERLAY.len()];
        for run in clipped_runs(points, (xlo, xhi), (ylo, yhi)) {
            chart.draw_series(LineSeries::new(run.iter().copied(), HALO.stroke_width(4))).map_err(de)?;
            chart.draw_series(LineSeries::new(run.iter().copied(), colour.stroke_width(2))).map_err(de)?;
        }
        if !name.is_empty() {
            legend.push((name.as_str(), colour));
        }
    }

    // Plot frame on top, so cells do not paint over the axes.
    let frame = Rectangle::new(
        [(plot_xs.start, plot_ys.start), (plot_xs.end - 1, plot_ys.end - 1)],
        SOFT_INK.mix(0.6).stroke_width(1),
    );
    root.draw(&frame).map_err(de)?;

    if grid.cells.is_empty() {
        let centre = ((plot_xs.start + plot_xs.end) / 2, mid_y);
        Label::new("no data", 22.0).colour(NOTE_INK).at(HPos::Center, VPos::Center).draw(root, mode, centre)?;
    }

    // Lost-packet strip: its own chart so it shares the x mapping and carries the x labels.
    let mut x_axis_bottom = plot_ys.end + x_label_area;
    if let Some(lower) = lower {
        let mut strip = ChartBuilder::on(&lower)
            .margin_top(strip_gap)
            .margin_left(8)
            .margin_right(16)
            .margin_bottom(10)
            .y_label_area_size(y_label_area)
            .x_label_area_size(x_label_area)
            .build_cartesian_2d(xlo..xhi, 0.0..1.0)
            .map_err(de)?;
        strip.plotting_area().fill(&STRIP_BG).map_err(de)?;
        strip
            .configure_mesh()
            .disable_mesh()
            .axis_style(SOFT_INK)
            .x_labels(x_labels)
            .y_labels(0)
            .x_label_formatter(&fmt)
            .label_style(tick_style(14.0))
            .draw()
            .map_err(de)?;
        let (_, sy) = strip.plotting_area().get_pixel_range();
        for &(a, b) in &h.marks {
            if !(a.is_finite() && b.is_finite()) {
                continue;
            }
            let (a, b) = (a.min(b), a.max(b));
            if b < xlo || a > xhi {
                continue;
            }
            let x0 = strip.backend_coord(&(a.max(xlo), 0.0)).0;
            let x1 = strip.backend_coord(&(b.min(xhi), 0.0)).0;
            // A loss shorter than a pixel is still a loss: show it 2 px wide.
            let (x0, x1) = if x1 - x0 < 2 { (x0 - 1, x0 + 1) } else { (x0, x1) };
            root.draw(&Rectangle::new([(x0, sy.start), (x1, sy.end)], LOST_RED.filled())).map_err(de)?;
        }
        let lost = Label::new("lost", 14.0).colour(LOST_RED).at(HPos::Right, VPos::Center);
        lost.draw(root, mode, (plot_xs.start - 8, (sy.start + sy.end) / 2))?;
        if h.marks.is_empty() {
            let none = Label::new("0 lost", 12.0).colour(SOFT_INK).at(HPos::Left, VPos::Center);
            none.draw(root, mode, (plot_xs.start + 6, (sy.start + sy.end) / 2))?;
        }
        x_axis_bottom = sy.end + x_label_area;
    }
    let x_title = Label::new(&h.x_label, 15.0).at(HPos::Center, VPos::Bottom);
    x_title.draw(root, mode, ((plot_xs.start + plot_xs.end) / 2, x_axis_bottom - 2))?;

    if grid.max_count > 0 {
        draw_colour_bar(root, mode, grid.max_count, width - colour_bar_w + 14, plot_ys.clone())?;
    }
    if !legend.is_empty() {
        let rows = [(pad + subtitle.width(root)?, 53), (pad + title.width(root)?, 26)];
        draw_line_legend(root, mode, &legend, plot_xs.end, rows, (plot_xs.start, plot_ys.start))?;
    }
    Ok(())
}

/// Legend for the overlay lines: in the header, right-aligned with the plot, when it fits
/// beside the subtitle or the title (`rows`: where each header line ends, and its middle), so
/// it hides no data; otherwise in the plot's top-left corner on a dark box.
fn draw_line_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    entries: &[(&str, RGBColor)],
    right: i32,
    rows: [(i32, i32); 2],
    plot_corner: (i32, i32),
) -> Result<(), String> {
    let (sample, gap, spacing) = (26, 6, 18);
    let mut widths = Vec::new();
    for (name, _) in entries {
        widths.push(Label::new(name, 14.0).width(root)?);
    }
    let total: i32 = widths.iter().map(|w| sample + gap + w).sum::<i32>() + spacing * (entries.len() as i32 - 1);
    let place = rows.iter().find(|(end, _)| end + 40 + total <= right).map(|&(_, mid)| (right - total, mid));
    let (mut x, y, label_ink) = match place {
        Some((x, y)) => (x, y, INK),
        None => {
            let (x, y) = (plot_corner.0 + 10, plot_corner.1 + 10);
            let bg = RGBColor(60, 60, 60).mix(0.75).filled();
            root.draw(&Rectangle::new([(x, y), (x + total + 16, y + 26)], bg)).map_err(de)?;
            (x + 8, y + 13, WHITE)
        }
    };
    for ((name, colour), w) in entries.iter().zip(widths) {
        root.draw(&PathElement::new(vec![(x, y), (x + sample, y)], HALO.stroke_width(4))).map_err(de)?;
        root.draw(&PathElement::new(vec![(x, y), (x + sample, y)], colour.stroke_width(2))).map_err(de)?;
        let label = Label::new(name, 14.0).colour(label_ink).at(HPos::Left, VPos::Center);
        label.draw(root, mode, (x + sample + gap, y))?;
        x += sample + gap + w + spacing;
    }
    Ok(())
}

/// The count scale: a vertical viridis bar spanning the plot's height, log ticks at 1, 10,
/// 100, ... (1, 2, 5, ... when there is room), and the maximum so a reader sees how full the
/// fullest cell was.
fn draw_colour_bar<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    max: u64,
    x0: i32,
    ys: Range<i32>,
) -> Result<(), String> {
    let (top, bottom) = (ys.start, ys.end);
    let height = bottom - top;
    if height < 4 {
        return Ok(());
    }
    let bar_w = 18;
    let x1 = x0 + bar_w;
    let t_of = |c: f64| if max <= 1 { 1.0 } else { c.ln() / (max as f64).ln() };
    let y_of = |t: f64| bottom - (t * f64::from(height)).round() as i32;
    let bands = height.min(256);
    for i in 0..bands {
        let ya = bottom - (f64::from(height) * f64::from(i + 1) / f64::from(bands)).round() as i32;
        let yb = bottom - (f64::from(height) * f64::from(i) / f64::from(bands)).round() as i32;
        let t = if max <= 1 { 1.0 } else { (f64::from(i) + 0.5) / f64::from(bands) };
        root.draw(&Rectangle::new([(x0, ya), (x1, yb.max(ya + 1))], viridis(t).filled())).map_err(de)?;
    }
    root.draw(&Rectangle::new([(x0, top), (x1, bottom)], SOFT_INK.stroke_width(1))).map_err(de)?;

    let mut ticks: Vec<u64> = if max <= 1 {
        vec![1]
    } else {
        nice_log_ticks(1.0, max as f64, (height / 30).max(2) as usize)
            .into_iter()
            .map(|v| v.round() as u64)
            .filter(|&v| v >= 1 && v <= max)
            .collect()
    };
    ticks.dedup();
    if let Some(&last) = ticks.last() {
        if last != max && y_of(t_of(last as f64)) - y_of(1.0) >= 18 {
            ticks.push(max);
        }
    }
    for v in ticks {
        let y = y_of(t_of(v as f64));
        root.draw(&PathElement::new(vec![(x1, y), (x1 + 5, y)], SOFT_INK.stroke_width(1))).map_err(de)?;
        Label::new(&fmt_count(v), 13.0).at(HPos::Left, VPos::Center).draw(root, mode, (x1 + 8, y))?;
    }
    // An empty cell is white, not the darkest colour: say so under the bar, so a cell with one
    // packet is never mistaken for one with none.
    let (sy0, sy1) = (bottom + 14, bottom + 28);
    root.draw(&Rectangle::new([(x0, sy0), (x1, sy1)], WHITE.filled())).map_err(de)?;
    root.draw(&Rectangle::new([(x0, sy0), (x1, sy1)], SOFT_INK.stroke_width(1))).map_err(de)?;
    Label::new("0 (white)", 13.0).at(HPos::Left, VPos::Center).draw(root, mode, (x1 + 8, (sy0 + sy1) / 2))?;
    let caption = Label::new("packets per cell", 15.0).at(HPos::Center, VPos::Top).up();
    caption.draw(root, mode, (x1 + 84, (top + bottom) / 2))
}

/// Viridis at `t` in 0..=1 (clamped), linearly interpolated between the anchors.
fn viridis(t: f64) -> RGBColor {
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 };
    let s = t * (VIRIDIS.len() - 1) as f64;
    let i = (s.floor() as usize).min(VIRIDIS.len() - 2);
    let f = s - i as f64;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    let mix = |p: u8, q: u8| (f64::from(p) + (f64::from(q) - f64::from(p)) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// The parts of a polyline inside `x` x `y` (y on a log axis), cut exactly at the plot's
/// edges: clamping instead would draw stretches of line along the frame that are not data.
fn clipped_runs(points: &[(f64, f64)], x: (f64, f64), y: (f64, f64)) -> Vec<Vec<(f64, f64)>> {
    let (y0, y1) = (y.0.ln(), y.1.ln());
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    for run in segments(points, true) {
        let logged: Vec<(f64, f64)> = run.iter().map(|&(px, py)| (px, py.ln())).collect();
        let mut joined = false;
        for pair in logged.windows(2) {
            let Some((a, b)) = clip_segment(pair[0], pair[1], x, (y0, y1)) else {
                joined = false;
                continue;
            };
            match out.last_mut() {
                // An unclipped start is bit-for-bit the previous end: continue that line.
                Some(line) if joined && line.last() == Some(&a) => line.push(b),
                _ => out.push(vec![a, b]),
            }
            joined = b == pair[1];
        }
    }
    for line in &mut out {
        for p in line.iter_mut() {
            p.1 = p.1.exp();
        }
    }
    out
}

/// Liang-Barsky: the part of segment `a`-`b` inside the rectangle, if any.
fn clip_segment(a: (f64, f64), b: (f64, f64), x: (f64, f64), y: (f64, f64)) -> Option<((f64, f64), (f64, f64))> {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    for (p, q) in [(-dx, a.0 - x.0), (dx, x.1 - a.0), (-dy, a.1 - y.0), (dy, y.1 - a.1)] {
        if p == 0.0 {
            if q < 0.0 {
                return None;
            }
            continue;
        }
        let r = q / p;
        if p < 0.0 {
            t0 = t0.max(r);
        } else {
            t1 = t1.min(r);
        }
        if t0 > t1 {
            return None;
        }
    }
    let at = |t: f64| {
        if t == 0.0 {
            a
        } else if t == 1.0 {
            b
        } else {
            (a.0 + t * dx, a.1 + t * dy)
        }
    };
    Some((at(t0), at(t1)))
}

/// Runs of drawable points: non-finite points (and, on a log axis, `y <= 0`) break the line.
fn segments(points: &[(f64, f64)], log_y: bool) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for &(x, y) in points {
        let ok = x.is_finite() && y.is_finite() && (!log_y || y > 0.0);
        match (ok, out.last_mut()) {
            (true, Some(run)) => run.push((x, y)),
            (false, Some(run)) if !run.is_empty() => out.push(Vec::new()),
            _ => {}
        }
    }
    out.retain(|run| !run.is_empty());
    out
}

// ---------------------------------------------------------------------------------------------
// Ticks and numbers

/// Tick values for a log axis over `lo..=hi` (both > 0), at most `max_n` of them: 1-2-5 per
/// decade when they fit, else powers of ten (every k-th decade if need be); for a range
/// narrower than a decade, 1..9 x 10^k, and failing that evenly spaced round numbers, so
/// an axis never ends up without labels.
fn nice_log_ticks(lo: f64, hi: f64, max_n: usize) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return if lo > 0.0 && lo.is_finite() { vec![lo] } else { Vec::new() };
    }
    let max_n = max_n.max(2);
    let (e0, e1) = (lo.log10().floor() as i32 - 1, hi.log10().ceil() as i32 + 1);
    let with = |mantissas: &[f64], every: i32| -> Vec<f64> {
        let mut out = Vec::new();
        for e in (e0..=e1).filter(|e| e.rem_euclid(every) == 0) {
            for m in mantissas {
                let v = m * 10f64.powi(e);
                if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                    out.push(v);
                }
            }
        }
        out
    };
    let one_two_five = with(&[1.0, 2.0, 5.0], 1);
    let chosen = if one_two_five.len() <= max_n {
        one_two_five
    } else {
        (1..=e1 - e0 + 1).map(|every| with(&[1.0], every)).find(|t| t.len() <= max_n).unwrap_or_default()
    };
    if chosen.len() >= 3 {
        return chosen;
    }
    let all_digits = with(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], 1);
    if all_digits.len() >= 2 && all_digits.len() <= max_n {
        return all_digits;
    }
    if chosen.len() >= 2 {
        return chosen;
    }
    nice_linear_ticks(lo, hi, max_n.min(5))
}

/// Round-number ticks over `lo..=hi` with a 1-2-5 step, about `n` of them.
fn nice_linear_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = hi - lo;
    if !(span > 0.0 && span.is_finite()) {
        return Vec::new();
    }
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).take(50).map(|k| k as f64 * step).collect()
}

/// A tick label: up to 6 significant digits, no trailing zeros, thousands separated
/// ("1,000", "0.5", "12.5"), so axis labels read like the numbers in the subtitle.
fn fmt_tick(v: f64) -> String {
    if !v.is_finite() {
        return String::new();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let a = v.abs();
    if !(1e-4..1e15).contains(&a) {
        return fmt_exp(v);
    }
    let decimals = (5 - a.log10().floor() as i32).clamp(0, 10) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    let (sign, s) = s.strip_prefix('-').map_or(("", s.as_str()), |r| ("-", r));
    let (int, frac) = s.split_once('.').map_or((s, None), |(i, f)| (i, Some(f)));
    let int = group_thousands(int);
    let out = match frac {
        Some(f) => format!("{sign}{int}.{f}"),
        None => format!("{sign}{int}"),
    };
    if out == "-0" {
        "0".to_string()
    } else {
        out
    }
}

/// A count for the colour bar: grouped digits up to 9,999,999, then "1.23e7" so the label
/// stays inside the bar's margin.
fn fmt_count(v: u64) -> String {
    if v < 10_000_000 {
        group_thousands(&v.to_string())
    } else {
        fmt_exp(v as f64)
    }
}

/// Scientific notation with at most 3 significant digits and no trailing zeros: "1e-5",
/// "2.5e12".
fn fmt_exp(v: f64) -> String {
    let s = format!("{v:.2e}");
    match s.split_once('e') {
        Some((m, e)) if m.contains('.') => format!("{}e{e}", m.trim_end_matches('0').trim_end_matches('.')),
        _ => s,
    }
}

fn group_thousands(digits: &str) -> String {
    if digits.len() <= 3 {
        return digits.to_string();
    }
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Line chart

/// Draw the line chart on any backend; the y axis type differs between linear and log, so
/// the body is generic over it.
fn draw_line_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    c: &LineChart,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(de)?;
    let runs: Vec<Vec<Vec<(f64, f64)>>> = c.series.iter().map(|s| segments(&s.points, c.log_y)).collect();
    let (x, (lo, hi)) = line_chart_axes(c);
    let plot_h = root.dim_in_pixel().1 as i32 - 160;
    let frame = LineFrame { root, mode, chart: c, runs: &runs, x };
    if c.log_y {
        let ticks = nice_log_ticks(lo, hi, (plot_h / 34).max(2) as usize);
        frame.draw((lo..hi).log_scale().with_key_points(ticks), (lo, hi))
    } else {
        let ticks = linear_ticks(lo, hi, ((plot_h - 40) / 50).max(2) as usize, c.y_integer);
        frame.draw(Ticked { inner: (lo..hi).into(), ticks }, (lo, hi))
    }
}

/// The x and y ranges a line chart is drawn with. Linear axes of data that is never negative
/// start at zero ([`linear_y_range`]), the band shows whole, and a received-against-offered
/// chart (with its `y = x` diagonal) has one scale on both axes, so the diagonal is at 45
/// degrees and a gap below it looks as large as it is.
pub fn line_chart_axes(c: &LineChart) -> ((f64, f64), (f64, f64)) {
    let runs: Vec<Vec<Vec<(f64, f64)>>> = c.series.iter().map(|s| segments(&s.points, c.log_y)).collect();
    let all = || runs.iter().flatten().flatten();
    let mut x = padded_linear(axis_span_opt(all().map(|p| p.0)));
    if c.log_y {
        let (lo, hi) = axis_span_opt(all().map(|p| p.1)).unwrap_or((1.0, 100.0));
        let y = if lo < hi { (lo / 1.25, hi * 1.25) } else { (lo / 2.0, hi * 2.0) };
        return (x, y);
    }
    let band = c.band.as_ref().map(|b| (b.lo.min(b.hi).min(b.at), b.hi.max(b.lo).max(b.at)));
    let (lo, mut hi) = linear_y_range(all().map(|p| p.1), band);
    if c.diagonal && x.0 == 0.0 && lo == 0.0 {
        let m = x.1.max(hi);
        (x.1, hi) = (m, m);
    }
    (x, (lo, hi))
}

/// Round ticks over `lo..=hi`, about `n` of them; whole numbers only when `integer` (counts).
fn linear_ticks(lo: f64, hi: f64, n: usize, integer: bool) -> Vec<f64> {
    let mut ticks = nice_linear_ticks(lo, hi, n);
    if integer {
        ticks.retain(|t| t.fract() == 0.0);
        if ticks.len() < 2 {
            ticks = vec![lo.ceil(), hi.floor()];
            ticks.dedup();
        }
    }
    ticks
}

/// Where a `w` x `h` legend goes in the plot `xs` x `ys` (pixels): the corner covering the
/// fewest of the `ink` pixels (data, lines, the band), top-left on a tie, 12 px in from the frame.
fn legend_corner(ink: &[(i32, i32)], (xs, ys): (Range<i32>, Range<i32>), (w, h): (i32, i32)) -> (i32, i32) {
    let m = 12;
    let corners = [
        (xs.start + m, ys.start + m),
        (xs.end - m - w, ys.start + m),
        (xs.start + m, ys.end - m - h),
        (xs.end - m - w, ys.end - m - h),
    ];
    let covered = |&(x, y): &(i32, i32)| {
        ink.iter().filter(|&&(px, py)| px >= x - 4 && px <= x + w + 4 && py >= y - 4 && py <= y + h + 4).count()
    };
    corners.iter().copied().min_by_key(covered).unwrap_or(corners[0])
}

/// Words of `text` in lines no wider than `width` pixels at `size` (a note too long for one
/// line is wrapped, never cut off at the figure's edge).
fn wrap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    text: &str,
    size: f64,
    width: i32,
) -> Result<Vec<String>, String> {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        let trial = if cur.is_empty() { word.to_string() } else { format!("{cur} {word}") };
        if !cur.is_empty() && Label::new(&trial, size).width(root)? > width {
            lines.push(std::mem::replace(&mut cur, word.to_string()));
        } else {
            cur = trial;
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    Ok(lines)
}

/// A linear axis with the tick values we chose (whole numbers for counts): plotters'
/// `with_key_points` gives a plain f64 axis no label formatter.
struct Ticked {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

impl ValueFormatter<f64> for Ticked {
    fn format(value: &f64) -> String {
        fmt_tick(*value)
    }
}

/// The range of a linear y axis for `values` (and the band, if any, which must show whole).
///
/// Rates, counts, percentages and CPU times are never negative, and for them the axis starts at
/// zero: the height of a line is then its size, and a steady 942 Mb/s with minutes that differ
/// by 0.15 % is a flat line near the top, not a saw-tooth filling the plot (which is what an axis
/// fitted to the data, 941.3 to 942.6, drew). All zero gives 0 to 1, so "nothing lost" is a line
/// on the bottom axis with 1 above it. Only data that goes below zero gets an axis fitted to it.
pub fn linear_y_range(values: impl Iterator<Item = f64>, band: Option<(f64, f64)>) -> (f64, f64) {
    let finite = values.filter(|v| v.is_finite());
    let band = band.filter(|(a, b)| a.is_finite() && b.is_finite());
    let span = axis_span_opt(finite.chain(band.into_iter().flat_map(|(a, b)| [a, b])));
    padded_linear(span)
}

fn axis_span_opt(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
    })
}

/// A linear axis range around the data with 5 % headroom, from 0 whenever the data is
/// non-negative (see [`linear_y_range`]); all zero gives 0 to 1.
fn padded_linear(span: Option<(f64, f64)>) -> (f64, f64) {
    let Some((lo, hi)) = span else { return (0.0, 1.0) };
    if lo >= 0.0 {
        if hi <= 0.0 {
            // All zero (a loss curve of a clean run): 0..1, not ticks around -0.5..0.5.
            return (0.0, 1.0);
        }
        return (0.0, hi * 1.05);
    }
    if lo >= hi {
        return axis_span([lo, hi].into_iter());
    }
    let pad = (hi - lo) * 0.05;
    (lo - pad, if hi == 0.0 { 0.0 } else { hi + pad })
}

/// Everything about a line chart except its y axis, whose type depends on `log_y`.
struct LineFrame<'a, 'b, DB: DrawingBackend> {
    root: &'a DrawingArea<DB, Shift>,
    mode: TextMode,
    chart: &'b LineChart,
    runs: &'b [Vec<Vec<(f64, f64)>>],
    x: (f64, f64),
}

/// What a line chart legend entry looks like.
enum Key {
    Series(RGBColor),
    Diagonal,
    Band,
}

impl<DB: DrawingBackend> LineFrame<'_, '_, DB> {
    fn draw<Y>(&self, y_spec: Y, (ylo, yhi): (f64, f64)) -> Result<(), String>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let (root, mode, c) = (self.root, self.mode, self.chart);
        let (xlo, xhi) = self.x;
        Label::new(&c.title, 22.0).bold().draw(root, mode, (16, 12))?;
        let width = root.dim_in_pixel().0 as i32;
        let mut header = 50;
        for (i, line) in wrap(root, &c.note, 15.0, width - 32)?.iter().take(3).enumerate() {
            Label::new(line, 15.0).colour(SOFT_INK).draw(root, mode, (16, 42 + 20 * i as i32))?;
            header = 70 + 20 * i as i32;
        }
        let (_, body) = root.split_vertically(header);
        let mut chart = ChartBuilder::on(&body)
            .margin(16)
            .margin_top(8)
            .y_label_area_size(90)
            .x_label_area_size(50)
            .build_cartesian_2d(xlo..xhi, y_spec)
            .map_err(de)?;
        let (plot_xs, plot_ys) = chart.plotting_area().get_pixel_range();
        let fmt = |v: &f64| fmt_tick(*v);
        chart
            .configure_mesh()
            .bold_line_style(GRID)
            .axis_style(SOFT_INK)
            .x_labels(((plot_xs.end - plot_xs.start) / 90).max(2) as usize)
            .y_labels(((plot_ys.end - plot_ys.start) / 50).max(2) as usize)
            .max_light_lines(0)
            .x_label_formatter(&fmt)
            .y_label_formatter(&fmt)
            .label_style(tick_style(14.0))
            .draw()
            .map_err(de)?;
        let mid = ((plot_xs.start + plot_xs.end) / 2, (plot_ys.start + plot_ys.end) / 2);
        Label::new(&c.y_label, 15.0).at(HPos::Center, VPos::Top).up().draw(root, mode, (18, mid.1))?;
        let x_title = Label::new(&c.x_label, 15.0).at(HPos::Center, VPos::Bottom);
        x_title.draw(root, mode, (mid.0, plot_ys.end + 50 - 2))?;

        let has_data = self.runs.iter().any(|r| !r.is_empty());
        let mut legend: Vec<(&str, Key)> = Vec::new();
        if let Some(b) = &c.band {
            // Under the data: shaded from lo to hi (at least a pixel high, so a tight band on an
            // axis from zero is still seen), the reference value dashed.
            if [b.lo, b.hi, b.at].iter().all(|v| v.is_finite()) {
                let y0 = chart.backend_coord(&(xlo, b.lo.min(b.hi))).1;
                let y1 = chart.backend_coord(&(xlo, b.hi.max(b.lo))).1;
                let (top, bottom) = (y1.min(y0), y0.max(y1).max(y1.min(y0) + 2));
                let shade = Rectangle::new([(plot_xs.start, top), (plot_xs.end, bottom)], BAND.mix(0.35).filled());
                root.draw(&shade).map_err(de)?;
                let line = vec![(xlo, b.at), (xhi, b.at)];
                chart.draw_series(DashedLineSeries::new(line, 10, 6, BAND_LINE.stroke_width(2))).map_err(de)?;
                legend.push((b.label.as_str(), Key::Band));
            }
        }
        if c.diagonal && has_data {
            let (a, b) = (xlo.max(ylo), xhi.min(yhi));
            if a < b {
                // Straight in pixels on linear axes; a curve on a log y axis, so sample it.
                let n = if c.log_y { 200 } else { 1 };
                let diag: Vec<(f64, f64)> =
                    (0..=n).map(|i| a + (b - a) * f64::from(i) / f64::from(n)).map(|v| (v, v)).collect();
                chart.draw_series(DashedLineSeries::new(diag, 8, 6, SOFT_INK.stroke_width(1))).map_err(de)?;
                legend.push(("y = x", Key::Diagonal));
            }
        }
        for (i, (series, runs)) in c.series.iter().zip(self.runs).enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            for run in runs {
                chart.draw_series(LineSeries::new(run.iter().copied(), colour.stroke_width(2))).map_err(de)?;
            }
            chart.draw_series(runs.iter().flatten().map(|&p| Circle::new(p, 3, colour.filled()))).map_err(de)?;
            if !series.name.is_empty() {
                legend.push((series.name.as_str(), Key::Series(colour)));
            }
        }
        if !legend.is_empty() {
            // The corner of the plot that hides the least: on an axis from zero a steady rate
            // runs along the top, where a legend in the top-left corner would cover it.
            let (w, h) = self.legend_size(&legend)?;
            let mut ink: Vec<(i32, i32)> = Vec::new();
            for run in self.runs.iter().flatten() {
                let px: Vec<(i32, i32)> = run.iter().map(|p| chart.backend_coord(p)).collect();
                ink.extend(&px);
                for pair in px.windows(2) {
                    let ((ax, ay), (bx, by)) = (pair[0], pair[1]);
                    for k in 1..16 {
                        ink.push((ax + (bx - ax) * k / 16, ay + (by - ay) * k / 16));
                    }
                }
            }
            if let Some(b) = &c.band {
                for v in [b.lo, b.hi, b.at] {
                    let y = chart.backend_coord(&(xlo, v)).1;
                    ink.extend((plot_xs.start..plot_xs.end).step_by(8).map(|x| (x, y)));
                }
            }
            let corner = legend_corner(&ink, (plot_xs.clone(), plot_ys.clone()), (w, h));
            self.legend(&legend, corner)?;
        }
        if !has_data {
            Label::new("no data", 22.0).colour(NOTE_INK).at(HPos::Center, VPos::Center).draw(root, mode, mid)?;
        }
        Ok(())
    }

    /// Width and height of the legend box for `entries`.
    fn legend_size(&self, entries: &[(&str, Key)]) -> Result<(i32, i32), String> {
        let (row_h, sample, gap) = (20, 26, 8);
        let mut text_w = 0;
        for (name, _) in entries {
            text_w = text_w.max(Label::new(name, 14.0).width(self.root)?);
        }
        Ok((10 + sample + gap + text_w + 12, 8 + row_h * entries.len() as i32 + 4))
    }

    /// A boxed legend, one entry per line, with its top-left at `corner` inside the plot.
    fn legend(&self, entries: &[(&str, Key)], corner: (i32, i32)) -> Result<(), String> {
        let root = self.root;
        let (row_h, sample, gap) = (20, 26, 8);
        let (x, y) = corner;
        let (w, h) = self.legend_size(entries)?;
        root.draw(&Rectangle::new([(x, y), (x + w, y + h)], WHITE.mix(0.9).filled())).map_err(de)?;
        root.draw(&Rectangle::new([(x, y), (x + w, y + h)], GRID.stroke_width(1))).map_err(de)?;
        for (i, (name, key)) in entries.iter().enumerate() {
            let (sx, sy) = (x + 10, y + 8 + row_h * i as i32 + row_h / 2);
            match key {
                Key::Series(colour) => {
                    root.draw(&PathElement::new(vec![(sx, sy), (sx + sample, sy)], colour.stroke_width(2)))
                        .map_err(de)?;
                    root.draw(&Circle::new((sx + sample / 2, sy), 3, colour.filled())).map_err(de)?;
                }
                Key::Band => {
                    let swatch = Rectangle::new([(sx, sy - 6), (sx + sample, sy + 6)], BAND.mix(0.35).filled());
                    root.draw(&swatch).map_err(de)?;
                    root.draw(&PathElement::new(vec![(sx, sy), (sx + sample, sy)], BAND_LINE.stroke_width(2)))
                        .map_err(de)?;
                }
                Key::Diagonal => {
                    for k in [0, 10, 20] {
                        let dash = vec![(sx + k, sy), (sx + (k + 6).min(sample), sy)];
                        root.draw(&PathElement::new(dash, SOFT_INK.stroke_width(1))).map_err(de)?;
                    }
                }
            }
            let label = Label::new(name, 14.0).at(HPos::Left, VPos::Center);
            label.draw(root, self.mode, (sx + sample + gap, sy))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_are_round_and_never_empty() {
        assert_eq!(nice_log_ticks(1.0, 1000.0, 20), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]);
        assert_eq!(nice_log_ticks(1.0, 1e6, 8), vec![1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
        assert_eq!(nice_log_ticks(30.0, 80.0, 10), vec![30.0, 40.0, 50.0, 60.0, 70.0, 80.0]);
        assert!(nice_log_ticks(41.0, 44.0, 10).len() >= 2);
        assert!(nice_log_ticks(1.0, 1e12, 4).len() <= 4);
        assert!(nice_log_ticks(5.0, 5.0, 4).len() <= 1);
    }

    #[test]
    fn tick_labels_read_like_numbers() {
        assert_eq!(fmt_tick(1000.0), "1,000");
        assert_eq!(fmt_tick(0.5), "0.5");
        assert_eq!(fmt_tick(0.30000000000000004), "0.3");
        assert_eq!(fmt_tick(12.5), "12.5");
        assert_eq!(fmt_tick(-2500.0), "-2,500");
        assert_eq!(fmt_tick(100000.0), "100,000");
        assert_eq!(fmt_count(1234567), "1,234,567");
        assert_eq!(fmt_count(12_345_678), "1.23e7");
        assert_eq!(fmt_tick(1e-5), "1e-5");
        assert_eq!(fmt_tick(1.0000000006e202), "1e202");
        assert_eq!(fmt_tick(-2.5e20), "-2.5e20");
    }

    #[test]
    fn viridis_ends_and_clamps() {
        assert_eq!(viridis(0.0), RGBColor(68, 1, 84));
        assert_eq!(viridis(1.0), RGBColor(253, 231, 37));
        assert_eq!(viridis(f64::NAN), viridis(0.0));
        assert_eq!(viridis(7.0), viridis(1.0));
    }

    #[test]
    fn overlay_lines_are_cut_at_the_plot_edges() {
        let pts = [(0.0, 10.0), (1.0, 10.0), (2.0, 1000.0), (3.0, 10.0), (4.0, 10.0)];
        let runs = clipped_runs(&pts, (0.0, 4.0), (1.0, 100.0));
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_eq!(runs[0].len(), 3);
        assert!((runs[0][2].0 - 1.5).abs() < 1e-9 && (runs[0][2].1 - 100.0).abs() < 1e-9, "{runs:?}");
        assert!((runs[1][0].0 - 2.5).abs() < 1e-9, "{runs:?}");
        assert!(clipped_runs(&[(5.0, 10.0), (6.0, 10.0)], (0.0, 4.0), (1.0, 100.0)).is_empty());
        let whole = clipped_runs(&pts, (0.0, 4.0), (1.0, 1e4));
        assert_eq!(whole.len(), 1);
        assert!(whole[0].iter().zip(pts).all(|(a, b)| a.0 == b.0 && (a.1 / b.1 - 1.0).abs() < 1e-12), "{whole:?}");
    }

    #[test]
    fn svg_font_sizes_match_the_png_em() {
        let svg = "<svg>\n<text font-size=\"19.35483870967742\">x</text><text font-size=\"oops\">";
        let out = rescale_font_sizes(svg);
        assert!(out.contains("font-size=\"20.6\""), "{out}");
        assert!(out.contains("font-size=\"oops\""), "{out}");
        assert_eq!(rescale_font_sizes("font-size=\"12"), "font-size=\"12.8");
    }

    #[test]
    fn segments_break_at_bad_points() {
        let pts = [(0.0, 1.0), (1.0, f64::NAN), (2.0, 3.0), (3.0, 0.0), (4.0, 5.0)];
        assert_eq!(segments(&pts, false).len(), 2);
        assert_eq!(segments(&pts, true).len(), 3);
    }

    /// The embedded font's tables parse, and agree with what plotters (ab_glyph) measures.
    #[test]
    fn font_metrics_match_plotters_layout() {
        ensure_fonts().unwrap();
        for bold in [false, true] {
            let m = FontMetrics::get(bold).expect("DejaVu tables");
            assert_ne!(m.glyph('a'), 0);
            assert_ne!(m.glyph('µ'), 0);
            assert_eq!(m.glyph('\u{10FFFF}'), 0);
            let (adv_space, _) = m.h_metrics(m.glyph(' '));
            assert!(adv_space > 0);
            for text in ["packets per cell", "Round-trip time, 10,000 pps, 64 B", "AVATAR To"] {
                let label = Label::new(text, 15.0);
                let label = if bold { label.bold() } else { label };
                let ours = label.layout().unwrap().1;
                let style = label.style();
                let theirs = f64::from(style.font.box_size(text).unwrap().0);
                assert!((ours - theirs).abs() <= 1.0, "{text:?} bold={bold}: {ours} vs {theirs}");
            }
        }
    }

    #[test]
    fn a_steady_rate_is_drawn_from_zero_not_zoomed_into_its_wobble() {
        // The 30-minute soak at 942 Mb/s: every minute within 0.15 %. Fitted to the data the
        // axis ran from 941.3 to 942.6 and a steady run looked like a saw-tooth.
        let minutes = [941.3, 942.6, 941.8, 942.4, 941.5, 942.1];
        assert_eq!(padded_linear(Some((941.3, 942.6))).0, 0.0);
        let (lo, hi) = linear_y_range(minutes.iter().copied(), None);
        assert_eq!(lo, 0.0);
        assert!((942.6..=942.6 * 1.06).contains(&hi), "{hi}");
        assert!((942.6 - 941.3) / (hi - lo) < 0.002);
        // The band (98-100 % of 942) is shown whole, on the same axis from 0.
        let (lo, hi) = linear_y_range(minutes.iter().copied(), Some((923.16, 960.0)));
        assert_eq!(lo, 0.0);
        assert!(hi >= 960.0, "{hi}");
        // All zero (nothing lost): 0 to 1. Nothing: 0 to 1. Non-finite values are ignored.
        assert_eq!(linear_y_range([0.0, 0.0].into_iter(), None), (0.0, 1.0));
        assert_eq!(linear_y_range(std::iter::empty(), None), (0.0, 1.0));
        assert_eq!(linear_y_range([f64::NAN, 5.0].into_iter(), None).0, 0.0);
        // Only data below zero gets an axis fitted to it.
        let (lo, hi) = linear_y_range([-5.0, 5.0].into_iter(), None);
        assert!(lo < -5.0 && hi > 5.0);
    }

    #[test]
    fn counts_get_whole_number_ticks() {
        assert_eq!(linear_ticks(0.0, 1.0, 10, true), vec![0.0, 1.0]);
        assert_eq!(linear_ticks(0.0, 3.15, 10, true), vec![0.0, 1.0, 2.0, 3.0]);
        assert!(linear_ticks(0.0, 1.0, 10, false).len() > 2);
    }

    #[test]
    fn received_against_offered_has_one_scale_on_both_axes() {
        let c = LineChart {
            series: vec![Series { name: "a".into(), points: vec![(1.0, 0.5), (2.0, 0.8)] }],
            diagonal: true,
            ..LineChart::default()
        };
        let (x, y) = line_chart_axes(&c);
        assert_eq!((x.0, y.0), (0.0, 0.0));
        assert_eq!(x.1, y.1, "y = x at 45 degrees");
        assert!(x.1 >= 2.0);
    }

    #[test]
    fn the_legend_goes_where_it_hides_least() {
        // Data along the top (a rate on an axis from zero): the legend leaves the top corners.
        let top: Vec<(i32, i32)> = (100..900).map(|x| (x, 80)).collect();
        let (_, y) = legend_corner(&top, (100..900, 60..560), (200, 60));
        assert!(y > 300, "{y}");
        // Nothing in the way: top-left.
        assert_eq!(legend_corner(&[], (100..900, 60..560), (200, 60)), (112, 72));
    }

    #[test]
    fn a_narrow_latency_band_is_drawn_on_at_least_a_decade() {
        // Every round trip 40-47 µs: fitted to its rows, the band filled the plot top to bottom.
        let y_edges: Vec<f64> = (0..=40).map(|i| 10.0 * 1.09f64.powi(i)).collect();
        let n_rows = y_edges.len() - 1;
        let mut counts = vec![0u64; 2 * n_rows];
        for (i, e) in y_edges.windows(2).enumerate() {
            if e[0] >= 39.0 && e[1] <= 48.0 {
                counts[i] = 100;
                counts[n_rows + i] = 80;
            }
        }
        assert!(counts.iter().any(|&c| c > 0));
        let h = HeatMap { x_edges: vec![0.0, 1.0, 2.0], y_edges, counts, ..HeatMap::default() };
        let (lo, hi) = Grid::new(&h).y;
        assert!(hi / lo >= 10.0 * (1.0 - 1e-9), "{lo}..{hi}");
        assert!(lo < 39.0 && hi > 48.0);
        assert_eq!(at_least_a_decade(1.0, 1000.0), (1.0, 1000.0));
        let (a, b) = at_least_a_decade(40.0, 44.0);
        assert!(((b / a) - 10.0).abs() < 1e-9 && ((a * b).sqrt() - (40.0f64 * 44.0).sqrt()).abs() < 1e-9);
    }
}
