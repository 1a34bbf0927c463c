//! Inputs a run could not use are refused before anything is allocated or sent (one line naming
//! the option, exit code 2, no backtrace); numbers read the same in every option; the examples
//! a user pastes send nothing off the host; the help lists every exit code.

use crate::common;

use common::*;
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run with a deadline: a refusal must come at once, not after allocating or sending.
fn run_within(args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUST_BACKTRACE", "1")
        .spawn()
        .expect("start wirespeed");
    let t0 = Instant::now();
    loop {
        if let Some(_status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            return (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after {limit:?}: a bad value must be refused at once");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lines of an error (a refusal is exactly one).
fn message_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().collect()
}

/// Exit code 2, one line naming `option`, no panic or backtrace, and no more than a few
/// seconds (a generous limit: a refusal takes milliseconds; allocating 128 GiB does not).
fn refused(args: &[&str], option: &str, also: &str) {
    let (code, stdout, stderr) = run_within(args, Duration::from_secs(20));
    assert_eq!(code, Some(2), "{args:?}: exit code; stderr:\n{stderr}");
    let lines = message_lines(&stderr);
    assert_eq!(lines.len(), 1, "{args:?}: one line expected:\n{stderr}");
    assert!(lines[0].contains(option), "{args:?}: the line must name {option}:\n{stderr}");
    assert!(lines[0].contains(also), "{args:?}: expected '{also}' in:\n{stderr}");
    for bad in ["panicked", "backtrace", "memory allocation", "RUST_BACKTRACE"] {
        assert!(!stderr.contains(bad), "{args:?}: {bad}:\n{stderr}");
    }
    assert!(stdout.trim().is_empty(), "{args:?}: nothing should have run:\n{stdout}");
}

#[test]
fn a_huge_window_is_refused_at_once_not_allocated() {
    refused(&["recv", "127.0.0.1:0", "--window", "1099511627776"], "--window", "16777216");
    refused(&["recv", "127.0.0.1:0", "--window", "1T"], "--window", "out of range");
    // record shares the receiver's options and bounds.
    let dir = TempDir::new("trust-inputs-window");
    refused(&["record", "127.0.0.1:0", "-o", dir.path(), "--window", "1099511627776"], "--window", "out of range");
}

#[test]
fn every_size_and_count_has_an_upper_bound() {
    let r = ["recv", "127.0.0.1:0"];
    let with = |base: &[&'static str], extra: &[&'static str]| -> Vec<&'static str> {
        base.iter().chain(extra).copied().collect()
    };
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (with(&r, &["--max-streams", "100000"]), "--max-streams", "out of range"),
        (with(&r, &["--max-streams", "8192", "--window", "16777216"]), "--max-streams", "ledger memory"),
        (with(&r, &["--batch", "1000000"]), "--batch", "out of range"),
        (with(&r, &["--batch", "0"]), "--batch", "out of range"),
        (with(&r, &["--rcvbuf", "1T"]), "--rcvbuf", "out of range"),
        (with(&r, &["--size", "70000"]), "--size", "out of range"),
        (with(&r, &["--gaps", "99999999"]), "--gaps", "out of range"),
        (with(&r, &["--seq-offset", "1G", "--size", "8800"]), "--seq-offset", "out of range"),
        (vec!["send", "127.0.0.1:9", "--streams", "100000", "--count", "1"], "--streams", "out of range"),
        (vec!["send", "127.0.0.1:9", "--burst", "1000000000", "--count", "1"], "--burst", "out of range"),
        (vec!["send", "127.0.0.1:9", "--size", "0", "--count", "1"], "--size", "out of range"),
        (vec!["demo", "--size", "1G"], "--size", "out of range"),
        (vec!["bench", "rates", "--rcvbuf", "4G"], "--rcvbuf", "out of range"),
        (vec!["bench", "sweep", "--rcvbuf", "1M,8G"], "--rcvbuf", "out of range"),
        (vec!["bench", "ttcp", "--buffers", "64K,8G"], "--buffers", "out of range"),
        (vec!["bench", "ttcp", "--writes", "1T"], "--writes", "out of range"),
        (vec!["ttcp", "-r", "-b", "8G"], "--sockbuf", "out of range"),
    ];
    for (args, option, also) in &cases {
        refused(args, option, also);
    }
}

#[test]
fn a_progress_interval_cannot_flood() {
    for v in ["0", "1ms", "9ms", "0.001"] {
        refused(&["recv", "127.0.0.1:0", "--interval", v], "--interval", "at least 10ms");
    }
}

#[test]
fn an_out_of_range_ttl_is_refused_not_ignored() {
    for v in ["300", "0", "256", "1e3"] {
        refused(&["send", "239.1.2.3:7148", "--count", "1", "--ttl", v], "--ttl", "");
    }
    // On a unicast target the multicast TTL would be ignored: refused too.
    refused(&["send", "127.0.0.1:9", "--count", "1", "--ttl", "5"], "--ttl", "not a multicast group");
    refused(&["recv", "127.0.0.1:0", "--iface", "127.0.0.1"], "--iface", "not one");
}

#[test]
fn a_format_key_given_twice_is_refused_by_name() {
    refused(&["send", "127.0.0.1:9", "--count", "1", "--format", "counter,size=8800,size=1024"], "--format", "'size'");
    refused(&["recv", "127.0.0.1:0", "--format", "mark5b,psn=1,halves=1,psn=0"], "--format", "'psn'");
    refused(&["recv", "127.0.0.1:0", "--format", "vdif,fps=32000,rate=2048M"], "--format", "one of them");
    let dir = TempDir::new("trust-inputs-fmt");
    refused(
        &["record", "127.0.0.1:0", "-o", dir.path(), "--format", "vdif,frame=8032,frame=1032"],
        "--format",
        "'frame'",
    );
}

#[test]
fn runs_that_would_do_nothing_are_refused() {
    let s = ["send", "127.0.0.1:9"];
    refused(&[&s[..], &["--duration", "0"]].concat(), "--duration", "no time");
    refused(&[&s[..], &["--duration", "0ms"]].concat(), "--duration", "no time");
    refused(&[&s[..], &["--count", "0"]].concat(), "--count", "nothing");
    refused(&[&s[..], &["--count", "10", "--skip-every", "1"]].concat(), "--skip-every", "every sequence number");
    refused(
        &[&s[..], &["--count", "10", "--skip", "0..4", "--skip", "5..9"]].concat(),
        "--skip",
        "nothing would be sent",
    );
    refused(&["recv", "127.0.0.1:0", "--count", "0"], "--count", "nothing");
    refused(&["recv", "127.0.0.1:0", "--duration", "0"], "--duration", "no time");
    refused(&["demo", "--duration", "0"], "--duration", "no time");
    refused(&["demo", "--skip-every", "1"], "--skip-every", "every sequence number");
}

#[test]
fn numbers_read_alike_in_every_option() {
    // Too large to hold: refused with one line, whatever the kind.
    let s = ["send", "127.0.0.1:9"];
    refused(&[&s[..], &["--count", "1", "--rate", "99999999999999999999999G"]].concat(), "--rate", "too large");
    refused(&[&s[..], &["--count", "99999999999999999999999G"]].concat(), "--count", "too large");
    refused(&[&s[..], &["--count", "18446744073709551616"]].concat(), "--count", "too large");
    refused(&[&s[..], &["--duration", "1e100"]].concat(), "--duration", "too long");
    refused(&["recv", "127.0.0.1:0", "--rcvbuf", "99999999999999999999999G"], "--rcvbuf", "too large");
    refused(&["bench", "rates", "--rates", "1e30"], "--rates", "too large");

    // Exponents are read everywhere: rate, count, size and duration.
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dest = sink.local_addr().unwrap().to_string();
    let out = run(&["send", &dest, "--rate", "1e6", "--count", "1e1", "--size", "1e3", "--max-lag", "5e1ms", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(u(&doc, "sent"), 10, "--count 1e1 is 10");
    let out = run(&["recv", "127.0.0.1:0", "--duration", "2e-1", "--rcvbuf", "1e6", "--window", "6.5536e4", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn top_level_help_lists_every_exit_code() {
    let out = run(&["--help"]);
    let text = String::from_utf8_lossy(&out.stdout).replace('\n', " ");
    let at = text.find("Exit codes:").expect("the help has an 'Exit codes:' list");
    let list = &text[at..];
    for (code, meaning) in
        [("0", "success"), ("1", "runtime failure"), ("2", "bad usage"), ("3", "loss"), ("4", "verify")]
    {
        let item = format!("{code} ");
        let i = list.find(&item).unwrap_or_else(|| panic!("exit code {code} missing from: {list}"));
        assert!(
            list[i..].split(',').next().unwrap_or("").contains(meaning),
            "exit code {code} should say '{meaning}': {list}"
        );
    }
}

/// Addresses a pasted example may send to without leaving the host.
fn is_loopback(host_port: &str) -> bool {
    let host = match host_port.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => host_port,
    };
    host == "localhost" || host == "::1" || host.starts_with("127.")
}

/// The destination an example line sends to, or None when it sends nothing or only inside
/// partitions wirespeed makes itself (bench, demo, ping without a target).
fn destination(line: &str) -> Option<String> {
    // Comments: `# ...` in the README, `  (...)` in the help texts.
    let command = line.split('#').next().unwrap_or("").split("  (").next().unwrap_or("");
    let words: Vec<&str> = command.split_whitespace().collect();
    let pos = words.iter().position(|w| *w == "wirespeed" || w.ends_with("/wirespeed"))?;
    let rest = &words[pos + 1..];
    match rest.first().copied() {
        // The target comes first in every example; without one the line only names options.
        // A shell-quoted target (`'[::1]:7148'`, quoted so the brackets are not a glob) is the
        // address inside the quotes.
        Some("send") => rest.get(1).filter(|w| !w.starts_with('-')).map(|s| s.trim_matches(['\'', '"']).to_string()),
        Some("ping") => {
            // Options with values come after the target in these examples; the first bare word
            // after `ping` that looks like HOST:PORT is the target.
            rest[1..]
                .iter()
                .find(|w| !w.starts_with('-') && w.contains(':'))
                .map(|s| s.trim_matches(['\'', '"']).to_string())
        }
        Some("ttcp") if rest.contains(&"-t") => rest.last().map(|s| s.trim_matches(['\'', '"']).to_string()),
        _ => None,
    }
}

/// Every example that sends, in `text`, is on loopback or run inside partitions.
pub(crate) fn check_examples(source: &str, lines: impl Iterator<Item = String>) -> usize {
    let mut checked = 0;
    for line in lines {
        let Some(dest) = destination(&line) else { continue };
        checked += 1;
        let in_partition = line.contains("partition exec");
        assert!(
            is_loopback(&dest) || in_partition,
            "{source}: this example sends to {dest} from the host, which is not safe to paste \
             (use loopback, or run it inside partitions):\n{line}"
        );
    }
    checked
}

/// The commands of a Markdown text: its code blocks' lines, and the inline code of its prose
/// (`wirespeed send ...`).
pub(crate) fn markdown_code(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut code = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            code.push(line.to_string());
        } else {
            for piece in line.split('`').skip(1).step_by(2) {
                code.push(piece.to_string());
            }
        }
    }
    code
}

#[test]
fn readme_examples_that_send_stay_on_the_host() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let n = check_examples("README.md", markdown_code(&readme).into_iter());
    assert!(n >= 5, "expected the README's send examples to be found (found {n})");
}

#[test]
fn help_examples_that_send_stay_on_the_host() {
    let mut n = 0;
    for args in [
        &["--help"][..],
        &["send", "--help"],
        &["recv", "--help"],
        &["record", "--help"],
        &["ping", "--help"],
        &["ttcp", "--help"],
        &["partition", "--help"],
        &["bench", "max", "--help"],
        &["bench", "rates", "--help"],
        &["bench", "sweep", "--help"],
        &["bench", "soak", "--help"],
        &["bench", "compare", "--help"],
        &["bench", "ttcp", "--help"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // An example is a line whose command starts with `wirespeed` (after "Try:" or spaces).
        let lines = text
            .lines()
            .map(|l| l.trim().trim_start_matches("Try:").trim().to_string())
            .filter(|l| l.starts_with("wirespeed ") || l.starts_with("sudo wirespeed "));
        n += check_examples(&format!("wirespeed {}", args.join(" ")), lines);
    }
    assert!(n >= 4, "expected the help texts' send examples to be found (found {n})");
}

#[test]
fn latency_record_and_partition_options_are_bounded() {
    let _turn = traffic();
    let dir = TempDir::new("trust-inputs2-bounds");
    let d = dir.path();
    let rec = |extra: &[&'static str]| -> Vec<String> {
        ["record", "127.0.0.1:0", "-o", d]
            .iter()
            .map(|s| s.to_string())
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };
    let mut cases: Vec<(Vec<String>, &str, &str)> = Vec::new();
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for (args, option, also) in [
        (own(&["ping", "127.0.0.1:9", "--linger", "1e6"]), "--linger", "out of range"),
        (own(&["ping", "127.0.0.1:9", "--pause", "1e6"]), "--pause", "out of range"),
        (own(&["ping", "127.0.0.1:9", "--interval", "1e9"]), "--interval", ""),
        (own(&["ping", "127.0.0.1:9", "--size", "1e6"]), "--size", "24..65507"),
        (own(&["ping", "127.0.0.1:9", "--size", "23"]), "--size", "24..65507"),
        (own(&["reflect", "127.0.0.1:0", "--batch", "0"]), "--batch", "out of range"),
        (own(&["reflect", "127.0.0.1:0", "--batch", "1e6"]), "--batch", "out of range"),
        (own(&["reflect", "127.0.0.1:0", "--client-burst", "0"]), "--client-burst", ""),
        (own(&["reflect", "127.0.0.1:0", "--client-burst", "1e30"]), "--client-burst", ""),
        (own(&["reflect", "127.0.0.1:0", "--max-pps-per-client", "1e30"]), "--max-pps-per-client", ""),
        (rec(&["--buffer", "1048576G"]), "--buffer", "out of range"),
        (rec(&["--buffer", "0"]), "--buffer", "out of range"),
        (rec(&["--block", "0"]), "--block", "multiple of 4 KiB"),
        (rec(&["--block", "5000"]), "--block", "4 KiB"),
        (rec(&["--block", "1T"]), "--block", "out of range"),
        (rec(&["--file-size", "1048576G"]), "--file-size", "out of range"),
        (rec(&["--flush", "0"]), "--flush", "out of range"),
        (rec(&["--flush", "1e6"]), "--flush", "out of range"),
        (own(&["disk-test", d, "--size", "1048576G"]), "--size", "out of range"),
        (own(&["disk-test", d, "--size", "0"]), "--size", "out of range"),
        (own(&["disk-test", d, "--block", "0"]), "--block", "multiple of 4 KiB"),
        (own(&["verify", d, "--window", "1099511627776"]), "--window", "out of range"),
        (own(&["partition", "exec", "0", "--", "true"]), "<ID>", "1..64"),
        (own(&["partition", "deactivate", "1e9"]), "<ID>", "1..64"),
        (own(&["partition", "create", "-p", "65", "-c", "0"]), "--partition", "1..64"),
        (own(&["partition", "create", "-p", "1", "-c", "0", "--mtu", "1e6"]), "--mtu", "68..65535"),
        (own(&["partition", "create", "-p", "1", "-c", "0", "--mem", "1048576G"]), "--mem", "out of range"),
        (own(&["partition", "create", "-p", "1", "-c", "0", "--hb-misses", "0"]), "--hb-misses", ""),
    ] {
        cases.push((args, option, also));
    }
    for (args, option, also) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&args, option, also);
    }
}

#[test]
fn reflect_that_would_answer_nothing_is_refused() {
    refused(&["reflect", "127.0.0.1:0", "--count", "0"], "--count", "nothing");
    refused(&["reflect", "127.0.0.1:0", "--duration", "0"], "--duration", "no time");
    refused(&["ping", "127.0.0.1:9", "--count", "0"], "--count", "nothing");
    refused(&["ping", "127.0.0.1:9", "--interval", "0"], "--interval", "at least 10ms");
}

#[test]
fn ping_size_reads_numbers_like_every_size() {
    let _turn = traffic();
    // 1e3 and 1K are sizes as in send's --size: the probe that leaves has exactly that length.
    for (v, len) in [("1e3", 1000usize), ("1K", 1024)] {
        let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
        sink.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let dest = sink.local_addr().unwrap().to_string();
        let out = run(&["ping", &dest, "--size", v, "--count", "1", "--linger", "0", "--no-files"]);
        assert_eq!(out.status.code(), Some(0), "--size {v}: {}", String::from_utf8_lossy(&out.stderr));
        let mut buf = [0u8; 4096];
        let (n, _) = sink.recv_from(&mut buf).expect("the probe");
        assert_eq!(n, len, "--size {v}");
    }
}
