//! Socket buffers and the kernel's queues in front of them: the first thing seed 004 changed
//! (`net.core.rmem_max` to 16 MB) and the first resource seed 001 found exhausted.

use super::{hold_ms, ms_words, Ctx, F, HOLD_MS, RECV_DEFAULT_RCVBUF};
use crate::doctor::{Area, Change, Status};
use wirespeed::units;

/// The receive buffer cap a stream needs: what `wirespeed recv` asks for by default, or
/// [`HOLD_MS`] of the stream when that is more, rounded up to a MiB; at most 1 GiB (the largest
/// `--rcvbuf`).
pub fn rmem_wanted(bytes_per_s: Option<f64>) -> u64 {
    let hold = bytes_per_s.map(|b| b * HOLD_MS / 1e3).unwrap_or(0.0);
    let mib = (hold / (1u64 << 20) as f64).ceil() as u64;
    RECV_DEFAULT_RCVBUF.max(mib << 20).min(1 << 30)
}

/// The backlog a stream needs where packets wait in it (veth, loopback, RPS): 5 ms of its
/// datagrams, at least the kernel's default 1000.
pub fn backlog_wanted(pps: f64) -> u64 {
    ((pps * 5e-3).ceil() as u64).max(1000).next_power_of_two()
}

/// Read the socket layer.
pub fn check(cx: &mut Ctx) {
    rmem_max(cx);
    rmem_default(cx);
    wmem_max(cx);
    backlog(cx);
    udp_errors(cx);
}

fn rmem_max(cx: &mut Ctx) {
    let Some(max) = cx.sysctl_u64("net.core.rmem_max") else {
        cx.push(F::new("socket.rmem_max", Area::Socket, Status::Unknown, "net.core.rmem_max cannot be read"));
        return;
    };
    let want = rmem_wanted(cx.bytes_per_s());
    let seen = format!("net.core.rmem_max = {max} ({})", units::bytes(max));
    let f = match cx.bytes_per_s() {
        Some(bps) => {
            let held = hold_ms(max as f64, bps);
            let why = format!(
                "a socket may ask for at most this: a {} buffer holds {} at {}; a capture thread kept off its CPU for longer (a tick, another task, seed 004's sporadic processes) loses datagrams at the socket (wirespeed run with CAP_NET_ADMIN forces its --rcvbuf past the cap; a user's recorder, tcpdump or spead2 cannot)",
                units::bytes(max),
                ms_words(held),
                cx.rate_words()
            );
            let status = if held < HOLD_MS / 4.0 {
                Status::Problem
            } else if max < want {
                Status::Advice
            } else {
                Status::Ok
            };
            F::new("socket.rmem_max", Area::Socket, status, seen).why(why).effect(1.0 - held / HOLD_MS)
        }
        None => {
            let status = if max < want { Status::Advice } else { Status::Ok };
            F::new("socket.rmem_max", Area::Socket, status, seen)
                .why(format!(
                    "a socket may ask for at most this; wirespeed recv asks for {} (--rcvbuf), seed 004 lost far less with a few MB than with Linux's default",
                    units::bytes(RECV_DEFAULT_RCVBUF)
                ))
                .effect(if max < want { 0.5 } else { 0.0 })
        }
    };
    let f = if max < want {
        f.change(Change::Sysctl { key: "net.core.rmem_max".into(), value: want.to_string() })
    } else {
        f
    };
    cx.push(f);
}

fn rmem_default(cx: &mut Ctx) {
    let Some(v) = cx.sysctl_u64("net.core.rmem_default") else { return };
    let want: u64 = 4 << 20;
    let seen = format!("net.core.rmem_default = {v} ({})", units::bytes(v));
    let why = match cx.bytes_per_s() {
        Some(bps) => format!(
            "what a program that does not ask (tcpdump -B unset, most scripts) gets: {} of {}; wirespeed asks for its own",
            ms_words(hold_ms(v as f64, bps)),
            cx.rate_words()
        ),
        None => "what a program that does not ask gets; wirespeed asks for its own (--rcvbuf)".into(),
    };
    let f = F::new("socket.rmem_default", Area::Socket, if v < want { Status::Advice } else { Status::Ok }, seen)
        .why(why)
        .effect(0.1);
    cx.push(if v < want {
        f.change(Change::Sysctl { key: "net.core.rmem_default".into(), value: want.to_string() })
    } else {
        f
    });
}

fn wmem_max(cx: &mut Ctx) {
    let Some(v) = cx.sysctl_u64("net.core.wmem_max") else { return };
    let want: u64 = 4 << 20;
    let seen = format!("net.core.wmem_max = {v} ({})", units::bytes(v));
    let f = F::new("socket.wmem_max", Area::Socket, if v < want { Status::Advice } else { Status::Ok }, seen)
        .why("for a sender on this host: a small send buffer makes a paced sender block and burst (seed 001's sender topped out at 574 Mb/s before tuning)")
        .effect(0.05);
    cx.push(if v < want {
        f.change(Change::Sysctl { key: "net.core.wmem_max".into(), value: want.to_string() })
    } else {
        f
    });
}

/// Per-CPU softnet rows: (cpu, dropped, time_squeeze). Rows are per online CPU in order; the
/// 13th column, where present, names the CPU.
pub fn softnet(text: &str) -> Vec<(usize, u64, u64)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let c: Vec<&str> = l.split_whitespace().collect();
            let h = |k: usize| c.get(k).and_then(|v| u64::from_str_radix(v, 16).ok());
            let cpu = h(12).map(|v| v as usize).unwrap_or(i);
            Some((cpu, h(1)?, h(2)?))
        })
        .collect()
}

/// Whether datagrams for this interface wait in the per-CPU backlog before the stack: veth
/// and loopback hand packets over that way, and so does a NIC with RPS on.
fn uses_backlog(cx: &Ctx) -> Option<String> {
    let i = cx.iface.as_ref()?;
    match driver_name(cx).as_deref() {
        Some("loopback") => return Some("loopback queues every packet in the backlog".into()),
        Some("veth") => return Some("a veth hands every packet to the backlog of the sending CPU".into()),
        _ => {}
    }
    let dir = cx.root.path(&format!("/sys/class/net/{i}/queues"));
    let rd = std::fs::read_dir(dir).ok()?;
    for e in rd.flatten() {
        if !e.file_name().to_string_lossy().starts_with("rx-") {
            continue;
        }
        let v = std::fs::read_to_string(e.path().join("rps_cpus")).unwrap_or_default();
        if v.trim().trim_start_matches(['0', ',']).chars().any(|c| c != '0' && c != ',') {
            return Some(format!("RPS is on for {i}: packets wait in the backlog of the CPU RPS picks"));
        }
    }
    None
}

/// The interface's driver as sysfs names it (`/sys/class/net/IF/device/driver` link), or
/// `veth`/`loopback` for the virtual devices that have none.
pub fn driver_name(cx: &Ctx) -> Option<String> {
    let i = cx.iface.as_ref()?;
    if let Ok(p) = std::fs::read_link(cx.root.path(&format!("/sys/class/net/{i}/device/driver"))) {
        return p.file_name().map(|n| n.to_string_lossy().into_owned());
    }
    if i == "lo" {
        return Some("loopback".into());
    }
    // A virtual device: its kind is in uevent (DEVTYPE) or, for veth, the peer's ifindex file.
    let uevent = cx.root.read(&format!("/sys/class/net/{i}/uevent")).unwrap_or_default();
    if let Some(t) = uevent.lines().find_map(|l| l.strip_prefix("DEVTYPE=")) {
        return Some(t.trim().to_string());
    }
    if cx.root.path(&format!("/sys/class/net/{i}/iflink")).exists() {
        let ifindex = cx.iface_file("ifindex");
        let iflink = cx.iface_file("iflink");
        if ifindex.is_some() && iflink.is_some() && ifindex != iflink {
            return Some("veth".into());
        }
    }
    None
}

fn backlog(cx: &mut Ctx) {
    let rows = cx.root.read("/proc/net/softnet_stat").map(|t| softnet(&t)).unwrap_or_default();
    let dropped: u64 = rows.iter().map(|r| r.1).sum();
    let squeezed: u64 = rows.iter().map(|r| r.2).sum();
    let Some(max) = cx.sysctl_u64("net.core.netdev_max_backlog") else {
        cx.push(F::new(
            "socket.netdev_max_backlog",
            Area::Socket,
            Status::Unknown,
            "net.core.netdev_max_backlog cannot be read (it belongs to the host: inside a network namespace other than the host's it is not shown)",
        ));
        return;
    };
    let path = uses_backlog(cx);
    let want = cx.pps().map(backlog_wanted).unwrap_or(1000).max(max);
    let mut seen = format!("net.core.netdev_max_backlog = {max}");
    if !rows.is_empty() {
        seen.push_str(&format!("; softnet dropped {dropped} since boot"));
        let per: Vec<String> = rows.iter().filter(|r| r.1 > 0).map(|r| format!("CPU {} {}", r.0, r.1)).collect();
        if !per.is_empty() {
            seen.push_str(&format!(" ({})", per.join(", ")));
        }
    }
    let held = cx.pps().map(|p| max as f64 / p * 1e3);
    let why = match (&path, held) {
        _ if dropped > 0 && path.is_none() => format!(
            "the per-CPU backlog overflowed {dropped} times since boot: packets queued there (veth, loopback, RPS, a driver without NAPI) were dropped before the stack; {max} packets is the cap"
        ),
        (Some(p), Some(ms)) => format!(
            "{p}; {max} packets hold {} of {} datagrams/s: the backlog overflows (softnet dropped) when the softirq falls behind longer",
            ms_words(ms),
            units::thousands(cx.pps().unwrap_or(0.0) as u64)
        ),
        (Some(p), None) => format!("{p}: the backlog holds {max} packets per CPU"),
        (None, _) => "the per-CPU queue in front of the stack; a NIC without RPS delivers past it, so it matters only for veth, loopback and RPS".into(),
    };
    let (status, effect) = if dropped > 0 {
        (Status::Problem, 0.7)
    } else if path.is_some() && held.is_some_and(|ms| ms < 5.0) {
        (Status::Advice, 0.4)
    } else {
        (Status::Ok, 0.0)
    };
    let mut f = F::new("socket.netdev_max_backlog", Area::Socket, status, seen).why(why).effect(effect);
    if status != Status::Ok && want > max {
        f = f.change(Change::Sysctl { key: "net.core.netdev_max_backlog".into(), value: want.to_string() });
    }
    cx.push(f);
    if squeezed > 0 {
        let budget = cx.sysctl_u64("net.core.netdev_budget").unwrap_or(300);
        let usecs = cx.sysctl_u64("net.core.netdev_budget_usecs").unwrap_or(2000);
        let mut f = F::new(
            "socket.netdev_budget",
            Area::Socket,
            Status::Advice,
            format!("softnet time_squeeze {squeezed} since boot; net.core.netdev_budget = {budget}, netdev_budget_usecs = {usecs}"),
        )
        .why("the receive softirq ran out of budget with packets still waiting (time_squeeze): they wait for the next round, and the NIC ring or backlog fills meanwhile")
        .effect(0.3);
        if budget < 600 {
            f = f.change(Change::Sysctl { key: "net.core.netdev_budget".into(), value: "600".into() });
        }
        if usecs < 8000 {
            f = f.change(Change::Sysctl { key: "net.core.netdev_budget_usecs".into(), value: "8000".into() });
        }
        cx.push(f);
    }
}

fn udp_errors(cx: &mut Ctx) {
    let Some(t) = cx.root.read("/proc/net/snmp") else { return };
    let mut lines = t.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(head), Some(vals)) = (lines.next(), lines.next()) else { return };
    let get = |name: &str| {
        head.split_whitespace()
            .zip(vals.split_whitespace())
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.parse::<u64>().ok())
    };
    let rcvbuf = get("RcvbufErrors").unwrap_or(0);
    let inerr = get("InErrors").unwrap_or(0);
    let seen = format!("UDP RcvbufErrors {rcvbuf}, InErrors {inerr} since boot (this network namespace)");
    if rcvbuf > 0 {
        cx.push(
            F::new("socket.udp_errors", Area::Socket, Status::Advice, seen)
                .why("sockets here have already dropped datagrams at full receive buffers: the buffer findings above say how much a buffer holds")
                .effect(0.2),
        );
    } else {
        cx.push(
            F::new("socket.udp_errors", Area::Socket, Status::Ok, seen)
                .why("no socket here has dropped at a full buffer"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wanted_cap_covers_the_default_request_and_twenty_ms() {
        assert_eq!(rmem_wanted(None), 32 << 20);
        assert_eq!(rmem_wanted(Some(4e9 / 8.0)), 32 << 20);
        // 40 Gb/s: 20 ms is 100 MB, rounded up to 96 MiB.
        assert_eq!(rmem_wanted(Some(40e9 / 8.0)), 96 << 20);
        assert_eq!(rmem_wanted(Some(1e12)), 1 << 30);
    }

    #[test]
    fn softnet_rows_give_drops_and_squeezes_per_cpu() {
        let t = "0000a000 00000002 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n\
                 0000b000 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001\n";
        assert_eq!(softnet(t), vec![(0, 2, 3), (1, 0, 1)]);
    }

    #[test]
    fn backlog_wants_five_ms() {
        assert_eq!(backlog_wanted(100_000.0), 1024);
        assert_eq!(backlog_wanted(1_000_000.0), 8192);
    }
}
