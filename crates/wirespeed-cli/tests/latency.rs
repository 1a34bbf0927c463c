//! `reflect`, `ping` and `linerate` end to end through the real binary.

use crate::common;
use common::*;
use std::time::Duration;

/// Width and height from a PNG's IHDR chunk, after checking the signature.
fn png_dims(path: &str) -> (u32, u32) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    assert!(b.len() > 33, "{path} is too short for a PNG");
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{path} has no PNG signature");
    assert_eq!(&b[12..16], b"IHDR", "{path}: first chunk is not IHDR");
    let be = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    (be(16), be(20))
}

fn svg_ok(path: &str) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    assert!(s.contains("<svg") && s.trim_end().ends_with("</svg>"), "{path} is not an SVG document");
    assert!(s.contains("width=\"1200\"") && s.contains("height=\"700\""), "{path}: unexpected size");
    s
}

#[test]
fn linerate_reproduces_seed_003() {
    let out = run(&["linerate", "--link", "1G", "--size", "1500"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("81,274"), "{text}");
    let out = run(&["linerate", "--link", "10G", "--size", "64,1500", "--layer", "frame", "--json"]);
    let v = json(&String::from_utf8_lossy(&out.stdout));
    let rows = v["rows"].as_array().expect("rows");
    // 64-byte frames at 10G: 10^10 / (84 * 8) = 14,880,952.4 frames/s.
    assert_eq!(rows[0]["frames_per_s"].as_f64().unwrap().floor(), 14_880_952.0);
    assert_eq!(u(&rows[1], "ip_packet"), 1482);
    let bad = run(&["linerate", "--size", "10", "--layer", "frame"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("cannot hold") && err.lines().count() == 1, "{err}");
    assert_eq!(run(&["linerate", "--link", "fast"]).status.code(), Some(2));
}

#[test]
fn ping_and_reflect_on_loopback() {
    let _turn = traffic();
    let r = spawn_cmd_with(&[], "reflect", "127.0.0.1:0", &["--json", "--count", "3000"]);
    let target = format!("127.0.0.1:{}", r.port);
    let out =
        run(&["ping", &target, "--pps", "3000", "--count", "3000", "--json", "--no-files", "--interval", "250ms"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(doc["schema"], "wirespeed.latency/1");
    let run0 = &doc["runs"][0];
    assert_eq!(u(run0, "sent"), 3000);
    let c = &run0["replies"];
    assert_eq!((u(c, "received"), u(c, "lost"), u(c, "duplicate"), u(c, "invalid")), (3000, 0, 0, 0), "{run0}");
    let rtt = &run0["rtt"];
    assert_eq!(u(rtt, "count"), 3000);
    let (min, p50, p99, max) = (u(rtt, "min"), u(rtt, "p50"), u(rtt, "p99"), u(rtt, "max"));
    assert!(0 < min && min <= p50 && p50 <= p99 && p99 <= max, "{rtt}");
    assert!(p50 < 50_000_000, "a loopback round trip under 50 ms: {rtt}");
    assert_eq!(u(&run0["one_way"], "p50"), p50 / 2);
    // 3000 probes at 3000/s: about 1 s of 250 ms intervals.
    let intervals = run0["intervals"].as_array().expect("intervals");
    assert!((4..=7).contains(&intervals.len()), "{intervals:?}");
    assert_eq!(intervals.iter().map(|i| u(i, "replies")).sum::<u64>(), 3000);
    let table = &doc["table"][0];
    assert_eq!(u(table, "replies"), 3000);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{stderr}");
    let refl = json(&stdout);
    assert_eq!(u(&refl, "reflected"), 3000);
    assert_eq!(refl["clients"].as_array().map(|c| c.len()), Some(1));
}

#[test]
fn reflector_serves_several_clients() {
    let _turn = traffic();
    let r = spawn_cmd_with(&[], "reflect", "127.0.0.1:0", &["--json", "--count", "1500"]);
    let target = format!("127.0.0.1:{}", r.port);
    let pings: Vec<_> = (0..3)
        .map(|_| {
            let t = target.clone();
            std::thread::spawn(move || run(&["ping", &t, "--pps", "1000", "--count", "500", "--json", "--no-files"]))
        })
        .collect();
    for p in pings {
        let out = p.join().expect("ping thread");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let doc = json(&String::from_utf8_lossy(&out.stdout));
        // Each ping sees only its own replies: the session number keeps the runs apart.
        assert_eq!(u(&doc["runs"][0]["replies"], "received"), 500);
        assert_eq!(u(&doc["runs"][0], "strays"), 0);
    }
    let (code, stdout, _) = finish(r, Duration::from_secs(20));
    assert_eq!(code, Some(0));
    let refl = json(&stdout);
    let clients = refl["clients"].as_array().expect("clients");
    assert_eq!(clients.len(), 3, "{refl}");
    assert!(clients.iter().all(|c| u(c, "reflected") == 500), "{refl}");
}

#[test]
fn sweep_writes_heatmaps_logs_and_tables() {
    let _turn = traffic();
    let dir = TempDir::new("ping");
    let out = run(&[
        "ping",
        "--loopback",
        "--pps",
        "2000,4000",
        "--duration",
        "1s",
        "--interval",
        "250ms",
        "--pause",
        "100ms",
        "-o",
        dir.path(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("p99.99") && text.contains("2,000") && text.contains("4,000"), "{text}");
    for rate in ["2000pps", "4000pps"] {
        let png = format!("{}/heatmap-{rate}.png", dir.path());
        assert_eq!(png_dims(&png), (1200, 700));
        let svg = svg_ok(&format!("{}/heatmap-{rate}.svg", dir.path()));
        assert!(svg.matches("<rect").count() > 10, "the heat map has cells");
        assert!(svg.contains("Round-trip time at"), "the heat map has its title");
        let log = std::fs::read_to_string(format!("{}/rtt-{rate}.hlog", dir.path())).expect("hlog");
        assert!(log.contains("#[StartTime:") && log.contains("HIST"), "{log}");
    }
    let csv = std::fs::read_to_string(format!("{}/latency.csv", dir.path())).expect("csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[0].starts_with("pps,") && lines[1].starts_with("2000,") && lines[2].starts_with("4000,"));
    let doc = json(&std::fs::read_to_string(format!("{}/latency.json", dir.path())).expect("json"));
    assert_eq!(doc["runs"].as_array().map(|r| r.len()), Some(2));
    assert_eq!(u(&doc["runs"][1], "sent"), 4000);
    assert!(std::fs::read_to_string(format!("{}/latency.txt", dir.path())).expect("txt").contains("p99.99"));
}

#[test]
fn bad_input_gets_one_line() {
    for (args, needle) in [
        (vec!["ping", "127.0.0.1:9", "--size", "10"], "24..65507"),
        (vec!["ping", "127.0.0.1:9", "--pps", "0"], "out of range"),
        (vec!["ping", "127.0.0.1", "--no-files"], "no port"),
        (vec!["ping", "127.0.0.1:9", "--pps", "fast"], "not a probe rate"),
        (vec!["reflect", "nonsense"], "cannot read listen address"),
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // Nothing listening: ICMP port unreachable comes back and ping says what to do.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = sock.local_addr().expect("addr").port();
    drop(sock);
    let out = run(&["ping", &format!("127.0.0.1:{port}"), "--count", "100", "--pps", "1000", "--no-files"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing answers") && err.contains("wirespeed reflect"), "{err}");
    assert_eq!(err.trim().lines().count(), 2, "the start line and one error line: {err}");
}

#[test]
#[ignore = "needs root"]
fn reply_loss_from_nftables_is_counted_exactly() {
    let _turn = traffic();
    // In a namespace of its own, nftables drops every 40th reply on its way out of the
    // reflector: ping must count exactly those as lost, and place them.
    let ns = Netns::new("rtt");
    let r = spawn_cmd_with(&ns.prefix(), "reflect", "127.0.0.1:0", &["--json", "--duration", "60"]);
    let port = r.port.to_string();
    ns.exec(&["nft", "add", "table", "inet", "t"]);
    ns.exec(&["nft", "add", "chain", "inet", "t", "out", "{ type filter hook output priority 0 ; }"]);
    ns.exec(&[
        "nft", "add", "rule", "inet", "t", "out", "udp", "sport", &port, "numgen", "inc", "mod", "40", "0", "counter",
        "drop",
    ]);
    let target = format!("127.0.0.1:{port}");
    let out =
        run_prefixed(&ns.prefix(), &["ping", &target, "--pps", "4000", "--count", "4000", "--json", "--no-files"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    let run0 = &doc["runs"][0];
    assert_eq!(u(&run0["replies"], "lost"), 100, "{run0}");
    assert_eq!(u(&run0["replies"], "received"), 3900);
    let gaps = run0["lost_ranges"].as_array().expect("ranges");
    assert_eq!(gaps.len(), 100);
    let expected: Vec<(u64, u64)> = (0..100).map(|k| (k * 40, k * 40)).collect();
    let got: Vec<(u64, u64)> = gaps.iter().map(|g| (u(g, "first"), u(g, "last"))).collect();
    assert_eq!(got, expected, "probes 0, 40, 80, ... lost");
    let _ = std::process::Command::new("kill").arg(r.child.id().to_string()).status();
    let (_, stdout, _) = finish(r, Duration::from_secs(20));
    // nftables refuses the send itself (EPERM), so the reflector knows which replies never left.
    let refl = json(&stdout);
    assert_eq!((u(&refl, "received"), u(&refl, "reflected"), u(&refl, "send_errors")), (4000, 3900, 100), "{refl}");
}

#[test]
#[ignore = "needs root"]
fn self_contained_run_across_partitions() {
    let _turn = traffic();
    let dir = TempDir::new("pingpart");
    let out = run(&["ping", "--pps", "2000,3000", "--duration", "1s", "--pause", "100ms", "-o", dir.path()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("partition 1") && err.contains("reflector in partition 2: reflected 5000"), "{err}");
    let doc = json(&std::fs::read_to_string(format!("{}/latency.json", dir.path())).expect("json"));
    assert_eq!(doc["path"], "a partition link (veth)");
    for (i, n) in [(0, 2000), (1, 3000)] {
        assert_eq!(u(&doc["runs"][i]["replies"], "received"), n, "{doc}");
        assert!(doc["runs"][i]["target"].as_str().unwrap().starts_with("198.19.0.2:"));
    }
    assert_eq!(png_dims(&format!("{}/heatmap-3000pps.png", dir.path())), (1200, 700));
    // The partitions are gone.
    let ns = std::process::Command::new("ip").args(["netns", "list"]).output().expect("ip netns");
    let pid_tag = format!("wslat{}x", out_pid_hint(&err));
    assert!(!String::from_utf8_lossy(&ns.stdout).contains(&pid_tag), "partitions left behind");
}

/// The partition prefix the run printed ("partitions 'wslat123x' are made").
fn out_pid_hint(err: &str) -> String {
    err.split("partitions 'wslat").nth(1).and_then(|r| r.split('x').next()).unwrap_or("?").to_string()
}

#[test]
fn closed_loop_counts_what_it_did_not_send() {
    let _turn = traffic();
    // A closed loop against an echo that answers only the first 300 probes and then swallows
    // the rest: after that each probe waits out --linger for its reply, and the slots passed
    // meanwhile are skipped and counted (coordinated omission made visible), not hidden.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let target = format!("127.0.0.1:{}", sock.local_addr().expect("addr").port());
    sock.set_read_timeout(Some(Duration::from_millis(1500))).expect("timeout");
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut n = 0;
        while let Ok((len, from)) = sock.recv_from(&mut buf) {
            n += 1;
            if n <= 300 {
                sock.send_to(&buf[..len], from).expect("echo");
            }
        }
        n
    });
    let out = run(&[
        "ping",
        &target,
        "--pps",
        "1000",
        "--duration",
        "1s",
        "--closed-loop",
        "--linger",
        "100ms",
        "--json",
        "--no-files",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    let run0 = &doc["runs"][0];
    let sched = &run0["schedule"];
    assert_eq!(sched["closed_loop"], true);
    let sent = u(run0, "sent");
    let skipped = u(sched, "skipped");
    assert_eq!(u(&run0["replies"], "received"), 300, "{run0}");
    assert_eq!(u(&run0["replies"], "lost"), sent - 300, "{run0}");
    // About 0.3 s of answered probes, then one probe per 100 ms linger for the other 0.7 s,
    // each followed by about 100 skipped slots: the slots add up to the second's 1000.
    assert!((301..=315).contains(&sent), "{run0}");
    assert!((999..=1000).contains(&(sent + skipped)), "{run0}");
    assert_eq!(echo.join().expect("echo thread"), sent);
}

/// Run `args`, which must be refused: exit 2 within `limit`, one line naming `option`.
fn refused_at_once(args: &[&str], option: &str, limit: Duration) {
    let mut child = std::process::Command::new(bin())
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start wirespeed");
    let t0 = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after {limit:?}: it must be refused at once");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line, before anything ran:\n{err}");
    assert!(lines[0].contains(option), "{args:?}: the line must name {option}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}: nothing may have run: {}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn ping_that_would_measure_nothing_is_refused_at_once() {
    // Self-contained (its own reflector) and against a target alike: refused before a reflector
    // runs or a probe leaves.
    let limit = Duration::from_secs(10);
    for base in [vec!["ping", "--loopback", "--no-files"], vec!["ping", "127.0.0.1:9", "--no-files"]] {
        refused_at_once(&[&base[..], &["--count", "0"]].concat(), "--count", limit);
        refused_at_once(&[&base[..], &["--interval", "0"]].concat(), "--interval", limit);
        refused_at_once(&[&base[..], &["--duration", "0"]].concat(), "--duration", limit);
    }
    refused_at_once(&["reflect", "127.0.0.1:0", "--count", "0"], "--count", limit);
    refused_at_once(&["reflect", "127.0.0.1:0", "--duration", "0"], "--duration", limit);
}

#[test]
fn ping_waiting_for_replies_stops_promptly_on_sigterm() {
    let _turn = traffic();
    // A far end that takes the probes and never answers: ping sends its 5 and then waits up to
    // --linger for replies that will not come. SIGTERM must end that wait (and the run, with its
    // report) promptly, not after the minute.
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    sink.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let target = sink.local_addr().expect("addr").to_string();
    let mut child = std::process::Command::new(bin())
        .args(["ping", &target, "--count", "5", "--pps", "1000", "--linger", "60s", "--no-files"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start ping");
    // All five probes received: ping has sent its count and now only waits for replies.
    let mut buf = [0u8; 2048];
    for k in 0..5 {
        if let Err(e) = sink.recv_from(&mut buf) {
            let _ = child.kill();
            panic!("probe {k} never came: {e}");
        }
    }
    let t0 = std::time::Instant::now();
    let r = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    assert!(r.success());
    let limit = Duration::from_secs(10);
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ping still waiting {limit:?} after SIGTERM: the --linger wait must end on a signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "a stopped ping still reports: {err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("replies 0") && text.contains("lost 5"), "{text}");
}

#[test]
fn ping_whose_reader_went_away_finishes_without_a_panic() {
    // `wirespeed ping | head -1`: stdout is closed before the report is printed. The run must
    // still finish (its reflector stopped, its partitions removed) and exit, not panic and
    // then wait forever for a reflector nobody stops.
    let mut child = std::process::Command::new(bin())
        .args(["ping", "--loopback", "--count", "1000", "--pps", "1000", "--no-files"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start ping");
    drop(child.stdout.take());
    let t0 = std::time::Instant::now();
    let limit = Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ping with a closed stdout still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("reflector: reflected"), "the run finished and reported: {err}");
}

#[test]
fn a_ping_that_measured_nothing_leaves_no_files() {
    // Nothing listens: ping fails at once, and removes the directory and log it had made.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = sock.local_addr().expect("addr").port();
    drop(sock);
    let d = TempDir::new("ping-nothing");
    let out_dir = format!("{}/rtt", d.path());
    let out = run(&["ping", &format!("127.0.0.1:{port}"), "--count", "10", "-o", &out_dir]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!std::path::Path::new(&out_dir).exists(), "{out_dir} was left behind");
}
