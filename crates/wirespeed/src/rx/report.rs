//! What a receive run reports: the per-stream ledgers, the kernel's view of the same
//! interval, and the diagnosis that sets one against the other (which layer lost what), with
//! the human renderings `recv`, `record` and `verify` share.

use super::backend::{BackendKind, Bound};
use super::capture::Capture;
use super::sink::Sink;
use super::RecvConfig;
use crate::control::EndOfStream;
use crate::kernel::KernelCounters;
use crate::ledger::{GapRange, LedgerCounts, Segment, SenderEnd};
use crate::units;
use crate::wire::{Format, Invalid};
use serde::Serialize;
use std::net::SocketAddr;

/// An end-of-stream message that matched no stream this receiver saw data from.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StrayEnd {
    /// Where it came from.
    pub source: Option<SocketAddr>,
    /// What it claimed.
    pub claimed: EndOfStream,
}

/// The ledger of one stream, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct StreamReport {
    /// Source address and port.
    pub source: String,
    /// Format stream id within the source.
    pub stream: u32,
    /// The counts.
    #[serde(flatten)]
    pub counts: LedgerCounts,
    /// Lost per million expected.
    pub drops_per_million: f64,
    /// Payload bytes received.
    pub bytes: u64,
    /// First and last sequence number seen.
    pub first_seq: Option<u64>,
    /// Highest sequence number seen.
    pub last_seq: Option<u64>,
    /// Where the holes are (coalesced ranges).
    pub gaps: Vec<GapRange>,
    /// Segments (more than one after a sender restart).
    pub segments: Vec<Segment>,
    /// Invalid datagrams by reason: length, header, payload.
    pub invalid_by_reason: InvalidReasons,
    /// Datagrams received but dropped because the recording ring was full (they are not in the
    /// recording, and so count among `lost`).
    pub ring_full: u64,
    /// The sender's own account, when its end-of-stream message arrived.
    pub sender: Option<EndOfStream>,
    /// Seconds from this stream's first to its last datagram.
    pub active_s: f64,
    /// The capture thread whose ledger this is (0 with one thread).
    pub thread: usize,
    /// SPEAD: the stream's heaps (complete, incomplete, lost, bytes missing), read from its
    /// ledger; absent for other formats, or when the ledger kept too few gap ranges to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heaps: Option<crate::wire::spead::HeapCounts>,
    /// The stream's last number, when a message of its own format closed it (a SPEAD stop
    /// heap): loss after the last datagram received and up to it is counted, as a wirespeed
    /// sender's end message lets it be.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<u64>,
    /// The layout it was counted by: 0 for the one the run began with, k after the k-th change
    /// of layout (`layout_changes`).
    #[serde(skip_serializing_if = "is_zero")]
    pub layout: usize,
}

fn is_zero(k: &usize) -> bool {
    *k == 0
}

/// One capture thread's share of a run: what it received, what it cost, where it ran.
#[derive(Clone, Debug, Serialize)]
pub struct ThreadReport {
    /// The thread's index (its socket's place in the SO_REUSEPORT group).
    pub thread: usize,
    /// The CPU it was pinned to (`--cpu`, `--cpus`).
    pub pinned: Option<usize>,
    /// The CPU it ran on at the end.
    pub cpu: Option<usize>,
    /// Datagrams it received (valid and invalid, end-of-stream messages excluded).
    pub datagrams: u64,
    /// Payload bytes it received.
    pub bytes: u64,
    /// Streams whose ledger it kept.
    pub streams: usize,
    /// Its fraction of the run's datagrams (1.0 with one thread).
    pub share: f64,
    /// Its CPU time, nanoseconds.
    pub cpu_ns: u64,
    /// Its CPU time per datagram it received, nanoseconds.
    pub cpu_ns_per_packet: f64,
    /// Its socket's drops (/proc/net/udp at the end, else SO_RXQ_OVFL).
    pub socket_drops: Option<u64>,
    /// Datagrams it received but dropped at its full recording ring.
    pub ring_full: u64,
    /// Multicast with several threads: datagrams it received but left to another thread
    /// (every thread gets a copy of each; each keeps its steering share).
    pub not_steered_here: u64,
    /// How its loop ended.
    pub stopped_by: String,
}

/// Invalid datagrams split by reason.
#[derive(Clone, Copy, Debug, Default, Serialize, serde::Deserialize)]
pub struct InvalidReasons {
    /// Wrong length.
    pub length: u64,
    /// Impossible header.
    pub header: u64,
    /// Payload broke the pattern.
    pub payload: u64,
}

/// The kernel's view over the same interval.
#[derive(Clone, Debug, Serialize)]
pub struct KernelView {
    /// This socket's drops from SO_RXQ_OVFL (as last attached to a datagram).
    pub socket_drops_rxq_ovfl: Option<u64>,
    /// This socket's drops from /proc/net/udp at the end (covers drops after the last datagram).
    pub socket_drops_proc: Option<u64>,
    /// UDP and backlog counter increases in this network namespace during the run (all sockets).
    pub namespace_delta: KernelCounters,
    /// Receive buffer the kernel granted, bytes (as reported by getsockopt, i.e. doubled).
    pub rcvbuf_granted: usize,
    /// Receive buffer asked for, bytes.
    pub rcvbuf_requested: usize,
}

/// The result of a receive run.
#[derive(Clone, Debug, Serialize)]
pub struct RecvReport {
    /// Schema name and version of this document.
    pub schema: &'static str,
    /// Listen address.
    pub listen: String,
    /// Payload format.
    pub format: String,
    /// Receive backend.
    pub backend: &'static str,
    /// GRO in use.
    pub gro: bool,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// Seconds from the first to the last data datagram.
    pub active_s: f64,
    /// Datagrams received (valid and invalid, end-of-stream messages excluded).
    pub datagrams: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Datagrams per second over the active period.
    pub pps: f64,
    /// Payload bits per second over the active period.
    pub bps: f64,
    /// Totals over all streams.
    pub total: LedgerCounts,
    /// Lost per million expected, all streams.
    pub drops_per_million: f64,
    /// Sequence numbers the senders left out on purpose (from their end messages).
    pub sender_skipped: u64,
    /// Streams whose end message never arrived (their tail loss is unknowable).
    pub streams_without_end: usize,
    /// End-of-stream messages from a source and stream whose data never arrived here: a
    /// sender whose data was all lost, or a forgery. Ignored: they settle nothing.
    pub stray_control: u64,
    /// End-of-stream messages not believed: inconsistent in themselves, with the data seen
    /// (a range that does not cover it, data after the end), or with another message for the
    /// same stream. Ignored, and the stream's end counts as unknown.
    pub invalid_control: u64,
    /// The first stray end messages, with what they claimed.
    pub stray_ends: Vec<StrayEnd>,
    /// Datagrams from streams beyond --max-streams (not in any ledger).
    pub untracked: u64,
    /// Datagrams truncated by the kernel.
    pub truncated: u64,
    /// Datagrams received but dropped at a full recording ring (`record` only; among `lost`).
    pub ring_full: u64,
    /// Valid datagrams that carry no sequence position (SPEAD stream control and descriptor
    /// heaps, headerless Mark5B halves): in no ledger.
    pub unsequenced: u64,
    /// Per-stream ledgers.
    pub streams: Vec<StreamReport>,
    /// The kernel's counters.
    pub kernel: KernelView,
    /// Which layer lost what, in words.
    pub diagnosis: Vec<String>,
    /// CPU the capture thread ran on (at the end).
    pub capture_cpu: Option<usize>,
    /// CPU time of the capture thread, nanoseconds.
    pub capture_cpu_ns: u64,
    /// Capture-thread CPU time per datagram, nanoseconds.
    pub cpu_ns_per_packet: f64,
    /// Notes (buffer clamps, fallbacks).
    pub notes: Vec<String>,
    /// The layout learned from the stream when `--format` named only a format (`vdif`), with
    /// what was assumed rather than seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned: Option<super::learn::LearnedLayout>,
    /// Changes of the learned layout mid-run, in order: from each, the run counted by the new
    /// layout (recv), or only said so (record).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layout_changes: Vec<super::relearn::LayoutChange>,
    /// How the run ended: duration, count, end-of-stream, signal.
    pub stopped_by: String,
    /// Nap after a partial batch actually used, nanoseconds (0: none).
    pub coalesce_ns: u64,
    /// How datagrams were spread over the capture threads.
    pub steering: String,
    /// Per capture thread: datagrams, CPU per datagram, CPU, drops. Their datagrams, bytes,
    /// CPU time and ring-full drops sum to the run's.
    pub threads: Vec<ThreadReport>,
    /// Streams seen on more than one thread (the steering should make this empty): each
    /// thread kept its own ledger for them, so their loss counts are not exact.
    pub split_streams: Vec<String>,
    /// The PGM receiver's side (`--transport pgm`): NAKs sent, repairs received, what could
    /// not be repaired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pgm: Option<super::backend::pgm::PgmRecvReport>,
    /// The first datagram the format refused, and why (the first field that differs): what a
    /// user needs to see when their stream is not laid out as `--format` says.
    pub first_invalid: Option<FirstInvalidReport>,
}

/// The first refused datagram of a run.
#[derive(Clone, Debug, Serialize)]
pub struct FirstInvalidReport {
    /// Its source address and port.
    pub source: String,
    /// Its length, bytes.
    pub bytes: usize,
    /// Why it was refused, by reason (length, header, payload).
    pub reason: Invalid,
    /// The first field that differs, in words ("channels: the stream has 1, --format has
    /// chans=4").
    pub why: String,
}

/// Share of a run's datagrams that may be refused by the format before the run is said not to
/// match it: one in a hundred. Below it, refused datagrams are strays among a matching stream
/// (a port scan, a corrupted frame, whose number then shows as lost); at or above it, the
/// stream is not what `--format` says, and its ledger counts only the datagrams that happen to
/// parse, so its loss figures are no evidence either way.
pub const MISMATCH_SHARE: f64 = 0.01;

/// The report of a finished capture: every slot's ledger settled against its end-of-stream
/// message, the totals, the kernel's view and the diagnosis.
#[allow(clippy::too_many_arguments)]
pub(super) fn build_report<S: Sink>(
    cfg: &RecvConfig,
    bound: &Bound,
    backend: BackendKind,
    fmt: &dyn Format,
    cap: &mut Capture<'_, S>,
    kernel: KernelView,
    truncated: u64,
    stopped_by: String,
    wall_ns: u64,
    cpu_ns: u64,
    cpu: Option<usize>,
    (nap_ns, notes_extra): (u64, Vec<String>),
) -> RecvReport {
    let mut streams = Vec::with_capacity(cap.active);
    let mut total = LedgerCounts::default();
    cap.settle_relearn();
    let current = cap.layouts.len();
    let (base, layouts) = (cap.fmt, &cap.layouts);
    let spead = |k: usize| {
        let f: &dyn Format = if k == 0 { base } else { &*layouts[k - 1] };
        f.as_any().and_then(|a| a.downcast_ref::<crate::wire::Spead>())
    };
    let mut sender_skipped = 0;
    let mut without_end = 0;
    let slots =
        cap.retired.iter_mut().map(|(k, s)| (*k, s)).chain(cap.slots[..cap.active].iter_mut().map(|s| (current, s)));
    for (layout, s) in slots {
        s.ledger.record_held(&mut s.len_lock);
        let (first, last) = s.end_range;
        let closed = s.closed_at.zip(s.ledger.first_seen()).map(|(last, first)| SenderEnd { first, last });
        let sender = s.end.filter(|e| !e.is_empty()).map(|_| SenderEnd { first, last }).or(closed);
        s.ledger.finish(sender);
        match s.end {
            Some(e) => sender_skipped += e.skipped,
            None if s.closed_at.is_some() => {}
            None => without_end += 1,
        }
        let counts = s.ledger.counts();
        total.merge(&counts);
        let (gaps, segments) = (s.ledger.gaps().to_vec(), s.ledger.segments());
        let heaps = spead(layout).and_then(|f| f.heaps(&segments, &gaps, counts.ranges_dropped));
        streams.push(StreamReport {
            source: s.src.map(|a| a.to_string()).unwrap_or_else(|| "?".into()),
            stream: s.stream,
            counts,
            drops_per_million: counts.drops_per_million(),
            bytes: s.bytes,
            first_seq: s.ledger.first_seen(),
            last_seq: s.ledger.highest(),
            gaps,
            segments,
            invalid_by_reason: InvalidReasons {
                length: s.invalid_kinds[Invalid::Length as usize],
                header: s.invalid_kinds[Invalid::Header as usize],
                payload: s.invalid_kinds[Invalid::Payload as usize],
            },
            ring_full: s.ring_full,
            sender: s.end,
            active_s: s.last_ns.saturating_sub(s.first_ns) as f64 / 1e9,
            thread: 0,
            heaps,
            closed_at: s.closed_at,
            layout,
        });
    }
    let active_ns = cap.last_ns.saturating_sub(cap.first_ns);
    let active_s = active_ns as f64 / 1e9;
    let rate_s = active_s.max(1e-9);
    let pps = if cap.datagrams > 1 { (cap.datagrams - 1) as f64 / rate_s } else { 0.0 };
    let mut notes = bound.notes.clone();
    notes.extend(notes_extra);
    if cap.relearn.as_ref().is_some_and(|r| r.exhausted()) {
        notes.push(format!(
            "the layout changed {} times: later changes were not followed, and what they brought was refused (a stream that changes so often, or forged headers)",
            super::relearn::MAX_CHANGES
        ));
    }
    if cap.untracked > 0 {
        notes.push(format!(
            "{} datagrams came from more than --max-streams {} sources and are in no ledger: raise --max-streams",
            cap.untracked, cfg.max_streams
        ));
    }
    let mut r = RecvReport {
        schema: "wirespeed.recv/1",
        listen: cfg.listen.to_string(),
        format: fmt.name(),
        backend: backend.name(),
        gro: bound.gro,
        wall_s: wall_ns as f64 / 1e9,
        active_s,
        datagrams: cap.datagrams,
        bytes: cap.bytes,
        pps,
        bps: if cap.datagrams > 1 { pps * (cap.bytes as f64 / cap.datagrams as f64) * 8.0 } else { 0.0 },
        total,
        drops_per_million: total.drops_per_million(),
        sender_skipped,
        streams_without_end: without_end,
        stray_control: cap.stray_control,
        invalid_control: cap.invalid_control,
        stray_ends: cap.stray_ends.clone(),
        untracked: cap.untracked,
        truncated,
        ring_full: cap.ring_full,
        unsequenced: cap.unsequenced,
        streams,
        kernel,
        diagnosis: Vec::new(),
        capture_cpu: cpu,
        capture_cpu_ns: cpu_ns,
        cpu_ns_per_packet: if cap.datagrams > 0 { cpu_ns as f64 / cap.datagrams as f64 } else { 0.0 },
        notes,
        learned: None,
        layout_changes: cap.relearn.as_ref().map(|r| r.changes.clone()).unwrap_or_default(),
        stopped_by,
        coalesce_ns: nap_ns,
        steering: String::new(),
        threads: Vec::new(),
        split_streams: Vec::new(),
        pgm: None,
        first_invalid: cap.first_invalid.map(|f| FirstInvalidReport {
            source: f.src.map(|a| a.to_string()).unwrap_or_else(|| "?".into()),
            bytes: f.len,
            reason: f.why.kind,
            why: f.why.to_string(),
        }),
    };
    r.diagnosis = diagnose(&r);
    r
}

/// The run's report from its threads' reports, in thread order: counts and ledgers summed
/// exactly (each stream's ledger is one thread's), kernel drops summed over the sockets, the
/// namespace's counters taken once. `first_ns`..`last_ns` is the run's active period.
pub(super) fn merge_reports(
    mut parts: Vec<RecvReport>,
    mut threads: Vec<ThreadReport>,
    steering: String,
    first_ns: u64,
    last_ns: u64,
) -> RecvReport {
    let n = parts.len();
    for (i, p) in parts.iter_mut().enumerate() {
        for s in &mut p.streams {
            s.thread = i;
        }
    }
    let mut r = parts.remove(0);
    for p in parts {
        r.datagrams += p.datagrams;
        r.bytes += p.bytes;
        r.total.merge(&p.total);
        r.sender_skipped += p.sender_skipped;
        r.streams_without_end += p.streams_without_end;
        r.stray_control += p.stray_control;
        r.invalid_control += p.invalid_control;
        r.stray_ends.extend(p.stray_ends);
        r.untracked += p.untracked;
        r.truncated += p.truncated;
        r.ring_full += p.ring_full;
        r.unsequenced += p.unsequenced;
        r.streams.extend(p.streams);
        if r.first_invalid.is_none() {
            r.first_invalid = p.first_invalid;
        }
        let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        r.kernel.socket_drops_rxq_ovfl = sum(r.kernel.socket_drops_rxq_ovfl, p.kernel.socket_drops_rxq_ovfl);
        r.kernel.socket_drops_proc = sum(r.kernel.socket_drops_proc, p.kernel.socket_drops_proc);
        r.capture_cpu_ns += p.capture_cpu_ns;
        for note in p.notes {
            if !r.notes.contains(&note) {
                r.notes.push(note);
            }
        }
        if p.stopped_by != r.stopped_by && !r.stopped_by.split(", ").any(|w| w == p.stopped_by) {
            r.stopped_by = format!("{}, {}", r.stopped_by, p.stopped_by);
        }
        r.coalesce_ns = r.coalesce_ns.min(p.coalesce_ns);
    }
    r.stray_ends.truncate(16);
    if n > 1 {
        r.drops_per_million = r.total.drops_per_million();
        let active_s = last_ns.saturating_sub(first_ns) as f64 / 1e9;
        r.active_s = active_s;
        r.pps = if r.datagrams > 1 { (r.datagrams - 1) as f64 / active_s.max(1e-9) } else { 0.0 };
        r.bps = if r.datagrams > 1 { r.pps * (r.bytes as f64 / r.datagrams as f64) * 8.0 } else { 0.0 };
        r.cpu_ns_per_packet = if r.datagrams > 0 { r.capture_cpu_ns as f64 / r.datagrams as f64 } else { 0.0 };
        // Every thread's socket is granted the same buffer: the report gives one socket's.
        let mut seen: Vec<(&str, u32, usize)> = Vec::new();
        let mut split = Vec::new();
        for s in &r.streams {
            match seen.iter().find(|(src, st, _)| *src == s.source && *st == s.stream) {
                Some((_, _, t)) if *t != s.thread => {
                    let name = if s.stream == 0 { s.source.clone() } else { format!("{}#{}", s.source, s.stream) };
                    if !split.contains(&name) {
                        split.push(name);
                    }
                }
                Some(_) => {}
                None => seen.push((&s.source, s.stream, s.thread)),
            }
        }
        r.split_streams = split;
    }
    let total = r.datagrams.max(1) as f64;
    for t in &mut threads {
        t.share = t.datagrams as f64 / total;
    }
    r.threads = threads;
    r.steering = steering;
    r.diagnosis = diagnose(&r);
    r
}

/// Say, in words, which layer lost what: the ledger against the kernel's own counters.
pub fn diagnose(r: &RecvReport) -> Vec<String> {
    let mut d = Vec::new();
    let lost = r.total.lost;
    let unexplained = lost.saturating_sub(r.sender_skipped).saturating_sub(r.ring_full);
    let sock = r.kernel.socket_drops_proc.or(r.kernel.socket_drops_rxq_ovfl).unwrap_or(0);
    if r.datagrams == 0 && r.streams.is_empty() {
        d.push(format!(
            "nothing arrived on {}: is the sender pointed at this address and port?",
            crate::addr::shown_text(&r.listen)
        ));
        d.extend(control_diagnosis(r));
        return d;
    }
    if let Some(m) = r.format_mismatch() {
        // The ledger counted only what parsed: its loss says nothing about this stream, so no
        // line speaks of loss (or sends the user to the NIC) until the format is right; nor of
        // end-of-stream messages "whose data never arrived" (it arrived, and did not fit).
        d.push(m);
        return d;
    }
    let distrusted = r.stray_control + r.invalid_control;
    if lost == 0 && sock == 0 && distrusted == 0 {
        d.push(if r.total.invalid > 0 {
            // A few refused datagrams beside a matching stream (fewer than MISMATCH_SHARE).
            format!(
                "no sequence number missing, and the kernel reports no drops at this socket; {} datagram(s) were refused by the format and are in no sequence{}",
                units::thousands(r.total.invalid),
                r.first_invalid.as_ref().map(|f| format!(" (the first, from {}: {})", f.source, f.why)).unwrap_or_default()
            )
        } else {
            "no loss: every sequence number was received, and the kernel reports no drops at this socket".into()
        });
    } else if lost == 0 && sock == 0 {
        d.push(format!(
            "no loss in the streams whose data arrived, but {} end-of-stream message(s) could not be trusted: this run is no proof of zero loss",
            units::thousands(distrusted)
        ));
    } else {
        if r.sender_skipped > 0 {
            d.push(format!(
                "{} of the {} lost were left out on purpose by the sender (--skip-every/--skip)",
                units::thousands(r.sender_skipped.min(lost)),
                units::thousands(lost)
            ));
        }
        if r.ring_full > 0 {
            d.push(format!(
                "{} were received but dropped because the recording ring was full: the disk did not keep up for longer than the ring could absorb; use a larger --buffer, a faster disk, or a lower rate",
                units::thousands(r.ring_full)
            ));
        }
        if unexplained > 0 {
            if sock >= unexplained {
                d.push(format!(
                    "the kernel dropped {} at this socket (receive buffer full): the receiver did not keep up; raise --rcvbuf, pin with --cpu, or lower the rate{}",
                    units::thousands(sock),
                    doctor_hint(r, "", "explains why (the buffer cap, what else runs on the capture CPU, its priority)")
                ));
            } else if sock > 0 {
                d.push(format!(
                    "the kernel dropped {} at this socket; the other {} were lost before this host's UDP layer (sender, NIC, wire, switch or firewall){}",
                    units::thousands(sock),
                    units::thousands(unexplained - sock),
                    doctor_hint(r, &port_arg(r), "looks at the buffer cap, the NIC's counters and the firewall")
                ));
            } else {
                d.push(format!(
                    "{} lost, yet the kernel reports no drops at this socket: they were lost before it (sender, NIC, wire, switch or firewall){}",
                    units::thousands(unexplained),
                    doctor_hint(r, &port_arg(r), "looks at the NIC's counters, rings and the firewall rules for the port")
                ));
            }
        }
        if sock > unexplained {
            d.push(format!(
                "the kernel counted {} drops at this socket, more than the ledger's {} unexplained loss: the extra were not data of a tracked stream (e.g. after the run ended)",
                units::thousands(sock),
                units::thousands(unexplained)
            ));
        }
    }
    d.extend(control_diagnosis(r));
    if !r.split_streams.is_empty() {
        d.push(format!(
            "{} stream(s) arrived on more than one capture thread ({}): each thread kept its own ledger for them, so their loss and reorder counts are not exact (steering: {})",
            r.split_streams.len(),
            r.split_streams.iter().take(4).cloned().collect::<Vec<_>>().join(", "),
            r.steering
        ));
    }
    if r.streams_without_end > 0 {
        d.push(format!(
            "{} stream(s) sent no end-of-stream message (not a wirespeed sender, or it was lost): loss after their last received packet cannot be known",
            r.streams_without_end
        ));
    }
    if r.kernel.namespace_delta.rcvbuf_errors > sock {
        d.push(format!(
            "UDP RcvbufErrors rose by {} in this network namespace: other sockets are dropping too",
            units::thousands(r.kernel.namespace_delta.rcvbuf_errors - sock)
        ));
    }
    d
}

/// A rate as `--for` reads it back: `4.00G`, `942.0M`, `12.5k` (payload bits/s).
pub fn rate_arg(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2}G", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1}M", bps / 1e6)
    } else {
        format!("{:.1}k", (bps / 1e3).max(0.1))
    }
}

/// The `wirespeed doctor` command line for the stream this report saw: the rate it was sent
/// at (received plus lost, over the active time), its datagram size and the capture CPU, plus
/// `extra` options; `None` when too little arrived to know the stream.
pub fn doctor_command(r: &RecvReport, extra: &str) -> Option<String> {
    if r.datagrams == 0 || r.active_s <= 0.0 {
        return None;
    }
    let size = r.bytes / r.datagrams;
    let offered = (r.total.received + r.total.lost) as f64 / r.active_s * size as f64 * 8.0;
    Some(format!(
        "wirespeed doctor --for {} --size {size}{}{extra}",
        rate_arg(offered),
        r.capture_cpu.map(|c| format!(" --cpu {c}")).unwrap_or_default()
    ))
}

/// `: \`wirespeed doctor ...\` WHAT` for a diagnosis line, or nothing.
fn doctor_hint(r: &RecvReport, extra: &str, what: &str) -> String {
    doctor_command(r, extra).map(|c| format!("; `{c}` {what}")).unwrap_or_default()
}

/// ` --port P` when the report's listening address has a port.
fn port_arg(r: &RecvReport) -> String {
    r.listen
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .filter(|p| *p != 0)
        .map(|p| format!(" --port {p}"))
        .unwrap_or_default()
}

/// What the end-of-stream messages that were not believed mean, in words.
fn control_diagnosis(r: &RecvReport) -> Vec<String> {
    let mut d = Vec::new();
    if r.stray_control > 0 {
        let example = r
            .stray_ends
            .first()
            .map(|s| {
                format!(
                    " (e.g. {} claimed {} datagrams sent)",
                    s.source.map(|a| a.to_string()).unwrap_or_else(|| "?".into()),
                    units::thousands(s.claimed.sent)
                )
            })
            .unwrap_or_default();
        d.push(format!(
            "{} end-of-stream message(s) came from a source whose data never arrived here{example}: all of its data was lost, or the message was forged; ignored",
            units::thousands(r.stray_control)
        ));
    }
    if r.invalid_control > 0 {
        d.push(format!(
            "{} end-of-stream message(s) contradicted the data seen or each other (range, counts, data after the end): ignored, and those streams' tail loss is unknown",
            units::thousands(r.invalid_control)
        ));
    }
    d
}

/// The ledger table that `recv`, `record` and `verify` print alike: one row per stream (name,
/// counts, gap ranges), a total row when there are several, then where the holes are.
pub fn ledger_table(
    o: &mut String,
    rows: &[(String, &LedgerCounts, &[GapRange])],
    total: &LedgerCounts,
    show_gaps: usize,
) {
    use std::fmt::Write;
    let _ = writeln!(
        o,
        "  {:<24} {:>12} {:>10} {:>8} {:>8} {:>8} {:>7} {:>6} {:>10}",
        "stream", "received", "lost", "late", "dup", "invalid", "stale", "resync", "drops/M"
    );
    let row = |o: &mut String, name: &str, c: &LedgerCounts| {
        let _ = writeln!(
            o,
            "  {:<24} {:>12} {:>10} {:>8} {:>8} {:>8} {:>7} {:>6} {:>10.2}",
            name,
            units::thousands(c.received),
            units::thousands(c.lost),
            units::thousands(c.late),
            units::thousands(c.duplicate),
            units::thousands(c.invalid + c.stray),
            units::thousands(c.stale),
            c.resync,
            c.drops_per_million()
        );
    };
    for (name, c, _) in rows {
        row(o, name, c);
    }
    if rows.len() > 1 {
        row(o, "total", total);
    }
    for (name, c, gaps) in rows {
        if gaps.is_empty() {
            continue;
        }
        let shown: Vec<String> = gaps
            .iter()
            .take(show_gaps)
            .map(|g| if g.first == g.last { format!("{}", g.first) } else { format!("{}..{}", g.first, g.last) })
            .collect();
        let more = gaps.len().saturating_sub(show_gaps) as u64 + c.ranges_dropped;
        let _ = writeln!(
            o,
            "  gaps {}: {}{}",
            name,
            shown.join(", "),
            if more > 0 { format!(" (+{more} more ranges; --json lists them)") } else { String::new() }
        );
    }
}

impl RecvReport {
    /// The line saying the stream does not match `--format`, when nothing valid arrived or at
    /// least [`MISMATCH_SHARE`] of the datagrams were refused; `None` when the format fits.
    pub fn format_mismatch(&self) -> Option<String> {
        let refused = self.total.invalid;
        if refused == 0 || self.datagrams == 0 {
            return None;
        }
        let valid = self.total.received + self.unsequenced;
        // A change of layout a recorder did not follow leaves what came after it in no ledger,
        // however few datagrams that was.
        let unfollowed = self.layout_changes.iter().find(|c| !c.followed);
        if valid > 0 && (refused as f64) < MISMATCH_SHARE * self.datagrams as f64 && unfollowed.is_none() {
            return None;
        }
        let first = self
            .first_invalid
            .as_ref()
            .map(|f| format!("; the first, {} bytes from {}: {}", units::thousands(f.bytes as u64), f.source, f.why))
            .unwrap_or_default();
        let share = if valid == 0 {
            format!("none of the {} datagram(s) that arrived", units::thousands(self.datagrams))
        } else {
            format!(
                "{} of {} datagrams ({:.1} %)",
                units::thousands(refused),
                units::thousands(self.datagrams),
                100.0 * refused as f64 / self.datagrams as f64
            )
        };
        let verb = if valid == 0 { "fits" } else { "did not fit" };
        if let Some(c) = unfollowed {
            return Some(format!(
                "the stream changed layout {:.3} s in, to --format {}: {share} did not fit the layout the recording began with{first}. Its loss after the change is not counted here: `wirespeed verify --format {}` counts what was kept",
                c.at_s, c.spec, c.spec
            ));
        }
        Some(format!(
            "the stream does not match --format {}: {share} {verb} it{first}. The ledger counts only datagrams the format accepts, so it proves nothing about loss here: give the stream's own layout (`wirespeed probe PORT` learns it from the stream; `wirespeed formats` lists the keys)",
            self.format
        ))
    }

    /// Why this run cannot prove zero loss even though its ledger counted none, if it cannot.
    ///
    /// An end-of-stream message that settled nothing is either a sender whose data was all
    /// lost or a forgery, and the receiver cannot tell which; a disputed one leaves a stream's
    /// tail unknown. `--expect-zero-loss` must not pass on either.
    pub fn zero_loss_unproven(&self) -> Option<String> {
        if let Some(m) = self.format_mismatch() {
            return Some(format!("zero loss is not proven: {m}"));
        }
        if self.stray_control == 0 && self.invalid_control == 0 {
            return None;
        }
        Some(format!(
            "zero loss is not proven: {} end-of-stream message(s) came from sources whose data never arrived \
             (a sender whose data was all lost, or a forgery) and {} contradicted the data or each other",
            units::thousands(self.stray_control),
            units::thousands(self.invalid_control)
        ))
    }

    /// The human summary printed at the end of `wirespeed recv`.
    pub fn human(&self, show_gaps: usize) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "wirespeed recv {}  {}  {}{}  stopped by {}",
            crate::addr::shown_text(&self.listen),
            self.format,
            self.backend,
            if self.gro { "+GRO" } else { "" },
            self.stopped_by
        );
        let _ = writeln!(
            o,
            "  received {} datagrams, {} in {:.3} s: {} payload, {}",
            units::thousands(self.datagrams),
            units::bytes(self.bytes),
            self.active_s,
            units::bits(self.bps),
            units::pps(self.pps)
        );
        for line in self.learned.iter().flat_map(|l| l.lines()) {
            let _ = writeln!(o, "  {line}");
        }
        for line in self.layout_changes.iter().flat_map(|c| c.lines()) {
            let _ = writeln!(o, "  {line}");
        }
        let rows: Vec<(String, &LedgerCounts, &[GapRange])> = self
            .streams
            .iter()
            .map(|s| {
                let mut name = if s.stream == 0 { s.source.clone() } else { format!("{}#{}", s.source, s.stream) };
                if s.layout > 0 {
                    name.push_str(&format!(" (layout {})", s.layout));
                }
                (name, &s.counts, s.gaps.as_slice())
            })
            .collect();
        ledger_table(&mut o, &rows, &self.total, show_gaps);
        for s in &self.streams {
            if let Some(h) = &s.heaps {
                let _ = writeln!(
                    o,
                    "  heaps {}: {} complete, {} incomplete, {} lost entirely, of {}; {} of payload missing",
                    s.source,
                    units::thousands(h.complete),
                    units::thousands(h.incomplete),
                    units::thousands(h.lost),
                    units::thousands(h.heaps),
                    units::bytes(h.missing_bytes)
                );
            }
        }
        if self.stray_control + self.invalid_control > 0 {
            let _ = writeln!(
                o,
                "  end-of-stream messages ignored: {} stray (no data seen from their source), {} invalid (contradicted by the data or each other)",
                units::thousands(self.stray_control),
                units::thousands(self.invalid_control)
            );
        }
        if self.unsequenced > 0 {
            let _ = writeln!(
                o,
                "  unsequenced: {} valid datagrams with no sequence position (e.g. SPEAD stream-control heaps), in no ledger",
                units::thousands(self.unsequenced)
            );
        }
        if let Some(p) = &self.pgm {
            p.human(&mut o);
        }
        let k = &self.kernel;
        let _ = writeln!(
            o,
            "  kernel, same interval: socket drops {} (SO_RXQ_OVFL) / {} (/proc/net/udp); UDP RcvbufErrors +{}, InErrors +{}; softnet dropped +{}; rcvbuf {}",
            k.socket_drops_rxq_ovfl.map(units::thousands).unwrap_or_else(|| "n/a".into()),
            k.socket_drops_proc.map(units::thousands).unwrap_or_else(|| "n/a".into()),
            units::thousands(k.namespace_delta.rcvbuf_errors),
            units::thousands(k.namespace_delta.in_errors),
            units::thousands(k.namespace_delta.softnet_dropped),
            units::bytes(k.rcvbuf_granted as u64 / 2),
        );
        if self.threads.len() > 1 {
            let _ = writeln!(
                o,
                "  capture threads: {}, {} CPU in all, {} per datagram; steering: {}",
                self.threads.len(),
                units::nanos(self.capture_cpu_ns as f64),
                units::nanos(self.cpu_ns_per_packet),
                self.steering
            );
            for t in &self.threads {
                let _ = writeln!(
                    o,
                    "    thread {}: {} datagrams ({:.1}%), {} stream(s), {} per datagram, CPU {}{}, socket drops {}{}{}",
                    t.thread,
                    units::thousands(t.datagrams),
                    t.share * 100.0,
                    t.streams,
                    units::nanos(t.cpu_ns_per_packet),
                    t.cpu.map(|c| c.to_string()).unwrap_or_else(|| "?".into()),
                    t.pinned.map(|c| format!(" (pinned to {c})")).unwrap_or_default(),
                    t.socket_drops.map(units::thousands).unwrap_or_else(|| "n/a".into()),
                    if t.ring_full > 0 { format!(", ring-full {}", units::thousands(t.ring_full)) } else { String::new() },
                    if t.not_steered_here > 0 {
                        format!(", left to other threads {}", units::thousands(t.not_steered_here))
                    } else {
                        String::new()
                    },
                );
            }
        } else {
            let _ = writeln!(
                o,
                "  capture thread: {} CPU, {} per datagram{}",
                units::nanos(self.capture_cpu_ns as f64),
                units::nanos(self.cpu_ns_per_packet),
                self.capture_cpu.map(|c| format!(", on CPU {c}")).unwrap_or_default()
            );
        }
        for line in &self.diagnosis {
            let _ = writeln!(o, "  => {line}");
        }
        for n in &self.notes {
            let _ = writeln!(o, "  note: {n}");
        }
        o
    }
}
