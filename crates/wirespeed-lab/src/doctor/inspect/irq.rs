//! Which CPUs serve the NIC's interrupts, against the capture CPU: seed 001 took interrupt
//! handling off the recorder's processors (`psradm -i`) and bound the recorder to its own
//! processor set (`psrset -b`). Here that is `/proc/irq/N/smp_affinity_list`, and irqbalance,
//! which moves them back.

use super::{Ctx, F};
use crate::doctor::{Area, Change, Status};
use crate::testbed::topology::{format_cpu_list, parse_cpu_list};
use std::collections::BTreeSet;

/// One interrupt of the NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Irq {
    /// Its number.
    pub irq: u32,
    /// Its name in /proc/interrupts (`eth0-TxRx-0`, `virtio2-input.0`).
    pub name: String,
    /// Interrupts served per CPU since boot, by CPU index.
    pub counts: Vec<u64>,
}

/// Parse /proc/interrupts into numbered lines (the named ones, NMI/LOC/... are left out).
pub fn parse_interrupts(text: &str) -> Vec<Irq> {
    let mut lines = text.lines();
    let ncpu = lines.next().map(|h| h.split_whitespace().count()).unwrap_or(0);
    lines
        .filter_map(|l| {
            let (num, rest) = l.trim_start().split_once(':')?;
            let irq: u32 = num.trim().parse().ok()?;
            let mut words = rest.split_whitespace();
            let counts: Vec<u64> = words.by_ref().take(ncpu).map(|w| w.parse().unwrap_or(0)).collect();
            let name = words.last().unwrap_or("").to_string();
            Some(Irq { irq, name, counts })
        })
        .collect()
}

/// The interrupts that carry the interface's receive work: those named after it (most
/// drivers: `eth0-TxRx-0`, `ens1f0-rx-3`), else those of its device's MSI vectors
/// (`device/msi_irqs`, or the parent's for virtio) whose names say receive (`input`, `rx`),
/// else all of its MSI vectors but the config one.
pub fn nic_irqs(cx: &Ctx, iface: &str, all: &[Irq]) -> Vec<Irq> {
    let named: Vec<Irq> = all.iter().filter(|q| q.name.contains(iface)).cloned().collect();
    if !named.is_empty() {
        let rx: Vec<Irq> = named.iter().filter(|q| is_rx_name(&q.name)).cloned().collect();
        return if rx.is_empty() { named } else { rx };
    }
    let mut msi: BTreeSet<u32> = BTreeSet::new();
    for dir in [format!("/sys/class/net/{iface}/device/msi_irqs"), format!("/sys/class/net/{iface}/device/../msi_irqs")]
    {
        if let Ok(rd) = std::fs::read_dir(cx.root.path(&dir)) {
            msi.extend(rd.flatten().filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok()));
        }
    }
    // A virtio NIC's vectors are named after the virtio device (virtio2-input.0).
    let dev = std::fs::read_link(cx.root.path(&format!("/sys/class/net/{iface}/device")))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let mine: Vec<Irq> = all
        .iter()
        .filter(|q| {
            msi.contains(&q.irq)
                && dev.as_ref().map_or(true, |d| !d.starts_with("virtio") || q.name.starts_with(&format!("{d}-")))
        })
        .cloned()
        .collect();
    let rx: Vec<Irq> = mine.iter().filter(|q| is_rx_name(&q.name)).cloned().collect();
    if !rx.is_empty() {
        return rx;
    }
    mine.into_iter().filter(|q| !q.name.contains("config")).collect()
}

fn is_rx_name(n: &str) -> bool {
    let n = n.to_ascii_lowercase();
    n.contains("input") || n.contains("rx") || n.contains("txrx") || n.contains("comp")
}

/// Whether irqbalance runs (it would move the interrupts back after `--apply`).
fn irqbalance_running(cx: &Ctx) -> Option<bool> {
    if !cx.root.is_live() {
        return cx.root.read("/proc/irqbalance").map(|s| s.trim() == "running");
    }
    let rd = std::fs::read_dir("/proc").ok()?;
    Some(rd.flatten().any(|e| {
        e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit())
            && std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "irqbalance")
    }))
}

/// Set the NIC's interrupts against the capture CPU.
pub fn check(cx: &mut Ctx) {
    let Some(iface) = cx.iface.clone() else { return };
    let Some(text) = cx.root.read("/proc/interrupts") else {
        cx.push(F::new("irq.placement", Area::Irq, Status::Unknown, "/proc/interrupts cannot be read"));
        return;
    };
    let all = parse_interrupts(&text);
    let irqs = nic_irqs(cx, &iface, &all);
    if irqs.is_empty() {
        cx.push(
            F::new("irq.placement", Area::Irq, Status::Unknown, format!("{iface}: no interrupt of its own"))
                .why("a virtual interface (veth, loopback) has none: its receive work runs in the softirq of the CPU that sent the packet"),
        );
        return;
    }
    let mut rows = Vec::new();
    let mut on: BTreeSet<usize> = BTreeSet::new();
    let mut served: BTreeSet<usize> = BTreeSet::new();
    for q in &irqs {
        let aff =
            cx.root.read_line(&format!("/proc/irq/{}/smp_affinity_list", q.irq)).and_then(|s| parse_cpu_list(&s).ok());
        let busiest = q.counts.iter().enumerate().max_by_key(|(_, c)| **c).filter(|(_, c)| **c > 0).map(|(i, _)| i);
        if let Some(b) = busiest {
            served.insert(b);
        }
        if let Some(a) = &aff {
            on.extend(a.iter().copied());
        }
        rows.push(format!(
            "{} {} -> CPUs {}{}",
            q.irq,
            q.name,
            aff.as_ref().map(format_cpu_list).unwrap_or_else(|| "?".into()),
            busiest.map(|b| format!(" (served most by CPU {b})")).unwrap_or_default()
        ));
    }
    let balance = irqbalance_running(cx);
    let seen = format!(
        "{iface}: {}{}",
        rows.join("; "),
        match balance {
            Some(true) => "; irqbalance is running",
            Some(false) => "; irqbalance is not running",
            None => "",
        }
    );
    let Some(cpu) = cx.target.cpu else {
        cx.push(
            F::new("irq.placement", Area::Irq, Status::Ok, seen)
                .why("give --cpu N (the capture CPU) to set them against it: seed 001 kept interrupts off the recorder's processors"),
        );
        return;
    };
    let hit = on.contains(&cpu) || served.contains(&cpu);
    if !hit {
        cx.push(F::new("irq.placement", Area::Irq, Status::Ok, seen).why(format!(
            "no receive interrupt is served by the capture CPU {cpu}: the softirq work and the capture do not compete"
        )));
        return;
    }
    // Move them to the other CPUs of the capture CPU's node, keeping off its SMT siblings where
    // there are others.
    let topo = cx.topo.clone();
    let mut others: BTreeSet<usize> = BTreeSet::new();
    if let Some(t) = &topo {
        let node = t.node(cpu);
        let sib = t.core_of(cpu).cloned().unwrap_or_default();
        let same_node: BTreeSet<usize> = t.online.iter().copied().filter(|c| t.node(*c) == node && *c != cpu).collect();
        let off_core: BTreeSet<usize> = same_node.difference(&sib).copied().collect();
        others = if off_core.is_empty() { same_node } else { off_core };
    }
    let mut f = F::new("irq.placement", Area::Irq, Status::Advice, seen)
        .why(format!(
            "the capture CPU {cpu} also takes the NIC's receive interrupts and the softirq work behind them: the two compete for one CPU (seed 001 moved interrupts off the recorder's processors with psradm)"
        ))
        .effect(0.45);
    if others.is_empty() {
        f = f.fix("this host has no other CPU on the capture CPU's node: capture on another CPU (--cpu) instead");
    } else {
        let list = format_cpu_list(&others);
        for q in &irqs {
            f = f.change(Change::IrqAffinity { irq: q.irq, cpus: list.clone() });
        }
        if balance == Some(true) {
            f = f.fix("systemctl stop irqbalance   (or IRQBALANCE_BANNED_CPUS in /etc/default/irqbalance): it moves them back");
        }
    }
    cx.push(f);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupts_are_parsed_with_their_counts_and_names() {
        let t = "           CPU0       CPU1\n 38:          5       9000  PCI-MSIX-0000:00:01.0   1-edge      virtio2-input.0\nNMI:          0          0   Non-maskable interrupts\n";
        let q = parse_interrupts(t);
        assert_eq!(q, vec![Irq { irq: 38, name: "virtio2-input.0".into(), counts: vec![5, 9000] }]);
    }
}
