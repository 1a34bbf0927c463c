//! Several capture threads (`recv`/`record --threads N`): the kernel steers each stream to one
//! thread with the classic BPF program, each thread keeps its own ledgers (and recording), and
//! the reports merge exactly.

use crate::common;

use common::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;
use wirespeed::sys::bpf::Steer;

/// Per stream: sequence numbers generated, and the ones the sender leaves out.
const COUNT: u64 = 2000;
const SKIP_EVERY: u64 = 97;
const SKIP: (u64, u64) = (1000, 1009);

/// The numbers a stream lacks: every 97th (96, 193, ...) and 1000..1009.
fn skipped() -> Vec<u64> {
    let mut v: Vec<u64> = (1..=COUNT / SKIP_EVERY).map(|k| k * SKIP_EVERY - 1).filter(|&s| s < COUNT).collect();
    v.extend(SKIP.0..=SKIP.1);
    v.sort_unstable();
    v.dedup();
    v
}

fn send_8_streams(target: &str, prefix: &[&str]) {
    let skip = format!("{}..{}", SKIP.0, SKIP.1);
    let count = COUNT.to_string();
    let every = SKIP_EVERY.to_string();
    let args = [
        "send",
        target,
        "--streams",
        "8",
        "--count",
        &count,
        "--rate",
        "16kpps",
        "--size",
        "1080",
        "--skip-every",
        &every,
        "--skip",
        &skip,
    ];
    let out = if prefix.is_empty() { run(&args) } else { run_prefixed(prefix, &args) };
    assert!(out.status.success(), "send: {}", String::from_utf8_lossy(&out.stderr));
}

/// The 8 streams' ledgers are exact and each lives on the thread the steering names; the
/// threads' figures sum to the run's.
fn check_eight_streams(rep: &Value, threads: u64, steer_by_source: bool) {
    let streams = rep["streams"].as_array().expect("streams");
    assert_eq!(streams.len(), 8, "{rep}");
    let lacks = skipped();
    let drops = recv_kernel_drops(rep);
    for s in streams {
        assert_eq!(u(s, "received") + u(s, "lost"), COUNT, "{s}");
        if drops == 0 {
            assert_eq!(u(s, "lost"), lacks.len() as u64, "{s}");
            assert_eq!(gap_list(s), ranges(&lacks), "{s}");
        }
        assert_eq!(u(&s["sender"], "skipped"), lacks.len() as u64, "{s}");
        if steer_by_source {
            let src: SocketAddr = s["source"].as_str().unwrap().parse().unwrap();
            let want = Steer::Source.member(&[], Some(src), threads as u32);
            assert_eq!(u(s, "thread"), u64::from(want), "stream {src} is not on the thread the BPF program names");
        }
    }
    assert!(rep["split_streams"].as_array().unwrap().is_empty(), "{}", rep["split_streams"]);
    let per = rep["threads"].as_array().expect("threads");
    assert_eq!(per.len() as u64, threads);
    let sum = |k: &str| per.iter().map(|t| u(t, k)).sum::<u64>();
    assert_eq!(sum("datagrams"), u(rep, "datagrams"));
    assert_eq!(sum("bytes"), u(rep, "bytes"));
    assert_eq!(sum("streams"), 8);
    assert_eq!(sum("cpu_ns"), u(rep, "capture_cpu_ns"));
    assert_eq!(u(&rep["total"], "received"), streams.iter().map(|s| u(s, "received")).sum::<u64>());
    for (i, t) in per.iter().enumerate() {
        assert_eq!(u(t, "thread"), i as u64);
        let on_t = streams.iter().filter(|s| u(s, "thread") == i as u64);
        assert_eq!(on_t.map(|s| u(s, "received")).sum::<u64>(), u(t, "datagrams"), "thread {i}");
        assert!(t["cpu_ns_per_packet"].is_number() && t["socket_drops"].is_u64(), "{t}");
    }
}

#[test]
fn two_threads_keep_eight_streams_exact() {
    let _t = traffic();
    let r = spawn_recv(&["--threads", "2", "--once", "--json", "--duration", "60", "--size", "1080"]);
    send_8_streams(&format!("127.0.0.1:{}", r.port), &[]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(rep["stopped_by"], "end of stream", "--once ends on every thread");
    assert!(rep["steering"].as_str().unwrap().contains("classic BPF"), "{}", rep["steering"]);
    check_eight_streams(&rep, 2, true);
}

#[test]
fn human_report_shows_each_thread() {
    let _t = traffic();
    let r = spawn_recv(&["--threads", "2", "--once", "--duration", "60", "--size", "1080"]);
    send_8_streams(&format!("127.0.0.1:{}", r.port), &[]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("capture threads: 2"), "{stdout}");
    assert!(stdout.contains("thread 0:") && stdout.contains("thread 1:"), "{stdout}");
    assert!(stdout.contains("per datagram"), "{stdout}");
}

#[test]
fn vdif_threads_are_steered_by_thread_id() {
    let _t = traffic();
    let fmt = "vdif,frame=1032,threads=4,fps=1000";
    let r = spawn_recv(&["--threads", "2", "--once", "--json", "--duration", "60", "--format", fmt]);
    let target = format!("127.0.0.1:{}", r.port);
    let out = run(&["send", &target, "--format", fmt, "--streams", "4", "--count", "500", "--rate", "8kpps"]);
    assert!(out.status.success(), "send: {}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(rep["stopped_by"], "end of stream");
    assert!(rep["steering"].as_str().unwrap().contains("stream id"), "{}", rep["steering"]);
    let streams = rep["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 4);
    for s in streams {
        assert_eq!(u(s, "received") + u(s, "lost"), 500, "{s}");
        // VDIF thread t goes to capture thread t mod 2, its end message with it.
        assert_eq!(u(s, "thread"), u(s, "stream") % 2, "{s}");
        assert!(s["sender"].is_object(), "the end message reached its stream's thread: {s}");
    }
}

#[test]
fn two_threads_record_two_file_series_that_verify() {
    let _t = traffic();
    let d = TempDir::new("threads-rec");
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &[
            "-o",
            d.path(),
            "--threads",
            "2",
            "--buffer",
            "64M",
            "--file-format",
            "pcap",
            "--prefix",
            "th",
            "--once",
            "--json",
            "--duration",
            "60",
            "--size",
            "1080",
        ],
    );
    send_8_streams(&format!("127.0.0.1:{}", r.port), &[]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    let cap = &rep["capture"];
    assert_eq!(cap["stopped_by"], "end of stream");
    check_eight_streams(cap, 2, true);
    let per = rep["threads"].as_array().expect("per-thread recording");
    assert_eq!(per.len(), 2);
    let names: Vec<String> = std::fs::read_dir(&d.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pcap"))
        .collect();
    for (i, t) in per.iter().enumerate() {
        let prefix = format!("th-t{i}-");
        assert_eq!(t["prefix"], format!("th-t{i}"));
        let mine = names.iter().filter(|n| n.starts_with(&prefix)).count();
        // A thread that was steered no stream still finishes its (empty) series.
        assert_eq!(mine as u64, u(t, "files"), "{names:?}");
    }
    assert_eq!(per.iter().map(|t| u(t, "bytes")).sum::<u64>(), u(&rep["writer"], "bytes"));
    assert_eq!(u(&rep["writer"], "records"), u(cap, "datagrams"), "every received datagram is in a file");
    // verify reads both series as one recording: every stream's records lie in one series.
    let out = run(&["verify", d.path(), "--json"]);
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(u(&v, "problems"), 0, "{v}");
    assert_eq!(u(&v["total"], "received"), u(&cap["total"], "received"), "{}", v["total"]);
    assert_eq!(u(&v["total"], "lost"), u(&cap["total"], "lost"), "{}", v["total"]);
}

#[test]
fn bad_cpus_get_one_clear_line() {
    expect_fail(&["recv", "127.0.0.1:0", "--threads", "4", "--cpus", "0-1"], 2, "one CPU per capture thread");
    expect_fail(&["recv", "127.0.0.1:0", "--threads", "2", "--cpus", "3-1"], 2, "empty");
    expect_fail(&["recv", "127.0.0.1:0", "--threads", "2", "--cpus", "a-b"], 2, "2-5");
    expect_fail(&["recv", "127.0.0.1:0", "--threads", "0"], 2, "--threads");
    expect_fail(&["recv", "127.0.0.1:0", "--threads", "2", "--cpu", "0", "--duration", "1"], 2, "--cpus");
    expect_fail(&["recv", "127.0.0.1:0", "--threads", "2", "--cpus", "0,1", "--cpu", "0"], 2, "--cpu");
    expect_fail(&["record", "127.0.0.1:0", "--threads", "2", "--cpus", "0", "-o", "/tmp"], 2, "one CPU per");
}

#[test]
fn pinned_threads_report_their_cpus() {
    let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if n < 2 {
        return;
    }
    let _t = traffic();
    let r = spawn_recv(&["--threads", "2", "--cpus", "0-1", "--once", "--json", "--duration", "60", "--size", "1080"]);
    send_8_streams(&format!("127.0.0.1:{}", r.port), &[]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    for (i, t) in rep["threads"].as_array().unwrap().iter().enumerate() {
        assert_eq!(u(t, "pinned"), i as u64, "{t}");
        assert_eq!(u(t, "cpu"), i as u64, "a pinned thread runs on its CPU: {t}");
    }
}

#[test]
#[ignore = "needs root"]
fn multicast_with_two_threads_counts_each_stream_once() {
    let _t = traffic();
    let ns = Netns::new("thr-mc");
    ns.exec(&["ip", "link", "set", "lo", "multicast", "on"]);
    ns.exec(&["ip", "route", "add", "224.0.0.0/4", "dev", "lo"]);
    let r = spawn_recv_with(
        &ns.prefix(),
        "239.1.2.4:0",
        &["--threads", "2", "--once", "--json", "--duration", "60", "--size", "1080"],
    );
    send_8_streams(&format!("239.1.2.4:{}", r.port), &ns.prefix());
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(rep["stopped_by"], "end of stream");
    assert!(rep["steering"].as_str().unwrap().contains("user space"), "{}", rep["steering"]);
    check_eight_streams(&rep, 2, true);
    // Every thread got a copy of every datagram and kept only its share.
    let per = rep["threads"].as_array().unwrap();
    let kept: u64 = per.iter().map(|t| u(t, "datagrams")).sum();
    for t in per {
        // (plus the other threads' end-of-stream messages, which are no datagrams of a ledger)
        assert!(u(t, "datagrams") + u(t, "not_steered_here") >= kept, "{t}");
    }
}
