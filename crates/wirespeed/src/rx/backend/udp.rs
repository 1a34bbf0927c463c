//! A bound, configured UDP socket: the endpoint of every backend that reads a UDP socket
//! (recvmmsg today; io_uring on a socket would share it). Binding, multicast joins, the
//! receive buffer, the per-socket drop counter, GRO and the receive timeout are set up here
//! once, whatever reads the socket afterwards.

use super::{Bound, RecvConfig};
use crate::error::{bind_error, Error, Result};
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

    /// Whether the kernel attaches the socket's drop count (SO_RXQ_OVFL) to datagrams.
    pub fn rxq_ovfl(&self) -> bool {
        self.rxq_ovfl
    }

    /// Bind and configure; failures are explained for the user.
    pub fn bind(cfg: &RecvConfig) -> Result<(UdpEndpoint, Bound)> {
        let mut notes = Vec::new();
        let ip = cfg.listen.ip();
        let sock = UdpSocket::bind(cfg.listen).map_err(|e| bind_error(cfg.listen, e))?;
        if ip.is_multicast() {
            match ip {
                std::net::IpAddr::V4(g) => {
                    let iface = cfg.multicast_iface.unwrap_or(Ipv4Addr::UNSPECIFIED);
                    sock.join_multicast_v4(&g, &iface).map_err(|e| {
                        Error::Runtime(format!(
                            "cannot join multicast group {g} on {iface}: {e} (is there a multicast route? `ip route add 224.0.0.0/4 dev IFACE`)"
                        ))
                    })?;
                }
                std::net::IpAddr::V6(g) => {
                    sock.join_multicast_v6(&g, 0)
                        .map_err(|e| Error::Runtime(format!("cannot join multicast group {g}: {e}")))?;
                }
            }
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
            .map_err(|e| Error::Runtime(format!("cannot set a receive timeout: {e}")))?;
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
