//! The notes under `bench compare`'s table: what the figures mean for the tools and the
//! placement of this run (which CPU ran what, how each tool was set up, threads per tool).

use super::doc::*;
use crate::bench::peer::tool::Tool;
use crate::bench::point::{Placement, Point};
use crate::bench::stats::median;
use std::collections::BTreeMap;
use wirespeed::units;

pub(crate) fn notes(
    cfg: &CompareConfig,
    tools: &[Box<dyn Tool>],
    buffer: u64,
    pl: &Placement,
    runs: &[Run],
    cells: &[Cell],
) -> Vec<String> {
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    let default = names == TOOLS;
    let mut out = Vec::new();
    let cpus = |v: &[usize]| {
        if v.is_empty() {
            "any CPU".to_string()
        } else {
            format!("CPU {}", v.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","))
        }
    };
    if default {
        out.push(format!(
            "both tools ran in the same place: senders (wirespeed send, iperf3 -c) on {}, receivers (wirespeed recv, iperf3 -s) on {}",
            cpus(&pl.send_cpus),
            cpus(&pl.recv_cpus)
        ));
    } else {
        out.push(format!(
            "every tool ran in the same place: senders on {}, {} on {}",
            cpus(&pl.send_cpus),
            if cfg.record.is_some() { "recorders" } else { "receivers" },
            cpus(&pl.recv_cpus)
        ));
    }
    if buffer < cfg.rcvbuf && names.contains(&TOOLS[1]) {
        let cap = buffer;
        out.push(format!(
            "{} got {} of socket buffer, not the {} asked: iperf3 cannot force a buffer past net.core.rmem_max/wmem_max, and {} held to the same for a fair comparison (raise them with sysctl -w net.core.rmem_max={} net.core.wmem_max={})",
            if default { "both tools" } else { "every tool" },
            units::bytes(cap),
            units::bytes(cfg.rcvbuf),
            if default { "wirespeed is" } else { "every other tool is" },
            cfg.rcvbuf,
            cfg.rcvbuf
        ));
    }
    if let Some(n) = crate::bench::point::rcvbuf_note(buffer, runs.iter().filter_map(|r| r.wirespeed.as_ref())) {
        out.push(format!("wirespeed: {n}"));
    }
    if cfg.gso && names.contains(&TOOLS[1]) {
        out.push("--gso applies to wirespeed's sender only: iperf3 3.12 sends one datagram per system call".into());
    }
    if default {
        out.push(
            "rx ns/pkt: wirespeed's capture thread CPU time per datagram; iperf3's whole server process (its cpu_utilization_percent x test time) per datagram received"
                .into(),
        );
    } else {
        out.push("rx ns/pkt: wirespeed's capture thread CPU time per datagram; the other tools' whole process, where measured ('-': not measured)".into());
        for t in tools {
            out.push(format!("received: {}", t.counts()));
        }
    }
    if cfg.gso {
        for t in tools {
            out.extend(t.notes());
        }
    }
    if cfg.record.is_some() || names.iter().any(|n| n.starts_with("wirespeed") && *n != TOOLS[0]) {
        out.push("all ns/pkt: CPU per datagram of every thread that handled it: wirespeed's capture threads and, when recording, its writer (from its own report; n/a when that build does not report its writer's CPU); tcpdump's and netsniff-ng's whole process (utime + stime from /proc/PID/stat, read just before they are stopped) over the datagrams in their file".into());
    }
    if cfg.record.is_some() {
        out.push(writer_placement(pl, cfg.writer_cpu));
    }
    out.extend(thread_notes(runs));
    for c in cells {
        let mut all: Vec<(&str, &Option<ToolMedian>)> = vec![(TOOLS[0], &c.wirespeed), (TOOLS[1], &c.iperf3)];
        let others: Vec<(&str, Option<ToolMedian>)> =
            c.others.iter().map(|(k, m)| (k.as_str(), Some(m.clone()))).collect();
        all.extend(others.iter().map(|(k, m)| (*k, m)));
        for (tool, m) in all {
            if let (Some(m), Some(a)) = (m, c.asked_bps) {
                if m.achieved_bps < a * 0.95 {
                    out.push(format!(
                        "{tool} at {}, {} B: its sender reached {} ({:.0}% of the asked rate): sender-bound there",
                        units::bits(a),
                        c.size,
                        units::bits(m.achieved_bps),
                        100.0 * m.achieved_bps / a
                    ));
                }
            }
        }
    }
    out
}

/// Where wirespeed record's writer thread ran, stated beside every recording result: the
/// zero-loss rate depends on whether the writer shares the capture thread's core.
pub fn writer_placement(pl: &Placement, writer_cpu: Option<usize>) -> String {
    let capture = pl.recv_cpus.first().map_or("unpinned".to_string(), |c| format!("on CPU {c}"));
    match writer_cpu {
        Some(w) if pl.recv_cpus.first() == Some(&w) => {
            format!("writer placement: wirespeed record's writer pinned to CPU {w} (--writer-cpu), the capture thread's own core: the two share it")
        }
        Some(w) => format!("writer placement: wirespeed record's writer pinned to CPU {w} (--writer-cpu), capture thread {capture}"),
        None => format!(
            "writer placement: wirespeed record's writer not pinned (the scheduler places it on CPUs: {}), capture thread {capture}",
            if pl.recv_cpus.is_empty() || pl.kind == "loopback" {
                "any".to_string()
            } else {
                pl.recv_cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
            }
        ),
    }
}

/// Per tool, rate and size with several capture threads: how evenly they shared the datagrams
/// (the busiest thread over the mean, median over the runs) and each thread's CPU per datagram.
pub(crate) fn thread_notes(runs: &[Run]) -> Vec<String> {
    let mut groups: BTreeMap<(&str, usize, usize), Vec<&Point>> = BTreeMap::new();
    for r in runs {
        if let Some(p) = r.wirespeed.as_ref().filter(|p| p.recv_threads.len() >= 2) {
            groups.entry((r.tool, p.size, r.rate_index)).or_default().push(p);
        }
    }
    groups
        .into_iter()
        .map(|((tool, size, _), ps)| {
            let bal = median(ps.iter().filter_map(|p| crate::bench::recv_cpu::balance(&p.recv_threads)).collect());
            let n = ps[0].recv_threads.len();
            let per: Vec<String> = (0..n)
                .map(|i| {
                    let v = median(
                        ps.iter().filter_map(|p| p.recv_threads.get(i).and_then(|t| t.cpu_ns_per_packet)).collect(),
                    );
                    v.map_or("n/a".into(), |v| format!("{v:.0}"))
                })
                .collect();
            format!(
                "{tool} at {}, {size} B: {n} capture threads, balance {} (busiest thread's datagrams over the mean; 1.00 = even), ns/pkt per thread {}",
                ps[0].asked,
                bal.map_or("n/a".into(), |b| format!("{b:.2}")),
                per.join(" / ")
            )
        })
        .collect()
}
