//! Sockets: the options wirespeed sets (buffers, drop counter, GRO, timeouts), the batched
//! `recvmmsg`/`sendmmsg` state the capture, sender and reflector loops reuse without
//! allocating, and the readiness wait. Control messages are encoded and walked by the `cmsg` module only.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::time::Duration;

use super::cvt;
use super::ring::Lease;

pub(crate) mod cmsg;

/// Control-message space per received datagram: room for SO_RXQ_OVFL (u32), UDP_GRO (int) and a
/// nanosecond timestamp, each with its cmsghdr, with slack.
const RECV_CTRL: usize = 128;
/// Control-message space per sent message: one UDP_SEGMENT (u16) with its header, padded.
const SEND_CTRL: usize = 32;
const _: () = assert!(cmsg::space(size_of::<u16>()) <= SEND_CTRL);

/// Set a socket option whose value is one plain C value or struct (an int, a timeval, an
/// ip_mreqn, an in_addr): the one place this file calls setsockopt.
fn setsockopt_val<T: Copy>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live reference to a plain `Copy` C value for the duration of the call,
    // and its exact size is passed, so the kernel reads only that value's bytes.
    let ret =
        unsafe { libc::setsockopt(fd, level, name, (value as *const T).cast(), size_of::<T>() as libc::socklen_t) };
    cvt(ret).map(|_| ())
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    setsockopt_val(fd, level, name, &value)
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
    setsockopt_val(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)
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
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let port = u16::from_be(sin6.sin6_port);
            // An IPv4 sender reaching a dual-stack socket arrives as ::ffff:a.b.c.d: it is the
            // IPv4 address a.b.c.d, and ledgers, stream keys and reports name it so.
            Some(match ip.to_ipv4_mapped() {
                Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
                None => SocketAddr::V6(SocketAddrV6::new(ip, port, sin6.sin6_flowinfo, sin6.sin6_scope_id)),
            })
        }
        _ => None,
    }
}

/// `addr` as a `sockaddr_storage` and the length of the variant it holds, for bind/connect.
pub(crate) fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data for which all-zero bytes are a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr { s_addr: u32::from(*a.ip()).to_be() };
            (ss, size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr = libc::in6_addr { s6_addr: a.ip().octets() };
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            (ss, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

/// A UDP socket bound to `addr`, set up before the bind as a receiver needs it: an IPv6
/// socket on the unspecified address `[::]` takes IPv4 too (IPV6_V6ONLY off, whatever
/// net.ipv6.bindv6only says), so one socket hears both families; `reuseport` sets
/// SO_REUSEPORT, so that other capture threads' sockets can join its group.
pub fn bind_udp(addr: SocketAddr, reuseport: bool) -> io::Result<std::net::UdpSocket> {
    use std::os::fd::FromRawFd;
    let domain = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: socket takes plain integer arguments; the result is checked before use.
    let fd = cvt(unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else: the UdpSocket
    // takes it over and closes it on every path from here.
    let sock = unsafe { std::net::UdpSocket::from_raw_fd(fd) };
    if let SocketAddr::V6(a) = addr {
        let v6only = if a.ip().is_unspecified() { 0 } else { 1 };
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, v6only)?;
    }
    if reuseport {
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a sockaddr_in or sockaddr_in6 of `len` bytes, alive for the call.
    cvt(unsafe { libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), len) })?;
    Ok(sock)
}

/// Join IPv4 multicast group `group` on the interface with index `ifindex` (ip_mreqn), for an
/// interface named rather than given by its address.
pub fn join_multicast_v4_index(fd: RawFd, group: Ipv4Addr, ifindex: u32) -> io::Result<()> {
    let m = libc::ip_mreqn {
        imr_multiaddr: libc::in_addr { s_addr: u32::from(group).to_be() },
        imr_address: libc::in_addr { s_addr: 0 },
        imr_ifindex: ifindex as libc::c_int,
    };
    setsockopt_val(fd, libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, &m)
}

/// Send IPv4 multicast out of the interface with index `ifindex` (IP_MULTICAST_IF, ip_mreqn).
pub fn set_multicast_if_v4_index(fd: RawFd, ifindex: u32) -> io::Result<()> {
    let m = libc::ip_mreqn {
        imr_multiaddr: libc::in_addr { s_addr: 0 },
        imr_address: libc::in_addr { s_addr: 0 },
        imr_ifindex: ifindex as libc::c_int,
    };
    setsockopt_val(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_IF, &m)
}

/// Send IPv4 multicast out of the interface that holds `addr` (IP_MULTICAST_IF, in_addr).
pub fn set_multicast_if_v4_addr(fd: RawFd, addr: Ipv4Addr) -> io::Result<()> {
    let a = libc::in_addr { s_addr: u32::from(addr).to_be() };
    setsockopt_val(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_IF, &a)
}

/// Send IPv6 multicast out of the interface with index `ifindex` (IPV6_MULTICAST_IF).
pub fn set_multicast_if_v6(fd: RawFd, ifindex: u32) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_IF, ifindex as libc::c_int)
}

/// Hop limit of IPv6 multicast sent on this socket (IPV6_MULTICAST_HOPS).
pub fn set_multicast_hops_v6(fd: RawFd, hops: u32) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_HOPS, hops as libc::c_int)
}

/// Whether IPv6 multicast sent on this socket is looped back to local members
/// (IPV6_MULTICAST_LOOP), so a receiver on the same host hears it.
pub fn set_multicast_loop_v6(fd: RawFd, on: bool) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_LOOP, libc::c_int::from(on))
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
///
/// It can also receive into ring memory lent for one batch ([`RecvBatch::recv_lent`]): each
/// message then has two iovecs, its ring slot and, behind it, the rest of its own buffer, so a
/// datagram longer than the slot is never cut short.
pub struct RecvBatch {
    bufs: Vec<u8>,
    buf_size: usize,
    ctrl: Vec<cmsg::Space<RECV_CTRL>>,
    names: Vec<libc::sockaddr_storage>,
    iovecs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// Two iovecs per message for lent receives (slot, overflow).
    lent_iov: Vec<libc::iovec>,
    /// Headers 0..lent_hdrs point at `lent_iov` (set by the last lent receive).
    lent_hdrs: usize,
    /// Messages 0..in_place of the last receive lie in the lent slots.
    in_place: usize,
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
            ctrl: vec![cmsg::Space::new(); count],
            // SAFETY: sockaddr_storage is plain old data for which all-zero is valid.
            names: vec![unsafe { zeroed() }; count],
            iovecs: Vec::with_capacity(count),
            // SAFETY: mmsghdr is plain old data for which all-zero is valid.
            hdrs: vec![unsafe { zeroed() }; count],
            lent_iov: vec![libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 2 * count],
            lent_hdrs: 0,
            in_place: 0,
        };
        // Every page now: the first batch must not fault them in on the receive path.
        super::ring::prefault(&mut b.bufs);
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
            h.msg_control = b.ctrl[i].0.as_mut_ptr().cast();
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
        self.unlend();
        self.call(fd, nonblocking)
    }

    /// Point the headers a lent receive redirected back at the batch's own buffers.
    #[inline]
    fn unlend(&mut self) {
        for i in 0..self.lent_hdrs {
            self.hdrs[i].msg_hdr.msg_iov = &mut self.iovecs[i];
            self.hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        self.lent_hdrs = 0;
        self.in_place = 0;
    }

    /// Receive like [`recv`](Self::recv), the first `lease.count()` datagrams into the lent
    /// ring slots (the rest into the batch's own buffers), in one system call. A datagram that
    /// does not fit its slot (longer, or a GRO buffer of several) is copied whole into its own
    /// buffer, and so is every later one that landed in a slot, so that slots `0..in_place()`
    /// hold exactly the datagrams `0..in_place()`, in order, each at most a slot's body long.
    pub fn recv_lent(&mut self, fd: RawFd, nonblocking: bool, lease: &mut Lease) -> io::Result<usize> {
        let lent = lease.count().min(self.hdrs.len());
        let body = lease.body().min(self.buf_size);
        for i in 0..lent {
            let own = self.iovecs[i].iov_base as *mut u8;
            self.lent_iov[2 * i] = libc::iovec { iov_base: lease.body_ptr(i).cast(), iov_len: body };
            self.lent_iov[2 * i + 1] = libc::iovec {
                // SAFETY: body <= buf_size, so the pointer stays inside message i's own buffer.
                iov_base: unsafe { own.add(body) }.cast(),
                iov_len: self.buf_size - body,
            };
            self.hdrs[i].msg_hdr.msg_iov = &mut self.lent_iov[2 * i];
            self.hdrs[i].msg_hdr.msg_iovlen = 2;
        }
        for i in lent..self.lent_hdrs {
            self.hdrs[i].msg_hdr.msg_iov = &mut self.iovecs[i];
            self.hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        self.lent_hdrs = lent;
        self.in_place = 0;
        let n = self.call(fd, nonblocking)?;
        let landed = n.min(lent);
        let mut in_place = landed;
        for i in 0..landed {
            let h = &self.hdrs[i];
            let len = h.msg_len as usize;
            if len > body || h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || self.has_gro(i) {
                in_place = i;
                break;
            }
        }
        for i in in_place..landed {
            let len = (self.hdrs[i].msg_len as usize).min(body);
            let own = &mut self.bufs[i * self.buf_size..i * self.buf_size + len];
            own.copy_from_slice(lease.landed(i, len));
        }
        self.in_place = in_place;
        Ok(n)
    }

    /// Datagrams `0..in_place()` of the last receive lie in the lent slots; the rest, in the
    /// batch's own buffers ([`data`](Self::data)).
    #[inline]
    pub fn in_place(&self) -> usize {
        self.in_place
    }

    /// The bytes of datagram `i < in_place()` of the last [`recv_lent`](Self::recv_lent), in
    /// its ring slot; borrowing the lease keeps the ring from moving them meanwhile.
    #[inline]
    pub fn lent_data<'a>(&self, lease: &'a Lease, i: usize) -> &'a [u8] {
        assert!(i < self.in_place);
        lease.landed(i, self.hdrs[i].msg_len as usize)
    }

    /// Whether datagram `i` came as a GRO buffer (possibly several datagrams).
    fn has_gro(&self, i: usize) -> bool {
        let h = &self.hdrs[i].msg_hdr;
        h.msg_controllen != 0
            && cmsg::Iter::new(&self.ctrl[i], h).any(|c| (c.level, c.ty) == (libc::SOL_UDP, libc::UDP_GRO))
    }

    fn call(&mut self, fd: RawFd, nonblocking: bool) -> io::Result<usize> {
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
        for c in cmsg::Iter::new(&self.ctrl[i], h) {
            match (c.level, c.ty) {
                (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                    if let Some(b) = c.bytes::<4>() {
                        meta.rxq_ovfl = Some(u32::from_ne_bytes(b));
                    }
                }
                // The kernel writes an int; a u16 is accepted too, as the segment size is one.
                (libc::SOL_UDP, libc::UDP_GRO) => {
                    if let Some(b) = c.bytes::<4>() {
                        meta.gro_segment = Some(i32::from_ne_bytes(b) as u16);
                    } else if let Some(b) = c.bytes::<2>() {
                        meta.gro_segment = Some(u16::from_ne_bytes(b));
                    }
                }
                _ => {}
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
    ctrl: Vec<cmsg::Space<SEND_CTRL>>,
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
            ctrl: vec![cmsg::Space::new(); count],
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
        // Without a segment size the header ends up with no control buffer at all.
        let mut enc = cmsg::Encoder::new(&mut self.hdrs[i].msg_hdr, &mut self.ctrl[i]);
        if let Some(seg) = segment {
            enc.push(libc::SOL_UDP, libc::UDP_SEGMENT, seg);
        }
        enc.finish();
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

/// One descriptor of a [`poll`] set: `events` is what to wait for (`libc::POLLIN`,
/// `libc::POLLOUT`), `revents` what happened.
pub type PollFd = libc::pollfd;

/// Wait until one of `fds` is ready or `timeout_ms` has passed (one syscall for a whole set of
/// sockets, so that one thread can serve many peers without any one of them holding it up).
/// Returns how many are ready; EINTR returns 0 (every `revents` cleared) so the caller
/// re-checks its stop flag.
pub fn poll(fds: &mut [PollFd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd of exactly the length
    // given; the kernel writes only their `revents`.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            fds.iter_mut().for_each(|p| p.revents = 0);
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    /// The send batch's GSO control message and the receive batch's control-message walk, end
    /// to end over loopback: one 3-segment GSO send arrives as one GRO buffer that says its
    /// segment size (or as three datagrams where the kernel splits it).
    #[test]
    fn a_gso_send_arrives_with_its_segment_size() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        if !gso_supported(tx.as_raw_fd()) || enable_gro(rx.as_raw_fd()).is_err() {
            eprintln!("no UDP GSO/GRO on this kernel: nothing to check");
            return;
        }
        enable_rxq_ovfl(rx.as_raw_fd()).unwrap();
        set_rcvtimeo(rx.as_raw_fd(), Duration::from_secs(5)).unwrap();
        let mut send = SendBatch::new(2, 3000);
        send.buf_mut(0)[..3000].fill(7);
        send.set_message(0, 3000, Some(1000));
        send.buf_mut(1)[..100].fill(9);
        send.set_message(1, 100, None);
        assert_eq!(send.send(tx.as_raw_fd(), 0, 2).unwrap(), 2);
        let mut recv = RecvBatch::new(8, 65536);
        let (mut bytes, mut segments, mut plain) = (0, Vec::new(), 0);
        while bytes < 3100 {
            let n = recv.recv(rx.as_raw_fd(), false).unwrap();
            for i in 0..n {
                let m = recv.meta(i);
                assert!(!m.truncated);
                assert_eq!(m.src, Some(tx.local_addr().unwrap()));
                assert_eq!(m.rxq_ovfl, None, "no drops, so the kernel attaches no counter");
                bytes += m.len;
                match m.gro_segment {
                    Some(s) => segments.push((m.len, s)),
                    None => plain += 1,
                }
            }
        }
        assert_eq!(bytes, 3100);
        assert!(segments.iter().all(|&(_, s)| s == 1000), "{segments:?}");
        assert!(segments.len() + plain >= 2);
    }

    /// The drop counter's control message reaches `RecvMeta`: overflow a small receive buffer,
    /// and a datagram that gets in afterwards carries the number the kernel dropped.
    #[test]
    fn overflowing_the_buffer_reports_the_drop_count() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        enable_rxq_ovfl(rx.as_raw_fd()).unwrap();
        set_rcvbuf(rx.as_raw_fd(), 4096, false).unwrap();
        for _ in 0..200 {
            send_one(tx.as_raw_fd(), &[1u8; 1000]).unwrap();
        }
        let mut recv = RecvBatch::new(256, 2048);
        let got = recv.recv(rx.as_raw_fd(), true).unwrap();
        assert!(got < 200, "a 4 KiB buffer cannot hold 200 datagrams of 1000 bytes");
        // The queue is empty now, so the next datagram gets in, and carries the count of all the
        // drops before it.
        send_one(tx.as_raw_fd(), &[2u8; 10]).unwrap();
        assert_eq!(recv.recv(rx.as_raw_fd(), true).unwrap(), 1);
        let m = recv.meta(0);
        assert_eq!(m.len, 10);
        let dropped = m.rxq_ovfl.expect("the kernel attaches the counter once it is non-zero");
        assert_eq!(dropped as usize, 200 - got);
    }
}
