//! A stream's layout, learned from its own headers: what `wirespeed probe` tells a user about an
//! instrument's stream before they record it, and the `--format` spec that counts it exactly.
//!
//! VDIF headers carry the frame length, thread, station, bits, channels, complex flag and EDV;
//! the frame rate follows from the frame numbers once a thread's seconds roll over (the highest
//! frame number of a second whose end was seen, plus one). Mark5B has its sync word (and where
//! it sits says whether a packet sequence number comes first), its T bit and its frame
//! numbers. SPEAD carries its flavour, heap counter, heap size, offset and payload length in
//! every packet. Nothing here is guessed: a fact is printed only when the headers showed it,
//! and a spec only when every key it needs was learned; what is missing is said, with why.
//! Pure code, no system calls (fed by the probe's socket, or by a test).

use super::fill::Fill;
use super::mark5b::{self, Mark5b, Mark5bConfig};
use super::spead::{self, ItemPointer, Packet, Spead, SpeadConfig};
use super::vdif::{self, epoch_start, Vdif, VdifConfig, Vtp};
use super::Format;
use serde::Serialize;
use std::net::SocketAddr;

/// Sources a learner tells apart; datagrams from more are counted, not studied.
pub const MAX_SOURCES: usize = 64;

/// What was learned about one source's stream.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Learned {
    /// Source address and port.
    pub source: String,
    /// Datagrams from it.
    pub datagrams: u64,
    /// The format its first datagram showed: vdif, vtp, mark5b, spead, or unknown.
    pub format: &'static str,
    /// The `--format` spec that counts this stream exactly, when every key it needs was
    /// learned (checked: the spec parses, and the stream's first datagram passes it).
    pub spec: Option<String>,
    /// What the headers showed, one fact per line.
    pub facts: Vec<String>,
    /// What could not be learned, and why (a spec is given only when this is empty).
    pub missing: Vec<String>,
    /// Datagrams whose layout differed from the first one's (another frame length, station,
    /// flavour...): a stream that changed, or two streams from one source.
    pub changed: u64,
}

/// Per-source learning state.
enum Seen {
    Vdif(VdifSeen),
    Mark5b(Mark5bSeen),
    Spead(SpeadSeen),
    Unknown { len: usize, first: Vec<u8> },
}

struct Source {
    addr: SocketAddr,
    datagrams: u64,
    changed: u64,
    seen: Seen,
}

/// Learns the layout of every source's stream from the datagrams fed to it.
#[derive(Default)]
pub struct Learner {
    sources: Vec<Source>,
    /// Datagrams from sources beyond [`MAX_SOURCES`].
    pub unstudied: u64,
    /// A frame rate to take for VDIF and Mark5B streams whose own rate was not seen (no second
    /// boundary yet): a receiver that cannot wait longer says it assumed it.
    pub assume_fps: Option<u32>,
    /// Seconds each stream must be seen to end before its frame rate counts as seen (0 or 1:
    /// one). A receiver that counts by the rate asks for two: a second whose last frame was
    /// lost would give a rate one too low.
    pub rate_seconds: u64,
}

/// How a frame rate is concluded: the seconds that must be seen to end, and what to assume
/// when they were not.
#[derive(Clone, Copy)]
struct RateRule {
    assume: Option<u32>,
    seconds: u64,
}

impl Learner {
    /// A learner with nothing seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// One datagram from `src`. A wirespeed sender's end-of-stream message is not the stream.
    pub fn feed(&mut self, src: SocketAddr, data: &[u8]) {
        if data.len() == crate::control::END_LEN && crate::control::EndOfStream::decode(data).is_some() {
            return;
        }
        if let Some(s) = self.sources.iter_mut().find(|s| s.addr == src) {
            s.datagrams += 1;
            let same = match &mut s.seen {
                Seen::Vdif(v) => v.feed(data),
                Seen::Mark5b(m) => m.feed(data),
                Seen::Spead(p) => p.feed(data),
                Seen::Unknown { len, .. } => *len == data.len(),
            };
            if !same {
                s.changed += 1;
            }
            return;
        }
        if self.sources.len() >= MAX_SOURCES {
            self.unstudied += 1;
            return;
        }
        let seen = if let Some(p) = SpeadSeen::start(data) {
            Seen::Spead(p)
        } else if let Some(m) = Mark5bSeen::start(data) {
            Seen::Mark5b(m)
        } else if let Some(v) = VdifSeen::start(data) {
            Seen::Vdif(v)
        } else {
            Seen::Unknown { len: data.len(), first: data.iter().take(16).copied().collect() }
        };
        self.sources.push(Source { addr: src, datagrams: 1, changed: 0, seen });
    }

    /// What was learned, per source, in the order they were first heard.
    pub fn learned(&self) -> Vec<Learned> {
        let rule = RateRule { assume: self.assume_fps, seconds: self.rate_seconds.max(1) };
        self.sources
            .iter()
            .map(|s| {
                let (format, spec, facts, missing) = match &s.seen {
                    Seen::Vdif(v) => v.conclude(rule),
                    Seen::Mark5b(m) => m.conclude(rule),
                    Seen::Spead(p) => p.conclude(),
                    Seen::Unknown { len, first } => (
                        "unknown",
                        None,
                        vec![format!(
                            "{len}-byte datagrams starting {}",
                            first.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
                        )],
                        vec!["no VDIF, VTP, Mark5B or SPEAD header at its start: give --format (a counter, or --seq-offset/--seq-width for a header of its own)".into()],
                    ),
                };
                let mut missing = missing;
                if spec.is_none() && missing.is_empty() {
                    missing.push(
                        "a spec: the layout learned does not accept the stream's first datagram (it differs from the rest, or a key is out of range): listen again, or give the keys".into(),
                    );
                }
                Learned {
                    source: s.addr.to_string(),
                    datagrams: s.datagrams,
                    format,
                    spec,
                    facts,
                    missing,
                    changed: s.changed,
                }
            })
            .collect()
    }
}

/// Whether `d` shows the fixed marks of a `family` datagram (a VDIF header whose frame length
/// is the datagram's, Mark5B's sync word at a frame's length, SPEAD's magic and version), read
/// without allocating. What lets a receiver that learned a layout study a datagram the layout
/// refuses as a possible change of layout, and leave noise alone.
pub fn looks_like(family: &str, d: &[u8]) -> bool {
    let mark5b = |f: &[u8]| mark5b::starts_with_sync(f) && matches!(f.len(), mark5b::FRAME_LEN | mark5b::HALF_LEN);
    match family {
        "vdif" => vdif_frame(d),
        "vtp" => !vdif_frame(d) && d.get(8..).is_some_and(vdif_frame),
        "mark5b" => mark5b(d) || d.get(8..).is_some_and(mark5b),
        "spead" => Packet::new_checked(d).is_ok_and(|p| spead_header(&p)),
        _ => false,
    }
}

/// A whole VDIF frame: its header's frame length is the datagram's, its version 0 or 1.
fn vdif_frame(f: &[u8]) -> bool {
    f.len() >= 40 && vdif::Header::new_checked(f).is_ok_and(|h| h.frame_len() == f.len() && h.version() <= 1)
}

/// A SPEAD packet header: magic, version 4, and item pointers of 64 bits split in a valid way.
fn spead_header(p: &Packet<&[u8]>) -> bool {
    let a = p.heap_addr_width();
    p.magic() == spead::MAGIC && p.version() == spead::VERSION && (1..8).contains(&a) && p.item_id_width() + a == 8
}

/// The value of `key` in a `--format` spec (`fps` of `vdif,fps=1000,...`).
pub fn spec_key<'s>(spec: &'s str, key: &str) -> Option<&'s str> {
    spec.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// A spec checked against the datagram it was learned from: it parses, and accepts it.
fn checked_spec(f: &dyn Format, first: &[u8]) -> Option<String> {
    let spec = f.spec();
    let again = super::spec::parse(&spec).ok()?;
    again.check(first).ok().map(|_| spec)
}

/// Whether the counter fill `fmt_counter` accepts `first` (wirespeed's own sender), else the
/// instrument's own data: `fill=any`.
fn fill_of(with_counter: Option<Box<dyn Format>>, first: &[u8]) -> Fill {
    match with_counter {
        Some(f) if f.check(first).is_ok() => Fill::Counter,
        _ => Fill::Any,
    }
}

/// A frame rate from frame numbers: per stream, the highest frame number of each second whose
/// end was seen (a later second arrived), plus one; the highest over every such second.
#[derive(Default)]
struct Rate {
    /// (stream, current second, highest frame number in it)
    current: Vec<(u32, u64, u32)>,
    /// Highest "frame + 1" over completed seconds.
    fps: Option<u32>,
    /// Seconds seen to end.
    rollovers: u64,
    /// Highest frame number seen at all.
    max_frame: u32,
}

impl Rate {
    fn feed(&mut self, stream: u32, second: u64, frame: u32) {
        self.max_frame = self.max_frame.max(frame);
        let Some(c) = self.current.iter_mut().find(|c| c.0 == stream) else {
            if self.current.len() < 1024 {
                self.current.push((stream, second, frame));
            }
            return;
        };
        if second == c.1 {
            c.2 = c.2.max(frame);
        } else if second > c.1 {
            // Second c.1 ended: its highest frame number is the rate's last frame.
            self.fps = Some(self.fps.unwrap_or(0).max(c.2 + 1));
            self.rollovers += 1;
            *c = (stream, second, frame);
        } // else a late frame of an earlier second
    }

    fn fact(&self, rule: RateRule) -> Result<(u32, String), String> {
        let streams = self.current.len().max(1) as u64;
        let fps = self.fps.filter(|_| self.rollovers >= rule.seconds * streams);
        match fps {
            None if rule.assume.is_some() => {
                let f = rule.assume.unwrap_or(1);
                Ok((f, format!("{f} frames per second per stream: assumed, not seen (too few second boundaries yet)")))
            }
            Some(f) if f > self.max_frame => Ok((
                f,
                format!("{f} frames per second per stream (frame numbers 0..{} over {} second boundaries)", f - 1, self.rollovers),
            )),
            Some(f) => Err(format!(
                "frames per second: frame numbers reach {} but a second ended at {}: the stream's rate changed, or its last frames were lost; give fps=",
                self.max_frame,
                f - 1
            )),
            None => Err(format!(
                "frames per second: no second boundary seen yet (frame numbers up to {}): listen for longer than a second (--for), or give fps=",
                self.max_frame
            )),
        }
    }
}

struct VdifSeen {
    /// VTP: an 8-byte PSN before each frame.
    vtp: bool,
    first: Vec<u8>,
    frame_len: usize,
    legacy: bool,
    station: u16,
    bits: u8,
    log2_chans: u8,
    complex: bool,
    edv: u8,
    version: u32,
    threads: [u64; 16],
    rate: Rate,
    invalid_flag: u64,
}

impl VdifSeen {
    fn start(d: &[u8]) -> Option<VdifSeen> {
        let (vtp, frame) = [(false, d), (true, d.get(8..)?)].into_iter().find(|(_, f)| vdif_frame(f))?;
        let h = vdif::Header::new_unchecked(frame);
        let mut v = VdifSeen {
            vtp,
            first: d.to_vec(),
            frame_len: frame.len(),
            legacy: h.legacy(),
            station: h.station(),
            bits: h.bits_per_sample(),
            log2_chans: h.log2_chans(),
            complex: h.complex(),
            edv: h.edv(),
            version: h.version(),
            threads: [0; 16],
            rate: Rate::default(),
            invalid_flag: 0,
        };
        v.feed(d);
        Some(v)
    }

    fn feed(&mut self, d: &[u8]) -> bool {
        let frame = if self.vtp { d.get(8..).unwrap_or(&[]) } else { d };
        let Ok(h) = vdif::Header::new_checked(frame) else { return false };
        if frame.len() != self.frame_len
            || h.frame_len() != frame.len()
            || h.station() != self.station
            || h.bits_per_sample() != self.bits
            || h.log2_chans() != self.log2_chans
            || h.complex() != self.complex
        {
            return false;
        }
        let t = h.thread();
        self.threads[(t / 64) as usize % 16] |= 1 << (t % 64);
        self.rate.feed(t, epoch_start(h.epoch()) + u64::from(h.seconds()), h.frame());
        self.invalid_flag += u64::from(h.invalid());
        true
    }

    fn thread_ids(&self) -> Vec<u32> {
        (0..1024u32).filter(|t| self.threads[(t / 64) as usize] & (1 << (t % 64)) != 0).collect()
    }

    fn conclude(&self, rule: RateRule) -> (&'static str, Option<String>, Vec<String>, Vec<String>) {
        let name = if self.vtp { "vtp" } else { "vdif" };
        let ids = self.thread_ids();
        let station = super::Shown::Station(self.station).to_string();
        let mut facts = vec![
            format!(
                "{} frames of {} bytes ({}-byte header{}), VDIF version {}, EDV {}",
                if self.vtp { "VTP: an 8-byte PSN, then VDIF" } else { "VDIF" },
                self.frame_len,
                if self.legacy { 16 } else { 32 },
                if self.legacy { ", legacy" } else { "" },
                self.version,
                self.edv
            ),
            format!(
                "station {station}, {} channel(s), {} bit(s) per sample, {}",
                1u64 << self.log2_chans,
                self.bits,
                if self.complex { "complex" } else { "real" }
            ),
            format!("thread id(s) {}", ids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")),
        ];
        if self.invalid_flag > 0 {
            facts.push(format!("{} frame(s) flagged invalid by the instrument", self.invalid_flag));
        }
        let mut missing = Vec::new();
        let fps = match self.rate.fact(rule) {
            Ok((f, line)) => {
                facts.push(line);
                Some(f)
            }
            Err(why) => {
                missing.push(why);
                None
            }
        };
        let threads = ids.last().map_or(1, |t| t + 1);
        if ids.len() as u32 != threads {
            facts.push(format!(
                "thread ids are not 0..{}: threads={threads} counts ids 0..{} and the absent ones as silent",
                ids.len(),
                threads - 1
            ));
        }
        let spec = fps.and_then(|fps| {
            let cfg = |fill| VdifConfig {
                frame_len: self.frame_len,
                threads,
                station: self.station,
                bits: self.bits,
                log2_chans: self.log2_chans,
                complex: self.complex,
                fps,
                epoch: None,
                start: None,
                fill,
            };
            let wrap = |v: Vdif| -> Box<dyn Format> {
                if self.vtp {
                    Box::new(Vtp::new(v, false))
                } else {
                    Box::new(v)
                }
            };
            let fill = fill_of(Vdif::new(cfg(Fill::Counter)).ok().map(wrap), &self.first);
            let f = wrap(Vdif::new(cfg(fill)).ok()?);
            checked_spec(f.as_ref(), &self.first)
        });
        (name, spec, facts, missing)
    }
}

struct Mark5bSeen {
    psn: bool,
    halves: bool,
    first: Vec<u8>,
    tvg: bool,
    rate: Rate,
    headerless: u64,
    bad_crc: u64,
}

impl Mark5bSeen {
    fn start(d: &[u8]) -> Option<Mark5bSeen> {
        let psn = if mark5b::starts_with_sync(d) {
            false
        } else if d.get(8..).is_some_and(mark5b::starts_with_sync) {
            true
        } else {
            return None;
        };
        let body = d.len() - if psn { 8 } else { 0 };
        let halves = match body {
            mark5b::FRAME_LEN => false,
            mark5b::HALF_LEN => true,
            _ => return None,
        };
        let h = mark5b::Header::new_checked(&d[if psn { 8 } else { 0 }..]).ok()?;
        let mut m = Mark5bSeen {
            psn,
            halves,
            first: d.to_vec(),
            tvg: h.tvg(),
            rate: Rate::default(),
            headerless: 0,
            bad_crc: 0,
        };
        m.feed(d);
        Some(m)
    }

    fn feed(&mut self, d: &[u8]) -> bool {
        let p = if self.psn { 8 } else { 0 };
        let want = p + if self.halves { mark5b::HALF_LEN } else { mark5b::FRAME_LEN };
        if d.len() != want {
            return false;
        }
        let h = mark5b::Header::new_unchecked(&d[p..]);
        if !h.sync_ok() {
            self.headerless += 1;
            return self.halves;
        }
        if !h.crc_ok() {
            self.bad_crc += 1;
            return true;
        }
        if let (Some(mjd), Some(sod)) = (h.mjd(), h.second_of_day()) {
            self.rate.feed(0, u64::from(mjd) * 86_400 + u64::from(sod), h.frame());
        }
        true
    }

    fn conclude(&self, rule: RateRule) -> (&'static str, Option<String>, Vec<String>, Vec<String>) {
        let mut facts = vec![format!(
            "Mark5B {}{}{}",
            if self.halves {
                "frames in halves of 5008 bytes (the second half has no header)"
            } else {
                "frames of 10016 bytes"
            },
            if self.psn { ", each after an 8-byte PSN" } else { "" },
            if self.tvg { ", T bit set (test vector data)" } else { "" }
        )];
        if self.bad_crc > 0 {
            facts.push(format!("{} header(s) with a wrong CRC", self.bad_crc));
        }
        let mut missing = Vec::new();
        let fps = match self.rate.fact(rule) {
            Ok((f, line)) if f <= 32_768 => {
                facts.push(line);
                Some(f)
            }
            Ok((f, _)) => {
                missing.push(format!(
                    "frames per second: the 15-bit frame number wraps above 32768 ({f} seen): give fps="
                ));
                None
            }
            Err(why) => {
                missing.push(why);
                None
            }
        };
        let spec = fps.and_then(|fps| {
            let cfg =
                |fill| Mark5bConfig { fps, halves: self.halves, psn: self.psn, user: 0, fill, mjd: None, sec: None };
            let fill = if self.tvg {
                Fill::Tvg
            } else {
                fill_of(Mark5b::new(cfg(Fill::Counter)).ok().map(|m| Box::new(m) as Box<dyn Format>), &self.first)
            };
            checked_spec(&Mark5b::new(cfg(fill)).ok()?, &self.first)
        });
        ("mark5b", spec, facts, missing)
    }
}

/// Most heap sizes a SPEAD learner tells apart (the rest are counted under the last).
const HEAP_SIZES: usize = 8;

struct SpeadSeen {
    addr_bits: u32,
    first_data: Option<Vec<u8>>,
    /// Heap sizes seen, with the packets of each and the payload of a first packet of a heap of
    /// that size (when one was seen and the heap has more packets).
    heaps: Vec<HeapSize>,
    /// Payload bytes of packets inside a heap (neither its first nor its last): smallest and
    /// largest. Equal in every stream a conforming sender cuts into packets.
    middle: Option<(u64, u64)>,
    /// The largest payload of any packet.
    largest: u64,
    /// Heap counters: the first, the last, and the greatest common divisor of the steps between
    /// distinct ones.
    first_cnt: Option<u64>,
    last_cnt: u64,
    step: Option<u64>,
    /// Heap counter changes seen (consecutive packets of different heaps).
    heap_changes: u64,
    control: u64,
    descriptors: u64,
    items: (usize, usize),
}

#[derive(Clone, Copy)]
struct HeapSize {
    size: u64,
    packets: u64,
    /// Heaps of this size whose first packet was seen without descriptors: what ranks the data
    /// heap (a first heap carrying descriptors may have more packets than a data heap).
    heaps: u64,
    lead: Option<u64>,
}

impl SpeadSeen {
    fn start(d: &[u8]) -> Option<SpeadSeen> {
        let p = Packet::new_checked(d).ok()?;
        if !spead_header(&p) {
            return None;
        }
        let a = p.heap_addr_width();
        let mut s = SpeadSeen {
            addr_bits: u32::from(a) * 8,
            first_data: None,
            heaps: Vec::with_capacity(HEAP_SIZES),
            middle: None,
            largest: 0,
            first_cnt: None,
            last_cnt: 0,
            step: None,
            heap_changes: 0,
            control: 0,
            descriptors: 0,
            items: (usize::MAX, 0),
        };
        s.feed(d);
        Some(s)
    }

    fn feed(&mut self, d: &[u8]) -> bool {
        let Ok(p) = Packet::new_checked(d) else { return false };
        if p.magic() != spead::MAGIC || u32::from(p.heap_addr_width()) * 8 != self.addr_bits {
            return false;
        }
        let n = p.num_items();
        self.items = (self.items.0.min(n), self.items.1.max(n));
        let (mut cnt, mut size, mut off, mut plen, mut control, mut desc) = (None, None, None, None, false, false);
        for i in 0..n {
            let ItemPointer { immediate, id, value } = ItemPointer::decode(p.item(i), self.addr_bits);
            match (immediate, id) {
                (true, spead::HEAP_CNT) => cnt = Some(value),
                (true, spead::HEAP_SIZE) => size = Some(value),
                (true, spead::HEAP_OFFSET) => off = Some(value),
                (true, spead::PAYLOAD_LENGTH) => plen = Some(value),
                (_, spead::STREAM_CONTROL) => control = true,
                (_, spead::ITEM_DESCRIPTOR) => desc = true,
                _ => {}
            }
        }
        if control {
            self.control += 1;
            return true;
        }
        self.descriptors += u64::from(desc);
        let (Some(cnt), Some(off), Some(plen)) = (cnt, off, plen) else { return true };
        if self.first_data.is_none() && !desc {
            self.first_data = Some(d.to_vec());
        }
        self.largest = self.largest.max(plen);
        if let Some(size) = size {
            let last = off.saturating_add(plen) >= size;
            if off != 0 && !last {
                let (lo, hi) = self.middle.unwrap_or((u64::MAX, 0));
                self.middle = Some((lo.min(plen), hi.max(plen)));
            }
            let at = match self.heaps.iter().position(|h| h.size == size) {
                Some(i) => i,
                None if self.heaps.len() < HEAP_SIZES => {
                    self.heaps.push(HeapSize { size, packets: 0, heaps: 0, lead: None });
                    self.heaps.len() - 1
                }
                None => self.heaps.len() - 1,
            };
            let h = &mut self.heaps[at];
            h.packets += 1;
            h.heaps += u64::from(off == 0 && !desc);
            if off == 0 && !last && h.size == size {
                h.lead = Some(plen);
            }
        }
        match self.first_cnt {
            None => self.first_cnt = Some(cnt),
            Some(_) if cnt != self.last_cnt => {
                let step = cnt.abs_diff(self.last_cnt);
                self.step = Some(self.step.map_or(step, |s| gcd(s, step)));
                self.heap_changes += 1;
            }
            Some(_) => {}
        }
        self.last_cnt = cnt;
        true
    }

    fn conclude(&self) -> (&'static str, Option<String>, Vec<String>, Vec<String>) {
        let mut facts = vec![format!(
            "SPEAD-64-{}, {}..{} item pointers per packet",
            self.addr_bits,
            if self.items.0 == usize::MAX { 0 } else { self.items.0 },
            self.items.1
        )];
        if self.control > 0 {
            facts.push(format!("{} stream-control packet(s) (start or stop)", self.control));
        }
        if self.descriptors > 0 {
            facts.push(format!("{} packet(s) carrying item descriptors", self.descriptors));
        }
        let mut missing = Vec::new();
        // The data heap: the size most packets belong to.
        let data = self.heaps.iter().max_by_key(|h| (h.heaps, h.packets)).copied();
        if let Some(h) = data {
            facts.push(format!("heaps of {} bytes ({} packets seen)", h.size, h.packets));
            for o in self.heaps.iter().filter(|o| o.size != h.size) {
                facts.push(format!("also heaps of {} bytes ({} packets seen)", o.size, o.packets));
            }
        } else {
            missing.push("heap size: no data packet carried it".into());
        }
        // Three heaps at least: the first may be another size (spead2 sends its descriptors
        // with the first heap), and the counter's step shows between heaps.
        if self.heap_changes < 2 {
            missing.push(format!(
                "heap counters: {} heap(s) seen, 3 needed to tell the data heaps and the counter's step",
                self.heap_changes + u64::from(self.first_cnt.is_some())
            ));
        }
        // A full packet's payload: what every packet inside a heap carries (or, when no heap
        // had one, the largest payload seen).
        let payload = match self.middle {
            Some((lo, hi)) if lo != hi => {
                missing.push(format!(
                    "packetization: packets inside a heap carry {lo} to {hi} payload bytes, not one size, which the SPEAD ledger cannot number exactly"
                ));
                None
            }
            Some((p, _)) => Some(p),
            None => (self.largest > 0).then_some(self.largest),
        };
        let lead = data.and_then(|h| h.lead).filter(|&l| Some(l) != payload);
        if let Some(p) = payload {
            match lead {
                Some(l) => facts.push(format!("{p} payload bytes per packet, {l} in a heap's first")),
                None => facts.push(format!("{p} payload bytes per packet")),
            }
        }
        if let (Some(first), Some(step)) = (self.first_cnt, self.step) {
            facts.push(format!("heap counters from {first}, stepping by {step}"));
        }
        let step = self.step.unwrap_or(1);
        let spec = (missing.is_empty()).then_some(()).and_then(|_| {
            let (heap, payload) = (data?.size, payload?);
            let cfg = SpeadConfig {
                heap,
                payload: payload as usize,
                lead: lead.map(|l| l as usize),
                first: self.first_cnt? % step,
                step,
                addr_bits: self.addr_bits,
                fill: Fill::Any,
            };
            checked_spec(&Spead::new(cfg).ok()?, self.first_data.as_deref()?)
        });
        ("spead", spec, facts, missing)
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::spec::parse;

    fn src(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// Feed `n` datagrams of `spec` (streams interleaved), as a sender would make them.
    fn feed(l: &mut Learner, spec: &str, streams: u32, from: u64, n: u64, port: u16) {
        let f = parse(spec).unwrap();
        let mut b = vec![0u8; f.packet_len()];
        for s in from..from + n {
            for t in 0..streams {
                f.emit(t, s, &mut b);
                l.feed(src(port), &b);
            }
        }
    }

    #[test]
    fn vdif_layout_and_rate_are_learned_from_the_headers() {
        let mut l = Learner::new();
        // 2 threads, 1 channel, station Xx, 1000 frames/s, instrument data: 2.5 seconds.
        feed(&mut l, "vdif,frame=1032,threads=2,station=Xx,chans=1,fps=1000,fill=zeros", 2, 500, 2500, 5000);
        let got = &l.learned()[0];
        assert_eq!(got.format, "vdif");
        assert!(got.missing.is_empty(), "{got:?}");
        let spec = got.spec.as_deref().unwrap();
        assert!(spec.starts_with("vdif,frame=1032,threads=2,station=Xx,bits=2,chans=1,complex=0,fps=1000,"), "{spec}");
        assert!(spec.ends_with("fill=any"), "zeros are not wirespeed's counter: {spec}");
        assert!(got.facts.iter().any(|f| f == "thread id(s) 0, 1"), "{:?}", got.facts);
        // The spec counts the stream: every frame passes, numbered in order.
        let f = parse(spec).unwrap();
        let sent = parse("vdif,frame=1032,threads=2,station=Xx,chans=1,fps=1000,fill=zeros").unwrap();
        let mut b = vec![0u8; 1032];
        sent.emit(1, 1234, &mut b);
        assert_eq!(f.check(&b).unwrap().seq, 1234);
    }

    #[test]
    fn less_than_a_second_gives_no_rate_and_says_why() {
        let mut l = Learner::new();
        feed(&mut l, "vdif,frame=1032,fps=1000", 1, 0, 900, 5000);
        let got = &l.learned()[0];
        assert_eq!(got.spec, None);
        assert!(
            got.missing[0].starts_with("frames per second: no second boundary seen yet (frame numbers up to 899)"),
            "{got:?}"
        );
    }

    #[test]
    fn vtp_counter_fill_and_a_wirespeed_sender_are_recognised() {
        let mut l = Learner::new();
        feed(&mut l, "vtp,frame=1032,fps=2000", 1, 0, 4100, 5001);
        let got = &l.learned()[0];
        assert_eq!(got.format, "vtp");
        let spec = got.spec.as_deref().unwrap();
        assert!(
            spec.starts_with("vtp,psn=64,frame=1032,threads=1,station=WS") && spec.ends_with("fill=counter"),
            "{spec}"
        );
    }

    #[test]
    fn mark5b_with_and_without_psn() {
        let mut l = Learner::new();
        feed(&mut l, "mark5b,fps=2000,fill=tvg", 1, 0, 4500, 5002);
        feed(&mut l, "mark5b,fps=1000,halves=1,psn=1,fill=counter", 1, 0, 5000, 5003);
        let got = l.learned();
        assert_eq!(got[0].format, "mark5b");
        let s0 = got[0].spec.as_deref().unwrap();
        assert!(s0.starts_with("mark5b,fps=2000,halves=0,psn=0,") && s0.contains("fill=tvg"), "{s0}");
        let s1 = got[1].spec.as_deref().unwrap();
        assert!(s1.starts_with("mark5b,fps=1000,halves=1,psn=1,") && s1.contains("fill=counter"), "{s1}");
    }

    #[test]
    fn spead_flavour_heap_and_counters() {
        let mut l = Learner::new();
        feed(&mut l, "spead,heap=8192,payload=1024,first=7,step=2,addr=40,fill=counter", 1, 0, 400, 5004);
        let got = &l.learned()[0];
        let spec = got.spec.as_deref().unwrap();
        assert_eq!(spec, "spead,heap=8192,payload=1024,first=1,step=2,addr=40,fill=any");
        assert!(got.facts.iter().any(|f| f == "heap counters from 7, stepping by 2"), "{:?}", got.facts);
    }

    #[test]
    fn unknown_streams_and_changes_are_said() {
        let mut l = Learner::new();
        l.feed(src(1), b"hello, world");
        l.feed(src(1), b"hello");
        let got = &l.learned()[0];
        assert_eq!((got.format, got.changed, got.spec.is_none()), ("unknown", 1, true));
        assert!(got.facts[0].starts_with("12-byte datagrams starting 68 65 6c"), "{:?}", got.facts);
    }
}
