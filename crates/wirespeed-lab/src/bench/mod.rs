//! Benchmark runs like the seeds' reports (issue #7): one probe of a send/receive pair
//! ([`point`]), the search for the highest zero-loss rate ([`search`], pure, and [`max`] around
//! real probes), and seed 002's table of rates ([`rates`]).
//!
//! Every figure comes from a real sender and a real receiver (child processes of this binary,
//! on loopback or in two partitions), never from a model; the search logic is kept apart from
//! the traffic so it can be proven against fake links whose capacity is known.

pub mod capture;
pub mod compare;
pub mod doctor;
pub mod doctor_host;
pub mod formats;
pub mod isolation;
pub mod latency;
pub mod max;
pub mod pacing;
pub mod peer;
pub mod pgm;
pub mod point;
pub mod priority;
pub mod progress;
pub mod rates;
pub mod recv_cpu;
pub mod report;
pub mod ring;
pub mod search;
pub mod soak;
pub mod stats;
pub mod sweep;
pub mod taps;
pub mod ttcp;
pub mod writer;
pub mod xpc;

/// The first fields of the document of every bench that runs a sender and a receiver: the
/// contract it follows and where its two ends ran. Flattened into each document, so the JSON
/// keeps `schema` first and `placement` second, as before.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DocHead {
    /// The document's schema id (`wirespeed.bench.NAME/N`).
    pub schema: &'static str,
    /// Where the run's two ends were: loopback or a pair of partitions, with their CPUs.
    pub placement: crate::testbed::place::Placement,
}
