//! A soak for people and programs: the table (heading and one line per row, live or at the
//! end), the CSV, and the two charts.

use super::intervals::{row_name, rows_phrase, Interval};
use super::run::reorder_window;
use super::verdict::SENDER_BOUND;
use super::{human_duration, mbps, rate_words, SoakConfig, SoakDoc};
use crate::bench::point::Placement;
use crate::plot::{Band, LineChart, Series};
use wirespeed::units;

/// The heading lines of the table.
pub fn header(cfg: &SoakConfig, placement: &Placement) -> String {
    let window = reorder_window(cfg.rate, cfg.size);
    let pps = cfg.rate.packets_per_sec(cfg.size);
    heading(
        cfg.size,
        &rate_words(cfg.rate),
        pps,
        cfg.duration.as_secs_f64(),
        cfg.every.as_secs_f64(),
        window,
        placement,
        cfg.record.is_some(),
    )
}

#[allow(clippy::too_many_arguments)]
fn heading(
    size: usize,
    rate: &str,
    pps: Option<f64>,
    duration_s: f64,
    every_s: f64,
    window: u64,
    placement: &Placement,
    record: bool,
) -> String {
    let settle = match pps {
        Some(p) if p > 0.0 => format!("settled at most {} after the fact", units::nanos(window as f64 / p * 1e9)),
        _ => "settled once the reorder window has passed".to_string(),
    };
    let (through, legend, heads) = if record {
        (
            ", recorded to disk by wirespeed record",
            "; written = bytes the recorder wrote in the row; ring hw = its RAM ring's high water so far; \
             ring-full = datagrams dropped at a full ring; stalls = writes that kept its writer waiting (n/a: not reported)",
            super::record::column_heads(),
        )
    } else {
        ("", "", String::new())
    };
    format!(
        "wirespeed bench soak: {size}-byte counter datagrams at {}{} for {}, one row per {}{through}; {}\n\
         Mb/s = 10^6 bits/s of UDP payload; offered = received + lost (the sequence numbers the sender used); \
         lost = the ledger's, {settle} (reorder window {}); kernel = the receiving socket's drop counter; \
         udp = UDP RcvbufErrors in the receiver's namespace{legend}\n\
         {:>5} {:>12} {:>9} {:>15} {:>16} {:>15} {:>13} {:>10} {:>9} {:>9} {:>12}{heads}\n",
        rate,
        pps.map_or(String::new(), |p| format!(" ({} datagrams/s)", units::thousands(p.round() as u64))),
        human_duration(duration_s),
        human_duration(every_s),
        placement.description,
        units::thousands(window),
        "#",
        "ended (UTC)",
        "t (s)",
        "offered (Mb/s)",
        "received (Mb/s)",
        "received (pps)",
        "datagrams",
        "lost",
        "kernel",
        "udp",
        "lost so far"
    )
}

/// One table line (with the recorder's columns when the soak records).
pub fn line(r: &Interval) -> String {
    let rec = r.recorder.as_ref().map_or(String::new(), super::record::columns);
    format!(
        "{:>5} {:>12} {:>9.1} {:>15} {:>16} {:>15} {:>13} {:>10} {:>9} {:>9} {:>12}",
        format!("{}{}", r.n, if r.to_end { "*" } else { "" }),
        r.ended_at,
        r.end_s,
        mbps(r.offered_bps),
        mbps(r.received_bps),
        units::thousands(r.received_pps.round() as u64),
        units::thousands(r.datagrams),
        units::thousands(r.lost),
        units::thousands(r.kernel_socket_drops),
        units::thousands(r.udp_rcvbuf_errors),
        units::thousands(r.cumulative_lost)
    ) + &rec
}

/// The last row as the terminal shows it after the live rows, or `None` when there is no such
/// row (no final report). The live rows already showed the samples it replaces (the one folded
/// into it, and any printed while the receiver waited for an end-of-stream message), so it says
/// which: someone adding up the table counts it instead of those, not as well.
pub fn final_line(doc: &SoakDoc, live_rows: usize) -> Option<String> {
    let r = doc.intervals.last().filter(|r| r.to_end)?;
    let what = if doc.stopped {
        "closed by the receiver's final report"
    } else if doc.point.as_ref().is_some_and(|p| p.end_of_stream) {
        "closed by the final report, tail included"
    } else {
        "closed by the final report; tail unknown: no end-of-stream message"
    };
    let replaces = match live_rows {
        n if n == r.n => format!("replaces row {} above: ", r.n),
        n if n > r.n => format!("replaces rows {}-{n} above: ", r.n),
        _ => String::new(),
    };
    Some(format!("{}  ({replaces}{what})", line(r)))
}

/// The whole record as text (the heading, every row, the summary, the verdict).
pub fn text(doc: &SoakDoc) -> String {
    // The asked rate in its own words: a rate asked in datagrams/s is not turned into Mb/s.
    let mut s = heading(
        doc.size,
        &doc.asked_words,
        doc.asked_pps,
        doc.duration_s,
        doc.every_s,
        doc.reorder_window,
        &doc.head.placement,
        doc.record.is_some(),
    );
    for r in &doc.intervals {
        s.push_str(&line(r));
        s.push('\n');
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    s.push('\n');
    for l in &doc.summary {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&format!("=> {}\n", doc.verdict));
    s
}

/// The record as CSV, one row per interval.
pub fn csv(doc: &SoakDoc) -> String {
    let mut s = String::from(
        "interval,start_s,end_s,ended_at_unix_s,ended_at_utc,offered_bps,offered_pps,received_bps,received_pps,datagrams,lost,kernel_socket_drops,udp_rcvbuf_errors,cumulative_lost,to_end",
    );
    let record = doc.record.is_some();
    s.push_str(if record { ",written_bytes,ring_high_water,ring_full,write_stalls\n" } else { "\n" });
    // A recorder figure not reported is an empty field.
    let opt = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    for r in &doc.intervals {
        s.push_str(&format!(
            "{},{:.3},{:.3},{:.3},{},{:.0},{:.1},{:.0},{:.1},{},{},{},{},{},{}\n",
            r.n,
            r.start_s,
            r.end_s,
            r.ended_at_unix_s,
            r.ended_at,
            r.offered_bps,
            r.offered_pps,
            r.received_bps,
            r.received_pps,
            r.datagrams,
            r.lost,
            r.kernel_socket_drops,
            r.udp_rcvbuf_errors,
            r.cumulative_lost,
            r.to_end
        ));
        if record {
            let c = r.recorder.unwrap_or_default();
            s.insert_str(
                s.len() - 1,
                &format!(
                    ",{},{},{},{}",
                    opt(c.written_bytes),
                    opt(c.ring_high_water),
                    opt(c.ring_full),
                    opt(c.write_stalls)
                ),
            );
        }
    }
    s
}

/// Two charts: offered and received rate per row, and loss per row (ledger and socket), against
/// time (minutes when rows are a minute or longer).
///
/// Both are evidence a reader judges at a glance, so both y axes start at zero: a steady run at
/// 942 Mb/s is a flat line near the top, inside the shaded band of the rate asked (98-100 % of
/// it: below, the sender was the limit), not a saw-tooth of 0.1 % wobbles stretched over the
/// plot. The loss chart counts whole datagrams, and says in words what its line shows.
pub fn charts(doc: &SoakDoc) -> (LineChart, LineChart) {
    let (scale, unit) = if doc.every_s >= 60.0 { (60.0, "minutes") } else { (1.0, "seconds") };
    let x = |r: &Interval| r.end_s / scale;
    let series = |name: &str, f: &dyn Fn(&Interval) -> f64| Series {
        name: name.into(),
        points: doc.intervals.iter().map(|r| (x(r), f(r))).collect(),
    };
    let title = format!("{} soak: {}-byte datagrams at {}", human_duration(doc.duration_s), doc.size, doc.asked);
    let band = doc.asked_bps.filter(|a| a.is_finite() && *a > 0.0).map(|a| Band {
        lo: a * SENDER_BOUND / 1e6,
        hi: a / 1e6,
        at: a / 1e6,
        label: format!("asked {} Mb/s (shaded: {:.0}-100 %)", mbps(a), SENDER_BOUND * 100.0),
    });
    let rate_note = match &band {
        Some(_) => format!(
            "y from 0. A flat line in the shaded band ({:.0}-100 % of the rate asked) is a steady run at that rate; \
             below the band, the sender was the limit. received covers offered in every {} where nothing was lost.",
            SENDER_BOUND * 100.0,
            row_name(doc.every_s, false)
        ),
        None => "y from 0; flat out, no rate asked. received lies on offered where nothing was lost.".into(),
    };
    let rate = LineChart {
        title: title.clone(),
        x_label: format!("time since start ({unit})"),
        y_label: "rate per row (Mb/s of UDP payload)".into(),
        series: vec![series("offered", &|r| r.offered_bps / 1e6), series("received", &|r| r.received_bps / 1e6)],
        note: rate_note,
        band,
        ..LineChart::default()
    };
    let loss = LineChart {
        title,
        x_label: format!("time since start ({unit})"),
        y_label: "datagrams lost per row".into(),
        series: vec![
            series("lost (ledger)", &|r| r.lost as f64),
            series("kernel socket drops", &|r| r.kernel_socket_drops as f64),
        ],
        note: loss_note(doc),
        y_integer: true,
        ..LineChart::default()
    };
    (rate, loss)
}

/// What the loss chart shows, in words: "0 lost in every second (ledger and kernel)", or how
/// many were lost in which rows; a run that did not finish says its tail is unproven.
fn loss_note(doc: &SoakDoc) -> String {
    let rows = &doc.intervals;
    let lost = rows.last().map_or(0, |r| r.cumulative_lost);
    let drops: u64 = rows.iter().map(|r| r.kernel_socket_drops).sum();
    let unfinished = doc.stopped || doc.error.is_some() || doc.point.as_ref().is_some_and(|p| !p.end_of_stream);
    let mut note = if rows.is_empty() {
        "no rows were recorded".to_string()
    } else if lost == 0 && drops == 0 {
        format!("0 lost in every {} (ledger and kernel): a flat line at 0", row_name(doc.every_s, false))
    } else {
        format!(
            "{} lost (ledger) in {}; {} kernel socket drops",
            units::thousands(lost),
            rows_phrase(&doc.lossy_intervals, doc.every_s),
            units::thousands(drops)
        )
    };
    if unfinished && !rows.is_empty() {
        note.push_str("; the run did not finish, so its tail is unproven");
    }
    if let Some(v) = doc.record.as_ref().and_then(|r| r.verify.as_ref()) {
        note.push_str("; ");
        note.push_str(&v.verdict);
    }
    note
}
