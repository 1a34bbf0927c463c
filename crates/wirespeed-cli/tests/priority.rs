//! `--priority N`, `--realtime[=PRIO]` and `--lock-memory` (issue 17, part 3): bad values are
//! usage errors (exit 2), a missing privilege is refused before anything runs (one line, exit
//! 1), and as root a receiver at nice -5 under SCHED_FIFO counts every datagram and says so.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// One line on stderr containing `needle`, exit code `code`, no panic.
fn refused(out: std::process::Output, args: &[&str], code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: stderr {err}");
    assert!(err.contains(needle), "{args:?}: expected '{needle}' in:\n{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line expected:\n{err}");
    assert!(!err.contains("panicked") && out.stdout.is_empty(), "{err}");
}

#[test]
fn values_out_of_range_are_usage_errors() {
    expect_fail(&["recv", "0", "--priority", "30"], 2, "give -20..19");
    expect_fail(&["recv", "0", "--priority", "-21"], 2, "give -20..19");
    expect_fail(&["send", "127.0.0.1:9", "--priority", "x"], 2, "not a nice value");
    expect_fail(&["recv", "0", "--realtime=0"], 2, "1..99");
    expect_fail(&["record", "0", "--sink", "null", "--realtime=100"], 2, "1..99");
}

#[test]
fn realtime_with_busy_poll_is_refused() {
    expect_fail(&["recv", "127.0.0.1:0", "--realtime", "--busy-poll", "--duration", "1"], 2, "--busy-poll");
}

#[test]
fn realtime_without_cap_sys_nice_is_refused() {
    for args in [
        &["recv", "127.0.0.1:0", "--realtime", "--duration", "1"][..],
        &["record", "127.0.0.1:0", "--sink", "null", "--realtime=50", "--duration", "1"],
        &["send", "127.0.0.1:9", "--realtime", "--count", "1"],
    ] {
        refused(unprivileged(args), args, 1, "--realtime needs CAP_SYS_NICE");
    }
}

#[test]
fn realtime_is_refused_with_the_capability_dropped() {
    if !is_root() {
        return;
    }
    // Root, but with CAP_SYS_NICE out of the bounding set: the capability, not the uid, decides.
    let args = ["recv", "127.0.0.1:0", "--realtime", "--duration", "1"];
    let out = run_prefixed(&["setpriv", "--inh-caps=-all", "--bounding-set=-sys_nice"], &args);
    refused(out, &args, 1, "--realtime needs CAP_SYS_NICE");
}

#[test]
fn a_negative_nice_value_without_the_privilege_is_refused() {
    let args = ["recv", "127.0.0.1:0", "--priority", "-5", "--duration", "1"];
    refused(unprivileged(&args), &args, 1, "--priority -5 needs CAP_SYS_NICE (root)");
    let args = ["send", "127.0.0.1:9", "--priority=-20", "--count", "1"];
    refused(unprivileged(&args), &args, 1, "--priority -20 needs CAP_SYS_NICE (root)");
}

#[test]
fn lock_memory_beyond_the_limit_is_refused() {
    // nobody's RLIMIT_MEMLOCK is the distribution's default (8 MiB or 64 KiB): far too small.
    let args = ["recv", "127.0.0.1:0", "--lock-memory", "--duration", "1"];
    let out = if is_root() {
        run_prefixed(
            &["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "prlimit", "--memlock=65536"],
            &args,
        )
    } else {
        run_prefixed(&["prlimit", "--memlock=65536"], &args)
    };
    refused(out, &args, 1, "RLIMIT_MEMLOCK allows");
}

#[test]
fn a_higher_nice_value_needs_nothing_and_is_reported() {
    let _t = traffic();
    let r = spawn_cmd_with(&[], "record", "127.0.0.1:0", &["--sink", "null", "--once", "--json", "--priority", "7"]);
    send_to_port(r.port, &["--count", "2000", "--size", "1024", "--rate", "50M", "--priority=3", "--json"]);
    let (code, out, err) = finish(r, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    let doc = json(&out);
    assert_eq!(doc["schema"], "wirespeed.record/1");
    assert_eq!(doc["priority"]["nice"], 7, "{}", doc["priority"]);
    assert_eq!(doc["priority"]["policy"], "SCHED_OTHER");
    assert_eq!(doc["priority"]["memory_locked"], false);
    assert_eq!(u(&doc["capture"]["total"], "received"), 2000);
}

/// The policy and nice value of the receiver's first capture thread, from /proc (fields 19
/// and 41 of its stat: nice, policy), once it exists.
fn capture_thread(pid: u32) -> Option<(i64, u64, u64)> {
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if !comm.starts_with("ws-capture") {
            continue;
        }
        let stat = std::fs::read_to_string(p.join("stat")).ok()?;
        let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // After the name, field 3 is f[0]: nice (19) is f[16], rt_priority (40) f[37], policy (41) f[38].
        return Some((f[16].parse().ok()?, f[37].parse().ok()?, f[38].parse().ok()?));
    }
    None
}

#[test]
#[ignore = "needs root"]
fn as_root_a_realtime_receiver_counts_every_datagram_and_says_how_it_ran() {
    assert!(is_root(), "run as root: cargo test --release -p wirespeed-cli --test priority -- --include-ignored");
    let _t = traffic();
    let r = spawn_recv(&["--once", "--json", "--priority", "-5", "--realtime", "--lock-memory", "--duration", "60"]);
    // The capture thread takes SCHED_FIFO itself when it starts: wait until it has (no timing
    // is asserted, the wait only bounds a hang).
    let pid = r.child.id();
    let t = Instant::now();
    let seen = loop {
        match capture_thread(pid) {
            Some(s) if s.2 == 1 => break s,
            _ if t.elapsed() > Duration::from_secs(20) => {
                panic!("no SCHED_FIFO capture thread: {:?}", capture_thread(pid))
            }
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    assert_eq!(seen, (-5, 10, 1), "capture thread (nice, rt priority, policy)");
    send_to_port(r.port, &["--count", "5000", "--size", "1024", "--rate", "100M"]);
    let (code, out, err) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    let doc = json(&out);
    assert_eq!(doc["schema"], "wirespeed.recv/1");
    assert_eq!(u(&doc["total"], "received"), 5000);
    assert_eq!(u(&doc["total"], "lost"), 0);
    assert_eq!(doc["stopped_by"], "end of stream");
    let p = &doc["priority"];
    assert_eq!(p["nice"], -5, "{p}");
    assert_eq!(p["policy"], "SCHED_FIFO");
    assert_eq!(p["rt_priority"], 10);
    assert_eq!(p["memory_locked"], true);
    assert_eq!(p["rt_time_limit_s"], serde_json::json!([2.0, 3.0]));
}

#[test]
#[ignore = "needs root"]
fn as_root_a_realtime_sender_says_how_it_ran() {
    assert!(is_root(), "run as root");
    let _t = traffic();
    let r = spawn_recv(&["--once", "--json", "--duration", "60"]);
    let target = format!("127.0.0.1:{}", r.port);
    let args = ["send", &target, "--count", "3000", "--size", "1024", "--rate", "100M", "--realtime=20", "--json"];
    let out = run(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(doc["schema"], "wirespeed.send/1");
    assert_eq!(doc["priority"]["policy"], "SCHED_FIFO");
    assert_eq!(doc["priority"]["rt_priority"], 20);
    let (code, rout, err) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(u(&json(&rout)["total"], "received"), 3000);
}

#[test]
#[ignore = "needs root"]
fn as_root_the_realtime_guard_stops_a_thread_that_never_blocks() {
    assert!(is_root(), "run as root");
    let _t = traffic();
    // A sender flat out to a port nobody listens on never sleeps: at SCHED_FIFO it reaches
    // RLIMIT_RTTIME's soft limit (2 s of CPU without blocking) long before its 60 s, and the
    // SIGXCPU ends the run with its report and one line, not a core dump.
    let args = ["send", "127.0.0.1:9", "--rate", "max", "--size", "1024", "--duration", "60", "--realtime", "--json"];
    let out = run(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("RLIMIT_RTTIME") && err.trim_end().lines().count() == 1, "{err}");
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert!(doc["elapsed_s"].as_f64().is_some_and(|s| s < 60.0), "{}", doc["elapsed_s"]);
}
