//! The one error type, split by who must act: the user (a bad argument) or the host (a
//! runtime failure). The CLI maps them to exit codes 2 and 1.

use std::io;
use std::net::SocketAddr;

/// A failure with a message written for the user: what is wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request itself is wrong (argument, size, address): exit code 2.
    #[error("{0}")]
    Usage(String),
    /// The host refused or failed (port in use, privilege, I/O): exit code 1.
    #[error("{0}")]
    Runtime(String),
}

/// Shorthand for results carrying [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Exit code for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => 2,
            Error::Runtime(_) => 1,
        }
    }
}

/// Explain a failed bind in the user's terms.
pub fn bind_error(addr: SocketAddr, e: io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::AddrInUse => Error::Runtime(format!(
            "port {} is already in use on {} (another receiver? `ss -ulpn 'sport = :{}'` shows who): stop it or choose another port",
            addr.port(),
            if crate::addr::is_dual_stack(addr) { "this host (IPv4 or IPv6)".to_string() } else { addr.ip().to_string() },
            addr.port()
        )),
        io::ErrorKind::PermissionDenied => Error::Runtime(format!(
            "binding to port {} needs root or CAP_NET_BIND_SERVICE: run as root or use a port above 1023",
            addr.port()
        )),
        io::ErrorKind::AddrNotAvailable => Error::Usage(format!(
            "address {} is not assigned to any interface here: use a bare PORT (every address), 0.0.0.0, or one of this host's addresses (`ip -br addr`)",
            addr.ip()
        )),
        _ => Error::Runtime(format!("cannot bind UDP socket to {addr}: {e}")),
    }
}

pub use crate::addr::{parse_listen, resolve};
