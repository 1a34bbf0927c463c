//! What every byte-layout view shares: the short-buffer error, typed reads and writes of a
//! field given by its byte range, bit fields inside little-endian 32-bit words, and the 8-byte
//! packet sequence number (PSN) prefix that VTP and Mark5C-style datagrams put before a frame.
//!
//! A view (smoltcp's wire module is the model) wraps a buffer, `Header<T: AsRef<[u8]>>`, and
//! names each field once in a private `field` module of offsets. Getters need only
//! `AsRef<[u8]>`, setters `AsMut<[u8]>`, so one definition serves both the sender that writes a
//! layout and the receiver that checks it: the two can no longer disagree about where a field
//! sits. `new_checked` refuses a buffer too short for the layout; after that the accessors index
//! without further checks. The format-specific views live beside their formats
//! ([`super::vdif::Header`], [`super::mark5b::Header`], [`super::net`], ...); only what more
//! than one of them needs is here.

use std::fmt;
use std::ops::Range;

/// A buffer is shorter than the layout a view was asked to read or write in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncated {
    /// Bytes the layout needs.
    pub need: usize,
    /// Bytes the buffer has.
    pub have: usize,
}

impl fmt::Display for Truncated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes where the layout needs {}", self.have, self.need)
    }
}

impl std::error::Error for Truncated {}

/// `Ok` when `buf` holds at least `need` bytes: what every `new_checked` asks first.
#[inline]
pub fn check_len(buf: &[u8], need: usize) -> Result<(), Truncated> {
    if buf.len() < need {
        Err(Truncated { need, have: buf.len() })
    } else {
        Ok(())
    }
}

/// A field's place: its byte range in the layout.
pub type Field = Range<usize>;

macro_rules! int_accessors {
    ($t:ty, $n:literal, $get_le:ident, $get_be:ident, $set_le:ident, $set_be:ident) => {
        #[doc = concat!("The little-endian `", stringify!($t), "` at `f` (exactly ", $n, " bytes).")]
        #[inline(always)]
        pub fn $get_le(b: &[u8], f: Field) -> $t {
            let mut a = [0u8; $n];
            a.copy_from_slice(&b[f]);
            <$t>::from_le_bytes(a)
        }
        #[doc = concat!("The big-endian `", stringify!($t), "` at `f` (exactly ", $n, " bytes).")]
        #[inline(always)]
        pub fn $get_be(b: &[u8], f: Field) -> $t {
            let mut a = [0u8; $n];
            a.copy_from_slice(&b[f]);
            <$t>::from_be_bytes(a)
        }
        #[doc = concat!("Write `v` little-endian at `f` (exactly ", $n, " bytes).")]
        #[inline(always)]
        pub fn $set_le(b: &mut [u8], f: Field, v: $t) {
            b[f].copy_from_slice(&v.to_le_bytes());
        }
        #[doc = concat!("Write `v` big-endian at `f` (exactly ", $n, " bytes).")]
        #[inline(always)]
        pub fn $set_be(b: &mut [u8], f: Field, v: $t) {
            b[f].copy_from_slice(&v.to_be_bytes());
        }
    };
}

int_accessors!(u16, 2, le_u16, be_u16, set_le_u16, set_be_u16);
int_accessors!(u32, 4, le_u32, be_u32, set_le_u32, set_be_u32);
int_accessors!(u64, 8, le_u64, be_u64, set_le_u64, set_be_u64);

/// A bit field inside a little-endian 32-bit word of a header (VDIF and Mark5B headers are made
/// of such words): word index, lowest bit, width in bits. Reading and writing both go through
/// the same constant, so a field's shift and mask are written once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bits {
    /// Index of the 32-bit word (bytes `4 * word .. 4 * word + 4`).
    pub word: usize,
    /// Lowest bit of the field (bit 0 = least significant).
    pub lo: u32,
    /// Width in bits (1..=32).
    pub width: u32,
}

impl Bits {
    /// The field `word`, bits `lo .. lo + width`.
    pub const fn new(word: usize, lo: u32, width: u32) -> Bits {
        Bits { word, lo, width }
    }

    /// The field's mask within its word.
    #[inline(always)]
    pub const fn mask(self) -> u32 {
        (u32::MAX >> (32 - self.width)) << self.lo
    }

    #[inline(always)]
    fn range(self) -> Field {
        4 * self.word..4 * self.word + 4
    }

    /// The field's value (unshifted to bit 0).
    #[inline(always)]
    pub fn get(self, b: &[u8]) -> u32 {
        (le_u32(b, self.range()) & self.mask()) >> self.lo
    }

    /// Write `v` into the field (bits of `v` beyond the width are dropped); the rest of the word
    /// is kept.
    #[inline(always)]
    pub fn set(self, b: &mut [u8], v: u32) {
        let w = le_u32(b, self.range());
        set_le_u32(b, self.range(), (w & !self.mask()) | ((v << self.lo) & self.mask()));
    }
}

/// Length of a packet sequence number prefix.
pub const PSN_LEN: usize = 8;

/// A datagram that starts with an 8-byte little-endian packet sequence number (PSN) before the
/// frame it carries: VTP (VDIF over UDP) and Mark5C-style Mark5B.
#[derive(Clone, Copy, Debug)]
pub struct Psn<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Psn<T> {
    /// A view of `buffer` without checking its length (accessors then panic on a short one).
    #[inline]
    pub fn new_unchecked(buffer: T) -> Psn<T> {
        Psn { buffer }
    }

    /// A view of `buffer`, refused when it cannot hold the PSN.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Psn<T>, Truncated> {
        check_len(buffer.as_ref(), PSN_LEN)?;
        Ok(Psn { buffer })
    }

    /// The packet sequence number.
    #[inline]
    pub fn psn(&self) -> u64 {
        le_u64(self.buffer.as_ref(), 0..PSN_LEN)
    }

    /// The frame after the PSN.
    #[inline]
    pub fn frame(&self) -> &[u8] {
        &self.buffer.as_ref()[PSN_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Psn<T> {
    /// Write the packet sequence number.
    #[inline]
    pub fn set_psn(&mut self, psn: u64) {
        set_le_u64(self.buffer.as_mut(), 0..PSN_LEN, psn);
    }

    /// The frame after the PSN, to write.
    #[inline]
    pub fn frame_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[PSN_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip_and_keep_their_neighbours() {
        let f = Bits::new(1, 16, 10);
        let mut b = [0xFFu8; 8];
        f.set(&mut b, 0x155);
        assert_eq!(f.get(&b), 0x155);
        assert_eq!(le_u32(&b, 4..8), 0xFD55_FFFF, "bits outside the field untouched");
        f.set(&mut b, 0xFFFF_FC00);
        assert_eq!(f.get(&b), 0, "bits beyond the width dropped");
        assert_eq!(le_u32(&b, 0..4), u32::MAX, "other words untouched");
        let whole = Bits::new(0, 0, 32);
        whole.set(&mut b, 0xABAD_DEED);
        assert_eq!(&b[..4], &[0xED, 0xDE, 0xAD, 0xAB]);
        assert_eq!(whole.get(&b), 0xABAD_DEED);
    }

    #[test]
    fn integers_in_both_orders() {
        let mut b = [0u8; 8];
        set_be_u16(&mut b, 2..4, 0x1234);
        assert_eq!(&b[2..4], &[0x12, 0x34]);
        assert_eq!(be_u16(&b, 2..4), 0x1234);
        assert_eq!(le_u16(&b, 2..4), 0x3412);
        set_le_u64(&mut b, 0..8, 0x0102_0304_0506_0708);
        assert_eq!(be_u64(&b, 0..8), 0x0807_0605_0403_0201);
        set_be_u32(&mut b, 4..8, 7);
        assert_eq!(le_u32(&b, 4..8), 7 << 24);
    }

    #[test]
    fn psn_round_trips_and_refuses_short_buffers() {
        let mut b = [0u8; 12];
        let mut v = Psn::new_checked(&mut b[..]).unwrap();
        v.set_psn(0x1122_3344_5566_7788);
        v.frame_mut().copy_from_slice(&[1, 2, 3, 4]);
        let r = Psn::new_checked(&b[..]).unwrap();
        assert_eq!(r.psn(), 0x1122_3344_5566_7788);
        assert_eq!(r.frame(), &[1, 2, 3, 4]);
        assert_eq!(&b[..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(Psn::new_checked(&b[..7]).unwrap_err(), Truncated { need: 8, have: 7 });
    }
}
