//! Following a learned stream through a change of layout mid-run: an instrument switched to
//! another frame length, channel count, station or heap size is a resync, not a run of invalid
//! data.
//!
//! Only a run whose layout was learned ([`super::learn`]) follows changes: keys a user gave say
//! what the stream must be, and a stream that differs from them is said not to match. The
//! capture hands this module only the datagrams its layout refuses, and only those that show
//! the learned family's marks ([`looks_like`]): nothing is added to the path of an accepted
//! datagram, and noise is refused as before. Those datagrams are held (copied, within
//! [`RELEARN_HOLD`] bytes and [`LEARN_WAIT`]) and studied by the learner that learned the
//! first layout. Once it gives a layout, the capture counts by it from the first datagram held,
//! in new ledgers: the old streams end where their data ended, the new ones begin where theirs
//! began, and nothing is counted twice.
//!
//! A change is believed only when the old layout's datagrams stopped (at most [`STRAGGLERS`]
//! of them arrived among the new ones), or when the new layout accepts them too (a VDIF stream
//! that gained threads). A second source of another layout beside the first is therefore
//! refused, and named, as before, never taken for a change that flips back and forth. What was
//! held for a change that is not believed is counted refused, as it would have been.
//!
//! A recorder only notes a change (`follow` false): its files are described by the layout they
//! began with, so the datagrams after a change are counted refused there, and the report says
//! what they were. It keeps them all the same (every refused datagram that looks like the
//! family: an instrument's frames are never dropped for not being numbered), as far as its
//! file format can hold them.
//!
//! The study allocates (the learner's per-source state), on the refused path only, when a
//! datagram that looks like the family is refused: a change of layout or a corrupt header.

use super::learn::LEARN_WAIT;
use crate::wire::learn::{looks_like, spec_key, Learner};
use crate::wire::{spec, Format};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;

/// Most bytes held while a change of layout is studied (allocated as they are held, and given
/// back once they are counted).
pub const RELEARN_HOLD: usize = 256 << 20;

/// Datagrams of the old layout that may arrive among the new one's (reordered around the
/// change) before the change is disbelieved.
pub const STRAGGLERS: u64 = 16;

/// How often (in datagrams studied) the learner is asked whether it knows the layout yet.
const STUDY_EVERY: u64 = 64;

/// Most changes of layout a run follows (or a recorder notes): a stream that changes more often
/// than that, or forged headers that would make it seem to, is refused from then on, and the
/// report says so.
pub const MAX_CHANGES: usize = 16;

/// An arena grown larger than this while a change was studied is given back afterwards.
const ARENA_KEPT: usize = 1 << 20;

/// A change of layout a run saw, for the report and its JSON.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LayoutChange {
    /// The layout's number: the streams it counts say it (`layout` in each stream's report).
    pub layout: usize,
    /// Seconds from the run's first datagram to the first datagram of the new layout.
    pub at_s: f64,
    /// Datagrams the run received before it.
    pub after_datagrams: u64,
    /// The source whose headers showed the new layout.
    pub source: String,
    /// The layout before.
    pub from: String,
    /// The layout after, as a `--format` spec.
    pub spec: String,
    /// What the new layout's headers showed.
    pub facts: Vec<String>,
    /// What was taken without being seen, and why.
    pub assumed: Vec<String>,
    /// Datagrams studied before the layout was known.
    pub datagrams: u64,
    /// Seconds from the first of them to the layout.
    pub seconds: f64,
    /// Whether the run counted by the new layout from the change (`recv`); a recording keeps
    /// the layout its files began with, and refuses what follows a change.
    pub followed: bool,
}

impl LayoutChange {
    /// The lines a human report shows.
    pub fn lines(&self) -> Vec<String> {
        let mut v = vec![if self.followed {
            format!(
                "layout changed {:.3} s in (after {} datagrams), from {}: layout {} is --format {} (learned from {} datagram(s) in {:.2} s, counted too), counted in its own ledgers",
                self.at_s,
                crate::units::thousands(self.after_datagrams),
                self.source,
                self.layout,
                self.spec,
                self.datagrams,
                self.seconds
            )
        } else {
            format!(
                "layout changed {:.3} s in (after {} datagrams), from {}: it is now --format {}. A recording keeps the layout it began with ({}): what followed is counted refused, yet kept where the file format allows (pcap keeps every datagram, raw only those of the first layout's length), and `wirespeed verify --format {}` counts it",
                self.at_s,
                crate::units::thousands(self.after_datagrams),
                self.source,
                self.spec,
                self.from,
                self.spec
            )
        }];
        v.extend(self.assumed.iter().map(|a| format!("assumed, not seen: {a}")));
        v
    }
}

/// A held datagram: where from, when, and where its bytes lie in the arena.
struct HeldAt {
    src: Option<SocketAddr>,
    at_ns: u64,
    off: usize,
    len: usize,
}

/// What the capture does with a refused datagram it offered.
pub(super) enum Step {
    /// Held for the study: count nothing now.
    Held,
    /// Count it refused, as any refused datagram.
    Refused,
    /// Count it refused, but keep it (a recorder keeps its instrument's frames it cannot
    /// number: a change of layout, a corrupt header).
    RefusedKept,
    /// A new layout: switch to it, count the held datagrams by it, then this one (`held`: it is
    /// among them already).
    Switch { fmt: Arc<dyn Format>, held: bool },
    /// Not a change: count the held datagrams refused, then this one (`held`: it is among them
    /// already; else offer it again).
    Drop { held: bool },
}

/// The study of refused datagrams for a change of layout (one per capture that learned its
/// layout; see the module's notes).
pub(super) struct Relearn {
    family: &'static str,
    follow: bool,
    /// The layout in force, as a spec.
    spec: String,
    /// The frame rate of the layout in force: taken for a new layout whose own rate the study
    /// did not see in time (said to be assumed).
    assume_fps: Option<u32>,
    learner: Option<Learner>,
    arena: Vec<u8>,
    held: Vec<HeldAt>,
    /// Datagrams studied in this study.
    studied: u64,
    /// Refused datagrams of no layout of the family (noise) during this study: neither studied
    /// nor the old layout's.
    ignored: u64,
    /// The run's datagrams before the first studied one.
    began: u64,
    began_ns: u64,
    /// A recorder that noted a change studies no further.
    noted: bool,
    /// Changes seen, in order.
    pub(super) changes: Vec<LayoutChange>,
}

impl Relearn {
    /// A study for a run that learned `spec` of `family`; `follow`: count by a new layout
    /// (recv), else only say it changed (record).
    pub(super) fn new(family: &'static str, spec: String, follow: bool) -> Self {
        let assume_fps = spec_key(&spec, "fps").and_then(|v| v.parse().ok());
        Relearn {
            family,
            follow,
            spec,
            assume_fps,
            learner: None,
            arena: Vec::new(),
            held: Vec::new(),
            studied: 0,
            ignored: 0,
            began: 0,
            began_ns: 0,
            noted: false,
            changes: Vec::new(),
        }
    }

    /// A refused datagram from `src` at `now`; `seen`: the run's datagrams before it that may
    /// be the old layout's (unsequenced and untracked ones left out), and `run_first_ns` when
    /// the first arrived.
    pub(super) fn offer(
        &mut self,
        data: &[u8],
        src: Option<SocketAddr>,
        now: u64,
        seen: u64,
        run_first_ns: u64,
    ) -> Step {
        if !looks_like(self.family, data) {
            self.ignored += u64::from(self.learner.is_some());
            return Step::Refused;
        }
        if self.noted {
            return Step::RefusedKept;
        }
        if self.changes.len() >= MAX_CHANGES {
            return if self.follow { Step::Refused } else { Step::RefusedKept };
        }
        let valid = self.valid_since(seen);
        if self.learner.is_some() && valid > STRAGGLERS {
            // The old layout kept arriving: a change only if the new layout takes it too (its
            // rate then is the old one's).
            return match self.conclude(true, valid, now, run_first_ns) {
                Some(fmt) if self.follow => Step::Switch { fmt, held: false },
                Some(_) => self.note(),
                None => self.drop_study(false),
            };
        }
        let learner = self.learner.get_or_insert_with(|| {
            let mut l = Learner::new();
            l.rate_seconds = 2;
            l
        });
        if self.studied == 0 {
            self.began = seen;
            self.began_ns = now;
            self.ignored = 0;
        }
        learner.feed(src.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0))), data);
        self.studied += 1;
        let full = self.follow && self.arena.len() + data.len() > RELEARN_HOLD;
        if self.follow && !full {
            self.held.push(HeldAt { src, at_ns: now, off: self.arena.len(), len: data.len() });
            self.arena.extend_from_slice(data);
        }
        let late = now.saturating_sub(self.began_ns) >= LEARN_WAIT.as_nanos() as u64;
        if !(full || late || self.studied % STUDY_EVERY == 0) {
            return if self.follow { Step::Held } else { Step::RefusedKept };
        }
        match self.conclude(full || late, valid, now, run_first_ns) {
            Some(fmt) if self.follow => Step::Switch { fmt, held: !full },
            Some(_) => self.note(),
            // Counted refused, this one too when it is held (unless the hold was full).
            None if full || late => self.drop_study(!full),
            None if self.follow => Step::Held,
            None => Step::RefusedKept,
        }
    }

    /// Datagrams the old layout accepted since the study began (`seen` as [`Relearn::offer`]
    /// takes it).
    fn valid_since(&self, seen: u64) -> u64 {
        seen.saturating_sub(self.began + self.studied + self.ignored)
    }

    /// Whether the run stopped following changes (too many).
    pub(super) fn exhausted(&self) -> bool {
        self.changes.len() >= MAX_CHANGES
    }

    /// A recorder noted a change: it studies no further.
    fn note(&mut self) -> Step {
        self.noted = true;
        self.clear();
        Step::RefusedKept
    }

    /// The study ends without a change (its held datagrams are counted refused by the caller;
    /// `held`: the datagram offered last among them).
    fn drop_study(&mut self, held: bool) -> Step {
        self.learner = None;
        if self.follow {
            Step::Drop { held }
        } else {
            self.clear();
            Step::RefusedKept
        }
    }

    /// The layout the study shows, when it is a change: another spec of the family from the
    /// source studied most (`force`: the rate taken from the layout in force when not seen).
    /// With `valid` datagrams of the old layout among those studied, believed when they are
    /// stragglers (and the study long enough to tell), or when the new layout accepts them.
    fn conclude(&mut self, force: bool, valid: u64, now: u64, run_first_ns: u64) -> Option<Arc<dyn Format>> {
        let learner = self.learner.as_mut()?;
        if force {
            learner.assume_fps = self.assume_fps;
        }
        let learned = learner.learned();
        let l = learned.iter().filter(|l| l.format == self.family).max_by_key(|l| l.datagrams)?;
        let new = l.spec.as_deref()?;
        let stopped = valid <= STRAGGLERS && self.studied >= 2 * STRAGGLERS;
        if new == self.spec || !(stopped || widens(&self.spec, new)) {
            return None;
        }
        let fmt = spec::parse(new).ok()?;
        let assumed = if force && l.facts.iter().any(|f| f.contains("assumed, not seen")) {
            vec![format!(
                "fps={} (the rate before the change): the new layout's frames did not cross two second boundaries within {} s, or the run's end",
                self.assume_fps.unwrap_or(0),
                LEARN_WAIT.as_secs()
            )]
        } else {
            Vec::new()
        };
        let first_at = self.held.first().map_or(self.began_ns, |h| h.at_ns);
        self.changes.push(LayoutChange {
            layout: self.changes.len() + 1,
            at_s: first_at.saturating_sub(run_first_ns) as f64 / 1e9,
            after_datagrams: self.began,
            source: l.source.clone(),
            from: std::mem::replace(&mut self.spec, fmt.spec()),
            spec: fmt.spec(),
            facts: l.facts.clone(),
            assumed,
            datagrams: self.studied,
            seconds: now.saturating_sub(self.began_ns) as f64 / 1e9,
            followed: self.follow,
        });
        self.assume_fps = spec_key(&self.spec, "fps").and_then(|v| v.parse().ok()).or(self.assume_fps);
        self.learner = None;
        Some(fmt)
    }

    /// The held datagrams, in arrival order: (bytes, source, arrival).
    pub(super) fn held(&self) -> impl Iterator<Item = (&[u8], Option<SocketAddr>, u64)> {
        self.held.iter().map(|h| (&self.arena[h.off..h.off + h.len], h.src, h.at_ns))
    }

    /// Forget the held datagrams (counted) and the study.
    pub(super) fn clear(&mut self) {
        self.held.clear();
        self.arena.clear();
        if self.arena.capacity() > ARENA_KEPT {
            self.arena = Vec::new();
        }
        self.studied = 0;
        self.learner = None;
    }

    /// The run ends: the study concludes with what it saw (a change, or the held datagrams
    /// counted refused).
    pub(super) fn settle(&mut self, now: u64, seen: u64, run_first_ns: u64) -> Option<Arc<dyn Format>> {
        self.learner.as_ref()?;
        let valid = self.valid_since(seen);
        let r = self.conclude(true, valid, now, run_first_ns);
        self.learner = None;
        r.filter(|_| self.follow)
    }
}

/// Whether layout `new` accepts every datagram `old` does: the same keys, but more VDIF
/// threads.
fn widens(old: &str, new: &str) -> bool {
    let keys = |s: &str| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = s
            .split(',')
            .skip(1)
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        v.sort();
        v
    };
    let (a, b) = (keys(old), keys(new));
    old.split(',').next() == new.split(',').next()
        && a.len() == b.len()
        && a.iter().zip(&b).all(|((ka, va), (kb, vb))| {
            ka == kb
                && (va == vb
                    || (ka == "threads"
                        && va.parse::<u32>().ok().zip(vb.parse::<u32>().ok()).is_some_and(|(x, y)| y > x)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_more_threads_widen_a_layout() {
        assert!(widens("vdif,frame=8032,threads=2,fps=100", "vdif,frame=8032,threads=4,fps=100"));
        assert!(!widens("vdif,frame=8032,threads=4,fps=100", "vdif,frame=8032,threads=2,fps=100"));
        assert!(!widens("vdif,frame=8032,threads=2,fps=100", "vdif,frame=1032,threads=4,fps=100"));
        assert!(!widens("vdif,frame=8032,threads=2", "vtp,frame=8032,threads=4"));
    }
}
