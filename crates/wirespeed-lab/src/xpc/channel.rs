//! One XPC channel: this partition's half (written here, read by the peer through a read-only
//! mapping) and the peer's half (read here), with the version exchange, flow control, the three
//! ways a message travels (immediate, out of line, rendezvous) and the end of a channel.
//!
//! A half is one file: a 4 KiB header page (identity, state, and the counters saying how far
//! this side has consumed the *peer's* messages), a ring of 128-byte slots, and an out-of-line
//! byte ring. Positions are endless 64-bit counters (slot `i` lives at `i % slots`, byte `p` at
//! `p % data`), so wrap-around is arithmetic, never a special case. The sender owns slots
//! `[tail, peer_consumed + slots)` and bytes likewise; it writes a message, then publishes the
//! new tail with a release store; the receiver acquire-loads the tail, reads, then publishes
//! what it consumed. Doorbells follow each publication only when the other side's page says it
//! sleeps.

use super::node::{create_shared, open_shared, Node, Peer, Watched, PAGE};
use super::{DEFAULT_DATA, DEFAULT_SLOTS, IMMEDIATE_MAX, SLOT, SLOT_HEADER, XPC_VERSION};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use wirespeed::sys::xpc::{self as sx, SharedMem};
use wirespeed::{Error, Result};

const HALF_MAGIC: u64 = u64::from_le_bytes(*b"WSXPCCH1");
const H_MAGIC: usize = 0;
const H_XVER: usize = 8;
const H_PID: usize = 16;
const H_STATE: usize = 20;
const H_GEN: usize = 24;
const H_SLOTS: usize = 32;
const H_DATA: usize = 36;
const H_TAIL: usize = 128;
const H_CONSUMED: usize = 256;
const H_DATA_CONSUMED: usize = 264;
const H_PEER_GEN: usize = 272;
const H_CANCEL: usize = 384;
const H_SKIPPED: usize = 392;

const STATE_OPEN: u32 = 1;
const STATE_CLOSED: u32 = 2;

const K_IMM: u8 = 1;
const K_OOL: u8 = 2;
const K_RDV: u8 = 3;
const K_EOF: u8 = 4;

/// Default of [`ChannelOptions::spin_ns`].
pub const DEFAULT_SPIN_NS: u64 = 0;

/// How often, at most, an idle channel asks the kernel whether the peer's process still lives.
const ALIVE_CHECK_NS: u64 = 1_000_000;

/// How a message travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// In its slot (up to [`IMMEDIATE_MAX`] bytes).
    Immediate,
    /// In the sender's out-of-line area, referenced by offset and length from the slot.
    OutOfLine,
    /// Pulled from the sender's own buffer (the BTE pull), ragged tail through the slot.
    Rendezvous,
    /// The end-of-stream marker ([`Channel::try_send_eof`]): no bytes.
    Eof,
}

/// One received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Bytes delivered.
    pub len: usize,
    /// How it travelled.
    pub kind: Kind,
    /// Bytes pulled straight into the destination (no intermediate copy).
    pub pulled: usize,
    /// Bytes that went through a copy (slot, out-of-line area, or a bounce buffer).
    pub copied: usize,
}

/// Why a channel was refused: the seed's Table 2 notices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The peer's XPC major version differs from ours.
    Version {
        /// The peer partition.
        remote: u32,
        /// Our XPC version.
        local: (u32, u32),
        /// The peer's.
        remote_version: (u32, u32),
    },
    /// The peer's page says it does not speak XPC.
    NoXpc {
        /// The peer partition.
        remote: u32,
    },
}

impl Refusal {
    /// The console lines, exactly as seed 000's Table 2 prints them.
    pub fn lines(&self) -> Vec<String> {
        match self {
            Refusal::Version { remote, local, remote_version } => vec![
                format!("xpc: Remote partition {remote} requested connection"),
                format!(
                    "xpc: Local version {}.{} does not support Remote version {}.{}",
                    local.0, local.1, remote_version.0, remote_version.1
                ),
            ],
            Refusal::NoXpc { remote } => vec![format!("Partition {remote} does not support XPC messaging")],
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.lines().join("\n"))
    }
}

/// Where a channel is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChanState {
    /// Own half made; the peer's is not there yet or has not seen ours.
    Connecting,
    /// Both halves see each other: messages flow.
    Connected,
    /// Versions are incompatible, or the peer does not speak XPC.
    Refused(Refusal),
    /// Closed here, closed by the peer, or the peer's process is gone (the reason says which).
    /// What was published before can still be received.
    Closed(String),
}

/// Per-channel counters: which path messages took, and how bytes arrived.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChanStats {
    /// Messages sent with immediate data only.
    pub sent_immediate: u64,
    /// Messages sent out of line.
    pub sent_out_of_line: u64,
    /// Rendezvous transfers completed (pulled by the peer).
    pub sent_rendezvous: u64,
    /// Messages received by kind.
    pub recv_immediate: u64,
    /// Messages received out of line.
    pub recv_out_of_line: u64,
    /// Rendezvous transfers received.
    pub recv_rendezvous: u64,
    /// Bytes pulled straight from the sender into the destination buffer.
    pub bytes_pulled: u64,
    /// Bytes received through a copy (slot, out-of-line area, bounce buffer).
    pub bytes_copied: u64,
    /// Doorbells this end rang.
    pub rings: u64,
}

/// Sizes and announced version of a channel half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelOptions {
    /// Message slots (a power of two is not required).
    pub slots: u32,
    /// Out-of-line area, bytes: the largest message [`Channel::send`] takes.
    pub data_bytes: u32,
    /// XPC version announced in the half (tests announce others to see the refusal).
    pub xpc_version: (u32, u32),
    /// How long the blocking calls (`send`, `recv`, ...) watch the peer's counters before
    /// going to sleep on the doorbell, ns: a peer that answers within it costs no system call
    /// on either side, when it has a core of its own. Default 0 (sleep at once): on a machine
    /// with fewer free cores than spinning ends, spinning only delays the peer (`bench xpc
    /// --spin-ns` measures both).
    pub spin_ns: u64,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        ChannelOptions {
            slots: DEFAULT_SLOTS,
            data_bytes: DEFAULT_DATA,
            xpc_version: XPC_VERSION,
            spin_ns: DEFAULT_SPIN_NS,
        }
    }
}

struct PeerHalf {
    mem: SharedMem,
    slots: u64,
    data_len: u64,
    data_off: usize,
    peer: Arc<Peer>,
}

/// What the node's registry sees of a channel: enough for the pending set and the snapshot.
struct Core {
    remote: u32,
    chan: u32,
    own: SharedMem,
    peer: OnceLock<PeerHalf>,
}

impl Watched for Core {
    fn remote(&self) -> u32 {
        self.remote
    }
    fn chan(&self) -> u32 {
        self.chan
    }
    fn observed(&self) -> u64 {
        let Some(p) = self.peer.get() else { return 0 };
        let m = &p.mem;
        m.load_u64(H_TAIL, Ordering::SeqCst)
            .wrapping_add(m.load_u64(H_CONSUMED, Ordering::SeqCst))
            .wrapping_add(m.load_u64(H_DATA_CONSUMED, Ordering::SeqCst))
            .wrapping_add(m.load_u64(H_CANCEL, Ordering::SeqCst))
            .wrapping_add(m.load_u32(H_STATE, Ordering::SeqCst) as u64)
    }
    fn has_pending(&self) -> bool {
        let Some(p) = self.peer.get() else { return false };
        p.mem.load_u64(H_TAIL, Ordering::Acquire) > self.own.load_u64(H_CONSUMED, Ordering::Relaxed)
    }
}

fn data_offset(slots: u64) -> usize {
    (PAGE + slots as usize * SLOT).div_ceil(PAGE) * PAGE
}

fn half_name(local: u32, remote: u32, chan: u32) -> String {
    format!("ch-{local}-{remote}-{chan}")
}

/// One end of a point-to-point channel to partition `remote`, number `chan`.
pub struct Channel {
    node: Node,
    core: Arc<Core>,
    gen: u64,
    slots: u64,
    data_len: u64,
    data_off: usize,
    version: (u32, u32),
    spin_ns: u64,
    tx_tail: u64,
    tx_data: u64,
    rx_index: u64,
    rx_data: u64,
    state: ChanState,
    closed_here: bool,
    stats: ChanStats,
    bounce: Vec<u8>,
    alive_checked: u64,
}

/// Where a received message goes.
enum Out<'a> {
    Vec(&'a mut Vec<u8>),
    Slice(&'a mut [u8]),
}

impl Out<'_> {
    fn room(&mut self, len: usize) -> Option<&mut [u8]> {
        match self {
            Out::Vec(v) => {
                v.clear();
                v.resize(len, 0);
                Some(&mut v[..])
            }
            Out::Slice(s) if s.len() >= len => Some(&mut s[..len]),
            Out::Slice(_) => None,
        }
    }
}

struct SlotHead {
    len: u32,
    kind: u8,
    nslots: u8,
    imm: u16,
    pos: u64,
    body: u32,
    pid: u32,
}

impl SlotHead {
    fn encode(&self, s: &mut [u8; SLOT]) {
        s[0..4].copy_from_slice(&self.len.to_le_bytes());
        s[4] = self.kind;
        s[5] = self.nslots;
        s[6..8].copy_from_slice(&self.imm.to_le_bytes());
        s[8..16].copy_from_slice(&self.pos.to_le_bytes());
        s[16..20].copy_from_slice(&self.body.to_le_bytes());
        s[20..24].copy_from_slice(&self.pid.to_le_bytes());
    }
    fn decode(s: &[u8; SLOT]) -> SlotHead {
        let u32at = |o: usize| u32::from_le_bytes(s[o..o + 4].try_into().expect("4 bytes"));
        SlotHead {
            len: u32at(0),
            kind: s[4],
            nslots: s[5],
            imm: u16::from_le_bytes([s[6], s[7]]),
            pos: u64::from_le_bytes(s[8..16].try_into().expect("8 bytes")),
            body: u32at(16),
            pid: u32at(20),
        }
    }
}

/// Slots a message with `imm` immediate bytes takes: the first carries IMMEDIATE_MAX, each
/// continuation slot a whole SLOT.
fn slots_for(imm: usize) -> u64 {
    if imm <= IMMEDIATE_MAX {
        1
    } else {
        1 + (imm - IMMEDIATE_MAX).div_ceil(SLOT) as u64
    }
}

impl Channel {
    /// Open this side of channel `chan` to partition `remote` with default sizes: creates the own
    /// half (replacing one left by an earlier process) and tries to connect once. Use
    /// [`Channel::poll_connect`] or just send/receive (they keep trying) afterwards.
    pub fn open(node: &Node, remote: u32, chan: u32) -> Result<Channel> {
        Channel::open_with(node, remote, chan, ChannelOptions::default())
    }

    /// [`Channel::open`] with explicit sizes and announced version.
    pub fn open_with(node: &Node, remote: u32, chan: u32, o: ChannelOptions) -> Result<Channel> {
        let local = node.local();
        if !node.options().xpc {
            return Err(Error::invalid(format!(
                "Partition {local} does not support XPC messaging (it was opened with xpc = false): no channel can be opened"
            )));
        }
        if remote == local {
            return Err(Error::invalid(format!(
                "xpc: a channel from partition {local} to itself is not a channel: name another partition"
            )));
        }
        if o.slots < 2 || o.slots > 1 << 20 || o.data_bytes < SLOT as u32 || o.data_bytes > 1 << 30 {
            return Err(Error::invalid(format!(
                "xpc: channel sizes {} slots / {} bytes out of range: 2..1Mi slots, 128 B..1 GiB of out-of-line area",
                o.slots, o.data_bytes
            )));
        }
        let slots = o.slots as u64;
        let data_off = data_offset(slots);
        let len = data_off + o.data_bytes as usize;
        let path = node.dir().join(half_name(local, remote, chan));
        let gen = super::node::new_generation();
        let (own, ino) = create_shared(&path, len, |m| {
            m.store_u32(H_XVER, o.xpc_version.0, Ordering::Relaxed);
            m.store_u32(H_XVER + 4, o.xpc_version.1, Ordering::Relaxed);
            m.store_u32(H_PID, std::process::id(), Ordering::Relaxed);
            m.store_u32(H_STATE, STATE_OPEN, Ordering::Relaxed);
            m.store_u64(H_GEN, gen, Ordering::Relaxed);
            m.store_u32(H_SLOTS, o.slots, Ordering::Relaxed);
            m.store_u32(H_DATA, o.data_bytes, Ordering::Relaxed);
            m.store_u64(H_MAGIC, HALF_MAGIC, Ordering::Release);
        })?;
        node.inner.created(path.clone(), ino);
        let core = Arc::new(Core { remote, chan, own, peer: OnceLock::new() });
        let weak: std::sync::Weak<dyn Watched> = Arc::downgrade(&(core.clone() as Arc<dyn Watched>));
        node.inner.register(weak);
        let mut c = Channel {
            node: node.clone(),
            core,
            gen,
            slots,
            data_len: o.data_bytes as u64,
            data_off,
            version: o.xpc_version,
            spin_ns: o.spin_ns,
            tx_tail: 0,
            tx_data: 0,
            rx_index: 0,
            rx_data: 0,
            state: ChanState::Connecting,
            closed_here: false,
            stats: ChanStats::default(),
            bounce: Vec::new(),
            alive_checked: 0,
        };
        c.poll_connect()?;
        Ok(c)
    }

    /// The peer partition.
    pub fn remote(&self) -> u32 {
        self.core.remote
    }

    /// The channel number.
    pub fn chan(&self) -> u32 {
        self.core.chan
    }

    /// The counters so far.
    pub fn stats(&self) -> ChanStats {
        self.stats
    }

    /// The state as last seen (no new look: see [`Channel::poll_connect`]).
    pub fn state(&self) -> ChanState {
        self.state.clone()
    }

    /// Start address of the own half's mapping (read-write) and of the peer's (read-only, once
    /// connected): to check the firewall in `/proc/self/maps`.
    pub fn mapping_addrs(&self) -> (usize, Option<usize>) {
        (self.core.own.addr(), self.core.peer.get().map(|p| p.mem.addr()))
    }

    /// Look again: connect if the peer's half has appeared, notice a refusal or a close.
    pub fn poll_connect(&mut self) -> Result<ChanState> {
        match &self.state {
            ChanState::Connecting => {}
            ChanState::Connected => {
                if let Some(r) = self.closed_reason(true) {
                    self.state = ChanState::Closed(r);
                }
                return Ok(self.state.clone());
            }
            s => return Ok(s.clone()),
        }
        let remote = self.core.remote;
        let (local, chan) = (self.node.local(), self.core.chan);
        let Some(peer) = self.node.inner.peer(remote)? else { return Ok(ChanState::Connecting) };
        let Some(view) = peer.page.read() else { return Ok(ChanState::Connecting) };
        if !view.xpc {
            self.state = ChanState::Refused(Refusal::NoXpc { remote });
            return Ok(self.state.clone());
        }
        let ppath = self.node.dir().join(half_name(remote, local, chan));
        let Ok((mem, _)) = open_shared(&ppath) else { return Ok(ChanState::Connecting) };
        if mem.load_u64(H_MAGIC, Ordering::Acquire) != HALF_MAGIC || mem.load_u32(H_PID, Ordering::Relaxed) != peer.pid
        {
            return Ok(ChanState::Connecting);
        }
        let pv = (mem.load_u32(H_XVER, Ordering::Relaxed), mem.load_u32(H_XVER + 4, Ordering::Relaxed));
        if pv.0 != self.version.0 {
            self.state = ChanState::Refused(Refusal::Version { remote, local: self.version, remote_version: pv });
            return Ok(self.state.clone());
        }
        let (pslots, pdata) =
            (mem.load_u32(H_SLOTS, Ordering::Relaxed) as u64, mem.load_u32(H_DATA, Ordering::Relaxed) as u64);
        if pslots < 2 || data_offset(pslots) + pdata as usize > mem.len() {
            return Ok(ChanState::Connecting);
        }
        // A half is taken once: fresh (it has taken no peer yet) and open, or already ours (then
        // even closed: what it sent us before closing is still to be read). A half taken by an
        // earlier incarnation of this end is stale: wait for its owner to replace it.
        let theirs = mem.load_u64(H_PEER_GEN, Ordering::Acquire);
        let open = mem.load_u32(H_STATE, Ordering::Acquire) == STATE_OPEN;
        if !(theirs == self.gen || (theirs == 0 && open && !peer.gone())) {
            return Ok(ChanState::Connecting);
        }
        let pgen = mem.load_u64(H_GEN, Ordering::Relaxed);
        self.core.own.store_u64(H_PEER_GEN, pgen, Ordering::Release);
        let half = PeerHalf { mem, slots: pslots, data_len: pdata, data_off: data_offset(pslots), peer };
        if self.core.peer.set(half).is_err() {
            return Err(Error::failed("xpc: channel connected twice (a bug)"));
        }
        self.state = ChanState::Connected;
        // The peer may be waiting for exactly this.
        self.core.peer.get().expect("just set").peer.notify(true);
        Ok(ChanState::Connected)
    }

    /// Why no more will come: closed here, by the peer, or the peer's process is gone. `fresh`
    /// asks the kernel about the process now; otherwise at most every millisecond.
    fn closed_reason(&mut self, fresh: bool) -> Option<String> {
        let (r, c) = (self.core.remote, self.core.chan);
        if let Some(why) = self.shrank() {
            return Some(why);
        }
        if self.closed_here {
            return Some(format!("xpc: channel {c} to partition {r} was closed here"));
        }
        let p = self.core.peer.get()?;
        if p.mem.load_u32(H_STATE, Ordering::Acquire) == STATE_CLOSED {
            return Some(format!("xpc: partition {r} closed channel {c}"));
        }
        let now = wirespeed::sys::monotonic_ns();
        if fresh || p.peer.dead.load(Ordering::Relaxed) || now.saturating_sub(self.alive_checked) >= ALIVE_CHECK_NS {
            self.alive_checked = now;
            if p.peer.gone() {
                return Some(format!(
                    "xpc: partition {r} is gone (its process {} exited): channel {c} is closed",
                    p.peer.pid
                ));
            }
        }
        None
    }

    /// Why this channel cannot go on because one of its two files shrank under this process
    /// (truncated by another: the mapping now reads zeros, see `sys::xpc`), if one did.
    fn shrank(&self) -> Option<String> {
        let (l, r, c) = (self.node.local(), self.core.remote, self.core.chan);
        if self.core.peer.get().is_some_and(|p| p.mem.shrunk()) {
            return Some(format!(
                "xpc: partition {r} truncated its half of channel {c} ({}) under this reader: nothing more is read from it, channel closed",
                half_name(r, l, c)
            ));
        }
        if self.core.own.shrunk() {
            return Some(format!(
                "xpc: this partition's half of channel {c} to partition {r} ({}) was truncated by another process: nothing sent on it can arrive, channel closed",
                half_name(l, r, c)
            ));
        }
        None
    }

    /// Close the channel for good if one of its files shrank: the error to return.
    fn fail_if_shrunk(&mut self) -> Result<()> {
        let Some(why) = self.shrank() else { return Ok(()) };
        self.state = ChanState::Closed(why.clone());
        self.closed_here = true;
        // Harmless if the own half is the one that shrank: its mapping is zeros of our own now.
        self.core.own.store_u32(H_STATE, STATE_CLOSED, Ordering::Release);
        Err(Error::failed(why))
    }

    /// The connected peer half, or why there is none yet (`Ok(None)`: still connecting).
    fn connected(&mut self) -> Result<bool> {
        if self.core.peer.get().is_some() {
            return Ok(true);
        }
        match self.poll_connect()? {
            ChanState::Connected => Ok(true),
            ChanState::Connecting => Ok(false),
            ChanState::Refused(r) => Err(Error::failed(r.to_string())),
            ChanState::Closed(why) => Err(Error::failed(why)),
        }
    }

    fn send_check(&mut self) -> Result<bool> {
        self.fail_if_shrunk()?;
        if self.closed_here {
            return Err(Error::failed(format!(
                "xpc: channel {} to partition {} is closed here: nothing more can be sent",
                self.core.chan, self.core.remote
            )));
        }
        if !self.connected()? {
            return Ok(false);
        }
        // One load of a line the peer rarely writes: nothing is queued for a peer that closed.
        let p = self.core.peer.get().expect("connected");
        if p.mem.load_u32(H_STATE, Ordering::Relaxed) == STATE_CLOSED || p.peer.dead.load(Ordering::Relaxed) {
            if let Some(why) = self.closed_reason(true) {
                self.state = ChanState::Closed(why.clone());
                return Err(Error::failed(why));
            }
        }
        Ok(true)
    }

    /// Free slots and out-of-line bytes towards the peer, from what it says it consumed.
    fn room(&self) -> (u64, u64) {
        let p = self.core.peer.get().expect("connected");
        // Until the peer has taken this half, it has consumed nothing of it.
        let (c, d) = if p.mem.load_u64(H_PEER_GEN, Ordering::Acquire) == self.gen {
            (p.mem.load_u64(H_CONSUMED, Ordering::Acquire), p.mem.load_u64(H_DATA_CONSUMED, Ordering::Acquire))
        } else {
            (0, 0)
        };
        (self.slots - (self.tx_tail - c), self.data_len - (self.tx_data - d))
    }

    /// Room for `slots` slots and `bytes` out-of-line bytes? Takes the snapshot before the
    /// second look, so a later wait does not miss the peer freeing room.
    fn has_room(&mut self, slots: u64, bytes: u64) -> Result<bool> {
        let (s, d) = self.room();
        if s >= slots && d >= bytes {
            return Ok(true);
        }
        let seen = self.node.inner.snapshot();
        let (s, d) = self.room();
        if s >= slots && d >= bytes {
            return Ok(true);
        }
        if let Some(why) = self.closed_reason(false) {
            self.state = ChanState::Closed(why.clone());
            return Err(Error::failed(why));
        }
        self.node.inner.remember(seen);
        Ok(false)
    }

    fn slot_off(&self, i: u64) -> usize {
        PAGE + (i % self.slots) as usize * SLOT
    }

    /// Write a message of `head` plus `imm` immediate bytes into the own slots, then publish.
    /// An error when the own half shrank meanwhile (the message went nowhere).
    fn post(&mut self, head: SlotHead, imm: &[u8]) -> Result<()> {
        let n = slots_for(imm.len());
        let mut s = [0u8; SLOT];
        let mut h = head;
        h.nslots = n as u8;
        h.imm = imm.len() as u16;
        h.encode(&mut s);
        let first = imm.len().min(IMMEDIATE_MAX);
        s[SLOT_HEADER..SLOT_HEADER + first].copy_from_slice(&imm[..first]);
        self.core.own.write(self.slot_off(self.tx_tail), &s);
        for (k, chunk) in imm[first..].chunks(SLOT).enumerate() {
            self.core.own.write(self.slot_off(self.tx_tail + 1 + k as u64), chunk);
        }
        self.tx_tail += n;
        self.core.own.store_u64(H_TAIL, self.tx_tail, Ordering::Release);
        self.fail_if_shrunk()?;
        self.notify();
        Ok(())
    }

    fn notify(&mut self) {
        if let Some(p) = self.core.peer.get() {
            if p.peer.notify(false) {
                self.stats.rings += 1;
            }
        }
    }

    /// Send one message without blocking: `Ok(false)` when the peer has not consumed enough yet
    /// (flow control) or the channel is still connecting. Up to [`IMMEDIATE_MAX`] bytes travel
    /// in the slot, longer ones out of line (at most the out-of-line area: larger is refused;
    /// use [`Channel::send_rendezvous`]).
    pub fn try_send(&mut self, msg: &[u8]) -> Result<bool> {
        if !self.send_check()? {
            return Ok(false);
        }
        if msg.len() <= IMMEDIATE_MAX {
            if !self.has_room(1, 0)? {
                return Ok(false);
            }
            self.post(
                SlotHead { len: msg.len() as u32, kind: K_IMM, nslots: 1, imm: 0, pos: 0, body: 0, pid: 0 },
                msg,
            )?;
            self.stats.sent_immediate += 1;
            return Ok(true);
        }
        if msg.len() as u64 > self.data_len {
            return Err(Error::invalid(format!(
                "xpc: a message of {} bytes is larger than channel {}'s out-of-line area of {} bytes: send it with send_rendezvous, or split it",
                msg.len(),
                self.core.chan,
                self.data_len
            )));
        }
        if !self.has_room(1, msg.len() as u64)? {
            return Ok(false);
        }
        let pos = self.tx_data;
        let at = (pos % self.data_len) as usize;
        let first = msg.len().min(self.data_len as usize - at);
        self.core.own.write(self.data_off + at, &msg[..first]);
        self.core.own.write(self.data_off, &msg[first..]);
        self.tx_data += msg.len() as u64;
        self.post(
            SlotHead { len: msg.len() as u32, kind: K_OOL, nslots: 1, imm: 0, pos, body: msg.len() as u32, pid: 0 },
            &[],
        )?;
        self.stats.sent_out_of_line += 1;
        Ok(true)
    }

    /// Send the end-of-stream marker (a message of kind [`Kind::Eof`]): `Ok(false)` when full.
    pub fn try_send_eof(&mut self) -> Result<bool> {
        if !self.send_check()? || !self.has_room(1, 0)? {
            return Ok(false);
        }
        self.post(SlotHead { len: 0, kind: K_EOF, nslots: 1, imm: 0, pos: 0, body: 0, pid: 0 }, &[])?;
        Ok(true)
    }

    /// Send one message, waiting up to `timeout` for room.
    pub fn send(&mut self, msg: &[u8], timeout: Duration) -> Result<()> {
        let end = Instant::now() + timeout;
        loop {
            if self.try_send(msg)? {
                return Ok(());
            }
            if !self.wait_until(end) {
                return Err(self.timeout_error("take a message", timeout));
            }
        }
    }

    fn timeout_error(&self, what: &str, t: Duration) -> Error {
        let why = match &self.state {
            ChanState::Connecting => "it never connected",
            _ => "its side is full",
        };
        Error::failed(format!(
            "xpc: partition {} did not {what} on channel {} within {:?} ({why})",
            self.core.remote, self.core.chan, t
        ))
    }

    /// Sleep until something may have changed or `end`; false once `end` has passed. Watches
    /// the peer's published counters for up to `spin_ns` first: a change seen there needs no
    /// doorbell.
    fn wait_until(&self, end: Instant) -> bool {
        if self.spin_ns > 0 {
            if let Some(p) = self.core.peer.get() {
                let look = || {
                    p.mem.load_u64(H_TAIL, Ordering::Relaxed)
                        ^ p.mem.load_u64(H_CONSUMED, Ordering::Relaxed).rotate_left(21)
                        ^ (p.mem.load_u32(H_STATE, Ordering::Relaxed) as u64).rotate_left(42)
                };
                let first = look();
                let t0 = wirespeed::sys::monotonic_ns();
                let mut k = 0u32;
                loop {
                    std::hint::spin_loop();
                    if look() != first {
                        return true;
                    }
                    k += 1;
                    if k % 64 == 0 && wirespeed::sys::monotonic_ns() - t0 >= self.spin_ns {
                        break;
                    }
                }
            }
        }
        let now = Instant::now();
        if now >= end {
            return false;
        }
        self.node.wait(end - now);
        true
    }

    /// Send `buf` by rendezvous: post where it lies (pid, address, length) and return once the
    /// peer has pulled it ([`Channel::recv_into`]), or with an error if it closes, dies or
    /// `timeout` passes (then the offer is withdrawn: the peer never reads `buf` afterwards).
    /// The 128-byte body is pulled from `buf` by the peer; the last partial cache line travels
    /// in the slot. Two ends sending rendezvous to each other at once wait for each other:
    /// receive on another thread, or use `send`.
    pub fn send_rendezvous(&mut self, buf: &[u8], timeout: Duration) -> Result<()> {
        let end = Instant::now() + timeout;
        if buf.len() > u32::MAX as usize {
            return Err(Error::invalid(format!(
                "xpc: a rendezvous of {} bytes is over the 4 GiB limit: split it",
                buf.len()
            )));
        }
        let body = buf.len() & !(SLOT - 1);
        let tail = &buf[body..];
        let n = slots_for(tail.len());
        loop {
            if self.send_check()? && self.has_room(n, 0)? {
                break;
            }
            if !self.wait_until(end) {
                return Err(self.timeout_error("take a rendezvous", timeout));
            }
        }
        let idx = self.tx_tail;
        let head = SlotHead {
            len: buf.len() as u32,
            kind: K_RDV,
            nslots: 1,
            imm: 0,
            pos: buf.as_ptr() as u64,
            body: body as u32,
            pid: std::process::id(),
        };
        self.post(head, tail)?;
        let done = idx + n;
        loop {
            let p = self.core.peer.get().expect("connected");
            if p.mem.load_u64(H_CONSUMED, Ordering::Acquire) >= done {
                self.stats.sent_rendezvous += 1;
                return Ok(());
            }
            let seen = self.node.inner.snapshot();
            if p.mem.load_u64(H_CONSUMED, Ordering::Acquire) >= done {
                continue;
            }
            let fail = if let Some(why) = self.closed_reason(false) {
                Some(Error::failed(why))
            } else if Instant::now() >= end {
                Some(self.timeout_error("pull a rendezvous", timeout))
            } else {
                None
            };
            if let Some(e) = fail {
                // Withdraw the offer, then look once more: the peer may have pulled it already.
                self.core.own.store_u64(H_CANCEL, idx + 1, Ordering::SeqCst);
                sx::fence_seqcst();
                let p = self.core.peer.get().expect("connected");
                if p.mem.load_u64(H_CONSUMED, Ordering::SeqCst) >= done
                    && p.mem.load_u64(H_SKIPPED, Ordering::SeqCst) != idx + 1
                {
                    self.stats.sent_rendezvous += 1;
                    return Ok(());
                }
                return Err(e);
            }
            self.node.wait_since(seen, end.saturating_duration_since(Instant::now()));
        }
    }

    /// Receive one message into `buf` (resized to it), without blocking: `Ok(None)` when there
    /// is none yet; an error once the channel is closed (here, by the peer, or the peer died)
    /// and everything sent before has been received.
    pub fn try_recv(&mut self, buf: &mut Vec<u8>) -> Result<Option<usize>> {
        Ok(self.take(Out::Vec(buf))?.map(|r| r.len))
    }

    /// [`Channel::try_recv`] saying how the message travelled (and whether it is the
    /// end-of-stream marker).
    pub fn try_recv_msg(&mut self, buf: &mut Vec<u8>) -> Result<Option<Received>> {
        self.take(Out::Vec(buf))
    }

    /// Receive one message into `out` without blocking (see [`Channel::try_recv`]); a rendezvous
    /// is pulled straight into `out` when both buffers are 128-byte aligned. A message longer
    /// than `out` is refused and left in place.
    pub fn try_recv_into(&mut self, out: &mut [u8]) -> Result<Option<Received>> {
        self.take(Out::Slice(out))
    }

    /// Receive one message into `buf`, waiting up to `timeout`: `Ok(None)` on timeout.
    pub fn recv(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> Result<Option<usize>> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(r) = self.take(Out::Vec(buf))? {
                return Ok(Some(r.len));
            }
            if !self.wait_until(end) {
                return Ok(None);
            }
        }
    }

    /// Receive one message into `out`, waiting up to `timeout` (see [`Channel::try_recv_into`]).
    pub fn recv_into(&mut self, out: &mut [u8], timeout: Duration) -> Result<Option<Received>> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(r) = self.take(Out::Slice(out))? {
                return Ok(Some(r));
            }
            if !self.wait_until(end) {
                return Ok(None);
            }
        }
    }

    fn malformed(&mut self, what: &str) -> Error {
        let why = format!(
            "xpc: partition {} sent a malformed message on channel {} ({what}): channel closed",
            self.core.remote, self.core.chan
        );
        self.state = ChanState::Closed(why.clone());
        self.closed_here = true;
        self.core.own.store_u32(H_STATE, STATE_CLOSED, Ordering::Release);
        Error::failed(why)
    }

    /// [`Channel::take_unchecked`], then the check that nothing it read came from a file that
    /// shrank meanwhile (such a message is zeros, not what was sent: refused with the reason).
    fn take(&mut self, out: Out<'_>) -> Result<Option<Received>> {
        self.fail_if_shrunk()?;
        let r = self.take_unchecked(out);
        self.fail_if_shrunk()?;
        r
    }

    fn take_unchecked(&mut self, mut out: Out<'_>) -> Result<Option<Received>> {
        if !self.connected()? {
            let seen = self.node.inner.snapshot();
            if !self.connected()? {
                self.node.inner.remember(seen);
                return Ok(None);
            }
        }
        loop {
            let p = self.core.peer.get().expect("connected");
            let mut tail = p.mem.load_u64(H_TAIL, Ordering::Acquire);
            if tail == self.rx_index {
                let seen = self.node.inner.snapshot();
                tail = p.mem.load_u64(H_TAIL, Ordering::Acquire);
                if tail == self.rx_index {
                    if let Some(why) = self.closed_reason(false) {
                        // Published before the close is still delivered: look once more.
                        let p = self.core.peer.get().expect("connected");
                        if p.mem.load_u64(H_TAIL, Ordering::Acquire) != self.rx_index {
                            continue;
                        }
                        self.state = ChanState::Closed(why.clone());
                        return Err(Error::failed(why));
                    }
                    self.node.inner.remember(seen);
                    return Ok(None);
                }
            }
            if tail < self.rx_index || tail - self.rx_index > p.slots {
                return Err(self.malformed("its message count went backwards or past its ring"));
            }
            let off = PAGE + (self.rx_index % p.slots) as usize * SLOT;
            let mut s = [0u8; SLOT];
            p.mem.read(off, &mut s);
            let h = SlotHead::decode(&s);
            let n = h.nslots as u64;
            if n == 0 || n > tail - self.rx_index || slots_for(h.imm as usize) != n {
                return Err(self.malformed("bad slot count"));
            }
            let len = h.len as usize;
            let mut got = Received { len, kind: Kind::Immediate, pulled: 0, copied: 0 };
            let mut data_end = None;
            match h.kind {
                K_IMM | K_EOF => {
                    if h.imm as usize != len || (h.kind == K_EOF && len != 0) {
                        return Err(self.malformed("immediate length"));
                    }
                    let Some(dst) = out.room(len) else { return Err(too_small(len)) };
                    self.copy_imm(&s, self.rx_index, dst);
                    got.copied = len;
                    got.kind = if h.kind == K_EOF { Kind::Eof } else { Kind::Immediate };
                }
                K_OOL => {
                    let rd = self.rx_data;
                    if h.pos != rd || len as u64 > p.data_len || h.imm != 0 {
                        return Err(self.malformed("out-of-line reference"));
                    }
                    let Some(dst) = out.room(len) else { return Err(too_small(len)) };
                    let at = (h.pos % p.data_len) as usize;
                    let first = len.min(p.data_len as usize - at);
                    p.mem.read(p.data_off + at, &mut dst[..first]);
                    p.mem.read(p.data_off, &mut dst[first..]);
                    data_end = Some(h.pos + len as u64);
                    got.copied = len;
                    got.kind = Kind::OutOfLine;
                }
                K_RDV => {
                    let body = h.body as usize;
                    if body + h.imm as usize != len || body % SLOT != 0 {
                        return Err(self.malformed("rendezvous lengths"));
                    }
                    let cancelled = |c: &Channel| {
                        c.core.peer.get().expect("connected").mem.load_u64(H_CANCEL, Ordering::SeqCst) == c.rx_index + 1
                    };
                    if cancelled(self) {
                        self.skip(n);
                        continue;
                    }
                    let Some(dst) = out.room(len) else { return Err(too_small(len)) };
                    let (src, pid) = (h.pos, h.pid);
                    let direct = src % SLOT as u64 == 0 && (dst.as_ptr() as usize) % SLOT == 0;
                    let pulled = if direct {
                        sx::vm_read(pid, src, &mut dst[..body])
                    } else {
                        self.bounce.resize(body, 0);
                        let r = sx::vm_read(pid, src, &mut self.bounce[..body]);
                        if let Ok(k) = r {
                            dst[..k].copy_from_slice(&self.bounce[..k]);
                        }
                        r
                    };
                    match pulled {
                        Ok(k) if k == body => {}
                        Ok(k) => return Err(self.pull_failed(body, pid, format!("only {k} bytes came"))),
                        Err(e) => return Err(self.pull_failed(body, pid, e.to_string())),
                    }
                    self.copy_imm(&s, self.rx_index, &mut dst[body..]);
                    sx::fence_seqcst();
                    if cancelled(self) {
                        self.skip(n);
                        continue;
                    }
                    got.kind = Kind::Rendezvous;
                    if direct {
                        got.pulled = body;
                        got.copied = len - body;
                    } else {
                        got.copied = len;
                    }
                }
                _ => return Err(self.malformed("unknown kind")),
            }
            self.consume(n, data_end);
            match got.kind {
                Kind::Immediate | Kind::Eof => self.stats.recv_immediate += 1,
                Kind::OutOfLine => self.stats.recv_out_of_line += 1,
                Kind::Rendezvous => self.stats.recv_rendezvous += 1,
            }
            self.stats.bytes_pulled += got.pulled as u64;
            self.stats.bytes_copied += got.copied as u64;
            return Ok(Some(got));
        }
    }

    fn pull_failed(&mut self, body: usize, pid: u32, e: String) -> Error {
        let why = format!(
            "xpc: cannot pull a rendezvous of {body} bytes from partition {} (process {pid}) on channel {}: {e}",
            self.core.remote, self.core.chan
        );
        self.state = ChanState::Closed(why.clone());
        Error::failed(why)
    }

    /// Copy the immediate bytes of the message whose first slot `s` is at index `i` into `dst`.
    fn copy_imm(&self, s: &[u8; SLOT], i: u64, dst: &mut [u8]) {
        let p = self.core.peer.get().expect("connected");
        let first = dst.len().min(IMMEDIATE_MAX);
        dst[..first].copy_from_slice(&s[SLOT_HEADER..SLOT_HEADER + first]);
        for (k, chunk) in dst[first..].chunks_mut(SLOT).enumerate() {
            let off = PAGE + ((i + 1 + k as u64) % p.slots) as usize * SLOT;
            p.mem.read(off, chunk);
        }
    }

    /// Drop a withdrawn rendezvous: say so first, so its sender does not take it as pulled.
    fn skip(&mut self, n: u64) {
        self.core.own.store_u64(H_SKIPPED, self.rx_index + 1, Ordering::Release);
        self.consume(n, None);
    }

    fn consume(&mut self, n: u64, data_end: Option<u64>) {
        self.rx_index += n;
        if let Some(d) = data_end {
            self.rx_data = d;
            self.core.own.store_u64(H_DATA_CONSUMED, d, Ordering::Release);
        }
        self.core.own.store_u64(H_CONSUMED, self.rx_index, Ordering::Release);
        self.notify();
    }

    /// Close this end: the peer receives what was sent, then an error saying it was closed.
    /// Sending afterwards is an error; receiving what the peer sent before still works.
    pub fn close(&mut self) {
        if self.closed_here {
            return;
        }
        self.closed_here = true;
        self.core.own.store_u32(H_STATE, STATE_CLOSED, Ordering::Release);
        if let Some(p) = self.core.peer.get() {
            p.peer.notify(true);
        }
        self.node.inner.ring_self();
    }

    /// Whether the peer has published messages not yet received here.
    pub fn has_pending(&self) -> bool {
        self.core.has_pending()
    }
}

fn too_small(len: usize) -> Error {
    Error::invalid(format!("xpc: the receive buffer is smaller than the next message ({len} bytes): give a larger one"))
}

impl Drop for Channel {
    /// Closes the channel; the half stays (a peer that has not mapped it yet can still read
    /// what was sent) until the node goes or a new channel of the same name replaces it.
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Channel({} -> {} #{}: {:?})", self.node.local(), self.core.remote, self.core.chan, self.state)
    }
}
