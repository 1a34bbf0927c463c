//! XPC against itself: two nodes in one process (or a child process for a peer that dies),
//! in temporary directories, no root needed. No assertion depends on timing: waits are long
//! limits that a correct implementation never reaches.

use super::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

/// A temporary directory of this process, removed when dropped (the raw devices' XPC tests use
/// it too).
pub(crate) struct Tmp(PathBuf);

impl Tmp {
    pub(crate) fn new(tag: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("wsxpc-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        Tmp(d)
    }
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const OPTS: NodeOptions = NodeOptions { version: (1, 0), xpc: true };

/// Node `id` in directory `d`, with XPC on.
pub(crate) fn node(d: &Path, id: u32) -> Node {
    Node::open(d, id, OPTS).expect("node")
}

/// Open both ends and wait until both say Connected.
fn pair(a: &Node, b: &Node, chan: u32, o: ChannelOptions) -> (Channel, Channel) {
    let mut x = Channel::open_with(a, b.local(), chan, o).expect("open a");
    let mut y = Channel::open_with(b, a.local(), chan, o).expect("open b");
    connect(&mut x, &mut y);
    (x, y)
}

fn connect(x: &mut Channel, y: &mut Channel) {
    for _ in 0..1000 {
        let (s1, s2) = (x.poll_connect().expect("poll"), y.poll_connect().expect("poll"));
        if s1 == ChanState::Connected && s2 == ChanState::Connected {
            return;
        }
    }
    panic!("no connection: {:?} {:?}", x.state(), y.state());
}

fn msg(i: u64) -> Vec<u8> {
    // Lengths cycle through immediate and out-of-line sizes; content names the message.
    let len = 8 + (i as usize * 37) % 600;
    let mut v: Vec<u8> = (0..len).map(|k| (i as u8).wrapping_mul(31).wrapping_add(k as u8)).collect();
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

#[test]
fn ordering_holds_over_many_wraps_of_both_rings() {
    let t = Tmp::new("order");
    let (a, b) = (node(t.path(), 1), node(t.path(), 2));
    let o = ChannelOptions { slots: 8, data_bytes: 1024, ..Default::default() };
    let (mut x, mut y) = pair(&a, &b, 0, o);
    let (mut sent, mut got) = (0u64, 0u64);
    let mut buf = Vec::new();
    let total = 5000;
    while got < total {
        while sent < total && x.try_send(&msg(sent)).expect("send") {
            sent += 1;
        }
        while let Some(n) = y.try_recv(&mut buf).expect("recv") {
            assert_eq!(n, buf.len());
            assert_eq!(buf, msg(got), "message {got}");
            got += 1;
        }
    }
    assert_eq!(y.try_recv(&mut buf).expect("recv"), None);
    let (sx, sy) = (x.stats(), y.stats());
    assert_eq!(sx.sent_immediate + sx.sent_out_of_line, total);
    assert_eq!(sy.recv_immediate + sy.recv_out_of_line, total);
    assert_eq!(sx.sent_immediate, sy.recv_immediate);
    // Both rings wrapped many times: 8 slots, 1 KiB of out-of-line area.
    assert!(sy.recv_out_of_line > 100 * 8);
}

#[test]
fn a_sender_is_full_at_exactly_the_capacity_and_resumes_after_consumption() {
    let t = Tmp::new("flow");
    let (a, b) = (node(t.path(), 1), node(t.path(), 2));
    let o = ChannelOptions { slots: 16, data_bytes: 4096, ..Default::default() };
    let (mut x, mut y) = pair(&a, &b, 0, o);
    for i in 0..16u8 {
        assert!(x.try_send(&[i; 10]).expect("send"), "slot {i} fits");
    }
    assert!(!x.try_send(&[99; 10]).expect("send"), "the 17th slot does not");
    let mut buf = Vec::new();
    assert_eq!(y.try_recv(&mut buf).expect("recv"), Some(10));
    assert_eq!(buf, vec![0u8; 10]);
    assert!(x.try_send(&[16; 10]).expect("send"), "one consumed, one more fits");
    assert!(!x.try_send(&[99; 10]).expect("send"));
    for i in 1..=16u8 {
        assert_eq!(y.try_recv(&mut buf).expect("recv"), Some(10));
        assert_eq!(buf, vec![i; 10], "in order, once each");
    }
    assert_eq!(y.try_recv(&mut buf).expect("recv"), None);
    // The out-of-line area: 4 messages of 1000 bytes fit in 4096, the fifth waits.
    for i in 0..4u8 {
        assert!(x.try_send(&[i; 1000]).expect("send"));
    }
    assert!(!x.try_send(&[9; 1000]).expect("send"));
    assert_eq!(y.try_recv(&mut buf).expect("recv"), Some(1000));
    assert!(x.try_send(&[4; 1000]).expect("send"));
    for i in 1..=4u8 {
        assert_eq!(y.try_recv(&mut buf).expect("recv"), Some(1000));
        assert_eq!(buf, vec![i; 1000]);
    }
    // Larger than the out-of-line area: refused, clearly.
    let e = x.try_send(&[0; 5000]).expect_err("too large");
    assert!(e.to_string().contains("larger than channel 0's out-of-line area of 4096 bytes"), "{e}");
}

/// A buffer of `len` bytes starting at `misalign` bytes past a 128-byte boundary.
fn placed(len: usize, misalign: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; len + 256];
    let start = (128 - (v.as_ptr() as usize) % 128) % 128 + misalign;
    (v, start)
}

fn fill(v: &mut [u8], seed: u8) {
    for (k, b) in v.iter_mut().enumerate() {
        *b = seed.wrapping_add((k * 7 + k / 251) as u8);
    }
}

fn rendezvous_case(len: usize, src_mis: usize, dst_mis: usize) -> Received {
    let t = Tmp::new(&format!("rdv{len}-{src_mis}-{dst_mis}"));
    let (a, b) = (node(t.path(), 1), node(t.path(), 2));
    let (mut x, mut y) = pair(&a, &b, 0, ChannelOptions::default());
    let (mut src, s0) = placed(len, src_mis);
    fill(&mut src[s0..s0 + len], len as u8);
    let want = src[s0..s0 + len].to_vec();
    let recv = std::thread::spawn(move || {
        let (mut dst, d0) = placed(len, dst_mis);
        let r = y.recv_into(&mut dst[d0..d0 + len], LONG).expect("recv").expect("a message");
        (r, dst[d0..d0 + len].to_vec(), y.stats())
    });
    x.send_rendezvous(&src[s0..s0 + len], LONG).expect("rendezvous");
    let (r, got, st) = recv.join().expect("receiver");
    assert_eq!(got, want, "byte-exact");
    assert_eq!(r.len, len);
    assert_eq!(r.kind, Kind::Rendezvous);
    assert_eq!(x.stats().sent_rendezvous, 1);
    assert_eq!(st.recv_rendezvous, 1);
    assert_eq!((st.bytes_pulled, st.bytes_copied), (r.pulled as u64, r.copied as u64));
    r
}

#[test]
fn rendezvous_pulls_aligned_bodies_and_copies_ragged_tails_and_misaligned_buffers() {
    // Aligned, whole cache lines: everything pulled, nothing copied.
    let r = rendezvous_case(64 * 1024, 0, 0);
    assert_eq!((r.pulled, r.copied), (64 * 1024, 0));
    // Aligned with a ragged tail of 120 bytes (two slots' worth): body pulled, tail copied.
    let r = rendezvous_case(3 * 128 + 120, 0, 0);
    assert_eq!((r.pulled, r.copied), (3 * 128, 120));
    // A tail of 5 bytes and a message shorter than a cache line.
    let r = rendezvous_case(1000 * 128 + 5, 0, 0);
    assert_eq!((r.pulled, r.copied), (1000 * 128, 5));
    let r = rendezvous_case(77, 0, 0);
    assert_eq!((r.pulled, r.copied), (0, 77));
    // Misaligned source or destination: the seed's rule, all through an intermediate copy.
    let r = rendezvous_case(10_000, 8, 0);
    assert_eq!((r.pulled, r.copied), (0, 10_000));
    let r = rendezvous_case(10_000, 0, 3);
    assert_eq!((r.pulled, r.copied), (0, 10_000));
}

#[test]
fn immediate_and_out_of_line_are_told_apart_in_the_stats() {
    let t = Tmp::new("kinds");
    let (a, b) = (node(t.path(), 1), node(t.path(), 2));
    let (mut x, mut y) = pair(&a, &b, 0, ChannelOptions::default());
    let mut out = vec![0u8; 4096];
    let m1: Vec<u8> = (0..IMMEDIATE_MAX as u8).collect();
    x.send(&m1, LONG).expect("send");
    let r = y.recv_into(&mut out, LONG).expect("recv").expect("msg");
    assert_eq!((r.kind, r.len, r.copied), (Kind::Immediate, IMMEDIATE_MAX, IMMEDIATE_MAX));
    assert_eq!(&out[..r.len], &m1[..]);
    let m2: Vec<u8> = (0..=IMMEDIATE_MAX as u8).collect();
    x.send(&m2, LONG).expect("send");
    let r = y.recv_into(&mut out, LONG).expect("recv").expect("msg");
    assert_eq!((r.kind, r.len), (Kind::OutOfLine, IMMEDIATE_MAX + 1));
    assert_eq!(&out[..r.len], &m2[..]);
    // Too small a buffer: refused, the message stays for a larger one.
    x.send(&[7; 300], LONG).expect("send");
    assert!(y.try_recv_into(&mut out[..100]).is_err());
    assert_eq!(y.try_recv_into(&mut out).expect("recv").map(|r| r.len), Some(300));
    x.try_send_eof().expect("eof");
    assert_eq!(y.try_recv_into(&mut out).expect("recv").map(|r| r.kind), Some(Kind::Eof));
    let (sx, sy) = (x.stats(), y.stats());
    assert_eq!((sx.sent_immediate, sx.sent_out_of_line), (1, 2));
    assert_eq!((sy.recv_immediate, sy.recv_out_of_line, sy.recv_rendezvous), (2, 2, 0));
}

#[test]
fn the_peer_maps_my_half_and_my_page_read_only() {
    let t = Tmp::new("fw");
    let (a, b) = (node(t.path(), 1), node(t.path(), 2));
    let (x, _y) = pair(&a, &b, 5, ChannelOptions::default());
    let (own, peer) = x.mapping_addrs();
    let perms = |addr| wirespeed::sys::xpc::mapping_perms(addr).expect("mapping listed");
    assert_eq!(perms(own), "rw-s", "the own half is writable here");
    assert_eq!(perms(peer.expect("connected")), "r--s", "the peer's half is read-only here");
    let page = RemotePage::open(t.path(), 2).expect("page");
    assert_eq!(perms(page.mapping_addr()), "r--s");
    assert_eq!(perms(a.mapping_addr()), "rw-s");
}

#[test]
fn an_incompatible_version_is_refused_with_the_seeds_two_lines() {
    let t = Tmp::new("ver");
    let (a, b) = (node(t.path(), 1), node(t.path(), 2));
    let mut x = Channel::open(&a, 2, 0).expect("open");
    let o = ChannelOptions { xpc_version: (2, 3), ..Default::default() };
    let mut y = Channel::open_with(&b, 1, 0, o).expect("open");
    let (sx, sy) = (x.poll_connect().expect("poll"), y.poll_connect().expect("poll"));
    let ChanState::Refused(r) = sx else { panic!("not refused: {sx:?}") };
    assert_eq!(
        r.lines(),
        ["xpc: Remote partition 2 requested connection", "xpc: Local version 1.0 does not support Remote version 2.3"]
    );
    let ChanState::Refused(r) = sy else { panic!("not refused: {sy:?}") };
    assert_eq!(
        r.lines(),
        ["xpc: Remote partition 1 requested connection", "xpc: Local version 2.3 does not support Remote version 1.0"]
    );
    let e = x.try_send(b"x").expect_err("refused channel");
    assert_eq!(
        e.to_string(),
        "xpc: Remote partition 2 requested connection\nxpc: Local version 1.0 does not support Remote version 2.3"
    );
    // Another minor version is compatible.
    let o = ChannelOptions { xpc_version: (1, 7), ..Default::default() };
    let (mut x, mut y) = pair(&a, &b, 1, o);
    x.send(b"hello", LONG).expect("send");
    let mut buf = Vec::new();
    assert_eq!(y.recv(&mut buf, LONG).expect("recv"), Some(5));
}

#[test]
fn a_partition_without_xpc_gets_the_seeds_notice() {
    let t = Tmp::new("noxpc");
    let a = node(t.path(), 1);
    let b = Node::open(t.path(), 2, NodeOptions { version: (1, 0), xpc: false }).expect("node");
    let mut x = Channel::open(&a, 2, 0).expect("open");
    let ChanState::Refused(r) = x.poll_connect().expect("poll") else { panic!("not refused") };
    assert_eq!(r.lines(), ["Partition 2 does not support XPC messaging"]);
    assert!(Channel::open(&b, 1, 0).is_err(), "a partition without XPC opens no channel");
}

#[test]
fn close_delivers_what_was_sent_then_an_error_naming_the_partition() {
    let t = Tmp::new("close");
    let (a, b) = (node(t.path(), 1), node(t.path(), 2));
    let (mut x, mut y) = pair(&a, &b, 4, ChannelOptions::default());
    x.send(b"one", LONG).expect("send");
    x.send(&[2; 500], LONG).expect("send");
    x.close();
    assert!(x.try_send(b"late").is_err());
    let mut buf = Vec::new();
    assert_eq!(y.recv(&mut buf, LONG).expect("recv"), Some(3));
    assert_eq!(y.recv(&mut buf, LONG).expect("recv"), Some(500));
    let e = y.recv(&mut buf, LONG).expect_err("closed");
    assert_eq!(e.to_string(), "xpc: partition 1 closed channel 4");
    let e = y.try_send(b"to nobody").expect_err("the peer closed");
    assert_eq!(e.to_string(), "xpc: partition 1 closed channel 4");
    assert!(matches!(y.poll_connect().expect("poll"), ChanState::Closed(_)));
}

#[test]
fn a_blocked_receiver_is_woken_by_the_doorbell() {
    let t = Tmp::new("wake");
    let (a, b) = (node(t.path(), 1), node(t.path(), 2));
    let (mut x, mut y) = pair(&a, &b, 0, ChannelOptions::default());
    let h = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut n = 0;
        while n < 1000 {
            let got = y.recv(&mut buf, LONG).expect("recv").expect("woken before the limit");
            assert_eq!(buf, (n as u32).to_le_bytes()[..got]);
            n += 1;
        }
        y
    });
    for i in 0..1000u32 {
        x.send(&i.to_le_bytes(), LONG).expect("send");
        if i % 100 == 0 {
            std::thread::yield_now();
        }
    }
    h.join().expect("receiver");
}

#[test]
fn the_pending_set_follows_published_messages_and_the_mask() {
    let t = Tmp::new("pend");
    let (a, b, c) = (node(t.path(), 1), node(t.path(), 2), node(t.path(), 3));
    let (mut x2, mut y2) = pair(&a, &b, 0, ChannelOptions::default());
    let (_x3, mut y3) = pair(&a, &c, 6, ChannelOptions::default());
    assert!(a.pending().is_empty());
    y2.send(b"ping", LONG).expect("send");
    y3.send(b"ping", LONG).expect("send");
    assert_eq!(a.pending(), [(2, 0), (3, 6)]);
    a.set_mask(Some([3].into()));
    assert_eq!(a.pending(), [(3, 6)]);
    assert_eq!(a.wait_pending(LONG), [(3, 6)]);
    a.set_mask(None);
    let mut buf = Vec::new();
    assert_eq!(x2.try_recv(&mut buf).expect("recv"), Some(4));
    assert_eq!(a.pending(), [(3, 6)]);
}

#[test]
fn the_heartbeat_is_read_through_the_page_even_after_its_owner_left() {
    let t = Tmp::new("hb");
    let a = node(t.path(), 1);
    let b = Node::open(t.path(), 2, NodeOptions { version: (3, 4), xpc: true }).expect("node");
    let page = RemotePage::open(t.path(), 2).expect("page");
    let v = page.read().expect("a page");
    assert_eq!((v.version, v.xpc_version, v.xpc, v.pid, v.counter), ((3, 4), XPC_VERSION, true, std::process::id(), 0));
    for _ in 0..5 {
        b.beat();
    }
    assert_eq!(page.read().expect("page").counter, 5);
    assert!(!page.replaced());
    drop(b);
    assert_eq!(page.read().expect("still mapped").counter, 5, "readable after its owner is gone");
    let b2 = node(t.path(), 2);
    assert!(page.replaced(), "a new page is a new generation");
    let fresh = RemotePage::open(t.path(), 2).expect("page").read().expect("page");
    assert_ne!(fresh.generation, v.generation);
    assert_eq!(fresh.counter, 0);
    drop((a, b2));
    assert!(RemotePage::open(t.path(), 1).is_err(), "a node removes its page when it goes");
}

/// Set in a child process started by the dying-peer tests: "DIR MODE".
const CHILD_ENV: &str = "WIRESPEED_XPC_TEST_PEER";

/// Not a test of its own: the peer process of the tests below (does nothing when run normally).
#[test]
fn peer_process() {
    let Ok(v) = std::env::var(CHILD_ENV) else { return };
    let (dir, mode) = v.split_once(' ').expect("DIR MODE");
    let n = node(Path::new(dir), 2);
    let mut c = Channel::open(&n, 1, 0).expect("open");
    for i in 0..3u8 {
        c.send(&[i; 200], LONG).expect("send");
    }
    match mode {
        "abort" => std::process::abort(),
        _ => {
            let buf = vec![5u8; 1 << 20];
            // Never pulled: the parent kills this process while it waits here.
            let _ = c.send_rendezvous(&buf, Duration::from_secs(120));
            std::process::exit(3);
        }
    }
}

fn spawn_peer(dir: &Path, mode: &str) -> std::process::Child {
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", "xpc::tests::peer_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{} {mode}", dir.display()))
        .stdout(std::process::Stdio::null());
    wirespeed::sys::die_with_parent(&mut cmd).spawn().expect("spawn the peer")
}

#[test]
fn a_peer_that_dies_leaves_its_messages_then_an_error_not_a_hang() {
    let t = Tmp::new("die");
    let a = node(t.path(), 1);
    let mut x = Channel::open(&a, 2, 0).expect("open");
    let mut child = spawn_peer(t.path(), "abort");
    let mut buf = Vec::new();
    for i in 0..3u8 {
        assert_eq!(x.recv(&mut buf, LONG).expect("recv"), Some(200));
        assert_eq!(buf, vec![i; 200]);
    }
    let e = x.recv(&mut buf, LONG).expect_err("the peer is gone");
    assert!(e.to_string().starts_with("xpc: partition 2 is gone"), "{e}");
    let _ = child.wait();
}

#[test]
fn a_peer_killed_in_the_middle_of_a_rendezvous_gives_an_error() {
    let t = Tmp::new("dierdv");
    let a = node(t.path(), 1);
    let mut x = Channel::open(&a, 2, 0).expect("open");
    let mut child = spawn_peer(t.path(), "rendezvous");
    let mut buf = Vec::new();
    for _ in 0..3 {
        assert_eq!(x.recv(&mut buf, LONG).expect("recv"), Some(200));
    }
    // The rendezvous is posted (published), its sender still waits for the pull: kill it now.
    let end = std::time::Instant::now() + LONG;
    while !x.has_pending() {
        assert!(std::time::Instant::now() < end, "the rendezvous never came");
        a.wait(Duration::from_millis(100));
    }
    child.kill().expect("kill");
    child.wait().expect("reap");
    let mut out = vec![0u8; 1 << 20];
    let e = x.recv_into(&mut out, LONG).expect_err("nothing to pull from");
    assert!(e.to_string().contains("from partition 2"), "{e}");
    let e = x.recv_into(&mut out, LONG).expect_err("and then closed");
    assert!(e.to_string().contains("partition 2"), "{e}");
}

#[test]
fn the_node_fd_is_pollable_while_armed_and_a_busy_receiver_costs_no_rings() {
    let t = Tmp::new("fd");
    let (a, b) = (node(t.path(), 1), node(t.path(), 2));
    let (mut x, mut y) = pair(&a, &b, 0, ChannelOptions::default());
    a.wait(Duration::ZERO);
    let fd = a.fd();
    // Not armed (the receiver said nothing about sleeping): messages ring nothing.
    let before = y.stats().rings;
    for i in 0..10u8 {
        y.send(&[i], LONG).expect("send");
    }
    assert_eq!(y.stats().rings, before, "no doorbell for a receiver that does not sleep");
    assert!(!wirespeed::sys::xpc::readable_now(fd));
    let mut buf = Vec::new();
    while x.try_recv(&mut buf).expect("recv").is_some() {}
    // Armed, as a poll loop would be: the next message rings, and the fd becomes readable.
    let armed = a.arm();
    y.send(b"ring", LONG).expect("send");
    assert_eq!(y.stats().rings, before + 1);
    assert!(wirespeed::sys::xpc::readable_now(fd));
    drop(armed);
    assert!(a.wait(Duration::ZERO), "the ring is taken by a zero wait");
    assert_eq!(a.pending(), [(2, 0)]);
}

/// Set in a child process started by the shrinking-file tests: "DIR SCENARIO".
const SHRINK_ENV: &str = "WIRESPEED_XPC_TEST_SHRINK";

/// Truncate `path` to nothing, as a hostile peer (or anyone of the same user) could.
fn truncate(path: &Path) {
    std::fs::OpenOptions::new().write(true).open(path).expect("open to truncate").set_len(0).expect("truncate");
}

/// Not a test of its own: the process whose shared file shrinks under it in the tests below
/// (a SIGBUS there would kill only this child, which the parent then reports). Does nothing
/// when run normally. Prints each line the scenario produced as "LINE: ...".
#[test]
fn shrink_process() {
    let Ok(v) = std::env::var(SHRINK_ENV) else { return };
    let (dir, scenario) = v.split_once(' ').expect("DIR SCENARIO");
    let dir = Path::new(dir);
    let (a, b) = (node(dir, 1), node(dir, 2));
    let (mut x, mut y) = pair(&a, &b, 0, ChannelOptions::default());
    let mut buf = Vec::new();
    match scenario {
        "peer-half" => {
            y.send(b"before", LONG).expect("send");
            y.send(b"lost", LONG).expect("send");
            assert_eq!(x.try_recv(&mut buf).expect("recv"), Some(6), "the channel works before the truncation");
            truncate(&dir.join("ch-2-1-0"));
            let e = x.try_recv(&mut buf).expect_err("the peer's half shrank");
            println!("LINE: {e}");
            let again = x.try_send(b"x").expect_err("closed for good");
            assert_eq!(again.to_string(), e.to_string(), "one reason, every time");
        }
        "own-half" => {
            truncate(&dir.join("ch-1-2-0"));
            let e = x.try_send(b"into the void").expect_err("the own half shrank");
            println!("LINE: {e}");
            // The peer (here in the same process) reads that half too: it is refused there too.
            let e = y.try_recv(&mut buf).expect_err("the reader of that half sees it shrank");
            println!("LINE: {e}");
        }
        "page" => {
            let page = RemotePage::open(dir, 2).expect("page");
            assert!(page.read().is_some() && !page.shrunk());
            truncate(&dir.join("part-2"));
            assert_eq!(page.read(), None, "a shrunk page is no page");
            assert!(page.shrunk());
            // Its owner reads zeros through its own mapping, and its heartbeat does not crash it.
            b.beat();
            assert_eq!(b.view().counter, 1, "the zero page counts from zero again");
            println!("LINE: page shrunk");
        }
        "foreign" => {
            // A file mapped by anything but XPC: its SIGBUS is not XPC's to swallow.
            let f = dir.join("other");
            std::fs::write(&f, vec![7u8; 8192]).expect("write");
            let m = wirespeed::sys::ring::share::ReadOnlyMap::open(&f, 8192).expect("map");
            truncate(&f);
            let mut out = [0u8; 8];
            m.copy_out(4096, &mut out);
            // The copy must happen: an optimised build would drop a copy nobody reads.
            std::hint::black_box(&mut out);
            println!("LINE: survived a foreign SIGBUS");
        }
        s => panic!("unknown scenario {s}"),
    }
}

/// Run [`shrink_process`] with `scenario` in a child: its status and its "LINE: " lines.
fn run_shrink(scenario: &str) -> (std::process::ExitStatus, Vec<String>) {
    let t = Tmp::new(&format!("shrink-{scenario}"));
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", "xpc::tests::shrink_process", "--nocapture", "--test-threads=1"])
        .env(SHRINK_ENV, format!("{} {scenario}", t.path().display()));
    let out = wirespeed::sys::die_with_parent(&mut cmd).output().expect("run the child");
    let text = String::from_utf8_lossy(&out.stdout);
    // The harness prints "test NAME ... " before the first line: look for the mark anywhere.
    let lines = text.lines().filter_map(|l| l.split_once("LINE: ")).map(|(_, l)| l.to_string()).collect();
    if !out.status.success() {
        eprintln!("child {scenario}: {:?}\n{text}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    (out.status, lines)
}

#[test]
fn a_peer_that_truncates_its_half_closes_the_channel_with_one_line_not_a_sigbus() {
    let (status, lines) = run_shrink("peer-half");
    assert!(status.success(), "the reader died ({status:?}) instead of refusing the shrunk half");
    assert_eq!(
        lines,
        ["xpc: partition 2 truncated its half of channel 0 (ch-2-1-0) under this reader: nothing more is read from it, channel closed"]
    );
}

#[test]
fn a_truncated_own_half_fails_the_send_with_one_line_not_a_sigbus() {
    let (status, lines) = run_shrink("own-half");
    assert!(status.success(), "the sender died ({status:?}) instead of reporting its shrunk half");
    assert_eq!(
        lines,
        [
            "xpc: this partition's half of channel 0 to partition 2 (ch-1-2-0) was truncated by another process: nothing sent on it can arrive, channel closed",
            "xpc: partition 1 truncated its half of channel 0 (ch-1-2-0) under this reader: nothing more is read from it, channel closed"
        ]
    );
}

#[test]
fn a_truncated_partition_page_reads_as_no_page_not_a_sigbus() {
    let (status, lines) = run_shrink("page");
    assert!(status.success(), "the reader of a shrunk page died ({status:?})");
    assert_eq!(lines, ["page shrunk"]);
}

#[test]
fn a_sigbus_outside_xpc_mappings_still_kills_as_before() {
    use std::os::unix::process::ExitStatusExt;
    let (status, lines) = run_shrink("foreign");
    assert_eq!(status.signal(), Some(libc::SIGBUS), "a genuine bus error is not swallowed: {status:?}");
    assert!(lines.is_empty(), "{lines:?}");
}
