//! XPC: cross-partition communication after the Origin 2000's XPC module (seed 000, 4.2).
//!
//! Reliable, ordered messages between two processes in two partitions of one host, through
//! shared memory that each side may write only in its own half (the other maps it read-only:
//! the seed's firewalls), woken by a doorbell instead of polling (the cross-call interrupt).
//!
//! The pieces, as the seed names them:
//!
//! - **Partition page** ([`Node`], file `part-<local>` in the XPC directory): what a partition
//!   tells the others about itself (partition-support version, XPC version and whether it speaks
//!   XPC, its pid, the number of its doorbell descriptor) and its heartbeat counter, which the
//!   others read through their read-only mapping ([`RemotePage`]) as the Origin's partition
//!   module reads a remote's heartbeat.
//! - **Cross-call interrupt** ([`Node::wait`], [`Node::fd`]): each node has an eventfd any peer
//!   may write (it gets a copy with `pidfd_getfd`), rung only when the node has said, in its own
//!   page, that it is about to sleep: a busy receiver costs its senders no system call. The
//!   *pending set* ([`Node::pending`]) is computed by comparing each channel's published message
//!   count with what was consumed; the *mask* ([`Node::set_mask`]) is the set of remotes whose
//!   pending messages count.
//! - **Channel** ([`Channel`]): per ordered pair of partitions and channel number, each end owns
//!   one half (`ch-<local>-<remote>-<chan>`): a header, a ring of 128-byte message slots (the
//!   Origin's cache line; [`IMMEDIATE_MAX`] bytes of immediate data each), an out-of-line byte
//!   ring for longer messages, and the counters saying how far it has consumed the *peer's*
//!   messages (flow control for the reverse direction). Versions are exchanged on connect and
//!   an incompatible peer is refused with the seed's Table 2 lines ([`Refusal`]).
//! - **Rendezvous** ([`Channel::send_rendezvous`], [`Channel::recv_into`]): the BTE pull. The
//!   sender posts (pid, address, length) of its own buffer and waits; the receiver pulls the
//!   cache-line body with `process_vm_readv` straight into its buffer when both are 128-byte
//!   aligned, and the ragged tail (the last partial cache line) arrives in the slot, copied.
//! - **Raw devices** ([`XpcDevLink`](crate::testbed::xplink::xpc::XpcDevLink), in the devices' own module): the byte streams of the `cl` driver over XPC,
//!   as the `testbed::xplink` filesystem consumes them.
//!
//! Waiting without missed wakeups: a node's page holds an "I sleep" flag, raised only while a
//! thread of it is inside [`Node::wait`] (or holds an [`Armed`] guard while polling
//! [`Node::fd`]). A sender publishes, then (after a full fence) reads that flag and rings only
//! if it is raised; the sleeper raises it, fences, then compares a snapshot of every counter its
//! channels read ([`Node::snapshot`]) with the one taken before its last failed `try_*` (kept
//! per thread), and sleeps only if nothing moved. Either the sender sees the flag or the sleeper
//! sees the change. Connection steps and closes ring unconditionally. The doorbell is
//! edge-triggered in the epoll set, so a wakeup costs the ring (`write`) and the `epoll_wait`.
//!
//! Lifetime: a node removes its page and the halves it made when dropped; a killed process
//! leaves them, and the next process of the same partition id replaces its page (a new
//! generation) and removes its stale halves. A peer whose process is gone (its pidfd readable)
//! is still read to the end: what it published arrives, then its channels report it gone. A
//! dropped channel is closed but its half stays until the node goes, so a peer that connects
//! late still reads what was sent before the close.
//!
//! Everything takes the XPC directory as a path, so tests use temporary directories; the
//! partitions' own is [`dir`]. All system calls are in `wirespeed::sys::xpc`.
//!
//! What is Linux, not the Origin: the "firewall" is the page protection of a shared file
//! mapping (the peer maps it `PROT_READ`), so a peer cannot *write* another's memory, but it can
//! read it, and root can do anything; the BTE pull needs ptrace rights over the sender (same
//! user, or root), which is what `process_vm_readv` checks. A peer can also *truncate* a file
//! (its own, or ours: same user), which would kill the process mapping it with SIGBUS on its
//! next access. The files stay plain files (a dead peer's messages must stay readable, and a
//! memfd dies with its process), so instead every mapping is guarded by `wirespeed::sys::xpc`: a
//! fault in a shrunk one reads zeros and marks it, and the channel or page reading it then
//! reports which file shrank and closes ([`Channel`]'s calls return that line, a
//! [`RemotePage`] reads as no page), the same line on every later call, never a signal.

use std::path::PathBuf;

pub mod channel;
pub mod node;

pub use channel::{ChanState, ChanStats, Channel, ChannelOptions, Kind, Received, Refusal, DEFAULT_SPIN_NS};
pub use node::{Armed, Node, NodeOptions, PageView, RemotePage};

/// The XPC protocol version this build speaks (major, minor): peers with another major are
/// refused (seed 000 Table 2), another minor is accepted.
pub const XPC_VERSION: (u32, u32) = (1, 0);

/// Size of a message slot: 128 bytes, the Origin 2000's cache line (the BTE's unit).
pub const SLOT: usize = 128;

/// Bytes of a slot taken by the message header.
pub const SLOT_HEADER: usize = 32;

/// Immediate data one slot carries: a message up to this long travels in its slot, longer ones
/// out of line.
pub const IMMEDIATE_MAX: usize = SLOT - SLOT_HEADER;

/// Default message slots per channel half.
pub const DEFAULT_SLOTS: u32 = 256;

/// Default out-of-line area per channel half: the largest message `send` takes.
pub const DEFAULT_DATA: u32 = 1 << 20;

/// The XPC directory of the partitions with namespace prefix `prefix`:
/// `/run/wirespeed/PREFIX/xpc`, where the partition pages and channel halves live.
pub fn dir(prefix: &str) -> PathBuf {
    crate::run_dir().join(prefix).join("xpc")
}

#[cfg(test)]
pub(crate) mod tests;
