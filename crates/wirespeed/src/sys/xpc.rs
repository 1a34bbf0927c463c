//! The system calls under XPC (`crate::xpc`): shared file mappings (read-write for the owner of
//! a page, read-only for its peers: the seed's firewall), the doorbell (an eventfd), the epoll
//! set that makes a node pollable, pidfds (a peer's death, and the way to reach its doorbell) and
//! `process_vm_readv`, Linux's block-transfer-engine pull.
//!
//! Shared memory is reached only through [`SharedMem`]: atomic loads and stores of aligned
//! words, and byte copies in and out, each bounds-checked, so the XPC code above stays free of
//! `unsafe`. Byte copies race with nothing by protocol: the owner writes a region before it
//! publishes it with a release store, and never again until the reader's acquire-loaded
//! counter says it is done with it.

use super::cvt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A file mapped shared into this process: read-write when this process owns it, read-only
/// when it is a peer's (a write through it would fault: there is no way to write a peer's half).
pub struct SharedMem {
    ptr: *mut u8,
    len: usize,
    writable: bool,
}

// SAFETY: the mapping is plain shared memory; every access goes through atomics or bounds-checked
// copies whose races are excluded by the XPC protocol (see the module doc), from any thread.
unsafe impl Send for SharedMem {}
// SAFETY: as above: &SharedMem only allows atomic access and copies the protocol serialises.
unsafe impl Sync for SharedMem {}

impl SharedMem {
    /// Map `len` bytes of `file` shared; `writable` needs the file open read-write.
    pub fn map(file: &File, len: usize, writable: bool) -> io::Result<SharedMem> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot map 0 bytes"));
        }
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL) of a valid open fd; nothing
        // existing is replaced. The result is checked for MAP_FAILED.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMem { ptr: p as *mut u8, len, writable })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping has no bytes (never: `map` refuses 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether this process may write the mapping (its own half) or only read it (a peer's).
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Start address of the mapping, to find it in `/proc/self/maps`.
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    fn check(&self, off: usize, n: usize, align: usize) {
        assert!(off % align == 0 && off.checked_add(n).is_some_and(|e| e <= self.len), "shared access out of range");
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8, 8);
        // SAFETY: in bounds and 8-byte aligned (checked; the mapping is page aligned); the memory
        // lives as long as &self, and AtomicU64 has the layout of u64. Stores are only made
        // through `store_u64`, which refuses a read-only mapping.
        unsafe { &*(self.ptr.add(off) as *const AtomicU64) }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4, 4);
        // SAFETY: as u64_at, for a 4-byte aligned word.
        unsafe { &*(self.ptr.add(off) as *const AtomicU32) }
    }

    /// Load the 64-bit word at `off`.
    pub fn load_u64(&self, off: usize, o: Ordering) -> u64 {
        self.u64_at(off).load(o)
    }

    /// Store the 64-bit word at `off` (own mapping only).
    pub fn store_u64(&self, off: usize, v: u64, o: Ordering) {
        assert!(self.writable, "store into a read-only mapping");
        self.u64_at(off).store(v, o)
    }

    /// Add to the 64-bit word at `off` (own mapping only); returns the old value.
    pub fn add_u64(&self, off: usize, v: u64, o: Ordering) -> u64 {
        assert!(self.writable, "store into a read-only mapping");
        self.u64_at(off).fetch_add(v, o)
    }

    /// Load the 32-bit word at `off`.
    pub fn load_u32(&self, off: usize, o: Ordering) -> u32 {
        self.u32_at(off).load(o)
    }

    /// Store the 32-bit word at `off` (own mapping only).
    pub fn store_u32(&self, off: usize, v: u32, o: Ordering) {
        assert!(self.writable, "store into a read-only mapping");
        self.u32_at(off).store(v, o)
    }

    /// Copy `out.len()` bytes from `off` out of the mapping.
    pub fn read(&self, off: usize, out: &mut [u8]) {
        self.check(off, out.len(), 1);
        // SAFETY: the source range is inside the mapping (checked), the destination is a
        // distinct Rust slice; the protocol keeps the writer off these bytes while they are read.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), out.as_mut_ptr(), out.len()) }
    }

    /// Copy `data` into the mapping at `off` (own mapping only).
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(self.writable, "write into a read-only mapping");
        self.check(off, data.len(), 1);
        // SAFETY: the destination range is inside a writable mapping (checked); the protocol
        // keeps readers off bytes not yet published.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) }
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region this value mapped; no reference into it outlives
        // &self (all accessors borrow self).
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// A full sequentially consistent fence: the store-then-load ordering of the doorbell protocol
/// (publish, then read the peer's waiting flag; set my waiting flag, then re-check).
pub fn fence_seqcst() {
    std::sync::atomic::fence(Ordering::SeqCst)
}

/// A non-blocking eventfd: the doorbell any peer may ring, its data ignored.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; the result is checked before being owned.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Ring an eventfd (ours or a peer's, obtained with [`pidfd_getfd`]). A full counter (EAGAIN)
/// means it is already rung: not an error.
pub fn eventfd_ring(fd: RawFd) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local u64 to an fd the caller holds open.
    let r = unsafe { libc::write(fd, &one as *const u64 as *const libc::c_void, 8) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock {
            return Err(e);
        }
    }
    Ok(())
}

/// Clear an eventfd: true if it had been rung.
pub fn eventfd_drain(fd: RawFd) -> bool {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a live local u64 from an fd the caller holds open (non-blocking).
    let r = unsafe { libc::read(fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
    r == 8
}

/// A pidfd for process `pid`: readable once it has exited, and the handle [`pidfd_getfd`] needs.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags, no pointers; the result is checked.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = r as RawFd;
    // SAFETY: fd is a fresh descriptor nobody else owns; set close-on-exec (pidfd_open sets it).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A duplicate of descriptor `fd` of the process behind `pidfd` (needs ptrace access to it: the
/// same user, or root).
pub fn pidfd_getfd(pidfd: RawFd, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes two fds and flags, no pointers; the result is checked.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0 as libc::c_uint) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor (close-on-exec by the kernel) nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// Whether a pidfd call failed because the process is exiting or gone (ESRCH).
pub fn no_such_process(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ESRCH)
}

/// Whether `fd` (a pidfd, an eventfd) is readable now, without waiting.
pub fn readable_now(fd: RawFd) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd, timeout 0.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents != 0
}

/// An epoll set: what makes a node one pollable descriptor.
pub struct Epoll(OwnedFd);

impl Epoll {
    /// A new, empty set.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; the result is checked.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fresh descriptor.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The set's own descriptor (readable when a member is).
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Watch `fd` for input, reported with `token`; `edge`: only when new input arrives (a
    /// rung eventfd then needs no read to be re-armed).
    pub fn add(&self, fd: RawFd, token: u64, edge: bool) -> io::Result<()> {
        let flags = if edge { libc::EPOLLIN | libc::EPOLLET } else { libc::EPOLLIN };
        let mut ev = libc::epoll_event { events: flags as u32, u64: token };
        // SAFETY: a live epoll_event; the kernel copies it.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(|_| ())
    }

    /// Stop watching `fd`.
    pub fn remove(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: a live epoll_event (ignored for DEL on current kernels).
        let _ = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Wait up to `timeout_ms` (-1: forever) and return the tokens of the ready members.
    pub fn wait(&self, timeout_ms: i32) -> io::Result<Vec<u64>> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
        // SAFETY: evs is a live array of 16 events, and 16 is passed as its length.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), 16, timeout_ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(Vec::new());
            }
            return Err(e);
        }
        Ok(evs[..n as usize].iter().map(|e| e.u64).collect())
    }
}

/// Pull `out.len()` bytes from address `addr` of process `pid` into `out` (Linux's BTE pull).
/// Returns the bytes copied, which may be fewer on a partial read.
pub fn vm_read(pid: u32, addr: u64, out: &mut [u8]) -> io::Result<usize> {
    if out.is_empty() {
        return Ok(0);
    }
    let local = libc::iovec { iov_base: out.as_mut_ptr() as *mut libc::c_void, iov_len: out.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: out.len() };
    // SAFETY: the local iovec covers exactly `out`, writable and live for the call; the remote
    // iovec is only interpreted in the other process's address space, checked by the kernel.
    let r = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

/// Whether the mapping starting at `addr` is listed as read-only (`r--s`) in
/// `/proc/self/maps`: the firewall checked from the outside. `None` if no mapping starts there.
pub fn mapping_perms(addr: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    for l in maps.lines() {
        let mut f = l.split_whitespace();
        let range = f.next()?;
        let perms = f.next()?;
        let start = usize::from_str_radix(range.split('-').next()?, 16).ok()?;
        if start == addr {
            return Some(perms.to_string());
        }
    }
    None
}
