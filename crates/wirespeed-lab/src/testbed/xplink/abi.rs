//! The subset of the kernel's FUSE protocol (`<linux/fuse.h>`, version 7.31) the raw devices
//! speak: opcodes, flags, and the byte layouts of the messages, read and written by hand.

pub const IN_HEADER: usize = 40;
pub const OUT_HEADER: usize = 16;

pub const LOOKUP: u32 = 1;
pub const FORGET: u32 = 2;
pub const GETATTR: u32 = 3;
pub const SETATTR: u32 = 4;
pub const OPEN: u32 = 14;
pub const READ: u32 = 15;
pub const WRITE: u32 = 16;
pub const STATFS: u32 = 17;
pub const RELEASE: u32 = 18;
pub const FSYNC: u32 = 20;
pub const FLUSH: u32 = 25;
pub const INIT: u32 = 26;
pub const OPENDIR: u32 = 27;
pub const READDIR: u32 = 28;
pub const RELEASEDIR: u32 = 29;
pub const FSYNCDIR: u32 = 30;
pub const INTERRUPT: u32 = 36;
pub const DESTROY: u32 = 38;
pub const POLL: u32 = 40;
pub const BATCH_FORGET: u32 = 42;

/// INIT flags we ask for: O_TRUNC carried in OPEN (no SETATTR on `> dev`), big writes,
/// and `max_pages` so one request carries 1 MiB.
pub const INIT_ATOMIC_O_TRUNC: u32 = 1 << 3;
pub const INIT_BIG_WRITES: u32 = 1 << 5;
pub const INIT_MAX_PAGES: u32 = 1 << 22;

pub const FOPEN_DIRECT_IO: u32 = 1 << 0;
pub const FOPEN_NONSEEKABLE: u32 = 1 << 2;
pub const FOPEN_STREAM: u32 = 1 << 4;

pub const POLL_SCHEDULE_NOTIFY: u32 = 1 << 0;
pub const NOTIFY_POLL: i32 = 1;

pub const FATTR_MODE: u32 = 1 << 0;
pub const FATTR_UID: u32 = 1 << 1;
pub const FATTR_GID: u32 = 1 << 2;

/// The fixed part of every request.
#[derive(Debug, Clone, Copy)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
}

pub fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4).map_or(0, |s| u32::from_ne_bytes(s.try_into().unwrap_or([0; 4])))
}

pub fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8).map_or(0, |s| u64::from_ne_bytes(s.try_into().unwrap_or([0; 8])))
}

impl InHeader {
    pub fn parse(msg: &[u8]) -> Option<InHeader> {
        if msg.len() < IN_HEADER {
            return None;
        }
        Some(InHeader { len: u32_at(msg, 0), opcode: u32_at(msg, 4), unique: u64_at(msg, 8), nodeid: u64_at(msg, 16) })
    }
}

/// Write the reply header into `out[..16]` for a reply of `out.len()` bytes.
pub fn put_out_header(out: &mut [u8], error: i32, unique: u64) {
    let len = out.len() as u32;
    out[0..4].copy_from_slice(&len.to_ne_bytes());
    out[4..8].copy_from_slice(&error.to_ne_bytes());
    out[8..16].copy_from_slice(&unique.to_ne_bytes());
}

/// A little-endian-native byte writer for reply bodies.
#[derive(Default)]
pub struct Out(pub Vec<u8>);

impl Out {
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
}

/// `struct fuse_attr` (88 bytes).
pub fn put_attr(o: &mut Out, ino: u64, mode: u32, nlink: u32, time: u64) {
    o.u64(ino).u64(0).u64(0); // ino, size, blocks
    o.u64(time).u64(time).u64(time); // atime, mtime, ctime
    o.u32(0).u32(0).u32(0); // nsecs
    o.u32(mode).u32(nlink).u32(0).u32(0); // mode, nlink, uid, gid (root)
    o.u32(0).u32(128 * 1024).u32(0); // rdev, blksize (cat's buffer), flags
}
