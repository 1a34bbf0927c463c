//! A bounded, deterministic mutation fuzzer for the format parsers, on stable Rust.
//!
//! Shared by the `fuzz_parsers` test (a few seconds on every test run) and the `fuzz` example
//! (as long as asked, by hand). It starts from valid datagrams that a format emits, mutates them
//! (bit flips, byte sets, truncation, extension, random bytes, all-0xFF headers, splices of two
//! packets, boundary values in header fields) and asserts two properties of
//! [`Format::check`]: it never panics, and when it accepts a datagram, emitting the packet it
//! reported gives a datagram that it reports the same way. Everything derives from a seed, so
//! a failure is reproduced by rerunning with the printed seed.

use super::stream::UNSEQUENCED;
use super::{spec, Format, Invalid, PacketInfo};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Formats worth fuzzing: every format, and the options that change how `check` reads a
/// datagram. Small frames where the format allows, so that more iterations fit.
pub const SPECS: &[&str] = &[
    "counter,size=64,order=be",
    "counter,order=le",
    "seqfield,offset=3,width=5,order=le,size=64,fill=counter",
    "seqfield,offset=0,width=8,order=be,fill=any",
    "seqfield,offset=2,width=4,order=be,fill=counter",
    "vdif,frame=1032,threads=4,station=WS,bits=2,chans=4,fps=1000,epoch=40,start=1000,fill=counter",
    "vdif,frame=1032,threads=1,station=7,bits=8,chans=1,complex=1,fps=100,epoch=40,start=0,fill=tvg",
    "vdif,frame=1032,threads=1024,fps=1000,epoch=40,start=5,fill=any",
    "vtp,psn=64,frame=1032,threads=2,fps=1000,epoch=40,start=0,fill=random:3",
    "vtp,psn=32,frame=1032,threads=1,fps=1000,epoch=40,start=0,fill=any",
    "mark5b,fps=25600,halves=0,psn=0,fill=tvg,mjd=57821,sec=86000",
    "mark5b,fps=51200,halves=0,psn=1,fill=random:1,mjd=57999,sec=0",
    "mark5b,fps=25600,halves=1,psn=0,fill=tvg,mjd=57821,sec=0",
    "mark5b,fps=25600,halves=1,psn=0,fill=counter,mjd=57821,sec=0",
    "mark5b,fps=1000,halves=1,psn=1,fill=zeros,mjd=57821,sec=0",
    "mark5b,fps=25600,halves=0,psn=0,fill=any,mjd=57821,sec=0",
    "spead,heap=4096,payload=1024,first=1,step=1,addr=48,fill=counter",
    "spead,heap=4096,payload=512,first=0,step=8,addr=40,fill=any",
    "spead,heap=65536,payload=8192,first=1,step=1,addr=48,fill=tvg",
    "spead,heap=5000,payload=1024,lead=1000,first=3,step=2,addr=40,fill=any",
];

/// xorshift64*: small, fast and reproducible.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from any seed (0 is remapped).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// What one fuzz run saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Datagrams checked.
    pub iterations: u64,
    /// Accepted as data.
    pub ok: u64,
    /// Accepted on [`UNSEQUENCED`].
    pub unsequenced: u64,
    /// Refused, by kind (length, header, payload).
    pub invalid: [u64; 3],
    /// Property violations: panics and inconsistent answers, each described with the seed and
    /// the input so that it can be replayed. Empty when all is well.
    pub failures: Vec<String>,
}

/// A valid datagram of `fmt` for a random stream and sequence number.
fn valid(fmt: &dyn Format, rng: &mut Rng, buf: &mut Vec<u8>) {
    let len = fmt.fixed_len().unwrap_or_else(|| 8 * (1 + rng.below(64))).max(fmt.packet_len());
    buf.clear();
    buf.resize(len, 0);
    let seq = match rng.below(4) {
        0 => rng.below(100) as u64,
        1 => rng.next_u64() >> 24,
        2 => u64::from(u32::MAX) - 2 + rng.below(5) as u64,
        _ => rng.next_u64() >> 40,
    };
    fmt.emit(rng.below(4) as u32, seq, buf);
}

/// Replace `buf` by a mutation of itself (and sometimes of `other`, another valid datagram).
pub fn mutate(rng: &mut Rng, buf: &mut Vec<u8>, other: &[u8]) {
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        let len = buf.len();
        match rng.below(10) {
            0 | 1 => {
                // Bit flips, often in the header where the parsing is.
                for _ in 0..1 + rng.below(8) {
                    if len > 0 {
                        let i = if rng.below(2) == 0 { rng.below(len.min(72)) } else { rng.below(len) };
                        buf[i] ^= 1 << rng.below(8);
                    }
                }
            }
            2 => {
                for _ in 0..1 + rng.below(4) {
                    if len > 0 {
                        let i = rng.below(len.min(72));
                        buf[i] = [0x00, 0xFF, 0x80, 0x7F, rng.next_u64() as u8][rng.below(5)];
                    }
                }
            }
            3 => buf.truncate(rng.below(len + 1)),
            4 => {
                let extra = 1 + rng.below(64);
                for _ in 0..extra {
                    buf.push(rng.next_u64() as u8);
                }
            }
            5 => {
                let n = rng.below(2 * len.max(16) + 1);
                buf.clear();
                buf.extend((0..n).map(|_| rng.next_u64() as u8));
            }
            6 => {
                let n = len.min(8 * (1 + rng.below(9)));
                buf[..n].fill(0xFF);
            }
            7 => {
                // Splice: the start of one packet with the rest of another.
                let cut = rng.below(len.min(other.len()) + 1);
                buf[cut..len.min(other.len())].copy_from_slice(&other[cut..len.min(other.len())]);
            }
            8 => {
                // Boundary values in an aligned header field of 2, 4 or 8 bytes.
                let w = [2usize, 4, 8][rng.below(3)];
                if len >= w {
                    let i = rng.below(len.min(72) - w + 1) / w * w;
                    let v: u64 = [0, u64::MAX, 1 << 63, (1 << 15) - 1, 1 << 24, rng.next_u64()][rng.below(6)];
                    let b = if rng.below(2) == 0 { v.to_le_bytes() } else { v.to_be_bytes() };
                    buf[i..i + w].copy_from_slice(&b[..w]);
                }
            }
            _ => {
                if len > 0 {
                    let i = rng.below(len);
                    buf[i] = buf[i].wrapping_add(1 + rng.below(3) as u8);
                }
            }
        }
    }
}

/// Whether re-emitting an accepted packet should give the same answer. Not for packets that
/// carry no number, formats without a fixed length, and Mark5B halves without PSN numbered per
/// frame (their sequence number counts frames, the sender's counts halves).
fn reemit_applies(fmt: &dyn Format, spec_str: &str, info: &PacketInfo) -> bool {
    info.stream != UNSEQUENCED
        && fmt.fixed_len().is_some()
        && (!spec_str.contains("halves=1,psn=0") || spec_str.contains("fill=counter"))
}

fn hex(b: &[u8]) -> String {
    let n = b.len().min(80);
    let mut s: String = b[..n].iter().map(|x| format!("{x:02x}")).collect();
    if b.len() > n {
        s.push_str(&format!("... ({} bytes)", b.len()));
    }
    s
}

/// Fuzz one format from `seed` for at most `iterations` datagrams or `limit` time, whichever
/// comes first.
pub fn run(fmt: &Arc<dyn Format>, seed: u64, iterations: u64, limit: Duration) -> Report {
    let spec_str = fmt.spec();
    let mut rng = Rng::new(seed);
    let mut rep = Report::default();
    let (mut buf, mut other, mut again) = (Vec::new(), Vec::new(), vec![0u8; fmt.packet_len()]);
    let t0 = Instant::now();
    while rep.iterations < iterations && (rep.iterations % 64 != 0 || t0.elapsed() < limit) {
        let case_seed = rng.next_u64();
        let mut r = Rng::new(case_seed);
        valid(fmt.as_ref(), &mut r, &mut buf);
        valid(fmt.as_ref(), &mut r, &mut other);
        if r.below(16) != 0 {
            mutate(&mut r, &mut buf, &other);
        }
        rep.iterations += 1;
        let got = catch_unwind(AssertUnwindSafe(|| fmt.check(&buf)));
        let fail = |what: &str| format!("{spec_str}: {what} (seed {seed}, case {case_seed:#x}), input {}", hex(&buf));
        match got {
            Err(_) => rep.failures.push(fail("check panicked")),
            Ok(Err(kind)) => rep.invalid[kind as usize] += 1,
            Ok(Ok(info)) if info.stream == UNSEQUENCED => {
                rep.unsequenced += 1;
                if info.seq != 0 {
                    rep.failures.push(fail("unsequenced datagram with a sequence number"));
                }
            }
            Ok(Ok(info)) => {
                rep.ok += 1;
                if reemit_applies(fmt.as_ref(), &spec_str, &info) {
                    again.fill(0);
                    fmt.emit(info.stream, info.seq, &mut again);
                    let back = fmt.check(&again);
                    if back != Ok(info) {
                        rep.failures
                            .push(fail(&format!("accepted as {info:?}, but its re-emission checks as {back:?}")));
                    }
                }
            }
        }
        if rep.failures.len() >= 5 {
            break;
        }
    }
    rep
}

/// The formats of [`SPECS`], built.
pub fn formats() -> Vec<Arc<dyn Format>> {
    SPECS.iter().map(|s| spec::parse(s).unwrap_or_else(|e| panic!("fuzz spec {s}: {e}"))).collect()
}

/// Kind names in [`Report::invalid`] order.
pub const KINDS: [Invalid; 3] = [Invalid::Length, Invalid::Header, Invalid::Payload];
