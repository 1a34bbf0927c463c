//! The ring's memory: one anonymous mapping, populated (every page faulted in before the
//! first datagram) and locked where the limits allow, so that capture never takes a page fault.
//!
//! Readiness is the whole ring, not its head: [`RingMemory::new`] returns only when every page
//! is faulted in and locked, so that a stream at full rate started the moment the caller says it
//! is listening meets no page nobody has touched. (An earlier design faulted in 64 MiB and left
//! the rest to a background thread: on a host where first-touching memory is slow, a VM whose
//! free pages go back to the hypervisor, the producer overtook that thread within a fraction of
//! a second and the capture thread paid for every fault, losing more than half of a 10 Gb/s
//! stream's first seconds.) What readiness costs is said, not hidden: [`Prefault`] reports the
//! progress, a stop flag ends a long wait, and [`RingMemory::ready_s`] gives the time it took.
//!
//! Huge pages make this fast and keep the TLB quiet: a 2 MiB page is zeroed and mapped in one
//! step where 4 KiB pages take 512 faults and 512 page-table entries. The mapping tries, in
//! order, the reserved huge-page pool (`MAP_HUGETLB`: only where an administrator set
//! `vm.nr_hugepages`), transparent huge pages (`madvise(MADV_HUGEPAGE)`, which works with THP
//! in `always` or `madvise` mode) and normal pages, and says which it got ([`PageKind`]).
//! Big rings are populated by several threads at once (each faults in its own slice), since
//! zeroing memory is what the time goes to and one core zeroes only so fast.
//!
//! A ring shared with taps ([`RingMemory::shared`], `record --share`) is the same but backed by
//! a memfd mapped MAP_SHARED (hugetlb memfd first, then a plain one with MADV_HUGEPAGE, which
//! gives huge pages where shmem THP is enabled), so that a tap can map it read-only.

use super::RING_ALIGN;
use serde::Serialize;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Size of the huge pages tried first (the x86-64 and arm64 default).
const HUGE: usize = 2 << 20;
/// Smallest slice one populating thread is given: below this a thread costs more than it saves.
const MIN_SLICE: usize = 256 << 20;
/// Most populating threads.
const MAX_THREADS: usize = 8;
/// Bytes a populating thread faults in per call: small enough that progress is smooth and a
/// stop is seen within milliseconds, large enough that the calls cost nothing.
const STEP: usize = 16 << 20;
/// How often progress is reported while the ring is made ready.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// How a caller follows the making of a ring: its progress, and a flag that abandons it (a big
/// ring on a cold host takes seconds: Ctrl-C must not have to wait for it).
#[derive(Clone, Copy, Default)]
pub struct Prefault<'a> {
    /// Called about every 200 ms, from the calling thread, with (bytes faulted in, total).
    pub progress: Option<&'a (dyn Fn(u64, u64) + Sync)>,
    /// Set (by a signal handler) to abandon the ring: the call then fails with
    /// [`io::ErrorKind::Interrupted`] and the memory is given back.
    pub stop: Option<&'a AtomicBool>,
}

impl Prefault<'_> {
    fn stopped(&self) -> bool {
        self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

/// What backs the ring, best first. The ring starts at the first kind given to
/// [`RingMemory::with_pages`] and steps down until one works.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageKind {
    /// 2 MiB pages from the reserved pool (`vm.nr_hugepages`), never swapped or split.
    Hugetlb,
    /// Transparent huge pages asked for with `madvise(MADV_HUGEPAGE)`: the kernel gives 2 MiB
    /// pages where it finds them (see [`RingMemory::huge_bytes`] for how many it found).
    Transparent,
    /// Normal 4 KiB pages.
    Normal,
}

impl PageKind {
    /// How a person reads it.
    pub fn describe(self) -> &'static str {
        match self {
            PageKind::Hugetlb => "huge pages (hugetlb)",
            PageKind::Transparent => "transparent huge pages",
            PageKind::Normal => "normal pages",
        }
    }
}

/// Anonymous memory mapped once, populated whole up front and unmapped on drop.
pub struct RingMemory {
    pub(super) ptr: *mut u8,
    /// The ring's length, bytes.
    pub(super) len: usize,
    /// Start and length of the whole mapping (the ring may sit inside it, aligned for huge pages).
    map: (*mut u8, usize),
    /// The pages are locked in RAM (mlock succeeded).
    pub locked: bool,
    /// What backs the ring.
    pub pages: PageKind,
    /// Bytes of the ring the kernel backs with huge pages (all of them for hugetlb; what
    /// /proc/self/smaps says for transparent huge pages; 0 for normal pages).
    pub huge_bytes: u64,
    /// Nanoseconds from the mmap call until every page was faulted in and locked: what
    /// readiness cost.
    pub ready_ns: u64,
    /// Threads that faulted the ring in.
    pub threads: usize,
    /// The memfd behind a shared ring (None: anonymous memory, not shareable).
    fd: Option<std::os::fd::OwnedFd>,
}

// SAFETY: the mapping is plain memory owned by this value; access to its bytes is governed by
// the producer/consumer protocol below, which never lets two threads touch the same bytes
// concurrently.
unsafe impl Send for RingMemory {}
// SAFETY: as above.
unsafe impl Sync for RingMemory {}

/// A raw region handed to a populating thread.
#[derive(Clone, Copy)]
struct Region(*mut u8, usize);
// SAFETY: each thread gets a disjoint slice of a mapping that outlives the scoped threads.
unsafe impl Send for Region {}

impl RingMemory {
    /// Map `len` bytes (a multiple of [`RING_ALIGN`]) with the best pages the system has, fault
    /// every page in (on every CPU at once: nothing else of the caller's runs yet), and try to
    /// lock them. Returns when the whole ring is ready.
    pub fn new(len: usize, lock: bool, how: &Prefault) -> io::Result<Self> {
        Self::build(len, lock, PageKind::Hugetlb, false, how)
    }

    /// As [`new`](Self::new), starting the fallback at `first` (tests force each step so).
    pub fn with_pages(len: usize, lock: bool, first: PageKind) -> io::Result<Self> {
        Self::build(len, lock, first, false, &Prefault::default())
    }

    /// As [`new`](Self::new), backed by a memfd that other processes can map read-only
    /// ([`shared_fd`](Self::shared_fd)): the ring of `record --share`.
    pub fn shared(len: usize, lock: bool, how: &Prefault) -> io::Result<Self> {
        Self::build(len, lock, PageKind::Hugetlb, true, how)
    }

    /// The memfd behind a shared ring (a tap opens it as /proc/PID/fd/N).
    pub fn shared_fd(&self) -> Option<std::os::fd::RawFd> {
        self.fd.as_ref().map(std::os::fd::AsRawFd::as_raw_fd)
    }

    fn build(len: usize, lock: bool, first: PageKind, share: bool, how: &Prefault) -> io::Result<Self> {
        if len == 0 || len % RING_ALIGN != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "ring size must be a non-zero multiple of 4 KiB"));
        }
        let t0 = super::super::monotonic_ns();
        let hugetlb = if first == PageKind::Hugetlb && len % HUGE == 0 {
            if share {
                map_hugetlb_shared(len)
            } else {
                map_hugetlb(len).map(|p| (p, None))
            }
        } else {
            None
        };
        let mut mem = match hugetlb {
            Some((ptr, fd)) => RingMemory {
                fd,
                len,
                ptr,
                map: (ptr, len),
                locked: false,
                pages: PageKind::Hugetlb,
                huge_bytes: 0,
                ready_ns: 0,
                threads: 1,
            },
            None => {
                check_available(len)?;
                let (map_ptr, map_len, ptr, fd) = if share {
                    let fd = super::share::memfd(super::share::RING_MEMFD, len, false)?;
                    let (map_ptr, map_len, ptr) = map_normal(len)?;
                    // The reservation's ring range becomes the memfd, shared.
                    let mapped = super::share::map_fd(
                        std::os::fd::AsRawFd::as_raw_fd(&fd),
                        len,
                        ptr,
                        libc::PROT_READ | libc::PROT_WRITE,
                    );
                    if let Err(e) = mapped {
                        // SAFETY: the reservation made just above, not used by anything.
                        unsafe { libc::munmap(map_ptr.cast(), map_len) };
                        return Err(e);
                    }
                    (map_ptr, map_len, ptr, Some(fd))
                } else {
                    let (map_ptr, map_len, ptr) = map_normal(len)?;
                    (map_ptr, map_len, ptr, None)
                };
                let mut mem = RingMemory {
                    fd,
                    len,
                    ptr,
                    map: (map_ptr, map_len),
                    locked: false,
                    pages: PageKind::Normal,
                    huge_bytes: 0,
                    ready_ns: 0,
                    threads: 1,
                };
                // SAFETY: advice on exactly the ring's range of our own mapping; failure (THP
                // compiled out or set to `never`) only means normal pages.
                if first != PageKind::Normal && unsafe { libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE) } == 0 {
                    mem.pages = PageKind::Transparent;
                }
                mem
            }
        };
        // Lock first, on fault: instant, and every page faulted in from here on is locked.
        // SAFETY: the range is exactly the ring inside our mapping; failure (RLIMIT_MEMLOCK) is
        // reported as not locked.
        mem.locked = lock && unsafe { libc::mlock2(mem.ptr as *const libc::c_void, len, libc::MLOCK_ONFAULT) } == 0;
        // Every page now, before anyone is told the ring is ready. A failure (a stop, or a
        // kernel that cannot populate) drops `mem`, which unmaps it.
        mem.threads = populate(Region(mem.ptr, len), how)?;
        mem.huge_bytes = match mem.pages {
            PageKind::Hugetlb => len as u64,
            PageKind::Transparent => huge_bytes_of(mem.ptr as usize).unwrap_or(0),
            PageKind::Normal => 0,
        };
        mem.ready_ns = (super::super::monotonic_ns() - t0).max(1);
        Ok(mem)
    }

    /// Bytes of the ring resident in RAM now, as the kernel's page tables say (mincore(2)):
    /// the proof, rather than the claim, that the ring is ready. 0 if the kernel would not say.
    pub fn resident_bytes(&self) -> u64 {
        let page = RING_ALIGN;
        let mut vec = vec![0u8; self.len.div_ceil(page)];
        // SAFETY: the ring's range of our own mapping, page-aligned; `vec` has one byte per page.
        if unsafe { libc::mincore(self.ptr.cast(), self.len, vec.as_mut_ptr()) } != 0 {
            return 0;
        }
        vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64
    }

    /// Whether the ring memory is locked in RAM.
    pub fn locked(&self) -> bool {
        self.locked
    }

    /// Seconds from the mmap until every page was faulted in and locked: from then on the ring
    /// takes a stream at full rate.
    pub fn ready_s(&self) -> f64 {
        self.ready_ns as f64 / 1e9
    }
}

/// Fault every page of `r` in, writable, in parallel slices when it is big, telling `how` the
/// progress from this thread. Returns the threads used; fails when `how` says stop.
fn populate(r: Region, how: &Prefault) -> io::Result<usize> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (r.1 / MIN_SLICE).clamp(1, cpus.min(MAX_THREADS));
    // Slices on huge-page boundaries, so no 2 MiB page is split between two threads.
    let step = (r.1 / threads).div_ceil(HUGE) * HUGE;
    let regions: Vec<Region> = (0..threads)
        .map(|i| i * step)
        .filter(|&off| off < r.1)
        // SAFETY: off < r.1: a pointer inside the region.
        .map(|off| Region(unsafe { r.0.add(off) }, step.min(r.1 - off)))
        .collect();
    let done = AtomicU64::new(0);
    let total = r.1 as u64;
    let stop = AtomicBool::new(false);
    let quit = || stop.load(Ordering::Relaxed) || how.stopped();
    let (done_ref, quit_ref) = (&done, &quit);
    std::thread::scope(|s| {
        let workers: Vec<_> = regions
            .iter()
            .map(|&r| {
                s.spawn(move || {
                    let r = r; // the whole Region (Send), not its raw-pointer field
                    populate_region(r, done_ref, quit_ref)
                })
            })
            .collect();
        // This thread only watches: it reports and passes a stop on.
        let mut last = std::time::Instant::now();
        while !workers.iter().all(|w| w.is_finished()) {
            if how.stopped() {
                stop.store(true, Ordering::Relaxed);
            }
            if let Some(p) = how.progress.filter(|_| last.elapsed() >= PROGRESS_EVERY) {
                p(done.load(Ordering::Relaxed), total);
                last = std::time::Instant::now();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    if how.stopped() {
        return Err(io::Error::new(io::ErrorKind::Interrupted, "stopped while the ring was being made ready"));
    }
    if let Some(p) = how.progress {
        p(total, total);
    }
    Ok(regions.len())
}

/// A ring from the reserved huge-page pool, or None when the pool cannot hold it.
fn map_hugetlb(len: usize) -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping with no address hint; the result is checked. The
    // kernel reserves the pages at mmap time, so an empty pool fails here (ENOMEM), not later.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
            -1,
            0,
        )
    };
    (ptr != libc::MAP_FAILED).then_some(ptr as *mut u8)
}

/// A shared ring from the reserved huge-page pool (a hugetlb memfd), or None when the pool
/// cannot hold it.
fn map_hugetlb_shared(len: usize) -> Option<(*mut u8, Option<std::os::fd::OwnedFd>)> {
    let fd = super::share::memfd(super::share::RING_MEMFD, len, true).ok()?;
    let ptr = super::share::map_fd(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        len,
        std::ptr::null_mut(),
        libc::PROT_READ | libc::PROT_WRITE,
    )
    .ok()?;
    Some((ptr, Some(fd)))
}

/// An anonymous mapping with the ring placed on a 2 MiB boundary inside it (so transparent
/// huge pages can back all of it): (mapping, its length, ring start).
fn map_normal(len: usize) -> io::Result<(*mut u8, usize, *mut u8)> {
    let map_len = if len >= HUGE { len + HUGE } else { len };
    // SAFETY: an anonymous private mapping with no address hint; the result is checked.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let ptr = ptr as *mut u8;
    let pad = if map_len > len { (HUGE - ptr as usize % HUGE) % HUGE } else { 0 };
    // SAFETY: pad < HUGE and pad + len <= map_len: inside the mapping.
    Ok((ptr, map_len, unsafe { ptr.add(pad) }))
}

/// Fault in `r` writable, a step at a time, adding each step to `done` and giving up when
/// `quit` says so. MADV_POPULATE_WRITE (Linux 5.14) does a step in the kernel in one call;
/// older kernels get one write per page.
fn populate_region(r: Region, done: &AtomicU64, quit: &dyn Fn() -> bool) {
    let mut off = 0;
    while off < r.1 && !quit() {
        let n = STEP.min(r.1 - off);
        // SAFETY: off + n <= r.1: a slice of our own mapping, given to this thread alone.
        let at = unsafe { r.0.add(off) };
        // SAFETY: advice on that slice; failure (an old kernel) falls back below.
        if unsafe { libc::madvise(at.cast(), n, libc::MADV_POPULATE_WRITE) } != 0 {
            let mut page = 0;
            while page < n {
                // SAFETY: page < n, inside the slice this thread owns; nobody reads it yet.
                unsafe { at.add(page).write_volatile(0) };
                page += RING_ALIGN;
            }
        }
        off += n;
        done.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Fault in every page of a heap buffer now, writable, so that the first datagrams that land
/// in it do not pay for it: a large `vec![0u8; n]` comes from calloc as untouched pages (a fresh
/// mmap), which the kernel would otherwise fault in one by one on the receive path.
pub fn prefault(buf: &mut [u8]) {
    if buf.is_empty() {
        return;
    }
    let start = buf.as_mut_ptr() as usize;
    let first = start.div_ceil(RING_ALIGN) * RING_ALIGN;
    let end = (start + buf.len()) / RING_ALIGN * RING_ALIGN;
    // SAFETY: [first, end) is the page-aligned inside of `buf`, which we borrow mutably; the
    // kernel only faults its pages in (their contents are kept). Failure (an old kernel) leaves
    // the writes below to do it.
    if end > first && unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_POPULATE_WRITE) } == 0
    {
        return;
    }
    let mut off = 0;
    while off < buf.len() {
        // SAFETY: off < buf.len(): inside the buffer; a volatile write of the byte already
        // there (the compiler may not drop it as a store of a known value).
        unsafe {
            let p = buf.as_mut_ptr().add(off);
            p.write_volatile(p.read_volatile());
        }
        off += RING_ALIGN;
    }
}

/// Refuse a ring bigger than the memory the host can give now, with a sentence that says so,
/// instead of letting the kernel's OOM killer end the run halfway through populating it.
fn check_available(len: usize) -> io::Result<()> {
    let Some(avail) = meminfo_bytes("MemAvailable:") else { return Ok(()) };
    if len as u64 > avail {
        return Err(io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "it needs {} MiB of RAM and this host has only {} MiB available now (MemAvailable in /proc/meminfo)",
                len >> 20,
                avail >> 20
            ),
        ));
    }
    Ok(())
}

/// A `/proc/meminfo` line in bytes.
fn meminfo_bytes(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Huge-page bytes of the mapping that contains `addr`, from /proc/self/smaps (AnonHugePages
/// for anonymous memory, ShmemPmdMapped for a shared ring).
fn huge_bytes_of(addr: usize) -> Option<u64> {
    smaps_kib(addr, &["AnonHugePages:", "ShmemPmdMapped:"]).map(|kib| kib * 1024)
}

/// The first non-zero of `keys` (in the order the kernel lists them) of the mapping that
/// contains `addr` in /proc/self/smaps, KiB; None when no such mapping or no such field.
pub(super) fn smaps_kib(addr: usize, keys: &[&str]) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
            let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
            inside = a <= addr && addr < b;
        } else if inside && keys.contains(&first) {
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            if kib > 0 {
                return Some(kib);
            }
        }
    }
    None
}

impl Drop for RingMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `build`; no references outlive
        // self because producer and consumer hold an Arc to the shared state that owns this.
        unsafe { libc::munmap(self.map.0 as *mut libc::c_void, self.map.1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thp_enabled() -> bool {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").is_ok_and(|s| !s.contains("[never]"))
    }

    fn hugetlb_free() -> u64 {
        meminfo_bytes("HugePages_Free:").map_or(0, |n| n / 1024) * HUGE as u64
    }

    /// Each step of the fallback, forced: the kind reported is the step that worked, and the
    /// ring is usable memory of the size asked for.
    #[test]
    fn huge_pages_fall_back_step_by_step_and_say_which() {
        let len = 8 << 20;
        let normal = RingMemory::with_pages(len, false, PageKind::Normal).unwrap();
        assert_eq!(normal.pages, PageKind::Normal);
        assert_eq!(normal.huge_bytes, 0);
        let thp = RingMemory::with_pages(len, false, PageKind::Transparent).unwrap();
        assert_eq!(thp.pages, if thp_enabled() { PageKind::Transparent } else { PageKind::Normal });
        assert_eq!(thp.ptr as usize % HUGE, 0, "the ring starts on a huge-page boundary");
        let best = RingMemory::with_pages(len, false, PageKind::Hugetlb).unwrap();
        let expect = if hugetlb_free() >= len as u64 {
            PageKind::Hugetlb
        } else if thp_enabled() {
            PageKind::Transparent
        } else {
            PageKind::Normal
        };
        assert_eq!(best.pages, expect);
        // A size that is no multiple of 2 MiB skips hugetlb and still works.
        let odd = RingMemory::with_pages(len + RING_ALIGN, false, PageKind::Hugetlb).unwrap();
        assert_ne!(odd.pages, PageKind::Hugetlb);
        for m in [&normal, &thp, &best, &odd] {
            assert!(m.threads >= 1);
        }
    }

    /// Readiness is the whole ring: on return every page is resident (the kernel's word, not
    /// ours), progress ended at the total, and the time it took is reported.
    #[test]
    fn a_ring_is_whole_when_it_is_returned() {
        let len = 320 << 20; // more than one populating slice, and more than the old 64 MiB head
        let seen = std::sync::Mutex::new(Vec::new());
        let report = |done: u64, total: u64| seen.lock().unwrap().push((done, total));
        let how = Prefault { progress: Some(&report), stop: None };
        let m = RingMemory::new(len, false, &how).unwrap();
        assert_eq!(m.resident_bytes(), len as u64, "every page is in before the ring is handed out");
        assert!(m.ready_s() > 0.0);
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.last(), Some(&(len as u64, len as u64)), "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "progress never goes back: {seen:?}");
    }

    /// A stop abandons the ring at once: an error that says so, and no memory kept.
    #[test]
    fn a_stop_abandons_the_ring() {
        let stop = AtomicBool::new(true);
        let how = Prefault { progress: None, stop: Some(&stop) };
        let e = RingMemory::new(256 << 20, false, &how).err().expect("stopped");
        assert_eq!(e.kind(), io::ErrorKind::Interrupted, "{e}");
    }

    /// A buffer faulted in keeps its bytes and is resident afterwards.
    #[test]
    fn prefault_keeps_the_bytes() {
        let mut v = vec![0u8; 8 << 20];
        v[12345] = 7;
        prefault(&mut v);
        prefault(&mut []);
        assert_eq!(v[12345], 7);
        assert_eq!(v.iter().map(|&b| b as u64).sum::<u64>(), 7);
    }

    #[test]
    fn a_ring_bigger_than_the_host_is_refused_in_words() {
        let Some(avail) = meminfo_bytes("MemAvailable:") else { return };
        let too_big = ((avail as usize) + (1 << 30)) / RING_ALIGN * RING_ALIGN;
        let e = RingMemory::with_pages(too_big, false, PageKind::Normal).err().expect("refused");
        assert!(e.to_string().contains("available now"), "{e}");
    }
}
