//! Reading the system into findings: socket buffers, the NIC, interrupts, CPUs, the stack, the
//! process and the disk, each set against the target stream.

use super::{Area, Change, Finding, Report, Root, Status, Target, SCHEMA};

/// Inspect the system under `root` for `target`: every finding, ordered by status then expected
/// effect. Never changes anything.
pub fn inspect(root: &Root, target: &Target) -> Report {
    // Placeholder until the inspection lands: the socket buffer cap only.
    let mut findings = Vec::new();
    if let Some(max) = root.read_u64("/proc/sys/net/core/rmem_max") {
        let want: u64 = 32 << 20;
        let low = max < want;
        findings.push(Finding {
            id: "socket.rmem_max".into(),
            area: Area::Socket,
            status: if low { Status::Problem } else { Status::Ok },
            seen: format!("net.core.rmem_max = {max}"),
            why: "the largest receive buffer a socket may ask for".into(),
            fix: if low { vec![format!("sysctl -w net.core.rmem_max={want}")] } else { vec![] },
            changes: if low {
                vec![Change::Sysctl { key: "net.core.rmem_max".into(), value: want.to_string() }]
            } else {
                vec![]
            },
            effect: if low { 1.0 } else { 0.0 },
        });
    }
    Report {
        schema: SCHEMA.into(),
        target: target.clone(),
        iface: target.iface.clone(),
        privileged: false,
        notes: vec![],
        findings,
    }
}
