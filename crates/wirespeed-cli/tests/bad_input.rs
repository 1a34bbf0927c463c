//! Bad input gets one clear line, the right exit code (2 usage, 1 runtime) and never a panic.

use crate::common;

use common::*;
use std::net::UdpSocket;

fn expect_fail(args: &[&str], code: i32, needle: &str) {
    let out = run(args);
    check(out, args, code, needle);
}

fn check(out: std::process::Output, args: &[&str], code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?} exit code; stderr: {err}");
    assert!(err.contains(needle), "{args:?}: expected '{needle}' in stderr:\n{err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{args:?} panicked:\n{err}");
}

#[test]
fn unparsable_rate() {
    expect_fail(&["send", "127.0.0.1:9", "--rate", "fast", "--count", "1"], 2, "cannot read rate 'fast'");
    expect_fail(&["send", "127.0.0.1:9", "--rate", "0", "--count", "1"], 2, "greater than zero");
}

#[test]
fn payload_too_large_or_misshapen() {
    expect_fail(&["send", "127.0.0.1:9", "--size", "70000", "--count", "1"], 2, "does not fit a UDP datagram");
    expect_fail(&["send", "127.0.0.1:9", "--size", "1081", "--count", "1"], 2, "multiple of 8");
    expect_fail(&["send", "127.0.0.1:9", "--size", "lots", "--count", "1"], 2, "cannot read size");
}

#[test]
fn bad_addresses() {
    expect_fail(&["send", "no-such-host.invalid:9", "--count", "1"], 2, "cannot resolve host 'no-such-host.invalid'");
    expect_fail(&["send", "127.0.0.1", "--count", "1"], 2, "has no port");
    expect_fail(&["send", "127.0.0.1:http", "--count", "1"], 2, "is not a port number");
    expect_fail(&["send", "0.0.0.0:9", "--count", "1"], 2, "is not a destination");
    expect_fail(&["recv", "not-an-address"], 2, "cannot read listen address");
    expect_fail(&["recv", "192.0.2.77:7000", "--duration", "1"], 2, "not assigned to any interface");
}

#[test]
fn bad_options() {
    expect_fail(&["send", "127.0.0.1:9", "--skip", "9..3", "--count", "1"], 2, "smaller number first");
    // A SPEAD layout that describes another sender's stream (a shortened first packet) is for
    // receivers; raw files cannot hold its datagrams of differing lengths.
    let spead2 = "spead,heap=65542,payload=8208,lead=8192,addr=40,fill=any";
    expect_fail(&["send", "127.0.0.1:9", "--format", spead2, "--count", "1"], 2, "leave lead= out");
    expect_fail(&["record", "7000", "--format", spead2, "-o", "/tmp"], 2, "record with --file-format pcap");
    expect_fail(&["send", "127.0.0.1:9", "--skip-every", "0", "--count", "1"], 2, "give at least 2");
    expect_fail(&["send", "127.0.0.1:9", "--streams", "0", "--count", "1"], 2, "give 1..1024");
    expect_fail(&["recv", "7000", "--window", "1000"], 2, "power of two");
    expect_fail(&["recv", "7000", "--duration", "soon"], 2, "cannot read duration");
    expect_fail(&["recv", "7000", "--once", "--once-quiet", "5ms"], 2, "out of range: give 10ms to 1h");
    expect_fail(&["record", "7000", "-o", "/tmp", "--once-quiet", "1s"], 2, "--once");
    expect_fail(&["send", "127.0.0.1:9", "--count", "1", "--cpu", "4096"], 2, "cannot pin sender thread to CPU 4096");
}

#[test]
fn port_already_in_use() {
    let holder = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap().to_string();
    expect_fail(&["recv", &addr, "--duration", "1"], 1, "is already in use");
}

#[test]
fn missing_privilege_for_a_low_port() {
    let args = ["recv", "127.0.0.1:80", "--duration", "1"];
    check(unprivileged(&args), &args, 1, "needs root or CAP_NET_BIND_SERVICE");
}

#[test]
fn clamped_receive_buffer_names_the_sysctl() {
    let args = ["recv", "127.0.0.1:0", "--rcvbuf", "1G", "--duration", "0.2"];
    let out = unprivileged(&args);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sysctl -w net.core.rmem_max=1073741824"), "{text}");
    assert!(text.contains("nothing arrived"), "{text}");
}

#[test]
fn help_teaches() {
    let out = run(&["send", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["--rate", "500kpps", "--gso", "--skip-every", "--streams"] {
        assert!(text.contains(needle), "send --help lacks {needle}");
    }
    let out = run(&["recv", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["--rcvbuf", "--gro", "--expect-zero-loss", "--interval", "multicast"] {
        assert!(text.contains(needle), "recv --help lacks {needle}");
    }
    expect_fail(&["frobnicate"], 2, "unrecognized subcommand");
    expect_fail(&["probe", "nosuch"], 2, "cannot read listen address");
    expect_fail(&["probe", "7148", "--for", "0"], 2, "no time at all");
}
