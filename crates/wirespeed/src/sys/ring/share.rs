//! Memory a recorder shares read-only with taps in other processes: memfd-backed mappings
//! (the recorder's, writable) and their read-only views (a tap's, opened through
//! `/proc/PID/fd/N`).
//!
//! A memfd rather than a file in /dev/shm: it disappears with the recorder however it ends
//! (a tap that still maps it keeps its pages until it unmaps), so nothing is ever left behind
//! for someone to clean up; any process allowed to read the recorder's /proc entry (same user,
//! or root, in any network namespace of the same PID namespace) can open it.
//!
//! The bytes are only ever touched through atomics ([`HeaderMap`], [`ReadOnlyMap::load`]) or
//! copied out whole ([`ReadOnlyMap::copy_out`]); no reference to shared bytes that another
//! process may change is ever handed to safe code. The protocol that makes a copy trustworthy
//! (a seqlock on the writer's frontier) is in `spool::share`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of a share header: one page of 64-bit words.
pub const HEADER_BYTES: usize = 4096;
/// 64-bit words in a share header.
pub const HEADER_WORDS: usize = HEADER_BYTES / 8;
/// The header word holding the producer's overwrite frontier: it may write stream positions
/// below it, so the bytes of position `p` are intact while `frontier <= p + capacity`. The
/// rest of the header's layout is `spool::share`'s.
pub const FRONTIER_WORD: usize = 6;

/// A new memfd of `len` bytes; `hugetlb` asks for the reserved huge-page pool.
pub(super) fn memfd(name: &str, len: usize, hugetlb: bool) -> io::Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a memfd name"))?;
    let flags = libc::MFD_CLOEXEC | if hugetlb { libc::MFD_HUGETLB } else { 0 };
    // SAFETY: a valid NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by memfd_create and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on our own descriptor; the result is checked.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Map `len` bytes of `fd` shared at `at` (MAP_FIXED inside a reservation of ours) or
/// anywhere (`at` null), with `prot`.
pub(super) fn map_fd(fd: RawFd, len: usize, at: *mut u8, prot: libc::c_int) -> io::Result<*mut u8> {
    let flags = libc::MAP_SHARED | if at.is_null() { 0 } else { libc::MAP_FIXED };
    // SAFETY: a shared mapping of a descriptor we hold; with MAP_FIXED, `at` lies inside an
    // anonymous reservation this module made for exactly this (the caller's contract), so
    // nothing of anyone else's is replaced. The result is checked.
    let p = unsafe { libc::mmap(at.cast(), len, prot, flags, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}

/// The recorder's writable share header: one page in a memfd of its own.
pub struct HeaderMap {
    ptr: *mut u8,
    fd: OwnedFd,
}

// SAFETY: the page is only accessed through atomics.
unsafe impl Send for HeaderMap {}
// SAFETY: as above.
unsafe impl Sync for HeaderMap {}

impl HeaderMap {
    /// A zeroed header page.
    pub fn new(name: &str) -> io::Result<HeaderMap> {
        let fd = memfd(name, HEADER_BYTES, false)?;
        let ptr = map_fd(fd.as_raw_fd(), HEADER_BYTES, std::ptr::null_mut(), libc::PROT_READ | libc::PROT_WRITE)?;
        Ok(HeaderMap { ptr, fd })
    }

    /// The header's words, for the recorder's stores.
    #[inline]
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned and HEADER_BYTES long, lives as long as self, and
        // is only ever accessed atomically (AtomicU64 has u64's size and alignment). Other
        // processes map it read-only and only load.
        unsafe { std::slice::from_raw_parts(self.ptr as *const AtomicU64, HEADER_WORDS) }
    }

    /// The descriptor a tap opens as `/proc/PID/fd/N`.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for HeaderMap {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`; the words() borrows end with self.
        unsafe { libc::munmap(self.ptr.cast(), HEADER_BYTES) };
    }
}

/// A tap's read-only view of a shared file (a header page or a ring).
pub struct ReadOnlyMap {
    ptr: *const u8,
    len: usize,
}

// SAFETY: read-only memory, read through atomics or copied out.
unsafe impl Send for ReadOnlyMap {}

impl ReadOnlyMap {
    /// Open `path` read-only and map its first `len` bytes PROT_READ. The mapping cannot be
    /// written through: a tap can never disturb the recorder.
    pub fn open(path: &std::path::Path, len: usize) -> io::Result<ReadOnlyMap> {
        let f = std::fs::File::open(path)?;
        let size = f.metadata()?.len();
        if size < len as u64 || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} holds {size} bytes, not the {len} its descriptor says", path.display()),
            ));
        }
        let ptr = map_fd(f.as_raw_fd(), len, std::ptr::null_mut(), libc::PROT_READ)?;
        Ok(ReadOnlyMap { ptr, len })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (never: `open` refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Load 64-bit word `i` (a header's field). Out of range reads 0.
    #[inline]
    pub fn load(&self, i: usize, order: Ordering) -> u64 {
        if (i + 1) * 8 > self.len {
            return 0;
        }
        // SAFETY: inside the mapping, 8-byte aligned (the mapping is page-aligned); an atomic
        // load never writes, so PROT_READ is enough; AtomicU64 has u64's layout.
        let a = unsafe { &*(self.ptr.add(i * 8) as *const AtomicU64) };
        a.load(order)
    }

    /// Copy `dst.len()` bytes from offset `at` (clamped to the mapping: returns false and
    /// copies nothing when they do not all lie inside). The bytes may be changing while they
    /// are copied: the caller decides afterwards, by its protocol, whether the copy counts.
    #[inline]
    pub fn copy_out(&self, at: usize, dst: &mut [u8]) -> bool {
        if at.checked_add(dst.len()).map_or(true, |end| end > self.len) {
            return false;
        }
        // SAFETY: [at, at + len) lies inside the mapping; dst is our own memory, distinct from
        // it. Another process may write these bytes meanwhile: the copy may then hold a mix,
        // which is plain bytes (no invalid values) and which the caller discards when its
        // seqlock check fails; no reference to the shared bytes outlives this call.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(at), dst.as_mut_ptr(), dst.len()) };
        true
    }
}

impl Drop for ReadOnlyMap {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `open`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Whether process `pid` exists and started at `start_ticks` (its /proc stat field 22): a
/// recorder that died, or a pid reused by another program since, is not alive.
pub fn process_alive(pid: u32, start_ticks: u64) -> bool {
    process_start_ticks(pid) == Some(start_ticks)
}

/// When process `pid` started, in clock ticks since boot (/proc/PID/stat field 22).
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}
