//! Tests that need root: they build a private network namespace (unique name, deleted on drop
//! even when the test fails). CI runs as root, so they run there.

use crate::common;

use common::*;
use std::time::Duration;

#[test]
#[ignore = "needs root"]
fn multicast_group_is_joined_and_received() {
    let _turn = traffic();
    let ns = Netns::new("mcast");
    ns.exec(&["ip", "link", "set", "lo", "multicast", "on"]);
    ns.exec(&["ip", "route", "add", "224.0.0.0/4", "dev", "lo"]);
    let r = spawn_recv_with(&ns.prefix(), "239.1.2.3:0", &["--once", "--json", "--duration", "30"]);
    let target = format!("239.1.2.3:{}", r.port);
    let out = run_prefixed(
        &ns.prefix(),
        &["send", &target, "--count", "3000", "--rate", "30kpps", "--size", "1024", "--skip", "100..109"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(rep["listen"], target, "the report names the port the kernel gave");
    let s = &rep["streams"][0];
    assert_eq!(u(s, "received") + u(s, "lost"), 3000, "{s}");
    // Exact when the kernel dropped nothing; on a busy host the extra loss is the kernel's.
    let drops = recv_kernel_drops(&rep);
    if drops == 0 {
        assert_eq!(u(s, "received"), 2990);
        assert_eq!(gap_list(s), vec![(100, 109)]);
    } else {
        assert!((10..=10 + drops).contains(&u(s, "lost")), "{s}");
    }
}

#[test]
#[ignore = "needs root"]
fn loss_in_the_network_is_told_apart_from_socket_drops() {
    let _turn = traffic();
    // nftables drops every 50th datagram before it reaches the socket: the ledger must count
    // them, and the diagnosis must say the kernel's socket counters saw none of it.
    let ns = Netns::new("nft");
    ns.exec(&["nft", "add", "table", "inet", "t"]);
    ns.exec(&["nft", "add", "chain", "inet", "t", "in", "{ type filter hook input priority 0 ; }"]);
    let r = spawn_recv_with(&ns.prefix(), "127.0.0.1:0", &["--once", "--json", "--duration", "30"]);
    let port = r.port.to_string();
    ns.exec(&[
        "nft", "add", "rule", "inet", "t", "in", "udp", "dport", &port, "udp", "length", "!=", "88", "numgen", "inc",
        "mod", "50", "0", "counter", "drop",
    ]);
    let target = format!("127.0.0.1:{port}");
    let out = run_prefixed(&ns.prefix(), &["send", &target, "--count", "5000", "--rate", "50kpps", "--size", "1024"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    let (received, lost) = (u(&rep["total"], "received"), u(&rep["total"], "lost"));
    assert_eq!(received + lost, 5000, "{stdout}");
    // Exact when the socket dropped nothing; on a busy host it may, and the ledger counts that too.
    let drops = recv_kernel_drops(&rep);
    assert!((100..=100 + drops).contains(&lost), "5000 / 50 dropped by nftables: {stdout}");
    let diag = rep["diagnosis"].to_string();
    if drops == 0 {
        assert!(diag.contains("lost before it"), "{diag}");
    }
    // Either way the line points at the doctor, for this stream and this port.
    assert!(
        diag.contains("`wirespeed doctor --for ")
            && diag.contains(" --size 1024")
            && diag.contains(&format!(" --port {port}`")),
        "{diag}"
    );
}
