//! Stream ids with a meaning shared by all formats.

/// [`super::PacketInfo::stream`] of datagrams that are valid but carry no position in any
/// sequence: SPEAD stream-control and descriptor heaps, and Mark5B second halves that have no
/// header and no PSN (with a fill that cannot number them). Their `seq` is always 0.
///
/// Why a stream and not an error: such datagrams are not damaged and must not be counted as
/// invalid, and they must not enter a data stream's ledger (they would be seen as loss or as
/// duplicates there). A receiver should count them apart; one that does not will show them as
/// one stream of duplicates of number 0, which is harmless to the other streams' loss counts.
pub const UNSEQUENCED: u32 = u32::MAX;

/// A stream's datagram length, fixed by its first valid datagrams, for formats whose reading
/// depends on the datagram's own length and that fix none themselves
/// ([`super::Format::length_locked`], e.g. the counter without `size=`, whose words per packet
/// come from the length). Without it, a truncated datagram is read as a valid one with another
/// sequence number and invents loss.
///
/// The first valid datagram is *held* (its number not yet given to the ledger) until a second
/// valid datagram of the same length confirms it; if the second is longer, the held one is
/// taken for a truncated copy (truncation only shortens) and the longer one is held instead.
/// So one odd first datagram does not fix a wrong length for the whole run. Once locked, a
/// datagram of another length is invalid ([`super::Invalid::Length`]). No allocation: a few
/// words of state per stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LengthLock {
    /// No valid datagram yet.
    #[default]
    Open,
    /// One valid datagram of this length, number `seq`, awaits confirmation.
    Held {
        /// Its length.
        len: usize,
        /// Its sequence number.
        seq: u64,
    },
    /// The stream's length.
    Locked(usize),
}

impl LengthLock {
    /// The stream's length once known (locked, or held awaiting confirmation).
    pub fn known_len(&self) -> Option<usize> {
        match *self {
            LengthLock::Open => None,
            LengthLock::Held { len, .. } | LengthLock::Locked(len) => Some(len),
        }
    }
}

/// What to do with a valid datagram, by [`LengthLock::admit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Its length is the stream's: account for it.
    Now,
    /// The first of the stream: held, nothing to account for yet.
    Held,
    /// It confirmed the held datagram: account for that number first, then this one.
    WithHeld(u64),
    /// Wrong length: invalid.
    Wrong,
    /// Longer than the held datagram, which is therefore invalid; this one is held instead.
    ReplacesHeld,
}

impl LengthLock {
    /// Judge a valid datagram of `len` bytes with number `seq`.
    #[inline]
    pub fn admit(&mut self, len: usize, seq: u64) -> Admit {
        match *self {
            LengthLock::Locked(l) if l == len => Admit::Now,
            LengthLock::Locked(_) => Admit::Wrong,
            LengthLock::Open => {
                *self = LengthLock::Held { len, seq };
                Admit::Held
            }
            LengthLock::Held { len: h, seq: s } if h == len => {
                *self = LengthLock::Locked(h);
                Admit::WithHeld(s)
            }
            LengthLock::Held { len: h, .. } if len > h => {
                *self = LengthLock::Held { len, seq };
                Admit::ReplacesHeld
            }
            LengthLock::Held { .. } => Admit::Wrong,
        }
    }

    /// Lock the held datagram's length (the stream ended, or must be judged, before a second
    /// datagram confirmed it) and return its number for the ledger.
    pub fn flush(&mut self) -> Option<u64> {
        match *self {
            LengthLock::Held { len, seq } => {
                *self = LengthLock::Locked(len);
                Some(seq)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_two_agreeing_lengths_lock() {
        let mut l = LengthLock::default();
        assert_eq!(l.admit(8800, 0), Admit::Held);
        assert_eq!(l.admit(8800, 1), Admit::WithHeld(0));
        assert_eq!(l.admit(8, 11_000), Admit::Wrong);
        assert_eq!(l.admit(4400, 20), Admit::Wrong);
        assert_eq!(l.admit(8800, 2), Admit::Now);
        assert_eq!(l.flush(), None);
    }

    #[test]
    fn a_truncated_first_datagram_does_not_fix_the_length() {
        let mut l = LengthLock::default();
        assert_eq!(l.admit(8, 11_000), Admit::Held);
        assert_eq!(l.admit(8800, 11), Admit::ReplacesHeld);
        assert_eq!(l.admit(4400, 24), Admit::Wrong);
        assert_eq!(l.admit(8800, 12), Admit::WithHeld(11));
        assert_eq!(l, LengthLock::Locked(8800));
    }

    #[test]
    fn a_lone_datagram_is_flushed_at_the_end() {
        let mut l = LengthLock::default();
        assert_eq!(l.admit(64, 5), Admit::Held);
        assert_eq!(l.flush(), Some(5));
        assert_eq!(l.admit(64, 6), Admit::Now);
    }
}
