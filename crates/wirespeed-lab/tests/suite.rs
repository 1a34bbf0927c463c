//! The lab's integration tests, one module per file: one test binary, so the lab is linked
//! into a test program once (latency_log is a binary of its own; see Cargo.toml).

mod doctor_apply;
mod plot_render;
mod xplink;
