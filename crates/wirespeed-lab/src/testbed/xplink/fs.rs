//! The raw devices as a FUSE filesystem: [`Devices`] mounts `raw/<remote>/<nn>` and serves it
//! from two threads, one reading requests from `/dev/fuse`, one (the pump) completing the
//! requests that had to wait whenever [`DevLink::wait`] reports a change.
//!
//! The protocol is spoken here by hand rather than through the `fuser` crate because the
//! devices live on what its model makes awkward: READ and WRITE replies deferred for as long
//! as the remote is silent or full, FUSE_INTERRUPT answered so that Ctrl-C on a blocked `cat`
//! returns at once (`fuser` does not pass interrupts on), and FUSE_NOTIFY_POLL for a real
//! select. The subset needed is about twenty message layouts and one mount(2) as root, which
//! costs less than a dependency that would also raise the minimum Rust version.
//!
//! The pump relies on [`DevLink::wait`] returning for any change made since its previous
//! return (as [`super::MemLink`] does); a transport that can miss a change made just before
//! the call delays the requests it concerns by at most 50 ms, never forever.

use super::abi::{self, InHeader, Out, IN_HEADER, OUT_HEADER};
use super::{device_name, remote_name, DevLink, DEVICES};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;
use wirespeed::error::{Error, Result};
use wirespeed::sys;

/// Largest READ or WRITE the kernel sends us (`max_write`, and 256 pages per request).
pub const MAX_IO: usize = 1 << 20;
/// Bytes pulled from the link ahead of a read to answer a poll.
const STAGE: usize = 64 * 1024;
/// Backstop for a transport whose `wait` could miss a change made just before it was called.
const PUMP_TICK: Duration = Duration::from_millis(50);

const ROOT: u64 = 1;
const RAW: u64 = 2;

/// What a node id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Root,
    Raw,
    Remote(u32),
    Device(u32, u8),
}

fn ino_of(n: Node) -> u64 {
    match n {
        Node::Root => ROOT,
        Node::Raw => RAW,
        Node::Remote(r) => (u64::from(r) + 1) << 8,
        Node::Device(r, d) => ((u64::from(r) + 1) << 8) | (u64::from(d) + 1),
    }
}

fn node_of(ino: u64) -> Option<Node> {
    match ino {
        ROOT => Some(Node::Root),
        RAW => Some(Node::Raw),
        i if i >= 256 => {
            let r = u32::try_from((i >> 8) - 1).ok()?;
            match i & 0xff {
                0 => Some(Node::Remote(r)),
                low if low <= u64::from(DEVICES) => Some(Node::Device(r, (low - 1) as u8)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Where replies go: `/dev/fuse` when mounted, a recorder in the unit tests.
pub(crate) trait Sink: Send + Sync {
    fn put(&self, msg: &[u8]);
}

struct DevSink(Arc<File>);

impl Sink for DevSink {
    fn put(&self, msg: &[u8]) {
        // ENOENT: the request was interrupted or aborted meanwhile; nothing else to do.
        let _ = (&*self.0).write(msg);
    }
}

/// Bytes taken from the link for a poll before anyone read them.
enum Staged {
    Bytes(Vec<u8>, usize),
    Eof,
}

struct PendingRead {
    unique: u64,
    size: usize,
}

struct PendingWrite {
    unique: u64,
    data: Vec<u8>,
    done: usize,
}

/// The bookkeeping of one device (one remote, one number) on this side.
#[derive(Default)]
struct Dev {
    staged: Option<Staged>,
    reads: VecDeque<PendingRead>,
    writes: VecDeque<PendingWrite>,
    /// End-of-stream markers still to send (the last writer closed while the link was full).
    eofs: u32,
    /// Open handles with write access: the marker goes when the last one is released.
    writers: u32,
    /// The last send found the link full: not writable until the link changes.
    out_full: bool,
    /// Poll handles (kh, events, file handle) waiting for a notification.
    polls: Vec<(u64, u32, u64)>,
}

impl Dev {
    fn busy(&self) -> bool {
        !self.reads.is_empty() || !self.writes.is_empty() || self.eofs > 0 || !self.polls.is_empty()
    }
}

struct Handle {
    remote: u32,
    dev: u8,
    write: bool,
}

#[derive(Default)]
struct State {
    devs: HashMap<(u32, u8), Dev>,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    /// Remotes ever seen in `link.remotes()`: they never disappear.
    known: BTreeSet<u32>,
    stopping: bool,
}

/// The errno a transport error becomes for the process doing the I/O.
fn errno_of(e: &io::Error) -> i32 {
    if let Some(n) = e.raw_os_error() {
        return n;
    }
    match e.kind() {
        io::ErrorKind::NotConnected => libc::ENOTCONN,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        io::ErrorKind::BrokenPipe => libc::EPIPE,
        io::ErrorKind::ConnectionReset => libc::ECONNRESET,
        io::ErrorKind::InvalidInput => libc::EINVAL,
        _ => libc::EIO,
    }
}

fn scratch_min(scratch: &mut Vec<u8>) -> &mut [u8] {
    if scratch.len() < OUT_HEADER {
        scratch.resize(OUT_HEADER, 0);
    }
    scratch
}

/// The filesystem's state machine, independent of `/dev/fuse` so it can be tested without a mount.
pub(crate) struct Core {
    link: Arc<dyn DevLink>,
    sink: Box<dyn Sink>,
    state: Mutex<State>,
    /// Wakes the pump when a request starts waiting while nothing else did.
    work: Condvar,
    stop: AtomicBool,
    time: u64,
}

impl Core {
    pub(crate) fn new(link: Arc<dyn DevLink>, sink: Box<dyn Sink>) -> Core {
        let time = sys::realtime_ns() / 1_000_000_000;
        Core {
            link,
            sink,
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            stop: AtomicBool::new(false),
            time,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn reply(&self, unique: u64, error: i32, body: &[u8]) {
        let mut out = vec![0u8; OUT_HEADER + body.len()];
        out[OUT_HEADER..].copy_from_slice(body);
        abi::put_out_header(&mut out, -error, unique);
        self.sink.put(&out);
    }

    fn err(&self, unique: u64, errno: i32) {
        self.reply(unique, errno, &[]);
    }

    /// Reply to a READ with `n` bytes already placed at `buf[OUT_HEADER..]`.
    fn reply_data(&self, unique: u64, buf: &mut [u8], n: usize) {
        abi::put_out_header(&mut buf[..OUT_HEADER + n], 0, unique);
        self.sink.put(&buf[..OUT_HEADER + n]);
    }

    fn reply_written(&self, unique: u64, n: usize) {
        let mut o = Out::default();
        o.u32(n as u32).u32(0);
        self.reply(unique, 0, &o.0);
    }

    fn notify_poll(&self, kh: u64) {
        let mut out = vec![0u8; OUT_HEADER + 8];
        out[OUT_HEADER..].copy_from_slice(&kh.to_ne_bytes());
        abi::put_out_header(&mut out, abi::NOTIFY_POLL, 0);
        self.sink.put(&out);
    }

    fn refresh_remotes(&self, st: &mut State) {
        st.known.extend(self.link.remotes());
    }

    fn exists(&self, st: &mut State, n: Node) -> bool {
        match n {
            Node::Root | Node::Raw => true,
            Node::Remote(r) | Node::Device(r, _) => {
                if !st.known.contains(&r) {
                    self.refresh_remotes(st);
                }
                st.known.contains(&r)
            }
        }
    }

    fn attr(&self, o: &mut Out, n: Node) {
        let (mode, nlink) = match n {
            Node::Device(..) => (libc::S_IFREG | 0o660, 1),
            _ => (libc::S_IFDIR | 0o755, 2),
        };
        abi::put_attr(o, ino_of(n), mode, nlink, self.time);
    }

    /// Handle one request read from `/dev/fuse`. `scratch` is this thread's reply buffer
    /// (grown to hold the largest READ reply).
    pub(crate) fn handle(&self, msg: &[u8], scratch: &mut Vec<u8>) {
        let Some(h) = InHeader::parse(msg) else { return };
        let body = &msg[IN_HEADER..(h.len as usize).clamp(IN_HEADER, msg.len())];
        match h.opcode {
            abi::FORGET | abi::BATCH_FORGET => {}
            abi::INIT => self.init(h, body),
            abi::DESTROY | abi::FLUSH | abi::FSYNC | abi::FSYNCDIR | abi::RELEASEDIR => self.reply(h.unique, 0, &[]),
            abi::INTERRUPT => self.interrupt(abi::u64_at(body, 0)),
            abi::RELEASE => self.release(h, body),
            abi::LOOKUP => self.lookup(h, body),
            abi::GETATTR => self.getattr(h),
            abi::SETATTR => self.setattr(h, body),
            abi::OPENDIR => self.opendir(h),
            abi::READDIR => self.readdir(h, body),
            abi::STATFS => {
                let mut o = Out::default();
                o.zeros(5 * 8).u32(4096).u32(255).u32(4096).zeros(4 + 24);
                self.reply(h.unique, 0, &o.0)
            }
            abi::OPEN => self.open(h, body),
            abi::READ => self.read(h, body, scratch),
            abi::WRITE => self.write(h, body),
            abi::POLL => self.poll(h, body, scratch),
            _ => self.err(h.unique, libc::ENOSYS),
        }
    }

    fn init(&self, h: InHeader, body: &[u8]) {
        let (major, minor, readahead, flags) =
            (abi::u32_at(body, 0), abi::u32_at(body, 4), abi::u32_at(body, 8), abi::u32_at(body, 12));
        if major < 7 {
            return self.err(h.unique, libc::EPROTO);
        }
        let mut o = Out::default();
        if major > 7 {
            // The kernel re-sends INIT with our major.
            o.u32(7).u32(31).zeros(64 - 8);
            return self.reply(h.unique, 0, &o.0);
        }
        let want = abi::INIT_ATOMIC_O_TRUNC | abi::INIT_BIG_WRITES | abi::INIT_MAX_PAGES;
        o.u32(7).u32(minor.min(31)).u32(readahead).u32(flags & want);
        o.u16(16).u16(12).u32(MAX_IO as u32); // max_background, congestion_threshold, max_write
        o.u32(1).u16((MAX_IO / 4096) as u16).u16(0); // time_gran, max_pages, map_alignment
        o.zeros(64 - o.0.len());
        self.reply(h.unique, 0, &o.0);
    }

    fn lookup(&self, h: InHeader, body: &[u8]) {
        let name = body.split(|&b| b == 0).next().unwrap_or(&[]);
        let name = std::str::from_utf8(name).unwrap_or("");
        let mut st = self.lock();
        let child = match node_of(h.nodeid) {
            Some(Node::Root) if name == "raw" => Some(Node::Raw),
            Some(Node::Raw) => {
                self.refresh_remotes(&mut st);
                st.known.iter().copied().find(|&r| remote_name(r) == name).map(Node::Remote)
            }
            Some(Node::Remote(r)) => (0..DEVICES).find(|&d| device_name(d) == name).map(|d| Node::Device(r, d)),
            _ => None,
        };
        let Some(child) = child.filter(|&c| self.exists(&mut st, c)) else {
            return self.err(h.unique, libc::ENOENT);
        };
        drop(st);
        let mut o = Out::default();
        o.u64(ino_of(child)).u64(0).u64(1).u64(1).u32(0).u32(0);
        self.attr(&mut o, child);
        self.reply(h.unique, 0, &o.0);
    }

    fn getattr(&self, h: InHeader) {
        let Some(n) = node_of(h.nodeid).filter(|&n| self.exists(&mut self.lock(), n)) else {
            return self.err(h.unique, libc::ENOENT);
        };
        let mut o = Out::default();
        o.u64(1).u32(0).u32(0);
        self.attr(&mut o, n);
        self.reply(h.unique, 0, &o.0);
    }

    /// Size changes (`> dev` on kernels without atomic O_TRUNC) are accepted and change
    /// nothing; ownership and modes are fixed.
    fn setattr(&self, h: InHeader, body: &[u8]) {
        if abi::u32_at(body, 0) & (abi::FATTR_MODE | abi::FATTR_UID | abi::FATTR_GID) != 0 {
            return self.err(h.unique, libc::EPERM);
        }
        self.getattr(h)
    }

    fn opendir(&self, h: InHeader) {
        match node_of(h.nodeid) {
            Some(Node::Device(..)) => self.err(h.unique, libc::ENOTDIR),
            Some(n) if self.exists(&mut self.lock(), n) => {
                let mut o = Out::default();
                o.u64(0).u32(0).u32(0);
                self.reply(h.unique, 0, &o.0)
            }
            _ => self.err(h.unique, libc::ENOENT),
        }
    }

    fn readdir(&self, h: InHeader, body: &[u8]) {
        let (offset, size) = (abi::u64_at(body, 8), abi::u32_at(body, 16) as usize);
        let Some(n) = node_of(h.nodeid) else { return self.err(h.unique, libc::ENOENT) };
        let mut entries: Vec<(u64, u32, String)> =
            vec![(ino_of(n), libc::DT_DIR.into(), ".".into()), (ROOT, libc::DT_DIR.into(), "..".into())];
        match n {
            Node::Root => entries.push((RAW, libc::DT_DIR.into(), "raw".into())),
            Node::Raw => {
                let mut st = self.lock();
                self.refresh_remotes(&mut st);
                entries
                    .extend(st.known.iter().map(|&r| (ino_of(Node::Remote(r)), libc::DT_DIR.into(), remote_name(r))));
            }
            Node::Remote(r) => {
                entries.extend((0..DEVICES).map(|d| (ino_of(Node::Device(r, d)), libc::DT_REG.into(), device_name(d))))
            }
            Node::Device(..) => return self.err(h.unique, libc::ENOTDIR),
        }
        let mut o = Out::default();
        for (i, (ino, typ, name)) in entries.iter().enumerate().skip(offset as usize) {
            let len = (24 + name.len()).div_ceil(8) * 8;
            if o.0.len() + len > size {
                break;
            }
            o.u64(*ino).u64(i as u64 + 1).u32(name.len() as u32).u32(*typ).bytes(name.as_bytes());
            o.zeros(len - 24 - name.len());
        }
        self.reply(h.unique, 0, &o.0);
    }

    fn open(&self, h: InHeader, body: &[u8]) {
        let flags = abi::u32_at(body, 0) as i32;
        let mut st = self.lock();
        let (r, d) = match node_of(h.nodeid) {
            Some(Node::Device(r, d)) if self.exists(&mut st, Node::Device(r, d)) => (r, d),
            Some(Node::Device(..)) | None => return self.err(h.unique, libc::ENOENT),
            Some(_) => return self.err(h.unique, libc::EISDIR),
        };
        if st.stopping {
            return self.err(h.unique, libc::ENOTCONN);
        }
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        st.next_fh += 1;
        let fh = st.next_fh;
        st.handles.insert(fh, Handle { remote: r, dev: d, write });
        if write {
            st.devs.entry((r, d)).or_default().writers += 1;
        }
        drop(st);
        let mut o = Out::default();
        o.u64(fh).u32(abi::FOPEN_DIRECT_IO | abi::FOPEN_NONSEEKABLE | abi::FOPEN_STREAM).u32(0);
        self.reply(h.unique, 0, &o.0);
    }

    fn release(&self, h: InHeader, body: &[u8]) {
        let fh = abi::u64_at(body, 0);
        let mut st = self.lock();
        if let Some(hd) = st.handles.remove(&fh) {
            // A poll of the closed file has nobody left to wake.
            if let Some(dev) = st.devs.get_mut(&(hd.remote, hd.dev)) {
                dev.polls.retain(|&(_, _, f)| f != fh);
            }
            if hd.write {
                let stopping = st.stopping;
                let dev = st.devs.entry((hd.remote, hd.dev)).or_default();
                dev.writers = dev.writers.saturating_sub(1);
                if dev.writers == 0 && !stopping {
                    dev.eofs += 1;
                    self.push_eofs(hd.remote, hd.dev, dev);
                    if dev.busy() {
                        self.work.notify_one();
                    }
                }
            }
        }
        drop(st);
        self.reply(h.unique, 0, &[]);
    }

    fn handle_of(st: &State, fh: u64) -> Option<(u32, u8)> {
        st.handles.get(&fh).map(|h| (h.remote, h.dev))
    }

    fn read(&self, h: InHeader, body: &[u8], scratch: &mut Vec<u8>) {
        let (fh, size, flags) = (abi::u64_at(body, 0), abi::u32_at(body, 16) as usize, abi::u32_at(body, 32) as i32);
        let size = size.min(MAX_IO);
        let nonblock = flags & libc::O_NONBLOCK != 0;
        let mut st = self.lock();
        if st.stopping {
            return self.err(h.unique, libc::ENOTCONN);
        }
        let Some((r, d)) = Self::handle_of(&st, fh) else { return self.err(h.unique, libc::EBADF) };
        if size == 0 {
            return self.reply_data(h.unique, scratch_min(scratch), 0);
        }
        let dev = st.devs.entry((r, d)).or_default();
        if dev.reads.is_empty() {
            if let Some(done) = self.try_read(r, d, dev, size, scratch) {
                return self.finish_read(h.unique, done, scratch);
            }
        }
        if nonblock {
            return self.err(h.unique, libc::EAGAIN);
        }
        dev.reads.push_back(PendingRead { unique: h.unique, size });
        self.work.notify_one();
    }

    fn finish_read(&self, unique: u64, done: io::Result<usize>, scratch: &mut [u8]) {
        match done {
            Ok(n) => self.reply_data(unique, scratch, n),
            Err(e) => self.err(unique, errno_of(&e)),
        }
    }

    /// Serve a read of up to `size` bytes into `scratch[OUT_HEADER..]`: `None` when nothing
    /// is there yet, `Ok(0)` for an end-of-stream marker.
    fn try_read(&self, r: u32, d: u8, dev: &mut Dev, size: usize, scratch: &mut Vec<u8>) -> Option<io::Result<usize>> {
        if scratch.len() < OUT_HEADER + size {
            scratch.resize(OUT_HEADER + size, 0);
        }
        match dev.staged.take() {
            Some(Staged::Eof) => return Some(Ok(0)),
            Some(Staged::Bytes(v, off)) => {
                let n = size.min(v.len() - off);
                scratch[OUT_HEADER..OUT_HEADER + n].copy_from_slice(&v[off..off + n]);
                if off + n < v.len() {
                    dev.staged = Some(Staged::Bytes(v, off + n));
                }
                return Some(Ok(n));
            }
            None => {}
        }
        match self.link.recv(r, d, &mut scratch[OUT_HEADER..OUT_HEADER + size]) {
            Ok(Some(n)) => Some(Ok(n)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }

    fn write(&self, h: InHeader, body: &[u8]) {
        let (fh, size, flags) = (abi::u64_at(body, 0), abi::u32_at(body, 16) as usize, abi::u32_at(body, 32) as i32);
        let data = body.get(40..40 + size).unwrap_or(&[]);
        let nonblock = flags & libc::O_NONBLOCK != 0;
        let mut st = self.lock();
        if st.stopping {
            return self.err(h.unique, libc::ENOTCONN);
        }
        let Some((r, d)) = Self::handle_of(&st, fh) else { return self.err(h.unique, libc::EBADF) };
        let dev = st.devs.entry((r, d)).or_default();
        let mut done = 0;
        if dev.writes.is_empty() {
            match self.try_write(r, d, dev, data, &mut done) {
                Ok(true) => return self.reply_written(h.unique, done),
                Ok(false) => {}
                Err(e) if done == 0 => return self.err(h.unique, errno_of(&e)),
                Err(_) => return self.reply_written(h.unique, done),
            }
        }
        if nonblock {
            return if done > 0 { self.reply_written(h.unique, done) } else { self.err(h.unique, libc::EAGAIN) };
        }
        dev.writes.push_back(PendingWrite { unique: h.unique, data: data[done..].to_vec(), done });
        self.work.notify_one();
    }

    /// Send what the link takes of `data[*done..]`: `Ok(true)` when all of it went.
    fn try_write(&self, r: u32, d: u8, dev: &mut Dev, data: &[u8], done: &mut usize) -> io::Result<bool> {
        while *done < data.len() {
            let n = self.link.send(r, d, &data[*done..])?;
            if n == 0 {
                dev.out_full = true;
                return Ok(false);
            }
            *done += n;
        }
        Ok(true)
    }

    /// Send the end-of-stream markers owed, once the writes before them are queued.
    fn push_eofs(&self, r: u32, d: u8, dev: &mut Dev) {
        while dev.eofs > 0 && dev.writes.is_empty() {
            match self.link.send_eof(r, d) {
                Ok(true) => dev.eofs -= 1,
                Ok(false) => break,
                // The remote is gone: the marker has nobody to reach.
                Err(_) => dev.eofs = 0,
            }
        }
    }

    /// Readiness for POLL: stages bytes from the link so "readable" is a promise.
    fn revents(&self, r: u32, d: u8, dev: &mut Dev, scratch: &mut Vec<u8>) -> u32 {
        let mut ev = 0;
        if dev.reads.is_empty() && dev.staged.is_none() {
            if scratch.len() < OUT_HEADER + STAGE {
                scratch.resize(OUT_HEADER + STAGE, 0);
            }
            match self.link.recv(r, d, &mut scratch[OUT_HEADER..OUT_HEADER + STAGE]) {
                Ok(Some(0)) => dev.staged = Some(Staged::Eof),
                Ok(Some(n)) => dev.staged = Some(Staged::Bytes(scratch[OUT_HEADER..OUT_HEADER + n].to_vec(), 0)),
                Ok(None) => {}
                Err(_) => ev |= libc::POLLERR as u32,
            }
        }
        if dev.staged.is_some() {
            ev |= (libc::POLLIN | libc::POLLRDNORM) as u32;
        }
        if dev.writes.is_empty() && !dev.out_full {
            ev |= (libc::POLLOUT | libc::POLLWRNORM) as u32;
        }
        ev
    }

    fn poll(&self, h: InHeader, body: &[u8], scratch: &mut Vec<u8>) {
        let (fh, kh, flags, events) =
            (abi::u64_at(body, 0), abi::u64_at(body, 8), abi::u32_at(body, 16), abi::u32_at(body, 20));
        let mut st = self.lock();
        let Some((r, d)) = Self::handle_of(&st, fh) else { return self.err(h.unique, libc::EBADF) };
        let stopping = st.stopping;
        let dev = st.devs.entry((r, d)).or_default();
        let ev = if stopping { libc::POLLERR as u32 } else { self.revents(r, d, dev, scratch) };
        let wanted = events | (libc::POLLERR | libc::POLLHUP) as u32;
        if ev & wanted == 0 && flags & abi::POLL_SCHEDULE_NOTIFY != 0 {
            dev.polls.retain(|&(k, _, _)| k != kh);
            dev.polls.push((kh, events, fh));
            self.work.notify_one();
        }
        drop(st);
        let mut o = Out::default();
        o.u32(ev).u32(0);
        self.reply(h.unique, 0, &o.0);
    }

    fn interrupt(&self, unique: u64) {
        let mut st = self.lock();
        for dev in st.devs.values_mut() {
            if let Some(i) = dev.reads.iter().position(|p| p.unique == unique) {
                dev.reads.remove(i);
                return self.err(unique, libc::EINTR);
            }
            if let Some(i) = dev.writes.iter().position(|p| p.unique == unique) {
                let w = dev.writes.remove(i).unwrap_or_else(|| unreachable!());
                return if w.done > 0 { self.reply_written(unique, w.done) } else { self.err(unique, libc::EINTR) };
            }
        }
    }

    /// Whether anything waits on the link.
    fn busy(&self) -> bool {
        self.lock().devs.values().any(Dev::busy)
    }

    /// Retry everything that waits: run after the link reported a change.
    pub(crate) fn pass(&self, scratch: &mut Vec<u8>) {
        let mut st = self.lock();
        for (&(r, d), dev) in st.devs.iter_mut() {
            dev.out_full = false;
            if !dev.busy() {
                continue;
            }
            while let Some(p) = dev.reads.front() {
                let (unique, size) = (p.unique, p.size);
                let Some(done) = self.try_read(r, d, dev, size, scratch) else { break };
                dev.reads.pop_front();
                self.finish_read(unique, done, scratch);
            }
            while let Some(mut w) = dev.writes.pop_front() {
                let total = w.done + w.data.len();
                let mut sent = 0;
                match self.try_write(r, d, dev, &w.data, &mut sent) {
                    Ok(true) => self.reply_written(w.unique, total),
                    Ok(false) => {
                        w.data.drain(..sent);
                        w.done += sent;
                        dev.writes.push_front(w);
                        break;
                    }
                    Err(e) if w.done + sent == 0 => self.err(w.unique, errno_of(&e)),
                    Err(_) => self.reply_written(w.unique, w.done + sent),
                }
            }
            self.push_eofs(r, d, dev);
            if !dev.polls.is_empty() {
                let ev = self.revents(r, d, dev, scratch);
                let polls = std::mem::take(&mut dev.polls);
                for (kh, events, fh) in polls {
                    if ev & (events | (libc::POLLERR | libc::POLLHUP) as u32) != 0 {
                        self.notify_poll(kh);
                    } else {
                        dev.polls.push((kh, events, fh));
                    }
                }
            }
        }
    }

    /// Stop serving: every waiting request fails with ENOTCONN, pollers are woken.
    pub(crate) fn fail_all(&self) {
        let mut st = self.lock();
        st.stopping = true;
        self.stop.store(true, Ordering::SeqCst);
        for dev in st.devs.values_mut() {
            for p in dev.reads.drain(..) {
                self.err(p.unique, libc::ENOTCONN);
            }
            for w in dev.writes.drain(..) {
                if w.done > 0 {
                    self.reply_written(w.unique, w.done)
                } else {
                    self.err(w.unique, libc::ENOTCONN)
                }
            }
            for (kh, _, _) in dev.polls.drain(..) {
                self.notify_poll(kh);
            }
            dev.eofs = 0;
        }
        self.work.notify_all();
    }

    /// The pump: wait for the link (or for a request that starts waiting), retry, repeat.
    fn pump(&self) {
        let mut scratch = vec![0u8; OUT_HEADER + MAX_IO];
        while !self.stop.load(Ordering::SeqCst) {
            if self.busy() {
                self.link.wait(PUMP_TICK);
            } else {
                let st = self.lock();
                if !st.stopping && !st.devs.values().any(Dev::busy) {
                    drop(self.work.wait_timeout(st, Duration::from_millis(500)).unwrap_or_else(|p| p.into_inner()));
                }
            }
            self.pass(&mut scratch);
        }
    }
}

/// The raw devices of one partition, mounted: `raw/<remote>/<nn>` under the mount point for
/// every remote the link knows (re-read on every lookup, so remotes activated later appear).
/// Unmounted by [`Devices::unmount`] or on drop; a process blocked on a device then gets
/// ENOTCONN instead of hanging.
///
/// Devices are regular files of size 0, mode 0660, owned by root: a FUSE filesystem cannot
/// serve character devices itself, and `cat`, `dd`, redirection and select treat a
/// non-seekable, direct-I/O regular file like a FIFO.
pub struct Devices {
    mountpoint: PathBuf,
    local: u32,
    core: Arc<Core>,
    threads: Vec<JoinHandle<()>>,
    mounted: bool,
}

impl Devices {
    /// Mount partition `local`'s devices at `mountpoint` (created if missing), carried by
    /// `link`, and serve them from background threads. Needs root and `/dev/fuse`.
    pub fn mount(mountpoint: &Path, local: u32, link: Arc<dyn DevLink>) -> Result<Devices> {
        if !sys::fuse::is_root() {
            return Err(Error::permission(format!(
                "raw devices of partition {local} need root (they are a FUSE filesystem mounted with mount(2)): run as root"
            )));
        }
        let dev = sys::fuse::open_dev().map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::failed(
                "/dev/fuse is missing: load the module (`modprobe fuse`), or give the container the device (--device /dev/fuse)",
            ),
            _ => Error::io(format!("cannot open /dev/fuse for the raw devices: {e}")),
        })?;
        detach_stale(mountpoint)?;
        std::fs::create_dir_all(mountpoint).map_err(|e| {
            Error::io(format!("cannot create the raw devices' directory {}: {e}", mountpoint.display()))
        })?;
        let opts = format!("allow_other,default_permissions,max_read={MAX_IO}");
        sys::fuse::mount(&dev, mountpoint, "fuse.wirespeed", &opts)
            .map_err(|e| Error::failed(format!("cannot mount the raw devices at {}: {e}", mountpoint.display())))?;
        let dev = Arc::new(dev);
        let core = Arc::new(Core::new(link, Box::new(DevSink(Arc::clone(&dev)))));
        let mut me = Devices {
            mountpoint: mountpoint.to_path_buf(),
            local,
            core: Arc::clone(&core),
            threads: vec![],
            mounted: true,
        };
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(|e| Error::io(format!("cannot start a raw-device thread: {e}")))
        };
        let c = Arc::clone(&core);
        me.threads.push(spawn(format!("xplink-fuse-{local}"), Box::new(move || serve(&c, &dev)))?);
        let c = Arc::clone(&core);
        me.threads.push(spawn(format!("xplink-pump-{local}"), Box::new(move || c.pump()))?);
        Ok(me)
    }

    /// Where the devices are mounted (`raw/` is below it).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmount (lazily when a device is still open: its users get ENOTCONN, never a hang)
    /// and stop the threads.
    pub fn unmount(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if !self.mounted {
            return Ok(());
        }
        self.mounted = false;
        self.core.fail_all();
        let res = match sys::mount::detach(&self.mountpoint) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(Error::failed(format!(
                "cannot unmount partition {}'s raw devices at {}: {e}",
                self.local,
                self.mountpoint.display()
            ))),
        };
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        res
    }
}

impl Drop for Devices {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Detach the raw devices a daemon that died left at `mountpoint` (they answer every access
/// with ENOTCONN, and a directory holding them cannot be removed): `Ok(true)` when there was
/// one. Live mounts and plain directories are left alone. `partition destroy` and a restarting
/// daemon call it before touching the directory.
pub fn detach_stale(mountpoint: &Path) -> Result<bool> {
    match std::fs::metadata(mountpoint) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            sys::mount::detach(mountpoint).map_err(|e| {
                Error::failed(format!("cannot detach the dead raw devices at {}: {e}", mountpoint.display()))
            })?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The request loop: read one request at a time from `/dev/fuse` and handle it; waiting
/// requests are parked in the core, so this thread never blocks on a device.
fn serve(core: &Core, dev: &File) {
    let mut buf = vec![0u8; MAX_IO + 64 * 1024];
    let mut scratch = vec![0u8; OUT_HEADER + MAX_IO];
    while !core.stop.load(Ordering::SeqCst) {
        match sys::poll_readable(dev.as_raw_fd(), Some(200_000_000)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => break,
        }
        let n = match (&*dev).read(&mut buf) {
            Ok(n) => n,
            Err(e) => match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                _ => break, // ENODEV: unmounted and aborted
            },
        };
        core.handle(&buf[..n], &mut scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testbed::xplink::MemLink;
    use std::sync::atomic::AtomicBool;

    /// Records every message the core writes.
    #[derive(Default, Clone)]
    struct Rec(Arc<Mutex<Vec<Vec<u8>>>>);

    impl Sink for Rec {
        fn put(&self, msg: &[u8]) {
            self.0.lock().unwrap().push(msg.to_vec());
        }
    }

    impl Rec {
        /// Messages so far as (error or notify code, unique, body), emptied.
        fn take(&self) -> Vec<(i32, u64, Vec<u8>)> {
            let msgs = std::mem::take(&mut *self.0.lock().unwrap());
            msgs.into_iter()
                .map(|m| {
                    assert_eq!(abi::u32_at(&m, 0) as usize, m.len(), "length field");
                    (abi::u32_at(&m, 4) as i32, abi::u64_at(&m, 8), m[OUT_HEADER..].to_vec())
                })
                .collect()
        }
    }

    fn req(op: u32, unique: u64, nodeid: u64, body: &[u8]) -> Vec<u8> {
        let mut o = Out::default();
        o.u32((IN_HEADER + body.len()) as u32).u32(op).u64(unique).u64(nodeid).zeros(16).bytes(body);
        o.0
    }

    struct T {
        core: Core,
        rec: Rec,
        scratch: Vec<u8>,
    }

    impl T {
        fn new(link: Arc<dyn DevLink>) -> T {
            let rec = Rec::default();
            T { core: Core::new(link, Box::new(rec.clone())), rec, scratch: vec![] }
        }
        fn send(&mut self, op: u32, unique: u64, nodeid: u64, body: &[u8]) -> Vec<(i32, u64, Vec<u8>)> {
            self.core.handle(&req(op, unique, nodeid, body), &mut self.scratch);
            self.rec.take()
        }
        fn pass(&mut self) -> Vec<(i32, u64, Vec<u8>)> {
            self.core.pass(&mut self.scratch);
            self.rec.take()
        }
        /// Open device (2, d) with O_RDONLY/O_WRONLY flags: the file handle.
        fn open(&mut self, d: u8, flags: i32) -> u64 {
            let mut b = Out::default();
            b.u32(flags as u32).u32(0);
            let r = self.send(abi::OPEN, 1, ino_of(Node::Device(2, d)), &b.0);
            assert_eq!(r[0].0, 0);
            abi::u64_at(&r[0].2, 0)
        }
        fn read(&mut self, unique: u64, fh: u64, size: u32, flags: i32) -> Vec<(i32, u64, Vec<u8>)> {
            let mut b = Out::default();
            b.u64(fh).u64(0).u32(size).u32(0).u64(0).u32(flags as u32).u32(0);
            self.send(abi::READ, unique, 0, &b.0)
        }
        fn write(&mut self, unique: u64, fh: u64, data: &[u8]) -> Vec<(i32, u64, Vec<u8>)> {
            let mut b = Out::default();
            b.u64(fh).u64(0).u32(data.len() as u32).u32(0).u64(0).u32(0).u32(0).bytes(data);
            self.send(abi::WRITE, unique, 0, &b.0)
        }
        fn release(&mut self, fh: u64) {
            let mut b = Out::default();
            b.u64(fh).u32(0).u32(0).u64(0);
            assert_eq!(self.send(abi::RELEASE, 9, 0, &b.0)[0].0, 0);
        }
    }

    fn pair() -> (T, Arc<MemLink>) {
        let (a, b) = MemLink::pair(1, 2, 8);
        (T::new(a), b)
    }

    #[test]
    fn node_ids_round_trip() {
        for n in [Node::Root, Node::Raw, Node::Remote(0), Node::Remote(63), Node::Device(2, 0), Node::Device(2, 15)] {
            assert_eq!(node_of(ino_of(n)), Some(n));
        }
        assert_eq!(node_of(3), None);
        assert_eq!(node_of((3 << 8) | 17), None, "device 16 does not exist");
    }

    #[test]
    fn a_read_waits_for_the_remote_then_completes_with_what_arrived() {
        let (mut t, remote) = pair();
        let fh = t.open(0, libc::O_RDONLY);
        assert!(t.read(10, fh, 100, 0).is_empty(), "nothing yet: the reply is deferred");
        assert_eq!(t.read(11, fh, 100, libc::O_NONBLOCK), vec![(-libc::EAGAIN, 11, vec![])]);
        assert!(t.pass().is_empty());
        remote.send(1, 0, b"abc").unwrap();
        assert_eq!(t.pass(), vec![(0, 10, b"abc".to_vec())]);
        assert!(t.core.lock().devs.values().all(|d| !d.busy()));
    }

    #[test]
    fn an_interrupt_answers_the_waiting_request_with_eintr() {
        let (mut t, _remote) = pair();
        let fh = t.open(1, libc::O_RDONLY);
        assert!(t.read(20, fh, 100, 0).is_empty());
        let mut b = Out::default();
        b.u64(20);
        assert_eq!(t.send(abi::INTERRUPT, 21, 0, &b.0), vec![(-libc::EINTR, 20, vec![])]);
        assert!(t.send(abi::INTERRUPT, 22, 0, &b.0).is_empty(), "already answered");
    }

    #[test]
    fn a_write_larger_than_the_link_completes_with_its_full_count_once_queued() {
        let (mut t, remote) = pair();
        let fh = t.open(2, libc::O_WRONLY);
        assert!(t.write(30, fh, b"0123456789abcdef").is_empty(), "8 of 16 bytes fit");
        let mut buf = [0u8; 8];
        assert_eq!(remote.recv(1, 2, &mut buf).unwrap(), Some(8));
        assert_eq!(t.pass(), vec![(0, 30, [16u32.to_ne_bytes(), [0; 4]].concat())]);
        assert_eq!(remote.recv(1, 2, &mut buf).unwrap(), Some(8));
        assert_eq!(&buf, b"89abcdef");
    }

    #[test]
    fn the_last_writer_to_close_sends_one_end_of_stream() {
        let (mut t, remote) = pair();
        let (w1, w2, r) = (t.open(3, libc::O_WRONLY), t.open(3, libc::O_RDWR), t.open(3, libc::O_RDONLY));
        let mut buf = [0u8; 8];
        t.release(w1);
        t.release(r);
        assert_eq!(remote.recv(1, 3, &mut buf).unwrap(), None, "a writer is still open");
        t.release(w2);
        assert_eq!(remote.recv(1, 3, &mut buf).unwrap(), Some(0));
        assert_eq!(remote.recv(1, 3, &mut buf).unwrap(), None, "exactly one marker");
    }

    #[test]
    fn an_end_of_stream_waits_behind_a_full_link() {
        let (mut t, remote) = pair();
        let w = t.open(4, libc::O_WRONLY);
        assert_eq!(t.write(40, w, b"01234567")[0].0, 0);
        t.release(w);
        let mut buf = [0u8; 8];
        assert_eq!(remote.recv(1, 4, &mut buf).unwrap(), Some(8));
        assert!(t.pass().is_empty());
        assert_eq!(remote.recv(1, 4, &mut buf).unwrap(), Some(0));
    }

    #[test]
    fn poll_reports_now_and_notifies_when_bytes_arrive() {
        let (mut t, remote) = pair();
        let fh = t.open(5, libc::O_RDONLY);
        let mut b = Out::default();
        b.u64(fh).u64(77).u32(abi::POLL_SCHEDULE_NOTIFY).u32(libc::POLLIN as u32);
        let r = t.send(abi::POLL, 50, 0, &b.0);
        assert_eq!(abi::u32_at(&r[0].2, 0) & libc::POLLIN as u32, 0, "not readable yet");
        assert!(t.pass().is_empty());
        remote.send(1, 5, b"hi").unwrap();
        assert_eq!(t.pass(), vec![(abi::NOTIFY_POLL, 0, 77u64.to_ne_bytes().to_vec())]);
        let r = t.send(abi::POLL, 51, 0, &b.0);
        assert_ne!(abi::u32_at(&r[0].2, 0) & libc::POLLIN as u32, 0, "readable now");
        assert_eq!(t.read(52, fh, 100, 0), vec![(0, 52, b"hi".to_vec())], "staged bytes are read");
    }

    #[test]
    fn poll_for_writing_waits_while_the_link_is_full() {
        let (mut t, remote) = pair();
        let fh = t.open(9, libc::O_WRONLY);
        let mut b = Out::default();
        b.u64(fh).u64(0).u32(10).u32(0).u64(0).u32(libc::O_NONBLOCK as u32).u32(0).bytes(b"0123456789");
        let r = t.send(abi::WRITE, 80, 0, &b.0);
        assert_eq!(r, vec![(0, 80, [8u32.to_ne_bytes(), [0; 4]].concat())], "a non-blocking write is short");
        let mut p = Out::default();
        p.u64(fh).u64(88).u32(abi::POLL_SCHEDULE_NOTIFY).u32(libc::POLLOUT as u32);
        let r = t.send(abi::POLL, 81, 0, &p.0);
        assert_eq!(abi::u32_at(&r[0].2, 0) & libc::POLLOUT as u32, 0, "full: not writable");
        let mut buf = [0u8; 4];
        remote.recv(1, 9, &mut buf).unwrap();
        assert_eq!(t.pass(), vec![(abi::NOTIFY_POLL, 0, 88u64.to_ne_bytes().to_vec())]);
        remote.deactivate();
        let r = t.send(abi::POLL, 82, 0, &p.0);
        assert_ne!(abi::u32_at(&r[0].2, 0) & libc::POLLERR as u32, 0, "a link that is down is an error");
    }

    #[test]
    fn deactivation_fails_waiting_reads_and_writes_with_enotconn() {
        let (mut t, remote) = pair();
        let (r, w) = (t.open(6, libc::O_RDONLY), t.open(7, libc::O_WRONLY));
        assert!(t.read(60, r, 100, 0).is_empty());
        assert!(t.write(61, w, &[0; 20]).is_empty());
        remote.deactivate();
        let mut got = t.pass();
        got.sort();
        assert_eq!(got, vec![(-libc::ENOTCONN, 60, vec![]), (0, 61, [8u32.to_ne_bytes(), [0; 4]].concat())]);
        assert_eq!(t.write(62, w, b"x"), vec![(-libc::ENOTCONN, 62, vec![])]);
    }

    #[test]
    fn stopping_fails_everything_that_waits() {
        let (mut t, _remote) = pair();
        let r = t.open(8, libc::O_RDONLY);
        assert!(t.read(70, r, 100, 0).is_empty());
        t.core.fail_all();
        assert_eq!(t.rec.take(), vec![(-libc::ENOTCONN, 70, vec![])]);
        assert_eq!(t.read(71, r, 100, 0), vec![(-libc::ENOTCONN, 71, vec![])]);
    }

    /// A link whose remote is announced only when `shown` is set.
    struct Later(Arc<MemLink>, AtomicBool);

    impl DevLink for Later {
        fn remotes(&self) -> Vec<u32> {
            if self.1.load(Ordering::SeqCst) {
                self.0.remotes()
            } else {
                vec![]
            }
        }
        fn send(&self, r: u32, d: u8, data: &[u8]) -> io::Result<usize> {
            self.0.send(r, d, data)
        }
        fn send_eof(&self, r: u32, d: u8) -> io::Result<bool> {
            self.0.send_eof(r, d)
        }
        fn recv(&self, r: u32, d: u8, buf: &mut [u8]) -> io::Result<Option<usize>> {
            self.0.recv(r, d, buf)
        }
        fn wait(&self, timeout: Duration) {
            self.0.wait(timeout)
        }
    }

    #[test]
    fn a_remote_activated_later_appears_and_directories_list_it() {
        let (a, _b) = MemLink::pair(1, 2, 8);
        let link = Arc::new(Later(a, AtomicBool::new(false)));
        let mut t = T::new(Arc::clone(&link) as Arc<dyn DevLink>);
        assert_eq!(t.send(abi::LOOKUP, 1, RAW, b"02\0")[0].0, -libc::ENOENT);
        link.1.store(true, Ordering::SeqCst);
        let r = t.send(abi::LOOKUP, 2, RAW, b"02\0");
        assert_eq!((r[0].0, abi::u64_at(&r[0].2, 0)), (0, ino_of(Node::Remote(2))));
        let mut b = Out::default();
        b.u64(0).u64(0).u32(4096).u32(0).u64(0).u32(0).u32(0);
        let r = t.send(abi::READDIR, 3, ino_of(Node::Remote(2)), &b.0);
        let mut names = vec![];
        let mut off = 0;
        let body = &r[0].2;
        while off < body.len() {
            let len = abi::u32_at(body, off + 16) as usize;
            names.push(String::from_utf8(body[off + 24..off + 24 + len].to_vec()).unwrap());
            off += (24 + len).div_ceil(8) * 8;
        }
        assert_eq!(names.len(), 18);
        assert_eq!(&names[..3], [".", "..", "00"]);
        assert_eq!(names[17], "0f");
    }
}
