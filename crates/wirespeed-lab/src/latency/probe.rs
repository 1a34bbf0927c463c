//! The latency probe: what `ping` puts in each datagram and `reflect` sends back.
//!
//! Everything the round-trip calculation needs travels in the payload, so the reflector keeps
//! no per-probe state and any reflector (wirespeed's, or any UDP echo server) works:
//!
//! | offset | bytes | field |
//! |---:|---:|---|
//! | 0 | 4 | magic: `WSRT` in a probe, `WSRR` in a wirespeed reflector's reply |
//! | 4 | 4 | session (random per ping run, big endian): replies to another run are strays |
//! | 8 | 8 | sequence number (big endian), 0 for the first probe |
//! | 16 | 8 | send time, the sender's CLOCK_MONOTONIC in ns (big endian) |
//! | 24 | .. | filler: byte `i` is `i as u8` |
//!
//! The last magic byte is the direction. A wirespeed reflector answers only probes (`WSRT`)
//! and turns each into a reply (`WSRR`), so it never answers a reply: two reflectors, or a
//! reflector and itself, joined by one forged datagram exchange exactly one message instead of
//! echoing it between them forever. A plain UDP echo server sends the probe back unchanged,
//! so `ping` accepts both magics as replies. (A ping older than this direction byte counts a
//! `WSRR` reply as invalid: use the same version at both ends.)

/// The probe's magic bytes (a probe on its way to the reflector).
pub const MAGIC: [u8; 4] = *b"WSRT";
/// A wirespeed reflector's reply: the probe's magic with the direction byte turned.
pub const REPLY_MAGIC: [u8; 4] = *b"WSRR";
/// Smallest probe: the header alone.
pub const MIN_SIZE: usize = 24;

/// What a datagram is, to a reflector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A wirespeed probe: the one thing a reflector answers.
    Probe,
    /// A wirespeed reflector's reply: never answered (that is how reflectors loop).
    Reply,
    /// Anything else: not a wirespeed probe, never answered.
    Other,
}

/// Tell a probe from a reply and from anything else (magic and minimum size only: the
/// reflector's per-datagram check).
#[inline]
pub fn classify(buf: &[u8]) -> Kind {
    if buf.len() < MIN_SIZE {
        return Kind::Other;
    }
    match [buf[0], buf[1], buf[2], buf[3]] {
        MAGIC => Kind::Probe,
        REPLY_MAGIC => Kind::Reply,
        _ => Kind::Other,
    }
}

/// Turn a probe into its reply in place (the direction byte); the rest goes back unchanged.
#[inline]
pub fn mark_reply(buf: &mut [u8]) {
    buf[3] = REPLY_MAGIC[3];
}

/// A fresh session number for a ping run, from the randomly keyed hasher of the standard
/// library: a forger who cannot see the probes has to guess it (and the exact send time of a
/// probe, which ping checks too).
pub fn new_session() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(wirespeed::sys::monotonic_ns());
    h.write_u32(std::process::id());
    let v = h.finish();
    (v ^ (v >> 32)) as u32
}

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
/// or truncated on the way). A wirespeed reflector's reply (`WSRR`) and a probe sent back
/// unchanged by a plain echo server (`WSRT`) are both replies.
#[inline]
pub fn parse(buf: &[u8], size: usize) -> Result<Probe, Bad> {
    if buf.len() < MIN_SIZE || buf.len() != size {
        return Err(Bad::Size);
    }
    if buf[..4] != MAGIC && buf[..4] != REPLY_MAGIC {
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

    #[test]
    fn a_reply_is_told_from_a_probe() {
        let mut b = vec![0u8; 64];
        init(&mut b, 9);
        stamp(&mut b, 5, 6);
        assert_eq!(classify(&b), Kind::Probe);
        mark_reply(&mut b);
        assert_eq!(&b[..4], b"WSRR");
        assert_eq!(classify(&b), Kind::Reply);
        // ping reads both: its probe marked by a wirespeed reflector, or echoed unchanged.
        assert_eq!(parse(&b, 64).map(|p| (p.session, p.seq, p.sent_ns)), Ok((9, 5, 6)));
        assert_eq!(classify(&b[..MIN_SIZE - 1]), Kind::Other);
        assert_eq!(classify(b"hello, anything else at all"), Kind::Other);
        assert_ne!(new_session(), new_session());
    }
}
