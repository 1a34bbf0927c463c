//! Every `unsafe` block and raw libc call in wirespeed lives here, behind safe functions.
//!
//! Keeping them in one room makes the audit surface small: each block carries a `// SAFETY:`
//! comment saying why the pointers and lengths it hands the kernel are valid. Everything outside
//! this module is safe Rust.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

/// Control-message space per received datagram: room for SO_RXQ_OVFL (u32), UDP_GRO (int) and a
/// nanosecond timestamp, each with its cmsghdr, with slack.
const RECV_CTRL: usize = 128;
/// Control-message space per sent message: one UDP_SEGMENT (u16) with its header, padded.
const SEND_CTRL: usize = 32;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` lives on the stack for the duration of the call and its exact size is passed.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(ret).map(|_| ())
}

fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid writable locations and `len` holds the buffer size.
    let ret = unsafe { libc::getsockopt(fd, level, name, (&mut value as *mut libc::c_int).cast(), &mut len) };
    cvt(ret).map(|_| value)
}

/// Ask for a receive buffer; returns what the kernel reports afterwards (Linux doubles the
/// request for bookkeeping and clamps it to `net.core.rmem_max`).
pub fn set_rcvbuf(fd: RawFd, bytes: usize, force: bool) -> io::Result<usize> {
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    let name = if force { libc::SO_RCVBUFFORCE } else { libc::SO_RCVBUF };
    setsockopt_int(fd, libc::SOL_SOCKET, name, v)?;
    rcvbuf(fd)
}

/// The receive buffer the kernel granted (already doubled by Linux).
pub fn rcvbuf(fd: RawFd) -> io::Result<usize> {
    getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).map(|v| v as usize)
}

/// Ask for a send buffer, as large as allowed, so that a paced burst never blocks on it.
pub fn set_sndbuf(fd: RawFd, bytes: usize, force: bool) -> io::Result<usize> {
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    let name = if force { libc::SO_SNDBUFFORCE } else { libc::SO_SNDBUF };
    setsockopt_int(fd, libc::SOL_SOCKET, name, v)?;
    getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF).map(|v| v as usize)
}

/// Turn on the per-socket drop counter that the kernel attaches to each received datagram.
pub fn enable_rxq_ovfl(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)
}

/// Turn on UDP generic receive offload: the kernel may hand back several datagrams of one
/// flow in one buffer, with the segment size in a control message.
pub fn enable_gro(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1)
}

/// Receive timeout, so that a blocked capture thread still notices a stop request.
pub fn set_rcvtimeo(fd: RawFd, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` lives on the stack for the call and its exact size is passed.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    cvt(ret).map(|_| ())
}

/// Whether this kernel accepts UDP_SEGMENT (GSO) on a UDP socket: probed with a socket option.
pub fn gso_supported(fd: RawFd) -> bool {
    getsockopt_int(fd, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok()
}

/// Whether the process has CAP_NET_ADMIN, probed by a harmless privileged socket option.
pub fn has_net_admin(fd: RawFd) -> bool {
    let Ok(cur) = rcvbuf(fd) else { return false };
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, (cur / 2) as libc::c_int).is_ok()
}

/// The inode of a socket, which names it in /proc/net/udp (where its drop counter lives).
pub fn socket_inode(fd: RawFd) -> Option<u64> {
    // SAFETY: `st` is a zeroed stat buffer the kernel fills; `fd` is a descriptor we own.
    unsafe {
        let mut st: libc::stat = zeroed();
        if libc::fstat(fd, &mut st) == 0 {
            Some(st.st_ino)
        } else {
            None
        }
    }
}

/// Pin the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "CPU number too large"));
    }
    // SAFETY: `set` is a zeroed cpu_set_t, CPU_SET writes inside it (cpu < CPU_SETSIZE checked),
    // and sched_setaffinity reads exactly size_of::<cpu_set_t>() bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        libc::CPU_SET(cpu, &mut set);
        cvt(libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)).map(|_| ())
    }
}

/// The CPU the calling thread is running on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and only returns a value.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    // SAFETY: `ts` is a valid writable timespec for the kernel (or vDSO) to fill.
    unsafe {
        let mut ts: libc::timespec = zeroed();
        libc::clock_gettime(clock, &mut ts);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

/// Monotonic time in nanoseconds (vDSO: no system call).
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Wall-clock time in nanoseconds since the Unix epoch.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time (user + system) consumed by the whole process, in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Sleep until an absolute CLOCK_MONOTONIC instant; used by the pacer for the coarse part of
/// a wait (it spins for the last few microseconds).
pub fn sleep_until_monotonic_ns(deadline: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `ts` is a valid timespec; a null remainder pointer is allowed with TIMER_ABSTIME.
    // EINTR simply returns early; the caller re-checks the clock.
    unsafe {
        libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut());
    }
}

static STOP: AtomicBool = AtomicBool::new(false);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(sig: libc::c_int) {
    // Only async-signal-safe work: two atomic stores.
    LAST_SIGNAL.store(sig, Ordering::Relaxed);
    STOP.store(true, Ordering::Release);
}

/// Route SIGINT and SIGTERM to a flag so that runs finish cleanly (drain, flush, summarise)
/// instead of dying mid-write. Returns the flag every loop should poll.
pub fn install_stop_handler() -> &'static AtomicBool {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sa` is fully initialised (zeroed, then handler and mask set); the handler only
        // performs atomic stores, which are async-signal-safe. No SA_RESTART, so blocking calls
        // return EINTR and loops notice the flag promptly.
        unsafe {
            let mut sa: libc::sigaction = zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = 0;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    &STOP
}

/// The stop flag without installing handlers (for library users that manage signals).
pub fn stop_flag() -> &'static AtomicBool {
    &STOP
}

/// Which signal (if any) set the stop flag.
pub fn last_signal() -> i32 {
    LAST_SIGNAL.load(Ordering::Relaxed)
}

fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which fits inside it.
            let sin = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6, which fits inside it.
            let sin6 = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Metadata of one received datagram (or GRO super-datagram).
#[derive(Clone, Copy, Debug)]
pub struct RecvMeta {
    /// Bytes received into the buffer.
    pub len: usize,
    /// The kernel truncated the datagram because the buffer was too small.
    pub truncated: bool,
    /// Source address.
    pub src: Option<SocketAddr>,
    /// GRO segment size when the buffer holds several coalesced datagrams.
    pub gro_segment: Option<u16>,
    /// Cumulative socket drop count (SO_RXQ_OVFL) when the kernel attached it.
    pub rxq_ovfl: Option<u32>,
}

/// Preallocated state for `recvmmsg`: buffers, iovecs, headers, addresses and control space.
///
/// Everything is allocated once in `new`; `recv` only resets lengths and calls the kernel, so
/// the capture loop allocates nothing.
pub struct RecvBatch {
    bufs: Vec<u8>,
    buf_size: usize,
    ctrl: Vec<u64>,
    names: Vec<libc::sockaddr_storage>,
    iovecs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers inside `iovecs` and `hdrs` point only into the batch's own heap
// buffers, which move with it; nothing is shared with another thread.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// `count` buffers of `buf_size` bytes each.
    pub fn new(count: usize, buf_size: usize) -> Self {
        let count = count.max(1);
        let mut b = RecvBatch {
            bufs: vec![0u8; count * buf_size],
            buf_size,
            ctrl: vec![0u64; count * RECV_CTRL / 8],
            // SAFETY: sockaddr_storage is plain old data for which all-zero is valid.
            names: vec![unsafe { zeroed() }; count],
            iovecs: Vec::with_capacity(count),
            // SAFETY: mmsghdr is plain old data for which all-zero is valid.
            hdrs: vec![unsafe { zeroed() }; count],
        };
        for i in 0..count {
            // SAFETY: i * buf_size is within the `bufs` allocation of count * buf_size bytes.
            let base = unsafe { b.bufs.as_mut_ptr().add(i * buf_size) };
            b.iovecs.push(libc::iovec { iov_base: base.cast(), iov_len: buf_size });
        }
        for i in 0..count {
            let h = &mut b.hdrs[i].msg_hdr;
            h.msg_iov = &mut b.iovecs[i];
            h.msg_iovlen = 1;
            h.msg_name = (&mut b.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: i * RECV_CTRL / 8 words is within `ctrl` (count * RECV_CTRL / 8 words).
            h.msg_control = unsafe { b.ctrl.as_mut_ptr().add(i * RECV_CTRL / 8) }.cast();
            h.msg_controllen = RECV_CTRL as _;
        }
        b
    }

    /// How many datagrams one call can return.
    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// Receive up to `capacity()` datagrams: blocks for the first (up to the socket's receive
    /// timeout), then takes whatever else is already queued.
    pub fn recv(&mut self, fd: RawFd, nonblocking: bool) -> io::Result<usize> {
        for h in self.hdrs.iter_mut() {
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_controllen = RECV_CTRL as _;
            h.msg_hdr.msg_flags = 0;
        }
        let flags = if nonblocking { libc::MSG_DONTWAIT } else { libc::MSG_WAITFORONE };
        // SAFETY: every header points at buffers, names and control space owned by `self` with
        // the lengths just reset; the kernel writes at most those lengths. Count matches `hdrs`.
        let n = unsafe {
            libc::recvmmsg(fd, self.hdrs.as_mut_ptr(), self.hdrs.len() as libc::c_uint, flags, std::ptr::null_mut())
        };
        cvt(n).map(|n| n as usize)
    }

    /// The bytes of datagram `i` of the last `recv`.
    #[inline]
    pub fn data(&self, i: usize) -> &[u8] {
        let len = (self.hdrs[i].msg_len as usize).min(self.buf_size);
        &self.bufs[i * self.buf_size..i * self.buf_size + len]
    }

    /// Length, source and control-message facts of datagram `i` of the last `recv`.
    pub fn meta(&self, i: usize) -> RecvMeta {
        let h = &self.hdrs[i].msg_hdr;
        let mut meta = RecvMeta {
            len: (self.hdrs[i].msg_len as usize).min(self.buf_size),
            truncated: h.msg_flags & libc::MSG_TRUNC != 0,
            src: sockaddr_to_std(&self.names[i]),
            gro_segment: None,
            rxq_ovfl: None,
        };
        // SAFETY: the header's control pointer and (kernel-updated) length describe the control
        // space owned by `self`; CMSG_FIRSTHDR/NXTHDR stay within msg_controllen, and each data
        // read is bounds-checked against cmsg_len before an unaligned read.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                let level = (*c).cmsg_level;
                let ty = (*c).cmsg_type;
                let dlen = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(c);
                if level == libc::SOL_SOCKET && ty == libc::SO_RXQ_OVFL && dlen >= 4 {
                    meta.rxq_ovfl = Some(std::ptr::read_unaligned(data.cast::<u32>()));
                } else if level == libc::SOL_UDP && ty == libc::UDP_GRO && dlen >= 2 {
                    let v = if dlen >= 4 {
                        std::ptr::read_unaligned(data.cast::<i32>()) as u16
                    } else {
                        std::ptr::read_unaligned(data.cast::<u16>())
                    };
                    meta.gro_segment = Some(v);
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        meta
    }
}

/// Preallocated state for `sendmmsg` on a connected socket: one buffer per message, each
/// optionally carrying a UDP_SEGMENT control message so that the kernel splits it into
/// equal datagrams (GSO).
pub struct SendBatch {
    bufs: Vec<u8>,
    msg_size: usize,
    ctrl: Vec<u64>,
    iovecs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: as for RecvBatch, the raw pointers point only into the batch's own heap buffers.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// `count` messages of up to `msg_size` bytes each.
    pub fn new(count: usize, msg_size: usize) -> Self {
        let count = count.max(1);
        let mut b = SendBatch {
            bufs: vec![0u8; count * msg_size],
            msg_size,
            ctrl: vec![0u64; count * SEND_CTRL / 8],
            iovecs: Vec::with_capacity(count),
            // SAFETY: mmsghdr is plain old data for which all-zero is valid.
            hdrs: vec![unsafe { zeroed() }; count],
        };
        for i in 0..count {
            // SAFETY: i * msg_size is within the `bufs` allocation of count * msg_size bytes.
            let base = unsafe { b.bufs.as_mut_ptr().add(i * msg_size) };
            b.iovecs.push(libc::iovec { iov_base: base.cast(), iov_len: msg_size });
        }
        for i in 0..count {
            b.hdrs[i].msg_hdr.msg_iov = &mut b.iovecs[i];
            b.hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        b
    }

    /// How many messages fit in one call.
    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// Writable buffer of message `i` (its full capacity).
    #[inline]
    pub fn buf_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.bufs[i * self.msg_size..(i + 1) * self.msg_size]
    }

    /// Set message `i` to `len` bytes, to be split by the kernel into `segment`-byte datagrams
    /// when `segment` is given (GSO).
    pub fn set_message(&mut self, i: usize, len: usize, segment: Option<u16>) {
        let len = len.min(self.msg_size);
        self.iovecs[i].iov_len = len;
        let h = &mut self.hdrs[i].msg_hdr;
        match segment {
            Some(seg) => {
                // SAFETY: i * SEND_CTRL / 8 words is inside `ctrl`; CMSG_SPACE(2) <= SEND_CTRL, so
                // the header and its u16 payload fit in this message's control slot.
                unsafe {
                    let ctrl = self.ctrl.as_mut_ptr().add(i * SEND_CTRL / 8).cast::<u8>();
                    h.msg_control = ctrl.cast();
                    h.msg_controllen = libc::CMSG_SPACE(size_of::<u16>() as u32) as _;
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
                }
            }
            None => {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
        }
    }

    /// Send messages `from..to` on a connected socket; returns how many the kernel took.
    pub fn send(&mut self, fd: RawFd, from: usize, to: usize) -> io::Result<usize> {
        let to = to.min(self.hdrs.len());
        if from >= to {
            return Ok(0);
        }
        // SAFETY: headers `from..to` lie inside `hdrs` and point at iovecs and control space
        // owned by `self`, with lengths set by `set_message`; the socket is connected, so no
        // address is needed.
        let ret = unsafe { libc::sendmmsg(fd, self.hdrs.as_mut_ptr().add(from), (to - from) as libc::c_uint, 0) };
        cvt(ret).map(|r| r as usize)
    }
}

/// Send one datagram on a connected socket (control messages, rare paths).
pub fn send_one(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is a valid slice for the duration of the call and its exact length is passed.
    let ret = unsafe { libc::send(fd, data.as_ptr().cast(), data.len(), 0) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Raise RLIMIT_MEMLOCK where allowed and lock current and future pages, so the capture path
/// never waits on a page fault. Returns false when not permitted (callers then say so).
pub fn lock_memory() -> bool {
    // SAFETY: mlockall takes flags only; failure is reported through the return value.
    unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) == 0 }
}

/// Fill `buf` with the counter words `first, first+1, ...`, using AVX2 when the CPU has it.
///
/// The pattern check runs on every received byte, so it must cost far less than the receive
/// itself; the generic x86-64 baseline (SSE2) has no byte shuffle and byte-swaps slowly.
#[inline]
pub fn counter_fill(buf: &mut [u8], first: u64, big_endian: bool) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 support was detected on this CPU just above; the function body is
        // ordinary safe slice code compiled with AVX2 enabled.
        return unsafe { counter_fill_avx2(buf, first, big_endian) };
    }
    crate::wire::counter::fill_words(buf, first, big_endian)
}

/// OR of `word[i] ^ (first + i)` over `buf`'s 8-byte words (zero when the count continues),
/// using AVX2 when the CPU has it.
#[inline]
pub fn counter_mismatch(buf: &[u8], first: u64, big_endian: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 support was detected on this CPU just above; the function body is
        // ordinary safe slice code compiled with AVX2 enabled.
        return unsafe { counter_mismatch_avx2(buf, first, big_endian) };
    }
    crate::wire::counter::mismatch_words(buf, first, big_endian)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn counter_fill_avx2(buf: &mut [u8], first: u64, big_endian: bool) {
    crate::wire::counter::fill_words(buf, first, big_endian)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn counter_mismatch_avx2(buf: &[u8], first: u64, big_endian: bool) -> u64 {
    crate::wire::counter::mismatch_words(buf, first, big_endian)
}

/// Restrict the calling process (and so every child it starts afterwards) to `cpus`: the CPU
/// half of entering a test partition. Children inherit the mask across fork and exec.
pub fn set_process_affinity(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() || cpus.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty CPU set or CPU number too large"));
    }
    // SAFETY: `set` is a zeroed cpu_set_t; every CPU_SET index was checked against CPU_SETSIZE
    // above, and sched_setaffinity reads exactly size_of::<cpu_set_t>() bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        cvt(libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)).map(|_| ())
    }
}

/// Send `sig` to process `pid` (signal 0 only checks that it exists). Used to stop partition
/// daemons and the processes left in a partition when it is torn down.
pub fn send_signal(pid: u32, sig: i32) -> io::Result<()> {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"));
    };
    if pid <= 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "refusing to signal a process group"));
    }
    // SAFETY: kill takes two integers and touches no memory of ours; pid > 0 names one process.
    cvt(unsafe { libc::kill(pid, sig) }).map(|_| ())
}

pub mod file;
mod ring;
pub use ring::{byte_ring, RingConsumer, RingMemory, RingProducer, RING_ALIGN};

/// Open `path` for a recording: created new (never overwriting), write-only, with O_DIRECT
/// when the filesystem allows it. Returns the file and whether O_DIRECT is on; tmpfs and some
/// other filesystems refuse O_DIRECT with EINVAL, and the caller then says so once.
pub fn create_direct(path: &std::path::Path, direct: bool) -> io::Result<(std::fs::File, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = |flags: libc::c_int| {
        std::fs::OpenOptions::new().write(true).create_new(true).custom_flags(flags).mode(0o644).open(path)
    };
    if direct {
        match open(libc::O_DIRECT) {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    open(0).map(|f| (f, false))
}

/// Switch O_DIRECT off on an open file, for the unaligned tail of a recording.
pub fn clear_direct(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own; flags are plain integers.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) })?;
    Ok(())
}

/// Reserve disk space for `len` bytes from `offset` without changing the file size, so that
/// writes into it cannot fail for lack of space and the file stays contiguous. Filesystems
/// without fallocate report EOPNOTSUPP, which callers may ignore.
pub fn preallocate(fd: RawFd, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: fallocate takes integers only; failure is reported through the return value.
    let r = unsafe { libc::fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, offset as libc::off_t, len as libc::off_t) };
    cvt(r).map(|_| ())
}

/// Free space on the filesystem holding `path`, bytes available to this user.
pub fn free_space(path: &std::path::Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: statvfs is plain old data for which all-zero is valid.
    let mut s: libc::statvfs = unsafe { zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a valid out-pointer.
    cvt(unsafe { libc::statvfs(c.as_ptr(), &mut s) })?;
    Ok(s.f_bavail as u64 * s.f_frsize as u64)
}

/// A receive batch that can send each datagram straight back to where it came from, for the
/// latency reflector: `sendmmsg` reuses the received bytes and source addresses in place, so a
/// reflection costs one receive and one send system call per batch and copies nothing.
pub struct EchoBatch {
    rx: RecvBatch,
    out_iov: Vec<libc::iovec>,
    out_hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: as for RecvBatch, the raw pointers point only into the batch's own heap buffers.
unsafe impl Send for EchoBatch {}

impl EchoBatch {
    /// `count` datagrams of up to `buf_size` bytes per call.
    pub fn new(count: usize, buf_size: usize) -> Self {
        let rx = RecvBatch::new(count, buf_size);
        let count = rx.capacity();
        let mut b = EchoBatch {
            rx,
            out_iov: vec![libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; count],
            // SAFETY: mmsghdr is plain old data for which all-zero is valid.
            out_hdrs: vec![unsafe { zeroed() }; count],
        };
        for i in 0..count {
            b.out_iov[i].iov_base = b.rx.iovecs[i].iov_base;
            let h = &mut b.out_hdrs[i].msg_hdr;
            h.msg_iov = &mut b.out_iov[i];
            h.msg_iovlen = 1;
            h.msg_name = (&mut b.rx.names[i] as *mut libc::sockaddr_storage).cast();
        }
        b
    }

    /// Receive like [`RecvBatch::recv`].
    pub fn recv(&mut self, fd: RawFd, nonblocking: bool) -> io::Result<usize> {
        self.rx.recv(fd, nonblocking)
    }

    /// Length and source of datagram `i` of the last `recv`.
    pub fn meta(&self, i: usize) -> RecvMeta {
        self.rx.meta(i)
    }

    /// The bytes of datagram `i` of the last `recv`, writable: the reflector reads what it
    /// received and marks its answer as a reply before it goes back.
    #[inline]
    pub fn data_mut(&mut self, i: usize) -> &mut [u8] {
        let len = (self.rx.hdrs[i].msg_len as usize).min(self.rx.buf_size);
        &mut self.rx.bufs[i * self.rx.buf_size..i * self.rx.buf_size + len]
    }

    /// Send datagrams `from..n` of the last `recv` back to their sources (on an unconnected
    /// socket); returns how many the kernel took. An error concerns datagram `from`.
    pub fn echo(&mut self, fd: RawFd, from: usize, n: usize) -> io::Result<usize> {
        let n = n.min(self.out_hdrs.len());
        if from >= n {
            return Ok(0);
        }
        for i in from..n {
            self.out_iov[i].iov_len = (self.rx.hdrs[i].msg_len as usize).min(self.rx.buf_size);
            self.out_hdrs[i].msg_hdr.msg_namelen = self.rx.hdrs[i].msg_hdr.msg_namelen;
        }
        // SAFETY: headers `from..n` lie inside `out_hdrs`; each points at an iovec over the
        // batch's own receive buffer with the received length, and at the source address the
        // kernel stored for that datagram with the length it reported. Nothing else is referenced.
        let ret = unsafe { libc::sendmmsg(fd, self.out_hdrs.as_mut_ptr().add(from), (n - from) as libc::c_uint, 0) };
        cvt(ret).map(|r| r as usize)
    }
}

/// Wait until `fd` is readable or `timeout_ns` has passed (None: no limit). Returns whether it
/// is readable; EINTR returns `Ok(false)` so the caller re-checks its stop flag.
pub fn poll_readable(fd: RawFd, timeout_ns: Option<u64>) -> io::Result<bool> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ts = timeout_ns.map(|t| libc::timespec {
        tv_sec: (t / 1_000_000_000) as libc::time_t,
        tv_nsec: (t % 1_000_000_000) as libc::c_long,
    });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `p` is one valid pollfd; `tsp` is null or points at `ts`, alive for the call; a
    // null signal mask leaves the mask unchanged.
    let r = unsafe { libc::ppoll(&mut p, 1, tsp, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
    }
    Ok(r > 0 && p.revents & (libc::POLLIN | libc::POLLERR) != 0)
}

/// Set the calling thread's timer slack: Linux may otherwise defer a timed wake-up by 50 us
/// to batch timers, which would smear a latency probe schedule.
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument; the unused ones are zero.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    cvt(r).map(|_| ())
}

/// SIGTERM, for asking a child process to finish cleanly.
pub const SIGTERM: i32 = libc::SIGTERM;

pub mod proc;
pub use proc::die_with_parent;
