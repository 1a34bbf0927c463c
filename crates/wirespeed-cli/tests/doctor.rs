//! `wirespeed doctor`: findings read from snapshots of other machines (exact statuses, figures
//! and changes), its JSON document, its refusals, and `--apply` then the undo script in a
//! network namespace made for the test.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wirespeed-lab/tests/fixtures/doctor").join(name);
    p.canonicalize().expect("fixture directory").to_str().expect("utf-8").to_string()
}

/// The two-node snapshot's arguments with `extra` after them.
fn numa2(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> =
        ["--root", &fixture("numa2-smt"), "--for", "4G", "--size", "1080", "--cpu", "2"].map(String::from).to_vec();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn doctor_json<S: AsRef<str>>(args: &[S]) -> Value {
    let mut all = vec!["doctor", "--json"];
    all.extend(args.iter().map(AsRef::as_ref));
    let out = run(&all);
    assert_eq!(out.status.code(), Some(0), "{all:?}: {}", String::from_utf8_lossy(&out.stderr));
    json(&String::from_utf8_lossy(&out.stdout))
}

fn finding<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id} in {r:#}"))
}

/// A change as JSON with its keys in name order (the document keeps the order the fields are
/// declared in; these expectations name them alphabetically).
fn sorted(c: &Value) -> String {
    let m: std::collections::BTreeMap<&String, &Value> = c.as_object().expect("a change is an object").iter().collect();
    serde_json::to_string(&m).expect("json")
}

/// A finding's changes, each as [`sorted`] JSON.
fn changes(f: &Value) -> Vec<String> {
    f["changes"].as_array().expect("changes").iter().map(sorted).collect()
}

#[test]
fn a_two_node_smt_host_at_linux_defaults_is_diagnosed_exactly() {
    let r = doctor_json(&numa2(&["--port", "7148"]));
    assert_eq!(r["schema"], "wirespeed.doctor/1");
    assert_eq!(r["iface"], "ens1f0");
    assert_eq!(r["privileged"], true);

    let rmem = finding(&r, "socket.rmem_max");
    assert_eq!(rmem["status"], "problem");
    assert!(rmem["why"].as_str().unwrap().contains("a 208.0 KiB buffer holds 0.43 ms at 4.00 Gb/s"), "{rmem}");
    assert_eq!(changes(rmem), vec![r#"{"key":"net.core.rmem_max","kind":"sysctl","value":"33554432"}"#]);

    // All four receive interrupts on the capture CPU 2: moved to its node's other core (3,7),
    // off CPU 2's SMT sibling 6; the un-named config vector 124 is left alone.
    let irq = finding(&r, "irq.placement");
    assert_eq!(irq["status"], "advice");
    let want: Vec<String> =
        (120..=123).map(|n| format!(r#"{{"cpus":"3,7","irq":{n},"kind":"irq_affinity"}}"#)).collect();
    assert_eq!(changes(irq), want);
    assert!(irq["seen"].as_str().unwrap().contains("irqbalance is running"));
    assert!(irq["fix"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f.as_str().unwrap().starts_with("systemctl stop irqbalance")));

    assert_eq!(finding(&r, "cpu.smt")["seen"], "CPU 2 shares its core with CPU 6");
    assert_eq!(finding(&r, "nic.numa")["status"], "ok");
    let rings = finding(&r, "nic.rings");
    assert_eq!(rings["status"], "advice");
    assert!(rings["why"].as_str().unwrap().contains("1.1 ms of the stream"));
    assert_eq!(changes(rings), vec![r#"{"iface":"ens1f0","kind":"rings","rx":4096}"#]);
    assert_eq!(
        changes(finding(&r, "nic.offloads")),
        vec![r#"{"feature":"rx-checksum","iface":"ens1f0","kind":"feature","on":true}"#]
    );
    let counters = finding(&r, "nic.counters");
    assert_eq!(counters["status"], "problem");
    assert_eq!(counters["seen"], "ens1f0: rx_missed_errors 5,000");
    let fw = finding(&r, "stack.firewall");
    assert_eq!(fw["status"], "problem");
    assert_eq!(fw["fix"][0], "nft insert rule inet filter input udp dport 7148 accept");
    assert_eq!(finding(&r, "stack.rp_filter")["changes"].as_array().unwrap().len(), 2);
    let backlog = finding(&r, "socket.netdev_max_backlog");
    assert_eq!(backlog["status"], "problem");
    assert!(backlog["seen"].as_str().unwrap().contains("softnet dropped 42 since boot (CPU 2 42)"));
    assert_eq!(finding(&r, "cpu.governor")["status"], "ok");
    assert_eq!(finding(&r, "cpu.load")["status"], "unknown");
}

#[test]
fn a_capture_cpu_on_the_other_node_is_a_numa_problem() {
    let r = doctor_json(&["--root", &fixture("numa2-smt"), "--for", "4G", "--size", "1080", "--cpu", "0"]);
    let numa = finding(&r, "nic.numa");
    assert_eq!(numa["status"], "problem");
    assert_eq!(numa["seen"], "ens1f0 is on NUMA node 1 (CPUs 2-3,6-7); the capture CPU 0 is on node 0");
    assert_eq!(numa["fix"][0], "capture on a CPU of node 1: --cpu 2");
    // CPU 0 takes none of the NIC's interrupts: nothing to move.
    assert_eq!(finding(&r, "irq.placement")["status"], "ok");
    assert_eq!(finding(&r, "cpu.governor")["status"], "advice");
}

#[test]
fn what_cannot_be_read_is_said_not_guessed() {
    let r = doctor_json(&["--root", &fixture("vm-veth"), "--for", "2G", "--size", "8800", "--cpu", "1"]);
    assert_eq!(r["privileged"], false);
    assert!(r["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("not root")));
    let rings = finding(&r, "nic.rings");
    assert_eq!(rings["status"], "unknown");
    assert!(rings["why"].as_str().unwrap().starts_with("a veth has no hardware ring"));
    assert_eq!(finding(&r, "irq.placement")["status"], "unknown");
    assert_eq!(finding(&r, "stack.firewall")["why"], "the snapshot has no nft/ruleset");
    assert_eq!(finding(&r, "socket.netdev_max_backlog")["status"], "unknown");
    assert_eq!(finding(&r, "cpu.isolation")["status"], "ok");
    assert_eq!(finding(&r, "socket.rmem_max")["status"], "ok");
    assert_eq!(finding(&r, "nic.mtu")["status"], "ok");
    let prio = finding(&r, "process.priority");
    assert!(prio["seen"].as_str().unwrap().contains("nice 19"));
    assert!(prio["fix"].as_array().unwrap().iter().any(|f| f.as_str().unwrap().contains("sched_rt_runtime_us=950000")));
    // GRO is changeable and off; the [fixed] checksum is not offered as a change.
    assert_eq!(
        changes(finding(&r, "nic.offloads")),
        vec![r#"{"feature":"rx-gro","iface":"veth0","kind":"feature","on":true}"#]
    );
}

#[test]
fn an_mtu_below_the_datagram_is_the_first_problem() {
    let r = doctor_json(&["--root", &fixture("numa2-smt"), "--for", "4G", "--size", "8800", "--cpu", "2"]);
    let mtu = finding(&r, "nic.mtu");
    assert_eq!(mtu["status"], "problem");
    assert_eq!(mtu["seen"], "ens1f0: MTU 1500; a 8800-byte datagram is a 8828-byte IPv4 packet");
    assert!(mtu["why"].as_str().unwrap().starts_with("every datagram is cut into 6 IP fragments"));
    assert!(mtu["changes"].as_array().unwrap().is_empty(), "the MTU needs the switch too: never --apply");
}

#[test]
fn the_json_document_has_the_schema_it_names() {
    let r = doctor_json(&[
        "--root",
        &fixture("numa2-smt"),
        "--for",
        "500kpps",
        "--size",
        "1080",
        "--cpu",
        "2",
        "--port",
        "7148",
    ]);
    assert_eq!(r["target"]["rate_bps"].as_f64(), Some(500_000.0 * 1080.0 * 8.0));
    assert_eq!(r["target"]["size"], 1080);
    assert_eq!(r["target"]["cpu"], 2);
    assert_eq!(r["target"]["port"], 7148);
    let areas = ["socket", "nic", "irq", "cpu", "stack", "process", "disk"];
    let order = ["problem", "advice", "ok", "unknown"];
    let mut last = (0usize, f64::INFINITY);
    let findings = r["findings"].as_array().unwrap();
    assert!(findings.len() >= 20, "{}", findings.len());
    for f in findings {
        let obj = f.as_object().unwrap();
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        assert_eq!(keys, ["id", "area", "status", "seen", "why", "fix", "changes", "effect", "no_apply"], "{f}");
        assert!(areas.contains(&f["area"].as_str().unwrap()), "{f}");
        assert!(!f["seen"].as_str().unwrap().is_empty());
        let e = f["effect"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&e), "{f}");
        let s = order.iter().position(|o| *o == f["status"]).expect("a known status");
        assert!(s > last.0 || (s == last.0 && e <= last.1), "findings out of order at {f}");
        last = (s, e);
        for c in f["changes"].as_array().unwrap() {
            let kind = c["kind"].as_str().unwrap();
            assert!(["sysctl", "irq_affinity", "rings", "coalesce", "channels", "feature"].contains(&kind), "{c}");
            // Every change is also a fix a person can read.
            assert!(!f["fix"].as_array().unwrap().is_empty());
        }
    }
    assert!(r.get("applied").is_none() && r.get("persisted").is_none());
}

#[test]
fn the_text_report_puts_problems_first_with_the_figure() {
    let args = numa2(&[]);
    let mut all = vec!["doctor"];
    all.extend(args.iter().map(String::as_str));
    let out = run(&all);
    assert_eq!(out.status.code(), Some(0));
    let t = String::from_utf8_lossy(&out.stdout);
    let first = t.lines().find(|l| l.starts_with("PROBLEM") || l.starts_with("ADVICE")).unwrap();
    assert!(first.starts_with("PROBLEM  socket.rmem_max: net.core.rmem_max = 212992"), "{t}");
    assert!(t.contains("fix: sysctl -w net.core.rmem_max=33554432   [--apply]"), "{t}");
    assert!(t.contains("a 208.0 KiB buffer holds 0.43 ms at 4.00 Gb/s"), "{t}");
    assert!(!t.contains("\nok "), "fine findings only with --all:\n{t}");
    assert!(t.trim_end().ends_with("--persist DIR writes them as sysctl.d/udev files instead."), "{t}");
}

#[test]
fn persist_writes_the_snippets_and_changes_nothing_live() {
    let d = TempDir::new("doctor-persist");
    let args = numa2(&["--persist", d.path()]);
    let mut all = vec!["doctor"];
    all.extend(args.iter().map(String::as_str));
    let out = run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let conf = std::fs::read_to_string(d.0.join("90-wirespeed.conf")).unwrap();
    assert!(conf.lines().any(|l| l == "net.core.rmem_max = 33554432"), "{conf}");
    let rules = std::fs::read_to_string(d.0.join("90-wirespeed.rules")).unwrap();
    assert!(rules.contains(r#"KERNEL=="ens1f0", RUN+="/usr/sbin/ethtool -G ens1f0 rx 4096""#), "{rules}");
}

#[test]
fn bad_requests_get_one_line_and_exit_2() {
    let fx = fixture("vm-veth");
    expect_fail(&["doctor", "--for", "max"], 2, "--for");
    expect_fail(&["doctor", "--for", "500kpps"], 2, "--for in datagrams/s needs --size");
    expect_fail(&["doctor", "--size", "0"], 2, "--size");
    expect_fail(&["doctor", "--root", "/nonexistent/snapshot"], 2, "not a directory");
    expect_fail(&["doctor", "--iface", "a/b"], 2, "is not an interface name");
    expect_fail(&["doctor", "--disk", "/nonexistent/dir"], 2, "--disk");
    expect_fail(&["doctor", "--root", &fx, "--apply"], 2, "cannot be used with");
    expect_fail(&["doctor", "--undo", "/tmp/x.sh"], 2, "--apply");
}

/// Names of things the host does not have, and files doctor would have to overwrite, are
/// mistakes said in one line (exit 2), not a report about nothing.
#[test]
fn options_naming_what_is_not_there_exit_2() {
    let fx = fixture("vm-veth");
    expect_fail(&["doctor", "--cpu", "999"], 2, "--cpu 999: CPU 999 is not online");
    expect_fail(&["doctor", "--iface", "nosuch0"], 2, "--iface nosuch0: there is no interface nosuch0");
    expect_fail(&["doctor", "--port", "0"], 2, "--port");
    expect_fail(&["doctor", "--root", &fx, "--cpu", "7"], 2, "CPU 7 is not online in the snapshot");
    expect_fail(&["doctor", "--root", &fx, "--iface", "eth0"], 2, "no interface eth0 in the snapshot");
    expect_fail(&["doctor", "--persist", "/nonexistent/dir"], 2, "--persist /nonexistent/dir: not a directory");
    let d = TempDir::new("doctor-undo-exists");
    let undo = d.0.join("undo.sh");
    std::fs::write(&undo, "mine\n").unwrap();
    expect_fail(&["doctor", "--apply", "--undo", undo.to_str().unwrap()], 2, "the file exists");
    assert_eq!(std::fs::read_to_string(&undo).unwrap(), "mine\n");
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

/// The VM snapshot's interface as a virtio_net NIC interrupting per datagram, with `features`
/// as its negotiated virtio feature bits and `extra` added to its ethtool answer.
fn virtio_snapshot(d: &TempDir, features: &str, extra: &str) -> String {
    let root = d.0.join("root");
    copy_tree(std::path::Path::new(&fixture("vm-veth")), &root);
    let dev = root.join("sys/devices/virtio2");
    std::fs::create_dir_all(dev.join("driver-dir/virtio_net")).unwrap();
    std::os::unix::fs::symlink("driver-dir/virtio_net", dev.join("driver")).unwrap();
    std::fs::write(dev.join("features"), format!("{features}\n")).unwrap();
    std::os::unix::fs::symlink("../../../devices/virtio2", root.join("sys/class/net/veth0/device")).unwrap();
    std::fs::write(
        root.join("ethtool/veth0.json"),
        format!(
            r#"{{ "driver": "virtio_net", "rings": {{ "rx": 256, "rx_max": 256 }},
                 "coalesce": {{ "rx_usecs": 0, "rx_frames": 1, "adaptive_rx": false }}{extra} }}"#
        ),
    )
    .unwrap();
    root.to_str().unwrap().to_string()
}

/// Issue 28: on a virtio NIC the doctor marked rx coalescing `[--apply]`, and --apply then
/// failed on it half-way. A setting the driver refuses is not proposed, and the finding says why.
#[test]
fn a_setting_the_driver_refuses_is_not_proposed_and_the_finding_says_why() {
    let d = TempDir::new("doctor-virtio");
    // This VM's own bits: no VIRTIO_NET_F_NOTF_COAL (bit 53).
    let bits = "11000101101110110000000000000100100000000000000000000000000000000000";
    let root = virtio_snapshot(&d, bits, "");
    let r = doctor_json(&["--root", &root, "--for", "4G", "--size", "1080", "--cpu", "1"]);
    let c = finding(&r, "nic.coalesce");
    assert_eq!(c["status"], "advice", "{c:#}");
    assert!(changes(c).is_empty(), "{c:#}");
    assert!(c["fix"].as_array().unwrap().is_empty(), "typing it fails the same way: {c:#}");
    assert!(
        c["no_apply"].as_str().unwrap().contains("virtio_net driver takes rx-usecs or rx-frames only when"),
        "{c:#}"
    );
    let out = run(&["doctor", "--root", &root, "--for", "4G", "--size", "1080", "--cpu", "1"]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(!t.contains("ethtool -C"), "{t}");
    assert!(t.contains("no --apply: veth0 rx coalescing: the virtio_net driver"), "{t}");
    // With notification coalescing offered, the same NIC takes the change.
    let mut with = bits.as_bytes().to_vec();
    with[53] = b'1';
    let d2 = TempDir::new("doctor-virtio-coal");
    let root2 = virtio_snapshot(&d2, std::str::from_utf8(&with).unwrap(), "");
    let r = doctor_json(&["--root", &root2, "--for", "4G", "--size", "1080", "--cpu", "1"]);
    let c = finding(&r, "nic.coalesce");
    assert_eq!(changes(c), [r#"{"iface":"veth0","kind":"coalesce","rx_frames":64,"rx_usecs":50}"#], "{c:#}");
    assert!(c["no_apply"].is_null(), "{c:#}");
    // A snapshot that recorded the driver's refusal is judged by it, whatever the driver.
    let d3 = TempDir::new("doctor-refuses");
    let root3 = virtio_snapshot(
        &d3,
        std::str::from_utf8(&with).unwrap(),
        r#", "refuses": { "coalesce": "the driver has no setter for interrupt coalescing" }"#,
    );
    let r = doctor_json(&["--root", &root3, "--for", "4G", "--size", "1080", "--cpu", "1"]);
    let c = finding(&r, "nic.coalesce");
    assert!(changes(c).is_empty(), "{c:#}");
    assert!(c["no_apply"].as_str().unwrap().contains("no setter"), "{c:#}");
    // --persist writes nothing for it either.
    let p = TempDir::new("doctor-virtio-persist");
    let out = run(&["doctor", "--root", &root, "--for", "4G", "--size", "1080", "--cpu", "1", "--persist", p.path()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let rules = std::fs::read_to_string(p.0.join("90-wirespeed.rules")).unwrap_or_default();
    assert!(!rules.contains("ethtool -C"), "{rules}");
}

#[test]
fn apply_without_root_is_refused_and_changes_nothing() {
    let d = TempDir::new("doctor-noroot");
    std::fs::set_permissions(&d.0, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let undo = d.0.join("undo.sh");
    // 40 Gb/s wants a 96 MiB buffer cap: a change there is to make on any usual host.
    let args = ["doctor", "--for", "40G", "--size", "8800", "--apply", "--undo", undo.to_str().unwrap()];
    let out = unprivileged(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("run it as root"), "{err}");
    assert!(!undo.exists(), "nothing is written when refused");
}

#[test]
#[ignore = "needs root"]
fn apply_in_a_namespace_makes_only_what_can_be_made_and_undo_puts_every_value_back() {
    let _turn = traffic();
    let ns = Netns::new("doctor");
    let tag = format!("{}", std::process::id() % 100_000);
    let (a, b) = (format!("wsd{tag}a"), format!("wsd{tag}b"));
    ns.exec(&["ip", "link", "add", &a, "type", "veth", "peer", "name", &b]);
    ns.exec(&["ip", "link", "set", &a, "up"]);
    let d = TempDir::new("doctor-apply");
    let undo = d.0.join("undo.sh");
    let host_rmem = std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap();
    let look = |extra: &[&str]| {
        let mut args = vec!["doctor", "--iface", &a, "--for", "40G", "--size", "8800", "--json"];
        args.extend_from_slice(extra);
        run_prefixed(&ns.prefix(), &args)
    };
    let before = look(&[]);
    assert_eq!(before.status.code(), Some(0));
    let before = json(&String::from_utf8_lossy(&before.stdout));
    let offloads_before = finding(&before, "nic.offloads")["seen"].clone();
    assert!(offloads_before.as_str().unwrap().contains("rx-gro off"), "a new veth has GRO off: {offloads_before}");

    // The host's socket buffer cap is read-only inside another namespace: it is not proposed
    // for --apply (its command stays, for the host), and the finding says why.
    let rmem = finding(&before, "socket.rmem_max");
    assert!(changes(rmem).is_empty(), "{rmem:#}");
    assert!(rmem["no_apply"].as_str().unwrap().contains("network namespace other than the host's"), "{rmem:#}");
    assert!(rmem["fix"][0].as_str().unwrap().starts_with("sysctl -w net.core.rmem_max="), "{rmem:#}");
    let text = run_prefixed(&ns.prefix(), &["doctor", "--iface", &a, "--for", "40G", "--size", "8800"]);
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    let rmem_fix = text.lines().find(|l| l.contains("sysctl -w net.core.rmem_max=")).expect("the rmem_max fix");
    assert!(!rmem_fix.contains("[--apply]"), "{text}");

    let applied = look(&["--apply", "--undo", undo.to_str().unwrap()]);
    let r = json(&String::from_utf8_lossy(&applied.stdout));
    let ap = &r["applied"];
    // GRO on the namespace's veth is changed, nothing else is attempted, nothing fails.
    let changed: Vec<String> = ap["changed"].as_array().unwrap().iter().map(|d| sorted(&d["change"])).collect();
    assert!(changed.contains(&format!(r#"{{"feature":"rx-gro","iface":"{a}","kind":"feature","on":true}}"#)), "{ap:#}");
    assert_eq!(ap["failed"].as_array().unwrap().len(), 0, "{ap:#}");
    assert_eq!(ap["rolled_back"].as_array().unwrap().len(), 0, "{ap:#}");
    assert_eq!(applied.status.code(), Some(0), "{}", String::from_utf8_lossy(&applied.stderr));
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap(),
        host_rmem,
        "the host's value is untouched"
    );
    let during = look(&[]);
    let during = json(&String::from_utf8_lossy(&during.stdout));
    assert!(finding(&during, "nic.offloads")["seen"].as_str().unwrap().contains("rx-gro on"));

    let mut cmd = ns.prefix();
    let u = undo.to_str().unwrap().to_string();
    cmd.extend_from_slice(&["sh", &u]);
    sh(&cmd);
    let after = look(&[]);
    let after = json(&String::from_utf8_lossy(&after.stdout));
    // Everything the apply touched reads as before.
    for f in before["findings"].as_array().unwrap() {
        if f["changes"].as_array().unwrap().is_empty() {
            continue;
        }
        let id = f["id"].as_str().unwrap();
        assert_eq!(finding(&after, id)["seen"], f["seen"], "{id} after undo");
    }
}
