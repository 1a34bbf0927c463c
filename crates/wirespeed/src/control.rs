//! The sender's end-of-stream message.
//!
//! Loss after the last packet a receiver saw (tail loss), and before the first (head loss), is
//! invisible to a sequence-number ledger: only the sender knows how far it went. A wirespeed
//! sender therefore ends every stream with a small control datagram, from the stream's own
//! socket, saying which sequence numbers it generated and how many it left out on purpose. The
//! layout is fixed, little-endian and checksummed so that no data packet is mistaken for it.

use crate::wire::view::{check_len, le_u32, le_u64, set_le_u32, set_le_u64, Truncated};

/// Length of an end-of-stream datagram.
pub const END_LEN: usize = 80;
const MAGIC: &[u8; 8] = b"WSPDEND1";

/// Where each field of the 80-byte message sits (little-endian throughout).
mod field {
    use crate::wire::view::Field;
    pub const MAGIC: Field = 0..8;
    pub const STREAM_INDEX: Field = 8..12;
    pub const STREAM_COUNT: Field = 12..16;
    pub const FORMAT_STREAM: Field = 16..20;
    // 20..24 reserved, zero.
    pub const SESSION: Field = 24..32;
    pub const FIRST_SEQ: Field = 32..40;
    pub const LAST_SEQ: Field = 40..48;
    pub const SENT: Field = 48..56;
    pub const SKIPPED: Field = 56..64;
    // 64..72 reserved, zero.
    /// FNV-1a of every byte before it.
    pub const CHECKSUM: Field = 72..80;
}

/// A view of an end-of-stream datagram's bytes: the one place that knows its layout. Build the
/// message with [`EndOfStream::encode`] and read it with [`EndOfStream::decode`]; both go
/// through this view.
#[derive(Clone, Copy, Debug)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without a length check (accessors panic on a buffer shorter than [`END_LEN`]).
    pub fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view, refused when the buffer is shorter than [`END_LEN`].
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Truncated> {
        check_len(buffer.as_ref(), END_LEN)?;
        Ok(Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Whether the magic string is there.
    pub fn magic_ok(&self) -> bool {
        &self.b()[field::MAGIC] == MAGIC
    }

    /// Whether the checksum matches the bytes before it.
    pub fn checksum_ok(&self) -> bool {
        le_u64(self.b(), field::CHECKSUM) == fnv1a(&self.b()[..field::CHECKSUM.start])
    }

    /// This stream's index within the run.
    pub fn stream_index(&self) -> u32 {
        le_u32(self.b(), field::STREAM_INDEX)
    }
    /// How many streams the run has.
    pub fn stream_count(&self) -> u32 {
        le_u32(self.b(), field::STREAM_COUNT)
    }
    /// The format's stream id.
    pub fn format_stream(&self) -> u32 {
        le_u32(self.b(), field::FORMAT_STREAM)
    }
    /// The sender run's random session id.
    pub fn session(&self) -> u64 {
        le_u64(self.b(), field::SESSION)
    }
    /// First sequence number generated.
    pub fn first_seq(&self) -> u64 {
        le_u64(self.b(), field::FIRST_SEQ)
    }
    /// Last sequence number generated.
    pub fn last_seq(&self) -> u64 {
        le_u64(self.b(), field::LAST_SEQ)
    }
    /// Datagrams sent.
    pub fn sent(&self) -> u64 {
        le_u64(self.b(), field::SENT)
    }
    /// Sequence numbers left out on purpose.
    pub fn skipped(&self) -> u64 {
        le_u64(self.b(), field::SKIPPED)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn b_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Write the magic string.
    pub fn set_magic(&mut self) {
        self.b_mut()[field::MAGIC].copy_from_slice(MAGIC);
    }
    /// Write the checksum over the bytes before it: the last field to set.
    pub fn fill_checksum(&mut self) {
        let h = fnv1a(&self.b_mut()[..field::CHECKSUM.start]);
        set_le_u64(self.b_mut(), field::CHECKSUM, h);
    }
    /// Set the stream index.
    pub fn set_stream_index(&mut self, v: u32) {
        set_le_u32(self.b_mut(), field::STREAM_INDEX, v)
    }
    /// Set the stream count.
    pub fn set_stream_count(&mut self, v: u32) {
        set_le_u32(self.b_mut(), field::STREAM_COUNT, v)
    }
    /// Set the format's stream id.
    pub fn set_format_stream(&mut self, v: u32) {
        set_le_u32(self.b_mut(), field::FORMAT_STREAM, v)
    }
    /// Set the session id.
    pub fn set_session(&mut self, v: u64) {
        set_le_u64(self.b_mut(), field::SESSION, v)
    }
    /// Set the first sequence number.
    pub fn set_first_seq(&mut self, v: u64) {
        set_le_u64(self.b_mut(), field::FIRST_SEQ, v)
    }
    /// Set the last sequence number.
    pub fn set_last_seq(&mut self, v: u64) {
        set_le_u64(self.b_mut(), field::LAST_SEQ, v)
    }
    /// Set the count sent.
    pub fn set_sent(&mut self, v: u64) {
        set_le_u64(self.b_mut(), field::SENT, v)
    }
    /// Set the count skipped.
    pub fn set_skipped(&mut self, v: u64) {
        set_le_u64(self.b_mut(), field::SKIPPED, v)
    }
}

/// What a sender says about one stream when it finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EndOfStream {
    /// Random per sender run, so that a receiver groups the streams of one run.
    pub session: u64,
    /// This stream's index within the run (0-based).
    pub stream_index: u32,
    /// How many streams the run has.
    pub stream_count: u32,
    /// The format's stream id inside the datagrams (0 for single-stream formats).
    pub format_stream: u32,
    /// First sequence number generated.
    pub first_seq: u64,
    /// Last sequence number generated (equal to first - 1, wrapping, when none were).
    pub last_seq: u64,
    /// Datagrams actually sent.
    pub sent: u64,
    /// Sequence numbers deliberately left out (`--skip-every`, `--skip`).
    pub skipped: u64,
}

fn fnv1a(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl EndOfStream {
    /// Serialise into the fixed 80-byte layout (reserved bytes zero).
    pub fn encode(&self) -> [u8; END_LEN] {
        let mut b = [0u8; END_LEN];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_magic();
        p.set_stream_index(self.stream_index);
        p.set_stream_count(self.stream_count);
        p.set_format_stream(self.format_stream);
        p.set_session(self.session);
        p.set_first_seq(self.first_seq);
        p.set_last_seq(self.last_seq);
        p.set_sent(self.sent);
        p.set_skipped(self.skipped);
        p.fill_checksum();
        b
    }

    /// Recognise an end-of-stream datagram; anything else (including data) gives `None`.
    #[inline]
    pub fn decode(b: &[u8]) -> Option<EndOfStream> {
        let p = Packet::new_checked(b).ok()?;
        if b.len() != END_LEN || !p.magic_ok() || !p.checksum_ok() {
            return None;
        }
        Some(EndOfStream {
            stream_index: p.stream_index(),
            stream_count: p.stream_count(),
            format_stream: p.format_stream(),
            session: p.session(),
            first_seq: p.first_seq(),
            last_seq: p.last_seq(),
            sent: p.sent(),
            skipped: p.skipped(),
        })
    }

    /// True when the run generated no sequence numbers at all.
    pub fn is_empty(&self) -> bool {
        self.last_seq.wrapping_add(1) == self.first_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let e = EndOfStream {
            session: 0xdead_beef_1234,
            stream_index: 2,
            stream_count: 4,
            format_stream: 0,
            first_seq: 0,
            last_seq: 999,
            sent: 990,
            skipped: 10,
        };
        let b = e.encode();
        assert_eq!(EndOfStream::decode(&b), Some(e));
        let mut bad = b;
        bad[40] ^= 1;
        assert_eq!(EndOfStream::decode(&bad), None, "checksum must catch damage");
        assert_eq!(EndOfStream::decode(&b[..79]), None);
        assert_eq!(EndOfStream::decode(&[0u8; END_LEN]), None);
    }

    #[test]
    fn view_setters_and_getters_agree() {
        let mut b = [0u8; END_LEN];
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_magic();
        p.set_stream_index(7);
        p.set_stream_count(9);
        p.set_format_stream(3);
        p.set_session(u64::MAX - 1);
        p.set_first_seq(5);
        p.set_last_seq(4);
        p.set_sent(0);
        p.set_skipped(11);
        p.fill_checksum();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(p.magic_ok() && p.checksum_ok());
        let got = [p.stream_index().into(), p.stream_count().into(), p.format_stream().into(), p.session()];
        assert_eq!(got, [7, 9, 3, u64::MAX - 1]);
        assert_eq!([p.first_seq(), p.last_seq(), p.sent(), p.skipped()], [5, 4, 0, 11]);
        let e = EndOfStream::decode(&b).unwrap();
        assert!(e.is_empty());
        assert_eq!(e.encode(), b, "encode writes what the view wrote");
        assert_eq!(&b[20..24], &[0; 4], "reserved");
        assert!(Packet::new_checked(&b[..END_LEN - 1]).is_err());
    }
}
