//! Memory a recorder shares read-only with taps in other processes: memfd-backed mappings
//! (the recorder's, writable) and their read-only views (a tap's, opened through
//! `/proc/PID/fd/N`).
//!
//! A memfd rather than a file in /dev/shm: it disappears with the recorder however it ends
//! (a tap that still maps it keeps its pages until it unmaps), so nothing is ever left behind
//! for someone to clean up; any process allowed to read the recorder's /proc entry (same user,
//! or root, in any network namespace of the same PID namespace) can open it.
//!
//! A tap maps only what is provably a recorder's: the path must be `/proc/PID/fd/N` of the
//! recorder the descriptor names, the file behind it a memfd of the recorder's own name
//! ([`RING_MEMFD`], [`HEADER_MEMFD`]), sealed against shrinking ([`seal`], set by the recorder
//! before anyone can see the memfd). A shared file that shrank under a mapping would kill the
//! tap with SIGBUS on its next read; a sealed memfd cannot shrink, so a tap's reads cannot
//! fault that way, whoever wrote the descriptor. A tap's view is populated before the tap says
//! it is attached, so that it reads at full speed from its first record.
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

/// The name of a shared ring's memfd (its /proc link reads `/memfd:wirespeed-ring (deleted)`).
pub const RING_MEMFD: &str = "wirespeed-ring";
/// The name of a share header's memfd.
pub const HEADER_MEMFD: &str = "wirespeed-share";

/// The seals every shared memfd carries: its size can never change, and neither can its seals,
/// so that a mapping of it can never find its pages gone (SIGBUS).
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A new memfd of `len` bytes, sealed at that size ([`SEALS`]); `hugetlb` asks for the
/// reserved huge-page pool.
pub(super) fn memfd(name: &str, len: usize, hugetlb: bool) -> io::Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a memfd name"))?;
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | if hugetlb { libc::MFD_HUGETLB } else { 0 };
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
    // SAFETY: fcntl on our own descriptor with an int argument; the result is checked.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// The seals of `fd` (0 for a file that cannot carry any: not a memfd).
fn seals(fd: RawFd) -> libc::c_int {
    // SAFETY: fcntl on a descriptor the caller holds open, no argument; the result is checked.
    let s = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    s.max(0)
}

/// Why `path` cannot be one of recorder `pid`'s shared memfds named `name`, checked on the file
/// opened (not on the path, which may change meanwhile): None when it is one.
fn not_a_share(f: &std::fs::File, path: &str, pid: u32, name: &str) -> Option<String> {
    let own = path
        .strip_prefix(&format!("/proc/{pid}/fd/"))
        .is_some_and(|n| !n.is_empty() && n.len() <= 10 && n.bytes().all(|b| b.is_ascii_digit()));
    if !own {
        return Some(format!(
            "{path} is not one of the recorder's own descriptors (/proc/{pid}/fd/N): this share descriptor was not written by a recorder"
        ));
    }
    let target = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .map(|t| t.display().to_string())
        .unwrap_or_else(|e| format!("unreadable ({e})"));
    if !target.starts_with(&format!("/memfd:{name} ")) {
        return Some(format!(
            "{path} is {target}, not the recorder's shared memory (a memfd named {name}): refusing to map it"
        ));
    }
    let s = seals(f.as_raw_fd());
    if s & libc::F_SEAL_SHRINK == 0 {
        return Some(format!(
            "{path} is not sealed against shrinking, so reading it could crash this tap: refusing it (restart the recorder with this wirespeed version)"
        ));
    }
    None
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
    /// Map the first `len` bytes of recorder `pid`'s shared memfd `name` (a [`RING_MEMFD`] or
    /// [`HEADER_MEMFD`]) at `path`, as a share descriptor names it: refused unless `path` is
    /// `/proc/PID/fd/N` of that recorder and a memfd of that name, sealed against shrinking
    /// (see the module docs). Every page is populated before this returns.
    pub fn open_share(path: &str, pid: u32, name: &str, len: usize) -> Result<ReadOnlyMap, String> {
        let f = std::fs::File::open(path).map_err(|e| {
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                " (a tap reads the recorder's /proc entry: run it as the recorder's user or root)"
            } else {
                ""
            };
            format!("cannot open {path}: {e}{hint}")
        })?;
        if let Some(why) = not_a_share(&f, path, pid, name) {
            return Err(why);
        }
        let m = Self::map_file(&f, std::path::Path::new(path), len).map_err(|e| format!("cannot map {path}: {e}"))?;
        m.populate().map_err(|e| format!("cannot read {path}: {e}"))?;
        Ok(m)
    }

    /// Open `path` read-only and map its first `len` bytes PROT_READ, unchecked (no owner or
    /// descriptor checks, unlike [`ReadOnlyMap::open_share`]): for tests that map their own
    /// process's files.
    pub fn open(path: &std::path::Path, len: usize) -> io::Result<ReadOnlyMap> {
        Self::map_file(&std::fs::File::open(path)?, path, len)
    }

    /// Map the first `len` bytes of `f` PROT_READ. The mapping cannot be written through: a
    /// tap can never disturb the recorder.
    fn map_file(f: &std::fs::File, path: &std::path::Path, len: usize) -> io::Result<ReadOnlyMap> {
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

    /// Fault every page of the view in now (page tables filled), so that reading it later
    /// takes no fault: MADV_POPULATE_READ (Linux 5.14), or one read per page before it.
    fn populate(&self) -> io::Result<()> {
        // SAFETY: advice on exactly our own mapping; populating reads only.
        if unsafe { libc::madvise(self.ptr as *mut libc::c_void, self.len, libc::MADV_POPULATE_READ) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e); // EFAULT: pages that cannot be read (never for a sealed memfd)
        }
        let mut off = 0;
        while off < self.len {
            // SAFETY: off < len: inside our PROT_READ mapping of a memfd sealed against
            // shrinking (checked by the only public constructor), so the read cannot fault
            // beyond the file; a volatile read only, never a reference.
            unsafe { std::ptr::read_volatile(self.ptr.add(off)) };
            off += 4096;
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn own(fd: RawFd) -> String {
        format!("/proc/{}/fd/{fd}", std::process::id())
    }

    /// A recorder's memfd is accepted and populated; its size cannot change, by anyone.
    #[test]
    fn a_recorders_sealed_memfd_is_mapped_and_cannot_shrink() {
        let fd = memfd(RING_MEMFD, 1 << 20, false).unwrap();
        let m = ReadOnlyMap::open_share(&own(fd.as_raw_fd()), std::process::id(), RING_MEMFD, 1 << 20).unwrap();
        assert_eq!(m.len(), 1 << 20);
        let f = std::fs::OpenOptions::new().write(true).open(own(fd.as_raw_fd())).unwrap();
        let e = f.set_len(4096).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "sealed against shrinking: {e}");
        assert!(f.set_len(2 << 20).is_err(), "and against growing");
        // SAFETY: our own descriptor; the seals may not be changed once F_SEAL_SEAL is set.
        assert_eq!(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_WRITE) }, -1);
        let mut b = [0u8; 8];
        assert!(m.copy_out((1 << 20) - 8, &mut b));
    }

    /// Resident bytes of our mapping at `addr` (/proc/self/smaps `Rss`: pages with a page-table
    /// entry, which a read takes no fault for).
    fn rss_of(addr: usize) -> u64 {
        super::super::memory::smaps_kib(addr, &["Rss:"]).unwrap_or(0) * 1024
    }

    /// A tap's view is populated when it is opened: every page is mapped before the tap reads
    /// (and says it is attached), even pages the recorder has not touched yet.
    #[test]
    fn a_taps_view_is_populated_before_it_is_read() {
        let len = 8 << 20;
        let fd = memfd(RING_MEMFD, len, false).unwrap();
        let m = ReadOnlyMap::open_share(&own(fd.as_raw_fd()), std::process::id(), RING_MEMFD, len).unwrap();
        assert_eq!(rss_of(m.ptr as usize), len as u64, "every page of the view is mapped");
    }

    /// Everything that is not a recorder's own sealed memfd of the right name is refused in a
    /// sentence that says why: a regular file, a path that is no /proc/PID/fd/N of the
    /// recorder, an unsealed memfd, a memfd of another name.
    #[test]
    fn anything_but_the_recorders_sealed_memfd_is_refused() {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("ws-share-test-{pid}"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ring");
        std::fs::File::create(&file).unwrap().write_all(&[0u8; 8192]).unwrap();
        let e = ReadOnlyMap::open_share(file.to_str().unwrap(), pid, RING_MEMFD, 8192).err().unwrap();
        assert!(e.contains("is not one of the recorder's own descriptors"), "{e}");
        let f = std::fs::File::open(&file).unwrap();
        let e = ReadOnlyMap::open_share(&own(f.as_raw_fd()), pid, RING_MEMFD, 8192).err().unwrap();
        assert!(e.contains("not the recorder's shared memory"), "{e}");
        let e = ReadOnlyMap::open_share(&own(f.as_raw_fd()), pid + 1, RING_MEMFD, 8192).err().unwrap();
        assert!(e.contains(&format!("/proc/{}/fd/N", pid + 1)), "{e}");
        for bad in [format!("/proc/{pid}/fd/"), format!("/proc/{pid}/fd/../fd/3"), format!("/proc/{pid}/fd/3/x")] {
            let e = ReadOnlyMap::open_share(&bad, pid, RING_MEMFD, 8192).err().unwrap();
            assert!(
                e.contains("is not one of the recorder's own descriptors") || e.contains("cannot open"),
                "{bad}: {e}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
        let unsealed = CString::new(RING_MEMFD).unwrap();
        // SAFETY: a valid name; checked.
        let raw = unsafe { libc::memfd_create(unsealed.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: just created, ours alone.
        let unsealed = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: our own descriptor.
        assert_eq!(unsafe { libc::ftruncate(raw, 8192) }, 0);
        let e = ReadOnlyMap::open_share(&own(unsealed.as_raw_fd()), pid, RING_MEMFD, 8192).err().unwrap();
        assert!(e.contains("not sealed against shrinking"), "{e}");
        let hdr = memfd(HEADER_MEMFD, 8192, false).unwrap();
        let e = ReadOnlyMap::open_share(&own(hdr.as_raw_fd()), pid, RING_MEMFD, 8192).err().unwrap();
        assert!(e.contains("a memfd named wirespeed-ring"), "{e}");
        let e = ReadOnlyMap::open_share(&own(hdr.as_raw_fd()), pid, HEADER_MEMFD, 16384).err().unwrap();
        assert!(e.contains("holds 8192 bytes"), "{e}");
    }
}
