//! The latency probe: what `ping` puts in each datagram and `reflect` sends back unchanged.
//!
//! Everything the round-trip calculation needs travels in the payload, so the reflector keeps
//! no state and any reflector (wirespeed's, or any UDP echo server) works:
//!
//! | offset | bytes | field |
//! |---:|---:|---|
//! | 0 | 4 | magic `WSRT` |
//! | 4 | 4 | session (random per ping run, big endian): replies to another run are strays |
//! | 8 | 8 | sequence number (big endian), 0 for the first probe |
//! | 16 | 8 | send time, the sender's CLOCK_MONOTONIC in ns (big endian) |
//! | 24 | .. | filler: byte `i` is `i as u8` |

/// The probe's magic bytes.
pub const MAGIC: [u8; 4] = *b"WSRT";
/// Smallest probe: the header alone.
pub const MIN_SIZE: usize = 24;

/// What a reply said about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The ping run that sent it.
    pub session: u32,
    /// Its number in that run.
    pub seq: u64,
    /// When it was sent, sender's monotonic clock in ns.
    pub sent_ns: u64,
}

/// Why a reply was not a probe of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// Shorter than the header or not the size that was sent.
    Size,
    /// The magic bytes are wrong: not a wirespeed probe.
    Magic,
}

/// Fill a probe buffer once: the filler never changes, only the header does.
pub fn init(buf: &mut [u8], session: u32) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = i as u8;
    }
    if buf.len() >= MIN_SIZE {
        buf[..4].copy_from_slice(&MAGIC);
        buf[4..8].copy_from_slice(&session.to_be_bytes());
    }
}

/// Stamp the per-probe fields into a buffer prepared by [`init`].
#[inline]
pub fn stamp(buf: &mut [u8], seq: u64, sent_ns: u64) {
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
    buf[16..24].copy_from_slice(&sent_ns.to_be_bytes());
}

/// Read a reply; `size` is the probe size that was sent (a reply of another size was damaged
/// or truncated on the way).
#[inline]
pub fn parse(buf: &[u8], size: usize) -> Result<Probe, Bad> {
    if buf.len() < MIN_SIZE || buf.len() != size {
        return Err(Bad::Size);
    }
    if buf[..4] != MAGIC {
        return Err(Bad::Magic);
    }
    let u32_at = |o: usize| u32::from_be_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
    let u64_at = |o: usize| (u64::from(u32_at(o)) << 32) | u64::from(u32_at(o + 4));
    Ok(Probe { session: u32_at(4), seq: u64_at(8), sent_ns: u64_at(16) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let mut b = vec![0u8; 64];
        init(&mut b, 0xdead_beef);
        stamp(&mut b, 0x0102_0304_0506_0708, 123_456_789_012);
        assert_eq!(
            parse(&b, 64),
            Ok(Probe { session: 0xdead_beef, seq: 0x0102_0304_0506_0708, sent_ns: 123_456_789_012 })
        );
        assert_eq!(b[63], 63);
        assert_eq!(parse(&b[..63], 64), Err(Bad::Size));
        assert_eq!(parse(&b[..20], 20), Err(Bad::Size));
        b[0] = b'X';
        assert_eq!(parse(&b, 64), Err(Bad::Magic));
        let mut small = vec![0u8; MIN_SIZE];
        init(&mut small, 7);
        stamp(&mut small, 1, 2);
        assert_eq!(parse(&small, MIN_SIZE).map(|p| p.seq), Ok(1));
    }
}
