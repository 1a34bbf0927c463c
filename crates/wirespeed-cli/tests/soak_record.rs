//! `bench soak --record DIR` end to end (seed 001's whole challenge, short): the soak through
//! `wirespeed record` in two partitions, the recorder's figures in its rows, `wirespeed verify`'s
//! verdict in the report, and the files verifying on their own; a non-empty directory refused.

use crate::common;
use common::*;
use serde_json::Value;
use std::path::PathBuf;

/// A fresh recording directory on the target's disk (O_DIRECT needs a real filesystem), removed
/// when dropped, failure or not.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Dir(p)
    }
    fn s(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no count '{key}' in {v}"))
}

/// A 5 s soak at 20 Mb/s of 1080-byte datagrams, one row per second, recorded into `dir`.
fn soak_record(dir: &Dir) -> Value {
    let out =
        run(&["bench", "soak", "--record", dir.s(), "--rate", "20M", "--duration", "5s", "--every", "1s", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "bench soak --record failed:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    json(&String::from_utf8_lossy(&out.stdout))
}

#[test]
#[ignore = "needs root"]
fn soak_through_the_recorder_verifies_its_recording() {
    let _turn = traffic();
    let dir = Dir::new("soak-record");
    let doc = soak_record(&dir);
    assert_eq!(doc["placement"]["kind"], "partitions", "{doc}");
    let prefix = doc["placement"]["prefix"].as_str().expect("prefix").to_string();
    let p = &doc["point"];
    let received = u(p, "received");
    assert!(received > 0 && u(p, "lost") == 0 && received == u(p, "sent"), "{p}");
    assert_eq!(doc["zero_loss"], true, "{doc}");
    // The verify verdict, in the JSON and in the one sentence.
    let rec = &doc["record"];
    let v = &rec["verify"];
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(u(v, "records"), received, "verify counts exactly what the recorder's ledger received");
    assert_eq!(u(v, "lost"), 0);
    let verdict = doc["verdict"].as_str().unwrap();
    assert!(verdict.contains(&format!("verified: {} records", commas(received))), "{verdict}");
    // The recorder's end figures: every record written, nothing dropped at the ring.
    assert_eq!(u(rec, "written_bytes"), received * 1080, "{rec}");
    assert_eq!(u(rec, "records"), received);
    assert_eq!(u(rec, "ring_full"), 0);
    assert!(u(rec, "ring_high_water") > 0 && u(rec, "ring_high_water") <= u(rec, "ring_capacity"));
    // Every row carries the recorder's columns; the rows add up to the totals.
    let rows = doc["intervals"].as_array().expect("rows");
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r["recorder"].is_object()), "{rows:?}");
    let datagrams: u64 = rows.iter().map(|r| u(r, "datagrams")).sum();
    assert_eq!(datagrams, received);
    let last = rows.last().unwrap();
    assert_eq!(last["to_end"], true);
    let written: u64 = rows.iter().filter_map(|r| r["recorder"]["written_bytes"].as_u64()).sum();
    assert_eq!(written, received * 1080, "the rows' written bytes add up to the recording");
    // The files verify on their own, and nothing else was left in the directory.
    let out = run(&["verify", dir.s(), "--json", "--expect-zero-loss"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let vd = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(u(&vd, "records"), received);
    let names: Vec<String> =
        std::fs::read_dir(&dir.0).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| n.starts_with("wirespeed-")), "{names:?}");
    assert_partitions_gone(&prefix);
}

/// The rows come from the recorder's `--interval-json` lines: one row per second, each with the
/// bytes written in it. Needs a recorder that prints its progress as JSON (record
/// --interval-json with written_bytes and ring_high_water).
#[test]
#[ignore = "needs root"]
fn soak_through_the_recorder_has_a_row_per_interval() {
    let _turn = traffic();
    let dir = Dir::new("soak-record-rows");
    let doc = soak_record(&dir);
    let rows = doc["intervals"].as_array().expect("rows");
    assert!(rows.len() >= 4, "a 5 s soak with a row per 1 s has at least 4 rows: {rows:?}");
    for r in &rows[..rows.len() - 1] {
        let rec = &r["recorder"];
        assert!(rec["written_bytes"].is_u64(), "row {} has no written bytes: {r}", r["n"]);
        assert!(rec["ring_high_water"].is_u64(), "row {} has no ring high water: {r}", r["n"]);
        assert_eq!(rec["ring_full"], 0, "{r}");
    }
    assert_eq!(doc["record"]["verify"]["ok"], true);
}

#[test]
fn soak_record_refuses_a_directory_that_holds_files() {
    let dir = Dir::new("soak-record-busy");
    std::fs::create_dir_all(&dir.0).unwrap();
    std::fs::write(dir.0.join("mine.txt"), b"the user's").unwrap();
    let out = run(&["bench", "soak", "--loopback", "--record", dir.s(), "--duration", "2s", "--every", "1s"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("already holds 1 entry") && err.contains("empty or new directory"), "{err}");
    assert_eq!(std::fs::read(dir.0.join("mine.txt")).unwrap(), b"the user's", "the user's file is untouched");
}
