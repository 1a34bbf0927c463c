//! Mark5B frames (formats.md section 3): whole 10016-byte frames per datagram, or Mark5C-style
//! halves of 5008 bytes, each optionally after an 8-byte little-endian packet sequence number
//! (PSN).
//!
//! Sequence numbers:
//! - Frames are numbered by time from a start instant (`mjd`, `sec` = second of day):
//!   `F = (days * 86400 + second of day - start) * fps + frame`, days counted from the start day
//!   through the header's MJD modulo 1000. Frames within 500 days before or after the start get
//!   their exact number (before the start: negative, modulo 2^64); 1000 days after the start the
//!   header's MJD repeats and the numbering starts again (the ledger sees one resync).
//! - Whole frames without PSN: `seq = F`. Halves without PSN: `seq = 2F + half`.
//!   With a PSN: `seq = PSN` (a datagram counter that may start anywhere).
//! - More than 32768 frames per second (Mark5B+ at 4 Gb/s): the 15-bit frame number wraps
//!   within the second, and the fraction-of-second field (0.1 ms units) tells the wraps apart.
//!
//! Halves without a PSN, the honest part: the second half of a frame has no header, so nothing
//! in it says which second it belongs to. With a `counter` fill its words give its exact
//! position, and both halves are numbered `2F + half` on stream 0. With `tvg`, `zeros` or `any`
//! the first halves (headers) are numbered `F` on stream 0, so loss is exact per frame but only
//! seen through first halves; second halves are checked (TVG continuity from the phase of their
//! first word, frame-in-second plausible) and reported on [`UNSEQUENCED`]. A `random` fill is
//! refused for halves: a headerless half could not be checked.
//!
//! Check: length, sync word, CRC, frame number and second of day in range, every BCD digit
//! valid, the T bit consistent with the fill, and the payload fill (TVG restarts each second).

use super::crc::crc16;
use super::fill::{tvg_find_phase, At, Fill, TVG_PERIOD};
use super::stream::UNSEQUENCED;
use super::view::{check_len, Psn, Truncated};
use super::{Format, Invalid, Mismatch, PacketInfo, Shown};

/// Mark5B sync word (bytes `ED DE AD AB` on the wire).
pub const SYNC: u32 = 0xABAD_DEED;
/// Bytes in a Mark5B header.
pub const HEADER_LEN: usize = 16;
/// Bytes in a frame: 16-byte header + 10000-byte payload.
pub const FRAME_LEN: usize = 10016;
/// Bytes in a half frame (Mark5C-style datagram).
pub const HALF_LEN: usize = FRAME_LEN / 2;
const PAYLOAD: u64 = 10000;
/// Payload bytes carried by the first half (after the header).
const FIRST_PAYLOAD: u64 = (HALF_LEN - HEADER_LEN) as u64;
const DAY: i64 = 86_400;
/// 2500^-1 modulo the TVG period, to find a frame from the phase of a second half.
const INV2500: u64 = 31417;

/// Where each header field sits (formats.md section 3): word, lowest bit, width.
mod field {
    use crate::wire::view::Bits;
    pub const SYNC: Bits = Bits::new(0, 0, 32);
    pub const USER: Bits = Bits::new(1, 16, 16);
    pub const TVG: Bits = Bits::new(1, 15, 1);
    pub const FRAME: Bits = Bits::new(1, 0, 15);
    /// MJD modulo 1000, 3 BCD digits.
    pub const MJD: Bits = Bits::new(2, 20, 12);
    /// Second of the day, 5 BCD digits.
    pub const SOD: Bits = Bits::new(2, 0, 20);
    /// Fraction of the second in 0.1 ms, 4 BCD digits.
    pub const FRAC: Bits = Bits::new(3, 16, 16);
    pub const CRC: Bits = Bits::new(3, 0, 16);
    /// All of word 2 (MJD and second of day), as the CRC covers it.
    pub const DATE_TIME: Bits = Bits::new(2, 0, 32);
}

/// Whether `b` starts with the sync word: all a datagram needs to show to be a frame's first
/// half (the rest of its header may be cut short).
pub fn starts_with_sync(b: &[u8]) -> bool {
    b.len() >= 4 && field::SYNC.get(b) == SYNC
}

/// A view of a Mark5B frame header: every read and write of a header field goes through it.
/// The time fields are BCD on the wire; the view converts (`None` for a digit above 9).
#[derive(Clone, Copy, Debug)]
pub struct Header<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// A view without a length check (accessors panic on a buffer shorter than 16 bytes).
    pub fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// A view, refused when the buffer is shorter than the 16-byte header.
    pub fn new_checked(buffer: T) -> Result<Header<T>, Truncated> {
        check_len(buffer.as_ref(), HEADER_LEN)?;
        Ok(Header { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Whether word 0 is the sync word (what tells a first half from a second).
    pub fn sync_ok(&self) -> bool {
        starts_with_sync(self.b())
    }
    /// User-specified data.
    pub fn user(&self) -> u16 {
        field::USER.get(self.b()) as u16
    }
    /// The T bit: data from the test vector generator.
    pub fn tvg(&self) -> bool {
        field::TVG.get(self.b()) != 0
    }
    /// Frame number within the second (15 bits; wraps at 32768).
    pub fn frame(&self) -> u32 {
        field::FRAME.get(self.b())
    }
    /// MJD modulo 1000.
    pub fn mjd(&self) -> Option<u32> {
        from_bcd(field::MJD.get(self.b()), 3)
    }
    /// Second of the day.
    pub fn second_of_day(&self) -> Option<u32> {
        from_bcd(field::SOD.get(self.b()), 5)
    }
    /// Fraction of the second in units of 0.1 ms.
    pub fn fraction(&self) -> Option<u32> {
        from_bcd(field::FRAC.get(self.b()), 4)
    }
    /// The CRC the header carries.
    pub fn crc(&self) -> u16 {
        field::CRC.get(self.b()) as u16
    }
    /// The CRC the header should carry: CRC-16/UMTS over the 32 bits of word 2 then the high
    /// 16 bits of word 3, most significant first.
    pub fn computed_crc(&self) -> u16 {
        let mut c = [0u8; 6];
        c[..4].copy_from_slice(&field::DATE_TIME.get(self.b()).to_be_bytes());
        c[4..].copy_from_slice(&(field::FRAC.get(self.b()) as u16).to_be_bytes());
        crc16(&c)
    }
    /// Whether the carried CRC is right.
    pub fn crc_ok(&self) -> bool {
        self.crc() == self.computed_crc()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    fn b_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Write the sync word.
    pub fn set_sync(&mut self) {
        field::SYNC.set(self.b_mut(), SYNC)
    }
    /// Set the user-specified data.
    pub fn set_user(&mut self, v: u16) {
        field::USER.set(self.b_mut(), u32::from(v))
    }
    /// Set or clear the T bit.
    pub fn set_tvg(&mut self, v: bool) {
        field::TVG.set(self.b_mut(), u32::from(v))
    }
    /// Set the frame number within the second (its low 15 bits).
    pub fn set_frame(&mut self, v: u32) {
        field::FRAME.set(self.b_mut(), v)
    }
    /// Set the MJD modulo 1000 (0..=999).
    pub fn set_mjd(&mut self, v: u32) {
        field::MJD.set(self.b_mut(), bcd(v, 3))
    }
    /// Set the second of the day (0..86400).
    pub fn set_second_of_day(&mut self, v: u32) {
        field::SOD.set(self.b_mut(), bcd(v, 5))
    }
    /// Set the fraction of the second, 0.1 ms units (0..10000).
    pub fn set_fraction(&mut self, v: u32) {
        field::FRAC.set(self.b_mut(), bcd(v, 4))
    }
    /// Write the CRC of the time fields: the last field to set.
    pub fn fill_crc(&mut self) {
        let c = self.computed_crc();
        field::CRC.set(self.b_mut(), u32::from(c))
    }
}

/// Frames per second for a bit rate: rate / 80000 (2048 Mb/s -> 25600).
pub fn fps_for_rate(rate_bps: u64) -> Result<u32, String> {
    if rate_bps == 0 || rate_bps % 80_000 != 0 {
        return Err(format!(
            "Mark5B data rate {rate_bps} b/s must be a multiple of 80000 (frames of 10000 payload bytes)"
        ));
    }
    u32::try_from(rate_bps / 80_000).map_err(|_| "Mark5B rate too high".into())
}

/// Settings of a Mark5B stream. `Default`: 2048 Mb/s whole frames with TVG data (seed 002).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark5bConfig {
    /// Frames per second (1..=131072); rate / 80000.
    pub fps: u32,
    /// Half frames per datagram (Mark5C style) instead of whole frames.
    pub halves: bool,
    /// An 8-byte little-endian PSN before each datagram.
    pub psn: bool,
    /// User-specified data (word 1 bits 16..31), written by the sender, not checked.
    pub user: u16,
    /// Payload fill; `tvg` sets the T bit.
    pub fill: Fill,
    /// MJD of the start day (sequence number 0); `None`: today.
    pub mjd: Option<u32>,
    /// Second of day of sequence number 0; `None`: now (or 0 when `mjd` is given).
    pub sec: Option<u32>,
}

impl Default for Mark5bConfig {
    fn default() -> Self {
        Mark5bConfig { fps: 25_600, halves: false, psn: false, user: 0, fill: Fill::Tvg, mjd: None, sec: None }
    }
}

/// Mark5B over UDP (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark5b {
    cfg: Mark5bConfig,
    mjd: u32,
    sec: u32,
}

fn bcd(v: u32, digits: u32) -> u32 {
    let mut out = 0;
    let mut v = v;
    for i in 0..digits {
        out |= (v % 10) << (4 * i);
        v /= 10;
    }
    out
}

fn from_bcd(x: u32, digits: u32) -> Option<u32> {
    let mut v = 0;
    for i in (0..digits).rev() {
        let d = (x >> (4 * i)) & 0xF;
        if d > 9 {
            return None;
        }
        v = v * 10 + d;
    }
    Some(v)
}

impl Mark5b {
    /// A Mark5B format; the start instant comes from the clock when not given.
    pub fn new(cfg: Mark5bConfig) -> Result<Self, String> {
        if cfg.fps == 0 || cfg.fps > 131_072 {
            return Err(format!("Mark5B frames per second {} must be 1 to 131072 (rate / 80000)", cfg.fps));
        }
        if cfg.halves && matches!(cfg.fill, Fill::Random(_)) {
            return Err("Mark5B halves cannot carry a random fill (a half without header could not be checked): use tvg, counter or zeros".into());
        }
        if cfg.sec.is_some_and(|s| s >= 86_400) {
            return Err("Mark5B start second of day must be below 86400".into());
        }
        // Unless told otherwise, number frames from midnight of an MJD = 500 (mod 1000): the
        // header's MJD % 1000 then maps onto -500..499 days monotonically, so every sender and
        // receiver agrees on the numbers whenever it was started (until the 1000-day wrap, one
        // resync), and a sender starts at the real time through `seq_at`.
        let mjd = cfg.mjd.unwrap_or(500);
        let sec = cfg.sec.unwrap_or(0);
        if cfg.fill == Fill::Tvg {
            super::fill::tvg_table();
        }
        Ok(Mark5b { cfg: Mark5bConfig { mjd: Some(mjd), sec: Some(sec), ..cfg }, mjd, sec })
    }

    /// The settings, with the start resolved.
    pub fn config(&self) -> &Mark5bConfig {
        &self.cfg
    }

    fn prefix(&self) -> usize {
        if self.cfg.psn {
            8
        } else {
            0
        }
    }

    fn body_len(&self) -> usize {
        if self.cfg.halves {
            HALF_LEN
        } else {
            FRAME_LEN
        }
    }

    /// Frame sequence number and half index of datagram `seq`.
    fn split_seq(&self, seq: u64) -> (i64, usize) {
        let s = seq as i64;
        if self.cfg.halves {
            (s.div_euclid(2), s.rem_euclid(2) as usize)
        } else {
            (s, 0)
        }
    }

    fn at(&self, key: u64, frame_seq: i64, f: u32, skip: u64) -> At {
        At {
            stream: 0,
            seq: key,
            offset: (frame_seq as u64).wrapping_mul(PAYLOAD).wrapping_add(skip),
            offset_in_second: u64::from(f) * PAYLOAD + skip,
        }
    }

    /// The 16-byte header of frame `frame_seq` (counted from the start instant).
    pub fn header(&self, frame_seq: i64) -> [u8; HEADER_LEN] {
        let fps = i64::from(self.cfg.fps);
        let (t, f) = (frame_seq.div_euclid(fps), frame_seq.rem_euclid(fps) as u32);
        let abs = i64::from(self.sec) + t;
        let day = i64::from(self.mjd) + abs.div_euclid(DAY);
        let sod = abs.rem_euclid(DAY) as u32;
        let frac = (u64::from(f) * 10_000 / u64::from(self.cfg.fps)) as u32;
        let mut out = [0u8; HEADER_LEN];
        let mut h = Header::new_unchecked(&mut out[..]);
        h.set_sync();
        h.set_user(self.cfg.user);
        h.set_tvg(self.cfg.fill == Fill::Tvg);
        h.set_frame(f);
        h.set_mjd(day.rem_euclid(1000) as u32);
        h.set_second_of_day(sod);
        h.set_fraction(frac);
        h.fill_crc();
        out
    }

    /// Decode and check a header: (frame sequence number, frame within the second).
    pub fn parse_header(&self, h: &[u8]) -> Result<(i64, u32), Invalid> {
        let h = Header::new_checked(h).map_err(|_| Invalid::Length)?;
        if !h.sync_ok() || !h.crc_ok() {
            return Err(Invalid::Header);
        }
        let t_bit = h.tvg();
        let t_ok = match self.cfg.fill {
            Fill::Any => true,
            Fill::Tvg => t_bit,
            _ => !t_bit,
        };
        let (Some(mjd3), Some(sod), Some(frac)) = (h.mjd(), h.second_of_day(), h.fraction()) else {
            return Err(Invalid::Header);
        };
        let fps = self.cfg.fps;
        let field = h.frame();
        if !t_ok || sod >= 86_400 || field >= fps {
            return Err(Invalid::Header);
        }
        // Beyond 32768 frames/s the field wraps: the fraction of the second tells which wrap.
        let f = if fps <= 32_768 {
            field
        } else {
            (0..=(fps - 1) / 32_768)
                .map(|k| field + 32_768 * k)
                .find(|&f| f < fps && (i64::from(frac) - (u64::from(f) * 10_000 / u64::from(fps)) as i64).abs() <= 1)
                .ok_or(Invalid::Header)?
        };
        let day_rel = (i64::from(mjd3) + 1000 - i64::from(self.mjd % 1000)) % 1000;
        let mut rel = day_rel * DAY + i64::from(sod) - i64::from(self.sec);
        if rel >= 500 * DAY {
            rel -= 1000 * DAY;
        }
        Ok((rel * i64::from(fps) + i64::from(f), f))
    }

    /// The same stream as whole frames without a PSN: the instrument's own frame format, in
    /// which halves and PSN datagrams are recorded.
    pub fn whole_frames(&self) -> Mark5b {
        Mark5b { cfg: Mark5bConfig { halves: false, psn: false, ..self.cfg }, ..self.clone() }
    }

    /// Which half of its frame a datagram of a halves stream carries (0 first, 1 second), from
    /// its own bytes: a first half starts with the sync word (after any PSN), a second half has
    /// no header. `None` for whole-frame streams, or a datagram too short to tell.
    pub fn half_index(&self, datagram: &[u8]) -> Option<u64> {
        let body = datagram.get(self.prefix()..self.prefix() + 4)?;
        self.cfg.halves.then(|| u64::from(!starts_with_sync(body)))
    }

    /// Check the half without header (payload bytes 4992.. of a frame): the frame sequence number
    /// when the fill tells it (counter), `None` when the half is valid but cannot be numbered.
    fn check_second_half(&self, body: &[u8], key: u64) -> Result<Option<i64>, Invalid> {
        match self.cfg.fill {
            Fill::Any => Ok(None),
            Fill::Zeros => Fill::Zeros.check(body, &self.at(key, 0, 0, 0)).then_some(None).ok_or(Invalid::Payload),
            Fill::Counter => {
                let w0 = u64::from_be_bytes(body[..8].try_into().map_err(|_| Invalid::Length)?);
                let first = FIRST_PAYLOAD / 8;
                if w0 < first || (w0 - first) % (PAYLOAD / 8) != 0 {
                    return Err(Invalid::Payload);
                }
                let frame_seq = ((w0 - first) / (PAYLOAD / 8)) as i64;
                let at = At { stream: 0, seq: key, offset: w0 * 8, offset_in_second: 0 };
                Fill::Counter.check(body, &at).then_some(Some(frame_seq)).ok_or(Invalid::Payload)
            }
            Fill::Tvg => {
                let p = tvg_find_phase(body).ok_or(Invalid::Payload)? as u64;
                let period = TVG_PERIOD as u64;
                let f = (p + period - FIRST_PAYLOAD / 4 % period) % period * INV2500 % period;
                if self.cfg.fps < TVG_PERIOD as u32 && f >= u64::from(self.cfg.fps) {
                    return Err(Invalid::Payload);
                }
                Ok(None)
            }
            Fill::Random(_) => Err(Invalid::Payload), // refused by new()
        }
    }
}

impl Format for Mark5b {
    fn name(&self) -> String {
        let mode = if self.cfg.halves { "halves" } else { "frames" };
        format!("mark5b/{mode}{}", if self.cfg.psn { "+psn" } else { "" })
    }

    fn packet_len(&self) -> usize {
        self.prefix() + self.body_len()
    }

    fn spec(&self) -> String {
        let c = &self.cfg;
        format!(
            "mark5b,fps={},halves={},psn={},user={},fill={},mjd={},sec={}",
            c.fps,
            u8::from(c.halves),
            u8::from(c.psn),
            c.user,
            c.fill,
            self.mjd,
            self.sec
        )
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn checked_range(&self, first: u64, last: u64) -> (u64, u64) {
        if !self.cfg.halves || self.cfg.psn || self.cfg.fill == Fill::Counter {
            return (first, last);
        }
        // Sender number 2f is frame f's header half, 2f+1 its second half (see split_seq).
        let (f, l) = (first as i64, last as i64);
        ((f.div_euclid(2) + f.rem_euclid(2)) as u64, l.div_euclid(2) as u64)
    }

    fn data_clock(&self) -> Option<super::DataClock> {
        Some(super::DataClock::Utc)
    }
    fn data_time(&self, buf: &[u8], near_unix_ns: u64) -> Option<u64> {
        // Whole frames in a raw file, or a datagram with its prefix: the header follows it.
        let body = if buf.len() == self.packet_len() { buf.get(self.prefix()..)? } else { buf };
        let h = Header::new_checked(body).ok()?;
        if !h.sync_ok() {
            return None; // a second half: no header
        }
        let (mjd, sod, frame) = (i64::from(h.mjd()?), i64::from(h.second_of_day()?), u64::from(h.frame()));
        let fps = u64::from(self.cfg.fps);
        if sod >= DAY || frame >= fps {
            return None;
        }
        // The full MJD nearest the reference time with this MJD modulo 1000.
        let near_mjd = crate::calendar::MJD_UNIX_EPOCH + (near_unix_ns / 1_000_000_000) as i64 / DAY;
        let mut full = near_mjd - near_mjd.rem_euclid(1000) + mjd;
        if full - near_mjd > 500 {
            full -= 1000;
        } else if near_mjd - full > 500 {
            full += 1000;
        }
        let secs = (full - crate::calendar::MJD_UNIX_EPOCH) * DAY + sod;
        u64::try_from(secs).ok().map(|s| s * 1_000_000_000 + frame * 1_000_000_000 / fps)
    }
    fn seq_at(&self, unix_ns: u64) -> Option<u64> {
        let s = (unix_ns / 1_000_000_000) as i64;
        let fps = i64::from(self.cfg.fps);
        let mjd = crate::calendar::MJD_UNIX_EPOCH + s.div_euclid(DAY);
        let sod = s.rem_euclid(DAY);
        let frame = ((unix_ns % 1_000_000_000) as u128 * fps as u128).div_ceil(1_000_000_000) as i64;
        let mut days = (mjd - i64::from(self.mjd)).rem_euclid(1000);
        if days >= 500 {
            days -= 1000;
        }
        let f = ((days * DAY + sod - i64::from(self.sec)) * fps).wrapping_add(frame);
        Some(if self.cfg.halves { f.wrapping_mul(2) } else { f } as u64)
    }

    fn emit(&self, _stream: u32, seq: u64, buf: &mut [u8]) {
        if buf.len() < self.packet_len() {
            return; // a caller bug; never panic on the send path
        }
        let p = self.prefix();
        if self.cfg.psn {
            Psn::new_unchecked(&mut buf[..]).set_psn(seq);
        }
        let body = &mut buf[p..p + self.body_len()];
        let (frame_seq, half) = self.split_seq(seq);
        let f = frame_seq.rem_euclid(i64::from(self.cfg.fps)) as u32;
        if half == 0 {
            body[..HEADER_LEN].copy_from_slice(&self.header(frame_seq));
            self.cfg.fill.emit(&mut body[HEADER_LEN..], &self.at(seq, frame_seq, f, 0));
        } else {
            self.cfg.fill.emit(body, &self.at(seq, frame_seq, f, FIRST_PAYLOAD));
        }
    }

    fn check(&self, buf: &[u8]) -> Result<PacketInfo, Invalid> {
        if buf.len() != self.packet_len() {
            return Err(Invalid::Length);
        }
        let p = self.prefix();
        let body = &buf[p..];
        let psn = self.cfg.psn.then(|| Psn::new_unchecked(buf).psn());
        let has_header = Header::new_unchecked(body).sync_ok();
        if !self.cfg.halves || has_header {
            let (frame_seq, f) = self.parse_header(body)?;
            let seq = match (psn, self.cfg.halves) {
                (Some(n), _) => n,
                (None, false) => frame_seq as u64,
                (None, true) if self.cfg.fill == Fill::Counter => (frame_seq as u64).wrapping_mul(2),
                (None, true) => frame_seq as u64,
            };
            if !self.cfg.fill.check(&body[16..], &self.at(seq, frame_seq, f, 0)) {
                return Err(Invalid::Payload);
            }
            return Ok(PacketInfo::new(0, seq));
        }
        let numbered = self.check_second_half(body, psn.unwrap_or(0))?;
        Ok(match (psn, numbered) {
            (Some(n), _) => PacketInfo::new(0, n),
            (None, Some(frame_seq)) => PacketInfo::new(0, (frame_seq as u64).wrapping_mul(2).wrapping_add(1)),
            (None, None) => PacketInfo::new(UNSEQUENCED, 0),
        })
    }

    fn explain(&self, buf: &[u8]) -> Option<Mismatch> {
        use Shown::{Hex, Num, Word};
        let kind = self.check(buf).err()?;
        if kind == Invalid::Length {
            return Some(Mismatch::length(buf.len(), Some(self.packet_len())));
        }
        let body = &buf[self.prefix()..];
        let h = Header::new_unchecked(body);
        let bad = |field, got, key, want| Some(Mismatch::field(Invalid::Header, field, got, key, want));
        if !h.sync_ok() {
            if self.cfg.halves {
                // A half without the sync word is a second half: its payload did not fit.
                return Some(Mismatch::of(kind));
            }
            return bad(
                "first word (the sync word)",
                Hex(u64::from(u32::from_le_bytes(body.get(..4)?.try_into().ok()?))),
                "",
                Hex(u64::from(SYNC)),
            );
        }
        if !h.crc_ok() {
            return bad("header CRC", Word("wrong"), "", Word("the CRC-16 of words 2 and 3"));
        }
        if kind == Invalid::Header && h.frame() >= self.cfg.fps {
            return bad(
                "frame number within the second",
                Num(u64::from(h.frame())),
                "fps",
                Num(u64::from(self.cfg.fps)),
            );
        }
        if kind == Invalid::Header && (self.cfg.fill == Fill::Tvg) != h.tvg() && self.cfg.fill != Fill::Any {
            return bad(
                "T bit (test vector data)",
                Num(u64::from(h.tvg())),
                "fill",
                Word(if h.tvg() { "a fill other than tvg" } else { "tvg" }),
            );
        }
        Some(Mismatch::of(kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTOR: [u8; 16] =
        [0xed, 0xde, 0xad, 0xab, 0x00, 0x00, 0xad, 0xbe, 0x01, 0x98, 0x11, 0x82, 0x5d, 0x97, 0x00, 0x00];

    fn cfg() -> Mark5bConfig {
        Mark5bConfig { mjd: Some(57_821), sec: Some(19_801), user: 0xBEAD, fill: Fill::Any, ..Mark5bConfig::default() }
    }

    #[test]
    fn checked_range_is_what_check_reports_for_the_senders_numbers() {
        for fill in [Fill::Any, Fill::Tvg, Fill::Counter, Fill::Zeros] {
            for psn in [false, true] {
                let m = Mark5b::new(Mark5bConfig { halves: true, psn, fill, fps: 1000, ..cfg() }).unwrap();
                let mut b = vec![0u8; m.packet_len()];
                // Around zero too: frame numbers before the configured second are negative.
                for (first, last) in [(0u64, 9u64), (1, 10), (u64::MAX - 6, 3)] {
                    if fill == Fill::Counter && first > last {
                        continue; // the counter fill has no negative frames
                    }
                    let (lo, hi) = m.checked_range(first, last);
                    let mut seen = Vec::new();
                    let mut seq = first;
                    loop {
                        m.emit(0, seq, &mut b);
                        let info = m.check(&b).unwrap_or_else(|e| panic!("{fill} psn {psn} seq {seq}: {e}"));
                        if info.stream != UNSEQUENCED {
                            seen.push(info.seq);
                        }
                        if seq == last {
                            break;
                        }
                        seq = seq.wrapping_add(1);
                    }
                    assert_eq!(seen.first(), Some(&lo), "{fill} psn {psn} {first}..={last}");
                    assert_eq!(seen.last(), Some(&hi), "{fill} psn {psn} {first}..={last}");
                }
            }
        }
    }

    #[test]
    fn test_vector_round_trips_exactly() {
        let m = Mark5b::new(cfg()).unwrap();
        assert_eq!(m.header(0), VECTOR, "emit writes the formats.md header");
        assert_eq!(m.parse_header(&VECTOR), Ok((0, 0)));
        // Decoded fields, independently of the format's own numbering.
        let w = |i: usize| u32::from_le_bytes(VECTOR[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(w(0), SYNC);
        assert_eq!(w(1) >> 16, 0xBEAD);
        assert_eq!(w(1) & 0x7FFF, 0);
        assert_eq!(from_bcd(w(2) >> 20, 3), Some(821));
        assert_eq!(from_bcd(w(2) & 0xFFFFF, 5), Some(19801));
        assert_eq!(from_bcd(w(3) >> 16, 4), Some(0));
        assert_eq!(w(3) & 0xFFFF, 0x975D);
        let mut frame = vec![0u8; FRAME_LEN];
        frame[..16].copy_from_slice(&VECTOR);
        assert_eq!(m.check(&frame), Ok(PacketInfo::new(0, 0)));
    }

    #[test]
    fn header_view_round_trips_every_field() {
        let mut b = [0xFFu8; 20];
        let mut h = Header::new_checked(&mut b[..]).unwrap();
        h.set_sync();
        h.set_user(0xBEAD);
        h.set_tvg(false);
        h.set_frame(32_767);
        h.set_mjd(821);
        h.set_second_of_day(86_399);
        h.set_fraction(9_999);
        h.fill_crc();
        let h = Header::new_checked(&b[..]).unwrap();
        assert!(h.sync_ok() && h.crc_ok() && !h.tvg());
        assert_eq!((h.user(), h.frame()), (0xBEAD, 32_767));
        assert_eq!((h.mjd(), h.second_of_day(), h.fraction()), (Some(821), Some(86_399), Some(9_999)));
        assert_eq!(&b[16..], &[0xFF; 4], "nothing written beyond the header");
        // The formats.md vector, read through the view.
        let v = Header::new_checked(&VECTOR[..]).unwrap();
        assert!(v.sync_ok() && v.crc_ok());
        assert_eq!((v.user(), v.tvg(), v.frame(), v.crc()), (0xBEAD, false, 0, 0x975D));
        assert_eq!((v.mjd(), v.second_of_day(), v.fraction()), (Some(821), Some(19_801), Some(0)));
        let mut bad = VECTOR;
        bad[8] = 0x0A; // a BCD digit above 9
        assert_eq!(Header::new_checked(&bad[..]).unwrap().second_of_day(), None);
        assert_eq!(Header::new_checked(&VECTOR[..15]).unwrap_err(), Truncated { need: 16, have: 15 });
    }

    #[test]
    fn rate_to_frames() {
        assert_eq!(fps_for_rate(2_048_000_000), Ok(25_600));
        assert!(fps_for_rate(2_048_000_001).is_err());
        assert!(Mark5b::new(Mark5bConfig { fps: 0, ..cfg() }).is_err());
        assert!(Mark5b::new(Mark5bConfig { halves: true, fill: Fill::Random(1), ..cfg() }).is_err());
    }

    fn all_modes() -> Vec<Mark5b> {
        let mut v = Vec::new();
        for fill in [Fill::Tvg, Fill::Counter, Fill::Zeros, Fill::Any, Fill::Random(5)] {
            for halves in [false, true] {
                for psn in [false, true] {
                    for fps in [25_600, 51_200] {
                        if let Ok(m) = Mark5b::new(Mark5bConfig { fill, halves, psn, fps, ..cfg() }) {
                            v.push(m);
                        }
                    }
                }
            }
        }
        v
    }

    #[test]
    fn round_trips_across_seconds_days_and_the_mjd_wrap() {
        for m in all_modes() {
            let fps = u64::from(m.cfg.fps);
            let to_end_of_day = (86_400 - 19_801) * fps;
            let to_mjd_wrap = (178 * 86_400 + 86_400 - 19_801) * fps; // 57821 + 179 = 58000
            let mut b = vec![0u8; m.packet_len()];
            let per = if m.cfg.halves { 2 } else { 1 };
            for frame_seq in
                [0u64, 1, 32_767, 32_768, fps - 1, fps, to_end_of_day - 1, to_end_of_day, to_mjd_wrap - 1, to_mjd_wrap]
            {
                for half in 0..per {
                    let seq = frame_seq * per + half;
                    m.emit(0, seq, &mut b);
                    let got = m.check(&b).unwrap_or_else(|e| panic!("{} seq {seq}: {e}", m.spec()));
                    let unnumbered = m.cfg.halves && !m.cfg.psn && m.cfg.fill != Fill::Counter;
                    if unnumbered {
                        if half == 0 {
                            assert_eq!(got, PacketInfo::new(0, frame_seq), "{}", m.spec());
                        } else {
                            assert_eq!(got, PacketInfo::new(UNSEQUENCED, 0), "{}", m.spec());
                        }
                    } else {
                        assert_eq!(got, PacketInfo::new(0, seq), "{}", m.spec());
                    }
                }
            }
            // Across the MJD wrap the header says 000 and the day after the start (57821 -> 58000).
            m.emit(0, to_mjd_wrap * per, &mut b);
            let h = &b[m.prefix()..m.prefix() + 16];
            let w2 = u32::from_le_bytes(h[8..12].try_into().unwrap());
            assert_eq!(w2, 0, "MJD%1000 = 000, second 0");
            // Frames before the start count backwards (modulo 2^64); PSN modes carry the PSN.
            let numbered = !m.cfg.halves || m.cfg.fill == Fill::Counter;
            if !m.cfg.psn && numbered {
                m.emit(0, (-(per as i64)) as u64, &mut b);
                assert_eq!(m.check(&b).unwrap().seq, (-(per as i64)) as u64, "{}", m.spec());
            }
        }
    }

    #[test]
    fn frame_number_wrap_above_32768_frames_per_second() {
        let m = Mark5b::new(Mark5bConfig { fps: 51_200, ..cfg() }).unwrap();
        let h = m.header(40_000);
        let w1 = u32::from_le_bytes(h[4..8].try_into().unwrap());
        assert_eq!(w1 & 0x7FFF, 40_000 - 32_768);
        assert_eq!(m.parse_header(&h), Ok((40_000, 40_000)));
        assert_eq!(m.parse_header(&m.header(7_232)), Ok((7_232, 7_232)));
    }

    #[test]
    fn psn_and_raw_reader() {
        use crate::spool::Recordable;
        let m = Mark5b::new(Mark5bConfig { halves: true, psn: true, fill: Fill::Tvg, ..cfg() }).unwrap();
        let mut a = vec![0u8; m.packet_len()];
        let mut b = vec![0u8; m.packet_len()];
        m.emit(0, 2 * 77, &mut a);
        m.emit(0, 2 * 77 + 1, &mut b);
        assert_eq!(&a[..8], &154u64.to_le_bytes());
        // The raw recording of the two halves (PSN stripped) is one whole frame.
        let mut whole = a[8..].to_vec();
        whole.extend_from_slice(&b[8..]);
        let r = m.raw_reader().unwrap();
        assert_eq!(r.fixed_len(), Some(FRAME_LEN));
        assert_eq!(r.check(&whole), Ok(PacketInfo::new(0, 77)));
        assert_eq!(r.file_extension(), "m5b");
        assert_eq!(m.raw_strip(), 8);
        // A whole-frame stream reads back as itself.
        assert!(Mark5b::new(cfg()).unwrap().raw_reader().is_none());
    }

    #[test]
    fn malformed_frames() {
        let m = Mark5b::new(Mark5bConfig { fill: Fill::Tvg, ..cfg() }).unwrap();
        let mut good = vec![0u8; FRAME_LEN];
        m.emit(0, 123_456, &mut good);
        assert_eq!(m.check(&good).unwrap().seq, 123_456);
        for n in (0..=64).chain([5007, 5008, 10015]) {
            assert_eq!(m.check(&good[..n]), Err(Invalid::Length), "truncated to {n}");
        }
        let mut bad = good.clone();
        bad[0] = 0xEE;
        assert_eq!(m.check(&bad), Err(Invalid::Header), "sync");
        let mut bad = good.clone();
        bad[12] ^= 1;
        assert_eq!(m.check(&bad), Err(Invalid::Header), "CRC");
        // Invalid BCD with a matching CRC is still refused.
        let mut h = m.header(0);
        h[8] = 0x0A; // a seconds digit of 10
        let mut c = [0u8; 6];
        c[..4].copy_from_slice(&u32::from_le_bytes(h[8..12].try_into().unwrap()).to_be_bytes());
        c[4..].copy_from_slice(&[h[15], h[14]]);
        h[12..14].copy_from_slice(&crc16(&c).to_le_bytes());
        assert_eq!(m.parse_header(&h), Err(Invalid::Header), "BCD digit 10");
        // Frame number at or beyond fps (CRC does not cover word 1).
        let mut bad = good.clone();
        bad[4..6].copy_from_slice(&(25_600u16 | 0x8000).to_le_bytes());
        assert_eq!(m.check(&bad), Err(Invalid::Header), "frame number = fps");
        let mut bad = good.clone();
        bad[5] &= 0x7F;
        assert_eq!(m.check(&bad), Err(Invalid::Header), "T bit off with a TVG fill");
        let mut bad = good.clone();
        bad[5000] ^= 0x20;
        assert_eq!(m.check(&bad), Err(Invalid::Payload), "TVG continuity");
        assert_eq!(m.check(&vec![0xFF; FRAME_LEN]), Err(Invalid::Header));
        // Halves: a second half whose TVG is off, or a frame-in-second beyond fps.
        let hm = Mark5b::new(Mark5bConfig { halves: true, fill: Fill::Tvg, fps: 1000, ..cfg() }).unwrap();
        let mut half = vec![0u8; HALF_LEN];
        hm.emit(0, 2 * 999 + 1, &mut half);
        assert_eq!(hm.check(&half), Ok(PacketInfo::new(UNSEQUENCED, 0)));
        half[100] ^= 1;
        assert_eq!(hm.check(&half), Err(Invalid::Payload));
        let far = Mark5b::new(Mark5bConfig { halves: true, fill: Fill::Tvg, fps: 2000, ..cfg() }).unwrap();
        far.emit(0, 2 * 1500 + 1, &mut half);
        assert_eq!(hm.check(&half), Err(Invalid::Payload), "frame 1500 of a 1000 fps stream");
        for n in 0..HALF_LEN {
            assert_eq!(hm.check(&half[..n]), Err(Invalid::Length));
        }
    }
}
