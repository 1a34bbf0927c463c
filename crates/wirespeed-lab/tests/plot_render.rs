//! Heat maps and line charts render to valid PNG and SVG files of the requested size, on
//! realistic data and on every degenerate input we could think of, without panicking.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use wirespeed_lab::plot::{
    heatmap_files, heatmap_png, heatmap_svg, line_chart_files, Band, HeatMap, LineChart, Series,
};

/// A fresh directory under the system temp dir, removed when dropped (also on failure) unless
/// `WIRESPEED_KEEP_PLOTS` is set, for looking at the figures.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "wirespeed-plot-{tag}-{}-{nanos}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("WIRESPEED_KEEP_PLOTS").is_some() {
            eprintln!("kept {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// 100 one-tenth-second columns x 40 log-spaced rows from 10 µs to 10 ms: a band around
/// 40 µs that drifts up in the middle, a sprinkle of outliers, two losses and a p99 line.
fn synthetic() -> HeatMap {
    let (n_cols, n_rows) = (100usize, 40usize);
    let x_edges: Vec<f64> = (0..=n_cols).map(|i| i as f64 * 0.1).collect();
    let y_edges: Vec<f64> = (0..=n_rows).map(|j| 10.0 * 10f64.powf(3.0 * j as f64 / n_rows as f64)).collect();
    let mut counts = vec![0u64; n_cols * n_rows];
    let mut p99 = Vec::new();
    for c in 0..n_cols {
        let centre = 8.0 + if (40..60).contains(&c) { 3.0 } else { 0.0 };
        for r in 0..n_rows {
            let d = r as f64 - centre;
            counts[c * n_rows + r] = (1000.0 * (-d * d / 2.0).exp()) as u64;
        }
        if c % 7 == 0 {
            counts[c * n_rows + 25 + c % 13] += 1;
        }
        if c == 77 {
            counts[c * n_rows + n_rows - 2] = 3;
        }
        let mid = (x_edges[c] + x_edges[c + 1]) / 2.0;
        p99.push((mid, y_edges[(centre as usize) + 3]));
    }
    HeatMap {
        title: "Round-trip time, 10,000 pps, 64 B, loopback".into(),
        subtitle: "p50 41.2 µs  p99 55.0 µs  max 7.94 ms  lost 3 of 100,000".into(),
        x_label: "time since start (s)".into(),
        y_label: "round-trip time (µs)".into(),
        x_edges,
        y_edges,
        counts,
        marks: vec![(3.0, 3.2), (7.5, 7.5)],
        lines: vec![("p99".into(), p99)],
    }
}

/// Check the PNG signature and that the IHDR chunk declares `w` x `h`.
fn assert_png(path: &Path, w: u32, h: u32, min_bytes: usize) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}: not a PNG", path.display());
    assert_eq!(&bytes[12..16], b"IHDR", "{}: first chunk is not IHDR", path.display());
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    assert_eq!((be(16), be(20)), (w, h), "{}: IHDR size", path.display());
    assert!(bytes.len() > min_bytes, "{}: only {} bytes", path.display(), bytes.len());
}

/// Check the SVG opens with its root element at `w` x `h` and return its text.
fn assert_svg(path: &Path, w: u32, h: u32) -> String {
    let svg = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let body = svg.strip_prefix("<?xml").map_or(svg.as_str(), |rest| &rest[rest.find("?>").unwrap() + 2..]);
    assert!(body.trim_start().starts_with("<svg"), "{}: does not start with <svg", path.display());
    let head = &body[..body.find('>').unwrap()];
    assert!(head.contains(&format!("width=\"{w}\"")), "{}: width in {head}", path.display());
    assert!(head.contains(&format!("height=\"{h}\"")), "{}: height in {head}", path.display());
    assert!(svg.trim_end().ends_with("</svg>"), "{}: not closed", path.display());
    svg
}

#[test]
fn heat_map_renders_to_png_and_svg() {
    let dir = TempDir::new("heat");
    let h = synthetic();
    let png = dir.path("rtt.png");
    let svg = dir.path("rtt.svg");
    heatmap_png(&h, &png, 1200, 700).unwrap();
    heatmap_svg(&h, &svg, 1200, 700).unwrap();
    assert_png(&png, 1200, 700, 20_000);
    let text = assert_svg(&svg, 1200, 700);
    let non_empty = h.counts.iter().filter(|&&c| c > 0).count();
    assert!(non_empty > 500);
    assert!(text.matches("<rect").count() >= non_empty, "fewer rects than non-empty cells");
    for needle in [&h.title, &h.y_label, &h.x_label, "packets per cell", "lost", "p99", "no data"] {
        let expect = needle != "no data";
        assert_eq!(text.contains(needle), expect, "SVG and {needle:?}");
    }
    // Cells carry a fill and nothing else.
    assert!(!text.contains("opacity=\"1\""));
    // White is an empty cell, and the scale says so; with losses marked there is no "0 lost".
    assert!(text.contains("0 (white)") && !text.contains("0 lost"), "the colour scale names empty cells");

    // Another size is honoured as given, and an odd extension still yields a PNG.
    let odd = dir.path("rtt.figure");
    heatmap_png(&h, &odd, 800, 500).unwrap();
    assert_png(&odd, 800, 500, 10_000);
    let leftovers: Vec<_> = std::fs::read_dir(&dir.0).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    assert_eq!(leftovers.len(), 3, "temporary files left behind: {leftovers:?}");
}

#[test]
fn a_heat_map_without_loss_says_0_lost() {
    // Without the strip a reader could not tell "nothing lost" from "losses not drawn".
    let dir = TempDir::new("heat-clean");
    let h = HeatMap { marks: vec![], ..synthetic() };
    let svg = dir.path("clean.svg");
    heatmap_svg(&h, &svg, 1200, 700).unwrap();
    let text = assert_svg(&svg, 1200, 700);
    assert!(text.contains("0 lost"), "an empty lost strip says so");
}

#[test]
fn heat_map_files_appends_extensions() {
    let dir = TempDir::new("files");
    let (png, svg) = heatmap_files(&synthetic(), &dir.path("rtt.10kpps")).unwrap();
    assert_eq!(png, dir.path("rtt.10kpps.png"));
    assert_eq!(svg, dir.path("rtt.10kpps.svg"));
    assert_png(&png, 1200, 700, 20_000);
    assert_svg(&svg, 1200, 700);
}

#[test]
fn degenerate_heat_maps_still_make_valid_files() {
    let dir = TempDir::new("degenerate");
    let base = synthetic();
    let one_col = HeatMap { x_edges: vec![0.0, 1.0], counts: base.counts[..40].to_vec(), ..base.clone() };
    let mut one_row_counts = vec![0; 100];
    one_row_counts[10] = 7;
    let one_row = HeatMap { y_edges: vec![40.0, 50.0], counts: one_row_counts, marks: vec![], ..base.clone() };
    let mut single = vec![0; 4000];
    single[1234] = 1;
    let cases: Vec<(&str, HeatMap, bool)> = vec![
        ("default", HeatMap::default(), true),
        ("all-zero", HeatMap { counts: vec![0; 4000], ..base.clone() }, true),
        ("no-counts", HeatMap { counts: vec![], ..base.clone() }, true),
        ("one-col", one_col, false),
        ("one-row", one_row, false),
        ("single-count", HeatMap { counts: single, lines: vec![], ..base.clone() }, false),
        (
            "flat-edges",
            HeatMap { x_edges: vec![2.0, 2.0], y_edges: vec![5.0, 5.0], counts: vec![9], ..HeatMap::default() },
            true,
        ),
        ("bad-y-edges", HeatMap { y_edges: vec![-1.0, 0.0, 0.0, f64::NAN], ..base.clone() }, true),
        ("short-counts", HeatMap { counts: base.counts[..100].to_vec(), ..base.clone() }, false),
        (
            "extreme-ranges",
            HeatMap {
                x_edges: vec![-1e300, 0.0, 1e300],
                y_edges: vec![1e-300, 1.0, 1e300],
                counts: vec![1, 2, 3, u64::MAX],
                marks: vec![(-1e308, 1e308)],
                ..HeatMap::default()
            },
            false,
        ),
        (
            "odd-marks-and-lines",
            HeatMap {
                marks: vec![(f64::NAN, 1.0), (-5.0, -4.0), (9.9, 1e9), (4.0, 3.0)],
                lines: vec![
                    (String::new(), vec![]),
                    ("p50".into(), vec![(1.0, -3.0), (2.0, f64::INFINITY), (3.0, 1e12), (-7.0, 40.0)]),
                    ("max".into(), vec![(5.0, 50.0)]),
                ],
                ..base.clone()
            },
            false,
        ),
    ];
    for (name, h, empty) in cases {
        let png = dir.path(&format!("{name}.png"));
        let svg = dir.path(&format!("{name}.svg"));
        heatmap_png(&h, &png, 640, 400).unwrap_or_else(|e| panic!("{name}: {e}"));
        heatmap_svg(&h, &svg, 640, 400).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_png(&png, 640, 400, 2_000);
        let text = assert_svg(&svg, 640, 400);
        assert_eq!(text.contains("no data"), empty, "{name}: 'no data' note");
    }
}

#[test]
fn heat_map_errors_name_the_file() {
    let dir = TempDir::new("errors");
    let h = synthetic();
    let missing = dir.path("no/such/dir/rtt.png");
    match heatmap_png(&h, &missing, 1200, 700) {
        Err(e) if e.exit_code() == 1 => {
            assert!(e.to_string().contains("no/such/dir/rtt.png") && !e.to_string().contains('\n'), "{e}")
        }
        other => panic!("expected a runtime error, got {other:?}"),
    }
    match heatmap_svg(&h, &dir.path("no/such/dir/rtt.svg"), 1200, 700) {
        Err(e) if e.exit_code() == 1 => assert!(e.to_string().contains("rtt.svg"), "{e}"),
        other => panic!("expected a runtime error, got {other:?}"),
    }
    for (w, h_px) in [(0, 0), (10, 700), (1200, 5), (100_000, 700)] {
        match heatmap_png(&h, &dir.path("tiny.png"), w, h_px) {
            Err(e) if e.kind() == wirespeed::Kind::Invalid => assert!(e.to_string().contains("tiny.png"), "{e}"),
            other => panic!("{w}x{h_px}: expected a usage error, got {other:?}"),
        }
    }
}

#[test]
fn line_chart_renders_to_png_and_svg() {
    let dir = TempDir::new("lines");
    let rates: [f64; 6] = [1e4, 1e5, 5e5, 1e6, 2e6, 4e6];
    let series = |name: &str, cap: f64| Series {
        name: name.into(),
        points: rates.iter().map(|&r| (r, r.min(cap) * 0.999)).collect(),
    };
    let chart = LineChart {
        title: "Received vs offered rate".into(),
        x_label: "offered (packets/s)".into(),
        y_label: "received (packets/s)".into(),
        series: vec![series("64 B", 1.5e6), series("1472 B", 8e5)],
        diagonal: true,
        note: "Both axes from 0. On the dashed diagonal nothing was lost.".into(),
        band: Some(Band { lo: 1.47e6, hi: 1.5e6, at: 1.5e6, label: "asked 1.5 Mpps (shaded: 98-100 %)".into() }),
        ..LineChart::default()
    };
    let (png, svg) = line_chart_files(&chart, &dir.path("rate")).unwrap();
    assert_png(&png, 1000, 650, 10_000);
    let text = assert_svg(&svg, 1000, 650);
    for needle in [
        "Received vs offered rate",
        "64 B",
        "1472 B",
        "offered (packets/s)",
        "Both axes from 0. On the dashed diagonal nothing was lost.",
        "asked 1.5 Mpps (shaded: 98-100 %)",
    ] {
        assert!(text.contains(needle), "SVG lacks {needle:?}");
    }

    let log = LineChart {
        log_y: true,
        y_label: "loss ratio".into(),
        series: vec![
            Series { name: "64 B".into(), points: vec![(1e4, 0.0), (1e5, 1e-6), (1e6, 1e-3), (2e6, 0.2)] },
            Series { name: "1472 B".into(), points: vec![(1e4, 1e-7), (1e5, 1e-5), (1e6, 0.5)] },
        ],
        diagonal: false,
        ..chart.clone()
    };
    let (png, svg) = line_chart_files(&log, &dir.path("loss")).unwrap();
    assert_png(&png, 1000, 650, 10_000);
    assert!(!assert_svg(&svg, 1000, 650).contains("no data"));

    for (name, c) in [
        ("empty", LineChart::default()),
        ("empty-log", LineChart { log_y: true, diagonal: true, ..LineChart::default() }),
        (
            "one-point",
            LineChart { series: vec![Series { name: "x".into(), points: vec![(3.0, 3.0)] }], ..LineChart::default() },
        ),
        ("all-nonpositive-log", LineChart { log_y: true, series: vec![series("zero", 0.0)], ..LineChart::default() }),
        ("all-zero-counts", LineChart { y_integer: true, series: vec![series("zero", 0.0)], ..LineChart::default() }),
        (
            "band-without-data",
            LineChart {
                band: Some(Band { lo: 1.0, hi: 2.0, at: 2.0, label: "asked".into() }),
                note: "a note far too long to fit on one line of the figure, so it has to be wrapped onto a \
                       second line and then, when it still goes on and on, onto a third line at the most"
                    .into(),
                ..LineChart::default()
            },
        ),
        (
            "nan-band",
            LineChart {
                band: Some(Band { lo: f64::NAN, hi: f64::INFINITY, at: 1.0, label: "bad".into() }),
                series: vec![series("x", 1e5)],
                ..LineChart::default()
            },
        ),
    ] {
        let (png, svg) = line_chart_files(&c, &dir.path(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_png(&png, 1000, 650, 2_000);
        assert_svg(&svg, 1000, 650);
    }
}

#[test]
fn two_hundred_thousand_cells_stay_reasonable() {
    let dir = TempDir::new("big");
    let (n_cols, n_rows) = (2000usize, 100usize);
    let h = HeatMap {
        title: "big".into(),
        x_edges: (0..=n_cols).map(|i| i as f64 * 0.05).collect(),
        y_edges: (0..=n_rows).map(|j| 10f64.powf(1.0 + 3.0 * j as f64 / n_rows as f64)).collect(),
        counts: (0..n_cols * n_rows).map(|i| 1 + (i as u64 * 2654435761) % 5000).collect(),
        ..HeatMap::default()
    };
    let t = std::time::Instant::now();
    let (png, svg) = heatmap_files(&h, &dir.path("big")).unwrap();
    let elapsed = t.elapsed();
    assert_png(&png, 1200, 700, 20_000);
    let text = assert_svg(&svg, 1200, 700);
    assert!(text.matches("<rect").count() >= n_cols * n_rows);
    let bytes = text.len();
    eprintln!("200k cells: {elapsed:?}, PNG {} B, SVG {bytes} B", std::fs::metadata(&png).unwrap().len());
    assert!(bytes < 80 * n_cols * n_rows, "SVG {bytes} B for {} cells", n_cols * n_rows);
}
