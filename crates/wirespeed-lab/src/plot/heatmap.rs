//! The latency heat map: cells coloured by count on a log scale, overlay lines, the strip of
//! lost time and the colour bar.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::axis::{axis_span, fmt_count, fmt_tick, nice_log_ticks};
use super::lines::segments;
use super::text::{tick_style, Label, TextMode};
use super::{de, HeatMap, GRID, HALO, INK, LOST_RED, NOTE_INK, OVERLAY, SOFT_INK, STRIP_BG, VIRIDIS};

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

/// Draw the heat map on any backend; the caller owns writing the result.
pub(super) fn draw_heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    h: &HeatMap,
) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
