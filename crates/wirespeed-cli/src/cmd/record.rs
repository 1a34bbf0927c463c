//! `wirespeed record`: capture to disk through a RAM ring, with the ledger per file.

use crate::args::{self, recv_config, recv_format, serving, RecvArgs};
use crate::out::{guard_verdict, loss_verdict, print_json, WithPriority};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::record::{self, RecordConfig};
use wirespeed::rx::Listener;
use wirespeed::spool::writer::Rotation;
use wirespeed::spool::FileFormat;
use wirespeed::units::{self, Rate};
use wirespeed::{sys, Error};
use wirespeed_lab::exporter::WithMetrics;

#[derive(Args)]
pub struct RecordArgs {
    #[command(flatten)]
    recv: RecvArgs,
    /// Directory for the recorded files and their JSON sidecars (must exist). Give it once per
    /// disk (or a quoted glob such as '/mnt/disk*') to record a scan scattered over them: the
    /// scan is then cut into chunks that go to whichever disk is free (see --layout).
    #[arg(short = 'o', long = "out", value_name = "DIR", required_unless_present = "sink")]
    out: Vec<PathBuf>,
    /// Record a scan in the layout VLBI stations read: flexbuff (`<disk>/<SCAN>/<SCAN>.NNNNNNNN`
    /// chunks, jive5ab's default) or mark6 (one `<disk>/<SCAN>` file of numbered blocks per
    /// disk). The default with several -o is flexbuff; with one -o, files as usual.
    #[arg(long, value_parser = wirespeed::spool::scan::ScanLayout::parse)]
    layout: Option<wirespeed::spool::scan::ScanLayout>,
    /// The scan's name (letters, digits, '_', '-', '+': jive5ab cannot read back a name with a
    /// '.'), e.g. exp1_ef_no0001; by default
    /// PREFIX_YYYYMMDDTHHMMSSZ. A scan already on any of the disks is refused, never written over.
    #[arg(long, value_name = "NAME")]
    scan: Option<String>,
    /// Bytes per chunk of a scan (FlexBuff chunk or Mark6 block), rounded down to whole frames:
    /// 128M for flexbuff (jive5ab's smallest work buffer: 16,710 frames of 8,032 bytes) and 8M
    /// for mark6 by default. Each chunk stays in the RAM ring until its disk has it, so a disk
    /// that fails loses nothing: the chunk is written to another.
    #[arg(long, value_parser = args::chunk_size)]
    chunk_size: Option<u64>,
    /// File layout: raw (payloads back to back: a VDIF or Mark5B stream becomes a file VLBI
    /// software opens directly; needs a fixed datagram length, e.g. --size) or pcap
    /// (nanosecond pcap with the source address of every datagram, for tshark and Wireshark).
    #[arg(long, default_value = "raw", value_parser = FileFormat::parse)]
    file_format: FileFormat,
    /// `null` keeps nothing: receive and account only (the network side alone, like writing to
    /// /dev/null).
    #[arg(long, value_parser = ["null"])]
    sink: Option<String>,
    /// RAM burst buffer between the capture thread and the disk (preallocated, and locked in
    /// RAM where allowed). When the input outruns the disk the buffer absorbs it; if it fills,
    /// datagrams are dropped and counted as ring-full loss. At most this host's physical
    /// memory. Readiness costs time: every page is faulted in before 'listening on' is printed
    /// (so a full-rate stream from then loses nothing), which takes a fraction of a second per
    /// GiB of recently used memory and seconds per GiB of cold memory (a VM's after
    /// drop_caches); progress is shown each second, and ring.ready_s says how long it took.
    #[arg(long, default_value = "1G", value_parser = args::ring_buffer)]
    buffer: u64,
    /// Bytes per disk write (a multiple of 4K, 4K..1G).
    #[arg(long, default_value = "8M", value_parser = args::block)]
    block: u64,
    /// Start a new file before one would exceed this size (e.g. 1G). Space for each file is
    /// reserved up front (1M..16T).
    #[arg(long, value_parser = args::file_size)]
    file_size: Option<u64>,
    /// Start a new file at every multiple of this wall-clock period (UTC), e.g. 10s or 1m.
    #[arg(long, value_parser = units::parse_duration)]
    rotate: Option<Duration>,
    /// File name prefix: files are named PREFIX-YYYYMMDDTHHMMSSZ-NNNN.EXT inside -o (so no '/',
    /// no leading '.'). A name another file holds (another recorder started in the same
    /// second) is passed over: NNNN takes the next free number.
    #[arg(long, default_value = "wirespeed")]
    prefix: String,
    /// Write through the page cache instead of O_DIRECT (slower on most disks: see disk-test).
    #[arg(long)]
    buffered: bool,
    /// Write data that has waited this long even if less than a --block has gathered (bounds
    /// what a crash can lose at low rates; 10ms..1h).
    #[arg(long, default_value = "1s", value_parser = args::flush)]
    flush: Duration,
    /// The rate you expect (e.g. 8G, payload bits/s). The disk is measured briefly at start
    /// and a warning given if it cannot keep up for the run's --duration.
    #[arg(long, value_parser = Rate::parse)]
    expect_rate: Option<Rate>,
    /// Pin the writer thread to this CPU.
    #[arg(long)]
    writer_cpu: Option<usize>,
    /// Also write datagrams the format finds invalid (wrong length, header or payload), as
    /// evidence of what arrived; best with --file-format pcap (a raw file can hold only those
    /// of the right length). By default they are counted (invalid in the ledger, not_written
    /// in the sidecar) but left out of the file, like duplicates, which are never written.
    #[arg(long)]
    keep_invalid: bool,
    /// Publish the RAM ring(s) read-only under NAME, for `wirespeed tap NAME` in this or any
    /// other partition of the host (needs --file-format pcap). Taps never slow the recorder.
    /// The descriptor is /run/wirespeed/share/NAME.json (or in $WIRESPEED_SHARE_DIR), removed
    /// at the end; a second recorder with the same NAME is refused while this one runs.
    #[arg(long, value_name = "NAME")]
    share: Option<String>,
    /// Long-running recorders: the time index and retention.
    #[command(flatten)]
    long_run: LongRunArgs,
}

/// `record`'s options for recorders that run for months.
#[derive(Args)]
pub struct LongRunArgs {
    /// Leave the time index out of the sidecars (`wirespeed extract` then reads whole files).
    /// The index costs the writer a little CPU and the disk under 0.1 % of the data; this
    /// option exists to measure that, not to save it.
    #[arg(long)]
    no_index: bool,
    /// Keep this much of the disk free, as a share (10%) or a size (50G): the oldest finished
    /// files of this --prefix (with their sidecars) are deleted, oldest first, to keep it, so a
    /// recorder that runs for months never fills its disk. Never the file being written, never
    /// a file `extract`, `verify` or Python is reading (the next oldest goes instead), never
    /// another program's file. Each deletion is a line on stderr (the journal) and counted in
    /// --metrics. Files are cut at --file-size or --rotate (1G files when neither is given).
    /// Without this (or --keep-for) a disk that fills stops the recording.
    #[arg(long, value_name = "PERCENT|SIZE", value_parser = wirespeed::spool::retention::KeepFree::parse)]
    keep_free: Option<wirespeed::spool::retention::KeepFree>,
    /// Delete finished files of this --prefix older than this (e.g. 7d, 12h), as --keep-free
    /// does.
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration)]
    keep_for: Option<Duration>,
}

/// Files a recorder with retention cuts its series into when neither --file-size nor --rotate
/// is given: retention deletes whole files.
const RETENTION_FILE_SIZE: u64 = 1 << 30;

/// The retention the options ask for, checked against the disk; it may set the file size.
fn retention(
    a: &RecordArgs,
    dir: &std::path::Path,
    cfg: &mut RecordConfig,
) -> Result<Option<record::RetentionTarget>, Error> {
    use wirespeed::spool::retention::Retention;
    let (keep_free, keep_for) = (a.long_run.keep_free, a.long_run.keep_for);
    if keep_free.is_none() && keep_for.is_none() {
        return Ok(None);
    }
    if cfg.null_sink || cfg.scan.is_some() {
        return Err(Error::invalid(
            "--keep-free and --keep-for delete the oldest files of a file series in one -o directory: not with --sink null or a scan",
        ));
    }
    if keep_for.is_some_and(|d| d < Duration::from_secs(1)) {
        return Err(Error::invalid("--keep-for must be at least 1s"));
    }
    if cfg.rotation.max_bytes.is_none() && cfg.rotation.period.is_none() {
        cfg.rotation.max_bytes = Some(RETENTION_FILE_SIZE);
        eprintln!(
            "wirespeed record: retention deletes whole files: cutting the recording into {} files (give --file-size or --rotate to choose)",
            units::bytes(RETENTION_FILE_SIZE)
        );
    }
    if let Some(kf) = keep_free {
        let (total, _) = sys::file::space(dir)
            .map_err(|e| Error::os(format!("cannot read the size of the disk holding {}: {e}", dir.display()), &e))?;
        let want = kf.bytes(total);
        if want >= total {
            return Err(Error::invalid(format!(
                "--keep-free {} is the whole disk ({}): keep less free",
                units::bytes(want),
                units::bytes(total)
            )));
        }
        if let Some(fs) = cfg.rotation.max_bytes {
            if want < 2 * fs {
                eprintln!(
                    "wirespeed record: warning: --keep-free {} is less than two files of {}: a file is reserved whole when it opens, so the disk can fill before the oldest is deleted",
                    units::bytes(want),
                    units::bytes(fs)
                );
            }
        }
    }
    let say: wirespeed::spool::scatter::Say = std::sync::Arc::new(|line: &str| eprintln!("{line}"));
    Ok(Some(record::RetentionTarget { rules: Retention { keep_free, keep_for }, say: Some(say) }))
}

/// The scan to record, if the options ask for one (several -o, --layout or --scan).
fn scan_target(a: &RecordArgs, mounts: &[PathBuf], null_sink: bool) -> Result<Option<record::ScanTarget>, Error> {
    use wirespeed::spool::scan::{ScanLayout, FLEXBUFF_CHUNK, MARK6_BLOCK};
    if mounts.len() < 2 && a.layout.is_none() && a.scan.is_none() {
        if a.chunk_size.is_some() {
            return Err(Error::invalid("--chunk-size cuts a scan: give --layout flexbuff|mark6 or several -o"));
        }
        return Ok(None);
    }
    if null_sink {
        return Err(Error::invalid("--sink null keeps nothing: leave out --layout, --scan and the extra -o"));
    }
    let layout = a.layout.unwrap_or(ScanLayout::FlexBuff);
    let name = match &a.scan {
        Some(n) => n.clone(),
        None => format!("{}_{}", a.prefix, wirespeed::spool::utc_compact(sys::realtime_ns())),
    };
    wirespeed::spool::scan::validate_scan_name(&name).map_err(Error::invalid)?;
    let chunk = a.chunk_size.unwrap_or(match layout {
        ScanLayout::FlexBuff => FLEXBUFF_CHUNK,
        ScanLayout::Mark6 => MARK6_BLOCK,
    });
    let say: wirespeed::spool::scatter::Say = std::sync::Arc::new(|line: &str| eprintln!("{line}"));
    Ok(Some(record::ScanTarget { mounts: mounts.to_vec(), name, layout, chunk, say: Some(say) }))
}

pub fn cmd_record(a: RecordArgs) -> Result<u8, Error> {
    // Before anything is created: the prefix names files inside -o and nowhere else.
    wirespeed::spool::validate_prefix(&a.prefix).map_err(Error::invalid)?;
    let mut rcfg = recv_config(&a.recv)?;
    if a.recv.rcvbuf.is_none() {
        rcfg.rcvbuf = wirespeed::rx::RECORD_DEFAULT_RCVBUF;
    }
    let fmt = recv_format(&a.recv)?;
    let null_sink = a.sink.is_some();
    let mounts = wirespeed::spool::scan::expand_mounts(&a.out)?;
    let scan = scan_target(&a, &mounts, null_sink)?;
    let dir = mounts.first().cloned().unwrap_or_else(|| PathBuf::from("."));
    if !null_sink && scan.is_none() {
        record::check_dir(&dir)?;
    }
    if a.rotate.is_some_and(|r| r < Duration::from_secs(1)) {
        return Err(Error::invalid("--rotate must be at least 1s"));
    }
    let learn = crate::args::learn_family(&a.recv);
    let mut cfg = RecordConfig {
        dir: dir.clone(),
        prefix: a.prefix.clone(),
        file_format: a.file_format,
        null_sink,
        buffer: usize::try_from(a.buffer).unwrap_or(usize::MAX),
        chunk: usize::try_from(a.block).unwrap_or(0),
        rotation: Rotation { max_bytes: a.file_size, period: a.rotate },
        direct: !a.buffered,
        flush_after: a.flush,
        writer_cpu: a.writer_cpu,
        keep_invalid: a.keep_invalid,
        interval_json: a.recv.interval_json,
        share: a.share.clone(),
        learn: learn.map(str::to_string),
        show_rings: None,
        learn_fps: None,
        scan: scan.clone(),
        index: !a.long_run.no_index,
        retention: None,
    };
    cfg.retention = retention(&a, &dir, &mut cfg)?;
    if !null_sink {
        // Refused before anything is created: the same check the recorder makes (raw files
        // need a fixed datagram length).
        wirespeed::spool::ReadLayout::for_stream(&fmt, a.file_format).map_err(Error::invalid)?;
    }
    // Refused before anything is created: the ring is among what --lock-memory must lock.
    rcfg.priority.check(rcfg.busy_poll, if null_sink { 0 } else { a.buffer })?;
    let mut warnings = Vec::new();
    if let (Some(rate), false) = (a.expect_rate, null_sink) {
        let bytes_per_s = match rate {
            Rate::Bits(b) => b / 8.0,
            Rate::Packets(p) => p * fmt.packet_len().max(1) as f64,
            Rate::Max => f64::INFINITY,
        };
        eprintln!("wirespeed record: measuring {} (512 MiB with the recorder's own writes)...", dir.display());
        let t = record::disk_test(&dir, 512 << 20, cfg.chunk, cfg.direct, sys::install_stop_handler())?;
        if let Some(w) = record::rate_warning(bytes_per_s, t.bytes_per_s, cfg.buffer as u64, rcfg.duration) {
            eprintln!("wirespeed record: warning: {w}");
            warnings.push(w);
        }
    }
    let exporter = a.recv.metrics.start("record")?;
    if let Some(e) = &exporter {
        rcfg.show = Some(std::sync::Arc::new(e.board.clone()));
        cfg.show_rings = Some(std::sync::Arc::new(e.board.clone()));
    }
    let stop = sys::install_stop_handler();
    let applied = rcfg.priority.apply_process()?;
    let bind = || -> Result<Listener, Error> {
        let listener = Listener::bind_for(&rcfg, fmt.as_ref())?;
        if let Some(addr) = listener.local_addr() {
            eprintln!(
                "wirespeed record: listening on {} ({}), {} -> {}{}; Ctrl-C stops, drains the buffer and finishes the files",
                wirespeed::addr::shown(addr),
                match &learn {
                    Some(family) => format!("learning the {family} layout from the stream's headers"),
                    None => fmt.name(),
                },
                if null_sink { "keeping nothing".to_string() } else { format!("{} ring", units::bytes(cfg.buffer as u64)) },
                match (&scan, null_sink) {
                    (_, true) => "-".to_string(),
                    (Some(t), _) => format!("{} scan {} over {} disk(s)", t.layout.name(), t.name, t.mounts.len()),
                    (None, _) => dir.display().to_string(),
                },
                cfg.share.as_deref().map(|n| format!(", shared as {n} (wirespeed tap {n})")).unwrap_or_default(),
            );
        }
        if let Some(e) = &exporter {
            e.announce("record");
        }
        Ok(listener)
    };
    let progress = |line: &str| eprintln!("{line}");
    let report = record::run(&rcfg, &cfg, &bind, fmt.clone(), stop, a.recv.interval, &progress, warnings)?;
    if a.recv.json {
        let metrics = serving(&exporter);
        print_json(&WithMetrics { report: &WithPriority { report: &report, priority: &applied }, metrics })?;
    } else {
        print!("{}", report.human(a.recv.gaps));
        if !rcfg.priority.is_default() {
            println!("  {}", applied.line("capture thread(s)"));
        }
        if let Some(s) = serving(&exporter) {
            println!("  {}", s.line());
        }
    }
    if let Some(e) = report.writer.as_ref().and_then(|w| w.error.clone()) {
        eprintln!(
            "wirespeed: {e}: recording stopped early; the finished files are valid up to their last whole record"
        );
        return Ok(1);
    }
    Ok(guard_verdict(loss_verdict(&report.capture, a.recv.expect_zero_loss)))
}
