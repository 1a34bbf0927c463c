//! `wirespeed recv`: receive and account for every datagram, beside the kernel's counters.

use crate::args::{recv_config, recv_format, RecvArgs};
use crate::out::{guard_verdict, loss_verdict, print_json, WithPriority};
use wirespeed::rx::{self, Listener};
use wirespeed::{sys, Error};

pub fn cmd_recv(a: RecvArgs) -> Result<u8, Error> {
    let cfg = recv_config(&a)?;
    let fmt = recv_format(&a)?;
    // Refused before anything is opened; then applied once for the process (the capture
    // threads take their SCHED_FIFO themselves).
    cfg.priority.check(cfg.busy_poll, 0)?;
    let stop = sys::install_stop_handler();
    let applied = cfg.priority.apply_process()?;
    let listener = Listener::bind_for(&cfg, fmt.as_ref())?;
    // Always on stderr, so scripts that bind port 0 can learn the port even with --json.
    if let Some(addr) = listener.local_addr() {
        eprintln!(
            "wirespeed recv: listening on {} ({}); Ctrl-C stops and prints the ledger",
            wirespeed::addr::shown(addr),
            fmt.name()
        );
    }
    let as_json = a.interval_json;
    let progress = |p: &rx::Progress| {
        let j = if as_json { serde_json::to_string(p).ok() } else { None };
        eprintln!("{}", j.unwrap_or_else(|| p.line()));
    };
    let report = rx::capture(&cfg, listener, fmt.as_ref(), stop, a.interval, &progress)?;
    if a.json {
        print_json(&WithPriority { report: &report, priority: &applied })?;
    } else {
        print!("{}", report.human(a.gaps));
        if !cfg.priority.is_default() {
            println!("  {}", applied.line("capture thread(s)"));
        }
    }
    Ok(guard_verdict(loss_verdict(&report, a.expect_zero_loss)))
}
