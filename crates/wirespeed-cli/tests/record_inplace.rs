//! Receiving straight into the ring: what the capture rejects (a duplicate, an invalid
//! datagram) leaves no byte in the file, the sidecar counts it as not written, and a ring
//! that wraps many times still holds exactly what was kept, in order.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const LEN: usize = 1024;
/// pcap global header, and per record: record header + IPv4 + UDP headers.
const PCAP_GLOBAL: u64 = 24;
const PCAP_OVERHEAD: u64 = 16 + 20 + 8;

/// A counter datagram (big-endian words numbered from `seq * words`), as `--format counter`.
fn counter(seq: u64, len: usize) -> Vec<u8> {
    let w = (len / 8) as u64;
    (0..w).flat_map(|i| (seq * w + i).to_be_bytes()).collect()
}

fn end(first: u64, last: u64) -> [u8; 80] {
    end_message(15, first, last)
}

use common::sender_to as socket;

/// `wirespeed verify DIR --json`: exit code and report.
fn verify(dir: &str) -> (Option<i32>, Value) {
    let out = run(&["verify", dir, "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    (out.status.code(), json(&String::from_utf8_lossy(&out.stdout)))
}

/// The one sidecar in `dir`.
fn sidecar(dir: &Path) -> Value {
    let s = visible_files(dir, ".json");
    assert_eq!(s.len(), 1, "one sidecar: {s:?}");
    json(&std::fs::read_to_string(&s[0]).unwrap())
}

/// Record `args` on a fresh port; send counter datagrams 0..100, a copy of 50, a datagram
/// of the right length that is no counter, 100..200 and the end message. Returns the report.
fn record_with_rejects(d: &TempDir, args: &[&str]) -> Value {
    let mut a = vec!["--size", "1024", "-o", d.path(), "--once", "--json", "--buffer", "8M", "--block", "1M"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--duration", "60"]);
    let r = spawn_cmd_with(&[], "record", "127.0.0.1:0", &a);
    let s = socket(r.port);
    for seq in 0..100 {
        s.send(&counter(seq, LEN)).unwrap();
    }
    s.send(&counter(50, LEN)).unwrap();
    s.send(&[0x5au8; LEN]).unwrap();
    for seq in 100..200 {
        s.send(&counter(seq, LEN)).unwrap();
    }
    s.send(&end(0, 199)).unwrap();
    let (code, out, err) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    json(&out)
}

fn assert_counted(rep: &Value) {
    let t = &rep["capture"]["total"];
    assert_eq!((u(t, "received"), u(t, "duplicate"), u(t, "invalid"), u(t, "lost")), (200, 1, 1, 0), "{t}");
    assert_eq!(u(&rep["ring"], "ring_full"), 0);
}

#[test]
fn pcap_leaves_out_a_duplicate_and_an_invalid_datagram() {
    let _t = traffic();
    let d = TempDir::new("inplace-pcap");
    let rep = record_with_rejects(&d, &["--file-format", "pcap"]);
    assert_counted(&rep);
    let f = &visible_files(&d.0, ".pcap")[0];
    let bytes = std::fs::metadata(f).unwrap().len();
    assert_eq!(bytes, PCAP_GLOBAL + 200 * (PCAP_OVERHEAD + LEN as u64), "exactly the kept records");
    let side = sidecar(&d.0);
    assert_eq!((u(&side, "records"), u(&side, "not_written")), (200, 2), "{side}");
    assert_eq!((u(&side["total"], "duplicate"), u(&side["total"], "invalid")), (0, 0), "{side}");
    let (code, v) = verify(d.path());
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["files"][0]["content"], "matches");
}

#[test]
fn raw_leaves_out_a_duplicate_and_an_invalid_datagram() {
    let _t = traffic();
    let d = TempDir::new("inplace-raw");
    let rep = record_with_rejects(&d, &["--file-format", "raw"]);
    assert_counted(&rep);
    let f = &visible_files(&d.0, ".raw")[0];
    let data = std::fs::read(f).unwrap();
    assert_eq!(data.len(), 200 * LEN, "exactly the kept records");
    for (seq, rec) in data.chunks(LEN).enumerate() {
        assert_eq!(rec, &counter(seq as u64, LEN)[..], "record {seq}");
    }
    let side = sidecar(&d.0);
    assert_eq!((u(&side, "records"), u(&side, "not_written")), (200, 2), "{side}");
    let (code, v) = verify(d.path());
    assert_eq!(code, Some(0), "{v}");
}

/// `--keep-invalid` keeps the evidence (the invalid datagram), never the duplicate.
#[test]
fn keep_invalid_writes_the_invalid_datagram_but_not_the_duplicate() {
    let _t = traffic();
    let d = TempDir::new("inplace-keep");
    let rep = record_with_rejects(&d, &["--file-format", "pcap", "--keep-invalid"]);
    assert_counted(&rep);
    let f = &visible_files(&d.0, ".pcap")[0];
    assert_eq!(std::fs::metadata(f).unwrap().len(), PCAP_GLOBAL + 201 * (PCAP_OVERHEAD + LEN as u64));
    let side = sidecar(&d.0);
    assert_eq!((u(&side, "records"), u(&side, "not_written")), (201, 1), "{side}");
    assert_eq!((u(&side["total"], "duplicate"), u(&side["total"], "invalid")), (0, 1), "{side}");
    let (code, v) = verify(d.path());
    assert_eq!(code, Some(0), "{v}");
}

/// A 128 KiB ring, wrapped over a hundred times by datagrams whose size does not divide it
/// (slots stop short of the end, the rest of such a batch is copied across it): the file holds
/// every kept datagram once, whole, in order, and nothing else.
fn wraps(format: &str, ext: &str, per_record: u64) {
    let _t = traffic();
    let d = TempDir::new(&format!("inplace-wrap-{format}"));
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &[
            "--size",
            "1000",
            "-o",
            d.path(),
            "--file-format",
            format,
            "--once",
            "--json",
            "--buffer",
            "128K",
            "--block",
            "64K",
            "--flush",
            "10ms",
            "--duration",
            "120",
        ],
    );
    send_to_port(r.port, &["--size", "1000", "--count", "20000", "--rate", "20kpps"]);
    let (code, out, err) = finish(r, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{err}");
    let rep = json(&out);
    let t = &rep["capture"]["total"];
    let ring_full = u(&rep["ring"], "ring_full");
    let kept = u(t, "received");
    // Whatever the ring could not take is lost (and counted); every datagram is accounted for.
    assert_eq!(kept + ring_full, 20000, "{rep}");
    assert_eq!(u(t, "lost"), ring_full, "{t}");
    let f = &visible_files(&d.0, ext)[0];
    let data = std::fs::read(f).unwrap();
    let head = if format == "pcap" { PCAP_GLOBAL as usize } else { 0 };
    assert_eq!(data.len() as u64, head as u64 + kept * per_record, "exactly the kept records");
    // Every record is a whole counter datagram, numbers rising.
    let mut last = None;
    for rec in data[head..].chunks(per_record as usize) {
        let payload = &rec[rec.len() - 1000..];
        let seq = u64::from_be_bytes(payload[..8].try_into().unwrap()) / 125;
        assert_eq!(payload, &counter(seq, 1000)[..], "record of {seq}");
        assert!(last.map_or(true, |l| seq > l), "{seq} after {last:?}");
        last = Some(seq);
    }
    let side = sidecar(&d.0);
    assert_eq!(u(&side, "records"), kept);
    let (code, v) = verify(d.path());
    assert_eq!(v["files"][0]["content"], "matches", "{v}");
    if ring_full == 0 {
        assert_eq!(code, Some(0), "{v}");
    }
}

#[test]
fn raw_ring_wraps_many_times_with_exact_contents() {
    wraps("raw", ".raw", 1000);
}

#[test]
fn pcap_ring_wraps_many_times_with_exact_contents() {
    wraps("pcap", ".pcap", PCAP_OVERHEAD + 1000);
}
