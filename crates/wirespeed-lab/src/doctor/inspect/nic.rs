//! The NIC: link speed, MTU against the datagram, rings, interrupt coalescing, offloads,
//! channels, its NUMA node against the capture CPU, and the driver's own drop counters.
//! Seed 001 changed the Cassini's ring sizes and interrupt moderation; seed 004 asked for
//! jumbo frames and fewer than 500 kpps.

use super::socket::driver_name;
use super::{ms_words, Ctx, F, SEED004_PPS};
use crate::doctor::{Area, Change, Status};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use wirespeed::sys::ethtool;
use wirespeed::units;

/// Ring sizes as ethtool reports them.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RingsView {
    /// Receive ring entries now.
    pub rx: u32,
    /// The driver's largest receive ring.
    pub rx_max: u32,
}

/// Receive interrupt coalescing.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CoalesceView {
    /// Microseconds before a receive interrupt.
    pub rx_usecs: u32,
    /// Frames before a receive interrupt.
    pub rx_frames: u32,
    /// Adaptive receive coalescing.
    #[serde(default)]
    pub adaptive_rx: bool,
}

/// Channel (queue) counts.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChannelsView {
    /// Combined channels now.
    pub combined: u32,
    /// Largest combined count.
    pub max_combined: u32,
    /// Receive-only channels now.
    #[serde(default)]
    pub rx: u32,
}

/// One offload feature.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct FeatureView {
    /// The ethtool feature string (`rx-checksum`, `rx-gro`).
    pub name: String,
    /// On now.
    pub active: bool,
    /// Not `[fixed]`.
    pub changeable: bool,
}

/// What ethtool says of one interface: from the ioctls on the live system, from
/// `ethtool/IFACE.json` under a snapshot root (the same fields). Each part is `None` when it
/// could not be read, and `unreadable` then says why.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NicView {
    /// Driver name.
    #[serde(default)]
    pub driver: Option<String>,
    /// Ring sizes.
    #[serde(default)]
    pub rings: Option<RingsView>,
    /// Interrupt coalescing.
    #[serde(default)]
    pub coalesce: Option<CoalesceView>,
    /// Channels.
    #[serde(default)]
    pub channels: Option<ChannelsView>,
    /// Offload features.
    #[serde(default)]
    pub features: Option<Vec<FeatureView>>,
    /// Driver statistics (`ethtool -S`).
    #[serde(default)]
    pub stats: Option<BTreeMap<String, u64>>,
    /// Part name (`rings`, `coalesce`...) -> why it could not be read.
    #[serde(default)]
    pub unreadable: BTreeMap<String, String>,
    /// Part name (`rings`, `coalesce`, `channels`) -> why the driver would refuse a change to
    /// it, as a snapshot records it (on the live system the driver is asked instead, by
    /// writing back the values in force: [`crate::doctor::apply::cannot_make`]).
    #[serde(default)]
    pub refuses: BTreeMap<String, String>,
}

fn why_not(e: &std::io::Error, what: &str, driver: &str) -> String {
    match e.kind() {
        std::io::ErrorKind::Unsupported => format!("the {driver} driver does not report {what}"),
        std::io::ErrorKind::PermissionDenied => format!("reading {what} needs root"),
        _ => format!("{what}: {e}"),
    }
}

/// What ethtool says of the target interface (nothing when there is none).
pub fn read(cx: &Ctx) -> NicView {
    let Some(i) = cx.iface.clone() else { return NicView::default() };
    if !cx.root.is_live() {
        let Some(t) = cx.root.read(&format!("/ethtool/{i}.json")) else {
            let mut v = NicView::default();
            v.unreadable.insert("all".into(), format!("the snapshot has no ethtool/{i}.json"));
            return v;
        };
        return match serde_json::from_str::<NicView>(&t) {
            Ok(v) => v,
            Err(e) => {
                let mut v = NicView::default();
                v.unreadable.insert("all".into(), format!("ethtool/{i}.json in the snapshot is not readable: {e}"));
                v
            }
        };
    }
    let mut v = NicView { driver: ethtool::driver(&i).ok().or_else(|| driver_name(cx)), ..NicView::default() };
    let d = v.driver.clone().unwrap_or_else(|| "interface's".into());
    match ethtool::rings(&i) {
        Ok(r) => v.rings = Some(RingsView { rx: r.rx, rx_max: r.rx_max }),
        Err(e) => {
            v.unreadable.insert("rings".into(), why_not(&e, "ring sizes", &d));
        }
    }
    match ethtool::coalesce(&i) {
        Ok(c) => {
            v.coalesce = Some(CoalesceView { rx_usecs: c.rx_usecs, rx_frames: c.rx_frames, adaptive_rx: c.adaptive_rx })
        }
        Err(e) => {
            v.unreadable.insert("coalesce".into(), why_not(&e, "interrupt coalescing", &d));
        }
    }
    match ethtool::channels(&i) {
        Ok(c) => v.channels = Some(ChannelsView { combined: c.combined, max_combined: c.max_combined, rx: c.rx }),
        Err(e) => {
            v.unreadable.insert("channels".into(), why_not(&e, "channels", &d));
        }
    }
    match ethtool::features(&i) {
        Ok(fs) => {
            v.features = Some(
                fs.into_iter()
                    .map(|f| FeatureView { name: f.name, active: f.active, changeable: f.changeable })
                    .collect(),
            )
        }
        Err(e) => {
            v.unreadable.insert("features".into(), why_not(&e, "offload features", &d));
        }
    }
    match ethtool::stats(&i) {
        Ok(s) => v.stats = Some(s.into_iter().collect()),
        Err(e) => {
            v.unreadable.insert("stats".into(), why_not(&e, "driver statistics", &d));
        }
    }
    v
}

fn unreadable(nic: &NicView, part: &str) -> String {
    nic.unreadable
        .get(part)
        .or_else(|| nic.unreadable.get("all"))
        .cloned()
        .unwrap_or_else(|| format!("{part} cannot be read"))
}

/// Set the NIC against the stream.
pub fn check(cx: &mut Ctx, nic: &NicView) {
    packet_rate(cx);
    let Some(i) = cx.iface.clone() else { return };
    let driver = nic.driver.clone().or_else(|| driver_name(cx)).unwrap_or_else(|| "unknown".into());
    let virt = matches!(driver.as_str(), "veth" | "loopback" | "bridge" | "vlan" | "macvlan" | "ipvlan");
    mtu(cx, &i);
    speed(cx, &i, virt);
    rings(cx, nic, &i, &driver, virt);
    coalesce(cx, nic, &i, virt);
    features(cx, nic, &i);
    channels(cx, nic, &i);
    numa(cx, &i, virt);
    counters(cx, nic, &i);
}

fn packet_rate(cx: &mut Ctx) {
    let (Some(pps), Some(size)) = (cx.pps(), cx.target.size) else { return };
    let seen = format!("{} of {size}-byte datagrams is {}", cx.rate_words(), units::pps(pps));
    if pps > SEED004_PPS {
        let jumbo = cx.target.rate_bps.map(|b| b / (8.0 * 8800.0)).unwrap_or(0.0);
        cx.push(
            F::new("stream.packet_rate", Area::Nic, Status::Advice, seen)
                .why(format!(
                    "a receiver's cost is per datagram, not per byte: seed 004 lost packets above ~570 kpps whatever the size and recommends staying below 500 kpps; 8800-byte datagrams (MTU 9000) carry the same rate in {}",
                    units::pps(jumbo)
                ))
                .fix("send larger datagrams (e.g. --size 8800 on a 9000-byte MTU path), or spread the stream over several capture threads (--threads N)")
                .effect(0.6),
        );
    } else {
        cx.push(
            F::new("stream.packet_rate", Area::Nic, Status::Ok, seen)
                .why("below seed 004's 500 kpps: the per-datagram cost leaves room"),
        );
    }
}

fn mtu(cx: &mut Ctx, i: &str) {
    let Some(mtu) = cx.iface_file("mtu").and_then(|m| m.parse::<u64>().ok()) else { return };
    let Some(size) = cx.target.size else {
        cx.push(
            F::new("nic.mtu", Area::Nic, Status::Ok, format!("{i}: MTU {mtu}"))
                .why("give --size to set the datagram against it"),
        );
        return;
    };
    let packet = size + 28;
    let seen = format!("{i}: MTU {mtu}; a {size}-byte datagram is a {packet}-byte IPv4 packet");
    if packet > mtu {
        let frags = packet.saturating_sub(20).div_ceil(mtu.saturating_sub(20).max(8) / 8 * 8);
        cx.push(
            F::new("nic.mtu", Area::Nic, Status::Problem, seen)
                .why(format!(
                    "every datagram is cut into {frags} IP fragments: losing any one loses the datagram, and reassembly costs CPU and is limited by net.ipv4.ipfrag_high_thresh"
                ))
                .fix(format!("ip link set dev {i} mtu 9000   (the switch and the sender must allow jumbo frames too), or send datagrams of at most {} bytes", mtu.saturating_sub(28)))
                .effect(0.9),
        );
    } else if mtu < 9000 && cx.pps().is_some_and(|p| p > SEED004_PPS) {
        cx.push(
            F::new("nic.mtu", Area::Nic, Status::Advice, seen)
                .why("seed 004: \"use jumbo packets\": a 9000-byte MTU lets 8800-byte datagrams carry the stream at a sixth of the packet rate")
                .fix(format!("ip link set dev {i} mtu 9000   (the switch and the sender must allow it too)"))
                .effect(0.5),
        );
    } else {
        cx.push(F::new("nic.mtu", Area::Nic, Status::Ok, seen).why("the datagram fits in one frame"));
    }
}

fn speed(cx: &mut Ctx, i: &str, virt: bool) {
    let speed = cx.iface_file("speed").and_then(|s| s.parse::<i64>().ok()).filter(|s| *s > 0);
    let (Some(pps), Some(size)) = (cx.pps(), cx.target.size) else { return };
    let wire = units::wire_bits(pps, size as usize);
    match speed {
        Some(mbps) => {
            let link = mbps as f64 * 1e6;
            let seen = format!(
                "{i}: link {}; the stream needs {} on the wire (headers, preamble and gap counted)",
                units::bits(link),
                units::bits(wire)
            );
            let (status, why) = if wire > link {
                (Status::Problem, "the stream does not fit on this link: the excess is lost at the sender or a switch, never seen by this host's counters")
            } else if wire > 0.9 * link {
                (Status::Advice, "over 90 % of the link: any burst from the sender queues in the switch")
            } else {
                (Status::Ok, "the link has room")
            };
            cx.push(F::new("nic.speed", Area::Nic, status, seen).why(why).effect(if status == Status::Problem {
                0.95
            } else {
                0.1
            }));
        }
        None if virt => {}
        None => cx.push(F::new("nic.speed", Area::Nic, Status::Unknown, format!("{i}: link speed not reported"))),
    }
}

fn rings(cx: &mut Ctx, nic: &NicView, i: &str, driver: &str, virt: bool) {
    let Some(r) = nic.rings else {
        let why = if virt {
            format!(
                "a {driver} has no hardware ring: packets go straight to the backlog (see socket.netdev_max_backlog)"
            )
        } else {
            unreadable(nic, "rings")
        };
        cx.push(F::new("nic.rings", Area::Nic, Status::Unknown, format!("{i}: ring sizes not read")).why(why));
        return;
    };
    let seen = format!("{i}: rx ring {} of at most {}", r.rx, r.rx_max);
    let held = cx.pps().map(|p| r.rx as f64 / p * 1e3);
    let why = match held {
        Some(ms) => format!(
            "the ring holds {} entries, {} of the stream: a softirq delay longer than that drops at the NIC (seed 001 raised the Cassini's ring to 2048)",
            r.rx,
            ms_words(ms)
        ),
        None => "the NIC's receive ring: what it holds covers softirq delays (seed 001 raised the Cassini's ring to 2048)".into(),
    };
    let short = r.rx < r.rx_max && held.map_or(true, |ms| ms < 2.0);
    let mut f = F::new("nic.rings", Area::Nic, if short { Status::Advice } else { Status::Ok }, seen)
        .why(why)
        .effect(held.map(|ms| 0.6 * (1.0 - ms / 2.0)).unwrap_or(0.2));
    if short {
        f = f.change(Change::Rings { iface: i.into(), rx: r.rx_max });
    }
    cx.push(f);
}

fn coalesce(cx: &mut Ctx, nic: &NicView, i: &str, virt: bool) {
    let Some(c) = nic.coalesce else {
        if !virt {
            cx.push(
                F::new("nic.coalesce", Area::Nic, Status::Unknown, format!("{i}: interrupt coalescing not read"))
                    .why(unreadable(nic, "coalesce")),
            );
        }
        return;
    };
    let seen = format!(
        "{i}: rx-usecs {}, rx-frames {}, adaptive-rx {}",
        c.rx_usecs,
        c.rx_frames,
        if c.adaptive_rx { "on" } else { "off" }
    );
    let per_irq = c.rx_frames.max(1) as f64;
    let busy = cx.pps().is_some_and(|p| p > 100_000.0);
    if !c.adaptive_rx && c.rx_usecs == 0 && per_irq <= 1.0 && busy {
        let irqs = cx.pps().unwrap_or(0.0);
        cx.push(
            F::new("nic.coalesce", Area::Nic, Status::Advice, seen)
                .why(format!(
                    "an interrupt per datagram: {}/s of them; seed 001 set the Cassini to interrupt after 128 packets or a time-out",
                    units::thousands(irqs as u64)
                ))
                .change(Change::Coalesce { iface: i.into(), rx_usecs: 50, rx_frames: 64 })
                .effect(0.35),
        );
    } else {
        cx.push(F::new("nic.coalesce", Area::Nic, Status::Ok, seen).why("interrupts are moderated"));
    }
}

fn features(cx: &mut Ctx, nic: &NicView, i: &str) {
    let Some(fs) = &nic.features else {
        cx.push(
            F::new("nic.offloads", Area::Nic, Status::Unknown, format!("{i}: offloads not read"))
                .why(unreadable(nic, "features")),
        );
        return;
    };
    let get = |n: &str| fs.iter().find(|f| f.name == n);
    let mut off = Vec::new();
    let mut changes = Vec::new();
    for (name, what) in
        [("rx-checksum", "receive checksums (the CPU checks every datagram instead)"), ("rx-gro", "GRO")]
    {
        if let Some(f) = get(name) {
            if !f.active {
                off.push(what);
                if f.changeable {
                    changes.push(Change::Feature { iface: i.into(), feature: name.into(), on: true });
                }
            }
        }
    }
    let state = |n: &str| get(n).map(|f| if f.active { "on" } else { "off" }).unwrap_or("absent");
    let seen = format!(
        "{i}: rx-checksum {}, rx-gro {}, rx-udp-gro-forwarding {}",
        state("rx-checksum"),
        state("rx-gro"),
        state("rx-udp-gro-forwarding")
    );
    if off.is_empty() {
        cx.push(F::new("nic.offloads", Area::Nic, Status::Ok, seen).why("receive checksum offload and GRO are on"));
        return;
    }
    let mut f =
        F::new("nic.offloads", Area::Nic, Status::Advice, seen).why(format!("off: {}", off.join("; "))).effect(0.25);
    for c in changes {
        f = f.change(c);
    }
    cx.push(f);
}

fn channels(cx: &mut Ctx, nic: &NicView, i: &str) {
    let Some(c) = nic.channels else { return };
    let n = c.combined.max(c.rx);
    cx.push(
        F::new("nic.channels", Area::Nic, Status::Ok, format!("{i}: {n} receive queue(s), at most {}", c.max_combined.max(n)))
            .why("one stream (one address and port pair) hashes to one queue, so one CPU takes its interrupts whatever the count; several streams spread over the queues"),
    );
}

fn numa(cx: &mut Ctx, i: &str, virt: bool) {
    if virt {
        return;
    }
    let node = cx.iface_file("device/numa_node").and_then(|n| n.parse::<i64>().ok());
    let Some(topo) = cx.topo.clone() else { return };
    let nodes = topo.nodes();
    if nodes.len() < 2 {
        cx.push(
            F::new("nic.numa", Area::Nic, Status::Ok, format!("{i}: one NUMA node on this host"))
                .why("no interconnect between the NIC and any CPU"),
        );
        return;
    }
    let Some(node) = node.filter(|n| *n >= 0).map(|n| n as usize) else {
        cx.push(
            F::new("nic.numa", Area::Nic, Status::Unknown, format!("{i}: the NIC's NUMA node is not reported"))
                .why(format!("this host has {} NUMA nodes", nodes.len())),
        );
        return;
    };
    let local: std::collections::BTreeSet<usize> =
        topo.node_of.iter().filter(|(_, n)| **n == node).map(|(c, _)| *c).collect();
    let list = crate::testbed::topology::format_cpu_list(&local);
    match cx.target.cpu {
        Some(cpu) if topo.node(cpu) != node => cx.push(
            F::new(
                "nic.numa",
                Area::Nic,
                Status::Problem,
                format!("{i} is on NUMA node {node} (CPUs {list}); the capture CPU {cpu} is on node {}", topo.node(cpu)),
            )
            .why("every datagram the NIC writes into node-local memory is read across the interconnect, and the interrupts land on the NIC's node")
            .fix(format!("capture on a CPU of node {node}: --cpu {}", local.iter().next().copied().unwrap_or(0)))
            .effect(0.5),
        ),
        Some(cpu) => cx.push(
            F::new("nic.numa", Area::Nic, Status::Ok, format!("{i} and the capture CPU {cpu} are both on NUMA node {node}"))
                .why("packets are read from local memory"),
        ),
        None => cx.push(
            F::new("nic.numa", Area::Nic, Status::Advice, format!("{i} is on NUMA node {node} (CPUs {list})"))
                .why("a capture thread on another node reads every datagram across the interconnect")
                .fix(format!("pin the capture there: --cpu {} (or --cpus from {list})", local.iter().next().copied().unwrap_or(0)))
                .effect(0.3),
        ),
    }
}

/// Whether a driver counter's name says it counts drops or errors.
pub fn is_drop_counter(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    (n.contains("rx") || !n.contains("tx"))
        && ["drop", "miss", "err", "fifo", "over", "no_buf", "nobuf", "discard", "fail"].iter().any(|w| n.contains(w))
}

fn counters(cx: &mut Ctx, nic: &NicView, i: &str) {
    let mut hits: Vec<(String, u64)> = Vec::new();
    for name in ["rx_dropped", "rx_missed_errors", "rx_fifo_errors", "rx_over_errors", "rx_errors", "rx_crc_errors"] {
        if let Some(v) = cx.iface_file(&format!("statistics/{name}")).and_then(|v| v.parse::<u64>().ok()) {
            let also_driver = nic.stats.as_ref().is_some_and(|s| s.contains_key(name));
            if v > 0 && !also_driver {
                hits.push((name.to_string(), v));
            }
        }
    }
    let have_stats = nic.stats.is_some();
    if let Some(s) = &nic.stats {
        for (k, v) in s {
            if *v > 0 && is_drop_counter(k) {
                hits.push((k.clone(), *v));
            }
        }
    }
    hits.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    if hits.is_empty() {
        let src = if have_stats { "ethtool -S and /sys/class/net statistics" } else { "/sys/class/net statistics" };
        cx.push(
            F::new("nic.counters", Area::Nic, Status::Ok, format!("{i}: no drop or error counter above 0 ({src})"))
                .why("the NIC and driver admit no loss"),
        );
        return;
    }
    let list: Vec<String> = hits.iter().take(6).map(|(k, v)| format!("{k} {}", units::thousands(*v))).collect();
    cx.push(
        F::new("nic.counters", Area::Nic, Status::Problem, format!("{i}: {}", list.join(", ")))
            .why("the NIC or its driver dropped packets before the stack saw them (since the driver loaded): rings, coalescing and interrupt placement above are where seed 001 looked")
            .fix(format!("watch them during a run: watch -d 'ethtool -S {i} | grep -Ei \"drop|miss|err|fifo|over\"'"))
            .effect(0.8),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_counters_are_told_from_others() {
        for n in [
            "rx_dropped",
            "rx_missed_errors",
            "rx_queue_0_drops",
            "rx_fifo_errors",
            "rx_no_buffer_count",
            "port.rx_discards",
        ] {
            assert!(is_drop_counter(n), "{n}");
        }
        for n in ["rx_packets", "tx_errors", "rx_bytes", "tx_dropped"] {
            assert!(!is_drop_counter(n), "{n}");
        }
    }
}
