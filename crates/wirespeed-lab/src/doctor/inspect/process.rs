//! The capturing process and what it needs from the host: scheduling priority (seed 004: a
//! receiver at nice -20 took twice the rate of one at +20), locked memory for the ring, huge
//! pages (a ring that is ready at once), realtime throttling, and, for `record`, the disk's
//! measured rate against the stream's.

use super::{has_cap, Ctx, F};
use crate::doctor::{Area, Status};
use wirespeed::units;

/// A `record` ring's default size (`record --buffer 1G`).
const RING_DEFAULT: u64 = 1 << 30;

/// Bytes the disk test writes: enough to pass the drive's write cache on most disks, short
/// enough to run in a few seconds.
const DISK_TEST_BYTES: u64 = 512 << 20;

/// Set the process's limits against the stream.
pub fn check(cx: &mut Ctx) {
    priority(cx);
    memlock(cx);
    hugepages(cx);
    disk(cx);
}

/// The soft limit of a `/proc/PID/limits` row (`Max locked memory`), `None` for unlimited.
pub fn limit(limits: &str, row: &str) -> Option<Option<u64>> {
    let l = limits.lines().find(|l| l.starts_with(row))?;
    let soft = l.get(row.len()..)?.split_whitespace().next()?;
    Some(if soft == "unlimited" { None } else { soft.parse().ok() })
}

fn priority(cx: &mut Ctx) {
    let status = cx.root.read("/proc/self/status").unwrap_or_default();
    let nice = cx
        .root
        .read_line("/proc/self/stat")
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.split_whitespace().nth(16).and_then(|v| v.parse::<i32>().ok())))
        .flatten();
    let sys_nice = has_cap(&status, 23);
    let rt_runtime = cx.root.read_line("/proc/sys/kernel/sched_rt_runtime_us");
    let throttled = rt_runtime.as_deref() != Some("-1");
    let seen = format!(
        "a receiver started here runs at nice {}; {}; RT throttling {}",
        nice.map(|n| n.to_string()).unwrap_or_else(|| "?".into()),
        if sys_nice {
            "raising priority is allowed (CAP_SYS_NICE)"
        } else {
            "raising priority is not allowed (no CAP_SYS_NICE)"
        },
        match rt_runtime.as_deref() {
            Some("-1") => "off (kernel.sched_rt_runtime_us = -1)".to_string(),
            Some(v) => format!("on (a realtime task gets at most {v} us per second)"),
            None => "unknown".into(),
        }
    );
    let mut f = F::new("process.priority", Area::Process, Status::Advice, seen)
        .why("seed 004: a receiver at nice -20 took about twice the rate of one at +20, most at high packet rates; at normal priority any other task takes turns with the capture")
        .effect(0.35);
    if sys_nice {
        f = f.fix("wirespeed recv ... --priority -20   (or --realtime: SCHED_FIFO, bounded by RLIMIT_RTTIME)");
    } else {
        f = f.fix("run the receiver as root to use --priority -20 or --realtime");
    }
    if !throttled {
        f = f.fix(
            "sysctl -w kernel.sched_rt_runtime_us=950000   (wirespeed refuses --realtime while RT throttling is off)",
        );
    }
    cx.push(f);
}

fn memlock(cx: &mut Ctx) {
    let status = cx.root.read("/proc/self/status").unwrap_or_default();
    let ipc_lock = has_cap(&status, 14);
    let Some(limits) = cx.root.read("/proc/self/limits") else { return };
    let Some(lim) = limit(&limits, "Max locked memory") else { return };
    let seen = format!(
        "locked-memory limit {}{}",
        lim.map(units::bytes).unwrap_or_else(|| "unlimited".into()),
        if ipc_lock { " (CAP_IPC_LOCK: no limit applies)" } else { "" }
    );
    if ipc_lock || lim.map_or(true, |l| l >= RING_DEFAULT) {
        cx.push(
            F::new("process.memlock", Area::Process, Status::Ok, seen)
                .why("record's ring can be locked in RAM: no page fault on the capture path"),
        );
    } else {
        cx.push(
            F::new("process.memlock", Area::Process, Status::Advice, seen)
                .why(format!("record's ring ({} by default) cannot be locked: a page of it swapped out is a fault on the capture path", units::bytes(RING_DEFAULT)))
                .fix("ulimit -l unlimited   (in the shell that starts the recorder; LimitMEMLOCK=infinity in a systemd unit), or run it as root")
                .effect(0.15),
        );
    }
}

/// A `/proc/meminfo` row in kB (or a count for HugePages_*).
fn meminfo(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
}

fn hugepages(cx: &mut Ctx) {
    let Some(mi) = cx.root.read("/proc/meminfo") else { return };
    let free = meminfo(&mi, "HugePages_Free").unwrap_or(0);
    let size_kb = meminfo(&mi, "Hugepagesize").unwrap_or(2048);
    let thp = cx.root.read_line("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let thp_mode = thp.split_whitespace().find(|w| w.starts_with('[')).map(|w| w.trim_matches(['[', ']']).to_string());
    let reserved = free * size_kb * 1024;
    let seen = format!(
        "{} huge pages free ({}); transparent huge pages {}",
        free,
        units::bytes(reserved),
        thp_mode.clone().unwrap_or_else(|| "unknown".into())
    );
    if reserved >= RING_DEFAULT {
        cx.push(
            F::new("process.hugepages", Area::Process, Status::Ok, seen)
                .why("record's ring is mapped with huge pages: ready at once, fewer TLB misses"),
        );
    } else if matches!(thp_mode.as_deref(), Some("always") | Some("madvise")) {
        cx.push(
            F::new("process.hugepages", Area::Process, Status::Ok, seen)
                .why("record asks for transparent huge pages for its ring (MADV_HUGEPAGE); reserved ones (vm.nr_hugepages) would make it ready faster"),
        );
    } else {
        let pages = RING_DEFAULT / (size_kb * 1024).max(1);
        cx.push(
            F::new("process.hugepages", Area::Process, Status::Advice, seen)
                .why("record's ring falls back to 4 KiB pages: slower to make ready and more TLB misses on the capture path")
                .fix(format!("sysctl -w vm.nr_hugepages={pages}   (reserves {} of RAM for huge pages)", units::bytes(RING_DEFAULT)))
                .effect(0.1),
        );
    }
}

fn disk(cx: &mut Ctx) {
    let Some(dir) = cx.target.disk.clone() else { return };
    if !cx.root.is_live() {
        cx.push(F::new(
            "disk.rate",
            Area::Disk,
            Status::Unknown,
            format!("{}: a snapshot's disk cannot be measured", dir.display()),
        ));
        return;
    }
    let t = match wirespeed::record::disk_test(&dir, DISK_TEST_BYTES, 8 << 20, true, cx.stop) {
        Ok(t) => t,
        Err(e) => {
            cx.push(
                F::new("disk.rate", Area::Disk, Status::Unknown, format!("{}: not measured", dir.display()))
                    .why(e.to_string()),
            );
            return;
        }
    };
    let seen = format!(
        "{}: {:.2} GB/s ({}) with record's own writes (8 MiB O_DIRECT, {} written)",
        dir.display(),
        t.bytes_per_s / 1e9,
        units::bits(t.bytes_per_s * 8.0),
        units::bytes(t.bytes)
    );
    let Some(need) = cx.bytes_per_s() else {
        cx.push(F::new("disk.rate", Area::Disk, Status::Ok, seen).why("give --for RATE to set it against a stream"));
        return;
    };
    let free = wirespeed::sys::free_space(&dir).ok();
    let hours = free.map(|f| f as f64 / need / 3600.0);
    if t.bytes_per_s < need {
        let lasts = RING_DEFAULT as f64 / (need - t.bytes_per_s);
        cx.push(
            F::new("disk.rate", Area::Disk, Status::Problem, seen)
                .why(format!(
                    "the stream needs {}: the ring fills at {} and a {} ring lasts {:.1} s before record drops datagrams (ring-full)",
                    units::bits(need * 8.0),
                    units::bits((need - t.bytes_per_s) * 8.0),
                    units::bytes(RING_DEFAULT),
                    lasts
                ))
                .fix("record to a faster disk or several (one --threads series per disk), or lower the rate; a larger --buffer only lengthens the burst it absorbs")
                .effect(0.95),
        );
    } else {
        cx.push(F::new("disk.rate", Area::Disk, Status::Ok, seen).why(format!(
            "{:.1}x the stream's {}{}",
            t.bytes_per_s / need,
            units::bits(need * 8.0),
            hours.map(|h| format!("; the free space holds {h:.1} h of it")).unwrap_or_default()
        )));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_rows_are_read() {
        let t = "Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         8388608              8388608              bytes\nMax realtime timeout      unlimited            unlimited            us\n";
        assert_eq!(limit(t, "Max locked memory"), Some(Some(8_388_608)));
        assert_eq!(limit(t, "Max realtime timeout"), Some(None));
        assert_eq!(limit(t, "Max nothing"), None);
        assert_eq!(meminfo("HugePages_Free:      12\nHugepagesize:    2048 kB\n", "Hugepagesize"), Some(2048));
    }
}
