//! The line chart of the benchmark reports: a few series, an optional reference band and
//! `y = x` diagonal, and a legend in the corner that hides the least.

use std::ops::Range;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::axis::{axis_span_opt, fmt_tick, linear_ticks, linear_y_range, nice_log_ticks, padded_linear, Ticked};
use super::text::{tick_style, Label, TextMode};
use super::{de, LineChart, BAND, BAND_LINE, GRID, NOTE_INK, PALETTE, SOFT_INK};

/// Draw the line chart on any backend; the y axis type differs between linear and log, so
/// the body is generic over it.
pub(super) fn draw_line_chart<DB: DrawingBackend>(
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

/// Runs of drawable points: non-finite points (and, on a log axis, `y <= 0`) break the line.
pub(super) fn segments(points: &[(f64, f64)], log_y: bool) -> Vec<Vec<(f64, f64)>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::Series;

    #[test]
    fn segments_break_at_bad_points() {
        let pts = [(0.0, 1.0), (1.0, f64::NAN), (2.0, 3.0), (3.0, 0.0), (4.0, 5.0)];
        assert_eq!(segments(&pts, false).len(), 2);
        assert_eq!(segments(&pts, true).len(), 3);
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
}
