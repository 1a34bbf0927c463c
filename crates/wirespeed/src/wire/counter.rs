//! The CASPER continuous counter: packet k of a stream with W 64-bit words carries the words
//! k*W, k*W+1, ..., k*W+W-1 (formats.md section 1).
//!
//! FPGA test designs emit exactly this, and seed 004 counts loss from it instead of trusting the
//! kernel. Every word is checked, so corruption anywhere in the payload is caught, not only in
//! the first word.

use super::{ByteOrder, Format, Invalid, PacketInfo};

/// Write the words `first, first+1, ...` into `buf` (whole 8-byte words only).
///
/// Plain safe code written so that LLVM vectorises it; [`super::simd::counter_fill`] compiles it
/// a second time with AVX2 enabled and picks the version the CPU supports at run time.
#[inline(always)]
pub(crate) fn fill_words(buf: &mut [u8], first: u64, big_endian: bool) {
    if big_endian {
        for (i, w) in buf.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&first.wrapping_add(i as u64).to_be_bytes());
        }
    } else {
        for (i, w) in buf.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&first.wrapping_add(i as u64).to_le_bytes());
        }
    }
}

/// OR of `word[i] ^ (first + i)` over the whole 8-byte words of `buf`: zero exactly when the
/// payload continues the count. Branch-free so that it vectorises (see [`fill_words`]).
#[inline(always)]
pub(crate) fn mismatch_words(buf: &[u8], first: u64, big_endian: bool) -> u64 {
    let mut diff = 0u64;
    if big_endian {
        for (i, w) in buf.chunks_exact(8).enumerate() {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            diff |= u64::from_be_bytes(a) ^ first.wrapping_add(i as u64);
        }
    } else {
        for (i, w) in buf.chunks_exact(8).enumerate() {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            diff |= u64::from_le_bytes(a) ^ first.wrapping_add(i as u64);
        }
    }
    diff
}

/// Counter payload of a fixed size (a multiple of 8 bytes), in a chosen byte order.
#[derive(Clone, Copy, Debug)]
pub struct Counter {
    order: ByteOrder,
    len: usize,
    /// When false, any multiple of 8 is accepted and W is taken from each datagram's length.
    strict_len: bool,
}

impl Counter {
    /// A counter payload of `len` bytes; `len` must be a non-zero multiple of 8.
    pub fn new(len: usize, order: ByteOrder) -> Result<Self, String> {
        if len < 8 || len % 8 != 0 {
            return Err(format!(
                "the counter format needs a payload that is a multiple of 8 bytes (64-bit words); {len} is not: try {}",
                (len.max(8) / 8) * 8
            ));
        }
        Ok(Counter { order, len, strict_len: true })
    }

    /// A receiver that learns W from each datagram's own length (no `--size` given).
    pub fn any_len(order: ByteOrder) -> Self {
        Counter { order, len: 0, strict_len: false }
    }
}

impl Format for Counter {
    fn name(&self) -> String {
        format!("counter/{}", self.order)
    }

    fn packet_len(&self) -> usize {
        self.len
    }

    fn fixed_len(&self) -> Option<usize> {
        self.strict_len.then_some(self.len)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn spec(&self) -> String {
        if self.strict_len {
            format!("counter,size={},order={}", self.len, self.order)
        } else {
            format!("counter,order={}", self.order)
        }
    }

    #[inline]
    fn emit(&self, _stream: u32, seq: u64, buf: &mut [u8]) {
        let words = (buf.len() / 8) as u64;
        super::simd::counter_fill(buf, seq.wrapping_mul(words), self.order == ByteOrder::Be);
    }

    #[inline]
    fn check(&self, buf: &[u8]) -> Result<PacketInfo, Invalid> {
        let len = buf.len();
        if len < 8 || len % 8 != 0 || (self.strict_len && len != self.len) {
            return Err(Invalid::Length);
        }
        let words = (len / 8) as u64;
        let first = self.order.read_u64(buf);
        if first % words != 0 {
            return Err(Invalid::Payload);
        }
        let diff = super::simd::counter_mismatch(buf, first, self.order == ByteOrder::Be);
        if diff != 0 {
            return Err(Invalid::Payload);
        }
        Ok(PacketInfo::new(0, first / words))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_formats_md() {
        let c = Counter::new(32, ByteOrder::Be).unwrap();
        let mut b = [0u8; 32];
        c.emit(0, 3, &mut b);
        // Packet 3 of a 4-word stream carries words 12, 13, 14, 15, big-endian.
        assert_eq!(&b[..8], &12u64.to_be_bytes());
        assert_eq!(&b[24..], &15u64.to_be_bytes());
        assert_eq!(c.check(&b), Ok(PacketInfo::new(0, 3)));
        let l = Counter::new(32, ByteOrder::Le).unwrap();
        l.emit(0, 3, &mut b);
        assert_eq!(&b[..8], &12u64.to_le_bytes());
        assert_eq!(l.check(&b).unwrap().seq, 3);
        // The wrong byte order is not silently accepted.
        assert!(c.check(&b).is_err());
    }

    #[test]
    fn detects_damage_anywhere() {
        let c = Counter::new(8800, ByteOrder::Be).unwrap();
        let mut b = vec![0u8; 8800];
        c.emit(0, 1_000_000, &mut b);
        assert_eq!(c.check(&b).unwrap().seq, 1_000_000);
        for pos in [0usize, 7, 8, 4000, 8799] {
            let mut d = b.clone();
            d[pos] ^= 0x10;
            assert!(c.check(&d).is_err(), "flip at {pos} not detected");
        }
        assert_eq!(c.check(&b[..8792]), Err(Invalid::Length));
        assert_eq!(c.check(&[]), Err(Invalid::Length));
        let any = Counter::any_len(ByteOrder::Be);
        assert_eq!(any.check(&b).unwrap().seq, 1_000_000);
        assert_eq!(any.check(&b[..8792]), Err(Invalid::Payload));
    }

    #[test]
    fn sizes_refused_clearly() {
        assert!(Counter::new(1081, ByteOrder::Be).unwrap_err().contains("multiple of 8"));
        assert!(Counter::new(0, ByteOrder::Be).is_err());
        assert!(Counter::new(1080, ByteOrder::Be).is_ok());
    }
}

#[cfg(test)]
mod simd_tests {
    use super::*;

    #[test]
    fn dispatched_kernels_match_the_generic_ones() {
        // The run-time dispatched (AVX2 where present) and the plain versions must agree on
        // every length, both orders, clean and damaged payloads.
        for len in [8usize, 16, 24, 56, 64, 72, 1080, 8800] {
            for be in [true, false] {
                let first = 0xfedc_ba98_7654_3210u64.wrapping_mul(len as u64);
                let mut a = vec![0u8; len];
                let mut b = vec![0u8; len];
                fill_words(&mut a, first, be);
                crate::wire::simd::counter_fill(&mut b, first, be);
                assert_eq!(a, b, "fill len {len} be {be}");
                assert_eq!(crate::wire::simd::counter_mismatch(&a, first, be), 0);
                for pos in [0, len / 2, len - 1] {
                    let mut d = a.clone();
                    d[pos] ^= 0x80;
                    let plain = mismatch_words(&d, first, be);
                    assert_ne!(plain, 0);
                    assert_eq!(crate::wire::simd::counter_mismatch(&d, first, be), plain);
                }
            }
        }
    }
}
