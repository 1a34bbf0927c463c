//! The reflector: every datagram goes straight back to its source, at the application layer.
//!
//! Seed 003 insists that the reflection happens where an application would do it, through the
//! whole receive and send path of the stack, so that the round trip is what users experience.
//! The reflector keeps no per-probe state: a batch is received with `recvmmsg` and the same
//! buffers and source addresses are handed to `sendmmsg`. It counts what it reflected per
//! client in a fixed table, so the loop never allocates.

use crate::error::{bind_error, Error, Result};
use crate::sys;
use serde::Serialize;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Clients counted one by one; more are counted together as `other`.
pub const MAX_CLIENTS: usize = 64;

/// How the reflector runs.
#[derive(Clone, Debug)]
pub struct ReflectConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Stop after this long (None: until Ctrl-C or SIGTERM).
    pub duration: Option<Duration>,
    /// Stop after reflecting this many datagrams.
    pub count: Option<u64>,
    /// Pin the reflecting thread to this CPU.
    pub cpu: Option<usize>,
    /// Poll without sleeping: lowest latency, one core at 100 %.
    pub spin: bool,
    /// Socket buffer sizes to ask for, bytes.
    pub buffer: usize,
    /// Datagrams per system call.
    pub batch: usize,
}

impl ReflectConfig {
    /// Defaults for a listen address: run until stopped, 4 MiB buffers, batches of 64.
    pub fn new(listen: SocketAddr) -> Self {
        ReflectConfig { listen, duration: None, count: None, cpu: None, spin: false, buffer: 4 << 20, batch: 64 }
    }
}

/// One client's share.
#[derive(Clone, Debug, Serialize)]
pub struct ClientCount {
    /// The client's address and port.
    pub addr: String,
    /// Datagrams reflected to it.
    pub reflected: u64,
}

/// What the reflector did.
#[derive(Clone, Debug, Serialize)]
pub struct ReflectReport {
    /// Schema name for scripts.
    pub schema: &'static str,
    /// The address it listened on.
    pub listen: String,
    /// Datagrams received.
    pub received: u64,
    /// Datagrams sent back.
    pub reflected: u64,
    /// Bytes sent back.
    pub bytes: u64,
    /// Datagrams that could not be sent back (the error of the first is in `first_error`).
    pub send_errors: u64,
    /// The first send error, for the user.
    pub first_error: Option<String>,
    /// Per client, most active first (at most [`MAX_CLIENTS`]).
    pub clients: Vec<ClientCount>,
    /// Datagrams reflected to clients beyond the table.
    pub other_clients: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// CPU time of the reflecting thread per datagram, ns.
    pub cpu_ns_per_datagram: f64,
    /// The CPU the reflecting thread ran on at the end.
    pub cpu: Option<usize>,
}

impl ReflectReport {
    /// The summary a person reads.
    pub fn human(&self) -> String {
        let mut s = format!(
            "reflected {} of {} datagrams ({} bytes) in {:.1} s on {}; {:.0} ns CPU per datagram{}\n",
            self.reflected,
            self.received,
            self.bytes,
            self.seconds,
            self.listen,
            self.cpu_ns_per_datagram,
            self.cpu.map(|c| format!(" (CPU {c})")).unwrap_or_default()
        );
        if self.send_errors > 0 {
            s += &format!(
                "  {} could not be sent back: {}\n",
                self.send_errors,
                self.first_error.as_deref().unwrap_or("?")
            );
        }
        for c in &self.clients {
            s += &format!("  {:<24} {}\n", c.addr, c.reflected);
        }
        if self.other_clients > 0 {
            s += &format!("  {:<24} {}\n", "(other clients)", self.other_clients);
        }
        s
    }
}

/// Count datagrams `from..to` of the batch to their clients.
fn tally(
    table: &mut [(Option<SocketAddr>, u64); MAX_CLIENTS],
    other: &mut u64,
    bytes: &mut u64,
    batch: &sys::EchoBatch,
    from: usize,
    to: usize,
) {
    for i in from..to {
        let m = batch.meta(i);
        *bytes += m.len as u64;
        match table.iter_mut().find(|(a, _)| a.is_none() || *a == m.src) {
            Some(slot) => {
                slot.0 = m.src;
                slot.1 += 1;
            }
            None => *other += 1,
        }
    }
}

/// A bound reflector socket, so callers (and tests) learn the port before it runs.
pub struct Reflector {
    sock: UdpSocket,
}

impl Reflector {
    /// Bind and size the buffers; failures are explained for the user.
    pub fn bind(cfg: &ReflectConfig) -> Result<Reflector> {
        let sock = UdpSocket::bind(cfg.listen).map_err(|e| bind_error(cfg.listen, e))?;
        let fd = sock.as_raw_fd();
        let _ = sys::set_rcvbuf(fd, cfg.buffer, true).or_else(|_| sys::set_rcvbuf(fd, cfg.buffer, false));
        let _ = sys::set_sndbuf(fd, cfg.buffer, true).or_else(|_| sys::set_sndbuf(fd, cfg.buffer, false));
        sys::set_rcvtimeo(fd, Duration::from_millis(100))
            .map_err(|e| Error::Runtime(format!("cannot set a receive timeout: {e}")))?;
        Ok(Reflector { sock })
    }

    /// The address really bound (port 0 becomes a real port).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr().ok()
    }

    /// Reflect until the duration, the count or `stop`. `progress` (if given) is kept up to
    /// date with the number reflected, for a live display from another thread.
    pub fn run(self, cfg: &ReflectConfig, stop: &AtomicBool, progress: Option<&AtomicU64>) -> Result<ReflectReport> {
        if let Some(cpu) = cfg.cpu {
            sys::pin_current_thread(cpu)
                .map_err(|e| Error::Usage(format!("cannot pin the reflector to CPU {cpu}: {e}")))?;
        }
        let fd = self.sock.as_raw_fd();
        let listen = self.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let mut batch = sys::EchoBatch::new(cfg.batch.max(1), 65536);
        let mut table: [(Option<SocketAddr>, u64); MAX_CLIENTS] = [(None, 0); MAX_CLIENTS];
        let (mut received, mut reflected, mut bytes, mut errors, mut other) = (0u64, 0u64, 0u64, 0u64, 0u64);
        // Consecutive receive errors: a socket that only fails is a fault, not a pending error.
        let mut recv_errors = 0u64;
        let mut first_error = None;
        let t0 = sys::monotonic_ns();
        let cpu0 = sys::thread_cpu_ns();
        let end = cfg.duration.map(|d| t0 + d.as_nanos() as u64);
        let limit = cfg.count.unwrap_or(u64::MAX);
        while !stop.load(Ordering::Relaxed) && reflected < limit {
            if end.is_some_and(|e| sys::monotonic_ns() >= e) {
                break;
            }
            let n = match batch.recv(fd, cfg.spin) {
                Ok(n) => {
                    recv_errors = 0;
                    n
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                // A pending error from an earlier reply (ICMP from a client that went away, or a
                // reply the firewall refused) surfaces here: count it, it is not this datagram's.
                Err(e) => {
                    recv_errors += 1;
                    if recv_errors > 1000 {
                        return Err(Error::Runtime(format!("the reflector cannot receive: {e}")));
                    }
                    continue;
                }
            };
            let n = n.min((limit - reflected) as usize);
            received += n as u64;
            let mut from = 0;
            while from < n {
                match batch.echo(fd, from, n) {
                    // sendmmsg stops at a message the kernel refused and keeps the error to itself;
                    // sending that message again would send it twice past a firewall that counts,
                    // so it is counted as not reflected.
                    Ok(k) if k < n - from => {
                        tally(&mut table, &mut other, &mut bytes, &batch, from, from + k);
                        reflected += k as u64;
                        errors += 1;
                        if first_error.is_none() {
                            first_error = Some("the kernel refused a reply (e.g. a firewall rule)".to_string());
                        }
                        from += k + 1;
                    }
                    Ok(k) => {
                        tally(&mut table, &mut other, &mut bytes, &batch, from, from + k);
                        reflected += k as u64;
                        from += k;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        errors += 1;
                        if first_error.is_none() {
                            first_error = Some(format!("{e}"));
                        }
                        from += 1;
                    }
                }
            }
            if let Some(p) = progress {
                p.store(reflected, Ordering::Relaxed);
            }
        }
        let seconds = (sys::monotonic_ns() - t0) as f64 / 1e9;
        let cpu_ns = sys::thread_cpu_ns() - cpu0;
        let mut clients: Vec<ClientCount> =
            table.iter().filter_map(|(a, n)| a.map(|a| ClientCount { addr: a.to_string(), reflected: *n })).collect();
        clients.sort_by_key(|c| std::cmp::Reverse(c.reflected));
        Ok(ReflectReport {
            schema: "wirespeed.reflect/1",
            listen,
            received,
            reflected,
            bytes,
            send_errors: errors,
            first_error,
            clients,
            other_clients: other,
            seconds,
            cpu_ns_per_datagram: if received > 0 { cpu_ns as f64 / received as f64 } else { 0.0 },
            cpu: sys::current_cpu(),
        })
    }
}
