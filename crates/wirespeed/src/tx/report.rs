//! What a send run reports: per-stream counts, rates over the schedule's span, the gaps
//! between send calls, and the human summary.

use super::plan::Plan;
use super::SendConfig;
use crate::units;
use crate::wire::Format;
use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles of the time between consecutive send calls.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct GapStats {
    /// Number of gaps measured.
    pub count: u64,
    /// Mean gap in nanoseconds.
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Largest gap.
    pub max_ns: u64,
}

impl GapStats {
    pub(super) fn from_hist(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return GapStats::default();
        }
        GapStats {
            count: h.len(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
        }
    }
}

/// What one stream did.
#[derive(Clone, Debug, Serialize)]
pub struct StreamSent {
    /// Index of the stream in the run.
    pub index: u32,
    /// Local (source) port, which identifies the stream at the receiver.
    pub local_port: u16,
    /// First sequence number generated.
    pub first_seq: u64,
    /// Last sequence number generated (skipped included); `None` when none.
    pub last_seq: Option<u64>,
    /// Datagrams sent.
    pub sent: u64,
    /// Sequence numbers left out on purpose.
    pub skipped: u64,
    /// Send system calls made.
    pub send_calls: u64,
    /// Times a send was refused with "connection refused" (no receiver on the port).
    pub refused: u64,
    /// Pacing stalls (schedule moved forward).
    pub slips: u64,
    /// Total schedule shift in nanoseconds.
    pub slipped_ns: u64,
    /// Largest backlog behind schedule, nanoseconds (made up at the bounded catch-up speed).
    pub max_behind_ns: u64,
    /// CPU time of this stream's thread.
    pub cpu_ns: u64,
    #[serde(skip)]
    pub(super) per_tenth: Vec<u64>,
    #[serde(skip)]
    pub(super) gaps: Option<Histogram<u64>>,
    #[serde(skip)]
    pub(super) elapsed_ns: u64,
    /// Time from the start to the loop's exit, when a stop request (Ctrl-C) ended it early.
    #[serde(skip)]
    pub(super) stopped_at_ns: Option<u64>,
}

/// The result of a send run.
#[derive(Clone, Debug, Serialize)]
pub struct SendReport {
    /// Schema name and version of this document.
    pub schema: &'static str,
    /// Destination.
    pub target: String,
    /// Payload format.
    pub format: String,
    /// UDP payload bytes per datagram.
    pub payload_bytes: usize,
    /// The request as the user wrote it, normalised.
    pub requested: String,
    /// Requested packets/s (all streams), when paced.
    pub requested_pps: Option<f64>,
    /// Whether GSO was asked for and whether it was used.
    pub gso_requested: bool,
    /// GSO actually in use.
    pub gso_used: bool,
    /// Datagrams per GSO super-datagram.
    pub gso_segments: usize,
    /// Datagrams per send call (the burst bound).
    pub burst: usize,
    /// How datagrams left: `udp`, `udp+gso`, or `raw:IFACE` (frames built here, AF_PACKET).
    pub transport: String,
    /// Seconds the schedule spanned: from the first send to one period after the last (so N
    /// packets at R read as exactly R), never more than `--duration`; a run stopped by a signal,
    /// to the moment it stopped.
    pub elapsed_s: f64,
    /// Datagrams sent (all streams).
    pub sent: u64,
    /// Sequence numbers left out on purpose (all streams).
    pub skipped: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Achieved datagrams per second.
    pub achieved_pps: f64,
    /// Achieved UDP payload bits per second.
    pub achieved_bps: f64,
    /// Equivalent Ethernet wire rate (headers, FCS, preamble, gap).
    pub wire_bps: f64,
    /// Achieved / requested sequence rate (1.0 = exact), when paced.
    pub rate_ratio: Option<f64>,
    /// Sequence numbers sent or skipped in each whole second of the run (all streams).
    pub per_second: Vec<u64>,
    /// Lowest and highest rate over any 1 s window (sliding in 0.1 s steps) as a fraction of
    /// the request, when paced and the run lasted at least 1 s.
    pub per_second_range: Option<(f64, f64)>,
    /// Gaps between consecutive send calls (all streams merged).
    pub gaps: GapStats,
    /// Pacing stalls given up (backlog beyond --max-lag), all streams.
    pub slips: u64,
    /// Largest backlog behind schedule of any stream, nanoseconds.
    pub max_behind_ns: u64,
    /// "Connection refused" results (nobody listening), all streams.
    pub refused: u64,
    /// CPU time of the sender threads per datagram sent, nanoseconds.
    pub cpu_ns_per_packet: f64,
    /// Per-stream detail.
    pub streams: Vec<StreamSent>,
    /// Things the user should know (fallbacks, clamps).
    pub notes: Vec<String>,
    /// The PGM session's side of the run (`--transport pgm`): repairs sent and what they cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pgm: Option<super::pgm::PgmSent>,
}

/// The report of a finished run: every stream's counts merged, rates over the schedule's span.
pub(super) fn summarise(
    cfg: &SendConfig,
    fmt: &dyn Format,
    plan: &Plan,
    streams: Vec<StreamSent>,
    notes: Vec<String>,
) -> SendReport {
    let sent: u64 = streams.iter().map(|s| s.sent).sum();
    let skipped: u64 = streams.iter().map(|s| s.skipped).sum();
    let elapsed_ns = streams.iter().map(|s| s.elapsed_ns).max().unwrap_or(0);
    // Rates are taken over the whole schedule: for a paced run, the time the last due packet
    // was sent plus one period, so that N packets at R pps read as exactly R.
    // A run cut short by Ctrl-C is measured to the moment it stopped.
    let stopped_ns = streams.iter().filter_map(|s| s.stopped_at_ns).max();
    let span_s = match (stopped_ns, plan.pps_per_stream) {
        (Some(t), _) => t as f64 / 1e9,
        (None, Some(p)) => elapsed_ns as f64 / 1e9 + 1.0 / p,
        (None, None) => elapsed_ns as f64 / 1e9,
    }
    .max(1e-9);
    // A run bounded by --duration took no longer than that, whatever the schedule's period
    // (one 64-bit datagram at 10 b/s is due every 6.4 s, yet a 1 s run ends after 1 s).
    let span_s = cfg.duration.map_or(span_s, |d| span_s.min(d.as_secs_f64().max(1e-9)));
    let mut gaps = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds are valid");
    let mut per_tenth: Vec<u64> = Vec::new();
    for s in &streams {
        if let Some(h) = &s.gaps {
            let _ = gaps.add(h);
        }
        if per_tenth.len() < s.per_tenth.len() {
            per_tenth.resize(s.per_tenth.len(), 0);
        }
        for (i, v) in s.per_tenth.iter().enumerate() {
            per_tenth[i] += v;
        }
    }
    let requested_pps = plan.pps_per_stream.map(|p| p * cfg.streams as f64);
    let generated = sent + skipped;
    let achieved_seq_pps = generated as f64 / span_s;
    // Only windows wholly inside the run count: the last, partial tenth is left out.
    let full_tenths = ((elapsed_ns / 100_000_000) as usize).min(per_tenth.len());
    let per_second: Vec<u64> = per_tenth[..full_tenths].chunks_exact(10).map(|c| c.iter().sum()).collect();
    let per_second_range = requested_pps.and_then(|r| {
        let windows: Vec<f64> =
            per_tenth[..full_tenths].windows(10).map(|w| w.iter().sum::<u64>() as f64 / r).collect();
        if windows.is_empty() {
            None
        } else {
            Some((windows.iter().cloned().fold(f64::MAX, f64::min), windows.iter().cloned().fold(0.0, f64::max)))
        }
    });
    let cpu: u64 = streams.iter().map(|s| s.cpu_ns).sum();
    let achieved_pps = sent as f64 / span_s;
    SendReport {
        schema: "wirespeed.send/1",
        target: cfg.dest.to_string(),
        format: fmt.name(),
        payload_bytes: plan.pkt_len,
        requested: cfg.rate.to_string(),
        requested_pps,
        gso_requested: cfg.gso,
        gso_used: plan.gso_used,
        transport: match (&cfg.raw, &cfg.pgm) {
            (Some(r), _) => format!("raw:{}", r.iface),
            (None, Some(_)) => "pgm".into(),
            (None, None) if plan.gso_used => "udp+gso".into(),
            (None, None) => "udp".into(),
        },
        gso_segments: plan.segs,
        burst: plan.burst,
        elapsed_s: span_s,
        sent,
        skipped,
        bytes: sent * plan.pkt_len as u64,
        achieved_pps,
        achieved_bps: achieved_pps * plan.pkt_len as f64 * 8.0,
        wire_bps: units::wire_bits(achieved_pps, plan.pkt_len),
        rate_ratio: requested_pps.map(|r| achieved_seq_pps / r),
        per_second,
        per_second_range,
        gaps: GapStats::from_hist(&gaps),
        slips: streams.iter().map(|s| s.slips).sum(),
        max_behind_ns: streams.iter().map(|s| s.max_behind_ns).max().unwrap_or(0),
        refused: streams.iter().map(|s| s.refused).sum(),
        cpu_ns_per_packet: if sent > 0 { cpu as f64 / sent as f64 } else { 0.0 },
        streams,
        notes,
        pgm: None,
    }
}

impl SendReport {
    /// The human summary printed at the end of `wirespeed send`.
    pub fn human(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "wirespeed send -> {}  {}  {} B  {} stream(s)  rate {}{}",
            self.target,
            self.format,
            self.payload_bytes,
            self.streams.len(),
            self.requested,
            match (self.requested_pps, self.requested.ends_with("pps")) {
                (Some(p), false) => format!(" ({})", units::pps(p)),
                _ => String::new(),
            }
        );
        let _ = writeln!(
            o,
            "  sent {} datagrams in {:.3} s: {} payload ({} on the wire), {}",
            units::thousands(self.sent),
            self.elapsed_s,
            units::bits(self.achieved_bps),
            units::bits(self.wire_bps),
            units::pps(self.achieved_pps)
        );
        if let Some(r) = self.rate_ratio {
            let _ = write!(o, "  achieved {:.2}% of the requested rate", r * 100.0);
            if let Some((lo, hi)) = self.per_second_range {
                let _ = write!(o, "; any 1 s window {:.2}%..{:.2}%", lo * 100.0, hi * 100.0);
            }
            let _ = writeln!(o);
        }
        if self.gaps.count > 0 {
            let _ = writeln!(
                o,
                "  send calls every {} (p50), p99 {}, max {}; up to {} datagram(s) per call{}",
                units::nanos(self.gaps.p50_ns as f64),
                units::nanos(self.gaps.p99_ns as f64),
                units::nanos(self.gaps.max_ns as f64),
                self.burst,
                if self.gso_used { format!(", GSO {} per super-datagram", self.gso_segments) } else { String::new() }
            );
        }
        if self.skipped > 0 {
            let _ = writeln!(o, "  left out on purpose: {} sequence numbers", units::thousands(self.skipped));
        }
        if self.slips > 0 {
            let _ = writeln!(
                o,
                "  gave up on the schedule {} time(s) after stalls longer than --max-lag: the host could not sustain the rate",
                self.slips
            );
        }
        if self.max_behind_ns > 1_000_000 && self.slips == 0 {
            let _ = writeln!(
                o,
                "  stalled up to {} behind schedule and caught up at the bounded speed (--catch-up-factor)",
                units::nanos(self.max_behind_ns as f64)
            );
        }
        if self.refused > 0 {
            let _ = writeln!(
                o,
                "  destination refused {} time(s): is a receiver listening on {}?",
                self.refused, self.target
            );
        }
        if let Some(p) = &self.pgm {
            let st = &p.stats;
            let _ = writeln!(
                o,
                "  pgm: session {} (NAKs to {}), {} ODATA, {} SPM; repairs: {} NAK(s) for {} sequence number(s), {} NCF, {} RDATA = {} ({:.3} % of data bytes)",
                p.tsi,
                p.nak_address,
                st.odata,
                st.spm,
                st.nak_packets,
                st.nak_sqns,
                st.ncf,
                st.rdata,
                units::bytes(st.rdata_bytes),
                p.repair_share_percent
            );
            if st.nak_out_of_window + st.nak_eliminated + st.nak_refused + st.nak_bad_source + st.malformed > 0 {
                let _ = writeln!(
                    o,
                    "  pgm: {} asked after leaving the window (unrecoverable; a larger --pgm-window reaches further back), {} asked again while queued or within the hold-off of their repair ({} within the hold-off), {} NAK(s) refused (another session or address), {} from an address no receiver has, {} malformed",
                    st.nak_out_of_window, st.nak_eliminated, st.nak_held_off, st.nak_refused, st.nak_bad_source, st.malformed
                );
            }
            match p.repair_budget_bound_bytes {
                Some(bound) => {
                    let _ = writeln!(
                        o,
                        "  pgm: repair budget {} % of the data + a burst of {}, re-repair hold-off {}: {} of repairs sent, at most {} allowed; {} NAKed sequence number(s) over budget, {} not sent yet",
                        p.repair_budget_share_percent,
                        units::bytes(p.repair_budget_burst_bytes),
                        units::nanos(p.repair_holdoff_s * 1e9),
                        units::bytes(p.repair_wire_bytes),
                        units::bytes(bound),
                        st.nak_over_budget,
                        st.nak_not_sent
                    );
                }
                None => {
                    let _ = writeln!(
                        o,
                        "  pgm: no repair budget (--pgm-repair-share off): every NAK is repaired; re-repair hold-off {}",
                        units::nanos(p.repair_holdoff_s * 1e9)
                    );
                }
            }
            if !p.naks_plausible {
                let _ = writeln!(
                    o,
                    "  pgm: WARNING: the NAKs asked for more than receivers can have lost ({}): forged NAKs, or a receiver far behind; repairs were {:.3} % of data bytes{}",
                    p.nak_warnings.join("; "),
                    p.repair_share_percent,
                    if p.repair_budget_bound_bytes.is_some() { ", held to the budget" } else { " (no budget: --pgm-repair-share off)" }
                );
            }
            let pace = match p.repair_budget_bytes_per_s {
                0 => "repair rate not capped (--pgm-repair-rate)".to_string(),
                b => format!("repairs paced to {} on the wire", units::bits(b as f64 * 8.0)),
            };
            let _ = writeln!(
                o,
                "  pgm: stayed {:.3} s for NAKs after the last data ({}); {pace}",
                p.linger_s, p.linger_end
            );
        }
        let _ = writeln!(o, "  sender CPU {} per datagram", units::nanos(self.cpu_ns_per_packet));
        for n in &self.notes {
            let _ = writeln!(o, "  note: {n}");
        }
        o
    }
}
