//! The raw devices end to end, as root: two partitions' devices mounted over an in-memory
//! link, used by `dd`, `cat`, shell redirection and select as a user would.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wirespeed_lab::testbed::xplink::{device_path, DevLink, Devices, MemLink};

/// Every wait is bounded by this: it only fails when something hangs.
const HANG: Duration = Duration::from_secs(120);

/// Partitions (1 and 2, or more) with their devices mounted in a fresh directory; unmounted
/// and removed on drop, also when the test panics.
struct Pair {
    dir: PathBuf,
    mounts: Vec<Option<Devices>>,
    links: Vec<Arc<MemLink>>,
    link_a: Arc<MemLink>,
}

impl Pair {
    fn new(capacity: usize) -> Pair {
        Pair::mesh(&[1, 2], capacity)
    }

    fn mesh(ids: &[u32], capacity: usize) -> Pair {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "wirespeed-xplink-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let links = MemLink::mesh(ids, capacity);
        let mut p = Pair { dir, mounts: vec![], links: links.clone(), link_a: Arc::clone(&links[0]) };
        for (id, l) in ids.iter().zip(links) {
            let d = Devices::mount(&p.dir.join(id.to_string()), *id, l as Arc<dyn DevLink>);
            p.mounts.push(Some(d.unwrap_or_else(|e| panic!("mount partition {id}: {e}"))));
        }
        p
    }

    /// Device `d` of partition `local` towards the other one of a pair.
    fn dev(&self, local: u32, d: u8) -> PathBuf {
        self.dev_to(local, 3 - local, d)
    }

    /// Device `d` of partition `local` towards `remote`.
    fn dev_to(&self, local: u32, remote: u32, d: u8) -> PathBuf {
        self.dir.join(local.to_string()).join("raw").join(format!("{remote:02}")).join(format!("{d:02x}"))
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for m in &mut self.mounts {
            drop(m.take());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sh(script: &str) -> Child {
    Command::new("sh").arg("-c").arg(script).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start sh")
}

/// Wait for a child, killing it and failing the test if it hangs.
fn finish(mut c: Child, what: &str) -> Output {
    let t = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t.elapsed() > HANG {
            let _ = c.kill();
            panic!("{what} hung for {HANG:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

fn ok(c: Child, what: &str) -> Output {
    let o = finish(c, what);
    assert!(o.status.success(), "{what} failed: {}", String::from_utf8_lossy(&o.stderr));
    o
}

fn sha256(p: &Path) -> String {
    let o = Command::new("sha256sum").arg(p).output().unwrap();
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap().to_string()
}

fn random_file(p: &Path, mib: usize) {
    let o = Command::new("dd")
        .args(["if=/dev/urandom", &format!("of={}", p.display()), "bs=1M", &format!("count={mib}"), "status=none"])
        .output()
        .unwrap();
    assert!(o.status.success());
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

#[test]
#[ignore = "needs root"]
fn the_devices_are_listed_as_the_seed_shows_them() {
    let p = Pair::new(1 << 20);
    let names: Vec<String> = std::fs::read_dir(p.dir.join("1/raw/02"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let want: Vec<String> = (0..16).map(|d| format!("{d:02x}")).collect();
    assert_eq!(names, want);
    let remotes: Vec<String> = std::fs::read_dir(p.dir.join("2/raw"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(remotes, vec!["01"]);
    assert_eq!(device_path("x", 1, 2, 15).file_name().unwrap(), "0f");
    let md = std::fs::metadata(p.dev(1, 0)).unwrap();
    assert!(md.is_file());
    assert!(std::fs::metadata(p.dir.join("1/raw/03")).is_err(), "no partition 3");
}

#[test]
#[ignore = "needs root"]
fn dd_of_100_mib_through_a_device_arrives_byte_identical() {
    let p = Pair::new(4 << 20);
    let (src, dst) = (p.file("in"), p.file("out"));
    random_file(&src, 100);
    let reader = sh(&format!("dd if={} of={} bs=1M iflag=fullblock status=none", q(&p.dev(2, 0)), q(&dst)));
    let writer = sh(&format!("dd if={} of={} bs=1M status=none", q(&src), q(&p.dev(1, 0))));
    ok(writer, "dd into the device");
    ok(reader, "dd out of the device");
    assert_eq!(std::fs::metadata(&dst).unwrap().len(), 100 << 20);
    assert_eq!(sha256(&src), sha256(&dst));
}

#[test]
#[ignore = "needs root"]
fn cat_and_redirection_work_both_ways() {
    let p = Pair::new(256 << 10);
    for (from, to, d) in [(1u32, 2u32, 1u8), (2, 1, 2)] {
        let (src, dst) = (p.file(&format!("in{d}")), p.file(&format!("out{d}")));
        random_file(&src, 3);
        let reader = sh(&format!("cat {} > {}", q(&p.dev(to, d)), q(&dst)));
        let writer = sh(&format!("cat {} > {}", q(&src), q(&p.dev(from, d))));
        ok(writer, "cat into the device");
        ok(reader, "cat out of the device");
        assert_eq!(sha256(&src), sha256(&dst), "partition {from} to {to}, device {d}");
    }
}

#[test]
#[ignore = "needs root"]
fn each_writer_close_is_one_end_of_file() {
    let p = Pair::new(64 << 10);
    for word in ["first", "second"] {
        let reader = sh(&format!("cat {}", q(&p.dev(2, 3))));
        ok(sh(&format!("printf {word} > {}", q(&p.dev(1, 3)))), "printf into the device");
        let o = ok(reader, "cat until end of file");
        assert_eq!(String::from_utf8_lossy(&o.stdout), word);
    }
}

#[test]
#[ignore = "needs root"]
fn a_blocked_device_does_not_block_another() {
    let p = Pair::new(64 << 10);
    let idle = sh(&format!("cat {}", q(&p.dev(2, 4))));
    let idle_writer = sh(&format!("dd if=/dev/zero of={} bs=1M count=1 status=none", q(&p.dev(2, 6))));
    let src = p.file("in");
    random_file(&src, 5);
    let reader = sh(&format!("cat {} > {}", q(&p.dev(2, 5)), q(&p.file("out"))));
    ok(sh(&format!("cat {} > {}", q(&src), q(&p.dev(1, 5)))), "cat into device 05");
    ok(reader, "cat out of device 05");
    assert_eq!(sha256(&src), sha256(&p.file("out")));
    // Release the two that were blocked all along.
    ok(sh(&format!("printf x > {}", q(&p.dev(1, 4)))), "printf into device 04");
    assert_eq!(ok(idle, "cat of device 04").stdout, b"x");
    let drain = sh(&format!("cat {} | wc -c", q(&p.dev(1, 6))));
    ok(idle_writer, "dd into a full device 06");
    assert_eq!(String::from_utf8_lossy(&ok(drain, "cat of device 06").stdout).trim(), "1048576");
}

const SELECT: &str = r#"
import os, select, sys
path, timeout = sys.argv[1], float(sys.argv[2])
fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
try:
    os.read(fd, 10)
    print("read-did-not-block")
except BlockingIOError:
    print("eagain")
sys.stdout.flush()
r, _, _ = select.select([fd], [], [], timeout)
if not r:
    print("timeout")
else:
    print("readable", os.read(fd, 100).decode())
"#;

#[test]
#[ignore = "needs root"]
fn select_times_out_when_empty_and_wakes_when_the_remote_writes() {
    let p = Pair::new(64 << 10);
    let dev = p.dev(2, 7);
    let o = Command::new("python3").args(["-c", SELECT, dev.to_str().unwrap(), "0.3"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "eagain\ntimeout\n", "{}", String::from_utf8_lossy(&o.stderr));
    let mut waiter = Command::new("python3")
        .args(["-c", SELECT, dev.to_str().unwrap(), "100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(waiter.stdout.as_mut().unwrap()).read_line(&mut first).unwrap();
    assert_eq!(first, "eagain\n");
    std::thread::sleep(Duration::from_millis(200)); // let it reach select (either way it must wake)
    ok(sh(&format!("printf hello > {}", q(&p.dev(1, 7)))), "printf into the device");
    let o = ok(waiter, "python select");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "readable hello\n");
}

#[test]
#[ignore = "needs root"]
fn deactivation_fails_both_ends_of_a_transfer_and_activation_restores_them() {
    let p = Pair::new(1 << 20);
    let reader = sh(&format!("dd if={} of=/dev/null bs=1M", q(&p.dev(2, 8))));
    let writer = sh(&format!("dd if=/dev/zero of={} bs=1M count=1000000", q(&p.dev(1, 8))));
    std::thread::sleep(Duration::from_millis(500)); // let bytes flow (the outcome is the same if not)
    p.link_a.deactivate();
    for (c, what) in [(writer, "writer"), (reader, "reader")] {
        let o = finish(c, what);
        assert!(!o.status.success(), "{what} should fail");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("Transport endpoint is not connected"), "{what}: {err}");
    }
    // The devices stay; opens succeed, I/O fails until activation.
    let o = finish(sh(&format!("printf x > {}", q(&p.dev(1, 8)))), "write while deactivated");
    assert!(!o.status.success());
    p.link_a.activate();
    let reader = sh(&format!("cat {}", q(&p.dev(2, 9))));
    ok(sh(&format!("printf back > {}", q(&p.dev(1, 9)))), "write after activation");
    assert_eq!(ok(reader, "read after activation").stdout, b"back");
}

#[test]
#[ignore = "needs root"]
fn ctrl_c_on_a_blocked_reader_returns_at_once() {
    let p = Pair::new(64 << 10);
    // SIGINT at its default action whatever this process inherited (a shell's background job
    // ignores it, and an ignored disposition passes through exec).
    let reader = Command::new("env")
        .args(["--default-signal=INT", "cat"])
        .arg(p.dev(2, 10))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    Command::new("kill").args(["-INT", &reader.id().to_string()]).status().unwrap();
    let o = finish(reader, "interrupted cat");
    assert!(!o.status.success());
}

#[test]
#[ignore = "needs root"]
fn unmount_with_a_blocked_reader_fails_it_instead_of_hanging() {
    let mut p = Pair::new(64 << 10);
    let reader = sh(&format!("cat {}", q(&p.dev(2, 11))));
    std::thread::sleep(Duration::from_millis(300)); // let it block (same outcome if not yet open)
    let b = p.mounts[1].take().unwrap();
    let t = std::thread::spawn(move || b.unmount());
    let o = finish(reader, "reader during unmount");
    assert!(!o.status.success());
    let start = Instant::now();
    while !t.is_finished() {
        assert!(start.elapsed() < HANG, "unmount hung");
        std::thread::sleep(Duration::from_millis(20));
    }
    t.join().unwrap().unwrap();
}

/// Every one of Table 3's block sizes goes through a device whole: 1000 writes of it by `dd`,
/// counted on the far end. (Speeds are `bench ttcp --table3`'s business, not a test's.)
#[test]
#[ignore = "needs root"]
fn every_block_size_arrives_whole() {
    let p = Pair::new(4 << 20);
    for (i, bs) in [32usize, 128, 1024, 4096, 16384, 65536, 262144, 1 << 20].into_iter().enumerate() {
        let d = i as u8;
        let reader = sh(&format!("dd if={} bs={bs} status=none | wc -c", q(&p.dev(2, d))));
        let writer = sh(&format!("dd if=/dev/zero of={} bs={bs} count=1000 status=none", q(&p.dev(1, d))));
        ok(writer, "dd writer");
        let got = String::from_utf8_lossy(&ok(reader, "dd reader").stdout).trim().to_string();
        assert_eq!(got, (bs * 1000).to_string(), "block size {bs}");
    }
}

#[test]
#[ignore = "needs root"]
fn a_mount_left_by_a_dead_daemon_is_replaced() {
    let p = Pair::new(64 << 10);
    let stale = p.dir.join("stale");
    std::fs::create_dir_all(&stale).unwrap();
    let dev = wirespeed::sys::fuse::open_dev().unwrap();
    wirespeed::sys::fuse::mount(&dev, &stale, "fuse.wirespeed", "allow_other").unwrap();
    drop(dev); // the server is gone: the mount answers ENOTCONN
    assert_eq!(std::fs::metadata(&stale).unwrap_err().raw_os_error(), Some(libc::ENOTCONN));
    let (la, _lb) = MemLink::pair(1, 2, 64);
    let d = Devices::mount(&stale, 1, la).expect("mount over the stale one");
    assert!(!wirespeed_lab::testbed::xplink::detach_stale(&stale).unwrap(), "a live mount is left alone");
    assert!(std::fs::metadata(stale.join("raw/02/0f")).unwrap().is_file());
    d.unmount().unwrap();
    let dev = wirespeed::sys::fuse::open_dev().unwrap();
    wirespeed::sys::fuse::mount(&dev, &stale, "fuse.wirespeed", "allow_other").unwrap();
    drop(dev);
    assert!(wirespeed_lab::testbed::xplink::detach_stale(&stale).unwrap());
    assert!(std::fs::metadata(&stale).unwrap().is_dir());
}

#[test]
#[ignore = "needs root"]
fn a_private_view_shows_the_devices_at_a_fixed_path_and_the_host_does_not_see_it() {
    let p = Pair::new(64 << 10);
    let (devices, view) = (p.dir.join("1"), p.dir.join("view"));
    let reader = {
        let (devices, view) = (devices.clone(), view.clone());
        std::thread::spawn(move || {
            wirespeed_lab::testbed::xplink::enter_view(&devices, &view).unwrap();
            // This thread's children see the devices at the fixed path.
            sh(&format!("cat {}", q(&view.join("raw/02/0d"))))
        })
        .join()
        .unwrap()
    };
    assert!(!view.join("raw").exists(), "the host's view is unchanged");
    ok(sh(&format!("printf seen > {}", q(&p.dev(2, 13)))), "printf into the device");
    assert_eq!(ok(reader, "cat through the private view").stdout, b"seen");
    let e = wirespeed_lab::testbed::xplink::enter_view(&p.dir.join("nothing"), &view).unwrap_err();
    assert!(e.to_string().contains("no raw devices are mounted at"), "{e}");
}

#[test]
#[ignore = "needs root"]
fn several_remotes_are_independent_and_one_going_away_leaves_the_others() {
    let p = Pair::mesh(&[1, 2, 3], 256 << 10);
    let remotes: std::collections::BTreeSet<String> = std::fs::read_dir(p.dir.join("1/raw"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(remotes.into_iter().collect::<Vec<_>>(), ["02", "03"]);
    let blocked = sh(&format!("cat {}", q(&p.dev_to(2, 3, 0))));
    let mut jobs = vec![];
    for (to, d) in [(2u32, 0u8), (3, 0), (3, 1)] {
        let (src, dst) = (p.file(&format!("in{to}{d}")), p.file(&format!("out{to}{d}")));
        random_file(&src, 4);
        let reader = sh(&format!("cat {} > {}", q(&p.dev_to(to, 1, d)), q(&dst)));
        let writer = sh(&format!("cat {} > {}", q(&src), q(&p.dev_to(1, to, d))));
        jobs.push((reader, writer, src, dst));
    }
    for (reader, writer, src, dst) in jobs {
        ok(writer, "cat into a device");
        ok(reader, "cat out of a device");
        assert_eq!(sha256(&src), sha256(&dst));
    }
    p.links[2].deactivate(); // partition 3 goes away
    let o = finish(blocked, "reader of partition 3's device");
    assert!(String::from_utf8_lossy(&o.stderr).contains("Transport endpoint is not connected"));
    let reader = sh(&format!("cat {}", q(&p.dev_to(2, 1, 2))));
    ok(sh(&format!("printf still > {}", q(&p.dev_to(1, 2, 2)))), "1 to 2 after 3 went away");
    assert_eq!(ok(reader, "cat 1 to 2").stdout, b"still");
}

/// 1, 2 and 4 devices at once, each carrying `dd bs=1M count=50`: every stream arrives whole,
/// none waits for another.
#[test]
#[ignore = "needs root"]
fn several_devices_at_once_each_arrive_whole() {
    let p = Pair::new(4 << 20);
    let mut first = 0u8;
    for n in [1u8, 2, 4] {
        let mut jobs = vec![];
        for d in first..first + n {
            let reader = sh(&format!("dd if={} bs=1M status=none | wc -c", q(&p.dev(2, d))));
            let writer = sh(&format!("dd if=/dev/zero of={} bs=1M count=50 status=none", q(&p.dev(1, d))));
            jobs.push((reader, writer));
        }
        for (reader, writer) in jobs {
            ok(writer, "dd writer");
            let got = String::from_utf8_lossy(&ok(reader, "dd reader").stdout).trim().to_string();
            assert_eq!(got, (50u64 << 20).to_string(), "{n} devices at once");
        }
        first += n;
    }
}

/// Run as root: re-runs itself as `nobody`, where mounting must fail with one clear line.
#[test]
#[ignore = "needs root"]
fn a_user_who_is_not_root_gets_one_clear_line() {
    if std::env::var_os("WIRESPEED_XPLINK_AS_NOBODY").is_some() {
        let (la, _lb) = MemLink::pair(1, 2, 64);
        let e = Devices::mount(Path::new("/nonexistent/xplink"), 1, la).err().expect("must fail");
        println!("ERROR: {e}");
        return;
    }
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args(["a_user_who_is_not_root_gets_one_clear_line", "--include-ignored", "--nocapture"])
        .env("WIRESPEED_XPLINK_AS_NOBODY", "1")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().find(|l| l.starts_with("ERROR: ")).unwrap_or_else(|| panic!("no error line in: {out}"));
    assert_eq!(
        line,
        "ERROR: raw devices of partition 1 need root (they are a FUSE filesystem mounted with mount(2)): run as root"
    );
}
