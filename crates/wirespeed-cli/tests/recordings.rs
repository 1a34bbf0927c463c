//! `wirespeed recordings`: directories of real recordings (the recorder and sender on
//! loopback), listed from their sidecars: runs, losses and holes the sender put there on
//! purpose, files being written, files that lost or broke their sidecar, and --verify.

use crate::common;

use common::*;
use common::{send_to_port as send, visible_files as files};
use serde_json::Value;
use std::time::Duration;

/// `record 127.0.0.1:0 --size SIZE -o DIR --once ...` until the sender's end of stream.
fn record_once(dir: &str, extra: &[&str], size: &str, send_args: &[&str]) {
    let mut args = vec!["--size", size, "-o", dir, "--once", "--buffer", "16M", "--block", "1M"];
    args.extend_from_slice(&["--duration", "60", "--rcvbuf", "32M"]);
    args.extend_from_slice(extra);
    let r = spawn_cmd_with(&[], "record", "127.0.0.1:0", &args);
    let mut s = vec!["--size", size];
    s.extend_from_slice(send_args);
    send(r.port, &s);
    let (code, _, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
}

/// `recordings ARGS --json`: its exit code and document; never a panic.
fn listing(args: &[&str]) -> (Option<i32>, Value) {
    let mut a = vec!["recordings"];
    a.extend_from_slice(args);
    a.push("--json");
    let out = run(&a);
    let err = stderr_of(&out);
    assert!(!err.contains("panicked"), "{err}");
    let doc = json(&stdout_of(&out));
    assert_eq!(doc["schema"], "wirespeed.recordings/1");
    (out.status.code(), doc)
}

fn holes(run: &Value) -> Vec<(u64, u64)> {
    let mut h: Vec<(u64, u64)> =
        run["holes"].as_array().expect("holes").iter().map(|g| (u(g, "first"), u(g, "last"))).collect();
    h.sort();
    h
}

fn states(run: &Value) -> Vec<String> {
    run["files"].as_array().expect("files").iter().map(|f| f["state"].as_str().unwrap().to_string()).collect()
}

#[test]
fn recordings_two_runs_exact_loss_then_lost_and_broken_sidecars() {
    let _turn = traffic();
    let d = TempDir::new("recordings-two");
    // Run 1: 3000 datagrams of 1024 bytes, every 100th left out; files of 1 MiB (1024 records):
    // 2970 records in 3 files. The last one left out (2999) is after the last record, so no
    // file can know of it: 29 lost, wherever the file boundaries fall.
    record_once(
        d.path(),
        &["--prefix", "alpha", "--file-size", "1M"],
        "1024",
        &["--count", "3000", "--rate", "60kpps", "--skip-every", "100"],
    );
    // Run 2: 500 datagrams in pcap, none lost.
    record_once(
        d.path(),
        &["--prefix", "beta", "--file-format", "pcap"],
        "1024",
        &["--count", "500", "--rate", "50kpps"],
    );
    std::fs::write(d.0.join("notes.txt"), b"not a recording").unwrap();

    let (code, doc) = listing(&[d.path()]);
    assert_eq!(code, Some(0), "{doc}");
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{doc}");
    let (a, b) = (&runs[0], &runs[1]);
    assert_eq!(a["prefixes"], serde_json::json!(["alpha"]));
    assert_eq!(b["prefixes"], serde_json::json!(["beta"]));
    assert!(a["id"].as_str().is_some_and(|i| i.len() == 32) && a["id"] != b["id"], "{doc}");
    assert_eq!((u(a, "file_count"), u(a, "records"), u(a, "lost"), u(a, "indexed")), (3, 2970, 29, 3));
    assert_eq!(u(a, "bytes"), 2970 * 1024);
    assert_eq!(a["state"], "complete");
    assert_eq!(a["file_format"], "raw");
    let lost: Vec<u64> = (0..2999).filter(|s| s % 100 == 99).collect();
    assert_eq!(holes(a), ranges(&lost), "{a}");
    assert_eq!(u(a, "holes_total"), 29);
    let s = &a["streams"][0];
    assert_eq!(a["streams"].as_array().unwrap().len(), 1);
    assert_eq!(
        (u(s, "received"), u(s, "lost"), u(s, "first_seq"), u(s, "last_seq"), u(s, "gaps")),
        (2970, 29, 0, 2998, 29)
    );
    assert_eq!(u(s, "lost_in_files") + u(s, "lost_between_files"), 29);
    assert_eq!((u(b, "file_count"), u(b, "records"), u(b, "lost"), u(b, "holes_total")), (1, 500, 0, 0));
    assert_eq!(b["file_format"], "pcap");
    assert!(b["streams"][0]["source"].as_str().is_some_and(|x| x.starts_with("127.0.0.1:")), "{b}");
    assert!(a["duration_s"].as_f64().is_some_and(|x| x >= 0.0));
    assert!(doc["verified"].is_null() && a["verified"].is_null(), "not checked without --verify");
    let dir = &doc["directories"][0];
    assert_eq!((u(dir, "files"), u(dir, "stray")), (4, 1));
    assert!(u(dir, "total_bytes") >= u(dir, "free_bytes"));

    // The human table: one line per run, then the disk.
    let out = run(&["recordings", d.path()]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout_of(&out);
    assert!(text.lines().next().is_some_and(|l| l.starts_with("START (UTC)")), "{text}");
    assert!(text.contains("stream 0: 2,970 received, 29 lost"), "{text}");
    assert!(text.contains(&format!("disk of {}: ", d.path())), "{text}");

    // The pcap's sidecar deleted, the second raw file's sidecar broken: both files stay listed.
    let pcap = &files(&d.0, ".pcap")[0];
    std::fs::remove_file(format!("{}.json", pcap.display())).unwrap();
    let raws = files(&d.0, ".raw");
    assert_eq!(raws.len(), 3);
    std::fs::write(format!("{}.json", raws[1].display()), b"{\"schema\": \"wirespeed.recording/2\", \"bytes\": 1e999")
        .unwrap();
    let (code, doc) = listing(&[d.path()]);
    assert_eq!(code, Some(0), "{doc}");
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{doc}");
    let a = runs.iter().find(|r| r["prefixes"][0] == "alpha").expect("alpha");
    let b = runs.iter().find(|r| r["prefixes"][0] == "beta").expect("beta");
    // The file with a broken sidecar stays in its run (its name's prefix has one run).
    assert_eq!(states(a), ["complete", "bad sidecar", "complete"], "{a}");
    assert_eq!(a["state"], "incomplete");
    assert!(a["files"][1]["notes"][0].as_str().is_some_and(|n| n.contains("not a wirespeed sidecar")), "{a}");
    assert_eq!(u(a, "file_count"), 3);
    // The pcap without a sidecar: its own run, without an id.
    assert_eq!(states(b), ["no sidecar"], "{b}");
    assert!(b["id"].is_null() && b["files"][0]["records"].is_null(), "{b}");
}

#[test]
fn recordings_verify_passes_then_fails_after_a_byte_changes() {
    let _turn = traffic();
    let d = TempDir::new("recordings-verify");
    record_once(d.path(), &[], "800", &["--count", "2000", "--rate", "50kpps"]);
    let (code, doc) = listing(&[d.path(), "--verify"]);
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(doc["verified"], true);
    assert_eq!(doc["runs"][0]["verified"], true);
    assert!(doc["runs"][0]["verify_problem"].is_null());
    // Flip one byte in record 1000: its counter pattern breaks.
    let f = &files(&d.0, ".raw")[0];
    let mut data = std::fs::read(f).unwrap();
    data[1000 * 800 + 123] ^= 0x40;
    std::fs::write(f, &data).unwrap();
    let (code, doc) = listing(&[d.path(), "--verify"]);
    assert_eq!(code, Some(4), "{doc}");
    assert_eq!(doc["verified"], false);
    let r = &doc["runs"][0];
    assert_eq!(r["verified"], false);
    let name = f.file_name().unwrap().to_str().unwrap();
    assert!(r["verify_problem"].as_str().is_some_and(|p| p.starts_with(name)), "{r}");
    // Without --verify the sidecars alone cannot tell.
    assert_eq!(listing(&[d.path()]).0, Some(0));
    let out = run(&["recordings", d.path(), "--verify"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(stdout_of(&out).contains("VERIFY FAILED"), "{}", stdout_of(&out));
}

#[test]
fn recordings_shows_a_part_being_written_as_recording() {
    let _turn = traffic();
    let d = TempDir::new("recordings-part");
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &["--size", "1024", "-o", d.path(), "--buffer", "16M", "--block", "1M", "--flush", "200ms"],
    );
    let mut sender = spawn_send(r.port, &["--size", "1024", "--rate", "20kpps", "--count", "40000"]);
    wait_part_file(&d.0, 1024 * 10);
    let (code, doc) = listing(&[d.path()]);
    let mut rec = r.child;
    let pid = rec.id();
    rec.kill().unwrap();
    let _ = rec.wait();
    let _ = sender.kill();
    let _ = sender.wait();
    assert_eq!(code, Some(0), "{doc}");
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{doc}");
    let run0 = &runs[0];
    assert_eq!(run0["state"], "recording");
    assert_eq!(states(run0), ["recording"]);
    assert!(run0["files"][0]["name"].as_str().is_some_and(|n| n.ends_with(".raw.part")), "{run0}");
    // The provisional sidecar names the run and the recorder.
    assert!(run0["id"].as_str().is_some_and(|i| i.len() == 32), "{run0}");
    assert_eq!(u(run0, "pid"), pid as u64);
    // Killed: still a .part, and its recorder is said to be gone.
    let (_, doc) = listing(&[d.path()]);
    let f = &doc["runs"][0]["files"][0];
    assert_eq!(f["state"], "recording");
    assert!(f["notes"].to_string().contains("is not running"), "{f}");
    // --verify leaves a file being written out: nothing checked, nothing failed.
    let (code, doc) = listing(&[d.path(), "--verify"]);
    assert_eq!(code, Some(0), "{doc}");
    assert!(doc["runs"][0]["verified"].is_null(), "{doc}");
}

#[test]
fn recordings_missing_or_empty_directories() {
    let d = TempDir::new("recordings-empty");
    let missing = d.0.join("not-there");
    expect_fail(&["recordings", missing.to_str().unwrap()], 2, "not-there");
    expect_fail(&["recordings", d.path(), missing.to_str().unwrap(), "--json"], 2, "not-there");
    let out = run(&["recordings", d.path()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout_of(&out).starts_with(&format!("no recordings in {}\n", d.path())), "{}", stdout_of(&out));
    std::fs::write(d.0.join("x.json"), b"[1, 2").unwrap();
    std::fs::write(d.0.join("other.pcap"), b"").unwrap();
    let (code, doc) = listing(&[d.path()]);
    assert_eq!(code, Some(0));
    assert_eq!(doc["runs"], serde_json::json!([]));
    assert_eq!(u(&doc["directories"][0], "stray"), 2);
}
