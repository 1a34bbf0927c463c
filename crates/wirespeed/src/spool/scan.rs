//! Scans scattered over mount points in the layouts VLBI stations read: FlexBuff and Mark6.
//!
//! A station records one scan at a time at tens of Gb/s, more than one disk takes, so a scan is
//! cut into chunks of whole frames and the chunks are spread over many disks. Two layouts are
//! what the station world (jive5ab, DiFX's vbs readers, the e-transfer tools, the Mark6 tools)
//! reads, and wirespeed writes both exactly:
//!
//! - **FlexBuff**: one directory per scan per mount point, `<mount>/<SCAN>/`, holding chunks
//!   `<SCAN>.NNNNNNNN` (an 8-digit decimal chunk number from 0, one sequence over all mount
//!   points): whole frames back to back, no header. A reader collects every `SCAN.NNNNNNNN`
//!   over the mount points and orders them by number (jive5ab's libvbs matches exactly
//!   `^SCAN\.[0-9]{8}$`, so wirespeed's sidecars, `.SCAN.NNNNNNNN.json`, are never read as data).
//! - **Mark6** (scatter-gather v2): one file per mount point named `<SCAN>`: a 20-byte file
//!   header (sync word 0xfeed6666, version 2, block size, packet format VDIF=0/Mark5B=1,
//!   packet size), then blocks, each an 8-byte header (int32 block number, int32 size including
//!   the header) and whole frames; a reader orders the blocks of all files by number. The
//!   sidecar of a disk's file is `.SCAN.mark6.json` beside it.
//!
//! Writing is [`scatter`](super::scatter); this module names, validates, finds and reads.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The chunk size jive5ab uses unless told otherwise (its work buffer, at least 128 MiB): a
/// chunk is this rounded down to whole frames.
pub const FLEXBUFF_CHUNK: u64 = 128 << 20;
/// The Mark6 block size d-plane and jive5ab write unless told otherwise.
pub const MARK6_BLOCK: u64 = 8 << 20;
/// The Mark6 file header's sync word.
pub const MARK6_SYNC: u32 = 0xfeed_6666;
/// Bytes of the Mark6 file header.
pub const MARK6_FILE_HEADER: usize = 20;
/// Bytes of each Mark6 block header.
pub const MARK6_BLOCK_HEADER: usize = 8;
/// Longest scan name: room in a 255-byte file name for the chunk number and the sidecar's.
pub const MAX_SCAN_LEN: usize = 200;

/// How a scan lies on its disks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanLayout {
    /// `<mount>/<SCAN>/<SCAN>.NNNNNNNN` chunks.
    FlexBuff,
    /// `<mount>/<SCAN>` files of numbered blocks.
    Mark6,
}

impl ScanLayout {
    /// Parse `flexbuff` or `mark6` (jive5ab's `mk6` too).
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "flexbuff" | "vbs" => Ok(ScanLayout::FlexBuff),
            "mark6" | "mk6" => Ok(ScanLayout::Mark6),
            _ => Err(format!("unknown layout '{s}': use flexbuff (chunks in a directory per scan) or mark6")),
        }
    }

    /// The layout's name as the options spell it.
    pub fn name(self) -> &'static str {
        match self {
            ScanLayout::FlexBuff => "flexbuff",
            ScanLayout::Mark6 => "mark6",
        }
    }
}

/// Check a scan name before anything is created: it names a directory or file directly inside
/// each mount point, so it is letters, digits, `_`, `-` and `+` only: no '/' or '..' (nothing
/// outside the mount point), none of the characters VSI-S gives a meaning (`:;=?`), no
/// whitespace, and no '.', which jive5ab's reader refuses in a chunk's name (a scan `a.b` is
/// recorded by jive5ab but cannot be read back by it).
pub fn validate_scan_name(scan: &str) -> std::result::Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "scan name {scan:?} {why}: a scan name is a file name such as exp1_ef_no0001 (letters, digits, '_', '-', '+')"
        ))
    };
    if scan.is_empty() {
        return bad("is empty");
    }
    if scan.len() > MAX_SCAN_LEN {
        return bad(&format!("is longer than {MAX_SCAN_LEN} bytes"));
    }
    if let Some(c) = scan.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+'))) {
        return bad(&format!("contains {c:?}"));
    }
    Ok(())
}

/// The name of FlexBuff chunk `n` of `scan`.
pub fn chunk_name(scan: &str, n: u64) -> String {
    format!("{scan}.{n:08}")
}

/// The sidecar of FlexBuff chunk `n` of `scan`, beside it: hidden, and not a chunk name.
pub fn chunk_sidecar_name(scan: &str, n: u64) -> String {
    format!(".{scan}.{n:08}.json")
}

/// The sidecar of a disk's Mark6 file of `scan`, beside it.
pub fn mark6_sidecar_name(scan: &str) -> String {
    format!(".{scan}.mark6.json")
}

/// The chunk number of a FlexBuff chunk file named `name` of `scan` (exactly `SCAN.` and eight
/// or more digits, as readers match them).
pub fn chunk_number(scan: &str, name: &str) -> Option<u64> {
    let digits = name.strip_prefix(scan)?.strip_prefix('.')?;
    (digits.len() >= 8 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// The Mark6 packet format code of a format family (`vdif` 0, `mark5b` 1, others 2 unknown).
pub fn mark6_packet_format(family: &str) -> i32 {
    match family {
        "vdif" | "vtp" => 0,
        "mark5b" => 1,
        _ => 2,
    }
}

/// A Mark6 file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark6Header {
    /// Bytes of a full block including its 8-byte header.
    pub block_size: i32,
    /// 0 VDIF, 1 Mark5B, 2 unknown.
    pub packet_format: i32,
    /// Bytes per frame.
    pub packet_size: i32,
}

impl Mark6Header {
    /// The 20 bytes as written (little-endian, as d-plane writes them on x86).
    pub fn encode(&self) -> [u8; MARK6_FILE_HEADER] {
        let mut b = [0u8; MARK6_FILE_HEADER];
        b[0..4].copy_from_slice(&MARK6_SYNC.to_le_bytes());
        b[4..8].copy_from_slice(&2i32.to_le_bytes());
        b[8..12].copy_from_slice(&self.block_size.to_le_bytes());
        b[12..16].copy_from_slice(&self.packet_format.to_le_bytes());
        b[16..20].copy_from_slice(&self.packet_size.to_le_bytes());
        b
    }

    /// Read a file header; `None` when `b` is not one of version 2.
    pub fn decode(b: &[u8]) -> Option<Mark6Header> {
        let word = |i: usize| i32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        if b.len() < MARK6_FILE_HEADER || u32::from_le_bytes(b[0..4].try_into().ok()?) != MARK6_SYNC || word(4) != 2 {
            return None;
        }
        Some(Mark6Header { block_size: word(8), packet_format: word(12), packet_size: word(16) })
    }
}

/// A Mark6 block header for block `number` holding `data` bytes.
pub fn mark6_block_header(number: u64, data: u64) -> [u8; MARK6_BLOCK_HEADER] {
    let mut b = [0u8; MARK6_BLOCK_HEADER];
    b[0..4].copy_from_slice(&(number as i32).to_le_bytes());
    b[4..8].copy_from_slice(&((data + MARK6_BLOCK_HEADER as u64) as i32).to_le_bytes());
    b
}

/// One piece of a scan: chunk or block `number`, `len` bytes of frames at `offset` of `path`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Piece {
    /// Chunk (FlexBuff) or block (Mark6) number.
    pub number: u64,
    /// The file holding it.
    pub path: PathBuf,
    /// Where its frames start in the file.
    pub offset: u64,
    /// Bytes of frames.
    pub len: u64,
}

/// Schema of a scan's listing (`gather --json` without -w).
pub const SCAN_SCHEMA: &str = "wirespeed.scan/1";

/// A scan found on its mount points: its pieces in order, and what is wrong with the set.
#[derive(Clone, Debug, Serialize)]
pub struct FoundScan {
    /// Schema name and version.
    pub schema: &'static str,
    /// The scan's name.
    pub scan: String,
    /// How it lies on the disks.
    pub layout: ScanLayout,
    /// The mount points that hold part of it.
    pub mounts: Vec<PathBuf>,
    /// Its pieces in number order.
    pub pieces: Vec<Piece>,
    /// Numbers missing between the first and the last piece (ranges, inclusive).
    pub holes: Vec<(u64, u64)>,
    /// The Mark6 header of the first file (Mark6 only).
    pub mark6: Option<Mark6Header>,
    /// Problems found while reading the layout (a piece present twice, a damaged block header).
    pub problems: Vec<String>,
    /// FlexBuff: each chunk's sidecar, where it has one. Mark6: each file's.
    pub sidecars: Vec<PathBuf>,
}

impl FoundScan {
    /// Bytes of frames in the scan.
    pub fn bytes(&self) -> u64 {
        self.pieces.iter().map(|p| p.len).sum()
    }
}

/// Find `scan` on `mounts`: FlexBuff chunks in `<mount>/<SCAN>/` and Mark6 files `<mount>/<SCAN>`
/// (whichever the scan is), ordered by number. A scan on none of them is an error naming where
/// it was looked for.
pub fn find(scan: &str, mounts: &[PathBuf]) -> Result<FoundScan> {
    validate_scan_name(scan).map_err(Error::invalid)?;
    if mounts.is_empty() {
        return Err(Error::invalid("no mount points given: name the disks the scan is on (--from /mnt/disk0 ...)"));
    }
    let mut pieces = Vec::new();
    let mut found_mounts = Vec::new();
    let mut sidecars = Vec::new();
    let mut problems = Vec::new();
    let mut mark6 = None;
    let mut layout = None;
    for m in mounts {
        let dir = m.join(scan);
        let Ok(md) = std::fs::metadata(&dir) else { continue };
        if md.is_dir() {
            layout.get_or_insert(ScanLayout::FlexBuff);
            let entries =
                std::fs::read_dir(&dir).map_err(|e| Error::os(format!("cannot list {}: {e}", dir.display()), &e))?;
            let mut any = false;
            for e in entries.flatten() {
                let name = e.file_name();
                let Some(name) = name.to_str() else { continue };
                let Some(n) = chunk_number(scan, name) else { continue };
                let path = e.path();
                let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                let side = dir.join(chunk_sidecar_name(scan, n));
                if side.exists() {
                    sidecars.push(side);
                }
                pieces.push(Piece { number: n, path, offset: 0, len });
                any = true;
            }
            if any {
                found_mounts.push(m.clone());
            }
        } else if md.is_file() {
            layout.get_or_insert(ScanLayout::Mark6);
            let mut f =
                std::fs::File::open(&dir).map_err(|e| Error::io(format!("cannot open {}: {e}", dir.display())))?;
            let mut head = [0u8; MARK6_FILE_HEADER];
            if f.read_exact(&mut head).is_err() {
                problems.push(format!("{} is shorter than a Mark6 file header", dir.display()));
                continue;
            }
            let Some(h) = Mark6Header::decode(&head) else {
                problems.push(format!("{} is not a Mark6 version 2 file (no 0xfeed6666 header)", dir.display()));
                continue;
            };
            mark6.get_or_insert(h);
            let side = m.join(mark6_sidecar_name(scan));
            if side.exists() {
                sidecars.push(side);
            }
            found_mounts.push(m.clone());
            let total = md.len();
            let mut at = MARK6_FILE_HEADER as u64;
            let mut bh = [0u8; MARK6_BLOCK_HEADER];
            let mut r = std::io::BufReader::with_capacity(64 << 10, f);
            while at + MARK6_BLOCK_HEADER as u64 <= total {
                use std::io::{Seek, SeekFrom};
                if r.seek(SeekFrom::Start(at)).is_err() || r.read_exact(&mut bh).is_err() {
                    break;
                }
                let number = i32::from_le_bytes(bh[0..4].try_into().expect("4 bytes"));
                let size = i32::from_le_bytes(bh[4..8].try_into().expect("4 bytes"));
                if number < 0 || size <= MARK6_BLOCK_HEADER as i32 {
                    problems.push(format!(
                        "{}: a damaged block header at byte {at} (block {number}, size {size}): the rest of the file is not read",
                        dir.display()
                    ));
                    break;
                }
                let data = size as u64 - MARK6_BLOCK_HEADER as u64;
                let offset = at + MARK6_BLOCK_HEADER as u64;
                if offset + data > total {
                    problems.push(format!(
                        "{}: block {number} is cut short ({} of its {data} bytes)",
                        dir.display(),
                        total - offset
                    ));
                    pieces.push(Piece { number: number as u64, path: dir.clone(), offset, len: total - offset });
                    break;
                }
                pieces.push(Piece { number: number as u64, path: dir.clone(), offset, len: data });
                at = offset + data;
            }
        }
    }
    let Some(layout) = layout else {
        let list: Vec<String> = mounts.iter().map(|m| m.display().to_string()).collect();
        // A scan recorded per data stream is there as SCAN_ds<i>: name them.
        let mut streams: Vec<String> = mounts
            .iter()
            .filter_map(|m| std::fs::read_dir(m).ok())
            .flat_map(|rd| rd.flatten().filter_map(|e| e.file_name().to_str().map(str::to_string)))
            .filter(|n| n.strip_prefix(scan).is_some_and(|r| r.starts_with("_ds")))
            .collect();
        streams.sort();
        streams.dedup();
        if !streams.is_empty() {
            return Err(Error::not_found(format!(
                "scan {scan} was recorded per data stream: give one of {}",
                streams.join(", ")
            )));
        }
        return Err(Error::not_found(format!(
            "scan {scan} is on none of {} (looked for {}/{scan}/ and the Mark6 file {}/{scan})",
            list.join(", "),
            list.first().map(String::as_str).unwrap_or("MOUNT"),
            list.first().map(String::as_str).unwrap_or("MOUNT"),
        )));
    };
    // A chunk there twice: the copy with its sidecar is the one its writer finished; one without
    // is a partial copy left on a disk that failed while writing it (and could not be removed).
    let finished = |p: &Piece| {
        layout == ScanLayout::FlexBuff
            && p.path.parent().is_some_and(|d| d.join(chunk_sidecar_name(scan, p.number)).exists())
    };
    // (Mark6: the longest copy, a block cut short on a failed disk being the shorter one.)
    pieces.sort_by(|a, b| {
        a.number.cmp(&b.number).then(finished(b).cmp(&finished(a))).then(b.len.cmp(&a.len)).then(a.path.cmp(&b.path))
    });
    for w in pieces.windows(2) {
        if w[0].number == w[1].number {
            problems.push(if finished(&w[0]) && !finished(&w[1]) {
                format!(
                    "chunk {} is there twice: {} is the finished one (it has its sidecar), {} a partial copy left by a disk that failed while writing it, passed over here: remove it before jive5ab reads the scan (its reader refuses a chunk found twice)",
                    w[1].number,
                    w[0].path.display(),
                    w[1].path.display()
                )
            } else {
                format!("piece {} is there twice: {} and {}", w[1].number, w[0].path.display(), w[1].path.display())
            });
        }
    }
    pieces.dedup_by(|b, a| a.number == b.number);
    let mut holes = Vec::new();
    if let Some(first) = pieces.first() {
        if first.number > 0 {
            holes.push((0, first.number - 1));
        }
    }
    for w in pieces.windows(2) {
        if w[1].number > w[0].number + 1 {
            holes.push((w[0].number + 1, w[1].number - 1));
        }
    }
    sidecars.sort();
    Ok(FoundScan {
        schema: SCAN_SCHEMA,
        scan: scan.to_string(),
        layout,
        mounts: found_mounts,
        pieces,
        holes,
        mark6,
        problems,
        sidecars,
    })
}

/// Expand mount point arguments: each is a directory or a glob pattern of them (`/mnt/disk*`),
/// so a station's many disks are one argument.
pub fn expand_mounts(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for a in args {
        let s = a.to_string_lossy();
        if s.contains(['*', '?', '[']) {
            let mut hits = glob_dirs(&s)?;
            if hits.is_empty() {
                return Err(Error::not_found(format!("{s} matches no directory")));
            }
            out.append(&mut hits);
        } else {
            out.push(a.clone());
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|p| seen.insert(p.clone()));
    Ok(out)
}

/// Directories matching `pattern`, whose wildcards (`*`, `?`, `[...]`) may be in any component.
fn glob_dirs(pattern: &str) -> Result<Vec<PathBuf>> {
    const MAX_LEN: usize = 4096;
    const MAX_WILD_COMPONENTS: usize = 8;
    const MAX_FOUND: usize = 4096;
    if pattern.len() > MAX_LEN
        || pattern.split('/').filter(|c| c.contains(['*', '?', '['])).count() > MAX_WILD_COMPONENTS
    {
        return Err(Error::invalid(format!(
            "{pattern:.80}: a mount point pattern is at most {MAX_LEN} bytes with wildcards in at most {MAX_WILD_COMPONENTS} components"
        )));
    }
    let abs = pattern.starts_with('/');
    let mut cur = vec![if abs { PathBuf::from("/") } else { PathBuf::from(".") }];
    for comp in pattern.split('/').filter(|c| !c.is_empty()) {
        let mut next = Vec::new();
        for base in &cur {
            if !comp.contains(['*', '?', '[']) {
                next.push(base.join(comp));
                continue;
            }
            let Ok(rd) = std::fs::read_dir(base) else { continue };
            let mut names: Vec<String> =
                rd.flatten().filter_map(|e| e.file_name().to_str().map(str::to_string)).collect();
            names.sort();
            for n in names {
                if !n.starts_with('.') && wildcard(comp.as_bytes(), n.as_bytes()) {
                    next.push(base.join(n));
                }
            }
        }
        if next.len() > MAX_FOUND {
            return Err(Error::invalid(format!(
                "{pattern:.80} matches more than {MAX_FOUND} paths: name the disks more closely"
            )));
        }
        cur = next;
    }
    let strip = |p: PathBuf| if abs { p } else { p.strip_prefix(".").map(Path::to_path_buf).unwrap_or(p) };
    Ok(cur.into_iter().filter(|p| p.is_dir()).map(strip).collect())
}

/// Shell-style match of one path component: `*`, `?` and `[abc]`/`[a-z]`/`[!a]` classes. One
/// pass with backtracking to the last `*` only, so a pattern of many stars costs at most the
/// product of the two lengths (a VSI-S client's `set_disks=` pattern cannot stall the station).
fn wildcard(p: &[u8], s: &[u8]) -> bool {
    // One element of the pattern at `pi`: whether it matches `c`, and the next pattern index.
    let step = |pi: usize, c: u8| -> Option<(bool, usize)> {
        match p.get(pi)? {
            b'?' => Some((true, pi + 1)),
            b'[' => match p.iter().skip(pi + 2).position(|&b| b == b']').map(|i| i + pi + 2) {
                Some(close) => {
                    let class = &p[pi + 1..close];
                    let (neg, class) = match class.first() {
                        Some(b'!' | b'^') => (true, &class[1..]),
                        _ => (false, class),
                    };
                    let mut hit = false;
                    let mut i = 0;
                    while i < class.len() {
                        if i + 2 < class.len() && class[i + 1] == b'-' {
                            hit |= class[i] <= c && c <= class[i + 2];
                            i += 3;
                        } else {
                            hit |= class[i] == c;
                            i += 1;
                        }
                    }
                    Some((hit != neg, close + 1))
                }
                None => Some((c == b'[', pi + 1)),
            },
            &b => Some((b == c, pi + 1)),
        }
    };
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if p.get(pi) == Some(&b'*') {
            star = Some((pi + 1, si));
            pi += 1;
            continue;
        }
        match step(pi, s[si]) {
            Some((true, next)) => {
                pi = next;
                si += 1;
            }
            _ => match star {
                Some((after, from)) => {
                    pi = after;
                    si = from + 1;
                    star = Some((after, from + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

/// Reads a scan's frames in order, piece after piece, as one stream (`gather`, `verify`).
pub struct ScanReader {
    pieces: Vec<Piece>,
    at: usize,
    file: Option<std::io::Take<std::fs::File>>,
}

impl ScanReader {
    /// A reader of `scan`'s pieces.
    pub fn new(scan: &FoundScan) -> ScanReader {
        ScanReader { pieces: scan.pieces.clone(), at: 0, file: None }
    }

    /// The piece being read (its index), once reading started.
    pub fn piece(&self) -> usize {
        self.at
    }
}

impl Read for ScanReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::{Seek, SeekFrom};
        loop {
            if self.file.is_none() {
                let Some(p) = self.pieces.get(self.at) else { return Ok(0) };
                let mut f = std::fs::File::open(&p.path)
                    .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.path.display())))?;
                f.seek(SeekFrom::Start(p.offset))?;
                self.file = Some(f.take(p.len));
            }
            let n = self.file.as_mut().expect("opened above").read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            self.file = None;
            self.at += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_names_stay_file_names_and_vsi_s_words() {
        for ok in ["exp1_ef_no0001", "a", "r1234_Wz_123-0456", "t+1"] {
            assert_eq!(validate_scan_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "../x", "a/b", ".hidden", "a.b", "a:b", "a;b", "a=b", "a?b", "a b", "a\tb", &"x".repeat(201)] {
            assert!(validate_scan_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn chunk_names_are_what_libvbs_matches() {
        assert_eq!(chunk_name("exp_ef_1", 0), "exp_ef_1.00000000");
        assert_eq!(chunk_name("exp_ef_1", 123), "exp_ef_1.00000123");
        assert_eq!(chunk_number("exp_ef_1", "exp_ef_1.00000123"), Some(123));
        assert_eq!(chunk_number("exp_ef_1", "exp_ef_1.123456789"), Some(123456789));
        // Sidecars, other scans and short numbers are not chunks.
        for not in [".exp_ef_1.00000000.json", "exp_ef_1.00000000.json", "exp_ef_1.0000001", "exp_ef_10.00000000"] {
            assert_eq!(chunk_number("exp_ef_1", not), None, "{not}");
        }
        assert_eq!(chunk_sidecar_name("s", 7), ".s.00000007.json");
    }

    #[test]
    fn mark6_headers_round_trip_and_match_the_layout() {
        let h = Mark6Header { block_size: 8 << 20, packet_format: 0, packet_size: 8032 };
        let b = h.encode();
        assert_eq!(&b[0..4], &[0x66, 0x66, 0xed, 0xfe]);
        assert_eq!(i32::from_le_bytes(b[4..8].try_into().unwrap()), 2);
        assert_eq!(Mark6Header::decode(&b), Some(h));
        let mut v1 = b;
        v1[4] = 1;
        assert_eq!(Mark6Header::decode(&v1), None, "version 1 is not read");
        assert_eq!(Mark6Header::decode(&b[..19]), None);
        let bh = mark6_block_header(5, 1000);
        assert_eq!(i32::from_le_bytes(bh[0..4].try_into().unwrap()), 5);
        assert_eq!(i32::from_le_bytes(bh[4..8].try_into().unwrap()), 1008, "the size includes the header");
    }

    #[test]
    fn globs_match_like_the_shell() {
        assert!(wildcard(b"disk*", b"disk0"));
        assert!(wildcard(b"disk[0-3]", b"disk2"));
        assert!(!wildcard(b"disk[0-3]", b"disk4"));
        assert!(wildcard(b"disk[!4]", b"disk2"));
        assert!(wildcard(b"d?sk", b"disk"));
        assert!(!wildcard(b"disk*", b"data0"));
        assert!(wildcard(b"*", b""));
        assert!(wildcard(b"a*b*c", b"aXXbYYc") && !wildcard(b"a*b*c", b"aXXbYY"));
        assert!(wildcard(b"*[0-9]", b"disk7") && wildcard(b"**", b"x"));
        // Many stars against a long name: one pass (a backtracking search would not end).
        let p = "*?".repeat(20) + "!";
        assert!(!wildcard(p.as_bytes(), "x".repeat(4000).as_bytes()));
    }

    /// Pieces over three mount points are found in number order, holes and doubles named; a
    /// Mark6 file's blocks are read from their headers.
    #[test]
    fn scans_are_found_in_order_with_their_holes() {
        let root = std::env::temp_dir().join(format!("ws-scan-find-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mounts: Vec<PathBuf> = (0..3).map(|i| root.join(format!("disk{i}"))).collect();
        for (i, m) in mounts.iter().enumerate() {
            std::fs::create_dir_all(m.join("s1")).unwrap();
            for n in [i as u64, i as u64 + 3, i as u64 + 9] {
                std::fs::write(m.join("s1").join(chunk_name("s1", n)), vec![n as u8; 10]).unwrap();
            }
        }
        std::fs::write(mounts[0].join("s1").join(chunk_sidecar_name("s1", 0)), b"{}").unwrap();
        std::fs::write(mounts[0].join("s1").join("notes.txt"), b"x").unwrap();
        let f = find("s1", &mounts).unwrap();
        let nums: Vec<u64> = f.pieces.iter().map(|p| p.number).collect();
        assert_eq!(nums, vec![0, 1, 2, 3, 4, 5, 9, 10, 11]);
        assert_eq!(f.holes, vec![(6, 8)]);
        assert_eq!(f.layout, ScanLayout::FlexBuff);
        assert_eq!(f.sidecars.len(), 1);
        let mut all = Vec::new();
        ScanReader::new(&f).read_to_end(&mut all).unwrap();
        assert_eq!(all.len(), 90);
        assert_eq!(&all[..10], &[0u8; 10]);
        assert_eq!(&all[80..], &[11u8; 10]);
        // Chunk 4 twice: a problem, read once.
        std::fs::write(mounts[0].join("s1").join(chunk_name("s1", 4)), vec![4u8; 10]).unwrap();
        let f = find("s1", &mounts).unwrap();
        assert_eq!(f.problems.len(), 1, "{:?}", f.problems);
        assert_eq!(f.pieces.len(), 9);
        // The copy with its sidecar is the finished one, whatever the order of the disks: the
        // other is a partial copy left by a failed disk, passed over and named.
        std::fs::write(mounts[0].join("s1").join(chunk_name("s1", 4)), [9u8; 3]).unwrap();
        std::fs::write(mounts[1].join("s1").join(chunk_sidecar_name("s1", 4)), b"{}").unwrap();
        let f = find("s1", &mounts).unwrap();
        let four = f.pieces.iter().find(|p| p.number == 4).unwrap();
        assert_eq!(four.path, mounts[1].join("s1").join(chunk_name("s1", 4)));
        assert!(f.problems[0].contains("a partial copy left by a disk that failed"), "{:?}", f.problems);
        // Mark6: blocks 1 and 0 in one file, 2 in another.
        let h = Mark6Header { block_size: 1 << 20, packet_format: 0, packet_size: 4 };
        let mut a = h.encode().to_vec();
        a.extend(mark6_block_header(1, 8));
        a.extend([1u8; 8]);
        a.extend(mark6_block_header(0, 4));
        a.extend([0u8; 4]);
        std::fs::write(mounts[0].join("m6"), &a).unwrap();
        let mut b = h.encode().to_vec();
        b.extend(mark6_block_header(2, 4));
        b.extend([2u8; 4]);
        std::fs::write(mounts[2].join("m6"), &b).unwrap();
        let f = find("m6", &mounts).unwrap();
        assert_eq!(f.layout, ScanLayout::Mark6);
        let mut all = Vec::new();
        ScanReader::new(&f).read_to_end(&mut all).unwrap();
        assert_eq!(all, [vec![0u8; 4], vec![1u8; 8], vec![2u8; 4]].concat());
        assert!(f.holes.is_empty() && f.problems.is_empty());
        assert!(find("nothere", &mounts).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
