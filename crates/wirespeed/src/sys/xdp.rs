//! AF_XDP receive: the raw `bpf()` and AF_XDP calls behind the `xdp` receive backend, with no
//! libbpf: the XSKMAP, a hand-assembled XDP program that redirects one IPv4/UDP destination
//! (address and port) to the socket, its attachment as a BPF link (closing the link's
//! descriptor detaches it, so a crashed receiver leaves nothing behind), and the AF_XDP
//! socket in copy mode (UMEM, fill/completion/RX rings, `XDP_STATISTICS`).
//!
//! The safe surface is [`XskSocket::open`] (set everything up, explaining failures) and
//! [`XskReader`] (the single consumer of the RX ring, on the capture thread).

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

const AF_XDP: libc::c_int = 44;
const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_COPY: u16 = 1 << 1;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_RING_NEED_WAKEUP: u32 = 1;
const XDP_PGOFF_RX_RING: libc::off_t = 0;
const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_PASS: i32 = 2;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;

/// UMEM frame size: one page, so a 1500-byte MTU frame (and anything up to 4 KiB) fits.
pub const XSK_FRAME: usize = 4096;
/// XSKMAP slots (rx queue indices the program can redirect).
const MAP_SLOTS: u32 = 64;
/// Ethernet + IPv4 (no options) + UDP headers: where the program finds the UDP payload.
pub const UDP4_HEADERS: usize = 42;

// ---- the XDP program -------------------------------------------------------------------

/// One eBPF instruction, encoded as the kernel's `struct bpf_insn` (code, dst:4 | src:4 in
/// the host's bit order, off, imm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode (class | size/op | mode/source).
    pub code: u8,
    /// Destination register.
    pub dst: u8,
    /// Source register (or a pseudo-source such as `BPF_PSEUDO_MAP_FD`).
    pub src: u8,
    /// Offset (memory access) or jump distance.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

impl Insn {
    /// The 8 bytes the kernel reads.
    pub fn encode(self) -> u64 {
        let regs = if cfg!(target_endian = "little") {
            (self.dst & 0xf) | (self.src << 4)
        } else {
            (self.dst << 4) | (self.src & 0xf)
        };
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        u64::from_ne_bytes(b)
    }
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, dst, src, off, imm }
}
const BPF_LD: u8 = 0x00;
const BPF_LDX: u8 = 0x01;
const BPF_JMP: u8 = 0x05;
const BPF_JMP32: u8 = 0x06;
const BPF_ALU64: u8 = 0x07;
const BPF_W: u8 = 0x00;
const BPF_H: u8 = 0x08;
const BPF_B: u8 = 0x10;
const BPF_DW: u8 = 0x18;
const BPF_MEM: u8 = 0x60;
const BPF_IMM: u8 = 0x00;
const BPF_X: u8 = 0x08;
const BPF_ADD: u8 = 0x00;
const BPF_AND: u8 = 0x50;
const BPF_MOV: u8 = 0xb0;
const BPF_JGT: u8 = 0x20;
const BPF_JNE: u8 = 0x50;
const BPF_CALL: u8 = 0x80;
const BPF_EXIT: u8 = 0x90;
const BPF_PSEUDO_MAP_FD: u8 = 1;

fn ldx(size: u8, dst: u8, src: u8, off: i16) -> Insn {
    insn(BPF_LDX | BPF_MEM | size, dst, src, off, 0)
}
fn jne(dst: u8, imm: i32, off: i16) -> Insn {
    insn(BPF_JMP | BPF_JNE, dst, 0, off, imm)
}

/// The XDP program: an IPv4 frame without options, not a fragment, UDP to `dst:port` goes to
/// the XSKMAP slot of its rx queue (or passes, if no socket is there); everything else (ARP,
/// other ports, fragments, IPv6) passes to the stack untouched. Comparisons are against the
/// header bytes as the host loads them, so the constants are the network-order bytes read in
/// host order. `map_fd` fills the 64-bit map load (instructions 20-21).
pub fn xdp_program(dst: Ipv4Addr, port: u16, map_fd: i32) -> Vec<Insn> {
    const PASS: i16 = 24;
    // A jump at instruction `at` to PASS.
    let to_pass = |at: i16| PASS - at - 1;
    let ethertype = u16::from_ne_bytes(0x0800u16.to_be_bytes()) as i32;
    let frag_mask = u16::from_ne_bytes(0x3fffu16.to_be_bytes()) as i32;
    let addr = u32::from_ne_bytes(dst.octets()) as i32;
    let port = u16::from_ne_bytes(port.to_be_bytes()) as i32;
    vec![
        /* 0 */ ldx(BPF_W, 2, 1, 0), // r2 = ctx->data
        /* 1 */ ldx(BPF_W, 3, 1, 4), // r3 = ctx->data_end
        /* 2 */ insn(BPF_ALU64 | BPF_MOV | BPF_X, 4, 2, 0, 0), // r4 = r2
        /* 3 */ insn(BPF_ALU64 | BPF_ADD, 4, 0, 0, UDP4_HEADERS as i32),
        /* 4 */ insn(BPF_JMP | BPF_JGT | BPF_X, 4, 3, to_pass(4), 0), // shorter than the headers
        /* 5 */ ldx(BPF_H, 5, 2, 12), // ethertype
        /* 6 */ jne(5, ethertype, to_pass(6)),
        /* 7 */ ldx(BPF_B, 5, 2, 14), // version and IHL: IPv4, 20-byte header
        /* 8 */ jne(5, 0x45, to_pass(8)),
        /* 9 */ ldx(BPF_B, 5, 2, 23), // protocol
        /* 10 */ jne(5, 17, to_pass(10)),
        /* 11 */ ldx(BPF_H, 5, 2, 20), // flags and fragment offset
        /* 12 */ insn(BPF_ALU64 | BPF_AND, 5, 0, 0, frag_mask), // MF or an offset: a fragment
        /* 13 */ jne(5, 0, to_pass(13)),
        /* 14 */ ldx(BPF_W, 5, 2, 30), // destination address
        /* 15 */ insn(BPF_JMP32 | BPF_JNE, 5, 0, to_pass(15), addr),
        /* 16 */ ldx(BPF_H, 5, 2, 36), // UDP destination port
        /* 17 */ jne(5, port, to_pass(17)),
        /* 18 */ ldx(BPF_W, 2, 1, 16), // key = ctx->rx_queue_index
        /* 19 */ insn(BPF_ALU64 | BPF_MOV, 3, 0, 0, XDP_PASS), // no socket in the slot: pass
        /* 20 */ insn(BPF_LD | BPF_DW | BPF_IMM, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        /* 21 */ insn(0, 0, 0, 0, 0),
        /* 22 */ insn(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        /* 23 */ insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
        /* 24 PASS */ insn(BPF_ALU64 | BPF_MOV, 0, 0, 0, XDP_PASS),
        /* 25 */ insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
    ]
}

// ---- bpf() -----------------------------------------------------------------------------

/// A zeroed `union bpf_attr` (128 bytes covers every field used here; the kernel requires
/// the bytes past the fields it knows to be zero, which they are).
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

/// `bpf(cmd, attr)`: a new descriptor (or 0) on success.
fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: attr is a live, writable 128-byte buffer laid out as the union the command
    // reads; the pointers stored in it (set by the callers) point to live buffers of the
    // lengths given beside them for the duration of this call.
    let r =
        unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut Attr, std::mem::size_of::<Attr>() as libc::c_uint) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: fd was just returned by the kernel as a new descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

fn create_xskmap() -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, BPF_MAP_TYPE_XSKMAP).u32(4, 4).u32(8, 4).u32(12, MAP_SLOTS);
    bpf(BPF_MAP_CREATE, &mut a).map(owned)
}

/// Load the program; on a verifier refusal the error carries the verifier's log.
fn load_program(insns: &[Insn]) -> io::Result<OwnedFd> {
    let code: Vec<u64> = insns.iter().map(|i| i.encode()).collect();
    let license = b"GPL\0";
    let mut log = vec![0u8; 1 << 16];
    let mut a = Attr::new();
    a.u32(0, BPF_PROG_TYPE_XDP)
        .u32(4, code.len() as u32)
        .u64(8, code.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .u32(24, 1)
        .u32(28, log.len() as u32)
        .u64(32, log.as_mut_ptr() as u64)
        .u32(68, BPF_XDP);
    a.0[48..55].copy_from_slice(b"ws_xsk\0");
    bpf(BPF_PROG_LOAD, &mut a).map(owned).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]);
        io::Error::new(e.kind(), format!("{e}; verifier: {}", text.trim()))
    })
}

fn map_update(map: &OwnedFd, key: u32, value: u32) -> io::Result<()> {
    let mut a = Attr::new();
    a.u32(0, map.as_raw_fd() as u32).u64(8, &key as *const u32 as u64).u64(16, &value as *const u32 as u64);
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

fn link_create(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = Attr::new();
    a.u32(0, prog.as_raw_fd() as u32).u32(4, ifindex).u32(8, BPF_XDP).u32(12, flags);
    bpf(BPF_LINK_CREATE, &mut a).map(owned)
}

// ---- interfaces ------------------------------------------------------------------------

/// The interface holding a local IPv4 address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    /// Its name, e.g. `veth0`.
    pub name: String,
    /// Its index.
    pub index: u32,
    /// Whether it is a loopback interface.
    pub loopback: bool,
}

/// Which interface holds `addr` (`None` if none does).
pub fn interface_with(addr: Ipv4Addr) -> io::Result<Option<Iface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: head is a valid out-pointer; on success the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr whose family says its type.
        let family = unsafe { (*ifa.ifa_addr).sa_family } as libc::c_int;
        if family != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address is a sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        if Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)) != addr {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        // SAFETY: name is NUL-terminated.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        found = Some(Iface {
            name: name.to_string_lossy().into_owned(),
            index,
            loopback: ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0,
        });
        break;
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}

// ---- the AF_XDP socket -----------------------------------------------------------------

#[repr(C)]
#[derive(Default)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct XdpDesc {
    addr: u64,
    len: u32,
    options: u32,
}

/// The kernel's counters of an AF_XDP socket (`XDP_STATISTICS`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames dropped for another reason than a full ring: in copy mode, mostly frames larger
    /// than a UMEM frame.
    pub rx_dropped: u64,
    /// Invalid descriptors on the RX ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors on the TX ring.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full (the reader did not keep up).
    pub rx_ring_full: u64,
    /// Times the fill ring had no frame for an arriving packet.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the TX ring was empty.
    pub tx_ring_empty_descs: u64,
}

/// An mmap'ed region, unmapped on drop.
struct Map {
    ptr: *mut u8,
    len: usize,
}

impl Map {
    fn new(len: usize, fd: Option<RawFd>, offset: libc::off_t) -> io::Result<Map> {
        let (flags, fd) = match fd {
            Some(fd) => (libc::MAP_SHARED | libc::MAP_POPULATE, fd),
            None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE, -1),
        };
        // SAFETY: a fresh mapping chosen by the kernel; nothing aliases it.
        let ptr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, fd, offset) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map { ptr: ptr as *mut u8, len })
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly the mapping made in Map::new, unmapped once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// One mmap'ed ring: the shared producer and consumer indices, flags and the slots.
struct Ring {
    _map: Map,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    size: u32,
}

impl Ring {
    fn map(fd: RawFd, off: RingOffset, size: u32, slot: usize, pgoff: libc::off_t) -> io::Result<Ring> {
        let map = Map::new(off.desc as usize + size as usize * slot, Some(fd), pgoff)?;
        let at = |o: u64| map.ptr.wrapping_add(o as usize);
        Ok(Ring {
            producer: at(off.producer) as *const AtomicU32,
            consumer: at(off.consumer) as *const AtomicU32,
            flags: at(off.flags) as *const AtomicU32,
            desc: at(off.desc),
            size,
            _map: map,
        })
    }
    fn producer(&self) -> &AtomicU32 {
        // SAFETY: the offset came from XDP_MMAP_OFFSETS and lies in the live mapping; the
        // kernel's u32 index is 4-byte aligned and only ever accessed atomically.
        unsafe { &*self.producer }
    }
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for producer().
        unsafe { &*self.consumer }
    }
    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as for producer().
        unsafe { &*self.flags }
    }
}

/// One queue's AF_XDP socket with its rings and UMEM. The field order is the teardown order:
/// the rings, then the socket, then the UMEM.
struct Queue {
    rx: Ring,
    fill: Ring,
    _comp: Ring,
    sock: OwnedFd,
    umem: Map,
}

/// Everything the socket set owns; dropped when both the endpoint and the reader are gone.
/// The field order is the teardown order: the link first (detaching the program), then the
/// program, the map and the sockets.
struct Inner {
    link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    queues: Vec<Queue>,
    frames: u32,
    taken: AtomicBool,
}

// SAFETY: the raw pointers point into mappings Inner owns for its whole life; the rings'
// indices are only accessed atomically, and the one XskReader (handed out once, see `taken`)
// is the only one to touch ring slots and received frames.
unsafe impl Send for Inner {}
// SAFETY: as above: shared access is limited to reading statistics via the sockets.
unsafe impl Sync for Inner {}

/// What [`XskSocket::open`] is asked to set up.
#[derive(Clone, Debug)]
pub struct XskConfig {
    /// Interface index.
    pub ifindex: u32,
    /// Receive queues to bind, 0..queues (one socket each).
    pub queues: u32,
    /// Destination address the program redirects.
    pub addr: Ipv4Addr,
    /// Destination UDP port the program redirects.
    pub port: u16,
    /// UMEM frames per queue (a power of two; the RX ring gets half as many slots).
    pub frames: u32,
    /// Attach in native mode (else generic).
    pub native: bool,
}

/// Which step of the set-up failed, so the caller can explain it.
#[derive(Debug)]
pub struct XskError {
    /// The step, e.g. "bpf(BPF_PROG_LOAD)".
    pub step: &'static str,
    /// The kernel's error.
    pub err: io::Error,
}

fn step(step: &'static str) -> impl Fn(io::Error) -> XskError {
    move |err: io::Error| XskError { step, err }
}

/// AF_XDP sockets, one per receive queue of an interface, with their UMEMs, rings and the
/// attached redirect program.
pub struct XskSocket {
    inner: Arc<Inner>,
}

impl Queue {
    fn open(ifindex: u32, queue: u32, frames: u32) -> Result<Queue, XskError> {
        let rx_size = frames / 2;
        let comp_size = 64u32;
        // SAFETY: plain socket(2) call; the result is checked and owned at once.
        let fd = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(XskError { step: "socket(AF_XDP)", err: io::Error::last_os_error() });
        }
        let sock = owned(fd as libc::c_long);
        let s = sock.as_raw_fd();
        let umem = Map::new(frames as usize * XSK_FRAME, None, 0).map_err(step("mmap(UMEM)"))?;
        let reg =
            UmemReg { addr: umem.ptr as u64, len: umem.len as u64, chunk_size: XSK_FRAME as u32, ..Default::default() };
        setsockopt(s, XDP_UMEM_REG, &reg).map_err(step("setsockopt(XDP_UMEM_REG)"))?;
        setsockopt(s, XDP_UMEM_FILL_RING, &frames).map_err(step("setsockopt(XDP_UMEM_FILL_RING)"))?;
        setsockopt(s, XDP_UMEM_COMPLETION_RING, &comp_size).map_err(step("setsockopt(XDP_UMEM_COMPLETION_RING)"))?;
        setsockopt(s, XDP_RX_RING, &rx_size).map_err(step("setsockopt(XDP_RX_RING)"))?;
        let mut off = MmapOffsets::default();
        let mut len = std::mem::size_of::<MmapOffsets>() as libc::socklen_t;
        // SAFETY: off is a writable MmapOffsets of the length given.
        let r = unsafe {
            libc::getsockopt(s, SOL_XDP, XDP_MMAP_OFFSETS, &mut off as *mut _ as *mut libc::c_void, &mut len)
        };
        if r != 0 {
            return Err(XskError { step: "getsockopt(XDP_MMAP_OFFSETS)", err: io::Error::last_os_error() });
        }
        let fill = Ring::map(s, off.fr, frames, 8, XDP_UMEM_PGOFF_FILL_RING).map_err(step("mmap(fill ring)"))?;
        let comp = Ring::map(s, off.cr, comp_size, 8, XDP_UMEM_PGOFF_COMPLETION_RING)
            .map_err(step("mmap(completion ring)"))?;
        let rx = Ring::map(s, off.rx, rx_size, std::mem::size_of::<XdpDesc>(), XDP_PGOFF_RX_RING)
            .map_err(step("mmap(rx ring)"))?;
        // Hand every frame to the kernel.
        for i in 0..frames {
            // SAFETY: slot i < frames of the fill ring (size `frames` u64 slots) in its mapping;
            // the kernel reads slots only below the producer index, published below.
            unsafe { (fill.desc as *mut u64).add(i as usize).write(i as u64 * XSK_FRAME as u64) };
        }
        fill.producer().store(frames, Ordering::Release);
        let sa = SockaddrXdp {
            family: AF_XDP as u16,
            flags: XDP_COPY | XDP_USE_NEED_WAKEUP,
            ifindex,
            queue_id: queue,
            shared_umem_fd: 0,
        };
        // SAFETY: sa is a sockaddr_xdp of the length given.
        let r = unsafe {
            libc::bind(s, &sa as *const SockaddrXdp as *const libc::sockaddr, std::mem::size_of::<SockaddrXdp>() as u32)
        };
        if r != 0 {
            return Err(XskError { step: "bind(AF_XDP)", err: io::Error::last_os_error() });
        }
        Ok(Queue { rx, fill, _comp: comp, sock, umem })
    }
}

impl XskSocket {
    /// Create the map and program, attach it, then create the UMEMs and sockets, bind one to
    /// each queue, fill their fill rings and put them in the map. On any failure everything
    /// made so far is closed, which detaches the program.
    pub fn open(c: &XskConfig) -> Result<XskSocket, XskError> {
        let frames = c.frames.next_power_of_two().max(64);
        let nq = c.queues.clamp(1, MAP_SLOTS);
        let map = create_xskmap().map_err(step("bpf(BPF_MAP_CREATE, XSKMAP)"))?;
        let prog =
            load_program(&xdp_program(c.addr, c.port, map.as_raw_fd())).map_err(step("bpf(BPF_PROG_LOAD, XDP)"))?;
        // Attach first: an interface that already runs an XDP program is refused before any
        // socket takes one of its queues. Until a queue's socket is in the map, the program
        // passes that queue's frames to the stack as if it were not there.
        let flags = if c.native { XDP_FLAGS_DRV_MODE } else { XDP_FLAGS_SKB_MODE };
        let link = link_create(&prog, c.ifindex, flags).map_err(step("bpf(BPF_LINK_CREATE, BPF_XDP)"))?;
        let mut queues = Vec::with_capacity(nq as usize);
        for q in 0..nq {
            let queue = Queue::open(c.ifindex, q, frames)?;
            map_update(&map, q, queue.sock.as_raw_fd() as u32).map_err(step("bpf(BPF_MAP_UPDATE_ELEM)"))?;
            queues.push(queue);
        }
        let inner = Inner { link, _prog: prog, _map: map, queues, frames, taken: AtomicBool::new(false) };
        Ok(XskSocket { inner: Arc::new(inner) })
    }

    /// The sockets' counters, summed.
    pub fn statistics(&self) -> io::Result<XdpStats> {
        statistics(&self.inner)
    }

    /// UMEM frames a queue (each [`XSK_FRAME`] bytes).
    pub fn frames(&self) -> u32 {
        self.inner.frames
    }

    /// Queues bound.
    pub fn queues(&self) -> usize {
        self.inner.queues.len()
    }

    /// RX ring slots, all queues together.
    pub fn rx_slots(&self) -> u32 {
        self.inner.queues.iter().map(|q| q.rx.size).sum()
    }

    /// The BPF link's descriptor (closing it detaches the program).
    pub fn link_fd(&self) -> RawFd {
        self.inner.link.as_raw_fd()
    }

    /// The one reader of the RX rings; `None` if it was already taken.
    pub fn reader(&self) -> Option<XskReader> {
        if self.inner.taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        let i = &self.inner;
        let idx = i
            .queues
            .iter()
            .map(|q| (q.rx.consumer().load(Ordering::Relaxed), q.fill.producer().load(Ordering::Relaxed)))
            .collect();
        let pfds = i
            .queues
            .iter()
            .map(|q| libc::pollfd { fd: q.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 })
            .collect();
        Some(XskReader { inner: Arc::clone(&self.inner), idx, pfds, next: 0 })
    }
}

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: v is a live T and its size is passed.
    let r = unsafe {
        libc::setsockopt(fd, SOL_XDP, opt, v as *const T as *const libc::c_void, std::mem::size_of::<T>() as u32)
    };
    if r != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn statistics(inner: &Inner) -> io::Result<XdpStats> {
    let mut sum = XdpStats::default();
    for q in &inner.queues {
        let mut st = XdpStats::default();
        let mut len = std::mem::size_of::<XdpStats>() as libc::socklen_t;
        // SAFETY: st is a writable XdpStats of the length given.
        let r = unsafe {
            libc::getsockopt(
                q.sock.as_raw_fd(),
                SOL_XDP,
                XDP_STATISTICS,
                &mut st as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        sum.rx_dropped += st.rx_dropped;
        sum.rx_invalid_descs += st.rx_invalid_descs;
        sum.tx_invalid_descs += st.tx_invalid_descs;
        sum.rx_ring_full += st.rx_ring_full;
        sum.rx_fill_ring_empty_descs += st.rx_fill_ring_empty_descs;
        sum.tx_ring_empty_descs += st.tx_ring_empty_descs;
    }
    Ok(sum)
}

/// The single consumer of an [`XskSocket`]'s RX rings and producer of its fill rings.
pub struct XskReader {
    inner: Arc<Inner>,
    /// Per queue: the RX consumer and fill producer indices.
    idx: Vec<(u32, u32)>,
    pfds: Vec<libc::pollfd>,
    /// The queue to look at first (round robin, so that no queue starves another).
    next: usize,
}

// SAFETY: the pollfds are plain data; everything else is Send (Inner: see above).
unsafe impl Send for XskReader {}

impl XskReader {
    /// Take up to `max` received frames (from all queues), hand each to `f`, and give their
    /// UMEM frames back to the kernel. When none are there and `wait_ms` > 0, wait that long
    /// for some (poll). Returns how many frames were handed over.
    #[inline]
    pub fn recv<F: FnMut(&[u8])>(&mut self, max: usize, wait_ms: i32, mut f: F) -> io::Result<usize> {
        let mut n = self.take(max, &mut f);
        if n == 0 && wait_ms > 0 {
            self.wait(wait_ms)?;
            n = self.take(max, &mut f);
        }
        Ok(n)
    }

    fn take<F: FnMut(&[u8])>(&mut self, max: usize, f: &mut F) -> usize {
        let nq = self.idx.len();
        let mut total = 0;
        for k in 0..nq {
            if total >= max {
                break;
            }
            let q = (self.next + k) % nq;
            total += self.take_queue(q, max - total, f);
        }
        self.next = (self.next + 1) % nq;
        total
    }

    #[inline]
    fn take_queue<F: FnMut(&[u8])>(&mut self, qi: usize, max: usize, f: &mut F) -> usize {
        let q = &self.inner.queues[qi];
        let (mut rx_cons, mut fill_prod) = self.idx[qi];
        let prod = q.rx.producer().load(Ordering::Acquire);
        let n = (prod.wrapping_sub(rx_cons) as usize).min(max) as u32;
        if n == 0 {
            return 0;
        }
        let rx_mask = q.rx.size - 1;
        let fill_mask = q.fill.size - 1;
        for k in 0..n {
            let slot = (rx_cons.wrapping_add(k) & rx_mask) as usize;
            // SAFETY: slot < rx size, inside the RX ring's mapping; the kernel published this
            // descriptor (below the producer index read with Acquire above).
            let d = unsafe { (q.rx.desc as *const XdpDesc).add(slot).read() };
            let start = d.addr as usize;
            let end = start.saturating_add(d.len as usize);
            if end <= q.umem.len {
                // SAFETY: [start, end) lies inside the UMEM mapping (checked above), and the
                // kernel handed this frame to us with the descriptor: it does not write it
                // until it comes back through the fill ring, after `f` returns.
                let frame = unsafe { std::slice::from_raw_parts(q.umem.ptr.add(start), d.len as usize) };
                f(frame);
            }
            let fslot = (fill_prod.wrapping_add(k) & fill_mask) as usize;
            let base = d.addr & !(XSK_FRAME as u64 - 1);
            // SAFETY: fslot < fill size, inside the fill ring's mapping; every UMEM frame is
            // either in the fill ring, in the RX ring or being handed back here, so the fill
            // ring (one slot a frame) always has room for the ones given back.
            unsafe { (q.fill.desc as *mut u64).add(fslot).write(base) };
        }
        fill_prod = fill_prod.wrapping_add(n);
        q.fill.producer().store(fill_prod, Ordering::Release);
        rx_cons = rx_cons.wrapping_add(n);
        q.rx.consumer().store(rx_cons, Ordering::Release);
        self.idx[qi] = (rx_cons, fill_prod);
        n as usize
    }

    fn wait(&mut self, wait_ms: i32) -> io::Result<()> {
        for q in &self.inner.queues {
            if q.fill.flags().load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0 {
                // SAFETY: a zero-length receive with no buffer: only wakes the kernel's RX path.
                unsafe {
                    libc::recvfrom(
                        q.sock.as_raw_fd(),
                        std::ptr::null_mut(),
                        0,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                };
            }
        }
        // SAFETY: pfds is a live array of valid pollfds of the length given.
        let r = unsafe { libc::poll(self.pfds.as_mut_ptr(), self.pfds.len() as libc::nfds_t, wait_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The sockets' counters, summed.
    pub fn statistics(&self) -> io::Result<XdpStats> {
        statistics(&self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_encode_as_the_kernel_lays_them_out() {
        // r2 = *(u32 *)(r1 + 4): LDX|MEM|W = 0x61, dst 2, src 1, off 4.
        let e = ldx(BPF_W, 2, 1, 4).encode().to_ne_bytes();
        assert_eq!(e, [0x61, 0x12, 4, 0, 0, 0, 0, 0]);
        // call bpf_redirect_map: 0x85, imm 51.
        let e = insn(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP).encode().to_ne_bytes();
        assert_eq!(e, [0x85, 0, 0, 0, 51, 0, 0, 0]);
        // exit: 0x95.
        assert_eq!(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0).encode().to_ne_bytes()[0], 0x95);
        // jne r5, 0x45, +15.
        let e = jne(5, 0x45, 15).encode().to_ne_bytes();
        assert_eq!(e, [0x55, 0x05, 15, 0, 0x45, 0, 0, 0]);
    }

    #[test]
    fn program_filters_the_address_and_port_and_jumps_to_pass() {
        let p = xdp_program(Ipv4Addr::new(198, 18, 0, 200), 7148, 9);
        assert_eq!(p.len(), 26);
        // Every conditional jump lands on the PASS block (r0 = XDP_PASS; exit).
        for (at, i) in p.iter().enumerate() {
            let class = i.code & 0x07;
            let op = i.code & 0xf0;
            if (class == BPF_JMP || class == BPF_JMP32) && op != BPF_CALL && op != BPF_EXIT {
                let target = at as i64 + 1 + i.off as i64;
                assert_eq!(target, 24, "jump at {at}");
            }
        }
        assert_eq!(p[24], insn(BPF_ALU64 | BPF_MOV, 0, 0, 0, XDP_PASS));
        // The address compare is 32-bit (the last octet 200 would sign-extend in a 64-bit one)
        // against the network-order bytes as the host reads them.
        assert_eq!(p[15].code, BPF_JMP32 | BPF_JNE);
        assert_eq!(p[15].imm.to_ne_bytes(), [198, 18, 0, 200]);
        assert_eq!((p[17].imm as u16).to_ne_bytes(), 7148u16.to_be_bytes());
        assert_eq!((p[6].imm as u16).to_ne_bytes(), [0x08, 0x00]);
        // The map load carries the map's descriptor as a pseudo map fd, in two slots.
        assert_eq!((p[20].code, p[20].src, p[20].dst, p[20].imm), (0x18, BPF_PSEUDO_MAP_FD, 1, 9));
        assert_eq!(p[21].encode(), 0);
        // Loads stay within the 42 bytes the bounds check at 4 proves.
        for i in &p {
            if i.code & 0x07 == BPF_LDX && i.src == 2 {
                let size = match i.code & 0x18 {
                    BPF_B => 1,
                    BPF_H => 2,
                    _ => 4,
                };
                assert!(i.off as usize + size <= UDP4_HEADERS);
            }
        }
    }
}
