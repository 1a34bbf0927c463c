//! The reflector: every probe goes straight back to its source, at the application layer.
//!
//! Seed 003 insists that the reflection happens where an application would do it, through the
//! whole receive and send path of the stack, so that the round trip is what users experience.
//! The reflector keeps no per-probe state: a batch is received with `recvmmsg` and the same
//! buffers and source addresses are handed to `sendmmsg`. It counts what it reflected per
//! client in a fixed table, so the loop never allocates.
//!
//! A program that answers whatever it receives can be turned against itself and others: one
//! datagram forged from its own address and port makes it answer itself forever, one forged
//! between two reflectors makes them echo it between them forever, and a forged source makes
//! it send to a victim. So it answers only what can be a wirespeed probe from a client, and
//! refuses (and counts, per reason): anything from its own port (itself, at any of its
//! addresses, or another reflector on the same port); source ports below 1024, where system
//! services such as echo and chargen live (unless allowed); sources outside `--allow`; replies
//! of a reflector and anything that is not a probe (see [`probe`]); and a client's probes
//! beyond its rate cap (a token bucket per source address, in a fixed table).

use super::probe;
use serde::Serialize;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use wirespeed::error::{Error, Result};
use wirespeed::sys;

/// Clients counted one by one; more are counted together as `other`.
pub const MAX_CLIENTS: usize = 64;
/// Default cap per source address, probes/s: `ping --pps` goes up to 10,000,000, so no rate a
/// wirespeed ping can ask for is ever throttled by default; set it lower on an exposed host.
pub const DEFAULT_MAX_PPS_PER_CLIENT: f64 = crate::latency::ping::MAX_PPS;
/// Source addresses whose rate is tracked at once (token buckets); more evict the idlest.
pub const RATE_TABLE: usize = 4096;

pub use wirespeed::addr::Cidr;

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
    /// Answer only sources in these networks (empty: any source).
    pub allow: Vec<Cidr>,
    /// Also answer source ports below 1024 (system services such as echo and chargen).
    pub allow_low_ports: bool,
    /// Most probes per second answered to one source address (0: no cap).
    pub max_pps_per_client: f64,
    /// Probes a source may send back to back above its cap: the token bucket's size (None:
    /// 100 ms at the cap, at least 64, so a ping catching up on its schedule is not cut).
    pub client_burst: Option<u64>,
    /// Where the reflector's live counters are shown to a metrics exporter (`--metrics`).
    pub metrics: Option<crate::exporter::Board>,
}

impl ReflectConfig {
    /// Defaults for a listen address: run until stopped, 4 MiB buffers, batches of 64, any
    /// source but low ports, capped at [`DEFAULT_MAX_PPS_PER_CLIENT`].
    pub fn new(listen: SocketAddr) -> Self {
        ReflectConfig {
            listen,
            duration: None,
            count: None,
            cpu: None,
            spin: false,
            buffer: 4 << 20,
            batch: 64,
            allow: Vec::new(),
            allow_low_ports: false,
            max_pps_per_client: DEFAULT_MAX_PPS_PER_CLIENT,
            client_burst: None,
            metrics: None,
        }
    }

    /// The token bucket size in effect.
    pub fn burst(&self) -> u64 {
        self.client_burst.unwrap_or_else(|| ((self.max_pps_per_client / 10.0).ceil() as u64).max(64))
    }

    /// Check the policy options; the message says what to write instead.
    pub fn validate(&self) -> Result<()> {
        if !(self.max_pps_per_client.is_finite() && self.max_pps_per_client >= 0.0) {
            return Err(Error::invalid(format!(
                "--max-pps-per-client {} is not a rate: give probes per second, e.g. 100000, or 0 for no cap",
                self.max_pps_per_client
            )));
        }
        if self.client_burst == Some(0) {
            return Err(Error::invalid("--client-burst 0 would refuse every probe: give 1 or more"));
        }
        // A reflector that stops before it starts would exit 0 having answered nothing.
        if self.count == Some(0) {
            return Err(Error::invalid("--count 0 would reflect nothing: give 1 or more"));
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return Err(Error::invalid("--duration 0 would reflect nothing: give a length like 10s"));
        }
        if self.batch == 0 || self.batch > wirespeed::rx::MAX_BATCH {
            return Err(Error::invalid(format!(
                "--batch {} is out of range: use 1..{}",
                self.batch,
                wirespeed::rx::MAX_BATCH
            )));
        }
        Ok(())
    }
}

/// What the reflector refused to answer, per reason. Nothing refused is sent anywhere.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Refused {
    /// All refused datagrams.
    pub total: u64,
    /// From the reflector's own port: itself at any of its addresses (a forged source), or
    /// another reflector on the same port.
    pub own_port: u64,
    /// From a source port below 1024 (or port 0) without `--allow-low-ports`.
    pub low_port: u64,
    /// From a source outside every `--allow` network.
    pub not_allowed: u64,
    /// A reflector's reply (magic `WSRR`): answering it is how two reflectors loop.
    pub reply: u64,
    /// Not a wirespeed probe (wrong magic or shorter than the probe header).
    pub not_probe: u64,
    /// Beyond the client's rate cap (`--max-pps-per-client`, `--client-burst`).
    pub rate_capped: u64,
}

impl Refused {
    /// The counts per reason, in the order of the exporter's `reason` labels
    /// ([`REFUSED_REASONS`](crate::exporter::board::REFUSED_REASONS)).
    pub fn by_reason(&self) -> [u64; 6] {
        [self.own_port, self.low_port, self.not_allowed, self.reply, self.not_probe, self.rate_capped]
    }
}

/// The policy the reflector ran with, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct Policy {
    /// Networks answered (empty: any source).
    pub allow: Vec<String>,
    /// Whether source ports below 1024 were answered.
    pub allow_low_ports: bool,
    /// Probes/s answered per source address (0: no cap).
    pub max_pps_per_client: f64,
    /// The token bucket size, probes.
    pub client_burst: u64,
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
    /// Datagrams not answered on purpose, per reason (received = reflected + refused +
    /// send errors).
    pub refused: Refused,
    /// What was answered and what refused.
    pub policy: Policy,
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
            "reflected {} of {} datagrams ({} bytes) in {:.1} s on {}; {:.0} ns CPU per datagram{}{}\n",
            self.reflected,
            self.received,
            self.bytes,
            self.seconds,
            wirespeed::addr::shown_text(&self.listen),
            self.cpu_ns_per_datagram,
            self.cpu.map(|c| format!(" (CPU {c})")).unwrap_or_default(),
            if self.refused.total > 0 { format!("; refused {}", self.refused.total) } else { String::new() }
        );
        let r = &self.refused;
        if r.total > 0 {
            let parts: Vec<String> = [
                (r.own_port, "from its own port"),
                (r.low_port, "from ports below 1024 (--allow-low-ports)"),
                (r.not_allowed, "outside --allow"),
                (r.reply, "replies of a reflector"),
                (r.not_probe, "not wirespeed probes"),
                (r.rate_capped, "over the per-client cap (--max-pps-per-client)"),
            ]
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, why)| format!("{n} {why}"))
            .collect();
            s += &format!("  refused {}: {}\n", r.total, parts.join(", "));
        }
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

/// One source address's token bucket.
#[derive(Clone, Copy)]
struct Bucket {
    /// The address as 128 bits (IPv4 mapped), valid when `used`.
    key: u128,
    used: bool,
    tokens: f64,
    last_ns: u64,
}

/// Per-source token buckets in a fixed open-addressed table: no allocation per datagram. A
/// full neighbourhood evicts its idlest bucket (the newcomer starts with a full bucket).
struct RateCap {
    per_ns: f64,
    burst: f64,
    salt: u64,
    slots: Box<[Bucket]>,
    /// The slot used last.
    last: usize,
}

/// Slots looked at for one address.
const RATE_PROBES: usize = 8;

impl RateCap {
    fn new(pps: f64, burst: u64) -> RateCap {
        use std::hash::{BuildHasher, Hasher};
        // A random salt: a sender cannot pick addresses that all land in one neighbourhood.
        let salt = std::collections::hash_map::RandomState::new().build_hasher().finish() | 1;
        let empty = Bucket { key: 0, used: false, tokens: 0.0, last_ns: 0 };
        RateCap {
            per_ns: pps / 1e9,
            burst: burst as f64,
            salt,
            slots: vec![empty; RATE_TABLE].into_boxed_slice(),
            last: 0,
        }
    }

    /// Take a token for `ip` at `now`; false when its bucket is empty.
    #[inline]
    fn take(&mut self, ip: IpAddr, now: u64) -> bool {
        // IPv4 as IPv4-mapped IPv6: one key whether it came on an IPv4 or a dual-stack socket.
        let key = match ip {
            IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
            IpAddr::V6(a) => u128::from(a),
        };
        // The last client's slot first: a ping's probes come in runs from one address.
        let i = if self.slots[self.last].used && self.slots[self.last].key == key {
            self.last
        } else {
            let i = self.find(key, now);
            self.last = i;
            i
        };
        let b = &mut self.slots[i];
        let refill = now.saturating_sub(b.last_ns) as f64 * self.per_ns;
        b.tokens = (b.tokens + refill).min(self.burst);
        b.last_ns = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The slot of `key`, or a fresh one (a full bucket) in place of an empty or the idlest.
    fn find(&mut self, key: u128, now: u64) -> usize {
        let h = ((key as u64) ^ ((key >> 64) as u64)).wrapping_add(self.salt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let base = (h >> 32) as usize;
        let mut pick = base % RATE_TABLE;
        for k in 0..RATE_PROBES {
            let i = (base + k) % RATE_TABLE;
            let b = &self.slots[i];
            if b.used && b.key == key {
                return i;
            }
            let p = &self.slots[pick];
            if p.used && (!b.used || b.last_ns < p.last_ns) {
                pick = i;
            }
        }
        self.slots[pick] = Bucket { key, used: true, tokens: self.burst, last_ns: now };
        pick
    }
}

/// Decide datagram by datagram whether to answer it; counts what it refuses.
struct Gate {
    own_port: u16,
    allow: Vec<Cidr>,
    allow_low_ports: bool,
    cap: Option<RateCap>,
}

impl Gate {
    /// Whether to answer a datagram from `src` holding `data` received at `now`.
    #[inline]
    fn admit(&mut self, src: Option<SocketAddr>, data: &[u8], now: u64, refused: &mut Refused) -> bool {
        let Some(src) = src else {
            refused.not_probe += 1;
            return false;
        };
        let counter = if src.port() == self.own_port {
            &mut refused.own_port
        } else if src.port() == 0 || (src.port() < 1024 && !self.allow_low_ports) {
            &mut refused.low_port
        } else if !self.allow.is_empty() && !self.allow.iter().any(|c| c.contains(src.ip())) {
            &mut refused.not_allowed
        } else {
            match probe::classify(data) {
                probe::Kind::Reply => &mut refused.reply,
                probe::Kind::Other => &mut refused.not_probe,
                probe::Kind::Probe => {
                    let within = match self.cap.as_mut() {
                        None => true,
                        Some(cap) => cap.take(src.ip(), now),
                    };
                    if within {
                        return true;
                    }
                    &mut refused.rate_capped
                }
            }
        };
        *counter += 1;
        refused.total += 1;
        false
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
        cfg.validate()?;
        // A bare PORT is `[::]`: one dual-stack socket answers IPv4 and IPv6 pings alike (each
        // reply leaves by the family its probe came in on).
        let (sock, _) = wirespeed::addr::bind_listen(cfg.listen, false)?;
        let fd = sock.as_raw_fd();
        let _ = sys::set_rcvbuf(fd, cfg.buffer, true).or_else(|_| sys::set_rcvbuf(fd, cfg.buffer, false));
        let _ = sys::set_sndbuf(fd, cfg.buffer, true).or_else(|_| sys::set_sndbuf(fd, cfg.buffer, false));
        sys::set_rcvtimeo(fd, Duration::from_millis(100))
            .map_err(|e| Error::failed(format!("cannot set a receive timeout: {e}")))?;
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
                .map_err(|e| Error::invalid(format!("cannot pin the reflector to CPU {cpu}: {e}")))?;
        }
        let fd = self.sock.as_raw_fd();
        let listen = self.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let mut batch = sys::EchoBatch::new(cfg.batch.max(1), 65536);
        let mut admitted = vec![false; cfg.batch.max(1)];
        let mut refused = Refused::default();
        let own_port = self.local_addr().map_or(cfg.listen.port(), |a| a.port());
        let mut gate = Gate {
            own_port,
            allow: cfg.allow.clone(),
            allow_low_ports: cfg.allow_low_ports,
            cap: (cfg.max_pps_per_client > 0.0).then(|| RateCap::new(cfg.max_pps_per_client, cfg.burst())),
        };
        let mut table: [(Option<SocketAddr>, u64); MAX_CLIENTS] = [(None, 0); MAX_CLIENTS];
        let (mut received, mut reflected, mut bytes, mut errors, mut other) = (0u64, 0u64, 0u64, 0u64, 0u64);
        // Consecutive receive errors: a socket that only fails is a fault, not a pending error.
        let mut recv_errors = 0u64;
        let mut first_error = None;
        let t0 = sys::monotonic_ns();
        let cpu0 = sys::thread_cpu_ns();
        let end = cfg.duration.map(|d| t0 + d.as_nanos() as u64);
        let limit = cfg.count.unwrap_or(u64::MAX);
        let live = cfg.metrics.as_ref().map(|b| b.attach_reflect());
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
                        return Err(Error::failed(format!("the reflector cannot receive: {e}")));
                    }
                    continue;
                }
            };
            let n = n.min((limit - reflected) as usize);
            received += n as u64;
            // Decide first (one clock read per batch), then send each run of admitted
            // datagrams with one call: refused ones are skipped, never sent.
            let now = if gate.cap.is_some() { sys::monotonic_ns() } else { 0 };
            for (i, ok) in admitted.iter_mut().enumerate().take(n) {
                let src = batch.meta(i).src;
                let data = batch.data_mut(i);
                *ok = gate.admit(src, data, now, &mut refused);
                if *ok {
                    probe::mark_reply(data);
                }
            }
            let mut at = 0;
            while at < n {
                if !admitted[at] {
                    at += 1;
                    continue;
                }
                let end = (at..n).find(|&j| !admitted[j]).unwrap_or(n);
                let mut from = at;
                while from < end {
                    match batch.echo(fd, from, end) {
                        // sendmmsg stops at a message the kernel refused and keeps the error to
                        // itself; sending that message again would send it twice past a firewall
                        // that counts, so it is counted as not reflected.
                        Ok(k) if k < end - from => {
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
                at = end;
            }
            if let Some(p) = progress {
                p.store(reflected, Ordering::Relaxed);
            }
            if let Some(l) = &live {
                l.publish(received, reflected, bytes, errors, refused.by_reason());
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
            refused,
            policy: Policy {
                allow: cfg.allow.iter().map(|c| c.to_string()).collect(),
                allow_low_ports: cfg.allow_low_ports,
                max_pps_per_client: cfg.max_pps_per_client,
                client_burst: cfg.burst(),
            },
            clients,
            other_clients: other,
            seconds,
            cpu_ns_per_datagram: if received > 0 { cpu_ns as f64 / received as f64 } else { 0.0 },
            cpu: sys::current_cpu(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parses_matches_and_refuses_nonsense() {
        let c: Cidr = "198.18.0.0/15".parse().unwrap();
        assert!(c.contains("198.19.255.1".parse().unwrap()));
        assert!(!c.contains("198.20.0.1".parse().unwrap()));
        // An IPv4 client on a dual-stack socket arrives IPv4-mapped.
        assert!(c.contains("::ffff:198.18.0.9".parse().unwrap()));
        assert!(!c.contains("2001:db8::1".parse().unwrap()));
        let host: Cidr = "10.1.2.3".parse().unwrap();
        assert_eq!(host.to_string(), "10.1.2.3/32");
        assert!(host.contains("10.1.2.3".parse().unwrap()) && !host.contains("10.1.2.4".parse().unwrap()));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains("2001:db8:ffff::1".parse().unwrap()) && !v6.contains("10.0.0.1".parse().unwrap()));
        let any: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(any.contains("203.0.113.7".parse().unwrap()));
        for bad in ["nonsense", "10.0.0.0/33", "10.0.0.0/x", "::/129", "", "10.0.0.0/"] {
            assert!(bad.parse::<Cidr>().unwrap_err().contains("is not a network"), "{bad}");
        }
        assert!("10.0.0.1/8".parse::<Cidr>().unwrap_err().contains("did you mean 10.0.0.0/8"));
    }

    #[test]
    fn token_bucket_is_exact_and_per_address() {
        let mut cap = RateCap::new(1000.0, 5);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let t = 1_000_000_000;
        assert_eq!((0..20).filter(|_| cap.take(a, t)).count(), 5);
        assert_eq!((0..20).filter(|_| cap.take(b, t)).count(), 5, "a bucket of its own");
        // 1000/s refills one token per ms, never beyond the burst.
        assert!(cap.take(a, t + 1_000_000) && !cap.take(a, t + 1_000_000));
        assert_eq!((0..20).filter(|_| cap.take(a, t + 60_000_000_000)).count(), 5);
    }

    #[test]
    fn a_full_table_evicts_and_never_allocates() {
        let mut cap = RateCap::new(1.0, 2);
        for i in 0..(RATE_TABLE as u32 * 4) {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert!(cap.take(ip, u64::from(i)), "a newcomer starts with a full bucket");
        }
        assert_eq!(cap.slots.len(), RATE_TABLE);
    }

    #[test]
    fn the_gate_counts_each_reason() {
        let mut gate = Gate {
            own_port: 7149,
            allow: vec!["127.0.0.0/8".parse().unwrap()],
            allow_low_ports: false,
            cap: Some(RateCap::new(0.001, 1)),
        };
        let mut probe_buf = vec![0u8; 64];
        probe::init(&mut probe_buf, 1);
        let mut reply = probe_buf.clone();
        probe::mark_reply(&mut reply);
        let src = |s: &str| Some(s.parse::<SocketAddr>().unwrap());
        let mut r = Refused::default();
        assert!(!gate.admit(src("127.0.0.1:7149"), &probe_buf, 0, &mut r));
        assert!(!gate.admit(src("127.0.0.1:7"), &probe_buf, 0, &mut r));
        assert!(!gate.admit(src("127.0.0.1:0"), &probe_buf, 0, &mut r));
        assert!(!gate.admit(src("10.0.0.1:40000"), &probe_buf, 0, &mut r));
        assert!(!gate.admit(src("127.0.0.1:40000"), &reply, 0, &mut r));
        assert!(!gate.admit(src("127.0.0.1:40000"), b"hello", 0, &mut r));
        assert!(gate.admit(src("127.0.0.1:40000"), &probe_buf, 0, &mut r));
        assert!(!gate.admit(src("127.0.0.1:40001"), &probe_buf, 0, &mut r), "same address, same bucket");
        assert_eq!(
            r,
            Refused { total: 7, own_port: 1, low_port: 2, not_allowed: 1, reply: 1, not_probe: 1, rate_capped: 1 }
        );
        gate.allow_low_ports = true;
        gate.cap = None;
        assert!(gate.admit(src("127.0.0.1:7"), &probe_buf, 0, &mut r));
        assert!(!gate.admit(src("127.0.0.1:0"), &probe_buf, 0, &mut r), "port 0 is never a client");
    }
}
