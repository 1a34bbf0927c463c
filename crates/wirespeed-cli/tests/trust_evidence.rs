//! The figures wirespeed draws are evidence too: through the real binary, a short soak's rate
//! chart has its y axis from zero with the rate asked and its band drawn and named, its loss chart
//! counts whole datagrams and says what it shows, and a latency heat map names empty cells and
//! always shows its lost strip. What the run measured on a busy host does not matter here: only
//! how it is drawn.

use crate::common;
use common::*;

/// The text of every `<text>` element of an SVG anchored at `anchor` (a line chart's y tick
/// labels are anchored at their end, against the axis).
fn svg_texts(svg: &str, anchor: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter(|t| t.split('>').next().is_some_and(|attrs| attrs.contains(&format!("text-anchor=\"{anchor}\""))))
        .filter_map(|t| t.split_once('>').and_then(|(_, rest)| rest.split("</text>").next()))
        .map(|t| t.trim().to_string())
        .collect()
}

fn y_ticks(svg: &str) -> Vec<f64> {
    svg_texts(svg, "end").iter().map(|t| t.replace(',', "").parse().unwrap_or_else(|_| panic!("tick {t:?}"))).collect()
}

#[test]
fn soak_charts_start_at_zero_and_show_the_asked_rate() {
    let _turn = traffic();
    let dir = TempDir::new("evidence-soak");
    let out =
        run(&["bench", "soak", "--loopback", "--duration", "3s", "--every", "1s", "--rate", "20M", "-o", dir.path()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let rate = std::fs::read_to_string(dir.0.join("soak-rate.svg")).expect("soak-rate.svg");
    let ticks = y_ticks(&rate);
    assert_eq!(ticks.first(), Some(&0.0), "the rate axis starts at zero: {ticks:?}");
    assert!(ticks.last().is_some_and(|&t| t >= 15.0), "and reaches the asked 20 Mb/s: {ticks:?}");
    assert!(rate.contains("asked 20 Mb/s (shaded: 98-100 %)"), "the asked rate and its band are named");
    assert!(rate.contains("y from 0. A flat line in the shaded band"), "the chart says how to read it");
    let loss = std::fs::read_to_string(dir.0.join("soak-loss.svg")).expect("soak-loss.svg");
    let ticks = y_ticks(&loss);
    assert_eq!(ticks.first(), Some(&0.0), "{ticks:?}");
    assert!(ticks.iter().all(|t| t.fract() == 0.0), "whole datagrams: {ticks:?}");
    let doc = json(&std::fs::read_to_string(dir.0.join("soak.json")).expect("soak.json"));
    if doc["intervals"].as_array().expect("rows").iter().all(|r| r["lost"] == 0 && r["kernel_socket_drops"] == 0) {
        assert_eq!(ticks, vec![0.0, 1.0], "nothing lost: an axis of 0 and 1 datagrams");
        assert!(loss.contains("0 lost in every second (ledger and kernel): a flat line at 0"), "it says so");
    } else {
        assert!(loss.contains(" lost (ledger) in second"), "where the loss was");
    }
}

#[test]
fn sweep_figures_start_at_zero_and_say_how_to_read_them() {
    let _turn = traffic();
    let dir = TempDir::new("evidence-sweep");
    let out = run(&[
        "bench",
        "sweep",
        "--loopback",
        "--rates",
        "50M,100M",
        "--sizes",
        "1080",
        "--duration",
        "1",
        "-o",
        dir.path(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    for fig in ["rx-vs-tx-rate", "rx-vs-tx-pps", "loss-vs-offered", "rx-cpu-per-packet"] {
        let svg = std::fs::read_to_string(dir.0.join(format!("{fig}.svg"))).expect("figure");
        let ticks = y_ticks(&svg);
        assert_eq!(ticks.first(), Some(&0.0), "{fig}: the y axis starts at zero: {ticks:?}");
    }
    let rx = std::fs::read_to_string(dir.0.join("rx-vs-tx-rate.svg")).unwrap();
    assert!(rx.contains("Both axes from 0. On the dashed diagonal nothing was lost"), "rx-vs-tx-rate note");
    let loss = std::fs::read_to_string(dir.0.join("loss-vs-offered.svg")).unwrap();
    assert!(
        loss.contains("0 % lost at every one of the 2 points") || loss.contains("y from 0 %: loss at"),
        "loss note"
    );
}

#[test]
fn latency_heat_map_names_empty_cells_and_shows_its_lost_strip() {
    let _turn = traffic();
    let dir = TempDir::new("evidence-ping");
    let out = run(&["ping", "--loopback", "--pps", "1000", "--duration", "1s", "-o", dir.path()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let svg = std::fs::read_to_string(dir.0.join("heatmap-1000pps.svg")).expect("heat map");
    assert!(svg.contains("0 (white)"), "the colour scale says what an empty cell looks like");
    assert!(svg_texts(&svg, "end").iter().any(|t| t == "lost"), "the lost strip is drawn");
    let doc = json(&std::fs::read_to_string(dir.0.join("latency.json")).expect("latency.json"));
    let lost = doc.pointer("/runs/0/replies/lost").and_then(|v| v.as_u64());
    if lost == Some(0) {
        assert!(svg.contains("0 lost"), "an empty lost strip says so");
    }
}
