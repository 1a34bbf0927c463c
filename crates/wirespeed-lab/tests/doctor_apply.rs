//! `doctor --apply` on the real kernel, inside a throwaway network namespace: the changes are
//! made on a thread that joined the namespace (where `/proc/sys/net` and ethtool answer for it),
//! the undo script is run there with `ip netns exec`, and every value must be back as read
//! before. A host-wide key must fail there without touching the host. Needs root:
//! `cargo test --profile tests -p wirespeed-lab --test suite doctor_apply -- --include-ignored`.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use wirespeed_lab::doctor::apply::{apply, apply_report, Applied, NOT_PRIVILEGED};
use wirespeed_lab::doctor::{Change, Root};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique name for this process and call.
fn unique(tag: &str) -> String {
    format!("{tag}{}n{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

fn run(args: &[&str]) -> String {
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A network namespace with a veth pair in it, deleted when dropped (also on a panic).
struct Netns {
    name: String,
}

impl Netns {
    fn new() -> Netns {
        let ns = Netns { name: unique("wsapply") };
        run(&["ip", "netns", "add", &ns.name]);
        run(&["ip", "-n", &ns.name, "link", "add", "wsa0", "type", "veth", "peer", "name", "wsa1"]);
        ns
    }

    fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "netns", "exec", &self.name];
        all.extend_from_slice(args);
        run(&all)
    }

    /// A sysctl as seen inside, whitespace collapsed.
    fn sysctl(&self, key: &str) -> String {
        self.exec(&["sysctl", "-n", key]).split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// An offload's state as `ethtool -k` prints it inside.
    fn feature(&self, iface: &str, name: &str) -> bool {
        let out = self.exec(&["ethtool", "-k", iface]);
        let line = out
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in ethtool -k {iface}: {out}"));
        line.split_whitespace().nth(1) == Some("on")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// A file removed when dropped.
struct Gone(PathBuf);

impl Drop for Gone {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn host(key_path: &str) -> String {
    std::fs::read_to_string(key_path).unwrap().trim().to_string()
}

fn sysctl(key: &str, value: &str) -> Change {
    Change::Sysctl { key: key.into(), value: value.into() }
}

#[test]
#[ignore = "needs root"]
fn apply_then_undo_in_a_namespace_restores_every_value() {
    let ns = Netns::new();
    let undo = Gone(std::env::temp_dir().join(format!("{}.sh", unique("ws-apply-undo-"))));
    let _ = std::fs::remove_file(&undo.0);

    let keys = [
        "net.ipv4.conf.all.rp_filter",
        "net.ipv4.conf.default.rp_filter",
        "net.ipv4.udp_rmem_min",
        "net.core.somaxconn",
    ];
    let before: Vec<String> = keys.iter().map(|k| ns.sysctl(k)).collect();
    let n = |i: usize| before[i].parse::<u64>().unwrap();
    let new = [
        ((n(0) + 1) % 3).to_string(),
        ((n(1) + 2) % 3).to_string(),
        (n(2) + 4096).to_string(),
        (n(3) + 1024).to_string(),
    ];
    let feats = ["rx-gro-list", "rx-udp-gro-forwarding"];
    let feat_before: Vec<bool> = feats.iter().map(|f| ns.feature("wsa0", f)).collect();
    let host_rmem = host("/proc/sys/net/core/rmem_max");
    let host_somaxconn = host("/proc/sys/net/core/somaxconn");
    let rmem_want = (host_rmem.parse::<u64>().unwrap() + 4096).to_string();

    let mut changes: Vec<Change> = keys.iter().zip(&new).map(|(k, v)| sysctl(k, v)).collect();
    changes.push(sysctl("net.core.rmem_max", &rmem_want));
    for (f, b) in feats.iter().zip(&feat_before) {
        changes.push(Change::Feature { iface: "wsa0".into(), feature: f.to_string(), on: !b });
    }

    let ns_file = std::fs::File::open(format!("/run/netns/{}", ns.name)).unwrap();
    let apply_in_ns = |todo: Vec<Change>| -> (Applied, Vec<String>, bool) {
        let (ns_file, undo_path) = (ns_file.try_clone().unwrap(), undo.0.clone());
        std::thread::spawn(move || {
            wirespeed::sys::netns::enter_thread(&ns_file).expect("setns");
            let ethtool_works = wirespeed::sys::ethtool::features("wsa0").is_ok();
            let mut said = vec![];
            let a = apply_report(&todo, &Root::live(), &undo_path, &mut |l| said.push(l.to_string())).expect("apply");
            (a, said, ethtool_works)
        })
        .join()
        .expect("the applying thread")
    };

    // All or none: the host-wide key is refused in a namespace, so what was made before it is
    // put back and what comes after it is not attempted.
    let (applied, said, _) = apply_in_ns(changes.clone());
    eprintln!("{}", said.join("\n"));
    for (i, k) in keys.iter().enumerate() {
        assert!(said.contains(&format!("changed {k} {} -> {}", before[i], new[i])), "{k}: {said:?}");
        assert!(said.contains(&format!("put back {k} = {}", before[i])), "{k}: {said:?}");
        assert_eq!(ns.sysctl(k), before[i], "{k} put back inside");
    }
    assert_eq!(applied.rolled_back.len(), keys.len(), "{applied:?}");
    assert!(applied.changed.is_empty(), "{applied:?}");
    let rmem = applied.failed.iter().find(|f| f.change == changes[4]).expect("rmem_max must fail in a namespace");
    assert!(rmem.reason.contains("network namespace other than the host's"), "{}", rmem.reason);
    assert!(said.iter().any(|l| l.starts_with("not applied: net.core.rmem_max: ") && !l.contains('\n')), "{said:?}");
    for (i, f) in feats.iter().enumerate() {
        assert!(applied.failed.iter().any(|x| x.change == changes[5 + i]), "{f} not attempted: {applied:?}");
        assert_eq!(ns.feature("wsa0", f), feat_before[i], "{f} left alone");
    }
    assert!(applied.failure().is_some());
    assert_eq!(host("/proc/sys/net/core/rmem_max"), host_rmem);
    assert_eq!(host("/proc/sys/net/core/somaxconn"), host_somaxconn);
    let _ = std::fs::remove_file(&undo.0);

    // Without the refused key, every change is made, each said with before and after.
    let changes: Vec<Change> = changes.iter().enumerate().filter(|(i, _)| *i != 4).map(|(_, c)| c.clone()).collect();
    let (applied, said, ethtool_works) = apply_in_ns(changes.clone());
    eprintln!("{}", said.join("\n"));
    for (i, k) in keys.iter().enumerate() {
        // (Were the offloads refused, the sysctls would have been put back: all or none.)
        let want = if ethtool_works { &new[i] } else { &before[i] };
        assert_eq!(&ns.sysctl(k), want, "{k} inside");
        assert!(said.contains(&format!("changed {k} {} -> {}", before[i], new[i])), "{k}: {said:?}");
    }
    assert_eq!(host("/proc/sys/net/core/rmem_max"), host_rmem);
    assert_eq!(host("/proc/sys/net/core/somaxconn"), host_somaxconn);
    // Offloads: set through sys::ethtool, checked with the ethtool program.
    for (i, f) in feats.iter().enumerate() {
        let change = &changes[4 + i];
        if ethtool_works {
            assert!(applied.changed.iter().any(|d| &d.change == change), "{f}: {applied:?}");
            assert_eq!(ns.feature("wsa0", f), !feat_before[i], "{f} inside");
        } else {
            eprintln!("sys::ethtool cannot read features yet: {f} must be refused and left alone");
            let failed = applied.failed.iter().find(|x| &x.change == change).expect("refused");
            assert!(failed.reason.contains("could not be undone"), "{}", failed.reason);
            assert_eq!(ns.feature("wsa0", f), feat_before[i], "{f} inside");
        }
    }
    assert_eq!(applied.failure().is_some(), !ethtool_works, "{applied:?}");

    // The undo script holds exactly the changes made.
    let text = std::fs::read_to_string(&undo.0).unwrap();
    assert_eq!(std::fs::metadata(&undo.0).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(text.lines().filter(|l| l.ends_with("|| failed=1")).count(), applied.changed.len(), "{text}");
    assert!(!text.contains("rmem_max"), "{text}");

    // Run it, twice: every value is back as read.
    for _ in 0..2 {
        ns.exec(&["sh", undo.0.to_str().unwrap()]);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(ns.sysctl(k), before[i], "{k} after undo");
        }
        for (i, f) in feats.iter().enumerate() {
            assert_eq!(ns.feature("wsa0", f), feat_before[i], "{f} after undo");
        }
    }
    assert_eq!(host("/proc/sys/net/core/rmem_max"), host_rmem);
}

/// Run as root: re-runs itself as `nobody`, where `--apply` must refuse with one line and
/// write nothing.
#[test]
#[ignore = "needs root"]
fn apply_refuses_a_user_who_is_not_root() {
    let undo = std::env::temp_dir().join(format!("ws-apply-refused-{}.sh", std::process::id()));
    if std::env::var_os("WIRESPEED_APPLY_AS_NOBODY").is_some() {
        let e = apply(&[sysctl("net.core.somaxconn", "4096")], &Root::live(), &undo, &mut |l| println!("SAID: {l}"))
            .expect_err("must refuse");
        println!("ERROR: {e}");
        println!("EXIT: {}", e.exit_code());
        return;
    }
    let _gone = Gone(undo.clone());
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(std::env::current_exe().unwrap())
        .args(["apply_refuses_a_user_who_is_not_root", "--include-ignored", "--nocapture"])
        .env("WIRESPEED_APPLY_AS_NOBODY", "1")
        .output()
        .expect("setpriv (util-linux) is needed to run this as nobody");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    let line = out.lines().find(|l| l.starts_with("ERROR: ")).unwrap_or_else(|| panic!("no error line in: {out}"));
    assert_eq!(line, format!("ERROR: {NOT_PRIVILEGED}"));
    assert!(out.lines().any(|l| l == "EXIT: 1"), "{out}");
    assert!(!out.contains("SAID: "), "{out}");
    assert!(!undo.exists());
}
