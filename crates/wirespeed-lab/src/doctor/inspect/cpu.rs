//! The capture CPU: its frequency governor, whether it is kept for the capture (isolcpus,
//! nohz_full, a cpuset), its SMT sibling, and what else ran on it. Seed 001 gave the recorder
//! a processor set of its own; seed 004 found a receiver sharing its CPU with "sporadic
//! processes" took half the rate.

use super::{Ctx, F};
use crate::doctor::{Area, Status};
use crate::testbed::topology::{format_cpu_list, parse_cpu_list};
use std::collections::BTreeMap;
use std::time::Duration;

/// Set the capture CPU against the stream.
pub fn check(cx: &mut Ctx) {
    let Some(cpu) = cx.target.cpu else {
        cx.push(
            F::new("cpu.capture", Area::Cpu, Status::Advice, "no capture CPU given")
                .why("an unpinned capture thread is moved between CPUs and shares them with everything else; give --cpu N here and to recv/record")
                .effect(0.15),
        );
        return;
    };
    if cx.topo.as_ref().is_some_and(|t| !t.online.contains(&cpu)) {
        return;
    }
    governor(cx, cpu);
    isolation(cx, cpu);
    smt(cx, cpu);
    load(cx, cpu);
}

fn governor(cx: &mut Ctx, cpu: usize) {
    let p = format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor");
    match cx.root.read_line(&p) {
        None => {
            cx.push(F::new("cpu.governor", Area::Cpu, Status::Unknown, format!("CPU {cpu}: no cpufreq governor")).why(
                "the frequency is not under the kernel's control here (a virtual machine, or fixed by the firmware)",
            ))
        }
        Some(g) if g == "performance" => cx.push(
            F::new("cpu.governor", Area::Cpu, Status::Ok, format!("CPU {cpu}: governor {g}"))
                .why("the CPU stays at full speed"),
        ),
        Some(g) => cx.push(
            F::new("cpu.governor", Area::Cpu, Status::Advice, format!("CPU {cpu}: governor {g}"))
                .why("the clock drops while the capture waits between batches, and each burst then starts slow")
                .fix(format!("echo performance > {p}"))
                .effect(0.2),
        ),
    }
}

/// The value of `key=` on the kernel command line, if given.
pub fn cmdline_value(cmdline: &str, key: &str) -> Option<String> {
    cmdline.split_whitespace().find_map(|w| w.strip_prefix(&format!("{key}="))).map(str::to_string)
}

/// The CPU list an `isolcpus=` value names (flags such as `domain,managed_irq,` dropped).
pub fn isolcpus_list(v: &str) -> Option<std::collections::BTreeSet<usize>> {
    let cpus: Vec<&str> = v.split(',').filter(|p| p.chars().next().is_some_and(|c| c.is_ascii_digit())).collect();
    parse_cpu_list(&cpus.join(",")).ok()
}

fn isolation(cx: &mut Ctx, cpu: usize) {
    let cmdline = cx.root.read_line("/proc/cmdline").unwrap_or_default();
    let isolated = cx
        .root
        .read_line("/sys/devices/system/cpu/isolated")
        .and_then(|s| parse_cpu_list(&s).ok())
        .or_else(|| cmdline_value(&cmdline, "isolcpus").and_then(|v| isolcpus_list(&v)))
        .unwrap_or_default();
    let nohz = cmdline_value(&cmdline, "nohz_full").and_then(|v| parse_cpu_list(&v).ok()).unwrap_or_default();
    let seen = format!(
        "CPU {cpu}: isolated CPUs {}, nohz_full {}",
        if isolated.is_empty() { "none".into() } else { format_cpu_list(&isolated) },
        if nohz.is_empty() { "none".into() } else { format_cpu_list(&nohz) }
    );
    if isolated.contains(&cpu) {
        let why = if nohz.contains(&cpu) {
            "the scheduler puts nothing else there and the tick is off while one task runs"
        } else {
            "the scheduler puts nothing else there (nohz_full would also stop the tick)"
        };
        cx.push(F::new("cpu.isolation", Area::Cpu, Status::Ok, seen).why(why));
    } else {
        cx.push(
            F::new("cpu.isolation", Area::Cpu, Status::Advice, seen)
                .why("any task may be scheduled on the capture CPU; seed 001 gave the recorder a processor set of its own (psrset)")
                .fix(format!("isolcpus={cpu} nohz_full={cpu} on the kernel command line (a reboot), or give the receiver a partition of its own: wirespeed partition create -p 1 -c <other CPUs> -p 2 -c {cpu}"))
                .effect(0.3),
        );
    }
}

fn smt(cx: &mut Ctx, cpu: usize) {
    let Some(t) = cx.topo.clone() else { return };
    let Some(core) = t.core_of(cpu) else { return };
    let sib: Vec<usize> = core.iter().copied().filter(|c| *c != cpu).collect();
    if sib.is_empty() {
        cx.push(
            F::new("cpu.smt", Area::Cpu, Status::Ok, format!("CPU {cpu} has a core of its own"))
                .why("no SMT sibling shares its execution units"),
        );
        return;
    }
    let list: Vec<String> = sib.iter().map(|c| c.to_string()).collect();
    cx.push(
        F::new("cpu.smt", Area::Cpu, Status::Advice, format!("CPU {cpu} shares its core with CPU {}", list.join(",")))
            .why("whatever runs on the sibling (the writer, the sender, another capture thread) takes half of the core's execution units from the capture")
            .fix(format!(
                "keep CPU {} idle (echo 0 > /sys/devices/system/cpu/cpu{}/online), or put the writer elsewhere (--writer-cpu)",
                list.join(","),
                sib[0]
            ))
            .effect(0.2),
    );
}

/// CPU time of every thread that last ran on `cpu`, read from /proc/[pid]/task/[tid]/stat:
/// (pid, tid) -> (comm, utime + stime in ticks).
fn tasks_on(cpu: usize) -> BTreeMap<(u32, u32), (String, u64)> {
    let mut out = BTreeMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    for p in procs.flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else { continue };
        for t in tasks.flatten() {
            let Ok(tid) = t.file_name().to_string_lossy().parse::<u32>() else { continue };
            let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else { continue };
            if let Some((comm, ticks, last)) = parse_stat(&stat) {
                if last == cpu {
                    out.insert((pid, tid), (comm, ticks));
                }
            }
        }
    }
    out
}

/// From a /proc/.../stat line: the command name, utime + stime (ticks) and the CPU it last ran on.
pub fn parse_stat(stat: &str) -> Option<(String, u64, usize)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // Fields after the name start at field 3 (state); utime is field 14, stime 15, processor 39.
    let f = |n: usize| rest.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some((comm, f(14)? + f(15)?, f(39)? as usize))
}

fn load(cx: &mut Ctx, cpu: usize) {
    if !cx.root.is_live() {
        cx.push(
            F::new(
                "cpu.load",
                Area::Cpu,
                Status::Unknown,
                format!("CPU {cpu}: what else runs there is not in a snapshot"),
            )
            .why("it is sampled from the live system's processes"),
        );
        return;
    }
    const SAMPLE: Duration = Duration::from_millis(500);
    let me = std::process::id();
    let a = tasks_on(cpu);
    std::thread::sleep(SAMPLE);
    let b = tasks_on(cpu);
    // /proc counts in USER_HZ, 100 on every architecture Linux exports to user space here.
    let hz = 100.0;
    let mut busy: Vec<(String, u32, f64)> = b
        .iter()
        .filter(|((pid, _), _)| *pid != me)
        .filter_map(|(k, (comm, t1))| {
            let t0 = a.get(k).map(|x| x.1).unwrap_or(*t1);
            let share = (t1.saturating_sub(t0)) as f64 / hz / SAMPLE.as_secs_f64();
            (share >= 0.02).then(|| (comm.clone(), k.0, share))
        })
        .collect();
    busy.sort_by(|x, y| y.2.partial_cmp(&x.2).unwrap_or(std::cmp::Ordering::Equal));
    let total: f64 = busy.iter().map(|x| x.2).sum();
    if busy.is_empty() {
        cx.push(
            F::new(
                "cpu.load",
                Area::Cpu,
                Status::Ok,
                format!("CPU {cpu}: nothing else used 2 % of it over {} ms", SAMPLE.as_millis()),
            )
            .why("the capture thread would have the CPU to itself"),
        );
        return;
    }
    let list: Vec<String> = busy.iter().take(4).map(|(c, p, s)| format!("{c} (pid {p}) {:.0} %", s * 100.0)).collect();
    let status = if total >= 0.10 { Status::Problem } else { Status::Advice };
    let first = &busy[0];
    cx.push(
        F::new("cpu.load", Area::Cpu, status, format!("CPU {cpu} over {} ms: {}", SAMPLE.as_millis(), list.join(", ")))
            .why(format!(
                "other tasks took {:.0} % of the capture CPU: while they run, datagrams wait in the socket buffer; seed 004 found a receiver beside sporadic processes took half the rate at normal priority",
                (total * 100.0).min(100.0)
            ))
            .fix(format!("move them: taskset -apc <other CPUs> {}", first.1))
            .fix("or run the receiver above them: wirespeed recv ... --priority -20 (or --realtime)")
            .effect((total * 2.0).min(0.9)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_name_ticks_and_cpu() {
        let s = "4242 (my (odd) name) R 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 1000 1000000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(parse_stat(s), Some(("my (odd) name".into(), 300, 1)));
    }

    #[test]
    fn isolcpus_flags_are_dropped() {
        assert_eq!(isolcpus_list("domain,managed_irq,2-3"), Some([2, 3].into_iter().collect()));
        assert_eq!(cmdline_value("quiet isolcpus=1 nohz_full=1", "nohz_full").as_deref(), Some("1"));
    }
}
