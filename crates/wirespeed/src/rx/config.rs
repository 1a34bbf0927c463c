//! What a receive run is asked to do ([`RecvConfig`]) and the limits every front end is held
//! to before anything is allocated.

use super::backend::BackendKind;
use crate::error::{Error, Result};
use crate::ledger::{LedgerConfig, StreamLedger};
use crate::units;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Receive buffer asked for by default: enough for tens of milliseconds at 10 Gb/s.
pub const DEFAULT_RCVBUF: usize = 32 << 20;

/// Default nap after a partial batch: turns one wake-up per datagram into one per batch at
/// moderate rates (on a VM, where a wake-up from idle costs tens of microseconds, this cuts
/// receive CPU per datagram about fourfold). Capped by [`nap_cap_ns`](super::nap_cap_ns) for
/// small buffers.
pub const DEFAULT_COALESCE: Duration = Duration::from_millis(1);

/// Everything a receive run needs.
#[derive(Clone, Debug)]
pub struct RecvConfig {
    /// Address to bind: `0.0.0.0:PORT`, a local address, or a multicast group.
    pub listen: SocketAddr,
    /// Which receive path reads the datagrams: named here so that a front end chooses a
    /// backend by configuration, and the capture never names one itself.
    pub backend: BackendKind,
    /// Socket receive buffer to ask for, bytes.
    pub rcvbuf: usize,
    /// Ask the kernel for UDP GRO (coalesced datagrams, split again here).
    pub gro: bool,
    /// CPU to pin the capture thread to.
    pub cpu: Option<usize>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop once this many datagrams have been received (the last batch is finished).
    pub count: Option<u64>,
    /// Stop when every stream of the first sender run has said it ended.
    pub once: bool,
    /// Datagrams per receive call.
    pub batch: usize,
    /// Most streams tracked (their ledgers are preallocated).
    pub max_streams: usize,
    /// Ledger settings (reorder window, resync threshold...).
    pub ledger: LedgerConfig,
    /// Interface address for multicast joins (default: the kernel's choice).
    pub multicast_iface: Option<Ipv4Addr>,
    /// Poll without blocking (burns the capture core, saves wake-up latency).
    pub busy_poll: bool,
    /// After a receive call that did not fill the batch, nap this long before the next one, so
    /// that datagrams are taken in batches instead of one wake-up each (user-space interrupt
    /// moderation). The socket buffer holds what arrives meanwhile; zero disables.
    pub coalesce: Duration,
    /// How many gap ranges each stream shows in the human summary.
    pub show_gaps: usize,
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
            duration: None,
            count: None,
            once: false,
            batch: 64,
            max_streams: 64,
            ledger: LedgerConfig::default(),
            multicast_iface: None,
            busy_poll: false,
            coalesce: DEFAULT_COALESCE,
            show_gaps: 8,
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

impl RecvConfig {
    /// Refuse a configuration whose preallocated buffers no run could use, before anything is
    /// allocated: the library's own guard, so that every front end (the CLI's parsers give the
    /// same limits earlier, with the option's name) is held to it.
    pub fn check_limits(&self) -> Result<()> {
        if self.max_streams == 0 || self.batch == 0 {
            return Err(Error::Usage("--max-streams and --batch must be at least 1".into()));
        }
        if self.batch > MAX_BATCH {
            return Err(Error::Usage(format!("--batch {} is more than {MAX_BATCH} datagrams a call", self.batch)));
        }
        if self.max_streams > MAX_TRACKED_STREAMS {
            return Err(Error::Usage(format!(
                "--max-streams {} is more than the {MAX_TRACKED_STREAMS} streams one receiver tracks",
                self.max_streams
            )));
        }
        if self.ledger.window == 0 || self.ledger.window > MAX_WINDOW {
            return Err(Error::Usage(format!(
                "--window {} is out of range: give 1..{MAX_WINDOW} (one bit per number per stream, allocated up front)",
                self.ledger.window
            )));
        }
        check_ledger_budget(self.max_streams, self.ledger.window)
    }
}

/// Refuse a streams x window whose ledgers together would take more than [`LEDGER_BUDGET`]:
/// each bound alone is sane, their product need not be.
pub fn check_ledger_budget(max_streams: usize, window: u64) -> Result<()> {
    let per = StreamLedger::bytes_for(window);
    let total = per.saturating_mul(max_streams as u64);
    if total > LEDGER_BUDGET {
        return Err(Error::Usage(format!(
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
        assert!(c.check_limits().unwrap_err().to_string().contains("--window"));
        c.ledger.window = MAX_WINDOW;
        c.max_streams = MAX_TRACKED_STREAMS;
        assert!(c.check_limits().unwrap_err().to_string().contains("ledger memory"));
        c.ledger.window = 65536;
        c.batch = MAX_BATCH + 1;
        assert!(c.check_limits().unwrap_err().to_string().contains("--batch"));
        c.batch = 0;
        assert!(c.check_limits().is_err());
    }
}
