//! Live rings end to end: `record --share NAME` and `wirespeed tap NAME` on loopback (no root
//! needed: the share descriptors go to a directory of this test binary's own through
//! WIRESPEED_SHARE_DIR, and the taps are this user's processes).

use crate::common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `wirespeed tap`, started once it said it attached.
struct Tap {
    child: Child,
    stderr: std::thread::JoinHandle<String>,
}

fn spawn_tap(args: &[&str]) -> Tap {
    share_dir();
    let mut child = Command::new(bin())
        .arg("tap")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wirespeed tap");
    let mut err = BufReader::new(child.stderr.take().expect("stderr piped"));
    let mut first = String::new();
    err.read_line(&mut first).expect("read tap stderr");
    assert!(first.contains("wirespeed tap: attached to"), "tap did not attach: {first}");
    let stderr = std::thread::spawn(move || {
        let mut rest = first;
        let _ = err.read_to_string(&mut rest);
        rest
    });
    Tap { child, stderr }
}

/// The tap's exit code, stdout and stderr (killed after a minute: a hang is a failure).
fn finish_tap(mut t: Tap) -> (Option<i32>, String, String) {
    for _ in 0..3000 {
        if let Some(st) = t.child.try_wait().expect("wait tap") {
            let mut out = String::new();
            t.child.stdout.take().expect("stdout").read_to_string(&mut out).expect("read stdout");
            return (st.code(), out, t.stderr.join().expect("stderr"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = t.child.kill();
    let _ = t.child.wait();
    panic!("tap did not finish; stderr:\n{}", t.stderr.join().unwrap_or_default());
}

fn spawn_recorder(dir: &str, name: &str, buffer: &str) -> Receiver {
    spawn_share_recorder(&[], dir, name, &["--once", "--buffer", buffer, "--duration", "120"])
}

/// `record` of 1024-byte pcap records into `dir`, sharing its ring as `name`, run after
/// `prefix` (e.g. `ip netns exec NS`), with `extra` options.
fn spawn_share_recorder(prefix: &[&str], dir: &str, name: &str, extra: &[&str]) -> Receiver {
    share_dir();
    let mut args =
        vec!["--size", "1024", "--file-format", "pcap", "-o", dir, "--json", "--block", "1M", "--rcvbuf", "32M"];
    args.extend_from_slice(&["--share", name]);
    args.extend_from_slice(extra);
    spawn_cmd_with(prefix, "record", "127.0.0.1:0", &args)
}

/// `wirespeed ARGS` fails with `code` and exactly one line on stderr containing `needle`.
fn fails_in_one_line(args: &[&str], code: i32, needle: &str) {
    share_dir();
    expect_fail(args, code, needle);
}

const COUNTS: [&str; 5] = ["received", "lost", "late", "duplicate", "invalid"];

/// Two taps attached from the start of a recording with loss in it: each sees every record,
/// and its ledger (received, lost, late, duplicate, invalid, and the gaps) is the recorder's.
/// The pcap one tap writes verifies.
#[test]
fn two_taps_from_the_start_see_every_record_with_the_recorders_ledger() {
    let _g = traffic();
    let d = TempDir::new("tap-two");
    let rec = d.0.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    let r = spawn_recorder(rec.to_str().unwrap(), "two", "16M");
    let pcap = d.0.join("tap.pcap");
    let t1 = spawn_tap(&["two", "--json", "-w", pcap.to_str().unwrap()]);
    let t2 = spawn_tap(&["two", "--json", "--interval", "0.5"]);
    // 6050 datagrams, every 100th left out: 60 lost, all inside what the taps see (a tail loss
    // only the recorder knows, from the sender's end-of-stream message, which no record carries).
    send_to_port(r.port, &["--size", "1024", "--count", "6050", "--rate", "60kpps", "--skip-every", "100"]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let rec_rep = json(&stdout);
    let cap = &rec_rep["capture"]["total"];
    assert_eq!(u(cap, "lost"), 60, "{stdout}");
    assert_eq!(rec_rep["share"]["name"], "two");
    assert!(!std::path::Path::new(share_dir()).join("two.json").exists(), "descriptor removed at the end");
    for t in [t1, t2] {
        let (code, out, err) = finish_tap(t);
        assert_eq!(code, Some(0), "{err}");
        let tr = json(&out);
        assert_eq!(tr["schema"], "wirespeed.tap/1");
        assert_eq!(tr["ended_by"], "recorder ended");
        assert_eq!(u(&tr, "records"), 5990);
        assert_eq!(u(&tr["tap_overrun"], "records"), 0);
        for k in COUNTS {
            assert_eq!(u(&tr["total"], k), u(cap, k), "{k}: tap {out} recorder {stdout}");
        }
        assert_eq!(gap_list(&tr["streams"][0]), gap_list(&rec_rep["capture"]["streams"][0]));
    }
    let v = run(&["verify", pcap.to_str().unwrap(), "--format", "counter,size=1024", "--json"]);
    let vj = json(&String::from_utf8_lossy(&v.stdout));
    assert_eq!(u(&vj["files"][0], "records"), 5990, "{vj}");
    assert_eq!(vj["files"][0]["complete"], true, "{vj}");
    assert_eq!(u(&vj["files"][0]["total"], "lost"), 60);
}

/// A tap whose program does not read (blocked until the recording is over) falls behind by far
/// more than the ring: it loses records and counts them, exactly (delivered + overrun = all),
/// while the recorder drops nothing at its ring and every datagram is written and verifies.
#[test]
fn a_slow_tap_loses_its_own_records_never_the_recorders() {
    let _g = traffic();
    let d = TempDir::new("tap-slow");
    let rec = d.0.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    let flag = d.0.join("go");
    let r = spawn_recorder(rec.to_str().unwrap(), "slow", "4M");
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done; cat > /dev/null", flag.display());
    let slow = spawn_tap(&["slow", "--json", "--exec", &script]);
    send_to_port(r.port, &["--size", "1024", "--count", "20000", "--rate", "12kpps"]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(120));
    std::fs::write(&flag, b"").unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    let rec_rep = json(&stdout);
    assert_eq!(u(&rec_rep["ring"], "ring_full"), 0, "{stdout}");
    assert_eq!(u(&rec_rep["capture"]["total"], "received"), 20000, "{stdout}");
    assert_eq!(u(&rec_rep["writer"], "records"), 20000, "{stdout}");
    let v = run(&["verify", rec.to_str().unwrap(), "--json"]);
    assert_eq!(v.status.code(), Some(0), "{}", String::from_utf8_lossy(&v.stdout));
    let (code, out, err) = finish_tap(slow);
    assert_eq!(code, Some(0), "{err}");
    let tr = json(&out);
    let over = u(&tr["tap_overrun"], "records");
    assert!(over > 0, "20 MB through a 4 MiB ring past a tap that reads nothing: {out}");
    assert_eq!(u(&tr, "records") + over, 20000, "every record delivered or counted: {out}");
    assert_eq!(u(&tr["total"], "received"), u(&tr, "records"));
    assert_eq!(tr["exec_status"], 0);
}

#[test]
fn a_tap_on_a_name_nobody_shares_says_so() {
    fails_in_one_line(&["tap", "nobody-here"], 2, "no recorder shares \"nobody-here\"");
    fails_in_one_line(&["tap", "../etc"], 2, "is not usable");
}

#[test]
fn share_needs_pcap_and_a_ring() {
    let d = TempDir::new("tap-raw");
    fails_in_one_line(
        &["record", "127.0.0.1:0", "--size", "1024", "-o", d.path(), "--share", "rawx"],
        2,
        "needs --file-format pcap",
    );
    fails_in_one_line(
        &["record", "127.0.0.1:0", "--file-format", "pcap", "--sink", "null", "--share", "nullx"],
        2,
        "--sink null has none",
    );
}

/// A descriptor left by a dead recorder: a tap says it is stale; the next recorder of that
/// name replaces it. A second recorder of a live name is refused in one line.
#[test]
fn stale_descriptors_are_replaced_and_live_names_refused() {
    let _g = traffic();
    let dir = share_dir();
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let stale = format!(
        r#"{{"schema":"wirespeed.share/1","name":"stale","pid":{dead_pid},"start_ticks":1,"format":"counter","file_format":"pcap","window":65536,"listen":"127.0.0.1:1","rings":[]}}"#
    );
    let path = std::path::Path::new(dir).join("stale.json");
    std::fs::write(&path, stale).unwrap();
    fails_in_one_line(&["tap", "stale"], 2, "is stale");
    let d = TempDir::new("tap-stale");
    let r = spawn_recorder(d.path(), "stale", "8M");
    let desc: Value = json(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(u(&desc, "pid") as u32, r.child.id(), "replaced by the live recorder's");
    let d2 = TempDir::new("tap-dup");
    fails_in_one_line(
        &["record", "127.0.0.1:0", "--file-format", "pcap", "-o", d2.path(), "--share", "stale"],
        2,
        "in use by a running recorder",
    );
    send_to_port(r.port, &["--size", "1024", "--count", "100"]);
    let (code, _, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!path.exists(), "the recorder removed its descriptor");
}

/// Taps that attach in the middle of a recording: one from the newest data, one with
/// --from-start (the ring still holds everything). The first sees the rest, and says how many
/// records came before its start; the second sees them all. Rotated files (breaks in the ring)
/// are crossed on the way.
#[test]
fn a_late_tap_starts_at_the_newest_and_from_start_takes_what_the_ring_holds() {
    let _g = traffic();
    let d = TempDir::new("tap-late");
    let r = spawn_share_recorder(&[], d.path(), "late", &["--count", "6000", "--buffer", "16M", "--file-size", "1M"]);
    send_to_port(r.port, &["--size", "1024", "--count", "3000", "--rate", "60kpps"]);
    let late = spawn_tap(&["late", "--json"]);
    let early = spawn_tap(&["late", "--json", "--from-start"]);
    send_to_port(r.port, &["--size", "1024", "--count", "3000", "--rate", "60kpps", "--start-seq", "3000"]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let rec = json(&stdout);
    assert_eq!(u(&rec["capture"]["total"], "received"), 6000, "{stdout}");
    assert!(rec["writer"]["files"].as_array().unwrap().len() > 3, "several files: breaks in the ring");
    let (code, out, err) = finish_tap(early);
    assert_eq!(code, Some(0), "{err}");
    let e = json(&out);
    assert_eq!((u(&e, "records"), u(&e, "skipped_at_start")), (6000, 0), "{out}");
    assert_eq!(u(&e["total"], "lost"), 0, "{out}");
    let (code, out, err) = finish_tap(late);
    assert_eq!(code, Some(0), "{err}");
    let l = json(&out);
    // It started at the newest data: after at most the first sender's 3000 (the recorder may
    // not have taken them all in yet when it attached), before any of the second's.
    assert!(u(&l, "skipped_at_start") <= 3000 && u(&l, "records") >= 3000, "{out}");
    assert_eq!(u(&l, "records") + u(&l, "skipped_at_start"), 6000, "{out}");
    assert_eq!(u(&l["tap_overrun"], "records"), 0, "{out}");
}

/// `bench taps` end to end, small: every run accounted, taps see what the recorder received.
#[test]
fn bench_taps_runs_each_tap_count_and_reports_medians() {
    let _g = traffic();
    share_dir();
    let out = run(&["bench", "taps", "--count", "2000", "--pps", "20000", "--repeat", "1", "--taps", "0,2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(doc["schema"], "wirespeed.bench.taps/1");
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(u(r, "received"), 2000);
        assert_eq!(u(r, "ring_full"), 0);
        let recs: Vec<u64> = r["tap_records"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(recs, vec![2000; u(r, "taps") as usize]);
    }
    assert_eq!(doc["summary"].as_array().unwrap().len(), 2);
}

/// The recorder in one network namespace (a partition), the tap in another: the share crosses
/// namespaces (same host, same /proc and share directory), and the tap sees every record.
#[test]
#[ignore = "needs root"]
fn a_tap_in_another_namespace_reads_the_recording_exactly() {
    let _g = traffic();
    let rec_ns = Netns::new("taprec");
    let tap_ns = Netns::new("taptap");
    let d = TempDir::new("tap-ns");
    let r = spawn_share_recorder(&rec_ns.prefix(), d.path(), "nsx", &["--once", "--buffer", "16M"]);
    let mut args = tap_ns.prefix();
    args.extend_from_slice(&[bin(), "tap", "nsx", "--json"]);
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the tap in its namespace");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains("attached to nsx"), "{first}");
    let stderr = std::thread::spawn(move || {
        let mut rest = first;
        let _ = err.read_to_string(&mut rest);
        rest
    });
    let target = format!("127.0.0.1:{}", r.port);
    let out =
        run_prefixed(&rec_ns.prefix(), &["send", &target, "--size", "1024", "--count", "5000", "--rate", "50kpps"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, se) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{se}");
    let (code, out, err) = finish_tap(Tap { child, stderr });
    assert_eq!(code, Some(0), "{err}");
    let t = json(&out);
    let rec = json(&stdout);
    assert_eq!(u(&t, "records"), 5000, "{out}");
    for k in COUNTS {
        assert_eq!(u(&t["total"], k), u(&rec["capture"]["total"], k), "{k}");
    }
}

/// This process's start time (/proc/self/stat field 22), so that a descriptor naming this
/// process passes as a live recorder's.
fn own_start_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    s[s.rfind(')').unwrap() + 1..].split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// Write share descriptor `name` as a live "recorder" (this test process) would, with `rings`
/// (JSON).
fn forge_descriptor(name: &str, rings: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(share_dir()).join(format!("{name}.json"));
    let body = format!(
        r#"{{"schema":"wirespeed.share/1","name":"{name}","pid":{},"start_ticks":{},"format":"counter","file_format":"pcap","window":65536,"listen":"127.0.0.1:1","rings":{rings}}}"#,
        std::process::id(),
        own_start_ticks()
    );
    std::fs::write(&path, body).unwrap();
    path
}

/// A descriptor that names no ring is no recorder's: refused in one line, exit 2 (it used to
/// "attach" to nothing and exit 0).
#[test]
fn a_descriptor_without_rings_is_refused() {
    let path = forge_descriptor("norings", "[]");
    fails_in_one_line(&["tap", "norings"], 2, "names no ring");
    std::fs::remove_file(path).unwrap();
}

/// A forged descriptor naming regular files laid out as a share (a valid header, a ring file):
/// the tap refuses them before mapping anything, in one line. The old tap attached, and died
/// of SIGBUS once the ring file was truncated under its mapping.
#[test]
fn a_forged_descriptor_of_regular_files_is_refused_and_cannot_sigbus_the_tap() {
    let d = TempDir::new("tap-forged");
    let cap: u64 = 1 << 20;
    let (hdr, data) = (d.0.join("header"), d.0.join("ring"));
    // A header as a recorder writes it: magic, version, capacity, records published up to
    // the first 64 KiB of the ring, the frontier at one ring.
    let mut words = vec![0u64; 512];
    words[0] = u64::from_le_bytes(*b"WSSHARE1");
    words[1] = 1;
    words[2] = cap;
    words[4] = 24;
    words[6] = cap;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&hdr, &bytes).unwrap();
    std::fs::write(&data, vec![0u8; cap as usize]).unwrap();
    let rings = format!(r#"[{{"header":"{}","data":"{}","capacity":{cap}}}]"#, hdr.display(), data.display());
    let path = forge_descriptor("forged", &rings);
    let mut child = Command::new(bin())
        .args(["tap", "forged", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wirespeed tap");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    if first.contains("attached") {
        // What the old tap did: now shrink the ring under its mapping and publish past it.
        std::fs::OpenOptions::new().write(true).open(&data).unwrap().set_len(0).unwrap();
        words[4] = 200_000;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        std::fs::write(&hdr, &bytes).unwrap();
    }
    let t0 = std::time::Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the tap neither refused the descriptor nor ended; first line: {first}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    std::fs::remove_file(path).unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), None, "the tap died of a signal; stderr: {first}{rest}");
    assert_eq!(st.code(), Some(2), "{first}{rest}");
    assert!(first.contains("is not one of the recorder's own descriptors"), "{first}");
    assert!(rest.is_empty(), "one line: {first}{rest}");
}

/// A genuine recorder's shared memfds cannot be truncated (sealed), not even by root, so a tap
/// reading them can never meet a SIGBUS; the recording and a tap on it are untouched by the
/// attempt.
#[test]
fn a_recorders_shared_ring_cannot_be_truncated() {
    let _g = traffic();
    let d = TempDir::new("tap-seal");
    let r = spawn_recorder(d.path(), "sealed", "8M");
    let desc = json(&std::fs::read_to_string(std::path::Path::new(share_dir()).join("sealed.json")).unwrap());
    let t = spawn_tap(&["sealed", "--json"]);
    for ring in desc["rings"].as_array().unwrap() {
        for k in ["data", "header"] {
            let p = ring[k].as_str().unwrap();
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            let e = f.set_len(0).expect_err("a shared memfd must not shrink");
            assert_eq!(e.raw_os_error(), Some(1), "EPERM (sealed) for {p}: {e}");
        }
    }
    send_to_port(r.port, &["--size", "1024", "--count", "3000", "--rate", "30kpps"]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let rec = json(&stdout);
    let (code, out, err) = finish_tap(t);
    assert_eq!(code, Some(0), "{err}");
    let tr = json(&out);
    assert_eq!(u(&tr, "records"), u(&rec["capture"]["total"], "received"), "{out}");
    assert_eq!(u(&tr, "records"), 3000, "{out}");
}
