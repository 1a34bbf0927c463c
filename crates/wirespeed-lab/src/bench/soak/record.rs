//! A soak through the recorder (`bench soak --record DIR`, seed 001's whole challenge): the
//! receiving side is `wirespeed record -o DIR`, each row carries what the recorder did in it
//! (bytes written, ring high water, ring-full drops, writer stalls), and once the run is over
//! `wirespeed verify DIR` re-reads every file and its verdict joins the soak's.
//!
//! Every recorder figure is read defensively: a build whose reports lack one shows it as n/a,
//! and the soak still runs; only the verify verdict and the ledger decide the exit status.

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use wirespeed::{Error, Result};

/// What the recording holds at the end, and what `wirespeed verify` said of it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SoakRecord {
    /// The recording directory.
    pub dir: String,
    /// Files the recorder finished.
    pub files: Option<u64>,
    /// Bytes it wrote.
    pub written_bytes: Option<u64>,
    /// Records it wrote.
    pub records: Option<u64>,
    /// The ring's size, bytes.
    pub ring_capacity: Option<u64>,
    /// The ring's high water over the run, bytes.
    pub ring_high_water: Option<u64>,
    /// Datagrams dropped at a full ring.
    pub ring_full: Option<u64>,
    /// Writes that kept the writer waiting.
    pub write_stalls: Option<u64>,
    /// Seconds from start until the ring was ready and the socket open (`ring.ready_s`).
    pub ready_s: Option<f64>,
    /// `wirespeed verify DIR`'s verdict (`None` when it could not be run).
    pub verify: Option<VerifyVerdict>,
}

/// `wirespeed verify DIR --json --expect-zero-loss`, read back.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct VerifyVerdict {
    /// The command run.
    pub command: String,
    /// Its exit code (0 sound, 3 loss, 4 a file damaged, incomplete or unlike its sidecar).
    pub exit_code: i32,
    /// Every file sound and matching its sidecar, nothing lost, and as many records as the
    /// recorder's ledger received.
    pub ok: bool,
    /// Records re-read from the files.
    pub records: Option<u64>,
    /// Files re-read.
    pub files: Option<u64>,
    /// Files whose content matches their sidecar.
    pub matching: Option<u64>,
    /// Sequence numbers missing in the files.
    pub lost: Option<u64>,
    /// Files damaged, incomplete or unlike their sidecar.
    pub problems: Option<u64>,
    /// One sentence.
    pub verdict: String,
}

/// The recorder's end figures from its `wirespeed.record/1` report (any field missing: `None`).
pub fn from_report(dir: &Path, report: &serde_json::Value) -> SoakRecord {
    let u = |v: &serde_json::Value| v.as_u64();
    let w = &report["writer"];
    let ring = &report["ring"];
    SoakRecord {
        dir: dir.display().to_string(),
        files: w["files"].as_array().map(|f| f.len() as u64),
        written_bytes: u(&w["bytes"]),
        records: u(&w["records"]),
        ring_capacity: u(&ring["capacity"]),
        ring_high_water: u(&ring["high_water"]),
        ring_full: u(&ring["ring_full"]).or_else(|| u(&report["capture"]["ring_full"])),
        write_stalls: u(&w["write_stalls"]),
        ready_s: ring["ready_s"].as_f64(),
        verify: None,
    }
}

/// Read `wirespeed verify --json`'s document and exit code into a verdict; `received` is the
/// recorder's own count of what it accepted, which the files must hold exactly.
pub fn read_verify(command: String, exit_code: i32, json: &str, received: Option<u64>) -> VerifyVerdict {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let u = |k: &str| v[k].as_u64();
    let files = v["files"].as_array().map(|f| f.len() as u64);
    let records = u("records");
    let lost = v["total"]["lost"].as_u64();
    let problems = u("problems");
    let matching = u("matching");
    let readable = v["schema"].as_str().is_some_and(|s| s.starts_with("wirespeed.verify/"));
    let count_ok = match (received, records) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    let ok = readable && exit_code == 0 && lost == Some(0) && count_ok;
    let n = |x: Option<u64>| x.map_or("n/a".to_string(), wirespeed::units::thousands);
    let verdict = if !readable {
        format!("verify FAILED: it printed no report (exit code {exit_code})")
    } else if ok {
        format!("verified: {} records in {} file(s), every file matching its sidecar, 0 lost", n(records), n(files))
    } else {
        let mut why = Vec::new();
        match exit_code {
            0 => {}
            3 => why.push("loss in the recording".to_string()),
            4 => why.push("a file is damaged, incomplete or unlike its sidecar".to_string()),
            c => why.push(format!("exit code {c}")),
        }
        if lost.is_some_and(|l| l > 0) {
            why.push(format!("{} lost", n(lost)));
        }
        if problems.is_some_and(|p| p > 0) {
            why.push(format!("{} file problem(s)", n(problems)));
        }
        if !count_ok {
            why.push(format!("the files hold {} records, the recorder received {}", n(records), n(received)));
        }
        format!("verify FAILED: {} ({} records in {} file(s))", why.join(", "), n(records), n(files))
    };
    VerifyVerdict { command, exit_code, ok, records, files, matching, lost, problems, verdict }
}

/// Run `wirespeed verify DIR --json --expect-zero-loss` with this binary (the disk is the
/// host's: no partition needed).
pub fn verify(dir: &Path, received: Option<u64>) -> Result<VerifyVerdict> {
    let exe: PathBuf =
        std::env::current_exe().map_err(|e| Error::failed(format!("cannot find this program's path: {e}")))?;
    // At the lowest priority: while a soak runs, the recorder and the sender come first.
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "19"]).arg(&exe);
    cmd.arg("verify").arg(dir).args(["--json", "--expect-zero-loss"]).stdin(Stdio::null());
    let command = super::super::peer::tool::argv_text(&cmd);
    let out = wirespeed::sys::die_with_parent(&mut cmd)
        .output()
        .map_err(|e| Error::failed(format!("cannot run {command}: {e}")))?;
    let code = out.status.code().unwrap_or(-1);
    Ok(read_verify(command, code, &String::from_utf8_lossy(&out.stdout), received))
}

/// The files of `dir` the recorder has finished (a data file whose sidecar `NAME.json` is
/// written: the recorder writes it after closing and renaming the file), in name order.
pub fn finished_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            !name.starts_with('.')
                && !name.ends_with(".json")
                && !name.ends_with(wirespeed::spool::PART_SUFFIX)
                && dir.join(wirespeed::spool::sidecar_name(&name)).is_file()
        })
        .collect();
    out.sort();
    out
}

/// Verify each finished file of `dir` on its own, then delete it and its sidecar: what a soak
/// longer than the disk holds does every few seconds. Returns one verdict per file (a file
/// that fails verify is kept, for a look at it).
pub fn prune(dir: &Path) -> Vec<VerifyVerdict> {
    let mut out = Vec::new();
    for f in finished_files(dir) {
        let v = verify(&f, None).unwrap_or_else(|e| VerifyVerdict {
            verdict: format!("verify FAILED: {e}"),
            exit_code: -1,
            ..VerifyVerdict::default()
        });
        if v.ok {
            let name = f.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            let _ = std::fs::remove_file(&f);
            let _ = std::fs::remove_file(dir.join(wirespeed::spool::sidecar_name(&name)));
        }
        out.push(v);
    }
    out
}

/// One verdict for a recording verified in parts (files verified and deleted during the run,
/// then the rest): the parts' counts summed, judged as one verify would judge them, with the
/// files' records held against what the recorder received.
pub fn merge_verdicts(parts: &[VerifyVerdict], received: Option<u64>) -> VerifyVerdict {
    let sum = |f: fn(&VerifyVerdict) -> Option<u64>| -> Option<u64> { parts.iter().map(f).sum() };
    let (records, files, lost, problems) = (sum(|v| v.records), sum(|v| v.files), sum(|v| v.lost), sum(|v| v.problems));
    let exit_code = parts.iter().map(|v| v.exit_code).find(|&c| c != 0).unwrap_or(0);
    let doc = serde_json::json!({
        "schema": "wirespeed.verify/2",
        "files": vec![serde_json::Value::Null; files.unwrap_or(0) as usize],
        "records": records,
        "matching": sum(|v| v.matching),
        "problems": problems,
        "total": {"lost": lost},
    });
    let mut v = read_verify(
        format!("{} verify runs, one per file as it was finished, then the rest", parts.len()),
        if parts.iter().all(|p| p.exit_code == 0 || p.records.is_some()) { exit_code } else { -1 },
        &doc.to_string(),
        received,
    );
    if let Some(bad) = parts.iter().find(|p| !p.ok) {
        v.ok = false;
        v.verdict = format!("{}; first failing part: {} ({})", v.verdict, bad.verdict, bad.command);
    }
    v
}

/// The recording directory must hold no file yet, so verify judges this run's recording alone
/// (and nothing of the user's is mixed into it); it is created when missing.
pub fn check_empty(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("cannot create the recording directory {}: {e}", dir.display())))?;
    let n = std::fs::read_dir(dir).map_err(|e| Error::io(format!("cannot read {}: {e}", dir.display())))?.count();
    if n > 0 {
        return Err(Error::invalid(format!(
            "--record {}: the directory already holds {n} entr{}; give an empty or new directory, so verify judges this run's recording alone",
            dir.display(),
            if n == 1 { "y" } else { "ies" }
        )));
    }
    Ok(())
}

/// A byte count for the recorder's lines, n/a when not reported.
fn bytes_or_na(b: Option<u64>) -> String {
    b.map_or("n/a".into(), wirespeed::units::bytes)
}

/// A count for the recorder's lines, n/a when not reported.
fn count_or_na(n: Option<u64>) -> String {
    n.map_or("n/a".into(), wirespeed::units::thousands)
}

/// The recorder's line under the table: what it wrote and how its ring and writer fared.
pub fn summary_line(r: &SoakRecord) -> String {
    format!(
        "recorder: {} written in {} file(s) to {}; ring high water {} of {}; ring-full drops {}; writer stalls {}; ready after {}",
        bytes_or_na(r.written_bytes),
        count_or_na(r.files),
        r.dir,
        bytes_or_na(r.ring_high_water),
        bytes_or_na(r.ring_capacity),
        count_or_na(r.ring_full),
        count_or_na(r.write_stalls),
        r.ready_s.map_or("n/a".into(), |s| format!("{s:.3} s")),
    )
}

/// Join verify's verdict to the soak's: a recording that fails verify is never zero loss, and
/// the soak's one sentence says what verify found either way.
pub fn add_verify(doc: &mut super::SoakDoc, v: VerifyVerdict) {
    if !v.ok {
        doc.zero_loss = false;
    }
    doc.verdict = format!("{}; {}", doc.verdict, v.verdict);
    doc.summary.push(format!("{} ({})", v.verdict, v.command));
    let rec = doc.record.get_or_insert_with(SoakRecord::default);
    rec.verify = Some(v);
}

/// The recorder's columns of a table line: written MB, ring high water MiB, ring-full, stalls.
pub fn columns(r: &super::RecorderRow) -> String {
    let na = |v: Option<String>| v.unwrap_or_else(|| "n/a".into());
    format!(
        " {:>12} {:>11} {:>10} {:>7}",
        na(r.written_bytes.map(|b| format!("{:.1}", b as f64 / 1e6))),
        na(r.ring_high_water.map(|b| format!("{:.1}", b as f64 / (1u64 << 20) as f64))),
        na(r.ring_full.map(wirespeed::units::thousands)),
        na(r.write_stalls.map(wirespeed::units::thousands)),
    )
}

/// The recorder's column headings, matching [`columns`].
pub fn column_heads() -> String {
    format!(" {:>12} {:>11} {:>10} {:>7}", "written (MB)", "ring hw MiB", "ring-full", "stalls")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_report_gives_the_end_figures_and_missing_ones_are_none() {
        let r: serde_json::Value = serde_json::from_str(
            r#"{"schema":"wirespeed.record/1","capture":{"ring_full":0},
                "ring":{"capacity":1073741824,"high_water":9087120,"ring_full":0,"ready_s":0.21},
                "writer":{"files":[{},{}],"bytes":37640160,"records":34852,"write_stalls":2}}"#,
        )
        .unwrap();
        let s = from_report(Path::new("/r"), &r);
        assert_eq!((s.files, s.written_bytes, s.records), (Some(2), Some(37640160), Some(34852)));
        assert_eq!(
            (s.ring_high_water, s.ring_full, s.write_stalls, s.ready_s),
            (Some(9087120), Some(0), Some(2), Some(0.21))
        );
        // An older build: no ready_s, no writer at all.
        let r: serde_json::Value =
            serde_json::from_str(r#"{"capture":{"ring_full":5},"ring":{"capacity":8}}"#).unwrap();
        let s = from_report(Path::new("/r"), &r);
        assert_eq!((s.ready_s, s.written_bytes, s.write_stalls, s.ring_full), (None, None, None, Some(5)));
        assert_eq!(from_report(Path::new("/r"), &serde_json::Value::Null).files, None);
    }

    #[test]
    fn verify_verdicts() {
        let good = r#"{"schema":"wirespeed.verify/2","files":[{}],"records":100,"matching":1,"problems":0,"total":{"lost":0}}"#;
        let v = read_verify("v".into(), 0, good, Some(100));
        assert!(v.ok, "{v:?}");
        assert_eq!(v.verdict, "verified: 100 records in 1 file(s), every file matching its sidecar, 0 lost");
        // The files hold fewer records than the recorder received.
        let v = read_verify("v".into(), 0, good, Some(101));
        assert!(!v.ok && v.verdict.contains("the files hold 100 records, the recorder received 101"), "{}", v.verdict);
        let lossy = r#"{"schema":"wirespeed.verify/2","files":[{}],"records":90,"problems":0,"total":{"lost":10}}"#;
        let v = read_verify("v".into(), 3, lossy, None);
        assert!(!v.ok);
        assert_eq!(v.verdict, "verify FAILED: loss in the recording, 10 lost (90 records in 1 file(s))");
        let v = read_verify("v".into(), 4, "not json", None);
        assert_eq!(v.verdict, "verify FAILED: it printed no report (exit code 4)");
        assert_eq!((v.records, v.files), (None, None));
    }

    #[test]
    fn verdicts_of_parts_add_up_and_any_failing_part_fails_the_whole() {
        let part = |records: u64| {
            let doc = format!(
                r#"{{"schema":"wirespeed.verify/2","files":[{{}}],"records":{records},"matching":1,"problems":0,"total":{{"lost":0}}}}"#
            );
            read_verify(format!("verify f{records}"), 0, &doc, None)
        };
        let parts = [part(100), part(250), part(7)];
        let v = merge_verdicts(&parts, Some(357));
        assert!(v.ok, "{v:?}");
        assert_eq!((v.records, v.files, v.lost), (Some(357), Some(3), Some(0)));
        assert!(!merge_verdicts(&parts, Some(358)).ok, "the files must hold what the recorder received");
        let lossy = read_verify(
            "verify bad".into(),
            3,
            r#"{"schema":"wirespeed.verify/2","files":[{}],"records":9,"problems":0,"total":{"lost":1}}"#,
            None,
        );
        let v = merge_verdicts(&[part(100), lossy], Some(109));
        assert!(!v.ok && v.verdict.contains("verify bad"), "{}", v.verdict);
        assert_eq!(v.lost, Some(1));
    }

    #[test]
    fn only_files_with_a_finished_sidecar_are_taken() {
        let dir = std::env::temp_dir().join(format!("ws-soak-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["a-0001.raw", "a-0001.raw.json", "a-0002.raw.part", ".a-0002.raw.json.part", "b-0003.raw"] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        assert_eq!(finished_files(&dir), vec![dir.join("a-0001.raw")]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
