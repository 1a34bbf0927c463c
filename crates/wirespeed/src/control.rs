//! The sender's end-of-stream message.
//!
//! Loss after the last packet a receiver saw (tail loss), and before the first (head loss), is
//! invisible to a sequence-number ledger: only the sender knows how far it went. A wirespeed
//! sender therefore ends every stream with a small control datagram, from the stream's own
//! socket, saying which sequence numbers it generated and how many it left out on purpose. The
//! layout is fixed, little-endian and checksummed so that no data packet is mistaken for it.

/// Length of an end-of-stream datagram.
pub const END_LEN: usize = 80;
const MAGIC: &[u8; 8] = b"WSPDEND1";

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
    /// Serialise into the fixed 80-byte layout.
    pub fn encode(&self) -> [u8; END_LEN] {
        let mut b = [0u8; END_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&self.stream_index.to_le_bytes());
        b[12..16].copy_from_slice(&self.stream_count.to_le_bytes());
        b[16..20].copy_from_slice(&self.format_stream.to_le_bytes());
        b[24..32].copy_from_slice(&self.session.to_le_bytes());
        b[32..40].copy_from_slice(&self.first_seq.to_le_bytes());
        b[40..48].copy_from_slice(&self.last_seq.to_le_bytes());
        b[48..56].copy_from_slice(&self.sent.to_le_bytes());
        b[56..64].copy_from_slice(&self.skipped.to_le_bytes());
        let h = fnv1a(&b[..72]);
        b[72..80].copy_from_slice(&h.to_le_bytes());
        b
    }

    /// Recognise an end-of-stream datagram; anything else (including data) gives `None`.
    #[inline]
    pub fn decode(b: &[u8]) -> Option<EndOfStream> {
        if b.len() != END_LEN || &b[..8] != MAGIC {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("fixed layout"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("fixed layout"));
        if u64_at(72) != fnv1a(&b[..72]) {
            return None;
        }
        Some(EndOfStream {
            stream_index: u32_at(8),
            stream_count: u32_at(12),
            format_stream: u32_at(16),
            session: u64_at(24),
            first_seq: u64_at(32),
            last_seq: u64_at(40),
            sent: u64_at(48),
            skipped: u64_at(56),
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
}
