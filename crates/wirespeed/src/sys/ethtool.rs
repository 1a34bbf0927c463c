//! What ethtool reads and sets, through the SIOCETHTOOL ioctl: ring sizes, interrupt
//! coalescing, channels, offload features, driver statistics. The doctor reads these for the
//! NIC a stream arrives on and `doctor --apply` sets them (and back, from the undo script).
//!
//! Functions return `ErrorKind::Unsupported` when the driver does not implement the request
//! (a veth has no rings): the doctor says "cannot be read", never guesses. A missing interface
//! is `NotFound`, a set without CAP_NET_ADMIN `PermissionDenied`, a name the kernel could never
//! hold `InvalidInput`.
//!
//! The interface is looked up in the network namespace of the thread that calls (the socket
//! each call opens belongs to it): to ask about an interface in another namespace, call from a
//! thread that joined it ([`super::proc::with_netns`]).
//!
//! Variable-length answers (string sets, statistics) are read into a buffer followed by an
//! inaccessible guard page: the kernel writes as many entries as the driver has *now*, not as
//! many as it said a moment before, so a count that grows in between (channels added) makes the
//! kernel's copy fail with EFAULT at the guard instead of writing past the buffer; the read is
//! then retried with the new count.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

// Commands and string sets of linux/ethtool.h.
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GCOALESCE: u32 = 0x0e;
const ETHTOOL_SCOALESCE: u32 = 0x0f;
const ETHTOOL_GRINGPARAM: u32 = 0x10;
const ETHTOOL_SRINGPARAM: u32 = 0x11;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_SCHANNELS: u32 = 0x3d;
const ETH_SS_STATS: u32 = 1;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

/// More strings or statistics than this is not a NIC but a broken answer: refused rather than
/// allocated for (the largest drivers have a few thousand statistics).
const MAX_COUNT: usize = 1 << 18;
/// Tries of a variable-length read whose count keeps changing under it.
const TRIES: usize = 4;

/// Ring sizes: current and the driver's maximum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rings {
    /// Receive ring entries now.
    pub rx: u32,
    /// Largest receive ring the driver allows.
    pub rx_max: u32,
    /// Transmit ring entries now.
    pub tx: u32,
    /// Largest transmit ring.
    pub tx_max: u32,
}

/// Receive interrupt coalescing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coalesce {
    /// Microseconds before a receive interrupt.
    pub rx_usecs: u32,
    /// Frames before a receive interrupt.
    pub rx_frames: u32,
    /// Adaptive receive coalescing on.
    pub adaptive_rx: bool,
}

/// Channels (queues): current and maximum, per kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Channels {
    /// Combined channels now.
    pub combined: u32,
    /// Largest combined count.
    pub max_combined: u32,
    /// Receive-only channels now.
    pub rx: u32,
    /// Largest receive-only count.
    pub max_rx: u32,
}

/// One offload feature as `ethtool -k` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feature {
    /// The ethtool name (`rx-gro-list`, `rx-udp-gro-forwarding`, `rx-checksum`).
    pub name: String,
    /// Active now.
    pub active: bool,
    /// Can be changed (not `[fixed]`).
    pub changeable: bool,
}

// ---- the kernel's structures (linux/ethtool.h) ----------------------------------------

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RingParam {
    cmd: u32,
    rx_max_pending: u32,
    rx_mini_max_pending: u32,
    rx_jumbo_max_pending: u32,
    tx_max_pending: u32,
    rx_pending: u32,
    rx_mini_pending: u32,
    rx_jumbo_pending: u32,
    tx_pending: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CoalesceParam {
    cmd: u32,
    rx_coalesce_usecs: u32,
    rx_max_coalesced_frames: u32,
    rx_coalesce_usecs_irq: u32,
    rx_max_coalesced_frames_irq: u32,
    tx_coalesce_usecs: u32,
    tx_max_coalesced_frames: u32,
    tx_coalesce_usecs_irq: u32,
    tx_max_coalesced_frames_irq: u32,
    stats_block_coalesce_usecs: u32,
    use_adaptive_rx_coalesce: u32,
    use_adaptive_tx_coalesce: u32,
    pkt_rate_low: u32,
    rx_coalesce_usecs_low: u32,
    rx_max_coalesced_frames_low: u32,
    tx_coalesce_usecs_low: u32,
    tx_max_coalesced_frames_low: u32,
    pkt_rate_high: u32,
    rx_coalesce_usecs_high: u32,
    rx_max_coalesced_frames_high: u32,
    tx_coalesce_usecs_high: u32,
    tx_max_coalesced_frames_high: u32,
    rate_sample_interval: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ChannelsParam {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct DrvInfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; ETHTOOL_FWVERS_LEN],
    bus_info: [u8; ETHTOOL_BUSINFO_LEN],
    erom_version: [u8; ETHTOOL_EROMVERS_LEN],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}
const ETHTOOL_FWVERS_LEN: usize = 32;
const ETHTOOL_BUSINFO_LEN: usize = 32;
const ETHTOOL_EROMVERS_LEN: usize = 32;

/// ethtool_sset_info asking for one set: the header and room for the one count it answers.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct SsetInfo1 {
    cmd: u32,
    reserved: u32,
    sset_mask: u64,
    data: [u32; 1],
}

// Header sizes of the variable-length structures (ethtool_gstrings, ethtool_stats,
// ethtool_gfeatures, ethtool_sfeatures) and their per-entry sizes.
const GSTRINGS_HDR: usize = 12;
const GSTATS_HDR: usize = 8;
const FEATURES_HDR: usize = 8;
const GET_BLOCK: usize = 16;
const SET_BLOCK: usize = 8;
/// More feature words than this (64 × 32 features) is not a kernel's answer.
const MAX_FEATURE_WORDS: usize = 64;

/// A fixed-size ethtool command structure.
///
/// # Safety
/// The implementor is `#[repr(C)]` plain data starting with the `u32` command, and is exactly
/// as large as what the kernel reads and writes for every command it is used with, so an ioctl
/// on it touches nothing outside it.
unsafe trait Command: Copy {}
// SAFETY: each is the kernel's fixed-size structure for its get and set commands (sizes
// checked in the tests); the sset_info one is asked for one set, so the kernel writes one count.
unsafe impl Command for RingParam {}
// SAFETY: as above.
unsafe impl Command for CoalesceParam {}
// SAFETY: as above.
unsafe impl Command for ChannelsParam {}
// SAFETY: as above.
unsafe impl Command for DrvInfo {}
// SAFETY: as above.
unsafe impl Command for SsetInfo1 {}

/// Zero-filled, writable memory followed by an inaccessible guard page, for answers whose
/// length the kernel decides when it answers.
struct Guarded {
    ptr: *mut u8,
    /// Usable bytes (a whole number of pages, at least what was asked).
    len: usize,
    /// The usable bytes and the guard page: the whole mapping.
    mapped: usize,
}

impl Guarded {
    fn new(bytes: usize) -> io::Result<Guarded> {
        // SAFETY: sysconf has no preconditions.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => 4096,
        };
        let len = bytes.max(1).div_ceil(page) * page;
        let mapped = len + page;
        // SAFETY: a fresh anonymous mapping at an address the kernel chooses; nothing aliases it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let g = Guarded { ptr: ptr.cast(), len, mapped };
        // SAFETY: the last page of the mapping just made; `len` is a whole number of pages, so
        // the address is page-aligned.
        if unsafe { libc::mprotect(g.ptr.add(len).cast(), page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(g)
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the first `len` bytes of the mapping are readable and live as long as `self`;
        // only the kernel writes them, during an ioctl that borrows `self` mutably.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn u32_at(&self, off: usize) -> u32 {
        self.bytes().get(off..off + 4).map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64_at(&self, off: usize) -> u64 {
        let mut v = [0u8; 8];
        if let Some(b) = self.bytes().get(off..off + 8) {
            v.copy_from_slice(b);
        }
        u64::from_ne_bytes(v)
    }

    fn set_u32(&mut self, off: usize, v: u32) {
        if let Some(b) = self.bytes_mut().get_mut(off..off + 4) {
            b.copy_from_slice(&v.to_ne_bytes());
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`, unmapped once; no reference outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.mapped) };
    }
}

/// A control socket bound to one interface name: what every request goes through.
struct Ctl {
    fd: OwnedFd,
    name: [libc::c_char; libc::IFNAMSIZ],
    iface: String,
}

impl Ctl {
    fn open(iface: &str) -> io::Result<Ctl> {
        let name = ifname(iface)?;
        // SAFETY: socket takes no pointers; the descriptor it returns is owned below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        let fd = super::cvt(fd)?;
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Ctl { fd, name, iface: iface.to_string() })
    }

    /// SIOCETHTOOL with `data` as the command structure.
    ///
    /// # Safety
    /// `data` must point at writable memory holding a command structure the kernel may read and
    /// write in full for the command in its first `u32`, or ending in a guard page it cannot
    /// write past.
    unsafe fn ioctl(&self, what: &str, set: bool, data: *mut libc::c_void) -> io::Result<libc::c_int> {
        // SAFETY: all-zero is a valid ifreq (a name of NULs, a null union).
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        ifr.ifr_name = self.name;
        ifr.ifr_ifru.ifru_data = data.cast();
        // SAFETY: `ifr` lives on the stack for the call and holds a NUL-terminated name; the
        // caller vouches for the memory `data` points at.
        let ret = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCETHTOOL as _, &mut ifr) };
        if ret < 0 {
            Err(self.error(what, set, io::Error::last_os_error()))
        } else {
            Ok(ret)
        }
    }

    /// A fixed-size get: `cmd` comes back as the kernel filled it.
    fn get<T: Command>(&self, what: &str, cmd: &mut T) -> io::Result<libc::c_int> {
        // SAFETY: `Command` guarantees the kernel reads and writes exactly a `T` for its
        // command, and `cmd` is a live, exclusive `T`.
        unsafe { self.ioctl(what, false, (cmd as *mut T).cast()) }
    }

    /// A fixed-size set.
    fn set<T: Command>(&self, what: &str, cmd: &mut T) -> io::Result<()> {
        // SAFETY: as in `get`.
        unsafe { self.ioctl(what, true, (cmd as *mut T).cast()) }.map(|_| ())
    }

    /// A variable-length request in guarded memory, the command already written at its start.
    fn call_guarded(&self, what: &str, set: bool, buf: &mut Guarded) -> io::Result<libc::c_int> {
        // SAFETY: `buf` is writable up to its guard page, which the kernel's copy cannot write
        // past (it fails with EFAULT there); `&mut` makes it ours alone for the call.
        unsafe { self.ioctl(what, set, buf.ptr.cast()) }
    }

    /// The error a caller can act on: what was asked, of which interface, and why it failed.
    /// EINVAL means "not implemented" from a get, but from a set (whose values were checked
    /// against the driver's maximums first) that the driver refused the values. EFAULT stays
    /// raw: it means a buffer was too short for a count that grew, and the read is retried.
    fn error(&self, what: &str, set: bool, e: io::Error) -> io::Error {
        let iface = &self.iface;
        match e.raw_os_error() {
            Some(libc::EFAULT) => e,
            Some(libc::EINVAL) if set => io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{iface}: the driver refused {what} to these values ({e})"),
            ),
            Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => {
                io::Error::new(io::ErrorKind::Unsupported, format!("{iface}: the driver does not support {what} ({e})"))
            }
            Some(libc::ENODEV) => io::Error::new(io::ErrorKind::NotFound, format!("no interface named {iface:?}")),
            Some(libc::EPERM) | Some(libc::EACCES) => {
                io::Error::new(io::ErrorKind::PermissionDenied, format!("{iface}: {what} needs CAP_NET_ADMIN ({e})"))
            }
            _ => io::Error::new(e.kind(), format!("{iface}: {what}: {e}")),
        }
    }

    /// How many strings set `set` has, or `None` when the driver has no such set.
    fn sset_count(&self, set: u32) -> io::Result<Option<usize>> {
        let mut info = SsetInfo1 { cmd: ETHTOOL_GSSET_INFO, sset_mask: 1 << set, ..Default::default() };
        self.get("string set sizes (ETHTOOL_GSSET_INFO)", &mut info)?;
        if info.sset_mask & (1 << set) == 0 {
            return Ok(None);
        }
        let n = info.data[0] as usize;
        if n > MAX_COUNT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: the driver reports {n} strings in set {set}, beyond any NIC's", self.iface),
            ));
        }
        Ok(Some(n))
    }

    /// The strings of set `set` (`None` when the driver has none), read until the count the
    /// kernel writes is the one it announced.
    fn strings(&self, set: u32) -> io::Result<Option<Vec<String>>> {
        for _ in 0..TRIES {
            let Some(n) = self.sset_count(set)? else { return Ok(None) };
            if n == 0 {
                // GSTRINGS of an empty set is a kernel warning: nothing to ask.
                return Ok(Some(Vec::new()));
            }
            let mut buf = Guarded::new(GSTRINGS_HDR + n * ETH_GSTRING_LEN)?;
            buf.set_u32(0, ETHTOOL_GSTRINGS);
            buf.set_u32(4, set);
            buf.set_u32(8, n as u32);
            match self.call_guarded("strings (ETHTOOL_GSTRINGS)", false, &mut buf) {
                Err(e) if e.raw_os_error() == Some(libc::EFAULT) => continue,
                Err(e) => return Err(e),
                Ok(_) => {}
            }
            let got = buf.u32_at(8) as usize;
            if got != n {
                continue;
            }
            let data = &buf.bytes()[GSTRINGS_HDR..GSTRINGS_HDR + n * ETH_GSTRING_LEN];
            return Ok(Some(data.chunks_exact(ETH_GSTRING_LEN).map(cstr).collect()));
        }
        Err(changing(&self.iface, "string set"))
    }

    /// Every feature's name, its get-block bits (available, requested, active,
    /// never_changed), and the number of feature words the kernel uses (which a set must give).
    fn feature_state(&self) -> io::Result<(Vec<String>, Vec<[u32; 4]>, usize)> {
        let Some(names) = self.strings(ETH_SS_FEATURES)? else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{}: the kernel lists no features", self.iface),
            ));
        };
        let words = names.len().div_ceil(32).clamp(1, MAX_FEATURE_WORDS);
        let mut buf = Guarded::new(FEATURES_HDR + words * GET_BLOCK)?;
        buf.set_u32(0, ETHTOOL_GFEATURES);
        buf.set_u32(4, words as u32);
        self.call_guarded("reading features (ETHTOOL_GFEATURES)", false, &mut buf)?;
        // The kernel copies min(ours, its own) blocks and answers with its own count.
        let theirs = (buf.u32_at(4) as usize).min(MAX_FEATURE_WORDS);
        let blocks = (0..words.min(theirs))
            .map(|w| {
                let off = FEATURES_HDR + w * GET_BLOCK;
                [buf.u32_at(off), buf.u32_at(off + 4), buf.u32_at(off + 8), buf.u32_at(off + 12)]
            })
            .collect();
        Ok((names, blocks, theirs))
    }

    /// Set the requested bit of feature `index` to `on` (ETHTOOL_SFEATURES), with `words`
    /// blocks as the kernel uses.
    fn request_feature(&self, index: usize, words: usize, on: bool) -> io::Result<()> {
        let mut buf = Guarded::new(FEATURES_HDR + words * SET_BLOCK)?;
        buf.set_u32(0, ETHTOOL_SFEATURES);
        buf.set_u32(4, words as u32);
        let (w, bit) = (index / 32, 1u32 << (index % 32));
        if w >= words {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{}: feature {index} is beyond the kernel's", self.iface),
            ));
        }
        let off = FEATURES_HDR + w * SET_BLOCK;
        buf.set_u32(off, bit);
        buf.set_u32(off + 4, if on { bit } else { 0 });
        // A positive answer is a set of flags (unsupported, wish); the re-read says what held.
        self.call_guarded("setting features (ETHTOOL_SFEATURES)", true, &mut buf).map(|_| ())
    }
}

/// The interface name as the kernel's fixed, NUL-terminated field.
fn ifname(iface: &str) -> io::Result<[libc::c_char; libc::IFNAMSIZ]> {
    if iface.is_empty() || iface.len() > libc::IFNAMSIZ - 1 || iface.bytes().any(|b| b == 0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{iface:?} is not an interface name (1 to {} bytes, no NUL)", libc::IFNAMSIZ - 1),
        ));
    }
    let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
    for (d, s) in name.iter_mut().zip(iface.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(name)
}

/// A NUL-padded kernel string (not terminated when it fills its field).
fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn changing(iface: &str, what: &str) -> io::Error {
    io::Error::other(format!("{iface}: the driver's {what} kept changing while it was read"))
}

fn bit(words: &[[u32; 4]], field: usize, index: usize) -> bool {
    words.get(index / 32).is_some_and(|b| b[field] & (1 << (index % 32)) != 0)
}

const AVAILABLE: usize = 0;
const REQUESTED: usize = 1;
const ACTIVE: usize = 2;
const NEVER_CHANGED: usize = 3;

/// ethtool's legacy names (long and short) that stand for exactly one kernel feature, as
/// `ethtool -k` prints them and `ethtool -K` accepts them.
const LEGACY: &[(&str, &str, &str)] = &[
    ("rx-checksumming", "rx", "rx-checksum"),
    ("generic-segmentation-offload", "gso", "tx-generic-segmentation"),
    ("generic-receive-offload", "gro", "rx-gro"),
    ("large-receive-offload", "lro", "rx-lro"),
    ("rx-vlan-offload", "rxvlan", "rx-vlan-hw-parse"),
    ("tx-vlan-offload", "txvlan", "tx-vlan-hw-insert"),
    ("ntuple-filters", "ntuple", "rx-ntuple-filter"),
    ("receive-hashing", "rxhash", "rx-hashing"),
];

/// The kernel's name for a feature given by one of ethtool's legacy names
/// (`generic-receive-offload` or `gro` is `rx-gro`), so that a name copied from `ethtool -k`
/// output or an `ethtool -K` command line finds its feature in [`features`]; other names are
/// returned as they are.
pub fn kernel_feature_name(name: &str) -> &str {
    LEGACY.iter().find(|(long, short, _)| *long == name || *short == name).map_or(name, |(_, _, k)| k)
}

/// The NIC's ring sizes (ETHTOOL_GRINGPARAM).
pub fn rings(iface: &str) -> io::Result<Rings> {
    let ctl = Ctl::open(iface)?;
    let r = get_rings(&ctl)?;
    Ok(Rings { rx: r.rx_pending, rx_max: r.rx_max_pending, tx: r.tx_pending, tx_max: r.tx_max_pending })
}

fn get_rings(ctl: &Ctl) -> io::Result<RingParam> {
    let mut r = RingParam { cmd: ETHTOOL_GRINGPARAM, ..Default::default() };
    ctl.get("reading ring sizes", &mut r)?;
    Ok(r)
}

/// Set the receive ring size, keeping the transmit ring (ETHTOOL_SRINGPARAM).
///
/// A size above the driver's maximum is refused here (`InvalidInput`) rather than sent.
pub fn set_rx_ring(iface: &str, rx: u32) -> io::Result<()> {
    let ctl = Ctl::open(iface)?;
    let mut r = get_rings(&ctl)?;
    if rx == 0 || rx > r.rx_max_pending {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{iface}: a receive ring of {rx} entries is outside 1..={}", r.rx_max_pending),
        ));
    }
    r.cmd = ETHTOOL_SRINGPARAM;
    r.rx_pending = rx;
    ctl.set("setting ring sizes", &mut r)
}

/// Receive coalescing (ETHTOOL_GCOALESCE).
pub fn coalesce(iface: &str) -> io::Result<Coalesce> {
    let ctl = Ctl::open(iface)?;
    let c = get_coalesce(&ctl)?;
    Ok(Coalesce {
        rx_usecs: c.rx_coalesce_usecs,
        rx_frames: c.rx_max_coalesced_frames,
        adaptive_rx: c.use_adaptive_rx_coalesce != 0,
    })
}

fn get_coalesce(ctl: &Ctl) -> io::Result<CoalesceParam> {
    let mut c = CoalesceParam { cmd: ETHTOOL_GCOALESCE, ..Default::default() };
    ctl.get("reading interrupt coalescing", &mut c)?;
    Ok(c)
}

/// Set rx-usecs and rx-frames, keeping every other coalescing field (ETHTOOL_SCOALESCE).
pub fn set_rx_coalesce(iface: &str, rx_usecs: u32, rx_frames: u32) -> io::Result<()> {
    let ctl = Ctl::open(iface)?;
    let mut c = get_coalesce(&ctl)?;
    c.cmd = ETHTOOL_SCOALESCE;
    c.rx_coalesce_usecs = rx_usecs;
    c.rx_max_coalesced_frames = rx_frames;
    ctl.set("setting interrupt coalescing", &mut c)
}

/// Whether the driver has a setter for interrupt coalescing at all, found without changing
/// anything: the values in force are read and written back unchanged (ETHTOOL_GCOALESCE, then
/// ETHTOOL_SCOALESCE of the same structure). A driver without one refuses with `Unsupported`;
/// without CAP_NET_ADMIN the answer is `PermissionDenied` (not known). A driver that takes
/// only some values (virtio_net without notification coalescing refuses any rx-usecs) passes
/// this: the doctor checks those rules itself.
pub fn probe_coalesce(iface: &str) -> io::Result<()> {
    let ctl = Ctl::open(iface)?;
    let mut c = get_coalesce(&ctl)?;
    c.cmd = ETHTOOL_SCOALESCE;
    ctl.set("setting interrupt coalescing", &mut c)
}

/// Whether the driver lets its ring sizes be set, found without changing them: the sizes in
/// force are written back unchanged (ETHTOOL_SRINGPARAM). `Unsupported` when it does not.
pub fn probe_rings(iface: &str) -> io::Result<()> {
    let ctl = Ctl::open(iface)?;
    let mut r = get_rings(&ctl)?;
    r.cmd = ETHTOOL_SRINGPARAM;
    ctl.set("setting ring sizes", &mut r)
}

/// Whether the driver lets its channel counts be set, found without changing them: the counts
/// in force are written back unchanged (ETHTOOL_SCHANNELS). `Unsupported` when it does not.
pub fn probe_channels(iface: &str) -> io::Result<()> {
    let ctl = Ctl::open(iface)?;
    let mut c = get_channels(&ctl)?;
    c.cmd = ETHTOOL_SCHANNELS;
    ctl.set("setting channels", &mut c)
}

/// Channel counts (ETHTOOL_GCHANNELS).
pub fn channels(iface: &str) -> io::Result<Channels> {
    let ctl = Ctl::open(iface)?;
    let c = get_channels(&ctl)?;
    Ok(Channels { combined: c.combined_count, max_combined: c.max_combined, rx: c.rx_count, max_rx: c.max_rx })
}

fn get_channels(ctl: &Ctl) -> io::Result<ChannelsParam> {
    let mut c = ChannelsParam { cmd: ETHTOOL_GCHANNELS, ..Default::default() };
    ctl.get("reading channels", &mut c)?;
    Ok(c)
}

/// Set the combined channel count, keeping the others (ETHTOOL_SCHANNELS).
///
/// A driver without combined channels (maximum 0, as a veth) is `Unsupported`; a count above
/// the maximum is refused here (`InvalidInput`) rather than sent.
pub fn set_combined_channels(iface: &str, combined: u32) -> io::Result<()> {
    let ctl = Ctl::open(iface)?;
    let mut c = get_channels(&ctl)?;
    if c.max_combined == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{iface}: the driver has no combined channels"),
        ));
    }
    c.combined_count = combined;
    set_channels(&ctl, c)
}

/// Set the receive-only channel count, keeping the others (ETHTOOL_SCHANNELS): for drivers
/// that count receive queues apart from combined ones (a veth has receive and transmit
/// channels only).
pub fn set_rx_channels(iface: &str, rx: u32) -> io::Result<()> {
    let ctl = Ctl::open(iface)?;
    let mut c = get_channels(&ctl)?;
    if c.max_rx == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{iface}: the driver has no receive-only channels"),
        ));
    }
    c.rx_count = rx;
    set_channels(&ctl, c)
}

fn set_channels(ctl: &Ctl, mut c: ChannelsParam) -> io::Result<()> {
    let iface = &ctl.iface;
    let invalid = |msg: String| Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{iface}: {msg}")));
    if c.combined_count > c.max_combined {
        return invalid(format!("{} combined channels, at most {}", c.combined_count, c.max_combined));
    }
    if c.rx_count > c.max_rx {
        return invalid(format!("{} receive channels, at most {}", c.rx_count, c.max_rx));
    }
    // The kernel's own rule: without combined channels, there must be receive and transmit ones.
    if c.combined_count == 0 && (c.rx_count == 0 || c.tx_count == 0) {
        return invalid("no channel left to receive or send on".to_string());
    }
    c.cmd = ETHTOOL_SCHANNELS;
    ctl.set("setting channels", &mut c)
}

/// Every offload feature with its state (ETHTOOL_GSSET_INFO/GSTRINGS of ETH_SS_FEATURES and
/// ETHTOOL_GFEATURES).
///
/// Names are the kernel's (`rx-gro`, where `ethtool -k` prints the legacy
/// `generic-receive-offload`: see [`kernel_feature_name`]); `changeable` is false exactly where
/// `ethtool -k` says `[fixed]`.
pub fn features(iface: &str) -> io::Result<Vec<Feature>> {
    let ctl = Ctl::open(iface)?;
    let (names, words, _) = ctl.feature_state()?;
    Ok(names
        .into_iter()
        .enumerate()
        .filter(|(_, name)| !name.is_empty())
        .map(|(i, name)| Feature {
            name,
            active: bit(&words, ACTIVE, i),
            changeable: bit(&words, AVAILABLE, i) && !bit(&words, NEVER_CHANGED, i),
        })
        .collect())
}

/// Turn one feature on or off by its ethtool name (ETHTOOL_SFEATURES); `Ok` only when the
/// kernel then reports it in the asked state.
///
/// The name is the kernel's or one of ethtool's legacy names for a single feature
/// ([`kernel_feature_name`]); one this kernel does not know is `Unsupported`. A fixed feature
/// not in the asked state is `Unsupported`; one the driver refuses (a feature it needs is off)
/// is an error saying so, and its requested state is put back, so that no wish is left behind
/// for the kernel to grant later unasked.
pub fn set_feature(iface: &str, name: &str, on: bool) -> io::Result<()> {
    let ctl = Ctl::open(iface)?;
    let kname = kernel_feature_name(name);
    let (names, before, words) = ctl.feature_state()?;
    let Some(index) = names.iter().position(|n| n == kname) else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "this kernel has no feature named {name:?} (ethtool's group names, such as tx-checksumming, \
                 stand for several features: name those one by one)"
            ),
        ));
    };
    let state = |on: bool| if on { "on" } else { "off" };
    let active = bit(&before, ACTIVE, index);
    if !bit(&before, AVAILABLE, index) || bit(&before, NEVER_CHANGED, index) {
        return if active == on {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{iface}: {kname} is {} [fixed]: the driver cannot turn it {}", state(!on), state(on)),
            ))
        };
    }
    if active == on && bit(&before, REQUESTED, index) == on {
        return Ok(());
    }
    ctl.request_feature(index, words, on)?;
    let (_, after, _) = ctl.feature_state()?;
    if bit(&after, ACTIVE, index) == on {
        return Ok(());
    }
    // Best effort: the request stays pending otherwise, to be granted when what it waits for is.
    let _ = ctl.request_feature(index, words, bit(&before, REQUESTED, index));
    Err(io::Error::other(format!(
        "{iface}: the driver kept {kname} {} when asked to turn it {} (it may need another feature on first)",
        state(!on),
        state(on)
    )))
}

/// The driver's statistics as `ethtool -S` lists them (ETHTOOL_GSTRINGS of ETH_SS_STATS and
/// ETHTOOL_GSTATS).
///
/// A driver with no statistics at all (loopback) is `Unsupported`.
pub fn stats(iface: &str) -> io::Result<Vec<(String, u64)>> {
    let ctl = Ctl::open(iface)?;
    for _ in 0..TRIES {
        let Some(names) = ctl.strings(ETH_SS_STATS)? else {
            return Err(io::Error::new(io::ErrorKind::Unsupported, format!("{iface}: the driver has no statistics")));
        };
        let n = names.len();
        if n == 0 {
            // GSTATS of no statistics is a kernel warning: nothing to ask.
            return Ok(Vec::new());
        }
        let mut buf = Guarded::new(GSTATS_HDR + n * size_of::<u64>())?;
        buf.set_u32(0, ETHTOOL_GSTATS);
        buf.set_u32(4, n as u32);
        match ctl.call_guarded("reading statistics (ETHTOOL_GSTATS)", false, &mut buf) {
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => continue,
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        if buf.u32_at(4) as usize != n {
            continue;
        }
        return Ok(names.into_iter().enumerate().map(|(i, name)| (name, buf.u64_at(GSTATS_HDR + i * 8))).collect());
    }
    Err(changing(iface, "statistics"))
}

/// The driver's name (ETHTOOL_GDRVINFO), e.g. `virtio_net`, `veth`, `mlx5_core`.
///
/// Interfaces without a driver behind them (loopback) are `Unsupported`.
pub fn driver(iface: &str) -> io::Result<String> {
    let ctl = Ctl::open(iface)?;
    let mut d = DrvInfo { cmd: ETHTOOL_GDRVINFO, ..Default::default() };
    ctl.get("reading driver information", &mut d)?;
    Ok(cstr(&d.driver))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn the_uapi_layouts_have_the_kernels_sizes() {
        assert_eq!(size_of::<RingParam>(), 36);
        assert_eq!(size_of::<CoalesceParam>(), 92);
        assert_eq!(size_of::<ChannelsParam>(), 36);
        assert_eq!(size_of::<DrvInfo>(), 196);
        assert_eq!(size_of::<SsetInfo1>(), 24);
    }

    #[test]
    fn names_the_kernel_cannot_hold_are_invalid_input() {
        for name in ["", "sixteen-letters!", "a-name-much-longer-than-ifnamsiz", "lo\0", "e\0th0"] {
            for r in [driver(name).map(|_| ()), features(name).map(|_| ()), set_feature(name, "rx-gro", true)] {
                assert_eq!(r.unwrap_err().kind(), io::ErrorKind::InvalidInput, "{name:?}");
            }
        }
        // Fifteen bytes is the longest name: it gets as far as the kernel.
        assert_eq!(driver("fifteen-letters").unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_missing_interface_is_not_found_and_named() {
        let e = driver("ws-no-such0").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("ws-no-such0"), "{e}");
        for r in [
            rings("ws-no-such0").map(|_| ()),
            coalesce("ws-no-such0").map(|_| ()),
            channels("ws-no-such0").map(|_| ()),
            features("ws-no-such0").map(|_| ()),
            stats("ws-no-such0").map(|_| ()),
            set_rx_ring("ws-no-such0", 512),
            set_feature("ws-no-such0", "rx-gro", true),
        ] {
            assert_eq!(r.unwrap_err().kind(), io::ErrorKind::NotFound);
        }
    }

    /// Loopback has no driver behind it: the kernel answers GDRVINFO with EOPNOTSUPP (as
    /// `ethtool -i lo` shows), and the call says so rather than inventing a name.
    #[test]
    fn loopback_has_no_driver_information() {
        let e = driver("lo").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
        if let Ok(out) = Command::new("ethtool").args(["-i", "lo"]).output() {
            assert!(!out.status.success());
            assert!(String::from_utf8_lossy(&out.stderr).contains("not supported"));
        }
        assert_eq!(stats("lo").unwrap_err().kind(), io::ErrorKind::Unsupported);
    }

    /// Reading features needs no privilege; loopback's are a fixed, known case.
    #[test]
    fn loopback_features_read_as_the_kernel_has_them() {
        let f = features("lo").unwrap();
        let get = |n: &str| f.iter().find(|x| x.name == n).unwrap_or_else(|| panic!("{n} in {f:?}"));
        // Loopback never computes checksums and cannot be told to (`rx-checksumming: on [fixed]`).
        assert!(get("rx-checksum").active && !get("rx-checksum").changeable);
        assert!(!get("rx-lro").active && !get("rx-lro").changeable);
        assert!(get("rx-gro").changeable);
        assert!(f.len() > 40, "{}", f.len());
    }

    /// Drop CAP_NET_ADMIN from the calling thread's effective set (capabilities are per thread).
    fn drop_net_admin() {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: libc::c_int,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut hdr = Header { version: 0x2008_0522, pid: 0 };
        let mut data = [Data::default(); 2];
        // SAFETY: a version-3 header and the two data words it reads and writes, on the stack.
        let r = unsafe { libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()) };
        assert_eq!(r, 0, "capget: {}", io::Error::last_os_error());
        const CAP_NET_ADMIN: u32 = 12;
        data[0].effective &= !(1 << CAP_NET_ADMIN);
        // SAFETY: as above; capset only reads them.
        let r = unsafe { libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()) };
        assert_eq!(r, 0, "capset: {}", io::Error::last_os_error());
    }

    /// A set without CAP_NET_ADMIN is PermissionDenied. Done on a thread of its own in a network
    /// namespace of its own when this process may make one (so that nothing of the host's
    /// loopback could change), else as an unprivileged process on the host's loopback.
    #[test]
    fn a_set_without_net_admin_is_permission_denied() {
        std::thread::spawn(|| {
            // SAFETY: unshare takes no pointers and moves only this thread.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                if super::super::has_net_admin(std::os::fd::AsRawFd::as_raw_fd(&probe)) {
                    eprintln!("CAP_NET_ADMIN without a namespace of our own: not trying a set on the host");
                    return;
                }
            }
            drop_net_admin();
            let gro = features("lo").unwrap().into_iter().find(|f| f.name == "rx-gro").unwrap();
            let e = set_feature("lo", "rx-gro", !gro.active).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
            assert!(e.to_string().contains("CAP_NET_ADMIN"), "{e}");
            assert_eq!(features("lo").unwrap().into_iter().find(|f| f.name == "rx-gro").unwrap(), gro);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn legacy_names_find_their_kernel_feature() {
        assert_eq!(kernel_feature_name("generic-receive-offload"), "rx-gro");
        assert_eq!(kernel_feature_name("gro"), "rx-gro");
        assert_eq!(kernel_feature_name("rx-udp-gro-forwarding"), "rx-udp-gro-forwarding");
    }

    #[test]
    fn the_guarded_buffer_is_zeroed_and_bounded() {
        let mut g = Guarded::new(10).unwrap();
        assert!(g.len >= 10 && g.bytes().iter().all(|&b| b == 0));
        let end = g.len;
        g.set_u32(end - 4, 7);
        g.set_u32(end - 2, 9); // past the end: ignored, not a write into the guard
        assert_eq!(g.u32_at(end - 4), 7);
        assert_eq!(g.u32_at(end - 2), 0);
        assert_eq!(g.u64_at(end), 0);
    }
}
