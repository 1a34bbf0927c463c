//! The board a run shows its live counters on, for the exporter to read.
//!
//! The counters already exist as relaxed atomics for the progress lines: the capture threads'
//! [`Live`] (and, with an exporter, each stream's [`StreamLive`](wirespeed::rx::StreamLive)
//! cells), the recorder's ring and writer state ([`Shared`]), the tap's totals ([`TapLive`])
//! and the reflector's ([`ReflectLive`], here: the reflector is the lab's). The data path hands
//! them over through its hooks ([`ShowCapture`], [`ShowRings`], `TapConfig::live`) once, when a
//! run starts, and knows nothing of the board; the exporter reads them when it is scraped.
//! Nothing on the capture or write path waits for, locks or calls into the exporter: the
//! board's lock is taken when a run starts and at scrape time, never by a capture or writer
//! thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use wirespeed::record::ShowRings;
use wirespeed::rx::{Live, ShowCapture};
use wirespeed::spool::writer::Shared;
use wirespeed::tap::TapLive;

/// What a run shows the exporter: set up once when the run starts, read at every scrape.
/// Cloning shares it (the run's configuration holds one clone, the server another).
#[derive(Clone)]
pub struct Board(Arc<Mutex<Parts>>);

/// The board's contents, as an exporter reads them at a scrape.
pub struct Parts {
    /// The wirespeed command serving (`recv`, `record`, `reflect`, `tap`).
    pub command: String,
    /// When the exporter started, Unix seconds.
    pub started_unix_s: f64,
    /// The capture threads' live counters, in thread order.
    pub capture: Option<Arc<[Live]>>,
    /// The recorder's rings and writers (their shared state and capacity), in thread order.
    pub rings: Vec<(Arc<Shared>, u64)>,
    /// The reflector's totals.
    pub reflect: Option<Arc<ReflectLive>>,
    /// The tap's totals.
    pub tap: Option<Arc<TapLive>>,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Board({})", self.parts().command)
    }
}

impl Board {
    /// An empty board for `command` (the name the series' `wirespeed_build_info` carries).
    pub fn new(command: &str) -> Board {
        let started_unix_s = wirespeed::sys::realtime_ns() as f64 / 1e9;
        Board(Arc::new(Mutex::new(Parts {
            command: command.to_string(),
            started_unix_s,
            capture: None,
            rings: Vec::new(),
            reflect: None,
            tap: None,
        })))
    }

    /// The contents; a panic elsewhere while holding the lock leaves them readable.
    pub fn parts(&self) -> MutexGuard<'_, Parts> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Show a capture's live counters (one per capture thread); replaces an earlier capture's.
    pub fn attach_capture(&self, lives: Arc<[Live]>) {
        self.parts().capture = Some(lives);
    }

    /// Show a recorder's rings and writers: `(shared state, ring capacity)` per capture thread.
    pub fn attach_rings(&self, rings: Vec<(Arc<Shared>, u64)>) {
        self.parts().rings = rings;
    }

    /// A fresh set of reflector totals, shown from now on.
    pub fn attach_reflect(&self) -> Arc<ReflectLive> {
        let l = Arc::new(ReflectLive::default());
        self.parts().reflect = Some(l.clone());
        l
    }

    /// A fresh set of tap totals, shown from now on.
    pub fn attach_tap(&self) -> Arc<TapLive> {
        let l = Arc::new(TapLive::default());
        self.parts().tap = Some(l.clone());
        l
    }
}

impl ShowCapture for Board {
    fn capture(&self, lives: Arc<[Live]>) {
        self.attach_capture(lives);
    }
}

impl ShowRings for Board {
    fn rings(&self, rings: Vec<(Arc<Shared>, u64)>) {
        self.attach_rings(rings);
    }
}

/// The reflector's running totals, published once per receive batch.
#[derive(Debug, Default)]
pub struct ReflectLive {
    /// Datagrams received.
    pub received: AtomicU64,
    /// Datagrams sent back.
    pub reflected: AtomicU64,
    /// Bytes sent back.
    pub bytes: AtomicU64,
    /// Replies that could not be sent.
    pub send_errors: AtomicU64,
    /// Refused datagrams per reason, in [`REFUSED_REASONS`] order.
    pub refused: [AtomicU64; 6],
}

/// The `reason` label values of refused datagrams, in [`ReflectLive::refused`] order.
pub const REFUSED_REASONS: [&str; 6] = ["own_port", "low_port", "not_allowed", "reply", "not_probe", "rate_capped"];

impl ReflectLive {
    /// Publish the reflector's counts so far; `refused` per reason, in [`REFUSED_REASONS`] order.
    #[inline]
    pub fn publish(&self, received: u64, reflected: u64, bytes: u64, send_errors: u64, refused: [u64; 6]) {
        self.received.store(received, Ordering::Relaxed);
        self.reflected.store(reflected, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        self.send_errors.store(send_errors, Ordering::Relaxed);
        for (cell, n) in self.refused.iter().zip(refused) {
            cell.store(n, Ordering::Relaxed);
        }
    }
}
