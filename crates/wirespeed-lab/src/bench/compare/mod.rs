//! wirespeed against other tools over the same points (`wirespeed bench compare`): at each
//! (rate, size) point every tool of the list runs, one after the other, in the same placement
//! (the same CPUs on loopback, the same two partitions otherwise), and the results stand side
//! by side in one table, one CSV, one JSON document and one plot. The tools are receivers
//! (wirespeed recv, iperf3, the bare recvmmsg loop) or, with a recording directory, recorders
//! (wirespeed record, tcpdump -w, netsniff-ng) with the disk's dd rate as the ceiling; each is
//! one file under `bench/peer/` behind [`Tool`].
//!
//! The order rotates from point to point (wirespeed then iperf3, then iperf3 then
//! wirespeed: A B B A ...; with three tools A B C, B C A, C A B), so a slow drift on a shared
//! host (a neighbour waking up, the CPU clocking down) lands on every tool rather than on
//! whichever always ran last.

pub mod doc;
mod notes;

use super::peer::dd::{self, DiskCeiling};
use super::peer::tool::{Measured, Tool};
use super::point::{Placement, PointConfig, Runner};
use super::stats::{mbps_column, median};
use crate::plot::{LineChart, Series};
pub use doc::*;
use notes::notes;
pub use notes::writer_placement;
use std::collections::BTreeMap;
use std::time::Duration;
use wirespeed::units::{self};
use wirespeed::Result;

/// The socket buffer every tool gets: the smallest any tool can be given (iperf3's, capped by
/// net.core.*mem_max), so the comparison is of the programs, not of their buffers.
pub fn socket_buffer(tools: &[Box<dyn Tool>], rcvbuf: u64) -> u64 {
    tools.iter().filter_map(|t| t.buffer_cap()).min().unwrap_or(rcvbuf)
}

/// Run the comparison: one unrecorded warm-up point per tool, then, pass by pass, size by size
/// and rate by rate, every tool in rotating order; `progress` sees each run as it ends. With a
/// recording directory, dd measures the disk before and after the points.
pub fn run(
    runner: &Runner,
    tools: &[Box<dyn Tool>],
    cfg: &CompareConfig,
    progress: &mut dyn FnMut(&Run, usize),
) -> Result<CompareDoc> {
    let buffer = socket_buffer(tools, cfg.rcvbuf);
    let point_cfg = |rate, size| PointConfig { rate, size, duration: cfg.duration, gso: cfg.gso, rcvbuf: buffer };
    let n = tools.len();
    let total = cfg.rates.len() * cfg.sizes.len() * cfg.repeat as usize * n;
    let mut runs: Vec<Run> = Vec::new();
    let mut stopped = false;
    let mut ceilings = Vec::new();
    if let Some(dir) = &cfg.record {
        ceilings.push(dd::disk_ceiling(dir, "before", cfg.dd_bytes));
    }
    if let (Some(&rate), Some(&size)) = (cfg.rates.first(), cfg.sizes.first()) {
        let mut short = point_cfg(rate, size);
        short.duration = cfg.duration.min(Duration::from_secs(1));
        for t in tools {
            if t.run(runner, &short, 0)?.is_none() {
                stopped = true;
                break;
            }
        }
    }
    let mut k = 0usize;
    'all: for pass in 1..=cfg.repeat {
        for &size in &cfg.sizes {
            for (rate_index, &rate) in cfg.rates.iter().enumerate() {
                if stopped {
                    break 'all;
                }
                let first = k % n.max(1);
                k += 1;
                for j in 0..n {
                    let t = &tools[(first + j) % n];
                    let pc = point_cfg(rate, size);
                    let seq = runs.len() as u32 + 1;
                    let mut r = Run {
                        seq,
                        pass,
                        tool: t.name(),
                        rate_index,
                        wirespeed: None,
                        iperf3: None,
                        others: BTreeMap::new(),
                    };
                    match t.run(runner, &pc, seq)? {
                        None => {
                            stopped = true;
                            break 'all;
                        }
                        Some(Measured::Wirespeed(p)) => r.wirespeed = Some(p),
                        Some(Measured::Iperf3(p)) => r.iperf3 = Some(p),
                        Some(Measured::Other(p)) => {
                            r.others.insert(t.name().to_string(), p);
                        }
                    }
                    progress(&r, total);
                    runs.push(r);
                }
            }
        }
    }
    let record = cfg.record.as_ref().map(|dir| {
        if !stopped {
            ceilings.push(dd::disk_ceiling(dir, "after", cfg.dd_bytes));
        }
        let dd: Vec<DiskCeiling> = ceilings.into_iter().filter_map(|c| c.ok()).collect();
        let dd_bytes_per_s = (!dd.is_empty()).then(|| dd.iter().map(|c| c.bytes_per_s).sum::<f64>() / dd.len() as f64);
        RecordSetting { dir: dir.clone(), dd, dd_bytes_per_s }
    });
    let medians = medians(cfg, &runs);
    let mut notes = notes(cfg, tools, buffer, &runner.placement(), &runs, &medians);
    if let Some(r) = &record {
        match r.dd_bytes_per_s {
            Some(b) => notes.push(format!(
                "disk ceiling: dd wrote {} of zeros into {} at {}/s ({}), mean of {} run(s) before and after the points; 'of dd' is each tool's stored payload rate over it",
                units::bytes(r.dd.first().map_or(0, |c| c.bytes)),
                r.dir.display(),
                units::bytes(b as u64),
                if r.dd.iter().all(|c| c.direct) { "O_DIRECT" } else { "through the page cache, then fdatasync: this filesystem has no O_DIRECT" },
                r.dd.len()
            )),
            None => notes.push(format!("disk ceiling: dd could not measure {}", r.dir.display())),
        }
    }
    let mut others = BTreeMap::new();
    let mut iperf3_version = None;
    for t in tools {
        match t.name() {
            "wirespeed" => {}
            "iperf3" => iperf3_version = Some(t.version()),
            name => {
                others.insert(name.to_string(), t.version());
            }
        }
    }
    Ok(CompareDoc {
        head: crate::bench::DocHead { schema: SCHEMA, placement: runner.placement() },
        versions: Versions { wirespeed: env!("CARGO_PKG_VERSION").to_string(), iperf3: iperf3_version, others },
        rates: cfg.rates.iter().map(|&r| super::point::asked_text(r)).collect(),
        sizes: cfg.sizes.clone(),
        duration_s: cfg.duration.as_secs_f64(),
        repeat: cfg.repeat,
        gso: cfg.gso,
        rcvbuf: cfg.rcvbuf,
        iperf3_socket_buffer: buffer,
        tools: tools.iter().map(|t| t.name().to_string()).collect(),
        counts: tools.iter().map(|t| (t.name().to_string(), t.counts())).collect(),
        record,
        runs,
        medians,
        stopped,
        notes,
    })
}

fn tool_median(figs: &[Figures]) -> Option<ToolMedian> {
    if figs.is_empty() {
        return None;
    }
    let m = |f: &dyn Fn(&Figures) -> f64| median(figs.iter().map(f).collect()).unwrap_or(0.0);
    let mo = |f: &dyn Fn(&Figures) -> Option<f64>| median(figs.iter().filter_map(f).collect());
    Some(ToolMedian {
        runs: figs.len(),
        lossy_runs: figs.iter().filter(|f| f.lossy).count(),
        achieved_bps: m(&|f| f.achieved_bps),
        received_bps: m(&|f| f.received_bps),
        loss_percent: m(&|f| f.loss_percent),
        send_cpu_ns_per_packet: mo(&|f| f.send_cpu_ns_per_packet),
        recv_cpu_ns_per_packet: mo(&|f| f.recv_cpu_ns_per_packet),
        recv_all_cpu_ns_per_packet: mo(&|f| f.recv_all_cpu_ns_per_packet),
    })
}

/// Both tools' medians per (size, rate), in the grid's order; points nobody ran are left out.
pub fn medians(cfg: &CompareConfig, runs: &[Run]) -> Vec<Cell> {
    let mut out = Vec::new();
    for &size in &cfg.sizes {
        for (i, &rate) in cfg.rates.iter().enumerate() {
            let of = |tool: &str| -> Vec<Figures> {
                runs.iter()
                    .filter(|r| r.tool == tool && r.rate_index == i)
                    .map(Run::figures)
                    .filter(|f| f.size == size)
                    .collect()
            };
            let (w, p) = (tool_median(&of(TOOLS[0])), tool_median(&of(TOOLS[1])));
            let mut others = BTreeMap::new();
            for r in runs.iter().filter(|r| !TOOLS.contains(&r.tool)) {
                if !others.contains_key(r.tool) {
                    if let Some(m) = tool_median(&of(r.tool)) {
                        others.insert(r.tool.to_string(), m);
                    }
                }
            }
            if w.is_none() && p.is_none() && others.is_empty() {
                continue;
            }
            let ratio = |p: &ToolMedian| match &w {
                Some(w) if p.received_bps > 0.0 => Some(w.received_bps / p.received_bps),
                _ => None,
            };
            let received_ratio = p.as_ref().and_then(ratio);
            let received_ratios = others.iter().filter_map(|(k, m)| Some((k.clone(), ratio(m)?))).collect();
            out.push(Cell {
                asked: super::point::asked_text(rate),
                asked_bps: super::point::asked_bps(rate, size),
                size,
                wirespeed: w,
                iperf3: p,
                received_ratio,
                others,
                received_ratios,
            });
        }
    }
    out
}

fn pct(p: f64) -> String {
    if p == 0.0 {
        "0".into()
    } else if p < 0.001 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

fn ns(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

/// The heading of the run lines.
pub fn header(cfg: &CompareConfig, pl: &Placement, tools: &[Box<dyn Tool>]) -> String {
    let names: Vec<String> = tools
        .iter()
        .map(|t| if t.name() == TOOLS[0] { format!("wirespeed {}", env!("CARGO_PKG_VERSION")) } else { t.version() })
        .collect();
    format!(
        "wirespeed bench compare: {} ({}), {} per point, {} pass(es), {}\n",
        names.join(" and "),
        if cfg.record.is_some() { "UDP, recorded" } else { "UDP" },
        units::nanos(cfg.duration.as_nanos() as f64),
        cfg.repeat,
        pl.description
    )
}

/// One finished run, as progress shows it.
pub fn run_line(r: &Run, total: usize) -> String {
    let f = r.figures();
    let mut extra = Vec::new();
    if let Some(p) = &r.wirespeed {
        if !p.end_of_stream {
            extra.push("no end-of-stream message".to_string());
        }
    }
    if let Some(p) = &r.iperf3 {
        if p.lost != p.missing {
            extra.push(format!("iperf3 itself counted {} lost", units::thousands(p.lost)));
        }
        if p.out_of_order > 0 {
            extra.push(format!("{} out of order", units::thousands(p.out_of_order)));
        }
    }
    for p in r.others.values() {
        for (k, v) in p
            .own
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "file" | "file_bytes" | "first_to_last_s" | "rcvbuf_granted"))
        {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            extra.push(format!("{} {v}", k.replace('_', " ")));
        }
    }
    format!(
        "[{:>3}/{}] {:<9} asked {:>10} size {:>5}: achieved {:>12}  received {:>12}  sent {:>11}  lost {:>9} ({:>6} %)  CPU ns/pkt tx {:>6} rx {:>6}{}",
        r.seq,
        total,
        r.tool,
        f.asked_bps.map_or("max".into(), units::bits),
        f.size,
        units::bits(f.achieved_bps),
        units::bits(f.received_bps),
        units::thousands(f.sent),
        units::thousands(f.sent.saturating_sub(f.received)),
        pct(f.loss_percent),
        ns(f.send_cpu_ns_per_packet),
        ns(f.recv_cpu_ns_per_packet),
        if extra.is_empty() { String::new() } else { format!("  ({})", extra.join("; ")) }
    )
}

/// The tools of a document, in its order (older documents: wirespeed and iperf3).
fn tool_names(doc: &CompareDoc) -> Vec<&str> {
    if doc.tools.is_empty() {
        TOOLS.to_vec()
    } else {
        doc.tools.iter().map(String::as_str).collect()
    }
}

/// One tool's medians at a cell.
fn cell_median<'a>(c: &'a Cell, tool: &str) -> Option<&'a ToolMedian> {
    match tool {
        "wirespeed" => c.wirespeed.as_ref(),
        "iperf3" => c.iperf3.as_ref(),
        other => c.others.get(other),
    }
}

/// Whether the table shows the CPU of every receiving thread: when recording (the writer's
/// CPU counts too) or when wirespeed variants (builds, backends, thread counts) are compared.
fn shows_all_threads(doc: &CompareDoc) -> bool {
    doc.record.is_some() || doc.tools.iter().any(|t| t.starts_with("wirespeed") && t != TOOLS[0])
}

/// The side-by-side table of medians, with its legend and the notes.
pub fn table(doc: &CompareDoc) -> String {
    let dd = doc.record.as_ref().and_then(|r| r.dd_bytes_per_s);
    let mut tool_head = format!("{:>10} {:>10} {:>8} {:>9}", "achieved", "received", "loss %", "rx ns/pkt");
    let all = shows_all_threads(doc);
    if all {
        tool_head.push_str(&format!(" {:>10}", "all ns/pkt"));
    }
    if dd.is_some() {
        tool_head.push_str(&format!(" {:>6}", "of dd"));
    }
    let w = tool_head.len();
    let names = tool_names(doc);
    // wirespeed's received rate over each other tool's, when wirespeed is compared.
    let ratios: Vec<&str> =
        if names.contains(&TOOLS[0]) { names.iter().copied().filter(|n| *n != TOOLS[0]).collect() } else { vec![] };
    let rw = |n: &str| (n.len() + 3).max(9);
    let mut l2 = format!("{:>10} {:>6}", "", "");
    let mut l3 = format!("{:>10} {:>6}", "asked Mb/s", "size");
    for n in &names {
        l2.push_str(&format!(" | {n:^w$}"));
        l3.push_str(&format!(" | {tool_head}"));
    }
    for n in &ratios {
        let r = rw(n);
        l2.push_str(&format!(" | {:>r$}", "received"));
        let label = if *n == TOOLS[1] { "ws/iperf3".to_string() } else { format!("ws/{n}") };
        l3.push_str(&format!(" | {label:>r$}"));
    }
    let mut s = format!(
        "medians over {} pass(es); Mb/s = 10^6 bits/s of UDP payload; loss % = (sent - received) / sent from each tool's own counts\n{l2}\n{l3}\n",
        doc.repeat,
    );
    let cols = |m: Option<&ToolMedian>| {
        let mut t = match m {
            Some(m) => format!(
                "{:>10} {:>10} {:>8} {:>9}",
                mbps_column(m.achieved_bps),
                mbps_column(m.received_bps),
                pct(m.loss_percent),
                ns(m.recv_cpu_ns_per_packet)
            ),
            None => format!("{:>10} {:>10} {:>8} {:>9}", "-", "-", "-", "-"),
        };
        if all {
            // n/a: the tool ran but did not report every thread's CPU (a recorder whose
            // writer reports none); '-': it did not run here.
            let v = m.map_or("-".into(), |m| m.recv_all_cpu_ns_per_packet.map_or("n/a".into(), |v| format!("{v:.0}")));
            t.push_str(&format!(" {v:>10}"));
        }
        if let Some(d) = dd {
            let of = m.map_or("-".into(), |m| format!("{:.2}", m.received_bps / 8.0 / d));
            t.push_str(&format!(" {of:>6}"));
        }
        t
    };
    for c in &doc.medians {
        let mut row = format!("{:>10} {:>6}", c.asked_bps.map_or("max".into(), mbps_column), c.size);
        for n in &names {
            row.push_str(&format!(" | {}", cols(cell_median(c, n))));
        }
        for n in &ratios {
            let r = if *n == TOOLS[1] { c.received_ratio } else { c.received_ratios.get(*n).copied() };
            row.push_str(&format!(" | {:>w$}", r.map_or("-".into(), |r| format!("{r:.3}")), w = rw(n)));
        }
        s.push_str(&row);
        s.push('\n');
    }
    if doc.stopped {
        s.push_str("(stopped early: the medians cover the runs done)\n");
    }
    for n in &doc.notes {
        s.push_str("=> ");
        s.push_str(n);
        s.push('\n');
    }
    s
}

/// The whole report as text: heading, every run, the table.
pub fn text(doc: &CompareDoc, header: &str) -> String {
    let total = doc.rates.len() * doc.sizes.len() * doc.repeat as usize * tool_names(doc).len();
    let mut s = header.to_string();
    for r in &doc.runs {
        s.push_str(&run_line(r, total));
        s.push('\n');
    }
    s.push('\n');
    s.push_str(&table(doc));
    s
}

/// Every run of every tool as CSV, one row each, in the order run.
pub fn csv(doc: &CompareDoc) -> String {
    let mut s = String::from(
        "seq,pass,tool,asked_mbps,size,achieved_mbps,received_mbps,sent,received,missing,loss_percent,\
         tool_lost,tool_lost_percent,out_of_order,lossy,send_cpu_ns_per_packet,recv_cpu_ns_per_packet\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.1}"));
    for r in &doc.runs {
        let f = r.figures();
        // The tool's own loss figure: wirespeed's ledger, iperf3's sequence-gap count.
        let (lost, lost_pct, ooo) = match (&r.wirespeed, &r.iperf3) {
            (Some(p), _) => (p.lost, if p.sent > 0 { p.lost as f64 * 100.0 / p.sent as f64 } else { 0.0 }, p.late),
            (None, Some(p)) => (p.lost, p.lost_percent, p.out_of_order),
            // Other tools keep no loss count of their own beyond what they received.
            (None, None) => (f.sent.saturating_sub(f.received), f.loss_percent, 0),
        };
        s.push_str(&format!(
            "{},{},{},{},{},{:.3},{:.3},{},{},{},{:.6},{},{:.6},{},{},{},{}\n",
            r.seq,
            r.pass,
            r.tool,
            f.asked_bps.map_or("max".into(), |b| format!("{:.3}", b / 1e6)),
            f.size,
            f.achieved_bps / 1e6,
            f.received_bps / 1e6,
            f.sent,
            f.received,
            f.sent.saturating_sub(f.received),
            f.loss_percent,
            lost,
            lost_pct,
            ooo,
            f.lossy,
            opt(f.send_cpu_ns_per_packet),
            opt(f.recv_cpu_ns_per_packet)
        ));
    }
    s
}

/// The plot: median received against offered payload rate, one line per (tool, size), with
/// "received = offered" dashed; flat-out points (no offered rate) are left out.
pub fn chart(doc: &CompareDoc) -> LineChart {
    let mut series = Vec::new();
    for tool in tool_names(doc) {
        for &size in &doc.sizes {
            let points: Vec<(f64, f64)> = doc
                .medians
                .iter()
                .filter(|c| c.size == size)
                .filter_map(|c| {
                    let m = cell_median(c, tool)?;
                    Some((c.asked_bps? / 1e9, m.received_bps / 1e9))
                })
                .collect();
            if !points.is_empty() {
                series.push(Series { name: format!("{tool}, {size} B"), points });
            }
        }
    }
    LineChart {
        title: format!(
            "Received vs offered UDP payload rate ({}; {})",
            doc.head.placement.kind,
            if doc.repeat == 1 { "1 pass".to_string() } else { format!("median of {} passes", doc.repeat) }
        ),
        x_label: "offered payload rate (Gb/s)".into(),
        y_label: "received payload rate (Gb/s)".into(),
        series,
        diagonal: true,
        note: "Both axes from 0. On the dashed diagonal every datagram offered was received; below it, the gap \
               is the loss."
            .into(),
        ..LineChart::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::peer::PeerPoint;
    use doc::loss_percent;
    use wirespeed::units::Rate;

    fn bits(v: &[Rate]) -> Vec<f64> {
        v.iter()
            .map(|r| match r {
                Rate::Bits(b) => *b,
                other => panic!("not bits: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn rate_lists_and_ranges() {
        assert_eq!(bits(&parse_rates("1G:9G:1G").unwrap()), (1..=9).map(|g| g as f64 * 1e9).collect::<Vec<_>>());
        assert_eq!(bits(&parse_rates("1G,2G,4G").unwrap()), vec![1e9, 2e9, 4e9]);
        assert_eq!(bits(&parse_rates(" 500M , 1G:2G:0.5G ,4G").unwrap()), vec![500e6, 1e9, 1.5e9, 2e9, 4e9]);
        // A step that does not divide the span stops below the top.
        assert_eq!(bits(&parse_rates("1G:2G:400M").unwrap()), vec![1e9, 1.4e9, 1.8e9]);
        // Steps that floating point cannot hold exactly still reach the top.
        assert_eq!(parse_rates("0.1G:0.3G:0.1G").unwrap().len(), 3);
        assert_eq!(parse_rates("3G:3G:1G").unwrap(), vec![Rate::Bits(3e9)]);
        assert_eq!(parse_rates("100kpps:300kpps:100kpps").unwrap()[2], Rate::Packets(300e3));
        assert_eq!(parse_rates("max,1G").unwrap()[0], Rate::Max);
    }

    #[test]
    fn bad_rate_lists_say_why() {
        let e = |s: &str| parse_rates(s).unwrap_err();
        assert!(e("").contains("no rates"), "{}", e(""));
        assert!(e(",").contains("no rates"));
        assert!(e("1G:9G").contains("FROM:TO:STEP"));
        assert!(e("1G:9G:1G:1G").contains("FROM:TO:STEP"));
        assert!(e("9G:1G:1G").contains("downwards"));
        assert!(e("1G:9G:100kpps").contains("mixes units"));
        assert!(e("1G:max:1G").contains("mixes units"));
        assert!(e("1G:9G:1k").contains("more than 200"));
        assert!(e("1G:9G:0").contains("greater than zero"));
        assert!(e("1G,fast").contains("cannot read rate 'fast'"));
        let many = vec!["1G"; 201].join(",");
        assert!(e(&many).contains("more than 200"));
    }

    fn peer(asked: f64, size: usize, sent: u64, received: u64, recv_ns: f64) -> PeerPoint {
        PeerPoint {
            tool: "iperf3".into(),
            version: "iperf 3.12".into(),
            asked: units::bits(asked),
            asked_bps: Some(asked),
            size,
            duration_s: 1.0,
            achieved_bps: sent as f64 * size as f64 * 8.0,
            achieved_pps: sent as f64,
            send_elapsed_s: 1.0,
            received_bps: received as f64 * size as f64 * 8.0,
            received_pps: received as f64,
            iperf3_received_bps: received as f64 * size as f64 * 8.0,
            sent,
            received,
            lost: sent - received,
            lost_percent: loss_percent(sent, received),
            missing: sent - received,
            out_of_order: 0,
            send_cpu_percent: 100.0,
            recv_cpu_percent: 50.0,
            send_cpu_ns_per_packet: Some(1000.0),
            recv_cpu_ns_per_packet: Some(recv_ns),
            send_cpus: vec![0],
            recv_cpus: vec![1],
            socket_buffer_asked: 1 << 22,
            rcvbuf_granted: Some(1 << 23),
            lossy: sent != received,
        }
    }

    fn cfg() -> CompareConfig {
        CompareConfig {
            rates: vec![Rate::Bits(1e9), Rate::Bits(2e9)],
            sizes: vec![8800],
            duration: Duration::from_secs(1),
            gso: false,
            rcvbuf: 1 << 25,
            repeat: 3,
            record: None,
            writer_cpu: None,
            dd_bytes: crate::bench::peer::dd::MAX_BYTES,
        }
    }

    fn prun(pass: u32, rate_index: usize, p: PeerPoint) -> Run {
        Run { seq: 0, pass, tool: "iperf3", rate_index, wirespeed: None, iperf3: Some(p), others: BTreeMap::new() }
    }

    #[test]
    fn medians_are_per_point_and_per_tool() {
        let runs = vec![
            prun(1, 0, peer(1e9, 8800, 14_200, 14_200, 500.0)),
            prun(2, 0, peer(1e9, 8800, 14_200, 14_000, 900.0)),
            prun(3, 0, peer(1e9, 8800, 14_200, 14_100, 700.0)),
            prun(1, 1, peer(2e9, 8800, 28_400, 28_400, 400.0)),
        ];
        let cells = medians(&cfg(), &runs);
        assert_eq!(cells.len(), 2);
        let m = cells[0].iperf3.as_ref().expect("iperf3 at 1G");
        assert_eq!((m.runs, m.lossy_runs), (3, 2));
        assert_eq!(m.received_bps, 14_100.0 * 8800.0 * 8.0);
        assert_eq!(m.recv_cpu_ns_per_packet, Some(700.0));
        assert!((m.loss_percent - 100.0 / 142.0).abs() < 1e-9, "{}", m.loss_percent);
        assert!(cells[0].wirespeed.is_none() && cells[0].received_ratio.is_none());
        assert_eq!(cells[1].iperf3.as_ref().map(|m| m.runs), Some(1));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn table_csv_and_chart_hold_every_run() {
        let c = cfg();
        let runs: Vec<Run> = vec![
            prun(1, 0, peer(1e9, 8800, 14_200, 14_200, 500.0)),
            prun(1, 1, peer(2e9, 8800, 28_400, 27_000, 400.0)),
        ];
        let doc = CompareDoc {
            head: crate::bench::DocHead { schema: SCHEMA, placement: Placement::test_loopback(&[0], &[1]) },
            versions: Versions { wirespeed: "0".into(), iperf3: Some("iperf 3.12".into()), others: BTreeMap::new() },
            rates: vec!["1 Gb/s".into(), "2 Gb/s".into()],
            sizes: vec![8800],
            duration_s: 1.0,
            repeat: 1,
            gso: false,
            rcvbuf: 1 << 25,
            iperf3_socket_buffer: 1 << 22,
            tools: vec![],
            counts: BTreeMap::new(),
            record: None,
            medians: medians(&c, &runs),
            runs,
            stopped: false,
            notes: vec!["a note".into()],
        };
        let csv = csv(&doc);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        let head = lines[0].split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == head), "{csv}");
        assert!(lines[2].starts_with("0,1,iperf3,2000.000,8800,"), "{}", lines[2]);
        assert!(lines[2].contains(",28400,27000,1400,"), "{}", lines[2]);
        let t = table(&doc);
        assert!(t.contains("=> a note"), "{t}");
        let row = t.lines().find(|l| l.trim_start().starts_with("2000")).expect("2 Gb/s row");
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells[1].split_whitespace().collect::<Vec<_>>(), ["-"; 4], "no wirespeed run: {row}");
        // 28,400 x 8800-byte datagrams sent in 1 s, 27,000 received.
        assert_eq!(cells[2].split_whitespace().collect::<Vec<_>>(), ["1999", "1901", "4.930", "400"], "{row}");
        assert_eq!(cells[3], "-", "no ratio without both tools: {row}");
        let ch = chart(&doc);
        assert!(ch.diagonal);
        assert_eq!(ch.series.len(), 1);
        assert_eq!(ch.series[0].name, "iperf3, 8800 B");
        assert_eq!(ch.series[0].points[0], (1.0, 14_200.0 * 8800.0 * 8.0 / 1e9));
    }
}
