//! Table 3's own measurement: raw byte streams opened by path, as seed 000's test program
//! opened `/hw/xplink/raw/<remote>/<nn>` (7.1): the transmitter issues `nbuf` writes of
//! `buflen` bytes, the receiver reads with `buflen`-sized reads until it has them all, both from
//! buffers aligned to [`ALIGN`] bytes (the seed's cache-line aligned source and destination).
//!
//! The same code opens a raw device, a FIFO (the pipe reference) or a file, so the devices
//! and the pipe are measured alike; a Unix stream socket (the other local reference) is the
//! one transport that is not a path to open but a socket to bind and connect. Several paths at
//! once run one thread each (the seed: several raw devices add up).
//!
//! Every byte is checked: the stream carries a counter per 8 bytes (word `i` at stream offset
//! `8i` holds `i` XOR a fixed key, little-endian), so a lost, repeated, reordered or changed
//! byte and a short or long stream are each caught and named by offset. Byte streams give
//! short reads: the receiver counts its read calls and how many came back short.
//!
//! Both ends stamp their first and last byte on CLOCK_MONOTONIC, which every partition shares,
//! so that `bench ttcp` can time a transfer from the first byte written to the last byte read
//! (total bytes / that wall-clock time, as the seed computed). Alone, each end reports its own
//! span: the receiver from its first read that returned data to the last.

use super::{Role, MAX_BUFLEN};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;
use wirespeed::error::{Error, Result};
use wirespeed::sys;

/// Schema name of a raw transfer's JSON report.
pub const RAW_SCHEMA: &str = "wirespeed.ttcp.raw/1";
/// Alignment of both ends' buffers: the seed's transfers were cache-line aligned (the Origin's
/// 128-byte lines; also two of x86's 64-byte lines).
pub const ALIGN: usize = 128;
/// Most streams one process runs at once: a remote partition has 16 raw devices.
pub const MAX_STREAMS: usize = 16;
/// XORed into the word counter, so that a stream of zeros (or of any one repeated word) fails
/// the check at its first or second word.
const PATTERN_KEY: u64 = 0x5753_5454_4350_5231;
/// How often the waiting thread looks at the stop flag.
const POLL: Duration = Duration::from_millis(200);

/// How a raw stream is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RawKind {
    /// open(2) the path: a raw device, a FIFO or a regular file; it must exist.
    Path,
    /// A Unix stream socket at the path: the receiver binds and listens, the transmitter
    /// connects.
    Unix,
}

impl RawKind {
    /// The word the command line uses (`--device` or `--unix`).
    pub fn option(self) -> &'static str {
        match self {
            RawKind::Path => "--device",
            RawKind::Unix => "--unix",
        }
    }
}

/// What shapes one raw transfer, for either end.
#[derive(Clone, Debug)]
pub struct RawConfig {
    /// Open paths or Unix sockets.
    pub kind: RawKind,
    /// One stream per path, run at once (one thread each).
    pub paths: Vec<PathBuf>,
    /// Bytes per write and per read call (-l).
    pub buflen: usize,
    /// Writes per stream (-n); the receiver expects `nbuf * buflen` bytes on each.
    pub nbuf: u64,
    /// Write and check the counter pattern (both ends must agree); off, the transmitter sends
    /// one fixed buffer and the receiver only counts.
    pub check: bool,
    /// Pin every stream's thread to this CPU.
    pub cpu: Option<usize>,
}

impl RawConfig {
    /// Refuse settings that cannot make a run, each with one line saying what to do.
    pub fn validate(&self) -> Result<()> {
        let opt = self.kind.option();
        if self.paths.is_empty() {
            return Err(Error::invalid(format!("{opt} needs a PATH")));
        }
        if self.paths.len() > MAX_STREAMS {
            return Err(Error::invalid(format!(
                "{} paths: at most {MAX_STREAMS} streams at once (a remote partition has 16 raw devices)",
                self.paths.len()
            )));
        }
        for (i, p) in self.paths.iter().enumerate() {
            if p.as_os_str().is_empty() {
                return Err(Error::invalid(format!("{opt}: an empty path (check the commas)")));
            }
            if self.paths[..i].contains(p) {
                return Err(Error::invalid(format!(
                    "{opt}: {} is given twice: each stream needs its own path",
                    p.display()
                )));
            }
        }
        if self.buflen == 0 {
            return Err(Error::invalid("-l (read/write size) must be at least 1 byte"));
        }
        if self.buflen > MAX_BUFLEN {
            return Err(Error::invalid(format!(
                "-l {} is larger than the {} MiB this ttcp allocates for one buffer: use a smaller -l and a larger -n",
                self.buflen,
                MAX_BUFLEN >> 20
            )));
        }
        if self.nbuf == 0 {
            return Err(Error::invalid("-n (number of writes) must be at least 1"));
        }
        if self.nbuf.checked_mul(self.buflen as u64).is_none() {
            return Err(Error::invalid("-n x -l overflows a 64-bit byte count: use a smaller -n"));
        }
        Ok(())
    }

    fn want(&self) -> u64 {
        self.nbuf * self.buflen as u64
    }
}

/// A buffer whose first byte sits on an [`ALIGN`]-byte boundary (a plain `Vec<u8>` only
/// promises 1), made by over-allocating and starting at the first aligned byte.
pub struct AlignedBuf {
    mem: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes, aligned.
    pub fn new(len: usize) -> AlignedBuf {
        let mem = vec![0u8; len + ALIGN];
        // align_offset may decline (usize::MAX); then the buffer is used unaligned and says so.
        let off = mem.as_ptr().align_offset(ALIGN);
        let off = if off < ALIGN { off } else { 0 };
        AlignedBuf { mem, off, len }
    }

    /// Whether the buffer really starts on an [`ALIGN`]-byte boundary.
    pub fn aligned(&self) -> bool {
        (self.mem.as_ptr() as usize + self.off) % ALIGN == 0
    }

    /// The buffer's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.mem[self.off..self.off + self.len]
    }

    /// The buffer's bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.off..self.off + self.len]
    }
}

#[inline]
fn word(i: u64) -> u64 {
    i ^ PATTERN_KEY
}

#[inline]
fn byte_at(offset: u64) -> u8 {
    word(offset / 8).to_le_bytes()[(offset % 8) as usize]
}

/// Fill `buf` with the stream pattern as it stands from stream offset `offset` on.
pub fn fill(buf: &mut [u8], offset: u64) {
    let head = (((8 - offset % 8) % 8) as usize).min(buf.len());
    for (i, b) in buf[..head].iter_mut().enumerate() {
        *b = byte_at(offset + i as u64);
    }
    let o = offset + head as u64;
    let rest = &mut buf[head..];
    let mid = rest.len() / 8 * 8;
    let (words, tail) = rest.split_at_mut(mid);
    for (k, c) in words.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&word(o / 8 + k as u64).to_le_bytes());
    }
    let t = o + mid as u64;
    for (i, b) in tail.iter_mut().enumerate() {
        *b = byte_at(t + i as u64);
    }
}

/// The first byte of a stream that is not what the pattern says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Its offset in the stream.
    pub offset: u64,
    /// What the pattern puts there.
    pub expected: u8,
    /// What arrived.
    pub got: u8,
}

/// Check `buf`, which arrived at stream offset `offset`, against the pattern: the first wrong
/// byte, if any.
pub fn check(buf: &[u8], offset: u64) -> Option<Mismatch> {
    let first_bad = |from: usize, to: usize| {
        (from..to).find(|&i| buf[i] != byte_at(offset + i as u64)).map(|i| Mismatch {
            offset: offset + i as u64,
            expected: byte_at(offset + i as u64),
            got: buf[i],
        })
    };
    let head = (((8 - offset % 8) % 8) as usize).min(buf.len());
    if let Some(m) = first_bad(0, head) {
        return Some(m);
    }
    let o = offset + head as u64;
    let mid = (buf.len() - head) / 8 * 8;
    for (k, c) in buf[head..head + mid].chunks_exact(8).enumerate() {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        if w != word(o / 8 + k as u64) {
            let at = head + 8 * k;
            return first_bad(at, at + 8);
        }
    }
    first_bad(head + mid, buf.len())
}

/// One stream's account.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StreamReport {
    /// The path opened (or the socket's path).
    pub path: String,
    /// Bytes written or read.
    pub bytes: u64,
    /// Write or read calls that moved bytes.
    pub calls: u64,
    /// Of those, calls that moved fewer bytes than asked (byte streams give short reads).
    pub short_calls: u64,
    /// CLOCK_MONOTONIC of the first byte: just before the first write, or at the return of the
    /// first read that returned data.
    pub first_ns: u64,
    /// CLOCK_MONOTONIC at the return of the last write, or of the read that completed the stream.
    pub last_ns: u64,
    /// `last_ns - first_ns`, seconds.
    pub real_s: f64,
    /// `bytes / real_s` in 10^6 bytes per second (0 when the span is 0: one call).
    pub mb_per_s: f64,
    /// Whether the buffer was [`ALIGN`]-byte aligned.
    pub aligned: bool,
}

/// One end's account of a raw transfer (JSON schema [`RAW_SCHEMA`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RawReport {
    /// Always [`RAW_SCHEMA`].
    pub schema: String,
    /// Transmitter or receiver.
    pub role: Role,
    /// Opened paths or Unix sockets.
    pub kind: RawKind,
    /// -l.
    pub buflen: usize,
    /// -n.
    pub nbuf: u64,
    /// "counter per 8 bytes" or "off".
    pub check: String,
    /// CPU the stream threads were pinned to.
    pub cpu: Option<usize>,
    /// Per stream, in the order of the paths.
    pub streams: Vec<StreamReport>,
    /// All streams' bytes.
    pub bytes: u64,
    /// All streams' calls.
    pub calls: u64,
    /// All streams' short calls.
    pub short_calls: u64,
    /// The earliest stream's first byte.
    pub first_ns: u64,
    /// The latest stream's last byte.
    pub last_ns: u64,
    /// `last_ns - first_ns`, seconds.
    pub real_s: f64,
    /// Aggregate: `bytes / real_s`, 10^6 bytes per second.
    pub mb_per_s: f64,
    /// User + system CPU of the process over the run, seconds.
    pub cpu_s: f64,
}

fn mb_per_s(bytes: u64, first_ns: u64, last_ns: u64) -> f64 {
    let span = last_ns.saturating_sub(first_ns);
    if span == 0 {
        0.0
    } else {
        bytes as f64 / (span as f64 / 1e9) / 1e6
    }
}

impl RawReport {
    fn new(role: Role, cfg: &RawConfig, streams: Vec<StreamReport>, cpu_ns: u64) -> RawReport {
        let first_ns = streams.iter().map(|s| s.first_ns).min().unwrap_or(0);
        let last_ns = streams.iter().map(|s| s.last_ns).max().unwrap_or(0);
        let bytes = streams.iter().map(|s| s.bytes).sum();
        RawReport {
            schema: RAW_SCHEMA.into(),
            role,
            kind: cfg.kind,
            buflen: cfg.buflen,
            nbuf: cfg.nbuf,
            check: if cfg.check { "counter per 8 bytes" } else { "off" }.into(),
            cpu: cfg.cpu,
            calls: streams.iter().map(|s| s.calls).sum(),
            short_calls: streams.iter().map(|s| s.short_calls).sum(),
            bytes,
            first_ns,
            last_ns,
            real_s: last_ns.saturating_sub(first_ns) as f64 / 1e9,
            mb_per_s: mb_per_s(bytes, first_ns, last_ns),
            cpu_s: cpu_ns as f64 / 1e9,
            streams,
        }
    }

    /// The report as ttcp-style lines (`ttcp-t:` / `ttcp-r:`), one per stream and, for several,
    /// the aggregate.
    pub fn human(&self) -> String {
        let (p, call) = match self.role {
            Role::Transmit => ("ttcp-t:", "write"),
            Role::Receive => ("ttcp-r:", "read"),
        };
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{p} raw -l{} -n{} ({}, buffers {}-byte aligned, data check {})",
            self.buflen,
            self.nbuf,
            self.kind.option(),
            ALIGN,
            self.check
        );
        for st in &self.streams {
            let _ = writeln!(
                s,
                "{p} {}: {} bytes in {:.6} real seconds = {:.2} MB/s, {} {call} calls ({} short)",
                st.path, st.bytes, st.real_s, st.mb_per_s, st.calls, st.short_calls
            );
        }
        if self.streams.len() > 1 {
            let _ = writeln!(
                s,
                "{p} all {} streams: {} bytes in {:.6} real seconds = {:.2} MB/s",
                self.streams.len(),
                self.bytes,
                self.real_s,
                self.mb_per_s
            );
        }
        let _ = writeln!(s, "{p} {:.3} s CPU", self.cpu_s);
        s
    }
}

fn open_error(path: &Path, how: &str, e: std::io::Error) -> Error {
    let hint = match e.kind() {
        ErrorKind::NotFound => {
            " (a raw device exists while its partitions are active: see `wirespeed partition status`; a FIFO is made with mkfifo)"
        }
        ErrorKind::ConnectionRefused => " (is the receiver, wirespeed ttcp -r --unix, running?)",
        _ => "",
    };
    Error::io(format!("cannot open {} {how}: {e}{hint}", path.display()))
}

fn pin(cpu: Option<usize>) -> Result<()> {
    if let Some(c) = cpu {
        sys::pin_current_thread(c)
            .map_err(|e| Error::invalid(format!("cannot pin the ttcp stream to CPU {c}: {e} (see `nproc`)")))?;
    }
    Ok(())
}

fn stopped(path: &Path, what: &str, done: u64) -> Error {
    Error::failed(format!("{}: stopped by a signal {what} after {done} bytes", path.display()))
}

fn write_stream(cfg: &RawConfig, path: &Path, stop: &AtomicBool) -> Result<StreamReport> {
    pin(cfg.cpu)?;
    let mut out: Box<dyn Write> = match cfg.kind {
        RawKind::Path => Box::new(
            std::fs::OpenOptions::new().write(true).open(path).map_err(|e| open_error(path, "for writing", e))?,
        ),
        RawKind::Unix => Box::new(UnixStream::connect(path).map_err(|e| open_error(path, "(connect)", e))?),
    };
    let mut buf = AlignedBuf::new(cfg.buflen);
    if !cfg.check {
        fill(buf.bytes_mut(), 0);
    }
    let (mut calls, mut short, mut offset) = (0u64, 0u64, 0u64);
    let first_ns = sys::monotonic_ns();
    for _ in 0..cfg.nbuf {
        if cfg.check {
            fill(buf.bytes_mut(), offset);
        }
        let mut b = buf.bytes();
        while !b.is_empty() {
            match out.write(b) {
                Ok(0) => {
                    return Err(Error::io(format!(
                        "{}: a write took no bytes after {offset} bytes: the device or pipe is closed",
                        path.display()
                    )))
                }
                Ok(n) => {
                    calls += 1;
                    short += u64::from(n < b.len());
                    offset += n as u64;
                    b = &b[n..];
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {
                    if stop.load(Ordering::Relaxed) {
                        return Err(stopped(path, "while writing", offset));
                    }
                }
                Err(e) => {
                    let why = if e.kind() == ErrorKind::BrokenPipe { ": the reader went away" } else { "" };
                    return Err(Error::io(format!("{}: write failed after {offset} bytes: {e}{why}", path.display())));
                }
            }
        }
    }
    let last_ns = sys::monotonic_ns();
    // Closing is the end of stream the receiver waits for.
    drop(out);
    Ok(StreamReport {
        path: path.display().to_string(),
        bytes: offset,
        calls,
        short_calls: short,
        first_ns,
        last_ns,
        real_s: last_ns.saturating_sub(first_ns) as f64 / 1e9,
        mb_per_s: mb_per_s(offset, first_ns, last_ns),
        aligned: buf.aligned(),
    })
}

fn read_stream(
    cfg: &RawConfig,
    path: &Path,
    listener: Option<UnixListener>,
    stop: &AtomicBool,
) -> Result<StreamReport> {
    pin(cfg.cpu)?;
    let mut input: Box<dyn Read> = match listener {
        None => Box::new(std::fs::File::open(path).map_err(|e| open_error(path, "for reading", e))?),
        Some(l) => {
            Box::new(l.accept().map_err(|e| Error::failed(format!("{}: accept failed: {e}", path.display())))?.0)
        }
    };
    let want = cfg.want();
    let l = cfg.buflen as u64;
    let mut buf = AlignedBuf::new(cfg.buflen);
    let (mut got, mut calls, mut short) = (0u64, 0u64, 0u64);
    let mut first_ns = None;
    let where_ = |o: u64| format!("byte {o} (write {}, byte {} of it)", o / l, o % l);
    while got < want {
        match input.read(buf.bytes_mut()) {
            Ok(0) => {
                return Err(Error::io(format!(
                    "{}: the stream ended after {got} of {want} bytes ({} writes of {}): the writer stopped early or bytes were lost",
                    path.display(),
                    cfg.nbuf,
                    cfg.buflen
                )))
            }
            Ok(n) => {
                let now = sys::monotonic_ns();
                first_ns.get_or_insert(now);
                calls += 1;
                short += u64::from(n < cfg.buflen);
                let take = (n as u64).min(want - got) as usize;
                if cfg.check {
                    if let Some(m) = check(&buf.bytes()[..take], got) {
                        return Err(Error::io(format!(
                            "{}: data check failed at {}: expected 0x{:02x}, got 0x{:02x}: bytes were lost, repeated or changed on the way (or the writer ran with --no-check)",
                            path.display(),
                            where_(m.offset),
                            m.expected,
                            m.got
                        )));
                    }
                }
                if take < n {
                    return Err(too_long(path, want, n - take));
                }
                got += n as u64;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {
                if stop.load(Ordering::Relaxed) {
                    return Err(stopped(path, "while reading", got));
                }
            }
            Err(e) => return Err(Error::io(format!("{}: read failed after {got} bytes: {e}", path.display()))),
        }
    }
    let last_ns = sys::monotonic_ns();
    // The end of the stream must follow: more bytes mean the writer wrote more than -n x -l
    // (or a stranger wrote too). This read also takes the device's end-of-stream marker, so
    // the next reader of the device does not find it.
    loop {
        match input.read(buf.bytes_mut()) {
            Ok(0) => break,
            Ok(n) => return Err(too_long(path, want, n)),
            Err(e) if e.kind() == ErrorKind::Interrupted => {
                if stop.load(Ordering::Relaxed) {
                    return Err(stopped(path, "waiting for the end of stream", got));
                }
            }
            Err(e) => {
                return Err(Error::io(format!(
                    "{}: read of the end of stream failed after {got} bytes: {e}",
                    path.display()
                )))
            }
        }
    }
    let first_ns = first_ns.unwrap_or(last_ns);
    Ok(StreamReport {
        path: path.display().to_string(),
        bytes: got,
        calls,
        short_calls: short,
        first_ns,
        last_ns,
        real_s: last_ns.saturating_sub(first_ns) as f64 / 1e9,
        mb_per_s: mb_per_s(got, first_ns, last_ns),
        aligned: buf.aligned(),
    })
}

fn too_long(path: &Path, want: u64, extra: usize) -> Error {
    Error::io(format!(
        "{}: more than the {want} bytes expected arrived ({extra} more in one read): the writer wrote more than -n x -l, or someone else writes to this path",
        path.display()
    ))
}

/// Run `one` for every path on its own thread and gather the reports in path order; `stop`
/// ends the wait (a thread blocked in open or accept cannot be woken: the process exits past
/// it).
fn run_streams<F>(
    cfg: &RawConfig,
    mut listeners: Vec<Option<UnixListener>>,
    stop: &AtomicBool,
    one: F,
) -> Result<Vec<StreamReport>>
where
    F: Fn(&RawConfig, &Path, Option<UnixListener>, &AtomicBool) -> Result<StreamReport> + Send + Sync + Copy + 'static,
{
    let (tx, rx) = mpsc::channel();
    let stop_ptr: &'static AtomicBool = sys::stop_flag();
    let own_flag = !std::ptr::eq(stop, stop_ptr);
    for (i, path) in cfg.paths.iter().enumerate() {
        let (tx, cfg, path) = (tx.clone(), cfg.clone(), path.clone());
        let l = listeners.get_mut(i).and_then(Option::take);
        std::thread::spawn(move || {
            // The threads outlive a stopped wait, so they watch the process-wide flag.
            let _ = tx.send((i, one(&cfg, &path, l, stop_ptr)));
        });
    }
    drop(tx);
    let mut out: Vec<Option<StreamReport>> = vec![None; cfg.paths.len()];
    let mut left = cfg.paths.len();
    while left > 0 {
        match rx.recv_timeout(POLL) {
            Ok((i, r)) => {
                out[i] = Some(r?);
                left -= 1;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Relaxed) || (own_flag && stop_ptr.load(Ordering::Relaxed)) {
                    return Err(Error::failed(format!(
                        "stopped by a signal with {left} of {} streams unfinished",
                        cfg.paths.len()
                    )));
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Error::io("a stream's thread ended without a report"))
            }
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// The transmitting end: `nbuf` writes of `buflen` bytes on every path at once, each closed
/// after its last write (the receiver's end of stream).
pub fn transmit_raw(cfg: &RawConfig, stop: &AtomicBool) -> Result<RawReport> {
    cfg.validate()?;
    let cpu0 = sys::process_cpu_ns();
    let streams = run_streams(cfg, Vec::new(), stop, |c, p, _, s| write_stream(c, p, s))?;
    Ok(RawReport::new(Role::Transmit, cfg, streams, sys::process_cpu_ns().saturating_sub(cpu0)))
}

/// The receiving end, ready to be started: Unix sockets are bound (so a transmitter started
/// after [`RawReceiver::bind`] returns finds them); paths are opened by [`RawReceiver::run`].
pub struct RawReceiver {
    cfg: RawConfig,
    listeners: Vec<Option<UnixListener>>,
    /// Socket files this receiver made, removed when it is dropped.
    made: Vec<PathBuf>,
}

impl RawReceiver {
    /// Check the settings and, for Unix sockets, bind and listen on every path (refusing a
    /// path that exists: wirespeed removes only what it made).
    pub fn bind(cfg: &RawConfig) -> Result<RawReceiver> {
        cfg.validate()?;
        let mut r = RawReceiver { cfg: cfg.clone(), listeners: Vec::new(), made: Vec::new() };
        if cfg.kind == RawKind::Path {
            // Said before the receiver announces itself, so a transmitter is not started for
            // nothing (opening waits, for a FIFO, until the transmitter opens too).
            if let Some((p, e)) = cfg.paths.iter().find_map(|p| std::fs::metadata(p).err().map(|e| (p, e))) {
                return Err(open_error(p, "for reading", e));
            }
        }
        if cfg.kind == RawKind::Unix {
            for p in &cfg.paths {
                if p.symlink_metadata().is_ok() {
                    return Err(Error::failed(format!(
                        "{} exists: the receiver makes its own socket there; remove it or give another path",
                        p.display()
                    )));
                }
                let l = UnixListener::bind(p)
                    .map_err(|e| Error::failed(format!("cannot bind a Unix socket at {}: {e}", p.display())))?;
                r.made.push(p.clone());
                r.listeners.push(Some(l));
            }
        }
        Ok(r)
    }

    /// Read every stream to its end, checking the data, and report.
    pub fn run(mut self, stop: &AtomicBool) -> Result<RawReport> {
        let cpu0 = sys::process_cpu_ns();
        let listeners = std::mem::take(&mut self.listeners);
        let streams = run_streams(&self.cfg, listeners, stop, read_stream)?;
        Ok(RawReport::new(Role::Receive, &self.cfg, streams, sys::process_cpu_ns().saturating_sub(cpu0)))
    }
}

impl Drop for RawReceiver {
    fn drop(&mut self) {
        for p in &self.made {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_is_the_same_whatever_the_cuts() {
        let mut whole = vec![0u8; 1000];
        fill(&mut whole, 13);
        let mut pieces = vec![0u8; 1000];
        let mut at = 0;
        for len in [1, 7, 8, 3, 100, 5, 876] {
            fill(&mut pieces[at..at + len], 13 + at as u64);
            at += len;
        }
        assert_eq!(at, 1000);
        assert_eq!(whole, pieces);
        assert_eq!(check(&whole, 13), None);
        assert_eq!(check(&whole[5..], 18), None);
        assert_eq!(&whole[3..11], &word(2).to_le_bytes(), "word 2 sits at stream bytes 16..24");
    }

    #[test]
    fn the_check_names_the_first_wrong_byte() {
        let mut b = vec![0u8; 256];
        fill(&mut b, 0);
        b[77] ^= 1;
        let m = check(&b, 0).unwrap();
        assert_eq!((m.offset, m.got, m.expected ^ 1), (77, b[77], b[77]));
        // A lost byte shifts everything after it; a stream of zeros fails at once.
        let mut s = vec![0u8; 64];
        fill(&mut s, 0);
        let shifted: Vec<u8> = s[..10].iter().chain(&s[11..]).copied().collect();
        assert_eq!(check(&shifted, 0).unwrap().offset, 10);
        assert_eq!(check(&[0u8; 64], 0).unwrap().offset, 0);
        // The same bytes one word later are wrong too (repeated data).
        assert!(check(&s[..8], 8).is_some());
    }

    #[test]
    fn buffers_are_aligned() {
        for len in [1, 32, 100, 4096] {
            let b = AlignedBuf::new(len);
            assert!(b.aligned());
            assert_eq!(b.bytes().len(), len);
        }
    }

    #[test]
    fn a_file_written_then_read_checks_out_and_a_wrong_one_does_not() {
        let p = std::env::temp_dir().join(format!("ws-raw-test-{}", std::process::id()));
        std::fs::write(&p, b"").unwrap();
        let stop = AtomicBool::new(false);
        let cfg =
            RawConfig { kind: RawKind::Path, paths: vec![p.clone()], buflen: 100, nbuf: 30, check: true, cpu: None };
        let t = transmit_raw(&cfg, &stop).unwrap();
        assert_eq!((t.bytes, t.calls), (3000, 30));
        let r = RawReceiver::bind(&cfg).unwrap().run(&stop).unwrap();
        assert_eq!((r.bytes, r.streams[0].bytes), (3000, 3000));
        assert!(r.streams[0].aligned && r.streams[0].calls >= 30);
        // One more write than the receiver expects.
        let short = RawConfig { nbuf: 29, ..cfg.clone() };
        let e = RawReceiver::bind(&short).unwrap().run(&stop).unwrap_err().to_string();
        assert!(e.contains("more than the 2900 bytes expected"), "{e}");
        // One byte changed.
        let mut data = std::fs::read(&p).unwrap();
        data[1234] ^= 0x40;
        std::fs::write(&p, &data).unwrap();
        let e = RawReceiver::bind(&cfg).unwrap().run(&stop).unwrap_err().to_string();
        assert!(e.contains("data check failed at byte 1234 (write 12, byte 34 of it)"), "{e}");
        // Cut short.
        std::fs::write(&p, &data[..1000]).unwrap();
        let e = RawReceiver::bind(&cfg).unwrap().run(&stop).unwrap_err().to_string();
        assert!(e.contains("the stream ended after 1000 of 3000 bytes"), "{e}");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn unix_sockets_carry_several_streams_at_once() {
        let dir = std::env::temp_dir().join(format!("ws-raw-unix-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let paths: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("s{i}"))).collect();
        let cfg = RawConfig { kind: RawKind::Unix, paths, buflen: 4096, nbuf: 50, check: true, cpu: None };
        let stop = AtomicBool::new(false);
        let rx = RawReceiver::bind(&cfg).unwrap();
        let (t, r) = std::thread::scope(|s| {
            let h = s.spawn(|| rx.run(&stop).unwrap());
            (transmit_raw(&cfg, &stop).unwrap(), h.join().unwrap())
        });
        assert_eq!((t.bytes, r.bytes), (3 * 4096 * 50, 3 * 4096 * 50));
        assert_eq!(r.streams.len(), 3);
        assert!(r.streams.iter().all(|s| s.bytes == 4096 * 50));
        assert!(r.first_ns <= r.last_ns && t.first_ns <= r.last_ns);
        assert!(!cfg.paths[0].exists(), "the receiver removes the sockets it made");
        std::fs::remove_dir(&dir).unwrap();
    }
}
