//! AF_PACKET receive rings: a packet socket with a TPACKET_V3 ring mapped into the process,
//! an optional PACKET_FANOUT group, a classic BPF socket filter, the kernel's drop counter, and
//! the walk over the ring's blocks and frames — behind a safe API for the packet backend.
//!
//! A TPACKET_V3 ring is a run of equal blocks shared with the kernel. The kernel fills a block
//! with frames of any length, back to back, and hands it over by setting its status to
//! `TP_STATUS_USER` (when it is full, or when the block timeout passes with frames in it);
//! user space reads the frames in place and hands the block back by setting `TP_STATUS_KERNEL`.
//! One wake-up delivers a whole block: that is the batching the backend relies on.
//!
//! The socket is `SOCK_DGRAM`: the kernel strips the link-layer header, so a frame starts at
//! the IP header whatever the interface's link type (Ethernet, loopback, tun), and the filter's
//! offsets are IP offsets.

use std::ffi::CStr;
use std::io;
use std::mem::size_of;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};

use super::cvt;

const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V3: libc::c_int = 2;
const PACKET_FANOUT_HASH: u32 = 0;
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: u32 = 0x4000;
const ETH_P_ALL: u16 = 0x0003;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_LOSING: u32 = 1 << 2;

/// Offsets inside a block descriptor (`struct tpacket_block_desc` with `tpacket_hdr_v1`).
const BLK_STATUS: usize = 8;
const BLK_NUM_PKTS: usize = 12;
const BLK_FIRST: usize = 16;
/// Bytes of `struct tpacket3_hdr`, the header in front of each frame.
const FRAME_HDR: usize = 48;

/// The request for a TPACKET_V3 ring (`struct tpacket_req3`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct TpacketReq3 {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
    tp_retire_blk_tov: u32,
    tp_sizeof_priv: u32,
    tp_feature_req_word: u32,
}

/// `struct tpacket_stats_v3`: what PACKET_STATISTICS returns (and resets) on a V3 socket.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct TpacketStatsV3 {
    tp_packets: u32,
    tp_drops: u32,
    tp_freeze_q_cnt: u32,
}

/// One classic BPF instruction (`struct sock_filter`), as the kernel takes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BpfInsn {
    /// Opcode: class, size, mode or operation, source.
    pub code: u16,
    /// Jump offset when the test holds.
    pub jt: u8,
    /// Jump offset when it does not.
    pub jf: u8,
    /// The constant operand.
    pub k: u32,
}

/// `struct sock_fprog`.
#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const BpfInsn,
}

/// Attach a classic BPF program to any socket (SO_ATTACH_FILTER): the kernel runs it on every
/// packet before queueing it, and drops those it returns 0 for. Needs no privilege.
pub fn attach_filter(fd: RawFd, prog: &[BpfInsn]) -> io::Result<()> {
    let len = u16::try_from(prog.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let fprog = SockFprog { len, filter: prog.as_ptr() };
    // SAFETY: `fprog` points at `prog`, alive for the call, with its exact length; the kernel
    // copies the program and keeps no pointer to it.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const SockFprog).cast(),
            size_of::<SockFprog>() as libc::socklen_t,
        )
    };
    cvt(ret).map(|_| ())
}

fn setsockopt_raw<T>(fd: RawFd, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live plain-old-data value whose exact size is passed.
    let ret = unsafe {
        libc::setsockopt(fd, libc::SOL_PACKET, name, (value as *const T).cast(), size_of::<T>() as libc::socklen_t)
    };
    cvt(ret).map(|_| ())
}

/// How to set up a [`PacketRing`].
#[derive(Clone, Debug)]
pub struct RingSpec<'a> {
    /// Interface to capture on (0: every interface).
    pub ifindex: u32,
    /// Bytes per block: a power of two, a multiple of the page size, larger than any packet.
    pub block_size: usize,
    /// Blocks in the ring.
    pub block_nr: usize,
    /// Milliseconds after which the kernel hands over a block that is not full (at least 1).
    pub retire_ms: u32,
    /// The socket filter, attached before the socket sees any packet.
    pub filter: &'a [BpfInsn],
    /// Fanout group id when several rings share the interface's traffic (hashed by flow).
    pub fanout: Option<u16>,
}

/// A packet socket with its TPACKET_V3 receive ring mapped; unmapped and closed on drop.
pub struct PacketRing {
    fd: OwnedFd,
    map: *mut u8,
    block_size: usize,
    block_nr: usize,
}

// SAFETY: the mapping is owned by the ring and lives as long as it; the only memory touched
// through `&self` is a block handed to user space by the kernel (read) and its status word
// (atomic), so sharing the ring between threads cannot create a data race on our side.
unsafe impl Send for PacketRing {}
// SAFETY: as above.
unsafe impl Sync for PacketRing {}

impl Drop for PacketRing {
    fn drop(&mut self) {
        // SAFETY: `map` is the mapping of `block_size * block_nr` bytes made in `open`, unmapped
        // only here; no `Block` can outlive the ring (they borrow it).
        unsafe {
            libc::munmap(self.map.cast(), self.block_size * self.block_nr);
        }
    }
}

impl PacketRing {
    /// Create the socket, filter it, map the ring and only then bind it to the interface, so
    /// that no unfiltered packet ever reaches the ring. `EPERM` means no CAP_NET_RAW.
    pub fn open(spec: &RingSpec<'_>) -> io::Result<PacketRing> {
        // Protocol 0: the socket receives nothing until the bind below names ETH_P_ALL.
        // SAFETY: plain socket creation; the descriptor is owned right after.
        let raw = cvt(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let fd_raw = fd.as_raw_fd();
        attach_filter(fd_raw, spec.filter)?;
        setsockopt_raw(fd_raw, PACKET_VERSION, &TPACKET_V3)?;
        // Outgoing copies (loopback shows every packet once each way) are not even cloned for
        // this socket; the filter drops them too, for kernels without the option (before 4.20).
        let _ = setsockopt_raw(fd_raw, PACKET_IGNORE_OUTGOING, &1 as &libc::c_int);
        let frame_size = 2048usize;
        let req = TpacketReq3 {
            tp_block_size: spec.block_size as u32,
            tp_block_nr: spec.block_nr as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: (spec.block_size / frame_size * spec.block_nr) as u32,
            tp_retire_blk_tov: spec.retire_ms.max(1),
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt_raw(fd_raw, PACKET_RX_RING, &req)?;
        let len = spec.block_size * spec.block_nr;
        // SAFETY: maps the ring the kernel just allocated for this socket, at its exact size
        // (the kernel inserts its own pages, already resident); the result is checked.
        let map = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd_raw, 0)
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ring = PacketRing { fd, map: map.cast(), block_size: spec.block_size, block_nr: spec.block_nr };
        // SAFETY: sockaddr_ll is plain old data for which all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = spec.ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll on the stack with its exact size passed.
        cvt(unsafe {
            libc::bind(
                fd_raw,
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        if let Some(group) = spec.fanout {
            let arg: u32 = u32::from(group) | ((PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_IGNORE_OUTGOING) << 16);
            setsockopt_raw(fd_raw, PACKET_FANOUT, &arg)?;
        }
        Ok(ring)
    }

    /// The socket's descriptor, for waiting on (valid while the ring lives).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Blocks in the ring.
    pub fn block_nr(&self) -> usize {
        self.block_nr
    }

    /// Bytes the ring maps.
    pub fn bytes(&self) -> usize {
        self.block_nr * self.block_size
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.block_nr);
        // SAFETY: block `i` lies inside the mapping, and its status word (4-byte aligned, at a
        // page-aligned block's offset 8) is shared with the kernel, hence accessed atomically.
        unsafe { &*(self.map.add(i * self.block_size + BLK_STATUS) as *const AtomicU32) }
    }

    /// Block `i` if the kernel has handed it to user space, else `None`.
    #[inline]
    pub fn block(&self, i: usize) -> Option<Block<'_>> {
        let st = self.status(i).load(Ordering::Acquire);
        if st & TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the kernel set TP_STATUS_USER (read with Acquire above, so its writes to the
        // block are visible) and does not write this block again until we set it back to
        // TP_STATUS_KERNEL in `Block::release`; the block is `block_size` bytes in the mapping.
        let bytes = unsafe { std::slice::from_raw_parts(self.map.add(i * self.block_size), self.block_size) };
        Some(Block { ring: self, index: i, bytes, losing: st & TP_STATUS_LOSING != 0 })
    }

    /// Packets the kernel dropped for this socket (ring full) since the last call: reading
    /// resets the kernel's counter.
    pub fn take_drops(&self) -> io::Result<u64> {
        let mut st = TpacketStatsV3::default();
        let mut len = size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid writable locations and `len` holds the buffer size.
        let ret = unsafe {
            libc::getsockopt(
                self.fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut TpacketStatsV3).cast(),
                &mut len,
            )
        };
        cvt(ret).map(|_| u64::from(st.tp_drops))
    }
}

/// A block the kernel handed over: its frames, read in place. Dropping it without
/// [`Block::release`] keeps it from the kernel until it is looked at again.
pub struct Block<'r> {
    ring: &'r PacketRing,
    index: usize,
    bytes: &'r [u8],
    losing: bool,
}

impl<'r> Block<'r> {
    /// Whether the kernel has dropped packets for this socket since its counter was last read
    /// (the cue to call [`PacketRing::take_drops`]).
    pub fn losing(&self) -> bool {
        self.losing
    }

    fn u32_at(&self, off: usize) -> u32 {
        self.bytes.get(off..off + 4).map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u16_at(&self, off: usize) -> u16 {
        self.bytes.get(off..off + 2).map_or(0, |b| u16::from_ne_bytes([b[0], b[1]]))
    }

    /// The frames, in arrival order. Offsets are checked against the block, so a frame the
    /// kernel described inconsistently ends the walk instead of reading outside the block.
    #[inline]
    pub fn frames(&self) -> Frames<'_, 'r> {
        Frames { block: self, left: self.u32_at(BLK_NUM_PKTS), off: self.u32_at(BLK_FIRST) as usize }
    }

    /// Hand the block back to the kernel.
    #[inline]
    pub fn release(self) {
        // Our reads of the block happen before the kernel may refill it.
        fence(Ordering::Release);
        self.ring.status(self.index).store(TP_STATUS_KERNEL, Ordering::Release);
    }
}

/// One captured packet, from its IP header on.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'b> {
    /// The captured bytes (`tp_snaplen` of them).
    pub data: &'b [u8],
    /// The packet's length on the wire (more than `data.len()` when the ring truncated it).
    pub wire_len: u32,
    /// `tp_status`: TP_STATUS_LOSING and the checksum bits.
    pub status: u32,
}

/// The frames of a [`Block`].
pub struct Frames<'b, 'r> {
    block: &'b Block<'r>,
    left: u32,
    off: usize,
}

impl<'b> Iterator for Frames<'b, '_> {
    type Item = Frame<'b>;

    #[inline]
    fn next(&mut self) -> Option<Frame<'b>> {
        if self.left == 0 || self.off + FRAME_HDR > self.block.bytes.len() {
            return None;
        }
        self.left -= 1;
        let b = self.block;
        let h = self.off;
        let next = b.u32_at(h) as usize;
        let snaplen = b.u32_at(h + 12) as usize;
        let wire_len = b.u32_at(h + 16);
        let status = b.u32_at(h + 20);
        let mac = b.u16_at(h + 24) as usize;
        let start = h + mac;
        let data = b.bytes.get(start..start + snaplen)?;
        self.off = if next == 0 { usize::MAX / 2 } else { h + next };
        Some(Frame { data, wire_len, status })
    }
}

/// The index of the interface holding `ip` (the loopback interface for 127.0.0.0/8 and ::1),
/// with its name; `None` if no interface here has that address.
pub fn interface_of(ip: IpAddr) -> io::Result<Option<(u32, String)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    cvt(unsafe { libc::getifaddrs(&mut head) })?;
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() {
            continue;
        }
        let loopback = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
        let matches = if ip.is_loopback() {
            loopback
        } else if ifa.ifa_addr.is_null() {
            false
        } else {
            // SAFETY: `ifa_addr` is non-null and points at a sockaddr whose family says how
            // much of it there is; we read the family first and then only that variant.
            unsafe {
                match (i32::from((*ifa.ifa_addr).sa_family), ip) {
                    (libc::AF_INET, IpAddr::V4(v4)) => {
                        let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        u32::from_be(sin.sin_addr.s_addr) == u32::from(v4)
                    }
                    (libc::AF_INET6, IpAddr::V6(v6)) => {
                        let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        sin6.sin6_addr.s6_addr == v6.octets()
                    }
                    _ => false,
                }
            }
        };
        if matches {
            // SAFETY: `ifa_name` is a NUL-terminated string owned by the list.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
            // SAFETY: as above; if_nametoindex only reads the string.
            let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
            if index != 0 {
                found = Some((index, name.to_string_lossy().into_owned()));
                break;
            }
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once; no reference into it survives.
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}

/// The first IPv4 address of the interface for which `pick(name, index)` holds (`None` if it
/// has none): the address a PGM source names in its SPMs when it sends to a group by that
/// interface.
pub fn ipv4_of_interface(pick: impl Fn(&str, u32) -> bool) -> io::Result<Option<std::net::Ipv4Addr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    cvt(unsafe { libc::getifaddrs(&mut head) })?;
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: `ifa_addr` is non-null and points at a sockaddr; the family is read first.
        if i32::from(unsafe { (*ifa.ifa_addr).sa_family }) != libc::AF_INET {
            continue;
        }
        // SAFETY: `ifa_name` is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
        // SAFETY: as above; if_nametoindex only reads the string.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if pick(&name.to_string_lossy(), index) {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            found = Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            break;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once; no reference into it survives.
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_interface_is_found_for_loopback_addresses() {
        let (idx, name) = interface_of("127.0.0.1".parse().unwrap()).unwrap().expect("a loopback interface");
        assert!(idx > 0);
        assert!(!name.is_empty());
        assert_eq!(interface_of("192.0.2.99".parse().unwrap()).unwrap(), None, "TEST-NET-1 is on no interface");
    }

    #[test]
    fn the_uapi_layouts_have_the_kernels_sizes() {
        assert_eq!(size_of::<TpacketReq3>(), 28);
        assert_eq!(size_of::<TpacketStatsV3>(), 12);
        assert_eq!(size_of::<BpfInsn>(), 8);
    }
}
