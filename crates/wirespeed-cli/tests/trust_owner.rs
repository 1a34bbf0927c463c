//! wirespeed removes only what it made: namespaces and cgroups made by someone else are never
//! adopted nor deleted, and a run killed with SIGKILL leaves no child running, while the next
//! run removes the partitions it left. Root only; every name is unique to this test process and
//! a guard cleans up when a test fails.

use crate::common;

use common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ns_path(ns: &str) -> PathBuf {
    Path::new("/run/netns").join(ns)
}

fn cgroup(prefix: &str, id: u32) -> PathBuf {
    Path::new("/sys/fs/cgroup/cpuset").join(format!("wirespeed-{prefix}-{id}"))
}

/// `wirespeed ARGS` with WIRESPEED_RUN_DIR set to `run_dir`.
fn run_in(run_dir: &Path, args: &[&str]) -> Output {
    Command::new(bin()).args(args).env("WIRESPEED_RUN_DIR", run_dir).output().expect("run wirespeed")
}

/// Cleans up whatever a test made, passed or failed: namespaces and cgroups made "by someone
/// else", partitions wirespeed made, processes, the private run directory.
struct Guard {
    run_dir: PathBuf,
    prefixes: Vec<String>,
    foreign_ns: Vec<String>,
    foreign_cgroups: Vec<PathBuf>,
    /// Processes to kill if they still run, as (pid, start time).
    pids: Vec<(u32, String)>,
    child: Option<Child>,
    /// No test of the default run directory runs beside a private one (see `traffic`). Last,
    /// so that it is let go after the clean-up above.
    _alone: crate::common::Turn,
}

impl Guard {
    fn new(tag: &str) -> Guard {
        let run_dir = std::env::temp_dir().join(format!("wst-owner-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&run_dir);
        std::fs::create_dir_all(&run_dir).expect("run dir");
        Guard {
            run_dir,
            prefixes: Vec::new(),
            foreign_ns: Vec::new(),
            foreign_cgroups: Vec::new(),
            pids: Vec::new(),
            child: None,
            _alone: traffic(),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        run_in(&self.run_dir, args)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for (p, start) in &self.pids {
            if still_runs(*p, start) {
                let _ = Command::new("kill").args(["-9", &p.to_string()]).output();
            }
        }
        for p in &self.prefixes {
            let _ = run_in(&self.run_dir, &["partition", "init", "--prefix", p]);
        }
        for ns in &self.foreign_ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        for d in &self.foreign_cgroups {
            let _ = std::fs::remove_dir(d);
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

fn sh_ok(cmd: &[&str]) {
    let o = Command::new(cmd[0]).args(&cmd[1..]).output().expect("run command");
    assert!(o.status.success(), "{cmd:?}: {}", text(&o.stderr));
}

fn ino(p: &Path) -> Option<u64> {
    std::fs::metadata(p).ok().map(|m| m.ino())
}

#[test]
#[ignore = "needs root"]
fn init_and_create_never_touch_a_namespace_or_cgroup_they_did_not_make() {
    let mut g = Guard::new("foreign");
    let prefix = format!("wto{}f", std::process::id());
    g.prefixes.push(prefix.clone());
    let (ns1, ns2) = (format!("{prefix}1"), format!("{prefix}2"));
    // Someone else's namespace and cgroup, with names wirespeed would use for partitions 1, 2.
    g.foreign_ns.push(ns1.clone());
    sh_ok(&["ip", "netns", "add", &ns1]);
    let theirs = ino(&ns_path(&ns1));
    let cg = cgroup(&prefix, 2);
    let have_cpuset = Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists();
    if have_cpuset {
        g.foreign_cgroups.push(cg.clone());
        std::fs::create_dir(&cg).expect("foreign cgroup");
    }

    // init with no state: removes nothing, and names what it left alone.
    let o = g.run(&["partition", "init", "--prefix", &prefix]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains(&format!("namespace {ns1} left alone")), "{out}");
    assert!(out.contains("nothing to undo"), "{out}");
    assert_eq!(ino(&ns_path(&ns1)), theirs, "init deleted a namespace it never made");
    if have_cpuset {
        assert!(out.contains(&format!("cgroup {} left alone", cg.display())), "{out}");
        assert!(cg.exists(), "init removed a cgroup it never made");
    }

    // create refuses, in one line, before changing anything.
    let create = ["partition", "create", "--prefix", &prefix, "-p", "1", "-c", "0", "-p", "2", "-c", "0"];
    let o = g.run(&[&create[..], &["--share-cpus", "--no-daemons"]].concat());
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "create adopted a namespace it did not make: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(&format!("namespace {ns1}")) && err.contains("not made by wirespeed"), "{err}");
    if have_cpuset {
        assert!(err.contains(&format!("cgroup {}", cg.display())), "{err}");
    }
    assert_eq!(ino(&ns_path(&ns1)), theirs);
    assert!(!ns_path(&ns2).exists(), "create made partition 2 although it refused");
    assert!(!g.run_dir.join(format!("{prefix}.json")).exists(), "create wrote a state although it refused");

    // Once they are gone, create works; a namespace deleted and made again behind wirespeed's
    // back (same name, maybe the same inode number) is then not wirespeed's to delete.
    sh_ok(&["ip", "netns", "del", &ns1]);
    if have_cpuset {
        std::fs::remove_dir(&cg).expect("rmdir foreign cgroup");
    }
    let o = g.run(&[&create[..], &["--share-cpus", "--no-daemons"]].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    sh_ok(&["ip", "netns", "del", &ns1]);
    sh_ok(&["ip", "netns", "add", &ns1]);
    let theirs = ino(&ns_path(&ns1));
    let o = g.run(&["partition", "init", "--prefix", &prefix]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains(&format!("namespace {ns2} deleted")), "{out}");
    assert!(out.contains(&format!("namespace {ns1} left alone")), "{out}");
    assert_eq!(ino(&ns_path(&ns1)), theirs, "init deleted a namespace made by someone else");
    assert!(!ns_path(&ns2).exists());
    assert!(!g.run_dir.join(format!("{prefix}.json")).exists());
}

/// Field `n` (1-based, as in proc(5)) of /proc/PID/stat, if the process exists.
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    rest.split_whitespace().nth(n - 3).map(str::to_string)
}

/// Running (not zombie) children of `parent`, with their command lines.
fn children(parent: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if stat_field(pid, 4).as_deref() == Some(&parent.to_string()) && stat_field(pid, 3).as_deref() != Some("Z") {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            out.push((pid, text(&cmd).replace('\0', " ")));
        }
    }
    out
}

/// Whether `pid` still runs as the process that started at `start` (not a zombie).
fn still_runs(pid: u32, start: &str) -> bool {
    stat_field(pid, 22).as_deref() == Some(start) && stat_field(pid, 3).as_deref() != Some("Z")
}

/// Start `wirespeed ARGS` (a run that makes its own partitions, named on stderr), wait until
/// its two children (`markers`, words of their command lines) run, kill it with SIGKILL, and
/// check that its children die with it and that the next run (`partition init` of another
/// prefix) removes its partitions, saying that `what` left them.
fn killed_run_leaves_nothing(tag: &str, args: &[&str], what: &str, markers: [&str; 2]) {
    let mut g = Guard::new(tag);
    let mut run = Command::new(bin())
        .args(args)
        .env("WIRESPEED_RUN_DIR", &g.run_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wirespeed");
    let pid = run.id();
    let mut err = BufReader::new(run.stderr.take().expect("stderr"));
    g.child = Some(run);
    // Its heading names the partitions it makes.
    let prefix = loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).expect("stderr") > 0, "{args:?} ended before naming its partitions");
        if let Some(p) = partitions_named_in(&line) {
            break p.to_string();
        }
    };
    g.prefixes.push(prefix.clone());
    // Keep reading its stderr, so it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    // Wait until both its children run (the receiving end starts first, and is listening
    // before the sending end starts).
    let t = Instant::now();
    let kids = loop {
        let kids = children(pid);
        if markers.iter().all(|m| kids.iter().any(|(_, c)| c.contains(&format!(" {m} ")))) {
            break kids;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{args:?} did not start both children: {kids:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let kids: Vec<(u32, String, String)> =
        kids.into_iter().filter_map(|(p, c)| stat_field(p, 22).map(|s| (p, s, c))).collect();
    g.pids.extend(kids.iter().map(|k| (k.0, k.1.clone())));
    let state = g.run_dir.join(format!("{prefix}.json"));
    assert!(state.exists(), "no state {} while {what} runs", state.display());
    // While it runs, its partitions are its own: another run's clean-up leaves them, and
    // `create` does not take them over.
    let other = format!("wto{}{tag}", std::process::id());
    let o = g.run(&["partition", "init", "--prefix", &other]);
    assert!(o.status.success() && !text(&o.stderr).contains("removed partitions"), "{}", text(&o.stderr));
    assert!(state.exists() && ns_path(&format!("{prefix}1")).exists(), "a live {what}'s partitions were removed");
    let o = g.run(&["partition", "create", "--prefix", &prefix, "-p", "1", "-c", "0", "--no-daemons"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("belong to a running {what} (pid {pid})")), "{err}");

    // kill -9: the run can clean nothing up itself.
    let mut run = g.child.take().expect("run");
    run.kill().expect("SIGKILL");
    run.wait().expect("reap");
    // Its children die with it (within seconds even on a loaded machine; they were asked to
    // run for two minutes).
    let t = Instant::now();
    while kids.iter().any(|(p, s, _)| still_runs(*p, s)) {
        let left: Vec<&String> = kids.iter().filter(|(p, s, _)| still_runs(*p, s)).map(|k| &k.2).collect();
        assert!(t.elapsed() < Duration::from_secs(60), "the killed {what} left children running: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The next run finds its partitions, removes them and says so.
    let o = g.run(&["partition", "init", "--prefix", &other]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!("removed partitions '{prefix}' left behind by {what} (pid {pid}), which is gone")),
        "{err}"
    );
    for id in [1, 2] {
        assert!(!ns_path(&format!("{prefix}{id}")).exists(), "namespace {prefix}{id} left behind");
        assert!(!cgroup(&prefix, id).exists(), "cgroup of partition {id} left behind");
    }
    assert!(!state.exists(), "state {} left behind", state.display());
    assert!(!g.run_dir.join(&prefix).exists(), "work directory left behind");
    // And only once.
    let o = g.run(&["partition", "init", "--prefix", &other]);
    assert!(!text(&o.stderr).contains("removed partitions"), "{}", text(&o.stderr));
}

#[test]
#[ignore = "needs root"]
fn a_demo_killed_with_sigkill_leaves_no_child_and_the_next_run_removes_its_partitions() {
    killed_run_leaves_nothing(
        "d",
        &["demo", "--duration", "120", "--rate", "1M", "--size", "1000"],
        "demo",
        ["recv", "send"],
    );
}

#[test]
#[ignore = "needs root"]
fn a_bench_killed_with_sigkill_leaves_no_child_and_the_next_run_removes_its_partitions() {
    let args = ["bench", "soak", "--rate", "1M", "--size", "1000", "--duration", "120s", "--every", "1s", "--json"];
    killed_run_leaves_nothing("b", &args, "bench", ["recv", "send"]);
}

#[test]
#[ignore = "needs root"]
fn a_ping_killed_with_sigkill_leaves_no_child_and_the_next_run_removes_its_partitions() {
    let args = ["ping", "--pps", "10", "--duration", "120s", "--no-files"];
    killed_run_leaves_nothing("p", &args, "ping", ["reflect", "ping"]);
}

#[test]
fn a_sweep_that_records_removes_its_recordings_and_nothing_else() {
    let _turn = traffic();
    let out = TempDir::new("owner-sweep");
    let rec = TempDir::new("owner-sweep-rec");
    let mine = rec.0.join("notes.txt");
    std::fs::write(&mine, "not wirespeed's\n").expect("write a file of the user's");
    let o = run(&[
        "bench",
        "sweep",
        "--loopback",
        "--rates",
        "10M",
        "--sizes",
        "1000",
        "--rcvbuf",
        "4M",
        "--duration",
        "500ms",
        "--record",
        rec.path(),
        "--json",
        "-o",
        out.path(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(&mine).ok().as_deref(),
        Some("not wirespeed's\n"),
        "the sweep removed a file it did not write"
    );
    let left: Vec<_> = std::fs::read_dir(&rec.0).expect("recording dir").flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("notes.txt")], "recordings left behind");
}
