//! Heartbeats between partitions, after the Origin 2000's `mkpd` and partition subsystem.
//!
//! Each partition's daemon publishes a counter and its partition-support version in its XPC
//! page (`xpc::Node`), which the other daemons map read-only and read, as the Origin's
//! partition module reads a remote's heartbeat; it also writes them to a small file (`hb-P`,
//! replaced atomically by rename) for people and `status`. Every check interval it reads the
//! others' pages: a peer whose counter has not advanced for K checks is
//! deactivated in this daemon's view, with the seed's Table 2 console wording
//! (`WARNING: Partition 2 not responding: Timeout(HB)`), and re-activated when it beats again.
//! Versions with the same major number talk; a different major is never recognized.

use std::path::Path;

/// This build's partition-support version (major.minor).
pub const VERSION: (u32, u32) = (1, 0);

/// What a heartbeat file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    /// Partition-support version of the writer.
    pub version: (u32, u32),
    /// Monotonic heartbeat counter.
    pub counter: u64,
}

impl Beat {
    /// The file's text form: `wirespeed-hb 1.0 COUNTER`.
    pub fn encode(&self) -> String {
        format!("wirespeed-hb {}.{} {}\n", self.version.0, self.version.1, self.counter)
    }

    /// Read the text form; `None` if it is not a heartbeat.
    pub fn decode(s: &str) -> Option<Beat> {
        let mut w = s.split_whitespace();
        if w.next()? != "wirespeed-hb" {
            return None;
        }
        let version = parse_version(w.next()?)?;
        let counter = w.next()?.parse().ok()?;
        Some(Beat { version, counter })
    }
}

/// Parse `A.B`.
pub fn parse_version(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Whether the local version can talk to a remote one: the same major number.
pub fn compatible(local: (u32, u32), remote: (u32, u32)) -> bool {
    local.0 == remote.0
}

/// Write a heartbeat file atomically (temporary file, then rename).
pub fn publish(path: &Path, beat: Beat) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, beat.encode())?;
    std::fs::rename(&tmp, path)
}

/// Read a heartbeat file; `None` when it is missing or unreadable.
pub fn read(path: &Path) -> Option<Beat> {
    std::fs::read_to_string(path).ok().and_then(|s| Beat::decode(&s))
}

/// A peer's state as one daemon sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerState {
    /// Not heard from yet.
    Unknown,
    /// Heartbeating.
    Active,
    /// Missed K checks (or never beat); deactivated in this view.
    Inactive,
    /// Beats with a version this daemon does not support; never recognized.
    Incompatible,
}

impl PeerState {
    /// Lower-case name for lists.
    pub fn name(&self) -> &'static str {
        match self {
            PeerState::Unknown => "unknown",
            PeerState::Active => "active",
            PeerState::Inactive => "inactive",
            PeerState::Incompatible => "incompatible",
        }
    }
}

/// Tracks one peer's counter across checks and decides when its state changes.
#[derive(Debug, Clone)]
pub struct PeerWatch {
    /// The peer's partition id.
    pub id: u32,
    /// Current state in this view.
    pub state: PeerState,
    last: Option<u64>,
    misses: u32,
    told_version: Option<(u32, u32)>,
}

impl PeerWatch {
    /// A peer not heard from yet.
    pub fn new(id: u32) -> PeerWatch {
        PeerWatch { id, state: PeerState::Unknown, last: None, misses: 0, told_version: None }
    }

    /// Feed one check's reading (`None`: the file could not be read); `k` is the number of
    /// checks without progress after which the peer is declared not responding. Returns the
    /// console line to print when the state changes.
    pub fn observe(&mut self, beat: Option<Beat>, k: u32, local: (u32, u32)) -> Option<String> {
        if let Some(b) = beat {
            if !compatible(local, b.version) {
                self.last = Some(b.counter);
                if self.told_version != Some(b.version) {
                    self.told_version = Some(b.version);
                    self.state = PeerState::Incompatible;
                    return Some(format!(
                        "NOTICE: partition: Local Partition version {}.{} does not support remote version {}.{}",
                        local.0, local.1, b.version.0, b.version.1
                    ));
                }
                return None;
            }
            self.told_version = None;
        }
        let advanced = match (beat, self.last) {
            (Some(b), Some(l)) => b.counter != l,
            (Some(_), None) => self.state == PeerState::Unknown || self.state == PeerState::Incompatible,
            (None, _) => false,
        };
        let cause = if beat.is_some() { "Timeout(HB)" } else { "Access(HB)" };
        if let Some(b) = beat {
            self.last = Some(b.counter);
        }
        if advanced {
            self.misses = 0;
            if self.state != PeerState::Active {
                let was = self.state;
                self.state = PeerState::Active;
                return Some(match was {
                    PeerState::Inactive => format!("NOTICE: Partition {} responding again: activated", self.id),
                    _ => format!("NOTICE: Partition {} is up: activated", self.id),
                });
            }
            return None;
        }
        self.misses = self.misses.saturating_add(1);
        if self.misses >= k && matches!(self.state, PeerState::Active | PeerState::Unknown) {
            self.state = PeerState::Inactive;
            return Some(format!("WARNING: Partition {} not responding: {cause}", self.id));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(c: u64) -> Option<Beat> {
        Some(Beat { version: VERSION, counter: c })
    }

    #[test]
    fn beat_round_trips() {
        let x = Beat { version: (2, 3), counter: 99 };
        assert_eq!(Beat::decode(&x.encode()), Some(x));
        assert_eq!(Beat::decode("garbage"), None);
        assert_eq!(Beat::decode("wirespeed-hb 1 5"), None);
    }

    #[test]
    fn stalled_counter_times_out_after_k_checks_and_returns() {
        let mut w = PeerWatch::new(2);
        assert_eq!(w.observe(b(1), 3, VERSION).as_deref(), Some("NOTICE: Partition 2 is up: activated"));
        assert_eq!(w.observe(b(2), 3, VERSION), None);
        assert_eq!(w.observe(b(2), 3, VERSION), None);
        assert_eq!(w.observe(b(2), 3, VERSION), None);
        assert_eq!(w.observe(b(2), 3, VERSION).as_deref(), Some("WARNING: Partition 2 not responding: Timeout(HB)"));
        assert_eq!(w.state, PeerState::Inactive);
        assert_eq!(w.observe(b(2), 3, VERSION), None, "said once");
        assert_eq!(w.observe(b(3), 3, VERSION).as_deref(), Some("NOTICE: Partition 2 responding again: activated"));
        assert_eq!(w.state, PeerState::Active);
    }

    #[test]
    fn missing_file_is_an_access_failure() {
        let mut w = PeerWatch::new(3);
        w.observe(b(1), 2, VERSION);
        assert_eq!(w.observe(None, 2, VERSION), None);
        assert_eq!(w.observe(None, 2, VERSION).as_deref(), Some("WARNING: Partition 3 not responding: Access(HB)"));
    }

    #[test]
    fn never_started_peer_is_declared_after_k_checks() {
        let mut w = PeerWatch::new(4);
        assert_eq!(w.observe(None, 2, VERSION), None);
        assert!(w.observe(None, 2, VERSION).unwrap().contains("not responding"));
    }

    #[test]
    fn same_major_talks_different_major_never() {
        assert!(compatible((1, 0), (1, 7)));
        assert!(!compatible((1, 0), (2, 0)));
        let mut w = PeerWatch::new(2);
        let v2 = Some(Beat { version: (2, 0), counter: 1 });
        assert_eq!(
            w.observe(v2, 3, (1, 0)).as_deref(),
            Some("NOTICE: partition: Local Partition version 1.0 does not support remote version 2.0")
        );
        assert_eq!(w.state, PeerState::Incompatible);
        assert_eq!(w.observe(Some(Beat { version: (2, 0), counter: 2 }), 3, (1, 0)), None);
        assert_eq!(w.state, PeerState::Incompatible);
        let v11 = Some(Beat { version: (1, 1), counter: 3 });
        assert!(w.observe(v11, 3, (1, 0)).unwrap().contains("activated"));
    }
}
