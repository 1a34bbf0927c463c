//! `verify` claims nothing it did not check, keeps a file's content, its completeness and the
//! stream's loss apart, and `record` writes only inside `-o`, never over another file.

use crate::common;

use common::*;
use common::{send_to_port as send, visible_files as files_ending};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `wirespeed ARGS`, which must end within `limit` (killed and failed otherwise).
fn run_limited(args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wirespeed");
    let t = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            let out = child.wait_with_output().expect("output");
            return (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("wirespeed {args:?} still ran after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn verify_json(args: &[&str]) -> (Option<i32>, Value) {
    let mut a = vec!["verify"];
    a.extend_from_slice(args);
    a.push("--json");
    let (code, out, err) = run_limited(&a, Duration::from_secs(60));
    assert!(!err.contains("panicked"), "{err}");
    (code, json(&out))
}

fn problems(f: &Value) -> String {
    f["problems"].to_string()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("list dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    v.sort();
    v
}

/// A raw recording of `n` counter datagrams of 1024 bytes (with its sidecar) in `dir`.
fn record_raw(dir: &str, n: u64) {
    let _t = traffic();
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &["--size", "1024", "-o", dir, "--once", "--buffer", "8M", "--block", "1M", "--duration", "60"],
    );
    send(r.port, &["--size", "1024", "--count", &n.to_string(), "--rate", "20kpps"]);
    let (code, _, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
}

/// A counter file of `n` datagrams of `size` bytes, back to back (a raw file with no sidecar).
fn counter_file(path: &Path, size: usize, n: u64) {
    let fmt = wirespeed::wire::spec::parse(&format!("counter,size={size}")).unwrap();
    let mut buf = vec![0u8; size];
    let mut out = Vec::new();
    for seq in 0..n {
        fmt.emit(0, seq, &mut buf);
        out.extend_from_slice(&buf);
    }
    std::fs::write(path, out).unwrap();
}

// ---- item 3: verify passes only what it read ----

/// tcpdump on lo, started and waited for ("listening on"), stopped with SIGINT.
struct Tcpdump(Child);

impl Tcpdump {
    fn start(port: u16, file: &Path, snap: Option<&str>) -> Tcpdump {
        let mut args = vec!["-i".to_string(), "lo".into(), "-n".into(), "-U".into(), "-Z".into(), "root".into()];
        if let Some(s) = snap {
            args.extend(["-s".to_string(), s.to_string()]);
        }
        args.extend(["-w".to_string(), file.to_str().unwrap().to_string(), format!("udp port {port}")]);
        let mut child = Command::new("tcpdump")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (installed by scripts/test.sh)");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.kill();
                panic!("tcpdump ended before it was listening: {seen}");
            }
            seen.push_str(&line);
            if line.contains("listening on") {
                break;
            }
        }
        // Keep draining its stderr so that it never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut rest);
        });
        Tcpdump(child)
    }

    fn stop(mut self) {
        let pid = self.0.id().to_string();
        let st = Command::new("kill").args(["-INT", &pid]).status().expect("kill");
        assert!(st.success());
        let st = self.0.wait().expect("wait for tcpdump");
        assert!(st.success() || st.code().is_none(), "tcpdump: {st}");
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
#[ignore = "needs root"]
fn snap_length_capture_is_a_named_problem_not_a_pass() {
    let d = TempDir::new("tv-snap");
    let _t = traffic();
    let r = spawn_recv(&["--once", "--size", "1024", "--duration", "60"]);
    let snap = d.0.join("snap.pcap");
    let whole = d.0.join("whole.pcap");
    let t_snap = Tcpdump::start(r.port, &snap, Some("100"));
    let t_whole = Tcpdump::start(r.port, &whole, None);
    send(r.port, &["--size", "1024", "--count", "200", "--rate", "20kpps"]);
    let (code, _, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    // tcpdump writes each packet as it reads it (-U): stop it once both files hold the 200
    // datagrams and the end message (pcap header 24 bytes; per record 16 + Ethernet 14 + IPv4
    // 20 + UDP 8 + payload, at most 100 captured).
    let want = [(&whole, 24 + 200 * 1082 + 16 + 122), (&snap, 24 + 201 * 116)];
    let t = Instant::now();
    while want.iter().any(|(f, n)| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0) < *n) {
        assert!(t.elapsed() < Duration::from_secs(60), "tcpdump did not capture every datagram");
        std::thread::sleep(Duration::from_millis(20));
    }
    t_snap.stop();
    t_whole.stop();
    let whole_s = whole.to_str().unwrap();
    let snap_s = snap.to_str().unwrap();
    // The packets captured 100 bytes long: not one payload could be checked.
    let (code, v) = verify_json(&[snap_s, "--format", "counter,size=1024", "--expect-zero-loss"]);
    assert_eq!(code, Some(4), "records cut short are a problem: {v}");
    let f = &v["files"][0];
    let captured = u(f, "records");
    assert!(captured > 200, "{f}");
    assert_eq!(u(f, "cut_short"), captured, "{f}");
    assert_eq!(u(f, "unreadable"), captured);
    assert_eq!(u(&v, "records"), 0, "no record was checked");
    assert!(problems(f).contains(&format!("{captured} records were captured cut short")), "{f}");
    // The whole capture: 200 datagrams and the sender's end message, nothing lost.
    let (code, v) = verify_json(&[whole_s, "--format", "counter,size=1024", "--expect-zero-loss"]);
    assert_eq!(code, Some(0), "{v}");
    let f = &v["files"][0];
    assert_eq!(u(&f["total"], "received"), 200, "{v}");
    assert_eq!(u(&f["total"], "invalid"), 0, "{v}");
    assert_eq!(u(f, "cut_short"), 0);
    assert_eq!(u(&v, "records"), 200);
    assert_eq!(f["content"], "no sidecar");
    assert_eq!(u(f, "records"), captured, "the same packets, captured whole");
    let (code, out, _) = run_limited(
        &["verify", snap_s, "--format", "counter,size=1024", "--expect-zero-loss"],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(4));
    assert!(!out.contains("matches"), "{out}");
    assert!(out.contains("cut short"), "{out}");
}

#[test]
fn a_file_without_sidecar_is_never_said_to_match_one() {
    let d = TempDir::new("tv-noside");
    let f = d.0.join("capture.raw");
    counter_file(&f, 1024, 100);
    let fs = f.to_str().unwrap();
    let (code, out, err) =
        run_limited(&["verify", fs, "--format", "counter,size=1024", "--expect-zero-loss"], Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains("matches"), "no sidecar was compared: {out}");
    assert!(out.contains("100 records in 1 file(s) re-checked; 1 without a sidecar to compare with"), "{out}");
    let (_, v) = verify_json(&[fs, "--format", "counter,size=1024"]);
    assert_eq!(v["files"][0]["content"], "no sidecar");
    assert_eq!(u(&v, "matching"), 0);
    assert_eq!(u(&v, "without_sidecar"), 1);
    assert!(v["files"][0]["sidecar"].is_null());
    // Nothing checked proves no zero loss: a pcap with its header and no record.
    let empty = d.0.join("empty.pcap");
    std::fs::write(&empty, wirespeed::spool::pcap_global_header()).unwrap();
    let (code, _, err) = run_limited(
        &["verify", empty.to_str().unwrap(), "--format", "counter,size=1024", "--expect-zero-loss"],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("zero loss is not shown"), "{err}");
}

#[test]
fn endless_and_special_inputs_are_refused_at_once_with_one_line() {
    let d = TempDir::new("tv-dev");
    let fifo = d.0.join("fifo");
    sh(&["mkfifo", fifo.to_str().unwrap()]);
    for (path, says) in [("/dev/zero", "a device, not a regular file"), (fifo.to_str().unwrap(), "a fifo")] {
        for extra in [&["--format", "counter,size=8"][..], &[][..]] {
            let mut a = vec!["verify", path];
            a.extend_from_slice(extra);
            let (code, out, err) = run_limited(&a, Duration::from_secs(20));
            assert_eq!(code, Some(2), "{a:?}: {out}{err}");
            assert!(err.contains(says), "{a:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
            assert!(out.is_empty(), "{out}");
        }
    }
}

#[test]
fn stray_files_in_a_directory_are_named_and_skipped() {
    let d = TempDir::new("tv-stray");
    record_raw(d.path(), 2000);
    std::fs::write(d.0.join("notes.txt"), b"observing log: all fine\n").unwrap();
    std::fs::write(d.0.join("README"), b"scan 1\n").unwrap();
    std::fs::write(d.0.join("summary.json"), b"{\"not\": \"a sidecar\"}").unwrap();
    std::fs::create_dir(d.0.join("old")).unwrap();
    sh(&["mkfifo", d.0.join("pipe").to_str().unwrap()]);
    let (code, out, err) = run_limited(&["verify", d.path()], Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}{err}");
    for n in ["notes.txt", "README", "summary.json", "old", "pipe"] {
        assert!(out.lines().any(|l| l.contains(n) && l.contains("skipped")), "{n} named as skipped: {out}");
    }
    let (code, v) = verify_json(&[d.path()]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["files"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["skipped"].as_array().unwrap().len(), 5, "{v}");
    assert_eq!(u(&v["total"], "received"), 2000);
    assert_eq!(v["files"][0]["content"], "matches");
}

#[test]
fn a_four_byte_pcap_is_a_damaged_pcap() {
    let d = TempDir::new("tv-four");
    for name in ["four.pcap", "four.bin"] {
        let f = d.0.join(name);
        std::fs::write(&f, 0xA1B2_C3D4u32.to_le_bytes()).unwrap();
        let (code, v) = verify_json(&[f.to_str().unwrap(), "--format", "counter,size=8"]);
        assert_eq!(code, Some(4), "{v}");
        let fv = &v["files"][0];
        assert_eq!(fv["file_format"], "pcap", "{fv}");
        assert!(problems(fv).contains("damaged pcap: the file ends inside the 24-byte pcap header"), "{fv}");
        assert_eq!(fv["complete"], false);
    }
    // An empty .pcap is damaged too, not an empty raw file that passes.
    let f = d.0.join("empty.pcap");
    std::fs::write(&f, b"").unwrap();
    let (code, v) = verify_json(&[f.to_str().unwrap(), "--format", "counter,size=8"]);
    assert_eq!(code, Some(4), "{v}");
    assert!(problems(&v["files"][0]).contains("damaged pcap"), "{v}");
}

// ---- item 4: content, completeness and loss are three facts ----

#[test]
fn part_file_from_kill_9_is_incomplete_not_differs() {
    let d = TempDir::new("tv-kill");
    let _t = traffic();
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &["--size", "1024", "-o", d.path(), "--buffer", "16M", "--block", "1M", "--flush", "100ms", "--duration", "60"],
    );
    let mut sender = spawn_send(r.port, &["--size", "1024", "--rate", "10kpps", "--duration", "600"]);
    // Kill once data is on disk (the .part file has whole records), not after a guessed delay.
    wait_part_file(&d.0, 8192);
    let mut child = r.child;
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    let _ = sender.kill();
    let _ = sender.wait();
    let (code, out, _) = run_limited(&["verify", d.path()], Duration::from_secs(60));
    assert_eq!(code, Some(4), "an unfinished file is a problem: {out}");
    assert!(!out.contains("DIFFERS"), "the content was not found to differ: {out}");
    assert!(out.contains("never finished"), "{out}");
    let (code, v) = verify_json(&[d.path()]);
    assert_eq!(code, Some(4));
    let f = &v["files"][0];
    assert_eq!(f["content"], "not finished", "{f}");
    assert_eq!(f["differences"].as_array().unwrap().len(), 0, "{f}");
    assert_eq!(f["complete"], false);
    assert!(f["incomplete"].as_str().unwrap().contains("the recorder was killed"), "{f}");
    assert_eq!(u(&f["total"], "lost"), 0, "the stream lost nothing in what was written");
    assert_eq!(u(&f["total"], "invalid"), 0);
}

#[test]
fn malformed_traffic_counted_alike_is_a_stream_fact_not_differs() {
    let d = TempDir::new("tv-malformed");
    let _t = traffic();
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &[
            "--size",
            "1024",
            "-o",
            d.path(),
            "--file-format",
            "pcap",
            "--keep-invalid",
            "--once",
            "--buffer",
            "8M",
            "--block",
            "1M",
            "--duration",
            "60",
        ],
    );
    // Five datagrams of the right length whose payload is no counter (kept as evidence: by
    // default invalid datagrams are left out of the file).
    let junk = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..5 {
        junk.send_to(&[0x5au8; 1024], ("127.0.0.1", r.port)).unwrap();
    }
    send(r.port, &["--size", "1024", "--count", "1000", "--rate", "20kpps"]);
    let (code, _, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let (code, out, _) = run_limited(&["verify", d.path()], Duration::from_secs(60));
    assert_eq!(code, Some(0), "the file holds exactly what was received: {out}");
    assert!(!out.contains("DIFFERS"), "{out}");
    let (_, v) = verify_json(&[d.path()]);
    let f = &v["files"][0];
    assert_eq!(f["content"], "matches", "{f}");
    assert_eq!(f["complete"], true);
    assert_eq!(u(&f["total"], "invalid"), 5, "{f}");
    assert_eq!(u(&f["total"], "received"), 1000);
    assert_eq!(u(&f["total"], "lost"), 0);
    // Flip a byte of a valid record: now the content differs from the sidecar.
    let p = files_ending(&d.0, ".pcap")[0].clone();
    let mut b = std::fs::read(&p).unwrap();
    let at = b.len() - 100;
    b[at] ^= 0x01;
    std::fs::write(&p, &b).unwrap();
    let (code, v) = verify_json(&[d.path()]);
    assert_eq!(code, Some(4), "{v}");
    assert_eq!(v["files"][0]["content"], "differs");
    assert_eq!(v["files"][0]["complete"], true, "still whole, only changed");
}

#[test]
#[ignore = "needs root"]
fn full_disk_sidecars_agree_with_the_summary_and_match_their_files() {
    let _t = traffic();
    let (fs, code, stdout, stderr) = record_into_full_disk();
    let dir = fs.path().to_string();
    assert_eq!(code, Some(1), "a full disk is a failure: {stderr}");
    let rep = json(&stdout);
    assert_eq!(rep["capture"]["stopped_by"], "disk full");
    let summary_unwritten = u(&rep["writer"], "unwritten_records");
    assert!(summary_unwritten > 0, "a write failed, so records were left in RAM: {}", rep["writer"]);
    // The capture's verdict must not say "no loss" beside records that never reached the disk.
    for d in rep["capture"]["diagnosis"].as_array().expect("diagnosis") {
        let d = d.as_str().unwrap();
        assert!(!d.starts_with("no loss:"), "a full disk lost records, yet the summary says: {d}");
        if d.starts_with("no loss") {
            assert!(d.contains(&format!("{} records", common::commas(summary_unwritten))), "{d}");
        }
    }
    let mut side_unwritten = 0;
    let mut side_records = 0;
    for s in files_ending(&fs.0 .0, ".json") {
        let side = json(&std::fs::read_to_string(&s).unwrap());
        assert_eq!(side["schema"], "wirespeed.recording/2");
        assert_eq!(u(&side, "not_written"), u(&side, "not_written_wrong_length") + u(&side, "unwritten"), "{side}");
        side_unwritten += u(&side, "unwritten");
        side_records += u(&side, "records");
    }
    assert_eq!(side_unwritten, summary_unwritten, "sidecars and summary agree");
    // Every datagram received into RAM is either in a file or counted as never written.
    assert_eq!(side_records + side_unwritten, u(&rep["capture"]["total"], "received"));
    assert_eq!(u(&rep["writer"], "records"), side_records);
    let (code, v) = verify_json(&[&dir]);
    assert_eq!(code, Some(4), "an incomplete recording is a problem: {v}");
    assert_eq!(u(&v, "unwritten"), summary_unwritten);
    let fl = v["files"].as_array().unwrap();
    assert!(fl.len() >= 2, "{v}");
    for (i, f) in fl.iter().enumerate() {
        assert_eq!(f["content"], "matches", "what is in the file is what its sidecar says: {f}");
        assert_eq!(u(f, "trailing_bytes"), 0, "{f}");
        if i + 1 < fl.len() {
            assert_eq!(f["complete"], true, "{f}");
            assert!(f["problems"].as_array().unwrap().is_empty(), "{f}");
        } else {
            assert_eq!(f["complete"], false, "{f}");
            assert!(f["incomplete"].as_str().unwrap().contains("full disk"), "{f}");
            assert_eq!(u(f, "unwritten"), summary_unwritten);
        }
    }
}

// ---- item 8: a prefix names files inside -o; recorders never collide ----

#[test]
fn prefixes_that_leave_the_directory_are_refused_before_anything_is_created() {
    let d = TempDir::new("tv-prefix");
    let out = d.0.join("out");
    std::fs::create_dir(&out).unwrap();
    let abs = d.0.join("abs");
    let abs = abs.to_str().unwrap();
    for prefix in ["../x", abs, "a/b", "..", ".", "", ".hidden", "x\u{1}y"] {
        let (code, o, err) = run_limited(
            &[
                "record",
                "127.0.0.1:0",
                "--size",
                "1024",
                "-o",
                out.to_str().unwrap(),
                "--prefix",
                prefix,
                "--duration",
                "1",
            ],
            Duration::from_secs(20),
        );
        assert_eq!(code, Some(2), "--prefix {prefix:?}: {o}{err}");
        assert!(err.contains("--prefix"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(!err.contains("listening"), "refused before the socket: {err}");
        assert_eq!(names(&d.0), vec!["out".to_string()], "--prefix {prefix:?} created something beside -o");
        assert!(names(&out).is_empty(), "--prefix {prefix:?} created something in -o: {:?}", names(&out));
    }
}

#[test]
fn recorders_in_the_same_second_take_the_next_free_name_and_overwrite_nothing() {
    let d = TempDir::new("tv-collide");
    // Files already holding the first name of every second of the next half minute.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let mut squatters = Vec::new();
    for s in now - 1..now + 30 {
        let t = wirespeed::spool::utc_compact(s * 1_000_000_000);
        let p = d.0.join(format!("scan-{t}-0001.raw"));
        std::fs::write(&p, b"someone else's file").unwrap();
        squatters.push(p);
    }
    let _t = traffic();
    let args = [
        "--size",
        "1024",
        "-o",
        d.path(),
        "--prefix",
        "scan",
        "--once",
        "--json",
        "--buffer",
        "8M",
        "--block",
        "1M",
        "--duration",
        "60",
    ];
    let a = spawn_cmd_with(&[], "record", "127.0.0.1:0", &args);
    let b = spawn_cmd_with(&[], "record", "127.0.0.1:0", &args);
    send(a.port, &["--size", "1024", "--count", "500", "--rate", "20kpps"]);
    send(b.port, &["--size", "1024", "--count", "700", "--rate", "20kpps"]);
    let mut paths = Vec::new();
    for (r, n) in [(a, 500u64), (b, 700)] {
        let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
        assert_eq!(code, Some(0), "{stderr}");
        let rep = json(&stdout);
        let f = &rep["writer"]["files"][0];
        assert_eq!(u(f, "records"), n);
        paths.push((f["path"].as_str().unwrap().to_string(), f["sidecar"].as_str().unwrap().to_string(), n));
    }
    assert_ne!(paths[0].0, paths[1].0, "two recorders, two files");
    for p in &squatters {
        assert_eq!(std::fs::read(p).unwrap(), b"someone else's file", "{p:?} untouched");
    }
    for (path, side, n) in &paths {
        assert!(!squatters.iter().any(|s| s.to_str().unwrap() == path), "{path} is not a squatter's name");
        let (code, v) = verify_json(&[path]);
        assert_eq!(code, Some(0), "{v}");
        assert_eq!(u(&v["total"], "received"), *n);
        assert_eq!(v["files"][0]["sidecar"].as_str().unwrap(), side);
        assert_eq!(v["files"][0]["content"], "matches");
    }
    assert!(files_ending(&d.0, ".part").is_empty());
}

/// Issue 28: two recorders started in the same second into one directory, each fed its own
/// stream. `verify DIR` summed both into one ledger (the second stream's numbers counted as
/// duplicates of the first's); each run is now reported on its own, with its exact counts.
/// Sidecars written before runs had ids still verify, read together as before, and it is said.
#[test]
fn two_runs_in_one_directory_are_reported_each_on_its_own() {
    let d = TempDir::new("tv-two-runs");
    let args =
        ["--size", "1024", "-o", d.path(), "--once", "--json", "--buffer", "8M", "--block", "1M", "--duration", "60"];
    let _t = traffic();
    let a = spawn_cmd_with(&[], "record", "127.0.0.1:0", &args);
    let b = spawn_cmd_with(&[], "record", "127.0.0.1:0", &args);
    send(a.port, &["--size", "1024", "--count", "5000", "--rate", "20kpps"]);
    send(b.port, &["--size", "1024", "--count", "7000", "--rate", "20kpps"]);
    let mut files = Vec::new();
    for r in [a, b] {
        let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
        assert_eq!(code, Some(0), "{stderr}");
        let rep = json(&stdout);
        let f = &rep["writer"]["files"][0];
        files.push((f["path"].as_str().unwrap().to_string(), f["sidecar"].as_str().unwrap().to_string()));
    }
    drop(_t);
    let ids: Vec<String> = files
        .iter()
        .map(|(_, s)| json(&std::fs::read_to_string(s).unwrap())["run"]["id"].as_str().expect("a run id").to_string())
        .collect();
    assert_ne!(ids[0], ids[1], "two recorders, two runs");

    let (code, v) = verify_json(&[d.path()]);
    assert_eq!(code, Some(0), "{v:#}");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{v:#}");
    for ((path, _), (id, n)) in files.iter().zip(ids.iter().zip([5000u64, 7000])) {
        let r = runs.iter().find(|r| r["id"] == id.as_str()).unwrap_or_else(|| panic!("run {id} in {v:#}"));
        assert_eq!(r["files"], serde_json::json!([path]), "{r:#}");
        assert_eq!(u(&r["total"], "received"), n, "{r:#}");
        assert_eq!(u(&r["total"], "lost"), 0, "{r:#}");
        assert_eq!(u(&r["total"], "duplicate"), 0, "{r:#}");
        assert_eq!(r["streams"].as_array().unwrap().len(), 1, "{r:#}");
    }
    assert_eq!(u(&v["total"], "received"), 12_000);
    assert_eq!(u(&v["total"], "duplicate"), 0, "{v:#}");
    assert_eq!(v["problems"], 0, "{v:#}");
    let (code, text, err) = run_limited(&["verify", d.path()], Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    assert!(text.contains("12,000 records in 2 file(s) re-checked, 2 recording runs each on its own"), "{text}");
    for id in &ids {
        assert!(text.contains(&format!("run {id} (pid ")), "{text}");
    }

    // The same files with sidecars of before run ids: read together as one recording, as
    // before, and said.
    for (_, side) in &files {
        let mut j = json(&std::fs::read_to_string(side).unwrap());
        j.as_object_mut().unwrap().remove("run");
        std::fs::write(side, serde_json::to_string_pretty(&j).unwrap()).unwrap();
    }
    let (code, v) = verify_json(&[d.path()]);
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["runs"].as_array().unwrap().len(), 1, "{v:#}");
    assert!(v["runs"][0]["id"].is_null(), "{v:#}");
    assert_eq!(v["matching"], 2, "old sidecars still match their files: {v:#}");
    assert!(v["notes"].to_string().contains("have no run id in a sidecar"), "{v:#}");
}

/// A file whose sidecar is gone (the last file of a recording that crashed has none) belongs to
/// the one run its sibling files name: verify reports one run, never a second one made of the
/// file without a sidecar.
#[test]
fn a_file_without_its_sidecar_stays_in_its_run() {
    let d = TempDir::new("tv-lone-file");
    let args =
        ["--size", "1024", "-o", d.path(), "--once", "--json", "--buffer", "8M", "--block", "1M", "--file-size", "2M"];
    let _t = traffic();
    let r = spawn_cmd_with(&[], "record", "127.0.0.1:0", &args);
    send(r.port, &["--size", "1024", "--count", "5000", "--rate", "20kpps"]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    drop(_t);
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    let files = rep["writer"]["files"].as_array().expect("files");
    assert!(files.len() >= 2, "2 MiB files of 5,000 x 1 KiB: {rep:#}");
    let last = files.last().unwrap();
    std::fs::remove_file(last["sidecar"].as_str().unwrap()).unwrap();
    let (_, v) = verify_json(&[d.path()]);
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "one recording, one run: {v:#}");
    assert!(runs[0]["id"].is_string(), "{v:#}");
    assert_eq!(runs[0]["files"].as_array().unwrap().len(), files.len(), "{v:#}");
}

/// `disk-test` stopped by SIGTERM part-way removes its test file (wirespeed leaves nothing of
/// its own behind) and says in one line that no figure was measured.
#[test]
fn a_stopped_disk_test_leaves_no_file_and_claims_no_figure() {
    let d = TempDir::new("tv-disk-test");
    // 8 GiB with O_DIRECT takes seconds on any disk; the signal is sent as soon as the test
    // file exists, so it always lands part-way.
    let child = Command::new(bin())
        .args(["disk-test", d.path(), "--size", "8G"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start disk-test");
    let t = Instant::now();
    while names(Path::new(d.path())).iter().all(|n| !n.starts_with(".wirespeed-disk-test-")) {
        assert!(t.elapsed() < Duration::from_secs(60), "disk-test never created its file");
        std::thread::sleep(Duration::from_millis(5));
    }
    sh(&["kill", "-TERM", &child.id().to_string()]);
    let out = child.wait_with_output().expect("disk-test ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("stopped by a signal"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(out.stdout.is_empty(), "no figure from a partial test");
    assert_eq!(names(Path::new(d.path())), Vec::<String>::new(), "its file was removed");
}
