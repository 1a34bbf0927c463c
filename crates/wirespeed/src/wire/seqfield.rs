//! A sequence number field at a fixed offset: the generic setting for instruments with their
//! own header (formats.md section 1, e.g. a 64-bit big-endian packet counter followed by a
//! channel id), where only the counter matters for loss.
//!
//! The field is `width` bytes (1..=8) at `offset`, in either byte order; its value is the
//! packet's sequence number, so the ledger wraps at `2^(8*width)`. Everything else in the
//! datagram is a [`Fill`] (checked unless it is `any`), positioned at `seq * len` bytes in the
//! stream so that a counter fill continues across packets.

use super::fill::{At, Fill};
use super::{ByteOrder, Format, Invalid, PacketInfo};

/// A datagram whose sequence number is one field at a fixed offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqField {
    offset: usize,
    width: usize,
    order: ByteOrder,
    len: Option<usize>,
    fill: Fill,
}

impl SeqField {
    /// Field of `width` bytes (1..=8) at `offset` in `order`; datagrams of exactly `len` bytes,
    /// or any length that holds the field when `len` is `None` (receive only: a sender then
    /// emits the shortest datagram, `offset + width` bytes).
    pub fn new(offset: usize, width: usize, order: ByteOrder, len: Option<usize>, fill: Fill) -> Result<Self, String> {
        if !(1..=8).contains(&width) {
            return Err(format!("sequence field width {width} must be 1 to 8 bytes"));
        }
        if offset > 65507 {
            return Err(format!("sequence field offset {offset} is beyond the largest UDP payload (65507)"));
        }
        if let Some(l) = len {
            if l < offset + width || l > 65507 {
                return Err(format!(
                    "datagram size {l} must hold the sequence field (offset {offset} + width {width} = {} bytes) and be at most 65507",
                    offset + width
                ));
            }
        }
        Ok(SeqField { offset, width, order, len, fill })
    }

    #[inline]
    fn mask(&self) -> u64 {
        u64::MAX >> (64 - 8 * self.width)
    }
}

impl Format for SeqField {
    fn name(&self) -> String {
        format!("seqfield/{}@{}/{}", 8 * self.width, self.offset, self.order)
    }

    fn packet_len(&self) -> usize {
        self.len.unwrap_or(self.offset + self.width)
    }

    fn fixed_len(&self) -> Option<usize> {
        self.len
    }

    fn seq_bits(&self) -> u32 {
        8 * self.width as u32
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn spec(&self) -> String {
        let size = self.len.map(|l| format!(",size={l}")).unwrap_or_default();
        format!("seqfield,offset={},width={},order={}{size},fill={}", self.offset, self.width, self.order, self.fill)
    }

    fn emit(&self, stream: u32, seq: u64, buf: &mut [u8]) {
        let seq = seq & self.mask();
        let offset = seq.wrapping_mul(buf.len() as u64);
        let at = At { stream, seq, offset, offset_in_second: offset };
        self.fill.emit(buf, &at);
        let (o, w) = (self.offset, self.width);
        if buf.len() < o + w {
            return; // a caller bug; never panic on the send path either
        }
        match self.order {
            ByteOrder::Be => buf[o..o + w].copy_from_slice(&seq.to_be_bytes()[8 - w..]),
            ByteOrder::Le => buf[o..o + w].copy_from_slice(&seq.to_le_bytes()[..w]),
        }
    }

    fn check(&self, buf: &[u8]) -> Result<PacketInfo, Invalid> {
        let (o, w) = (self.offset, self.width);
        if buf.len() < o + w || self.len.is_some_and(|l| l != buf.len()) {
            return Err(Invalid::Length);
        }
        let mut a = [0u8; 8];
        let seq = match self.order {
            ByteOrder::Be => {
                a[8 - w..].copy_from_slice(&buf[o..o + w]);
                u64::from_be_bytes(a)
            }
            ByteOrder::Le => {
                a[..w].copy_from_slice(&buf[o..o + w]);
                u64::from_le_bytes(a)
            }
        };
        if self.fill != Fill::Any {
            let base = seq.wrapping_mul(buf.len() as u64);
            let at = At { stream: 0, seq, offset: base, offset_in_second: base };
            let rest = base.wrapping_add((o + w) as u64);
            let after = At { offset: rest, offset_in_second: rest, ..at };
            if !self.fill.check(&buf[..o], &at) || !self.fill.check(&buf[o + w..], &after) {
                return Err(Invalid::Payload);
            }
        }
        Ok(PacketInfo::new(0, seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_layout_and_round_trip() {
        // A 64-bit big-endian sequence number then a channel id (formats.md section 1).
        let f = SeqField::new(0, 8, ByteOrder::Be, Some(1024), Fill::Counter).unwrap();
        let mut b = vec![0u8; 1024];
        f.emit(0, 0x0102_0304_0506_0708, &mut b);
        assert_eq!(&b[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(f.check(&b), Ok(PacketInfo::new(0, 0x0102_0304_0506_0708)));
        assert_eq!(f.seq_bits(), 64);
        // Every width, offset and order, including the wrap of the field.
        for width in 1..=8usize {
            for order in [ByteOrder::Be, ByteOrder::Le] {
                for fill in [Fill::Any, Fill::Zeros, Fill::Counter, Fill::Random(3), Fill::Tvg] {
                    let g = SeqField::new(5, width, order, Some(64), fill).unwrap();
                    let max = u64::MAX >> (64 - 8 * width);
                    let mut b = vec![0u8; 64];
                    for seq in [0, 1, max - 1, max] {
                        g.emit(0, seq, &mut b);
                        assert_eq!(g.check(&b).unwrap().seq, seq, "{}", g.spec());
                    }
                    g.emit(0, max + 1, &mut b);
                    assert_eq!(g.check(&b).unwrap().seq, 0, "wraps at 2^{}", 8 * width);
                    assert_eq!(g.seq_bits(), 8 * width as u32);
                }
            }
        }
        let le = SeqField::new(2, 3, ByteOrder::Le, None, Fill::Any).unwrap();
        assert_eq!(le.check(&[9, 9, 0x56, 0x34, 0x12]).unwrap().seq, 0x123456);
    }

    #[test]
    fn malformed_input() {
        let f = SeqField::new(4, 4, ByteOrder::Be, Some(32), Fill::Counter).unwrap();
        let mut b = vec![0u8; 32];
        f.emit(0, 77, &mut b);
        for n in 0..32 {
            assert_eq!(f.check(&b[..n]), Err(Invalid::Length), "truncated to {n}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(f.check(&longer), Err(Invalid::Length));
        for i in (0..4).chain(8..32) {
            let mut d = b.clone();
            d[i] ^= 0x40;
            assert_eq!(f.check(&d), Err(Invalid::Payload), "flip at {i}");
        }
        let any = SeqField::new(4, 4, ByteOrder::Be, None, Fill::Any).unwrap();
        assert_eq!(any.check(&b[..8]).unwrap().seq, 77);
        assert_eq!(any.check(&b[..7]), Err(Invalid::Length));
    }

    #[test]
    fn bad_settings_refused() {
        assert!(SeqField::new(0, 0, ByteOrder::Be, None, Fill::Any).is_err());
        assert!(SeqField::new(0, 9, ByteOrder::Be, None, Fill::Any).is_err());
        assert!(SeqField::new(10, 8, ByteOrder::Be, Some(17), Fill::Any).unwrap_err().contains("hold"));
        assert!(SeqField::new(70000, 1, ByteOrder::Be, None, Fill::Any).is_err());
    }
}
