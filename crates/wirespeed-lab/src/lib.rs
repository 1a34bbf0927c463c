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
