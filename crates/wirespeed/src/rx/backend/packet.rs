//! The packet-ring backend (`--backend packet`): an AF_PACKET socket with a TPACKET_V3 ring on
//! the interface that holds the listen address, a classic BPF filter in the kernel that lets
//! through only UDP to the listen port (and address), and the IP and UDP headers parsed here
//! to hand each payload and source to the capture loop, read in place from the ring.
//!
//! What the UDP stack does meanwhile: AF_PACKET taps packets before IP, so every datagram
//! still goes on to the UDP layer. With no socket on the port the kernel would answer each
//! with ICMP port unreachable (unthrottled on loopback) and a connected sender would see
//! ECONNREFUSED; with an ordinary socket its buffer would fill and overflow. So the backend
//! binds the port with a UDP socket whose filter rejects everything: the kernel frees each
//! datagram right after the socket lookup, counts it in UDP InErrors (not RcvbufErrors), and
//! sends nothing back. The same socket joins multicast groups and chooses port 0's port.
//!
//! Needs CAP_NET_RAW. With several capture threads, each ring joins one PACKET_FANOUT group
//! (hash of the flow, so a stream stays on one thread). Not handled: IP fragments (the ring
//! sees them before reassembly: counted as truncated), UDP GSO trains that cross loopback or
//! veth unsplit (received as one oversized datagram), and checksums (not verified here: a
//! datagram the UDP layer would drop for a bad checksum is taken).

use super::udp::UdpEndpoint;
use super::{Backend, Bound, Member, RecvConfig};
use crate::error::{Error, Result};
use crate::sys;
use crate::sys::packet::{BpfInsn, PacketRing, RingSpec};
use crate::units;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;

/// The message for a process without CAP_NET_RAW.
pub const NEEDS_NET_RAW: &str =
    "the packet backend needs CAP_NET_RAW: run as root or `setcap cap_net_raw+ep` (or use --backend recvmmsg)";

/// How long one receive call waits for a block before returning to the loop (stop flag).
const WAIT_NS: u64 = 100_000_000;

/// The ring, and the socket that keeps the port from the UDP stack's replies.
pub struct PacketEndpoint {
    ring: Arc<PacketRing>,
    want: Want,
    /// Held for its effect (the port is bound, the datagrams discarded in the kernel).
    _holder: Option<UdpEndpoint>,
}

/// Which packets are ours: the filter's and the parser's criteria.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    /// Destination port.
    pub port: u16,
    /// Destination IPv4 address (`None`: any).
    pub v4: Option<Option<Ipv4Addr>>,
    /// Destination IPv6 address (`None` outer: no IPv6; `Some(None)`: any).
    pub v6: Option<Option<Ipv6Addr>>,
}

impl Want {
    /// What a UDP socket bound to `listen` (with its port resolved) would receive.
    pub fn for_listen(listen: SocketAddr) -> Want {
        let port = listen.port();
        match listen.ip() {
            IpAddr::V4(a) if a.is_unspecified() => Want { port, v4: Some(None), v6: None },
            IpAddr::V4(a) => Want { port, v4: Some(Some(a)), v6: None },
            IpAddr::V6(a) if a.is_unspecified() => Want { port, v4: Some(None), v6: Some(None) },
            IpAddr::V6(a) => Want { port, v4: None, v6: Some(Some(a)) },
        }
    }
}

// Classic BPF opcodes (linux/filter.h).
const LD_B_ABS: u16 = 0x30;
const LD_H_ABS: u16 = 0x28;
const LD_W_ABS: u16 = 0x20;
const LD_H_IND: u16 = 0x48;
const LDX_B_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
/// Ancillary loads: `SKF_AD_OFF + SKF_AD_PROTOCOL` (the EtherType) and `+ SKF_AD_PKTTYPE`.
const AD_PROTOCOL: u32 = (-0x1000i32) as u32;
const AD_PKTTYPE: u32 = (-0x1000i32 + 4) as u32;
const PACKET_OTHERHOST: u32 = 3;
const PACKET_OUTGOING: u32 = 4;
/// What an accepting filter returns: bytes to keep, more than any IP packet.
const KEEP_ALL: u32 = 0x40000;

/// A jump target while the program is assembled.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum To {
    Next,
    V4,
    V6,
    Accept,
    Drop,
}

struct Asm {
    code: Vec<(u16, To, To, u32)>,
    v4: usize,
    v6: usize,
}

impl Asm {
    fn op(&mut self, code: u16, k: u32) {
        self.code.push((code, To::Next, To::Next, k));
    }
    fn jeq(&mut self, k: u32, t: To, f: To) {
        self.code.push((JEQ_K, t, f, k));
    }
    fn finish(self) -> Vec<BpfInsn> {
        let n = self.code.len();
        let (accept, drop) = (n, n + 1);
        let at = |t: To, i: usize| -> u8 {
            let target = match t {
                To::Next => i + 1,
                To::V4 => self.v4,
                To::V6 => self.v6,
                To::Accept => accept,
                To::Drop => drop,
            };
            u8::try_from(target - i - 1).expect("filter jumps are short")
        };
        let mut out: Vec<BpfInsn> = self
            .code
            .iter()
            .enumerate()
            .map(|(i, &(code, t, f, k))| BpfInsn { code, jt: at(t, i), jf: at(f, i), k })
            .collect();
        out.push(BpfInsn { code: RET_K, jt: 0, jf: 0, k: KEEP_ALL });
        out.push(BpfInsn { code: RET_K, jt: 0, jf: 0, k: 0 });
        out
    }
}

/// The socket filter: incoming (not outgoing, not another host's) IPv4/IPv6 UDP to the port
/// and address `want` names, and for IPv4 not a later fragment (a first fragment passes, so
/// that it is counted). Offsets are from the IP header (a `SOCK_DGRAM` packet socket).
pub fn filter_program(want: &Want) -> Vec<BpfInsn> {
    let mut a = Asm { code: Vec::new(), v4: usize::MAX, v6: usize::MAX };
    a.op(LD_B_ABS, AD_PKTTYPE);
    a.jeq(PACKET_OUTGOING, To::Drop, To::Next);
    a.jeq(PACKET_OTHERHOST, To::Drop, To::Next);
    a.op(LD_H_ABS, AD_PROTOCOL);
    let (v4_to, v6_to) = (
        if want.v4.is_some() { To::V4 } else { To::Drop },
        if want.v6.is_some() { To::V6 } else { To::Drop },
    );
    a.jeq(0x0800, v4_to, To::Next);
    a.jeq(0x86dd, v6_to, To::Drop);
    if let Some(dst) = want.v4 {
        a.v4 = a.code.len();
        a.op(LD_B_ABS, 9);
        a.jeq(17, To::Next, To::Drop);
        a.op(LD_H_ABS, 6);
        a.code.push((JSET_K, To::Drop, To::Next, 0x1fff));
        if let Some(ip) = dst {
            a.op(LD_W_ABS, 16);
            a.jeq(u32::from(ip), To::Next, To::Drop);
        }
        a.op(LDX_B_MSH, 0);
        a.op(LD_H_IND, 2);
        a.jeq(u32::from(want.port), To::Accept, To::Drop);
    }
    if let Some(dst) = want.v6 {
        a.v6 = a.code.len();
        a.op(LD_B_ABS, 6);
        a.jeq(17, To::Next, To::Drop);
        if let Some(ip) = dst {
            for (i, w) in ip.octets().chunks(4).enumerate() {
                a.op(LD_W_ABS, 24 + 4 * i as u32);
                a.jeq(u32::from_be_bytes([w[0], w[1], w[2], w[3]]), To::Next, To::Drop);
            }
        }
        a.op(LD_H_ABS, 42);
        a.jeq(u32::from(want.port), To::Accept, To::Drop);
    }
    a.finish()
}

/// What the parser made of one captured packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole datagram for us: the payload's byte range in the packet, and its source.
    Datagram {
        /// Where the payload starts (after the UDP header).
        start: usize,
        /// Where it ends (before any link-layer padding).
        end: usize,
        /// Where it came from, as a UDP socket would say.
        src: SocketAddr,
    },
    /// A datagram for us that arrived cut: an IP fragment, or shorter than its headers say.
    Partial,
    /// Not for us (the filter lets nothing else through; kept for safety).
    Other,
}

/// Parse an IPv4 or IPv6 packet carrying UDP, checking it against `want`.
#[inline]
pub fn parse(p: &[u8], want: &Want) -> Parsed {
    let Some(&first) = p.first() else { return Parsed::Other };
    match first >> 4 {
        4 if want.v4.is_some() => {
            if p.len() < 20 || p[9] != 17 {
                return Parsed::Other;
            }
            let ihl = usize::from(first & 0xf) * 4;
            let frag = u16::from_be_bytes([p[6], p[7]]);
            let dst = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
            if ihl < 20 || want.v4.flatten().is_some_and(|d| d != dst) || frag & 0x1fff != 0 {
                return Parsed::Other;
            }
            let Some(udp) = p.get(ihl..ihl + 8) else { return Parsed::Other };
            if u16::from_be_bytes([udp[2], udp[3]]) != want.port {
                return Parsed::Other;
            }
            let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
            let ulen = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
            let end = ihl + ulen;
            if frag & 0x2000 != 0 || ulen < 8 || end > total || end > p.len() {
                return Parsed::Partial;
            }
            let ip = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
            let port = u16::from_be_bytes([udp[0], udp[1]]);
            // On a dual-stack `[::]` listener too: an IPv4 sender is named by its IPv4 address.
            let src = SocketAddr::V4(SocketAddrV4::new(ip, port));
            Parsed::Datagram { start: ihl + 8, end, src }
        }
        6 if want.v6.is_some() => {
            // Only a UDP header right after the fixed IPv6 header is ours: a packet with
            // extension headers (next header other than 17) is not parsed, and counts as not
            // for us (the kernel filter passes only next header 17 in the first place).
            if p.len() < 48 || p[6] != 17 {
                return Parsed::Other;
            }
            let mut a = [0u8; 16];
            a.copy_from_slice(&p[24..40]);
            if want.v6.flatten().is_some_and(|d| d.octets() != a) {
                return Parsed::Other;
            }
            if u16::from_be_bytes([p[42], p[43]]) != want.port {
                return Parsed::Other;
            }
            let payload = usize::from(u16::from_be_bytes([p[4], p[5]]));
            let ulen = usize::from(u16::from_be_bytes([p[44], p[45]]));
            let end = 40 + ulen;
            if ulen < 8 || ulen > payload || end > p.len() {
                return Parsed::Partial;
            }
            a.copy_from_slice(&p[8..24]);
            let src = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(a), u16::from_be_bytes([p[40], p[41]]), 0, 0));
            Parsed::Datagram { start: 48, end, src }
        }
        _ => Parsed::Other,
    }
}

/// Ring geometry for a requested buffer: blocks large enough for any datagram, about as many
/// bytes in all as `--rcvbuf` asks (at least four blocks).
pub fn geometry(rcvbuf: usize) -> (usize, usize) {
    let block = if rcvbuf >= 32 << 20 {
        1 << 20
    } else if rcvbuf >= 4 << 20 {
        256 << 10
    } else {
        128 << 10
    };
    (block, rcvbuf.div_ceil(block).clamp(4, 1 << 16))
}

/// A filter that rejects every datagram: the port holder's.
const REJECT_ALL: [BpfInsn; 1] = [BpfInsn { code: RET_K, jt: 0, jf: 0, k: 0 }];

fn ring_error(e: io::Error, what: &str) -> Error {
    if e.raw_os_error() == Some(libc::EPERM) {
        Error::permission(NEEDS_NET_RAW)
    } else {
        Error::failed(format!("cannot set up the packet ring ({what}): {e}"))
    }
}

/// The packet-ring backend's receive state.
pub struct PacketBackend {
    ring: Arc<PacketRing>,
    want: Want,
    next: usize,
    nonblocking: bool,
    drops: u64,
    truncated: u64,
}

/// Add what the kernel dropped since the last read (a system call: only when it said so, or
/// when idle).
fn add_drops(ring: &PacketRing, drops: &mut u64) {
    if let Ok(d) = ring.take_drops() {
        *drops += d;
    }
}

impl Backend for PacketBackend {
    const NAME: &'static str = "packet";
    type Endpoint = PacketEndpoint;

    fn open(cfg: &RecvConfig, member: Member) -> Result<(PacketEndpoint, Bound)> {
        let ip = cfg.listen.ip();
        let (ifindex, ifname) = if ip.is_unspecified() {
            (0, "every interface".to_string())
        } else if ip.is_multicast() {
            match &cfg.multicast_iface {
                Some(crate::addr::Iface::Addr(a)) => sys::packet::interface_of(IpAddr::V4(*a))
                    .ok()
                    .flatten()
                    .ok_or_else(|| Error::param("iface", format!("{a} is not an address of this host (`ip -br addr`)")))?,
                Some(crate::addr::Iface::Index { index, name }) => (*index, name.clone()),
                None => match cfg.listen {
                    SocketAddr::V6(g) if g.scope_id() != 0 => (g.scope_id(), format!("interface {}", g.scope_id())),
                    _ => (0, "every interface".to_string()),
                },
            }
        } else {
            let (index, name) = sys::packet::interface_of(ip)
                .map_err(|e| Error::failed(format!("cannot list the interfaces: {e}")))?
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "address {ip} is not assigned to any interface here: use a bare PORT (every address), 0.0.0.0, or one of this host's addresses (`ip -br addr`)"
                    ))
                })?;
            if name == "lo" && !ip.is_loopback() {
                // A host address kept on lo (a partition's, a router id) is reached through
                // another interface: datagrams for it never cross lo. Listen on every
                // interface; the kernel filter still takes only this address and port.
                (0, format!("every interface ({ip} is held by lo, so its datagrams arrive on another)"))
            } else {
                (index, name)
            }
        };
        let mut notes = Vec::new();
        // The first member holds the port (and resolves port 0); the others share its port.
        let holder = if member.index == 0 {
            let mut hcfg = cfg.clone();
            hcfg.rcvbuf = 0;
            hcfg.gro = false;
            let (h, b) = UdpEndpoint::bind(&hcfg)?;
            sys::packet::attach_filter(h.fd(), &REJECT_ALL)
                .map_err(|e| Error::failed(format!("cannot filter the port-holding socket: {e}")))?;
            Some((h, b.local_addr.map_or(cfg.listen.port(), |a| a.port())))
        } else if cfg.listen.port() == 0 {
            return Err(Error::invalid(
                "with several capture threads the packet backend needs the port: give one, not 0",
            ));
        } else {
            None
        };
        let listen = match &holder {
            Some((_, port)) => SocketAddr::new(ip, *port),
            None => cfg.listen,
        };
        let want = Want::for_listen(listen);
        let prog = filter_program(&want);
        let (block_size, block_nr) = geometry(cfg.rcvbuf);
        let retire_ms = (cfg.coalesce.as_millis() as u32).clamp(1, 10);
        let spec = RingSpec {
            ifindex,
            block_size,
            block_nr,
            retire_ms,
            filter: &prog,
            fanout: (member.count > 1).then_some(member.group as u16),
        };
        let ring = PacketRing::open(&spec).map_err(|e| ring_error(e, &ifname))?;
        let bytes = ring.bytes();
        notes.push(format!(
            "packet ring on {ifname}: {block_nr} blocks of {} ({} in all), handed over when full or after {retire_ms} ms",
            units::bytes(block_size as u64),
            units::bytes(bytes as u64)
        ));
        if holder.is_some() {
            notes.push(
                "the UDP stack still gets each datagram: a socket holds the port and discards them in the kernel (counted in UDP InErrors, expected with --backend packet)"
                    .into(),
            );
        }
        let bound = Bound {
            local_addr: Some(listen),
            // The report's convention is the doubled figure getsockopt gives for a socket buffer.
            rcvbuf_granted: bytes * 2,
            gro: false,
            udp_inode: None,
            notes,
        };
        Ok((PacketEndpoint { ring: Arc::new(ring), want, _holder: holder.map(|(h, _)| h) }, bound))
    }

    fn start(endpoint: &PacketEndpoint, cfg: &RecvConfig) -> Self {
        PacketBackend {
            ring: Arc::clone(&endpoint.ring),
            want: endpoint.want,
            next: 0,
            nonblocking: cfg.busy_poll,
            drops: 0,
            truncated: 0,
        }
    }

    #[inline]
    fn recv<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, mut f: F) -> io::Result<usize> {
        let PacketBackend { ring, want, next, nonblocking, drops, truncated } = self;
        if ring.block(*next).is_none() {
            if *nonblocking {
                return Ok(0);
            }
            if !sys::poll_readable(ring.fd(), Some(WAIT_NS))? {
                // Idle: a good moment to read the drop counter, off the hot path.
                add_drops(ring, drops);
                return Ok(0);
            }
        }
        let mut n = 0;
        for _ in 0..ring.block_nr() {
            let Some(block) = ring.block(*next) else { break };
            for fr in block.frames() {
                match parse(fr.data, want) {
                    Parsed::Datagram { start, end, src } if fr.data.len() as u32 == fr.wire_len => {
                        f(&fr.data[start..end], Some(src))
                    }
                    Parsed::Other => continue,
                    _ => *truncated += 1,
                }
                n += 1;
            }
            let losing = block.losing();
            block.release();
            if losing {
                add_drops(ring, drops);
            }
            *next = (*next + 1) % ring.block_nr();
        }
        Ok(n)
    }

    fn kernel_drops(&self) -> Option<u64> {
        Some(self.drops)
    }

    fn truncated(&self) -> u64 {
        self.truncated
    }

    fn final_drops(&mut self) -> Option<u64> {
        add_drops(&self.ring, &mut self.drops);
        Some(self.drops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic BPF interpreter for the instructions `filter_program` uses, so the program can
    /// be checked without a kernel.
    fn run(prog: &[BpfInsn], pkt: &[u8], proto: u16, pkttype: u32) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let load = |off: u32, size: usize| -> Option<u32> {
            match off {
                AD_PROTOCOL => return Some(u32::from(proto)),
                AD_PKTTYPE => return Some(pkttype),
                _ => {}
            }
            let o = off as usize;
            let b = pkt.get(o..o + size)?;
            Some(b.iter().fold(0u32, |v, &c| v << 8 | u32::from(c)))
        };
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                LD_B_ABS => a = match load(i.k, 1) { Some(v) => v, None => return 0 },
                LD_H_ABS => a = match load(i.k, 2) { Some(v) => v, None => return 0 },
                LD_W_ABS => a = match load(i.k, 4) { Some(v) => v, None => return 0 },
                LD_H_IND => a = match load(x.wrapping_add(i.k), 2) { Some(v) => v, None => return 0 },
                LDX_B_MSH => x = match load(i.k, 1) { Some(v) => (v & 0xf) * 4, None => return 0 },
                JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                JSET_K => pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf }),
                RET_K => return i.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    fn v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8], frag: u16) -> Vec<u8> {
        let total = 28 + payload.len();
        let mut p = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 1, (frag >> 8) as u8, frag as u8, 64, 17, 0, 0];
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        p
    }

    fn v6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let ulen = (8 + payload.len()) as u16;
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&ulen.to_be_bytes());
        p.extend_from_slice(&[17, 64]);
        p.extend_from_slice(&src.octets());
        p.extend_from_slice(&dst.octets());
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&ulen.to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        p
    }

    const HOST: u32 = 0;

    #[test]
    fn the_filter_passes_only_udp_to_the_port_and_address() {
        let want = Want::for_listen("198.18.0.2:7000".parse().unwrap());
        let prog = filter_program(&want);
        let ok = v4([198, 18, 0, 1], [198, 18, 0, 2], 5555, 7000, b"hello", 0);
        assert_eq!(run(&prog, &ok, 0x0800, HOST), KEEP_ALL);
        assert_eq!(run(&prog, &ok, 0x0800, PACKET_OUTGOING), 0, "outgoing copies are dropped");
        assert_eq!(run(&prog, &ok, 0x0800, PACKET_OTHERHOST), 0);
        assert_eq!(run(&prog, &ok, 0x86dd, HOST), 0, "IPv6 is not asked for");
        assert_eq!(run(&prog, &v4([198, 18, 0, 1], [198, 18, 0, 2], 5555, 7001, b"x", 0), 0x0800, HOST), 0);
        assert_eq!(run(&prog, &v4([198, 18, 0, 1], [198, 18, 0, 3], 5555, 7000, b"x", 0), 0x0800, HOST), 0);
        let mut tcp = ok.clone();
        tcp[9] = 6;
        assert_eq!(run(&prog, &tcp, 0x0800, HOST), 0);
        // A first fragment passes (to be counted), a later one does not.
        assert_eq!(run(&prog, &v4([1, 1, 1, 1], [198, 18, 0, 2], 1, 7000, b"x", 0x2000), 0x0800, HOST), KEEP_ALL);
        assert_eq!(run(&prog, &v4([1, 1, 1, 1], [198, 18, 0, 2], 1, 7000, b"x", 0x2005), 0x0800, HOST), 0);
        // IP options move the UDP header: the filter follows the header length.
        let mut opt = ok.clone();
        opt[0] = 0x46;
        opt.splice(20..20, [1, 1, 1, 0]);
        assert_eq!(run(&prog, &opt, 0x0800, HOST), KEEP_ALL);
        opt[20 + 4 + 3] = 0x59;
        assert_eq!(run(&prog, &opt, 0x0800, HOST), 0);
        assert_eq!(run(&prog, &[0x45, 0, 0], 0x0800, HOST), 0, "a short packet is dropped, not read past");
    }

    #[test]
    fn a_wildcard_v6_listener_takes_both_families_and_a_v4_one_only_v4() {
        let any6 = filter_program(&Want::for_listen("[::]:9000".parse().unwrap()));
        let any4 = filter_program(&Want::for_listen("0.0.0.0:9000".parse().unwrap()));
        let a: Ipv6Addr = "2001:2::1".parse().unwrap();
        let b: Ipv6Addr = "2001:2::2".parse().unwrap();
        let p6 = v6(a, b, 1, 9000, b"abc");
        let p4 = v4([127, 0, 0, 1], [127, 0, 0, 1], 1, 9000, b"abc", 0);
        assert_eq!(run(&any6, &p6, 0x86dd, HOST), KEEP_ALL);
        assert_eq!(run(&any6, &p4, 0x0800, HOST), KEEP_ALL);
        assert_eq!(run(&any4, &p6, 0x86dd, HOST), 0);
        assert_eq!(run(&any4, &p4, 0x0800, HOST), KEEP_ALL);
        let only_b = filter_program(&Want::for_listen(SocketAddr::new(IpAddr::V6(b), 9000)));
        assert_eq!(run(&only_b, &p6, 0x86dd, HOST), KEEP_ALL);
        assert_eq!(run(&only_b, &v6(b, a, 1, 9000, b"abc"), 0x86dd, HOST), 0);
        assert_eq!(run(&only_b, &v6(a, b, 1, 9001, b"abc"), 0x86dd, HOST), 0);
    }

    #[test]
    fn parsing_hands_the_payload_and_source() {
        let want = Want::for_listen("0.0.0.0:7000".parse().unwrap());
        let mut p = v4([10, 0, 0, 1], [10, 0, 0, 2], 4242, 7000, b"payload", 0);
        let src: SocketAddr = "10.0.0.1:4242".parse().unwrap();
        assert_eq!(parse(&p, &want), Parsed::Datagram { start: 28, end: 35, src });
        // Link-layer padding after the datagram is not payload.
        p.extend_from_slice(&[0; 12]);
        assert_eq!(parse(&p, &want), Parsed::Datagram { start: 28, end: 35, src });
        assert_eq!(parse(&p[..30], &want), Parsed::Partial, "cut short");
        assert_eq!(parse(&v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 7000, b"x", 0x2000), &want), Parsed::Partial);
        assert_eq!(parse(&v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 7001, b"x", 0), &want), Parsed::Other);
        assert_eq!(parse(&[], &want), Parsed::Other);
        assert_eq!(parse(&[0x45], &want), Parsed::Other);
        let dual = Want::for_listen("[::]:7000".parse().unwrap());
        // A dual-stack listener names an IPv4 sender by its IPv4 address, as the socket path does.
        assert_eq!(parse(&p, &dual), Parsed::Datagram { start: 28, end: 35, src });
        let a: Ipv6Addr = "2001:2::1".parse().unwrap();
        let b: Ipv6Addr = "2001:2::2".parse().unwrap();
        let p6 = v6(a, b, 5, 7000, b"six");
        let src6 = SocketAddr::V6(SocketAddrV6::new(a, 5, 0, 0));
        assert_eq!(parse(&p6, &dual), Parsed::Datagram { start: 48, end: 51, src: src6 });
        assert_eq!(parse(&p6, &want), Parsed::Other, "a v4 listener takes no IPv6");
        // An extension header (here hop-by-hop, next header 0) before UDP is not parsed: not ours.
        let mut ext = p6.clone();
        ext[6] = 0;
        assert_eq!(parse(&ext, &dual), Parsed::Other);
    }

    #[test]
    fn the_ring_is_sized_from_the_buffer_asked_for() {
        assert_eq!(geometry(32 << 20), (1 << 20, 32));
        assert_eq!(geometry(4 << 20), (256 << 10, 16));
        assert_eq!(geometry(0), (128 << 10, 4));
        assert_eq!(geometry(100 << 10), (128 << 10, 4));
    }

    /// Two members of one fanout group on loopback: every datagram reaches exactly one of
    /// them, each flow (source address and port) always the same one, and both get some.
    #[test]
    #[ignore = "needs root"]
    fn fanout_members_split_the_flows_and_keep_each_on_one() {
        use std::collections::HashMap;
        use std::net::UdpSocket;
        let mut cfg = RecvConfig::new("127.0.0.1:0".parse().unwrap());
        cfg.rcvbuf = 4 << 20;
        let group = 0x7000 | (std::process::id() & 0xfff);
        let (ep0, b0) = PacketBackend::open(&cfg, Member { index: 0, count: 2, group }).unwrap();
        cfg.listen = b0.local_addr.unwrap();
        let (ep1, _) = PacketBackend::open(&cfg, Member { index: 1, count: 2, group }).unwrap();
        let socks: Vec<UdpSocket> = (0..32).map(|_| UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
        for round in 0..20u8 {
            for s in &socks {
                s.send_to(&[round; 64], cfg.listen).unwrap();
            }
        }
        let mut rx = [PacketBackend::start(&ep0, &cfg), PacketBackend::start(&ep1, &cfg)];
        let mut got: [HashMap<SocketAddr, u32>; 2] = [HashMap::new(), HashMap::new()];
        let mut idle = 0;
        while got.iter().map(|m| m.values().sum::<u32>()).sum::<u32>() < 640 && idle < 20 {
            let mut n = 0;
            for (b, m) in rx.iter_mut().zip(got.iter_mut()) {
                n += b
                    .recv(|d, src| {
                        assert_eq!(d.len(), 64);
                        *m.entry(src.unwrap()).or_default() += 1;
                    })
                    .unwrap();
            }
            idle = if n == 0 { idle + 1 } else { 0 };
        }
        assert!(!got[0].is_empty() && !got[1].is_empty(), "32 flows all hashed to one member");
        for s in &socks {
            let a = s.local_addr().unwrap();
            let counts = (got[0].get(&a).copied().unwrap_or(0), got[1].get(&a).copied().unwrap_or(0));
            assert!(counts == (20, 0) || counts == (0, 20), "{a}: {counts:?}");
        }
        assert_eq!(rx[0].kernel_drops(), Some(0));
    }
}
