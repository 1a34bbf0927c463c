//! VDIF frames (formats.md section 2) and VTP, VDIF over UDP with a packet sequence number.
//!
//! [`Vdif`] emits EDV 0 frames with a 32-byte header and checks frames of version 0 or 1, with a
//! 32-byte header or the legacy 16-byte one (any EDV is accepted on check: words 4..7 belong to
//! the extension and are not interpreted).
//!
//! Stream and sequence number: the stream is the thread id. Frames of a thread are numbered by
//! time: `seq = (t - t0) * fps + frame`, where `t` is the frame's second counted from 2000-01-01
//! (its reference epoch's start plus the seconds field) and `t0` the configured start second
//! (`epoch` + `start`). Numbering by absolute time keeps `seq` continuous when a writer moves to
//! a new reference epoch. Limitation: epoch starts are taken from the calendar (86400-second
//! days); VDIF seconds include leap seconds, so a writer that changes epoch right after a leap
//! second repeats one second of numbers (seen as duplicates), which no stateless reader can
//! avoid.
//!
//! The "invalid data" bit is the instrument's own data-quality flag, not a transport fault: such
//! frames are accounted for as received (they arrived) but their payload is not checked.

use super::fill::{At, Fill};
use super::view::{check_len, Psn, Truncated};
use super::{Format, Invalid, Mismatch, PacketInfo, Shown};
use crate::calendar::{days_from_civil, DAY_SECS, UNIX_2000};

/// Bytes in a VDIF header (the legacy header has only its first 16).
pub const HEADER_LEN: usize = 32;
/// Bytes in a legacy VDIF header (words 0..3).
pub const LEGACY_HEADER_LEN: usize = 16;

/// Where each header field sits (formats.md section 2): word, lowest bit, width.
mod field {
    use crate::wire::view::Bits;
    pub const INVALID: Bits = Bits::new(0, 31, 1);
    pub const LEGACY: Bits = Bits::new(0, 30, 1);
    pub const SECONDS: Bits = Bits::new(0, 0, 30);
    pub const UNASSIGNED: Bits = Bits::new(1, 30, 2);
    pub const EPOCH: Bits = Bits::new(1, 24, 6);
    pub const FRAME: Bits = Bits::new(1, 0, 24);
    pub const VERSION: Bits = Bits::new(2, 29, 3);
    pub const LOG2_CHANS: Bits = Bits::new(2, 24, 5);
    /// Frame length in 8-byte units, header included.
    pub const LENGTH: Bits = Bits::new(2, 0, 24);
    pub const COMPLEX: Bits = Bits::new(3, 31, 1);
    pub const BITS_MINUS_1: Bits = Bits::new(3, 26, 5);
    pub const THREAD: Bits = Bits::new(3, 16, 10);
    pub const STATION: Bits = Bits::new(3, 0, 16);
    pub const EDV: Bits = Bits::new(4, 24, 8);
}

/// A view of a VDIF frame's header: every read and write of a header field goes through it.
#[derive(Clone, Copy, Debug)]
pub struct Header<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// A view without a length check (accessors panic on a short buffer).
    pub fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// A view of a frame, refused when the buffer cannot hold the header its legacy bit says
    /// it has (16 or 32 bytes).
    pub fn new_checked(buffer: T) -> Result<Header<T>, Truncated> {
        check_len(buffer.as_ref(), LEGACY_HEADER_LEN)?;
        let h = Header { buffer };
        check_len(h.buffer.as_ref(), h.header_len())?;
        Ok(h)
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The instrument marked the frame's data invalid.
    pub fn invalid(&self) -> bool {
        field::INVALID.get(self.b()) != 0
    }
    /// Legacy mode: the header is words 0..3 only.
    pub fn legacy(&self) -> bool {
        field::LEGACY.get(self.b()) != 0
    }
    /// Header length in bytes: 16 (legacy) or 32.
    pub fn header_len(&self) -> usize {
        if self.legacy() {
            LEGACY_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }
    /// Seconds since the reference epoch.
    pub fn seconds(&self) -> u32 {
        field::SECONDS.get(self.b())
    }
    /// Word 1's two unassigned bits (0 in a valid frame).
    pub fn unassigned(&self) -> u32 {
        field::UNASSIGNED.get(self.b())
    }
    /// Reference epoch: half-years since 2000.
    pub fn epoch(&self) -> u8 {
        field::EPOCH.get(self.b()) as u8
    }
    /// Frame number within the second.
    pub fn frame(&self) -> u32 {
        field::FRAME.get(self.b())
    }
    /// VDIF version.
    pub fn version(&self) -> u32 {
        field::VERSION.get(self.b())
    }
    /// log2 of the number of channels.
    pub fn log2_chans(&self) -> u8 {
        field::LOG2_CHANS.get(self.b()) as u8
    }
    /// Frame length in bytes, header included, as the header states it.
    pub fn frame_len(&self) -> usize {
        field::LENGTH.get(self.b()) as usize * 8
    }
    /// Complex samples.
    pub fn complex(&self) -> bool {
        field::COMPLEX.get(self.b()) != 0
    }
    /// Bits per sample (1..=32).
    pub fn bits_per_sample(&self) -> u8 {
        field::BITS_MINUS_1.get(self.b()) as u8 + 1
    }
    /// Thread id.
    pub fn thread(&self) -> u32 {
        field::THREAD.get(self.b())
    }
    /// Station id.
    pub fn station(&self) -> u16 {
        field::STATION.get(self.b()) as u16
    }
    /// Extended data version (words 4..7; 0 in a legacy header, which has none).
    pub fn edv(&self) -> u8 {
        if self.legacy() {
            0
        } else {
            field::EDV.get(self.b()) as u8
        }
    }
    /// The frame's payload: everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    fn b_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Set or clear the invalid-data flag.
    pub fn set_invalid(&mut self, v: bool) {
        field::INVALID.set(self.b_mut(), u32::from(v))
    }
    /// Set or clear legacy mode (a legacy header is 16 bytes: write it in a buffer that holds
    /// the frame, then take the payload from [`Header::header_len`]).
    pub fn set_legacy(&mut self, v: bool) {
        field::LEGACY.set(self.b_mut(), u32::from(v))
    }
    /// Set the seconds since the reference epoch (30 bits).
    pub fn set_seconds(&mut self, v: u32) {
        field::SECONDS.set(self.b_mut(), v)
    }
    /// Set the reference epoch (6 bits).
    pub fn set_epoch(&mut self, v: u8) {
        field::EPOCH.set(self.b_mut(), u32::from(v))
    }
    /// Set the frame number within the second (24 bits).
    pub fn set_frame(&mut self, v: u32) {
        field::FRAME.set(self.b_mut(), v)
    }
    /// Set the VDIF version (3 bits).
    pub fn set_version(&mut self, v: u32) {
        field::VERSION.set(self.b_mut(), v)
    }
    /// Set log2 of the number of channels (5 bits).
    pub fn set_log2_chans(&mut self, v: u8) {
        field::LOG2_CHANS.set(self.b_mut(), u32::from(v))
    }
    /// Set the frame length in bytes, header included (a multiple of 8).
    pub fn set_frame_len(&mut self, bytes: usize) {
        field::LENGTH.set(self.b_mut(), (bytes / 8) as u32)
    }
    /// Set complex samples.
    pub fn set_complex(&mut self, v: bool) {
        field::COMPLEX.set(self.b_mut(), u32::from(v))
    }
    /// Set the bits per sample (1..=32).
    pub fn set_bits_per_sample(&mut self, v: u8) {
        field::BITS_MINUS_1.set(self.b_mut(), u32::from(v.wrapping_sub(1)))
    }
    /// Set the thread id (10 bits).
    pub fn set_thread(&mut self, v: u32) {
        field::THREAD.set(self.b_mut(), v)
    }
    /// Set the station id.
    pub fn set_station(&mut self, v: u16) {
        field::STATION.set(self.b_mut(), u32::from(v))
    }
    /// Set the extended data version (byte 3 of word 4; 32-byte headers only).
    pub fn set_edv(&mut self, v: u8) {
        field::EDV.set(self.b_mut(), u32::from(v))
    }
}

/// Seconds from 2000-01-01 00:00 UTC to the start of VDIF reference epoch `k` (half-years).
pub fn epoch_start(k: u8) -> u64 {
    let k = i64::from(k & 63);
    let days = days_from_civil(2000 + k / 2, if k % 2 == 1 { 7 } else { 1 }, 1) - days_from_civil(2000, 1, 1);
    days as u64 * DAY_SECS
}

/// The current reference epoch and the seconds since its start, from the system clock.
pub fn epoch_now() -> (u8, u32) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let since2000 = now.saturating_sub(UNIX_2000);
    let k = (0u8..64).rev().find(|&k| epoch_start(k) <= since2000).unwrap_or(0);
    (k, (since2000 - epoch_start(k)) as u32)
}

/// Frames per second for a payload data rate (bits/s) and frame length (header included): must
/// come out whole, since frames never cross a second.
pub fn fps_for_rate(frame_len: usize, header: usize, rate_bps: u64) -> Result<u32, String> {
    let payload_bits = 8 * (frame_len.saturating_sub(header)) as u64;
    if payload_bits == 0 || rate_bps == 0 || rate_bps % payload_bits != 0 {
        return Err(format!(
            "data rate {rate_bps} b/s is not a whole number of {}-byte payloads per second: choose a frame length whose payload divides the rate",
            payload_bits / 8
        ));
    }
    u32::try_from(rate_bps / payload_bits).map_err(|_| "frame rate too high".to_string())
}

/// Settings of a VDIF stream. `Default` is a 2048 Mb/s, 2-bit, 4-channel, one-thread stream of
/// 8032-byte frames with a counter payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VdifConfig {
    /// Frame length in bytes, header included: a multiple of 8, at least 40 (32-byte header +
    /// payload), at most 65504 - 8 so a VTP datagram still fits UDP.
    pub frame_len: usize,
    /// Number of threads (1..=1024); stream `i` is thread id `i`, and check refuses ids beyond.
    pub threads: u32,
    /// Station id (two ASCII characters, first in the high byte, or a 16-bit number).
    pub station: u16,
    /// Bits per sample (1..=32).
    pub bits: u8,
    /// log2 of the number of channels (0..=31).
    pub log2_chans: u8,
    /// Complex samples.
    pub complex: bool,
    /// Frames per second per thread (1..2^24); the data rate is `fps * 8 * (frame_len - 32)`.
    pub fps: u32,
    /// Reference epoch (half-years since 2000); `None`: the current one.
    pub epoch: Option<u8>,
    /// Seconds since the reference epoch of sequence number 0; `None`: now.
    pub start: Option<u32>,
    /// Payload fill.
    pub fill: Fill,
}

impl Default for VdifConfig {
    fn default() -> Self {
        VdifConfig {
            frame_len: 8032,
            threads: 1,
            station: u16::from_be_bytes(*b"WS"),
            bits: 2,
            log2_chans: 2,
            complex: false,
            fps: 32_000,
            epoch: None,
            start: None,
            fill: Fill::Counter,
        }
    }
}

/// VDIF frames, one per datagram (see the module doc for numbering).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vdif {
    cfg: VdifConfig,
    epoch: u8,
    start: u32,
    /// `epoch_start(epoch) + start`: the second of sequence number 0, since 2000.
    base: u64,
    /// The header fields every frame of this stream shares (version 0, EDV 0, length,
    /// channels, sample format, station); each frame sets its time and thread on a copy.
    template: [u8; HEADER_LEN],
}

impl Vdif {
    /// A VDIF format; epoch and start second come from the clock when not given.
    pub fn new(cfg: VdifConfig) -> Result<Self, String> {
        let l = cfg.frame_len;
        if l % 8 != 0 || !(40..=65496).contains(&l) {
            return Err(format!(
                "VDIF frame length {l} must be a multiple of 8 between 40 and 65496 bytes (header included)"
            ));
        }
        if !(1..=1024).contains(&cfg.threads) {
            return Err(format!("VDIF threads {} must be 1 to 1024", cfg.threads));
        }
        if !(1..=32).contains(&cfg.bits) {
            return Err(format!("VDIF bits per sample {} must be 1 to 32", cfg.bits));
        }
        if cfg.log2_chans > 31 {
            return Err(format!("VDIF log2(channels) {} must be at most 31", cfg.log2_chans));
        }
        if cfg.fps == 0 || cfg.fps >= 1 << 24 {
            return Err(format!("VDIF frames per second {} must be 1 to 16777215", cfg.fps));
        }
        if cfg.epoch.is_some_and(|e| e > 63) {
            return Err("VDIF reference epoch must be 0 to 63 (half-years since 2000)".into());
        }
        if cfg.start.is_some_and(|s| s >= 1 << 30) {
            return Err("VDIF start second must be below 2^30".into());
        }
        // Unless told otherwise, number frames from 2000-01-01 (epoch 0, second 0): every sender
        // and receiver then agrees on the numbers whenever it was started, and a sender starts at
        // the real time through `seq_at`.
        let epoch = cfg.epoch.unwrap_or(0);
        let start = cfg.start.unwrap_or(0);
        let mut template = [0u8; HEADER_LEN];
        let mut h = Header::new_unchecked(&mut template[..]);
        h.set_frame_len(l);
        h.set_log2_chans(cfg.log2_chans);
        h.set_complex(cfg.complex);
        h.set_bits_per_sample(cfg.bits);
        h.set_station(cfg.station);
        Ok(Vdif {
            cfg: VdifConfig { epoch: Some(epoch), start: Some(start), ..cfg },
            epoch,
            start,
            base: epoch_start(epoch) + u64::from(start),
            template,
        })
    }

    /// Sequence number of the first frame at or after `unix_ns`.
    pub fn seq_at_time(&self, unix_ns: u64) -> Option<u64> {
        let secs = (unix_ns / 1_000_000_000).checked_sub(UNIX_2000)?;
        let fps = u64::from(self.cfg.fps);
        let frame = ((unix_ns % 1_000_000_000) as u128 * fps as u128).div_ceil(1_000_000_000) as u64;
        Some(secs.wrapping_sub(self.base).wrapping_mul(fps).wrapping_add(frame))
    }

    /// The settings, with epoch and start resolved.
    pub fn config(&self) -> &VdifConfig {
        &self.cfg
    }

    /// Payload bytes per frame.
    pub fn payload_len(&self) -> usize {
        self.cfg.frame_len - 32
    }

    fn station_str(&self) -> String {
        let [a, b] = self.cfg.station.to_be_bytes();
        let alnum = |c: u8| c.is_ascii_alphanumeric();
        if alnum(a) && alnum(b) && !(a.is_ascii_digit() && b.is_ascii_digit()) {
            format!("{}{}", a as char, b as char)
        } else {
            self.cfg.station.to_string()
        }
    }

    /// The spec keys after the name (shared with VTP).
    pub(crate) fn spec_keys(&self) -> String {
        let c = &self.cfg;
        format!(
            "frame={},threads={},station={},bits={},chans={},complex={},fps={},epoch={},start={},fill={}",
            c.frame_len,
            c.threads,
            self.station_str(),
            c.bits,
            1u64 << c.log2_chans,
            u8::from(c.complex),
            c.fps,
            self.epoch,
            self.start,
            c.fill
        )
    }

    /// Write frame `seq` of thread `stream` into `buf` (at least `frame_len` bytes).
    pub(crate) fn emit_frame(&self, stream: u32, seq: u64, buf: &mut [u8]) {
        let fps = i64::from(self.cfg.fps);
        let s = seq as i64;
        let (t, frame) = (s.div_euclid(fps), s.rem_euclid(fps) as u32);
        let mut epoch = self.epoch;
        let mut secs = i64::from(self.start).wrapping_add(t);
        if !(0..1 << 30).contains(&secs) {
            // Before the reference epoch (or past its 2^30 seconds): write the frame against the
            // epoch that holds its instant, as a writer starting then would have.
            let abs = (self.base as i64).wrapping_add(t);
            if let Some(k) = (0u8..64).rev().find(|&k| epoch_start(k) as i64 <= abs) {
                epoch = k;
                secs = abs - epoch_start(k) as i64;
            }
        }
        let Some((hdr, payload)) = buf.get_mut(..self.cfg.frame_len).map(|b| b.split_at_mut(HEADER_LEN)) else {
            return; // a caller bug; never panic on the send path
        };
        hdr.copy_from_slice(&self.template);
        let mut h = Header::new_unchecked(hdr);
        h.set_seconds(secs as u32);
        h.set_epoch(epoch);
        h.set_frame(frame);
        h.set_thread(stream);
        // What the header holds (the setters keep each field's width): `check` reads these.
        let (secs, thread) = (h.seconds(), h.thread());
        // The number `check` will read back: `seq` itself unless the time does not fit the
        // header (beyond 2^30 seconds of the last epoch); the fill follows what is readable.
        let t = (epoch_start(epoch) + u64::from(secs)).wrapping_sub(self.base);
        let seq = t.wrapping_mul(u64::from(self.cfg.fps)).wrapping_add(u64::from(frame));
        let p = payload.len() as u64;
        let at = At { stream: thread, seq, offset: seq.wrapping_mul(p), offset_in_second: u64::from(frame) * p };
        self.cfg.fill.emit(payload, &at);
    }

    /// The UTC time of the frame in `buf` (nanoseconds since the Unix epoch): its reference
    /// epoch and second, plus its frame number at this stream's frame rate. `None` for a buffer
    /// too short for a header or a frame number beyond the rate.
    pub fn frame_time(&self, buf: &[u8]) -> Option<u64> {
        let h = Header::new_checked(buf).ok()?;
        let (fps, frame) = (u64::from(self.cfg.fps), u64::from(h.frame()));
        if frame >= fps {
            return None;
        }
        let secs = UNIX_2000 + epoch_start(h.epoch()) + u64::from(h.seconds());
        Some(secs * 1_000_000_000 + frame * 1_000_000_000 / fps)
    }

    /// Check one frame (the whole of `buf`).
    pub(crate) fn check_frame(&self, buf: &[u8]) -> Result<PacketInfo, Invalid> {
        if buf.len() != self.cfg.frame_len {
            return Err(Invalid::Length);
        }
        let h = Header::new_checked(buf).map_err(|_| Invalid::Length)?;
        let (c, frame, thread) = (&self.cfg, h.frame(), h.thread());
        if h.frame_len() != buf.len()
            || h.version() > 1
            || h.log2_chans() != c.log2_chans
            || h.complex() != c.complex
            || h.bits_per_sample() != c.bits
            || h.station() != c.station
            || h.unassigned() != 0
            || frame >= c.fps
            || thread >= c.threads
        {
            return Err(Invalid::Header);
        }
        let t = (epoch_start(h.epoch()) + u64::from(h.seconds())).wrapping_sub(self.base);
        let seq = t.wrapping_mul(u64::from(c.fps)).wrapping_add(u64::from(frame));
        if c.fill != Fill::Any && !h.invalid() {
            let payload = h.payload();
            let p = payload.len() as u64;
            let at = At { stream: thread, seq, offset: seq.wrapping_mul(p), offset_in_second: u64::from(frame) * p };
            if !c.fill.check(payload, &at) {
                return Err(Invalid::Payload);
            }
        }
        Ok(PacketInfo::new(thread, seq))
    }

    /// Why `check_frame` refused `buf`: the first field that differs, in the order it checks
    /// them (`None` when it accepts the frame). A diagnostic, run once per capture, never on the
    /// per-datagram path, as every format's `explain` is.
    pub(crate) fn explain_frame(&self, buf: &[u8]) -> Option<Mismatch> {
        use Shown::{Num, Station};
        let kind = self.check_frame(buf).err()?;
        if buf.len() != self.cfg.frame_len {
            let (got, want) = (Num(buf.len() as u64), Num(self.cfg.frame_len as u64));
            return Some(Mismatch::field(Invalid::Length, "frame length (bytes)", got, "frame", want));
        }
        let Ok(h) = Header::new_checked(buf) else {
            return Some(Mismatch::length(buf.len(), Some(self.cfg.frame_len)));
        };
        let c = &self.cfg;
        let bad = |field, got, key, want| Some(Mismatch::field(Invalid::Header, field, got, key, want));
        if h.frame_len() != buf.len() {
            return bad("frame length in the header (bytes)", Num(h.frame_len() as u64), "", Num(buf.len() as u64));
        }
        if h.version() > 1 {
            return bad("VDIF version", Num(u64::from(h.version())), "", Shown::Word("0 or 1"));
        }
        if h.log2_chans() != c.log2_chans {
            return bad("channels", Num(1 << h.log2_chans()), "chans", Num(1 << c.log2_chans));
        }
        if h.complex() != c.complex {
            return bad("complex samples", Num(u64::from(h.complex())), "complex", Num(u64::from(c.complex)));
        }
        if h.bits_per_sample() != c.bits {
            return bad("bits per sample", Num(u64::from(h.bits_per_sample())), "bits", Num(u64::from(c.bits)));
        }
        if h.station() != c.station {
            return bad("station", Station(h.station()), "station", Station(c.station));
        }
        if h.unassigned() != 0 {
            return bad("word 1's unassigned bits", Num(u64::from(h.unassigned())), "", Num(0));
        }
        if h.frame() >= c.fps {
            return bad("frame number within the second", Num(u64::from(h.frame())), "fps", Num(u64::from(c.fps)));
        }
        if h.thread() >= c.threads {
            return bad("thread id", Num(u64::from(h.thread())), "threads", Num(u64::from(c.threads)));
        }
        Some(Mismatch::of(kind))
    }
}

impl Format for Vdif {
    fn name(&self) -> String {
        format!("vdif/{}", self.cfg.frame_len)
    }
    fn packet_len(&self) -> usize {
        self.cfg.frame_len
    }
    fn spec(&self) -> String {
        format!("vdif,{}", self.spec_keys())
    }
    fn stream_count(&self) -> u32 {
        self.cfg.threads
    }
    fn data_clock(&self) -> Option<super::DataClock> {
        Some(super::DataClock::Utc)
    }
    fn data_time(&self, buf: &[u8], _near: u64) -> Option<u64> {
        self.frame_time(buf)
    }
    fn seq_at(&self, unix_ns: u64) -> Option<u64> {
        self.seq_at_time(unix_ns)
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    fn emit(&self, stream: u32, seq: u64, buf: &mut [u8]) {
        self.emit_frame(stream, seq, buf)
    }
    fn check(&self, buf: &[u8]) -> Result<PacketInfo, Invalid> {
        self.check_frame(buf)
    }
    fn explain(&self, buf: &[u8]) -> Option<Mismatch> {
        self.explain_frame(buf)
    }
}

/// VTP: an 8-byte little-endian packet sequence number (PSN), then one VDIF frame.
///
/// Sequence number = PSN (a VTP sender counts datagrams, whatever their thread); stream = the
/// frame's VDIF thread id. A sender that interleaves several threads under one PSN counter
/// therefore shows gaps on each thread: check such traffic with `threads=1` per sender or as
/// plain VDIF. With `psn32`, only the low 32 bits are read (some hardware fills only those) and
/// the ledger wraps at 2^32. The embedded frame is checked like [`Vdif`] (header and fill) but
/// its own time is not compared with the PSN, which may start anywhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vtp {
    vdif: Vdif,
    psn32: bool,
}

impl Vtp {
    /// VTP around the frames of `vdif`; `psn32`: only 32 bits of PSN are meaningful.
    pub fn new(vdif: Vdif, psn32: bool) -> Self {
        Vtp { vdif, psn32 }
    }

    /// The VDIF format of the frames inside.
    pub fn vdif(&self) -> &Vdif {
        &self.vdif
    }
}

impl Format for Vtp {
    fn name(&self) -> String {
        format!("vtp{}/{}", if self.psn32 { "32" } else { "" }, self.vdif.cfg.frame_len)
    }
    fn packet_len(&self) -> usize {
        8 + self.vdif.cfg.frame_len
    }
    fn seq_bits(&self) -> u32 {
        if self.psn32 {
            32
        } else {
            64
        }
    }
    fn spec(&self) -> String {
        format!("vtp,psn={},{}", if self.psn32 { 32 } else { 64 }, self.vdif.spec_keys())
    }
    fn stream_count(&self) -> u32 {
        self.vdif.cfg.threads
    }
    fn data_clock(&self) -> Option<super::DataClock> {
        Some(super::DataClock::Utc)
    }
    fn data_time(&self, buf: &[u8], _near: u64) -> Option<u64> {
        self.vdif.frame_time(Psn::new_checked(buf).ok()?.frame())
    }
    fn seq_at(&self, unix_ns: u64) -> Option<u64> {
        self.vdif.seq_at_time(unix_ns)
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    fn emit(&self, stream: u32, seq: u64, buf: &mut [u8]) {
        let psn = if self.psn32 { seq & 0xFFFF_FFFF } else { seq };
        let Ok(mut p) = Psn::new_checked(buf) else {
            return; // a caller bug; never panic on the send path
        };
        p.set_psn(psn);
        self.vdif.emit_frame(stream, seq, p.frame_mut());
    }
    fn check(&self, buf: &[u8]) -> Result<PacketInfo, Invalid> {
        if buf.len() != self.packet_len() {
            return Err(Invalid::Length);
        }
        let p = Psn::new_checked(buf).map_err(|_| Invalid::Length)?;
        let mut psn = p.psn();
        if self.psn32 {
            psn &= 0xFFFF_FFFF;
        }
        let info = self.vdif.check_frame(p.frame())?;
        Ok(PacketInfo::new(info.stream, psn))
    }
    fn explain(&self, buf: &[u8]) -> Option<Mismatch> {
        if buf.len() != self.packet_len() {
            return Some(Mismatch::length(buf.len(), Some(self.packet_len())));
        }
        self.vdif.explain_frame(Psn::new_checked(buf).ok()?.frame())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> VdifConfig {
        VdifConfig { frame_len: 1032, fps: 1000, epoch: Some(40), start: Some(1000), ..VdifConfig::default() }
    }

    fn words(b: &[u8]) -> Vec<u32> {
        b[..32].chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    #[test]
    fn explain_names_the_first_field_that_differs() {
        // An instrument's stream (baseband's test: 2 threads, 1 channel, station Xx, 1000 fps)
        // against `--format vdif` with its defaults (4 channels, station WS, one thread).
        let theirs = Vdif::new(VdifConfig {
            threads: 2,
            log2_chans: 0,
            station: u16::from_be_bytes(*b"Xx"),
            fps: 1000,
            ..VdifConfig::default()
        })
        .unwrap();
        let mut f = vec![0u8; 8032];
        theirs.emit(1, 5, &mut f);
        let ours = Vdif::new(VdifConfig::default()).unwrap();
        let m = ours.explain(&f).unwrap();
        assert_eq!(m.kind, Invalid::Header);
        assert_eq!(m.to_string(), "channels: the stream has 1, --format has chans=4");
        let chans = Vdif::new(VdifConfig { log2_chans: 0, ..VdifConfig::default() }).unwrap();
        assert_eq!(chans.explain(&f).unwrap().to_string(), "station: the stream has Xx, --format has station=WS");
        let station =
            Vdif::new(VdifConfig { log2_chans: 0, station: theirs.cfg.station, ..VdifConfig::default() }).unwrap();
        assert_eq!(station.explain(&f).unwrap().to_string(), "thread id: the stream has 1, --format has threads=1");
        assert_eq!(theirs.explain(&f), None, "a frame the format accepts has nothing to explain");
        assert_eq!(
            ours.explain(&f[..1032]).unwrap().to_string(),
            "frame length (bytes): the stream has 1032, --format has frame=8032"
        );
        // VTP explains the frame inside its PSN.
        let vtp = Vtp::new(ours.clone(), false);
        let mut d = vec![0u8; 8 + 8032];
        Vtp::new(theirs, false).emit(1, 5, &mut d);
        assert_eq!(vtp.explain(&d).unwrap().to_string(), "channels: the stream has 1, --format has chans=4");
        // The check and its explanation agree on every refusal.
        assert_eq!(ours.check(&f), Err(Invalid::Header));
    }

    #[test]
    fn epochs_from_the_calendar() {
        assert_eq!(epoch_start(0), 0);
        assert_eq!(epoch_start(1), 182 * 86400); // 2000 is a leap year: Jan..Jun = 182 days
        assert_eq!(epoch_start(2), 366 * 86400);
        // 2024-01-01 is 8766 days after 2000-01-01.
        assert_eq!(epoch_start(48), 8766 * 86400);
        let (k, s) = epoch_now();
        assert!(k >= 48, "clock before 2024?");
        assert!(u64::from(s) < 185 * 86400);
    }

    #[test]
    fn header_view_round_trips_every_field() {
        let mut b = [0u8; 64];
        let mut h = Header::new_checked(&mut b[..]).unwrap();
        h.set_invalid(true);
        h.set_seconds((1 << 30) - 1);
        h.set_epoch(63);
        h.set_frame((1 << 24) - 1);
        h.set_version(1);
        h.set_log2_chans(31);
        h.set_frame_len(64);
        h.set_complex(true);
        h.set_bits_per_sample(32);
        h.set_thread(1023);
        h.set_station(0xBEEF);
        h.set_edv(0xAB);
        let h = Header::new_checked(&b[..]).unwrap();
        assert!(h.invalid() && !h.legacy() && h.complex());
        assert_eq!((h.seconds(), h.epoch(), h.frame(), h.unassigned()), ((1 << 30) - 1, 63, (1 << 24) - 1, 0));
        assert_eq!((h.version(), h.log2_chans(), h.frame_len(), h.bits_per_sample()), (1, 31, 64, 32));
        assert_eq!((h.thread(), h.station(), h.edv(), h.header_len()), (1023, 0xBEEF, 0xAB, 32));
        assert_eq!(h.payload().len(), 32);
        // Fields do not spill into each other: the formats.md bit positions, word by word.
        assert_eq!(words(&b)[..5], [0xBFFF_FFFF, 0x3FFF_FFFF, 0x3F00_0008, 0xFFFF_BEEF, 0xAB00_0000]);
        // A legacy header needs 16 bytes, a full one 32.
        b[3] |= 0x40;
        assert_eq!(Header::new_checked(&b[..16]).unwrap().payload().len(), 0);
        assert_eq!(Header::new_checked(&b[..15]).unwrap_err(), Truncated { need: 16, have: 15 });
        b[3] &= !0x40;
        assert_eq!(Header::new_checked(&b[..31]).unwrap_err(), Truncated { need: 32, have: 31 });
    }

    #[test]
    fn header_fields_as_formats_md() {
        let v = Vdif::new(VdifConfig { threads: 8, complex: true, bits: 4, log2_chans: 3, ..cfg() }).unwrap();
        let mut b = vec![0u8; 1032];
        v.emit(5, 2 * 1000 + 17, &mut b);
        let w = words(&b);
        assert_eq!(w[0], 1002, "seconds = start + 2");
        assert_eq!(w[1], (40 << 24) | 17, "epoch and frame number");
        assert_eq!(w[2], (3 << 24) | 129, "version 0, log2 chans, length in 8-byte units");
        assert_eq!(w[3], (1 << 31) | (3 << 26) | (5 << 16) | u32::from(u16::from_be_bytes(*b"WS")));
        assert_eq!(&w[4..], &[0, 0, 0, 0], "EDV 0");
        assert_eq!(v.check(&b), Ok(PacketInfo::new(5, 2017)));
    }

    #[test]
    fn round_trips_across_seconds_and_threads() {
        for fill in [Fill::Any, Fill::Zeros, Fill::Counter, Fill::Tvg, Fill::Random(9)] {
            let v = Vdif::new(VdifConfig { threads: 4, fill, ..cfg() }).unwrap();
            let mut b = vec![0u8; 1032];
            for seq in [0u64, 1, 998, 999, 1000, 1001, 123_456_789] {
                for thread in 0..4 {
                    v.emit(thread, seq, &mut b);
                    assert_eq!(v.check(&b), Ok(PacketInfo::new(thread, seq)), "{fill} seq {seq}");
                }
            }
            // Frames before the start second are numbered backwards (modulo 2^64).
            // Before the reference epoch began: written against the previous epoch.
            let before = (-1001 * 1000i64) as u64;
            v.emit(0, before, &mut b);
            assert_eq!(words(&b)[1] >> 24, 39);
            assert_eq!(u64::from(words(&b)[0]), epoch_start(40) - epoch_start(39) - 1);
            assert_eq!(v.check(&b).unwrap().seq, before);
            v.emit(0, (-1i64) as u64, &mut b);
            assert_eq!(words(&b)[0], 999);
            assert_eq!(words(&b)[1] & 0xFFFFFF, 999);
            assert_eq!(v.check(&b).unwrap().seq, u64::MAX);
        }
    }

    #[test]
    fn numbering_survives_an_epoch_change() {
        // The same instant written against the next epoch gets the same number.
        let v = Vdif::new(cfg()).unwrap();
        let mut b = vec![0u8; 1032];
        v.emit(0, 5000, &mut b);
        let later = epoch_start(41) + 10 - v.base; // seconds after start
        let seq = later * 1000 + 3;
        v.emit(0, seq, &mut b);
        let mut w = words(&b);
        assert_eq!(w[1] >> 24, 40);
        w[0] = 10;
        w[1] = (41 << 24) | 3;
        b[..4].copy_from_slice(&w[0].to_le_bytes());
        b[4..8].copy_from_slice(&w[1].to_le_bytes());
        assert_eq!(v.check(&b).unwrap().seq, seq);
    }

    #[test]
    fn malformed_frames() {
        let v = Vdif::new(VdifConfig { threads: 2, ..cfg() }).unwrap();
        let mut good = vec![0u8; 1032];
        v.emit(1, 4321, &mut good);
        for n in 0..1032 {
            assert_eq!(v.check(&good[..n]), Err(Invalid::Length), "truncated to {n}");
        }
        let mut longer = good.clone();
        longer.extend_from_slice(&[0; 8]);
        assert_eq!(v.check(&longer), Err(Invalid::Length));
        let set = |word: usize, f: &dyn Fn(u32) -> u32| {
            let mut b = good.clone();
            let w = u32::from_le_bytes(b[4 * word..4 * word + 4].try_into().unwrap());
            b[4 * word..4 * word + 4].copy_from_slice(&f(w).to_le_bytes());
            v.check(&b)
        };
        assert_eq!(set(2, &|w| w + 1), Err(Invalid::Header), "length field");
        assert_eq!(set(2, &|w| w | 0xFF_FFFF), Err(Invalid::Header), "absurd length field");
        assert_eq!(set(2, &|w| w | (2 << 29)), Err(Invalid::Header), "version 2");
        assert_eq!(set(2, &|w| w | (1 << 29)).unwrap().seq, 4321, "version 1 accepted");
        assert_eq!(set(1, &|w| (w & !0xFF_FFFF) | 1000), Err(Invalid::Header), "frame = fps");
        assert_eq!(set(3, &|w| w | (2 << 16)), Err(Invalid::Header), "thread beyond threads");
        assert_eq!(set(3, &|w| w ^ 1), Err(Invalid::Header), "station");
        assert_eq!(set(3, &|w| w ^ (1 << 26)), Err(Invalid::Header), "bits per sample");
        assert_eq!(set(3, &|w| w ^ (1 << 31)), Err(Invalid::Header), "complex");
        assert_eq!(set(2, &|w| w ^ (1 << 24)), Err(Invalid::Header), "channels");
        assert_eq!(set(1, &|w| w | (1 << 30)), Err(Invalid::Header), "unassigned bits");
        assert_eq!(set(10, &|w| w ^ 1), Err(Invalid::Payload), "payload word");
        // The invalid-data flag: accounted for, payload not checked.
        let mut b = good.clone();
        b[3] |= 0x80;
        b[100] ^= 0xFF;
        assert_eq!(v.check(&b), Ok(PacketInfo::new(1, 4321)));
        // A legacy frame (16-byte header) of the same length, payload not checked (fill any).
        let a = Vdif::new(VdifConfig { threads: 2, fill: Fill::Any, ..cfg() }).unwrap();
        let mut l = good.clone();
        l[3] |= 0x40;
        assert_eq!(a.check(&l).unwrap().seq, 4321);
        assert_eq!(v.check(&l), Err(Invalid::Payload));
        assert_eq!(v.check(&[0xFF; 1032]), Err(Invalid::Header));
    }

    #[test]
    fn settings_and_rate() {
        assert_eq!(fps_for_rate(8032, 32, 512_000_000), Ok(8000));
        assert!(fps_for_rate(8032, 32, 512_000_001).unwrap_err().contains("whole number"));
        assert!(Vdif::new(VdifConfig { frame_len: 1030, ..cfg() }).is_err());
        assert!(Vdif::new(VdifConfig { frame_len: 32, ..cfg() }).is_err());
        assert!(Vdif::new(VdifConfig { bits: 0, ..cfg() }).is_err());
        assert!(Vdif::new(VdifConfig { fps: 1 << 24, ..cfg() }).is_err());
        assert!(Vdif::new(VdifConfig { threads: 1025, ..cfg() }).is_err());
        let now = Vdif::new(VdifConfig { epoch: None, start: None, ..cfg() }).unwrap();
        assert_eq!(Some(now.epoch), now.config().epoch);
    }

    #[test]
    fn vtp_psn_and_raw_reader() {
        use crate::spool::Recordable;
        let v = Vdif::new(VdifConfig { threads: 2, ..cfg() }).unwrap();
        for psn32 in [false, true] {
            let t = Vtp::new(v.clone(), psn32);
            let mut b = vec![0u8; t.packet_len()];
            for seq in [0u64, 1, 0xFFFF_FFFF, 0x1_0000_0000, 0x1_0000_0001] {
                t.emit(1, seq, &mut b);
                let want = if psn32 { seq & 0xFFFF_FFFF } else { seq };
                assert_eq!(t.check(&b), Ok(PacketInfo::new(1, want)));
                assert_eq!(&b[..8], &want.to_le_bytes());
                // The raw recording (PSN stripped) reads back as plain VDIF.
                let r = t.raw_reader().unwrap();
                assert_eq!(r.check(&b[t.raw_strip()..]), Ok(PacketInfo::new(1, seq)));
            }
            assert_eq!(t.seq_bits(), if psn32 { 32 } else { 64 });
            assert_eq!(t.check(&b[..100]), Err(Invalid::Length));
            b[8 + 9] ^= 0xFF; // frame number beyond fps
            assert_eq!(t.check(&b), Err(Invalid::Header));
        }
    }
}
