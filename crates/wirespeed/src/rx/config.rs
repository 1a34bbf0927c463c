//! What a receive run is asked to do ([`RecvConfig`]) and the limits every front end is held
//! to before anything is allocated.

use super::backend::BackendKind;
use crate::error::{Error, Result};
use crate::ledger::{LedgerConfig, StreamLedger};
use crate::sys::bpf::Steer;
use crate::units;
use std::net::SocketAddr;
use std::time::Duration;

/// Receive buffer asked for by default: enough for tens of milliseconds at 10 Gb/s.
pub const DEFAULT_RCVBUF: usize = 32 << 20;

/// Receive buffer `record` asks for by default. A recorder promises zero loss, and its socket
/// buffer is all that covers the time its capture thread is kept off its CPU: at 1.32 GB/s of
/// 8800-byte datagrams the default 32 MiB (granted as 64 MiB, each datagram counted as 16.6 KB)
/// holds 4,032 datagrams, 27 ms, and a hypervisor here took 150 ms of the recorder's CPU in 3 s,
/// dropping 2,908 datagrams with the ring resident and 4.5 % full (BENCHMARKS 15a). 256 MiB
/// holds about 215 ms. The kernel takes the memory only while datagrams wait.
pub const RECORD_DEFAULT_RCVBUF: usize = 256 << 20;

/// Default nap after a partial batch: turns one wake-up per datagram into one per batch at
/// moderate rates (on a VM, where a wake-up from idle costs tens of microseconds, this cuts
/// receive CPU per datagram about fourfold). Capped by [`nap_cap_ns`](super::nap_cap_ns) for
/// small buffers.
pub const DEFAULT_COALESCE: Duration = Duration::from_millis(1);

/// Everything a receive run needs.
#[derive(Clone, Debug)]
pub struct RecvConfig {
    /// Address to bind: `[::]:PORT` (every address, IPv4 and IPv6: what a bare PORT means),
    /// `0.0.0.0:PORT`, a local address of either family, or a multicast group.
    pub listen: SocketAddr,
    /// Which receive path reads the datagrams: named here so that a front end chooses a
    /// backend by configuration, and the capture never names one itself.
    pub backend: BackendKind,
    /// Socket receive buffer to ask for, bytes.
    pub rcvbuf: usize,
    /// Ask the kernel for UDP GRO (coalesced datagrams, split again here).
    pub gro: bool,
    /// CPU to pin the capture thread to (one-thread runs; `cpus` for several).
    pub cpu: Option<usize>,
    /// Capture threads, each with its own socket in one SO_REUSEPORT group, its own ledgers
    /// (and, recording, its own ring and writer). 1: one socket, no group, as before.
    pub threads: usize,
    /// CPUs to pin the capture threads to, thread `i` to `cpus[i]` (empty: not pinned).
    pub cpus: Vec<usize>,
    /// How the kernel spreads datagrams over the threads: every datagram of a stream goes to
    /// one thread, so that each stream's ledger lives on one thread.
    pub steer: Steer,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop once this many datagrams have been received (the last batch is finished).
    pub count: Option<u64>,
    /// Stop when every stream of the first sender run has said it ended.
    pub once: bool,
    /// With `once`: how long to wait in silence after an end message that could not be
    /// believed (or after the transport gave up data that may have held it) before giving up
    /// on the end. Long enough that a live stream's pause is not taken for its end; short
    /// enough that a run whose own end was lost does not hang.
    pub once_quiet: Duration,
    /// Datagrams per receive call.
    pub batch: usize,
    /// Most streams tracked (their ledgers are preallocated).
    pub max_streams: usize,
    /// Ledger settings (reorder window, resync threshold...).
    pub ledger: LedgerConfig,
    /// Interface for multicast joins: an IPv4 address, or an interface by index (either
    /// family). Default: the kernel's choice, or for an IPv6 group the group's scope id; a
    /// link-local IPv6 group needs one of them ([`crate::addr::multicast_v6_index`]).
    pub multicast_iface: Option<crate::addr::Iface>,
    /// Poll without blocking (burns the capture core, saves wake-up latency).
    pub busy_poll: bool,
    /// After a receive call that did not fill the batch, nap this long before the next one, so
    /// that datagrams are taken in batches instead of one wake-up each (user-space interrupt
    /// moderation). The socket buffer holds what arrives meanwhile; zero disables.
    pub coalesce: Duration,
    /// How many gap ranges each stream shows in the human summary.
    pub show_gaps: usize,
    /// Scheduling asked for: each capture thread takes its SCHED_FIFO (`realtime`) itself when
    /// it starts; the nice value and memory locking are the caller's, once for the process
    /// ([`Priority::apply_process`](crate::priority::Priority::apply_process)).
    pub priority: crate::priority::Priority,
    /// Who is shown the run's live counters while it runs (a metrics exporter, `--metrics`), if
    /// anyone: the capture then also publishes each stream's counters (between receive calls).
    pub show: Option<std::sync::Arc<dyn crate::rx::ShowCapture>>,
    /// The PGM session settings, for the PGM backend (`--transport pgm`).
    pub pgm: crate::pgm::PgmConfig,
    /// The largest datagram a PGM session carries (its receive window holds this many bytes
    /// per sequence number): the format's length when it has one.
    pub pgm_max_tsdu: usize,
}

impl RecvConfig {
    /// Defaults for a listen address.
    pub fn new(listen: SocketAddr) -> Self {
        RecvConfig {
            listen,
            backend: BackendKind::default(),
            rcvbuf: DEFAULT_RCVBUF,
            gro: false,
            cpu: None,
            threads: 1,
            cpus: Vec::new(),
            steer: Steer::Source,
            duration: None,
            count: None,
            once: false,
            once_quiet: Duration::from_nanos(super::capture::ONCE_QUIET_NS),
            batch: 64,
            max_streams: 64,
            ledger: LedgerConfig::default(),
            multicast_iface: None,
            busy_poll: false,
            coalesce: DEFAULT_COALESCE,
            show_gaps: 8,
            priority: crate::priority::Priority::default(),
            show: None,
            pgm: crate::pgm::PgmConfig::default(),
            pgm_max_tsdu: 9000,
        }
    }
}

/// Largest reorder window: 16 Mi sequence numbers (a 2 MiB bitmap per stream), several seconds
/// of reordering even at millions of datagrams per second.
pub const MAX_WINDOW: u64 = 1 << 24;

/// Most streams one receiver tracks (each has a preallocated ledger of about 100 KiB, most of
/// it room for gap ranges; 8192 of them stay under [`LEDGER_BUDGET`] with the default window).
pub const MAX_TRACKED_STREAMS: usize = 8192;

/// Most memory the ledgers of one receiver may take (streams x per-stream ledger).
pub const LEDGER_BUDGET: u64 = 1 << 30;

/// Most datagrams per receive call (the buffers for one call are allocated up front).
pub const MAX_BATCH: usize = 1024;

/// Most capture threads of one run (each has its own socket, buffers and ledgers).
pub const MAX_THREADS: usize = 64;

impl RecvConfig {
    /// Refuse a configuration whose preallocated buffers no run could use, before anything is
    /// allocated: the library's own guard, so that every front end (the CLI's parsers give the
    /// same limits earlier, with the option's name) is held to it.
    pub fn check_limits(&self) -> Result<()> {
        if let SocketAddr::V6(g) = self.listen {
            if g.ip().is_multicast() {
                crate::addr::multicast_v6_index(g, self.multicast_iface.as_ref(), "--iface")?;
            }
        }
        if self.max_streams == 0 || self.batch == 0 {
            return Err(Error::invalid("--max-streams and --batch must be at least 1"));
        }
        if self.batch > MAX_BATCH {
            return Err(Error::param("batch", format!("{} is more than {MAX_BATCH} datagrams a call", self.batch)));
        }
        if self.max_streams > MAX_TRACKED_STREAMS {
            return Err(Error::param(
                "max-streams",
                format!("{} is more than the {MAX_TRACKED_STREAMS} streams one receiver tracks", self.max_streams),
            ));
        }
        if self.ledger.window == 0 || self.ledger.window > MAX_WINDOW {
            return Err(Error::param(
                "window",
                format!(
                    "{} is out of range: give 1..{MAX_WINDOW} (one bit per number per stream, allocated up front)",
                    self.ledger.window
                ),
            ));
        }
        if self.threads == 0 || self.threads > MAX_THREADS {
            return Err(Error::param(
                "threads",
                format!(
                    "{} is out of range: give 1..{MAX_THREADS} (one socket and one set of ledgers per thread)",
                    self.threads
                ),
            ));
        }
        if !self.cpus.is_empty() && self.cpus.len() < self.threads {
            return Err(Error::invalid(format!(
                "--cpus names {} CPU(s) for {} capture threads: give one CPU per thread, e.g. --cpus 2-{}",
                self.cpus.len(),
                self.threads,
                1 + self.threads
            )));
        }
        if self.cpu.is_some() && self.threads > 1 {
            return Err(Error::invalid(format!(
                "--cpu pins one capture thread, and there are {}: give --cpus with one CPU per thread instead, e.g. --cpus 2-{}",
                self.threads,
                1 + self.threads
            )));
        }
        if self.cpu.is_some() && !self.cpus.is_empty() {
            return Err(Error::invalid("--cpu and --cpus both pin the capture: give one of them"));
        }
        // Every thread preallocates ledgers for --max-streams streams (any stream may be
        // steered to any thread).
        check_ledger_budget(self.max_streams.saturating_mul(self.threads), self.ledger.window)
    }
}

/// Refuse a streams x window whose ledgers together would take more than [`LEDGER_BUDGET`]:
/// each bound alone is sane, their product need not be.
pub fn check_ledger_budget(max_streams: usize, window: u64) -> Result<()> {
    let per = StreamLedger::bytes_for(window);
    let total = per.saturating_mul(max_streams as u64);
    if total > LEDGER_BUDGET {
        return Err(Error::invalid(format!(
            "--max-streams {max_streams} with --window {window} needs {} of ledger memory ({} a stream), more than the {} allowed: lower --max-streams or --window",
            units::bytes(total),
            units::bytes(per),
            units::bytes(LEDGER_BUDGET)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library's own guard: a front end that skips the CLI's parsers still cannot make a
    /// receiver allocate 128 GiB of ledger (issue 13's `--window 1099511627776`).
    #[test]
    fn limits_are_checked_before_anything_is_allocated() {
        let mut c = RecvConfig::new("127.0.0.1:0".parse().unwrap());
        assert!(c.check_limits().is_ok());
        c.ledger.window = 1 << 40;
        let e = c.check_limits().unwrap_err();
        assert_eq!((e.kind(), e.param_name()), (crate::Kind::Invalid, Some("window")), "{e}");
        c.ledger.window = MAX_WINDOW;
        c.max_streams = MAX_TRACKED_STREAMS;
        assert!(c.check_limits().unwrap_err().to_string().contains("ledger memory"));
        c.ledger.window = 65536;
        c.batch = MAX_BATCH + 1;
        assert_eq!(c.check_limits().unwrap_err().param_name(), Some("batch"));
        c.batch = 0;
        assert!(c.check_limits().is_err());
        let mut t = RecvConfig::new("127.0.0.1:0".parse().unwrap());
        t.threads = 4;
        t.cpus = vec![2, 3];
        assert!(t.check_limits().unwrap_err().to_string().contains("one CPU per thread"));
        t.cpus = vec![2, 3, 4, 5];
        assert!(t.check_limits().is_ok());
        t.cpu = Some(1);
        assert!(t.check_limits().unwrap_err().to_string().contains("--cpus"));
        t.cpu = None;
        t.threads = MAX_THREADS + 1;
        assert_eq!(t.check_limits().unwrap_err().param_name(), Some("threads"));
    }
}
