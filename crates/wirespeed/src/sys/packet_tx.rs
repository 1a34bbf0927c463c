//! Sending whole Ethernet frames: an AF_PACKET SOCK_RAW socket bound to one interface, with the
//! qdisc bypassed (PACKET_QDISC_BYPASS), plus the interface facts a frame builder needs (index,
//! hardware address and type, MTU) and the one socket option the source-address probe needs
//! (SO_BINDTODEVICE).
//!
//! The socket is opened with protocol 0, so it never receives: it only sends. Frames go out
//! with `sendmmsg` through the same [`SendBatch`](super::SendBatch) the UDP sender uses (a bound
//! packet socket needs no address per message).
//!
//! A TPACKET_V2 TX ring ([`PacketTxRing`]) was measured against it and not kept: the same
//! prebuilt frame sent flat out over a veth pair from one pinned core (the peer dropping it in
//! nftables prerouting), medians of 3 on a loaded 2-core host, took 1.38 us of CPU per frame
//! with `sendmmsg` (batches of 64) against 1.66 us with the ring (flushes of 64) at 1080 B, and
//! 1.32 us against 1.59 us at 64 B (`cargo run --release --example tx_ring_vs_sendmmsg`, as root). A blocking
//! ring flush waits for every frame's completion; the copy into the skb is the same either
//! way.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::cvt;

/// Hardware type of an Ethernet interface (ARPHRD_ETHER).
pub const HW_ETHER: u16 = libc::ARPHRD_ETHER;
/// Hardware type of the loopback interface (ARPHRD_LOOPBACK): it takes Ethernet frames with
/// all-zero addresses.
pub const HW_LOOPBACK: u16 = libc::ARPHRD_LOOPBACK;

fn c_name(name: &str) -> io::Result<CString> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "interface names are 1..15 bytes"));
    }
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name holds a NUL byte"))
}

/// The index of interface `name` (ENODEV when there is none).
pub fn if_index(name: &str) -> io::Result<u32> {
    let c = c_name(name)?;
    // SAFETY: `c` is a NUL-terminated string alive for the call; the function only reads it.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

/// An `ifreq` naming `name`, for the SIOCGIF* requests.
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    let c = c_name(name)?;
    // SAFETY: ifreq is plain old data for which all-zero is valid.
    let mut r: libc::ifreq = unsafe { zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(c.as_bytes()) {
        *d = *s as libc::c_char;
    }
    Ok(r)
}

/// A throwaway datagram socket to carry interface ioctls.
fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before it is wrapped.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The hardware address of interface `name` and its type ([`HW_ETHER`], [`HW_LOOPBACK`], ...).
pub fn if_hwaddr(name: &str) -> io::Result<([u8; 6], u16)> {
    let s = ioctl_socket()?;
    let mut r = ifreq(name)?;
    // SAFETY: `r` is a valid ifreq with the name set; SIOCGIFHWADDR writes a sockaddr into its
    // union, which is large enough.
    cvt(unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFHWADDR, &mut r) })?;
    // SAFETY: after SIOCGIFHWADDR the union holds `ifru_hwaddr`.
    let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok((mac, sa.sa_family))
}

/// The MTU of interface `name`: the largest IP packet it sends.
pub fn if_mtu(name: &str) -> io::Result<u32> {
    let s = ioctl_socket()?;
    let mut r = ifreq(name)?;
    // SAFETY: `r` is a valid ifreq with the name set; SIOCGIFMTU writes an int into its union.
    cvt(unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFMTU, &mut r) })?;
    // SAFETY: after SIOCGIFMTU the union holds `ifru_mtu`.
    Ok(unsafe { r.ifr_ifru.ifru_mtu } as u32)
}

/// Tie socket `fd` to interface `name` (SO_BINDTODEVICE): its route lookups then only use
/// that interface, so the source address it picks is one the interface has.
pub fn bind_to_device(fd: RawFd, name: &str) -> io::Result<()> {
    let c = c_name(name)?;
    let b = c.as_bytes_with_nul();
    // SAFETY: `b` is valid for its length for the duration of the call.
    let ret = unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_BINDTODEVICE, b.as_ptr().cast(), b.len() as libc::socklen_t)
    };
    cvt(ret).map(|_| ())
}

/// A send-only AF_PACKET socket bound to one interface: what it is given are whole frames
/// (Ethernet header first), handed to the driver without the qdisc.
pub struct PacketTx {
    fd: OwnedFd,
    qdisc_bypass: bool,
}

impl PacketTx {
    /// Open and bind to interface index `ifindex`. EPERM/EACCES means no CAP_NET_RAW.
    pub fn open(ifindex: u32) -> io::Result<PacketTx> {
        // Protocol 0: the socket receives nothing, it only sends.
        // SAFETY: plain socket(2) call; the result is checked before it is wrapped.
        let raw = cvt(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: `raw` was just returned by socket(2) and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let one: libc::c_int = 1;
        // SAFETY: `one` lives on the stack for the call and its exact size is passed.
        let bypass = unsafe {
            libc::setsockopt(
                raw,
                libc::SOL_PACKET,
                libc::PACKET_QDISC_BYPASS,
                (&one as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        } == 0;
        // A large send buffer, so a burst of frames never waits for the driver.
        if super::set_sndbuf(raw, 4 << 20, true).is_err() {
            let _ = super::set_sndbuf(raw, 4 << 20, false);
        }
        // SAFETY: sockaddr_ll is plain old data for which all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll on the stack and its exact size is passed.
        cvt(unsafe {
            libc::bind(
                raw,
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(PacketTx { fd, qdisc_bypass: bypass })
    }

    /// Whether the kernel took PACKET_QDISC_BYPASS (frames go straight to the driver).
    pub fn qdisc_bypass(&self) -> bool {
        self.qdisc_bypass
    }
}

impl AsRawFd for PacketTx {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A TPACKET_V2 transmit ring on a [`PacketTx`] socket: frames are written into shared
/// memory and one `send` hands the kernel all that are marked. Kept as the measured
/// alternative to `sendmmsg` (see the module docs); not used by the sender.
pub struct PacketTxRing {
    tx: PacketTx,
    map: *mut u8,
    map_len: usize,
    frame_size: usize,
    frames: usize,
    next: usize,
}

/// `struct tpacket_req` (linux/if_packet.h).
#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const TPACKET_V2: libc::c_int = 1;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
/// Where a TPACKET_V2 transmit frame's data starts: TPACKET2_HDRLEN - sizeof(sockaddr_ll). A
/// ring's frame size must hold it and the frame (the measurement example sizes its ring so).
pub const TX_DATA_OFFSET: usize = 32;

// SAFETY: the mapping is owned by the ring and only touched through `&mut self`.
unsafe impl Send for PacketTxRing {}

impl PacketTxRing {
    /// A ring of `frames` slots of `frame_size` bytes (a power of two >= 64) on interface
    /// `ifindex`.
    pub fn open(ifindex: u32, frame_size: usize, frames: usize) -> io::Result<PacketTxRing> {
        let tx = PacketTx::open(ifindex)?;
        let fd = tx.as_raw_fd();
        let v: libc::c_int = TPACKET_V2;
        // SAFETY: `v` lives on the stack for the call and its exact size is passed.
        cvt(unsafe { libc::setsockopt(fd, libc::SOL_PACKET, PACKET_VERSION, (&v as *const libc::c_int).cast(), 4) })?;
        let block_size = 1usize << 22;
        let per_block = block_size / frame_size;
        let blocks = frames.div_ceil(per_block);
        let req = TpacketReq {
            block_size: block_size as u32,
            block_nr: blocks as u32,
            frame_size: frame_size as u32,
            frame_nr: (blocks * per_block) as u32,
        };
        // SAFETY: `req` lives on the stack for the call and its exact size is passed.
        cvt(unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                PACKET_TX_RING,
                (&req as *const TpacketReq).cast(),
                size_of::<TpacketReq>() as libc::socklen_t,
            )
        })?;
        let map_len = blocks * block_size;
        // SAFETY: maps the ring the kernel just allocated for this socket, shared, at a
        // kernel-chosen address; the result is checked against MAP_FAILED.
        let map = unsafe {
            libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(PacketTxRing { tx, map: map.cast(), map_len, frame_size, frames: blocks * per_block, next: 0 })
    }

    /// Copy `frame` into the next free slot and mark it for sending; false when the ring is full
    /// (call [`flush`](Self::flush)).
    pub fn push(&mut self, frame: &[u8]) -> bool {
        assert!(frame.len() + TX_DATA_OFFSET <= self.frame_size);
        // SAFETY: slot `next` < frames lies inside the mapping (frames * frame_size <= map_len,
        // and a block holds a whole number of frames); its header is a tpacket2_hdr whose first
        // two u32 are tp_status and tp_len, shared with the kernel, hence the volatile accesses.
        unsafe {
            let slot = self.map.add(self.next * self.frame_size);
            let status = slot.cast::<u32>();
            if std::ptr::read_volatile(status) != TP_STATUS_AVAILABLE {
                return false;
            }
            std::ptr::copy_nonoverlapping(frame.as_ptr(), slot.add(TX_DATA_OFFSET), frame.len());
            std::ptr::write_volatile(slot.add(4).cast::<u32>(), frame.len() as u32);
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            std::ptr::write_volatile(status, TP_STATUS_SEND_REQUEST);
        }
        self.next = (self.next + 1) % self.frames;
        true
    }

    /// Hand every marked frame to the kernel and wait until they have left the ring.
    pub fn flush(&self) -> io::Result<()> {
        // SAFETY: a zero-length send with no buffer on a socket with a TX ring only tells the
        // kernel to walk the ring.
        let r = unsafe { libc::send(self.tx.as_raw_fd(), std::ptr::null(), 0, 0) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

impl Drop for PacketTxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`, which nothing else refers to.
        unsafe {
            libc::munmap(self.map.cast(), self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_facts() {
        let i = if_index("lo").unwrap();
        assert!(i >= 1);
        let (mac, ty) = if_hwaddr("lo").unwrap();
        assert_eq!((mac, ty), ([0; 6], HW_LOOPBACK));
        assert!(if_mtu("lo").unwrap() >= 1500);
        assert!(if_index("no-such-if0").is_err());
        assert!(if_index("a-name-longer-than-fifteen").is_err());
    }
}
