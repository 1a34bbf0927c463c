//! The figures and the HTML report of a sweep: seed 004's two figures (received against
//! transmitted data rate, and packet rate, one line per datagram size), loss against offered
//! rate, and the receiver's CPU per datagram, as PNG and SVG, and one self-contained HTML page
//! (the SVGs inline, no scripts, no external files) that can be mailed or attached to a ticket.

use super::sweep::{series_name, MedianRow, SweepDoc};
use crate::plot::{self, LineChart, Series};
use std::path::{Path, PathBuf};
use wirespeed::units;
use wirespeed::{Error, Result};

/// One figure of the report: its file base name, its caption, and the chart.
pub struct Figure {
    /// File name without extension (`rx-vs-tx-rate` gives rx-vs-tx-rate.png and .svg).
    pub name: &'static str,
    /// What the figure shows and how to read it, under it in the report.
    pub caption: String,
    /// The chart.
    pub chart: LineChart,
}

/// The series of one quantity against another, one per (receive buffer, size), from the medians.
fn series(doc: &SweepDoc, f: impl Fn(&MedianRow) -> Option<(f64, f64)>) -> Vec<Series> {
    // Decided from what was measured, as the summary does, so two buffers never share a label.
    let several = doc.medians.iter().map(|m| m.rcvbuf).collect::<std::collections::BTreeSet<_>>().len() > 1;
    let mut keys: Vec<(u64, usize)> = doc.medians.iter().map(|m| (m.rcvbuf, m.size)).collect();
    keys.dedup();
    keys.into_iter()
        .map(|(rcvbuf, size)| {
            let mut points: Vec<(f64, f64)> =
                doc.medians.iter().filter(|m| m.rcvbuf == rcvbuf && m.size == size).filter_map(&f).collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { name: series_name(size, rcvbuf, several), points }
        })
        .collect()
}

/// The report's figures, drawn from the medians of the repeats; with a fleet of receivers,
/// one more: each host's loss.
pub fn figures(doc: &SweepDoc) -> Vec<Figure> {
    let mut v = common_figures(doc);
    v.extend(per_host(doc));
    v
}

/// A fleet's sweep: loss against the offered rate, one line per receiving host (the worst run
/// of each rate on that host), so the host that loses first is seen at once.
fn per_host(doc: &SweepDoc) -> Option<Figure> {
    let mut names: Vec<String> = Vec::new();
    for r in &doc.rows {
        for h in &r.point.hosts {
            if !names.contains(&h.host) {
                names.push(h.host.clone());
            }
        }
    }
    if names.is_empty() {
        return None;
    }
    let series = names
        .iter()
        .map(|name| {
            let mut worst: Vec<(f64, f64)> = Vec::new();
            for r in &doc.rows {
                let (Some(asked), Some(h)) = (r.point.asked_bps, r.point.hosts.iter().find(|h| &h.host == name)) else {
                    continue;
                };
                let loss = if h.point.sent > 0 { 100.0 * h.point.missing as f64 / h.point.sent as f64 } else { 0.0 };
                let x = asked / 1e9;
                match worst.iter_mut().find(|(a, _)| *a == x) {
                    Some(p) => p.1 = p.1.max(loss),
                    None => worst.push((x, loss)),
                }
            }
            worst.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { name: name.clone(), points: worst }
        })
        .collect();
    Some(Figure {
        name: "loss-per-host",
        caption: format!(
            "Loss on each receiving host of the fleet against the offered rate of the whole point (each host \
             receives its share: 1/{} of it), per cent of what was sent to it, the worst run of each rate. The \
             host that leaves 0 first is the fleet's limit.",
            names.len()
        ),
        chart: LineChart {
            title: "Loss per receiving host".into(),
            x_label: "offered to the fleet (Gb/s of UDP payload)".into(),
            y_label: "lost (% of datagrams sent to the host)".into(),
            series,
            note: "One line per host; at 0 the host lost nothing.".into(),
            ..LineChart::default()
        },
    })
}

fn common_figures(doc: &SweepDoc) -> Vec<Figure> {
    let place = &doc.placement.kind;
    let reps = if doc.repeat > 1 { format!(", median of {} runs", doc.repeat) } else { String::new() };
    vec![
        Figure {
            name: "rx-vs-tx-rate",
            caption: format!(
                "Received against transmitted data rate, one line per datagram size (seed 004, Figure 1). \
                 x is what the sender really sent, y what arrived (unique datagrams, UDP payload); on the dashed \
                 diagonal nothing was lost. {}s points{reps}, {place}.",
                doc.duration_s
            ),
            chart: LineChart {
                title: "Received vs transmitted data rate".into(),
                x_label: "transmitted (Gb/s of UDP payload)".into(),
                y_label: "received (Gb/s of UDP payload)".into(),
                series: series(doc, |m| Some((m.achieved_bps / 1e9, m.received_bps / 1e9))),
                diagonal: true,
                note: "Both axes from 0. On the dashed diagonal nothing was lost; below it, the gap is the loss."
                    .into(),
                ..LineChart::default()
            },
        },
        Figure {
            name: "rx-vs-tx-pps",
            caption: format!(
                "Received against transmitted packet rate, one line per datagram size (seed 004, Figure 2): \
                 where the lines leave the diagonal at the same packet rate whatever the size, the receiver \
                 is bound by packets, not bytes. {}s points{reps}, {place}.",
                doc.duration_s
            ),
            chart: LineChart {
                title: "Received vs transmitted packet rate".into(),
                x_label: "transmitted (thousand datagrams/s)".into(),
                y_label: "received (thousand datagrams/s)".into(),
                series: series(doc, |m| Some((m.achieved_pps / 1e3, m.received_pps / 1e3))),
                diagonal: true,
                note: "Both axes from 0. On the dashed diagonal nothing was lost; below it, the gap is the loss."
                    .into(),
                ..LineChart::default()
            },
        },
        Figure {
            name: "loss-vs-offered",
            caption: format!(
                "Loss against the offered (asked) rate: datagrams the sender sent that never arrived, per cent \
                 of those sent{}. The kernel's share of it is in the tables below.",
                if doc.repeat > 1 { ", in the worst of the runs of each point" } else { "" }
            ),
            chart: LineChart {
                title: if doc.repeat > 1 { "Loss vs offered rate (worst run)" } else { "Loss vs offered rate" }.into(),
                x_label: "offered (Gb/s of UDP payload)".into(),
                y_label: "lost (% of datagrams sent)".into(),
                series: series(doc, |m| m.asked_bps.map(|a| (a / 1e9, m.max_loss_percent))),
                note: loss_note(doc),
                ..LineChart::default()
            },
        },
        Figure {
            name: "rx-cpu-per-packet",
            caption: "The receiver's capture-thread CPU time per datagram against the packet rate: flat means the \
                      cost is per datagram; falling means batching (more datagrams per system call) at higher rates."
                .into(),
            chart: LineChart {
                title: "Receiver CPU per datagram".into(),
                x_label: "transmitted (thousand datagrams/s)".into(),
                y_label: "receiver CPU per datagram (ns)".into(),
                series: series(doc, |m| Some((m.achieved_pps / 1e3, m.recv_cpu_ns_per_packet))),
                note: "y from 0 ns: a line's height is the cost of a datagram.".into(),
                ..LineChart::default()
            },
        },
    ]
}

/// What the loss figure shows, in words, so the figure says it without its caption: a sweep
/// that lost nothing is a flat line at 0 on an axis from 0.
fn loss_note(doc: &SweepDoc) -> String {
    let offered: Vec<&MedianRow> = doc.medians.iter().filter(|m| m.asked_bps.is_some()).collect();
    let lossy = offered.iter().filter(|m| m.max_loss_percent > 0.0).count();
    if offered.is_empty() {
        "no point with an offered rate was measured".into()
    } else if lossy == 0 {
        format!("0 % lost at every one of the {} points: a flat line at 0", offered.len())
    } else {
        format!("y from 0 %: loss at {lossy} of the {} points; 0 = nothing lost", offered.len())
    }
}

/// Write every figure (PNG and SVG) and report.html into `dir`; returns the files written.
pub fn write(dir: &Path, doc: &SweepDoc) -> Result<Vec<PathBuf>> {
    let figs = figures(doc);
    let mut files = Vec::new();
    let mut svgs = Vec::new();
    for f in &figs {
        let (png, svg) = plot::line_chart_files(&f.chart, &dir.join(f.name))?;
        let body =
            std::fs::read_to_string(&svg).map_err(|e| Error::io(format!("cannot read back {}: {e}", svg.display())))?;
        svgs.push(body);
        files.push(png);
        files.push(svg);
    }
    let html = html(doc, &figs, &svgs);
    let p = dir.join("report.html");
    super::sweep::write_atomic(&p, html.as_bytes())?;
    files.push(p);
    Ok(files)
}

/// Escape text for HTML.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            _ => o.push(c),
        }
    }
    o
}

/// An SVG document made fit to sit inside HTML: the XML declaration dropped, and scaled to the
/// page width.
fn inline_svg(svg: &str) -> String {
    let body = match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    };
    body.replacen("<svg ", "<svg class=\"fig\" preserveAspectRatio=\"xMidYMid meet\" ", 1)
}

const STYLE: &str = "body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;color:#1e1e1e;padding:0 1em}\
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:right}\
th{background:#f3f3f3}td.l,th.l{text-align:left}tr.lossy td{background:#fdecea}\
svg.fig{width:100%;height:auto;border:1px solid #eee}figure{margin:1.5em 0}figcaption{font-size:.9em;color:#555}\
.facts td{text-align:left}code{background:#f5f5f5;padding:0 .25em}ul.summary li{margin:.3em 0}";

/// The report page.
pub fn html(doc: &SweepDoc, figs: &[Figure], svgs: &[String]) -> String {
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    h.push_str(&format!("<title>wirespeed sweep {}</title>", esc(&doc.started)));
    h.push_str(&format!("<style>{STYLE}</style></head><body>\n"));
    h.push_str("<h1>wirespeed bench sweep</h1>\n");
    let sizes: Vec<String> = doc.sizes.iter().map(|s| format!("{s} B")).collect();
    let bufs: Vec<String> = doc.rcvbufs.iter().map(|&b| units::bytes(b)).collect();
    let facts = [
        ("command", format!("<code>{}</code>", esc(&doc.command))),
        ("when", format!("{} .. {} (UTC)", esc(&doc.started), esc(&doc.updated))),
        (
            "host",
            esc(&format!(
                "{}: {} CPUs, {}; Linux {}",
                doc.host.hostname, doc.host.cpus, doc.host.cpu_model, doc.host.kernel
            )),
        ),
        ("placement", esc(&doc.placement.description)),
        (
            "points",
            esc(&format!(
                "{} rates x {} sizes ({}) x {} receive buffers ({}) x {} passes, {} s each{}; {} of {} measured{}",
                doc.rates.len(),
                doc.sizes.len(),
                sizes.join(", "),
                doc.rcvbufs.len(),
                bufs.join(", "),
                doc.repeat,
                doc.duration_s,
                if doc.gso { ", sender with UDP GSO" } else { "" },
                doc.rows.len(),
                doc.planned,
                if doc.complete { "" } else { " (incomplete)" }
            )),
        ),
        (
            "method",
            format!(
                "Each point is a fresh receiver (<code>wirespeed {} --once</code>{}) and sender (<code>wirespeed \
                 send --rate R --duration T</code>) with CASPER counter datagrams; lost = sequence numbers that \
                 never arrived (exact, the tail included through the sender's end-of-stream message); kernel \
                 drops = the receiving socket's own counter (SO_RXQ_OVFL). Rates are UDP payload bits/s \
                 (decimal SI).",
                esc(&doc.receiver),
                if doc.receiver == "record" {
                    ": every datagram through the RAM ring and the O_DIRECT writer to disk; datagrams dropped at a \
                     full ring count as missing"
                } else {
                    ""
                }
            ),
        ),
    ];
    h.push_str("<table class=\"facts\">");
    for (k, v) in facts {
        h.push_str(&format!("<tr><th class=\"l\">{k}</th><td>{v}</td></tr>"));
    }
    h.push_str("</table>\n<h2>Summary</h2>\n<ul class=\"summary\">");
    for l in &doc.summary {
        h.push_str(&format!("<li>{}</li>", esc(l)));
    }
    if doc.summary.is_empty() {
        h.push_str("<li>no points measured</li>");
    }
    h.push_str("</ul>\n<h2>Figures</h2>\n");
    for (f, svg) in figs.iter().zip(svgs) {
        h.push_str(&format!(
            "<figure id=\"{}\">{}<figcaption>{} (<a href=\"{}.png\">PNG</a>, <a href=\"{}.svg\">SVG</a>)</figcaption></figure>\n",
            f.name,
            inline_svg(svg),
            esc(&f.caption),
            f.name,
            f.name
        ));
    }
    h.push_str("<h2>Medians of the repeats</h2>\n<table id=\"medians\"><tr>");
    for c in [
        "size",
        "rcvbuf",
        "offered",
        "achieved",
        "received",
        "sent pps",
        "received pps",
        "loss %",
        "worst loss %",
        "drops/M",
        "kernel drops",
        "lossy runs",
        "sender ns/datagram",
        "receiver ns/datagram",
    ] {
        h.push_str(&format!("<th>{c}</th>"));
    }
    h.push_str("</tr>\n");
    for m in &doc.medians {
        let cls = if m.lossy_runs > 0 { " class=\"lossy\"" } else { "" };
        h.push_str(&format!(
            "<tr{cls}><td>{} B</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.4}</td><td>{:.4}</td><td>{:.1}</td><td>{}</td><td>{}/{}</td><td>{:.0}</td><td>{:.0}</td></tr>\n",
            m.size,
            units::bytes(m.rcvbuf),
            m.asked_bps.map_or("max".into(), units::bits),
            units::bits(m.achieved_bps),
            units::bits(m.received_bps),
            units::pps(m.achieved_pps),
            units::pps(m.received_pps),
            m.loss_percent,
            m.max_loss_percent,
            m.drops_per_million,
            if m.kernel_socket_drops.is_finite() { format!("{:.0}", m.kernel_socket_drops) } else { "-".into() },
            m.lossy_runs,
            m.runs,
            m.send_cpu_ns_per_packet,
            m.recv_cpu_ns_per_packet
        ));
    }
    h.push_str("</table>\n<h2>Every run</h2>\n<table id=\"runs\"><tr>");
    for c in [
        "pass",
        "size",
        "rcvbuf",
        "offered",
        "achieved",
        "received",
        "sent",
        "received",
        "lost",
        "missing",
        "kernel drops",
        "UDP RcvbufErrors",
        "end msg",
        "sender ns/dg",
        "receiver ns/dg",
        "CPUs (tx / rx)",
    ] {
        h.push_str(&format!("<th>{c}</th>"));
    }
    h.push_str("</tr>\n");
    for r in &doc.rows {
        let p = &r.point;
        let cls = if p.lossy { " class=\"lossy\"" } else { "" };
        h.push_str(&format!(
            "<tr{cls}><td>{}</td><td>{} B</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.0}</td><td>{} / {}</td></tr>\n",
            r.pass,
            p.size,
            units::bytes(r.rcvbuf),
            p.asked_bps.map_or("max".into(), units::bits),
            units::bits(p.achieved_bps),
            units::bits(p.received_bps),
            units::thousands(p.sent),
            units::thousands(p.received),
            units::thousands(p.lost),
            units::thousands(p.missing),
            p.kernel_socket_drops.map_or("-".into(), units::thousands),
            units::thousands(p.kernel_rcvbuf_errors),
            if p.end_of_stream { "yes" } else { "no" },
            p.send_cpu_ns_per_packet,
            p.recv_cpu_ns_per_packet,
            p.send_cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","),
            p.recv_cpu.map_or("-".into(), |c| c.to_string())
        ));
    }
    h.push_str("</table>\n");
    h.push_str(
        "<p>The data: <a href=\"results.csv\">results.csv</a> (one row per run) and \
         <a href=\"results.json\">results.json</a> (schema <code>wirespeed.bench.sweep/1</code>, with each \
         receiver's diagnosis). Made by <code>wirespeed bench sweep</code>.</p>\n</body></html>\n",
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_inlining() {
        assert_eq!(esc("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
        let s = inline_svg("<?xml version=\"1.0\"?>\n<svg width=\"10\" height=\"10\"></svg>");
        assert!(s.starts_with("<svg class=\"fig\""), "{s}");
        assert!(!s.contains("<?xml"));
    }
}
