//! `--metrics`: the Prometheus exporter of recv, record, reflect and tap, scraped over loopback
//! with plain HTTP, checked with `promtool`, and scraped by a real Prometheus server; the
//! example alert rules in contrib/prometheus checked and unit-tested with `promtool`.
//!
//! Every wait is a bounded poll for an exact value, never a sleep that hopes.

use crate::common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The repository's contrib/prometheus directory.
fn contrib() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../contrib/prometheus")
}

/// A running wirespeed command that serves metrics; killed if the test ends without finishing it.
struct Served {
    child: Option<Child>,
    /// The UDP port it listens on, when it says ("listening on ADDR").
    port: Option<u16>,
    /// Where its metrics are served (ADDR:PORT).
    metrics: String,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

/// Start `wirespeed ARGS` and read its stderr until it names its metrics address.
fn spawn_served(args: &[&str]) -> Served {
    let mut child =
        Command::new(bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start wirespeed");
    let mut err = BufReader::new(child.stderr.take().expect("stderr piped"));
    let mut out = child.stdout.take().expect("stdout piped");
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let mut seen = String::new();
    let (mut port, mut metrics) = (None, None);
    while metrics.is_none() {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} ended before naming its metrics address; stderr:\n{seen}");
        }
        if let Some(rest) = line.split("listening on ").nth(1) {
            port = rest.split_whitespace().next().and_then(|a| a.rsplit(':').next()).and_then(|p| p.parse().ok());
        }
        if let Some(rest) = line.split("metrics at http://").nth(1) {
            metrics = rest.split('/').next().map(str::to_string);
        }
        seen.push_str(&line);
    }
    let stderr = std::thread::spawn(move || {
        let _ = err.read_to_string(&mut seen);
        seen
    });
    Served { child: Some(child), port, metrics: metrics.unwrap(), stdout: Some(stdout), stderr: Some(stderr) }
}

impl Served {
    /// Send SIGINT (as Ctrl-C) and collect the exit code, stdout and stderr.
    fn interrupt(self) -> (Option<i32>, String, String) {
        let child = self.child.as_ref().expect("running");
        let st = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill");
        assert!(st.success());
        self.finish(Duration::from_secs(60))
    }

    /// Wait (bounded) for it to end by itself; exit code, stdout, stderr.
    fn finish(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let mut child = self.child.take().expect("running");
        let t = Instant::now();
        let code = loop {
            if let Some(st) = child.try_wait().expect("wait") {
                break st.code();
            }
            if t.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!("did not end within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = self.stdout.take().unwrap().join().unwrap_or_default();
        let err = self.stderr.take().unwrap().join().unwrap_or_default();
        (code, out, err)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One HTTP/1.1 request over a plain TCP connection: (status code, head, body).
fn http(addr: &str, request: &str) -> (u16, String, String) {
    let mut c = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    c.read_to_string(&mut raw).unwrap_or_else(|e| panic!("read from {addr}: {e}"));
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP head in {raw:?}"));
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("status line: {head}"));
    (code, head.to_string(), body.to_string())
}

fn get(addr: &str, path: &str) -> (u16, String, String) {
    http(addr, &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"))
}

/// GET /metrics: the Prometheus text format.
fn scrape(addr: &str) -> String {
    let (code, head, body) = get(addr, "/metrics");
    assert_eq!(code, 200, "{head}\n{body}");
    assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
    body
}

/// The value of series `name` whose labels include all of `labels` (exactly one such series).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = match series.split_once('{') {
                Some((n, r)) => (n, r),
                None => (series, ""),
            };
            (n == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
                .then(|| value.parse().ok())?
        })
        .collect();
    assert!(found.len() <= 1, "{name} {labels:?}: several series match in\n{text}");
    found.first().copied()
}

/// Poll `f` every 100 ms until it gives a value, at most `limit`.
fn poll<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let t = Instant::now();
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) if t.elapsed() > limit => panic!("{what}: not within {limit:?}; last: {last}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// `promtool check metrics` on an exposition: it must pass with nothing to say.
fn promtool_check_metrics(text: &str) {
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus) is installed");
    p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{text}");
}

#[test]
fn recv_metrics_count_every_datagram_and_the_injected_loss_exactly() {
    let _t = traffic();
    // A 1024-number window settles the injected hole long before the stream ends.
    let r = spawn_served(&["recv", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--window", "1024", "--json"]);
    let port = r.port.expect("recv names its port");
    let m = r.metrics.clone();
    // Served before any datagram: the build info, no stream yet.
    let first = scrape(&m);
    assert!(first.contains("wirespeed_build_info{version=\""), "{first}");
    assert!(first.contains("command=\"recv\""), "{first}");
    assert_eq!(sample(&first, "wirespeed_received_datagrams_total", &[]), None, "{first}");
    let rcvbuf0 = udp_rcvbuf_errors();
    // 20,000 numbers, 100..149 left out: 19,950 sent, 50 lost.
    send_to_port(port, &["--size", "1024", "--count", "20000", "--rate", "20kpps", "--skip", "100..149"]);
    let l = [("thread", "0"), ("stream", "0")];
    let exact = poll("received 19,950 and lost 50 in the metrics", Duration::from_secs(30), || {
        let s = scrape(&m);
        let got =
            (sample(&s, "wirespeed_received_datagrams_total", &l), sample(&s, "wirespeed_lost_datagrams_total", &l));
        if got == (Some(19950.0), Some(50.0)) || udp_rcvbuf_errors() > rcvbuf0 {
            Ok(s)
        } else {
            Err(format!("{got:?}"))
        }
    });
    let (code, out, err) = r.interrupt();
    assert_eq!(code, Some(0), "{err}");
    let rep = json(&out);
    let stream = &rep["streams"][0];
    if recv_kernel_drops(&rep) > 0 || udp_rcvbuf_errors() > rcvbuf0 {
        // A host too busy for loopback: the kernel dropped some; the metrics still never show
        // more than the ledger has.
        eprintln!("note: the kernel dropped datagrams on this busy host; exact counts not checked");
        assert!(
            sample(&exact, "wirespeed_received_datagrams_total", &l).unwrap_or(0.0) <= u(stream, "received") as f64
        );
        return;
    }
    // The exact figures, and the same as the run's own report.
    assert_eq!(u(stream, "received"), 19950);
    assert_eq!(u(stream, "lost"), 50);
    let source = stream["source"].as_str().unwrap();
    let ls = [("thread", "0"), ("source", source), ("stream", "0")];
    for (name, want) in [
        ("wirespeed_received_datagrams_total", 19950.0),
        ("wirespeed_lost_datagrams_total", 50.0),
        ("wirespeed_late_datagrams_total", 0.0),
        ("wirespeed_duplicate_datagrams_total", 0.0),
        ("wirespeed_invalid_datagrams_total", 0.0),
        ("wirespeed_received_bytes_total", 19950.0 * 1024.0),
    ] {
        assert_eq!(sample(&exact, name, &ls), Some(want), "{name} of {source}:\n{exact}");
    }
    let lt = [("thread", "0")];
    assert_eq!(sample(&exact, "wirespeed_capture_datagrams_total", &lt), Some(19950.0));
    assert_eq!(sample(&exact, "wirespeed_capture_bytes_total", &lt), Some(19950.0 * 1024.0));
    assert_eq!(sample(&exact, "wirespeed_socket_dropped_datagrams_total", &lt), Some(0.0));
    assert_eq!(sample(&exact, "wirespeed_streams", &lt), Some(1.0));
    assert!(!exact.contains("wirespeed_ring_"), "recv has no ring: {exact}");
    // The HELP text says what each series means, and counters are typed as such.
    assert!(exact.contains("# HELP wirespeed_lost_datagrams_total Sequence numbers of this stream that never arrived"));
    assert!(exact.contains("# TYPE wirespeed_lost_datagrams_total counter"));
    promtool_check_metrics(&exact);
    // The report names where the metrics were served.
    assert_eq!(rep["metrics"]["url"], format!("http://{m}/metrics"), "{out}");
    assert!(u(&rep["metrics"], "scrapes") >= 2, "{out}");
}

#[test]
fn the_exporter_answers_only_metrics_and_survives_malformed_requests() {
    let _turn = traffic();
    let r = spawn_served(&["recv", "127.0.0.1:0", "--metrics", "127.0.0.1:0"]);
    let m = r.metrics.clone();
    assert_eq!(get(&m, "/").0, 404);
    assert_eq!(get(&m, "/metricsx").0, 404);
    assert_eq!(http(&m, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").0, 405);
    assert_eq!(http(&m, "\u{1}\u{2} nonsense\r\n\r\n").0, 400);
    assert_eq!(http(&m, &format!("GET /{} HTTP/1.1\r\n\r\n", "x".repeat(20_000))).0, 431);
    // A client that connects and says nothing, another that leaves mid-request: the exporter
    // goes on answering.
    let idle = TcpStream::connect(&m).unwrap();
    let mut half = TcpStream::connect(&m).unwrap();
    half.write_all(b"GET /met").unwrap();
    drop(half);
    let (code, head, body) = http(
        &m,
        "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n",
    );
    assert_eq!(code, 200);
    assert!(head.contains("Content-Type: application/openmetrics-text; version=1.0.0"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(body.contains("# TYPE wirespeed_build_info gauge"), "{body}");
    // HEAD: the head only.
    let (code, head, body) = http(&m, "HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(code, 200, "{head}");
    assert!(body.is_empty(), "{body}");
    drop(idle);
    let (code, out, err) = r.interrupt();
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.contains(&format!("metrics: served at http://{m}/metrics (2 scrape(s) answered)")), "{out}");
}

/// 200 connections that connect and say nothing, all held open by the test, then scrapes: each
/// is answered (the exporter serves every connection at once, and a new one closes the oldest
/// idle one of its client), and the capture beside it counts every datagram. The old exporter
/// served one connection at a time, up to 3 s each: the scrape waited about ten minutes.
#[test]
fn a_scrape_is_answered_while_200_idle_connections_are_held() {
    let _t = traffic();
    let r = spawn_served(&["recv", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--json"]);
    let port = r.port.expect("recv names its port");
    let m = r.metrics.clone();
    let addr: std::net::SocketAddr = m.parse().unwrap();
    let idle: Vec<TcpStream> = (0..200)
        .map(|i| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("idle connection {i} not taken within 10 s: {e}"))
        })
        .collect();
    for _ in 0..3 {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("the scraper connects");
        // Generous: the exporter answers at once; the old one took minutes.
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut raw = Vec::new();
        let got = c.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw);
        assert!(
            got.is_ok() && text.starts_with("HTTP/1.1 200 OK\r\n"),
            "no answer with 200 idle connections held: {got:?} {text:?}"
        );
        assert!(text.contains("command=\"recv\""), "{text}");
    }
    send_to_port(port, &["--size", "1024", "--count", "5000", "--rate", "20kpps"]);
    let (code, out, err) = r.interrupt();
    drop(idle);
    assert_eq!(code, Some(0), "{err}");
    let j = json(&out);
    assert_eq!(u(&j["total"], "received"), 5000, "{out}");
    assert_eq!(u(&j["metrics"], "scrapes"), 3, "{out}");
}

#[test]
fn record_metrics_show_the_ring_the_files_and_the_writes() {
    let _t = traffic();
    let d = TempDir::new("metrics-rec");
    let r = spawn_served(&[
        "record",
        "127.0.0.1:0",
        "--size",
        "1024",
        "-o",
        d.path(),
        "--buffer",
        "16M",
        "--block",
        "1M",
        "--file-size",
        "4M",
        "--flush",
        "100ms",
        "--metrics",
        "127.0.0.1:0",
        "--json",
    ]);
    let m = r.metrics.clone();
    let rcvbuf0 = udp_rcvbuf_errors();
    send_to_port(r.port.unwrap(), &["--size", "1024", "--count", "10000", "--rate", "20kpps"]);
    let lt = [("thread", "0")];
    // Everything received is written within the flush time: 10,000 x 1024 bytes on disk. The
    // ring's fill is the capture thread's to publish, at the end of each receive call (at most
    // 100 ms after the writer's count when no data comes): wait for that too, not a guess.
    let s = poll("10,000 received, all written and the ring empty", Duration::from_secs(30), || {
        let s = scrape(&m);
        let got = (
            sample(&s, "wirespeed_received_datagrams_total", &lt),
            sample(&s, "wirespeed_written_bytes_total", &lt),
            sample(&s, "wirespeed_ring_fill_bytes", &lt),
        );
        if got == (Some(10000.0), Some(10_240_000.0), Some(0.0)) || udp_rcvbuf_errors() > rcvbuf0 {
            Ok(s)
        } else {
            Err(format!("{got:?}"))
        }
    });
    let (code, out, err) = r.interrupt();
    assert_eq!(code, Some(0), "{err}");
    let rep = json(&out);
    promtool_check_metrics(&s);
    assert_eq!(sample(&s, "wirespeed_ring_capacity_bytes", &lt), Some(16.0 * 1024.0 * 1024.0), "{s}");
    assert_eq!(sample(&s, "wirespeed_ring_fill_bytes", &lt), Some(0.0), "all written: {s}");
    assert_eq!(sample(&s, "wirespeed_ring_fill_ratio", &lt), Some(0.0), "{s}");
    assert!(sample(&s, "wirespeed_ring_high_water_bytes", &lt).unwrap() > 0.0, "{s}");
    assert_eq!(sample(&s, "wirespeed_ring_full_dropped_datagrams_total", &lt), Some(0.0), "{s}");
    // 10 MiB in 4 MiB files: two finished, the third still open while the scrape ran.
    assert_eq!(sample(&s, "wirespeed_files_written_total", &lt), Some(2.0), "{s}");
    // Every write is in the histogram, the +Inf bucket holds them all, and none stalled > 50 ms
    // would be luck: the stall count equals the report's.
    let writes = sample(&s, "wirespeed_write_duration_seconds_count", &lt).unwrap();
    assert!(writes >= 10.0, "10 MiB in 1 MiB blocks: {s}");
    assert_eq!(sample(&s, "wirespeed_write_duration_seconds_bucket", &[("thread", "0"), ("le", "+Inf")]), Some(writes));
    assert!(sample(&s, "wirespeed_write_duration_seconds_sum", &lt).unwrap() > 0.0);
    assert!(s.contains("# TYPE wirespeed_write_duration_seconds histogram"), "{s}");
    let stalls = sample(&s, "wirespeed_disk_stalls_total", &lt).unwrap();
    assert!(stalls <= u(&rep["writer"], "write_stalls") as f64, "{s}\n{out}");
    if recv_kernel_drops(&rep["capture"]) == 0 {
        assert_eq!(u(&rep["capture"]["total"], "received"), 10000);
    }
    assert_eq!(rep["metrics"]["url"], format!("http://{m}/metrics"), "{out}");
}

#[test]
fn reflect_metrics_count_what_it_answered_and_refused() {
    let _t = traffic();
    let r = spawn_served(&["reflect", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--json"]);
    let port = r.port.unwrap();
    let m = r.metrics.clone();
    let out = run(&["ping", &format!("127.0.0.1:{port}"), "--pps", "1000", "--count", "500", "--json", "--no-files"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    // Three datagrams that are not probes: refused as not_probe.
    let s = sender_to(port);
    for _ in 0..3 {
        s.send(b"not a probe at all").unwrap();
    }
    let text = poll("3 refused as not probes", Duration::from_secs(30), || {
        let t = scrape(&m);
        match sample(&t, "wirespeed_reflect_refused_datagrams_total", &[("reason", "not_probe")]) {
            Some(3.0) => Ok(t),
            v => Err(format!("{v:?}")),
        }
    });
    let (code, out, err) = r.interrupt();
    assert_eq!(code, Some(0), "{err}");
    let rep = json(&out);
    promtool_check_metrics(&text);
    // The scrape came after the last datagram: the metrics are the report's figures.
    assert_eq!(sample(&text, "wirespeed_reflect_received_datagrams_total", &[]), Some(u(&rep, "received") as f64));
    assert_eq!(sample(&text, "wirespeed_reflect_reflected_datagrams_total", &[]), Some(u(&rep, "reflected") as f64));
    assert_eq!(sample(&text, "wirespeed_reflect_reflected_bytes_total", &[]), Some(u(&rep, "bytes") as f64));
    assert_eq!(u(&rep, "received"), u(&rep, "reflected") + 3, "{out}");
    assert_eq!(sample(&text, "wirespeed_reflect_refused_datagrams_total", &[("reason", "rate_capped")]), Some(0.0));
    assert_eq!(rep["metrics"]["url"], format!("http://{m}/metrics"));
}

#[test]
fn tap_metrics_count_every_record_it_delivered() {
    let _t = traffic();
    let rec = TempDir::new("metrics-tap");
    let name = format!("metrics{}", std::process::id());
    let rcvbuf0 = udp_rcvbuf_errors();
    // The recorder publishes its descriptor in the test binary's share directory, where the tap
    // looks; the name is this test's own.
    share_dir();
    let recorder = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &["--size", "1024", "-o", rec.path(), "--file-format", "pcap", "--share", &name, "--buffer", "16M", "--json"],
    );
    // Attached (it says so before naming its metrics address) before anything is sent.
    let tap = spawn_served(&["tap", &name, "--metrics", "127.0.0.1:0", "--json"]);
    send_to_port(recorder.port, &["--size", "1024", "--count", "5000", "--rate", "20kpps"]);
    let m = tap.metrics.clone();
    let text = poll("5,000 records through the tap", Duration::from_secs(30), || {
        let t = scrape(&m);
        match sample(&t, "wirespeed_tap_records_total", &[]) {
            Some(5000.0) => Ok(t),
            _ if udp_rcvbuf_errors() > rcvbuf0 => Ok(t),
            v => Err(format!("{v:?}")),
        }
    });
    // Only now end the recorder (Ctrl-C): the tap ends with it.
    let st = Command::new("kill").args(["-INT", &recorder.child.id().to_string()]).status().unwrap();
    assert!(st.success());
    let (rc, rout, rerr) = finish(recorder, Duration::from_secs(60));
    assert_eq!(rc, Some(0), "{rerr}");
    let (tc, tout, terr) = tap.finish(Duration::from_secs(60));
    assert_eq!(tc, Some(0), "{terr}");
    let trep = json(&tout);
    promtool_check_metrics(&text);
    if recv_kernel_drops(&json(&rout)["capture"]) == 0 && udp_rcvbuf_errors() == rcvbuf0 {
        assert_eq!(sample(&text, "wirespeed_tap_records_total", &[]), Some(5000.0));
        assert_eq!(u(&trep, "records"), 5000);
    }
    assert_eq!(sample(&text, "wirespeed_tap_bytes_total", &[]), Some(u(&trep, "bytes") as f64));
    assert_eq!(sample(&text, "wirespeed_tap_overrun_records_total", &[]), Some(0.0));
    assert_eq!(trep["metrics"]["url"], format!("http://{m}/metrics"));
}

/// A Prometheus server started for one test: stopped (and its data removed) when dropped.
struct Prometheus {
    child: Child,
    addr: String,
    _dir: TempDir,
}

impl Prometheus {
    /// Start Prometheus scraping `target` every second with the example alert rules loaded; the
    /// web port is a free one (tried again with another should something take it first).
    fn start(target: &str) -> Prometheus {
        let dir = TempDir::new("prometheus");
        let rules = contrib().join("wirespeed-alerts.yml");
        let cfg = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: wirespeed\n    static_configs:\n      - targets: ['{target}']\n",
            rules.display()
        );
        let cfg_path = dir.0.join("prometheus.yml");
        std::fs::write(&cfg_path, cfg).unwrap();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let addr = format!("127.0.0.1:{port}");
            let log = std::fs::File::create(dir.0.join("prometheus.log")).unwrap();
            let mut child = Command::new("prometheus")
                .arg(format!("--config.file={}", cfg_path.display()))
                .arg(format!("--storage.tsdb.path={}", dir.0.join("data").display()))
                .arg(format!("--web.listen-address={addr}"))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("prometheus (Debian package prometheus) is installed");
            // Ready when its API answers; gone if it could not take the port.
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(60) {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                if TcpStream::connect(&addr).is_ok() && get(&addr, "/-/ready").0 == 200 {
                    return Prometheus { child, addr, _dir: dir };
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let log = std::fs::read_to_string(dir.0.join("prometheus.log")).unwrap_or_default();
        panic!("prometheus did not start:\n{log}");
    }

    /// `/api/v1/QUERY`, as JSON.
    fn api(&self, query: &str) -> Value {
        // HTTP/1.0: Prometheus then sends its answer whole, not in chunks.
        let (code, head, body) = http(&self.addr, &format!("GET /api/v1/{query} HTTP/1.0\r\n\r\n"));
        assert_eq!(code, 200, "{head}\n{body}");
        json(&body)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_prometheus_scrapes_a_recorder_and_loads_the_alert_rules() {
    let _t = traffic();
    let d = TempDir::new("metrics-prom");
    let r = spawn_served(&[
        "record",
        "127.0.0.1:0",
        "--size",
        "1024",
        "-o",
        d.path(),
        "--buffer",
        "16M",
        "--block",
        "1M",
        "--metrics",
        "127.0.0.1:0",
        "--json",
    ]);
    let prom = Prometheus::start(&r.metrics);
    let rcvbuf0 = udp_rcvbuf_errors();
    send_to_port(r.port.unwrap(), &["--size", "1024", "--count", "5000", "--rate", "20kpps"]);
    // Prometheus scrapes every second: wait until its own query API returns the exact count.
    let value = |q: &str| -> Result<f64, String> {
        let v = prom.api(&format!("query?query={q}"));
        let res = &v["data"]["result"];
        match res.as_array().map(|a| a.len()) {
            Some(1) => res[0]["value"][1].as_str().and_then(|s| s.parse().ok()).ok_or_else(|| v.to_string()),
            _ => Err(v.to_string()),
        }
    };
    let got = poll("Prometheus holds received_datagrams_total 5000", Duration::from_secs(90), || {
        match value("wirespeed_received_datagrams_total") {
            Ok(x) if x == 5000.0 => Ok(x),
            _ if udp_rcvbuf_errors() > rcvbuf0 => Ok(-1.0),
            other => Err(format!("{other:?}")),
        }
    });
    // Its target is up, the series carry the labels, and the ledger shows no loss.
    let up = prom.api("query?query=up");
    assert_eq!(up["data"]["result"][0]["value"][1], "1", "{up}");
    let series = prom.api("query?query=wirespeed_received_datagrams_total");
    let labels = &series["data"]["result"][0]["metric"];
    assert_eq!(labels["job"], "wirespeed", "{series}");
    assert_eq!(labels["thread"], "0", "{series}");
    assert!(labels["source"].as_str().unwrap().starts_with("127.0.0.1:"), "{series}");
    if got == 5000.0 {
        assert_eq!(value("wirespeed_lost_datagrams_total"), Ok(0.0));
        assert_eq!(value("wirespeed_ring_full_dropped_datagrams_total"), Ok(0.0));
    }
    // The example rules are loaded and evaluated against these series.
    let rules = prom.api("rules");
    let names: Vec<&str> = rules["data"]["groups"][0]["rules"]
        .as_array()
        .expect("one group of rules")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "WirespeedStreamLoss",
            "WirespeedSocketDrops",
            "WirespeedRingFilling",
            "WirespeedRingFullDrops",
            "WirespeedDiskStalls"
        ],
        "{rules}"
    );
    for r in rules["data"]["groups"][0]["rules"].as_array().unwrap() {
        assert_eq!(r["health"], "ok", "{r}");
    }
    drop(prom);
    let (code, out, err) = r.interrupt();
    assert_eq!(code, Some(0), "{err}");
    let rep = json(&out);
    assert!(u(&rep["metrics"], "scrapes") >= 1, "{out}");
}

#[test]
fn the_example_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let check = Command::new("promtool")
        .args(["check", "rules"])
        .arg(contrib().join("wirespeed-alerts.yml"))
        .output()
        .expect("promtool");
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{said}{}", stderr_of(&check));
    assert!(said.contains("SUCCESS: 5 rules found"), "{said}");
    let test = Command::new("promtool")
        .args(["test", "rules"])
        .arg(contrib().join("wirespeed-alerts.test.yml"))
        .output()
        .expect("promtool");
    assert!(test.status.success(), "{}{}", stdout_of(&test), stderr_of(&test));
}

#[test]
fn bad_metrics_addresses_and_a_busy_port_are_one_line_and_exit_2() {
    for bad in ["nonsense", "70000", "localhost:9464", "127.0.0.1", "239.1.2.3:9464"] {
        expect_fail(&["recv", "127.0.0.1:0", "--metrics", bad], 2, "--metrics");
    }
    expect_fail(
        &["record", "127.0.0.1:0", "--sink", "null", "--metrics", "192.0.2.1:9464"],
        2,
        "not an address of this host",
    );
    // A port something else holds: refused before any socket of the run is opened.
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = held.local_addr().unwrap().to_string();
    let d = TempDir::new("metrics-busy");
    for args in [
        vec!["recv", "127.0.0.1:0", "--duration", "30"],
        vec!["record", "127.0.0.1:0", "--size", "1024", "-o", d.path(), "--duration", "30"],
        vec!["reflect", "127.0.0.1:0", "--duration", "30"],
        vec!["tap", "nobody-shares-this", "--duration", "30"],
    ] {
        let mut a = args.clone();
        a.extend(["--metrics", &busy]);
        expect_fail(&a, 2, &format!("--metrics {busy}: cannot listen there: the port is in use"));
    }
    assert_eq!(std::fs::read_dir(&d.0).unwrap().count(), 0, "nothing recorded");
}

/// `partition status --metrics` serves the heartbeat state the daemons see: both partitions'
/// daemons up, each seen active by the other; a deactivated partition turns inactive in its
/// peer's view and says it is deactivated.
#[test]
#[ignore = "needs root"]
fn partition_status_serves_the_heartbeat_state_of_every_partition() {
    let _turn = traffic();
    let parts = common::parts::Parts::new("met");
    parts.ok(&["create", "-p", "1", "-c", "0", "-p", "2", "-c", "1", "--hb-check", "100ms"]);
    let s = spawn_served(&["partition", "--prefix", &parts.prefix, "status", "--metrics", "0"]);
    let seen = |text: &str, part: &str, by: &str, state: &str| {
        sample(text, "wirespeed_partition_peer_state", &[("partition", part), ("seen_by", by), ("state", state)])
    };
    let text = poll("both partitions seen active by the other", Duration::from_secs(30), || {
        let t = scrape(&s.metrics);
        if seen(&t, "1", "2", "active") == Some(1.0) && seen(&t, "2", "1", "active") == Some(1.0) {
            Ok(t)
        } else {
            Err(t)
        }
    });
    let prefix = parts.prefix.clone();
    assert_eq!(sample(&text, "wirespeed_partition_status_ok", &[("prefix", &prefix)]), Some(1.0), "{text}");
    for p in ["1", "2"] {
        assert_eq!(sample(&text, "wirespeed_partition_daemon_up", &[("partition", p)]), Some(1.0), "{text}");
        assert_eq!(sample(&text, "wirespeed_partition_namespace_present", &[("partition", p)]), Some(1.0));
        assert_eq!(sample(&text, "wirespeed_partition_deactivated", &[("partition", p)]), Some(0.0));
        assert_eq!(sample(&text, "wirespeed_partition_seen_active", &[("partition", p)]), Some(1.0));
    }
    // A state set: exactly one state is 1 for each (partition, seen_by).
    assert_eq!(seen(&text, "1", "2", "inactive"), Some(0.0));
    assert_eq!(seen(&text, "1", "2", "unknown"), Some(0.0));
    promtool_check_metrics(&text);
    parts.ok(&["deactivate", "2"]);
    let text = poll("partition 2 inactive in partition 1's view", Duration::from_secs(30), || {
        let t = scrape(&s.metrics);
        if seen(&t, "2", "1", "inactive") == Some(1.0) {
            Ok(t)
        } else {
            Err(t)
        }
    });
    assert_eq!(sample(&text, "wirespeed_partition_deactivated", &[("partition", "2")]), Some(1.0), "{text}");
    assert_eq!(sample(&text, "wirespeed_partition_seen_active", &[("partition", "2")]), Some(0.0), "{text}");
    assert_eq!(seen(&text, "2", "1", "active"), Some(0.0));
    let (code, out, err) = s.interrupt();
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("partition 1:") && out.contains("partition 2:"), "{out}");
    assert!(err.contains("scrape(s) answered"), "{err}");
}

#[test]
fn partition_status_metrics_refuses_a_bad_address_in_one_line() {
    expect_fail(&["partition", "status", "--metrics", "localhost:9464"], 2, "is not PORT or ADDR:PORT");
}
