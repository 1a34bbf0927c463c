//! Views of the network headers around a UDP payload: Ethernet (with 802.1Q/802.1ad tags),
//! IPv4, IPv6 and UDP, and the UDP checksum IPv6 makes mandatory.
//!
//! The socket receive path never sees them (the kernel strips them), but recordings do: pcap
//! files carry synthesized IPv4/UDP headers, and `verify` takes apart captures made by other
//! tools, Ethernet framed or not. A receive backend that reads whole frames (packet sockets,
//! AF_XDP) needs the same views, which is why they live with the wire formats and not with the
//! file code. Only what these uses need is here: IPv4 options are skipped, IPv6 extension
//! headers are not walked (a packet with any is not a plain UDP datagram to these readers), and
//! checksum offload is not modelled.

use super::view::{be_u16, check_len, set_be_u16, Truncated};
use std::net::{Ipv4Addr, Ipv6Addr};

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Bytes in the fixed IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;
/// EtherType of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of an 802.1ad (QinQ) service tag.
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// Bytes in an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Bytes in a UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// Bytes in an Ethernet header without tags.
pub const ETHERNET_HEADER_LEN: usize = 14;

mod eth {
    use crate::wire::view::Field;
    pub const ETHERTYPE: Field = 12..14;
    /// Bytes a VLAN tag adds before the EtherType.
    pub const TAG_LEN: usize = 4;
}

/// A view of an Ethernet frame (without FCS).
#[derive(Clone, Copy, Debug)]
pub struct EthernetFrame<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// A view, refused when the buffer is shorter than an untagged Ethernet header.
    pub fn new_checked(buffer: T) -> Result<EthernetFrame<T>, Truncated> {
        check_len(buffer.as_ref(), ETHERNET_HEADER_LEN)?;
        Ok(EthernetFrame { buffer })
    }

    /// The EtherType of the payload and the payload itself, past any VLAN or QinQ tags;
    /// `None` when the tags run past the end of the frame.
    pub fn inner(&self) -> Option<(u16, &[u8])> {
        eth_inner(self.buffer.as_ref())
    }
}

impl<'a> EthernetFrame<&'a [u8]> {
    /// [`EthernetFrame::inner`], borrowing from the buffer rather than the view.
    pub fn into_inner(self) -> Option<(u16, &'a [u8])> {
        eth_inner(self.buffer)
    }
}

fn eth_inner(b: &[u8]) -> Option<(u16, &[u8])> {
    let mut f = eth::ETHERTYPE;
    loop {
        let et = be_u16(b.get(f.clone())?, 0..2);
        if et != ETHERTYPE_VLAN && et != ETHERTYPE_QINQ {
            return Some((et, &b[f.end..]));
        }
        f = f.start + eth::TAG_LEN..f.end + eth::TAG_LEN;
    }
}

mod ipv4 {
    use crate::wire::view::Field;
    pub const VER_IHL: usize = 0;
    pub const TOTAL_LEN: Field = 2..4;
    pub const FLAGS_FRAG: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
    /// Don't-fragment flag in the flags/fragment-offset word.
    pub const DF: u16 = 0x4000;
    /// More-fragments flag and the fragment offset: non-zero in any fragment.
    pub const FRAGMENT: u16 = 0x3fff;
}

/// A view of an IPv4 packet.
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// A view without a length check (accessors panic on a buffer shorter than 20 bytes).
    pub fn new_unchecked(buffer: T) -> Ipv4Packet<T> {
        Ipv4Packet { buffer }
    }

    /// A view, refused when the buffer is shorter than an option-less IPv4 header. (Whether
    /// the header length field fits the buffer is for the caller: [`Ipv4Packet::header_len`].)
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>, Truncated> {
        check_len(buffer.as_ref(), IPV4_HEADER_LEN)?;
        Ok(Ipv4Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// IP version (4 for a real IPv4 header).
    pub fn version(&self) -> u8 {
        self.b()[ipv4::VER_IHL] >> 4
    }
    /// Header length in bytes, options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[ipv4::VER_IHL] & 0x0f) * 4
    }
    /// Total length (header and payload) the header states.
    pub fn total_len(&self) -> u16 {
        be_u16(self.b(), ipv4::TOTAL_LEN)
    }
    /// Whether this is a fragment (more fragments follow, or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        be_u16(self.b(), ipv4::FLAGS_FRAG) & ipv4::FRAGMENT != 0
    }
    /// Whether the don't-fragment flag is set.
    pub fn dont_fragment(&self) -> bool {
        be_u16(self.b(), ipv4::FLAGS_FRAG) & ipv4::DF != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[ipv4::TTL]
    }
    /// Protocol of the payload (17 = UDP).
    pub fn protocol(&self) -> u8 {
        self.b()[ipv4::PROTOCOL]
    }
    /// The header checksum field.
    pub fn checksum(&self) -> u16 {
        be_u16(self.b(), ipv4::CHECKSUM)
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let a: [u8; 4] = self.b()[ipv4::SRC].try_into().expect("4-byte field");
        Ipv4Addr::from(a)
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let a: [u8; 4] = self.b()[ipv4::DST].try_into().expect("4-byte field");
        Ipv4Addr::from(a)
    }
    /// Whether the header checksum verifies (the one's complement sum of the header is 0xffff).
    pub fn checksum_ok(&self) -> bool {
        self.b().len() >= self.header_len() && ones_sum(&self.b()[..self.header_len()]) == 0xffff
    }
    /// The bytes after the header (`None` when the header length field is impossible).
    pub fn payload(&self) -> Option<&[u8]> {
        ipv4_payload(self.b())
    }
}

impl<'a> Ipv4Packet<&'a [u8]> {
    /// [`Ipv4Packet::payload`], borrowing from the buffer rather than the view.
    pub fn into_payload(self) -> Option<&'a [u8]> {
        ipv4_payload(self.buffer)
    }
}

fn ipv4_payload(b: &[u8]) -> Option<&[u8]> {
    let h = Ipv4Packet::new_unchecked(b).header_len();
    if h < IPV4_HEADER_LEN {
        return None;
    }
    b.get(h..)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn b_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Set version 4 and an option-less header length.
    pub fn set_version_and_len(&mut self) {
        self.b_mut()[ipv4::VER_IHL] = 0x40 | (IPV4_HEADER_LEN / 4) as u8;
    }
    /// Set the total length.
    pub fn set_total_len(&mut self, v: u16) {
        set_be_u16(self.b_mut(), ipv4::TOTAL_LEN, v)
    }
    /// Mark the packet don't-fragment (flags word otherwise zero: not a fragment).
    pub fn set_dont_fragment(&mut self) {
        set_be_u16(self.b_mut(), ipv4::FLAGS_FRAG, ipv4::DF)
    }
    /// Set the time to live.
    pub fn set_ttl(&mut self, v: u8) {
        self.b_mut()[ipv4::TTL] = v;
    }
    /// Set the payload protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.b_mut()[ipv4::PROTOCOL] = v;
    }
    /// Set the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.b_mut()[ipv4::SRC].copy_from_slice(&a.octets());
    }
    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.b_mut()[ipv4::DST].copy_from_slice(&a.octets());
    }
    /// Compute and write the header checksum: the last field to set.
    pub fn fill_checksum(&mut self) {
        set_be_u16(self.b_mut(), ipv4::CHECKSUM, 0);
        let n = self.header_len();
        let sum = !ones_sum(&self.b_mut()[..n]);
        set_be_u16(self.b_mut(), ipv4::CHECKSUM, sum);
    }
}

/// One's complement sum of big-endian 16-bit words (the IPv4 header checksum before inversion).
fn ones_sum(b: &[u8]) -> u16 {
    let mut sum = 0u32;
    for w in b.chunks_exact(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

mod ipv6 {
    use crate::wire::view::Field;
    pub const VERSION: usize = 0;
    pub const PAYLOAD_LEN: Field = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Field = 8..24;
    pub const DST: Field = 24..40;
}

/// A view of an IPv6 packet (the fixed header; extension headers are the caller's to refuse).
#[derive(Clone, Copy, Debug)]
pub struct Ipv6Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// A view without a length check (accessors panic on a buffer shorter than 40 bytes).
    pub fn new_unchecked(buffer: T) -> Ipv6Packet<T> {
        Ipv6Packet { buffer }
    }

    /// A view, refused when the buffer is shorter than the fixed 40-byte header.
    pub fn new_checked(buffer: T) -> Result<Ipv6Packet<T>, Truncated> {
        check_len(buffer.as_ref(), IPV6_HEADER_LEN)?;
        Ok(Ipv6Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// IP version (6 for a real IPv6 header).
    pub fn version(&self) -> u8 {
        self.b()[ipv6::VERSION] >> 4
    }
    /// Bytes after the fixed header (extension headers and upper layer), as the header says.
    pub fn payload_len(&self) -> u16 {
        be_u16(self.b(), ipv6::PAYLOAD_LEN)
    }
    /// The header that follows (17: UDP right away; anything else: an extension header or
    /// another protocol).
    pub fn next_header(&self) -> u8 {
        self.b()[ipv6::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[ipv6::HOP_LIMIT]
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let o: [u8; 16] = self.b()[ipv6::SRC].try_into().unwrap_or([0; 16]);
        Ipv6Addr::from(o)
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let o: [u8; 16] = self.b()[ipv6::DST].try_into().unwrap_or([0; 16]);
        Ipv6Addr::from(o)
    }
}

impl<'a> Ipv6Packet<&'a [u8]> {
    /// The bytes after the fixed header, as far as the payload length says; `None` when they
    /// run past the buffer.
    pub fn into_payload(self) -> Option<&'a [u8]> {
        let n = usize::from(self.payload_len());
        self.buffer.get(IPV6_HEADER_LEN..IPV6_HEADER_LEN + n)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Set version 6, traffic class and flow label 0.
    pub fn set_version(&mut self) {
        self.buffer.as_mut()[..4].copy_from_slice(&[0x60, 0, 0, 0]);
    }
    /// Set the payload length (everything after the fixed header).
    pub fn set_payload_len(&mut self, v: u16) {
        set_be_u16(self.buffer.as_mut(), ipv6::PAYLOAD_LEN, v)
    }
    /// Set the next header (17 for UDP).
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[ipv6::NEXT_HEADER] = v;
    }
    /// Set the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[ipv6::HOP_LIMIT] = v;
    }
    /// Set the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[ipv6::SRC].copy_from_slice(&a.octets());
    }
    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[ipv6::DST].copy_from_slice(&a.octets());
    }
}

/// The sum of `data` as big-endian 32-bit words (a short tail zero-padded), unfolded: added up
/// across pieces and folded once by [`fold_checksum`], it is the Internet checksum (RFC 1071)
/// of their concatenation, as long as every piece but the last has an even length.
#[inline]
pub fn sum_words(data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(4);
    let mut s: u64 = 0;
    for c in &mut chunks {
        s += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    }
    let r = chunks.remainder();
    let mut tail = [0u8; 4];
    tail[..r.len()].copy_from_slice(r);
    s + u64::from(u32::from_be_bytes(tail))
}

/// Fold a sum from [`sum_words`] to 16 bits and complement it: the Internet checksum.
#[inline]
pub fn fold_checksum(mut s: u64) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The UDP checksum of a datagram over IPv6 (RFC 8200 section 8.1: mandatory there): the
/// pseudo-header (addresses, upper-layer length, next header 17), the UDP header `udp` (its
/// checksum field zero, its other fields set) and the payload. A computed 0 is sent as 0xffff,
/// as 0 would mean "no checksum", which IPv6 does not allow.
#[inline]
pub fn udp6_checksum(src: Ipv6Addr, dst: Ipv6Addr, udp: &[u8; UDP_HEADER_LEN], payload: &[u8]) -> u16 {
    let len = (UDP_HEADER_LEN + payload.len()) as u64;
    let s = sum_words(&src.octets())
        + sum_words(&dst.octets())
        + len
        + u64::from(IPPROTO_UDP)
        + sum_words(udp)
        + sum_words(payload);
    match fold_checksum(s) {
        0 => 0xffff,
        c => c,
    }
}

mod udp {
    use crate::wire::view::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// A view of a UDP datagram (header and payload).
#[derive(Clone, Copy, Debug)]
pub struct UdpPacket<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// A view without a length check (accessors panic on a buffer shorter than 8 bytes).
    pub fn new_unchecked(buffer: T) -> UdpPacket<T> {
        UdpPacket { buffer }
    }

    /// A view, refused when the buffer is shorter than the UDP header.
    pub fn new_checked(buffer: T) -> Result<UdpPacket<T>, Truncated> {
        check_len(buffer.as_ref(), UDP_HEADER_LEN)?;
        Ok(UdpPacket { buffer })
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be_u16(self.buffer.as_ref(), udp::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be_u16(self.buffer.as_ref(), udp::DST_PORT)
    }
    /// Length (header and payload) the header states.
    pub fn length(&self) -> u16 {
        be_u16(self.buffer.as_ref(), udp::LENGTH)
    }
    /// Checksum field (0 over IPv4: not computed).
    pub fn checksum(&self) -> u16 {
        be_u16(self.buffer.as_ref(), udp::CHECKSUM)
    }
    /// The payload as the length field bounds it; `None` when that length is impossible or runs
    /// past the buffer.
    pub fn payload(&self) -> Option<&[u8]> {
        udp_payload(self.buffer.as_ref())
    }
}

impl<'a> UdpPacket<&'a [u8]> {
    /// [`UdpPacket::payload`], borrowing from the buffer rather than the view.
    pub fn into_payload(self) -> Option<&'a [u8]> {
        udp_payload(self.buffer)
    }
}

fn udp_payload(b: &[u8]) -> Option<&[u8]> {
    let n = usize::from(UdpPacket::new_unchecked(b).length());
    if n < UDP_HEADER_LEN {
        return None;
    }
    b.get(UDP_HEADER_LEN..n)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Set the source port.
    pub fn set_src_port(&mut self, v: u16) {
        set_be_u16(self.buffer.as_mut(), udp::SRC_PORT, v)
    }
    /// Set the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        set_be_u16(self.buffer.as_mut(), udp::DST_PORT, v)
    }
    /// Set the length (header and payload). The checksum stays 0: "not computed", which IPv4
    /// allows (IPv6 does not: [`set_checksum`](Self::set_checksum) with [`udp6_checksum`]).
    pub fn set_length(&mut self, v: u16) {
        set_be_u16(self.buffer.as_mut(), udp::LENGTH, v)
    }
    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        set_be_u16(self.buffer.as_mut(), udp::CHECKSUM, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_round_trips_and_checksums() {
        let mut b = [0u8; 28];
        let mut ip = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        ip.set_version_and_len();
        ip.set_total_len(28);
        ip.set_dont_fragment();
        ip.set_ttl(64);
        ip.set_protocol(IPPROTO_UDP);
        ip.set_src_addr(Ipv4Addr::new(198, 18, 0, 1));
        ip.set_dst_addr(Ipv4Addr::new(198, 18, 0, 2));
        ip.fill_checksum();
        let ip = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!((ip.version(), ip.header_len(), ip.total_len(), ip.ttl(), ip.protocol()), (4, 20, 28, 64, 17));
        assert!(ip.dont_fragment() && !ip.is_fragment() && ip.checksum_ok());
        assert_eq!((ip.src_addr(), ip.dst_addr()), (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2)));
        assert_eq!(ip.payload().unwrap().len(), 8);
        // A well-known header (RFC 1071 style example from Wikipedia): checksum 0xb861.
        let mut w = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00,
            0xc7,
        ];
        Ipv4Packet::new_unchecked(&mut w[..]).fill_checksum();
        assert_eq!(&w[10..12], &[0xb8, 0x61]);
        assert!(Ipv4Packet::new_checked(&b[..19]).is_err());
    }

    #[test]
    fn udp_round_trips() {
        let mut b = [0u8; 12];
        let mut u = UdpPacket::new_checked(&mut b[..]).unwrap();
        u.set_src_port(4000);
        u.set_dst_port(7148);
        u.set_length(11);
        let u = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.length()), (4000, 7148, 11));
        assert_eq!(u.payload().unwrap().len(), 3);
        assert_eq!(&b[..6], &[0x0f, 0xa0, 0x1b, 0xec, 0, 11]);
        assert!(UdpPacket::new_checked(&b[..7]).is_err());
        let mut short = b;
        short[5] = 7;
        assert_eq!(UdpPacket::new_checked(&short[..]).unwrap().payload(), None);
    }

    #[test]
    fn ipv6_round_trips_and_the_udp_checksum_verifies() {
        let (src, dst): (Ipv6Addr, Ipv6Addr) = ("2001:2::1".parse().unwrap(), "2001:2::2".parse().unwrap());
        let payload = b"wirespeed!";
        let mut b = [0u8; 40 + 8 + 10];
        let mut ip = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        ip.set_version();
        ip.set_payload_len(18);
        ip.set_next_header(IPPROTO_UDP);
        ip.set_hop_limit(64);
        ip.set_src_addr(src);
        ip.set_dst_addr(dst);
        let mut h = [0u8; 8];
        let mut u = UdpPacket::new_unchecked(&mut h[..]);
        u.set_src_port(4000);
        u.set_dst_port(7148);
        u.set_length(18);
        let c = udp6_checksum(src, dst, &h, payload);
        UdpPacket::new_unchecked(&mut h[..]).set_checksum(c);
        b[40..48].copy_from_slice(&h);
        b[48..].copy_from_slice(payload);
        let ip = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!((ip.version(), ip.payload_len(), ip.next_header(), ip.hop_limit()), (6, 18, 17, 64));
        assert_eq!((ip.src_addr(), ip.dst_addr()), (src, dst));
        let udp = ip.into_payload().unwrap();
        assert_eq!(UdpPacket::new_checked(udp).unwrap().checksum(), c);
        // Verifying: the sum over pseudo-header and datagram with its checksum folds to 0.
        let all = sum_words(&src.octets()) + sum_words(&dst.octets()) + 18 + 17 + sum_words(udp);
        assert_eq!(fold_checksum(all), 0);
        assert!(Ipv6Packet::new_checked(&b[..39]).is_err());
        assert_eq!(Ipv6Packet::new_checked(&b[..50]).unwrap().into_payload(), None, "cut short");
    }

    #[test]
    fn ethernet_walks_vlan_tags() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x08, 0x00, 0xAA]);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.inner(), Some((ETHERTYPE_IPV4, &[0xAA][..])));
        assert_eq!(EthernetFrame::new_checked(&f[..17]).unwrap().inner(), None, "tag cut short");
        assert!(EthernetFrame::new_checked(&f[..13]).is_err());
    }
}
