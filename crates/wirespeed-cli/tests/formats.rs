//! Every instrument format end to end: sent, received with an exact ledger, recorded to a raw
//! file (as the instrument's own file format) and a pcap, and verified.

mod common;

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

#[test]
fn presets_send_what_they_say() {
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
