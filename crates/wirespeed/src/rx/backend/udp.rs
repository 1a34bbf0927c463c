//! A bound, configured UDP socket: the endpoint of every backend that reads a UDP socket
//! (recvmmsg today; io_uring on a socket would share it). Binding, multicast joins, the
//! receive buffer, the per-socket drop counter, GRO and the receive timeout are set up here
//! once, whatever reads the socket afterwards.
//!
//! With several capture threads, each thread's socket is a member of one SO_REUSEPORT group:
//! the first member binds (and learns the port when port 0 was asked), the others bind the
//! same address and port, and the first attaches the classic BPF program that steers each
//! stream to one member ([`crate::sys::bpf`]). Multicast is the exception: the kernel gives
//! every member a copy of each multicast datagram, so no program is attached and the capture
//! keeps only its own share (see [`crate::rx::run`]).

use super::{Bound, Member, RecvConfig};
use crate::addr::Iface;
use crate::error::{Error, Result};
use crate::sys;
use crate::units;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// A UDP socket set up for receiving, owned for the whole run.
#[derive(Debug)]
pub struct UdpEndpoint {
    sock: UdpSocket,
    rxq_ovfl: bool,
}

impl UdpEndpoint {
    /// The socket's descriptor, for the backend reading it (valid while the endpoint lives).
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// The socket itself, for a backend that also sends on it (PGM's NAKs).
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// Whether the kernel attaches the socket's drop count (SO_RXQ_OVFL) to datagrams.
    pub fn rxq_ovfl(&self) -> bool {
        self.rxq_ovfl
    }

    /// Bind and configure the only socket of a one-thread run; failures are explained for
    /// the user.
    pub fn bind(cfg: &RecvConfig) -> Result<(UdpEndpoint, Bound)> {
        Self::bind_member(cfg, Member::SOLE)
    }

    /// Bind and configure the socket of capture thread `member`: with more than one member,
    /// in an SO_REUSEPORT group on `cfg.listen` (which must name the group's port: the first
    /// member's, when it bound port 0), the first member attaching the steering program of
    /// `cfg.steer`. A kernel that refuses the program leaves its own flow hash in charge,
    /// which still keeps each source's datagrams on one member; a note says so.
    pub fn bind_member(cfg: &RecvConfig, member: Member) -> Result<(UdpEndpoint, Bound)> {
        let mut notes = Vec::new();
        let ip = cfg.listen.ip();
        // A link-local group is bound with its interface as the scope (the kernel refuses it
        // without one); every other address as given.
        let at = match cfg.listen {
            std::net::SocketAddr::V6(g) if g.ip().is_multicast() => crate::addr::scoped(
                cfg.listen,
                crate::addr::multicast_v6_index(g, cfg.multicast_iface.as_ref(), "--iface")?,
            ),
            a => a,
        };
        let (sock, fallback) = crate::addr::bind_listen(at, member.count > 1)?;
        notes.extend(fallback);
        if member.count > 1 && member.index == 0 && !ip.is_multicast() {
            let prog = cfg.steer.program(member.count as u32);
            if let Err(e) = sys::bpf::attach_reuseport_cbpf(&sock, &prog) {
                notes.push(format!(
                    "{STEERING_REFUSED} ({e}): the kernel's own flow hash spreads the streams over the {} threads instead (each source still stays on one thread, but a format stream id is not looked at)",
                    member.count
                ));
            }
        }
        if ip.is_multicast() {
            join_group(&sock, cfg)?;
        }
        let fd = sock.as_raw_fd();
        let want = cfg.rcvbuf;
        let mut granted = sys::set_rcvbuf(fd, want, false).unwrap_or(0);
        if granted / 2 < want {
            if let Ok(g) = sys::set_rcvbuf(fd, want, true) {
                if g / 2 >= want {
                    notes.push(format!(
                        "receive buffer {} is above net.core.rmem_max: granted through SO_RCVBUFFORCE (CAP_NET_ADMIN)",
                        units::bytes(want as u64)
                    ));
                }
                granted = g;
            }
        }
        if granted / 2 < want {
            notes.push(rcvbuf_clamp_note(want, granted));
        }
        let rxq_ovfl = match sys::enable_rxq_ovfl(fd) {
            Ok(()) => true,
            Err(e) => {
                notes.push(format!("per-socket drop counter (SO_RXQ_OVFL) unavailable: {e}"));
                false
            }
        };
        let mut gro = false;
        if cfg.gro {
            match sys::enable_gro(fd) {
                Ok(()) => gro = true,
                Err(e) => {
                    notes.push(format!("UDP GRO unavailable on this kernel ({e}): receiving one datagram per buffer"))
                }
            }
        }
        sys::set_rcvtimeo(fd, Duration::from_millis(100))
            .map_err(|e| Error::failed(format!("cannot set a receive timeout: {e}")))?;
        let bound = Bound {
            local_addr: sock.local_addr().ok(),
            rcvbuf_granted: granted,
            gro,
            udp_inode: sys::socket_inode(fd),
            notes,
        };
        Ok((UdpEndpoint { sock, rxq_ovfl }, bound))
    }
}

/// Join the multicast group `cfg.listen` names, on `cfg.multicast_iface` (or, for IPv6, the
/// group's scope id); a link-local IPv6 group without either is refused.
fn join_group(sock: &UdpSocket, cfg: &RecvConfig) -> Result<()> {
    let route_hint = |net: &str| format!("is there a multicast route? `ip route add {net} dev IFACE`");
    match cfg.listen {
        std::net::SocketAddr::V4(a) => {
            let g = *a.ip();
            let r = match &cfg.multicast_iface {
                Some(Iface::Index { index, .. }) => sys::join_multicast_v4_index(sock.as_raw_fd(), g, *index),
                Some(Iface::Addr(i)) => sock.join_multicast_v4(&g, i),
                None => sock.join_multicast_v4(&g, &Ipv4Addr::UNSPECIFIED),
            };
            let on = cfg.multicast_iface.as_ref().map(|i| i.to_string()).unwrap_or_else(|| "0.0.0.0".into());
            r.map_err(|e| {
                Error::failed(format!("cannot join multicast group {g} on {on}: {e} ({})", route_hint("224.0.0.0/4")))
            })
        }
        std::net::SocketAddr::V6(a) => {
            let index = crate::addr::multicast_v6_index(a, cfg.multicast_iface.as_ref(), "--iface")?;
            sock.join_multicast_v6(a.ip(), index).map_err(|e| {
                let on =
                    if index == 0 { "the routing table's interface".to_string() } else { format!("interface {index}") };
                Error::failed(format!(
                    "cannot join multicast group {} on {on}: {e} ({})",
                    a.ip(),
                    route_hint("ff00::/8")
                ))
            })
        }
    }
}

/// How the note that the kernel refused the steering program starts.
pub const STEERING_REFUSED: &str = "the kernel refused the classic BPF steering program";

/// The message for a receive buffer clamped by `net.core.rmem_max`.
pub fn rcvbuf_clamp_note(requested: usize, granted: usize) -> String {
    format!(
        "the kernel granted a {} receive buffer of the {} asked for (capped by net.core.rmem_max): raise the cap with `sysctl -w net.core.rmem_max={}`",
        units::bytes(granted as u64 / 2),
        units::bytes(requested as u64),
        requested
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamp_note_names_the_sysctl() {
        let n = rcvbuf_clamp_note(1 << 30, 8 << 20);
        assert!(n.contains("sysctl -w net.core.rmem_max=1073741824"), "{n}");
        assert!(n.contains("4.0 MiB"), "{n}");
    }
}
