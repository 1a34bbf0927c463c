//! SO_REUSEPORT groups and the classic BPF programs that steer datagrams among their members.
//!
//! Several capture threads each own one UDP socket bound to the same address and port (an
//! SO_REUSEPORT group). The kernel picks a member for every unicast datagram; a classic BPF
//! program attached with SO_ATTACH_REUSEPORT_CBPF makes that choice ours: it returns the
//! index of the member (in the order the sockets joined the group), and an index out of range
//! falls back to the kernel's own flow hash. Classic BPF needs no compiler and no CAP_BPF.
//!
//! What the program sees, for UDP (`net/core/sock_reuseport.c`, `run_bpf_filter`): the kernel
//! pulls the UDP header before running it, so offset 0 is the first payload byte and `len` is
//! the payload length; the IP header is reached through the `SKF_NET_OFF` window (negative
//! offsets), and the UDP header lies right after it there. A load outside the packet ends the
//! program with 0 (the first member). The steering tests run the programs through the kernel
//! and through [`Program::run`], a small interpreter of the same instruction subset, so the
//! two are held to agree.

use std::io;
use std::mem::size_of;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use super::cvt;

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ST: u16 = 0x02;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const MISC: u16 = 0x07;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MEM: u16 = 0x60;
const LEN: u16 = 0x80;
const MSH: u16 = 0xa0;
const ADD: u16 = 0x00;
const MUL: u16 = 0x20;
const OR: u16 = 0x40;
const AND: u16 = 0x50;
const LSH: u16 = 0x60;
const RSH: u16 = 0x70;
const MOD: u16 = 0x90;
const JA: u16 = 0x00;
const JEQ: u16 = 0x10;
const K: u16 = 0x00;
const X: u16 = 0x08;
const A: u16 = 0x10;
const TAX: u16 = 0x00;

/// Offset of the network (IP) header in a classic BPF load: `SKF_NET_OFF`.
pub const NET_OFF: i32 = -0x100000;

/// SO_ATTACH_REUSEPORT_CBPF (asm-generic/socket.h).
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Fibonacci hashing's multiplier (2^32 / golden ratio): mixes the source's low bits into the
/// high ones, so that sources whose ports share their low bits (a kernel that hands out only
/// odd ephemeral ports for connected sockets) still spread over the members.
const MIX: u32 = 0x9E37_79B1;

/// The first four bytes of a wirespeed end-of-stream message ("WSPD"), as a BPF word load
/// (big-endian) reads them.
const END_MAGIC_WORD: u32 = u32::from_be_bytes(*b"WSPD");

/// One classic BPF instruction, laid out as the kernel's `struct sock_filter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const fn stmt(code: u16, k: u32) -> Insn {
    Insn { code, jt: 0, jf: 0, k }
}

const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// A classic BPF program that picks a reuseport group member for a UDP datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    insns: Vec<Insn>,
}

/// How a group spreads datagrams: every datagram of one stream goes to one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steer {
    /// By source address and port: `((address word + port) * MIX >> 16) mod members`, where
    /// the address word is an IPv4 source or the last 32 bits of an IPv6 one (Fibonacci
    /// hashing, so ports that differ only in their high bits still spread).
    Source,
    /// By a 16-bit little-endian stream id in the payload at `offset`, masked with `mask`
    /// (the VDIF thread id: offset 14, mask 0x3ff), `mod members`. A wirespeed end-of-stream
    /// message is steered by the format stream it names, so it reaches its stream's member.
    PayloadStream {
        /// Byte offset of the field's low byte.
        offset: u32,
        /// Bits of the 16-bit field that hold the id.
        mask: u16,
    },
}

impl Steer {
    /// The member a datagram belongs to, computed as the kernel program does (used where the
    /// kernel cannot steer, e.g. multicast, where every member gets a copy).
    #[inline]
    pub fn member(&self, payload: &[u8], src: Option<SocketAddr>, members: u32) -> u32 {
        if members <= 1 {
            return 0;
        }
        let h = match *self {
            Steer::Source => {
                match src {
                    Some(SocketAddr::V4(a)) => u32::from(*a.ip()).wrapping_add(u32::from(a.port())),
                    Some(SocketAddr::V6(a)) => {
                        let word = match a.ip().to_ipv4_mapped() {
                            Some(v4) => u32::from(v4),
                            None => {
                                let o = a.ip().octets();
                                u32::from_be_bytes([o[12], o[13], o[14], o[15]])
                            }
                        };
                        word.wrapping_add(u32::from(a.port()))
                    }
                    None => 0,
                }
                .wrapping_mul(MIX)
                    >> 16
            }
            Steer::PayloadStream { offset, mask } => {
                let end = payload.len() == crate::control::END_LEN && payload.starts_with(b"WSPD");
                let at = if end { 16 } else { offset as usize };
                match (payload.get(at), payload.get(at + 1)) {
                    (Some(&lo), Some(&hi)) if end => u32::from(u16::from_le_bytes([lo, hi])),
                    (Some(&lo), Some(&hi)) => u32::from(u16::from_le_bytes([lo, hi]) & mask),
                    _ => return 0,
                }
            }
        };
        h % members
    }

    /// The classic BPF program that makes the kernel steer as [`Steer::member`] says.
    pub fn program(&self, members: u32) -> Program {
        let n = members.max(1);
        let insns = match *self {
            Steer::Source => vec![
                /* 0 */ stmt(LD | B | ABS, NET_OFF as u32), // A = version/IHL
                /* 1 */ stmt(ALU | RSH | K, 4),
                /* 2 */ jump(JMP | JEQ | K, 6, 5, 0), // IPv6 -> 8
                /* 3 */ stmt(LDX | B | MSH, NET_OFF as u32), // X = IHL * 4
                /* 4 */ stmt(LD | H | IND, NET_OFF as u32), // A = UDP source port
                /* 5 */ stmt(MISC | TAX, 0),
                /* 6 */ stmt(LD | W | ABS, (NET_OFF + 12) as u32), // A = IPv4 source
                /* 7 */ jump(JMP | JA, 3, 0, 0), // -> 11
                /* 8 */ stmt(LD | H | ABS, (NET_OFF + 40) as u32), // A = UDP source port
                /* 9 */ stmt(MISC | TAX, 0),
                /* 10 */ stmt(LD | W | ABS, (NET_OFF + 20) as u32), // A = source, last word
                /* 11 */ stmt(ALU | ADD | X, 0),
                /* 12 */ stmt(ALU | MUL | K, MIX),
                /* 13 */ stmt(ALU | RSH | K, 16),
                /* 14 */ stmt(ALU | MOD | K, n),
                /* 15 */ stmt(RET | A, 0),
            ],
            Steer::PayloadStream { offset, mask } => vec![
                /* 0 */ stmt(LD | W | LEN, 0),
                /* 1 */ jump(JMP | JEQ | K, crate::control::END_LEN as u32, 0, 8), // -> 10
                /* 2 */ stmt(LD | W | ABS, 0),
                /* 3 */ jump(JMP | JEQ | K, END_MAGIC_WORD, 0, 6), // -> 10
                /* 4 */ stmt(LD | B | ABS, 17), // the end message's format stream, LE
                /* 5 */ stmt(ALU | LSH | K, 8),
                /* 6 */ stmt(MISC | TAX, 0),
                /* 7 */ stmt(LD | B | ABS, 16),
                /* 8 */ stmt(ALU | OR | X, 0),
                /* 9 */ jump(JMP | JA, 6, 0, 0), // -> 16
                /* 10 */ stmt(LD | B | ABS, offset + 1),
                /* 11 */ stmt(ALU | LSH | K, 8),
                /* 12 */ stmt(MISC | TAX, 0),
                /* 13 */ stmt(LD | B | ABS, offset),
                /* 14 */ stmt(ALU | OR | X, 0),
                /* 15 */ stmt(ALU | AND | K, u32::from(mask)),
                /* 16 */ stmt(ALU | MOD | K, n),
                /* 17 */ stmt(RET | A, 0),
            ],
        };
        Program { insns }
    }
}

impl Program {
    /// The instructions.
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// Run the program over a datagram as the kernel's reuseport hook presents it: `net` is
    /// the packet from its IP header on (`SKF_NET_OFF`), `payload_at` where the UDP payload
    /// starts in it (offset 0 of ordinary loads). Only the instructions this module emits
    /// are interpreted; a load outside the packet returns 0, as in the kernel.
    pub fn run(&self, net: &[u8], payload_at: usize) -> u32 {
        let payload = &net[payload_at.min(net.len())..];
        let load = |off: i64, size: usize| -> Option<u32> {
            let (buf, at) = if off >= 0 {
                (payload, off as usize)
            } else if off >= NET_OFF as i64 {
                (net, (off - NET_OFF as i64) as usize)
            } else {
                return None;
            };
            let b = buf.get(at..at + size)?;
            Some(b.iter().fold(0u32, |v, &x| (v << 8) | u32::from(x)))
        };
        let (mut a, mut x, mut mem) = (0u32, 0u32, [0u32; 16]);
        let mut pc = 0usize;
        while let Some(i) = self.insns.get(pc) {
            pc += 1;
            let size = match i.code & 0x18 {
                W => 4,
                H => 2,
                _ => 1,
            };
            match i.code & 0x07 {
                LD => {
                    a = match i.code & 0xe0 {
                        ABS => match load(i.k as i32 as i64, size) {
                            Some(v) => v,
                            None => return 0,
                        },
                        IND => match load(i.k as i32 as i64 + i64::from(x), size) {
                            Some(v) => v,
                            None => return 0,
                        },
                        LEN => payload.len() as u32,
                        MEM => mem[i.k as usize & 15],
                        _ => i.k,
                    }
                }
                LDX => {
                    x = match i.code & 0xe0 {
                        MSH => match load(i.k as i32 as i64, 1) {
                            Some(v) => (v & 0xf) * 4,
                            None => return 0,
                        },
                        _ => i.k,
                    }
                }
                ST => mem[i.k as usize & 15] = a,
                ALU => {
                    let v = if i.code & X != 0 { x } else { i.k };
                    a = match i.code & 0xf0 {
                        ADD => a.wrapping_add(v),
                        MUL => a.wrapping_mul(v),
                        OR => a | v,
                        AND => a & v,
                        LSH => a.wrapping_shl(v),
                        RSH => a.wrapping_shr(v),
                        MOD if v != 0 => a % v,
                        _ => return 0,
                    }
                }
                JMP => match i.code & 0xf0 {
                    JA => pc += i.k as usize,
                    JEQ => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                    _ => return 0,
                },
                RET => return if i.code & A != 0 { a } else { i.k },
                MISC => x = a,
                _ => return 0,
            }
        }
        0
    }
}

/// A UDP socket bound to `addr` with SO_REUSEPORT set before the bind, so that the other
/// capture threads' sockets can join its group (each binding the same address and port).
pub fn bind_reuseport_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    super::socket::bind_udp(addr, true)
}

/// Attach `prog` to the reuseport group `sock` belongs to (it must be bound): from then on
/// the kernel asks the program which member gets each unicast datagram.
pub fn attach_reuseport_cbpf(sock: &UdpSocket, prog: &Program) -> io::Result<()> {
    attach(sock.as_raw_fd(), SO_ATTACH_REUSEPORT_CBPF, prog)
}

fn attach(fd: RawFd, opt: libc::c_int, prog: &Program) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.insns.len() as libc::c_ushort,
        filter: prog.insns.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `Insn` is #[repr(C)] with the fields of `struct sock_filter` in order, so the
    // vector is an array of `len` sock_filters; the kernel copies it during the call, while
    // `prog` and `fprog` are alive.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&fprog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    cvt(ret).map(|_| ())
}

const _: () = assert!(size_of::<Insn>() == size_of::<libc::sock_filter>());

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV6};

    /// An IPv4 packet from its IP header on: 20-byte header (or longer with options), UDP
    /// header, payload.
    fn v4(src: Ipv4Addr, sport: u16, ihl_words: u8, payload: &[u8]) -> (Vec<u8>, usize) {
        let ihl = usize::from(ihl_words) * 4;
        let mut p = vec![0u8; ihl + 8];
        p[0] = 0x40 | ihl_words;
        p[12..16].copy_from_slice(&src.octets());
        p[ihl..ihl + 2].copy_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(payload);
        (p, ihl + 8)
    }

    fn v6(src: Ipv6Addr, sport: u16, payload: &[u8]) -> (Vec<u8>, usize) {
        let mut p = vec![0u8; 48];
        p[0] = 0x60;
        p[8..24].copy_from_slice(&src.octets());
        p[40..42].copy_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(payload);
        (p, 48)
    }

    #[test]
    fn source_program_agrees_with_the_rust_steering() {
        for n in [2u32, 3, 4, 7] {
            let prog = Steer::Source.program(n);
            for port in 40000..40040u16 {
                for ihl in [5u8, 6, 15] {
                    let src = Ipv4Addr::new(198, 18, 0, (port % 7) as u8);
                    let (pkt, at) = v4(src, port, ihl, &[0u8; 64]);
                    let want = Steer::Source.member(&[0u8; 64], Some(SocketAddr::from((src, port))), n);
                    assert_eq!(prog.run(&pkt, at), want, "v4 {src}:{port} ihl {ihl} n {n}");
                }
                let src6: Ipv6Addr = format!("2001:2::{:x}", port % 5).parse().unwrap();
                let (pkt, at) = v6(src6, port, &[1u8; 16]);
                let a = SocketAddr::V6(SocketAddrV6::new(src6, port, 0, 0));
                assert_eq!(prog.run(&pkt, at), Steer::Source.member(&[], Some(a), n), "v6 {a}");
            }
        }
        // Odd ports only (what connected sockets get) still spread over two members.
        let zeros = (0..64u16)
            .filter(|i| Steer::Source.member(&[], Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 40001 + 2 * i))), 2) == 0)
            .count();
        assert!((24..=40).contains(&zeros), "{zeros} of 64 odd ports on member 0");
    }

    #[test]
    fn stream_program_reads_the_vdif_thread_and_the_end_message() {
        let steer = Steer::PayloadStream { offset: 14, mask: 0x3ff };
        for n in [2u32, 3, 4] {
            let prog = steer.program(n);
            for thread in 0..40u32 {
                let mut frame = vec![0u8; 64];
                frame[14..16].copy_from_slice(&((thread as u16) | 0xfc00).to_le_bytes());
                let (pkt, at) = v4(Ipv4Addr::LOCALHOST, 9, 5, &frame);
                let want = steer.member(&frame, None, n);
                assert_eq!(want, thread % n);
                assert_eq!(prog.run(&pkt, at), want);
                let end = crate::control::EndOfStream {
                    session: 1,
                    stream_index: thread,
                    stream_count: 40,
                    format_stream: thread,
                    first_seq: 0,
                    last_seq: 9,
                    sent: 10,
                    skipped: 0,
                }
                .encode();
                let (pkt, at) = v4(Ipv4Addr::LOCALHOST, 9, 5, &end);
                assert_eq!(steer.member(&end, None, n), thread % n, "end message of thread {thread}");
                assert_eq!(prog.run(&pkt, at), thread % n);
            }
            // Too short to hold the field: the first member, as the kernel does.
            let (pkt, at) = v4(Ipv4Addr::LOCALHOST, 9, 5, &[0u8; 8]);
            assert_eq!(prog.run(&pkt, at), 0);
        }
    }

    /// The kernel runs the programs as [`Program::run`] does: with two members, every source
    /// port's datagrams, and every VDIF thread's, reach the member the Rust steering names.
    #[test]
    fn the_kernel_steers_as_predicted() {
        use std::time::Duration;
        let recv_all = |socks: &[UdpSocket]| -> Vec<Vec<(SocketAddr, Vec<u8>)>> {
            socks
                .iter()
                .map(|s| {
                    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
                    let mut got = Vec::new();
                    let mut b = [0u8; 2048];
                    while let Ok((n, from)) = s.recv_from(&mut b) {
                        got.push((from, b[..n].to_vec()));
                    }
                    got
                })
                .collect()
        };
        for steer in [Steer::Source, Steer::PayloadStream { offset: 14, mask: 0x3ff }] {
            let first = bind_reuseport_udp("127.0.0.1:0".parse().unwrap()).unwrap();
            let addr = first.local_addr().unwrap();
            let second = bind_reuseport_udp(addr).unwrap();
            attach_reuseport_cbpf(&first, &steer.program(2)).unwrap();
            let socks = [first, second];
            let mut sent = 0;
            for i in 0..8u16 {
                let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
                for thread in 0..4u16 {
                    let mut frame = vec![0u8; 64];
                    frame[14..16].copy_from_slice(&thread.to_le_bytes());
                    frame[0..2].copy_from_slice(&i.to_le_bytes());
                    tx.send_to(&frame, addr).unwrap();
                    sent += 1;
                }
            }
            let got = recv_all(&socks);
            assert_eq!(got.iter().map(Vec::len).sum::<usize>(), sent, "{steer:?}");
            for (member, dgrams) in got.iter().enumerate() {
                assert!(!dgrams.is_empty(), "{steer:?}: member {member} got nothing");
                for (from, d) in dgrams {
                    assert_eq!(steer.member(d, Some(*from), 2), member as u32, "{steer:?} {from}");
                }
            }
        }
    }
}
