//! Recordings on disk: file layouts (raw payload streams and nanosecond pcap), the per-file
//! ledger, sidecars, and file naming. The writer thread ([`writer`]) and `verify` ([`verify`])
//! share this code, so a recording is read back exactly the way it was accounted for when
//! written.
//!
//! The pcap headers are views in [`pcap`]; what recording a particular format involves (its
//! file extension, the prefix it strips, the format that reads the file back) is
//! [`Recordable`], in [`recordable`](mod@recordable).
//!
//! A raw file is the datagram payloads back to back (less any transport prefix the format
//! strips), which for VDIF and Mark5B streams is a file VLBI software opens as it is. It keeps no
//! datagram boundaries, so it needs a format with a fixed record length. A pcap file keeps
//! everything: the source address, a nanosecond time stamp and any length.

pub mod catalog;
pub mod extract;
pub mod handoff;
pub mod index;
pub mod open;
pub mod pcap;
pub mod recordable;
pub mod retention;
pub mod scan;
pub mod scatter;
pub mod share;
pub mod sink;
pub mod stats;
pub mod verify;
pub mod writer;

pub use crate::calendar::{utc_compact, utc_iso};
use crate::ledger::{GapRange, LedgerConfig, LedgerCounts, Segment, StreamLedger};
use crate::wire::{Format, Invalid, LengthLock, PacketInfo, UNSEQUENCED};
pub use pcap::{
    parse_pcap_global, parse_pcap_packet, pcap_global_header, pcap_record_header, pcap_record_header_v6, PcapInfo,
    PcapPacket, LINKTYPES_READ, LINKTYPE_RAW, PCAP_GLOBAL_LEN, PCAP_MAGIC_NS, PCAP_MAGIC_US, PCAP_RECORD_OVERHEAD,
    PCAP_RECORD_OVERHEAD_V6,
};
pub use recordable::{recordable, Recordable};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;

/// Schema of the sidecar written next to every recorded file. Version 2: `not_written` counts
/// every record received for the file that is not in it, including those that never reached
/// a full disk (`unwritten`); version 1 counted only wrong-length datagrams.
pub const SIDECAR_SCHEMA: &str = "wirespeed.recording/2";

/// Sidecar schemas `verify` reads (older recordings stay checkable).
pub const SIDECAR_SCHEMAS_READ: [&str; 2] = ["wirespeed.recording/1", SIDECAR_SCHEMA];

/// Longest `--prefix`: leaves room in a 255-byte file name for the time, index, extension and
/// the `.NAME.json.part` of the provisional sidecar.
pub const MAX_PREFIX_LEN: usize = 160;

/// Check a file-name prefix before anything is created: it names files inside the output
/// directory, so it may not reach outside it (no `/`, not `.` or `..`), may not hide them (a
/// leading `.`, which `verify` skips), and holds no NUL or control characters.
pub fn validate_prefix(prefix: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "--prefix {prefix:?} {why}: a prefix is the start of a file name inside -o (e.g. --prefix vlbi-scan1)"
        ))
    };
    if prefix.is_empty() {
        return bad("is empty");
    }
    if prefix.contains('/') {
        return bad("contains '/'");
    }
    if prefix.starts_with('.') {
        return bad("starts with '.' (hidden files; '..' would leave the directory)");
    }
    if prefix.chars().any(|c| c.is_control()) {
        return bad("contains a control character");
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return bad(&format!("is longer than {MAX_PREFIX_LEN} bytes"));
    }
    Ok(())
}

/// The name of the `index`th file of a recording: `PREFIX-YYYYMMDDTHHMMSSZ-NNNN.EXT`.
pub fn file_name(prefix: &str, unix_ns: u64, index: u32, extension: &str) -> String {
    format!("{prefix}-{}-{index:04}.{extension}", utc_compact(unix_ns))
}

/// Whether `name` is shaped like a file `record` writes (`*-YYYYMMDDTHHMMSSZ-NNNN.EXT`, or the
/// same with `.part`): how `verify` tells a recording that lost its sidecar from a stray file.
pub fn looks_recorded(name: &str) -> bool {
    let name = name.strip_suffix(PART_SUFFIX).unwrap_or(name);
    let Some((stem, ext)) = name.rsplit_once('.') else { return false };
    if ext.is_empty() || ext.contains('-') {
        return false;
    }
    let mut parts = stem.rsplitn(3, '-');
    let (Some(index), Some(time), Some(prefix)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let t = time.as_bytes();
    !prefix.is_empty()
        && index.len() >= 4
        && index.bytes().all(|b| b.is_ascii_digit())
        && t.len() == 16
        && t[8] == b'T'
        && t[15] == b'Z'
        && t[..8].iter().chain(&t[9..15]).all(|b| b.is_ascii_digit())
}

/// Extension of files still being written (renamed when complete).
pub const PART_SUFFIX: &str = ".part";

/// The sidecar of the data file `name`: `NAME.json`. `verify` finds a file's sidecar by this
/// name, so the writer and the reader both spell it here.
pub fn sidecar_name(name: &str) -> String {
    format!("{name}.json")
}

/// A data file while it is written: `NAME.part`, renamed to `NAME` when complete.
pub fn part_name(name: &str) -> String {
    format!("{name}{PART_SUFFIX}")
}

/// A sidecar while it is written: `.NAME.json.part` (hidden, so a directory listing shows only
/// finished sidecars).
pub fn sidecar_part_name(name: &str) -> String {
    format!(".{name}.json{PART_SUFFIX}")
}

/// How datagrams are laid out in a recorded file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    /// Payloads back to back.
    Raw,
    /// Classic pcap, nanosecond time stamps, raw IP link type (IPv4 and IPv6 packets).
    Pcap,
}

impl FileFormat {
    /// Parse `raw` or `pcap`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "raw" => Ok(FileFormat::Raw),
            "pcap" => Ok(FileFormat::Pcap),
            _ => Err(format!("unknown file format '{s}': use raw (payloads back to back) or pcap")),
        }
    }
}

/// What a reader of a recorded file needs to know: the file format, the format that checks the
/// records, and (raw) the record length.
#[derive(Clone, Debug)]
pub struct ReadLayout {
    /// raw or pcap.
    pub file_format: FileFormat,
    /// Checks each record's payload.
    pub reader: Arc<dyn Format>,
    /// Bytes per record in raw files.
    pub record_len: usize,
}

impl ReadLayout {
    /// The layout of recordings made of `fmt` in `file_format`. Raw files need a fixed length.
    pub fn for_stream(fmt: &Arc<dyn Format>, file_format: FileFormat) -> Result<ReadLayout, String> {
        let rec = recordable(&**fmt);
        match file_format {
            FileFormat::Pcap => Ok(ReadLayout { file_format, reader: fmt.clone(), record_len: 0 }),
            FileFormat::Raw => {
                let len = fmt.fixed_len().ok_or_else(|| {
                    // A counter or sequence-field stream takes its length from --size; other
                    // formats whose datagrams differ in length (SPEAD cut as spead2 cuts heaps)
                    // only fit pcap.
                    if matches!(fmt.spec().split(',').next(), Some("counter" | "seqfield")) {
                        format!(
                            "raw files keep no datagram boundaries, so they need a fixed datagram length and {} has none: give --size, or record with --file-format pcap",
                            fmt.name()
                        )
                    } else {
                        format!(
                            "raw files keep no datagram boundaries, and {}'s datagrams differ in length: record with --file-format pcap",
                            fmt.name()
                        )
                    }
                })?;
                let strip = rec.raw_strip();
                if strip >= len {
                    return Err(format!(
                        "format {} strips {strip} of its {len} bytes: nothing left to record",
                        fmt.name()
                    ));
                }
                // A reader of its own (VTP -> VDIF, Mark5B halves -> whole frames) says how long a
                // record of the file is; datagrams then fill records in order.
                let (reader, record_len) = match rec.raw_reader() {
                    Some(r) => {
                        let n = r.fixed_len().unwrap_or(len - strip);
                        (r, n)
                    }
                    None => (fmt.clone(), len - strip),
                };
                Ok(ReadLayout { file_format, reader, record_len })
            }
        }
    }
}

/// The ledger of one stream in one file (or one whole recording), as a sidecar or `verify`
/// reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileStream {
    /// Source address and port (pcap files only; raw files keep no source).
    pub source: Option<String>,
    /// Format stream id (e.g. VDIF thread).
    pub stream: u32,
    /// The counts.
    #[serde(flatten)]
    pub counts: LedgerCounts,
    /// Lowest sequence number in the file.
    pub first_seq: Option<u64>,
    /// Highest sequence number in the file.
    pub last_seq: Option<u64>,
    /// Where the holes are.
    pub gaps: Vec<GapRange>,
    /// Segments (more than one after a sender restart).
    pub segments: Vec<Segment>,
    /// SPEAD: the stream's heaps, read from the same ledger (as recv reports them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heaps: Option<crate::wire::spead::HeapCounts>,
}

/// Builds per-stream ledgers from the records of a file, as they are read or written.
pub struct FileLedger {
    reader: Arc<dyn Format>,
    cfg: LedgerConfig,
    /// Per source and stream: its ledger and, for formats without a fixed length, the length
    /// its first valid records fixed (as the receiver's capture does, so that the two agree).
    streams: Vec<(Option<SocketAddr>, u32, StreamLedger, LengthLock)>,
    lock_len: bool,
    last: usize,
    /// Records seen.
    pub records: u64,
    /// Records too short to check, or not UDP (pcap): `cut_short` plus `not_udp`.
    pub unreadable: u64,
    /// pcap records captured shorter than the packet (a snap length): their payload is unknown.
    pub cut_short: u64,
    /// pcap records that are not a whole IPv4/UDP or IPv6/UDP datagram (another protocol, an
    /// IP fragment, IPv6 extension headers, malformed headers).
    pub not_udp: u64,
    /// Valid records without a sequence position (e.g. SPEAD control heaps).
    pub unsequenced: u64,
    /// wirespeed end-of-stream messages (a capture by another tool holds them; they are not
    /// data of the stream's format, so neither valid nor invalid records).
    pub control: u64,
    /// Records with each kind of invalid payload: length, header, payload.
    pub invalid_kinds: [u64; 3],
    /// Time stamp of the first and last record (pcap), ns since the Unix epoch.
    pub time_ns: Option<(u64, u64)>,
    /// The file's time index, when the writer builds one as it reads its records back.
    pub index: Option<index::IndexBuilder>,
    /// Where the record being added starts in its file, and its time stamp (pcap): set by the
    /// [`RecordWalker`] for the index.
    at: u64,
    stamp: Option<u64>,
}

impl FileLedger {
    /// A ledger for records checked by `reader`.
    pub fn new(reader: Arc<dyn Format>, window: u64) -> Self {
        let cfg = LedgerConfig { seq_bits: reader.seq_bits().min(64), window, ..LedgerConfig::default() }.effective();
        let lock_len = reader.length_locked();
        FileLedger {
            reader,
            cfg,
            lock_len,
            streams: Vec::new(),
            last: 0,
            records: 0,
            unreadable: 0,
            cut_short: 0,
            not_udp: 0,
            unsequenced: 0,
            control: 0,
            invalid_kinds: [0; 3],
            time_ns: None,
            index: None,
            at: 0,
            stamp: None,
        }
    }

    /// Build the file's time index as records are added (the writer's ledgers).
    pub fn with_index(mut self, builder: index::IndexBuilder) -> Self {
        self.index = Some(builder);
        self
    }

    fn slot(&mut self, src: Option<SocketAddr>, stream: u32) -> usize {
        if let Some((s, t, _, _)) = self.streams.get(self.last) {
            if *s == src && *t == stream {
                return self.last;
            }
        }
        let i = match self.streams.iter().position(|(s, t, _, _)| *s == src && *t == stream) {
            Some(i) => i,
            None => {
                self.streams.push((src, stream, StreamLedger::new(&self.cfg), LengthLock::default()));
                self.streams.len() - 1
            }
        };
        self.last = i;
        i
    }

    /// Account for one record's payload.
    #[inline]
    pub fn add(&mut self, src: Option<SocketAddr>, payload: &[u8]) {
        let checked = self.reader.check(payload);
        self.add_checked(src, payload, checked);
    }

    /// [`FileLedger::add`] of a record whose payload the caller has checked already (with
    /// this ledger's format): a reader that needs the check's result itself (`extract`)
    /// checks each record once.
    #[inline]
    pub fn add_checked(&mut self, src: Option<SocketAddr>, payload: &[u8], checked: Result<PacketInfo, Invalid>) {
        self.records += 1;
        let seq = self.account(src, payload, checked);
        if let Some(ix) = self.index.as_mut() {
            let data = match seq {
                Some(_) if ix.wants_data_time() => self.reader.data_time(payload, ix.near_ns),
                _ => None,
            };
            ix.note(self.at, self.stamp.take(), data, seq);
        }
    }

    /// Count one record in its stream's ledger: its slot, stream and number when it is a
    /// valid sequenced record.
    #[inline]
    fn account(
        &mut self,
        src: Option<SocketAddr>,
        payload: &[u8],
        checked: Result<PacketInfo, Invalid>,
    ) -> Option<(usize, u32, u64)> {
        if payload.len() == crate::control::END_LEN && crate::control::EndOfStream::decode(payload).is_some() {
            self.control += 1;
            return None;
        }
        match checked {
            Ok(info) if info.stream == UNSEQUENCED => {
                self.unsequenced += 1;
                None
            }
            Ok(info) if !self.lock_len => {
                let i = self.slot(src, info.stream);
                self.streams[i].2.record_with(info.seq, info.absent);
                Some((i, info.stream, info.seq))
            }
            Ok(info) => {
                // A record whose length differs from the stream's is invalid, never a number:
                // without a fixed length the format reads its number through its length.
                let i = self.slot(src, info.stream);
                let (_, _, ledger, lock) = &mut self.streams[i];
                if ledger.record_locked(lock, payload.len(), info.seq) {
                    Some((i, info.stream, info.seq))
                } else {
                    self.invalid_kinds[Invalid::Length as usize] += 1;
                    None
                }
            }
            Err(kind) => {
                let i = self.slot(src, 0);
                self.streams[i].2.invalid();
                self.invalid_kinds[kind as usize] += 1;
                None
            }
        }
    }

    /// A pcap record that is not a whole UDP datagram: `cut_short` when it was captured shorter
    /// than the packet was.
    pub fn add_unreadable(&mut self, cut_short: bool) {
        self.records += 1;
        if let Some(ix) = self.index.as_mut() {
            ix.note(self.at, self.stamp.take(), None, None);
        }
        self.unreadable += 1;
        if cut_short {
            self.cut_short += 1;
        } else {
            self.not_udp += 1;
        }
    }

    /// Note a record's time stamp.
    #[inline]
    pub fn add_time(&mut self, ns: u64) {
        self.stamp = Some(ns);
        self.time_ns = Some(match self.time_ns {
            None => (ns, ns),
            Some((a, b)) => (a.min(ns), b.max(ns)),
        });
    }

    /// Settle every ledger and report per stream, sorted by source and stream.
    pub fn finish(&mut self) -> (Vec<FileStream>, LedgerCounts) {
        let mut out = Vec::with_capacity(self.streams.len());
        let mut total = LedgerCounts::default();
        let spead = self.reader.as_any().and_then(|a| a.downcast_ref::<crate::wire::Spead>());
        for (src, stream, l, lock) in &mut self.streams {
            l.record_held(lock);
            l.finish(None);
            let counts = l.counts();
            total.merge(&counts);
            let (gaps, segments) = (l.gaps().to_vec(), l.segments());
            let heaps = spead.and_then(|f| f.heaps(&segments, &gaps, counts.ranges_dropped));
            out.push(FileStream {
                source: src.map(|a| a.to_string()),
                stream: *stream,
                counts,
                first_seq: l.first_seen(),
                last_seq: l.highest(),
                gaps,
                segments,
                heaps,
            });
        }
        out.sort_by(|a, b| (&a.source, a.stream).cmp(&(&b.source, b.stream)));
        (out, total)
    }
}

/// Walks records in a byte stream fed in pieces of any size: complete records are handed to a
/// [`FileLedger`], a record cut by a piece boundary is carried over.
pub struct RecordWalker {
    layout: ReadLayout,
    pcap: Option<PcapInfo>,
    header_left: usize,
    carry: Vec<u8>,
    /// Bytes consumed as complete records (plus the pcap global header).
    pub complete_bytes: u64,
    /// Records whose pcap header claims an impossible length (the rest of the file is skipped).
    pub corrupt: bool,
}

impl RecordWalker {
    /// A walker for one file.
    pub fn new(layout: ReadLayout) -> Self {
        let header_left = if layout.file_format == FileFormat::Pcap { PCAP_GLOBAL_LEN } else { 0 };
        RecordWalker {
            layout,
            pcap: None,
            header_left,
            carry: Vec::with_capacity(65536 + 64),
            complete_bytes: 0,
            corrupt: false,
        }
    }

    /// Bytes held back as the start of an incomplete record.
    pub fn pending(&self) -> usize {
        self.carry.len()
    }

    /// The pcap global header did not parse.
    pub fn bad_global_header(&self) -> bool {
        self.layout.file_format == FileFormat::Pcap && self.header_left == 0 && self.pcap.is_none()
    }

    /// The pcap global header, once read.
    pub fn pcap_info(&self) -> Option<PcapInfo> {
        self.pcap
    }

    /// Bytes of the pcap global header still missing (the file ended inside it, or is empty).
    pub fn header_missing(&self) -> usize {
        if self.layout.file_format == FileFormat::Pcap {
            self.header_left
        } else {
            0
        }
    }

    /// This walker, moved to the middle of a file the recorder wrote (after its global
    /// header, at a record boundary): how the writer counts the records left in the ring when
    /// writing stops.
    pub fn continuing_own(mut self) -> RecordWalker {
        if self.layout.file_format == FileFormat::Pcap {
            self.header_left = 0;
            self.pcap = parse_pcap_global(&pcap_global_header());
            self.complete_bytes = PCAP_GLOBAL_LEN as u64;
        }
        self
    }

    /// Feed the next piece of the file.
    pub fn feed(&mut self, mut data: &[u8], ledger: &mut FileLedger) {
        if self.corrupt {
            return;
        }
        if self.header_left > 0 {
            let n = self.header_left.min(data.len());
            self.carry.extend_from_slice(&data[..n]);
            data = &data[n..];
            self.header_left -= n;
            if self.header_left > 0 {
                return;
            }
            self.pcap = parse_pcap_global(&self.carry);
            self.carry.clear();
            self.complete_bytes += PCAP_GLOBAL_LEN as u64;
            if self.pcap.is_none() {
                self.corrupt = true;
                return;
            }
        }
        // Finish a record carried over from the previous piece.
        while !self.carry.is_empty() && !data.is_empty() {
            let Ok(need) = self.record_len(&self.carry) else {
                self.corrupt = true;
                return;
            };
            let need = need.unwrap_or(16); // at least the record header, to learn the length
            let take = need.saturating_sub(self.carry.len()).min(data.len());
            self.carry.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.record_len(&self.carry) == Ok(Some(self.carry.len())) {
                let rec = std::mem::take(&mut self.carry);
                self.one(&rec, ledger);
                self.carry = rec; // keep the allocation
                self.carry.clear();
            }
        }
        if !self.carry.is_empty() {
            return;
        }
        while !data.is_empty() {
            match self.record_len(data) {
                Err(()) => {
                    self.corrupt = true;
                    return;
                }
                Ok(Some(n)) if n <= data.len() => {
                    self.one(&data[..n], ledger);
                    data = &data[n..];
                }
                Ok(_) => {
                    self.carry.extend_from_slice(data);
                    return;
                }
            }
        }
    }

    /// Length of the record starting at `b`, when its header is there to say (`Ok(None)`: not
    /// enough bytes yet); `Err` when the header is impossible and the rest cannot be framed.
    fn record_len(&self, b: &[u8]) -> Result<Option<usize>, ()> {
        match self.layout.file_format {
            FileFormat::Raw if self.layout.record_len == 0 => Err(()),
            FileFormat::Raw => Ok(Some(self.layout.record_len)),
            FileFormat::Pcap => {
                let Some(p) = self.pcap else { return Ok(None) };
                let Ok(h) = pcap::RecordHeader::new_checked(b, p.order()) else { return Ok(None) };
                let caplen = h.caplen() as usize;
                if caplen > 262_144 {
                    return Err(());
                }
                Ok(Some(pcap::PCAP_RECORD_LEN + caplen))
            }
        }
    }

    fn one(&mut self, rec: &[u8], ledger: &mut FileLedger) {
        ledger.at = self.complete_bytes;
        self.complete_bytes += rec.len() as u64;
        match self.layout.file_format {
            FileFormat::Raw => ledger.add(None, rec),
            FileFormat::Pcap => {
                let Some(p) = self.pcap else { return };
                let Ok(h) = pcap::RecordHeader::new_checked(rec, p.order()) else { return };
                let orig = h.origlen();
                ledger.add_time(h.unix_ns(p.nanos));
                let data = &rec[pcap::PCAP_RECORD_LEN..];
                match parse_pcap_packet(&p, data, orig) {
                    (src, Some(payload)) => ledger.add(src, payload),
                    _ => ledger.add_unreadable(data.len() < orig as usize),
                }
            }
        }
    }
}

/// Which recording run a file belongs to: made once when `record` starts and written into every
/// sidecar of the run, so that `verify` can tell apart two recorders that wrote into the same
/// directory at the same second (their file names interleave; their sequence numbers would
/// otherwise read as duplicates of each other).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunIdentity {
    /// 128 random bits in hex: unique to the run, whatever the host, process or clock.
    pub id: String,
    /// The recorder's process id, for a person matching a run to a log.
    pub pid: u32,
    /// When the run started, UTC (ISO 8601).
    pub started_utc: String,
}

impl RunIdentity {
    /// A new run's identity: its id from the kernel's random source (`/dev/urandom`), or, where
    /// that cannot be read, from the process id and the clock to the nanosecond.
    pub fn new() -> RunIdentity {
        use std::io::Read;
        let now = crate::sys::realtime_ns();
        let mut b = [0u8; 16];
        let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).is_ok();
        if !random {
            b[..8].copy_from_slice(&now.to_le_bytes());
            b[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        }
        RunIdentity {
            id: b.iter().map(|x| format!("{x:02x}")).collect(),
            pid: std::process::id(),
            started_utc: crate::calendar::utc_iso(now),
        }
    }
}

impl Default for RunIdentity {
    fn default() -> Self {
        RunIdentity::new()
    }
}

/// Everything about one recorded file, written beside it as `NAME.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sidecar {
    /// Schema name and version.
    pub schema: String,
    /// The data file's name (same directory).
    pub file: String,
    /// raw or pcap.
    pub file_format: FileFormat,
    /// The stream's format, as a spec string (`wire::spec::parse` rebuilds it).
    pub format: String,
    /// The format that checks the records of this file (differs for VTP, Mark5B halves...).
    pub reader_format: String,
    /// Bytes per record (raw files).
    pub record_len: Option<usize>,
    /// File length, bytes.
    pub bytes: u64,
    /// Records in the file.
    pub records: u64,
    /// When the file was opened and closed, UTC (ISO 8601).
    pub opened_utc: String,
    /// When the file was closed, UTC.
    pub closed_utc: String,
    /// Why the file ended: `size`, `time`, `end of run`, `disk full`, `write error`.
    pub ended_by: String,
    /// The file holds every record written for it (false: cut short by a full disk or error).
    pub complete: bool,
    /// Per-stream ledgers of the records in this file.
    pub streams: Vec<FileStream>,
    /// Totals over the streams.
    pub total: LedgerCounts,
    /// Invalid records by reason.
    pub invalid_by_reason: crate::rx::InvalidReasons,
    /// Records that were not a whole UDP datagram (pcap).
    pub unreadable: u64,
    /// Datagrams dropped at a full ring while this file was being filled.
    pub ring_full: u64,
    /// Records received while this file was being filled that are not in it, for any reason:
    /// `not_written_wrong_length` plus `unwritten`.
    pub not_written: u64,
    /// Datagrams received while this file was filled that the recorder left out of it:
    /// duplicates, and datagrams the format refused (written only with `--keep-invalid`). The
    /// name is historical: wrong lengths were the first such case.
    #[serde(default)]
    pub not_written_wrong_length: u64,
    /// Records received into RAM that never reached the disk because writing stopped (a full
    /// disk or a write error) in this file: every record after its last whole one, including
    /// those meant for later files that were never opened. The run's summary gives the same
    /// number.
    #[serde(default)]
    pub unwritten: u64,
    /// Socket drops (SO_RXQ_OVFL) while this file was being filled.
    pub kernel_socket_drops: Option<u64>,
    /// Writes that took longer than 50 ms.
    pub write_stalls: u64,
    /// Longest single write, milliseconds.
    pub max_write_ms: f64,
    /// The file was written with O_DIRECT.
    pub direct_io: bool,
    /// The wirespeed version that wrote it.
    pub writer: String,
    /// The recording run the file belongs to; absent in sidecars written before runs were
    /// identified (`verify` then reads such files as one recording, and says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunIdentity>,
    /// The file is part of a scan scattered over mount points (FlexBuff chunk or Mark6 file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<ScanPlace>,
    /// Where each stretch of time and of sequence numbers lies in the file ([`index`]), built
    /// by the writer; absent in files recorded before indexes, or with `--no-index`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<index::TimeIndex>,
}

impl Sidecar {
    /// The sidecar of file `name` before anything is counted in it: what the recorder knows
    /// when the file opens (its layout, format and run). Every writer starts from this.
    pub fn blank(
        name: &str,
        layout: &ReadLayout,
        format_spec: &str,
        run: &RunIdentity,
        opened_ns: u64,
        ended_by: &str,
        complete: bool,
    ) -> Sidecar {
        Sidecar {
            schema: SIDECAR_SCHEMA.into(),
            file: name.into(),
            file_format: layout.file_format,
            format: format_spec.into(),
            reader_format: layout.reader.spec(),
            record_len: (layout.file_format == FileFormat::Raw).then_some(layout.record_len),
            bytes: 0,
            records: 0,
            opened_utc: utc_iso(opened_ns),
            closed_utc: String::new(),
            ended_by: ended_by.into(),
            complete,
            streams: Vec::new(),
            total: Default::default(),
            invalid_by_reason: Default::default(),
            unreadable: 0,
            ring_full: 0,
            not_written: 0,
            not_written_wrong_length: 0,
            unwritten: 0,
            kernel_socket_drops: None,
            write_stalls: 0,
            max_write_ms: 0.0,
            direct_io: false,
            writer: format!("wirespeed {}", env!("CARGO_PKG_VERSION")),
            run: Some(run.clone()),
            scan: None,
            index: None,
        }
    }
}

/// Where a file lies in a scan scattered over mount points ([`scan`]): its sidecar says so.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanPlace {
    /// The scan's name.
    pub name: String,
    /// flexbuff or mark6.
    pub layout: scan::ScanLayout,
    /// FlexBuff: the chunk's number in the scan (one sequence over all mount points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<u64>,
    /// Mark6: the blocks in this disk's file, in file order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<BlockEntry>,
}

/// One Mark6 block as its writer counted it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockEntry {
    /// Block number in the scan.
    pub number: u64,
    /// Where its frames start in the file.
    pub offset: u64,
    /// Bytes of frames.
    pub bytes: u64,
    /// Records (frames) in it.
    pub records: u64,
}

/// Feed the records of ring bytes `[from, to)` to `walker` and `ledger`, through `slice` (a ring
/// consumer's or a pinned range's: contiguous pieces, shorter where the ring wraps). The
/// writers' own read-back of what they wrote, or of what never reached a disk.
pub(crate) fn walk_range<'a>(
    slice: impl Fn(u64, usize) -> &'a [u8],
    from: u64,
    to: u64,
    walker: &mut RecordWalker,
    ledger: &mut FileLedger,
) {
    let mut pos = from;
    while pos < to {
        let s = slice(pos, (to - pos) as usize);
        if s.is_empty() {
            break;
        }
        walker.feed(s, ledger);
        pos += s.len() as u64;
    }
}

/// Count a record's invalid reasons as the sidecar shows them.
pub fn reasons(kinds: &[u64; 3]) -> crate::rx::InvalidReasons {
    crate::rx::InvalidReasons {
        length: kinds[Invalid::Length as usize],
        header: kinds[Invalid::Header as usize],
        payload: kinds[Invalid::Payload as usize],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ByteOrder, Counter};
    use std::net::{Ipv4Addr, SocketAddrV4};

    #[test]
    fn prefixes_stay_file_names() {
        for ok in ["wirespeed", "scan-1", "vlbi_2026 run", "x"] {
            assert_eq!(validate_prefix(ok), Ok(()), "{ok}");
        }
        for bad in ["", "/abs/x", "../x", "a/b", "..", ".", ".hidden", "a\0b", "tab\there"] {
            assert!(validate_prefix(bad).is_err(), "{bad:?}");
        }
        assert!(validate_prefix(&"x".repeat(MAX_PREFIX_LEN + 1)).is_err());
    }

    #[test]
    fn recorded_names_are_recognised() {
        let n = file_name("scan-1", 951_782_400_000_000_000, 7, "vdif");
        assert_eq!(n, "scan-1-20000229T000000Z-0007.vdif");
        assert!(looks_recorded(&n));
        assert!(looks_recorded(&format!("{n}{PART_SUFFIX}")));
        assert!(looks_recorded("wirespeed-20261124T010203Z-12345.pcap"));
        for stray in ["notes.txt", "README", "capture.pcap", "x-20261124T010203-0001.raw", "-20261124T010203Z-0001.raw"]
        {
            assert!(!looks_recorded(stray), "{stray}");
        }
    }

    /// Issue 13's truncation repro, read back from a recording: a pcap of counter datagrams
    /// without a fixed size holds an 8-byte and a 4400-byte prefix of number 10. They are
    /// invalid (length), never the numbers 11000 and 20, so verify finds exactly one lost.
    #[test]
    fn truncated_records_of_a_sizeless_counter_are_invalid_not_numbers() {
        let fmt: Arc<dyn Format> = Arc::new(Counter::any_len(ByteOrder::Be));
        let counter = |seq: u64, len: usize| -> Vec<u8> {
            let w = (len / 8) as u64;
            (0..w).flat_map(|i| (seq * w + i).to_be_bytes()).collect()
        };
        let src = Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 4000)));
        let mut l = FileLedger::new(fmt, 1024);
        for seq in 0..10 {
            l.add(src, &counter(seq, 8800));
        }
        let ten = counter(10, 8800);
        l.add(src, &ten[..8]);
        l.add(src, &ten[..4400]);
        for seq in 11..20 {
            l.add(src, &counter(seq, 8800));
        }
        let (streams, total) = l.finish();
        assert_eq!((total.received, total.lost, total.invalid), (19, 1, 2));
        assert_eq!(streams.len(), 1);
        assert_eq!(streams[0].last_seq, Some(19));
    }

    #[test]
    fn civil_dates() {
        assert_eq!(utc_iso(0), "1970-01-01T00:00:00.000Z");
        // 2026-11-22 12:34:56.789 UTC
        assert_eq!(utc_iso(1_795_350_896_789_000_000), "2026-11-22T12:34:56.789Z");
        assert_eq!(utc_compact(951_782_400_000_000_000), "20000229T000000Z");
    }

    #[test]
    fn pcap_header_parses_back() {
        let src = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 4000);
        let dst = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 7148);
        let h = pcap_record_header(1_700_000_000_123_456_789, src, dst, 1080);
        let mut rec = h.to_vec();
        rec.extend(std::iter::repeat_n(0xabu8, 1080));
        let info = parse_pcap_global(&pcap_global_header()).unwrap();
        assert_eq!(info, PcapInfo { nanos: true, big_endian: false, linktype: 101 });
        let (s, p) = parse_pcap_packet(&info, &rec[16..], 1108);
        assert_eq!(s, Some(SocketAddr::V4(src)));
        assert_eq!(p.unwrap().len(), 1080);
        // The IPv4 header checksum verifies (sums to 0xffff).
        let mut sum = 0u32;
        for w in rec[16..36].chunks_exact(2) {
            sum += u16::from_be_bytes([w[0], w[1]]) as u32;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
    }

    #[test]
    fn walker_handles_records_cut_anywhere() {
        let fmt: Arc<dyn Format> = Arc::new(Counter::new(64, ByteOrder::Be).unwrap());
        for ff in [FileFormat::Raw, FileFormat::Pcap] {
            let layout = ReadLayout::for_stream(&fmt, ff).unwrap();
            let mut file = Vec::new();
            if ff == FileFormat::Pcap {
                file.extend_from_slice(&pcap_global_header());
            }
            let src = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 4000);
            let mut buf = [0u8; 64];
            for seq in (0..50u64).filter(|s| *s != 17) {
                fmt.emit(0, seq, &mut buf);
                if ff == FileFormat::Pcap {
                    file.extend_from_slice(&pcap_record_header(seq * 1000, src, src, 64));
                }
                file.extend_from_slice(&buf);
            }
            for piece in [1usize, 7, 16, 63, 64, 65, 1000, 100_000] {
                let mut w = RecordWalker::new(layout.clone());
                let mut l = FileLedger::new(layout.reader.clone(), 1024);
                for c in file.chunks(piece) {
                    w.feed(c, &mut l);
                }
                let (streams, total) = l.finish();
                assert_eq!(total.received, 49, "{ff:?} piece {piece}");
                assert_eq!(total.lost, 1);
                assert_eq!(streams[0].gaps[0].first, 17);
                assert_eq!(w.complete_bytes, file.len() as u64);
                assert_eq!(w.pending(), 0);
            }
        }
    }
}
