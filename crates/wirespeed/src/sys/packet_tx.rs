//! Sending whole Ethernet frames: an AF_PACKET SOCK_RAW socket bound to one interface, with the
//! qdisc bypassed (PACKET_QDISC_BYPASS), plus the interface facts a frame builder needs (index,
//! hardware address and type, MTU) and the one socket option the source-address probe needs
//! (SO_BINDTODEVICE).
//!
//! The socket is opened with protocol 0, so it never receives: it only sends. Frames go out
//! with `sendmmsg` through the same [`SendBatch`](super::SendBatch) the UDP sender uses (a bound
//! packet socket needs no address per message). A TPACKET TX ring was not kept: see the send
//! module's notes for the numbers.

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
