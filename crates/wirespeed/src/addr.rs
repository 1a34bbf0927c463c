//! Addresses as users write them, IPv4 and IPv6 alike, read in one place so that every command
//! takes the same forms and refuses the same mistakes with the same words.
//!
//! - A listening address: `PORT` (every address of this host, IPv4 and IPv6: one dual-stack
//!   socket on `[::]:PORT`), `*:PORT` (the same), `ADDR:PORT`, `[V6ADDR]:PORT`, or a multicast
//!   group `239.1.2.3:PORT` / `[ff05::1234]:PORT`.
//! - A destination: `ADDR:PORT`, `[V6ADDR]:PORT` or `HOST:PORT`.
//! - A bare address (`--bind`): `198.18.0.1`, `::1` or `[::1]`.
//! - An interface for multicast (`--iface`): an IPv4 address, an interface name or its index.
//!
//! A scope id (`[fe80::1%eth0]:PORT`, `[ff02::1%lo]:PORT`) names the interface of a link-local
//! address or group, by name or index; on any other address it means nothing, and is refused
//! rather than silently dropped. An IPv6 address with a port and no brackets (`::1:7148`) is
//! ambiguous, and is refused with the bracketed form to write instead.

use crate::error::{Error, Result};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The dual-stack listening address of a bare `PORT`: `[::]:PORT`, IPv4 senders included.
pub fn any(port: u16) -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0))
}

/// Whether a socket bound to `addr` hears both IPv4 and IPv6 (it is `[::]`, which wirespeed
/// always binds with IPV6_V6ONLY off).
pub fn is_dual_stack(addr: SocketAddr) -> bool {
    matches!(addr, SocketAddr::V6(a) if a.ip().is_unspecified())
}

/// A listening address as people read it: `*:7148 (IPv4 and IPv6)` for the dual-stack `[::]`,
/// otherwise the address itself (`127.0.0.1:7148`, `[::1]:7148`).
pub fn shown(addr: SocketAddr) -> String {
    if is_dual_stack(addr) {
        format!("*:{} (IPv4 and IPv6)", addr.port())
    } else {
        addr.to_string()
    }
}

/// [`shown`] for an address already written as text (a report's `listen` field).
pub fn shown_text(listen: &str) -> String {
    match listen.parse::<SocketAddr>() {
        Ok(a) => shown(a),
        Err(_) => listen.to_string(),
    }
}

/// `a.b.c.d` for the IPv4-mapped `::ffff:a.b.c.d` (how a dual-stack socket names an IPv4
/// sender), any other address unchanged.
pub fn unmap(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, a.port())),
            None => addr,
        },
        v4 => v4,
    }
}

/// Whether an IPv6 address only means something on one link, so that a socket needs to be told
/// which interface: link-local unicast (fe80::/10) and interface- or link-local multicast
/// (ff01::/16, ff02::/16 and their transient forms).
pub fn link_scoped(ip: Ipv6Addr) -> bool {
    let o = ip.octets();
    if ip.is_multicast() {
        matches!(o[1] & 0x0f, 1 | 2)
    } else {
        o[0] == 0xfe && o[1] & 0xc0 == 0x80
    }
}

/// The index of interface `name` (or a number given as the index itself), explained when
/// there is no such interface.
pub fn interface_index(name: &str) -> std::result::Result<u32, String> {
    let name = name.trim();
    if let Ok(i) = name.parse::<u32>() {
        if i == 0 {
            return Err(
                "interface index 0 names no interface: give a name like eth0 or an index from `ip -br link`".into()
            );
        }
        return Ok(i);
    }
    crate::sys::packet_tx::if_index(name)
        .map_err(|_| format!("there is no interface named '{name}' here: `ip -br link` lists them"))
}

/// An IPv6 address with an optional `%scope` (interface name or index): the address and the
/// scope's index (0 without one). A scope on an address that is not link-scoped is refused.
fn ipv6_scoped(s: &str) -> std::result::Result<Option<(Ipv6Addr, u32)>, String> {
    let (a, scope) = match s.split_once('%') {
        Some((a, z)) => (a, Some(z)),
        None => (s, None),
    };
    let Ok(ip) = a.parse::<Ipv6Addr>() else { return Ok(None) };
    let Some(z) = scope else { return Ok(Some((ip, 0))) };
    if z.is_empty() {
        return Err(format!("'{s}' ends in % with no interface: write e.g. {a}%eth0, or leave the % out"));
    }
    if !link_scoped(ip) {
        return Err(format!(
            "'{s}' has a scope id, but {ip} is not link-local: a scope (%{z}) only names the interface of a link-local address (fe80::/10) or group (ff02::/16); leave it out"
        ));
    }
    Ok(Some((ip, interface_index(z)?)))
}

/// An IP address as `--bind` and the like take it: `198.18.0.1`, `::1` or `[::1]`.
pub fn parse_ip(s: &str) -> std::result::Result<IpAddr, String> {
    let t = s.trim();
    let inner = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(t);
    if let Ok(ip) = inner.parse::<IpAddr>() {
        return Ok(ip);
    }
    if inner.contains('%') {
        if let Some((ip, _)) = ipv6_scoped(inner)? {
            return Err(format!(
                "'{t}' carries a scope, which an address option cannot keep: give {ip} and the interface where the command asks for one"
            ));
        }
    }
    Err(format!("'{t}' is not an IP address: write e.g. 198.18.0.1, ::1 or 2001:2::1"))
}

/// A socket address with an IP (no host name): `a.b.c.d:P`, `[v6]:P` or `[v6%scope]:P`.
/// `Ok(None)` when `s` is not written as one (a host name, say); `Err` when it is one, badly.
fn parse_ip_port(s: &str) -> std::result::Result<Option<SocketAddr>, String> {
    if let Some(rest) = s.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else {
            return Err(format!("'{s}' opens a [ but never closes it: write [ADDRESS]:PORT, e.g. [::1]:7148"));
        };
        let Some(port) = after.strip_prefix(':') else {
            return Err(format!("'{s}' has no port after the ]: write [ADDRESS]:PORT, e.g. [{inside}]:7148"));
        };
        let port = parse_port(port, s)?;
        return match ipv6_scoped(inside)? {
            Some((ip, scope)) => Ok(Some(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope)))),
            None if inside.parse::<Ipv4Addr>().is_ok() => {
                Err(format!("'{s}' puts an IPv4 address in brackets: write {inside}:{port}"))
            }
            None => Err(format!(
                "'{inside}' in '{s}' is not an IPv6 address: write e.g. [::1]:{port} or [2001:2::1]:{port}"
            )),
        };
    }
    if s.matches(':').count() > 1 {
        // An IPv6 address without brackets: with a port the last group is ambiguous.
        let (head, tail) = s.rsplit_once(':').unwrap_or((s, ""));
        let whole = s.split('%').next().unwrap_or(s).parse::<Ipv6Addr>().is_ok();
        // `::1:7148` is itself an IPv6 address; whether 7148 is meant as the port cannot be told.
        return Err(if head.parse::<Ipv6Addr>().is_ok() && tail.parse::<u16>().is_ok() {
            format!("'{s}' is ambiguous (is {tail} the port?): write an IPv6 address in brackets, [{head}]:{tail}")
        } else if whole {
            format!("'{s}' is an IPv6 address with no port: write [{s}]:PORT, e.g. [{s}]:7148")
        } else {
            format!("'{s}' is not an address: write ADDR:PORT, or an IPv6 address in brackets, e.g. [::1]:7148")
        });
    }
    if let Some((h, p)) = s.rsplit_once(':') {
        if let Ok(v4) = h.parse::<Ipv4Addr>() {
            return Ok(Some(SocketAddr::V4(SocketAddrV4::new(v4, parse_port(p, s)?))));
        }
    }
    Ok(None)
}

fn parse_port(p: &str, whole: &str) -> std::result::Result<u16, String> {
    p.parse::<u16>().map_err(|_| format!("'{p}' is not a port number (0-65535) in '{whole}'"))
}

/// Parse a receive address: `PORT` (dual-stack `[::]:PORT`), `*:PORT`, `ADDR:PORT`,
/// `[V6]:PORT`, a multicast `GROUP:PORT`, or `HOST:PORT`.
pub fn parse_listen(s: &str) -> Result<SocketAddr> {
    let t = s.trim();
    if let Ok(port) = t.parse::<u16>() {
        return Ok(any(port));
    }
    if let Some(p) = t.strip_prefix("*:") {
        return parse_port(p, t).map(any).map_err(Error::invalid);
    }
    if let Some(a) = parse_ip_port(t).map_err(Error::invalid)? {
        return Ok(a);
    }
    if t.parse::<IpAddr>().is_ok() {
        return Err(Error::invalid(format!("'{t}' has no port: write ADDR:PORT, e.g. 127.0.0.1:7148, or just PORT")));
    }
    if let Some((h, _)) = t.rsplit_once(':') {
        if !h.is_empty() {
            return resolve(t);
        }
    }
    Err(Error::invalid(format!(
        "cannot read listen address '{t}': write PORT, ADDR:PORT, [IPV6]:PORT or GROUP:PORT, e.g. 7148, [::1]:7148 or 239.1.2.3:7148"
    )))
}

/// Resolve a destination `HOST:PORT`, `ADDR:PORT` or `[V6]:PORT`, explaining failures. A host
/// name with addresses of both families gives its IPv4 one (instruments and their networks
/// are IPv4 first); write the IPv6 address to use that.
pub fn resolve(target: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let t = target.trim();
    let check = |a: SocketAddr| {
        if a.port() == 0 {
            Err(Error::invalid(format!("port 0 in '{t}' is not a destination: use 1-65535")))
        } else {
            Ok(a)
        }
    };
    if let Some(a) = parse_ip_port(t).map_err(Error::invalid)? {
        return check(a);
    }
    let Some((host, port)) = t.rsplit_once(':') else {
        if t.parse::<IpAddr>().is_ok() {
            return Err(Error::invalid(format!("'{t}' has no port: write ADDRESS:PORT, e.g. {t}:7148")));
        }
        return Err(Error::invalid(format!("'{t}' has no port: write HOST:PORT, e.g. 127.0.0.1:7148 or [::1]:7148")));
    };
    let port: u16 =
        port.parse().map_err(|_| Error::invalid(format!("'{port}' is not a port number (1-65535) in '{t}'")))?;
    if host.is_empty() {
        return Err(Error::invalid(format!("'{t}' has no host: write HOST:PORT, e.g. 127.0.0.1:7148")));
    }
    let all: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|_| Error::not_found(format!("cannot resolve host '{host}': check the name, or give an IP address")))?
        .collect();
    let a = all
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| all.first())
        .copied()
        .ok_or_else(|| Error::not_found(format!("host '{host}' has no address")))?;
    check(a)
}

/// The interface a multicast group is joined on, or sent from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Iface {
    /// The interface holding this IPv4 address (IPv4 groups only, as `ip_mreq` takes it).
    Addr(Ipv4Addr),
    /// The interface with this index (given by name or number), for either family.
    Index {
        /// Interface index.
        index: u32,
        /// What the user wrote (a name or the number), for messages.
        name: String,
    },
}

impl std::fmt::Display for Iface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Iface::Addr(a) => write!(f, "{a}"),
            Iface::Index { name, .. } => f.write_str(name),
        }
    }
}

/// `--iface`: an IPv4 address, an interface name (eth0, lo) or an interface index.
pub fn parse_iface(s: &str) -> std::result::Result<Iface, String> {
    let t = s.trim();
    if let Ok(a) = t.parse::<Ipv4Addr>() {
        return Ok(Iface::Addr(a));
    }
    if t.parse::<Ipv6Addr>().is_ok() {
        return Err(format!(
            "'{t}' is an IPv6 address: an IPv6 group is joined on an interface, so give its name or index (e.g. eth0 or 2; `ip -br link` lists them)"
        ));
    }
    Ok(Iface::Index { index: interface_index(t)?, name: t.to_string() })
}

/// The interface index to use for IPv6 multicast with `group` (its scope id, or `iface`): a
/// link-scoped group (ff01::, ff02::) without one is refused, as the kernel cannot know which
/// link is meant; 0 leaves the choice to the routing table.
pub fn multicast_v6_index(group: SocketAddrV6, iface: Option<&Iface>, option: &str) -> Result<u32> {
    let from_iface = match iface {
        Some(Iface::Index { index, .. }) => Some(*index),
        Some(Iface::Addr(a)) => {
            return Err(Error::invalid(format!(
                "{option} {a} is an IPv4 address, and {} is an IPv6 group: give the interface's name or index instead (e.g. {option} eth0)",
                group.ip()
            )))
        }
        None => None,
    };
    match (group.scope_id(), from_iface) {
        (s, Some(i)) if s != 0 && s != i => Err(Error::invalid(format!(
            "the group's scope (%{s}) and {option} (index {i}) name different interfaces: give one of them"
        ))),
        (_, Some(i)) => Ok(i),
        (s, None) if s != 0 => Ok(s),
        (_, None) if link_scoped(*group.ip()) => Err(Error::invalid(format!(
            "{} is a link-local multicast group: say which interface with {option} IFACE (e.g. {option} eth0) or [{}%IFACE]:{}",
            group.ip(),
            group.ip(),
            group.port()
        ))),
        _ => Ok(0),
    }
}

/// `addr` with the scope id `index` when it is a link-scoped IPv6 address without one: the
/// kernel binds or connects to such an address (fe80::, ff02::) only with its interface.
pub fn scoped(addr: SocketAddr, index: u32) -> SocketAddr {
    match addr {
        SocketAddr::V6(a) if a.scope_id() == 0 && index != 0 && link_scoped(*a.ip()) => {
            SocketAddr::V6(SocketAddrV6::new(*a.ip(), a.port(), a.flowinfo(), index))
        }
        other => other,
    }
}

/// Bind a receiving UDP socket on `addr` (dual-stack on `[::]`; SO_REUSEPORT with
/// `reuseport`), with failures explained. A host without IPv6 (the module off, or
/// `disable_ipv6`) gets a dual-stack request bound on IPv4 `0.0.0.0` instead, with a note
/// saying so.
pub fn bind_listen(addr: SocketAddr, reuseport: bool) -> Result<(std::net::UdpSocket, Option<String>)> {
    match crate::sys::bind_udp(addr, reuseport) {
        Ok(s) => Ok((s, None)),
        Err(e)
            if is_dual_stack(addr)
                && matches!(e.raw_os_error(), Some(libc::EAFNOSUPPORT) | Some(libc::EADDRNOTAVAIL)) =>
        {
            let v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, addr.port()));
            let s = crate::sys::bind_udp(v4, reuseport).map_err(|e| bind_error(v4, e))?;
            Ok((s, Some(format!("IPv6 is not available on this host ({e}): listening on IPv4 only, {v4}"))))
        }
        Err(e) => Err(bind_error(addr, e)),
    }
}

/// Explain a failed bind in the user's terms.
pub fn bind_error(addr: SocketAddr, e: io::Error) -> Error {
    let os = e.raw_os_error();
    let err = match e.kind() {
        io::ErrorKind::AddrInUse => Error::busy(format!(
            "port {} is already in use on {} (another receiver? `ss -ulpn 'sport = :{}'` shows who): stop it or choose another port",
            addr.port(),
            if is_dual_stack(addr) { "this host (IPv4 or IPv6)".to_string() } else { addr.ip().to_string() },
            addr.port()
        )),
        io::ErrorKind::PermissionDenied => Error::permission(format!(
            "binding to port {} needs root or CAP_NET_BIND_SERVICE: run as root or use a port above 1023",
            addr.port()
        )),
        io::ErrorKind::AddrNotAvailable => Error::invalid(format!(
            "address {} is not assigned to any interface here: use a bare PORT (every address), 0.0.0.0, or one of this host's addresses (`ip -br addr`)",
            addr.ip()
        )),
        _ => Error::io(format!("cannot bind UDP socket to {addr}: {e}")),
    };
    err.with_errno(os)
}

/// A network of allowed clients, from `--allow` (the reflector's probes, the station's control
/// connections): an address and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    /// Whether `ip` (IPv4-mapped IPv6 counts as IPv4) lies in this network.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => mask32(u32::from(a), self.bits) == u32::from(n),
            (IpAddr::V6(n), IpAddr::V6(a)) => mask128(u128::from(a), self.bits) == u128::from(n),
            _ => false,
        }
    }
}

fn mask32(v: u32, bits: u8) -> u32 {
    if bits == 0 {
        0
    } else {
        v & (u32::MAX << (32 - u32::from(bits)))
    }
}

fn mask128(v: u128, bits: u8) -> u128 {
    if bits == 0 {
        0
    } else {
        v & (u128::MAX << (128 - u32::from(bits)))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.bits)
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;
    /// `ADDRESS` (one host) or `ADDRESS/BITS`; host bits must be zero, so that a typo such as
    /// 10.0.0.1/8 is not silently widened to a whole network.
    fn from_str(s: &str) -> std::result::Result<Cidr, String> {
        let bad = || {
            format!(
                "--allow '{s}' is not a network: write an address or ADDRESS/BITS, e.g. 198.18.0.0/15, 10.1.2.3 or 2001:db8::/32"
            )
        };
        let (a, b) = match s.trim().split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s.trim(), None),
        };
        let ip: IpAddr = a.parse().map_err(|_| bad())?;
        let ip = ip.to_canonical();
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let bits: u8 = match b {
            Some(b) => b.parse().ok().filter(|&v| v <= max).ok_or_else(bad)?,
            None => max,
        };
        let net = match ip {
            IpAddr::V4(v) => IpAddr::V4(mask32(u32::from(v), bits).into()),
            IpAddr::V6(v) => IpAddr::V6(mask128(u128::from(v), bits).into()),
        };
        if net != ip {
            return Err(format!("--allow '{s}' has host bits set: did you mean {net}/{bits}?"));
        }
        Ok(Cidr { net, bits })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;

    fn listen(s: &str) -> String {
        parse_listen(s).map(|a| a.to_string()).unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn listening_addresses_in_every_form() {
        assert_eq!(listen("7148"), "[::]:7148");
        assert_eq!(listen("*:7148"), "[::]:7148");
        assert_eq!(listen(" 0 "), "[::]:0");
        assert_eq!(listen("127.0.0.1:7148"), "127.0.0.1:7148");
        assert_eq!(listen("0.0.0.0:7148"), "0.0.0.0:7148");
        assert_eq!(listen("[::1]:7148"), "[::1]:7148");
        assert_eq!(listen("[2001:2::1]:7148"), "[2001:2::1]:7148");
        assert_eq!(listen("[ff05::1234]:7148"), "[ff05::1234]:7148");
        assert_eq!(listen("239.1.2.3:7148"), "239.1.2.3:7148");
        assert_eq!(listen("[fe80::1%1]:7148"), "[fe80::1%1]:7148");
        assert!(listen("::1:7148").contains("[::1]:7148"), "{}", listen("::1:7148"));
        assert!(listen("::1").contains("no port"), "{}", listen("::1"));
        assert!(listen("[::1]").contains("no port"));
        assert!(listen("[::1:7148").contains("never closes"));
        assert!(listen("[::g]:7148").contains("not an IPv6 address"));
        assert!(listen("[127.0.0.1]:7148").contains("127.0.0.1:7148"));
        assert!(listen("[::1%1]:7148").contains("not link-local"), "{}", listen("[::1%1]:7148"));
        assert!(listen("[2001:2::1%lo]:7148").contains("not link-local"));
        assert!(listen("[fe80::1%nosuchif0]:7148").contains("no interface named"));
        assert!(listen("[::1]:99999").contains("not a port number"));
    }

    #[test]
    fn destinations_and_bare_addresses() {
        assert_eq!(resolve("[::1]:7148").unwrap().to_string(), "[::1]:7148");
        assert_eq!(resolve("127.0.0.1:9").unwrap().to_string(), "127.0.0.1:9");
        assert!(resolve("[::1]:0").unwrap_err().to_string().contains("not a destination"));
        assert!(resolve("2001:2::1:7148").unwrap_err().to_string().contains("[2001:2::1]:7148"));
        assert!(resolve("::1").unwrap_err().to_string().contains("[::1]:PORT"));
        assert!(resolve("fe80::1%1").unwrap_err().to_string().contains("[fe80::1%1]:PORT"));
        assert!(resolve("::1:x").unwrap_err().to_string().contains("brackets"));
        assert_eq!(parse_ip("::1").unwrap(), IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(parse_ip("[2001:2::1]").unwrap().to_string(), "2001:2::1");
        assert_eq!(parse_ip("198.18.0.1").unwrap().to_string(), "198.18.0.1");
        assert!(parse_ip("2001:2::1%1").unwrap_err().contains("not link-local"));
        assert!(parse_ip("nonsense").unwrap_err().contains("not an IP address"));
    }

    #[test]
    fn scopes_and_interfaces() {
        assert!(link_scoped("fe80::1".parse().unwrap()));
        assert!(link_scoped("ff02::1".parse().unwrap()));
        assert!(link_scoped("ff12::1".parse().unwrap()));
        assert!(link_scoped("ff01::1".parse().unwrap()));
        assert!(!link_scoped("ff05::1".parse().unwrap()));
        assert!(!link_scoped("2001:2::1".parse().unwrap()));
        assert!(!link_scoped("::1".parse().unwrap()));
        assert_eq!(parse_iface("127.0.0.1").unwrap(), Iface::Addr(Ipv4Addr::LOCALHOST));
        assert_eq!(parse_iface("7").unwrap(), Iface::Index { index: 7, name: "7".into() });
        assert!(parse_iface("nosuchif0").unwrap_err().contains("ip -br link"));
        assert!(parse_iface("::1").unwrap_err().contains("name or index"));
        let g = |s: &str| match s.parse::<SocketAddr>().unwrap() {
            SocketAddr::V6(a) => a,
            _ => unreachable!(),
        };
        let lo = Iface::Index { index: 1, name: "lo".into() };
        assert!(multicast_v6_index(g("[ff02::1234]:9"), None, "--iface")
            .unwrap_err()
            .to_string()
            .contains("link-local"));
        assert_eq!(multicast_v6_index(g("[ff02::1234]:9"), Some(&lo), "--iface").unwrap(), 1);
        assert_eq!(multicast_v6_index(g("[ff02::1234%1]:9"), None, "--iface").unwrap(), 1);
        assert_eq!(multicast_v6_index(g("[ff05::1234]:9"), None, "--iface").unwrap(), 0);
        assert!(multicast_v6_index(g("[ff05::1]:9"), Some(&Iface::Addr(Ipv4Addr::LOCALHOST)), "--iface").is_err());
    }

    #[test]
    fn dual_stack_is_shown_and_mapped_sources_unmapped() {
        assert_eq!(shown(any(7148)), "*:7148 (IPv4 and IPv6)");
        assert_eq!(shown_text("[::]:7148"), "*:7148 (IPv4 and IPv6)");
        assert_eq!(shown_text("[::1]:7148"), "[::1]:7148");
        assert_eq!(shown_text("0.0.0.0:7148"), "0.0.0.0:7148");
        let m: SocketAddr = "[::ffff:198.18.0.1]:5000".parse().unwrap();
        assert_eq!(unmap(m).to_string(), "198.18.0.1:5000");
        let v6: SocketAddr = "[2001:2::1]:5000".parse().unwrap();
        assert_eq!(unmap(v6), v6);
    }

    #[test]
    fn a_bind_failure_keeps_its_kind_and_error_number() {
        let a: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let e = bind_error(a, io::Error::from_raw_os_error(libc::EADDRINUSE));
        assert_eq!((e.kind(), e.raw_os_error()), (Kind::Busy, Some(libc::EADDRINUSE)));
        let e = bind_error(a, io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!((e.kind(), e.exit_code()), (Kind::Permission, 1));
        let e = bind_error(a, io::Error::from_raw_os_error(libc::EADDRNOTAVAIL));
        assert_eq!((e.kind(), e.exit_code()), (Kind::Invalid, 2));
    }
}
