//! The proof cannot be fooled (issue 13): end-of-stream messages from strangers settle
//! nothing, truncated datagrams invent no loss. Each test drives the real binary with datagrams
//! crafted by a small UDP sender in the test, in a fixed order, and asserts exact counts.

use crate::common;

use common::{finish, json, spawn_cmd_with, spawn_recv, traffic, u, Receiver};
use serde_json::Value;
use std::net::UdpSocket;
use std::time::Duration;

/// Counter datagram `seq` of `len` bytes (CASPER counter, big-endian, W = len / 8 words).
fn counter(seq: u64, len: usize) -> Vec<u8> {
    let w = (len / 8) as u64;
    (0..w).flat_map(|i| (seq * w + i).to_be_bytes()).collect()
}

/// What a one-stream wirespeed sender says at the end of `first..=last`, everything sent.
use common::end_message as end;

use common::sender_to as socket;

fn send_all(s: &UdpSocket, datagrams: impl IntoIterator<Item = Vec<u8>>) {
    for d in datagrams {
        s.send(&d).expect("send to the receiver");
    }
}

/// The receiver's JSON report once it stopped by itself (exit code, report).
fn done(r: Receiver) -> (Option<i32>, Value, String) {
    let (code, out, err) = finish(r, Duration::from_secs(30));
    (code, json(&out), err)
}

/// The exact repro of the issue, made deterministic: 200 datagrams from the sender, then a
/// valid-looking end-of-stream from another port that sent no data, then 100 more datagrams
/// and the sender's own end. The stranger's message must settle nothing, open no ledger slot
/// and not end the run.
#[test]
fn forged_end_of_stream_from_another_port_settles_nothing() {
    let _t = traffic();
    let r = spawn_recv(&["--once", "--json"]);
    let data = socket(r.port);
    let stranger = socket(r.port);
    send_all(&data, (0..200).map(|s| counter(s, 64)));
    stranger.send(&end(0xbad, 0, 199)).unwrap();
    send_all(&data, (200..300).map(|s| counter(s, 64)));
    data.send(&end(0x600d, 0, 299)).unwrap();
    let (code, rep, err) = done(r);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rep["stopped_by"], "end of stream", "{rep}");
    assert_eq!(u(&rep, "datagrams"), 300, "the run did not end at the forged message");
    assert_eq!(u(&rep["total"], "received"), 300);
    assert_eq!(u(&rep["total"], "lost"), 0);
    assert_eq!(u(&rep, "stray_control"), 1);
    assert_eq!(u(&rep, "invalid_control"), 0);
    let streams = rep["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 1, "the stranger opened a ledger slot: {rep}");
    assert_eq!(streams[0]["source"], data.local_addr().unwrap().to_string());
    assert_eq!(u(&streams[0]["sender"], "session"), 0x600d);
    assert_eq!(rep["stray_ends"][0]["source"], stranger.local_addr().unwrap().to_string());
    let diag = rep["diagnosis"].to_string();
    assert!(!diag.contains("no loss:"), "a forged message must take away the claim of zero loss: {diag}");
    assert!(diag.contains("forged"), "{diag}");
}

/// The same for `record --once` (the recorder's capture is the receiver's).
#[test]
fn record_once_ignores_a_forged_end_of_stream() {
    let _t = traffic();
    let dir = common::TempDir::new("trust-record");
    let r = spawn_cmd_with(&[], "record", "127.0.0.1:0", &["-o", dir.path(), "--size", "64", "--once", "--json"]);
    let data = socket(r.port);
    let stranger = socket(r.port);
    send_all(&data, (0..100).map(|s| counter(s, 64)));
    stranger.send(&end(0xbad, 0, 99)).unwrap();
    send_all(&data, (100..150).map(|s| counter(s, 64)));
    data.send(&end(0x600d, 0, 149)).unwrap();
    let (code, rep, err) = done(r);
    assert_eq!(code, Some(0), "{err}");
    let cap = &rep["capture"];
    assert_eq!(cap["stopped_by"], "end of stream", "{rep}");
    assert_eq!(u(cap, "datagrams"), 150);
    assert_eq!(u(&cap["total"], "received"), 150);
    assert_eq!(u(&cap["total"], "lost"), 0);
    assert_eq!(u(cap, "stray_control"), 1);
    assert_eq!(cap["streams"].as_array().unwrap().len(), 1);
}

/// A sender whose data was all lost (here: it sent none) has an end message that matches no
/// data, and so has a stranger's. A receiver still waiting for its first datagram ignores it
/// entirely (a stranger cannot end a run before it starts): the run ends on `--duration`,
/// names the message, and does not claim "no loss"; `--expect-zero-loss` fails on it.
#[test]
fn end_of_stream_without_data_neither_ends_the_run_nor_proves_anything() {
    let _t = traffic();
    // A quiet spell far shorter than --duration: were the message believed after all, the run
    // would end on silence, not on its duration.
    let r = spawn_recv(&["--once", "--once-quiet", "250ms", "--json", "--duration", "1500ms", "--expect-zero-loss"]);
    let lost_sender = socket(r.port);
    lost_sender.send(&end(7, 0, 999)).unwrap();
    let (code, rep, err) = done(r);
    assert_eq!(code, Some(3), "zero loss was not proven, so --expect-zero-loss must fail: {err}");
    assert!(err.contains("zero loss is not proven"), "{err}");
    assert_eq!(rep["stopped_by"], "duration", "a stray end message ended an idle receiver: {rep}");
    assert_eq!(u(&rep, "datagrams"), 0);
    assert_eq!(u(&rep, "stray_control"), 1);
    assert_eq!(u(&rep["stray_ends"][0]["claimed"], "sent"), 1000);
    assert!(rep["streams"].as_array().unwrap().is_empty());
    let diag = rep["diagnosis"].to_string();
    assert!(!diag.contains("no loss"), "{diag}");
    assert!(diag.contains("all of its data was lost"), "{diag}");
}

/// Once data has arrived, a run whose own end message never comes must not wait forever
/// after a message it could not believe: it stops after a quiet spell, says why, and
/// `--expect-zero-loss` fails because the stranger's message settled nothing.
#[test]
fn a_disbelieved_end_after_data_stops_the_run_on_silence_without_proof() {
    let _t = traffic();
    // --once-quiet sets the quiet spell (3 s by default; pgm.rs's lost tail waits that long).
    let r = spawn_recv(&["--once", "--once-quiet", "250ms", "--json", "--expect-zero-loss"]);
    let data = socket(r.port);
    let stranger = socket(r.port);
    send_all(&data, (0..50).map(|s| counter(s, 64)));
    stranger.send(&end(0xbad, 0, 49)).unwrap();
    let (code, rep, err) = done(r);
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(
        rep["stopped_by"], "silence: 250 ms without data after an end-of-stream message that was not believed",
        "{rep}"
    );
    assert_eq!(u(&rep["total"], "received"), 50);
    assert_eq!(u(&rep, "stray_control"), 1);
    assert_eq!(u(&rep, "streams_without_end"), 1);
}

/// Issue 13's exact repro: counter datagrams of 8800 B, seq 0-9, then an 8-byte and a
/// 4400-byte prefix of seq 10, then seq 11-19, no --size. The stream's length is fixed by its
/// first datagrams: the prefixes are invalid (length), never sequence numbers 11000 and 20.
#[test]
fn truncated_counter_datagrams_are_invalid_not_numbers() {
    let _t = traffic();
    let r = spawn_recv(&["--once", "--json"]);
    let data = socket(r.port);
    let ten = counter(10, 8800);
    send_all(&data, (0..10).map(|s| counter(s, 8800)));
    send_all(&data, [ten[..8].to_vec(), ten[..4400].to_vec()]);
    send_all(&data, (11..20).map(|s| counter(s, 8800)));
    data.send(&end(1, 0, 19)).unwrap();
    let (code, rep, err) = done(r);
    assert_eq!(code, Some(0), "{err}");
    let t = &rep["total"];
    assert_eq!((u(t, "received"), u(t, "lost"), u(t, "invalid")), (19, 1, 2), "{rep}");
    let s = &rep["streams"][0];
    assert_eq!(common::gap_list(s), vec![(10, 10)]);
    assert_eq!(u(&s["invalid_by_reason"], "length"), 2);
    assert_eq!(u(s, "last_seq"), 19);
}

/// The stream's very first datagram is the truncated one: it must not fix the length.
#[test]
fn a_truncated_first_datagram_does_not_poison_the_stream() {
    let _t = traffic();
    let r = spawn_recv(&["--once", "--json"]);
    let data = socket(r.port);
    let five = counter(5, 8800);
    send_all(&data, [five[..8].to_vec()]);
    send_all(&data, (0..20).map(|s| counter(s, 8800)));
    data.send(&end(2, 0, 19)).unwrap();
    let (code, rep, err) = done(r);
    assert_eq!(code, Some(0), "{err}");
    let t = &rep["total"];
    assert_eq!((u(t, "received"), u(t, "lost"), u(t, "invalid"), u(t, "late")), (20, 0, 1, 0), "{rep}");
    assert_eq!(u(&rep["streams"][0], "first_seq"), 0);
}

/// A forged end message from the true sender's own address and port (a raw socket), claiming
/// less than the receiver saw: not believed, and the run ends on the real one.
#[test]
#[ignore = "needs root"]
fn spoofed_end_of_stream_from_the_senders_address_is_not_believed() {
    let _t = traffic();
    let r = spawn_recv(&["--once", "--json"]);
    let data = socket(r.port);
    let src = data.local_addr().unwrap().port();
    send_all(&data, (0..200).map(|s| counter(s, 64)));
    // A plausible lie: the stream "ended" at 99, with no loss.
    let forged = end(0xbad, 0, 99);
    let hex: String = forged.iter().map(|b| format!("{b:02x}")).collect();
    let py = format!(
        r#"
import socket, struct
payload = bytes.fromhex("{hex}")
udp = struct.pack("!HHHH", {src}, {dst}, 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                 socket.inet_aton("127.0.0.1"), socket.inet_aton("127.0.0.1"))
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
s.sendto(ip + udp, ("127.0.0.1", 0))
"#,
        dst = r.port
    );
    let out = std::process::Command::new("python3").args(["-c", &py]).output().expect("run python3");
    assert!(out.status.success(), "raw send failed: {}", String::from_utf8_lossy(&out.stderr));
    send_all(&data, (200..300).map(|s| counter(s, 64)));
    data.send(&end(0x600d, 0, 299)).unwrap();
    let (code, rep, err) = done(r);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rep["stopped_by"], "end of stream", "{rep}");
    assert_eq!(u(&rep, "datagrams"), 300);
    assert_eq!(u(&rep["total"], "received"), 300);
    assert_eq!(u(&rep, "invalid_control"), 1);
    assert_eq!(u(&rep["streams"][0]["sender"], "session"), 0x600d);
}

/// Mark5B halves without a PSN (and not counter-filled) number only their header halves, by
/// frame, while the sender's end message counts halves. The receiver compares them in the same
/// numbers: the real sender's end is believed and books no loss (it booked billions before).
#[test]
fn mark5b_halves_end_message_is_read_in_frame_numbers() {
    let _t = traffic();
    let f = "mark5b,fps=2000,halves=1,psn=0,fill=tvg";
    let r = spawn_recv(&["--once", "--json", "--format", f]);
    let target = format!("127.0.0.1:{}", r.port);
    let out = common::run(&["send", &target, "--format", f, "--count", "400", "--rate", "4000pps"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, rep, err) = done(r);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rep["stopped_by"], "end of stream", "{rep}");
    assert_eq!((u(&rep["total"], "received"), u(&rep["total"], "lost")), (200, 0), "{rep}");
    assert_eq!(u(&rep, "unsequenced"), 200, "the second halves");
    assert_eq!(u(&rep, "invalid_control"), 0);
}
