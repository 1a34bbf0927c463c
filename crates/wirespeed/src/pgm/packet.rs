//! PGM packet codec (RFC 3208), byte for byte as OpenPGM 5.3 puts PGM packets in UDP payloads.
//!
//! With UDP encapsulation (OpenPGM's `PGM_UDP_ENCAP_UCAST_PORT`/`PGM_UDP_ENCAP_MCAST_PORT`,
//! ZeroMQ's `epgm://`) a UDP datagram's payload is exactly one PGM packet: the 16-byte PGM
//! header ([`HEADER_LEN`]), the type-specific part, option extensions, then the data (TSDU).
//! No IP header precedes it.
//!
//! [`parse`] checks everything a receiver can check about one packet on its own (checksum,
//! type, every length, address families, the option chain, fragment sanity) and never
//! panics; the writers build the packets OpenPGM builds, with the same field order, flags and
//! options, and never allocate.
//!
//! Where RFC 3208 and OpenPGM 5.3 differ, this follows OpenPGM and says so (`OpenPGM:`).
//!
//! Facts checked against OpenPGM 5.3.128 (source and captures, see the tests):
//! - ODATA carries no options unless the APDU is fragmented (then OPT_LENGTH + OPT_FRAGMENT)
//!   or PGMCC is enabled (OPT_PGMCC_DATA); plain `pgm_send` of one TSDU sends options byte 0.
//!   (The fragment layout is from source.c `send_apdu`: Debian's libpgm 5.3.128 crashed in
//!   `pgm_send`/`pgm_sendv` of any APDU larger than one TSDU, a misaligned SSE store in its
//!   checksum-and-copy, so no fragmented ODATA could be captured.)
//! - NAK/NNAK/SPMR go upstream with the ports swapped: header sport = the data's destination
//!   port, header dport = the source's sport, GSI = the source's GSI. NCF goes downstream to the
//!   group exactly like ODATA/SPM: sport = source's sport, dport = data destination port. So an
//!   NCF's TSI is (gsi, sport) like any downstream packet, not (gsi, dport).
//! - The source drops a NAK unless its source NLA equals the source's own unicast NLA (the one
//!   its SPMs carry) and its group NLA equals the group the source sends to; the header's sport
//!   must be the source's data destination port and the GSI its own.
//! - The source answers a NAK at once with an NCF (same sqns and NLAs, options byte
//!   PRESENT|NETWORK with a list) and then the RDATA: the stored ODATA with only the type byte,
//!   the trailing edge and the checksum changed ([`set_repair`]). An OpenPGM source reads NAKs
//!   only inside `pgm_recv`, so a sending application that never calls it never repairs.

use super::{sqn_lt, Gsi, Tsi};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Length of the common PGM header (`struct pgm_header`).
pub const HEADER_LEN: usize = 16;
/// ODATA/RDATA header without options: PGM header + data_sqn + data_trail.
pub const DATA_HEADER_LEN: usize = 24;
/// Sequence numbers one NAK/NNAK/NCF can carry: the one in the NAK body plus OPT_NAK_LIST's 62.
pub const MAX_NAK_LIST: usize = 63;
/// Largest SPM [`write_spm`] writes: header 16 + sqn/trail/lead 12 + AFI 4 + IPv6 NLA 16 +
/// OPT_LENGTH 4 + OPT_FIN 4.
pub const MAX_SPM_LEN: usize = 56;
/// Largest NAK/NNAK/NCF [`write_nak`] writes: header 16 + sqn 4 + two IPv6 NLAs with AFIs
/// 2 × 20 + OPT_LENGTH 4 + OPT_NAK_LIST 4 + 62 × 4.
pub const MAX_NAK_LEN: usize = 316;
/// Length of the SPMR [`write_spmr`] writes (header only).
pub const SPMR_LEN: usize = HEADER_LEN;
/// Largest APDU OpenPGM accepts in a fragment option (`PGM_MAX_APDU`, a DoS limit,
/// MS08-036); [`parse`] rejects fragments claiming more.
pub const MAX_APDU: u32 = u16::MAX as u32;
/// Most option extensions after OPT_LENGTH [`parse`] walks (RFC 3208 section 9 / OpenPGM's
/// "max 16 per packet").
pub const MAX_OPTIONS: usize = 16;

/// Packet type byte values (version 0 in the high nibble).
pub mod kind {
    /// Source path message (8.1).
    pub const SPM: u8 = 0x00;
    /// Poll request (14.7.1).
    pub const POLL: u8 = 0x01;
    /// Poll response (14.7.2).
    pub const POLR: u8 = 0x02;
    /// Original data (8.2).
    pub const ODATA: u8 = 0x04;
    /// Repair data (8.2).
    pub const RDATA: u8 = 0x05;
    /// Negative acknowledgement (8.3).
    pub const NAK: u8 = 0x08;
    /// Null NAK (8.3).
    pub const NNAK: u8 = 0x09;
    /// NAK confirmation (8.3).
    pub const NCF: u8 = 0x0a;
    /// SPM request (13.6).
    pub const SPMR: u8 = 0x0c;
    /// PGMCC congestion-control ACK.
    pub const ACK: u8 = 0x0d;
}

/// Bits of the header's options byte ([`Header::options`]).
pub mod flag {
    /// Option extensions follow the type-specific part.
    pub const PRESENT: u8 = 0x01;
    /// Network-significant options present (OpenPGM sets it with OPT_NAK_LIST).
    pub const NETWORK: u8 = 0x02;
    /// Variable-length parity packets (FEC).
    pub const VAR_PKTLEN: u8 = 0x40;
    /// A parity (FEC) packet: its payload is not application data.
    pub const PARITY: u8 = 0x80;
}

/// Option type values (low 7 bits of an option's first byte).
pub mod opt {
    /// Total length of all options; always first.
    pub const LENGTH: u8 = 0x00;
    /// APDU fragmentation.
    pub const FRAGMENT: u8 = 0x01;
    /// Further requested sequence numbers of a NAK/NNAK/NCF.
    pub const NAK_LIST: u8 = 0x02;
    /// Session start.
    pub const SYN: u8 = 0x0d;
    /// Session end.
    pub const FIN: u8 = 0x0e;
    /// Session reset.
    pub const RST: u8 = 0x0f;
    /// Set on the last option of the chain.
    pub const END: u8 = 0x80;
    /// Mask of the type bits.
    pub const MASK: u8 = 0x7f;
}

const AFI_IP: u16 = 1;
const AFI_IP6: u16 = 2;
const OPT_LENGTH_LEN: usize = 4;
const OPT_FRAGMENT_LEN: usize = 16; // 3-byte option header + reserved + 3 × u32
const OPT_FLAG_LEN: usize = 4; // OPT_FIN/SYN/RST: header + reserved

/// Which of the three NAK-shaped packets (same body, RFC 3208 8.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakKind {
    /// Receiver asks the source for repairs.
    Nak,
    /// Null NAK (from a DLR): counted by the source, nothing repaired.
    Nnak,
    /// The source confirms it heard a NAK (sent to the group, suppresses other receivers' NAKs).
    Ncf,
}

impl NakKind {
    /// The packet type byte.
    pub fn type_byte(self) -> u8 {
        match self {
            NakKind::Nak => kind::NAK,
            NakKind::Nnak => kind::NNAK,
            NakKind::Ncf => kind::NCF,
        }
    }
}

/// The common PGM header, in host order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Source port: the TSI's sport downstream, the data destination port upstream.
    pub sport: u16,
    /// Destination port: the data destination port downstream, the TSI's sport upstream.
    pub dport: u16,
    /// The type byte (see [`kind`]).
    pub kind: u8,
    /// The options byte (see [`flag`]).
    pub options: u8,
    /// The checksum field as sent (0: none).
    pub checksum: u16,
    /// Global source id of the session the packet belongs to (or is about).
    pub gsi: Gsi,
    /// Length of the data after header, type-specific part and options.
    pub tsdu_len: u16,
}

/// The sequence numbers of one NAK/NNAK/NCF, without allocation.
#[derive(Clone, Copy)]
pub struct NakList {
    sqns: [u32; MAX_NAK_LIST],
    len: u8,
}

impl NakList {
    /// A list of the first [`MAX_NAK_LIST`] of `sqns` (any beyond are dropped).
    pub fn new(sqns: &[u32]) -> Self {
        let n = sqns.len().min(MAX_NAK_LIST);
        let mut list = NakList { sqns: [0; MAX_NAK_LIST], len: n as u8 };
        list.sqns[..n].copy_from_slice(&sqns[..n]);
        list
    }

    /// The sequence numbers, the NAK body's first.
    pub fn as_slice(&self) -> &[u32] {
        &self.sqns[..self.len as usize]
    }

    /// How many sequence numbers.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// No sequence numbers (never the case for a parsed packet).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `sqn`; false (and nothing changed) when the list is full.
    pub fn push(&mut self, sqn: u32) -> bool {
        if self.len() == MAX_NAK_LIST {
            return false;
        }
        self.sqns[self.len()] = sqn;
        self.len += 1;
        true
    }
}

impl Default for NakList {
    fn default() -> Self {
        NakList::new(&[])
    }
}

impl PartialEq for NakList {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for NakList {}

impl std::fmt::Debug for NakList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// OPT_FRAGMENT: where this TSDU sits in its APDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// Sequence number of the APDU's first fragment.
    pub first_sqn: u32,
    /// Byte offset of this fragment in the APDU.
    pub offset: u32,
    /// Length of the whole APDU.
    pub apdu_len: u32,
}

/// One parsed PGM packet; `payload` borrows the buffer.
// The NAK variant holds its list inline (no allocation per packet on the receive path), which
// makes it the large one; packets are parsed into locals, not stored in bulk.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    /// Source path message: the transmit window's edges and the source's unicast address.
    Spm {
        /// Header.
        hdr: Header,
        /// SPM sequence number (its own space).
        sqn: u32,
        /// Trailing edge of the transmit window.
        trail: u32,
        /// Leading edge (last sent data sqn; trail - 1 when nothing sent yet).
        lead: u32,
        /// Path NLA: where NAKs go.
        nla: IpAddr,
        /// OPT_FIN: the session ends.
        fin: bool,
    },
    /// ODATA (`repair == false`) or RDATA.
    Data {
        /// Header.
        hdr: Header,
        /// RDATA rather than ODATA.
        repair: bool,
        /// Data sequence number.
        sqn: u32,
        /// Trailing edge of the transmit window when sent.
        trail: u32,
        /// The TSDU.
        payload: &'a [u8],
        /// OPT_FRAGMENT, when this TSDU is part of a larger APDU (OpenPGM: a fragment option
        /// whose APDU is exactly this TSDU is reported as none, as its receive window does).
        fragment: Option<Fragment>,
        /// OPT_FIN.
        fin: bool,
    },
    /// NAK, NNAK or NCF.
    Nak {
        /// Header.
        hdr: Header,
        /// Which of the three.
        kind: NakKind,
        /// Requested sequence numbers (1 to [`MAX_NAK_LIST`]).
        sqns: NakList,
        /// Unicast address of the source the NAK is for.
        source_nla: IpAddr,
        /// Multicast group the data was sent to.
        group_nla: IpAddr,
    },
    /// SPM request (a receiver that has data but no SPM yet).
    Spmr {
        /// Header.
        hdr: Header,
    },
    /// POLL, POLR or ACK: well formed, not used by wirespeed.
    Other {
        /// Header.
        hdr: Header,
    },
}

impl Packet<'_> {
    /// The common header.
    pub fn header(&self) -> &Header {
        match self {
            Packet::Spm { hdr, .. }
            | Packet::Data { hdr, .. }
            | Packet::Nak { hdr, .. }
            | Packet::Spmr { hdr }
            | Packet::Other { hdr } => hdr,
        }
    }

    /// The session the packet belongs to: (gsi, sport) for downstream packets (SPM, ODATA,
    /// RDATA, NCF, POLL), (gsi, dport) for upstream ones (NAK, NNAK, SPMR, POLR, ACK), whose
    /// ports are swapped. OpenPGM: an NCF is sent by the source with its own sport, as
    /// `send_ncf` in source.c does, so it is downstream here too.
    pub fn tsi(&self) -> Tsi {
        let h = self.header();
        let upstream = matches!(h.kind, kind::NAK | kind::NNAK | kind::SPMR | kind::POLR | kind::ACK);
        Tsi { gsi: h.gsi, sport: if upstream { h.dport } else { h.sport } }
    }
}

/// Why [`parse`] refused a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// Shorter than the header or the type-specific part.
    TooShort,
    /// The checksum field does not match the packet.
    BadChecksum,
    /// ODATA/RDATA with checksum field 0. OpenPGM: RFC 3208 lets 0 mean "no checksum" for
    /// every type, OpenPGM (`pgm_parse`) insists on one for data packets; so does this.
    MissingChecksum,
    /// TSDU length disagrees with the bytes that follow header, body and options.
    BadLength,
    /// Option extensions: OPT_LENGTH missing or wrong, an option out of bounds, too short,
    /// too many, no OPT_END, or a known option of the wrong size.
    BadOptions,
    /// Type byte not a PGM version 0 type.
    UnknownType(u8),
    /// An NLA address family other than 1 (IPv4) or 2 (IPv6).
    BadAfi(u16),
    /// OPT_FRAGMENT inconsistent with the packet (OpenPGM's receive-window sanity checks: APDU
    /// shorter than this TSDU, or beyond [`MAX_APDU`], first sqn after this one, fragment
    /// beyond the APDU's end).
    BadFragment,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Malformed::TooShort => write!(f, "packet is shorter than its headers"),
            Malformed::BadChecksum => write!(f, "checksum does not match"),
            Malformed::MissingChecksum => write!(f, "data packet has no checksum"),
            Malformed::BadLength => write!(f, "tsdu length does not match the packet length"),
            Malformed::BadOptions => write!(f, "option extensions are malformed"),
            Malformed::UnknownType(t) => write!(f, "unknown packet type 0x{t:02x}"),
            Malformed::BadAfi(a) => write!(f, "unsupported address family {a}"),
            Malformed::BadFragment => write!(f, "fragment option is inconsistent"),
        }
    }
}

impl std::error::Error for Malformed {}

// ---------------------------------------------------------------------------------------------
// Checksum

/// Unfolded sum of `data` as big-endian 16-bit words (odd tail byte padded with zero). 32-bit
/// words are added as two 16-bit halves' worth: 2^16 ≡ 1 modulo 0xffff, so folding gives the
/// same one's complement sum.
fn sum_words(data: &[u8]) -> u64 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        acc += (w >> 32) + (w & 0xffff_ffff);
    }
    let rem = chunks.remainder();
    let mut pairs = rem.chunks_exact(2);
    for p in &mut pairs {
        acc += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds an accumulator to the 16-bit one's complement sum (0 only if `acc` is 0).
fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc >> 16) + (acc & 0xffff);
    }
    acc as u16
}

/// The value the checksum field gets for a packet whose one's complement sum (checksum field
/// zero) is `sum`: its complement, except that a sum of 0xffff is sent as 0xffff, never as 0,
/// which means "no checksum" (OpenPGM `pgm_csum_fold`).
fn field_for(sum: u16) -> u16 {
    if sum == 0xffff {
        0xffff
    } else {
        !sum
    }
}

/// PGM checksum of `data` (the whole PGM packet with its checksum field zero): the one's
/// complement of the one's complement sum of its 16-bit words, 0 sent as 0xffff.
pub fn checksum(data: &[u8]) -> u16 {
    field_for(fold(sum_words(data)))
}

/// Computes the checksum over the whole packet `pkt` and stores it in the header.
///
/// # Panics
/// If `pkt` is shorter than [`HEADER_LEN`].
pub fn finish_checksum(pkt: &mut [u8]) {
    assert!(pkt.len() >= HEADER_LEN, "PGM packet shorter than its header");
    pkt[6] = 0;
    pkt[7] = 0;
    let c = checksum(pkt);
    pkt[6..8].copy_from_slice(&c.to_be_bytes());
}

/// True when the packet's checksum field (nonzero) matches: summing the whole packet
/// including the field gives 0xffff exactly when the field is what [`checksum`] computes (the
/// sum is never 0 for a nonzero packet, and 0xffff + 0xffff folds to 0xffff, so OpenPGM's
/// special case agrees too).
fn checksum_ok(pkt: &[u8]) -> bool {
    fold(sum_words(pkt)) == 0xffff
}

/// Turns a stored ODATA packet into RDATA in place: type byte, trailing edge `trail`, and the
/// checksum updated incrementally (RFC 1624) when it was set, recomputed when it was 0.
///
/// # Panics
/// If `pkt` is shorter than [`DATA_HEADER_LEN`].
pub fn set_repair(pkt: &mut [u8], trail: u32) {
    assert!(pkt.len() >= DATA_HEADER_LEN, "PGM data packet shorter than its header");
    let old_field = u16::from_be_bytes([pkt[6], pkt[7]]);
    let old_type_word = u16::from_be_bytes([pkt[4], pkt[5]]);
    let old_trail = [u16::from_be_bytes([pkt[20], pkt[21]]), u16::from_be_bytes([pkt[22], pkt[23]])];
    pkt[4] = kind::RDATA;
    pkt[20..24].copy_from_slice(&trail.to_be_bytes());
    if old_field == 0 {
        finish_checksum(pkt);
        return;
    }
    let new_type_word = u16::from_be_bytes([pkt[4], pkt[5]]);
    // HC' = ~(~HC + ~m + m'): the old sum is the field's complement (0xffff for the special
    // case, which is zero in one's complement as 0 is).
    let acc = u64::from(!old_field)
        + u64::from(!old_type_word)
        + u64::from(new_type_word)
        + u64::from(!old_trail[0])
        + u64::from(!old_trail[1])
        + u64::from((trail >> 16) as u16)
        + u64::from(trail as u16);
    pkt[6..8].copy_from_slice(&field_for(fold(acc)).to_be_bytes());
}

// ---------------------------------------------------------------------------------------------
// Parsing

/// Reads big-endian integers from a slice, failing instead of panicking.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self.pos.checked_add(n).ok_or(Malformed::TooShort)?;
        let s = self.buf.get(self.pos..end).ok_or(Malformed::TooShort)?;
        self.pos = end;
        Ok(s)
    }

    fn u16(&mut self) -> Result<u16, Malformed> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// NLA AFI, reserved 16 bits, address.
    fn nla(&mut self) -> Result<IpAddr, Malformed> {
        let afi = self.u16()?;
        self.take(2)?;
        match afi {
            AFI_IP => {
                let s = self.take(4)?;
                Ok(IpAddr::V4(Ipv4Addr::new(s[0], s[1], s[2], s[3])))
            }
            AFI_IP6 => {
                let s = self.take(16)?;
                let mut a = [0u8; 16];
                a.copy_from_slice(s);
                Ok(IpAddr::V6(Ipv6Addr::from(a)))
            }
            other => Err(Malformed::BadAfi(other)),
        }
    }
}

/// What the option chain said.
#[derive(Default)]
struct Options<'a> {
    fragment: Option<Fragment>,
    /// OPT_NAK_LIST's sequence-number bytes (4 per entry), big-endian.
    nak_list: &'a [u8],
    fin: bool,
}

/// Walks the option chain starting at `start` when `flags` has [`flag::PRESENT`]; returns what
/// it found and where the options end. OPT_LENGTH must come first with length 4 (OpenPGM
/// checks the type byte exactly, so OPT_LENGTH cannot carry OPT_END), then 1 to
/// [`MAX_OPTIONS`] options each at least 4 bytes within the total, the last with OPT_END,
/// ending exactly at the total length. Of repeated known options the first counts.
fn parse_options(buf: &[u8], start: usize, flags: u8) -> Result<(Options<'_>, usize), Malformed> {
    let mut out = Options::default();
    if flags & flag::PRESENT == 0 {
        return Ok((out, start));
    }
    let head = buf.get(start..start + OPT_LENGTH_LEN).ok_or(Malformed::BadOptions)?;
    if head[0] != opt::LENGTH || usize::from(head[1]) != OPT_LENGTH_LEN {
        return Err(Malformed::BadOptions);
    }
    let total = usize::from(u16::from_be_bytes([head[2], head[3]]));
    let end = start + total;
    if total < OPT_LENGTH_LEN + 4 || end > buf.len() {
        return Err(Malformed::BadOptions);
    }
    let mut pos = start + OPT_LENGTH_LEN;
    let (mut count, mut seen_fragment, mut seen_list) = (0, false, false);
    loop {
        if pos + 4 > end {
            return Err(Malformed::BadOptions);
        }
        let (t, len) = (buf[pos], usize::from(buf[pos + 1]));
        if len < 4 || pos + len > end {
            return Err(Malformed::BadOptions);
        }
        count += 1;
        if count > MAX_OPTIONS {
            return Err(Malformed::BadOptions);
        }
        let body = &buf[pos + 4..pos + len];
        match t & opt::MASK {
            opt::LENGTH => return Err(Malformed::BadOptions),
            opt::FRAGMENT => {
                if len != OPT_FRAGMENT_LEN {
                    return Err(Malformed::BadOptions);
                }
                if !seen_fragment {
                    let w = |i: usize| u32::from_be_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
                    out.fragment = Some(Fragment { first_sqn: w(0), offset: w(4), apdu_len: w(8) });
                    seen_fragment = true;
                }
            }
            opt::NAK_LIST => {
                let n = body.len() / 4;
                if body.is_empty() || body.len() % 4 != 0 || n > MAX_NAK_LIST - 1 {
                    return Err(Malformed::BadOptions);
                }
                if !seen_list {
                    out.nak_list = body;
                    seen_list = true;
                }
            }
            opt::FIN | opt::SYN | opt::RST if len != OPT_FLAG_LEN => return Err(Malformed::BadOptions),
            opt::FIN => out.fin = true,
            _ => {}
        }
        pos += len;
        if t & opt::END != 0 {
            break;
        }
    }
    if pos != end {
        return Err(Malformed::BadOptions);
    }
    Ok((out, end))
}

/// The TSDU after the options must be exactly `tsdu_len` bytes.
fn tsdu(buf: &[u8], start: usize, tsdu_len: u16) -> Result<&[u8], Malformed> {
    let rest = buf.get(start..).ok_or(Malformed::BadLength)?;
    if rest.len() != usize::from(tsdu_len) {
        return Err(Malformed::BadLength);
    }
    Ok(rest)
}

/// Parses and validates one PGM packet (a whole UDP payload). Never panics.
///
/// Checks, in OpenPGM's order where it has one: at least a header; the checksum when the
/// field is nonzero (and its presence for ODATA/RDATA, see [`Malformed::MissingChecksum`]); a
/// known type; the type-specific part's length and NLA address families; the option chain
/// (see [`Malformed::BadOptions`]); the TSDU length; fragment sanity for non-parity data.
pub fn parse(buf: &[u8]) -> Result<Packet<'_>, Malformed> {
    if buf.len() < HEADER_LEN {
        return Err(Malformed::TooShort);
    }
    let mut gsi = [0u8; 6];
    gsi.copy_from_slice(&buf[8..14]);
    let hdr = Header {
        sport: u16::from_be_bytes([buf[0], buf[1]]),
        dport: u16::from_be_bytes([buf[2], buf[3]]),
        kind: buf[4],
        options: buf[5],
        checksum: u16::from_be_bytes([buf[6], buf[7]]),
        gsi,
        tsdu_len: u16::from_be_bytes([buf[14], buf[15]]),
    };
    if hdr.checksum != 0 && !checksum_ok(buf) {
        return Err(Malformed::BadChecksum);
    }
    let mut r = Reader { buf, pos: HEADER_LEN };
    match hdr.kind {
        kind::SPM => {
            let (sqn, trail, lead) = (r.u32()?, r.u32()?, r.u32()?);
            let nla = r.nla()?;
            let (o, end) = parse_options(buf, r.pos, hdr.options)?;
            tsdu(buf, end, hdr.tsdu_len)?;
            Ok(Packet::Spm { hdr, sqn, trail, lead, nla, fin: o.fin })
        }
        kind::ODATA | kind::RDATA => {
            if hdr.checksum == 0 {
                return Err(Malformed::MissingChecksum);
            }
            let (sqn, trail) = (r.u32()?, r.u32()?);
            let (o, end) = parse_options(buf, r.pos, hdr.options)?;
            let payload = tsdu(buf, end, hdr.tsdu_len)?;
            let mut fragment = o.fragment;
            if let Some(f) = fragment {
                if hdr.options & flag::PARITY == 0 {
                    let len = payload.len() as u64;
                    if u64::from(f.apdu_len) < len
                        || f.apdu_len > MAX_APDU
                        || sqn_lt(sqn, f.first_sqn)
                        || u64::from(f.offset) + len > u64::from(f.apdu_len)
                    {
                        return Err(Malformed::BadFragment);
                    }
                    if u64::from(f.apdu_len) == len {
                        fragment = None;
                    }
                }
            }
            Ok(Packet::Data { hdr, repair: hdr.kind == kind::RDATA, sqn, trail, payload, fragment, fin: o.fin })
        }
        kind::NAK | kind::NNAK | kind::NCF => {
            let nak_kind = match hdr.kind {
                kind::NAK => NakKind::Nak,
                kind::NNAK => NakKind::Nnak,
                _ => NakKind::Ncf,
            };
            let first = r.u32()?;
            let source_nla = r.nla()?;
            let group_nla = r.nla()?;
            let (o, end) = parse_options(buf, r.pos, hdr.options)?;
            tsdu(buf, end, hdr.tsdu_len)?;
            let mut sqns = NakList::new(&[first]);
            for c in o.nak_list.chunks_exact(4) {
                sqns.push(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
            }
            Ok(Packet::Nak { hdr, kind: nak_kind, sqns, source_nla, group_nla })
        }
        kind::SPMR => {
            let (_, end) = parse_options(buf, r.pos, hdr.options)?;
            tsdu(buf, end, hdr.tsdu_len)?;
            Ok(Packet::Spmr { hdr })
        }
        kind::POLL | kind::POLR | kind::ACK => {
            match hdr.kind {
                kind::POLL => {
                    r.take(8)?; // sqn, round, sub-type
                    r.nla()?;
                    r.take(12)?; // back-off interval, random string, matching bit-mask
                }
                _ => {
                    r.take(8)?; // POLR: sqn, round, reserved; ACK: rx_max, bitmap
                }
            }
            let (_, end) = parse_options(buf, r.pos, hdr.options)?;
            tsdu(buf, end, hdr.tsdu_len)?;
            Ok(Packet::Other { hdr })
        }
        other => Err(Malformed::UnknownType(other)),
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Writes the 16-byte header with checksum 0.
fn put_header(buf: &mut [u8], sport: u16, dport: u16, kind: u8, options: u8, gsi: &Gsi, tsdu_len: u16) {
    buf[0..2].copy_from_slice(&sport.to_be_bytes());
    buf[2..4].copy_from_slice(&dport.to_be_bytes());
    buf[4] = kind;
    buf[5] = options;
    buf[6] = 0;
    buf[7] = 0;
    buf[8..14].copy_from_slice(gsi);
    buf[14..16].copy_from_slice(&tsdu_len.to_be_bytes());
}

/// Writes AFI, reserved 0, address at `buf[pos..]`; returns the position after it.
fn put_nla(buf: &mut [u8], pos: usize, addr: IpAddr) -> usize {
    buf[pos + 2] = 0;
    buf[pos + 3] = 0;
    match addr {
        IpAddr::V4(a) => {
            buf[pos..pos + 2].copy_from_slice(&AFI_IP.to_be_bytes());
            buf[pos + 4..pos + 8].copy_from_slice(&a.octets());
            pos + 8
        }
        IpAddr::V6(a) => {
            buf[pos..pos + 2].copy_from_slice(&AFI_IP6.to_be_bytes());
            buf[pos + 4..pos + 20].copy_from_slice(&a.octets());
            pos + 20
        }
    }
}

fn nla_len(addr: IpAddr) -> usize {
    if addr.is_ipv4() {
        8
    } else {
        20
    }
}

/// Writes an ODATA (or RDATA when `repair`) header for a `payload_len`-byte TSDU into
/// `buf[..24]`, options none, checksum 0, as OpenPGM's `send_odata` does. The payload must
/// be (or be put) at `buf[24..24 + payload_len]`; then call [`finish_checksum`] on the packet.
/// Returns the packet length `24 + payload_len`.
///
/// # Panics
/// If `buf` is shorter than `24 + payload_len` or `payload_len` exceeds 65535.
pub fn write_data(
    buf: &mut [u8],
    tsi: Tsi,
    dport: u16,
    repair: bool,
    sqn: u32,
    trail: u32,
    payload_len: usize,
) -> usize {
    let tsdu_len = u16::try_from(payload_len).expect("PGM TSDU longer than 65535 bytes");
    let total = DATA_HEADER_LEN + payload_len;
    assert!(buf.len() >= total, "buffer too small for the PGM data packet");
    let t = if repair { kind::RDATA } else { kind::ODATA };
    put_header(buf, tsi.sport, dport, t, 0, &tsi.gsi, tsdu_len);
    buf[16..20].copy_from_slice(&sqn.to_be_bytes());
    buf[20..24].copy_from_slice(&trail.to_be_bytes());
    total
}

/// Writes a checksummed SPM as OpenPGM's `pgm_send_spm` does: no options, or OPT_LENGTH +
/// OPT_FIN when `fin` (options byte [`flag::PRESENT`]). `buf` needs 36 bytes (IPv4 NLA) or
/// 48 (IPv6), 8 more with FIN; [`MAX_SPM_LEN`] always suffices. Returns the length.
///
/// # Panics
/// If `buf` is too short.
#[allow(clippy::too_many_arguments)]
pub fn write_spm(
    buf: &mut [u8],
    tsi: Tsi,
    dport: u16,
    sqn: u32,
    trail: u32,
    lead: u32,
    nla: IpAddr,
    fin: bool,
) -> usize {
    let total = HEADER_LEN + 12 + nla_len(nla) + if fin { OPT_LENGTH_LEN + OPT_FLAG_LEN } else { 0 };
    assert!(buf.len() >= total, "buffer too small for the PGM SPM");
    put_header(buf, tsi.sport, dport, kind::SPM, if fin { flag::PRESENT } else { 0 }, &tsi.gsi, 0);
    buf[16..20].copy_from_slice(&sqn.to_be_bytes());
    buf[20..24].copy_from_slice(&trail.to_be_bytes());
    buf[24..28].copy_from_slice(&lead.to_be_bytes());
    let pos = put_nla(buf, 28, nla);
    if fin {
        let opts = (OPT_LENGTH_LEN + OPT_FLAG_LEN) as u16;
        buf[pos..pos + 4].copy_from_slice(&[opt::LENGTH, OPT_LENGTH_LEN as u8, (opts >> 8) as u8, opts as u8]);
        buf[pos + 4..pos + 8].copy_from_slice(&[opt::FIN | opt::END, OPT_FLAG_LEN as u8, 0, 0]);
    }
    finish_checksum(&mut buf[..total]);
    total
}

/// Writes a checksummed NAK, NNAK or NCF for the first [`MAX_NAK_LIST`] of `sqns` about the
/// session `source`, as OpenPGM's `send_nak`/`send_nak_list` (receiver.c) and
/// `send_ncf`/`send_ncf_list` (source.c) do:
/// - NAK/NNAK (receiver to source, unicast): header sport = `dport` (the data's destination
///   port), header dport = `source.sport`;
/// - NCF (source to group): sport = `source.sport`, dport = `dport`;
/// - GSI = `source.gsi`; the group NLA follows the source NLA (its offset depends on the
///   source NLA's family);
/// - one sqn: no options (options byte 0); more: OPT_LENGTH + OPT_NAK_LIST|OPT_END with the
///   rest, options byte [`flag::PRESENT`] | [`flag::NETWORK`].
///
/// `source_nla` must be the source's unicast address from its SPMs and `group_nla` the group
/// it sends to: OpenPGM's source drops NAKs whose NLAs are not exactly these.
///
/// `buf` needs 16 + 4 + the two NLAs (8 each IPv4, 20 each IPv6) + (8 + 4 per extra sqn when
/// more than one); [`MAX_NAK_LEN`] always suffices. Returns the length.
///
/// # Panics
/// If `sqns` is empty or `buf` too short.
pub fn write_nak(
    buf: &mut [u8],
    kind: NakKind,
    source: Tsi,
    dport: u16,
    sqns: &[u32],
    source_nla: IpAddr,
    group_nla: IpAddr,
) -> usize {
    assert!(!sqns.is_empty(), "a NAK needs at least one sequence number");
    let sqns = &sqns[..sqns.len().min(MAX_NAK_LIST)];
    let extra = sqns.len() - 1;
    let opts_len = if extra > 0 { OPT_LENGTH_LEN + 4 + 4 * extra } else { 0 };
    let total = HEADER_LEN + 4 + nla_len(source_nla) + nla_len(group_nla) + opts_len;
    assert!(buf.len() >= total, "buffer too small for the PGM NAK");
    let (sport, hdport) = match kind {
        NakKind::Nak | NakKind::Nnak => (dport, source.sport),
        NakKind::Ncf => (source.sport, dport),
    };
    let options = if extra > 0 { flag::PRESENT | flag::NETWORK } else { 0 };
    put_header(buf, sport, hdport, kind.type_byte(), options, &source.gsi, 0);
    buf[16..20].copy_from_slice(&sqns[0].to_be_bytes());
    let mut pos = put_nla(buf, 20, source_nla);
    pos = put_nla(buf, pos, group_nla);
    if extra > 0 {
        let list_len = 4 + 4 * extra;
        let opts = opts_len as u16;
        buf[pos..pos + 4].copy_from_slice(&[opt::LENGTH, OPT_LENGTH_LEN as u8, (opts >> 8) as u8, opts as u8]);
        buf[pos + 4..pos + 8].copy_from_slice(&[opt::NAK_LIST | opt::END, list_len as u8, 0, 0]);
        pos += 8;
        for s in &sqns[1..] {
            buf[pos..pos + 4].copy_from_slice(&s.to_be_bytes());
            pos += 4;
        }
    }
    debug_assert_eq!(pos, total);
    finish_checksum(&mut buf[..total]);
    total
}

/// Writes a checksummed SPMR (header only, [`SPMR_LEN`] bytes) asking the session `source`
/// for an SPM, as OpenPGM's `send_spmr` does: upstream port order (sport = `dport`, the data
/// destination port; dport = `source.sport`). Returns the length.
///
/// # Panics
/// If `buf` is shorter than [`SPMR_LEN`].
pub fn write_spmr(buf: &mut [u8], source: Tsi, dport: u16) -> usize {
    assert!(buf.len() >= SPMR_LEN, "buffer too small for the PGM SPMR");
    put_header(buf, dport, source.sport, kind::SPMR, 0, &source.gsi, 0);
    finish_checksum(&mut buf[..SPMR_LEN]);
    SPMR_LEN
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        assert!(s.len() % 2 == 0);
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    // Interop vectors: UDP payloads captured with tcpdump on lo inside a throwaway network
    // namespace, sent by OpenPGM 5.3.128 from Debian (libpgm-dev) through pgm_socket(AF_INET,
    // SOCK_SEQPACKET, IPPROTO_UDP) with PGM_UDP_ENCAP_UCAST_PORT = PGM_UDP_ENCAP_MCAST_PORT =
    // 3055, network "127.0.0.1;239.192.0.1", GSI 01:02:03:04:05:06, sport 4242, dport 7500,
    // PGM_SEND_ONLY, pgm_send of "wirespeed", "hello, pgm", "x", then pgm_recv (MSG_DONTWAIT)
    // for 3 s and pgm_close(sock, TRUE). The NAKs in `OUR_NAK*` (this module's writer) were
    // sent to 127.0.0.1:3055 meanwhile; OpenPGM answered each with the NCF and RDATA below.
    // Two more NAKs, one with source NLA 127.0.0.2 and one with group NLA 239.192.0.2, got no
    // answer at all (source.c pgm_on_nak checks both NLAs).
    const GSI: Gsi = [1, 2, 3, 4, 5, 6];
    const SRC: Tsi = Tsi { gsi: GSI, sport: 4242 };
    const DPORT: u16 = 7500;
    /// The three SPMs pgm_connect sends: sqn 0, empty window (trail 0, lead 0xffffffff).
    const SPM_CONNECT: &str = "10921d4c00004a1301020304050600000000000000000000ffffffff000100007f000001";
    /// A heartbeat SPM after three ODATA: sqn 3, trail 0, lead 2.
    const SPM_HEARTBEAT: &str = "10921d4c00004a0e0102030405060000000000030000000000000002000100007f000001";
    /// pgm_close(sock, TRUE): SPM sqn 6 with OPT_LENGTH + OPT_FIN.
    const SPM_FIN: &str = "10921d4c0001bbf90102030405060000000000060000000000000002000100007f000001000400088e040000";
    const ODATA: [(&str, u32, &[u8]); 3] = [
        ("10921d4c04009e6701020304050600090000000000000000776972657370656564", 0, b"wirespeed"),
        ("10921d4c0400f92e010203040506000a000000010000000068656c6c6f2c2070676d", 1, b"hello, pgm"),
        ("10921d4c04004d120102030405060001000000020000000078", 2, b"x"),
    ];
    const RDATA: [&str; 3] = [
        "10921d4c05009d6701020304050600090000000000000000776972657370656564",
        "10921d4c0500f82e010203040506000a000000010000000068656c6c6f2c2070676d",
        "10921d4c05004c120102030405060001000000020000000078",
    ];
    /// NAK for sqn 1 from this writer (receiver UDP port 40000), answered by NCF_ONE + RDATA 1.
    const OUR_NAK_ONE: &str = "1d4c10920800524f010203040506000000000001000100007f00000100010000efc00001";
    const NCF_ONE: &str = "10921d4c0a00504f010203040506000000000001000100007f00000100010000efc00001";
    /// NAK for sqns 0 and 2 (OPT_NAK_LIST), answered by NCF_LIST + RDATA 0 and 2.
    const OUR_NAK_LIST: &str =
        "1d4c10920803d032010203040506000000000000000100007f00000100010000efc000010004000c8208000000000002";
    const NCF_LIST: &str =
        "10921d4c0a03ce32010203040506000000000000000100007f00000100010000efc000010004000c8208000000000002";

    /// Straightforward RFC 1071 sum, to check the fast one against.
    fn naive_checksum(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for pair in data.chunks(2) {
            let w = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            acc += u32::from(w);
            acc = (acc & 0xffff) + (acc >> 16);
        }
        let sum = acc as u16;
        if sum == 0xffff {
            0xffff
        } else {
            !sum
        }
    }

    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn checksum_matches_hand_computed_examples() {
        // RFC 1071 4.1: 0001 + f203 + f4f5 + f6f7 = 2ddf0, folded ddf2, complement 220d.
        assert_eq!(checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0x220d);
        // Odd length: the last byte is the high half of a zero-padded word: 1234 + 5600 = 6834.
        assert_eq!(checksum(&[0x12, 0x34, 0x56]), 0x97cb);
        // A sum of ffff is sent as ffff, never as 0 ("no checksum").
        assert_eq!(checksum(&[0xff, 0xff]), 0xffff);
        assert_eq!(checksum(&[0x80, 0x00, 0x7f, 0xff]), 0xffff);
        // All zero: sum 0, complement ffff.
        assert_eq!(checksum(&[0; 10]), 0xffff);
        // 9 bytes: one 8-byte chunk plus an odd tail. 0102+0304+0506+0708+0900 = 1914 -> e6eb.
        assert_eq!(checksum(&[1, 2, 3, 4, 5, 6, 7, 8, 9]), 0xe6eb);
    }

    #[test]
    fn fast_checksum_equals_naive_sum_on_every_length() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for len in 0..2100 {
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            assert_eq!(checksum(&data), naive_checksum(&data), "length {len}");
        }
        let ones = vec![0xffu8; 1500];
        assert_eq!(checksum(&ones), naive_checksum(&ones));
    }

    #[test]
    fn openpgm_checksums_are_reproduced() {
        let all = [SPM_CONNECT, SPM_HEARTBEAT, SPM_FIN, NCF_ONE, NCF_LIST, OUR_NAK_ONE, OUR_NAK_LIST]
            .into_iter()
            .chain(ODATA.iter().map(|v| v.0))
            .chain(RDATA);
        for v in all {
            let mut p = hex(v);
            let sent = u16::from_be_bytes([p[6], p[7]]);
            assert_ne!(sent, 0, "{v}");
            finish_checksum(&mut p);
            assert_eq!(p, hex(v), "{v}");
            p[6] = 0;
            p[7] = 0;
            assert_eq!(checksum(&p), sent);
        }
    }

    #[test]
    fn openpgm_odata_parses_and_is_reproduced_byte_for_byte() {
        for (v, sqn, text) in ODATA {
            let bytes = hex(v);
            let p = parse(&bytes).unwrap();
            match p {
                Packet::Data { hdr, repair, sqn: s, trail, payload, fragment, fin } => {
                    assert!(!repair);
                    assert_eq!((s, trail, payload, fragment, fin), (sqn, 0, text, None, false));
                    // OpenPGM's ODATA carries no options for an unfragmented APDU.
                    assert_eq!(hdr.options, 0);
                    assert_eq!((hdr.sport, hdr.dport, hdr.kind, hdr.gsi), (4242, DPORT, kind::ODATA, GSI));
                    assert_eq!(usize::from(hdr.tsdu_len), text.len());
                }
                other => panic!("not data: {other:?}"),
            }
            assert_eq!(p.tsi(), SRC);

            let mut buf = vec![0xaau8; 64];
            let n = write_data(&mut buf, SRC, DPORT, false, sqn, 0, text.len());
            assert_eq!(n, DATA_HEADER_LEN + text.len());
            buf[DATA_HEADER_LEN..n].copy_from_slice(text);
            finish_checksum(&mut buf[..n]);
            assert_eq!(&buf[..n], &bytes[..], "sqn {sqn}");
        }
    }

    #[test]
    fn openpgm_rdata_is_odata_turned_into_repair() {
        for (i, (v, sqn, text)) in ODATA.iter().enumerate() {
            let rdata = hex(RDATA[i]);
            let mut p = hex(v);
            set_repair(&mut p, 0);
            assert_eq!(p, rdata, "sqn {sqn}");
            match parse(&rdata).unwrap() {
                Packet::Data { repair, sqn: s, payload, .. } => {
                    assert!(repair);
                    assert_eq!((s, payload), (*sqn, *text));
                }
                other => panic!("not data: {other:?}"),
            }
            let mut buf = [0u8; 64];
            let n = write_data(&mut buf, SRC, DPORT, true, *sqn, 0, text.len());
            buf[DATA_HEADER_LEN..n].copy_from_slice(text);
            finish_checksum(&mut buf[..n]);
            assert_eq!(&buf[..n], &rdata[..]);
        }
    }

    #[test]
    fn openpgm_spms_parse_and_are_reproduced() {
        let lo = ip("127.0.0.1");
        for (v, sqn, trail, lead, fin) in
            [(SPM_CONNECT, 0, 0, u32::MAX, false), (SPM_HEARTBEAT, 3, 0, 2, false), (SPM_FIN, 6, 0, 2, true)]
        {
            let bytes = hex(v);
            let p = parse(&bytes).unwrap();
            assert_eq!(p.tsi(), SRC);
            match p {
                Packet::Spm { hdr, sqn: s, trail: t, lead: l, nla, fin: f } => {
                    assert_eq!((s, t, l, nla, f), (sqn, trail, lead, lo, fin));
                    assert_eq!(hdr.options, if fin { flag::PRESENT } else { 0 });
                }
                other => panic!("not an SPM: {other:?}"),
            }
            let mut buf = [0u8; MAX_SPM_LEN];
            let n = write_spm(&mut buf, SRC, DPORT, sqn, trail, lead, lo, fin);
            assert_eq!(&buf[..n], &bytes[..]);
        }
    }

    #[test]
    fn naks_openpgm_answered_and_its_ncfs_are_reproduced() {
        let (lo, group) = (ip("127.0.0.1"), ip("239.192.0.1"));
        let mut buf = [0u8; MAX_NAK_LEN];
        for (nak, ncf, sqns) in [(OUR_NAK_ONE, NCF_ONE, &[1u32][..]), (OUR_NAK_LIST, NCF_LIST, &[0, 2][..])] {
            // The NAK: upstream, sport = data destination port, dport = source's sport.
            let n = write_nak(&mut buf, NakKind::Nak, SRC, DPORT, sqns, lo, group);
            assert_eq!(&buf[..n], &hex(nak)[..]);
            let p = parse(&buf[..n]).unwrap();
            assert_eq!((p.header().sport, p.header().dport), (DPORT, 4242));
            assert_eq!(p.tsi(), SRC);
            // OpenPGM's NCF: downstream, sport = source's sport, dport = data destination port.
            let n = write_nak(&mut buf, NakKind::Ncf, SRC, DPORT, sqns, lo, group);
            assert_eq!(&buf[..n], &hex(ncf)[..]);
            let bytes = hex(ncf);
            let p = parse(&bytes).unwrap();
            assert_eq!(p.tsi(), SRC);
            match p {
                Packet::Nak { hdr, kind, sqns: got, source_nla, group_nla } => {
                    assert_eq!(kind, NakKind::Ncf);
                    assert_eq!(got.as_slice(), sqns);
                    assert_eq!((source_nla, group_nla), (lo, group));
                    assert_eq!((hdr.sport, hdr.dport), (4242, DPORT));
                    let opts = if sqns.len() > 1 { flag::PRESENT | flag::NETWORK } else { 0 };
                    assert_eq!(hdr.options, opts);
                }
                other => panic!("not an NCF: {other:?}"),
            }
        }
    }

    #[test]
    fn every_nak_shape_round_trips() {
        let v4 = [ip("198.18.0.1"), ip("239.192.0.1")];
        let v6 = [ip("2001:2::1"), ip("ff15::1")];
        let mut buf = [0u8; MAX_NAK_LEN];
        let all: Vec<u32> = (0..70).map(|i| (u32::MAX - 10).wrapping_add(i)).collect();
        for kind in [NakKind::Nak, NakKind::Nnak, NakKind::Ncf] {
            for (src, grp) in [(v4[0], v4[1]), (v6[0], v6[1]), (v4[0], v6[1]), (v6[0], v4[1])] {
                for count in [1usize, 2, 62, 63, 70] {
                    let n = write_nak(&mut buf, kind, SRC, DPORT, &all[..count], src, grp);
                    let kept = count.min(MAX_NAK_LIST);
                    let extra = if kept > 1 { 8 + 4 * (kept - 1) } else { 0 };
                    assert_eq!(n, 20 + nla_len(src) + nla_len(grp) + extra);
                    let p = parse(&buf[..n]).unwrap();
                    assert_eq!(p.tsi(), SRC);
                    match p {
                        Packet::Nak { hdr, kind: k, sqns, source_nla, group_nla } => {
                            assert_eq!(k, kind);
                            assert_eq!(hdr.kind, kind.type_byte());
                            assert_eq!(sqns.as_slice(), &all[..kept]);
                            assert_eq!((source_nla, group_nla), (src, grp));
                            assert_eq!(hdr.tsdu_len, 0);
                        }
                        other => panic!("{other:?}"),
                    }
                }
            }
        }
        // The largest NAK needs exactly MAX_NAK_LEN.
        assert_eq!(write_nak(&mut buf, NakKind::Nak, SRC, DPORT, &all, v6[0], v6[1]), MAX_NAK_LEN);
    }

    #[test]
    fn spm_spmr_and_data_round_trip() {
        let mut buf = [0u8; 2048];
        for nla in [ip("198.18.0.7"), ip("2001:2::7")] {
            for fin in [false, true] {
                let n = write_spm(&mut buf, SRC, 9, 77, 5, 80, nla, fin);
                assert_eq!(n, 28 + nla_len(nla) + if fin { 8 } else { 0 });
                assert_eq!(
                    parse(&buf[..n]),
                    Ok(Packet::Spm { hdr: *parse(&buf[..n]).unwrap().header(), sqn: 77, trail: 5, lead: 80, nla, fin })
                );
                assert_eq!(parse(&buf[..n]).unwrap().tsi(), Tsi { gsi: GSI, sport: 4242 });
            }
        }
        assert_eq!(write_spm(&mut buf, SRC, 9, 1, 1, 1, ip("::1"), true), MAX_SPM_LEN);

        let n = write_spmr(&mut buf, SRC, DPORT);
        assert_eq!(n, SPMR_LEN);
        let p = parse(&buf[..n]).unwrap();
        assert!(matches!(p, Packet::Spmr { .. }));
        assert_eq!((p.header().sport, p.header().dport), (DPORT, 4242));
        assert_eq!(p.tsi(), SRC);

        for len in [0usize, 1, 2, 1000, 1500, 2000 - DATA_HEADER_LEN] {
            for repair in [false, true] {
                let n = write_data(&mut buf, SRC, DPORT, repair, 0xffff_fff0, 0xffff_ff00, len);
                for (i, b) in buf[DATA_HEADER_LEN..n].iter_mut().enumerate() {
                    *b = (i * 31) as u8;
                }
                finish_checksum(&mut buf[..n]);
                match parse(&buf[..n]).unwrap() {
                    Packet::Data { repair: r, sqn, trail, payload, fragment: None, fin: false, .. } => {
                        assert_eq!((r, sqn, trail, payload.len()), (repair, 0xffff_fff0, 0xffff_ff00, len));
                        assert!(payload.iter().enumerate().all(|(i, &b)| b == (i * 31) as u8));
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    #[test]
    fn set_repair_updates_the_checksum_like_a_full_recompute() {
        let mut rng = XorShift(12345);
        let mut buf = [0u8; 600];
        for round in 0..5000 {
            let len = rng.below(500);
            let n = write_data(&mut buf, SRC, rng.next() as u16, false, rng.next() as u32, rng.next() as u32, len);
            for b in &mut buf[DATA_HEADER_LEN..n] {
                *b = rng.next() as u8;
            }
            // Every few rounds force the packet's sum to 0xffff (field 0xffff, the special case).
            finish_checksum(&mut buf[..n]);
            if round % 7 == 0 && len >= 2 {
                let field = u16::from_be_bytes([buf[6], buf[7]]);
                if field != 0xffff {
                    // The sum is !field; adding field to the first payload word makes it 0xffff.
                    let w = u16::from_be_bytes([buf[24], buf[25]]);
                    let target = fold(u64::from(w) + u64::from(field));
                    buf[24..26].copy_from_slice(&target.to_be_bytes());
                    finish_checksum(&mut buf[..n]);
                }
                assert_eq!(u16::from_be_bytes([buf[6], buf[7]]), 0xffff);
            }
            if round % 11 == 0 {
                buf[6] = 0;
                buf[7] = 0;
            }
            let trail = rng.next() as u32;
            let mut inc = buf[..n].to_vec();
            set_repair(&mut inc, trail);
            let mut full = buf[..n].to_vec();
            full[4] = kind::RDATA;
            full[20..24].copy_from_slice(&trail.to_be_bytes());
            finish_checksum(&mut full);
            assert_eq!(inc, full, "round {round}");
            assert!(matches!(parse(&inc), Ok(Packet::Data { repair: true, .. })));
        }
    }

    /// A checksummed ODATA packet (sqn `sqn`, trail 0) with `options` in its options byte,
    /// the raw option bytes `opts` and `payload`.
    fn data_with(options: u8, opts: &[u8], payload: &[u8], sqn: u32) -> Vec<u8> {
        let mut p = vec![0u8; DATA_HEADER_LEN + opts.len() + payload.len()];
        write_data(&mut p, SRC, DPORT, false, sqn, 0, payload.len());
        p[5] = options;
        p[DATA_HEADER_LEN..DATA_HEADER_LEN + opts.len()].copy_from_slice(opts);
        p[DATA_HEADER_LEN + opts.len()..].copy_from_slice(payload);
        finish_checksum(&mut p);
        p
    }

    /// OPT_LENGTH with total `total`, then `rest`.
    fn opts(total: u16, rest: &[&[u8]]) -> Vec<u8> {
        let mut v = vec![opt::LENGTH, 4, (total >> 8) as u8, total as u8];
        for r in rest {
            v.extend_from_slice(r);
        }
        v
    }

    fn frag(first: u32, offset: u32, apdu: u32, end: bool) -> Vec<u8> {
        let mut v = vec![opt::FRAGMENT | if end { opt::END } else { 0 }, 16, 0, 0];
        for x in [first, offset, apdu] {
            v.extend_from_slice(&x.to_be_bytes());
        }
        v
    }

    fn data_of(p: Result<Packet<'_>, Malformed>) -> (Option<Fragment>, bool, usize) {
        match p {
            Ok(Packet::Data { fragment, fin, payload, .. }) => (fragment, fin, payload.len()),
            other => panic!("not data: {other:?}"),
        }
    }

    #[test]
    fn fragment_and_flag_options_are_read() {
        let payload = [7u8; 50];
        let f = frag(10, 100, 300, true);
        let p = data_with(flag::PRESENT, &opts(20, &[&f]), &payload, 12);
        assert_eq!(data_of(parse(&p)), (Some(Fragment { first_sqn: 10, offset: 100, apdu_len: 300 }), false, 50));

        // Unknown options are skipped; SYN and RST are accepted; FIN is reported; the first
        // fragment option counts.
        let unknown: &[u8] = &[0x05, 12, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        let syn: &[u8] = &[opt::SYN, 4, 0, 0];
        let rst: &[u8] = &[opt::RST, 4, 0, 0];
        let fin: &[u8] = &[opt::FIN | opt::END, 4, 0, 0];
        let f1 = frag(12, 0, 60, false);
        let f2 = frag(1, 1, 1, false);
        let chain = opts(4 + 12 + 4 + 4 + 16 + 16 + 4, &[unknown, syn, rst, &f1, &f2, fin]);
        let p = data_with(flag::PRESENT | flag::NETWORK, &chain, &payload, 12);
        assert_eq!(data_of(parse(&p)), (Some(Fragment { first_sqn: 12, offset: 0, apdu_len: 60 }), true, 50));

        // OpenPGM: a fragment that is the whole APDU is no fragment.
        let p = data_with(flag::PRESENT, &opts(20, &[&frag(12, 0, 50, true)]), &payload, 12);
        assert_eq!(data_of(parse(&p)), (None, false, 50));
        // First sqn may be far behind across the wrap.
        let p = data_with(flag::PRESENT, &opts(20, &[&frag(u32::MAX - 3, 50, 200, true)]), &payload, 5);
        assert_eq!(data_of(parse(&p)).0.map(|f| f.first_sqn), Some(u32::MAX - 3));
    }

    #[test]
    fn inconsistent_fragments_are_refused() {
        let payload = [7u8; 50];
        for (first, offset, apdu) in [
            (12, 0, 40),           // APDU shorter than this fragment
            (13, 0, 300),          // first fragment after this one
            (10, 260, 300),        // fragment runs past the APDU's end
            (10, u32::MAX, 300),   // offset overflow
            (10, 0, MAX_APDU + 1), // beyond OpenPGM's PGM_MAX_APDU
        ] {
            let p = data_with(flag::PRESENT, &opts(20, &[&frag(first, offset, apdu, true)]), &payload, 12);
            assert_eq!(parse(&p), Err(Malformed::BadFragment), "{first} {offset} {apdu}");
        }
        // Parity packets carry an encoded fragment option: not checked (as OpenPGM).
        let p = data_with(flag::PRESENT | flag::PARITY, &opts(20, &[&frag(12, 0, 40, true)]), &payload, 12);
        assert!(parse(&p).is_ok());
    }

    #[test]
    fn malformed_option_chains_are_refused() {
        let fin: &[u8] = &[opt::FIN | opt::END, 4, 0, 0];
        let filler: &[u8] = &[0x05, 4, 0, 0];
        let mut sixteen: Vec<&[u8]> = vec![filler; 15];
        sixteen.push(fin);
        let mut seventeen: Vec<&[u8]> = vec![filler; 16];
        seventeen.push(fin);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("flag without options", vec![]),
            ("first option not OPT_LENGTH", vec![opt::FRAGMENT, 4, 0, 8, 0x8e, 4, 0, 0]),
            ("OPT_LENGTH with END", vec![opt::LENGTH | opt::END, 4, 0, 8, 0x8e, 4, 0, 0]),
            ("OPT_LENGTH length 5", vec![opt::LENGTH, 5, 0, 9, 0, 0x8e, 4, 0, 0]),
            ("total beyond packet", opts(12, &[fin])),
            ("total only OPT_LENGTH", opts(4, &[])),
            ("option length 0", opts(8, &[&[opt::FIN, 0, 0, 0]])),
            ("option length 3", opts(8, &[&[opt::FIN | opt::END, 3, 0, 0]])),
            ("option past total", opts(8, &[&[0x85, 8, 0, 0, 0, 0, 0, 0]])),
            ("no OPT_END", opts(12, &[&[opt::FIN, 4, 0, 0], &[opt::SYN, 4, 0, 0]])),
            ("OPT_END before total", opts(12, &[fin, &[0, 0, 0, 0]])),
            ("17 options", opts(4 + 17 * 4, &seventeen)),
            ("second OPT_LENGTH", opts(12, &[&[opt::LENGTH, 4, 0, 8], fin])),
            ("FIN length 8", opts(12, &[&[opt::FIN | opt::END, 8, 0, 0, 0, 0, 0, 0]])),
            ("SYN length 8", opts(12, &[&[opt::SYN | opt::END, 8, 0, 0, 0, 0, 0, 0]])),
            ("fragment length 12", opts(16, &[&[opt::FRAGMENT | opt::END, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]])),
        ];
        for (what, o) in cases {
            let p = data_with(flag::PRESENT, &o, b"abc", 1);
            assert_eq!(parse(&p), Err(Malformed::BadOptions), "{what}");
        }
        // Sixteen options after OPT_LENGTH are fine.
        let p = data_with(flag::PRESENT, &opts(4 + 16 * 4, &sixteen), b"abc", 1);
        assert_eq!(data_of(parse(&p)), (None, true, 3));
        // Without the PRESENT flag option-like bytes are payload.
        let p = data_with(0, &[], &opts(8, &[fin]), 1);
        assert_eq!(data_of(parse(&p)), (None, false, 8));
    }

    /// A checksummed NAK for sqn 1 with options `o` (IPv4 NLAs).
    fn nak_with(o: &[u8]) -> Vec<u8> {
        let mut b = [0u8; MAX_NAK_LEN];
        let n = write_nak(&mut b, NakKind::Nak, SRC, DPORT, &[1], ip("198.18.0.1"), ip("239.192.0.1"));
        let mut p = b[..n].to_vec();
        p[5] = flag::PRESENT | flag::NETWORK;
        p.extend_from_slice(o);
        finish_checksum(&mut p);
        p
    }

    #[test]
    fn nak_lists_are_bounded() {
        let list = |n: usize| {
            let mut v = vec![opt::NAK_LIST | opt::END, (4 + 4 * n) as u8, 0, 0];
            for i in 0..n {
                v.extend_from_slice(&(100 + i as u32).to_be_bytes());
            }
            v
        };
        let ok = nak_with(&opts((8 + 4 * 62) as u16, &[&list(62)]));
        match parse(&ok).unwrap() {
            Packet::Nak { sqns, .. } => {
                assert_eq!(sqns.len(), 63);
                assert_eq!(sqns.as_slice()[..3], [1, 100, 101]);
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            opts((8 + 4 * 63) as u16, &[&list(63)]),                 // 63 more: 64 in all
            opts(8, &[&list(0)]),                                    // empty list
            opts(10, &[&[opt::NAK_LIST | opt::END, 6, 0, 0, 1, 2]]), // not whole sqns
        ] {
            assert_eq!(parse(&nak_with(&bad)), Err(Malformed::BadOptions));
        }
    }

    #[test]
    fn bad_headers_lengths_and_addresses_are_refused() {
        for n in 0..HEADER_LEN {
            assert_eq!(parse(&vec![0u8; n]), Err(Malformed::TooShort), "{n}");
        }
        let odata = hex(ODATA[1].0);
        // A flipped payload bit.
        let mut p = odata.clone();
        p[30] ^= 0x10;
        assert_eq!(parse(&p), Err(Malformed::BadChecksum));
        // A flipped checksum bit.
        let mut p = odata.clone();
        p[7] ^= 1;
        assert_eq!(parse(&p), Err(Malformed::BadChecksum));
        // No checksum: refused for data (OpenPGM), accepted for SPM and NAK (RFC 3208).
        let mut p = odata.clone();
        p[6] = 0;
        p[7] = 0;
        assert_eq!(parse(&p), Err(Malformed::MissingChecksum));
        for v in [SPM_HEARTBEAT, NCF_LIST, OUR_NAK_ONE] {
            let mut p = hex(v);
            p[6] = 0;
            p[7] = 0;
            let orig = hex(v);
            let mut expected = parse(&orig).unwrap();
            match &mut expected {
                Packet::Spm { hdr, .. } | Packet::Nak { hdr, .. } => hdr.checksum = 0,
                other => panic!("{other:?}"),
            }
            assert_eq!(parse(&p), Ok(expected));
        }
        // Unknown types, including version bits.
        for t in [0x03u8, 0x06, 0x07, 0x0b, 0x0e, 0x10, 0x14, 0xff] {
            let mut p = hex(SPM_HEARTBEAT);
            p[4] = t;
            finish_checksum(&mut p);
            assert_eq!(parse(&p), Err(Malformed::UnknownType(t)));
        }
        // TSDU length one more, one less.
        for tsdu in [11u16, 9, 0, 0xffff] {
            let mut p = odata.clone();
            p[14..16].copy_from_slice(&tsdu.to_be_bytes());
            finish_checksum(&mut p);
            assert_eq!(parse(&p), Err(Malformed::BadLength), "{tsdu}");
        }
        // SPM with a trailing byte, or claiming one it does not have.
        let mut p = hex(SPM_HEARTBEAT);
        p.push(0);
        finish_checksum(&mut p);
        assert_eq!(parse(&p), Err(Malformed::BadLength));
        let mut p = hex(SPM_HEARTBEAT);
        p[15] = 1;
        finish_checksum(&mut p);
        assert_eq!(parse(&p), Err(Malformed::BadLength));
        // Truncated bodies.
        for (v, cut) in [(SPM_HEARTBEAT, 30usize), (SPM_HEARTBEAT, 35), (NCF_ONE, 31), (NCF_ONE, 35), (ODATA[0].0, 20)]
        {
            let mut p = hex(v);
            p.truncate(cut);
            finish_checksum(&mut p);
            assert_eq!(parse(&p), Err(Malformed::TooShort), "{v} cut at {cut}");
        }
        // Address families.
        let mut p = hex(SPM_HEARTBEAT);
        p[29] = 3;
        finish_checksum(&mut p);
        assert_eq!(parse(&p), Err(Malformed::BadAfi(3)));
        let mut p = hex(NCF_ONE);
        p[28] = 0;
        p[29] = 0;
        finish_checksum(&mut p);
        assert_eq!(parse(&p), Err(Malformed::BadAfi(0)));
        // An SPM whose NLA claims IPv6 but is 4 bytes long.
        let mut p = hex(SPM_HEARTBEAT);
        p[29] = 2;
        finish_checksum(&mut p);
        assert_eq!(parse(&p), Err(Malformed::TooShort));
    }

    #[test]
    fn poll_polr_and_ack_are_other_with_their_direction() {
        let header = |t: u8| {
            let mut p = vec![0u8; HEADER_LEN];
            put_header(&mut p, 1111, 2222, t, 0, &GSI, 0);
            p
        };
        let mut poll = header(kind::POLL);
        poll.extend_from_slice(&[0, 0, 0, 9, 0, 1, 0, 0]);
        poll.extend_from_slice(&[0, 1, 0, 0, 198, 18, 0, 1]);
        poll.extend_from_slice(&[0; 12]);
        let mut polr = header(kind::POLR);
        polr.extend_from_slice(&[0; 8]);
        let mut ack = header(kind::ACK);
        ack.extend_from_slice(&[0; 8]);
        for (mut p, sport) in [(poll, 1111), (polr, 2222), (ack, 2222)] {
            finish_checksum(&mut p);
            let got = parse(&p).unwrap();
            assert!(matches!(got, Packet::Other { .. }));
            assert_eq!(got.tsi(), Tsi { gsi: GSI, sport });
            p.truncate(p.len() - 1);
            finish_checksum(&mut p);
            assert_eq!(parse(&p), Err(Malformed::TooShort));
        }
    }

    #[test]
    fn malformed_says_what_is_wrong() {
        let all = [
            (Malformed::TooShort, "packet is shorter than its headers"),
            (Malformed::BadChecksum, "checksum does not match"),
            (Malformed::MissingChecksum, "data packet has no checksum"),
            (Malformed::BadLength, "tsdu length does not match the packet length"),
            (Malformed::BadOptions, "option extensions are malformed"),
            (Malformed::UnknownType(0x1f), "unknown packet type 0x1f"),
            (Malformed::BadAfi(7), "unsupported address family 7"),
            (Malformed::BadFragment, "fragment option is inconsistent"),
        ];
        for (m, text) in all {
            assert_eq!(m.to_string(), text);
        }
    }

    #[test]
    fn nak_list_holds_at_most_63() {
        let many: Vec<u32> = (0..100).collect();
        let mut l = NakList::new(&many);
        assert_eq!(l.as_slice(), &many[..63]);
        assert!(!l.push(5));
        let mut short = NakList::new(&[4, 5]);
        assert!(short.push(6));
        assert_eq!(short, NakList::new(&[4, 5, 6]));
        assert_eq!(format!("{short:?}"), "[4, 5, 6]");
        assert!(NakList::default().is_empty());
        l = NakList::new(&[]);
        assert_eq!(l.len(), 0);
    }

    /// Thousands of truncated, bit-flipped, overwritten and random packets: parse must never
    /// panic, what it accepts must be consistent, and the mutations must reach every check
    /// (most are re-checksummed so they get past the checksum).
    #[test]
    fn parse_survives_random_and_corrupted_packets() {
        let mut corpus: Vec<Vec<u8>> = [SPM_CONNECT, SPM_HEARTBEAT, SPM_FIN, NCF_ONE, NCF_LIST, OUR_NAK_LIST]
            .into_iter()
            .chain(ODATA.iter().map(|v| v.0))
            .chain(RDATA)
            .map(hex)
            .collect();
        let mut b = [0u8; MAX_NAK_LEN];
        let sqns: Vec<u32> = (0..63).collect();
        let n = write_nak(&mut b, NakKind::Nnak, SRC, DPORT, &sqns, ip("2001:2::1"), ip("ff15::1"));
        corpus.push(b[..n].to_vec());
        let n = write_spm(&mut b, SRC, DPORT, 1, 2, 3, ip("2001:2::1"), true);
        corpus.push(b[..n].to_vec());
        let n = write_spmr(&mut b, SRC, DPORT);
        corpus.push(b[..n].to_vec());
        corpus.push(data_with(flag::PRESENT, &opts(20, &[&frag(10, 100, 300, true)]), &[1; 50], 12));
        corpus.push(nak_with(&opts(12, &[&[opt::NAK_LIST | opt::END, 8, 0, 0, 0, 0, 0, 9]])));

        let mut rng = XorShift(0x5eed_0f9a_c4e7);
        let mut seen = std::collections::HashMap::new();
        for _ in 0..200_000 {
            let mut p = corpus[rng.below(corpus.len())].clone();
            for _ in 0..1 + rng.below(3) {
                match rng.below(7) {
                    0 => p.truncate(rng.below(p.len() + 1)),
                    1 => {
                        let bits = 1 + rng.below(4);
                        for _ in 0..bits {
                            if !p.is_empty() {
                                let i = rng.below(p.len());
                                p[i] ^= 1 << rng.below(8);
                            }
                        }
                    }
                    2 if !p.is_empty() => {
                        let i = rng.below(p.len());
                        p[i] = rng.next() as u8;
                    }
                    3 => {
                        let extra = rng.below(20);
                        p.extend((0..extra).map(|_| rng.next() as u8));
                    }
                    4 if p.len() >= HEADER_LEN => {
                        let t = rng.below(p.len() + 4) as u16;
                        p[14..16].copy_from_slice(&t.to_be_bytes());
                    }
                    5 => p = (0..rng.below(80)).map(|_| rng.next() as u8).collect(),
                    _ if p.len() > 24 => {
                        // Corrupt the type-specific part / option area specifically.
                        let i = 16 + rng.below(p.len() - 16);
                        p[i] = [0, 1, 2, 3, 4, 0x80, 0xff, 8, 16][rng.below(9)];
                    }
                    _ => {}
                }
            }
            if p.len() >= HEADER_LEN && rng.below(4) != 0 {
                finish_checksum(&mut p);
                if rng.below(40) == 0 {
                    p[6] = 0;
                    p[7] = 0;
                }
            }
            let r = parse(&p);
            let key = match r {
                Ok(ref pkt) => {
                    let h = pkt.header();
                    assert_eq!(h.kind, p[4]);
                    assert_eq!(h.gsi, p[8..14]);
                    match pkt {
                        Packet::Data { payload, hdr, fragment, .. } => {
                            assert_eq!(payload.len(), usize::from(hdr.tsdu_len));
                            assert!(p.ends_with(payload));
                            if let Some(f) = fragment {
                                if hdr.options & flag::PARITY == 0 {
                                    assert!(u64::from(f.offset) + payload.len() as u64 <= u64::from(f.apdu_len));
                                }
                            }
                        }
                        Packet::Nak { sqns, .. } => assert!((1..=MAX_NAK_LIST).contains(&sqns.len())),
                        _ => {}
                    }
                    "ok".to_string()
                }
                Err(Malformed::UnknownType(_)) => "type".to_string(),
                Err(Malformed::BadAfi(_)) => "afi".to_string(),
                Err(e) => format!("{e:?}"),
            };
            *seen.entry(key).or_insert(0u32) += 1;
        }
        for k in [
            "ok",
            "type",
            "afi",
            "TooShort",
            "BadChecksum",
            "MissingChecksum",
            "BadLength",
            "BadOptions",
            "BadFragment",
        ] {
            assert!(seen.get(k).copied().unwrap_or(0) > 0, "no {k} in {seen:?}");
        }
    }
}
