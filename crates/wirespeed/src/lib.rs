//! wirespeed: record high-rate UDP streams with zero loss, and prove it.
//!
//! The data path under the `wirespeed` command and the Python package: what a capture host
//! runs. The data flow is the spine of the crate:
//! a paced sender ([`tx`]) emits datagrams built by a payload [`wire`] format; the receiver
//! ([`rx`]) takes them in batches on a dedicated capture thread and feeds each stream's exact
//! loss [`ledger`]; the kernel's own counters ([`kernel`]) are read beside it so a user can tell
//! which layer dropped what. `unsafe` is a compiler error everywhere but two rooms: [`sys`],
//! where every raw system call lives, and `wire::simd`, the AVX2 counter kernels.
//!
//! The experiments around it (benches, partitions, the latency heat maps, doctor, plots, the
//! metrics exporter) are the `wirespeed-lab` crate, built on this one; nothing here knows of
//! them, and the compiler keeps it so: this crate cannot name the lab.

#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod addr;
pub mod calendar;
pub mod control;
pub mod error;
pub mod kernel;
pub mod ledger;
pub mod pace;
pub mod pgm;
pub mod priority;
pub mod record;
pub mod rx;
pub mod spool;
pub mod station;
#[allow(unsafe_code)]
pub mod sys;
pub mod tap;
pub mod tx;
pub mod units;
pub mod wire;

pub use error::{Error, Kind, Result};
