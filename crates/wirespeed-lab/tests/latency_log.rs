//! The ping's HdrHistogram interval log reads back, with a standard reader, to exactly the
//! distribution the run reported; and the heat-map grid holds every reply.

use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use wirespeed_lab::latency::ping::{self, PingConfig};
use wirespeed_lab::latency::reflect::{ReflectConfig, Reflector};

#[test]
fn interval_log_round_trips_to_the_reported_distribution() {
    let path = std::env::temp_dir().join(format!("wst-hlog-{}.hlog", std::process::id()));
    let rcfg = ReflectConfig::new("127.0.0.1:0".parse().unwrap());
    let reflector = Reflector::bind(&rcfg).expect("bind reflector");
    let target = reflector.local_addr().expect("port");
    let done = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let mut cfg = PingConfig::new(target);
    cfg.pps = 4000.0;
    cfg.count = Some(3000);
    cfg.interval = Duration::from_millis(100);
    cfg.hlog = Some(path.clone());
    // A reply later than the linger counts as lost; a long one leaves only the kernel to lose a
    // reply (the run ends as soon as every reply is in, so it costs nothing when none is lost).
    cfg.linger = Duration::from_secs(20);
    let rcvbuf_errors_before = udp_rcvbuf_errors();
    let run = std::thread::scope(|s| {
        let h = s.spawn(|| reflector.run(&rcfg, &done, None));
        let run = ping::run(&cfg, &stop);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        h.join().expect("reflector thread").expect("reflector");
        run.expect("ping")
    });
    // What the ping guarantees whatever the host's load: every probe sent is answered or counted
    // lost, the lost ones are the sequence numbers of its ranges, and on loopback only a full
    // socket buffer loses a datagram, so the loss is no more than the kernel's count of those.
    let r = &run.report;
    assert_eq!(r.sent, 3000);
    assert_eq!(r.replies.received + r.replies.lost, r.sent, "every probe answered or lost: {:?}", r.replies);
    let in_ranges: u64 = r.lost_ranges.iter().map(|g| g.last - g.first + 1).sum();
    assert_eq!(in_ranges, r.replies.lost, "the lost ranges hold exactly the lost probes: {:?}", r.lost_ranges);
    let kernel = udp_rcvbuf_errors().saturating_sub(rcvbuf_errors_before);
    assert!(r.replies.lost <= kernel, "{} probes lost that no socket buffer dropped", r.replies.lost);
    let replies = r.replies.received;
    assert!(replies > 0);
    assert_eq!(run.grid.total(), replies, "every reply is in the heat map");

    let text = std::fs::read(&path).expect("read log");
    let _ = std::fs::remove_file(&path);
    let mut merged = Histogram::<u64>::new_with_bounds(1, ping::MAX_TRACKED_NS, 3).unwrap();
    let mut d = Deserializer::new();
    let mut intervals = 0;
    let mut last_start = -1.0f64;
    let mut start_time_seen = false;
    for entry in IntervalLogIterator::new(&text) {
        match entry.expect("a well-formed log line") {
            LogEntry::StartTime(_) => start_time_seen = true,
            LogEntry::BaseTime(_) => {}
            LogEntry::Interval(i) => {
                let start = i.start_timestamp().as_secs_f64();
                assert!(start >= last_start, "intervals in order");
                last_start = start;
                let bytes = base64_decode(i.encoded_histogram());
                let h: Histogram<u64> = d.deserialize(&mut &bytes[..]).expect("a histogram");
                assert_eq!(i.max(), h.max() as f64, "the max column agrees with the histogram");
                merged.add(&h).unwrap();
                intervals += 1;
            }
        }
    }
    assert!(start_time_seen);
    assert_eq!(intervals, run.report.intervals.len());
    assert!(intervals >= 1);
    let in_intervals: u64 = run.report.intervals.iter().map(|i| i.replies).sum();
    assert_eq!(in_intervals, replies, "every reply is in one interval");
    assert_eq!(merged.len(), run.total.len());
    assert_eq!(merged.len(), replies);
    assert_eq!(merged.max(), run.total.max());
    assert_eq!(merged.min(), run.total.min());
    for q in [0.5, 0.9, 0.99, 0.999] {
        assert_eq!(merged.value_at_quantile(q), run.total.value_at_quantile(q));
    }
    assert_eq!(run.report.rtt.p99, merged.value_at_quantile(0.99));
}

/// The host's UDP RcvbufErrors (IPv4 and IPv6): datagrams a full socket buffer dropped.
fn udp_rcvbuf_errors() -> u64 {
    let mut total = 0;
    for (file, proto) in [("/proc/net/snmp", "Udp:"), ("/proc/net/snmp6", "Udp6RcvbufErrors")] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if proto == "Udp:" {
            let rows: Vec<&str> = text.lines().filter(|l| l.starts_with(proto)).collect();
            if let [head, vals] = rows[..] {
                let k = head.split_whitespace().position(|w| w == "RcvbufErrors");
                total += k.and_then(|k| vals.split_whitespace().nth(k)).and_then(|v| v.parse().ok()).unwrap_or(0);
            }
        } else if let Some(l) = text.lines().find(|l| l.starts_with(proto)) {
            total += l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    total
}

/// Standard base64 (the log's alphabet), without a dependency for one test.
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let clean: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut acc = 0u32;
        for (k, &c) in chunk.iter().enumerate() {
            acc |= u32::from(val(c)) << (18 - 6 * k);
        }
        let n = chunk.len() * 6 / 8;
        for k in 0..n {
            out.push((acc >> (16 - 8 * k)) as u8);
        }
    }
    out
}
