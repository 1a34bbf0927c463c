//! The AF_XDP backend (`--backend xdp`): an XDP program redirects the listen address's
//! IPv4/UDP datagrams on the interface holding that address to AF_XDP sockets (copy mode,
//! one per receive queue), whose RX rings the capture thread reads without a system call while frames are
//! there. The UDP stack, the socket queue and the per-datagram skb free are skipped; so are
//! netfilter and the kernel's UDP checksum check.
//!
//! Set-up (map, program, UMEM, socket, BPF link) happens in [`Backend::open`] on the main
//! thread so that a missing privilege or an interface already running an XDP program is
//! refused before the capture starts. The program is attached through a BPF link: it is
//! detached when the link's descriptor closes, so a receiver that dies leaves nothing on the
//! interface, and an interface that already runs some other XDP program is refused, never
//! taken over.

use super::{Backend, Bound, Member, RecvConfig};
use crate::error::{Error, Result};
use crate::sys::xdp::{interface_with, XdpStats, XskConfig, XskError, XskReader, XskSocket, UDP4_HEADERS, XSK_FRAME};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

/// Most receive queues captured (one AF_XDP socket and UMEM each).
const MAX_QUEUES: usize = 64;
/// How long a receive call waits for a frame when the ring is empty, ms.
const WAIT_MS: i32 = 100;
/// Receive calls with data between two reads of the socket's drop counters (a system call;
/// they are also read whenever the ring runs empty).
const STATS_EVERY: u32 = 64;

/// An AF_XDP socket and its attached program, owned for the whole run.
pub struct XdpEndpoint {
    sock: XskSocket,
}

/// The receive state: the RX ring's reader on the capture thread.
pub struct XdpBackend {
    reader: Option<XskReader>,
    wait_ms: i32,
    batch: usize,
    drops: Option<u64>,
    since_stats: u32,
    truncated: u64,
}

/// A frame's UDP payload, its source, and whether the frame was cut short of the UDP length.
#[derive(Debug, PartialEq, Eq)]
pub struct Udp4<'a> {
    /// The UDP payload (as much of it as the frame holds).
    pub payload: &'a [u8],
    /// Source address and port.
    pub src: SocketAddrV4,
    /// The frame held less than the UDP header's length says.
    pub truncated: bool,
}

/// Parse an Ethernet/IPv4 (no options)/UDP frame as the XDP program passes them; `None` for
/// anything else. Ethernet padding after a short datagram is cut off by the UDP length.
pub fn parse_udp4(frame: &[u8]) -> Option<Udp4<'_>> {
    if frame.len() < UDP4_HEADERS || frame[12..14] != [0x08, 0x00] || frame[14] != 0x45 || frame[23] != 17 {
        return None;
    }
    let be16 = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]) as usize;
    let udp_len = be16(38);
    if udp_len < 8 {
        return None;
    }
    let want = udp_len - 8;
    let have = frame.len() - UDP4_HEADERS;
    let src = SocketAddrV4::new(Ipv4Addr::new(frame[26], frame[27], frame[28], frame[29]), be16(34) as u16);
    Some(Udp4 { payload: &frame[UDP4_HEADERS..UDP4_HEADERS + want.min(have)], src, truncated: want > have })
}

/// Why the listen address cannot be captured with XDP, in the user's terms (`None`: it can).
pub fn refuse_listen(listen: SocketAddr) -> Option<String> {
    let alt = "or use --backend recvmmsg";
    match listen.ip() {
        IpAddr::V6(a) if a.is_unspecified() => Some(format!(
            "the xdp backend captures IPv4 on one interface: listen on that interface's IPv4 address (e.g. 198.18.0.2:{}), not a bare port, which names every address of both families",
            listen.port()
        )),
        // The XDP program and frame parser take IPv4/UDP only (IPv6 would need a second
        // program path and header walk): refused in one line rather than capturing nothing.
        IpAddr::V6(a) => Some(format!(
            "the xdp backend receives IPv4 only: {a} is IPv6; use --backend packet or recvmmsg (both take IPv6), or an IPv4 address"
        )),
        IpAddr::V4(a) if a.is_multicast() => {
            Some(format!("the xdp backend does not join multicast groups yet ({a}): {alt}"))
        }
        IpAddr::V4(a) if a.is_unspecified() => Some(format!(
            "the xdp backend captures on one interface: listen on that interface's address (e.g. 198.18.0.2:{}), not {a}, which names none",
            listen.port()
        )),
        IpAddr::V4(a) if a.is_loopback() => Some(format!(
            "XDP needs a real interface (a NIC or a veth), not loopback ({a}): listen on such an interface's address, {alt}"
        )),
        IpAddr::V4(_) if listen.port() == 0 => Some(format!(
            "the xdp backend needs a fixed port (no socket is bound, so none is chosen for you): give one, e.g. {}:7148",
            listen.ip()
        )),
        IpAddr::V4(_) => None,
    }
}

/// UMEM frames a queue for a requested receive buffer: twice as many frames as a socket
/// buffer of that size holds 4 KiB pages (so the RX rings together have as many slots),
/// shared among the queues, within sane bounds.
fn frames_for(rcvbuf: usize, queues: usize) -> u32 {
    ((rcvbuf / XSK_FRAME).saturating_mul(2) / queues.max(1)).next_power_of_two().clamp(2048, 1 << 18) as u32
}

/// Explain a failed set-up step.
fn explain(e: XskError, iface: &str) -> Error {
    let alt = "or use --backend recvmmsg";
    match e.err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => Error::permission(format!(
            "the xdp backend needs CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW ({} was refused: {}): run as root, {alt}",
            e.step, e.err
        )),
        Some(libc::EBUSY) | Some(libc::EEXIST) if e.step.contains("LINK_CREATE") => Error::busy(format!(
            "{iface} already has an XDP program attached, and wirespeed does not replace what it did not create: see `ip link show {iface}`, detach it if it is yours, {alt}"
        )),
        Some(libc::EBUSY) if e.step.contains("bind") => Error::busy(format!(
            "a receive queue of {iface} is already taken by another AF_XDP socket: stop the other receiver, {alt}"
        )),
        _ => Error::failed(format!("cannot set up AF_XDP on {iface}: {} failed: {} ({alt})", e.step, e.err)),
    }
}

/// Receive queues of an interface, from sysfs (1 if it cannot be told).
fn rx_queues(iface: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| d.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count())
        .unwrap_or(1)
        .clamp(1, MAX_QUEUES)
}

impl XdpBackend {
    fn refresh_drops(&mut self) {
        if let Some(r) = &self.reader {
            if let Ok(s) = r.statistics() {
                self.drops = Some(drops_of(&s));
            }
        }
    }
}

/// What the ledger's "kernel drops" means for an AF_XDP socket: frames the socket could not
/// take (too big for a UMEM frame, or the RX ring full).
fn drops_of(s: &XdpStats) -> u64 {
    s.rx_dropped + s.rx_ring_full
}

impl Backend for XdpBackend {
    const NAME: &'static str = "xdp";
    type Endpoint = XdpEndpoint;

    fn open(cfg: &RecvConfig, member: Member) -> Result<(XdpEndpoint, Bound)> {
        if let Some(why) = refuse_listen(cfg.listen) {
            return Err(Error::invalid(why));
        }
        if member.count > 1 {
            return Err(Error::invalid(
                "the xdp backend captures with one thread for now: drop --threads, or use --backend recvmmsg",
            ));
        }
        let IpAddr::V4(addr) = cfg.listen.ip() else { unreachable!("refuse_listen passes IPv4 only") };
        let iface = interface_with(addr)
            .map_err(|e| Error::failed(format!("cannot list this host's interfaces: {e}")))?
            .ok_or_else(|| {
                Error::invalid(format!(
                    "address {addr} is not assigned to any interface here: give the address of the interface to capture on (`ip -br addr`)"
                ))
            })?;
        if iface.loopback {
            return Err(Error::invalid(format!(
                "XDP needs a real interface (a NIC or a veth), not the loopback {}: listen on such an interface's address, or use --backend recvmmsg",
                iface.name
            )));
        }
        let queues = rx_queues(&iface.name);
        let xc = XskConfig {
            ifindex: iface.index,
            queues: queues as u32,
            addr,
            port: cfg.listen.port(),
            frames: frames_for(cfg.rcvbuf, queues),
            native: false,
        };
        let sock = XskSocket::open(&xc).map_err(|e| explain(e, &iface.name))?;
        let mut notes = vec![
            format!(
                "AF_XDP copy mode on {} ({} receive queue(s), one socket each), generic XDP, {} frames of {} B a queue: datagrams bypass netfilter and the kernel's UDP checksum check",
                iface.name,
                sock.queues(),
                sock.frames(),
                XSK_FRAME
            ),
            format!(
                "generic XDP drops frames over {} B (jumbo frames, or a whole GSO train from a veth peer with tx-udp-segmentation on: `ethtool -K PEER tx-udp-segmentation off` at the sender), counted as kernel drops; datagrams over the MTU arrive as IP fragments, which are passed to the stack, not captured",
                XSK_FRAME
            ),
        ];
        if queues > sock.queues() {
            notes.push(format!(
                "{} has {queues} receive queues and only the first {} are captured: use fewer queues (`ethtool -L {} combined {}`)",
                iface.name,
                sock.queues(),
                iface.name,
                sock.queues()
            ));
        }
        let bound = Bound {
            local_addr: Some(cfg.listen),
            rcvbuf_granted: 2 * sock.rx_slots() as usize * XSK_FRAME,
            gro: false,
            udp_inode: None,
            notes,
        };
        Ok((XdpEndpoint { sock }, bound))
    }

    fn start(endpoint: &XdpEndpoint, cfg: &RecvConfig) -> Self {
        let reader = endpoint.sock.reader();
        let mut b = XdpBackend {
            reader,
            wait_ms: if cfg.busy_poll { 0 } else { WAIT_MS },
            batch: cfg.batch,
            drops: Some(0),
            since_stats: 0,
            truncated: 0,
        };
        b.refresh_drops();
        b
    }

    #[inline]
    fn recv<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, mut f: F) -> io::Result<usize> {
        let Some(reader) = self.reader.as_mut() else {
            return Err(io::Error::other("this AF_XDP socket is already read by another capture thread"));
        };
        let truncated = &mut self.truncated;
        let n = reader.recv(self.batch, self.wait_ms, |frame| {
            if let Some(d) = parse_udp4(frame) {
                if d.truncated {
                    *truncated += 1;
                }
                f(d.payload, Some(SocketAddr::V4(d.src)));
            }
        })?;
        self.since_stats += 1;
        if n == 0 || self.since_stats >= STATS_EVERY {
            self.since_stats = 0;
            self.refresh_drops();
        }
        Ok(n)
    }

    fn kernel_drops(&self) -> Option<u64> {
        self.drops
    }

    fn truncated(&self) -> u64 {
        self.truncated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: &[u8], src: [u8; 4], sport: u16, dport: u16, pad: usize) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        let tl = (20 + 8 + payload.len()) as u16;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&tl.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&[198, 18, 0, 2]);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f.extend(std::iter::repeat(0xee).take(pad));
        f
    }

    #[test]
    fn parses_payload_and_source_and_cuts_ethernet_padding() {
        let f = frame(b"hello", [198, 18, 0, 1], 40000, 7148, 13);
        let d = parse_udp4(&f).unwrap();
        assert_eq!(d.payload, b"hello");
        assert_eq!(d.src, "198.18.0.1:40000".parse().unwrap());
        assert!(!d.truncated);
    }

    #[test]
    fn a_frame_shorter_than_the_udp_length_is_truncated() {
        let mut f = frame(&[7u8; 100], [10, 0, 0, 1], 1, 2, 0);
        f.truncate(UDP4_HEADERS + 60);
        let d = parse_udp4(&f).unwrap();
        assert_eq!(d.payload.len(), 60);
        assert!(d.truncated);
    }

    #[test]
    fn other_frames_are_not_udp4() {
        let good = frame(b"x", [1, 2, 3, 4], 1, 2, 0);
        assert!(parse_udp4(&good[..41]).is_none());
        let mut v6 = good.clone();
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert!(parse_udp4(&v6).is_none());
        let mut opts = good.clone();
        opts[14] = 0x46;
        assert!(parse_udp4(&opts).is_none());
        let mut tcp = good.clone();
        tcp[23] = 6;
        assert!(parse_udp4(&tcp).is_none());
        let mut short = good;
        short[38..40].copy_from_slice(&7u16.to_be_bytes());
        assert!(parse_udp4(&short).is_none());
    }

    #[test]
    fn listen_addresses_without_an_interface_are_refused() {
        let r = |s: &str| refuse_listen(s.parse().unwrap());
        assert!(r("127.0.0.1:7148").unwrap().contains("XDP needs a real interface"));
        assert!(r("0.0.0.0:7148").unwrap().contains("interface's address"));
        assert!(r("239.1.2.3:7148").unwrap().contains("multicast"));
        assert!(r("[2001:2::1]:7148").unwrap().contains("IPv4 only"));
        assert!(r("198.18.0.2:0").unwrap().contains("fixed port"));
        assert!(r("198.18.0.2:7148").is_none());
    }

    #[test]
    fn frames_follow_the_receive_buffer_within_bounds() {
        assert_eq!(frames_for(32 << 20, 1), 16384);
        assert_eq!(frames_for(32 << 20, 2), 8192);
        assert_eq!(frames_for(0, 1), 2048);
        assert_eq!(frames_for(1 << 40, 1), 1 << 18);
    }
}
