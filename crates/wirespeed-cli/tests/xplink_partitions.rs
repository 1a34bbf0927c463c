//! XPC and the raw devices between real partitions, end to end (root): the daemons' channels,
//! the devices at `/hw/xplink/raw/RR/nn` inside `partition exec`, deactivation, version
//! exchange in the seed's words, and a partition killed mid-transfer.

use crate::common;

use common::parts::Parts;
use common::*;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Guards against a hang only: a test that is merely slow on a busy host still passes.
const LIMIT: Duration = Duration::from_secs(120);

/// Two (or three) partitions with daemons beating every 100 ms, devices up between them.
fn parts_with_devices(tag: &str, n: u32, extra: &[&str]) -> Parts {
    let parts = Parts::new(tag);
    let mut args = vec!["create".to_string()];
    for i in 1..=n {
        args.extend(["-p".into(), i.to_string(), "-c".into(), ((i - 1) % 2).to_string()]);
    }
    if n > 2 {
        args.push("--share-cpus".into());
    }
    args.extend(["--hb-check".into(), "100ms".into()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    parts.ok(&a);
    for i in 1..=n {
        for j in (1..=n).filter(|&j| j != i) {
            let dev = device(&parts, i, j, 0);
            parts.wait_for(&format!("device {}", dev.display()), LIMIT, || dev.exists());
        }
    }
    parts
}

/// Host path of partition `local`'s device `d` to `remote`.
fn device(parts: &Parts, local: u32, remote: u32, d: u8) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/run/wirespeed/{}/{local}/xplink/raw/{remote:02}/{d:02x}", parts.prefix))
}

/// `sh -c SCRIPT` inside partition `id`, output captured.
fn sh_in(parts: &Parts, id: u32, script: &str) -> Child {
    Command::new(bin())
        .args(["partition", "--prefix", &parts.prefix, "exec", &id.to_string(), "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("partition exec")
}

/// Wait for `c` to end (guarding against a hang) and return its output.
fn finish(c: Child, what: &str) -> std::process::Output {
    let pid = c.id();
    let t = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(c.wait_with_output());
    });
    loop {
        if let Ok(o) = rx.recv_timeout(Duration::from_millis(100)) {
            return o.expect("wait");
        }
        if t.elapsed() > LIMIT {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{what}: still running after {LIMIT:?} (a hang)");
        }
    }
}

/// A file of `mib` MiB of random bytes and its SHA-256.
fn random_file(dir: &std::path::Path, mib: usize) -> (std::path::PathBuf, String) {
    let path = dir.join("data.bin");
    let mut f = std::fs::File::create(&path).expect("create");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for c in block.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            c.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&block).expect("write");
    }
    drop(f);
    let sum = stdout_of(&Command::new("sha256sum").arg(&path).output().expect("sha256sum"));
    (path, sum.split_whitespace().next().unwrap_or_default().to_string())
}

#[test]
#[ignore = "needs root"]
fn dd_moves_100_mib_through_a_raw_device_byte_exact() {
    let _turn = traffic();
    let parts = parts_with_devices("d", 2, &[]);
    let tmp = tempdir("xplink-dd");
    let (file, sum) = random_file(&tmp, 100);
    // The seed's path inside exec; the reader ends at the writer's close (EOF).
    let reader = sh_in(&parts, 2, "dd if=/hw/xplink/raw/01/00 bs=1M iflag=fullblock status=none | sha256sum");
    let writer = sh_in(&parts, 1, &format!("dd if={} of=/hw/xplink/raw/02/00 bs=1M status=none", file.display()));
    let w = finish(writer, "dd into the device");
    assert!(w.status.success(), "writer: {}", stderr_of(&w));
    let r = finish(reader, "dd out of the device");
    assert!(r.status.success(), "reader: {}", stderr_of(&r));
    assert_eq!(stdout_of(&r).split_whitespace().next().unwrap_or_default(), sum);
    // The other direction, through shell redirection and cat, on another device.
    let reader = sh_in(&parts, 1, "cat /hw/xplink/raw/02/0f | sha256sum");
    let writer = sh_in(&parts, 2, &format!("cat {} > /hw/xplink/raw/01/0f", file.display()));
    assert!(finish(writer, "cat into the device").status.success());
    let r = finish(reader, "cat out of the device");
    assert_eq!(stdout_of(&r).split_whitespace().next().unwrap_or_default(), sum);
    // Inside exec the 16 devices are listed as the seed lists them.
    let ls = finish(sh_in(&parts, 1, "ls /hw/xplink/raw/02"), "ls");
    let names: Vec<String> = stdout_of(&ls).split_whitespace().map(str::to_string).collect();
    let want: Vec<String> = (0..16).map(|d| format!("{d:02x}")).collect();
    assert_eq!(names, want);
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
#[ignore = "needs root"]
fn select_on_a_device_waits_for_bytes() {
    let _turn = traffic();
    let parts = parts_with_devices("s", 2, &[]);
    // Empty device: select times out (0 ready). Then the remote writes: readable, and the bytes read.
    let script = "import os, select, sys\n\
        fd = os.open('/hw/xplink/raw/01/03', os.O_RDONLY | os.O_NONBLOCK)\n\
        r, _, _ = select.select([fd], [], [], 0.3)\n\
        print('empty', len(r), flush=True)\n\
        sys.stdin.readline()\n\
        r, _, _ = select.select([fd], [], [], 60)\n\
        print('after', len(r), os.read(fd, 100).decode(), flush=True)\n";
    let mut py = Command::new(bin())
        .args(["partition", "--prefix", &parts.prefix, "exec", "2", "--", "python3", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut out = std::io::BufReader::new(py.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).expect("read");
    assert_eq!(line.trim(), "empty 0");
    let w = finish(sh_in(&parts, 1, "printf hello > /hw/xplink/raw/02/03"), "write");
    assert!(w.status.success(), "{}", stderr_of(&w));
    py.stdin.take().expect("stdin").write_all(b"go\n").expect("go");
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).expect("read");
    assert_eq!(line.trim(), "after 1 hello");
    let o = finish(py, "python3");
    assert!(o.status.success(), "{}", stderr_of(&o));
}

#[test]
#[ignore = "needs root"]
fn deactivating_a_partition_ends_transfers_with_an_error_never_a_hang() {
    let _turn = traffic();
    let parts = parts_with_devices("x", 2, &[]);
    let reader = sh_in(&parts, 2, "cat /hw/xplink/raw/01/01 > /dev/null");
    let writer = sh_in(&parts, 1, "cat /dev/zero > /hw/xplink/raw/02/01");
    // Bytes flow before the fault.
    std::thread::sleep(Duration::from_millis(300));
    parts.ok(&["deactivate", "2"]);
    let w = finish(writer, "writer after deactivate");
    let r = finish(reader, "reader after deactivate");
    assert!(!w.status.success(), "the writer must see an error");
    assert!(stderr_of(&w).contains("not connected"), "writer: {}", stderr_of(&w));
    // The reader sees the end: an error or an end of stream, and it ends.
    drop(r);
    parts.ok(&["activate", "2"]);
    // Activation rediscovers: the devices carry bytes again.
    let t = Instant::now();
    loop {
        let reader = sh_in(&parts, 2, "head -c 5 /hw/xplink/raw/01/02");
        let w = finish(sh_in(&parts, 1, "printf again > /hw/xplink/raw/02/02"), "write after activate");
        let r = finish(reader, "read after activate");
        if w.status.success() && stdout_of(&r) == "again" {
            break;
        }
        assert!(t.elapsed() < LIMIT, "devices not usable after activate: {} {}", stderr_of(&w), stderr_of(&r));
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs root"]
fn xpc_version_exchange_speaks_the_seeds_words() {
    let _turn = traffic();
    let parts = Parts::new("v");
    parts.ok(&[
        "create",
        "-p",
        "1",
        "-c",
        "0",
        "-p",
        "2",
        "-c",
        "1",
        "-p",
        "3",
        "-c",
        "0",
        "--share-cpus",
        "--no-daemons",
    ]);
    let log = |id: u32| format!("/run/wirespeed/{}/daemon-{id}.log", parts.prefix);
    let daemon = |id: u32, extra: &[&str]| {
        let f = std::fs::File::create(log(id)).expect("log");
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &parts.ns(id), bin(), "partition", "--prefix", &parts.prefix, "daemon"])
            .arg(id.to_string())
            .args(["--hb-check", "100ms"])
            .args(extra)
            .stdout(f.try_clone().expect("log"))
            .stderr(f);
        c.spawn().expect("daemon")
    };
    let mut kids = vec![daemon(1, &[]), daemon(2, &["--xpc-version", "2.0"]), daemon(3, &["--no-xpc"])];
    parts.wait_log(1, "xpc: Remote partition 2 requested connection", 1, LIMIT);
    parts.wait_log(1, "xpc: Local version 1.0 does not support Remote version 2.0", 1, LIMIT);
    parts.wait_log(1, "NOTICE: Partition 3 does not support XPC messaging", 1, LIMIT);
    for k in &mut kids {
        let _ = k.kill();
        let _ = k.wait();
    }
}

#[test]
#[ignore = "needs root"]
fn a_partition_killed_mid_transfer_is_reported_and_the_others_go_on() {
    let _turn = traffic();
    let parts = parts_with_devices("k", 3, &[]);
    let tmp = tempdir("xplink-kill");
    let (file, sum) = random_file(&tmp, 100);
    // 1 -> 2 carries a file (still flowing at the kill), 1 -> 3
    // streams without end.
    // The reader of 1 -> 2 starts late, so the writer is still mid-file (held by flow control)
    // when partition 3 dies.
    let reader2 =
        sh_in(&parts, 2, "sleep 1; dd if=/hw/xplink/raw/01/00 bs=64k iflag=fullblock status=none | sha256sum");
    let mut writer2 = sh_in(&parts, 1, &format!("dd if={} of=/hw/xplink/raw/02/00 bs=64k status=none", file.display()));
    let reader3 = sh_in(&parts, 3, "cat /hw/xplink/raw/01/00 > /dev/null");
    let writer3 = sh_in(&parts, 1, "cat /dev/zero > /hw/xplink/raw/03/00");
    std::thread::sleep(Duration::from_millis(200));
    assert!(writer2.try_wait().expect("try_wait").is_none(), "1 -> 2 must still be in flight at the kill");
    // Partition 3 dies: its daemon and processes, then its namespace.
    let pid = std::fs::read_to_string(format!("/run/wirespeed/{}/daemon-3.pid", parts.prefix)).expect("pid");
    let killed = Instant::now();
    let _ = Command::new("kill").args(["-9", pid.trim()]).status();
    let _ = Command::new("ip").args(["netns", "pids", &parts.ns(3)]).output().map(|o| {
        for p in stdout_of(&o).split_whitespace() {
            let _ = Command::new("kill").args(["-9", p]).status();
        }
    });
    let _ = Command::new("ip").args(["netns", "del", &parts.ns(3)]).status();
    let down = "WARNING: Partition 3 not responding";
    let t1 = parts.wait_log(1, down, 1, LIMIT);
    let t2 = parts.wait_log(2, down, 1, LIMIT);
    eprintln!(
        "partition 3 killed: reported by 1 after {t1:?}, by 2 after {t2:?} ({:?} since the kill)",
        killed.elapsed()
    );
    // Its channel is torn down: the writer to 3 ends with an error, never hangs.
    let w3 = finish(writer3, "writer to the killed partition");
    assert!(!w3.status.success());
    drop(reader3);
    // 1 -> 2 goes on, byte exact.
    let w2 = finish(writer2, "writer 1 -> 2");
    assert!(w2.status.success(), "{}", stderr_of(&w2));
    let r2 = finish(reader2, "reader 1 -> 2");
    assert_eq!(stdout_of(&r2).split_whitespace().next().unwrap_or_default(), sum);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A fresh directory under the target's temporary space.
fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ws-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tempdir");
    d
}

#[test]
#[ignore = "needs root"]
fn bench_isolation_reports_the_kill_and_the_survivor_stream_is_exact() {
    let _turn = traffic();
    let dir = TempDir::new("isolation");
    let o = run(&["bench", "isolation", "--repeat", "1", "--window", "300ms", "--json", "-o", dir.path()]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let doc = json(&stdout_of(&o));
    // -o keeps the table and the document, as every bench does.
    let kept = json(&std::fs::read_to_string(dir.0.join("isolation.json")).expect("isolation.json"));
    assert_eq!(kept, doc);
    let table = std::fs::read_to_string(dir.0.join("isolation.txt")).expect("isolation.txt");
    assert!(table.starts_with("partition 3 killed mid-transfer") && table.contains("survivor stream exact"), "{table}");
    assert_eq!(doc["schema"], "wirespeed.isolation/1");
    assert_eq!(doc["survivor_exact"], true);
    let r = &doc["runs"][0];
    assert!(r["reported_by_1_ms"].is_number() && r["reported_by_2_ms"].is_number(), "{r}");
    // The writer to the dead partition got an error (it did not hang), and said which.
    assert!(r["writer_to_dead_error"].as_str().is_some_and(|e| e.contains("not connected")), "{r}");
    let s = &r["survivor"];
    assert_eq!(s["bytes_read"], s["bytes_written"]);
    assert_eq!(s["pattern_errors"], 0);
    assert!(s["bytes_read"].as_u64().unwrap_or(0) > 0);
}
