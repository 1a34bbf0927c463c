//! The live counters a metrics exporter reads, and the board a run shows them on.
//!
//! The counters already exist as relaxed atomics for the progress lines: the capture threads'
//! [`Live`] (and, with an exporter, each stream's [`StreamLive`](crate::rx::StreamLive)
//! cells), the recorder's ring and writer state ([`Shared`]), and the reflector's and the tap's
//! totals ([`live`]). A run hands them to a [`Board`] once, when it starts; an exporter (the
//! lab crate's, on a small thread of its own) reads them when it is scraped. Nothing on the
//! capture or write path waits for, locks or calls into the exporter: the board's lock is taken
//! when a run starts and at scrape time, never by a capture or writer thread. The exporter
//! itself (HTTP, the Prometheus text format) is not here: a capture host's data path needs the
//! counters, not the web server.

pub mod live;

pub use crate::spool::stats::{WriteSnapshot, WriteStats};
pub use live::{ReflectLive, TapLive};

use crate::rx::Live;
use crate::spool::writer::Shared;
use std::sync::{Arc, Mutex, MutexGuard};

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
        let started_unix_s = crate::sys::realtime_ns() as f64 / 1e9;
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
