//! A process's presence as a partition: its page (read by every peer), its doorbell and the
//! pollable descriptor that gathers the doorbell and the peers' deaths.

use super::XPC_VERSION;
use std::collections::{BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use wirespeed::sys::xpc::{self as sx, Epoll, SharedMem};
use wirespeed::{Error, Result};

pub(crate) const PAGE: usize = 4096;
const PAGE_MAGIC: u64 = u64::from_le_bytes(*b"WSXPCPG1");
const P_MAGIC: usize = 0;
const P_PVER: usize = 8;
const P_XVER: usize = 16;
const P_XPC: usize = 24;
const P_PID: usize = 28;
const P_BELL: usize = 32;
const P_GEN: usize = 40;
const P_COUNTER: usize = 128;
const P_SLEEPING: usize = 256;

/// What a partition announces in its page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeOptions {
    /// Partition-support version (major, minor): the partition layer's own compatibility check.
    pub version: (u32, u32),
    /// Whether this partition speaks XPC; `false` makes peers print "Partition X does not
    /// support XPC messaging" and never connect.
    pub xpc: bool,
}

/// What a remote's page says, read through its read-only mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageView {
    /// Partition-support version (major, minor).
    pub version: (u32, u32),
    /// XPC version (major, minor).
    pub xpc_version: (u32, u32),
    /// Whether it speaks XPC.
    pub xpc: bool,
    /// Process that owns the page.
    pub pid: u32,
    /// Heartbeat counter: moves while the partition lives.
    pub counter: u64,
    /// Generation of the page: a new one each time the partition (re)opens it.
    pub generation: u64,
}

fn page_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("part-{id}"))
}

fn io_err(what: &str, p: &Path, e: std::io::Error) -> Error {
    Error::failed(format!("xpc: cannot {what} {}: {e}", p.display()))
}

/// A fresh generation number: distinct for every page or channel half made on this host.
pub(crate) fn new_generation() -> u64 {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let t = wirespeed::sys::realtime_ns();
    (t ^ ((std::process::id() as u64) << 40)).wrapping_add(SEQ.fetch_add(1, Ordering::Relaxed) << 20) | 1
}

/// Create `path` as a new file of `len` bytes mapped read-write, filled by `fill` before it is
/// visible under its name (written beside it, then renamed over: a peer that mapped an older
/// file keeps that one). Returns the mapping and the new file's inode.
pub(crate) fn create_shared(path: &Path, len: usize, fill: impl FnOnce(&SharedMem)) -> Result<(SharedMem, u64)> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| io_err("create", &tmp, e))?;
    let done = (|| {
        f.set_len(len as u64).map_err(|e| io_err("size", &tmp, e))?;
        let m = SharedMem::map(&f, len, true).map_err(|e| io_err("map", &tmp, e))?;
        fill(&m);
        let ino = f.metadata().map_err(|e| io_err("stat", &tmp, e))?.ino();
        std::fs::rename(&tmp, path).map_err(|e| io_err("publish", path, e))?;
        Ok((m, ino))
    })();
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// Map an existing file read-only (a peer's page or half): its whole length, and its inode.
pub(crate) fn open_shared(path: &Path) -> std::io::Result<(SharedMem, u64)> {
    let f = File::open(path)?;
    let md = f.metadata()?;
    let len = md.len() as usize;
    if len < PAGE {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "too short to be an XPC file"));
    }
    Ok((SharedMem::map(&f, len, false)?, md.ino()))
}

/// Remove `path` if it is still the file with inode `ino` (never a successor's).
pub(crate) fn remove_if_ours(path: &Path, ino: u64) {
    if std::fs::metadata(path).map(|m| m.ino() == ino).unwrap_or(false) {
        let _ = std::fs::remove_file(path);
    }
}

/// A remote partition's page, mapped read-only. The mapping stays valid after its owner is gone
/// (the last heartbeat stays readable); [`RemotePage::replaced`] says whether a newer page has
/// taken its name.
pub struct RemotePage {
    id: u32,
    path: PathBuf,
    mem: SharedMem,
    ino: u64,
}

impl RemotePage {
    /// Map partition `id`'s page in `dir`. Fails when there is none (the partition never opened
    /// XPC, or has gone and removed it).
    pub fn open(dir: &Path, id: u32) -> Result<RemotePage> {
        let path = page_path(dir, id);
        let (mem, ino) = open_shared(&path)
            .map_err(|e| Error::failed(format!("xpc: partition {id} has no page at {}: {e}", path.display())))?;
        Ok(RemotePage { id, path, mem, ino })
    }

    /// The partition this page belongs to.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// What the page says now; `None` if it is not a partition page (or no longer one: its file
    /// shrank).
    pub fn read(&self) -> Option<PageView> {
        read_page(&self.mem)
    }

    /// Whether the page's name now holds another file (the partition reopened it: a new
    /// generation), so this mapping shows an old one.
    pub fn replaced(&self) -> bool {
        std::fs::metadata(&self.path).map(|m| m.ino() != self.ino).unwrap_or(true)
    }

    /// Start address of the mapping (to check its protection in `/proc/self/maps`).
    pub fn mapping_addr(&self) -> usize {
        self.mem.addr()
    }

    /// Whether the page's file was truncated under this mapping (by its owner or anyone else):
    /// it then reads as no page at all ([`RemotePage::read`] is `None`), never as a crash.
    pub fn shrunk(&self) -> bool {
        self.mem.shrunk()
    }

    pub(crate) fn sleeping(&self) -> bool {
        self.mem.load_u32(P_SLEEPING, Ordering::SeqCst) != 0
    }
}

fn read_page(m: &SharedMem) -> Option<PageView> {
    if m.load_u64(P_MAGIC, Ordering::Acquire) != PAGE_MAGIC {
        return None;
    }
    let v = page_fields(m);
    // Read while the file was being truncated: zeros, not the page.
    (!m.shrunk()).then_some(v)
}

fn page_fields(m: &SharedMem) -> PageView {
    PageView {
        version: (m.load_u32(P_PVER, Ordering::Relaxed), m.load_u32(P_PVER + 4, Ordering::Relaxed)),
        xpc_version: (m.load_u32(P_XVER, Ordering::Relaxed), m.load_u32(P_XVER + 4, Ordering::Relaxed)),
        xpc: m.load_u32(P_XPC, Ordering::Relaxed) != 0,
        pid: m.load_u32(P_PID, Ordering::Relaxed),
        counter: m.load_u64(P_COUNTER, Ordering::Acquire),
        generation: m.load_u64(P_GEN, Ordering::Relaxed),
    }
}

/// A connected remote: its page, its pidfd (readable once it exits) and a copy of its doorbell.
pub(crate) struct Peer {
    pub(crate) pid: u32,
    pub(crate) generation: u64,
    pub(crate) page: RemotePage,
    /// None when the process was already gone when first seen.
    pidfd: Option<OwnedFd>,
    bell: Option<OwnedFd>,
    pub(crate) dead: AtomicBool,
}

impl Peer {
    /// Ring the peer's doorbell if it said it sleeps (after a full fence: whatever this side
    /// published before is visible to it when it looks), or always with `force`.
    pub(crate) fn notify(&self, force: bool) -> bool {
        sx::fence_seqcst();
        match &self.bell {
            Some(b) if force || self.page.sleeping() => {
                let _ = sx::eventfd_ring(b.as_raw_fd());
                true
            }
            _ => false,
        }
    }

    /// Whether the peer's process has exited (its pidfd is readable).
    pub(crate) fn gone(&self) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return true;
        }
        if self.pidfd.as_ref().map_or(true, |f| sx::readable_now(f.as_raw_fd())) {
            self.dead.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// The change counters a channel contributes to [`Node::snapshot`].
pub(crate) trait Watched: Send + Sync {
    fn remote(&self) -> u32;
    fn chan(&self) -> u32;
    /// Sum of the peer's published words this channel reads (monotonic: any change moves it).
    fn observed(&self) -> u64;
    /// Whether the peer has published messages not yet consumed here.
    fn has_pending(&self) -> bool;
}

pub(crate) struct NodeInner {
    pub(crate) dir: PathBuf,
    pub(crate) local: u32,
    pub(crate) opts: NodeOptions,
    page: SharedMem,
    page_path: PathBuf,
    page_ino: u64,
    bell: OwnedFd,
    epoll: Epoll,
    peers: Mutex<HashMap<u32, Arc<Peer>>>,
    chans: Mutex<Vec<Weak<dyn Watched>>>,
    mask: Mutex<Option<BTreeSet<u32>>>,
    sleepers: AtomicU32,
    /// Local events (a channel closed here, a device deactivated): part of the snapshot.
    events: AtomicU64,
    /// Channel halves made here (path, inode): removed with the node.
    files: Mutex<Vec<(PathBuf, u64)>>,
    /// Doorbell wakeups seen.
    wakes: AtomicU64,
}

/// One process's presence as partition `local`: its page, doorbell and channels' registry.
/// Cheap to clone (shared); the page is removed when the last clone is dropped.
#[derive(Clone)]
pub struct Node {
    pub(crate) inner: Arc<NodeInner>,
}

/// Keeps this node's "I sleep" flag raised while alive: peers ring the doorbell on every change
/// they publish. Take one before polling [`Node::fd`] yourself, drop it after.
pub struct Armed<'a> {
    node: &'a NodeInner,
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        if self.node.sleepers.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.node.page.store_u32(P_SLEEPING, 0, Ordering::SeqCst);
        }
    }
}

thread_local! {
    /// Per thread: (node address, snapshot taken before this thread's last failed try).
    static SEEN: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
}

impl Node {
    /// Open partition `local`'s page in `dir` (created if needed; a page left by an earlier
    /// process is replaced by a new generation) with its doorbell.
    pub fn open(dir: &Path, local: u32, opts: NodeOptions) -> Result<Node> {
        std::fs::create_dir_all(dir).map_err(|e| io_err("create the XPC directory", dir, e))?;
        let bell = sx::eventfd().map_err(|e| Error::failed(format!("xpc: cannot make a doorbell (eventfd): {e}")))?;
        let epoll = Epoll::new().map_err(|e| Error::failed(format!("xpc: cannot make an epoll set: {e}")))?;
        epoll
            .add(bell.as_raw_fd(), 0, true)
            .map_err(|e| Error::failed(format!("xpc: cannot watch the doorbell: {e}")))?;
        remove_stale_halves(dir, local);
        let path = page_path(dir, local);
        let gen = new_generation();
        let bell_fd = bell.as_raw_fd();
        let (page, ino) = create_shared(&path, PAGE, |m| {
            m.store_u32(P_PVER, opts.version.0, Ordering::Relaxed);
            m.store_u32(P_PVER + 4, opts.version.1, Ordering::Relaxed);
            m.store_u32(P_XVER, XPC_VERSION.0, Ordering::Relaxed);
            m.store_u32(P_XVER + 4, XPC_VERSION.1, Ordering::Relaxed);
            m.store_u32(P_XPC, opts.xpc as u32, Ordering::Relaxed);
            m.store_u32(P_PID, std::process::id(), Ordering::Relaxed);
            m.store_u32(P_BELL, bell_fd as u32, Ordering::Relaxed);
            m.store_u64(P_GEN, gen, Ordering::Relaxed);
            m.store_u64(P_MAGIC, PAGE_MAGIC, Ordering::Release);
        })?;
        Ok(Node {
            inner: Arc::new(NodeInner {
                dir: dir.to_path_buf(),
                local,
                opts,
                page,
                page_path: path,
                page_ino: ino,
                bell,
                epoll,
                peers: Mutex::new(HashMap::new()),
                chans: Mutex::new(Vec::new()),
                mask: Mutex::new(None),
                sleepers: AtomicU32::new(0),
                events: AtomicU64::new(0),
                files: Mutex::new(Vec::new()),
                wakes: AtomicU64::new(0),
            }),
        })
    }

    /// This partition's id.
    pub fn local(&self) -> u32 {
        self.inner.local
    }

    /// The XPC directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// What this node announced.
    pub fn options(&self) -> NodeOptions {
        self.inner.opts
    }

    /// One heartbeat: the page's counter moves by one (peers read it).
    pub fn beat(&self) {
        self.inner.page.add_u64(P_COUNTER, 1, Ordering::Release);
    }

    /// This node's own page as a peer would read it (all zeros if another process truncated
    /// its file: see [`RemotePage::shrunk`]).
    pub fn view(&self) -> PageView {
        page_fields(&self.inner.page)
    }

    /// Accept pending messages only from these remotes (`None`: from all), as the Origin's
    /// cross-call mask register: [`Node::pending`] and [`Node::wait_pending`] ignore the rest.
    pub fn set_mask(&self, remotes: Option<BTreeSet<u32>>) {
        *self.inner.mask.lock().unwrap_or_else(|e| e.into_inner()) = remotes;
        self.inner.ring_self();
    }

    /// The pending set: (remote, channel) of every channel with messages published and not yet
    /// consumed here, from remotes the mask accepts.
    pub fn pending(&self) -> Vec<(u32, u32)> {
        let mask = self.inner.mask.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut v: Vec<(u32, u32)> = self
            .inner
            .live_chans()
            .iter()
            .filter(|c| mask.as_ref().map_or(true, |m| m.contains(&c.remote())))
            .filter(|c| c.has_pending())
            .map(|c| (c.remote(), c.chan()))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// A pollable descriptor (epoll over the doorbell and the connected peers' pidfds): readable
    /// when a peer rang or died. Hold an [`Armed`] ([`Node::arm`]) while polling it, so peers
    /// ring, and call [`Node::wait`] with a zero timeout after it fired, to clear it.
    pub fn fd(&self) -> RawFd {
        self.inner.epoll.fd()
    }

    /// Raise the "I sleep" flag until the guard drops (see [`Node::fd`]).
    pub fn arm(&self) -> Armed<'_> {
        self.inner.arm()
    }

    /// A number that moves whenever a peer publishes anything this node's channels read. Take
    /// it *before* checking your channels, and give it to [`Node::wait_since`]: a change between
    /// the check and the sleep is then never missed.
    pub fn snapshot(&self) -> u64 {
        self.inner.snapshot()
    }

    /// Sleep until the snapshot moves from `seen`, the doorbell rings, a peer dies, or `timeout`
    /// passes. Returns whether it woke for a reason other than the timeout.
    pub fn wait_since(&self, seen: u64, timeout: Duration) -> bool {
        self.inner.wait_since(seen, timeout)
    }

    /// Sleep until something may have changed for the channels this thread last found empty or
    /// full (their `try_*` calls remember a snapshot per thread), or `timeout`. Spurious returns
    /// happen; missed wakeups do not.
    pub fn wait(&self, timeout: Duration) -> bool {
        let seen = self.inner.thread_seen();
        self.inner.wait_since(seen, timeout)
    }

    /// Wait until the pending set (under the mask) is not empty, and return it (empty: timeout).
    pub fn wait_pending(&self, timeout: Duration) -> Vec<(u32, u32)> {
        let end = Instant::now() + timeout;
        loop {
            let seen = self.snapshot();
            let p = self.pending();
            if !p.is_empty() {
                return p;
            }
            let now = Instant::now();
            if now >= end {
                return p;
            }
            self.wait_since(seen, end - now);
        }
    }

    /// Ring this node's own doorbell: wakes its waiting threads (a local event).
    pub fn wake(&self) {
        self.inner.ring_self();
    }

    /// Start address of this node's page mapping.
    pub fn mapping_addr(&self) -> usize {
        self.inner.page.addr()
    }
}

impl NodeInner {
    pub(crate) fn arm(&self) -> Armed<'_> {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        self.page.store_u32(P_SLEEPING, 1, Ordering::SeqCst);
        sx::fence_seqcst();
        Armed { node: self }
    }

    pub(crate) fn ring_self(&self) {
        self.events.fetch_add(1, Ordering::SeqCst);
        let _ = sx::eventfd_ring(self.bell.as_raw_fd());
    }

    pub(crate) fn created(&self, path: PathBuf, ino: u64) {
        let mut v = self.files.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|(p, _)| *p != path);
        v.push((path, ino));
    }

    pub(crate) fn register(&self, c: Weak<dyn Watched>) {
        let mut v = self.chans.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(c);
    }

    fn live_chans(&self) -> Vec<Arc<dyn Watched>> {
        self.chans.lock().unwrap_or_else(|e| e.into_inner()).iter().filter_map(|w| w.upgrade()).collect()
    }

    pub(crate) fn snapshot(&self) -> u64 {
        let mut s = self.events.load(Ordering::SeqCst);
        for c in self.live_chans() {
            s = s.wrapping_add(c.observed());
        }
        for p in self.peers.lock().unwrap_or_else(|e| e.into_inner()).values() {
            s = s.wrapping_add(p.dead.load(Ordering::Relaxed) as u64);
        }
        s
    }

    /// Remember, for this thread, the snapshot taken before a check that found nothing.
    pub(crate) fn remember(&self, seen: u64) {
        SEEN.with(|c| c.set((self as *const NodeInner as usize, seen)));
    }

    fn thread_seen(&self) -> u64 {
        let (who, seen) = SEEN.with(|c| c.get());
        if who == self as *const NodeInner as usize {
            seen
        } else {
            self.snapshot()
        }
    }

    pub(crate) fn wait_since(&self, seen: u64, timeout: Duration) -> bool {
        let armed = self.arm();
        if self.snapshot() != seen {
            return true;
        }
        let ms = if timeout.is_zero() { 0 } else { timeout.as_millis().clamp(1, i32::MAX as u128) as i32 };
        let tokens = self.epoll.wait(ms).unwrap_or_else(|_| vec![0]);
        let woke = !tokens.is_empty();
        for t in tokens {
            if t == 0 {
                // Edge-triggered: each ring wakes once, no read needed. Empty the counter now
                // and then so it never fills (2^64 rings away; cheap insurance).
                if self.wakes.fetch_add(1, Ordering::Relaxed) % 4096 == 4095 {
                    sx::eventfd_drain(self.bell.as_raw_fd());
                }
            } else {
                let id = (t - 1) as u32;
                let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(p) = peers.get(&id) {
                    if p.gone() {
                        if let Some(f) = &p.pidfd {
                            self.epoll.remove(f.as_raw_fd());
                        }
                    }
                }
            }
        }
        drop(armed);
        woke
    }

    /// The connected peer `id`, found (or refreshed when the known one died and a newer page
    /// exists) through its page: pidfd and doorbell copy. `Ok(None)`: no live partition there.
    pub(crate) fn peer(&self, id: u32) -> Result<Option<Arc<Peer>>> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = peers.get(&id) {
            if !p.gone() && !p.page.replaced() && !p.page.shrunk() {
                return Ok(Some(p.clone()));
            }
        }
        let Ok(page) = RemotePage::open(&self.dir, id) else {
            return Ok(peers.get(&id).cloned());
        };
        let Some(v) = page.read() else {
            return Ok(peers.get(&id).cloned());
        };
        if let Some(p) = peers.get(&id) {
            if p.generation == v.generation {
                return Ok(Some(p.clone()));
            }
        }
        // A process already gone is still a peer: what it published can be read, then its
        // channels report it gone.
        let pidfd = sx::pidfd_open(v.pid).ok();
        let bell = match &pidfd {
            None => None,
            Some(f) => match sx::pidfd_getfd(f.as_raw_fd(), v.bell_fd_of(&page)) {
                Ok(b) => Some(b),
                // Exiting (no descriptors left) or exited: gone.
                Err(e) if sx::no_such_process(&e) || sx::readable_now(f.as_raw_fd()) => None,
                Err(e) => {
                    return Err(Error::failed(format!(
                        "xpc: cannot reach partition {id}'s doorbell in process {} (pidfd_getfd: {e}): XPC needs the same user or root on both sides",
                        v.pid
                    )))
                }
            },
        };
        let dead = bell.is_none();
        let p = Arc::new(Peer { pid: v.pid, generation: v.generation, page, pidfd, bell, dead: AtomicBool::new(dead) });
        if let Some(old) = peers.insert(id, p.clone()) {
            if let Some(f) = &old.pidfd {
                self.epoll.remove(f.as_raw_fd());
            }
        }
        if let (Some(f), false) = (&p.pidfd, dead) {
            let _ = self.epoll.add(f.as_raw_fd(), id as u64 + 1, false);
        }
        Ok(Some(p))
    }
}

impl PageView {
    fn bell_fd_of(&self, page: &RemotePage) -> i32 {
        page.mem.load_u32(P_BELL, Ordering::Relaxed) as i32
    }
}

impl Drop for NodeInner {
    fn drop(&mut self) {
        for (p, ino) in self.files.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            remove_if_ours(p, *ino);
        }
        remove_if_ours(&self.page_path, self.page_ino);
    }
}

/// Remove the channel halves an earlier process of partition `local` left in `dir` (killed, it
/// could not): this partition's names are this process's now.
fn remove_stale_halves(dir: &Path, local: u32) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let (own, tmp) = (format!("ch-{local}-"), format!(".ch-{local}-"));
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&own) || name.starts_with(&tmp) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Node({} in {})", self.inner.local, self.inner.dir.display())
    }
}
