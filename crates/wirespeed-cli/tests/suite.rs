//! wirespeed's integration tests, one module per file: one test binary, so the library is
//! compiled into a test program once. Tests that send traffic take `common::traffic()`, so no
//! two of them measure each other; the tests that nothing may run beside are binaries of their
//! own (see Cargo.toml).

mod common;

mod bad_input;
mod bench;
mod bench_capture_engine;
mod bench_misc;
mod bench_peers;
mod bench_pgm;
mod bench_writer;
mod book;
mod compare;
mod doctor;
mod e2e;
mod extract;
mod formats;
mod hosts;
mod install;
mod interop;
mod ipv6;
mod latency;
mod metrics;
mod netns;
mod pacing_cpu;
mod packet_backend;
mod partition;
mod pgm;
mod pgm_interop;
mod raw_send;
mod record;
mod record_inplace;
mod record_writer;
mod recordings;
mod soak;
mod soak_record;
mod station;
mod sweep;
mod tap;
mod threads;
mod trust_evidence;
mod trust_farend;
mod trust_inputs;
mod trust_owner;
mod trust_proof;
mod trust_verify;
mod ttcp;
mod ttcp_raw;
mod xdp_backend;
mod xpc;
mod xplink_partitions;
