//! The ring's memory: one anonymous mapping, populated (every page faulted in before the
//! first datagram) and locked where the limits allow, so that capture never takes a page fault.
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
use std::sync::Arc;

/// Size of the huge pages tried first (the x86-64 and arm64 default).
const HUGE: usize = 2 << 20;
/// Smallest slice one populating thread is given: below this a thread costs more than it saves.
const MIN_SLICE: usize = 256 << 20;
/// Most populating threads.
const MAX_THREADS: usize = 8;
/// The ring's head, faulted in before it is called ready: 50 ms at 10 Gb/s, while the
/// background thread runs ahead (2 MiB pages fault in at several GB/s). More only delays the
/// start: on a host whose free memory is fragmented each huge page may need compaction first.
const HEAD: usize = 64 << 20;
/// Bytes the background thread faults in per call, so that a drop stops it soon.
const TAIL_STEP: usize = 2 << 20;

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

/// Anonymous memory mapped once, populated up front and unmapped on drop.
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
    /// Nanoseconds from the mmap call until every page was faulted in and locked.
    pub ready_ns: u64,
    /// Threads that faulted the ring's head in.
    pub threads: usize,
    /// The thread that faults the rest in, ahead of the producer.
    tail: Tail,
    /// The memfd behind a shared ring (None: anonymous memory, not shareable).
    fd: Option<std::os::fd::OwnedFd>,
}

/// When the ring was fully faulted in, kept by whoever reports on the ring.
#[derive(Clone, Debug)]
pub struct Populated(Arc<AtomicU64>);

impl Populated {
    /// Seconds from the mmap until every page of the ring was faulted in; None while the
    /// background thread is still at it.
    pub fn seconds(&self) -> Option<f64> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            ns => Some(ns as f64 / 1e9),
        }
    }
}

/// The background fault-in of the ring beyond its head.
#[derive(Default)]
struct Tail {
    stop: Arc<AtomicBool>,
    done_ns: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
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
    /// every page in, and try to lock them.
    pub(super) fn new(len: usize, lock: bool) -> io::Result<Self> {
        Self::with_pages(len, lock, PageKind::Hugetlb, true)
    }

    /// As [`new`](Self::new), starting the fallback at `first` (tests force each step so).
    /// With `background`, only the ring's head (64 MiB) is faulted in before
    /// this returns and a thread faults in the rest, in ring order, ahead of the producer:
    /// a big ring can take its first datagram at once. Without, every page is in on return.
    pub fn with_pages(len: usize, lock: bool, first: PageKind, background: bool) -> io::Result<Self> {
        Self::build(len, lock, first, background, false)
    }

    /// As [`new`](Self::new), backed by a memfd that other processes can map read-only
    /// ([`shared_fd`](Self::shared_fd)): the ring of `record --share`.
    pub fn shared(len: usize, lock: bool) -> io::Result<Self> {
        Self::build(len, lock, PageKind::Hugetlb, true, true)
    }

    /// The memfd behind a shared ring (a tap opens it as /proc/PID/fd/N).
    pub fn shared_fd(&self) -> Option<std::os::fd::RawFd> {
        self.fd.as_ref().map(std::os::fd::AsRawFd::as_raw_fd)
    }

    fn build(len: usize, lock: bool, first: PageKind, background: bool, share: bool) -> io::Result<Self> {
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
                tail: Tail::default(),
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
                    tail: Tail::default(),
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
        // The head is faulted in now; the rest by a thread that keeps ahead of the producer.
        let head = if background { HEAD } else { len };
        let head = head.min(len);
        mem.threads = populate(Region(mem.ptr, head));
        mem.huge_bytes = match mem.pages {
            PageKind::Hugetlb => len as u64,
            PageKind::Transparent => huge_bytes_of(mem.ptr as usize).unwrap_or(0),
            PageKind::Normal => 0,
        };
        mem.ready_ns = super::super::monotonic_ns() - t0;
        if head < len {
            // SAFETY: head < len: inside the ring.
            let rest = Region(unsafe { mem.ptr.add(head) }, len - head);
            let (stop, done) = (mem.tail.stop.clone(), mem.tail.done_ns.clone());
            let spawned = std::thread::Builder::new().name("ws-ring-fault".into()).spawn(move || {
                let rest = rest; // the whole Region (Send), not its raw-pointer field
                let mut off = 0;
                while off < rest.1 && !stop.load(Ordering::Relaxed) {
                    let n = TAIL_STEP.min(rest.1 - off);
                    // SAFETY: off + n <= rest.1: a slice of the ring's tail. The producer may
                    // write into it meanwhile: the kernel serialises faults on a page, and
                    // populating a present page changes nothing.
                    // Never the write-per-page fallback here: it would overwrite the producer's
                    // bytes. Without MADV_POPULATE_WRITE the producer faults the pages itself.
                    if unsafe { libc::madvise(rest.0.add(off).cast(), n, libc::MADV_POPULATE_WRITE) } != 0 {
                        break;
                    }
                    off += n;
                }
                if off >= rest.1 {
                    done.store(super::super::monotonic_ns() - t0, Ordering::Release);
                }
            });
            match spawned {
                Ok(h) => mem.tail.thread = Some(h),
                Err(_) => {
                    populate(rest);
                }
            }
        }
        if mem.tail.thread.is_none() {
            mem.tail.done_ns.store((super::super::monotonic_ns() - t0).max(1), Ordering::Release);
        }
        Ok(mem)
    }

    /// When every page of the ring was faulted in, readable after the ring is gone.
    pub fn populated(&self) -> Populated {
        Populated(self.tail.done_ns.clone())
    }

    /// Whether the ring memory is locked in RAM.
    pub fn locked(&self) -> bool {
        self.locked
    }

    /// Seconds from the mmap until the ring could take its first datagram.
    pub fn ready_s(&self) -> f64 {
        self.ready_ns as f64 / 1e9
    }
}

/// Fault every page of `r` in, writable, in parallel slices when it is big. Returns the threads used.
fn populate(r: Region) -> usize {
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
    if regions.len() == 1 {
        populate_region(regions[0]);
    } else {
        std::thread::scope(|s| {
            for &r in &regions {
                s.spawn(move || populate_region(r));
            }
        });
    }
    regions.len()
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

/// Fault in `r` writable. MADV_POPULATE_WRITE (Linux 5.14) does it in the kernel in one call;
/// older kernels get one write per page.
fn populate_region(r: Region) {
    // SAFETY: r is a slice of our own mapping, given to this thread alone.
    if unsafe { libc::madvise(r.0.cast(), r.1, libc::MADV_POPULATE_WRITE) } == 0 {
        return;
    }
    let mut off = 0;
    while off < r.1 {
        // SAFETY: off < r.1, inside the slice this thread owns; nobody reads it yet.
        unsafe { r.0.add(off).write_volatile(0) };
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
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
            let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
            inside = a <= addr && addr < b;
        } else if inside && (first == "AnonHugePages:" || first == "ShmemPmdMapped:") {
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            if kib > 0 {
                return Some(kib * 1024);
            }
        }
    }
    None
}

impl Drop for RingMemory {
    fn drop(&mut self) {
        self.tail.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.tail.thread.take() {
            let _ = t.join();
        }
        // SAFETY: unmapping exactly the mapping created in `with_pages`; no references outlive
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
        let normal = RingMemory::with_pages(len, false, PageKind::Normal, false).unwrap();
        assert_eq!(normal.pages, PageKind::Normal);
        assert_eq!(normal.huge_bytes, 0);
        let thp = RingMemory::with_pages(len, false, PageKind::Transparent, false).unwrap();
        assert_eq!(thp.pages, if thp_enabled() { PageKind::Transparent } else { PageKind::Normal });
        assert_eq!(thp.ptr as usize % HUGE, 0, "the ring starts on a huge-page boundary");
        let best = RingMemory::with_pages(len, false, PageKind::Hugetlb, true).unwrap();
        let expect = if hugetlb_free() >= len as u64 {
            PageKind::Hugetlb
        } else if thp_enabled() {
            PageKind::Transparent
        } else {
            PageKind::Normal
        };
        assert_eq!(best.pages, expect);
        // A size that is no multiple of 2 MiB skips hugetlb and still works.
        let odd = RingMemory::with_pages(len + RING_ALIGN, false, PageKind::Hugetlb, true).unwrap();
        assert_ne!(odd.pages, PageKind::Hugetlb);
        for m in [&normal, &thp, &best, &odd] {
            assert!(m.threads >= 1);
        }
    }

    #[test]
    fn a_ring_bigger_than_the_host_is_refused_in_words() {
        let Some(avail) = meminfo_bytes("MemAvailable:") else { return };
        let too_big = ((avail as usize) + (1 << 30)) / RING_ALIGN * RING_ALIGN;
        let e = RingMemory::with_pages(too_big, false, PageKind::Normal, false).err().expect("refused");
        assert!(e.to_string().contains("available now"), "{e}");
    }
}
