//! The time index of a recorded file: where in the file each stretch of time (and of each
//! stream's sequence numbers) lies, so that `wirespeed extract` and Python's `between` read a
//! window of a long recording without reading the rest.
//!
//! The writer builds it while it reads back what it wrote (the per-file ledger's pass, so the
//! capture thread does nothing for it), and it is kept in the file's sidecar: one JSON read
//! gives a file's ledger and its index together, and a file is never found without its index.
//! An entry starts every [`INDEX_EVERY`] bytes (more when many streams share a file, so that
//! the index stays under 0.1 % of the data): a lookup reads at most one entry's bytes before
//! and after the window.
//!
//! Arrival times: a pcap record carries its own, so a pcap file's entries are exact. A raw file
//! keeps none, so the capture thread publishes a time mark (ring position, time) once per
//! [`MARK_EVERY`] bytes at the end of a receive batch, and an entry of a raw file holds bounds:
//! no record in it arrived before its first time or after its last. The format's own time
//! (VDIF and Mark5B frame times in UTC, SPEAD timestamps) is read from the records themselves.

use crate::wire::DataClock;
use serde::{Deserialize, Serialize};

/// Bytes between index entries (at least).
pub const INDEX_EVERY: u64 = 4 << 20;
/// Bytes of ring between the capture thread's time marks (raw files' arrival times).
pub const MARK_EVERY: u64 = 1 << 20;
/// And at most this long between marks while data arrives (ns): a slow stream's records are
/// placed in time within a tenth of a second, and a stream that starts after a quiet spell is
/// marked from its first batch.
pub const MARK_IDLE_NS: u64 = 100_000_000;
/// An entry holds at least this many bytes per stream it names, so that a file of many
/// streams (1024 VDIF threads) keeps its index small.
const BYTES_PER_STREAM: u64 = 256 << 10;
/// When a file (one without rotation, recording for days) reaches this many entries, later
/// entries cover twice the bytes, and again at each further such count: the index of a file
/// of any size stays a few MB, and the writer's memory for it bounded.
const MAX_ENTRIES: usize = 16_384;
/// Likewise for the time marks of a raw file: at this many, every other one is dropped and
/// the spacing doubles.
const MAX_MARKS: usize = 65_536;

/// How a file's arrival times were taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalTimes {
    /// Each record's own time stamp (pcap): exact.
    Records,
    /// The capture's time marks (raw files): each entry's times bound its records' arrivals.
    Marks,
}

/// A recorded file's time index, as its sidecar keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeIndex {
    /// How the arrival times were taken.
    pub arrival: ArrivalTimes,
    /// The scale of `data_time` (absent: the format carries no time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_clock: Option<DataClock>,
    /// First and last arrival in the file, ns since the Unix epoch (bounds for raw files).
    pub arrival_ns: Option<[u64; 2]>,
    /// Earliest and latest of the records' own times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_time: Option<[u64; 2]>,
    /// Bytes between entries (at least).
    pub every_bytes: u64,
    /// The entries, in file order.
    pub entries: Vec<IndexEntry>,
    /// Raw files: the capture's time marks, `[file offset, ns]`: every record before the
    /// offset arrived at or before the time, every record after it at or after. A record's
    /// arrival is read between the two marks around it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<[u64; 2]>,
}

impl TimeIndex {
    /// Why this index cannot be trusted for a file of `file_len` bytes whose records start at
    /// `header` and (raw files) are `record_len` long: entries or marks out of order or past
    /// the file's end, an entry that does not start on a record. `None`: it can. A sidecar may
    /// have been edited or damaged; a reader then reads the file whole, and says so.
    pub fn problem(&self, file_len: u64, header: u64, record_len: usize) -> Option<String> {
        let mut last = None;
        for e in &self.entries {
            if last.is_some_and(|l| e.offset <= l) {
                return Some(format!("its entries are out of order at byte {}", e.offset));
            }
            if e.offset >= file_len || e.offset < header {
                return Some(format!("an entry starts at byte {}, outside the file", e.offset));
            }
            if record_len > 0 && (e.offset - header) % record_len as u64 != 0 {
                return Some(format!("an entry at byte {} does not start on a {record_len}-byte record", e.offset));
            }
            if e.arrival_ns[0] > e.arrival_ns[1] || e.data_time.is_some_and(|d| d[0] > d[1]) {
                return Some(format!("an entry at byte {} has times that end before they start", e.offset));
            }
            last = Some(e.offset);
        }
        if self.marks.windows(2).any(|w| w[1][0] < w[0][0]) {
            return Some("its time marks are out of order".into());
        }
        None
    }

    /// The arrival time of the record at `offset` of a raw file, from the marks around it:
    /// linear in the offset between them (their times bound it), or the nearer mark's time
    /// past the first or last.
    pub fn arrival_at(&self, offset: u64) -> Option<u64> {
        let i = self.marks.partition_point(|m| m[0] <= offset);
        match (i.checked_sub(1).and_then(|j| self.marks.get(j)), self.marks.get(i)) {
            (Some(a), Some(b)) if b[0] > a[0] => {
                let f = offset.saturating_sub(a[0]) as f64 / (b[0] - a[0]) as f64;
                Some(a[1].saturating_add((b[1].saturating_sub(a[1]) as f64 * f) as u64))
            }
            (Some(a), _) => Some(a[1]),
            (None, Some(b)) => Some(b[1]),
            (None, None) => None,
        }
    }
}

/// One stretch of a file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// Byte offset of its first record in the file.
    pub offset: u64,
    /// Records in it.
    pub records: u64,
    /// Earliest and latest arrival of its records (bounds in raw files), ns since the epoch.
    pub arrival_ns: [u64; 2],
    /// Earliest and latest of its records' own times, when they have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_time: Option<[u64; 2]>,
    /// Per stream: `[stream, lowest, highest]` sequence number in it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seq: Vec<[u64; 3]>,
}

impl TimeIndex {
    /// The byte range `[start, end)` of the file that holds every record whose arrival (or,
    /// with `data`, own time) may lie in `[from, to]`: from the first entry that can hold one
    /// to the end of the last. `None` when no entry can. `file_len` ends the last entry.
    pub fn range(&self, from: u64, to: u64, data: bool, file_len: u64) -> Option<(u64, u64)> {
        let span = |e: &IndexEntry| if data { e.data_time } else { Some(e.arrival_ns) };
        let mut out: Option<(u64, u64)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            let Some([lo, hi]) = span(e) else { continue };
            if hi < from || lo > to {
                continue;
            }
            let end = self.entries.get(i + 1).map_or(file_len, |n| n.offset);
            out = Some(match out {
                None => (e.offset, end),
                Some((s, _)) => (s, end),
            });
        }
        out
    }

    /// The byte range holding every record of `stream` (any stream: `None`) numbered in
    /// `[first, last]`, as [`TimeIndex::range`] does for times.
    pub fn seq_range(&self, stream: Option<u32>, first: u64, last: u64, file_len: u64) -> Option<(u64, u64)> {
        let mut out: Option<(u64, u64)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            let hit = e
                .seq
                .iter()
                .any(|&[s, lo, hi]| stream.map_or(true, |t| u64::from(t) == s) && hi >= first && lo <= last);
            if hit {
                let end = self.entries.get(i + 1).map_or(file_len, |n| n.offset);
                out = Some(out.map_or((e.offset, end), |(s, _)| (s, end)));
            }
        }
        out
    }
}

/// An entry being built: flat, so that building allocates only when the flat vectors grow.
#[derive(Clone, Copy, Debug)]
struct Flat {
    offset: u64,
    records: u64,
    arrival: [u64; 2],
    data: [u64; 2],
    spans: (usize, usize),
}

const NONE: [u64; 2] = [u64::MAX, 0];

fn widen(r: &mut [u64; 2], v: u64) {
    r[0] = r[0].min(v);
    r[1] = r[1].max(v);
}

fn some(r: [u64; 2]) -> Option<[u64; 2]> {
    (r[0] <= r[1]).then_some(r)
}

/// Builds a file's [`TimeIndex`] from its records as the writer reads them back.
#[derive(Debug)]
pub struct IndexBuilder {
    clock: Option<DataClock>,
    exact: bool,
    /// The file's own time (when it opened): the date a Mark5B time is read near.
    pub near_ns: u64,
    entries: Vec<Flat>,
    /// `[stream, lowest, highest]` of every entry, entry after entry.
    spans: Vec<[u64; 3]>,
    /// Per ledger slot: its span in the current entry (`usize::MAX`: none yet).
    slot_span: Vec<usize>,
    /// Raw files: (file offset, time) of the capture's marks.
    marks: Vec<(u64, u64)>,
    /// Bytes between entries now (doubles past [`MAX_ENTRIES`]), and between marks kept.
    every: u64,
    mark_every: u64,
    /// Entries when `every` last doubled.
    entries_at_double: usize,
}

impl IndexBuilder {
    /// A builder for a file opened at `opened_ns`; `exact` when every record brings its own
    /// arrival time (pcap). `expect_bytes` sizes the vectors up front (the file size limit).
    pub fn new(clock: Option<DataClock>, exact: bool, opened_ns: u64, expect_bytes: u64) -> IndexBuilder {
        let n = (expect_bytes / INDEX_EVERY).clamp(16, 1 << 16) as usize + 2;
        IndexBuilder {
            clock,
            exact,
            near_ns: opened_ns,
            entries: Vec::with_capacity(n),
            spans: Vec::with_capacity(n * 2),
            slot_span: Vec::with_capacity(16),
            marks: if exact { Vec::new() } else { Vec::with_capacity(n * 4 + 2) },
            every: INDEX_EVERY,
            mark_every: 0,
            entries_at_double: 0,
        }
    }

    /// Whether the format has its own time (so the ledger asks each record for it).
    pub fn wants_data_time(&self) -> bool {
        self.clock.is_some()
    }

    /// A capture time mark: every record at or after `offset` arrived at or after `ns`, every
    /// record before it at or before `ns`.
    pub fn mark(&mut self, offset: u64, ns: u64) {
        if self.exact {
            return;
        }
        if let Some(&(o, _)) = self.marks.last() {
            if offset < o.saturating_add(self.mark_every) {
                return;
            }
        }
        if self.marks.len() >= MAX_MARKS {
            // Thin out: every other mark, twice the spacing from now on. The bounds stay true,
            // only coarser.
            let mut i = 0;
            self.marks.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.mark_every = (self.mark_every.max(MARK_EVERY)).saturating_mul(2);
        }
        self.marks.push((offset, ns));
    }

    /// One record at `offset` (file bytes), its arrival time if it carries one, its own time,
    /// and, when it is a sequenced record, its ledger slot, stream and number.
    #[inline]
    pub fn note(&mut self, offset: u64, arrival: Option<u64>, data: Option<u64>, seq: Option<(usize, u32, u64)>) {
        let open_new = match self.entries.last() {
            None => true,
            // An entry starts only at a record that carries its own time when the format has a
            // clock (a SPEAD heap's first packet, a Mark5B frame's first half): a record without
            // one takes the time of the record before it, and that one is then in the same
            // entry, so reading from any entry's start reads the same as from the file's.
            Some(_) if self.clock.is_some() && data.is_none() => false,
            Some(e) => {
                let bytes = offset.saturating_sub(e.offset);
                bytes >= self.every && bytes >= (e.spans.1 - e.spans.0) as u64 * BYTES_PER_STREAM
            }
        };
        if open_new {
            if self.entries.len() - self.entries_at_double >= MAX_ENTRIES {
                self.every = self.every.saturating_mul(2);
                self.entries_at_double = self.entries.len();
            }
            let start = self.spans.len();
            self.entries.push(Flat { offset, records: 0, arrival: NONE, data: NONE, spans: (start, start) });
            self.slot_span.iter_mut().for_each(|s| *s = usize::MAX);
        }
        let Some(e) = self.entries.last_mut() else { return };
        e.records += 1;
        if let Some(t) = arrival {
            widen(&mut e.arrival, t);
        }
        if let Some(t) = data {
            widen(&mut e.data, t);
        }
        if let Some((slot, stream, n)) = seq {
            if slot >= self.slot_span.len() {
                self.slot_span.resize(slot + 1, usize::MAX);
            }
            match self.slot_span[slot] {
                usize::MAX => {
                    self.slot_span[slot] = self.spans.len();
                    self.spans.push([u64::from(stream), n, n]);
                    e.spans.1 = self.spans.len();
                }
                k => {
                    let s = &mut self.spans[k];
                    s[1] = s[1].min(n);
                    s[2] = s[2].max(n);
                }
            }
        }
    }

    /// The index of the finished file, `file_len` bytes long, closed at `closed_ns`. Raw files
    /// get each entry's arrival bounds from the marks around it (the file's open and close
    /// times where no mark is).
    pub fn finish(&self, file_len: u64, closed_ns: u64) -> TimeIndex {
        let entries: Vec<IndexEntry> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.offset < file_len && e.records > 0)
            .map(|(i, e)| {
                let end = self.entries.get(i + 1).map_or(file_len, |n| n.offset.min(file_len));
                let arrival = if self.exact {
                    some(e.arrival).unwrap_or([self.near_ns, closed_ns])
                } else {
                    // The marks are in offset order: the last at or before the entry's start,
                    // the first at or after its end (binary searches, not scans: a file of
                    // days has thousands of entries and marks).
                    let i = self.marks.partition_point(|m| m.0 <= e.offset);
                    let lo = i.checked_sub(1).map_or(self.near_ns, |j| self.marks[j].1);
                    let k = self.marks.partition_point(|m| m.0 < end);
                    let hi = self.marks.get(k).map_or(closed_ns, |m| m.1);
                    [lo, hi.max(lo)]
                };
                IndexEntry {
                    offset: e.offset,
                    records: e.records,
                    arrival_ns: arrival,
                    data_time: some(e.data),
                    seq: {
                        let mut v = self.spans[e.spans.0..e.spans.1].to_vec();
                        v.sort_unstable();
                        v
                    },
                }
            })
            .collect();
        let fold = |f: &dyn Fn(&IndexEntry) -> Option<[u64; 2]>| {
            let mut r = NONE;
            for e in &entries {
                if let Some([a, b]) = f(e) {
                    widen(&mut r, a);
                    widen(&mut r, b);
                }
            }
            some(r)
        };
        TimeIndex {
            arrival: if self.exact { ArrivalTimes::Records } else { ArrivalTimes::Marks },
            data_clock: self.clock,
            arrival_ns: fold(&|e| Some(e.arrival_ns)),
            data_time: fold(&|e| e.data_time),
            every_bytes: INDEX_EVERY,
            entries,
            marks: self.marks.iter().filter(|m| m.0 <= file_len).map(|&(o, t)| [o, t]).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_follow_the_bytes_and_ranges_cover_the_window() {
        let mut b = IndexBuilder::new(Some(DataClock::Utc), true, 1000, 0);
        let rec = 1 << 20;
        for i in 0..20u64 {
            b.note(i * rec, Some(1_000 + i * 10), Some(5_000 + i), Some((0, 0, 100 + i)));
        }
        let ix = b.finish(20 * rec, 2_000);
        assert_eq!(ix.entries.len(), 5, "one entry per 4 MiB");
        assert_eq!(ix.entries[1].offset, 4 * rec);
        assert_eq!(ix.entries[1].arrival_ns, [1_040, 1_070]);
        assert_eq!(ix.entries[1].seq, vec![[0, 104, 107]]);
        assert_eq!(ix.arrival_ns, Some([1_000, 1_190]));
        assert_eq!(ix.data_time, Some([5_000, 5_019]));
        // Arrivals 1065..=1085 lie in entries 1 and 2.
        assert_eq!(ix.range(1_065, 1_085, false, 20 * rec), Some((4 * rec, 12 * rec)));
        assert_eq!(ix.range(5_000, 5_000, true, 20 * rec), Some((0, 4 * rec)));
        assert_eq!(ix.range(3_000, 4_000, false, 20 * rec), None);
        assert_eq!(ix.seq_range(Some(0), 117, 500, 20 * rec), Some((16 * rec, 20 * rec)));
        assert_eq!(ix.seq_range(Some(1), 117, 500, 20 * rec), None);
    }

    #[test]
    fn raw_entries_take_their_bounds_from_the_marks_around_them() {
        let mut b = IndexBuilder::new(None, false, 10, 0);
        let mib = 1 << 20;
        for i in 0..12u64 {
            b.mark(i * mib, 100 + i);
            b.note(i * mib, None, None, None);
        }
        let ix = b.finish(12 * mib, 500);
        assert_eq!(ix.arrival, ArrivalTimes::Marks);
        assert_eq!(ix.entries[0].arrival_ns, [100, 104], "from the mark at its start to the one at its end");
        assert_eq!(ix.entries[2].arrival_ns, [108, 500], "the last ends at the close");
    }

    #[test]
    fn entries_start_only_at_records_with_a_time_of_their_own() {
        // Mark5B halves: only every other record carries a header (a time).
        let mut b = IndexBuilder::new(Some(DataClock::Utc), true, 0, 0);
        let rec = 1 << 20;
        for i in 0..20u64 {
            let t = (i % 2 == 0).then_some(1000 + i);
            b.note(i * rec, Some(i), t, Some((0, 0, i / 2)));
        }
        let ix = b.finish(20 * rec, 0);
        assert!(ix.entries.iter().all(|e| (e.offset / rec) % 2 == 0), "{:?}", ix.entries);
        assert_eq!(ix.entries[1].offset, 4 * rec);
    }

    #[test]
    fn the_index_of_a_huge_file_stays_bounded() {
        let mut b = IndexBuilder::new(None, false, 0, 0);
        let mib = 1u64 << 20;
        // 400,000 MiB (a 400 GiB file): 400,000 marks and 100,000 entries at the first spacing.
        for i in 0..400_000u64 {
            b.mark(i * mib, i);
            b.note(i * mib, None, None, None);
        }
        let ix = b.finish(400_000 * mib, 400_000);
        assert!(ix.entries.len() < 3 * MAX_ENTRIES, "{} entries", ix.entries.len());
        assert!(ix.marks.len() <= MAX_MARKS, "{} marks", ix.marks.len());
        assert!(ix.entries.windows(2).all(|w| w[0].offset < w[1].offset));
        // Bounds still hold: every entry's arrival range covers its own records' marks.
        for e in &ix.entries {
            assert!(e.arrival_ns[0] <= e.offset / mib && e.arrival_ns[1] >= e.offset / mib, "{e:?}");
        }
        assert_eq!(ix.problem(400_000 * mib, 0, 0), None);
    }

    #[test]
    fn a_damaged_index_is_named_not_trusted() {
        let mut b = IndexBuilder::new(None, true, 0, 0);
        for i in 0..10u64 {
            b.note(i * (1 << 20), Some(i), None, None);
        }
        let mut ix = b.finish(10 << 20, 0);
        assert_eq!(ix.problem(10 << 20, 0, 1024), None);
        assert!(ix.problem(10 << 20, 0, 1000).is_some(), "entries not on records");
        assert!(ix.problem(1 << 20, 0, 0).is_some(), "past the file's end");
        ix.entries.reverse();
        assert!(ix.problem(10 << 20, 0, 0).is_some(), "out of order");
        let odd = TimeIndex { marks: vec![[u64::MAX - 1, u64::MAX], [u64::MAX, u64::MAX]], ..ix.clone() };
        assert_eq!(odd.arrival_at(u64::MAX), Some(u64::MAX), "no overflow");
    }

    #[test]
    fn many_streams_make_longer_entries() {
        let mut b = IndexBuilder::new(None, true, 0, 0);
        let rec = 8192;
        for i in 0..4096u64 {
            b.note(i * rec, Some(i), None, Some(((i % 64) as usize, (i % 64) as u32, i / 64)));
        }
        let ix = b.finish(4096 * rec, 0);
        // 64 streams x 256 KiB = 16 MiB per entry, not 4 MiB.
        assert_eq!(ix.entries.len(), 2);
        assert_eq!(ix.entries[0].seq.len(), 64);
    }
}
