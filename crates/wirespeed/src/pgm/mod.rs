//! PGM (RFC 3208, Pragmatic General Multicast) over UDP, as OpenPGM and ZeroMQ's `epgm://`
//! carry it: the reliable transport seed 003 measured.
//!
//! Plain UDP can only count what a lossy path dropped; PGM lets the receiver ask for it again.
//! The source keeps what it sent in a transmit window ([`txw`]) and announces the window's
//! edges in SPMs; a receiver that sees a gap waits a random back-off, sends a NAK (unicast, to
//! the address the SPMs named), is told by an NCF that the source heard it, and gets the data
//! again as RDATA. What the receive window ([`rxw`]) cannot get back before the source's
//! window moves past it is declared unrecoverable, and counted, never silently skipped.
//!
//! Encapsulation: every PGM packet is one UDP datagram's payload ([`packet`]), as OpenPGM's
//! `PGM_UDP_ENCAP_UCAST_PORT`/`PGM_UDP_ENCAP_MCAST_PORT` put them (wirespeed uses one port
//! for both, as ZeroMQ does).

pub mod packet;
pub mod rxw;
pub mod txw;

/// The 48-bit global source identifier: with the source port it names a session (the TSI).
pub type Gsi = [u8; 6];

/// Transport session identifier: which source's stream a packet belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Tsi {
    /// The source's global id.
    pub gsi: Gsi,
    /// The source's data-source port (PGM header, not UDP).
    pub sport: u16,
}

impl std::fmt::Display for Tsi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.gsi;
        write!(f, "{}.{}.{}.{}.{}.{}.{}", g[0], g[1], g[2], g[3], g[4], g[5], self.sport)
    }
}

/// The PGM data-destination port OpenPGM uses unless told otherwise (`DEFAULT_DATA_DESTINATION_PORT`).
pub const DEFAULT_DPORT: u16 = 7500;

/// `a` comes before `b` in sequence-number space (RFC 3208 compares sequence numbers modulo
/// 2^32, as serial numbers: whichever is less than 2^31 ahead is later).
#[inline]
pub fn sqn_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` is `b` or comes before it ([`sqn_lt`]).
#[inline]
pub fn sqn_le(a: u32, b: u32) -> bool {
    a == b || sqn_lt(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_compare_across_the_wrap() {
        assert!(sqn_lt(1, 2));
        assert!(!sqn_lt(2, 1));
        assert!(sqn_lt(u32::MAX, 0));
        assert!(sqn_lt(u32::MAX - 5, 3));
        assert!(!sqn_lt(3, u32::MAX - 5));
        assert!(sqn_le(7, 7));
        assert!(!sqn_lt(7, 7));
    }
}
