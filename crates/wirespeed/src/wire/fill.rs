//! Payload fills: the deterministic bytes that instrument formats carry after their header, so
//! that a receiver can check the payload as well as the header.
//!
//! A fill is a pure function of a position, never of earlier packets: the sender writes the
//! bytes of any packet directly and the receiver checks any packet on its own, in any order.
//! The position is given by the format ([`At`]): a byte offset in the stream (for fills that
//! continue across packets, like the counter) and a byte offset since the start of the current
//! second (for the Mark5B test vector generator, which restarts every second).

use std::fmt;
use std::sync::OnceLock;

/// Which bytes a payload carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Not checked; emitted as zeros. For checking data from an independent instrument whose
    /// payload is real signal.
    Any,
    /// All zero bytes (cheapest to emit and check; catches little more than truncation).
    Zeros,
    /// 64-bit big-endian words of one counter continuing across packets: the word at stream byte
    /// offset `8k` is `k` (the CASPER counter of formats.md section 1, inside a format's payload).
    Counter,
    /// The Mark5B test vector generator (formats.md section 3): 32-bit little-endian words of a
    /// period-32767 sequence restarting every second.
    Tvg,
    /// Pseudo-random 64-bit little-endian words, a pure function of (seed, stream, seq, offset):
    /// realistic incompressible data that can still be checked without state.
    Random(u64),
}

/// Where a payload sits in its stream, as the fill functions need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    /// The format's stream (e.g. VDIF thread); keys [`Fill::Random`].
    pub stream: u32,
    /// The packet's sequence number; keys [`Fill::Random`].
    pub seq: u64,
    /// Byte offset of the payload's first byte in the stream; positions [`Fill::Counter`].
    pub offset: u64,
    /// Byte offset of the payload's first byte since the generator last restarted (the start of
    /// the second for time-stamped formats); positions [`Fill::Tvg`].
    pub offset_in_second: u64,
}

impl Fill {
    /// Parse `any`, `zeros`, `counter`, `tvg`, `random` or `random:SEED`.
    pub fn parse(s: &str) -> Result<Fill, String> {
        let f = match s {
            "any" | "none" => Fill::Any,
            "zeros" | "zero" => Fill::Zeros,
            "counter" => Fill::Counter,
            "tvg" => Fill::Tvg,
            "random" => Fill::Random(0),
            _ => match s.strip_prefix("random:") {
                Some(seed) => {
                    Fill::Random(seed.parse().map_err(|_| format!("random fill seed '{seed}' is not a number"))?)
                }
                None => return Err(format!("unknown fill '{s}': use any, zeros, counter, tvg or random:SEED")),
            },
        };
        if f == Fill::Tvg {
            tvg_table(); // build the table now, not on the first packet
        }
        Ok(f)
    }

    /// Write the fill for a payload at `at` into `buf`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8], at: &At) {
        match *self {
            Fill::Any | Fill::Zeros => buf.fill(0),
            Fill::Counter => {
                if at.offset % 8 == 0 {
                    let whole = buf.len() / 8 * 8;
                    let (body, tail) = buf.split_at_mut(whole);
                    super::simd::counter_fill(body, at.offset / 8, true);
                    emit_gen::<8>(tail, at.offset + whole as u64, |k| k.to_be_bytes());
                } else {
                    emit_gen::<8>(buf, at.offset, |k| k.to_be_bytes());
                }
            }
            Fill::Tvg => tvg_emit(buf, at.offset_in_second),
            Fill::Random(seed) => {
                let key = random_key(seed, at.stream, at.seq);
                emit_gen::<8>(buf, at.offset, |k| random_word(key, k).to_le_bytes())
            }
        }
    }

    /// Whether `buf` carries exactly the fill for a payload at `at` (always true for `Any`).
    #[inline]
    pub fn check(&self, buf: &[u8], at: &At) -> bool {
        match *self {
            Fill::Any => true,
            Fill::Zeros => {
                let mut words = buf.chunks_exact(8);
                let acc = (&mut words).fold(0u64, |a, c| a | u64::from_ne_bytes(c.try_into().unwrap_or([1; 8])));
                acc == 0 && words.remainder().iter().all(|&b| b == 0)
            }
            Fill::Counter => {
                if at.offset % 8 == 0 {
                    let whole = buf.len() / 8 * 8;
                    let (body, tail) = buf.split_at(whole);
                    super::simd::counter_mismatch(body, at.offset / 8, true) == 0
                        && check_gen::<8>(tail, at.offset + whole as u64, |k| k.to_be_bytes())
                } else {
                    check_gen::<8>(buf, at.offset, |k| k.to_be_bytes())
                }
            }
            Fill::Tvg => tvg_check(buf, at.offset_in_second),
            Fill::Random(seed) => {
                let key = random_key(seed, at.stream, at.seq);
                check_gen::<8>(buf, at.offset, |k| random_word(key, k).to_le_bytes())
            }
        }
    }
}

impl fmt::Display for Fill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Fill::Any => f.write_str("any"),
            Fill::Zeros => f.write_str("zeros"),
            Fill::Counter => f.write_str("counter"),
            Fill::Tvg => f.write_str("tvg"),
            Fill::Random(s) => write!(f, "random:{s}"),
        }
    }
}

/// Write the words `word(k)` of a stream of `W`-byte words into `buf`, whose first byte is at
/// stream byte offset `pos` (any alignment; partial words at either end are cut).
#[inline(always)]
fn emit_gen<const W: usize>(buf: &mut [u8], pos: u64, word: impl Fn(u64) -> [u8; W]) {
    let r = (pos % W as u64) as usize;
    let mut k = pos / W as u64;
    let mut rest = buf;
    if r != 0 {
        let n = (W - r).min(rest.len());
        rest[..n].copy_from_slice(&word(k)[r..r + n]);
        rest = &mut rest[n..];
        k += 1;
    }
    let mut chunks = rest.chunks_exact_mut(W);
    for c in &mut chunks {
        c.copy_from_slice(&word(k));
        k += 1;
    }
    let tail = chunks.into_remainder();
    let n = tail.len();
    if n > 0 {
        tail.copy_from_slice(&word(k)[..n]);
    }
}

/// The check matching [`emit_gen`].
#[inline(always)]
fn check_gen<const W: usize>(buf: &[u8], pos: u64, word: impl Fn(u64) -> [u8; W]) -> bool {
    let r = (pos % W as u64) as usize;
    let mut k = pos / W as u64;
    let mut rest = buf;
    if r != 0 {
        let n = (W - r).min(rest.len());
        if rest[..n] != word(k)[r..r + n] {
            return false;
        }
        rest = &rest[n..];
        k += 1;
    }
    let mut diff = 0u8;
    let mut chunks = rest.chunks_exact(W);
    for c in &mut chunks {
        let w = word(k);
        for i in 0..W {
            diff |= c[i] ^ w[i];
        }
        k += 1;
    }
    let tail = chunks.remainder();
    diff == 0 && (tail.is_empty() || *tail == word(k)[..tail.len()])
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64's output function: a bijective mix of 64 bits.
#[inline(always)]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[inline(always)]
fn random_key(seed: u64, stream: u32, seq: u64) -> u64 {
    mix64(mix64(seed ^ (u64::from(stream) << 32).wrapping_mul(GOLDEN)) ^ seq)
}

/// Word `k` of the packet keyed by `key`: splitmix64 at position k (stateless).
#[inline(always)]
fn random_word(key: u64, k: u64) -> u64 {
    mix64(key.wrapping_add(k.wrapping_add(1).wrapping_mul(GOLDEN)))
}

/// Period of the test vector generator.
pub const TVG_PERIOD: usize = 32767;
/// The generator's first word after each restart.
pub const TVG_START: u32 = 0xBFFF_4000;

/// The test vector generator's words in order, and the inverse map from a word's low 16 bits to
/// its phase. Built once per process.
pub struct TvgTable {
    /// The `TVG_PERIOD` words, starting with [`TVG_START`].
    pub words: Box<[u32]>,
    /// Phase of each low half-word; `u16::MAX` for values the generator never produces.
    phase: Box<[u16]>,
    /// The words as little-endian bytes, so that runs are copied and compared as memory.
    bytes: Box<[u8]>,
}

/// The next generator word after `c` (formats.md section 3).
pub fn tvg_next(c: u32) -> u32 {
    let b = |i: u32| (c >> i) & 1;
    let mut n = 0u32;
    for i in 0..14 {
        n |= (b(i + 1) ^ b(i + 2)) << i;
    }
    n |= (b(1) ^ b(2) ^ b(15)) << 14;
    n |= (b(1) ^ b(3)) << 15;
    n | ((!n & 0xFFFF) << 16)
}

/// The shared table (built on first use; [`Fill::parse`] of `tvg` builds it eagerly).
pub fn tvg_table() -> &'static TvgTable {
    static T: OnceLock<TvgTable> = OnceLock::new();
    T.get_or_init(|| {
        let mut words = Vec::with_capacity(TVG_PERIOD);
        let mut phase = vec![u16::MAX; 1 << 16];
        let mut w = TVG_START;
        for i in 0..TVG_PERIOD {
            words.push(w);
            phase[(w & 0xFFFF) as usize] = i as u16;
            w = tvg_next(w);
        }
        let bytes = words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>().into_boxed_slice();
        TvgTable { words: words.into_boxed_slice(), phase: phase.into_boxed_slice(), bytes }
    })
}

impl TvgTable {
    /// Phase (0..32767) of a generator word, or `None` when the word is not one the generator
    /// produces (upper half not the inverse of the lower, or a value off the sequence).
    #[inline]
    pub fn phase(&self, word: u32) -> Option<usize> {
        if (word >> 16) != (!word & 0xFFFF) {
            return None;
        }
        let p = self.phase[(word & 0xFFFF) as usize];
        (p != u16::MAX).then_some(usize::from(p))
    }

    /// Word at any phase (taken modulo the period).
    #[inline]
    pub fn word(&self, k: u64) -> u32 {
        self.words[(k % TVG_PERIOD as u64) as usize]
    }
}

fn tvg_emit(buf: &mut [u8], pos: u64) {
    let t = tvg_table();
    let mut i = ((pos % (4 * TVG_PERIOD as u64)) as usize).min(t.bytes.len());
    let mut rest = buf;
    while !rest.is_empty() {
        let n = (t.bytes.len() - i).min(rest.len());
        rest[..n].copy_from_slice(&t.bytes[i..i + n]);
        rest = &mut rest[n..];
        i = 0;
    }
}

fn tvg_check(buf: &[u8], pos: u64) -> bool {
    let t = tvg_table();
    let mut i = ((pos % (4 * TVG_PERIOD as u64)) as usize).min(t.bytes.len());
    let mut rest = buf;
    while !rest.is_empty() {
        let n = (t.bytes.len() - i).min(rest.len());
        if rest[..n] != t.bytes[i..i + n] {
            return false;
        }
        rest = &rest[n..];
        i = 0;
    }
    true
}

/// For a payload of TVG words at an unknown position (a Mark5B half frame without header): the
/// phase of its first word when every following word continues the sequence from there.
pub fn tvg_find_phase(buf: &[u8]) -> Option<usize> {
    if buf.len() < 4 {
        return None;
    }
    let t = tvg_table();
    let p = t.phase(u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]))?;
    tvg_check(buf, p as u64 * 4).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tvg_first_words_and_period() {
        let t = tvg_table();
        let first = [0xBFFF4000u32, 0xCFFF3000, 0xEBFF1400, 0xF0FF0F00, 0xFBBF0440, 0xFCCF0330, 0xFEAB0154, 0xBF0040FF];
        assert_eq!(&t.words[..8], &first);
        // Period 32767: all words distinct, and the recurrence comes back to the start.
        let mut seen = std::collections::HashSet::new();
        for &w in t.words.iter() {
            assert!(seen.insert(w), "word {w:#x} repeats within the period");
            assert_eq!(w >> 16, !w & 0xFFFF, "upper half is the inverse of the lower");
        }
        assert_eq!(seen.len(), TVG_PERIOD);
        assert_eq!(tvg_next(t.words[TVG_PERIOD - 1]), TVG_START);
        for (i, &w) in t.words.iter().enumerate().step_by(97) {
            assert_eq!(t.phase(w), Some(i));
        }
        assert_eq!(t.phase(0x0000_0000), None); // the all-zero state is off the sequence
        assert_eq!(t.phase(0x1234_5678), None); // upper not the inverse
    }

    #[test]
    fn every_fill_round_trips_at_every_alignment() {
        for fill in [Fill::Zeros, Fill::Counter, Fill::Tvg, Fill::Random(7)] {
            for pos in [0u64, 1, 3, 4, 7, 8, 13, 131068, 32767 * 4 - 4] {
                for len in [0usize, 1, 5, 8, 9, 64, 131] {
                    let at = At { stream: 2, seq: 99, offset: pos, offset_in_second: pos };
                    let mut b = vec![0xAAu8; len];
                    fill.emit(&mut b, &at);
                    assert!(fill.check(&b, &at), "{fill} pos {pos} len {len}");
                    if len > 0 && fill != Fill::Zeros {
                        let other = At { offset: pos + 8, offset_in_second: pos + 4, seq: 100, ..at };
                        // Another position or packet must not pass (a whole word at least).
                        if len >= 8 {
                            assert!(!fill.check(&b, &other), "{fill} pos {pos} len {len} accepted elsewhere");
                        }
                    }
                    for i in 0..len {
                        let mut d = b.clone();
                        d[i] ^= 0x01;
                        assert!(!fill.check(&d, &at), "{fill}: flip at {i} of {len} missed");
                    }
                }
            }
        }
        // A split payload checks piecewise: fills are functions of position only.
        for fill in [Fill::Counter, Fill::Tvg] {
            let at = At { stream: 0, seq: 5, offset: 800, offset_in_second: 800 };
            let mut b = vec![0u8; 100];
            fill.emit(&mut b, &at);
            let at2 = At { offset: 837, offset_in_second: 837, ..at };
            assert!(fill.check(&b[37..], &at2));
        }
    }

    #[test]
    fn counter_words_are_the_stream_positions() {
        let mut b = [0u8; 24];
        Fill::Counter.emit(&mut b, &At { stream: 0, seq: 0, offset: 80, offset_in_second: 0 });
        assert_eq!(&b[..8], &10u64.to_be_bytes());
        assert_eq!(&b[16..], &12u64.to_be_bytes());
    }

    #[test]
    fn tvg_wraps_and_phase_is_found() {
        let t = tvg_table();
        let mut b = vec![0u8; 40];
        let pos = (TVG_PERIOD as u64 - 3) * 4;
        Fill::Tvg.emit(&mut b, &At { stream: 0, seq: 0, offset: 0, offset_in_second: pos });
        assert_eq!(u32::from_le_bytes(b[12..16].try_into().unwrap()), TVG_START);
        assert_eq!(tvg_find_phase(&b), Some(TVG_PERIOD - 3));
        assert_eq!(t.word(TVG_PERIOD as u64), TVG_START);
        b[20] ^= 4;
        assert_eq!(tvg_find_phase(&b), None);
        assert_eq!(tvg_find_phase(&b[..3]), None);
    }

    #[test]
    fn random_depends_on_seed_stream_and_seq() {
        let at = At { stream: 1, seq: 2, offset: 0, offset_in_second: 0 };
        let mut a = [0u8; 64];
        Fill::Random(1).emit(&mut a, &at);
        assert!(!Fill::Random(2).check(&a, &at));
        assert!(!Fill::Random(1).check(&a, &At { stream: 2, ..at }));
        assert!(!Fill::Random(1).check(&a, &At { seq: 3, ..at }));
        assert!(!Fill::Random(1).check(&a, &At { offset: 8, ..at }));
    }

    #[test]
    fn fill_names_round_trip() {
        for f in [Fill::Any, Fill::Zeros, Fill::Counter, Fill::Tvg, Fill::Random(42)] {
            assert_eq!(Fill::parse(&f.to_string()), Ok(f));
        }
        assert!(Fill::parse("random:x").is_err());
        assert!(Fill::parse("sine").unwrap_err().contains("unknown fill"));
    }
}
