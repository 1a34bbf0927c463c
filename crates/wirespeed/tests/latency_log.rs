//! The ping's HdrHistogram interval log reads back, with a standard reader, to exactly the
//! distribution the run reported; and the heat-map grid holds every reply.

use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use wirespeed::latency::ping::{self, PingConfig};
use wirespeed::latency::reflect::{ReflectConfig, Reflector};

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
    let run = std::thread::scope(|s| {
        let h = s.spawn(|| reflector.run(&rcfg, &done, None));
        let run = ping::run(&cfg, &stop);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        h.join().expect("reflector thread").expect("reflector");
        run.expect("ping")
    });
    assert_eq!(run.report.sent, 3000);
    assert_eq!(run.report.replies.received, 3000);
    assert_eq!(run.grid.total(), 3000, "every reply is in the heat map");

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
    assert!(intervals >= 7, "3000 probes at 4000/s in 100 ms intervals: {intervals}");
    assert_eq!(merged.len(), run.total.len());
    assert_eq!(merged.len(), 3000);
    assert_eq!(merged.max(), run.total.max());
    assert_eq!(merged.min(), run.total.min());
    for q in [0.5, 0.9, 0.99, 0.999] {
        assert_eq!(merged.value_at_quantile(q), run.total.value_at_quantile(q));
    }
    assert_eq!(run.report.rtt.p99, merged.value_at_quantile(0.99));
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
