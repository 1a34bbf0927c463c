//! Interoperability with independent implementations from PyPI (installed by scripts/test.sh):
//! the `baseband` package must read wirespeed's raw VDIF and Mark5B recordings, and `spead2`
//! must receive wirespeed's SPEAD stream while wirespeed receives spead2's, and the reference
//! Python HdrHistogram package must read the latency logs of `ping`.

use crate::common;

use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

fn script(name: &str) -> String {
    format!("{}/tests/interop/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// python3 with the module, or a failure that says how to get it.
fn python_with(module: &str) -> &'static str {
    let ok =
        Command::new("python3").args(["-c", &format!("import {module}")]).output().is_ok_and(|o| o.status.success());
    assert!(ok, "python3 cannot import {module}: run ./scripts/test.sh (it installs baseband and spead2) or `pip install {module}`");
    "python3"
}

/// Record `count` datagrams per stream of `format` into a raw file and return the record report.
fn record(dir: &TempDir, format: &str, streams: u32, count: u64, rate: &str) -> Value {
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &[
            "--format",
            format,
            "-o",
            dir.path(),
            "--once",
            "--json",
            "--buffer",
            "64M",
            "--block",
            "1M",
            "--duration",
            "60",
            // Holds every datagram of these short recordings (at most about 40 MB of kernel
            // memory): however late the recorder reads, the kernel drops none.
            "--rcvbuf",
            "64M",
        ],
    );
    let target = format!("127.0.0.1:{}", r.port);
    let out = run(&[
        "send",
        &target,
        "--format",
        format,
        "--streams",
        &streams.to_string(),
        "--count",
        &count.to_string(),
        "--rate",
        rate,
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(u(&rep["capture"]["total"], "lost"), 0, "{stdout}");
    rep
}

fn baseband(args: &[&str]) -> Value {
    let py = python_with("baseband");
    let out = Command::new(py).arg(script("read_baseband.py")).args(args).output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let v = json(s.lines().last().unwrap_or(""));
    assert!(out.status.success(), "baseband complained: {v} {}", String::from_utf8_lossy(&out.stderr));
    v
}

fn iso_to_unix(s: &str) -> f64 {
    // baseband prints UTC ISO times: compare with now through python-free parsing of HH:MM:SS.
    let t = s.split('T').nth(1).unwrap();
    let p: Vec<f64> = t.split(':').map(|x| x.parse().unwrap()).collect();
    p[0] * 3600.0 + p[1] * 60.0 + p[2]
}

fn now_sod() -> f64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    d % 86400.0
}

#[test]
fn baseband_reads_vdif_recordings() {
    let _turn = traffic();
    let d = TempDir::new("interop-vdif");
    let rep = record(&d, "vdif,frame=8032,threads=1,fps=1000", 1, 1500, "10kpps");
    assert_eq!(u(&rep["writer"], "records"), 1500);
    let f = d.only("vdif");
    let v = baseband(&["vdif", &f, "1000"]);
    assert_eq!(v["frames"], 1500);
    assert_eq!(v["threads"], serde_json::json!([0]));
    assert!(v["samples"].as_u64().unwrap() == 1500 * 8000 * 8 / 2 / 4, "2-bit samples over 4 channels: {v}");
    // The frames carry the real time: the first is within seconds of now.
    let lag = now_sod() - iso_to_unix(v["first"].as_str().unwrap());
    assert!((-5.0..30.0).contains(&lag), "first frame {} is not about now ({lag} s)", v["first"]);
    // Several threads: every frame readable, numbering continuous per thread.
    let d2 = TempDir::new("interop-vdif2");
    record(&d2, "vdif,frame=1032,threads=4,fps=2000", 4, 1000, "8000pps");
    let v = baseband(&["vdif", &d2.only("vdif"), "2000"]);
    assert_eq!(v["frames"], 4000);
    assert_eq!(v["threads"], serde_json::json!([0, 1, 2, 3]));
}

#[test]
fn baseband_reads_mark5b_recordings() {
    let _turn = traffic();
    let d = TempDir::new("interop-m5b");
    record(&d, "mark5b,fps=1000", 1, 1200, "10kpps");
    let v = baseband(&["mark5b", &d.only("m5b"), "1000", "8", "2"]);
    assert_eq!(v["frames"], 1200, "{v}");
    assert_eq!(v["samples"], 1200 * 5000);
    let lag = now_sod() - iso_to_unix(v["first"].as_str().unwrap());
    assert!((-5.0..30.0).contains(&lag), "first frame {} is not about now", v["first"]);
    // Mark5C-style halves after a PSN are recorded as whole frames.
    let d2 = TempDir::new("interop-m5c");
    record(&d2, "mark5b,fps=1000,halves=1,psn=1", 1, 2000, "10kpps");
    let v = baseband(&["mark5b", &d2.only("m5b"), "1000", "8", "2"]);
    assert_eq!(v["frames"], 1000, "{v}");
}

#[test]
fn spead2_receives_wirespeed_and_wirespeed_receives_spead2() {
    let _turn = traffic();
    let py = python_with("spead2");
    // spead2 -> wirespeed: 64 KiB heaps in 8 KiB packets (spead2 shortens the first packet of a
    // heap by its extra item pointer, so each heap is 9 packets: 8 numbered + 1 counted apart).
    // The receiver stops at the 2,701st datagram (300 heaps of 8 numbered packets and a tail,
    // and the stop heap), not after a time in which a slow Python start-up may not even have
    // sent; its socket buffer holds them all (about 45 MB of kernel memory), so none is dropped.
    // The duration only guards against a hang.
    let r = spawn_recv(&[
        "--format",
        "spead,heap=65536,payload=8192,first=1,step=1,fill=any",
        "--json",
        "--count",
        "2701",
        "--rcvbuf",
        "64M",
        "--duration",
        "300",
    ]);
    let out = Command::new(py)
        .arg(script("spead2_peer.py"))
        .args(["send", &r.port.to_string(), "300", "65536", "8232"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(330));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(rep["stopped_by"], "count", "{stdout}");
    assert_eq!(u(&rep["total"], "received"), 300 * 8, "{stdout}");
    assert_eq!(u(&rep["total"], "lost"), 0);
    assert_eq!(u(&rep["total"], "invalid"), 0);
    assert_eq!(u(&rep, "unsequenced"), 300 + 1, "heap tails and the stop heap");
    assert_eq!(u(&rep["streams"][0], "last_seq"), 300 * 8 - 1);

    // wirespeed -> spead2: the same heaps, reassembled by spead2. wirespeed sends no SPEAD stop
    // heap, so the peer ends after 2 s of silence after its last heap (it has them all by then:
    // the send below has finished), far more than a busy host holds a reader off the CPU.
    let (peer, port) = spead2_receiver(2);
    let target = format!("127.0.0.1:{port}");
    let out = run(&[
        "send",
        &target,
        "--format",
        "spead,heap=65536,payload=8192,first=1,step=1",
        "--count",
        "2400",
        "--rate",
        "8kpps",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let o = peer.wait_with_output().unwrap();
    let last = String::from_utf8_lossy(&o.stdout).lines().last().unwrap_or("").to_string();
    let v = json(&last);
    assert_eq!(v["heaps"], 300, "spead2 reassembled every heap: {v}");
    assert_eq!(v["distinct"], 300);
    assert_eq!((v["first"].as_u64(), v["last"].as_u64()), (Some(1), Some(300)));
    assert_eq!(v["incomplete"], 0);
}

#[test]
fn hdrhistogram_python_reads_the_ping_log() {
    let _turn = traffic();
    // The interval log is the standard HdrHistogram log: the reference Python implementation
    // must read it back to the very percentiles ping reported.
    let py = python_with("hdrh");
    let dir = TempDir::new("hlog");
    // A long linger: a reply can then be missing only if the kernel dropped it (the run ends as
    // soon as every reply is in).
    let out = run(&[
        "ping",
        "--loopback",
        "--pps",
        "5000",
        "--count",
        "5000",
        "--interval",
        "200ms",
        "--linger",
        "20s",
        "-o",
        dir.path(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&std::fs::read_to_string(format!("{}/latency.json", dir.path())).expect("latency.json"));
    let run0 = &doc["runs"][0];
    let rtt = &run0["rtt"];
    // Every probe answered or counted lost; the log holds every reply, whatever the host dropped.
    let replies = u(&run0["replies"], "received");
    assert_eq!(replies + u(&run0["replies"], "lost"), u(run0, "sent"), "{run0}");
    assert_eq!(u(run0, "sent"), 5000);
    let read = Command::new(py)
        .arg(script("read_hlog.py"))
        .arg(format!("{}/rtt-5000pps.hlog", dir.path()))
        .output()
        .expect("run read_hlog.py");
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    let v = json(&String::from_utf8_lossy(&read.stdout));
    assert_eq!(u(&v, "count"), replies);
    assert_eq!(u(&v, "intervals"), run0["intervals"].as_array().map_or(0, |a| a.len() as u64), "{v}");
    for (theirs, ours) in [("p50", "p50"), ("p99", "p99"), ("max", "max"), ("min", "min")] {
        assert_eq!(u(&v, theirs), u(rtt, ours), "{theirs}: hdrh {v} vs ping {rtt}");
    }
}

/// Streams written by `baseband` (an independent VDIF and Mark5B implementation), sent frame by
/// frame: `wirespeed probe` learns each one's layout and rate from its headers alone, and the
/// spec it gives makes `recv` count the stream exactly, with every Nth frame left out.
#[test]
fn probe_learns_baseband_streams_and_its_spec_counts_them_exactly() {
    let py = python_with("baseband");
    let cases: &[(&[&str], &str)] = &[
        // The stream: 2 threads, 1 channel, 2 bits, station Xx, 1000 frames/s.
        (
            &["vdif", "--threads", "2", "--chans", "1", "--bits", "2", "--station", "Xx", "--fps", "1000"],
            "vdif,frame=1032,threads=2,station=Xx,bits=2,chans=1,complex=0,fps=1000,",
        ),
        // EDV 3, one thread, four channels.
        (
            &["vdif", "--threads", "1", "--chans", "4", "--station", "Ab", "--fps", "500", "--edv", "3"],
            "vdif,frame=1032,threads=1,station=Ab,bits=2,chans=4,complex=0,fps=500,",
        ),
        // Complex samples, four threads, 4 bits.
        (
            &[
                "vdif",
                "--threads",
                "4",
                "--chans",
                "2",
                "--bits",
                "4",
                "--fps",
                "800",
                "--payload",
                "2000",
                "--complex",
            ],
            "vdif,frame=2032,threads=4,station=Xx,bits=4,chans=2,complex=1,fps=800,",
        ),
        (&["mark5b", "--chans", "4", "--bits", "2", "--fps", "400"], "mark5b,fps=400,halves=0,psn=0,"),
    ];
    let _t = traffic();
    let send = |args: &[&str], port: u16, skip: &str| -> Value {
        let target = format!("127.0.0.1:{port}");
        let (kind, rest) = args.split_first().unwrap();
        let out = Command::new(py)
            .arg(script("baseband_send.py"))
            .args([kind, target.as_str()])
            .args(rest)
            .args(["--skip", skip])
            .output()
            .unwrap();
        assert!(out.status.success(), "baseband_send {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        json(&String::from_utf8_lossy(&out.stdout))
    };
    // The cases at once, each on its own ports: every one is a few Mb/s of real-time frames, so
    // together they take one case's time, and no count depends on how they share the CPU (the
    // probe waits for a count, the receiver's loss is bounded by the kernel's own drops).
    let case = |args: &[&str], want: &str| {
        // Every datagram the sender will send (2.2 s of frames, per thread), so that the probe
        // ends when it has them all, however slowly Python starts: never on a timer.
        let arg = |k: &str, d: f64| args.iter().position(|a| *a == k).map_or(d, |i| args[i + 1].parse().unwrap());
        let threads = if args[0] == "vdif" { arg("--threads", 1.0) as u64 } else { 1 };
        let all = (2.2 * arg("--fps", 1000.0)) as u64 * threads;
        let p = spawn_cmd_with(&[], "probe", "127.0.0.1:0", &["--for", "120s", "--count", &all.to_string(), "--json"]);
        let sent = send(args, p.port, "0");
        assert_eq!(u(&sent, "sent"), all, "{args:?}: the count the probe waits for");
        let (code, stdout, stderr) = finish(p, Duration::from_secs(30));
        assert_eq!(code, Some(0), "{args:?}: a spec for the source\n{stdout}\n{stderr}");
        let rep = json(&stdout);
        let src = &rep["sources"][0];
        let spec = src["spec"].as_str().unwrap_or_else(|| panic!("{args:?}: {rep}"));
        assert!(spec.starts_with(want), "{args:?}: {spec}");
        assert!(spec.contains("fill=any"), "baseband's samples are an instrument's data: {spec}");
        assert_eq!(u(src, "datagrams"), u(&sent, "sent"), "{args:?}: every frame studied");

        // The learned spec counts the stream exactly, loss included.
        let total = u(&sent, "frames");
        let skip = 97u64;
        let skipped = (0..total.saturating_sub(16)).filter(|i| i % skip == skip - 1).count() as u64;
        let r =
            spawn_recv(&["--format", spec, "--json", "--duration", "30", "--count", &(total - skipped).to_string()]);
        let out = send(args, r.port, &skip.to_string());
        assert_eq!(u(&out, "skipped"), skipped);
        let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
        assert_eq!(code, Some(0), "{stderr}");
        let v = json(&stdout);
        let drops = recv_kernel_drops(&v);
        let (received, lost) = (u(&v["total"], "received"), u(&v["total"], "lost"));
        assert_eq!(u(&v["total"], "invalid"), 0, "{spec}: {stdout}");
        assert_eq!(received + lost, total, "{spec}: every frame received or lost");
        assert!(
            (skipped..=skipped + drops).contains(&lost),
            "{spec}: lost {lost}, left out {skipped}, kernel drops {drops}"
        );
    };
    std::thread::scope(|s| {
        for &(args, want) in cases {
            s.spawn(move || case(args, want));
        }
    });
}

/// baseband's frames of each `(args, skip)` in turn, to `port` from source port `src`.
fn send_from(py: &str, src: &str, port: u16, runs: &[(&[&str], &str)]) {
    for &(args, skip) in runs {
        let (kind, rest) = args.split_first().unwrap();
        let out = Command::new(py)
            .arg(script("baseband_send.py"))
            .args([*kind, format!("127.0.0.1:{port}").as_str()])
            .args(rest)
            .args(["--skip", skip, "--src-port", src])
            .output()
            .unwrap();
        assert!(out.status.success(), "baseband_send {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A recorder says the layout changed and keeps the new layout's frames (in pcap), counted
/// refused there; `verify --format` with the new layout counts them, and their loss, exactly.
#[test]
fn a_recorder_keeps_a_stream_that_changes_layout_and_says_how_to_count_it() {
    let py = python_with("baseband");
    let _t = traffic();
    let dir = TempDir::new("relearn-record");
    let src = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let before: &[&str] = &["vdif", "--threads", "2", "--chans", "1", "--fps", "1000"];
    let after: &[&str] = &["vdif", "--threads", "1", "--chans", "4", "--fps", "800", "--payload", "8000"];
    let skipped = |n: u64, skip: u64| (0..n.saturating_sub(16)).filter(|i| i % skip == skip - 1).count() as u64;
    let (na, nb) = (4400, 1760);
    let sb = skipped(nb, 89);
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &["--format", "vdif", "-o", dir.path(), "--file-format", "pcap", "--json", "--buffer", "64M", "--block", "1M"]
            .into_iter()
            .chain(["--rcvbuf", "64M", "--duration", "60", "--count", &(na + nb - sb).to_string()])
            .collect::<Vec<_>>(),
    );
    send_from(py, &src, r.port, &[(before, "0"), (after, "89")]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    let cap = &rep["capture"];
    let c = &cap["layout_changes"][0];
    let spec = c["spec"].as_str().unwrap_or_else(|| panic!("no change said: {stdout}"));
    assert!(spec.starts_with("vdif,frame=8032,threads=1,station=Xx,bits=2,chans=4,complex=0,fps=800,"), "{spec}");
    assert_eq!(c["followed"], false);
    let drops = recv_kernel_drops(cap);
    assert_eq!(drops, 0, "a 64 MiB buffer holds both runs: {stdout}");
    assert_eq!((u(&cap["total"], "received"), u(&cap["total"], "invalid")), (na, nb - sb), "{stdout}");
    // Every frame of both layouts is in the recording; the new layout's count its loss.
    let v = json(&String::from_utf8_lossy(&run(&["verify", dir.path(), "--format", spec, "--json"]).stdout));
    let t = &v["total"];
    assert_eq!((u(t, "received"), u(t, "lost"), u(t, "invalid")), (nb - sb, sb, na), "{v}");
}

/// An instrument that changes its layout mid-run (baseband's VDIF, one source port throughout):
/// `--format vdif` alone follows the change, counts each layout by its
/// own ledgers, and counts the loss injected on both sides of it exactly, with nothing invalid.
#[test]
fn a_baseband_stream_that_changes_layout_mid_run_is_a_resync() {
    let py = python_with("baseband");
    let _t = traffic();
    let cases: &[(&str, &[&str], &[&str], &str)] = &[
        (
            "vdif",
            &["vdif", "--threads", "2", "--chans", "1", "--fps", "1000"],
            &["vdif", "--threads", "1", "--chans", "4", "--station", "Ab", "--fps", "500", "--edv", "3"],
            "vdif,frame=1032,threads=1,station=Ab,bits=2,chans=4,complex=0,fps=500,",
        ),
        // Eight times the bandwidth in frames eight times longer, at the same frame rate.
        (
            "vdif",
            &["vdif", "--threads", "1", "--chans", "4", "--fps", "800"],
            &["vdif", "--threads", "1", "--chans", "4", "--fps", "800", "--payload", "8000"],
            "vdif,frame=8032,threads=1,station=Xx,bits=2,chans=4,complex=0,fps=800,",
        ),
    ];
    for &(family, before, after, want) in cases {
        let src = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
        let frames = |args: &[&str]| {
            let arg = |k: &str, d: f64| args.iter().position(|a| *a == k).map_or(d, |i| args[i + 1].parse().unwrap());
            let threads = if args[0] == "vdif" { arg("--threads", 1.0) as u64 } else { 1 };
            (2.2 * arg("--fps", 1000.0)) as u64 * threads
        };
        let skipped = |n: u64, skip: u64| (0..n.saturating_sub(16)).filter(|i| i % skip == skip - 1).count() as u64;
        let (na, nb) = (frames(before), frames(after));
        let (sa, sb) = (skipped(na, 97), skipped(nb, 89));
        let r = spawn_recv(&[
            "--format",
            family,
            "--json",
            "--duration",
            "60",
            "--count",
            &(na + nb - sa - sb).to_string(),
        ]);
        send_from(py, &src, r.port, &[(before, "97"), (after, "89")]);
        let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
        assert_eq!(code, Some(0), "{family}: {stderr}");
        let v = json(&stdout);
        let changes = v["layout_changes"].as_array().unwrap_or_else(|| panic!("{family}: no change seen: {stdout}"));
        assert_eq!(changes.len(), 1, "{family}: {stdout}");
        let spec = changes[0]["spec"].as_str().unwrap();
        assert!(spec.starts_with(want), "{family}: {spec}");
        assert_eq!(changes[0]["followed"], true);
        assert!(changes[0]["assumed"].as_array().unwrap().is_empty(), "{family}: the new rate was seen: {stdout}");
        let drops = recv_kernel_drops(&v);
        let (received, lost) = (u(&v["total"], "received"), u(&v["total"], "lost"));
        assert_eq!(u(&v["total"], "invalid"), 0, "{family}: a change of layout is not invalid data: {stdout}");
        assert_eq!(received + lost, na + nb, "{family}: every frame of both layouts received or lost: {stdout}");
        assert!(
            (sa + sb..=sa + sb + drops).contains(&lost),
            "{family}: lost {lost}, left out {sa}+{sb}, kernel drops {drops}"
        );
        // Each layout's streams, with the loss left out of each.
        let streams = v["streams"].as_array().unwrap();
        let of = |k: u64| -> (u64, u64) {
            streams
                .iter()
                .filter(|s| s["layout"].as_u64().unwrap_or(0) == k)
                .fold((0, 0), |(r, l), s| (r + u(s, "received"), l + u(s, "lost")))
        };
        let ((ra, la), (rb, lb)) = (of(0), of(1));
        assert_eq!((ra + la, rb + lb), (na, nb), "{family}: {stdout}");
        assert!(drops > 0 || (la, lb) == (sa, sb), "{family}: lost {la} and {lb}, left out {sa} and {sb}");
    }
}

/// spead2's stop heap ends the stream as a wirespeed sender's end message does: `--once` stops
/// on it, and the last packets before it, dropped, are counted lost (with their heap).
#[test]
fn spead2_stop_heap_ends_the_run_and_shows_the_tail_lost() {
    let _t = traffic();
    let r = spawn_recv(&["--format", "spead", "--once", "--json", "--rcvbuf", "64M", "--duration", "300"]);
    let mut args = vec![script("spead2_peer.py"), "relay".into(), "defaults".into(), "8248".into(), "100".into()];
    args.extend(["0".into(), r.port.to_string(), "tail=3".into()]);
    let out = Command::new(python_with("spead2")).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sent = json(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or(""));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(300));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(rep["stopped_by"], "end of stream", "{stdout}");
    let dropped = sent["dropped"].as_array().unwrap();
    assert_eq!(dropped.len(), 3, "{sent}");
    assert_eq!(u(&rep["total"], "lost"), 3, "the tail, known from the stop heap: {stdout}");
    let s = &rep["streams"][0];
    assert_eq!(s["closed_at"], s["last_seq"].as_u64().unwrap() + 3, "{s}");
    let bytes: u64 = dropped.iter().map(|d| d[2].as_u64().unwrap()).sum();
    assert_eq!((u(&s["heaps"], "incomplete"), u(&s["heaps"], "missing_bytes")), (1, bytes), "{s}");
    assert_eq!(rep["streams_without_end"], 0, "{stdout}");
}

/// spead2's receiver (`spead2_peer.py recv`) on a free port, listening, ending after `quiet`
/// seconds without a heap (counted from its first heap; before that it waits at least 30 s) or
/// at a stop heap; its last stdout line is its JSON account.
fn spead2_receiver(quiet: u32) -> (std::process::Child, u16) {
    let port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let mut peer = Command::new(python_with("spead2"))
        .arg(script("spead2_peer.py"))
        .args(["recv", &port.to_string(), &quiet.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(peer.stdout.as_mut().unwrap()), &mut line).unwrap();
    assert!(line.contains("listening"), "{line}");
    (peer, port)
}

/// `spead2_peer.py relay`: spead2 sends `heaps` heaps of `layout` through a relay that drops
/// every `every`-th packet (0: none) and forwards the rest to `ports`; its JSON account.
fn spead2_relay(layout: &str, packet: u32, heaps: u32, every: u32, ports: &[u16]) -> Value {
    let mut args = vec![
        script("spead2_peer.py"),
        "relay".into(),
        layout.into(),
        packet.to_string(),
        heaps.to_string(),
        every.to_string(),
    ];
    args.extend(ports.iter().map(|p| p.to_string()));
    let out = Command::new(python_with("spead2")).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    json(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or(""))
}

/// Ctrl-C a receiver once everything is sent (loopback delivers each datagram before sendto
/// returns, and the receiver studies or counts what is queued before it reports).
fn interrupt(r: Receiver) -> (Option<i32>, String, String) {
    let _ = Command::new("kill").args(["-INT", &r.child.id().to_string()]).status();
    finish(r, Duration::from_secs(60))
}

/// spead2 as users run it: with its defaults (SPEAD-64-40, a timestamp item and a 64 KiB data
/// item, descriptors in the first heap, 8248-byte packets, so each heap's first packet is
/// shorter and its last one shorter still), and with SPEAD-64-48, an immediate item, two data
/// items and descriptors sent again every 25th heap, in 1472-byte and 9000-byte packets. The
/// probe learns each layout from the headers; with its spec, `recv` counts exactly the packets
/// a relay dropped, and spead2's own receiver, fed the same packets, completes exactly the
/// heaps that lost none.
#[test]
fn spead2_streams_are_learned_and_their_loss_counted_exactly() {
    let _t = traffic();
    for (layout, packet, every, facts) in [
        ("defaults", 8248u32, 97u32, "8208 payload bytes per packet, 8192 in a heap's first"),
        ("items", 1472, 89, "1432 payload bytes per packet, 1408 in a heap's first"),
        ("items", 9000, 31, "8960 payload bytes per packet, 8936 in a heap's first"),
    ] {
        let heaps = 200u32;
        let p = spawn_cmd_with(&[], "probe", "127.0.0.1:0", &["--for", "300s", "--json"]);
        let clean = spead2_relay(layout, packet, heaps, 0, &[p.port]);
        let (code, stdout, stderr) = interrupt(p);
        assert_eq!(code, Some(0), "{layout}/{packet}: {stdout}{stderr}");
        let src = &json(&stdout)["sources"][0];
        assert_eq!(src["format"], "spead", "{src}");
        assert_eq!(src["datagrams"], clean["sent"], "{src}");
        assert!(src["facts"].as_array().unwrap().iter().any(|f| f == facts), "{layout}/{packet}: {src}");
        let spec = src["spec"].as_str().unwrap_or_else(|| panic!("no spec for {layout}/{packet}: {src}")).to_string();

        let r =
            spawn_recv(&["--format", &spec, "--json", "--rcvbuf", "64M", "--duration", "300", "--expect-zero-loss"]);
        let (peer, port2) = spead2_receiver(20);
        let sent = spead2_relay(layout, packet, heaps, every, &[r.port, port2]);
        let (code, stdout, stderr) = interrupt(r);
        assert_eq!(code, Some(3), "loss is exit 3: {stdout}{stderr}");
        let rep = json(&stdout);
        // The numbering the spec gives: a heap's packet k is numbered when k < slots.
        let key = |k: &str| -> u64 {
            spec.split(',').find_map(|kv| kv.strip_prefix(&format!("{k}="))).map_or(0, |v| v.parse().unwrap())
        };
        let (heap, payload) = (key("heap"), key("payload"));
        let lead = match key("lead") {
            0 => payload,
            l => l,
        };
        let slots = 1 + (heap - lead).div_ceil(payload);
        let dropped = sent["dropped"].as_array().unwrap();
        let numbered = dropped.iter().filter(|d| d[1].as_u64().unwrap().div_ceil(payload) < slots).count() as u64;
        assert!(numbered > 0, "the relay dropped data packets: {sent}");
        let total = &rep["total"];
        let what = format!("{layout}/{packet} with {spec}: {stdout}");
        assert_eq!(u(total, "lost"), numbered, "{what}");
        assert_eq!(u(total, "invalid"), 0, "{what}");
        assert_eq!((u(total, "late"), u(total, "duplicate")), (0, 0), "{what}");
        let got = u(total, "received") + u(&rep, "unsequenced");
        assert_eq!(got, sent["sent"].as_u64().unwrap() - dropped.len() as u64, "{what}");

        // The heaps, read from the same ledger: those that lost numbered packets are
        // incomplete (none lost all of its packets here), the others complete, and the bytes
        // missing are the payloads dropped (data heaps: their sizes are the numbering's).
        let is_numbered = |d: &&Value| d[1].as_u64().unwrap().div_ceil(payload) < slots;
        let hit: std::collections::BTreeSet<u64> =
            dropped.iter().filter(is_numbered).map(|d| d[0].as_u64().unwrap()).collect();
        let h = &rep["streams"][0]["heaps"];
        assert_eq!(u(h, "heaps"), u64::from(heaps), "{what}");
        assert_eq!((u(h, "incomplete"), u(h, "lost")), (hit.len() as u64, 0), "{what}");
        assert_eq!(u(h, "complete"), u64::from(heaps) - hit.len() as u64, "{what}");
        if dropped.iter().filter(is_numbered).all(|d| d[3].as_u64() == Some(heap)) {
            let bytes: u64 = dropped.iter().filter(is_numbered).map(|d| d[2].as_u64().unwrap()).sum();
            assert_eq!(u(h, "missing_bytes"), bytes, "{what}");
        }

        let o = peer.wait_with_output().unwrap();
        let v = json(String::from_utf8_lossy(&o.stdout).lines().last().unwrap_or(""));
        let touched: std::collections::BTreeSet<u64> = dropped.iter().map(|d| d[0].as_u64().unwrap()).collect();
        if touched == hit {
            assert_eq!(v["heaps"], h["complete"], "spead2 and wirespeed agree on the complete heaps: {v}");
        }
        assert_eq!(
            v["heaps"].as_u64(),
            Some(u64::from(heaps) - touched.len() as u64),
            "spead2 completes the heaps that lost nothing: {v}"
        );

        // `--format spead` alone learns the same layout inline and counts the same loss.
        let r = spawn_recv(&["--format", "spead", "--json", "--rcvbuf", "64M", "--duration", "300"]);
        let again = spead2_relay(layout, packet, heaps, every, &[r.port]);
        let (_, stdout, stderr) = interrupt(r);
        let rep = json(&stdout);
        assert_eq!(rep["learned"]["spec"], spec.as_str(), "{layout}/{packet}: {stderr}");
        assert_eq!(again["dropped"].as_array().map(Vec::len), Some(dropped.len()), "the relay drops the same packets");
        assert_eq!(u(&rep["total"], "lost"), numbered, "{layout}/{packet} learned inline: {stdout}");
        assert_eq!(u(&rep["total"], "invalid"), 0, "{stdout}");

        // `record --format spead` learns it too, writes pcap files described by the layout
        // learned, and verify needs no arguments to count them the same.
        if packet == 8248 {
            let d = TempDir::new("spead2-learned");
            let r = spawn_cmd_with(
                &[],
                "record",
                "127.0.0.1:0",
                &[
                    "--format",
                    "spead",
                    "--file-format",
                    "pcap",
                    "-o",
                    d.path(),
                    "--buffer",
                    "64M",
                    "--json",
                    "--duration",
                    "300",
                ],
            );
            spead2_relay(layout, packet, heaps, every, &[r.port]);
            let (code, stdout, stderr) = interrupt(r);
            assert_eq!(code, Some(0), "{stdout}{stderr}");
            let rep = json(&stdout);
            assert_eq!(rep["capture"]["learned"]["spec"], spec.as_str(), "{stdout}");
            assert_eq!(u(&rep["capture"]["total"], "lost"), numbered, "{stdout}");
            let out = run(&["verify", d.path(), "--json"]);
            let v = json(&String::from_utf8_lossy(&out.stdout));
            assert_eq!(u(&v["total"], "lost"), numbered, "{v}");
            assert_eq!(u(&v["total"], "received"), u(&rep["capture"]["total"], "received"), "{v}");
            let hc = &rep["capture"]["streams"][0]["heaps"];
            assert_eq!(u(hc, "heaps"), u64::from(heaps), "{stdout}");
            assert_eq!(&v["streams"][0]["heaps"], hc, "verify reads the same heaps: {v}");
        }
    }
}
