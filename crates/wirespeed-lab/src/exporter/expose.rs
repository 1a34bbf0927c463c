//! The series: every live counter a [`Board`](crate::exporter::Board) holds, read at scrape time and rendered in the
//! Prometheus text format (version 0.0.4) or OpenMetrics with `prometheus-client`'s encoders.
//!
//! Names follow the Prometheus conventions: a `wirespeed_` prefix, base units (bytes, seconds)
//! in the name, `_total` on counters (the encoder appends it). Labels: `thread` (the capture
//! thread, 0 with one), `source` (the stream's source address and port) and `stream` (the
//! format's stream id within the source, e.g. the VDIF thread; 0 for single-stream formats).

use super::board::Parts;
use super::Shown;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use wirespeed::rx::Live;
use wirespeed::spool::stats::WriteSnapshot;

/// `Content-Type` of the Prometheus text format.
pub const TEXT_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
/// `Content-Type` of OpenMetrics text.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One series' labels.
type Labels = Vec<(&'static str, String)>;

/// One series' value.
enum Val {
    Count(u64),
    Gauge(f64),
    Hist(WriteSnapshot),
}

/// A metric family: name (without `_total` for counters), help text and its series.
struct Family {
    name: &'static str,
    help: &'static str,
    series: Vec<(Labels, Val)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str) -> Family {
        Family { name, help, series: Vec::new() }
    }

    fn push(&mut self, labels: Labels, v: Val) {
        self.series.push((labels, v));
    }

    fn encode(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let Some((_, first)) = self.series.first() else { return Ok(()) };
        let ty = match first {
            Val::Count(_) => MetricType::Counter,
            Val::Gauge(_) => MetricType::Gauge,
            Val::Hist(_) => MetricType::Histogram,
        };
        let mut m = enc.encode_descriptor(self.name, self.help, None, ty)?;
        for (labels, v) in &self.series {
            if labels.is_empty() {
                Self::value(&mut m, v)?;
            } else {
                Self::value(&mut m.encode_family(labels)?, v)?;
            }
        }
        Ok(())
    }

    fn value(e: &mut MetricEncoder, v: &Val) -> std::fmt::Result {
        match v {
            Val::Count(n) => e.encode_counter::<NoLabelSet, u64, f64>(n, None),
            Val::Gauge(x) => e.encode_gauge(x),
            Val::Hist(h) => e.encode_histogram::<NoLabelSet>(h.sum_s, h.count, &h.buckets, None),
        }
    }
}

/// The board as a `prometheus-client` collector: everything is read when it encodes.
#[derive(Debug)]
struct Snapshot(Shown);

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let parts = self.0.board.parts();
        for f in families(&parts, self.0.partitions.as_deref()) {
            f.encode(&mut enc)?;
        }
        Ok(())
    }
}

/// The exposition of everything on `board` now: OpenMetrics text when `openmetrics`, else the
/// Prometheus text format 0.0.4.
pub fn render(shown: &Shown, openmetrics: bool) -> String {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(Snapshot(shown.clone())));
    let mut out = String::with_capacity(16 << 10);
    let done = if openmetrics {
        prometheus_client::encoding::text::encode(&mut out, &reg)
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, &reg)
    };
    // Writing into a String cannot fail; a collector error would leave a partial text.
    debug_assert!(done.is_ok());
    out
}

fn thread_label(i: usize) -> Labels {
    vec![("thread", i.to_string())]
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Every family the board's parts have series for, in a fixed order.
fn families(p: &Parts, partitions: Option<&str>) -> Vec<Family> {
    let mut out = Vec::new();
    let mut build = Family::new(
        "wirespeed_build_info",
        "Always 1: the wirespeed version and the command serving these metrics, as labels.",
    );
    build.push(
        vec![("version", env!("CARGO_PKG_VERSION").to_string()), ("command", p.command.clone())],
        Val::Gauge(1.0),
    );
    out.push(build);
    let mut start = Family::new(
        "wirespeed_start_time_seconds",
        "When this wirespeed command started serving metrics, seconds since the Unix epoch.",
    );
    start.push(Vec::new(), Val::Gauge(p.started_unix_s));
    out.push(start);
    if let Some(lives) = &p.capture {
        capture_families(lives, !p.rings.is_empty(), &mut out);
    }
    ring_families(p, &mut out);
    reflect_families(p, &mut out);
    tap_families(p, &mut out);
    if let Some(prefix) = partitions {
        partition_families(prefix, &mut out);
    }
    out
}

/// The partitions' heartbeat state, as `partition status` reads it from the daemons' views:
/// whether each daemon runs, and each live peer daemon's view of each partition (a state set:
/// one series per state, 1 for the one it is in).
fn partition_families(prefix: &str, out: &mut Vec<Family>) {
    use crate::testbed::heartbeat::PeerState;
    let mut ok = Family::new(
        "wirespeed_partition_status_ok",
        "1 when the partition set's configuration was read at this scrape; 0 when it could not be (removed with partition init, or unreadable).",
    );
    let st = crate::testbed::status(prefix);
    ok.push(vec![("prefix", prefix.to_string())], Val::Gauge(if st.is_ok() { 1.0 } else { 0.0 }));
    out.push(ok);
    let Ok(st) = st else { return };
    let mut up = Family::new(
        "wirespeed_partition_daemon_up",
        "1 when the partition's daemon (heartbeat, XPC) is running, 0 when it is not.",
    );
    let mut ns = Family::new(
        "wirespeed_partition_namespace_present",
        "1 when the partition's network namespace exists, 0 when it is missing.",
    );
    let mut deact = Family::new(
        "wirespeed_partition_deactivated",
        "1 when the partition was deactivated with `partition deactivate`, else 0.",
    );
    let mut seen = Family::new(
        "wirespeed_partition_peer_state",
        "Heartbeat state of a partition as one live peer daemon sees it (label seen_by): 1 for the state it is in (unknown, active, inactive, incompatible), 0 for the others.",
    );
    let mut active = Family::new(
        "wirespeed_partition_seen_active",
        "How many live peer daemons see the partition as active (heartbeating).",
    );
    let all = [PeerState::Unknown, PeerState::Active, PeerState::Inactive, PeerState::Incompatible];
    for part in &st.partitions {
        let id = part.id.to_string();
        let label = || vec![("partition", id.clone())];
        up.push(label(), Val::Gauge(if part.daemon_pid.is_some() { 1.0 } else { 0.0 }));
        ns.push(label(), Val::Gauge(if part.namespace_present { 1.0 } else { 0.0 }));
        deact.push(label(), Val::Gauge(if part.deactivated { 1.0 } else { 0.0 }));
        let n = part.seen_by.values().filter(|s| **s == PeerState::Active).count();
        active.push(label(), Val::Gauge(n as f64));
        for (by, state) in &part.seen_by {
            for s in all {
                let l = vec![("partition", id.clone()), ("seen_by", by.to_string()), ("state", s.name().to_string())];
                seen.push(l, Val::Gauge(if s == *state { 1.0 } else { 0.0 }));
            }
        }
    }
    out.extend([up, ns, deact, active, seen]);
}

fn capture_families(lives: &[Live], recording: bool, out: &mut Vec<Family>) {
    type Get = fn(&wirespeed::rx::StreamLive) -> &AtomicU64;
    let per_stream: [(&'static str, &'static str, Get); 6] = [
        (
            "wirespeed_received_datagrams",
            "Datagrams received from this stream with a sequence number not seen before (late ones included; duplicates and invalid ones not), as its ledger counts them.",
            |s| &s.received,
        ),
        (
            "wirespeed_received_bytes",
            "UDP payload bytes of this stream's datagrams that reached its ledger (duplicates and invalid ones included).",
            |s| &s.bytes,
        ),
        (
            "wirespeed_lost_datagrams",
            "Sequence numbers of this stream that never arrived, settled so far (a hole is settled once it leaves the reorder window or the sender's end-of-stream message closes it).",
            |s| &s.lost,
        ),
        (
            "wirespeed_late_datagrams",
            "Datagrams of this stream that arrived after a higher sequence number (reordered, not lost).",
            |s| &s.late,
        ),
        (
            "wirespeed_duplicate_datagrams",
            "Datagrams of this stream whose sequence number had already been received (not written to a recording).",
            |s| &s.duplicate,
        ),
        (
            "wirespeed_invalid_datagrams",
            "Datagrams from this source that the payload format rejected (wrong length, header or payload).",
            |s| &s.invalid,
        ),
    ];
    for (name, help, get) in per_stream {
        let mut f = Family::new(name, help);
        for (t, live) in lives.iter().enumerate() {
            for s in live.published_streams() {
                let (src, stream) = s.source();
                let labels = vec![
                    ("thread", t.to_string()),
                    ("source", src.map(|a| a.to_string()).unwrap_or_default()),
                    ("stream", stream.to_string()),
                ];
                f.push(labels, Val::Count(load(get(s))));
            }
        }
        out.push(f);
    }
    type GetLive = fn(&Live) -> &AtomicU64;
    let mut per_thread: Vec<(&'static str, &'static str, GetLive)> = vec![
        (
            "wirespeed_capture_datagrams",
            "Datagrams this capture thread received, valid and invalid, in any stream or none (end-of-stream messages excluded).",
            |l| &l.datagrams,
        ),
        ("wirespeed_capture_bytes", "UDP payload bytes this capture thread received.", |l| &l.bytes),
        (
            "wirespeed_socket_dropped_datagrams",
            "Datagrams the kernel dropped at this capture thread's own socket because its receive buffer was full (SO_RXQ_OVFL): loss before wirespeed saw them.",
            |l| &l.socket_drops,
        ),
    ];
    if recording {
        per_thread.push((
            "wirespeed_ring_full_dropped_datagrams",
            "Datagrams this capture thread received but dropped because its RAM ring was full (the disk fell behind for longer than the ring lasts).",
            |l| &l.ring_full,
        ));
    }
    for (name, help, get) in per_thread {
        let mut f = Family::new(name, help);
        for (t, live) in lives.iter().enumerate() {
            f.push(thread_label(t), Val::Count(load(get(live))));
        }
        out.push(f);
    }
    let mut f = Family::new(
        "wirespeed_streams",
        "Streams (source address and port, format stream id) this capture thread keeps a ledger for.",
    );
    for (t, live) in lives.iter().enumerate() {
        f.push(thread_label(t), Val::Gauge(load(&live.streams_tracked) as f64));
    }
    out.push(f);
}

fn ring_families(p: &Parts, out: &mut Vec<Family>) {
    if p.rings.is_empty() {
        return;
    }
    let mut cap = Family::new("wirespeed_ring_capacity_bytes", "Size of this capture thread's RAM ring, bytes.");
    let mut fill = Family::new(
        "wirespeed_ring_fill_bytes",
        "Bytes in this capture thread's RAM ring received but not yet written to disk.",
    );
    let mut ratio = Family::new(
        "wirespeed_ring_fill_ratio",
        "Fill of this capture thread's RAM ring, 0 to 1; at 1 datagrams are dropped (ring-full).",
    );
    let mut high =
        Family::new("wirespeed_ring_high_water_bytes", "Highest fill of this capture thread's RAM ring so far, bytes.");
    let mut written = Family::new("wirespeed_written_bytes", "Bytes this capture thread's writer wrote to disk.");
    let mut files = Family::new(
        "wirespeed_files_written",
        "Recording files this capture thread's writer finished (renamed from .part, sidecar written).",
    );
    let mut lat = Family::new(
        "wirespeed_write_duration_seconds",
        "Latency of each disk write of this capture thread's writer (one write moves up to --block bytes).",
    );
    let mut stalls = Family::new(
        "wirespeed_disk_stalls",
        "Disk writes of this capture thread's writer that took longer than 50 ms.",
    );
    for (t, (sh, capacity)) in p.rings.iter().enumerate() {
        let f = load(&sh.ring_fill);
        cap.push(thread_label(t), Val::Gauge(*capacity as f64));
        fill.push(thread_label(t), Val::Gauge(f as f64));
        ratio.push(thread_label(t), Val::Gauge(f as f64 / (*capacity).max(1) as f64));
        high.push(thread_label(t), Val::Gauge(load(&sh.high_water) as f64));
        written.push(thread_label(t), Val::Count(load(&sh.written)));
        files.push(thread_label(t), Val::Count(load(&sh.files_done)));
        let snap = sh.write_stats.snapshot();
        stalls.push(thread_label(t), Val::Count(snap.stalls));
        lat.push(thread_label(t), Val::Hist(snap));
    }
    out.extend([cap, fill, ratio, high, written, files, lat, stalls]);
    // Retention counts into the first ring's state (one keeper per directory).
    if let Some((sh, _)) = p.rings.first() {
        let mut del = Family::new(
            "wirespeed_retention_deleted_files",
            "Finished recording files retention deleted (record --keep-free/--keep-for), sidecars with them.",
        );
        del.push(Vec::new(), Val::Count(load(&sh.files_deleted)));
        let mut bytes =
            Family::new("wirespeed_retention_deleted_bytes", "Bytes of the recording files retention deleted.");
        bytes.push(Vec::new(), Val::Count(load(&sh.bytes_deleted)));
        out.extend([del, bytes]);
    }
}

fn reflect_families(p: &Parts, out: &mut Vec<Family>) {
    let Some(r) = &p.reflect else { return };
    let one = |name, help, v: &AtomicU64| {
        let mut f = Family::new(name, help);
        f.push(Vec::new(), Val::Count(load(v)));
        f
    };
    out.push(one("wirespeed_reflect_received_datagrams", "Datagrams the reflector received.", &r.received));
    out.push(one(
        "wirespeed_reflect_reflected_datagrams",
        "Probes the reflector sent back to their senders.",
        &r.reflected,
    ));
    out.push(one("wirespeed_reflect_reflected_bytes", "Bytes the reflector sent back.", &r.bytes));
    out.push(one(
        "wirespeed_reflect_send_errors",
        "Replies the kernel refused to send (e.g. a firewall rule, or an ICMP error from a client that went away).",
        &r.send_errors,
    ));
    let mut f = Family::new(
        "wirespeed_reflect_refused_datagrams",
        "Datagrams the reflector did not answer on purpose, by reason (own_port, low_port, not_allowed, reply, not_probe, rate_capped).",
    );
    for (reason, v) in super::board::REFUSED_REASONS.iter().zip(&r.refused) {
        f.push(vec![("reason", reason.to_string())], Val::Count(load(v)));
    }
    out.push(f);
}

fn tap_families(p: &Parts, out: &mut Vec<Family>) {
    let Some(t) = &p.tap else { return };
    let mut push = |name, help, v: Val| {
        let mut f = Family::new(name, help);
        f.push(Vec::new(), v);
        out.push(f);
    };
    push("wirespeed_tap_records", "Records this tap delivered, whole and checked.", Val::Count(load(&t.records)));
    push(
        "wirespeed_tap_bytes",
        "Bytes of the records this tap delivered (pcap records, headers included).",
        Val::Count(load(&t.bytes)),
    );
    push(
        "wirespeed_tap_overrun_records",
        "Records this tap lost because it fell behind and the recorder's ring lapped it (the recorder lost nothing).",
        Val::Count(load(&t.overrun_records)),
    );
    push(
        "wirespeed_tap_overrun_bytes",
        "Ring bytes this tap skipped when it was lapped.",
        Val::Count(load(&t.overrun_bytes)),
    );
    push(
        "wirespeed_tap_behind_bytes",
        "Bytes the recorder published that this tap has not read yet, over all rings.",
        Val::Gauge(load(&t.behind_bytes) as f64),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporter::Board;
    use std::sync::Arc;
    use wirespeed::ledger::LedgerCounts;

    #[test]
    fn streams_and_threads_are_labelled_and_counters_end_in_total() {
        let board = Board::new("recv");
        let lives: Arc<[Live]> = (0..2).map(|_| Live::with_streams(4)).collect();
        let c = LedgerCounts { received: 990, lost: 10, late: 2, duplicate: 1, invalid: 3, ..Default::default() };
        lives[1].streams[0].publish(Some("127.0.0.1:40000".parse().unwrap()), 0, &c, 123_456);
        lives[1].streams_published.store(1, Ordering::Release);
        lives[1].streams[1].publish(Some("[::1]:40001".parse().unwrap()), 3, &c, 1);
        // Not published yet: not shown.
        lives[0].datagrams.store(5, Ordering::Relaxed);
        board.attach_capture(lives);
        let text = render(&Shown { board: board.clone(), partitions: None }, false);
        assert!(text.contains("# TYPE wirespeed_received_datagrams_total counter\n"), "{text}");
        assert!(
            text.contains(
                "wirespeed_received_datagrams_total{thread=\"1\",source=\"127.0.0.1:40000\",stream=\"0\"} 990\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("wirespeed_lost_datagrams_total{thread=\"1\",source=\"127.0.0.1:40000\",stream=\"0\"} 10\n")
        );
        assert!(text
            .contains("wirespeed_received_bytes_total{thread=\"1\",source=\"127.0.0.1:40000\",stream=\"0\"} 123456\n"));
        assert!(!text.contains("40001"), "{text}");
        assert!(text.contains("wirespeed_capture_datagrams_total{thread=\"0\"} 5\n"));
        assert!(text.contains("wirespeed_build_info{version="), "{text}");
        assert!(!text.contains("wirespeed_ring"), "no ring in a recv: {text}");
        let om = render(&Shown { board: board.clone(), partitions: None }, true);
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE wirespeed_received_datagrams counter\n"), "{om}");
    }

    #[test]
    fn a_stream_source_round_trips_through_its_cell() {
        let cell = wirespeed::rx::StreamLive::default();
        for (a, s) in [("198.18.0.1:5000", 7u32), ("[2001:2::1]:6000", 0), ("127.0.0.1:1", u32::MAX)] {
            cell.publish(Some(a.parse().unwrap()), s, &LedgerCounts::default(), 0);
            assert_eq!(cell.source(), (Some(a.parse().unwrap()), s));
        }
        cell.publish(None, 2, &LedgerCounts::default(), 0);
        assert_eq!(cell.source(), (None, 2));
    }
}
