//! Every raw libc call in wirespeed, and every `unsafe` block but the SIMD counter kernel's
//! (`wire::simd`), lives here, behind safe functions.
//!
//! Keeping them in one room makes the audit surface small: each block carries a `// SAFETY:`
//! comment saying why the pointers and lengths it hands the kernel are valid, and the crate
//! root denies `unsafe_code` everywhere but here and `wire::simd`. The room is split by what
//! the calls are about — [`socket`] (with its one control-message encoder and iterator),
//! [`time`], [`signal`], [`cpu`], [`file`](mod@file), the capture-to-disk [`ring`] and child
//! [`proc`]esses — and everything is re-exported here,
//! so callers write `sys::monotonic_ns` without knowing the file. A new system call goes into
//! the file of its subject, plus one name in the `pub use` list below.

use std::io;

pub mod bpf;
pub mod cpu;
pub mod ethtool;
pub mod fifo;
pub mod file;
pub mod fuse;
pub mod mount;
pub mod netns;
pub mod packet;
pub mod packet_tx;
pub mod proc;
pub mod ring;
pub mod sched;
pub mod signal;
pub mod socket;
pub mod time;
pub mod uring;
pub mod xdp;
pub mod xpc;

pub use cpu::{current_cpu, lock_memory, pin_current_thread, set_process_affinity};
pub use file::{clear_direct, create_direct, free_space, preallocate};
pub use proc::die_with_parent;
pub use ring::{
    byte_ring, byte_ring_with, prefault, Lease, PageKind, Pinned, Prefault, RingConsumer, RingMemory, RingProducer,
    RING_ALIGN,
};
pub use signal::{
    install_cpu_limit_handler, install_stop_handler, last_signal, send_signal, stop_flag, SIGTERM, SIGXCPU,
};
pub use socket::{
    bind_udp, enable_gro, enable_rxq_ovfl, gso_supported, has_net_admin, join_multicast_v4_index, poll_readable,
    rcvbuf, send_one, set_multicast_hops_v6, set_multicast_if_v4_addr, set_multicast_if_v4_index, set_multicast_if_v6,
    set_multicast_loop_v6, set_rcvbuf, set_rcvtimeo, set_sndbuf, socket_inode, EchoBatch, RecvBatch, RecvMeta,
    SendBatch,
};
pub use time::{
    monotonic_ns, process_cpu_ns, realtime_ns, set_timer_slack_ns, sleep_until_monotonic_ns, thread_cpu_ns,
};

/// Turn a libc return value into `io::Result`: negative means the call failed and `errno`
/// says why.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
