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
            addr.ip(),
            addr.port()
        )),
        io::ErrorKind::PermissionDenied => Error::Runtime(format!(
            "binding to port {} needs root or CAP_NET_BIND_SERVICE: run as root or use a port above 1023",
            addr.port()
        )),
        io::ErrorKind::AddrNotAvailable => Error::Usage(format!(
            "address {} is not assigned to any interface here: use 0.0.0.0 or one of this host's addresses (`ip -br addr`)",
            addr.ip()
        )),
        _ => Error::Runtime(format!("cannot bind UDP socket to {addr}: {e}")),
    }
}

/// Resolve `HOST:PORT` (or `[v6]:PORT`), explaining failures.
pub fn resolve(target: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let Some((host, port)) = target.rsplit_once(':') else {
        return Err(Error::Usage(format!("'{target}' has no port: write HOST:PORT, e.g. 127.0.0.1:7148")));
    };
    let port: u16 =
        port.parse().map_err(|_| Error::Usage(format!("'{port}' is not a port number (1-65535) in '{target}'")))?;
    if port == 0 {
        return Err(Error::Usage(format!("port 0 in '{target}' is not a destination: use 1-65535")));
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(Error::Usage(format!("'{target}' has no host: write HOST:PORT, e.g. 127.0.0.1:7148")));
    }
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|_| Error::Usage(format!("cannot resolve host '{host}': check the name, or give an IP address")))?;
    // Prefer IPv4: the formats and benchmarks here are IPv4 first.
    let all: Vec<SocketAddr> = addrs.by_ref().collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or_else(|| all.first())
        .copied()
        .ok_or_else(|| Error::Usage(format!("host '{host}' has no address")))
}

/// Parse a receive address: `PORT`, `ADDR:PORT`, or a multicast group `239.1.2.3:PORT`.
pub fn parse_listen(s: &str) -> Result<SocketAddr> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some((h, _)) = s.rsplit_once(':') {
        if !h.is_empty() && h.parse::<std::net::IpAddr>().is_err() {
            return resolve(s);
        }
    }
    Err(Error::Usage(format!(
        "cannot read listen address '{s}': write PORT, ADDR:PORT or GROUP:PORT, e.g. 7148 or 239.1.2.3:7148"
    )))
}
