//! Opening a recording for another program to read (the Python binding's `wirespeed.open`):
//! which files make it, each file's sidecar and how to read it, and where every record lies in
//! a file, found the way `verify` finds them ([`verify::collect`](super::verify::collect), the
//! same sidecar and layout rules) and read with the same pcap views.
//!
//! Nothing here copies payloads: a raw file's records are `record_len` bytes back to back from
//! offset 0, so a reader maps the file; a pcap file's records are indexed ([`index_pcap`]:
//! where each payload lies, its length, time stamp and source) for a reader to map the same
//! way. The VDIF and Mark5B header fields of every record come out as columns
//! ([`header_columns`]), read through the formats' header views.

use super::verify::{self, Skipped, VerifyOptions};
use super::{parse_pcap_global, parse_pcap_packet, pcap, FileFormat, PcapInfo, ReadLayout, Sidecar, PART_SUFFIX};
use crate::error::{Error, Result};
use crate::ledger::LedgerCounts;
use crate::wire::columns::{Column, HeaderColumns, HeaderKind};
use crate::wire::Format;
use std::io::{BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Longest pcap record accepted (as `verify` does): a longer claimed length means the file
/// cannot be framed past it.
const MAX_CAPLEN: usize = 262_144;

/// One file of a recording, ready to read.
#[derive(Clone, Debug)]
pub struct OpenFile {
    /// The data file.
    pub path: PathBuf,
    /// Its sidecar file, when there is one.
    pub sidecar_path: Option<PathBuf>,
    /// The sidecar, when it could be read.
    pub sidecar: Option<Sidecar>,
    /// Why the sidecar could not be read, when it could not.
    pub sidecar_error: Option<String>,
    /// How to read the records.
    pub layout: ReadLayout,
    /// Where its records start in the file: 0, or a Mark6 block's place in its disk's file.
    pub offset: u64,
    /// The length read from `offset`: the file's when opened, or the block's.
    pub bytes: u64,
    /// A `.part` file: the recorder never finished it.
    pub part: bool,
}

impl OpenFile {
    /// Records in a raw file, and the bytes after the last whole one (pcap files: `None`, their
    /// records have to be walked, see [`index_pcap`]).
    pub fn raw_records(&self) -> Option<(u64, u64)> {
        let n = self.layout.record_len as u64;
        (self.layout.file_format == FileFormat::Raw && n > 0).then(|| (self.bytes / n, self.bytes % n))
    }

    /// The header the records carry (VDIF or Mark5B), and where it starts in each record's
    /// payload: after the transport prefix a pcap keeps (the VTP or Mark5B PSN); raw files
    /// hold the frames without it.
    pub fn header(&self) -> Option<(HeaderKind, usize)> {
        let kind = HeaderKind::of(&*self.layout.reader)?;
        let at = match self.layout.file_format {
            FileFormat::Raw => 0,
            FileFormat::Pcap => super::recordable(&*self.layout.reader).raw_strip(),
        };
        Some((kind, at))
    }
}

/// The files of a recording, in recording order.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    /// The files.
    pub files: Vec<OpenFile>,
    /// Files of the directories given that are not recordings.
    pub skipped: Vec<Skipped>,
}

impl Recording {
    /// The sidecars' ledger totals added up (loss between files is only seen by `verify`,
    /// which reads the files as one stream).
    pub fn sidecar_total(&self) -> LedgerCounts {
        let mut t = LedgerCounts::default();
        for s in self.files.iter().filter_map(|f| f.sidecar.as_ref()) {
            t.merge(&s.total);
        }
        t
    }
}

/// Open the recording at `paths` (files, or directories read as `verify` reads them). A file
/// without a sidecar needs `format` (or a sibling's sidecar) to say what it holds.
pub fn open(paths: &[PathBuf], format: Option<Arc<dyn Format>>) -> Result<Recording> {
    let found = verify::collect(paths, format.as_ref())?;
    if found.files.is_empty() {
        let names: Vec<String> = found.orphans.iter().map(|p| p.display().to_string()).collect();
        return Err(Error::not_found(format!(
            "no data files to open: only sidecars whose data file is missing ({})",
            names.join(", ")
        )));
    }
    let sides: Vec<_> = found.files.iter().map(|f| verify::sidecar_of(f)).collect();
    let sibling = sides.iter().flatten().find_map(|(_, r)| r.as_ref().ok()).cloned();
    let opts = VerifyOptions { format, window: 0 };
    let mut files = Vec::with_capacity(found.files.len());
    for (path, side) in found.files.iter().zip(sides) {
        let (sidecar_path, sidecar, sidecar_error) = match side {
            Some((p, Ok(s))) => (Some(p), Some(s), None),
            Some((p, Err(e))) => (Some(p), None, Some(e)),
            None => (None, None, None),
        };
        let layout = verify::layout_for(path, sidecar.as_ref(), &opts, sibling.as_ref())?;
        let md = std::fs::metadata(path).map_err(|e| Error::io(format!("cannot read {}: {e}", path.display())))?;
        let part = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(PART_SUFFIX));
        files.push(OpenFile {
            path: path.clone(),
            sidecar_path,
            sidecar,
            sidecar_error,
            layout,
            offset: 0,
            bytes: md.len(),
            part,
        });
    }
    Ok(Recording { files, skipped: found.skipped })
}

/// Open a scan scattered over mount points ([`super::scan::find`]) as one recording in number
/// order: a FlexBuff scan's chunks as files with their sidecars, a Mark6 scan's blocks as raw
/// pieces of its disks' files (each read at its offset). A scan without sidecars is read as
/// `format`, or by the format learned from its frames.
pub fn open_scan(found: &super::scan::FoundScan, format: Option<Arc<dyn Format>>) -> Result<Recording> {
    let format = match format {
        Some(f) => Some(f),
        None if found.sidecars.is_empty() => Some(verify::learn_scan_format(found)?.0),
        None => None,
    };
    if found.layout == super::scan::ScanLayout::FlexBuff {
        let paths: Vec<PathBuf> = found.pieces.iter().map(|p| p.path.clone()).collect();
        return open(&paths, format);
    }
    let side = found.sidecars.iter().find_map(|p| verify::sidecar_of_file(p).ok());
    let opts = VerifyOptions { format, window: 0 };
    let first = found.pieces.first().map(|p| p.path.clone()).unwrap_or_default();
    let mut layout = verify::layout_for(&first, side.as_ref(), &opts, None)?;
    layout.file_format = FileFormat::Raw;
    let files = found
        .pieces
        .iter()
        .map(|p| OpenFile {
            path: p.path.clone(),
            sidecar_path: None,
            sidecar: None,
            sidecar_error: None,
            layout: layout.clone(),
            offset: p.offset,
            bytes: p.len,
            part: false,
        })
        .collect();
    Ok(Recording { files, skipped: Vec::new() })
}

/// Where every record of a pcap file lies, and what its header says: one entry per record,
/// in file order.
#[derive(Clone, Debug, Default)]
pub struct PcapIndex {
    /// The global header (None: the file does not start with one).
    pub info: Option<PcapInfo>,
    /// File offset of each record's 16-byte pcap header.
    pub record_offsets: Vec<u64>,
    /// File offset of each record's UDP payload (0 when it has none: see `readable`).
    pub payload_offsets: Vec<u64>,
    /// Payload bytes of each record (0 when it has none).
    pub payload_lens: Vec<u32>,
    /// Time stamp of each record, ns since the Unix epoch.
    pub time_ns: Vec<u64>,
    /// Source of each record's UDP datagram, when it is one.
    pub sources: Vec<Option<SocketAddr>>,
    /// Whether each record is a whole UDP datagram (else: another protocol, a fragment, or
    /// cut short by a snap length), as `verify` judges it.
    pub readable: Vec<bool>,
    /// Bytes after the last whole record.
    pub trailing_bytes: u64,
    /// Why the file could not be read to its end, if it could not.
    pub problem: Option<String>,
}

/// Index the records of the pcap file `path`, reading at most its first `len` bytes (its
/// length when opened).
pub fn index_pcap(path: &Path, len: u64) -> Result<PcapIndex> {
    let mut idx = PcapIndex::default();
    walk_pcap(path, len, &mut idx, |_, _| {})?;
    Ok(idx)
}

fn open_read(path: &Path, offset: u64, len: u64) -> Result<std::io::Take<BufReader<std::fs::File>>> {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(format!("cannot open {}: {e}", path.display())))?;
    f.seek(SeekFrom::Start(offset)).map_err(|e| Error::io(format!("cannot read {}: {e}", path.display())))?;
    Ok(BufReader::with_capacity(1 << 20, f).take(len))
}

/// Fill `buf` as far as the file allows; the bytes read.
fn fill(r: &mut impl Read, buf: &mut [u8], path: &Path) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(format!("cannot read {}: {e}", path.display()))),
        }
    }
    Ok(n)
}

/// Walk a pcap file's records into `idx`, handing each readable payload to `each` (record
/// number, payload).
fn walk_pcap(path: &Path, len: u64, idx: &mut PcapIndex, mut each: impl FnMut(usize, &[u8])) -> Result<()> {
    let mut r = open_read(path, 0, len)?;
    let mut global = [0u8; super::PCAP_GLOBAL_LEN];
    let n = fill(&mut r, &mut global, path)?;
    if n < global.len() {
        idx.trailing_bytes = n as u64;
        idx.problem = Some(format!("the file ends inside the 24-byte pcap header ({n} bytes): no records"));
        return Ok(());
    }
    let Some(info) = parse_pcap_global(&global) else {
        idx.problem = Some("the file does not start with a pcap header (wrong magic number)".into());
        return Ok(());
    };
    idx.info = Some(info);
    let mut at = global.len() as u64;
    let mut head = [0u8; pcap::PCAP_RECORD_LEN];
    let mut data = vec![0u8; MAX_CAPLEN];
    loop {
        let n = fill(&mut r, &mut head, path)?;
        if n < head.len() {
            idx.trailing_bytes = n as u64;
            return Ok(());
        }
        let h = pcap::RecordHeader::new_checked(&head[..], info.order()).expect("16 bytes");
        let caplen = h.caplen() as usize;
        if caplen > MAX_CAPLEN {
            idx.problem = Some(format!(
                "a record header after record {} claims an impossible length ({caplen} bytes): the rest of the file cannot be read",
                idx.record_offsets.len()
            ));
            idx.trailing_bytes = len - at;
            return Ok(());
        }
        let got = fill(&mut r, &mut data[..caplen], path)?;
        if got < caplen {
            idx.trailing_bytes = (head.len() + got) as u64;
            return Ok(());
        }
        let rec = &data[..caplen];
        let body = at + pcap::PCAP_RECORD_LEN as u64;
        let (src, payload) = parse_pcap_packet(&info, rec, h.origlen());
        let i = idx.record_offsets.len();
        idx.record_offsets.push(at);
        idx.time_ns.push(h.unix_ns(info.nanos));
        idx.sources.push(src);
        match payload {
            Some(p) => {
                idx.payload_offsets.push(body + (p.as_ptr() as usize - rec.as_ptr() as usize) as u64);
                idx.payload_lens.push(p.len() as u32);
                idx.readable.push(true);
                each(i, p);
            }
            None => {
                idx.payload_offsets.push(0);
                idx.payload_lens.push(0);
                idx.readable.push(false);
            }
        }
        at = body + caplen as u64;
    }
}

/// The VDIF or Mark5B header fields of every record of `file`, as columns (one row per record;
/// a pcap record that is not a whole UDP datagram gets `header_ok = false`). `None` when the
/// file's format has no such header.
pub fn header_columns(file: &OpenFile) -> Result<Option<Vec<Column>>> {
    let Some((kind, at)) = file.header() else { return Ok(None) };
    let mut cols = HeaderColumns::new(kind);
    match file.layout.file_format {
        FileFormat::Raw => {
            let (records, _) = file.raw_records().unwrap_or((0, 0));
            let mut r = open_read(&file.path, file.offset, file.bytes)?;
            let mut rec = vec![0u8; file.layout.record_len];
            for _ in 0..records {
                if fill(&mut r, &mut rec, &file.path)? < rec.len() {
                    break; // the file shrank since it was opened
                }
                cols.push(&rec);
            }
        }
        FileFormat::Pcap => {
            let mut idx = PcapIndex::default();
            let mut rows = 0usize;
            walk_pcap(&file.path, file.bytes, &mut idx, |i, payload| {
                while rows < i {
                    cols.push(&[]); // records before this one that were not datagrams
                    rows += 1;
                }
                cols.push(payload.get(at..).unwrap_or(&[]));
                rows += 1;
            })?;
            while rows < idx.record_offsets.len() {
                cols.push(&[]);
                rows += 1;
            }
        }
    }
    Ok(Some(cols.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::{pcap_global_header, pcap_record_header};
    use crate::wire::spec;
    use std::net::{Ipv4Addr, SocketAddrV4};

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn dir(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("ws-open-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    /// A pcap of VTP datagrams (PSN, then a VDIF frame) with one non-UDP record and a cut
    /// tail: every payload is found where it lies, and the header columns skip the PSN.
    #[test]
    fn pcap_records_are_indexed_where_they_lie() {
        let d = dir("pcap");
        let fmt = spec::parse("vtp,frame=96,fps=100,epoch=50,start=7").unwrap();
        let src = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 4000);
        let mut file = pcap_global_header().to_vec();
        let mut want = Vec::new();
        let mut dg = vec![0u8; fmt.packet_len()];
        for seq in 0..3u64 {
            fmt.emit(0, seq, &mut dg);
            file.extend_from_slice(&pcap_record_header(1000 + seq, src, src, dg.len()));
            want.push((file.len() as u64, dg.clone()));
            file.extend_from_slice(&dg);
            if seq == 1 {
                // Not UDP: a record of 20 bytes of an IPv4 header with protocol 6.
                let mut h = [0u8; 16];
                h[8..12].copy_from_slice(&20u32.to_le_bytes());
                h[12..16].copy_from_slice(&20u32.to_le_bytes());
                file.extend_from_slice(&h);
                let mut ip = [0u8; 20];
                ip[0] = 0x45;
                ip[9] = 6;
                file.extend_from_slice(&ip);
            }
        }
        file.extend_from_slice(&[1, 2, 3]);
        let p = d.0.join("x.pcap");
        std::fs::write(&p, &file).unwrap();
        let idx = index_pcap(&p, file.len() as u64).unwrap();
        assert_eq!(idx.record_offsets.len(), 4);
        assert_eq!(idx.readable, vec![true, true, false, true]);
        assert_eq!(idx.trailing_bytes, 3);
        assert_eq!(idx.time_ns[3], 1002);
        assert_eq!(idx.sources[0], Some(SocketAddr::V4(src)));
        for (k, i) in [0usize, 1, 3].into_iter().enumerate() {
            let (off, bytes) = &want[k];
            assert_eq!(idx.payload_offsets[i], *off);
            let o = *off as usize;
            assert_eq!(&file[o..o + idx.payload_lens[i] as usize], &bytes[..]);
        }
        let rec = open(&[p], Some(fmt)).unwrap();
        let f = &rec.files[0];
        assert_eq!(f.layout.file_format, FileFormat::Pcap);
        assert_eq!(f.header().map(|h| h.1), Some(8));
        let cols = header_columns(f).unwrap().unwrap();
        let get = |n: &str| cols.iter().find(|c| c.name == n).unwrap().values.clone();
        use crate::wire::columns::Values;
        assert_eq!(get("header_ok"), Values::Bool(vec![true, true, false, true]));
        assert_eq!(get("frame"), Values::U32(vec![0, 1, 0, 2]));
        assert_eq!(get("seconds"), Values::U32(vec![7, 7, 0, 7]));
    }

    #[test]
    fn bad_input_is_one_clear_error() {
        let d = dir("bad");
        let missing = d.0.join("nothing-here");
        let e = open(&[missing], None).unwrap_err().to_string();
        assert!(e.contains("cannot read") && e.contains("nothing-here"), "{e}");
        let stray = d.0.join("notes.txt");
        std::fs::write(&stray, b"hello").unwrap();
        let e = open(&[stray], None).unwrap_err().to_string();
        assert!(e.contains("cannot tell what") && e.contains("no sidecar"), "{e}");
        let e = open(std::slice::from_ref(&d.0), None).unwrap_err().to_string();
        assert!(e.contains("holds no recordings"), "{e}");
    }
}
