//! The library's integration tests, one module per file: one test binary, so the library is
//! linked into a test program once (ring_full and latency_log are binaries of their own; see
//! Cargo.toml).

mod doctor_apply;
mod ethtool;
mod fuzz_parsers;
mod fuzz_recordings;
mod ledger_props;
mod plot_render;
mod xplink;
