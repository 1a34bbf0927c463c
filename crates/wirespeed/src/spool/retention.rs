//! Retention for recorders that run for months: `record --keep-free 10%|SIZE` deletes the
//! oldest finished recordings while the disk's free space is below the mark, `--keep-for D`
//! those finished longer than `D` ago, so that a recorder installed as a service never fills
//! its disk and never stops.
//!
//! Only what `record` made is deleted: finished files in the output directory named
//! `PREFIX-YYYYMMDDTHHMMSSZ-NNNN.EXT` (this run's prefix, or a thread's `PREFIX-tN`) with a
//! wirespeed sidecar beside them, data file and sidecar together. Never a `.part` (the file
//! being written), never another tool's file, never a file a reader holds: `extract`, `verify`
//! and Python's `open` take a shared lock on the files they read
//! ([`crate::sys::file::lock_shared`]), and a file is deleted only under an exclusive lock
//! taken without waiting, so a file being read is passed over (and said so once) and the next
//! oldest goes instead. Every deletion is one line for the journal and a count for the metrics.
//!
//! Runs on a thread of its own, never on the capture or writer threads.

use super::{looks_recorded, sidecar_name, Sidecar, PART_SUFFIX, SIDECAR_SCHEMAS_READ};
use crate::sys;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How much free space to keep.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeepFree {
    /// This share of the filesystem, in percent (0 < p < 100).
    Percent(f64),
    /// This many bytes.
    Bytes(u64),
}

impl KeepFree {
    /// Parse `10%` or a size (`50G`, `1T`).
    pub fn parse(s: &str) -> Result<KeepFree, String> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| format!("'{s}' is not a percentage: write e.g. 10%"))?;
            if !(v > 0.0 && v < 100.0) {
                return Err(format!("{s}: keep between 0% and 100% of the disk free (e.g. 10%)"));
            }
            return Ok(KeepFree::Percent(v));
        }
        let b = crate::units::parse_bytes(t).map_err(|e| format!("'{s}': {e} (write e.g. 10% or 50G)"))?;
        if b == 0 {
            return Err(format!("{s}: keep more than nothing free (e.g. 10% or 50G)"));
        }
        Ok(KeepFree::Bytes(b))
    }

    /// The free bytes to keep on a filesystem of `total` bytes.
    pub fn bytes(self, total: u64) -> u64 {
        match self {
            KeepFree::Percent(p) => (total as f64 * p / 100.0) as u64,
            KeepFree::Bytes(b) => b,
        }
    }
}

/// The rules.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Retention {
    /// Keep this much of the disk free.
    pub keep_free: Option<KeepFree>,
    /// Keep finished files this long.
    pub keep_for: Option<Duration>,
}

/// One deleted file.
#[derive(Clone, Debug, Serialize)]
pub struct Deleted {
    /// The data file.
    pub path: String,
    /// Its size.
    pub bytes: u64,
    /// When it was opened and closed (its sidecar's UTC times).
    pub opened_utc: String,
    /// When it was closed.
    pub closed_utc: String,
    /// Which rule: `keep-free` or `keep-for`.
    pub rule: &'static str,
}

/// What retention did over a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RetentionReport {
    /// Files deleted (data files; their sidecars went with them).
    pub files_deleted: u64,
    /// Bytes of data files deleted.
    pub bytes_deleted: u64,
    /// The deletions, oldest first (the last 1000).
    pub deleted: Vec<Deleted>,
    /// Files passed over because a reader held them (counted each time one was passed over).
    pub kept_while_read: u64,
    /// Lowest free space seen, bytes.
    pub min_free_bytes: Option<u64>,
    /// The free space kept, bytes (with --keep-free).
    pub keep_free_bytes: Option<u64>,
    /// Problems (a file that could not be deleted), once each.
    pub notes: Vec<String>,
}

/// A finished recording file retention may delete.
#[derive(Clone, Debug)]
struct Candidate {
    path: PathBuf,
    sidecar: PathBuf,
    /// Sort key: the time and index in its name, then the name.
    key: (String, u64, String),
    bytes: u64,
    opened_utc: String,
    closed_utc: String,
    closed_ns: Option<u64>,
}

/// Applies the rules to one directory.
pub struct Keeper {
    dir: PathBuf,
    prefix: String,
    threads: usize,
    rules: Retention,
    say: Box<dyn Fn(&str) + Send>,
    /// What it did.
    pub report: RetentionReport,
    reported_locked: std::collections::HashSet<PathBuf>,
    /// What each name in the directory was found to be (`None`: not ours), so that a sweep
    /// reads only the sidecars of files it has not seen.
    known: std::collections::HashMap<String, Option<Candidate>>,
    /// Notes said already (each is said once).
    said: std::collections::HashSet<String>,
    /// When the age rule last ran.
    last_age_check: u64,
}

/// Whether `name` is one of the recorder's files: `PREFIX-` then the time for a recorder of one
/// capture thread; `PREFIX-tN-` then the time, N below `threads`, for one of several (its
/// threads' file series). So a recorder with `--prefix rec` never takes the files of another
/// with `--prefix rec-t1`, unless it has capture threads that name their files so.
fn of_prefix(name: &str, prefix: &str, threads: usize) -> bool {
    let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else { return false };
    if threads <= 1 {
        return rest.as_bytes().first().is_some_and(|b| b.is_ascii_digit());
    }
    // PREFIX-tN-...
    rest.strip_prefix('t').and_then(|r| r.split_once('-')).is_some_and(|(n, after)| {
        !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
            && n.parse::<usize>().is_ok_and(|k| k < threads)
            && after.as_bytes().first().is_some_and(|b| b.is_ascii_digit())
    })
}

impl Keeper {
    /// A keeper of `dir` for the files of a recorder with `prefix` and `threads` capture
    /// threads, telling `say` of every deletion.
    pub fn new(dir: &Path, prefix: &str, threads: usize, rules: Retention, say: Box<dyn Fn(&str) + Send>) -> Keeper {
        Keeper {
            dir: dir.to_path_buf(),
            prefix: prefix.to_string(),
            threads,
            rules,
            say,
            report: RetentionReport::default(),
            reported_locked: Default::default(),
            known: Default::default(),
            said: Default::default(),
            last_age_check: 0,
        }
    }

    /// The files retention may delete, oldest first.
    fn candidates(&mut self) -> Vec<Candidate> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut seen = std::collections::HashSet::new();
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name.ends_with(PART_SUFFIX) || name.ends_with(".json") {
                continue;
            }
            seen.insert(name.clone());
            if self.known.contains_key(&name) {
                continue;
            }
            // A file without its sidecar yet (being finished) is looked at again next time.
            if let Some(c) = self.candidate(&name, &e.path()) {
                self.known.insert(name, c);
            }
        }
        self.known.retain(|n, _| seen.contains(n));
        let mut out: Vec<Candidate> = self.known.values().flatten().cloned().collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// What the file `name` is: `Some(Some(c))` ours, `Some(None)` not ours for good, `None`
    /// not known yet (its sidecar is not there: a file being finished).
    fn candidate(&self, name: &str, path: &Path) -> Option<Option<Candidate>> {
        if !looks_recorded(name) || !of_prefix(name, &self.prefix, self.threads) {
            return Some(None);
        }
        let md = std::fs::symlink_metadata(path).ok()?;
        if !md.is_file() {
            return Some(None);
        }
        let side = self.dir.join(sidecar_name(name));
        // Only a file with a wirespeed sidecar that names it is ours.
        let text = std::fs::read(&side).ok()?;
        let Ok(s) = serde_json::from_slice::<Sidecar>(&text) else { return Some(None) };
        if !SIDECAR_SCHEMAS_READ.contains(&s.schema.as_str()) || s.file != name {
            return Some(None);
        }
        let mut parts = name.rsplitn(3, '-');
        let idx_ext = parts.next().unwrap_or("");
        let time = parts.next().unwrap_or("").to_string();
        let idx = idx_ext.split('.').next().and_then(|i| i.parse().ok()).unwrap_or(0);
        Some(Some(Candidate {
            path: path.to_path_buf(),
            sidecar: side,
            key: (time, idx, name.to_string()),
            bytes: md.len(),
            closed_ns: crate::calendar::parse_utc(&s.closed_utc).ok(),
            opened_utc: s.opened_utc,
            closed_utc: s.closed_utc,
        }))
    }

    /// Delete `c` unless a reader holds it: `Ok(true)` deleted, `Ok(false)` passed over.
    fn delete(&mut self, c: &Candidate, rule: &'static str, why: &str) -> bool {
        // Opened for writing too: a filesystem that emulates flock with record locks (NFS)
        // grants an exclusive one only on a descriptor that may write.
        let f = match std::fs::OpenOptions::new().read(true).write(true).open(&c.path) {
            Ok(f) => f,
            Err(_) => return false, // gone already (another keeper, a person)
        };
        match sys::file::try_lock_exclusive(&f) {
            Ok(true) => {}
            Ok(false) => {
                self.report.kept_while_read += 1;
                if self.reported_locked.insert(c.path.clone()) {
                    (self.say)(&format!(
                        "wirespeed record: retention: keeping {} for now: a reader holds it (the next oldest goes instead)",
                        c.path.display()
                    ));
                }
                return false;
            }
            Err(e) => {
                self.note(format!("cannot lock {} to delete it: {e}", c.path.display()));
                return false;
            }
        }
        // Data first, then its sidecar, while the lock is held: a reader opening it now finds
        // it gone, never half gone.
        if let Err(e) = std::fs::remove_file(&c.path) {
            self.note(format!("cannot delete {}: {e}", c.path.display()));
            return false;
        }
        let _ = std::fs::remove_file(&c.sidecar);
        drop(f);
        self.report.files_deleted += 1;
        self.report.bytes_deleted += c.bytes;
        (self.say)(&format!(
            "wirespeed record: retention: deleted {} ({}, recorded {} to {}): {why}",
            c.path.display(),
            crate::units::bytes(c.bytes),
            c.opened_utc,
            c.closed_utc
        ));
        if self.report.deleted.len() >= 1000 {
            self.report.deleted.remove(0);
        }
        self.report.deleted.push(Deleted {
            path: c.path.display().to_string(),
            bytes: c.bytes,
            opened_utc: c.opened_utc.clone(),
            closed_utc: c.closed_utc.clone(),
            rule,
        });
        true
    }

    fn note(&mut self, n: String) {
        if self.said.insert(n.clone()) {
            (self.say)(&format!("wirespeed record: retention: {n}"));
            self.report.notes.push(n);
        }
    }

    /// One pass of the rules at `now_ns`: what is too old goes, then the oldest while the
    /// disk has less free than it should. Returns the files deleted.
    pub fn sweep(&mut self, now_ns: u64) -> u64 {
        let before = self.report.files_deleted;
        // The cheap look first (one statvfs): the directory is listed only when there may be
        // something to do: space below the mark, or the age rule due (once a second).
        let space = match self.rules.keep_free {
            Some(kf) => match sys::file::space(&self.dir) {
                Ok((total, free)) => Some((kf.bytes(total), free)),
                Err(e) => {
                    self.note(format!("cannot read the free space of {}: {e}", self.dir.display()));
                    None
                }
            },
            None => None,
        };
        if let Some((want, free)) = space {
            self.report.keep_free_bytes = Some(want);
            self.report.min_free_bytes = Some(self.report.min_free_bytes.map_or(free, |m| m.min(free)));
        }
        let short = space.is_some_and(|(want, free)| free < want);
        let age_due = self.rules.keep_for.is_some() && now_ns.saturating_sub(self.last_age_check) >= 1_000_000_000;
        if !short && !age_due {
            return 0;
        }
        let mut cands = self.candidates();
        // The file finished last is never deleted: a recorder always keeps its latest data.
        cands.pop();
        let mut gone = vec![false; cands.len()];
        if let (Some(age), true) = (self.rules.keep_for, age_due) {
            self.last_age_check = now_ns;
            let limit = now_ns.saturating_sub(age.as_nanos() as u64);
            for (i, c) in cands.iter().enumerate() {
                if c.closed_ns.is_some_and(|t| t < limit) {
                    let why = format!("finished more than {} ago (--keep-for)", crate::units::duration_short(age));
                    gone[i] = self.delete(c, "keep-for", &why);
                }
            }
        }
        if let (Some((want, free)), true) = (space, short) {
            let mut free = sys::file::space(&self.dir).map_or(free, |s| s.1);
            // What this recorder's files can give back: when that cannot make up the shortfall
            // (another program fills the disk), deleting them all would only lose them.
            let can: u64 = cands.iter().zip(&gone).filter(|(_, g)| !**g).map(|(c, _)| c.bytes).sum();
            if free.saturating_add(can) < want {
                self.note(format!(
                    "free space is below the {} to keep, and all of this recorder's finished files would not make it up: none is deleted for it; the disk may fill",
                    crate::units::bytes(want)
                ));
                return self.report.files_deleted - before;
            }
            for (i, c) in cands.iter().enumerate() {
                if free >= want {
                    break;
                }
                if gone[i] {
                    continue;
                }
                let why = format!(
                    "{} free, below the {} to keep (--keep-free)",
                    crate::units::bytes(free),
                    crate::units::bytes(want)
                );
                if self.delete(c, "keep-free", &why) {
                    // A filesystem may give the space back later (btrfs, XFS): count the file
                    // as freed, so one sweep never deletes more than the shortfall.
                    let now = sys::file::space(&self.dir).map_or(0, |s| s.1);
                    free = now.max(free.saturating_add(c.bytes));
                }
            }
            if free < want {
                self.note(format!(
                    "free space is below the {} to keep and no finished file of this recorder is left to delete (or all are being read): the disk may fill",
                    crate::units::bytes(want)
                ));
            }
        }
        self.report.files_deleted - before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_free_parses_shares_and_sizes() {
        assert_eq!(KeepFree::parse("10%"), Ok(KeepFree::Percent(10.0)));
        assert_eq!(KeepFree::parse("2.5 %"), Ok(KeepFree::Percent(2.5)));
        assert_eq!(KeepFree::parse("50G"), Ok(KeepFree::Bytes(50 << 30)));
        for bad in ["0%", "100%", "-1%", "x%", "", "0", "lots"] {
            assert!(KeepFree::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(KeepFree::Percent(10.0).bytes(1000), 100);
    }

    #[test]
    fn only_the_prefix_and_its_threads_are_ours() {
        assert!(of_prefix("rec-20261129T000000Z-0001.vdif", "rec", 1));
        assert!(of_prefix("rec-t3-20261129T000000Z-0001.vdif", "rec", 4));
        for not in [
            "record-20261129T000000Z-0001.vdif",
            "rec-tx-20261129T000000Z-0001.vdif",
            "other-20261129T000000Z-0001.vdif",
            "rec",
        ] {
            assert!(!of_prefix(not, "rec", 1) && !of_prefix(not, "rec", 4), "{not}");
        }
        // Another recorder's --prefix rec-t1 is not a thread of a one-thread recorder rec, nor
        // thread 5 of a four-thread one; the one-thread series is not a four-thread one's.
        assert!(!of_prefix("rec-t1-20261129T000000Z-0001.vdif", "rec", 1));
        assert!(!of_prefix("rec-t5-20261129T000000Z-0001.vdif", "rec", 4));
        assert!(!of_prefix("rec-20261129T000000Z-0001.vdif", "rec", 4));
    }
}
