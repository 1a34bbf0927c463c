//! Long-running recorders: `wirespeed extract` takes exactly the records of a window (the
//! frames' own time, arrival time, a stream, sequence numbers) across file rotation, through
//! the time index in the sidecars, checked against the files read by the test itself, against
//! tshark and against the ledgers; `record --keep-free` deletes the oldest files and never the
//! open one or one being read.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Three VDIF threads at 2000 frames/s, numbered from 2026-01-01T00:00:00Z (epoch 52, second
/// 0) by `--start-seq 0`: frame n of each thread is at n/2000 s after midnight, so a window
/// in the frames' own time names its frame numbers exactly.
const VDIF3: &str = "vdif,frame=1032,threads=3,fps=2000,epoch=52,start=0";
/// 30,000 frames per thread (15 s of data), 6000..=7999 of each left out: a 1 s hole at 3 s.
const PER_THREAD: u64 = 30_000;
const FRAME: usize = 1032;

/// Record what one sender sends (`--once`) into `dir` with `extra` options; the report.
fn record_vdif3(dir: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--format", VDIF3, "-o", dir, "--once", "--json", "--buffer", "64M", "--block", "1M"];
    args.extend_from_slice(&["--file-size", "1M", "--duration", "120", "--rcvbuf", "32M"]);
    args.extend_from_slice(extra);
    let r = spawn_cmd_with(&[], "record", "127.0.0.1:0", &args);
    send_to_port(
        r.port,
        &["--format", VDIF3, "--streams", "3", "--count", "30000", "--start-seq", "0", "--skip", "6000..7999"],
    );
    let (code, out, err) = finish(r, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{err}");
    let rep = json(&out);
    assert_eq!(u(&rep["capture"]["total"], "lost"), 3 * 2000, "only the skipped frames are lost: {out}");
    rep
}

/// (thread, frame number) of a VDIF frame, from its header (words 0 and 1; epoch 52, start 0).
fn vdif_id(f: &[u8]) -> (u32, u64) {
    let w = |i: usize| u32::from_le_bytes(f[4 * i..4 * i + 4].try_into().unwrap());
    let secs = u64::from(w(0) & 0x3fff_ffff);
    let frame = u64::from(w(1) & 0x00ff_ffff);
    ((w(3) >> 16) & 0x3ff, secs * 2000 + frame)
}

/// The data files of a recording in name order (as extract reads them).
fn data_files(dir: &str, ext: &str) -> Vec<PathBuf> {
    visible_files(Path::new(dir), ext).into_iter().filter(|p| p.extension().is_some_and(|e| e == ext)).collect()
}

fn extract(args: &[&str]) -> (Option<i32>, String, String) {
    let mut a = vec!["extract"];
    a.extend_from_slice(args);
    let o = run(&a);
    (o.status.code(), stdout_of(&o), stderr_of(&o))
}

#[test]
fn extract_takes_exactly_the_frames_of_a_window_across_files_threads_and_a_hole() {
    let _t = traffic();
    let d = TempDir::new("extract-vdif");
    let rep = record_vdif3(d.path(), &[]);
    let files = data_files(d.path(), "vdif");
    assert!(files.len() >= 50, "the recording rotated over many files: {}", files.len());
    // Every frame of the recording, read by this test: (thread, number, bytes), in file order.
    let mut all = Vec::new();
    for f in &files {
        let b = std::fs::read(f).unwrap();
        assert_eq!(b.len() % FRAME, 0);
        for fr in b.chunks(FRAME) {
            let (t, n) = vdif_id(fr);
            all.push((t, n, fr.to_vec()));
        }
    }
    assert_eq!(all.len() as u64, u(&rep["capture"]["total"], "received"));

    // 1.25 s to 2.5 s of thread 1: frames 2500..=4999, read through the index only.
    let out = d.0.join("win.vdif");
    let (code, stdout, err) = extract(&[
        d.path(),
        "--from",
        "2026-01-01T00:00:01.25Z",
        "--to",
        "+1.25s",
        "--stream",
        "1",
        "-w",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let want: Vec<u8> =
        all.iter().filter(|(t, n, _)| *t == 1 && (2500..5000).contains(n)).flat_map(|(_, _, b)| b.clone()).collect();
    assert_eq!(want.len(), 2500 * FRAME);
    assert!(std::fs::read(&out).unwrap() == want, "the extract is exactly thread 1's frames 2500..=4999");
    let led = json(&std::fs::read_to_string(format!("{}.json", out.display())).unwrap());
    assert_eq!(json(&stdout), led, "--json prints the ledger written beside the file");
    assert_eq!(led["schema"], "wirespeed.extract/1");
    assert_eq!((u(&led, "records"), u(&led["total"], "received"), u(&led["total"], "lost")), (2500, 2500, 0));
    assert_eq!((u(&led["streams"][0], "first_seq"), u(&led["streams"][0], "last_seq")), (2500, 4999));
    let hows: Vec<&str> = led["files"].as_array().unwrap().iter().map(|f| f["how"].as_str().unwrap()).collect();
    assert!(!hows.contains(&"scanned"), "every file has an index: {hows:?}");
    assert!(hows.iter().filter(|h| **h == "skipped").count() > files.len() / 2, "most files never opened: {hows:?}");
    let read: u64 = led["files"].as_array().unwrap().iter().map(|f| u(f, "bytes_read")).sum();
    assert!(read < 6 * 1024 * 1024 + 3 * 2500 * FRAME as u64, "read {read} bytes for a 7.7 MB window");

    // Without the index: the same bytes, every file read whole.
    // Written beside the recording on purpose: an extract is never read back as part of it.
    let out2 = d.0.join("scan.vdif");
    let (code, _, err) = extract(&[
        d.path(),
        "--from",
        "2026-01-01T00:00:01.25Z",
        "--to",
        "2026-01-01T00:00:02.5Z",
        "--stream",
        "1",
        "--no-index",
        "-w",
        out2.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(std::fs::read(&out2).unwrap() == want, "a full scan gives the same frames");
    let led2 = json(&std::fs::read_to_string(format!("{}.json", out2.display())).unwrap());
    assert!(led2["files"].as_array().unwrap().iter().all(|f| f["how"] == "scanned"));

    // 2.5 s to 4.5 s, every thread: the hole 6000..=7999 lies inside; the ledger names it as
    // `verify` (which reads the whole recording) does.
    let (code, stdout, err) = extract(&[d.path(), "--from", "2026-01-01T00:00:02.5Z", "--to", "+2s", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let led = json(&stdout);
    assert_eq!(u(&led, "records"), 3 * (4000 - 2000));
    assert_eq!(u(&led["total"], "lost"), 3 * 2000);
    let v = run(&["verify", d.path(), "--json"]);
    let v = json(&stdout_of(&v));
    for t in 0..3u64 {
        let s = led["streams"].as_array().unwrap().iter().find(|s| u(s, "stream") == t).unwrap();
        assert_eq!((u(s, "first_seq"), u(s, "last_seq"), u(s, "received")), (5000, 8999, 2000));
        let vs = v["streams"].as_array().unwrap().iter().find(|s| u(s, "stream") == t).unwrap();
        assert_eq!(gap_list(s), gap_list(vs), "thread {t}: the window's holes are the recording's");
        assert_eq!(gap_list(s), vec![(6000, 7999)]);
    }
    assert_eq!(led["missing_at_edges"].as_array().unwrap().len(), 0);

    // All of it by sequence numbers: the sidecars' ledgers added up.
    let (code, stdout, err) = extract(&[d.path(), "--seq", "0..1000000", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let led = json(&stdout);
    let mut side_received = 0;
    for f in &files {
        let s = json(&std::fs::read_to_string(format!("{}.json", f.display())).unwrap());
        side_received += u(&s["total"], "received");
    }
    assert_eq!(u(&led, "records"), side_received);
    assert_eq!(u(&led, "records"), 3 * (PER_THREAD - 2000));

    // A window inside the hole: nothing, said so, exit 3, and the frames it should hold named.
    let (code, stdout, err) =
        extract(&[d.path(), "--from", "2026-01-01T00:00:03.2Z", "--to", "2026-01-01T00:00:03.8Z", "--json"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("nothing was recorded in the window"), "{err}");
    let led = json(&stdout);
    assert_eq!(u(&led, "records"), 0);
    let edges: Vec<(u64, u64, u64)> = led["missing_at_edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (u(g, "stream"), u(g, "first"), u(g, "last")))
        .collect();
    assert_eq!(edges, vec![(0, 6400, 7599), (1, 6400, 7599), (2, 6400, 7599)]);
    // A reader that takes one frame and goes away (`| head -c 1032`) ends the extract, exit 0.
    let mut child = Command::new(bin())
        .args(["extract", d.path(), "--from", "2026-01-01T00:00:00Z", "-w", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; FRAME];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    assert!(stderr_of(&o).contains("the output was closed after"), "{}", stderr_of(&o));
    assert!(vdif_id(&first).1 < 10, "one of the recording's first frames comes first: {:?}", vdif_id(&first));
    // --expect-whole refuses a window with a hole inside.
    let (code, _, _) = extract(&[d.path(), "--from", "2026-01-01T00:00:02.5Z", "--to", "+2s", "--expect-whole"]);
    assert_eq!(code, Some(3));
}

/// Parse a pcap file: (ts ns, record bytes with header) per record.
fn pcap_records(b: &[u8]) -> Vec<(u64, Vec<u8>)> {
    assert_eq!(&b[..4], &[0x4d, 0x3c, 0xb2, 0xa1], "a nanosecond pcap");
    let mut out = Vec::new();
    let mut p = 24;
    while p + 16 <= b.len() {
        let w = |i: usize| u32::from_le_bytes(b[p + i..p + i + 4].try_into().unwrap());
        let (sec, ns, cap) = (u64::from(w(0)), u64::from(w(4)), w(8) as usize);
        out.push((sec * 1_000_000_000 + ns, b[p..p + 16 + cap].to_vec()));
        p += 16 + cap;
    }
    assert_eq!(p, b.len());
    out
}

/// UTC ISO 8601 with nanoseconds, as the test writes a window for extract.
fn iso(ns: u64) -> String {
    let (secs, frac) = (ns / 1_000_000_000, ns % 1_000_000_000);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:09}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// tshark's packets of a pcap: (time ns, UDP payload length) each.
fn tshark_times(pcap: &Path) -> Vec<(u64, u64)> {
    let out = Command::new("tshark")
        .args(["-r", pcap.to_str().unwrap(), "-T", "fields", "-e", "frame.time_epoch", "-e", "udp.length"])
        .output()
        .expect("tshark is installed (scripts/test.sh installs it)");
    assert!(out.status.success(), "tshark: {}", stderr_of(&out));
    stdout_of(&out)
        .lines()
        .map(|l| {
            let mut f = l.split('\t');
            let t = f.next().unwrap();
            let (s, frac) = t.split_once('.').unwrap_or((t, "0"));
            let frac = format!("{frac:0<9}");
            let ns = s.parse::<u64>().unwrap() * 1_000_000_000 + frac[..9].parse::<u64>().unwrap();
            (ns, f.next().unwrap().parse::<u64>().unwrap() - 8)
        })
        .collect()
}

#[test]
fn an_arrival_window_of_a_pcap_recording_is_what_tshark_reads_and_the_ledger_counts() {
    let _t = traffic();
    let d = TempDir::new("extract-pcap");
    record_vdif3(d.path(), &["--file-format", "pcap"]);
    let files = data_files(d.path(), "pcap");
    assert!(files.len() >= 50, "{}", files.len());
    let mut all = Vec::new();
    for f in &files {
        all.extend(pcap_records(&std::fs::read(f).unwrap()));
    }
    // The window: from the arrival of the record at 30 % to that at 60 %, thread 2 only.
    let (from, to) = (all[all.len() * 3 / 10].0, all[all.len() * 6 / 10].0);
    let thread_of = |rec: &[u8]| vdif_id(&rec[16 + 28..]).0;
    let want: Vec<&Vec<u8>> =
        all.iter().filter(|(t, r)| *t >= from && *t < to && thread_of(r) == 2).map(|(_, r)| r).collect();
    assert!(want.len() > 1000, "{}", want.len());
    let out = d.0.join("win.pcap");
    let (f, t) = (iso(from), iso(to));
    let window = [d.path(), "--clock", "arrival", "--from", &f, "--to", &t, "--stream", "2"];
    let (code, _, err) = extract(&[&window[..], &["-w", out.to_str().unwrap()]].concat());
    assert_eq!(code, Some(0), "{err}");
    let got = pcap_records(&std::fs::read(&out).unwrap());
    assert_eq!(got.len(), want.len());
    assert!(got.iter().zip(&want).all(|((_, a), b)| a == *b), "the same records, in order");
    // tshark reads the extract: the same count, every time in the window, every payload whole.
    let ts = tshark_times(&out);
    assert_eq!(ts.len(), want.len());
    assert!(ts.iter().all(|&(t, len)| t >= from && t < to && len == FRAME as u64), "{:?}", &ts[..3]);
    // The ledger beside it counts the same records and the numbers they carry.
    let led = json(&std::fs::read_to_string(format!("{}.json", out.display())).unwrap());
    assert_eq!(u(&led, "records"), want.len() as u64);
    assert_eq!(u(&led["total"], "received"), want.len() as u64);
    let nums: Vec<u64> = want.iter().map(|r| vdif_id(&r[16 + 28..]).1).collect();
    let s = &led["streams"][0];
    assert_eq!((u(s, "stream"), u(s, "first_seq"), u(s, "last_seq")), (2, nums[0], *nums.last().unwrap()));
    // The same window as raw frames: the payloads back to back.
    let raw = d.0.join("win.vdif");
    let (code, _, err) = extract(&[&window[..], &["--file-format", "raw", "-w", raw.to_str().unwrap()]].concat());
    assert_eq!(code, Some(0), "{err}");
    let frames: Vec<u8> = want.iter().flat_map(|r| r[16 + 28..].to_vec()).collect();
    assert!(std::fs::read(&raw).unwrap() == frames);
}

#[test]
fn bad_times_and_ranges_are_one_line_and_exit_2() {
    let d = TempDir::new("extract-bad");
    let p = d.path();
    expect_fail(&["extract", p, "--from", "yesterday"], 2, "is not a time");
    expect_fail(&["extract", p, "--from", "2026-02-30T00:00:00Z"], 2, "no such date");
    expect_fail(&["extract", p, "--to", "+5s"], 2, "give --from too");
    expect_fail(&["extract", p, "--from", "+5s"], 2, "+DURATION is for --to");
    expect_fail(&["extract", p, "--seq", "9..3"], 2, "write the smaller number first");
    expect_fail(&["extract", p], 2, "give the part to extract");
    expect_fail(&["extract", p, "--from", "now", "-w", "-", "--json"], 2, "cannot go there too");
    expect_fail(&["extract", "/nonexistent/rec", "--from", "now"], 2, "cannot read /nonexistent/rec");
    expect_fail(&["extract", p, "--from", "now"], 2, "no");
    // A recording, then windows that cannot be on its clocks.
    let _t = traffic();
    let r = spawn_cmd_with(&[], "record", "127.0.0.1:0", &["--size", "1024", "-o", p, "--once", "--buffer", "16M"]);
    send_to_port(r.port, &["--size", "1024", "--count", "100"]);
    let (code, _, err) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    expect_fail(&["extract", p, "--clock", "data", "--from", "now"], 2, "carries no time of its own");
    expect_fail(&["extract", p, "--from", "ts:5"], 2, "SPEAD timestamp");
    expect_fail(&["extract", p, "--from", "now", "--to", "-1h"], 2, "the window is empty");
    expect_fail(&["extract", p, "--from", "-1h", "--file-format", "pcap", "-w", "/tmp/x.pcap"], 2, "raw recording");
}

/// Whether a process holds a lock on the file with inode `ino` (/proc/locks).
fn locked(ino: u64) -> bool {
    std::fs::read_to_string("/proc/locks").unwrap_or_default().lines().any(|l| l.contains(&format!(":{ino} ")))
}

#[test]
#[ignore = "needs root"]
fn keep_free_deletes_the_oldest_files_never_the_open_one_nor_one_being_read() {
    use std::os::unix::fs::MetadataExt;
    let _t = traffic();
    let fs = SmallFs::new("64m");
    let dir = fs.path().to_string();
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &["--size", "8192", "-o", &dir, "--json", "--buffer", "16M", "--block", "1M", "--file-size", "2M"]
            .into_iter()
            .chain(["--keep-free", "50%", "--duration", "120", "--count", "14848", "--rcvbuf", "32M"])
            .collect::<Vec<_>>(),
    );
    // First 16 MiB: eight files, then a reader on the oldest (an extract whose output nobody
    // reads, so it stays in the middle of the file, holding it).
    send_to_port(r.port, &["--size", "8192", "--count", "2048", "--rate", "200M"]);
    let t = Instant::now();
    while data_files(&dir, "raw").len() < 3 {
        assert!(t.elapsed() < Duration::from_secs(60), "three finished files");
        std::thread::sleep(Duration::from_millis(20));
    }
    let oldest = data_files(&dir, "raw")[0].clone();
    let ino = std::fs::metadata(&oldest).unwrap().ino();
    let mut reader = Command::new(bin())
        .args(["extract", oldest.to_str().unwrap(), "--seq", "0..100000000", "-w", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !locked(ino) {
        assert!(t.elapsed() < Duration::from_secs(30), "the reader locks the file");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Then 100 MiB more, paced (25 MB/s: the 32 MB kept free last more than a second of it):
    // more than one and a half times the disk.
    send_to_port(r.port, &["--size", "8192", "--count", "12800", "--rate", "200M", "--start-seq", "2048"]);
    let (code, out, err) = finish(r, Duration::from_secs(120));
    let _ = reader.kill();
    let _ = reader.wait();
    assert_eq!(code, Some(0), "the disk never filled: {err}");
    let rep = json(&out);
    assert_eq!(u(&rep["capture"]["total"], "lost"), 0, "{out}");
    assert_eq!(u(&rep["capture"]["total"], "received"), 2048 + 12800);
    let ret = &rep["retention"];
    let deleted = u(ret, "files_deleted");
    assert!(deleted >= 30, "most of 58 files deleted: {ret}");
    assert_eq!(err.matches("retention: deleted ").count() as u64, deleted, "one line per deletion");
    assert!(err.contains("a reader holds it"), "{err}");
    // The oldest file, read meanwhile, is still there with its sidecar; the ones deleted are
    // the oldest of the others, in order; every file kept still verifies.
    assert!(oldest.exists() && PathBuf::from(format!("{}.json", oldest.display())).exists());
    let left = data_files(&dir, "raw");
    let gone: Vec<String> =
        ret["deleted"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap().to_string()).collect();
    assert!(gone.windows(2).all(|w| w[0] < w[1]), "oldest first");
    for l in left.iter().skip(1) {
        assert!(gone.iter().all(|g| g.as_str() < l.to_str().unwrap()), "{g:?} kept a newer file {l:?}", g = gone);
    }
    for f in &left {
        let v = run(&["verify", f.to_str().unwrap(), "--json"]);
        let v = json(&stdout_of(&v));
        assert_eq!(v["files"][0]["content"], "matches", "{}: {v}", f.display());
    }
    let (total, free) = {
        let o = Command::new("df").args(["-B1", "--output=size,avail", &dir]).output().unwrap();
        let s = stdout_of(&o);
        let l: Vec<u64> = s.lines().nth(1).unwrap().split_whitespace().map(|x| x.parse().unwrap()).collect();
        (l[0], l[1])
    };
    assert!(free * 100 >= total * 40, "free space held near 50 %: {free} of {total}");
}
