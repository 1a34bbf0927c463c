//! Runs on real hosts over ssh, end to end: partitions that each run an OpenSSH server stand in
//! for the hosts, and the command under test runs in a partition of its own as the controller
//! (see `common::ssh`). The ledger is exact against an nftables rule on the far receiver; a
//! controller killed outright leaves nothing running on any host; no argument reaches a far
//! shell; every way ssh can fail is one line naming the host and the fix.

use crate::common;
use common::ssh::SshLab;
use common::*;
use serde_json::Value;
use std::time::Duration;

/// The sequence numbers the rule on the receiving host drops: of 8800-byte counter datagrams,
/// whose first 64-bit word is the sequence number times 1100 (words per datagram).
const DROPPED: [u64; 3] = [100, 200, 300];

/// Drop datagrams `seqs` of every 8800-byte counter stream arriving at host `id`, counted
/// (replacing the rule there before).
fn drop_rule(lab: &SshLab, id: u32, seqs: &[u64]) {
    let _ = lab.exec(id, &["nft", "delete", "table", "inet", "wsdrop"]);
    let words: Vec<String> = seqs.iter().map(|s| (s * 1100).to_string()).collect();
    let rules = format!(
        "table inet wsdrop {{\n chain in {{\n  type filter hook input priority raw; policy accept;\n  \
         udp length 8808 @th,64,64 {{ {} }} counter drop\n }}\n}}\n",
        words.join(", ")
    );
    let path = lab.file("drop.nft");
    std::fs::write(&path, rules).expect("rules");
    let out = lab.exec(id, &["nft", "-f", &path]);
    assert!(out.status.success(), "nft: {}", String::from_utf8_lossy(&out.stderr));
}

/// How many datagrams the rule on host `id` dropped.
fn dropped(lab: &SshLab, id: u32) -> u64 {
    let out = lab.exec(id, &["nft", "list", "table", "inet", "wsdrop"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split("counter packets ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {text}"))
}

fn ok(lab: &SshLab, args: &[&str]) -> (Value, String) {
    let out = lab.run(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{args:?}:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Every far command went through the run's one connection to its host.
    assert!(!err.contains("Control socket"), "the shared ssh connection was gone:\n{err}");
    (json(&String::from_utf8_lossy(&out.stdout)), err)
}

/// A point's ledger against the rule: the datagrams it dropped of this stream are exactly
/// those of `seqs` the sender reached; anything more is on the kernel's counters. Returns how
/// many the rule dropped of it.
fn assert_exact(p: &Value, seqs: &[u64]) -> u64 {
    let sent = u(p, "sent");
    let expect = seqs.iter().filter(|s| **s < sent).count() as u64;
    assert_eq!(p["end_of_stream"], true, "{p}");
    assert_eq!(u(p, "received") + u(p, "missing"), sent, "{p}");
    let kernel = p["kernel_socket_drops"].as_u64().unwrap_or(0) + u(p, "softnet_dropped");
    assert!(u(p, "missing") >= expect && u(p, "missing") <= expect + kernel, "{expect} dropped by the rule: {p}");
    assert_eq!(u(p, "lost"), u(p, "missing"), "{p}");
    expect
}

#[test]
#[ignore = "needs root"]
fn sweep_and_max_across_two_ssh_hosts_count_a_far_drop_rule_exactly() {
    let _turn = traffic();
    let lab = SshLab::new("hsw", 2);
    drop_rule(&lab, 2, &DROPPED);
    let (h1, h2) = (lab.host(1), lab.host(2));
    let dir = TempDir::new("hosts-sweep");
    let (doc, _) = ok(
        &lab,
        &[
            "bench",
            "sweep",
            "--tx",
            &h1,
            "--rx",
            &h2,
            "--rates",
            "100M,200M",
            "--sizes",
            "8800",
            "--duration",
            "300ms",
            "--json",
            "-o",
            dir.path(),
        ],
    );
    let pl = &doc["placement"];
    assert_eq!(pl["kind"], "hosts", "{pl}");
    assert_eq!(pl["hosts"], serde_json::json!([h1, h2]), "{pl}");
    assert!(pl["description"].as_str().unwrap_or("").contains("at 198.19.0.2"), "{pl}");
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{doc}");
    let mut expected: u64 = rows.iter().map(|r| assert_exact(r, &DROPPED)).sum();
    // The warm-up point before the sweep is a stream of its own, long enough to reach them all.
    expected += DROPPED.len() as u64;
    assert_eq!(dropped(&lab, 2), expected, "the rule's count is the ledgers' loss plus the warm-up's");
    let html = std::fs::read_to_string(dir.0.join("report.html")).expect("report.html");
    assert!(html.contains("hosts over ssh"), "the report names where it ran");
    // The far receiver's diagnosis sends the user to the doctor of that host.
    let diag = rows[0]["diagnosis"].to_string();
    assert!(diag.contains(&format!("`wirespeed doctor --host {h2} --for ")), "{diag}");

    // bench max: a probe that reaches sequence number 600 (above about 141 Mb/s in 300 ms)
    // loses exactly that one; one below it loses nothing, so the search has a limit to find.
    drop_rule(&lab, 2, &[600]);
    let (doc, _) = ok(
        &lab,
        &[
            "bench",
            "max",
            "--tx",
            &h1,
            "--rx",
            &h2,
            "--duration",
            "300ms",
            "--repeat",
            "1",
            "--lo",
            "100M",
            "--hi",
            "400M",
            "--precision",
            "40%",
            "--json",
        ],
    );
    let probes: Vec<&Value> = doc["searches"][0]["probes"].as_array().expect("probes").iter().collect();
    assert!(!probes.is_empty(), "{doc}");
    let expected: u64 = probes.iter().map(|p| assert_exact(&p["point"], &[600])).sum::<u64>() + 1;
    assert_eq!(dropped(&lab, 2), expected, "probes plus the warm-up: {doc}");
    // Some probes reached sequence number 600 and lost it, and some did not and lost nothing: a
    // search that found a limit (unless a busy host dropped datagrams at the socket too).
    let kernel: u64 = probes.iter().map(|p| p["point"]["kernel_socket_drops"].as_u64().unwrap_or(0)).sum();
    if kernel == 0 {
        assert!(probes.iter().any(|p| p["point"]["lossy"] == false), "{doc}");
    }
    assert!(probes.iter().any(|p| p["point"]["lossy"] == true), "{doc}");
    lab.assert_nothing_left();
}

/// A controller started by a test, killed (and reaped) if the test fails before it ends, so a
/// failed test leaves no run behind.
struct Controller(std::process::Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start the controller with `args`, and once a line of its standard output satisfies `ready`,
/// send it `signal`; returns its exit code and what it printed.
fn signal_when(
    lab: &SshLab,
    args: &[&str],
    ready: impl Fn(&str) -> bool,
    signal: &str,
) -> (Option<i32>, String, String) {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let mut child = Controller(
        lab.command(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start"),
    );
    let mut err = child.0.stderr.take().expect("stderr");
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut out = String::new();
    let mut signalled = false;
    for line in BufReader::new(child.0.stdout.take().expect("stdout")).lines() {
        let Ok(line) = line else { break };
        out.push_str(&line);
        out.push('\n');
        if !signalled && ready(&line) {
            // `partition exec` execs `ip netns exec`, which execs wirespeed: the child is the controller.
            let st =
                std::process::Command::new("kill").args([signal, &child.0.id().to_string()]).status().expect("kill");
            assert!(st.success());
            signalled = true;
        }
    }
    let code = child.0.wait().expect("wait").code();
    assert!(signalled, "{args:?} ended before the line to stop it at:\n{out}");
    (code, out, err.join().unwrap_or_default())
}

#[test]
#[ignore = "needs root"]
fn a_controller_stopped_keeps_its_rows_and_one_killed_leaves_nothing_on_the_hosts() {
    let _turn = traffic();
    let lab = SshLab::new("hlsh", 2);
    let (h1, h2) = (lab.host(1), lab.host(2));
    // Stopped after its first row: the far ends are told through their leashes, report, and
    // the row measured is kept.
    let dir = TempDir::new("hosts-stop");
    let (code, out, err) = signal_when(
        &lab,
        &[
            "bench",
            "sweep",
            "--tx",
            &h1,
            "--rx",
            &h2,
            "--rates",
            "50M,60M,70M",
            "--sizes",
            "8800",
            "--duration",
            "1",
            "-o",
            dir.path(),
        ],
        |l| l.contains("[  1/3]"),
        "-TERM",
    );
    assert_ne!(code, Some(0), "{out}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    let doc = json(&std::fs::read_to_string(dir.0.join("results.json")).expect("results.json"));
    let rows = doc["rows"].as_array().expect("rows");
    assert!(!rows.is_empty() && rows.len() < 3, "{doc}");
    assert_eq!(rows[0]["end_of_stream"], true, "{doc}");
    lab.assert_nothing_left();

    // Killed outright in the middle of a long probe: the connections drop, the leashes see the
    // end of their input, and the far sender and receiver go.
    let mut child = Controller(
        lab.command(&["bench", "max", "--tx", &h1, "--rx", &h2, "--duration", "30s", "--repeat", "1", "--hi", "100M"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start"),
    );
    let t = std::time::Instant::now();
    while !lab.leftovers().iter().any(|l| l.contains(" send ")) {
        assert!(t.elapsed() < Duration::from_secs(30), "the far sender never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = child.0.id();
    child.0.kill().expect("SIGKILL the controller");
    let _ = child.0.wait();
    lab.assert_nothing_left();
    // Here, the killed run's connection directories are removed by the next run that connects.
    let (_, _) = ok(&lab, &["demo", "--tx", &h1, "--rx", &h2, "--duration", "100ms", "--rate", "10M", "--json"]);
    let prefix = format!("wirespeed-ssh-{killed}-");
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .expect("temp dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "the killed run's ssh directories stayed: {left:?}");
}

/// The controller fails with `code` and one line on stderr holding every one of `needles`.
fn fails(lab: &SshLab, args: &[&str], code: i32, needles: &[&str]) {
    let out = lab.run_bare(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line expected:\n{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: expected '{n}' in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
#[ignore = "needs root"]
fn every_way_ssh_fails_is_one_line_naming_the_host_and_nothing_reaches_a_far_shell() {
    let lab = SshLab::new("herr", 1);
    let (h1, cfg, exe) = (lab.host(1), lab.file("ssh.conf"), bin());
    let d = lab.dir.0.clone();
    // A client key the host does not know; a known_hosts without the host.
    std::fs::write(d.join("empty_known_hosts"), "").expect("write");
    let conf = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(d.join("stranger.conf"), conf.replace("client_key", "stranger_key")).expect("write");
    std::fs::write(d.join("unknown.conf"), conf.replace("/known_hosts", "/empty_known_hosts")).expect("write");
    // Old builds: one without `hello`, one that says another version.
    let script = |name: &str, body: &str| {
        let p = d.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("script");
        std::process::Command::new("chmod").arg("755").arg(&p).status().expect("chmod");
        p.display().to_string()
    };
    let old = script("old-wirespeed", "echo \"error: unrecognized subcommand '$1'\" >&2; exit 2");
    let other = script(
        "other-wirespeed",
        r#"echo '{"schema":"wirespeed.hello/1","version":"0.0.9","schemas":["wirespeed.send/1"],"hostname":"x","ssh_connection":null,"cpus":1,"net_admin":true}'"#,
    );
    let demo = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> =
            ["demo", "--duration", "200ms", "--rate", "50M", "--tx", "local"].map(String::from).to_vec();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let cases: Vec<(Vec<String>, i32, Vec<String>)> = vec![
        (
            demo(&["--rx", "198.19.0.1:2223", "--ssh-config", &cfg]),
            1,
            vec!["198.19.0.1:2223: cannot connect".into(), "sshd runs there".into()],
        ),
        (
            demo(&["--rx", &h1, "--ssh-config", &lab.file("stranger.conf")]),
            1,
            vec![format!("{h1}: refused the login"), "authorized_keys".into()],
        ),
        (
            demo(&["--rx", &h1, "--ssh-config", &lab.file("unknown.conf")]),
            1,
            vec![format!("{h1}: its host key is not in known_hosts")],
        ),
        (
            demo(&["--rx", &h1, "--ssh-config", &cfg, "--remote-wirespeed", "/nonexistent/wirespeed"]),
            1,
            vec![format!("{h1}: cannot run '/nonexistent/wirespeed' there"), "--remote-wirespeed PATH".into()],
        ),
        (
            demo(&["--rx", &h1, "--ssh-config", &cfg, "--remote-wirespeed", &old]),
            1,
            vec![format!("{h1}: "), "older than this one".into()],
        ),
        (
            demo(&["--rx", &h1, "--ssh-config", &cfg, "--remote-wirespeed", &other]),
            1,
            vec![
                format!("{h1}: runs wirespeed 0.0.9 and this is wirespeed {}", env!("CARGO_PKG_VERSION")),
                "install the same version on both".into(),
            ],
        ),
        (demo(&["--rx=-oProxyCommand=touch /tmp/x"]), 2, vec!["is not a host".into()]),
        (demo(&["--rx", &h1, "--ssh-option", "ProxyCommand"]), 2, vec!["is not KEY=VALUE".into()]),
        (["demo", "--tx", &h1].map(String::from).to_vec(), 2, vec!["--rx".into()]),
        (demo(&["--rx", &h1, "--ssh-config", &cfg, "--loopback"]), 2, vec!["choose one".into()]),
    ];
    for (args, code, needles) in &cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        fails(&lab, &a, *code, &needles.iter().map(String::as_str).collect::<Vec<_>>());
    }
    // doctor --host inspects the far host: its own report, over the same channel.
    let out = lab.run(&["doctor", "--host", &h1, "--for", "1G", "--size", "8800", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(doc["schema"], "wirespeed.doctor/1", "{doc}");
    lab.assert_nothing_left();

    // No value reaches a far shell: the far program's path (the one word that crosses on ssh's
    // command line) full of shell syntax still names the program, and every argument the far
    // command gets goes through the channel as data, byte for byte.
    let pwned = d.join("pwned");
    let hostile = format!("a b'c\"d;e$(touch {p})f`touch {p}`g|h&i>j\\k*", p = pwned.display());
    let odd_dir = d.join(&hostile);
    std::fs::create_dir_all(&odd_dir).expect("odd dir");
    let odd_exe = odd_dir.join("wirespeed");
    std::os::unix::fs::symlink(exe, &odd_exe).expect("symlink");
    let odd = odd_exe.display().to_string();
    let out = lab.run_bare(&[
        "demo",
        "--duration",
        "200ms",
        "--rate",
        "50M",
        "--tx",
        &h1,
        "--rx",
        "local",
        "--ssh-config",
        &cfg,
        "--remote-wirespeed",
        &odd,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(doc["path"], "hosts", "{doc}");
    assert_eq!(doc["recv"]["total"]["received"], doc["send"]["sent"], "{doc}");
    let request = serde_json::json!({"program": "printf", "args": ["%s|", &hostile, "$(id)", "`id`", "'", "\"", "\\"]});
    let mut ssh = std::process::Command::new(bin());
    ssh.args([
        "partition",
        "--prefix",
        &lab.parts.prefix,
        "exec",
        "2",
        "--",
        "ssh",
        "-F",
        &cfg,
        "-p",
        "2222",
        "198.19.0.1",
    ])
    .arg(format!("'{}' 'leash'", odd.replace('\'', "'\\''")))
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped());
    let mut child = ssh.spawn().expect("ssh");
    let mut stdin = child.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut stdin, format!("{request}\n").as_bytes()).expect("request");
    let out = {
        let mut s = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().expect("stdout"), &mut s).expect("read");
        s
    };
    drop(stdin);
    assert!(child.wait().expect("wait").success());
    assert_eq!(out, format!("{hostile}|$(id)|`id`|'|\"|\\|"));
    assert!(!pwned.exists(), "a far shell ran a command from an argument");
    lab.assert_nothing_left();
}

#[test]
#[ignore = "needs root"]
fn every_bench_runs_across_two_ssh_hosts() {
    let _turn = traffic();
    let lab = SshLab::new("hall", 2);
    let (h1, h2) = (lab.host(1), lab.host(2));
    let on = ["--tx", h1.as_str(), "--rx", h2.as_str()];
    // Each bench with a path of its own to the far side: soak follows the far receiver's
    // interval lines, compare runs iperf3 there (and reads its sysctls), priority a nice'd hog
    // pinned with the receiver, capture and latency this binary's children by path, pgm an
    // nftables rule there. rates, sweep, max, demo and ping run in the tests above.
    let runs: Vec<(&str, Vec<&str>)> = vec![
        ("bench.soak", vec!["bench", "soak", "--rate", "50M", "--duration", "1s", "--every", "500ms"]),
        (
            "bench.compare",
            "bench compare --rates 50M --sizes 8800 --duration 1 --repeat 1 --tools iperf3".split(' ').collect(),
        ),
        (
            "bench.priority",
            "bench priority --duration 100ms --repeat 1 --lo 50M --hi 100M --precision 50%".split(' ').collect(),
        ),
        ("bench.capture", vec!["bench", "capture", "--count", "5000", "--repeat", "1"]),
        ("bench.latency", "bench latency --tools ws-open --pps 2000 --duration 1 --repeat 1".split(' ').collect()),
        ("bench.pgm", vec!["bench", "pgm", "--part", "repair", "--count", "1000", "--sizes", "1080", "--loss", "1"]),
    ];
    for (what, args) in &runs {
        let mut a = args.clone();
        a.extend(on);
        a.push("--json");
        let (doc, _) = ok(&lab, &a);
        assert_eq!(doc["schema"].as_str().map(|s| s.starts_with(&format!("wirespeed.{what}/"))), Some(true), "{doc}");
        if *what == "demo" {
            assert_eq!(doc["path"], "hosts", "{doc}");
            assert_eq!(doc["recv"]["total"]["received"], doc["send"]["sent"], "{doc}");
        } else {
            let kinds = doc.to_string().matches("\"kind\":\"hosts\"").count();
            assert!(kinds >= 1, "{what}: no hosts placement in {doc}");
        }
    }
    lab.assert_nothing_left();
}

#[test]
#[ignore = "needs root"]
fn the_readme_examples_run_across_hosts_and_a_fleet_counts_exactly() {
    let _turn = traffic();
    let lab = SshLab::new("hflt", 3);
    // The README's "Across real hosts" examples, as written, with lab1..lab3 aliases of an ssh
    // config (as a user's ~/.ssh/config would hold them).
    let mut conf = std::fs::read_to_string(lab.file("ssh.conf")).expect("config");
    for i in 1..=3 {
        conf = format!("Host lab{i}\n  HostName 198.19.0.{i}\n  Port {}\n", common::ssh::PORT) + &conf;
    }
    std::fs::write(lab.file("ssh.conf"), conf).expect("config");
    // lab3 drops three datagrams of every stream (lab2 none): the README's fleet must count them.
    drop_rule(&lab, 3, &DROPPED);
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).expect("README");
    let section = readme.split("## Across real hosts").nth(1).expect("the section").split("\n## ").next().unwrap_or("");
    let block = section.split("```sh").nth(1).and_then(|b| b.split("```").next()).expect("its examples");
    let examples: Vec<&str> = block.lines().filter(|l| l.starts_with("wirespeed ")).collect();
    assert!(examples.len() >= 5, "{block}");
    let work = TempDir::new("hosts-readme");
    let mut text = String::new();
    for ex in &examples {
        let words: Vec<&str> = ex.split_whitespace().skip(1).collect();
        let out = lab.command(&words).current_dir(&work.0).stdin(std::process::Stdio::null()).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "README example `{ex}`:\n{err}");
        assert!(!err.contains("panicked"), "{err}");
        if words.contains(&"--rx") && words.iter().filter(|w| **w == "--rx").count() > 1 {
            text = String::from_utf8_lossy(&out.stdout).to_string() + &err;
        }
    }
    assert!(work.0.join("rtt/heatmap-2000pps.png").is_file(), "ping's heat maps came back");
    lab.assert_nothing_left();

    // The fleet example: each host a row, the point their exact sum.
    let dir = work.0.join("fleet");
    let results = dir.join("results.json");
    let doc = json(&std::fs::read_to_string(&results).expect("the fleet's results.json"));
    // Its document, the host rows included, matches its schema.
    let check = std::process::Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas/check.py"))
        .arg(&results)
        .output()
        .expect("python3 schemas/check.py");
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
    // Each host's loss is drawn, one line per host.
    let svg = std::fs::read_to_string(dir.join("loss-per-host.svg")).expect("loss-per-host.svg");
    let (h1, h2, h3) = ("lab1", "lab2", "lab3");
    assert!(svg.contains(h2) && svg.contains(h3), "each host is a line of the figure");
    assert!(doc["placement"]["description"].as_str().unwrap_or("").contains("a fleet of 2 receivers"), "{doc}");
    assert_eq!(doc["placement"]["hosts"], serde_json::json!([h1, h2, h3]), "{doc}");
    let points = doc["rows"].as_array().expect("rows");
    assert_eq!(points.len(), 2, "{doc}");
    for p in points {
        let hosts = p["hosts"].as_array().expect("a row per host");
        assert_eq!(hosts.len(), 2, "{p}");
        assert_eq!((hosts[0]["host"].as_str(), hosts[1]["host"].as_str()), (Some(h2), Some(h3)));
        assert!(hosts[0]["receiver"].as_str().unwrap_or("").starts_with("198.19.0.2:"), "{p}");
        assert!(hosts[1]["receiver"].as_str().unwrap_or("").starts_with("198.19.0.3:"), "{p}");
        // Each host's share is half the rate; its ledger is exact; the point is their sum.
        assert_exact(&hosts[0], &[]);
        assert_exact(&hosts[1], &DROPPED);
        for k in ["sent", "received", "lost", "missing", "late", "duplicate", "invalid"] {
            assert_eq!(u(p, k), u(&hosts[0], k) + u(&hosts[1], k), "{k}: {p}");
        }
        assert_eq!(p["lossy"], true, "{p}");
        let half = p["asked_bps"].as_f64().expect("asked") / 2.0;
        assert_eq!(hosts[0]["asked_bps"].as_f64(), Some(half), "{p}");
    }
    // The table has a row per host under each point.
    assert!(text.contains("on lab2 (198.19.0.2:") && text.contains("on lab3 (198.19.0.3:"), "{text}");
    // One receiver's commands refuse a fleet in one line.
    let out = lab.run(&["bench", "compare", "--tx", h1, "--rx", h2, "--rx", h3, "--rates", "50M"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a fleet of receivers runs with bench max, rates and sweep"));
    lab.assert_nothing_left();
}
