//! The network of a configuration: one namespace per partition, a veth link per pair of
//! partitions (a full mesh) with a /30 from 198.18.0.0/16, each partition's stable address on
//! its loopback (198.19.0.N) and host routes that reach every peer over its direct link only.
//! IPv6 is laid out the same way beside it, from the benchmarking range 2001:2::/48: the stable
//! address 2001:2::N, a /64 per link (2001:2:1:K::/64, ends ::1 and ::2) and /128 host routes
//! over the direct links. Duplicate address detection is off (each address added with
//! `nodad`, and `accept_dad` 0 in every partition for the links' link-local addresses), so
//! every address is usable at once: DAD would hold each back a second or more, on links where
//! no duplicate can exist. Where the host has no IPv6, or the MTU is below IPv6's 1280, the
//! partitions are IPv4 only ([`ipv6_for`]).
//!
//! All of it is done through iproute2's `ip` command ([`ip`]): namespaces are made, entered and
//! removed the way an operator does it by hand, and every failure names the command to retry.

use super::state::{held, make_recorded, save, Held, Ident, Layout, Made, State};
use super::{Outcome, Undone};
use serde::Serialize;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use wirespeed::{sys, Error, Result};

/// Where `ip netns` keeps namespace `ns`.
pub(super) fn ns_path(ns: &str) -> PathBuf {
    Path::new("/run/netns").join(ns)
}

/// Whether namespace `ns` is the one `made` records.
pub(super) fn ns_held(made: &Made, ns: &str) -> Held {
    held(made.namespaces.get(ns), &ns_path(ns))
}

/// Namespace of partition `id`.
pub fn ns_name(prefix: &str, id: u32) -> String {
    format!("{prefix}{id}")
}

/// The stable partition address (on its loopback): 198.19.0.N.
pub fn partition_addr(id: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, 0, id as u8)
}

/// The stable IPv6 partition address (on its loopback): 2001:2::N, its last group written with
/// the partition's decimal digits (partition 16 is 2001:2::16, as it is 198.19.0.16).
pub fn partition_addr6(id: u32) -> Ipv6Addr {
    let last = u16::from_str_radix(&id.min(9999).to_string(), 16).unwrap_or(0);
    Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, last)
}

/// IPv6's smallest link MTU: below it the kernel turns IPv6 off on the link.
pub const IPV6_MIN_MTU: u32 = 1280;

/// Whether partitions of `layout` get IPv6 addresses and routes: the host has IPv6, and the
/// links' MTU is at least IPv6's minimum (1280).
pub fn ipv6_for(layout: &Layout) -> bool {
    layout.mtu >= IPV6_MIN_MTU && Path::new("/proc/sys/net/ipv6").exists()
}

/// Turn IPv6 duplicate address detection off in namespace `ns` (`accept_dad` 0 for `all` and
/// for interfaces made from now on): a link's link-local address is then usable the moment the
/// link is up, so neighbour discovery answers at once instead of after DAD's second or more.
/// Written from a thread that joins the namespace, as `/proc/sys/net` answers for the thread's.
fn no_dad(ns: &str) -> Result<()> {
    let f = std::fs::File::open(ns_path(ns))
        .map_err(|e| Error::io(format!("cannot open namespace {ns} to turn IPv6 DAD off: {e}")))?;
    let r = std::thread::scope(|sc| {
        sc.spawn(|| -> std::io::Result<()> {
            sys::netns::enter_thread(&f)?;
            for c in ["all", "default"] {
                std::fs::write(format!("/proc/sys/net/ipv6/conf/{c}/accept_dad"), "0")?;
            }
            Ok(())
        })
        .join()
    });
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::failed(format!("cannot turn IPv6 DAD off in namespace {ns}: {e}"))),
        Err(_) => Err(Error::failed(format!("turning IPv6 DAD off in namespace {ns} failed"))),
    }
}

/// Interface name, inside partition `local`, of its link to partition `peer`.
pub fn link_name(peer: u32) -> String {
    format!("p{peer}")
}

/// The link between partitions `a < b`: its /30 in 198.18.0.0/16 and both ends' addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Link {
    /// Lower partition id.
    pub a: u32,
    /// Higher partition id.
    pub b: u32,
    /// Address of `a`'s end.
    pub a_addr: Ipv4Addr,
    /// Address of `b`'s end.
    pub b_addr: Ipv4Addr,
    /// IPv6 address of `a`'s end (2001:2:1:K::1/64).
    pub a_addr6: Ipv6Addr,
    /// IPv6 address of `b`'s end (2001:2:1:K::2/64).
    pub b_addr6: Ipv6Addr,
}

impl Link {
    /// The link between two partition ids (either order); the /30 is a function of the pair only,
    /// so adding a partition never renumbers existing links.
    pub fn between(x: u32, y: u32) -> Link {
        let (a, b) = (x.min(y), x.max(y));
        // Pairs of 1..=64 indexed as (b-1)(b-2)/2 + (a-1): below 2016, times 4 fits a /16.
        // Saturating: ids are validated to 1..=64 before any link exists; this only keeps a
        // hand-edited state file from causing an overflow.
        let k = b.saturating_sub(1) * b.saturating_sub(2) / 2 + a.saturating_sub(1);
        let base = u32::from(Ipv4Addr::new(198, 18, 0, 0)) + 4 * k;
        // The same pair index numbers the link's /64: below 2016, so it fits the 16-bit group.
        let net6 = |end: u16| Ipv6Addr::new(0x2001, 2, 1, k.min(0xffff) as u16, 0, 0, 0, end);
        Link {
            a,
            b,
            a_addr: Ipv4Addr::from(base + 1),
            b_addr: Ipv4Addr::from(base + 2),
            a_addr6: net6(1),
            b_addr6: net6(2),
        }
    }

    /// Address of the end in partition `id`.
    pub fn addr_of(&self, id: u32) -> Ipv4Addr {
        if id == self.a {
            self.a_addr
        } else {
            self.b_addr
        }
    }

    /// IPv6 address of the end in partition `id`.
    pub fn addr6_of(&self, id: u32) -> Ipv6Addr {
        if id == self.a {
            self.a_addr6
        } else {
            self.b_addr6
        }
    }
}

/// All links of a layout (full mesh).
pub fn links(layout: &Layout) -> Vec<Link> {
    let ids: Vec<u32> = layout.partitions.iter().map(|p| p.id).collect();
    let mut out = Vec::new();
    for (i, &a) in ids.iter().enumerate() {
        for &b in &ids[i + 1..] {
            out.push(Link::between(a, b));
        }
    }
    out
}

/// Fail with one line unless the process has CAP_NET_ADMIN; `what` names the subcommand.
pub fn require_net_admin(what: &str) -> Result<()> {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0");
    let ok = sock.map(|s| sys::has_net_admin(std::os::fd::AsRawFd::as_raw_fd(&s))).unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(Error::permission(format!(
            "`wirespeed partition {what}` needs CAP_NET_ADMIN (network namespaces, links, cgroups): run it as root, e.g. with sudo"
        )))
    }
}

/// Run `ip ARGS`, returning stdout; failures become one line naming the command.
pub(super) fn ip(args: &[&str]) -> Result<String> {
    let out = Command::new("ip").args(args).stdin(Stdio::null()).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::failed("the `ip` command (iproute2) is not installed: apt-get install iproute2")
        } else {
            Error::failed(format!("cannot run `ip`: {e}"))
        }
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::failed(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())))
    }
}

/// Whether a namespace named `ns` exists (ours or not).
pub(super) fn ns_exists(ns: &str) -> bool {
    Path::new("/run/netns").join(ns).exists()
}

/// Whether device `dev` exists in namespace `ns`.
pub(super) fn link_exists(ns: &str, dev: &str) -> bool {
    ns_exists(ns) && ip(&["-n", ns, "link", "show", "dev", dev]).is_ok()
}

/// Records namespace `ns` in [`Made`] (for [`make_recorded`]).
pub(super) fn record_ns(ns: &str) -> impl Fn(&mut Made, Option<Option<Ident>>) + '_ {
    move |m, v| match v {
        Some(v) => {
            m.namespaces.insert(ns.to_string(), v);
        }
        None => {
            m.namespaces.remove(ns);
        }
    }
}

/// The refusal for a namespace of our name that wirespeed did not make.
pub(super) fn foreign_ns(ns: &str, prefix: &str) -> Error {
    Error::invalid(format!(
        "namespace {ns} exists but is not the one wirespeed made for partitions '{prefix}': it is left alone; remove it yourself if it is yours to remove, then `wirespeed partition init --prefix {prefix}`"
    ))
}

/// Both ends' host routes to the other's stable address over link `k`.
pub(super) fn routes_for(l: &Layout, k: &Link) -> Result<()> {
    for (me, peer) in [(k.a, k.b), (k.b, k.a)] {
        let ns = ns_name(&l.prefix, me);
        ip(&[
            "-n",
            &ns,
            "route",
            "replace",
            &format!("{}/32", partition_addr(peer)),
            "via",
            &k.addr_of(peer).to_string(),
            "dev",
            &link_name(peer),
            "src",
            &partition_addr(me).to_string(),
        ])?;
        if ipv6_for(l) {
            ip(&[
                "-n",
                &ns,
                "-6",
                "route",
                "replace",
                &format!("{}/128", partition_addr6(peer)),
                "via",
                &k.addr6_of(peer).to_string(),
                "dev",
                &link_name(peer),
                "src",
                &partition_addr6(me).to_string(),
            ])?;
        }
    }
    Ok(())
}

/// Verify that from every active partition, each active peer's address is routed over their
/// own direct link and nothing else.
pub fn check_routes(st: &State) -> Result<()> {
    let l = &st.layout;
    for k in links(l) {
        if st.deactivated.contains(&k.a) || st.deactivated.contains(&k.b) {
            continue;
        }
        for (me, peer) in [(k.a, k.b), (k.b, k.a)] {
            let ns = ns_name(&l.prefix, me);
            let want = format!("dev {} ", link_name(peer));
            let mut peers = vec![partition_addr(peer).to_string()];
            if ipv6_for(l) {
                peers.push(partition_addr6(peer).to_string());
            }
            for addr in peers {
                let r = ip(&["-n", &ns, "route", "get", &addr])?;
                if !r.contains(&want) {
                    return Err(Error::peer(format!(
                        "route check failed: in {ns}, {addr} goes `{}` instead of over {}: run `wirespeed partition init --prefix {}` and create again",
                        r.trim(),
                        link_name(peer),
                        l.prefix
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Processes whose network namespace is `ns` (compared by the namespace's inode).
pub(super) fn ns_pids(ns: &str) -> Vec<u32> {
    let Some(target) = ns_inode(&Path::new("/run/netns").join(ns)) else { return Vec::new() };
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| ns_inode(Path::new(&format!("/proc/{pid}/ns/net"))) == Some(target))
        .collect()
}

/// The inode of a namespace file (`/run/netns/NS` or `/proc/PID/ns/net`): its identity.
pub(super) fn ns_inode(p: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| m.ino())
}

/// Bring the namespaces, links, addresses and routes of `st` to what its layout asks for,
/// recording each namespace and veth pair in the state before it is made. Something of our
/// names that the state does not record as ours is refused, never adopted nor removed.
pub(super) fn converge(st: &mut State, out: &mut Outcome) -> Result<()> {
    let l = st.layout.clone();
    for p in &l.partitions {
        let ns = ns_name(&l.prefix, p.id);
        match ns_held(&st.made, &ns) {
            Held::Ours => {}
            Held::Foreign => return Err(foreign_ns(&ns, &l.prefix)),
            Held::Gone => {
                make_recorded(
                    st,
                    record_ns(&ns),
                    || ip(&["netns", "add", &ns]).map(|_| ()),
                    || Ident::of(&ns_path(&ns)),
                )?;
                out.lines.push(format!("partition {}: namespace {ns} created", p.id));
                out.changed = true;
            }
        }
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        ip(&["-n", &ns, "addr", "replace", &format!("{}/32", partition_addr(p.id)), "dev", "lo"])?;
        if ipv6_for(&l) {
            no_dad(&ns)?;
            ip(&["-n", &ns, "addr", "replace", &format!("{}/128", partition_addr6(p.id)), "dev", "lo", "nodad"])?;
        }
    }
    if !ipv6_for(&l) {
        out.lines.push(if l.mtu < IPV6_MIN_MTU {
            format!("IPv4 only: the MTU {} is below IPv6's minimum of {IPV6_MIN_MTU}", l.mtu)
        } else {
            "IPv4 only: this host has no IPv6 (/proc/sys/net/ipv6 is missing)".to_string()
        });
    }
    let mtu = l.mtu.to_string();
    for k in links(&l) {
        let (na, nb) = (ns_name(&l.prefix, k.a), ns_name(&l.prefix, k.b));
        let (da, db) = (link_name(k.b), link_name(k.a));
        let (ea, eb) = (format!("{na}/{da}"), format!("{nb}/{db}"));
        let (xa, xb) = (link_exists(&na, &da), link_exists(&nb, &db));
        for (x, e, ns, dev) in [(xa, &ea, &na, &da), (xb, &eb, &nb, &db)] {
            if x && !st.made.links.contains(e) {
                return Err(Error::invalid(format!(
                    "link {dev} in namespace {ns} was not made by wirespeed: it is left alone; remove it yourself (`ip -n {ns} link del {dev}`) or `wirespeed partition init --prefix {}` and create again",
                    l.prefix
                )));
            }
        }
        if !(xa && xb) {
            // Half a pair is left of one of ours: remove our end, and make the pair again.
            for (x, ns, dev) in [(xa, &na, &da), (xb, &nb, &db)] {
                if x {
                    ip(&["-n", ns, "link", "del", dev])?;
                }
            }
            st.made.links.insert(ea.clone());
            st.made.links.insert(eb.clone());
            save(st)?;
            ip(&[
                "link", "add", &da, "netns", &na, "mtu", &mtu, "type", "veth", "peer", "name", &db, "netns", &nb,
                "mtu", &mtu,
            ])?;
            out.lines.push(if ipv6_for(&l) {
                format!(
                    "link {}-{}: {na}/{da} {} {} <-> {nb}/{db} {} {}",
                    k.a, k.b, k.a_addr, k.a_addr6, k.b_addr, k.b_addr6
                )
            } else {
                format!("link {}-{}: {na}/{da} {} <-> {nb}/{db} {}", k.a, k.b, k.a_addr, k.b_addr)
            });
            out.changed = true;
        }
        for (ns, dev, me, peer) in [(&na, &da, k.a, k.b), (&nb, &db, k.b, k.a)] {
            ip(&["-n", ns, "link", "set", "dev", dev, "mtu", &mtu])?;
            ip(&["-n", ns, "addr", "replace", &format!("{}/30", k.addr_of(me)), "dev", dev])?;
            if ipv6_for(&l) {
                // Addresses go with the link when it is taken down (deactivate); activate
                // converges again, which puts them back.
                ip(&["-n", ns, "addr", "replace", &format!("{}/64", k.addr6_of(me)), "dev", dev, "nodad"])?;
            }
            if !st.deactivated.contains(&me) && !st.deactivated.contains(&peer) {
                ip(&["-n", ns, "link", "set", "dev", dev, "up"])?;
            }
        }
        if !st.deactivated.contains(&k.a) && !st.deactivated.contains(&k.b) {
            routes_for(&l, &k)?;
        }
    }
    Ok(())
}

/// Take partition `id`'s links down (see [`super::deactivate`]): every peer loses its route to
/// it, as if its cables were pulled.
pub(super) fn isolate(st: &State, id: u32) -> Result<()> {
    let ns = ns_name(&st.layout.prefix, id);
    for p in &st.layout.partitions {
        if p.id != id && link_exists(&ns, &link_name(p.id)) {
            ip(&["-n", &ns, "link", "set", "dev", &link_name(p.id), "down"])?;
        }
    }
    Ok(())
}

/// Delete every namespace `st` records as made and still ours (their links go with them);
/// one that was replaced by someone else's is left alone and named in `u.kept`.
pub(super) fn remove(st: &State, u: &mut Undone) -> Result<()> {
    for ns in st.made.namespaces.keys() {
        match ns_held(&st.made, ns) {
            Held::Ours => {
                ip(&["netns", "del", ns])?;
                u.removed.push(format!("namespace {ns} deleted"));
            }
            Held::Foreign => u.kept.push(format!(
                "namespace {ns} left alone: it is not the one wirespeed made (deleted and made again by someone else)"
            )),
            Held::Gone => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::topology::PartSpec;
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn link_subnets_are_distinct_and_inside_the_benchmark_range() {
        let mut seen = BTreeSet::new();
        for b in 2..=64u32 {
            for a in 1..b {
                let k = Link::between(b, a);
                assert_eq!((k.a, k.b), (a, b));
                let base = u32::from(k.a_addr) - 1;
                assert_eq!(base % 4, 0);
                assert!(seen.insert(base));
                assert_eq!(k.a_addr.octets()[0..2], [198, 18]);
                assert_eq!(k.addr_of(b), k.b_addr);
                let s6 = k.a_addr6.segments();
                assert_eq!(s6[..3], [0x2001, 2, 1], "inside 2001:2::/48, off the stable addresses' 2001:2:0::/64");
                assert_eq!(
                    (s6[3], s6[7], k.b_addr6.segments()[7]),
                    (((base - u32::from(Ipv4Addr::new(198, 18, 0, 0))) / 4) as u16, 1, 2)
                );
                assert_eq!(k.addr6_of(a), k.a_addr6);
            }
        }
        assert_eq!(partition_addr(64), Ipv4Addr::new(198, 19, 0, 64));
        assert_eq!(partition_addr6(64).to_string(), "2001:2::64");
        assert_eq!(partition_addr6(16).to_string(), "2001:2::16");
        assert_eq!(partition_addr6(2).to_string(), "2001:2::2");
    }

    #[test]
    fn full_mesh_has_one_link_per_pair() {
        let l = Layout {
            prefix: "x".into(),
            partitions: (1..=4).map(|i| PartSpec { id: i, cpus: BTreeSet::from([0]) }).collect(),
            mtu: 1500,
            mem: None,
            share_cpus: true,
        };
        assert_eq!(links(&l).len(), 6);
    }
}
