//! wirespeed's lab: the experiments around the data path.
//!
//! The benches that search, sweep and compare ([`bench`]), the partitions that stand in for
//! real hosts ([`testbed`], over the cross-partition channels of [`xpc`]), round-trip latency
//! and its heat maps ([`latency`], [`plot`]), the host's diagnosis ([`doctor`]), `ttcp`, the
//! `demo`, and the Prometheus [`exporter`]. All of it stands on the `wirespeed` crate (the data
//! path: formats, ledger, send, receive, record), which knows nothing of it.
//!
//! No `unsafe` here at all: every raw system call the lab needs is in `wirespeed::sys`.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod bench;
pub mod demo;
pub mod doctor;
pub mod exporter;
pub mod latency;
pub mod plot;
pub mod testbed;
pub mod ttcp;
pub mod xpc;

/// Where the lab's run-time state lives: the partitions' state, heartbeats, daemon logs and pid
/// files, and the XPC pages and channels (a tmpfs: gone after a reboot, like the namespaces
/// themselves). `WIRESPEED_RUN_DIR` overrides it. Here, not in `testbed`, because XPC needs it
/// too and must not depend on the partitions that use it.
pub fn run_dir() -> std::path::PathBuf {
    std::env::var_os("WIRESPEED_RUN_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/run/wirespeed"))
}
