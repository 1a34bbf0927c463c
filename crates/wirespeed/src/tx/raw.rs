//! The raw-socket transport of `send --raw IFACE`: the sender builds each Ethernet/IPv4/UDP
//! (or IPv6/UDP) frame itself and hands whole frames to an AF_PACKET socket bound to the
//! interface, past the qdisc, with `sendmmsg`. No socket lookup, no route lookup, no neighbour
//! lookup and no UDP stack per datagram: what remains per datagram is writing the payload and
//! its UDP checksum.
//!
//! What a frame needs is settled once before the run ([`prepare`]): the interface's index,
//! hardware address and MTU, the source address (the interface's, or `--bind`), the next hop's
//! hardware address (given with `--dst-mac`, read from the neighbour table, or resolved by
//! sending one datagram through an ordinary socket and reading the table again), and one source
//! port per stream, held by a bound UDP socket for the whole run so no other program gets it
//! (the same ports a UDP sender's per-stream sockets would have). Each stream then has a
//! [`FrameTemplate`] per payload length: the headers with the lengths and the IPv4 header
//! checksum already in place, and the constant part of the UDP checksum.
//!
//! The loopback interface has no hardware address, but AF_PACKET on `lo` takes Ethernet frames
//! whose addresses are all zero: `--raw lo` works, which lets the tests run without namespaces.

use super::SendConfig;
use crate::error::{Error, Result};
use crate::sys::packet_tx::{self, PacketTx, HW_ETHER, HW_LOOPBACK};
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// Ethernet header bytes (no VLAN tag).
pub const ETH_HEADER: usize = 14;
const IPV4_HEADER: usize = 20;
const IPV6_HEADER: usize = 40;
const UDP_HEADER: usize = 8;
/// The longest header a frame carries (Ethernet + IPv6 + UDP).
pub const MAX_HEADER: usize = ETH_HEADER + IPV6_HEADER + UDP_HEADER;

/// An Ethernet hardware address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// Read `aa:bb:cc:dd:ee:ff` (or with `-`).
    pub fn parse(s: &str) -> std::result::Result<Mac, String> {
        let parts: Vec<&str> = s.split([':', '-']).collect();
        let bad = || format!("'{s}' is not a MAC address: write six hex bytes, e.g. 02:00:00:00:00:01");
        if parts.len() != 6 {
            return Err(bad());
        }
        let mut m = [0u8; 6];
        for (d, p) in m.iter_mut().zip(&parts) {
            if p.is_empty() || p.len() > 2 {
                return Err(bad());
            }
            *d = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        Ok(Mac(m))
    }

    /// The Ethernet group address a multicast IP destination maps to (RFC 1112, RFC 2464).
    pub fn multicast(ip: IpAddr) -> Mac {
        match ip {
            IpAddr::V4(a) => {
                let o = a.octets();
                Mac([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]])
            }
            IpAddr::V6(a) => {
                let o = a.octets();
                Mac([0x33, 0x33, o[12], o[13], o[14], o[15]])
            }
        }
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
    }
}

/// One's-complement sum of `data` as big-endian 16-bit words (an odd last byte padded with
/// zero), not yet folded. Summing 32-bit words and folding later gives the same result (2^16 is
/// 1 modulo 2^16-1) and lets the compiler vectorise the loop.
#[inline]
pub fn sum16(data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(4);
    let mut s: u64 = 0;
    for c in &mut chunks {
        s += u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as u64;
    }
    let r = chunks.remainder();
    let mut tail = [0u8; 4];
    tail[..r.len()].copy_from_slice(r);
    s + u32::from_be_bytes(tail) as u64
}

/// Fold a sum from [`sum16`] to 16 bits and complement it: the Internet checksum (RFC 1071).
#[inline]
pub fn checksum(mut s: u64) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The addresses and ports every frame of one stream carries.
#[derive(Clone, Copy, Debug)]
pub struct FrameAddrs {
    /// Source hardware address (the interface's; zero on loopback).
    pub src_mac: Mac,
    /// Next hop's hardware address.
    pub dst_mac: Mac,
    /// Source address and port (the stream's).
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
}

/// The headers of frames with one payload length, ready to copy in front of each payload:
/// only the UDP checksum differs from frame to frame.
#[derive(Clone, Debug)]
pub struct FrameTemplate {
    hdr: [u8; MAX_HEADER],
    hdr_len: usize,
    payload_len: usize,
    /// Pseudo-header and UDP header, summed once.
    base_sum: u64,
}

impl FrameTemplate {
    /// Headers for `payload_len`-byte payloads. Source and destination must be of one family.
    pub fn new(a: &FrameAddrs, payload_len: usize) -> FrameTemplate {
        let mut hdr = [0u8; MAX_HEADER];
        hdr[0..6].copy_from_slice(&a.dst_mac.0);
        hdr[6..12].copy_from_slice(&a.src_mac.0);
        let udp_len = (UDP_HEADER + payload_len) as u16;
        let (ip_len, mut base_sum) = match (a.src.ip(), a.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                hdr[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                let ip = &mut hdr[ETH_HEADER..ETH_HEADER + IPV4_HEADER];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&((IPV4_HEADER as u16) + udp_len).to_be_bytes());
                // Identification 0 with Don't Fragment: an atomic datagram (RFC 6864).
                ip[6] = 0x40;
                ip[8] = a.ttl;
                ip[9] = libc::IPPROTO_UDP as u8;
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
                let c = checksum(sum16(ip));
                ip[10..12].copy_from_slice(&c.to_be_bytes());
                (IPV4_HEADER, sum16(&s.octets()) + sum16(&d.octets()))
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                hdr[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
                let ip = &mut hdr[ETH_HEADER..ETH_HEADER + IPV6_HEADER];
                ip[0] = 0x60;
                ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
                ip[6] = libc::IPPROTO_UDP as u8;
                ip[7] = a.ttl;
                ip[8..24].copy_from_slice(&s.octets());
                ip[24..40].copy_from_slice(&d.octets());
                (IPV6_HEADER, sum16(&s.octets()) + sum16(&d.octets()))
            }
            _ => panic!("frame source and destination must be of one address family"),
        };
        let u = ETH_HEADER + ip_len;
        hdr[u..u + 2].copy_from_slice(&a.src.port().to_be_bytes());
        hdr[u + 2..u + 4].copy_from_slice(&a.dst.port().to_be_bytes());
        hdr[u + 4..u + 6].copy_from_slice(&udp_len.to_be_bytes());
        // Pseudo-header: addresses (above), protocol, UDP length; then the UDP header itself
        // (checksum field zero), whose length word counts a second time.
        base_sum += libc::IPPROTO_UDP as u64 + udp_len as u64 + sum16(&hdr[u..u + UDP_HEADER]);
        FrameTemplate { hdr, hdr_len: u + UDP_HEADER, payload_len, base_sum }
    }

    /// Bytes in front of the payload.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.hdr_len
    }

    /// Whole frame length.
    #[inline]
    pub fn frame_len(&self) -> usize {
        self.hdr_len + self.payload_len
    }

    /// Complete the frame in `frame[..frame_len()]` whose payload is already at
    /// `frame[header_len()..]`: the headers go in front, with the UDP checksum of this payload.
    #[inline]
    pub fn finish(&self, frame: &mut [u8]) {
        let (h, payload) = frame[..self.frame_len()].split_at_mut(self.hdr_len);
        h.copy_from_slice(&self.hdr[..self.hdr_len]);
        let c = checksum(self.base_sum + sum16(payload));
        // A computed 0 is sent as all ones: 0 means "no checksum" (IPv4) or is invalid (IPv6).
        let c = if c == 0 { 0xffff } else { c };
        h[self.hdr_len - 2..].copy_from_slice(&c.to_be_bytes());
    }

    /// Build a whole frame of `payload` into `out` (which must hold it); returns its length.
    pub fn build(&self, payload: &[u8], out: &mut [u8]) -> usize {
        debug_assert_eq!(payload.len(), self.payload_len);
        out[self.hdr_len..self.frame_len()].copy_from_slice(payload);
        self.finish(out);
        self.frame_len()
    }
}

/// What `--raw` settled before the run: where frames go and how they are addressed.
#[derive(Clone, Debug)]
pub struct RawTarget {
    /// Interface name.
    pub iface: String,
    /// Its index.
    pub ifindex: u32,
    /// Its MTU (largest IP packet).
    pub mtu: u32,
    /// Source hardware address.
    pub src_mac: Mac,
    /// Next hop's hardware address.
    pub dst_mac: Mac,
    /// How the destination hardware address was found (for the report).
    pub dst_mac_from: &'static str,
    /// Source IP address.
    pub src_ip: IpAddr,
}

/// One stream's raw transport: its packet socket, the socket that holds its source port, and
/// the frame templates for data and for the end-of-stream message.
pub struct RawStream {
    tx: PacketTx,
    port_holder: UdpSocket,
    /// Headers of the data frames.
    pub data: FrameTemplate,
    addrs: FrameAddrs,
}

impl RawStream {
    /// The packet socket, for `sendmmsg`.
    pub fn fd(&self) -> RawFd {
        self.tx.as_raw_fd()
    }

    /// Whether the kernel took PACKET_QDISC_BYPASS for this stream's socket.
    pub fn qdisc_bypass(&self) -> bool {
        self.tx.qdisc_bypass()
    }

    /// The stream's source port.
    pub fn local_port(&self) -> u16 {
        self.port_holder.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// Send one datagram of any length as one frame (the end-of-stream message).
    pub fn send_one(&self, payload: &[u8]) -> io::Result<usize> {
        let t = FrameTemplate::new(&self.addrs, payload.len());
        let mut frame = vec![0u8; t.frame_len()];
        t.build(payload, &mut frame);
        crate::sys::send_one(self.fd(), &frame)
    }
}

fn no_cap() -> Error {
    Error::permission(
        "send --raw needs CAP_NET_RAW to open an AF_PACKET socket: run it as root, or give the binary the capability (`setcap cap_net_raw+ep $(command -v wirespeed)`)",
    )
}

fn open_error(e: io::Error, iface: &str) -> Error {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => no_cap(),
        _ => Error::io(format!("cannot open a raw socket on {iface}: {e}")),
    }
}

/// IP packet bytes of a `payload`-byte datagram to `dest`.
pub fn ip_packet_len(dest: &SocketAddr, payload: usize) -> usize {
    payload + UDP_HEADER + if dest.is_ipv4() { IPV4_HEADER } else { IPV6_HEADER }
}

/// Check the interface and find every address a frame needs, before any stream starts; then
/// open one packet socket and one port-holding socket per stream.
pub fn prepare(
    cfg: &SendConfig,
    iface: &str,
    dst_mac: Option<Mac>,
    payload: usize,
) -> Result<(RawTarget, Vec<RawStream>)> {
    let ifindex = packet_tx::if_index(iface)
        .map_err(|_| Error::not_found(format!("there is no interface named '{iface}' here: `ip link` lists them")))?;
    // The privilege check first, so that an unprivileged user hears about it and nothing else.
    let first = PacketTx::open(ifindex).map_err(|e| open_error(e, iface))?;
    let (mac, hw) = packet_tx::if_hwaddr(iface)
        .map_err(|e| Error::io(format!("cannot read the hardware address of {iface}: {e}")))?;
    let loopback = match hw {
        HW_LOOPBACK => true,
        HW_ETHER => false,
        t => {
            return Err(Error::invalid(format!(
                "{iface} is not an Ethernet interface (hardware type {t}): --raw builds Ethernet frames; send without --raw"
            )))
        }
    };
    if loopback {
        loopback_accepts(cfg.dest.ip(), iface)?;
    }
    let mtu = packet_tx::if_mtu(iface).map_err(|e| Error::io(format!("cannot read the MTU of {iface}: {e}")))?;
    let ip_len = ip_packet_len(&cfg.dest, payload);
    if ip_len > mtu as usize {
        let most = payload - (ip_len - mtu as usize).min(payload);
        return Err(Error::invalid(format!(
            "a {payload}-byte payload makes {ip_len}-byte IP packets, above the MTU of {iface} ({mtu}): use --size {most} or less, or raise the MTU (`ip link set {iface} mtu 9000`)"
        )));
    }
    if let Some(b) = cfg.bind {
        if b.is_ipv4() != cfg.dest.is_ipv4() {
            return Err(Error::param("bind", format!("{b} and the target {} are not of one address family", cfg.dest)));
        }
    }
    let mut t = RawTarget {
        iface: iface.to_string(),
        ifindex,
        mtu,
        src_mac: Mac(mac),
        dst_mac: Mac::default(),
        dst_mac_from: "",
        src_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    t.src_ip = match cfg.bind {
        Some(ip) => ip,
        None => source_for(cfg.dest, iface)?,
    };
    (t.dst_mac, t.dst_mac_from) = match dst_mac {
        Some(m) => (m, "given with --dst-mac"),
        None if loopback => (Mac::default(), "none on loopback"),
        None if cfg.dest.ip().is_multicast() => (Mac::multicast(cfg.dest.ip()), "the multicast group's"),
        None => (resolve_mac(cfg.dest.ip(), iface)?, "the neighbour table"),
    };
    let mut first = Some(first);
    let mut streams = Vec::with_capacity(cfg.streams);
    for _ in 0..cfg.streams {
        let tx = match first.take() {
            Some(s) => s,
            None => PacketTx::open(t.ifindex).map_err(|e| open_error(e, iface))?,
        };
        let local = SocketAddr::new(t.src_ip, 0);
        let port_holder = UdpSocket::bind(local).map_err(|e| crate::addr::bind_error(local, e))?;
        let src = port_holder.local_addr().map_err(|e| Error::io(format!("cannot read a bound port: {e}")))?;
        let ttl = if cfg.dest.ip().is_multicast() { cfg.ttl.min(255) as u8 } else { 64 };
        let addrs = FrameAddrs { src_mac: t.src_mac, dst_mac: t.dst_mac, src, dst: cfg.dest, ttl };
        streams.push(RawStream { tx, port_holder, data: FrameTemplate::new(&addrs, payload), addrs });
    }
    Ok((t, streams))
}

/// IPv4 frames injected into the loopback interface carry a local source address, which the
/// kernel drops as martian (silently) unless `accept_local` is on, and a 127/8 destination
/// is dropped unless `route_localnet` is on: refuse up front rather than send into nothing.
fn loopback_accepts(dest: IpAddr, iface: &str) -> Result<()> {
    let IpAddr::V4(d) = dest else { return Ok(()) };
    let on = |key: &str| {
        ["all", iface].iter().any(|c| {
            std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{c}/{key}")).is_ok_and(|v| v.trim() == "1")
        })
    };
    let mut need: Vec<String> = Vec::new();
    if !on("accept_local") {
        need.push(format!("net.ipv4.conf.{iface}.accept_local=1"));
    }
    if d.is_loopback() && !on("route_localnet") {
        need.push(format!("net.ipv4.conf.{iface}.route_localnet=1"));
    }
    if need.is_empty() {
        return Ok(());
    }
    Err(Error::failed(format!(
        "the kernel drops IPv4 frames sent into {iface} as martians unless `sysctl -w {}` (best in a network namespace of your own); or send to [::1], which needs neither",
        need.join(" ")
    )))
}

/// The source address the kernel would use towards `dest` through `iface`.
fn source_for(dest: SocketAddr, iface: &str) -> Result<IpAddr> {
    let any: SocketAddr =
        if dest.is_ipv4() { (Ipv4Addr::UNSPECIFIED, 0).into() } else { (Ipv6Addr::UNSPECIFIED, 0).into() };
    let s = UdpSocket::bind(any).map_err(|e| Error::io(format!("cannot open a probe socket: {e}")))?;
    packet_tx::bind_to_device(s.as_raw_fd(), iface)
        .map_err(|e| Error::failed(format!("cannot tie a probe socket to {iface}: {e}")))?;
    s.connect(dest).map_err(|_| {
        Error::failed(format!(
            "no route to {} through {iface}: check `ip route get {} oif {iface}`, or give the source with --bind",
            dest.ip(),
            dest.ip()
        ))
    })?;
    let ip = s.local_addr().map_err(|e| Error::io(format!("cannot read the probe's address: {e}")))?.ip();
    if ip.is_unspecified() {
        return Err(Error::failed(format!(
            "{iface} has no address to send to {} from: give one with --bind",
            dest.ip()
        )));
    }
    Ok(ip)
}

/// The hardware address of `ip`'s next hop on `iface`: from the neighbour table, or after one
/// datagram through an ordinary socket has made the kernel resolve it.
fn resolve_mac(ip: IpAddr, iface: &str) -> Result<Mac> {
    let hop = next_hop(ip, iface);
    if let Some(m) = lookup_neighbour(hop, iface) {
        return Ok(m);
    }
    // One empty datagram to the discard port makes the kernel resolve the next hop; the
    // receiver's own port is left alone, so its ledger never sees it.
    let any: SocketAddr =
        if ip.is_ipv4() { (Ipv4Addr::UNSPECIFIED, 0).into() } else { (Ipv6Addr::UNSPECIFIED, 0).into() };
    if let Ok(s) = UdpSocket::bind(any) {
        let _ = packet_tx::bind_to_device(s.as_raw_fd(), iface);
        let _ = s.send_to(&[], SocketAddr::new(ip, 9));
    }
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_millis(10));
        if let Some(m) = lookup_neighbour(hop, iface) {
            return Ok(m);
        }
    }
    Err(Error::failed(format!(
        "cannot find the hardware address of {hop} on {iface} (no answer to neighbour resolution): give it with --dst-mac, or `ping -c1 {hop}` first"
    )))
}

/// The gateway `ip` is reached through on `iface`, or `ip` itself when it is on the link.
fn next_hop(ip: IpAddr, iface: &str) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let table = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
            gateway_v4(&table, a, iface).map_or(ip, IpAddr::V4)
        }
        IpAddr::V6(a) => {
            let table = std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default();
            gateway_v6(&table, a, iface).map_or(ip, IpAddr::V6)
        }
    }
}

/// The gateway of the longest `/proc/net/route` prefix holding `ip` on `iface`, if that route
/// has one.
fn gateway_v4(table: &str, ip: Ipv4Addr, iface: &str) -> Option<Ipv4Addr> {
    let hex = |s: &str| u32::from_str_radix(s, 16).ok().map(|v| Ipv4Addr::from(v.to_le_bytes()));
    let mut best: Option<(u32, Ipv4Addr)> = None;
    for l in table.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 8 || f[0] != iface {
            continue;
        }
        let (Some(dst), Some(gw), Some(mask)) = (hex(f[1]), hex(f[2]), hex(f[7])) else { continue };
        let (m, d) = (u32::from(mask), u32::from(dst));
        if u32::from(ip) & m == d && best.map_or(true, |(bm, _)| m.count_ones() > bm.count_ones()) {
            best = Some((m, gw));
        }
    }
    best.map(|(_, gw)| gw).filter(|g| !g.is_unspecified())
}

/// The same for IPv6, from `/proc/net/ipv6_route`.
fn gateway_v6(table: &str, ip: Ipv6Addr, iface: &str) -> Option<Ipv6Addr> {
    let hex = |s: &str| u128::from_str_radix(s, 16).ok();
    let mut best: Option<(u32, Ipv6Addr)> = None;
    for l in table.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 10 || f[9] != iface {
            continue;
        }
        let (Some(dst), Some(plen), Some(gw)) = (hex(f[0]), u32::from_str_radix(f[1], 16).ok(), hex(f[4])) else {
            continue;
        };
        let mask = if plen == 0 { 0 } else { u128::MAX << (128 - plen.min(128)) };
        if u128::from(ip) & mask == dst && best.map_or(true, |(b, _)| plen > b) {
            best = Some((plen, Ipv6Addr::from(gw)));
        }
    }
    best.map(|(_, gw)| gw).filter(|g| !g.is_unspecified())
}

fn lookup_neighbour(ip: IpAddr, iface: &str) -> Option<Mac> {
    match ip {
        IpAddr::V4(a) => arp_entry(&std::fs::read_to_string("/proc/net/arp").ok()?, a, iface),
        IpAddr::V6(a) => {
            let out = std::process::Command::new("ip")
                .args(["-6", "neigh", "show", &a.to_string(), "dev", iface])
                .stdin(std::process::Stdio::null())
                .output()
                .ok()?;
            neigh_entry(&String::from_utf8_lossy(&out.stdout))
        }
    }
}

/// The complete entry for `ip` on `iface` in `/proc/net/arp`.
fn arp_entry(table: &str, ip: Ipv4Addr, iface: &str) -> Option<Mac> {
    let ip = ip.to_string();
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let complete = f.get(2).and_then(|x| u32::from_str_radix(x.trim_start_matches("0x"), 16).ok())? & 0x2 != 0;
        (f.len() >= 6 && f[0] == ip && f[5] == iface && complete).then(|| Mac::parse(f[3]).ok()).flatten()
    })
}

/// The usable `lladdr` of `ip -6 neigh show ADDR dev IFACE` output.
fn neigh_entry(out: &str) -> Option<Mac> {
    out.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let usable = !l.contains("FAILED") && !l.contains("INCOMPLETE");
        let i = f.iter().position(|w| *w == "lladdr")?;
        usable.then(|| f.get(i + 1).and_then(|m| Mac::parse(m).ok())).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bytewise RFC 1071 checksum, to check the word-wise one against.
    fn slow(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for c in data.chunks(2) {
            s += ((c[0] as u32) << 8) | c.get(1).map_or(0, |&b| b as u32);
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn ipv4_header_checksum_of_a_known_header() {
        // The worked example of the IPv4 header checksum (192.168.0.1 -> 192.168.0.199,
        // total length 0x73, DF, TTL 64, UDP): checksum b861.
        let h: [u8; 20] = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
            0x00, 0xc7,
        ];
        assert_eq!(checksum(sum16(&h)), 0xb861);
        let mut with = h;
        with[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(checksum(sum16(&with)), 0, "a correct header sums to all ones");
        // The template writes the same header for the same addresses and length.
        let a = FrameAddrs {
            src_mac: Mac([2, 0, 0, 0, 0, 1]),
            dst_mac: Mac([2, 0, 0, 0, 0, 2]),
            src: "192.168.0.1:1000".parse().unwrap(),
            dst: "192.168.0.199:2000".parse().unwrap(),
            ttl: 64,
        };
        let t = FrameTemplate::new(&a, 0x73 - 28);
        assert_eq!(&t.hdr[14..34], &with[..]);
        assert_eq!(&t.hdr[0..14], &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    }

    #[test]
    fn udp_checksum_of_a_known_datagram() {
        // 10.0.0.1:1234 -> 10.0.0.2:5678, payload "hello", worked by hand (RFC 768/1071):
        // pseudo-header 0a00+0001+0a00+0002+0011+000d = 0x1421, UDP header 04d2+162e+000d =
        // 0x1b0d, payload 6865+6c6c+6f00 = 0x143d1; total 0x172ff -> folded 0x7300 -> 0x8cff.
        let a = FrameAddrs {
            src_mac: Mac::default(),
            dst_mac: Mac::default(),
            src: "10.0.0.1:1234".parse().unwrap(),
            dst: "10.0.0.2:5678".parse().unwrap(),
            ttl: 64,
        };
        let t = FrameTemplate::new(&a, 5);
        let mut f = vec![0u8; t.frame_len()];
        assert_eq!(t.build(b"hello", &mut f), 14 + 20 + 8 + 5);
        assert_eq!(&f[40..42], &0x8cffu16.to_be_bytes());
        assert_eq!(&f[34..40], &[0x04, 0xd2, 0x16, 0x2e, 0x00, 0x0d]);
        assert_eq!(checksum(sum16(&f[14..34])), 0, "IPv4 header checksum verifies");
    }

    /// Verify a frame's UDP checksum as a receiver does: the pseudo-header plus the whole
    /// datagram sums to all ones.
    fn udp_verifies(f: &[u8]) -> bool {
        let v6 = f[12..14] == [0x86, 0xdd];
        let (ip, alen, off) = if v6 { (&f[14..54], 16, 54) } else { (&f[14..34], 4, 34) };
        let (src, dst) = if v6 { (&ip[8..24], &ip[24..40]) } else { (&ip[12..16], &ip[16..20]) };
        assert_eq!(src.len(), alen);
        let udp = &f[off..];
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(src);
        pseudo.extend_from_slice(dst);
        pseudo.extend_from_slice(&[0, 17]);
        pseudo.extend_from_slice(&(udp.len() as u16).to_be_bytes());
        pseudo.extend_from_slice(udp);
        slow(&pseudo) == 0 && udp[6..8] != [0, 0]
    }

    #[test]
    fn word_sum_matches_the_bytewise_checksum_and_frames_verify() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in [0usize, 1, 2, 3, 5, 63, 64, 80, 1080, 1471, 8800] {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            assert_eq!(checksum(sum16(&data)), slow(&data), "len {len}");
            for (src, dst) in [("198.18.0.1:40000", "198.18.0.2:7000"), ("[2001:2::1]:40000", "[2001:2::2]:7000")] {
                let a = FrameAddrs {
                    src_mac: Mac([2, 1, 2, 3, 4, 5]),
                    dst_mac: Mac([2, 6, 7, 8, 9, 10]),
                    src: src.parse().unwrap(),
                    dst: dst.parse().unwrap(),
                    ttl: 64,
                };
                let t = FrameTemplate::new(&a, len);
                let mut f = vec![0u8; t.frame_len()];
                t.build(&data, &mut f);
                assert!(udp_verifies(&f), "{src} len {len}");
                assert_eq!(&f[t.header_len()..], &data[..]);
            }
        }
    }

    #[test]
    fn ipv6_header_layout() {
        let a = FrameAddrs {
            src_mac: Mac([2, 1, 2, 3, 4, 5]),
            dst_mac: Mac([2, 6, 7, 8, 9, 10]),
            src: "[2001:2::1]:40000".parse().unwrap(),
            dst: "[2001:2::2]:7000".parse().unwrap(),
            ttl: 64,
        };
        let t = FrameTemplate::new(&a, 1080);
        assert_eq!(t.header_len(), 62);
        assert_eq!(&t.hdr[12..14], &[0x86, 0xdd]);
        assert_eq!(&t.hdr[14..22], &[0x60, 0, 0, 0, 0x04, 0x40, 17, 64], "version, payload length 1088, UDP, hops");
    }

    #[test]
    fn mac_parsing_and_multicast_mapping() {
        assert_eq!(Mac::parse("02:00:0A:ff:1:2").unwrap(), Mac([2, 0, 10, 255, 1, 2]));
        assert_eq!(Mac::parse("02-00-0a-ff-01-02").unwrap().to_string(), "02:00:0a:ff:01:02");
        for bad in ["", "02:00", "02:00:00:00:00:00:00", "0g:00:00:00:00:00", "002:0:0:0:0:0"] {
            assert!(Mac::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Mac::multicast("239.129.2.3".parse().unwrap()), Mac([1, 0, 0x5e, 1, 2, 3]));
        assert_eq!(Mac::multicast("ff02::1:ff00:1".parse().unwrap()), Mac([0x33, 0x33, 0xff, 0, 0, 1]));
    }

    #[test]
    fn tables_are_read() {
        let route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                     eth0\t00000000\t010012C6\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
                     eth0\t000012C6\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
        assert_eq!(gateway_v4(route, "8.8.8.8".parse().unwrap(), "eth0"), Some("198.18.0.1".parse().unwrap()));
        assert_eq!(gateway_v4(route, "198.18.3.4".parse().unwrap(), "eth0"), None, "on the link");
        assert_eq!(gateway_v4(route, "8.8.8.8".parse().unwrap(), "eth1"), None);
        let r6 = "20010002000000000000000000000000 30 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 veth0\n\
                  00000000000000000000000000000000 00 00000000000000000000000000000000 00 20010002000000000000000000000001 00000400 00000001 00000000 00000003 veth0\n";
        assert_eq!(gateway_v6(r6, "2001:2::5".parse().unwrap(), "veth0"), None);
        assert_eq!(gateway_v6(r6, "2001:db8::5".parse().unwrap(), "veth0"), Some("2001:2::1".parse().unwrap()));
        let arp = "IP address       HW type     Flags       HW address            Mask     Device\n\
                   198.18.0.2       0x1         0x2         02:aa:bb:cc:dd:ee     *        veth0\n\
                   198.18.0.3       0x1         0x0         00:00:00:00:00:00     *        veth0\n";
        assert_eq!(
            arp_entry(arp, "198.18.0.2".parse().unwrap(), "veth0"),
            Some(Mac([2, 0xaa, 0xbb, 0xcc, 0xdd, 0xee]))
        );
        assert_eq!(arp_entry(arp, "198.18.0.2".parse().unwrap(), "veth1"), None);
        assert_eq!(arp_entry(arp, "198.18.0.3".parse().unwrap(), "veth0"), None, "incomplete");
        assert_eq!(neigh_entry("2001:2::2 lladdr 02:00:00:00:00:02 REACHABLE\n"), Some(Mac([2, 0, 0, 0, 0, 2])));
        assert_eq!(neigh_entry("2001:2::2  FAILED\n"), None);
    }
}
