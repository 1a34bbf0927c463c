//! The system calls under XPC (the lab crate's `xpc`): shared file mappings (read-write for the owner of
//! a page, read-only for its peers: the seed's firewall), the doorbell (an eventfd), the epoll
//! set that makes a node pollable, pidfds (a peer's death, and the way to reach its doorbell) and
//! `process_vm_readv`, Linux's block-transfer-engine pull.
//!
//! Shared memory is reached only through [`SharedMem`]: atomic loads and stores of aligned
//! words, and byte copies in and out, each bounds-checked, so the XPC code above stays free of
//! `unsafe`. Byte copies race with nothing by protocol: the owner writes a region before it
//! publishes it with a release store, and never again until the reader's acquire-loaded
//! counter says it is done with it.
//!
//! A shared file can shrink under its mappings: its owner, or any process of the same user
//! (another partition: possibly hostile), may truncate it, and the next access to a page past
//! its new end raises SIGBUS, which would kill this process. XPC's files are plain files in the
//! XPC directory (so that what a dead peer published stays readable), which cannot be sealed as
//! a memfd can; instead every [`SharedMem`] is registered with a SIGBUS handler (installed once,
//! before the first mapping) that, for a fault inside a registered mapping, replaces the whole
//! mapping with zero-filled anonymous memory and marks it [`SharedMem::shrunk`]: the access is
//! retried, reads zeros, and the XPC code above turns the mark into one clear line closing the
//! channel. A SIGBUS anywhere else goes to the handler that was installed before (the default
//! action if none), so this process still dies of its own genuine bus errors. The handler costs
//! nothing until a file shrinks: no check on any access.

use super::cvt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// How many shared mappings one process may hold at once (pages and channel halves): the
/// SIGBUS handler's registry is a fixed array, since a signal handler may not lock or allocate.
pub const MAX_MAPPINGS: usize = 4096;

const GUARD_FREE: u8 = 0;
const GUARD_CLAIMED: u8 = 1;
const GUARD_LIVE: u8 = 2;

/// One registered mapping, as the SIGBUS handler sees it.
struct Guard {
    state: AtomicU8,
    start: AtomicUsize,
    len: AtomicUsize,
    writable: AtomicBool,
    shrunk: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const GUARD_INIT: Guard = Guard {
    state: AtomicU8::new(GUARD_FREE),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    writable: AtomicBool::new(false),
    shrunk: AtomicBool::new(false),
};

static GUARDS: [Guard; MAX_MAPPINGS] = [GUARD_INIT; MAX_MAPPINGS];
/// One past the highest slot ever claimed: the handler looks no further.
static GUARDS_HIGH: AtomicUsize = AtomicUsize::new(0);
/// The SIGBUS disposition found when the handler was installed (chained to for other faults).
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
/// Whether installing the handler succeeded (installed once per process).
static INSTALLED: OnceLock<io::Result<()>> = OnceLock::new();

/// Install [`on_sigbus`] once; every later call returns the first one's outcome.
fn install_handler() -> io::Result<()> {
    let r = INSTALLED.get_or_init(|| {
        // SAFETY: zeroed sigaction structs are valid (empty mask, no flags); sigaction reads
        // `new` and writes `old`, both live locals; the handler is an extern "C" fn taking
        // (int, siginfo_t *, void *), as SA_SIGINFO requires.
        unsafe {
            let mut new: libc::sigaction = std::mem::zeroed();
            let mut old: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            if libc::sigaction(libc::SIGBUS, &new, &mut old) != 0 {
                return Err(io::Error::last_os_error());
            }
            let _ = PREVIOUS.set(old);
        }
        Ok(())
    });
    match r {
        Ok(()) => Ok(()),
        Err(e) => Err(io::Error::new(e.kind(), format!("cannot install the SIGBUS guard of shared mappings: {e}"))),
    }
}

/// The SIGBUS handler: a fault inside a registered mapping (its file shrank) replaces that
/// mapping with zeros and marks it shrunk, then returns so the access is retried; any other
/// fault goes to the previous disposition. Async-signal-safe: atomics and system calls only.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t; si_addr is the faulting
    // address for SIGBUS.
    let addr = unsafe { (*info).si_addr() } as usize;
    let high = GUARDS_HIGH.load(Ordering::Acquire).min(MAX_MAPPINGS);
    for g in &GUARDS[..high] {
        if g.state.load(Ordering::Acquire) != GUARD_LIVE {
            continue;
        }
        let (start, len) = (g.start.load(Ordering::Relaxed), g.len.load(Ordering::Relaxed));
        if addr < start || addr - start >= len {
            continue;
        }
        let prot =
            if g.writable.load(Ordering::Relaxed) { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: [start, start + len) is a live mapping this module made (the slot is live
        // only between its mmap and its munmap, and the owning SharedMem, which is the only
        // code touching that range, is inside this access); MAP_FIXED replaces exactly it with
        // fresh zero pages of the same protection. Nothing else of the process is touched.
        let p = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                prot,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            g.shrunk.store(true, Ordering::Release);
            return;
        }
        break;
    }
    match PREVIOUS.get() {
        Some(old) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
            if old.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this
                // signature; it gets the very arguments the kernel gave us.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(old.sa_sigaction) };
                f(sig, info, ctx)
            } else {
                // SAFETY: a plain handler (no SA_SIGINFO) takes the signal number only.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(old.sa_sigaction) };
                f(sig)
            }
        }
        _ => {
            // Not ours and nobody else's: restore the default action and return; the access
            // faults again and the process dies of SIGBUS as it would have without us.
            // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask; sigaction reads it.
            unsafe {
                let dfl: libc::sigaction = std::mem::zeroed();
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
            }
        }
    }
}

/// Register the mapping [ptr, ptr + len) with the SIGBUS handler: its slot index.
fn register(ptr: *mut u8, len: usize, writable: bool) -> Option<usize> {
    for (i, g) in GUARDS.iter().enumerate() {
        if g.state.compare_exchange(GUARD_FREE, GUARD_CLAIMED, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            g.start.store(ptr as usize, Ordering::Relaxed);
            g.len.store(len, Ordering::Relaxed);
            g.writable.store(writable, Ordering::Relaxed);
            g.shrunk.store(false, Ordering::Relaxed);
            GUARDS_HIGH.fetch_max(i + 1, Ordering::AcqRel);
            g.state.store(GUARD_LIVE, Ordering::Release);
            return Some(i);
        }
    }
    None
}

/// A file mapped shared into this process: read-write when this process owns it, read-only
/// when it is a peer's (a write through it would fault: there is no way to write a peer's half).
pub struct SharedMem {
    ptr: *mut u8,
    len: usize,
    writable: bool,
    /// This mapping's slot in the SIGBUS handler's registry.
    guard: usize,
}

// SAFETY: the mapping is plain shared memory; every access goes through atomics or bounds-checked
// copies whose races are excluded by the XPC protocol (see the module doc), from any thread.
unsafe impl Send for SharedMem {}
// SAFETY: as above: &SharedMem only allows atomic access and copies the protocol serialises.
unsafe impl Sync for SharedMem {}

impl SharedMem {
    /// Map `len` bytes of `file` shared; `writable` needs the file open read-write. The mapping
    /// is guarded: if the file shrinks under it, the access that would have raised SIGBUS reads
    /// zeros instead and [`SharedMem::shrunk`] turns true (see the module docs).
    pub fn map(file: &File, len: usize, writable: bool) -> io::Result<SharedMem> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot map 0 bytes"));
        }
        install_handler()?;
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL) of a valid open fd; nothing
        // existing is replaced. The result is checked for MAP_FAILED.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let Some(guard) = register(p as *mut u8, len, writable) else {
            // SAFETY: exactly the mapping just made, referenced by nothing yet.
            unsafe { libc::munmap(p, len) };
            return Err(io::Error::other(format!(
                "more than {MAX_MAPPINGS} XPC mappings in one process: close channels or nodes first"
            )));
        };
        Ok(SharedMem { ptr: p as *mut u8, len, writable, guard })
    }

    /// Whether the file behind this mapping shrank under it (someone truncated it): the
    /// mapping now holds zeros, and nothing read through it since then means anything.
    pub fn shrunk(&self) -> bool {
        GUARDS[self.guard].shrunk.load(Ordering::Acquire)
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
        let g = &GUARDS[self.guard];
        // The handler stops considering the range before it is unmapped (and perhaps reused).
        g.state.store(GUARD_CLAIMED, Ordering::Release);
        // SAFETY: unmaps exactly the region this value mapped (or the zero pages the SIGBUS
        // handler put in its place); no reference into it outlives &self.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
        g.state.store(GUARD_FREE, Ordering::Release);
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
