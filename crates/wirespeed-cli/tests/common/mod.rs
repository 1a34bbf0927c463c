//! Helpers shared by the end-to-end tests: run the real `wirespeed` binary and read its JSON.
#![allow(dead_code)]

pub mod docs;
pub mod parts;
pub mod ssh;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_wirespeed")
}

pub fn is_root() -> bool {
    // SAFETY-free check through /proc: uid 0 in the Uid line.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// A running `wirespeed recv` whose bound port was read from its stderr.
pub struct Receiver {
    pub child: Child,
    pub port: u16,
    stderr: std::thread::JoinHandle<String>,
}

/// Start `wirespeed recv 127.0.0.1:0 ARGS...` (or with a prefix command such as
/// `ip netns exec NS`) and wait until it says which port it bound.
pub fn spawn_recv_with(prefix: &[&str], listen: &str, args: &[&str]) -> Receiver {
    spawn_cmd_with(prefix, "recv", listen, args)
}

/// Start `wirespeed SUB LISTEN ARGS...` (recv or record) and wait for its port.
pub fn spawn_cmd_with(prefix: &[&str], sub: &str, listen: &str, args: &[&str]) -> Receiver {
    let mut cmd = if prefix.is_empty() {
        Command::new(bin())
    } else {
        let mut c = Command::new(prefix[0]);
        c.args(&prefix[1..]).arg(bin());
        c
    };
    let mut child = cmd
        .arg(sub)
        .arg(listen)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wirespeed recv");
    let mut err = BufReader::new(child.stderr.take().expect("stderr piped"));
    // The line that names the port (a --metrics run first says where it serves).
    let mut first = String::new();
    let mut line = 0;
    while !first[line..].contains("listening on ") {
        line = first.len();
        if err.read_line(&mut first).expect("read recv stderr") == 0 {
            break;
        }
    }
    let port = first[line..]
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("recv did not report its port: {first:?}"));
    let stderr = std::thread::spawn(move || {
        let mut rest = first;
        let _ = err.read_to_string(&mut rest);
        rest
    });
    Receiver { child, port, stderr }
}

pub fn spawn_recv(args: &[&str]) -> Receiver {
    spawn_recv_with(&[], "127.0.0.1:0", args)
}

/// The receiver's exit status, stdout and stderr; killed after `limit`.
pub fn finish(mut r: Receiver, limit: Duration) -> (Option<i32>, String, String) {
    let t = Instant::now();
    loop {
        if let Some(st) = r.child.try_wait().expect("wait recv") {
            let mut out = String::new();
            r.child.stdout.take().expect("stdout piped").read_to_string(&mut out).expect("read stdout");
            let err = r.stderr.join().expect("stderr reader");
            return (st.code(), out, err);
        }
        if t.elapsed() > limit {
            // Ask it to stop as a user would (Ctrl-C), so its report says how far it got.
            let _ = Command::new("kill").args(["-INT", &r.child.id().to_string()]).status();
            let t = Instant::now();
            while r.child.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(15) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = r.child.kill();
            let _ = r.child.wait();
            let mut out = String::new();
            let _ = r.child.stdout.take().map(|mut o| o.read_to_string(&mut out));
            let err = r.stderr.join().unwrap_or_default();
            panic!("wirespeed did not finish within {limit:?}; its report after Ctrl-C:\n{out}\nstderr:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("run wirespeed")
}

pub fn run_prefixed(prefix: &[&str], args: &[&str]) -> Output {
    Command::new(prefix[0]).args(&prefix[1..]).arg(bin()).args(args).output().expect("run wirespeed")
}

pub fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}):\n{s}"))
}

pub fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no integer '{key}' in {v}"))
}

/// Expected coalesced gap ranges of a sorted set of lost sequence numbers.
pub fn ranges(lost: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &s in lost {
        match out.last_mut() {
            Some((_, b)) if *b + 1 == s => *b = s,
            _ => out.push((s, s)),
        }
    }
    out
}

pub fn gap_list(stream: &Value) -> Vec<(u64, u64)> {
    stream["gaps"].as_array().expect("gaps array").iter().map(|g| (u(g, "first"), u(g, "last"))).collect()
}

static NS_SEQ: AtomicU32 = AtomicU32::new(0);

/// A network namespace created for one test and deleted when dropped, even on panic.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let name = format!("wst-{tag}-{}-{}", std::process::id(), NS_SEQ.fetch_add(1, Ordering::Relaxed));
        sh(&["ip", "netns", "add", &name]);
        let ns = Netns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    pub fn exec(&self, cmd: &[&str]) {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(cmd);
        sh(&full);
    }

    pub fn prefix(&self) -> Vec<&str> {
        vec!["ip", "netns", "exec", &self.name]
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// Run as an unprivileged user: as root (CI) through setpriv, otherwise directly.
pub fn unprivileged(args: &[&str]) -> Output {
    if is_root() {
        run_prefixed(&["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], args)
    } else {
        run(args)
    }
}

pub fn sh(cmd: &[&str]) {
    let out = Command::new(cmd[0]).args(&cmd[1..]).output().expect("run command");
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

static DIR_SEQ: AtomicU32 = AtomicU32::new(0);

/// A fresh directory under the system temp dir for one test, removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "wst-{tag}-{}-{}",
            std::process::id(),
            DIR_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }

    /// The one file with extension `ext` in the directory.
    pub fn only(&self, ext: &str) -> String {
        let v: Vec<std::path::PathBuf> = std::fs::read_dir(&self.0)
            .expect("list dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        assert_eq!(v.len(), 1, "one .{ext} file expected in {:?}", self.0);
        v[0].to_str().expect("utf-8 path").to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The share directory of this test binary, where recorders publish what they share and taps
/// look (every test uses its own share names in it). The first call sets WIRESPEED_SHARE_DIR
/// for every process spawned after it, always to this one value.
pub fn share_dir() -> &'static str {
    static DIR: std::sync::OnceLock<TempDir> = std::sync::OnceLock::new();
    let d = DIR.get_or_init(|| {
        // A static is never dropped: remove the share directories earlier runs of this test
        // binary left (theirs is named with their pid, no longer running).
        if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                let pid = name.strip_prefix("wst-tap-share-").and_then(|r| r.split('-').next());
                if pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        TempDir::new("tap-share")
    });
    // Always the same value: std serializes it with spawning children.
    std::env::set_var("WIRESPEED_SHARE_DIR", d.path());
    d.path()
}

/// The traffic tests of the test binary take turns: on a two-core host, two paced senders
/// spinning on the same cores starve each other, and the tests would measure each other. Every
/// test that makes partitions holds it too, so a run with a WIRESPEED_RUN_DIR of its own (which
/// cannot see the default directory's partitions, and whose `partition init` may take the
/// shared `/hw` mount point from under them) never runs beside them.
static TRAFFIC: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A test's turn at the traffic; with `WS_TRAFFIC_LOG=FILE` set, how long the test held it is
/// appended to FILE when it ends (`SECONDS TEST`), to see which tests the suite's time goes to.
pub struct Turn {
    _held: std::sync::MutexGuard<'static, ()>,
    since: std::time::Instant,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(path) = std::env::var_os("WS_TRAFFIC_LOG") {
            use std::io::Write;
            let name = std::thread::current().name().unwrap_or("?").to_string();
            let line = format!("{:.2} {name}\n", self.since.elapsed().as_secs_f64());
            if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
                let _ = f.write_all(line.as_bytes());
            }
        }
    }
}

/// Hold this while a test sends traffic.
pub fn traffic() -> Turn {
    let held = TRAFFIC.lock().unwrap_or_else(|e| e.into_inner());
    Turn { _held: held, since: std::time::Instant::now() }
}

/// The command fails with exit code `code` and one line on stderr that contains `needle`, with
/// no panic.
pub fn expect_fail(args: &[&str], code: i32, needle: &str) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?} exit code; stderr: {err}");
    assert!(err.contains(needle), "{args:?}: expected '{needle}' in stderr:\n{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line expected:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Start `wirespeed ARGS`, send it SIGTERM as soon as it prints a line to stdout for which
/// `ready` holds, and return what it printed: how the stop-by-signal tests stop a long benchmark
/// part-way at a known point (after its first row, say) rather than after a guessed delay, which
/// on a busy host may come before the first row or after the last. Panics if no such line comes
/// within `limit`.
pub fn run_then_term_when(args: &[&str], ready: impl Fn(&str) -> bool, limit: Duration) -> Output {
    let mut child =
        Command::new(bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start wirespeed");
    let mut err = child.stderr.take().expect("stderr piped");
    let stderr = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let out = BufReader::new(child.stdout.take().expect("stdout piped"));
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in out.lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let t = Instant::now();
    let mut stdout = String::new();
    let mut signalled = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                stdout.push_str(&line);
                stdout.push('\n');
                if !signalled && ready(&line) {
                    let st = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
                    assert!(st.success());
                    signalled = true;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if !signalled && t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: no line for which to stop it within {limit:?}; stdout:\n{stdout}");
        }
    }
    let _ = reader.join();
    let status = child.wait().expect("wait for wirespeed");
    let stderr = stderr.join().unwrap_or_default();
    assert!(signalled, "{args:?} ended before printing the line to stop it at; stdout:\n{stdout}");
    Output { status, stdout: stdout.into_bytes(), stderr }
}

/// A benchmark point's accounting, exact whatever the host's load: every datagram the sender
/// sent was received or is counted missing; with the end-of-stream message the ledger's loss is
/// the same number (`injected` more: sequence numbers the sender left out on purpose); any loss
/// beyond the injected one is explained by the kernel's own drop counters (on loopback or a veth
/// link nothing else drops); and the point is called lossy exactly when something is missing.
/// Whether the host kept up (nothing lost) is the scheduler's business, not the program's:
/// callers may assert more only when this returns `true` (nothing but `injected` lost).
pub fn assert_point_accounted(p: &Value, injected: u64) -> bool {
    let (sent, received, lost, missing) = (u(p, "sent"), u(p, "received"), u(p, "lost"), u(p, "missing"));
    assert!(sent > 0, "{p}");
    assert_eq!(received + missing, sent, "every datagram sent was received or is missing: {p}");
    let eos = p["end_of_stream"] == true;
    if eos {
        assert_eq!(lost, missing + injected, "the ledger's loss is the sender's count, exactly: {p}");
    }
    let kernel = p["kernel_socket_drops"].as_u64().unwrap_or(0)
        + p["softnet_dropped"].as_u64().unwrap_or(0)
        + p["kernel_rcvbuf_errors"].as_u64().unwrap_or(0);
    assert!(missing <= kernel, "{missing} lost that no kernel counter dropped: {p}");
    let clean = eos && missing == 0 && u(p, "invalid") == 0;
    assert_eq!(p["lossy"], !(clean && injected == 0), "{p}");
    clean
}

/// How many datagrams the kernel may have dropped before a `recv --json` report's ledger saw
/// them: the socket's own counters (SO_RXQ_OVFL, /proc/net/udp), UDP RcvbufErrors and softnet
/// backlog drops (the last two count the whole namespace or host, so this is an upper bound). On
/// loopback nothing else drops a datagram: a test that must pass on a busy host asserts its
/// exact counts when this is 0 and, when it is not, that every number is still received or lost
/// and the loss beyond what was injected is no more than this.
pub fn recv_kernel_drops(rep: &Value) -> u64 {
    let k = &rep["kernel"];
    let socket = [&k["socket_drops_rxq_ovfl"], &k["socket_drops_proc"], &k["namespace_delta"]["rcvbuf_errors"]]
        .iter()
        .filter_map(|v| v.as_u64())
        .max()
        .unwrap_or(0);
    socket + k["namespace_delta"]["softnet_dropped"].as_u64().unwrap_or(0)
}

/// The host's UDP RcvbufErrors, IPv4 and IPv6: datagrams a full socket buffer dropped. Read it
/// before and after a run on loopback, where nothing else drops a datagram, to bound the loss a
/// busy host may add to a test whose program reports no kernel counters of its own.
pub fn udp_rcvbuf_errors() -> u64 {
    let v4 = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let rows: Vec<&str> = v4.lines().filter(|l| l.starts_with("Udp:")).collect();
    let mut total = 0;
    if let [head, vals] = rows[..] {
        let k = head.split_whitespace().position(|w| w == "RcvbufErrors");
        total += k.and_then(|k| vals.split_whitespace().nth(k)).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    let v6 = std::fs::read_to_string("/proc/net/snmp6").unwrap_or_default();
    if let Some(l) = v6.lines().find(|l| l.starts_with("Udp6RcvbufErrors")) {
        total += l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    total
}

/// `12,345`: a count as the program prints it.
pub fn commas(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// After `pause`, no process is left whose command line holds `marker` (a distinctive argument
/// the run gave its children), other than one whose command line holds `owner` (the run itself).
pub fn assert_none_left(marker: &str, owner: &str, pause: Duration) {
    std::thread::sleep(pause);
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            assert!(!cmd.contains(marker) || cmd.contains(owner), "left behind: {cmd}");
        }
    }
}

/// The partition prefix a bench heading names ("partitions 'PREFIX' over a veth link").
pub fn partitions_named_in(heading: &str) -> Option<&str> {
    heading.split("partitions '").nth(1).and_then(|r| r.split('\'').next())
}

/// No network namespace of the partitions `prefix` is left.
pub fn assert_partitions_gone(prefix: &str) {
    let ns = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    assert!(!String::from_utf8_lossy(&ns.stdout).contains(prefix), "partitions {prefix} left behind");
}

/// N from "stopped by a signal after N ..." on stderr.
pub fn stopped_after(stderr: &str) -> usize {
    stderr
        .split("stopped by a signal after ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no 'stopped by a signal after N' in: {stderr}"))
}

/// A small tmpfs mounted for one test (needs root); unmounted on drop, before its directory
/// is removed.
pub struct SmallFs(pub TempDir);

impl SmallFs {
    pub fn new(size: &str) -> SmallFs {
        let d = TempDir::new("small-fs");
        sh(&["mount", "-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", d.path()]);
        SmallFs(d)
    }

    pub fn path(&self) -> &str {
        self.0.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// `wirespeed record --json` of 1024-byte counter datagrams into a 12 MiB tmpfs until it is
/// full (needs root): the sender keeps offering until the recorder has stopped, however much
/// of it a busy host's kernel drops, so the disk fills on any host. Returns the filesystem
/// (keep it while reading the files) and the recorder's exit code, stdout and stderr.
pub fn record_into_full_disk() -> (SmallFs, Option<i32>, String, String) {
    let fs = SmallFs::new("12m");
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &[
            "--size",
            "1024",
            "-o",
            fs.path(),
            "--json",
            "--buffer",
            "8M",
            "--block",
            "1M",
            "--file-size",
            "4M",
            "--duration",
            "60",
        ],
    );
    let mut sender = spawn_send(r.port, &["--size", "1024", "--rate", "30kpps", "--duration", "600"]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(120));
    let _ = sender.kill();
    let _ = sender.wait();
    (fs, code, stdout, stderr)
}

/// The recording files in `dir` whose names end in `ext`, sorted; hidden files (a recorder's
/// directory probe, disk-test's file) are left out.
pub fn visible_files(dir: &std::path::Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .expect("list dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(ext))
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    v.sort();
    v
}

/// `wirespeed send 127.0.0.1:PORT ARGS...`, run to its end; it must succeed.
pub fn send_to_port(port: u16, args: &[&str]) {
    let target = format!("127.0.0.1:{port}");
    let mut a = vec!["send", target.as_str()];
    a.extend_from_slice(args);
    let out = run(&a);
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// `wirespeed send 127.0.0.1:PORT ARGS...` running in the background, its output discarded.
pub fn spawn_send(port: u16, args: &[&str]) -> Child {
    Command::new(bin())
        .args(["send", &format!("127.0.0.1:{port}")])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sender")
}

/// Wait until the one `.part` file in `dir` holds at least `bytes`; returns its length then.
pub fn wait_part_file(dir: &std::path::Path, bytes: u64) -> u64 {
    let t = std::time::Instant::now();
    loop {
        let len = visible_files(dir, ".part").first().and_then(|p| std::fs::metadata(p).ok()).map_or(0, |m| m.len());
        if len >= bytes {
            return len;
        }
        assert!(t.elapsed() < Duration::from_secs(120), "{len} bytes on disk, not {bytes}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A wirespeed end-of-stream message for stream 0 of 1, claiming `first..=last` all sent: what
/// tests forge or send by hand to check how a receiver judges one.
pub fn end_message(session: u64, first: u64, last: u64) -> [u8; 80] {
    wirespeed::control::EndOfStream {
        session,
        stream_index: 0,
        stream_count: 1,
        format_stream: 0,
        first_seq: first,
        last_seq: last,
        sent: last - first + 1,
        skipped: 0,
    }
    .encode()
}

/// A UDP socket on loopback connected to `port`: a hand-made sender for tests.
pub fn sender_to(port: u16) -> std::net::UdpSocket {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind a test sender");
    s.connect(("127.0.0.1", port)).expect("address the receiver");
    s
}

/// A finished command's stderr, as text.
pub fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A finished command's stdout, as text.
pub fn stdout_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The packet counts of the `counter` statements in nftables chain `table`/`chain` (family
/// inet) of namespace `ns`, in rule order: how many packets a loss rule really dropped.
pub fn nft_counters(ns: &Netns, table: &str, chain: &str) -> Vec<u64> {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, "nft", "list", "chain", "inet", table, chain])
        .output()
        .expect("nft list");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("counter packets ")
        .skip(1)
        .map(|r| {
            r.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no count in {text}"))
        })
        .collect()
}
