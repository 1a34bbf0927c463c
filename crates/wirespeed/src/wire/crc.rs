//! CRC-16 with polynomial 0x8005, initial value 0, no reflection and no final xor (the
//! "CRC-16/UMTS" parameters), as used by the Mark5B header (formats.md section 3).
//!
//! Table-driven, one byte per step; the table is built at compile time so there is no
//! start-up cost and no allocation.

/// The generator polynomial (x^16 + x^15 + x^2 + 1, top bit implicit).
pub const POLY: u16 = 0x8005;

const fn make_table() -> [u16; 256] {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u16) << 8;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x8000 != 0 { (c << 1) ^ POLY } else { c << 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static TABLE: [u16; 256] = make_table();

/// CRC of `data`, most significant bit of each byte first. Mark5B feeds it the six bytes
/// word 2 (big-endian) then the top half of word 3 (see `mark5b`).
#[inline]
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &b in data {
        crc = (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ b)];
    }
    crc
}

/// Bit-at-a-time reference implementation, kept for the tests: it is the definition the table
/// must agree with.
#[cfg(test)]
fn crc16_bitwise(data: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &b in data {
        for i in (0..8).rev() {
            let bit = (b >> i) & 1 != 0;
            let top = crc & 0x8000 != 0;
            crc <<= 1;
            if bit != top {
                crc ^= POLY;
            }
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_value_of_the_catalogue() {
        // CRC-16/UMTS check value (formats.md, verified there).
        assert_eq!(crc16(b"123456789"), 0xFEE8);
        assert_eq!(crc16_bitwise(b"123456789"), 0xFEE8);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn table_matches_the_definition() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for len in 0..64 {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            assert_eq!(crc16(&data), crc16_bitwise(&data), "len {len}");
        }
    }

    #[test]
    fn mark5b_test_vector() {
        // Word 2 = 0x82119801 then the top half of word 3 (0x0000): CRC 0x975D.
        assert_eq!(crc16(&[0x82, 0x11, 0x98, 0x01, 0x00, 0x00]), 0x975D);
    }
}
