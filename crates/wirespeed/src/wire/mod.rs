//! Payload formats: build and check datagrams without allocating.
//!
//! A format answers two questions a receiver must ask of every datagram — "which stream and
//! which sequence number is this?" and "is the payload intact?" — and the one a sender must ask —
//! "what bytes does packet N carry?". Each format is one implementation of [`Format`]; the
//! sender, receiver and (later) recorder never branch on the format themselves. This module is
//! pure code with no system calls, so fuzzers and other front ends can reuse it.
//!
//! Every fixed byte layout is written once, as a view beside its format (`vdif::Header`,
//! `mark5b::Header`, `spead::Packet`; the Ethernet/IPv4/UDP headers in [`net`]), with the
//! shared pieces in [`view`]; a format's `emit` and `check` both go through its view. How a
//! format is recorded to files is not a wire question: see [`crate::spool::Recordable`].

pub mod columns;
pub mod counter;
pub mod crc;
pub mod fill;
pub mod fuzz;
pub mod learn;
pub mod mark5b;
pub mod net;
pub mod seqfield;
#[allow(unsafe_code)]
pub(crate) mod simd;
pub mod spead;
pub mod spec;
pub mod stream;
pub mod vdif;
pub mod view;

use std::fmt;

pub use counter::Counter;
pub use fill::Fill;
pub use mark5b::{Mark5b, Mark5bConfig};
pub use seqfield::SeqField;
pub use spead::{Spead, SpeadConfig};
pub use stream::{Admit, LengthLock, UNSEQUENCED};
pub use vdif::{Vdif, VdifConfig, Vtp};

/// Byte order of multi-byte fields that a format lets the user choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ByteOrder {
    /// Most significant byte first (network order; the usual FPGA default).
    Be,
    /// Least significant byte first.
    Le,
}

impl ByteOrder {
    /// Parse `be`/`big` or `le`/`little`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "be" | "big" | "network" => Ok(ByteOrder::Be),
            "le" | "little" => Ok(ByteOrder::Le),
            _ => Err(format!("unknown byte order '{s}': use be or le")),
        }
    }

    /// Read a u64 from the first 8 bytes of `b` (caller guarantees the length).
    #[inline(always)]
    pub fn read_u64(self, b: &[u8]) -> u64 {
        let a: [u8; 8] = b[..8].try_into().expect("caller checked length");
        match self {
            ByteOrder::Be => u64::from_be_bytes(a),
            ByteOrder::Le => u64::from_le_bytes(a),
        }
    }

    /// Bytes of a u64 in this order.
    #[inline(always)]
    pub fn u64_bytes(self, v: u64) -> [u8; 8] {
        match self {
            ByteOrder::Be => v.to_be_bytes(),
            ByteOrder::Le => v.to_le_bytes(),
        }
    }
}

impl fmt::Display for ByteOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ByteOrder::Be => "be",
            ByteOrder::Le => "le",
        })
    }
}

/// What a receiver learns from one valid datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketInfo {
    /// Stream within the source (e.g. a VDIF thread); 0 for single-stream formats.
    pub stream: u32,
    /// The packet's position in its stream's sequence space.
    pub seq: u64,
    /// Numbers of the stream that this datagram shows were never sent: a SPEAD heap smaller
    /// than the heaps whose packet count sets the numbering leaves the rest of its numbers
    /// unused, and every one of its packets says so, so that the ledger counts them neither
    /// received nor lost. Empty for every other format.
    pub absent: Absent,
}

/// A run of sequence numbers that were never sent (see [`PacketInfo::absent`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Absent {
    /// The first unused number.
    pub first: u64,
    /// How many follow from it (0: none).
    pub count: u64,
}

impl PacketInfo {
    /// A datagram at `seq` of `stream`, with no unused numbers.
    #[inline]
    pub const fn new(stream: u32, seq: u64) -> Self {
        PacketInfo { stream, seq, absent: Absent { first: 0, count: 0 } }
    }
}

/// Why a datagram was counted as invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Invalid {
    /// Shorter than the format's header or not the expected length.
    Length,
    /// A header field is impossible (sync word, version, CRC...).
    Header,
    /// The payload does not continue the expected pattern.
    Payload,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Invalid::Length => "wrong length",
            Invalid::Header => "bad header",
            Invalid::Payload => "payload does not continue the pattern",
        })
    }
}

/// What one field of a datagram showed, and what the format was told to expect, for the line
/// that says why a stream does not match `--format` ("channels: the stream has 1, --format has
/// chans=4"). Plain numbers and static words, so a capture thread can keep the first one it
/// meets without allocating; it is put in words only when the report is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The reason the datagram was counted as invalid.
    pub kind: Invalid,
    /// What differs, in the user's words (`"channels"`, `"datagram length"`).
    pub field: &'static str,
    /// What the datagram had.
    pub got: Shown,
    /// The `--format` key that set the expectation (`"chans"`), empty when none did.
    pub key: &'static str,
    /// What the format expected.
    pub want: Shown,
}

/// A value in a [`Mismatch`] line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    /// Nothing to show (the field's name says it all).
    Nothing,
    /// A number.
    Num(u64),
    /// A number shown in hexadecimal (magic numbers, sync words).
    Hex(u64),
    /// A VDIF station id: two ASCII characters when it reads as such.
    Station(u16),
    /// A fixed word.
    Word(&'static str),
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Shown::Nothing => Ok(()),
            Shown::Num(n) => write!(f, "{n}"),
            Shown::Hex(n) => write!(f, "{n:#x}"),
            Shown::Station(s) => {
                let [a, b] = s.to_be_bytes();
                if a.is_ascii_graphic() && b.is_ascii_graphic() {
                    write!(f, "{}{}", a as char, b as char)
                } else {
                    write!(f, "{s}")
                }
            }
            Shown::Word(w) => f.write_str(w),
        }
    }
}

impl Mismatch {
    /// A mismatch that only the reason can describe.
    pub fn of(kind: Invalid) -> Self {
        let field = match kind {
            Invalid::Length => "datagram length",
            Invalid::Header => "header",
            Invalid::Payload => "payload",
        };
        Mismatch { kind, field, got: Shown::Nothing, key: "", want: Shown::Nothing }
    }

    /// A field that differs from what the format expects.
    pub fn field(kind: Invalid, field: &'static str, got: Shown, key: &'static str, want: Shown) -> Self {
        Mismatch { kind, field, got, key, want }
    }

    /// A datagram whose length the format does not take.
    pub fn length(got: usize, want: Option<usize>) -> Self {
        let want = want.map(|w| Shown::Num(w as u64)).unwrap_or(Shown::Nothing);
        Mismatch::field(Invalid::Length, "datagram length (bytes)", Shown::Num(got as u64), "", want)
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.got, self.want) {
            (Shown::Nothing, _) => match self.kind {
                Invalid::Length => write!(f, "{}: not what the format takes", self.field),
                Invalid::Header => write!(f, "{}: a field the format does not take", self.field),
                Invalid::Payload => write!(
                    f,
                    "{}: it does not continue the fill pattern the format names (an instrument's own data needs fill=any)",
                    self.field
                ),
            },
            (got, Shown::Nothing) => write!(f, "{}: the stream has {got}, which the format does not take", self.field),
            (got, want) if self.key.is_empty() => write!(f, "{}: the stream has {got}, the format expects {want}", self.field),
            (got, want) => write!(f, "{}: the stream has {got}, --format has {}={want}", self.field, self.key),
        }
    }
}

/// The scale of a format's own time stamps ([`Format::data_time`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataClock {
    /// UTC, nanoseconds since the Unix epoch (VDIF and Mark5B frame times).
    Utc,
    /// The SPEAD timestamp item (0x1600), in the instrument's own units (ADC samples since its
    /// sync time, for MeerKAT's): no UTC without the instrument's sync time and scale.
    SpeadTimestamp,
}

/// A payload format: how packets are built (sender) and checked (receiver).
///
/// Implementations hold only configuration, never per-packet state, so one instance can be
/// shared by every sender and capture thread.
pub trait Format: Send + Sync + fmt::Debug {
    /// Short name shown in summaries, e.g. `counter/be`.
    fn name(&self) -> String;
    /// Datagram payload length this format emits.
    fn packet_len(&self) -> usize;
    /// Width of the sequence numbers in bits (the ledger wraps at 2^bits).
    fn seq_bits(&self) -> u32 {
        64
    }
    /// Write packet `seq` of `stream` into `buf` (exactly `packet_len()` bytes).
    fn emit(&self, stream: u32, seq: u64, buf: &mut [u8]);
    /// Identify and check a received datagram.
    fn check(&self, buf: &[u8]) -> Result<PacketInfo, Invalid>;
    /// For time-stamped formats (VDIF, Mark5B): the sequence number of the first frame at or
    /// after `unix_ns`, so that a sender's frames carry the real time. `None` for formats whose
    /// numbers are plain counters.
    fn seq_at(&self, _unix_ns: u64) -> Option<u64> {
        None
    }
    /// How many format streams a sender can produce (VDIF threads); sender stream `i` sends
    /// format stream `i % stream_count()`, so `send --streams 4` gives four VDIF threads.
    fn stream_count(&self) -> u32 {
        1
    }
    /// The length every valid datagram has, when there is one. Raw recordings (payloads back to
    /// back, no framing) can only be split again when this is `Some`.
    fn fixed_len(&self) -> Option<usize> {
        Some(self.packet_len())
    }
    /// Whether a receiver must fix each stream's datagram length from its first valid
    /// datagrams ([`LengthLock`]): true when no length is fixed, because then what `check`
    /// reads depends on the datagram's own length (the counter's words per packet, a fill's
    /// offsets), and a truncated datagram would be read as another valid one.
    fn length_locked(&self) -> bool {
        self.fixed_len().is_none()
    }
    /// The numbers `check` reports for the packets a sender numbered `first..=last` (what its
    /// end-of-stream message claims), so that the receiver compares like with like. The same
    /// numbers for every format whose `check` returns the number `emit` was given; Mark5B
    /// halves without a PSN or counter fill number only their header halves, by frame.
    fn checked_range(&self, first: u64, last: u64) -> (u64, u64) {
        (first, last)
    }
    /// Why `check` refused `buf`, field by field where the format can say (the first field
    /// that differs), for the line that tells a user their stream does not match `--format`.
    /// `None` when `check` accepts it. Called once per run, never per datagram: formats may
    /// re-check slowly here. The default names only the reason.
    fn explain(&self, buf: &[u8]) -> Option<Mismatch> {
        match self.check(buf) {
            Ok(_) => None,
            Err(Invalid::Length) => Some(Mismatch::length(buf.len(), self.fixed_len())),
            Err(kind) => Some(Mismatch::of(kind)),
        }
    }
    /// For a datagram `check` found valid but unsequenced: whether it closes its stream, as a
    /// SPEAD stop heap does, and if so which stream and the number after the stream's last
    /// (the stop heap's own place). A receiver then knows the stream's end as a wirespeed
    /// sender's end-of-stream message tells it, loss at the tail included. Called only for
    /// such datagrams, never per data datagram.
    fn closes_stream(&self, _buf: &[u8]) -> Option<(u32, u64)> {
        None
    }
    /// Why wirespeed cannot send this format as configured (`None`: it can). Some settings
    /// describe another sender's stream for a receiver (a SPEAD heap whose first packet is
    /// shorter), which `emit` does not reproduce.
    fn cannot_send(&self) -> Option<String> {
        None
    }
    /// What the format's own time stamps are, when its records carry any: what a recording's
    /// time index keeps beside the arrival times, so that a window can be asked for in the
    /// instrument's clock. `None`: no time in the records (counters, sequence fields).
    fn data_clock(&self) -> Option<DataClock> {
        None
    }
    /// The record's own time stamp on the [`Format::data_clock`] scale, when it carries one
    /// (`buf` is a whole datagram or file record). Mark5B keeps its date modulo 1000 days: it
    /// is read as the date nearest `near_unix_ns` (the file's own time). Called by the writer
    /// once per record it reads back, never by the capture thread.
    fn data_time(&self, _buf: &[u8], _near_unix_ns: u64) -> Option<u64> {
        None
    }
    /// A string that [`spec::parse`] turns back into an equal format. Recordings store it in
    /// their sidecar so that `verify` needs no arguments.
    fn spec(&self) -> String;
    /// The concrete type behind a `dyn Format`, so that other rooms can attach behaviour of
    /// their own to particular formats without this trait knowing about them (how a format is
    /// recorded to files: [`crate::spool::Recordable`]). `None`, the default: such rooms treat
    /// the format generically.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}
