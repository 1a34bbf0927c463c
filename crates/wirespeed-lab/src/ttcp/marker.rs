//! The UDP marker datagram that brackets a ttcp UDP transfer, as a typed view over its bytes.
//!
//! Layout (24 bytes, big-endian counts):
//!
//! ```text
//!  0       7    8              16             24
//!  +-------+----+--------------+--------------+
//!  | magic |kind|  datagrams   |    bytes     |
//!  +-------+----+--------------+--------------+
//!  "\0wsttcp"  'S' start (the plan), 'E' end (what was sent)
//! ```
//!
//! The offsets are written once, in `field`; [`Marker`] reads and writes them over any byte
//! buffer, and [`MarkerRepr`] is the parsed value the transmitter emits and the receiver
//! parses, so neither side spells an index.

use wirespeed::wire::Invalid;

/// Byte offsets of the marker's fields.
mod field {
    use std::ops::Range;

    /// The magic bytes ([`super::MAGIC`]).
    pub const MAGIC: Range<usize> = 0..7;
    /// Kind byte: `S` or `E`.
    pub const KIND: usize = 7;
    /// Datagrams planned (start) or sent (end), big-endian u64.
    pub const DATAGRAMS: Range<usize> = 8..16;
    /// Bytes planned (start) or sent (end), big-endian u64.
    pub const BYTES: Range<usize> = 16..24;
}

/// Bytes of a UDP marker datagram.
pub const MARKER_LEN: usize = field::BYTES.end;
/// Marker magic: a NUL byte first (the data pattern is printable ASCII, so never NUL), then
/// a name, then the kind.
const MAGIC: &[u8; 7] = b"\0wsttcp";
/// Kind byte of a start marker.
const KIND_START: u8 = b'S';
/// Kind byte of an end marker.
const KIND_END: u8 = b'E';

/// A read/write view of a marker datagram over any byte buffer (`&[u8]` to read a received
/// datagram, `&mut [u8]` or an array to build one), so the layout is spelled once for both
/// directions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Marker<T> {
    /// A view without a length check: the getters and setters panic on a short buffer. Use
    /// [`Marker::new_checked`] on anything received.
    pub fn new_unchecked(buffer: T) -> Marker<T> {
        Marker { buffer }
    }

    /// A view over a buffer long enough for every field; a shorter one is refused with
    /// [`Invalid::Length`], so no getter can panic.
    pub fn new_checked(buffer: T) -> Result<Marker<T>, Invalid> {
        let m = Marker::new_unchecked(buffer);
        m.check_len()?;
        Ok(m)
    }

    /// Whether the buffer holds every field.
    pub fn check_len(&self) -> Result<(), Invalid> {
        if self.buffer.as_ref().len() < MARKER_LEN {
            Err(Invalid::Length)
        } else {
            Ok(())
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Whether the magic bytes are there (data never starts with NUL, a marker always does).
    pub fn has_magic(&self) -> bool {
        &self.buffer.as_ref()[field::MAGIC] == MAGIC
    }

    /// The kind byte (`S` start, `E` end).
    pub fn kind(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }

    /// Datagrams planned (start) or sent (end).
    pub fn datagrams(&self) -> u64 {
        u64::from_be_bytes(self.buffer.as_ref()[field::DATAGRAMS].try_into().expect("8-byte field"))
    }

    /// Bytes planned (start) or sent (end).
    pub fn bytes(&self) -> u64 {
        u64::from_be_bytes(self.buffer.as_ref()[field::BYTES].try_into().expect("8-byte field"))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Marker<T> {
    /// Write the magic bytes.
    pub fn set_magic(&mut self) {
        self.buffer.as_mut()[field::MAGIC].copy_from_slice(MAGIC);
    }

    /// Write the kind byte.
    pub fn set_kind(&mut self, kind: u8) {
        self.buffer.as_mut()[field::KIND] = kind;
    }

    /// Write the datagram count.
    pub fn set_datagrams(&mut self, v: u64) {
        self.buffer.as_mut()[field::DATAGRAMS].copy_from_slice(&v.to_be_bytes());
    }

    /// Write the byte count.
    pub fn set_bytes(&mut self, v: u64) {
        self.buffer.as_mut()[field::BYTES].copy_from_slice(&v.to_be_bytes());
    }
}

/// What a marker datagram says: `Start` carries the transmitter's plan, `End` what it really
/// sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerRepr {
    /// Sent once before the data: planned datagrams and bytes.
    Start {
        /// Datagrams the transmitter means to send.
        datagrams: u64,
        /// Bytes the transmitter means to send.
        bytes: u64,
    },
    /// Sent after the data, several times: datagrams and bytes actually sent.
    End {
        /// Datagrams sent.
        datagrams: u64,
        /// Bytes sent.
        bytes: u64,
    },
}

impl MarkerRepr {
    /// The marker a view holds, or `None` for data: a marker datagram is exactly
    /// [`MARKER_LEN`] bytes with the magic and a known kind.
    pub fn parse<T: AsRef<[u8]>>(m: &Marker<T>) -> Option<MarkerRepr> {
        if m.buffer.as_ref().len() != MARKER_LEN || !m.has_magic() {
            return None;
        }
        let (datagrams, bytes) = (m.datagrams(), m.bytes());
        match m.kind() {
            KIND_START => Some(MarkerRepr::Start { datagrams, bytes }),
            KIND_END => Some(MarkerRepr::End { datagrams, bytes }),
            _ => None,
        }
    }

    /// Write this marker into a view (its buffer at least [`MARKER_LEN`] bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut Marker<T>) {
        let (kind, datagrams, bytes) = match *self {
            MarkerRepr::Start { datagrams, bytes } => (KIND_START, datagrams, bytes),
            MarkerRepr::End { datagrams, bytes } => (KIND_END, datagrams, bytes),
        };
        m.set_magic();
        m.set_kind(kind);
        m.set_datagrams(datagrams);
        m.set_bytes(bytes);
    }

    /// The datagram that carries this marker.
    pub fn encode(&self) -> [u8; MARKER_LEN] {
        let mut m = Marker::new_unchecked([0u8; MARKER_LEN]);
        self.emit(&mut m);
        m.into_inner()
    }

    /// The marker in a received datagram, or `None` for data (the pattern never starts with
    /// NUL) and for anything too short to be one.
    pub fn decode(buf: &[u8]) -> Option<MarkerRepr> {
        MarkerRepr::parse(&Marker::new_checked(buf).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ttcp::pattern;

    #[test]
    fn markers_round_trip_and_data_is_never_a_marker() {
        for m in [
            MarkerRepr::Start { datagrams: 126976, bytes: 126976 * 49152 },
            MarkerRepr::End { datagrams: 3, bytes: u64::MAX },
        ] {
            assert_eq!(MarkerRepr::decode(&m.encode()), Some(m));
        }
        let p = pattern(MARKER_LEN);
        assert_eq!(MarkerRepr::decode(&p), None);
        assert!(pattern(100_000).iter().all(|&c| (b' '..=b'~').contains(&c)));
        let mut bad = MarkerRepr::End { datagrams: 1, bytes: 1 }.encode();
        bad[7] = b'X';
        assert_eq!(MarkerRepr::decode(&bad), None);
        assert_eq!(MarkerRepr::decode(&MarkerRepr::End { datagrams: 1, bytes: 1 }.encode()[..20]), None);
    }

    #[test]
    fn the_view_reads_back_what_its_setters_wrote() {
        let mut buf = [0xffu8; MARKER_LEN];
        let mut m = Marker::new_checked(&mut buf[..]).unwrap();
        m.set_magic();
        m.set_kind(b'E');
        m.set_datagrams(0x0102_0304_0506_0708);
        m.set_bytes(u64::MAX - 1);
        assert!(m.has_magic());
        assert_eq!((m.kind(), m.datagrams(), m.bytes()), (b'E', 0x0102_0304_0506_0708, u64::MAX - 1));
        // The layout on the wire: magic, kind, then both counts big-endian.
        assert_eq!(&buf[..8], b"\0wsttcpE");
        assert_eq!(buf[8..16], [1, 2, 3, 4, 5, 6, 7, 8]);
        let repr = MarkerRepr::End { datagrams: 0x0102_0304_0506_0708, bytes: u64::MAX - 1 };
        assert_eq!(MarkerRepr::parse(&Marker::new_checked(&buf[..]).unwrap()), Some(repr));
        assert_eq!(repr.encode(), buf, "emit writes every byte of the layout");
    }

    #[test]
    fn short_buffers_are_refused() {
        let full = MarkerRepr::Start { datagrams: 1, bytes: 2 }.encode();
        for n in 0..MARKER_LEN {
            assert_eq!(Marker::new_checked(&full[..n]), Err(Invalid::Length), "{n} bytes");
            assert_eq!(MarkerRepr::decode(&full[..n]), None);
        }
        assert!(Marker::new_checked(&full[..]).is_ok());
        // Longer than a marker: a view fits, but such a datagram is data, not a marker.
        let mut long = full.to_vec();
        long.push(b'x');
        assert!(Marker::new_checked(&long[..]).is_ok());
        assert_eq!(MarkerRepr::decode(&long), None);
    }
}
