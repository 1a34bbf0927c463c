//! Classic pcap (formats.md section 5): the global header, the record header, and the link
//! layers `verify` takes apart, as views written once for the writer and the readers.
//!
//! Our files are little-endian, nanosecond, link type 101 (raw IP: each packet starts with an
//! IPv4 or an IPv6 header, as its first nibble says) with synthesized IP/UDP headers
//! ([`crate::wire::net`]): an IPv4 sender's datagrams get an IPv4 header (UDP checksum 0, which
//! IPv4 allows), an IPv6 sender's an IPv6 header (payload length, next header 17, hop limit 64)
//! and a computed UDP checksum, which IPv6 requires. Files of other tools may be big-endian,
//! microsecond, and Ethernet or Linux-cooked framed; the views read those too. An IPv6 packet
//! with extension headers (fragments included) is not taken apart: it counts as no datagram.

use crate::wire::net::{
    udp6_checksum, EthernetFrame, Ipv4Packet, Ipv6Packet, UdpPacket, ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPPROTO_UDP,
    IPV6_HEADER_LEN, UDP_HEADER_LEN,
};
use crate::wire::view::{be_u16, check_len, le_u32, set_le_u16, set_le_u32, Truncated};
use crate::wire::ByteOrder;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};

/// pcap magic for nanosecond time stamps, as stored little-endian.
pub const PCAP_MAGIC_NS: u32 = 0xA1B2_3C4D;
/// pcap magic for microsecond time stamps.
pub const PCAP_MAGIC_US: u32 = 0xA1B2_C3D4;
/// pcapng's section header block type (a pcapng file starts with it).
pub const PCAPNG_MAGIC: u32 = 0x0A0D_0D0A;
/// pcap global header length.
pub const PCAP_GLOBAL_LEN: usize = 24;
/// pcap record header length.
pub const PCAP_RECORD_LEN: usize = 16;
/// pcap record header + IPv4 header + UDP header: what precedes each IPv4 sender's payload in
/// our pcap files.
pub const PCAP_RECORD_OVERHEAD: usize = PCAP_RECORD_LEN + 20 + 8;
/// pcap record header + IPv6 header + UDP header: what precedes each IPv6 sender's payload.
pub const PCAP_RECORD_OVERHEAD_V6: usize = PCAP_RECORD_LEN + IPV6_HEADER_LEN + UDP_HEADER_LEN;
/// LINKTYPE_RAW: each packet starts with an IPv4 (or IPv6) header.
pub const LINKTYPE_RAW: u32 = 101;

/// Where each field of the global header sits (in the file's byte order).
mod global {
    use crate::wire::view::Field;
    pub const MAGIC: Field = 0..4;
    pub const VERSION_MAJOR: Field = 4..6;
    pub const VERSION_MINOR: Field = 6..8;
    pub const SNAPLEN: Field = 16..20;
    /// Link type in the low 28 bits (the high bits carry an FCS length in some writers).
    pub const LINKTYPE: Field = 20..24;
}

/// Byte order and time-stamp unit a pcap magic number announces: `None` for anything else.
pub fn magic_of(head: &[u8]) -> Option<(ByteOrder, bool)> {
    let m: [u8; 4] = head.get(global::MAGIC)?.try_into().ok()?;
    match (u32::from_le_bytes(m), u32::from_be_bytes(m)) {
        (PCAP_MAGIC_NS, _) => Some((ByteOrder::Le, true)),
        (PCAP_MAGIC_US, _) => Some((ByteOrder::Le, false)),
        (_, PCAP_MAGIC_NS) => Some((ByteOrder::Be, true)),
        (_, PCAP_MAGIC_US) => Some((ByteOrder::Be, false)),
        _ => None,
    }
}

fn u32_in(order: ByteOrder, b: &[u8], f: std::ops::Range<usize>) -> u32 {
    match order {
        ByteOrder::Le => le_u32(b, f),
        ByteOrder::Be => crate::wire::view::be_u32(b, f),
    }
}

/// A view of a pcap global header.
#[derive(Clone, Copy, Debug)]
pub struct GlobalHeader<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GlobalHeader<T> {
    /// A view, refused when the buffer is shorter than the 24-byte header.
    pub fn new_checked(buffer: T) -> Result<GlobalHeader<T>, Truncated> {
        check_len(buffer.as_ref(), PCAP_GLOBAL_LEN)?;
        Ok(GlobalHeader { buffer })
    }

    /// What the header says, `None` when the magic number is not a classic pcap one.
    pub fn info(&self) -> Option<PcapInfo> {
        let b = self.buffer.as_ref();
        let (order, nanos) = magic_of(b)?;
        let linktype = u32_in(order, b, global::LINKTYPE) & 0x0fff_ffff;
        Some(PcapInfo { nanos, big_endian: order == ByteOrder::Be, linktype })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GlobalHeader<T> {
    /// Write our files' header: little-endian, nanoseconds, version 2.4, snap length 65535,
    /// `linktype`; zone and accuracy zero.
    pub fn write_ours(&mut self, linktype: u32) {
        let b = self.buffer.as_mut();
        set_le_u32(b, global::MAGIC, PCAP_MAGIC_NS);
        set_le_u16(b, global::VERSION_MAJOR, 2);
        set_le_u16(b, global::VERSION_MINOR, 4);
        set_le_u32(b, global::SNAPLEN, 65535);
        set_le_u32(b, global::LINKTYPE, linktype);
    }
}

/// Where each field of a record header sits (in the file's byte order).
mod record {
    use crate::wire::view::Field;
    pub const TS_SEC: Field = 0..4;
    /// Fraction of the second: nanoseconds or microseconds, as the magic says.
    pub const TS_FRAC: Field = 4..8;
    pub const CAPLEN: Field = 8..12;
    pub const ORIGLEN: Field = 12..16;
}

/// A view of a pcap record header, in the byte order of its file.
#[derive(Clone, Copy, Debug)]
pub struct RecordHeader<T> {
    buffer: T,
    order: ByteOrder,
}

impl<T: AsRef<[u8]>> RecordHeader<T> {
    /// A view, refused when the buffer is shorter than the 16-byte record header.
    pub fn new_checked(buffer: T, order: ByteOrder) -> Result<RecordHeader<T>, Truncated> {
        check_len(buffer.as_ref(), PCAP_RECORD_LEN)?;
        Ok(RecordHeader { buffer, order })
    }

    fn u32(&self, f: std::ops::Range<usize>) -> u32 {
        u32_in(self.order, self.buffer.as_ref(), f)
    }

    /// Seconds of the time stamp.
    pub fn ts_sec(&self) -> u32 {
        self.u32(record::TS_SEC)
    }
    /// Fraction of the time stamp (ns or µs, per the file's magic).
    pub fn ts_frac(&self) -> u32 {
        self.u32(record::TS_FRAC)
    }
    /// Bytes captured (what follows the header in the file).
    pub fn caplen(&self) -> u32 {
        self.u32(record::CAPLEN)
    }
    /// Bytes the packet had on the wire.
    pub fn origlen(&self) -> u32 {
        self.u32(record::ORIGLEN)
    }
    /// The time stamp in nanoseconds since the Unix epoch.
    pub fn unix_ns(&self, nanos: bool) -> u64 {
        let frac = u64::from(self.ts_frac());
        u64::from(self.ts_sec()) * 1_000_000_000 + if nanos { frac } else { frac * 1000 }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RecordHeader<T> {
    fn set_u32(&mut self, f: std::ops::Range<usize>, v: u32) {
        let b = self.buffer.as_mut();
        match self.order {
            ByteOrder::Le => set_le_u32(b, f, v),
            ByteOrder::Be => crate::wire::view::set_be_u32(b, f, v),
        }
    }
    /// Set the time stamp (nanosecond files).
    pub fn set_unix_ns(&mut self, unix_ns: u64) {
        self.set_u32(record::TS_SEC, (unix_ns / 1_000_000_000) as u32);
        self.set_u32(record::TS_FRAC, (unix_ns % 1_000_000_000) as u32);
    }
    /// Set the captured and original length (a whole packet).
    pub fn set_len(&mut self, len: u32) {
        self.set_u32(record::CAPLEN, len);
        self.set_u32(record::ORIGLEN, len);
    }
}

/// The 24-byte pcap global header of our files.
pub fn pcap_global_header() -> [u8; PCAP_GLOBAL_LEN] {
    let mut h = [0u8; PCAP_GLOBAL_LEN];
    GlobalHeader { buffer: &mut h[..] }.write_ours(LINKTYPE_RAW);
    h
}

/// The pcap record header and synthesized IPv4/UDP headers for one datagram of `len` payload
/// bytes from `src` to `dst`, received at `unix_ns`. Built on the stack in the capture loop.
#[inline]
pub fn pcap_record_header(
    unix_ns: u64,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    len: usize,
) -> [u8; PCAP_RECORD_OVERHEAD] {
    let mut h = [0u8; PCAP_RECORD_OVERHEAD];
    let (rec, rest) = h.split_at_mut(PCAP_RECORD_LEN);
    let (ip, udp) = rest.split_at_mut(20);
    let cap = (len + 28) as u32;
    let mut r = RecordHeader { buffer: rec, order: ByteOrder::Le };
    r.set_unix_ns(unix_ns);
    r.set_len(cap);
    let mut ip = Ipv4Packet::new_unchecked(ip);
    ip.set_version_and_len();
    ip.set_total_len(cap as u16);
    ip.set_dont_fragment();
    ip.set_ttl(64);
    ip.set_protocol(IPPROTO_UDP);
    ip.set_src_addr(*src.ip());
    ip.set_dst_addr(*dst.ip());
    ip.fill_checksum();
    let mut udp = UdpPacket::new_unchecked(udp);
    udp.set_src_port(src.port());
    udp.set_dst_port(dst.port());
    udp.set_length((len + 8) as u16);
    h
}

/// The pcap record header and synthesized IPv6/UDP headers for one datagram with `payload`
/// from `src` to `dst`, received at `unix_ns`, the UDP checksum computed over the payload (one
/// pass over bytes the capture has just touched). Built on the stack in the capture loop.
#[inline]
pub fn pcap_record_header_v6(
    unix_ns: u64,
    src: SocketAddrV6,
    dst: SocketAddrV6,
    payload: &[u8],
) -> [u8; PCAP_RECORD_OVERHEAD_V6] {
    let mut h = [0u8; PCAP_RECORD_OVERHEAD_V6];
    let (rec, rest) = h.split_at_mut(PCAP_RECORD_LEN);
    let (ip, udp) = rest.split_at_mut(IPV6_HEADER_LEN);
    let udp_len = (payload.len() + UDP_HEADER_LEN) as u16;
    let mut r = RecordHeader { buffer: rec, order: ByteOrder::Le };
    r.set_unix_ns(unix_ns);
    r.set_len((IPV6_HEADER_LEN + usize::from(udp_len)) as u32);
    let mut ip = Ipv6Packet::new_unchecked(ip);
    ip.set_version();
    ip.set_payload_len(udp_len);
    ip.set_next_header(IPPROTO_UDP);
    ip.set_hop_limit(64);
    ip.set_src_addr(*src.ip());
    ip.set_dst_addr(*dst.ip());
    let mut u = [0u8; UDP_HEADER_LEN];
    let mut view = UdpPacket::new_unchecked(&mut u[..]);
    view.set_src_port(src.port());
    view.set_dst_port(dst.port());
    view.set_length(udp_len);
    let sum = udp6_checksum(*src.ip(), *dst.ip(), &u, payload);
    UdpPacket::new_unchecked(&mut u[..]).set_checksum(sum);
    udp.copy_from_slice(&u);
    h
}

/// A pcap file's global parameters, as read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcapInfo {
    /// Time stamps are nanoseconds (else microseconds).
    pub nanos: bool,
    /// Fields are big-endian (written on a big-endian host).
    pub big_endian: bool,
    /// Link type (1 Ethernet, 101 raw IPv4/IPv6, 228 raw IPv4, 229 raw IPv6, 113/276 Linux
    /// cooked v1/v2).
    pub linktype: u32,
}

impl PcapInfo {
    /// The byte order of the file's headers.
    pub fn order(&self) -> ByteOrder {
        if self.big_endian {
            ByteOrder::Be
        } else {
            ByteOrder::Le
        }
    }
}

/// pcap link types whose packets [`parse_pcap_packet`] can take apart.
pub const LINKTYPES_READ: [u32; 6] = [1, 101, 228, 229, 113, 276];

/// Read a pcap global header; None when `b` does not start with one.
pub fn parse_pcap_global(b: &[u8]) -> Option<PcapInfo> {
    GlobalHeader::new_checked(b).ok()?.info()
}

/// One pcap record's parts.
#[derive(Clone, Copy, Debug)]
pub struct PcapPacket<'a> {
    /// Time stamp, nanoseconds since the Unix epoch.
    pub unix_ns: u64,
    /// Source of the UDP datagram, when the packet is IPv4/UDP or IPv6/UDP.
    pub src: Option<SocketAddr>,
    /// UDP payload, when the packet is an unfragmented IPv4/UDP or IPv6/UDP (no extension
    /// headers) datagram captured whole.
    pub payload: Option<&'a [u8]>,
}

/// Linux cooked capture v1 (link type 113): 16-byte header, protocol last.
mod sll {
    use crate::wire::view::Field;
    pub const PROTOCOL: Field = 14..16;
    pub const LEN: usize = 16;
}

/// Linux cooked capture v2 (276, `tcpdump -i any` on current libpcap): 20-byte header,
/// protocol first.
mod sll2 {
    use crate::wire::view::Field;
    pub const PROTOCOL: Field = 0..2;
    pub const LEN: usize = 20;
}

/// The IP packet inside a record's link layer, when the link layer says IPv4 or IPv6.
fn link_payload(linktype: u32, data: &[u8]) -> Option<&[u8]> {
    let ip = |et: u16| et == ETHERTYPE_IPV4 || et == ETHERTYPE_IPV6;
    match linktype {
        101 | 228 | 229 => Some(data),
        1 => match EthernetFrame::new_checked(data).ok()?.into_inner()? {
            (et, p) if ip(et) => Some(p),
            _ => None,
        },
        113 => ip(be_u16(data.get(sll::PROTOCOL)?, 0..2)).then(|| &data[sll::LEN..]),
        276 => (data.len() >= sll2::LEN && ip(be_u16(data, sll2::PROTOCOL))).then(|| &data[sll2::LEN..]),
        _ => None,
    }
}

/// Split a record's bytes (after its 16-byte header) into the UDP source and payload.
pub fn parse_pcap_packet<'a>(info: &PcapInfo, data: &'a [u8], orig_len: u32) -> (Option<SocketAddr>, Option<&'a [u8]>) {
    let Some(ip) = link_payload(info.linktype, data) else { return (None, None) };
    let (src, udp) = match ip.first().map(|b| b >> 4) {
        Some(4) if info.linktype != 229 => {
            let Ok(ip) = Ipv4Packet::new_checked(ip) else { return (None, None) };
            if ip.protocol() != IPPROTO_UDP || ip.is_fragment() {
                return (None, None);
            }
            let Some(udp) = ip.into_payload().and_then(|p| UdpPacket::new_checked(p).ok()) else {
                return (None, None);
            };
            (SocketAddr::V4(SocketAddrV4::new(ip.src_addr(), udp.src_port())), udp)
        }
        Some(6) if info.linktype != 228 => {
            // UDP right after the fixed header only: extension headers (a fragment header
            // among them) make it no datagram of ours.
            let Ok(ip) = Ipv6Packet::new_checked(ip) else { return (None, None) };
            if ip.next_header() != IPPROTO_UDP {
                return (None, None);
            }
            let Some(udp) = ip.into_payload().and_then(|p| UdpPacket::new_checked(p).ok()) else {
                return (None, None);
            };
            (SocketAddr::V6(SocketAddrV6::new(ip.src_addr(), udp.src_port(), 0, 0)), udp)
        }
        _ => return (None, None),
    };
    let whole = data.len() as u32 == orig_len;
    match udp.into_payload() {
        Some(payload) if whole => (Some(src), Some(payload)),
        _ => (Some(src), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::view::le_u16;
    use std::net::Ipv4Addr;

    fn version_of(b: &[u8]) -> (u16, u16) {
        (le_u16(b, global::VERSION_MAJOR), le_u16(b, global::VERSION_MINOR))
    }

    /// The bytes the writer produced before the views (recorded files stay byte-identical).
    #[test]
    fn headers_are_the_bytes_written_before() {
        let src = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 4000);
        let dst = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 7148);
        let want: [u8; PCAP_RECORD_OVERHEAD] = [
            0x00, 0xf1, 0x53, 0x65, 0x15, 0xcd, 0x5b, 0x07, 0x7c, 0x22, 0x00, 0x00, 0x7c, 0x22, 0x00, 0x00, 0x45, 0x00,
            0x22, 0x7c, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x46, 0x5a, 0xc6, 0x12, 0x00, 0x01, 0x0a, 0x01, 0x02, 0x03,
            0x0f, 0xa0, 0x1b, 0xec, 0x22, 0x68, 0x00, 0x00,
        ];
        assert_eq!(pcap_record_header(1_700_000_000_123_456_789, src, dst, 8800), want);
        let global = [
            0x4d, 0x3c, 0xb2, 0xa1, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
            0x00, 0x00, 0x65, 0x00, 0x00, 0x00,
        ];
        assert_eq!(pcap_global_header(), global);
    }

    #[test]
    fn record_header_round_trips_in_both_orders() {
        for order in [ByteOrder::Le, ByteOrder::Be] {
            let mut b = [0u8; 16];
            let mut r = RecordHeader::new_checked(&mut b[..], order).unwrap();
            r.set_unix_ns(1_700_000_000_123_456_789);
            r.set_len(1108);
            let r = RecordHeader::new_checked(&b[..], order).unwrap();
            assert_eq!((r.ts_sec(), r.ts_frac(), r.caplen(), r.origlen()), (1_700_000_000, 123_456_789, 1108, 1108));
            assert_eq!(r.unix_ns(true), 1_700_000_000_123_456_789);
            let want = if order == ByteOrder::Le { 1108u32.to_le_bytes() } else { 1108u32.to_be_bytes() };
            assert_eq!(&b[8..12], &want);
        }
        assert!(RecordHeader::new_checked(&[0u8; 15][..], ByteOrder::Le).is_err());
    }

    #[test]
    fn global_header_as_written_and_in_other_orders() {
        let h = pcap_global_header();
        assert_eq!(&h[..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(version_of(&h), (2, 4));
        assert_eq!(&h[16..24], &[0xff, 0xff, 0, 0, 101, 0, 0, 0]);
        let mut be = [0u8; 24];
        be[..4].copy_from_slice(&PCAP_MAGIC_US.to_be_bytes());
        be[20..24].copy_from_slice(&(0x1000_0001u32).to_be_bytes());
        assert_eq!(parse_pcap_global(&be), Some(PcapInfo { nanos: false, big_endian: true, linktype: 1 }));
        assert_eq!(parse_pcap_global(&be[..23]), None);
        assert_eq!(magic_of(&PCAPNG_MAGIC.to_le_bytes()), None);
    }

    #[test]
    fn synthesized_headers_parse_back_through_every_link_layer() {
        let src = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 4000);
        let dst = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 7148);
        let h = pcap_record_header(5, src, dst, 3);
        let mut ip = h[16..].to_vec();
        ip.extend_from_slice(&[1, 2, 3]);
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x81, 0x00, 0, 7, 0x08, 0x00]);
        eth.extend_from_slice(&ip);
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(&ip);
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(&ip);
        for (lt, data) in [(101, &ip), (228, &ip), (1, &eth), (113, &sll), (276, &sll2)] {
            let info = PcapInfo { nanos: true, big_endian: false, linktype: lt };
            let (s, p) = parse_pcap_packet(&info, data, data.len() as u32);
            assert_eq!(s, Some(SocketAddr::V4(src)), "link type {lt}");
            assert_eq!(p, Some(&[1u8, 2, 3][..]), "link type {lt}");
            assert_eq!(parse_pcap_packet(&info, data, data.len() as u32 + 1).1, None, "cut short: {lt}");
        }
        let mut frag = ip.clone();
        frag[6] |= 0x20; // more fragments
        let raw = PcapInfo { nanos: true, big_endian: false, linktype: 101 };
        assert_eq!(parse_pcap_packet(&raw, &frag, frag.len() as u32), (None, None));
    }

    #[test]
    fn ipv6_headers_carry_a_valid_checksum_and_parse_back() {
        let src = SocketAddrV6::new("2001:2::1".parse().unwrap(), 4000, 0, 0);
        let dst = SocketAddrV6::new("2001:2::2".parse().unwrap(), 7148, 0, 0);
        let payload = [1u8, 2, 3, 4, 5];
        let h = pcap_record_header_v6(5, src, dst, &payload);
        let r = RecordHeader::new_checked(&h[..16], ByteOrder::Le).unwrap();
        assert_eq!((r.caplen(), r.origlen()), (40 + 8 + 5, 40 + 8 + 5));
        let mut ip = h[16..].to_vec();
        ip.extend_from_slice(&payload);
        assert_eq!(ip[0] >> 4, 6);
        assert_eq!(&ip[4..8], &[0, 13, 17, 64], "payload length 13, next header UDP, hop limit 64");
        // The checksum verifies: pseudo-header + datagram folds to zero.
        use crate::wire::net::{fold_checksum, sum_words};
        let all = sum_words(&src.ip().octets()) + sum_words(&dst.ip().octets()) + 13 + 17 + sum_words(&ip[40..]);
        assert_eq!(fold_checksum(all), 0);
        assert_ne!(&ip[46..48], &[0, 0]);
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x86, 0xdd]);
        eth.extend_from_slice(&ip);
        let mut sll2 = vec![0x86, 0xdd];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(&ip);
        for (lt, data) in [(101, &ip), (229, &ip), (1, &eth), (276, &sll2)] {
            let info = PcapInfo { nanos: true, big_endian: false, linktype: lt };
            let (s, p) = parse_pcap_packet(&info, data, data.len() as u32);
            assert_eq!(s, Some(SocketAddr::V6(src)), "link type {lt}");
            assert_eq!(p, Some(&payload[..]), "link type {lt}");
        }
        let v4only = PcapInfo { nanos: true, big_endian: false, linktype: 228 };
        assert_eq!(parse_pcap_packet(&v4only, &ip, ip.len() as u32), (None, None), "228 is IPv4 only");
        // An extension header (hop-by-hop) before UDP: not a datagram of ours.
        let mut ext = ip.clone();
        ext[6] = 0;
        let raw = PcapInfo { nanos: true, big_endian: false, linktype: 101 };
        assert_eq!(parse_pcap_packet(&raw, &ext, ext.len() as u32), (None, None));
    }
}
