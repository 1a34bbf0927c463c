//! The socket buffer of each side: what -b asked for, what the kernel granted (and through
//! which option), or, without -b, the default and where it comes from.

use super::Proto;
use serde::{Deserialize, Serialize};
use std::os::fd::RawFd;
use wirespeed::error::{Error, Result};
use wirespeed::sys;

/// The socket buffer of one side: what was asked for and what the kernel says it granted.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SockBuf {
    /// SO_SNDBUF (transmitter) or SO_RCVBUF (receiver).
    pub option: String,
    /// The -b value; `None` when the kernel's default was kept.
    pub requested: Option<u64>,
    /// The size the kernel reports (Linux doubles a request for its bookkeeping); for a
    /// transmitter's default, the sysctl that sets it.
    pub granted: Option<u64>,
    /// Where `granted` comes from.
    pub source: String,
    /// The receiver's SO_RCVBUF after the run: TCP autotuning grows a default buffer.
    pub at_end: Option<u64>,
}

/// Ask for `want` bytes of socket buffer, through the privileged option when the plain one is
/// clamped by the sysctl maximum (the seed's -b 1M must mean 1M, not the host's cap); notes
/// say when the kernel changed the request.
pub(super) fn apply_sockbuf(fd: RawFd, want: usize, receive: bool, notes: &mut Vec<String>) -> Result<SockBuf> {
    let (option, sysctl) =
        if receive { ("SO_RCVBUF", "net.core.rmem_max") } else { ("SO_SNDBUF", "net.core.wmem_max") };
    let set = |force: bool| if receive { sys::set_rcvbuf(fd, want, force) } else { sys::set_sndbuf(fd, want, force) };
    let mut granted = set(false).map_err(|e| Error::failed(format!("cannot set {option} to {want}: {e}")))?;
    if granted / 2 < want {
        if let Ok(g) = set(true) {
            if g / 2 >= want {
                notes.push(format!("-b {want} is above {sysctl}: granted through {option}FORCE (CAP_NET_ADMIN)"));
            }
            granted = g;
        }
    }
    if granted / 2 < want {
        notes.push(format!(
            "the kernel granted {option} {granted}, less than -b {want}: {sysctl} caps it (raise it, or run as root to force)"
        ));
    } else if granted / 2 > want {
        notes.push(format!("the kernel raised -b {want} to its minimum {option} ({granted} granted)"));
    }
    Ok(SockBuf {
        option: option.into(),
        requested: Some(want as u64),
        granted: Some(granted as u64),
        source: "getsockopt; Linux doubles a request for its bookkeeping".into(),
        at_end: None,
    })
}

/// The transmitter's default send buffer, from the sysctl that sets it (there is no reason to
/// touch the socket just to read it back).
pub(super) fn default_sndbuf(proto: Proto) -> SockBuf {
    let (path, source) = match proto {
        Proto::Tcp => ("/proc/sys/net/ipv4/tcp_wmem", "sysctl net.ipv4.tcp_wmem, initial size; TCP autotunes it"),
        Proto::Udp => ("/proc/sys/net/core/wmem_default", "sysctl net.core.wmem_default"),
    };
    let granted = std::fs::read_to_string(path).ok().and_then(|s| {
        let mut f = s.split_whitespace();
        let v = if proto == Proto::Tcp { f.nth(1) } else { f.next() };
        v.and_then(|v| v.parse().ok())
    });
    SockBuf { option: "SO_SNDBUF".into(), requested: None, granted, source: source.into(), at_end: None }
}

pub(super) fn default_rcvbuf(fd: RawFd, proto: Proto) -> SockBuf {
    SockBuf {
        option: "SO_RCVBUF".into(),
        requested: None,
        granted: sys::rcvbuf(fd).ok().map(|v| v as u64),
        source: match proto {
            Proto::Tcp => "getsockopt at the start; TCP autotunes it".into(),
            Proto::Udp => "getsockopt".into(),
        },
        at_end: None,
    }
}
