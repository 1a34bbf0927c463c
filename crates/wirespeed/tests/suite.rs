//! The library's integration tests, one module per file: one test binary, so the library is
//! linked into a test program once (ring_full is a binary of its own; see Cargo.toml).

mod ethtool;
mod fuzz_parsers;
mod fuzz_recordings;
mod ledger_props;
