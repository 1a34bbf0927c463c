//! Every instrument format end to end: sent, received with an exact ledger, recorded to a raw
//! file (as the instrument's own file format) and a pcap, and verified.

use crate::common;

use common::*;
use std::time::Duration;

/// (format spec, datagrams per file record)
const FORMATS: &[(&str, u64)] = &[
    ("counter,size=1024", 1),
    ("seqfield,offset=8,width=4,order=le,size=512,fill=counter", 1),
    ("vdif,frame=1032,threads=2,fps=4000", 1),
    ("vtp,psn=64,frame=1032,threads=1,fps=4000", 1),
    ("mark5b,fps=2000,fill=tvg", 1),
    ("mark5b,fps=2000,halves=1,psn=1,fill=tvg", 2),
    ("mark5b,fps=2000,halves=1,psn=0,fill=counter", 2),
    ("spead,heap=8192,payload=1024,first=7,step=2,fill=counter", 1),
];

#[test]
fn every_format_is_sent_received_recorded_and_verified_exactly() {
    let _turn = traffic();
    for &(spec, parts) in FORMATS {
        for file_format in ["raw", "pcap"] {
            let d = TempDir::new(&format!("fmt-{}-{file_format}", spec.split(',').next().unwrap()));
            let r = spawn_cmd_with(
                &[],
                "record",
                "127.0.0.1:0",
                &[
                    "--format",
                    spec,
                    "--file-format",
                    file_format,
                    "-o",
                    d.path(),
                    "--once",
                    "--json",
                    "--buffer",
                    "32M",
                    "--block",
                    "1M",
                    "--duration",
                    "60",
                ],
            );
            let streams = if spec.contains("threads=2") { "2" } else { "1" };
            // Whole records left out (an even start for halves), so the file is exact too.
            let target = format!("127.0.0.1:{}", r.port);
            let out = run(&[
                "send",
                &target,
                "--format",
                spec,
                "--streams",
                streams,
                "--start-seq",
                "0",
                "--count",
                "3000",
                "--rate",
                "30kpps",
                "--skip",
                "100..101",
                "--skip",
                "1000..1009",
            ]);
            assert!(out.status.success(), "{spec}: {}", String::from_utf8_lossy(&out.stderr));
            let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
            assert_eq!(code, Some(0), "{spec} {file_format}: {stderr}");
            let rep = json(&stdout);
            let cap = &rep["capture"];
            let nstreams: u64 = streams.parse().unwrap();
            assert_eq!(u(&cap["total"], "invalid"), 0, "{spec}");
            let (received, lost) = (u(&cap["total"], "received"), u(&cap["total"], "lost"));
            assert_eq!(received + lost, 3000 * nstreams, "every number received or lost: {spec} {file_format}");
            // Exact when the kernel dropped nothing (an idle host); on a busy one the loss beyond
            // the injected must be the kernel's.
            let drops = recv_kernel_drops(cap);
            assert!((12 * nstreams..=12 * nstreams + drops).contains(&lost), "{spec} {file_format}: {stdout}");
            for s in cap["streams"].as_array().unwrap() {
                let gaps = gap_list(s);
                if drops == 0 {
                    assert_eq!(gaps, vec![(100, 101), (1000, 1009)], "{spec}");
                } else {
                    let has = |n: u64| gaps.iter().any(|&(a, b)| (a..=b).contains(&n));
                    assert!((100..=101).chain(1000..=1009).all(has), "{spec}: {gaps:?}");
                }
            }
            let out = run(&["verify", d.path(), "--json"]);
            let v = json(&String::from_utf8_lossy(&out.stdout));
            assert_eq!(out.status.code(), Some(0), "{spec} {file_format}: {v}");
            let per = if file_format == "raw" { parts } else { 1 };
            if drops == 0 {
                assert_eq!(u(&v["total"], "received"), (3000 - 12) * nstreams / per, "{spec} {file_format}");
                assert_eq!(u(&v["total"], "lost"), 12 * nstreams / per, "{spec} {file_format}");
            }
        }
    }
}

/// `--format vdif` alone learns the layout from the stream. A stream too short to show its
/// frame rate (wirespeed's own VDIF preset, 2,000 frames in 62 ms, then its end message) is
/// counted with the default rate, said to be assumed, not seen.
#[test]
fn a_bare_format_name_learns_the_layout_and_says_what_it_assumed() {
    let _t = traffic();
    let r = spawn_recv(&["--format", "vdif", "--once", "--json", "--duration", "60"]);
    let target = format!("127.0.0.1:{}", r.port);
    let out = run(&["send", &target, "--format", "vdif", "--count", "2000", "--skip-every", "100"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    let learned = &rep["learned"];
    assert!(
        learned["spec"]
            .as_str()
            .unwrap()
            .starts_with("vdif,frame=8032,threads=1,station=WS,bits=2,chans=4,complex=0,fps=32000,"),
        "{learned}"
    );
    assert!(
        learned["spec"].as_str().unwrap().ends_with("fill=counter"),
        "wirespeed's own fill is recognised: {learned}"
    );
    assert!(learned["assumed"][0].as_str().unwrap().starts_with("fps=32000 (the default)"), "{learned}");
    assert!(stderr.contains("assumed, not seen: fps=32000"), "{stderr}");
    let (received, lost) = (u(&rep["total"], "received"), u(&rep["total"], "lost"));
    assert_eq!((received + lost, u(&rep["total"], "invalid")), (2000, 0), "{stdout}");
    assert!((20..=20 + recv_kernel_drops(&rep)).contains(&lost), "every 100th left out: {stdout}");
    // Nothing that matches: a counter stream into `--format spead` is said not to be SPEAD.
    let r = spawn_recv(&["--format", "spead", "--once", "--json", "--duration", "60"]);
    let target = format!("127.0.0.1:{}", r.port);
    let out = run(&["send", &target, "--format", "counter,size=1024", "--count", "300"]);
    assert!(out.status.success());
    let (_, stdout, _) = finish(r, Duration::from_secs(60));
    let rep = json(&stdout);
    assert!(rep["learned"]["assumed"][0].as_str().unwrap().contains("is unknown, not spead"), "{}", rep["learned"]);
    assert!(rep["diagnosis"][0].as_str().unwrap().starts_with("the stream does not match --format"), "{rep}");
}

#[test]
fn presets_send_what_they_say() {
    let _turn = traffic();
    let out = run(&["formats"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["counter", "vdif", "vtp", "mark5b", "spead", "seqfield", "mark5c", "casper", "seq64"] {
        assert!(text.contains(name), "formats lists {name}: {text}");
    }
    // Seed 002: Mark5B at 2048 Mb/s is 25600 frames/s of 10016 bytes.
    let r = spawn_recv(&["--format", "mark5b", "--once", "--json", "--duration", "30"]);
    let target = format!("127.0.0.1:{}", r.port);
    let out = run(&["send", &target, "--preset", "mark5b", "--count", "2000", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sent = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(u(&sent, "payload_bytes"), 10016, "{sent}");
    assert_eq!(sent["requested_pps"].as_f64(), Some(25600.0), "2048 Mb/s / 80000 bits per frame");
    let (code, stdout, stderr) = finish(r, Duration::from_secs(30));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    // 256 MB/s for 2,000 frames: a busy host's kernel may drop some, and then the ledger says so.
    let (received, lost) = (u(&rep["total"], "received"), u(&rep["total"], "lost"));
    assert_eq!(received + lost, 2000, "{rep}");
    assert!(lost <= recv_kernel_drops(&rep), "loss the kernel did not drop: {rep}");
    // Bad format input: one line, exit 2.
    for (args, says) in [
        (vec!["recv", "0", "--format", "vdif,frame=13"], "multiple of 8"),
        (vec!["recv", "0", "--format", "nosuch"], "unknown format"),
        (vec!["send", "127.0.0.1:9", "--preset", "nosuch"], "unknown preset"),
        (vec!["send", "127.0.0.1:9", "--format", "mark5b", "--size", "8800"], "leave --size out"),
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A stream laid out otherwise than `--format` says is named as not matching, with its first
/// differing field; no line speaks of loss, and `--expect-zero-loss` fails (before, both runs
/// ended in "=> no loss: every sequence number was received" and exit 0).
#[test]
fn a_stream_that_does_not_match_the_format_is_named_and_proves_nothing() {
    let cases = [
        // An instrument's VDIF (2 threads, 1 channel, station Xx, 1000 frames/s) against a
        // given key (`--format vdif` alone would learn the layout instead).
        (
            "vdif,threads=2,station=Xx,chans=1,fps=1000",
            "vdif,chans=4",
            "2",
            "channels: the stream has 1, --format has chans=4",
        ),
        // SPEAD-64-40 against the default SPEAD-64-48.
        (
            "spead,addr=40,heap=8192,payload=1024",
            "spead,heap=8192,payload=1024",
            "1",
            "heap address bits (SPEAD-64-N): the stream has 40, --format has addr=48",
        ),
    ];
    let _t = traffic();
    for (sent, told, streams, why) in cases {
        let r = spawn_recv(&[
            "--format",
            told,
            "--once",
            "--once-quiet",
            "300ms",
            "--duration",
            "30",
            "--expect-zero-loss",
        ]);
        let target = format!("127.0.0.1:{}", r.port);
        let out = run(&["send", &target, "--format", sent, "--streams", streams, "--count", "500", "--rate", "5kpps"]);
        assert!(out.status.success(), "{sent}: {}", String::from_utf8_lossy(&out.stderr));
        let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
        assert_eq!(code, Some(3), "{sent} as {told}: exit 3 (zero loss not proven)\n{stdout}\n{stderr}");
        assert!(stdout.contains("the stream does not match --format"), "{sent}: {stdout}");
        assert!(stdout.contains(why), "{sent}: the first difference named: {stdout}");
        assert!(!stdout.contains("no loss"), "{sent}: no verdict of no loss: {stdout}");
        assert!(!stdout.contains("wirespeed doctor"), "{sent}: no doctor hint about loss: {stdout}");
        assert!(stderr.contains("zero loss is not proven: the stream does not match"), "{sent}: {stderr}");
    }
    // The JSON says the same, for scripts.
    let r = spawn_recv(&["--format", "vdif,chans=4", "--once", "--once-quiet", "300ms", "--duration", "30", "--json"]);
    let target = format!("127.0.0.1:{}", r.port);
    let out = run(&["send", &target, "--format", cases[0].0, "--streams", "2", "--count", "200", "--rate", "5kpps"]);
    assert!(out.status.success());
    let (code, stdout, _) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "without --expect-zero-loss the run itself succeeds");
    let rep = json(&stdout);
    assert_eq!(rep["first_invalid"]["why"], cases[0].3);
    assert_eq!(rep["first_invalid"]["reason"], "header");
    assert_eq!(u(&rep["total"], "received"), 0);
    assert!(rep["diagnosis"][0].as_str().unwrap().starts_with("the stream does not match --format vdif/8032"), "{rep}");
}

/// A few strays among a matching stream do not make it a mismatch: the ledger stays exact, the
/// verdict names the refused datagrams and the first one's reason, and zero loss holds.
#[test]
fn a_few_refused_datagrams_beside_a_matching_stream_are_named_not_blamed() {
    let _t = traffic();
    let r = spawn_recv(&["--format", "counter,size=1024", "--once", "--duration", "30", "--expect-zero-loss"]);
    let target = format!("127.0.0.1:{}", r.port);
    let junk = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..3 {
        junk.send_to(b"not a counter", &target).unwrap();
    }
    let out = run(&["send", &target, "--format", "counter,size=1024", "--count", "3000", "--rate", "20kpps"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("3 datagram(s) were refused by the format and are in no sequence (the first, from 127.0.0.1:"),
        "{stdout}"
    );
    assert!(stdout.contains("datagram length (bytes): the stream has 13, the format expects 1024"), "{stdout}");
    assert!(!stdout.contains("does not match"), "{stdout}");
}

/// The same for `record` and `verify`: a recorder fed a stream of another layout says it does not
/// match and fails `--expect-zero-loss`; verify then says what the datagrams left out were,
/// and cannot show zero loss.
#[test]
fn a_recording_of_a_stream_that_does_not_match_says_so_in_record_and_verify() {
    let _t = traffic();
    let d = TempDir::new("mismatch-rec");
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &[
            "--format",
            "vdif,chans=4",
            "-o",
            d.path(),
            "--once",
            "--once-quiet",
            "300ms",
            "--duration",
            "30",
            "--buffer",
            "32M",
            "--expect-zero-loss",
        ],
    );
    let to = format!("127.0.0.1:{}", r.port);
    let out = run(&["send", &to, "--format", "vdif,chans=1,fps=1000", "--count", "300", "--rate", "3kpps"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("channels: the stream has 1, --format has chans=4"), "{stdout}");
    let out = run(&["verify", d.path()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("300 datagrams were received while this file was filled but left out of it: duplicates, and datagrams the format refused"),
        "{text}"
    );
    let out = run(&["verify", d.path(), "--expect-zero-loss"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A recorder whose stream changed layout near the end (under 1 % of the datagrams) does not
/// pass `--expect-zero-loss`: what followed the change is in no ledger, however little.
#[test]
fn a_recorder_that_saw_the_layout_change_late_does_not_claim_zero_loss() {
    let _t = traffic();
    let dir = TempDir::new("late-change");
    let r = spawn_cmd_with(
        &[],
        "record",
        "127.0.0.1:0",
        &[
            "--format",
            "vdif",
            "-o",
            dir.path(),
            "--file-format",
            "pcap",
            "--buffer",
            "64M",
            "--rcvbuf",
            "64M",
            "--count",
            "6050",
            "--duration",
            "60",
            "--expect-zero-loss",
            "--json",
        ],
    );
    let target = format!("127.0.0.1:{}", r.port);
    for (f, n) in [("vdif,frame=1032,fps=1000", "6000"), ("vdif,frame=1032,chans=1,fps=1000", "50")] {
        let out = run(&["send", &target, "--format", f, "--count", n, "--rate", "50kpps"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    let rep = json(&stdout);
    let cap = &rep["capture"];
    assert_eq!(cap["layout_changes"][0]["followed"], false, "{stdout}");
    assert!(cap["layout_changes"][0]["spec"].as_str().unwrap().contains("chans=1"), "{stdout}");
    assert_eq!(u(&cap["total"], "invalid"), 50, "{stdout}");
    assert_eq!(code, Some(3), "zero loss is not proven: {stderr}");
    assert!(stderr.contains("the stream changed layout"), "{stderr}");
}
