//! `wirespeed recv`: receive and account for every datagram, beside the kernel's counters.

use crate::args::{learn_family, recv_config, recv_format, serving, RecvArgs};
use crate::out::{guard_verdict, loss_verdict, print_json, WithPriority};
use wirespeed::rx::{self, Listener};
use wirespeed::{sys, Error};
use wirespeed_lab::exporter::WithMetrics;

pub fn cmd_recv(a: RecvArgs) -> Result<u8, Error> {
    let mut cfg = recv_config(&a)?;
    let mut fmt = recv_format(&a)?;
    let learn = learn_family(&a);
    let exporter = a.metrics.start("recv")?;
    cfg.show = exporter
        .as_ref()
        .map(|e| std::sync::Arc::new(e.board.clone()) as std::sync::Arc<dyn wirespeed::rx::ShowCapture>);
    // Refused before anything is opened; then applied once for the process (the capture
    // threads take their SCHED_FIFO themselves).
    cfg.priority.check(cfg.busy_poll, 0)?;
    let stop = sys::install_stop_handler();
    let applied = cfg.priority.apply_process()?;
    let mut listener = Listener::bind_for(&cfg, fmt.as_ref())?;
    // Always on stderr, so scripts that bind port 0 can learn the port even with --json.
    if let Some(addr) = listener.local_addr() {
        let what = match learn {
            Some(family) => format!("learning the {family} layout from the stream's headers"),
            None => fmt.name(),
        };
        eprintln!(
            "wirespeed recv: listening on {} ({what}); Ctrl-C stops and prints the ledger",
            wirespeed::addr::shown(addr),
        );
    }
    let mut learned = None;
    if let Some(family) = learn {
        let (f, layout) = rx::learn(&mut listener, family, stop, cfg.duration, rx::learn::HOLD_MAX)?;
        // The run's --duration counts the time spent learning.
        cfg.duration = cfg.duration.map(|d| d.saturating_sub(layout.spent));
        for line in layout.lines() {
            eprintln!("wirespeed recv: {line}");
        }
        fmt = f;
        learned = Some(layout);
    }
    if let Some(e) = &exporter {
        e.announce("recv");
    }
    let as_json = a.interval_json;
    let progress = |p: &rx::Progress| {
        let j = if as_json { serde_json::to_string(p).ok() } else { None };
        eprintln!("{}", j.unwrap_or_else(|| p.line()));
    };
    let mut report = rx::capture(&cfg, listener, fmt.as_ref(), stop, a.interval, &progress)?;
    report.learned = learned;
    if a.json {
        let metrics = serving(&exporter);
        print_json(&WithMetrics { report: &WithPriority { report: &report, priority: &applied }, metrics })?;
    } else {
        print!("{}", report.human(a.gaps));
        if !cfg.priority.is_default() {
            println!("  {}", applied.line("capture thread(s)"));
        }
        if let Some(s) = serving(&exporter) {
            println!("  {}", s.line());
        }
    }
    Ok(guard_verdict(loss_verdict(&report, a.expect_zero_loss)))
}
