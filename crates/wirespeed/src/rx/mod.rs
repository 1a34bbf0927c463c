//! The receiver: a dedicated capture thread, batched receive, the ledger inline, and the
//! kernel's counters beside it.
//!
//! The rooms, in the order a datagram meets them:
//! - [`config`]: what a run is asked to do ([`RecvConfig`], which names the backend) and the
//!   limits every front end is held to.
//! - [`backend`]: the receive paths ([`Backend`]), one file each, and the factory that opens
//!   the one a configuration names. A new backend (AF_PACKET, io_uring, AF_XDP) is a new file
//!   there and one line in its list, not a new branch in the loop.
//! - [`capture`](mod@capture): the [`Listener`] and the capture thread: the loop, the
//!   per-stream ledgers, the end-of-stream judgement, the moderation between batches.
//! - [`sink`]: where kept datagrams and live counters go besides the ledger.
//! - [`report`]: what a run reports, the diagnosis (which layer lost what) and the tables.
//!
//! Every item is re-exported here, so `rx::X` names it whichever room it lives in.

pub mod backend;
pub mod batches;
pub mod capture;
pub mod config;
pub mod learn;
pub mod moderation;
pub mod relearn;
pub mod report;
pub mod run;
pub mod sink;

pub use backend::udp::rcvbuf_clamp_note;
pub use backend::{Backend, BackendKind, MmsgBackend};
pub use capture::{nap_cap_ns, ONCE_QUIET_NS};
pub use config::{
    check_ledger_budget, RecvConfig, DEFAULT_COALESCE, DEFAULT_RCVBUF, LEDGER_BUDGET, MAX_BATCH, MAX_THREADS,
    MAX_TRACKED_STREAMS, MAX_WINDOW, RECORD_DEFAULT_RCVBUF,
};
pub use learn::{learn, learn_with, LearnedLayout};
pub use report::{
    diagnose, ledger_table, InvalidReasons, KernelView, RecvReport, StrayEnd, StreamReport, ThreadReport,
};
pub use run::{capture, capture_group, capture_with, steering_for, Listener};
pub use sink::{Live, NullSink, Progress, Reject, ShowCapture, Sink, StreamLive, INTERVAL_SCHEMA};
