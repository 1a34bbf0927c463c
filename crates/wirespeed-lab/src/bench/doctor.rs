//! `bench doctor`: the evidence of issue 17, reproducible. Part `rmem`: a receiver loses with
//! net.core.rmem_max at the kernel default, `wirespeed doctor` names the sysctl, `--apply`
//! raises it, the same run loses nothing, and the undo script puts every value back. Part
//! `starve`: seed 001's "which resource was exhausted", replayed: three runs each starved of
//! one resource (socket buffer, CPU, disk), each diagnosed by the receiver, whose diagnosis
//! names a `wirespeed doctor` command, and that command run to see whether it names the fix.
//!
//! Everything this changes on the host is put back by a guard that also acts when the run
//! fails or is stopped: the rmem_max sysctl, the doctor's applied changes (its undo script),
//! the throttled loop device of the disk run.

use super::doctor_host::*;
use super::point::{rate_arg, Placement, Point, PointConfig, Runner, Stream};
use crate::doctor::{apply, Finding, Report, Root, Status};
use crate::testbed::place::Side;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wirespeed::units::{self, Rate};
use wirespeed::{Error, Result};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.doctor/1";

/// net.core.rmem_max as the kernel boots with it (4 KiB pages): what part `rmem` starts from.
pub const KERNEL_DEFAULT_RMEM_MAX: u64 = 212_992;

const RMEM_MAX: &str = "/proc/sys/net/core/rmem_max";

/// Which part of the bench to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Before/after `doctor --apply` with rmem_max at the kernel default.
    Rmem,
    /// Three runs, each starved of one resource.
    Starve,
    /// Both.
    All,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct DoctorBenchConfig {
    /// Which part(s).
    pub part: Part,
    /// Payload bytes of the socket-buffer runs (rmem, starve socket).
    pub size: usize,
    /// Rate of the socket-buffer runs, payload bits/s.
    pub rate_bps: f64,
    /// Datagrams per send call of the socket-buffer runs: bursts bigger than a 208 KiB buffer
    /// holds, so a small buffer loses and a big one does not.
    pub burst: u32,
    /// Sending time of every run.
    pub duration: Duration,
    /// Receive buffer the receiver asks for (recv's default, 32 MiB).
    pub rcvbuf: u64,
    /// Rate of the CPU run, payload bits/s: kept by an idle receiver core, not by
    /// half of one.
    pub cpu_rate_bps: f64,
    /// Payload bytes of the CPU run: small, so the receiver's cost per datagram counts.
    pub cpu_size: usize,
    /// Nice value of the CPU run's busy loop: below the receiver's 0, so the scheduler gives it
    /// most of the shared CPU (at an equal nice the receiver, which sleeps and wakes, gets its
    /// half and a 64 MiB buffer absorbs the rest).
    pub hog_nice: i32,
    /// Rate of the disk run, payload bits/s: above the throttled device's rate.
    pub disk_rate_bps: f64,
    /// Write rate the disk run's loop device is throttled to, bytes/s.
    pub disk_bps: u64,
    /// The recorder's RAM ring in the disk run (small, so it fills within the run).
    pub disk_buffer: String,
}

/// One doctor finding as the bench shows it.
#[derive(Clone, Debug, Serialize)]
pub struct FindingLine {
    /// Stable id (`socket.rmem_max`).
    pub id: String,
    /// "problem", "advice", "ok", "unknown".
    pub status: String,
    /// What the doctor saw.
    pub seen: String,
    /// The fix as the doctor words it.
    pub fix: Vec<String>,
    /// The changes `--apply` would make, as what=value (`net.core.rmem_max=33554432`).
    pub changes: Vec<String>,
}

impl FindingLine {
    fn of(f: &Finding) -> FindingLine {
        FindingLine {
            id: f.id.clone(),
            status: status_word(f.status),
            seen: f.seen.clone(),
            fix: f.fix.clone(),
            changes: f.changes.iter().map(|c| format!("{}={}", apply::subject(c), apply::wanted(c))).collect(),
        }
    }
}

fn status_word(s: Status) -> String {
    serde_json::to_value(s).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| format!("{s:?}"))
}

/// One `wirespeed doctor` run: the command, its first findings and the one the bench expects.
#[derive(Clone, Debug, Serialize)]
pub struct DoctorRun {
    /// The command line as a user would type it.
    pub command: String,
    /// Its first findings (problems first, as the doctor orders them), at most three.
    pub first: Vec<FindingLine>,
    /// The id that names the right fix for the starved resource.
    pub expected: String,
    /// That finding, wherever it stands in the report.
    pub expected_finding: Option<FindingLine>,
    /// Whether the expected finding is a problem: the doctor named the right fix.
    pub named_right_fix: bool,
}

/// A run's ledger and diagnosis, as the receiver reported them.
#[derive(Clone, Debug, Serialize)]
pub struct Ledger {
    /// The offered rate.
    pub asked: String,
    /// Payload bits/s the sender achieved.
    pub achieved_bps: f64,
    /// Datagrams sent.
    pub sent: u64,
    /// Unique datagrams received.
    pub received: u64,
    /// Lost in the ledger.
    pub lost: u64,
    /// Sent but never received.
    pub missing: u64,
    /// The socket's own drop counter.
    pub socket_drops: Option<u64>,
    /// Dropped at the recorder's full RAM ring (record only).
    pub ring_full: Option<u64>,
    /// Receive buffer the kernel granted (it reports twice the usable size).
    pub rcvbuf_granted: u64,
    /// Anything lost.
    pub lossy: bool,
    /// The receiver's diagnosis lines.
    pub diagnosis: Vec<String>,
    /// The diagnosis line that names a `wirespeed doctor` command, if one does.
    pub doctor_hint: Option<String>,
}

impl Ledger {
    fn of(p: &Point, report: &serde_json::Value) -> Ledger {
        let mut diagnosis = p.diagnosis.clone();
        if let Some(d) = report["diagnosis"].as_array() {
            for l in d.iter().filter_map(|v| v.as_str()) {
                if !diagnosis.iter().any(|x| x == l) {
                    diagnosis.push(l.to_string());
                }
            }
        }
        let doctor_hint = diagnosis.iter().find(|l| l.contains("wirespeed doctor")).cloned();
        Ledger {
            asked: p.asked.clone(),
            achieved_bps: p.achieved_bps,
            sent: p.sent,
            received: p.received,
            lost: p.lost,
            missing: p.missing,
            socket_drops: p.kernel_socket_drops,
            ring_full: report["ring"]["ring_full"].as_u64(),
            rcvbuf_granted: p.rcvbuf_granted,
            lossy: p.lossy,
            diagnosis,
            doctor_hint,
        }
    }

    /// received/lost/socket drops/ring-full on one line.
    pub fn line(&self) -> String {
        format!(
            "asked {}, achieved {}: sent {}, received {}, lost {}, missing {}, socket drops {}, ring-full {}, buffer granted {}",
            self.asked,
            units::bits(self.achieved_bps),
            units::thousands(self.sent),
            units::thousands(self.received),
            units::thousands(self.lost),
            units::thousands(self.missing),
            self.socket_drops.map_or("-".into(), units::thousands),
            self.ring_full.map_or("-".into(), units::thousands),
            units::bytes(self.rcvbuf_granted)
        )
    }
}

/// One value `doctor --apply` changed, and what it read after the undo script ran.
#[derive(Clone, Debug, Serialize)]
pub struct Restore {
    /// What the change touched (`net.core.rmem_max`, `IRQ 38 affinity`).
    pub what: String,
    /// The value before `--apply`, as the doctor read it.
    pub before: String,
    /// The value `--apply` set.
    pub applied: String,
    /// The value read after `sh UNDO`.
    pub after_undo: String,
    /// `after_undo == before`.
    pub restored: bool,
}

/// Part `rmem`'s result.
#[derive(Clone, Debug, Serialize)]
pub struct RmemPart {
    /// net.core.rmem_max when the bench started (put back at the end).
    pub original_rmem_max: u64,
    /// The value the bench set for the "before" run.
    pub set_to: u64,
    /// The run before `doctor --apply`.
    pub before: Ledger,
    /// `doctor --for ... --json` after that run.
    pub doctor: DoctorRun,
    /// The `doctor --apply` command.
    pub apply_command: String,
    /// Changes `--apply` could not make.
    pub apply_failed: Vec<String>,
    /// The same run after `--apply`.
    pub after: Ledger,
    /// The undo script `--apply` wrote.
    pub undo_script: String,
    /// Every changed value before, applied and after the undo.
    pub restores: Vec<Restore>,
    /// Whether every value `--apply` changed was back after the undo.
    pub undo_restored: bool,
    /// rmem_max read after the undo (expected: `set_to`).
    pub rmem_max_after_undo: u64,
    /// rmem_max read at the end of the part, after the bench restored it (expected: the original).
    pub rmem_max_at_end: u64,
}

/// One starved run of part `starve`.
#[derive(Clone, Debug, Serialize)]
pub struct StarveRun {
    /// "socket buffer", "CPU", "disk".
    pub resource: String,
    /// How it was starved.
    pub how: String,
    /// The receiver's account.
    pub ledger: Ledger,
    /// The same run without the starving (the CPU run's control: no hog), when made.
    pub control: Option<Ledger>,
    /// The doctor command run (the one the hint names, run as the hint says).
    pub doctor: Option<DoctorRun>,
    /// Why the doctor was not run, or what to know about its figures.
    pub note: Option<String>,
}

/// Everything a `bench doctor` run found, as `--json` prints it and doctor.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct DoctorBenchDoc {
    /// The schema id and where the run's two ends were, first ([`DocHead`](crate::bench::DocHead)).
    #[serde(flatten)]
    pub head: crate::bench::DocHead,
    /// How the socket-buffer runs' receiver is run (without CAP_NET_ADMIN, see the notes).
    pub receiver: String,
    /// Part `rmem`, when run.
    pub rmem: Option<RmemPart>,
    /// Part `starve`'s runs, when run.
    pub starve: Vec<StarveRun>,
    /// Notes on the whole run.
    pub notes: Vec<String>,
    /// Whether Ctrl-C ended the run early.
    pub stopped: bool,
}

/// A receiver wrapper that drops CAP_NET_ADMIN from the bounding set before running this
/// binary: root's SO_RCVBUFFORCE ignores net.core.rmem_max, so without the drop the sysctl
/// would not cap anything (the user the doctor speaks for runs without that capability).
fn capless_receiver(dir: &TempDir) -> Result<PathBuf> {
    tool("setpriv", &["--version"]).map_err(|_| {
        Error::permission("setpriv (util-linux) is not installed: the receiver cannot be run without CAP_NET_ADMIN")
    })?;
    let exe = std::env::current_exe().map_err(|e| Error::failed(format!("cannot find this binary: {e}")))?;
    let path = dir.0.join("recv-without-net-admin");
    let text =
        format!("#!/bin/sh\nexec setpriv --bounding-set -net_admin --inh-caps -net_admin '{}' \"$@\"\n", exe.display());
    std::fs::write(&path, text).map_err(|e| Error::io(format!("cannot write {}: {e}", path.display())))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::failed(format!("cannot make {} executable: {e}", path.display())))?;
    Ok(path)
}

/// Run `wirespeed doctor ARGS --json` (this binary, this process's namespace: the host's) and
/// read its report.
fn doctor(args: &[String]) -> Result<Report> {
    let exe = std::env::current_exe().map_err(|e| Error::failed(format!("cannot find this binary: {e}")))?;
    let out = Command::new(exe)
        .arg("doctor")
        .args(args)
        .arg("--json")
        .output()
        .map_err(|e| Error::failed(format!("cannot run wirespeed doctor: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Report = serde_json::from_str(&text).map_err(|e| {
        let err = String::from_utf8_lossy(&out.stderr);
        Error::failed(format!(
            "wirespeed doctor {} printed no report ({e}): {}",
            args.join(" "),
            err.lines().last().unwrap_or("").trim_start_matches("wirespeed: ")
        ))
    })?;
    Ok(report)
}

fn doctor_args(rate_bps: f64, size: usize, cpu: Option<usize>, disk: Option<&Path>) -> Vec<String> {
    // Whole megabits as the user would type them ("2000M"), else the exact figure.
    let rate = if rate_bps % 1e6 == 0.0 { format!("{}M", rate_bps / 1e6) } else { rate_arg(Rate::Bits(rate_bps)) };
    let mut a = vec!["--for".into(), rate, "--size".into(), size.to_string()];
    if let Some(c) = cpu {
        a.extend(["--cpu".into(), c.to_string()]);
    }
    if let Some(d) = disk {
        a.extend(["--disk".into(), d.display().to_string()]);
    }
    a
}

fn command_line(args: &[String]) -> String {
    format!("wirespeed doctor {} --json", args.join(" "))
}

fn doctor_run(args: &[String], report: &Report, expected: &str) -> DoctorRun {
    let first = report.findings.iter().filter(|f| f.status != Status::Ok).take(3).map(FindingLine::of).collect();
    let exp = report.findings.iter().find(|f| f.id == expected);
    DoctorRun {
        command: command_line(args),
        first,
        expected: expected.into(),
        expected_finding: exp.map(FindingLine::of),
        named_right_fix: exp.is_some_and(|f| f.status == Status::Problem),
    }
}

/// What a progress line is about.
pub enum Progress<'a> {
    /// A step is starting.
    Step(&'a str),
    /// A run finished.
    Ran(&'a str, &'a Ledger),
    /// A doctor run finished.
    Doctor(&'a DoctorRun),
}

/// The progress line of one event.
pub fn progress_line(p: &Progress) -> String {
    match p {
        Progress::Step(s) => s.to_string(),
        Progress::Ran(what, l) => format!(
            "  {what}: {}\n  diagnosis: {}",
            l.line(),
            l.doctor_hint.as_deref().or(l.diagnosis.first().map(String::as_str)).unwrap_or("(none)")
        ),
        Progress::Doctor(d) => doctor_lines(d),
    }
}

fn doctor_lines(d: &DoctorRun) -> String {
    let mut s = format!("  doctor: {}", d.command);
    for f in &d.first {
        s.push_str(&format!("\n    {:<8} {}: {}", f.status.to_uppercase(), f.id, f.seen));
        if let Some(x) = f.fix.first() {
            s.push_str(&format!("\n             fix: {x}"));
        }
    }
    match &d.expected_finding {
        Some(f) => s.push_str(&format!(
            "\n  => expected {} as a problem: {} ({})",
            d.expected,
            if d.named_right_fix { "yes" } else { "no" },
            f.status
        )),
        None => s.push_str(&format!("\n  => expected {}: not in the report", d.expected)),
    }
    s
}

struct Ctx<'a> {
    runner: &'a mut Runner,
    stop: &'static AtomicBool,
    cfg: &'a DoctorBenchConfig,
}

impl Ctx<'_> {
    fn point(
        &self,
        rate_bps: f64,
        size: usize,
        gso: bool,
        stream: Stream,
    ) -> Result<Option<(Point, serde_json::Value)>> {
        let pc =
            PointConfig { rate: Rate::Bits(rate_bps), size, duration: self.cfg.duration, gso, rcvbuf: self.cfg.rcvbuf };
        Ok(self.runner.run_with(&pc, stream)?.map(|s| (s.point, s.recv_report)))
    }

    fn socket_stream(&self, wrapper: &Path) -> Stream {
        Stream {
            send_args: vec!["--burst".into(), self.cfg.burst.to_string()],
            exe: Some(wrapper.to_path_buf()),
            ..Stream::default()
        }
    }

    fn recv_cpu(&self) -> Option<usize> {
        self.runner.place().cpus(Side::Recv).first().copied()
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Run the part(s) `cfg` asks for; `progress` sees every step. Every host change is undone
/// before this returns, whatever happens.
pub fn run(
    runner: &mut Runner,
    cfg: &DoctorBenchConfig,
    stop: &'static AtomicBool,
    progress: &mut dyn FnMut(Progress),
) -> Result<DoctorBenchDoc> {
    let tmp = TempDir::new("recv")?;
    let wrapper = capless_receiver(&tmp)?;
    let mut cx = Ctx { runner, stop, cfg };
    let mut notes = vec![
        "the socket-buffer runs' receiver runs without CAP_NET_ADMIN (setpriv --bounding-set -net_admin): as root, recv's SO_RCVBUFFORCE would take its 32 MiB past net.core.rmem_max and the sysctl would cap nothing".to_string(),
    ];
    let mut rmem = None;
    let mut starve = Vec::new();
    if matches!(cfg.part, Part::Rmem | Part::All) {
        rmem = part_rmem(&mut cx, &wrapper, progress)?;
    }
    if matches!(cfg.part, Part::Starve | Part::All) && !cx.stopped() {
        starve = part_starve(&mut cx, &wrapper, &mut notes, progress)?;
    }
    Ok(DoctorBenchDoc {
        head: crate::bench::DocHead { schema: SCHEMA, placement: cx.runner.placement() },
        receiver: format!("{} (recv/record, this binary)", wrapper.display()),
        rmem,
        starve,
        notes,
        stopped: stop.load(Ordering::Relaxed),
    })
}

fn part_rmem(cx: &mut Ctx, wrapper: &Path, progress: &mut dyn FnMut(Progress)) -> Result<Option<RmemPart>> {
    let cfg = cx.cfg;
    let original = read_u64(RMEM_MAX)?;
    let guard = SysctlGuard::set(RMEM_MAX, KERNEL_DEFAULT_RMEM_MAX)?;
    progress(Progress::Step(&format!(
        "rmem: net.core.rmem_max {original} -> {KERNEL_DEFAULT_RMEM_MAX} (the kernel default; put back at the end)"
    )));
    let Some((p, r)) = cx.point(cfg.rate_bps, cfg.size, false, cx.socket_stream(wrapper))? else {
        return Ok(None);
    };
    let before = Ledger::of(&p, &r);
    progress(Progress::Ran("before", &before));
    let args = doctor_args(cfg.rate_bps, cfg.size, cx.recv_cpu(), None);
    let report = doctor(&args)?;
    let diag = doctor_run(&args, &report, "socket.rmem_max");
    progress(Progress::Doctor(&diag));
    if cx.stopped() {
        return Ok(None);
    }
    let tmp = TempDir::new("undo")?;
    let undo_path = tmp.0.join("undo.sh");
    let mut aargs = args.clone();
    aargs.extend(["--apply".into(), "--undo".into(), undo_path.display().to_string()]);
    // From here on the undo script exists (or the apply wrote nothing): it runs on any exit.
    let mut undo = UndoGuard { script: Some(undo_path.clone()) };
    let applied_report = doctor(&aargs);
    if !undo_path.exists() {
        undo.script = None;
    }
    let applied_report = applied_report?;
    let applied = applied_report.applied.ok_or_else(|| Error::failed("doctor --apply reported no applied changes"))?;
    let undo_text = std::fs::read_to_string(&undo_path).unwrap_or_default();
    for d in &applied.changed {
        progress(Progress::Step(&format!("  applied: {}: {} -> {}", apply::subject(&d.change), d.before, d.after)));
    }
    let Some((p, r)) = cx.point(cfg.rate_bps, cfg.size, false, cx.socket_stream(wrapper))? else {
        return Ok(None);
    };
    let after = Ledger::of(&p, &r);
    progress(Progress::Ran("after doctor --apply", &after));
    undo.run()?;
    let root = Root::live();
    let restores: Vec<Restore> = applied
        .changed
        .iter()
        .map(|d| {
            let now = apply::current(&d.change, &root).unwrap_or_else(|e| format!("unreadable: {e}"));
            Restore {
                what: apply::subject(&d.change),
                before: d.before.clone(),
                applied: d.after.clone(),
                restored: now == d.before,
                after_undo: now,
            }
        })
        .collect();
    let rmem_after_undo = read_u64(RMEM_MAX)?;
    let undo_restored = restores.iter().all(|r| r.restored) && rmem_after_undo == KERNEL_DEFAULT_RMEM_MAX;
    for x in &restores {
        progress(Progress::Step(&format!(
            "  after sh undo: {}: {} (before --apply {}) {}",
            x.what,
            x.after_undo,
            x.before,
            if x.restored { "restored" } else { "NOT RESTORED" }
        )));
    }
    guard.restore()?;
    let at_end = read_u64(RMEM_MAX)?;
    progress(Progress::Step(&format!(
        "rmem: undo restored: {}; net.core.rmem_max put back to {at_end} (was {original})",
        if undo_restored { "yes" } else { "no" }
    )));
    Ok(Some(RmemPart {
        original_rmem_max: original,
        set_to: KERNEL_DEFAULT_RMEM_MAX,
        before,
        doctor: diag,
        apply_command: command_line(&aargs),
        apply_failed: applied.failed.iter().map(|f| format!("{}: {}", apply::subject(&f.change), f.reason)).collect(),
        after,
        undo_script: undo_text,
        restores,
        undo_restored,
        rmem_max_after_undo: rmem_after_undo,
        rmem_max_at_end: at_end,
    }))
}

fn part_starve(
    cx: &mut Ctx,
    wrapper: &Path,
    notes: &mut Vec<String>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<StarveRun>> {
    let cfg = cx.cfg;
    let mut runs = Vec::new();
    // a. The socket buffer: rmem_max at the kernel default, the receiver without the capability
    // that bypasses it.
    {
        let guard = SysctlGuard::set(RMEM_MAX, KERNEL_DEFAULT_RMEM_MAX)?;
        progress(Progress::Step("starve socket buffer: net.core.rmem_max at 212992, bursts bigger than it holds"));
        let Some((p, r)) = cx.point(cfg.rate_bps, cfg.size, false, cx.socket_stream(wrapper))? else {
            return Ok(runs);
        };
        let ledger = Ledger::of(&p, &r);
        progress(Progress::Ran("socket buffer", &ledger));
        let args = doctor_args(cfg.rate_bps, cfg.size, cx.recv_cpu(), None);
        let d = doctor_run(&args, &doctor(&args)?, "socket.rmem_max");
        progress(Progress::Doctor(&d));
        guard.restore()?;
        runs.push(StarveRun {
            resource: "socket buffer".into(),
            how: format!(
                "net.core.rmem_max = {KERNEL_DEFAULT_RMEM_MAX} (recv --rcvbuf {} capped to it), sender bursts of {} datagrams",
                units::bytes(cfg.rcvbuf),
                cfg.burst
            ),
            ledger,
            control: None,
            doctor: Some(d),
            note: None,
        });
    }
    if cx.stopped() {
        return Ok(runs);
    }
    // b. The CPU: a busy loop on the receiver's CPU, kept running through the doctor's look;
    // first the same run without it, the control that shows the rate fits an idle core.
    {
        let size = cfg.cpu_size;
        progress(Progress::Step("starve CPU, control: the same run without the hog"));
        let Some((p, r)) = cx.point(cfg.cpu_rate_bps, size, false, Stream::default())? else {
            return Ok(runs);
        };
        let control = Ledger::of(&p, &r);
        progress(Progress::Ran("CPU control (no hog)", &control));
        let hog = cx.runner.place().cpu_hog(Side::Recv, cfg.hog_nice)?;
        let hog_pid = hog.pid();
        progress(Progress::Step(&format!(
            "starve CPU: a busy loop (pid {hog_pid}, nice {}) on the receiver's CPU(s) {:?}",
            cfg.hog_nice,
            cx.runner.place().cpus(Side::Recv)
        )));
        let Some((p, r)) = cx.point(cfg.cpu_rate_bps, size, false, Stream::default())? else {
            return Ok(runs);
        };
        let ledger = Ledger::of(&p, &r);
        progress(Progress::Ran("CPU", &ledger));
        let args = doctor_args(cfg.cpu_rate_bps, size, cx.recv_cpu(), None);
        let d = doctor_run(&args, &doctor(&args)?, "cpu.load");
        progress(Progress::Doctor(&d));
        let names = d.expected_finding.as_ref().is_some_and(|f| f.seen.contains(&hog_pid.to_string()));
        drop(hog);
        let note = cpu_note(&ledger, &control, hog_pid, names);
        runs.push(StarveRun {
            resource: "CPU".into(),
            how: format!(
                "sh -c 'while :; do :; done' (pid {hog_pid}) at nice {} on the receiver's CPU (the receiver at nice 0), {size}-byte datagrams",
                cfg.hog_nice
            ),
            ledger,
            control: Some(control),
            doctor: Some(d),
            note: Some(note),
        });
    }
    if cx.stopped() {
        return Ok(runs);
    }
    // c. The disk: `record` to a throttled loop device, its ring small so it fills in the run.
    let disk = match SlowDisk::make(cfg.disk_bps) {
        Ok(d) => d,
        Err(e) => {
            notes.push(format!("disk run skipped: {e}"));
            progress(Progress::Step(&format!("starve disk: skipped: {e}")));
            return Ok(runs);
        }
    };
    let how = disk.describe(cfg.disk_bps);
    progress(Progress::Step(&format!("starve disk: record to {how}, --buffer {}", cfg.disk_buffer)));
    cx.runner.record_to(disk.mount_point())?;
    let stream = Stream { recv_args: vec!["--buffer".into(), cfg.disk_buffer.clone()], ..Stream::default() };
    let Some((p, r)) = cx.point(cfg.disk_rate_bps, cfg.size, false, stream)? else {
        return Ok(runs);
    };
    let ledger = Ledger::of(&p, &r);
    progress(Progress::Ran("disk", &ledger));
    let args = doctor_args(cfg.disk_rate_bps, cfg.size, cx.recv_cpu(), Some(&disk.mount_point()));
    progress(Progress::Step("  the doctor measures the throttled disk (512 MiB with record's own writes)..."));
    let d = doctor_run(&args, &doctor(&args)?, "disk.rate");
    progress(Progress::Doctor(&d));
    drop(disk);
    runs.push(StarveRun {
        resource: "disk".into(),
        how: format!("{how}; record --buffer {}", cfg.disk_buffer),
        ledger,
        control: None,
        doctor: Some(d),
        note: Some("the doctor's disk test wrote to the same throttled device the recorder wrote to".into()),
    });
    Ok(runs)
}

/// What the CPU run showed, in words: when the hog did not make the receiver lose, the hog's
/// CPU also carries the link's delivery work in these partitions, so the sender is held back
/// (its achieved rate falls) instead of the receiver dropping: said, not hidden.
fn cpu_note(l: &Ledger, control: &Ledger, pid: u32, names: bool) -> String {
    let named =
        format!("the doctor's cpu.load finding names the hog's pid {pid}: {}", if names { "yes" } else { "no" });
    if l.lossy {
        return named;
    }
    format!(
        "{named}; this run lost nothing: the sender achieved {} against {} without the hog, held back by the starved CPU (it also does the receiving side's delivery work here) rather than dropped at the receiver",
        units::bits(l.achieved_bps),
        units::bits(control.achieved_bps)
    )
}

/// The heading line of a run.
pub fn header(cfg: &DoctorBenchConfig, placement: &Placement) -> String {
    format!(
        "wirespeed bench doctor: {}; socket-buffer runs {}-byte datagrams at {} in bursts of {}, {} each; {}",
        match cfg.part {
            Part::Rmem => "part rmem (before/after doctor --apply)",
            Part::Starve => "part starve (socket buffer, CPU, disk)",
            Part::All => "parts rmem (before/after doctor --apply) and starve (socket buffer, CPU, disk)",
        },
        cfg.size,
        units::bits(cfg.rate_bps),
        cfg.burst,
        units::nanos(cfg.duration.as_nanos() as f64),
        placement.description
    )
}

/// The summary: per part, the figures that make the case.
pub fn table(doc: &DoctorBenchDoc) -> String {
    let mut s = String::new();
    if let Some(r) = &doc.rmem {
        s.push_str(&format!(
            "rmem: net.core.rmem_max {} -> {}\n  before --apply: lost {} of {} sent (socket drops {})\n  doctor: socket.rmem_max {}: {}\n",
            r.original_rmem_max,
            r.set_to,
            units::thousands(r.before.missing),
            units::thousands(r.before.sent),
            r.before.socket_drops.map_or("-".into(), units::thousands),
            r.doctor.expected_finding.as_ref().map_or("absent".into(), |f| f.status.clone()),
            r.doctor.expected_finding.as_ref().map_or(String::new(), |f| f.fix.join("; "))
        ));
        s.push_str(&format!(
            "  after --apply:  lost {} of {} sent (socket drops {})\n  applied and undone: {}\n  undo restored: {} (rmem_max after undo {}, at the end {})\n",
            units::thousands(r.after.missing),
            units::thousands(r.after.sent),
            r.after.socket_drops.map_or("-".into(), units::thousands),
            r.restores.iter().map(|x| format!("{} {} -> {} -> {}", x.what, x.before, x.applied, x.after_undo)).collect::<Vec<_>>().join("; "),
            if r.undo_restored { "yes" } else { "no" },
            r.rmem_max_after_undo,
            r.rmem_max_at_end
        ));
    }
    for x in &doc.starve {
        s.push_str(&format!("starve {}: {}\n  {}\n", x.resource, x.how, x.ledger.line()));
        if let Some(c) = &x.control {
            s.push_str(&format!("  control without it: {}\n", c.line()));
        }
        s.push_str(&format!(
            "  diagnosis: {}\n",
            x.ledger.doctor_hint.as_deref().unwrap_or("(no line names the doctor)")
        ));
        if let Some(d) = &x.doctor {
            s.push_str(&format!(
                "  doctor: {} -> first {}; {} {}\n",
                d.command,
                d.first.first().map_or("none".into(), |f| format!("{} {}", f.id, f.status)),
                d.expected,
                if d.named_right_fix { "named as a problem" } else { "NOT named as a problem" }
            ));
        }
        if let Some(n) = &x.note {
            s.push_str(&format!("  note: {n}\n"));
        }
    }
    for n in &doc.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    s
}
