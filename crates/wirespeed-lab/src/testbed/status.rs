//! The status view: the recorded configuration joined with what is live on the host (which
//! namespaces exist, which daemons run) and with the daemons' views of each other, for
//! `partition list` and `status --json` (schema [`STATUS_SCHEMA`]). It only reads, so it needs
//! no privilege.

use super::daemon::{daemon_pid, now_ms, view_file, View};
use super::heartbeat::PeerState;
use super::net::{ipv6_for, ns_exists, ns_name, partition_addr, partition_addr6, Link};
use super::state::{check_prefix, load_existing, HbConfig};
use super::topology::format_cpu_list;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;
use wirespeed::Result;

/// The id of `partition status --json`: the configuration joined with the live state, a
/// different document from the state file (`wirespeed.partition/1`, [`super::SCHEMA`]).
pub const STATUS_SCHEMA: &str = "wirespeed.partition-status/1";

/// One partition as `list` and `status` show it.
#[derive(Debug, Clone, Serialize)]
pub struct PartStatus {
    /// Partition id.
    pub id: u32,
    /// Its CPUs, as a list string.
    pub cpus: String,
    /// Its namespace.
    pub namespace: String,
    /// Whether the namespace exists.
    pub namespace_present: bool,
    /// Its stable address.
    pub address: Ipv4Addr,
    /// Its link addresses, by peer id.
    pub links: BTreeMap<u32, Ipv4Addr>,
    /// Its stable IPv6 address (2001:2::N), when the partitions have IPv6.
    pub address6: Option<Ipv6Addr>,
    /// Its IPv6 link addresses, by peer id (empty without IPv6).
    pub links6: BTreeMap<u32, Ipv6Addr>,
    /// Deactivated with `deactivate`.
    pub deactivated: bool,
    /// Pid of its running daemon.
    pub daemon_pid: Option<u32>,
    /// Overall state as the other daemons see it: active, inactive, mixed, or unknown.
    pub state: String,
    /// Each live peer daemon's view of this partition.
    pub seen_by: BTreeMap<u32, PeerState>,
    /// This partition's daemon's XPC with each peer: connected, connecting, refused (why), down.
    pub xpc_by: BTreeMap<u32, String>,
    /// Where its raw devices are mounted on the host, when they are.
    pub devices: Option<String>,
}

/// The whole configuration with live state, for `list` and `status --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Always [`STATUS_SCHEMA`].
    pub schema: &'static str,
    /// Namespace prefix.
    pub prefix: String,
    /// Link MTU.
    pub mtu: u32,
    /// Memory limit per partition.
    pub mem: Option<u64>,
    /// Cores shared.
    pub share_cpus: bool,
    /// Heartbeat settings.
    pub hb: HbConfig,
    /// The partitions.
    pub partitions: Vec<PartStatus>,
}

/// Read the configuration and the daemons' views. Needs no privilege.
pub fn status(prefix: &str) -> Result<Status> {
    check_prefix(prefix)?;
    let st = load_existing(prefix)?;
    let l = &st.layout;
    // A view older than a few check intervals belongs to a dead daemon: ignore it.
    let fresh = Duration::from_millis(st.hb.check_ms * 3 + 500).as_millis() as u64;
    // A deactivated partition sees nobody; its view says nothing about the others.
    let views: Vec<View> = l
        .partitions
        .iter()
        .filter(|p| !st.deactivated.contains(&p.id))
        .filter_map(|p| std::fs::read_to_string(view_file(prefix, p.id)).ok())
        .filter_map(|s| serde_json::from_str::<View>(&s).ok())
        .filter(|v| now_ms().saturating_sub(v.time_ms) <= fresh)
        .collect();
    let mut parts = Vec::new();
    for p in &l.partitions {
        let seen_by: BTreeMap<u32, PeerState> =
            views.iter().filter_map(|v| v.peers.get(&p.id).map(|s| (v.id, *s))).collect();
        let daemon = daemon_pid(&st, p.id);
        let states: BTreeSet<PeerState> = seen_by.values().copied().collect();
        let state = if st.deactivated.contains(&p.id) && states.iter().all(|s| *s != PeerState::Active) {
            "inactive (deactivated)".to_string()
        } else if states.len() == 1 {
            states.iter().next().map(|s| s.name().to_string()).unwrap_or_default()
        } else if states.is_empty() {
            match (l.partitions.len(), daemon) {
                (1, Some(_)) => "active".into(),
                (_, Some(_)) => "active (its daemon runs; no active peer is watching it)".into(),
                _ if st.daemons => "unknown (no live daemon has seen it yet)".into(),
                _ => "unknown (no daemons: created with --no-daemons)".into(),
            }
        } else {
            let parts: Vec<String> = seen_by.iter().map(|(j, s)| format!("{} by {j}", s.name())).collect();
            format!("mixed ({})", parts.join(", "))
        };
        let links = l
            .partitions
            .iter()
            .filter(|q| q.id != p.id)
            .map(|q| (q.id, Link::between(p.id, q.id).addr_of(p.id)))
            .collect();
        let v6 = ipv6_for(l);
        let links6 = l
            .partitions
            .iter()
            .filter(|q| v6 && q.id != p.id)
            .map(|q| (q.id, Link::between(p.id, q.id).addr6_of(p.id)))
            .collect();
        parts.push(PartStatus {
            id: p.id,
            cpus: format_cpu_list(&p.cpus),
            namespace: ns_name(prefix, p.id),
            namespace_present: ns_exists(&ns_name(prefix, p.id)),
            address: partition_addr(p.id),
            links,
            address6: v6.then(|| partition_addr6(p.id)),
            links6,
            deactivated: st.deactivated.contains(&p.id),
            daemon_pid: daemon,
            state,
            seen_by,
            xpc_by: views.iter().find(|v| v.id == p.id).map(|v| v.xpc.clone()).unwrap_or_default(),
            devices: {
                let d = super::xplink::mount_dir(prefix, p.id);
                super::devices::fuse_at(&d).then(|| d.display().to_string())
            },
        });
    }
    Ok(Status {
        schema: STATUS_SCHEMA,
        prefix: prefix.into(),
        mtu: l.mtu,
        mem: l.mem,
        share_cpus: l.share_cpus,
        hb: st.hb,
        partitions: parts,
    })
}
