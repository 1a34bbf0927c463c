//! The ethtool calls against the real `ethtool` command, on a veth pair in a network namespace
//! of their own: what the calls read is what `ethtool` prints, and what they set, `ethtool`
//! then sees. Needs root (and the `ethtool` and `ip` commands).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use wirespeed::sys::ethtool;
use wirespeed::sys::proc::with_netns;

/// The veth end the calls look at; its peer is `PEER`.
const IFACE: &str = "wsa";
const PEER: &str = "wsb";

/// A network namespace holding a veth pair, removed (with the pair) when dropped, also when a
/// test panics; or the host's own namespace, left as it is.
struct Netns {
    name: Option<String>,
    file: Option<File>,
}

impl Netns {
    fn new() -> Netns {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!("ws-ethtool-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        run("ip", &["netns", "add", &name]);
        // Removed from here on, whatever fails next.
        let mut ns = Netns { file: None, name: Some(name.clone()) };
        run("ip", &["-n", &name, "link", "add", IFACE, "type", "veth", "peer", "name", PEER]);
        ns.file = Some(File::open(format!("/run/netns/{name}")).expect("open the namespace"));
        ns
    }

    /// This process's own network namespace, only to be read.
    fn host() -> Netns {
        Netns { name: None, file: None }
    }

    /// `f` run on a thread inside the namespace.
    fn call<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        match &self.file {
            Some(file) => with_netns(file, f).expect("join the namespace"),
            None => f(),
        }
    }

    /// `ethtool ARGS` inside the namespace: success, stdout, stderr.
    fn ethtool(&self, args: &[&str]) -> (bool, String, String) {
        let mut cmd = match &self.name {
            Some(name) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", name, "ethtool"]);
                c
            }
            None => Command::new("ethtool"),
        };
        let out = cmd.args(args).output().expect("run ethtool (is it installed?)");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `ethtool ARGS` that must succeed: its stdout.
    fn ethtool_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.ethtool(args);
        assert!(ok, "ethtool {args:?} failed: {err}");
        out
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.file = None;
        if let Some(name) = &self.name {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `ethtool -k` as (name, on, fixed), for every line that is one feature: the legacy names
/// that stand for one feature are turned into the kernel's; the legacy group lines
/// (`tx-checksumming`, with their members indented below) are left out, as they are not
/// features but summaries of the lines that follow.
fn ethtool_k(text: &str) -> Vec<(String, bool, bool)> {
    let lines: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("Features for")).skip(1).collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((name, rest)) = line.split_once(": ") else { continue };
        let group = !line.starts_with('\t') && lines.get(i + 1).is_some_and(|next| next.starts_with('\t'));
        if group {
            continue;
        }
        let on = match rest.split_whitespace().next() {
            Some("on") => true,
            Some("off") => false,
            other => panic!("unexpected state {other:?} in {line:?}"),
        };
        out.push((ethtool::kernel_feature_name(name.trim()).to_string(), on, rest.contains("[fixed]")));
    }
    out
}

/// `ethtool -l` as a map from "Pre-set maximums"/"Current hardware settings" and the kind
/// (`RX`, `Combined`) to the number, absent where ethtool prints `n/a`.
fn ethtool_l(text: &str) -> HashMap<(bool, String), u32> {
    let mut current = false;
    let mut out = HashMap::new();
    for line in text.lines() {
        if line.starts_with("Pre-set maximums") {
            current = false;
        } else if line.starts_with("Current hardware settings") {
            current = true;
        } else if let Some((k, v)) = line.split_once(':') {
            if let Ok(n) = v.trim().parse() {
                out.insert((current, k.trim().to_string()), n);
            }
        }
    }
    out
}

fn assert_channels_as_ethtool(ns: &Netns, iface: &str) {
    let (ok, out, err) = ns.ethtool(&["-l", iface]);
    let ours = match ns.call(|| ethtool::channels(iface)) {
        Ok(c) => c,
        Err(e) => {
            assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{iface}: {e}");
            assert!(!ok && err.contains("not supported"), "{iface}: ethtool -l reads them: {out}");
            return;
        }
    };
    assert!(ok, "{iface}: {err}");
    let theirs = ethtool_l(&out);
    let get = |current: bool, kind: &str| theirs.get(&(current, kind.to_string())).copied().unwrap_or(0);
    assert_eq!(ours.max_rx, get(false, "RX"), "{theirs:?}");
    assert_eq!(ours.rx, get(true, "RX"), "{theirs:?}");
    assert_eq!(ours.max_combined, get(false, "Combined"), "{theirs:?}");
    assert_eq!(ours.combined, get(true, "Combined"), "{theirs:?}");
}

/// `ethtool -S` as (name, value) in its order.
fn ethtool_s(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .skip_while(|l| !l.starts_with("NIC statistics"))
        .skip(1)
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(": ")?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn assert_stats_as_ethtool(ns: &Netns, iface: &str) {
    let (ok, out, err) = ns.ethtool(&["-S", iface]);
    let ours = match ns.call(|| ethtool::stats(iface)) {
        Ok(s) => s,
        Err(e) => {
            assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{iface}: {e}");
            assert!(!ok && err.contains("no stats available"), "{iface}: ethtool -S reads them: {out}");
            return;
        }
    };
    assert!(ok, "{iface}: {err}");
    let theirs = ethtool_s(&out);
    let names = |v: &[(String, u64)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&ours), names(&theirs), "{iface}");
    // A veth's one statistic that is not a counter is fixed for the life of the pair.
    let peer = |v: &[(String, u64)]| v.iter().find(|(n, _)| n == "peer_ifindex").map(|&(_, x)| x);
    assert_eq!(peer(&ours), peer(&theirs), "{iface}");
}

fn assert_features_as_ethtool(ns: &Netns, iface: &str) {
    let ours = ns.call(|| ethtool::features(iface)).expect("features");
    let theirs = ethtool_k(&ns.ethtool_ok(&["-k", iface]));
    assert!(theirs.len() > 40, "{theirs:?}");
    for (name, on, fixed) in &theirs {
        let f = ours.iter().find(|f| &f.name == name).unwrap_or_else(|| panic!("ethtool lists {name}, we do not"));
        assert_eq!((f.active, !f.changeable), (*on, *fixed), "{name}: ours {f:?}, ethtool on={on} fixed={fixed}");
    }
    // And nothing ethtool does not list (it shows every named feature of the kernel's set).
    for f in &ours {
        assert!(theirs.iter().any(|(n, _, _)| n == &f.name), "we list {f:?}, ethtool does not");
    }
}

#[test]
#[ignore = "needs root"]
fn the_driver_is_veth_as_ethtool_says() {
    let ns = Netns::new();
    let out = ns.ethtool_ok(&["-i", IFACE]);
    assert!(out.lines().any(|l| l == "driver: veth"), "{out}");
    assert_eq!(ns.call(|| ethtool::driver(IFACE)).unwrap(), "veth");
    // The interface is found in the namespace the calling thread is in, and only there.
    let e = ns.call(|| ethtool::driver("eth-ws-none")).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    assert_eq!(ethtool::driver(IFACE).unwrap_err().kind(), io::ErrorKind::NotFound, "{IFACE} is not out here");
}

#[test]
#[ignore = "needs root"]
fn features_agree_with_ethtool_k() {
    let ns = Netns::new();
    assert_features_as_ethtool(&ns, IFACE);
}

#[test]
#[ignore = "needs root"]
fn set_feature_round_trips_and_ethtool_agrees() {
    let ns = Netns::new();
    let active = |name: &str| {
        let k = ethtool::kernel_feature_name(name).to_string();
        let f = ns.call(|| ethtool::features(IFACE)).unwrap();
        f.into_iter().find(|f| f.name == k).expect("the feature").active
    };
    // The kernel's name, then ethtool's legacy one.
    for name in ["rx-udp-gro-forwarding", "generic-receive-offload"] {
        let before = active(name);
        for on in [!before, before, true, false] {
            ns.call(|| ethtool::set_feature(IFACE, name, on)).unwrap_or_else(|e| panic!("{name} {on}: {e}"));
            assert_eq!(active(name), on, "{name}");
            assert_features_as_ethtool(&ns, IFACE);
        }
    }
    // A fixed feature: already in the asked state is fine, the other state is refused as fixed.
    let lro = ns.call(|| ethtool::features(IFACE)).unwrap().into_iter().find(|f| f.name == "rx-lro").unwrap();
    assert!(!lro.changeable && !lro.active, "veth has no LRO: {lro:?}");
    ns.call(|| ethtool::set_feature(IFACE, "large-receive-offload", false)).unwrap();
    let e = ns.call(|| ethtool::set_feature(IFACE, "rx-lro", true)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
    assert!(e.to_string().contains("[fixed]"), "{e}");
    // A name this kernel does not know.
    let e = ns.call(|| ethtool::set_feature(IFACE, "rx-no-such-offload", true)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
    assert_features_as_ethtool(&ns, IFACE);
}

/// A veth has receive and transmit channels (up to one per possible CPU) and no combined ones.
#[test]
#[ignore = "needs root"]
fn channels_agree_with_ethtool_l_and_set() {
    let ns = Netns::new();
    assert_channels_as_ethtool(&ns, IFACE);
    let c = ns.call(|| ethtool::channels(IFACE)).unwrap();
    assert_eq!((c.max_combined, c.combined), (0, 0), "{c:?}");
    assert!(c.max_rx >= 1 && c.rx >= 1, "{c:?}");
    let e = ns.call(|| ethtool::set_combined_channels(IFACE, 1)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
    let e = ns.call(|| ethtool::set_rx_channels(IFACE, c.max_rx + 1)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    let e = ns.call(|| ethtool::set_rx_channels(IFACE, 0)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");

    for rx in [c.max_rx, 1, c.rx] {
        ns.call(|| ethtool::set_rx_channels(IFACE, rx)).unwrap();
        assert_eq!(ns.call(|| ethtool::channels(IFACE)).unwrap(), ethtool::Channels { rx, ..c });
        assert_channels_as_ethtool(&ns, IFACE);
        // The statistics are per receive queue: they follow the count.
        assert_stats_as_ethtool(&ns, IFACE);
    }
}

/// The first value `ethtool` prints after `key` at the start of a line (`rx-usecs: 8`,
/// `Adaptive RX: off  TX: n/a`).
fn value_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| l.strip_prefix(key)?.split_whitespace().next())
}

/// Rings and coalescing of `iface` as `ethtool -g` and `-c` print them; where `ethtool` cannot
/// read them, the calls are `Unsupported`. Returns whether each could be read.
fn assert_rings_and_coalescing_as_ethtool(ns: &Netns, iface: &str) -> (bool, bool) {
    let (ok, out, err) = ns.ethtool(&["-g", iface]);
    let rings = match ns.call(|| ethtool::rings(iface)) {
        Err(e) => {
            assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{iface}: {e}");
            assert!(!ok && err.contains("not supported"), "{iface}: ethtool -g reads them: {out}");
            false
        }
        Ok(r) => {
            assert!(ok, "{iface}: {err}");
            let l = ethtool_l(&out);
            let get = |current: bool, kind: &str| l.get(&(current, kind.to_string())).copied().unwrap_or(0);
            assert_eq!(
                r,
                ethtool::Rings {
                    rx: get(true, "RX"),
                    rx_max: get(false, "RX"),
                    tx: get(true, "TX"),
                    tx_max: get(false, "TX")
                },
                "{iface}: {out}"
            );
            true
        }
    };
    let (ok, out, err) = ns.ethtool(&["-c", iface]);
    let coalesce = match ns.call(|| ethtool::coalesce(iface)) {
        Err(e) => {
            assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{iface}: {e}");
            assert!(!ok && err.contains("not supported"), "{iface}: ethtool -c reads it: {out}");
            false
        }
        Ok(c) => {
            assert!(ok, "{iface}: {err}");
            // ethtool prints n/a for what the driver does not support; the ioctl says 0.
            let num = |key: &str| value_after(&out, key).and_then(|v| v.parse().ok()).unwrap_or(0);
            assert_eq!(c.rx_usecs, num("rx-usecs:"), "{iface}: {out}");
            assert_eq!(c.rx_frames, num("rx-frames:"), "{iface}: {out}");
            assert_eq!(c.adaptive_rx, value_after(&out, "Adaptive RX:") == Some("on"), "{iface}: {out}");
            true
        }
    };
    (rings, coalesce)
}

/// Rings and coalescing: whatever this kernel's veth answers, the calls answer the same; where
/// `ethtool` cannot read them, they are `Unsupported`, and so are the sets.
#[test]
#[ignore = "needs root"]
fn rings_and_coalescing_are_what_ethtool_sees() {
    let ns = Netns::new();
    let (rings, coalesce) = assert_rings_and_coalescing_as_ethtool(&ns, IFACE);
    if !rings {
        let e = ns.call(|| ethtool::set_rx_ring(IFACE, 256)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
    }
    if !coalesce {
        let e = ns.call(|| ethtool::set_rx_coalesce(IFACE, 8, 32)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
    }
}

/// Every interface of the host but veths, read only: whatever its driver (virtio_net has rings
/// and coalescing, ifb and loopback have little), each call answers what `ethtool` prints, or
/// is `Unsupported` where `ethtool` cannot read it either. Needs no root, but the `ethtool`
/// command, as the rest of this file.
#[test]
#[ignore = "needs root"]
fn every_host_interface_reads_as_ethtool_sees_it() {
    let host = Netns::host();
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .expect("/sys/class/net")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    for iface in &names {
        let (ok, out, _) = host.ethtool(&["-i", iface]);
        match ethtool::driver(iface) {
            // Gone since listed, or a veth: the ends other tests make come, go and change under us.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Ok(d) if d == "veth" => continue,
            Ok(d) => assert!(ok && out.lines().any(|l| l == format!("driver: {d}")), "{iface}: {d} vs {out}"),
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{iface}: {e}");
                assert!(!ok, "{iface}: ethtool -i reads it: {out}");
            }
        }
        assert_rings_and_coalescing_as_ethtool(&host, iface);
        assert_channels_as_ethtool(&host, iface);
        assert_features_as_ethtool(&host, iface);
        assert_stats_as_ethtool(&host, iface);
        eprintln!("{iface}: as ethtool");
    }
}

#[test]
#[ignore = "needs root"]
fn stats_agree_with_ethtool_s() {
    let ns = Netns::new();
    assert_stats_as_ethtool(&ns, IFACE);
    let stats = ns.call(|| ethtool::stats(IFACE)).unwrap();
    assert!(stats.iter().any(|(n, i)| n == "peer_ifindex" && *i > 0), "{stats:?}");
}

/// The statistics' names and values are read in two steps, and a veth has as many per-queue
/// statistics as receive queues: while another thread changes the queue count, every read is
/// still one consistent set (names as `ethtool -S` lists for one count or the other), or says
/// that the count kept changing — never a mix, never garbage.
#[test]
#[ignore = "needs root"]
fn stats_stay_consistent_while_the_channels_change() {
    let ns = Netns::new();
    let c = ns.call(|| ethtool::channels(IFACE)).unwrap();
    if c.max_rx < 2 {
        eprintln!("one possible CPU: a veth cannot change its receive queue count here");
        return;
    }
    let names = |rx: u32| {
        ns.call(|| ethtool::set_rx_channels(IFACE, rx)).unwrap();
        ethtool_s(&ns.ethtool_ok(&["-S", IFACE])).into_iter().map(|(n, _)| n).collect::<Vec<_>>()
    };
    let (few, many) = (names(1), names(c.max_rx));
    assert!(few.len() < many.len());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (mut consistent, mut changing) = (0, 0);
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.call(|| {
                let mut rx = 1;
                while !stop.load(Ordering::Relaxed) {
                    ethtool::set_rx_channels(IFACE, rx).unwrap();
                    rx = if rx == 1 { c.max_rx } else { 1 };
                }
            })
        });
        ns.call(|| {
            for _ in 0..2000 {
                match ethtool::stats(IFACE) {
                    Ok(st) => {
                        let got: Vec<String> = st.into_iter().map(|(n, _)| n).collect();
                        assert!(got == few || got == many, "a mixed read: {got:?}");
                        consistent += 1;
                    }
                    Err(e) => {
                        assert!(e.to_string().contains("kept changing"), "{e}");
                        changing += 1;
                    }
                }
            }
        });
        stop.store(true, Ordering::Relaxed);
    });
    eprintln!("{consistent} consistent reads, {changing} that gave up on a changing count");
    // Once the count stays put, a read succeeds and has it.
    let now = ns.call(|| ethtool::channels(IFACE)).unwrap().rx;
    let got: Vec<String> = ns.call(|| ethtool::stats(IFACE)).unwrap().into_iter().map(|(n, _)| n).collect();
    assert_eq!(got, if now == 1 { few } else { many });
    assert_stats_as_ethtool(&ns, IFACE);
}
