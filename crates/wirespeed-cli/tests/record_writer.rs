//! The recorder's writer end to end: several writes in flight, and a slow disk (the writer's
//! test knob `WIRESPEED_WRITE_DELAY_MS`) that fills the ring, where every datagram the sender
//! sent is either in the files or counted as ring-full, exactly.

use crate::common;

use common::send_to_port as send;
use common::visible_files as files;
use common::*;
use serde_json::Value;
use std::time::Duration;

fn verify_json(dir: &str) -> (Option<i32>, Value) {
    let out = run(&["verify", dir, "--json"]);
    (out.status.code(), json(&String::from_utf8_lossy(&out.stdout)))
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn a_slow_disk_fills_the_ring_and_every_datagram_is_written_or_counted_ring_full() {
    let _t = traffic();
    let d = TempDir::new("rec-slow-disk");
    // Each 64 KiB write waits 200 ms: the writer drains at most 320 records/s, while the 6000
    // datagrams wait in a socket buffer that holds them all (so the kernel drops none) and the
    // capture thread takes them as fast as it can into a 256 KiB ring (256 records).
    let r = spawn_cmd_with(
        &["env", "WIRESPEED_WRITE_DELAY_MS=200", "WIRESPEED_WRITE_DEPTH=1"],
        "record",
        "127.0.0.1:0",
        &[
            "--size",
            "1024",
            "-o",
            d.path(),
            "--once",
            "--json",
            "--buffer",
            "256K",
            "--block",
            "64K",
            "--duration",
            "120",
            "--rcvbuf",
            "32M",
        ],
    );
    let sent = 6000u64;
    send(r.port, &["--size", "1024", "--count", "6000", "--rate", "100kpps"]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    let cap = &rep["capture"];
    let ring_full = u(cap, "ring_full");
    let received = u(&cap["total"], "received");
    assert!(ring_full > 0, "the ring never filled: {stdout}");
    assert_eq!(received + ring_full, sent, "every datagram is received or counted ring-full: {stdout}");
    assert_eq!(u(&cap["total"], "lost"), ring_full, "ring-full is the only loss: {stdout}");
    assert_eq!(u(&rep["ring"], "ring_full"), ring_full);
    let w = &rep["writer"];
    assert_eq!(u(w, "records"), received, "every record received into the ring reached the disk");
    assert_eq!(u(w, "unwritten_records"), 0);
    assert_eq!(u(w, "write_depth"), 1);
    // Every write waited 200 ms before it started: the latency is the disk's, not the pause.
    assert!(f(w, "write_p50_ms") <= f(w, "write_p99_ms") && f(w, "write_p99_ms") <= f(w, "max_write_ms") + 0.01);
    // verify re-reads the files: exactly the records written, and no problem.
    let (vcode, v) = verify_json(d.path());
    assert_eq!(vcode, Some(0), "{v}");
    assert_eq!(u(&v, "problems"), 0, "{v}");
    assert_eq!(u(&v["total"], "received"), received, "{v}");
    // The sidecar counts the ring-full drops of its file.
    let raw = files(&d.0, ".raw");
    assert_eq!(raw.len(), 1);
    let side = json(&std::fs::read_to_string(format!("{}.json", raw[0].display())).unwrap());
    assert_eq!(u(&side, "ring_full"), ring_full, "{side}");
}

#[test]
fn four_writes_in_flight_from_threads_keep_files_and_ledgers_exact() {
    in_flight("threads");
}

#[test]
fn four_writes_in_flight_through_io_uring_keep_files_and_ledgers_exact() {
    in_flight("io_uring");
}

fn in_flight(engine: &str) {
    let _t = traffic();
    let d = TempDir::new("rec-depth");
    let engine_env = format!("WIRESPEED_WRITE_ENGINE={engine}");
    let r = spawn_cmd_with(
        &["env", "WIRESPEED_WRITE_DEPTH=4", &engine_env],
        "record",
        "127.0.0.1:0",
        &[
            "--size",
            "1024",
            "-o",
            d.path(),
            "--once",
            "--json",
            "--buffer",
            "16M",
            "--block",
            "64K",
            "--file-size",
            "1M",
            "--duration",
            "60",
            "--rcvbuf",
            "32M",
        ],
    );
    send(r.port, &["--size", "1024", "--count", "6000", "--rate", "60kpps", "--skip", "100..109"]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    let w = &rep["writer"];
    assert_eq!(u(w, "write_depth"), 4);
    // io_uring can be forbidden (kernel.io_uring_disabled, seccomp): then threads, with a note.
    let got = w["write_engine"].as_str().unwrap();
    assert!(got == engine || (got == "threads" && w["notes"].to_string().contains("io_uring")), "{w}");
    assert_eq!(u(w, "records"), 5990, "{w}");
    assert_eq!(u(&rep["capture"]["total"], "lost"), 10);
    assert!(u(w, "writes") >= 94, "6000 KiB in 64 KiB writes: {w}");
    assert!(f(w, "cpu_s") > 0.0);
    // 5990 records of 1024 bytes in files of at most 1 MiB (1024 records): 6 files.
    assert_eq!(w["files"].as_array().unwrap().len(), 6, "{w}");
    assert!(files(&d.0, ".part").is_empty());
    let (vcode, v) = verify_json(d.path());
    assert_eq!(vcode, Some(0), "{v}");
    assert_eq!(u(&v, "problems"), 0, "{v}");
    assert_eq!(u(&v["total"], "received"), 5990);
    assert_eq!(u(&v["total"], "lost"), 10);
    assert_eq!(gap_list(&v["streams"][0]), vec![(100, 109)]);
}

#[test]
fn the_ring_report_says_its_pages_and_time_to_ready() {
    let _t = traffic();
    let d = TempDir::new("rec-pages");
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &["--size", "1024", "-o", d.path(), "--once", "--json", "--buffer", "64M", "--duration", "60"],
    );
    send(r.port, &["--size", "1024", "--count", "100", "--rate", "10kpps"]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let ring = &json(&stdout)["ring"];
    let pages = ring["pages"].as_str().unwrap();
    assert!(["hugetlb", "transparent", "normal"].contains(&pages), "{ring}");
    assert!(f(ring, "ready_s") >= 0.0 && ring["populated_s"].is_number(), "{ring}");
}
