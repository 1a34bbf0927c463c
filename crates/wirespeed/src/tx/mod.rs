//! The paced sender.
//!
//! One thread and one socket per stream (so each stream has its own source port and its order
//! is never broken by another thread), sendmmsg batches, and optionally UDP GSO so that one
//! system call carries dozens of datagrams: on a veth or loopback path that is the only way a
//! sender on one core can offer a receiver more than it can take. Every stream ends with an
//! end-of-stream message so the receiver can count tail loss.
//!
//! The rooms: [`config`] (what a run is asked to do, checked before any socket opens),
//! [`plan`] (burst and batch sizes from the rate), [`stream`] (sockets, the per-stream send loop and the run), [`pgm`] (the PGM session's side of a stream), [`report`] (what a run
//! reports). Every item is re-exported here, so `tx::X` names it whichever room it lives in.

pub mod config;
pub mod pgm;
pub mod plan;
pub mod raw;
pub mod report;
pub mod stream;

pub use config::{validate, SendConfig};
pub use report::{GapStats, SendReport, StreamSent};
pub use stream::run;
