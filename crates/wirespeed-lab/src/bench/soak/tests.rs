//! The soak's record, verdict and charts on made-up samples: no traffic, no child process.

use super::intervals::*;
use super::render::*;
use super::run::*;
use super::verdict::*;
use super::*;
use crate::bench::point::{Point, Streamed};
use crate::testbed::place::Placement;

fn sample(t: f64, datagrams: u64, lost: u64, drops: u64) -> Sample {
    Sample {
        elapsed_s: t,
        datagrams,
        lost,
        socket_drops: drops,
        rcvbuf_errors: drops,
        at_unix_s: 3600.0 + t,
        ..Sample::default()
    }
}

fn cfg() -> SoakConfig {
    SoakConfig {
        rate: Rate::Bits(942e6),
        size: 1080,
        duration: Duration::from_secs(1800),
        every: Duration::from_secs(60),
        gso: false,
        rcvbuf: 32 << 20,
        skip_every: None,
        record: None,
        prune: false,
    }
}

fn point(sent: u64, received: u64, lost: u64, lossy: bool) -> Point {
    Point {
        asked: "942.00 Mb/s".into(),
        asked_bps: Some(942e6),
        size: 1080,
        duration_s: 1800.0,
        achieved_bps: 941.9e6,
        achieved_pps: 109_016.0,
        received_bps: 941.9e6,
        sent,
        received,
        lost,
        late: 0,
        duplicate: 0,
        invalid: 0,
        missing: sent - received,
        end_of_stream: true,
        kernel_socket_drops: Some(lost),
        kernel_rcvbuf_errors: lost,
        kernel_in_errors: lost,
        softnet_dropped: 0,
        drops_per_million: (sent - received) as f64 * 1e6 / sent as f64,
        lossy,
        send_cpu_ns_per_packet: 1200.0,
        recv_cpu_ns_per_packet: 900.0,
        send_cpus: vec![0],
        recv_cpu: Some(1),
        send_wall_s: 1800.05,
        send_elapsed_s: 1800.0,
        gso_used: false,
        rcvbuf_granted: 64 << 20,
        receiver_stopped_by: "end of stream".into(),
        diagnosis: vec![],
        recv_all_cpu_ns_per_packet: None,
        recv_threads: vec![],
        hosts: vec![],
    }
}

#[test]
fn a_row_is_the_difference_of_two_samples() {
    let r = interval(2, &sample(60.0, 6_000_000, 10, 4), &sample(120.0, 12_000_000, 25, 9), 1080, false, false);
    assert_eq!((r.n, r.datagrams, r.lost, r.kernel_socket_drops, r.udp_rcvbuf_errors), (2, 6_000_000, 15, 5, 5));
    assert_eq!(r.cumulative_lost, 25);
    assert_eq!((r.start_s, r.end_s), (60.0, 120.0));
    assert!((r.received_pps - 100_000.0).abs() < 1e-6);
    assert!((r.received_bps - 100_000.0 * 8640.0).abs() < 1e-3);
    assert!((r.offered_pps - 6_000_015.0 / 60.0).abs() < 1e-6);
    assert_eq!(r.ended_at, "01:02:00");
    // Counters never run backwards into a huge number, and a zero-length row has no rate.
    let r = interval(1, &sample(5.0, 10, 3, 2), &sample(5.0, 9, 2, 1), 1080, true, false);
    assert_eq!((r.datagrams, r.lost, r.kernel_socket_drops, r.received_pps), (0, 0, 0, 0.0));
    assert!(r.to_end);
}

#[test]
fn the_last_row_takes_the_remainder_and_the_tail() {
    let s = [sample(1.0, 100, 0, 0), sample(2.0, 200, 1, 0), sample(3.0, 300, 1, 0), sample(4.0, 400, 2, 0)];
    // The end 40 ms after the last line: folded into row 4, which then holds the tail.
    let end = sample(4.04, 404, 5, 0);
    let rows = intervals(&s, Some(&end), 1.0, 8, false);
    assert_eq!(rows.len(), 4);
    assert_eq!((rows[3].start_s, rows[3].end_s, rows[3].datagrams, rows[3].lost), (3.0, 4.04, 104, 4));
    assert!(rows[3].to_end && !rows[2].to_end);
    assert_eq!(rows.iter().map(|r| r.datagrams).sum::<u64>(), 404);
    assert_eq!(rows.iter().map(|r| r.lost).sum::<u64>(), 5);
    assert_eq!(rows.last().map(|r| r.cumulative_lost), Some(5));
    // The receiver missed its last tick: the remainder is a row of its own.
    let rows = intervals(&s[..3], Some(&end), 1.0, 8, false);
    assert_eq!(rows.len(), 4);
    assert_eq!((rows[3].start_s, rows[3].datagrams, rows[3].lost), (3.0, 104, 4));
    // No final report (stopped before it): the lines alone, none marked as the end.
    let rows = intervals(&s, None, 1.0, 8, false);
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| !r.to_end));
    // A run shorter than half a row: one row, start to end.
    let rows = intervals(&[], Some(&end), 60.0, 8, false);
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].start_s, rows[0].datagrams), (0.0, 404));
    assert!(intervals(&[], None, 1.0, 8, false).is_empty());
}

fn rows_with_loss(lost: &[u64]) -> Vec<Interval> {
    let mut cum = 0;
    let mut prev = sample(0.0, 0, 0, 0);
    lost.iter()
        .enumerate()
        .map(|(i, &l)| {
            cum += l;
            let cur = sample(60.0 * (i + 1) as f64, 1000 * (i as u64 + 1), cum, 0);
            let r = interval(i + 1, &prev, &cur, 1080, false, false);
            prev = cur;
            r
        })
        .collect()
}

#[test]
fn longest_clean_stretch() {
    assert_eq!(longest_clean(&[]), None);
    assert_eq!(longest_clean(&rows_with_loss(&[1, 2])), None);
    assert_eq!(longest_clean(&rows_with_loss(&[0, 0, 0])), Some(Stretch { first: 1, last: 3, seconds: 180.0 }));
    // Two stretches of two: the earliest wins; a longer one later wins over both.
    assert_eq!(
        longest_clean(&rows_with_loss(&[0, 0, 5, 0, 0, 1])),
        Some(Stretch { first: 1, last: 2, seconds: 120.0 })
    );
    assert_eq!(
        longest_clean(&rows_with_loss(&[0, 3, 0, 0, 0, 1, 0])),
        Some(Stretch { first: 3, last: 5, seconds: 180.0 })
    );
}

#[test]
fn row_ranges_and_durations_read_well() {
    assert_eq!(ranges(&[3, 17, 18, 20, 21, 22]), "3, 17-18, 20-22");
    assert_eq!(ranges(&[]), "");
    assert_eq!(rows_phrase(&[3], 60.0), "minute 3");
    assert_eq!(rows_phrase(&[3, 4], 60.0), "minutes 3-4");
    assert_eq!(rows_phrase(&[2, 5], 10.0), "intervals 2, 5");
    assert_eq!(human_duration(1800.02), "30 min");
    assert_eq!(human_duration(1440.0), "24 min");
    assert_eq!(human_duration(90.0), "1 min 30 s");
    assert_eq!(human_duration(4.0), "4 s");
    assert_eq!(human_duration(2.54), "2.5 s");
    assert_eq!(human_duration(3900.0), "1 h 5 min");
    assert_eq!(utc_hms(86_400.0 + 3.0 * 3600.0 + 62.0), "03:01:02");
}

#[test]
fn the_reorder_window_is_about_a_tenth_of_a_second() {
    // 942 Mb/s of 1080-byte datagrams is 109,028/s: 10,903 a tenth, rounded up to 16,384.
    assert_eq!(reorder_window(Rate::Bits(942e6), 1080), 16384);
    assert_eq!(reorder_window(Rate::Bits(20e6), 1080), 1024);
    assert_eq!(reorder_window(Rate::Bits(40e9), 1080), 65536);
    assert_eq!(reorder_window(Rate::Max, 1080), 65536);
    assert_eq!(reorder_window(Rate::Packets(50_000.0), 8), 8192);
}

#[test]
fn verdicts_say_how_long_and_where() {
    let c = cfg();
    let rows = rows_with_loss(&[0; 30]);
    let clean = longest_clean(&rows);
    let v = verdict(&c, &rows, Some(&point(1000, 1000, 0, false)), false, &[], clean);
    assert!(v.starts_with("zero loss for 30 min at 942 Mb/s (1080-byte datagrams"), "{v}");
    let mut lost = vec![0; 30];
    lost[2] = 7;
    lost[16] = 2;
    lost[17] = 1;
    let rows = rows_with_loss(&lost);
    let lossy: Vec<usize> = rows.iter().filter(|r| r.lost > 0).map(|r| r.n).collect();
    let v = verdict(&c, &rows, Some(&point(1000, 990, 10, true)), false, &lossy, longest_clean(&rows));
    assert!(v.contains("LOSS at 942 Mb/s: 10 of 1,000 lost"), "{v}");
    assert!(v.contains("in minutes 3, 17-18"), "{v}");
    assert!(v.contains("longest clean stretch 13 min (minutes 4-16)"), "{v}");
    // Stopped: what was seen so far, never a zero-loss claim for the whole run.
    let v = verdict(&c, &rows_with_loss(&[0, 0]), Some(&point(10, 10, 0, true)), true, &[], None);
    assert!(v.starts_with("stopped after 30 min at 942 Mb/s: nothing lost so far"), "{v}");
    let v = verdict(&c, &rows_with_loss(&[0, 4]), None, true, &[2], None);
    assert!(v.starts_with("stopped after 2 min before the two ends reported: 4 lost"), "{v}");
}

#[test]
fn the_document_adds_up() {
    let c = cfg();
    let s = [sample(60.0, 100, 0, 0), sample(120.0, 200, 3, 3)];
    let streamed = Streamed {
        point: point(203, 200, 3, true),
        recv_wall_s: 120.5,
        recv_datagrams: 200,
        send_per_second: vec![1; 120],
        stopped: false,
        recv_report: serde_json::Value::Null,
    };
    let placement = Placement::test_loopback(&[0], &[1]);
    let doc = build(&c, placement, 16384, &s, Some(streamed), false, None);
    assert_eq!(doc.intervals.len(), 2);
    assert_eq!(doc.lossy_intervals, vec![2]);
    assert!(!doc.zero_loss);
    assert_eq!(doc.longest_clean, Some(Stretch { first: 1, last: 1, seconds: 60.0 }));
    assert!(doc.summary[0].starts_with("sent 203 (sender's count), received 200, lost 3"), "{:?}", doc.summary);
    assert!(doc
        .summary
        .iter()
        .any(|l| l.contains("CPU per packet: sender 1.2 us on CPU(s) 0, receiver 900 ns on CPU 1")));
    let csv = csv(&doc);
    assert_eq!(csv.lines().count(), 3);
    assert!(
        csv.lines().nth(2).is_some_and(|l| l.starts_with("2,60.000,120.500,") && l.ends_with(",100,3,3,3,3,true")),
        "{csv}"
    );
    let t = text(&doc);
    assert!(t.contains("=> LOSS at 942 Mb/s: 3 of 203 lost") && t.contains("  2* "), "{t}");
    let (rate, loss) = charts(&doc);
    assert_eq!(
        rate.series[1].points,
        vec![(1.0, 100.0 * 8640.0 / 60.0 / 1e6), (120.5 / 60.0, 100.0 * 8640.0 / 60.5 / 1e6)]
    );
    assert_eq!(loss.series[0].points.iter().map(|p| p.1).collect::<Vec<_>>(), vec![0.0, 3.0]);
}

fn placement() -> Placement {
    Placement::test_loopback(&[0], &[1])
}

fn streamed(point: Point, recv_wall_s: f64, recv_datagrams: u64) -> Streamed {
    Streamed {
        point,
        recv_wall_s,
        recv_datagrams,
        send_per_second: vec![],
        stopped: false,
        recv_report: serde_json::Value::Null,
    }
}

/// The number before " per million" in a line.
fn per_million_in(l: &str) -> Option<String> {
    let head = l.split(" per million").next()?.trim_end_matches(" lost");
    head.rsplit([' ', '(']).next().map(str::to_string)
}

#[test]
fn an_absurd_rate_gets_the_largest_window_without_overflow() {
    assert_eq!(reorder_window(Rate::Bits(1e30), 8), 65536);
    assert_eq!(reorder_window(Rate::Packets(f64::MAX), 8), 65536);
    assert_eq!(reorder_window(Rate::Packets(655_360.0), 8), 65536);
}

#[test]
fn a_sender_that_fell_short_is_judged_at_the_rate_it_achieved() {
    let c = cfg();
    let rows = rows_with_loss(&[0; 30]);
    let mut p = point(1000, 1000, 0, false);
    p.achieved_bps = 870e6;
    p.achieved_pps = 870e6 / 8640.0;
    assert!(sender_bound(&c, &p));
    let v = verdict(&c, &rows, Some(&p), false, &[], longest_clean(&rows));
    assert!(
        v.starts_with(
            "zero loss for 30 min at 870 Mb/s achieved (942 Mb/s asked; the sender was the limit; 1080-byte datagrams, "
        ),
        "{v}"
    );
    assert!(!v.contains("at 942 Mb/s"), "{v}");
    let doc = build(&c, placement(), 16384, &[], Some(streamed(p.clone(), 1800.0, 1000)), false, None);
    assert!(doc.zero_loss && doc.sender_bound, "{doc:?}");
    assert_eq!(doc.verdict, v);
    let j = serde_json::to_value(&doc).unwrap();
    assert_eq!((j["zero_loss"].as_bool(), j["sender_bound"].as_bool()), (Some(true), Some(true)));
    // Loss, and a stop, are reported at the rate achieved too.
    let lossy = verdict(&c, &rows, Some(&point_like(&p, 990, 10)), false, &[3], None);
    assert!(
        lossy.starts_with("LOSS at 870 Mb/s achieved (942 Mb/s asked; the sender was the limit): 10 of"),
        "{lossy}"
    );
    let v = verdict(&c, &rows, Some(&p), true, &[], None);
    assert!(v.starts_with("stopped after 30 min at 870 Mb/s achieved (942 Mb/s asked"), "{v}");
    // A rate asked in datagrams/s stays in datagrams/s.
    let c2 = SoakConfig { rate: Rate::Packets(100_000.0), ..cfg() };
    let mut p2 = point(1000, 1000, 0, false);
    p2.asked_bps = Some(100_000.0 * 8640.0);
    p2.achieved_bps = 90_000.0 * 8640.0;
    let v = verdict(&c2, &rows, Some(&p2), false, &[], None);
    assert!(
        v.starts_with("zero loss for 30 min at 90.0 kpps achieved (100.0 kpps asked; the sender was the limit"),
        "{v}"
    );
    // Within 2% of the rate asked: the rate asked; numbers left out on purpose count as paced.
    p.achieved_bps = 930e6;
    assert!(!sender_bound(&c, &p));
    let v = verdict(&c, &rows, Some(&p), false, &[], None);
    assert!(
        v.starts_with("zero loss for 30 min at 942 Mb/s (1080-byte datagrams; the sender achieved 930 Mb/s"),
        "{v}"
    );
    let c3 = SoakConfig { skip_every: Some(50), ..cfg() };
    p.achieved_bps = 942e6 * 0.975;
    assert!(!sender_bound(&c3, &p) && sender_bound(&c, &p));
    // Flat out asks for no rate, so it is never sender-bound.
    p.asked_bps = None;
    assert!(!sender_bound(&SoakConfig { rate: Rate::Max, ..cfg() }, &p));
}

fn point_like(p: &Point, received: u64, lost: u64) -> Point {
    Point { received, lost, missing: p.sent - received, lossy: true, ..p.clone() }
}

#[test]
fn a_missing_end_of_stream_is_loss_not_a_stop() {
    let c = SoakConfig { every: Duration::from_secs(1), duration: Duration::from_secs(4), ..cfg() };
    // The sender sent 4,000 in 4 s; the receiver got 3,900 and the end-of-stream message never
    // came: it waited 2 s and was stopped, printing two rows of nothing meanwhile.
    let s = [
        sample(1.0, 1000, 0, 0),
        sample(2.0, 2000, 0, 0),
        sample(3.0, 3000, 0, 0),
        sample(4.0, 3900, 0, 0),
        sample(5.0, 3900, 0, 0),
        sample(6.0, 3900, 0, 0),
    ];
    let mut p = point(4000, 3900, 0, true);
    p.end_of_stream = false;
    p.receiver_stopped_by = "signal 15".into();
    p.send_wall_s = 4.02;
    p.send_elapsed_s = 4.0;
    p.kernel_socket_drops = Some(0);
    let doc = build(&c, placement(), 1024, &s, Some(streamed(p.clone(), 6.1, 3900)), false, None);
    // The rows the receiver printed while it waited are left out; the last ends with the sender.
    assert_eq!(doc.intervals.len(), 4, "{:?}", doc.intervals);
    let last = &doc.intervals[3];
    assert!(last.to_end && (last.end_s - 4.02).abs() < 1e-9, "{last:?}");
    assert_eq!(doc.intervals.iter().map(|r| r.datagrams).sum::<u64>(), 3900);
    assert_eq!(doc.longest_clean.map(|s| s.last), Some(4));
    assert!(doc.longest_clean.is_some_and(|s| s.seconds < 4.1), "{:?}", doc.longest_clean);
    assert!(!doc.zero_loss && !doc.stopped);
    let all = doc.summary.join("\n");
    assert!(!all.contains("in flight") && !all.contains("tail included"), "{all}");
    assert!(all.contains("100 sent but never received (lost: the end-of-stream message never came"), "{all}");
    assert!(all.contains("the 2 seconds it printed meanwhile carried no traffic and are left out"), "{all}");
    // The same per-million figure in the summary and in the verdict: 100 of 4,000.
    assert!(doc.verdict.starts_with("LOSS at 942 Mb/s: 100 of 4,000 lost (25000.0 per million)"), "{}", doc.verdict);
    assert_eq!(per_million_in(&doc.summary[0]).as_deref(), Some("25000.0"), "{}", doc.summary[0]);
    assert_eq!(per_million_in(&doc.verdict).as_deref(), Some("25000.0"));
    assert!(final_line(&doc, 6)
        .is_some_and(|l| l.contains("(replaces rows 4-6 above: closed by the final report; tail unknown")));
    // Stopped by the user's signal: what was in flight is not loss, and the tail is unproven.
    let doc = build(&c, placement(), 1024, &s[..3], Some(streamed(p, 3.1, 3000)), true, None);
    let all = doc.summary.join("\n");
    assert!(
        all.contains("(ledger, so far: the tail is unproven)") && all.contains("in flight when the run was stopped"),
        "{all}"
    );
    assert!(!all.contains("tail included"), "{all}");
    assert_eq!(per_million_in(&doc.summary[0]).as_deref(), Some("0.0"));
    assert!(doc.verdict.starts_with("stopped after 4 s at 942 Mb/s: nothing lost so far"), "{}", doc.verdict);
}

#[test]
fn a_failure_late_in_the_run_keeps_the_rows() {
    let c = SoakConfig { every: Duration::from_secs(1), ..cfg() };
    let s = [sample(1.0, 1000, 0, 0), sample(2.0, 2000, 3, 0)];
    let doc =
        build(&c, placement(), 1024, &s, None, false, Some("the receiver did not stop when asked: killed".into()));
    assert_eq!(doc.intervals.len(), 2);
    assert_eq!(doc.error.as_deref(), Some("the receiver did not stop when asked: killed"));
    assert!(!doc.zero_loss && !doc.stopped);
    assert!(
        doc.verdict.starts_with("failed after 2 s at 942 Mb/s: 3 lost in the seconds recorded, the rest unknown"),
        "{}",
        doc.verdict
    );
    assert_eq!(csv(&doc).lines().count(), 3);
    assert!(text(&doc).contains("=> failed after 2 s"));
}

#[test]
fn the_document_keeps_the_asked_rate_in_its_own_words() {
    let c = SoakConfig { rate: Rate::Packets(100_000.0), ..cfg() };
    let doc = build(&c, placement(), 16384, &[sample(60.0, 100, 0, 0)], None, true, None);
    assert_eq!(doc.asked_words, "100.0 kpps");
    let t = text(&doc);
    let live = header(&c, &placement());
    assert!(t.starts_with(&live), "soak.txt:\n{t}\nlive:\n{live}");
    assert!(live.contains("at 100.0 kpps (100,000 datagrams/s)"), "{live}");
}

#[test]
fn the_final_row_says_which_live_rows_it_replaces() {
    let c = cfg();
    let s = [sample(60.0, 100, 0, 0), sample(120.0, 200, 3, 3)];
    let doc = build(&c, placement(), 16384, &s, Some(streamed(point(203, 200, 3, true), 120.5, 200)), false, None);
    let l = final_line(&doc, 2).expect("a final row");
    assert!(
        l.trim_start().starts_with("2* ")
            && l.ends_with("  (replaces row 2 above: closed by the final report, tail included)"),
        "{l}"
    );
    // A row of its own (the receiver missed its last tick): nothing shown live is replaced.
    let l = final_line(&doc, 1).expect("a final row");
    assert!(l.ends_with("  (closed by the final report, tail included)"), "{l}");
    // No final report, no final row.
    let doc = build(&c, placement(), 16384, &s, None, true, None);
    assert_eq!(final_line(&doc, 2), None);
}

#[test]
fn the_receivers_progress_lines_parse() {
    let p = wirespeed::rx::Progress {
        schema: wirespeed::rx::INTERVAL_SCHEMA,
        elapsed_s: 60.001,
        pps: 109_000.0,
        bps: 941e6,
        datagrams: 6_540_000,
        lost: 12,
        late: 1,
        duplicate: 0,
        invalid: 0,
        socket_drops: 12,
        rcvbuf_errors: 13,
        ring_full: 0,
    };
    let line = serde_json::to_string(&p).unwrap();
    let s = parse_sample(&line).expect("a sample");
    assert_eq!((s.elapsed_s, s.datagrams, s.lost, s.socket_drops, s.rcvbuf_errors), (60.001, 6_540_000, 12, 12, 13));
    assert_eq!(parse_sample("wirespeed recv: listening on 127.0.0.1:5000"), None);
    assert_eq!(parse_sample("{not json"), None);
}

/// The seed's 30-minute run at 942 Mb/s, every minute within 0.15 % of the rate asked
/// (alternately 941.3 and 942.6 Mb/s), nothing lost.
fn steady_942() -> SoakDoc {
    let per_min = |mbps: f64| (mbps * 1e6 * 60.0 / 8640.0).round() as u64;
    let mut total = 0;
    let mut s = Vec::new();
    for m in 1..=30u64 {
        total += per_min(if m % 2 == 1 { 941.3 } else { 942.6 });
        s.push(sample(60.0 * m as f64, total, 0, 0));
    }
    let p = point(total, total, 0, false);
    build(&cfg(), placement(), 65536, &s[..29], Some(streamed(p, 1800.0, total)), false, None)
}

/// The text of every `<text>` element of an SVG anchored at `anchor` (the y axis's tick labels
/// are anchored at their end, against the axis).
fn svg_texts(svg: &str, anchor: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter(|t| t.split('>').next().is_some_and(|attrs| attrs.contains(&format!("text-anchor=\"{anchor}\""))))
        .filter_map(|t| t.split_once('>').and_then(|(_, rest)| rest.split("</text>").next()))
        .map(|t| t.trim().to_string())
        .collect()
}

#[test]
fn a_steady_run_is_a_flat_line_on_an_axis_from_zero_with_the_asked_band() {
    let doc = steady_942();
    assert_eq!(doc.intervals.len(), 30);
    assert!(doc.zero_loss, "{}", doc.verdict);
    let (rate, loss) = charts(&doc);
    // The rate: y from 0, the asked rate with its band (98-100 %) drawn, labelled and
    // explained, so 0.15 % between minutes is a flat line rather than the whole height.
    let (_, (lo, hi)) = crate::plot::line_chart_axes(&rate);
    assert_eq!(lo, 0.0, "the rate axis starts at zero");
    assert!((942.6..1000.0).contains(&hi), "{hi}");
    assert!((942.6 - 941.3) / (hi - lo) < 0.002, "the minutes' spread is a sliver of the axis");
    let band = rate.band.as_ref().expect("the asked rate's band");
    assert_eq!((band.lo, band.hi, band.at), (942.0 * SENDER_BOUND, 942.0, 942.0));
    assert_eq!(band.label, "asked 942 Mb/s (shaded: 98-100 %)");
    assert!(rate.note.starts_with("y from 0. A flat line in the shaded band"), "{}", rate.note);
    // The loss: whole datagrams on an axis from 0, and the chart says "0 lost".
    let (_, (llo, lhi)) = crate::plot::line_chart_axes(&loss);
    assert_eq!((llo, loss.y_integer), (0.0, true));
    assert!((1.0..2.0).contains(&lhi), "{lhi}");
    assert_eq!(loss.note, "0 lost in every minute (ledger and kernel): a flat line at 0");

    // The same in the drawn figure: the SVG's y tick labels run from 0, the band's legend
    // entry and the note are in it; the loss chart's ticks are 0 and 1 datagrams.
    let dir = std::env::temp_dir().join(format!("ws-soak-charts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_, rate_svg) = crate::plot::line_chart_files(&rate, &dir.join("soak-rate")).unwrap();
    let (_, loss_svg) = crate::plot::line_chart_files(&loss, &dir.join("soak-loss")).unwrap();
    let svg = std::fs::read_to_string(rate_svg).unwrap();
    let loss_text = std::fs::read_to_string(loss_svg).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let ticks: Vec<f64> = svg_texts(&svg, "end").iter().map(|t| t.replace(',', "").parse().unwrap()).collect();
    assert_eq!(ticks.first(), Some(&0.0), "y ticks {ticks:?}");
    assert!(ticks.iter().all(|t| t.fract() == 0.0) && ticks.len() >= 4, "round ticks from 0: {ticks:?}");
    assert!(svg.contains("asked 942 Mb/s (shaded: 98-100 %)"), "the band is in the legend");
    assert!(svg.contains("y from 0. A flat line in the shaded band"), "the note is on the chart");
    assert_eq!(svg_texts(&loss_text, "end"), vec!["0", "1"], "the loss axis counts whole datagrams");
    assert!(loss_text.contains("0 lost in every minute"), "the loss chart says it");
}

#[test]
fn a_lossy_run_says_where_on_its_loss_chart() {
    let c = cfg();
    let s = [sample(60.0, 100, 0, 0), sample(120.0, 200, 3, 3)];
    let doc = build(&c, placement(), 16384, &s[..1], Some(streamed(point(203, 200, 3, true), 120.5, 200)), false, None);
    let (_, loss) = charts(&doc);
    assert_eq!(loss.note, "3 lost (ledger) in minute 2; 3 kernel socket drops");
    let flat_out = SoakConfig { rate: Rate::Max, ..cfg() };
    let doc = build(&flat_out, placement(), 16384, &s, None, true, None);
    let (rate, loss) = charts(&doc);
    assert!(rate.band.is_none() && rate.note.starts_with("y from 0; flat out"), "{}", rate.note);
    assert!(loss.note.ends_with("the run did not finish, so its tail is unproven"), "{}", loss.note);
}
