//! `wirespeed.tap(name)`: a live ring of `wirespeed record --share NAME`, read as `wirespeed
//! tap` reads it (`spool::share::TapRing`, the same per-file ledger as `verify`), its records
//! handed to Python in batches of the receiver's layout.
//!
//! A tap's batches are copies: the recorder never waits for a tap and may overwrite its ring
//! at any moment, so nothing of it can be lent to numpy. A tap that falls behind is lapped and
//! counts what it lost (`tap_overrun`); the recorder loses nothing for it.

use crate::{deadline, usage};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wirespeed::rx::batches::{slot_body, RecordHeader, HEADER_LEN};
use wirespeed::spool::share::{Descriptor, Next, Overrun, Start, TapRing};
use wirespeed::spool::{
    parse_pcap_packet, pcap_global_header, FileFormat, FileLedger, PcapInfo, ReadLayout, RecordWalker,
};
use wirespeed::tap::{TapReport, TAP_SCHEMA};
use wirespeed::wire::{spec, Format};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Tap>()
}

struct State {
    d: Descriptor,
    rings: Vec<TapRing>,
    ended: Vec<bool>,
    fmt: Arc<dyn Format>,
    info: PcapInfo,
    ledger: FileLedger,
    walker: RecordWalker,
    buf: Vec<u8>,
    records: u64,
    bytes: u64,
    unreadable: u64,
    t0: Instant,
    last_alive_check: Instant,
    ended_by: Option<&'static str>,
    report: Option<String>,
}

/// One batch taken from the rings, in the receiver's record layout.
struct Taken {
    data: Vec<u8>,
    records: usize,
    stride: usize,
}

impl State {
    /// Read up to `max` records from the rings into a batch (None: nothing new).
    fn take(&mut self, max: usize) -> Option<Taken> {
        let mut metas: Vec<(RecordHeader, usize, usize)> = Vec::new();
        let mut payloads: Vec<u8> = Vec::new();
        for i in 0..self.rings.len() {
            if self.ended[i] {
                continue;
            }
            while metas.len() < max {
                match self.rings[i].next(&mut self.buf) {
                    Next::Record => {
                        self.walker.feed(&self.buf, &mut self.ledger);
                        self.records += 1;
                        self.bytes += self.buf.len() as u64;
                        let Ok(h) = wirespeed::spool::pcap::RecordHeader::new_checked(&self.buf[..], self.info.order())
                        else {
                            self.unreadable += 1;
                            continue;
                        };
                        let time_ns = h.unix_ns(self.info.nanos);
                        let data = &self.buf[wirespeed::spool::pcap::PCAP_RECORD_LEN..];
                        let (src, payload): (Option<SocketAddr>, _) = parse_pcap_packet(&self.info, data, h.origlen());
                        let Some(p) = payload else {
                            self.unreadable += 1;
                            continue;
                        };
                        let rh = RecordHeader::new(time_ns, p.len(), src, &self.fmt.check(p));
                        metas.push((rh, payloads.len(), p.len()));
                        payloads.extend_from_slice(p);
                    }
                    Next::Empty => break,
                    Next::Ended => {
                        self.ended[i] = true;
                        break;
                    }
                }
            }
        }
        if metas.is_empty() {
            return None;
        }
        let longest = metas.iter().map(|m| m.2).max().unwrap_or(1);
        let stride = HEADER_LEN + slot_body(longest);
        let mut data = vec![0u8; stride * metas.len()];
        for (k, (h, at, len)) in metas.iter().enumerate() {
            let rec = &mut data[k * stride..(k + 1) * stride];
            rec[..HEADER_LEN].copy_from_slice(&h.encode());
            rec[HEADER_LEN..HEADER_LEN + len].copy_from_slice(&payloads[*at..at + len]);
        }
        Some(Taken { data, records: metas.len(), stride })
    }

    /// Why the tap is over, if it is: every ring ended, or the recorder is gone.
    fn over(&mut self) -> Option<&'static str> {
        if self.ended_by.is_some() {
            return self.ended_by;
        }
        if self.ended.iter().all(|&e| e) {
            self.ended_by = Some("recorder ended");
        } else if self.last_alive_check.elapsed() > Duration::from_millis(200) {
            self.last_alive_check = Instant::now();
            // A recorder killed without finishing never says it is done.
            if !self.d.alive() && self.rings.iter().all(|r| r.behind() == 0) {
                self.ended_by = Some("recorder gone");
            }
        }
        self.ended_by
    }

    fn overrun(&self) -> Overrun {
        let mut o = Overrun::default();
        for r in &self.rings {
            o.records += r.overrun.records;
            o.bytes += r.overrun.bytes;
            o.events += r.overrun.events;
        }
        o
    }

    /// Settle the ledger and write the report (`wirespeed tap --json`'s document), once.
    fn finish(&mut self, why: &'static str) -> String {
        if let Some(r) = &self.report {
            return r.clone();
        }
        let (streams, total) = self.ledger.finish();
        let report = TapReport {
            schema: TAP_SCHEMA,
            name: self.d.name.clone(),
            recorder_pid: self.d.pid,
            rings: self.rings.len(),
            format: self.fmt.spec(),
            output: "python".into(),
            records: self.records,
            bytes: self.bytes,
            tap_overrun: self.overrun(),
            skipped_at_start: self.rings.iter().map(|r| r.skipped_at_start).sum(),
            ended_by: self.ended_by.unwrap_or(why).into(),
            seconds: self.t0.elapsed().as_secs_f64(),
            streams,
            total,
            invalid_by_reason: wirespeed::spool::reasons(&self.ledger.invalid_kinds),
            exec_status: None,
        };
        let s = serde_json::to_string(&report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        self.report = Some(s.clone());
        s
    }
}

/// A reader of a live ring.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct Tap {
    state: Arc<Mutex<State>>,
    name: String,
    pid: u32,
    format: String,
}

fn lock(s: &Arc<Mutex<State>>) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

#[pymethods]
impl Tap {
    #[new]
    #[pyo3(signature = (name, *, start="newest", format=None))]
    fn new(name: &str, start: &str, format: Option<&str>) -> PyResult<Self> {
        let start = match start {
            "newest" => Start::Newest,
            "oldest" => Start::Oldest,
            other => {
                return Err(usage(format!(
                    "start={other:?}: give \"newest\" (records published from now on) or \"oldest\" (what the ring still holds)"
                )))
            }
        };
        let d = Descriptor::load(name).map_err(crate::to_py)?;
        let fmt = match format {
            Some(f) => spec::parse(f).map_err(|e| usage(format!("format {f:?}: {e}")))?,
            None => spec::parse(&d.format).map_err(|e| {
                crate::failure(
                    wirespeed::Kind::Unsupported,
                    format!("the recorder's format {:?} does not parse here: {e}", d.format),
                )
            })?,
        };
        let layout = ReadLayout::for_stream(&fmt, FileFormat::Pcap).map_err(usage)?;
        let rings = d.attach(start).map_err(usage)?;
        let info = wirespeed::spool::parse_pcap_global(&pcap_global_header())
            .ok_or_else(|| crate::failure(wirespeed::Kind::Failed, "the recorder's pcap header does not parse"))?;
        let state = State {
            ended: vec![false; rings.len()],
            rings,
            ledger: FileLedger::new(layout.reader.clone(), d.window),
            walker: RecordWalker::new(layout).continuing_own(),
            fmt: fmt.clone(),
            info,
            buf: Vec::with_capacity(70_000),
            records: 0,
            bytes: 0,
            unreadable: 0,
            t0: Instant::now(),
            last_alive_check: Instant::now(),
            ended_by: None,
            report: None,
            d: d.clone(),
        };
        Ok(Tap { state: Arc::new(Mutex::new(state)), name: d.name, pid: d.pid, format: fmt.spec() })
    }

    /// The share name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The recorder's process id.
    #[getter]
    fn recorder_pid(&self) -> u32 {
        self.pid
    }

    /// The format checking the records.
    #[getter]
    fn format(&self) -> &str {
        &self.format
    }

    /// The next batch as `(bytes, records, stride)`, waiting at most `timeout` seconds (None:
    /// until one comes or the recorder ends). None when the time ran out or the tap is over
    /// (`ended_by` says why). The GIL is released while waiting.
    #[pyo3(signature = (timeout=None, max_records=4096))]
    fn next_batch<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
        max_records: usize,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, usize, usize)>> {
        let deadline = deadline(timeout, max_records)?;
        loop {
            let st = self.state.clone();
            let got = py.detach(move || {
                let slice = Instant::now() + Duration::from_millis(50);
                let until = deadline.map_or(slice, |d| d.min(slice));
                let mut s = lock(&st);
                loop {
                    if s.report.is_some() {
                        return Err(true);
                    }
                    if let Some(t) = s.take(max_records) {
                        return Ok(t);
                    }
                    if s.over().is_some() {
                        return Err(true);
                    }
                    if Instant::now() >= until {
                        return Err(false);
                    }
                    std::thread::sleep(Duration::from_micros(500));
                }
            });
            match got {
                Ok(t) => return Ok(Some((PyBytes::new(py, &t.data), t.records, t.stride))),
                Err(true) => return Ok(None),
                Err(false) => {
                    py.check_signals()?;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Why the tap is over (`recorder ended`, `recorder gone`, `closed`), or None.
    #[getter]
    fn ended_by(&self) -> Option<&'static str> {
        lock(&self.state).over()
    }

    /// Live counts as JSON: records and bytes read, overrun, bytes behind the recorder.
    fn live(&self) -> String {
        let s = lock(&self.state);
        serde_json::json!({
            "records": s.records,
            "bytes": s.bytes,
            "unreadable": s.unreadable,
            "tap_overrun": s.overrun(),
            "behind_bytes": s.rings.iter().map(|r| r.behind()).sum::<u64>(),
            "ended_by": s.ended_by,
            "seconds": s.t0.elapsed().as_secs_f64(),
        })
        .to_string()
    }

    /// Stop reading and return the report (`wirespeed tap --json`'s document) as JSON; the
    /// same report on every later call.
    fn close(&self, py: Python<'_>) -> String {
        let st = self.state.clone();
        py.detach(move || {
            let mut s = lock(&st);
            if s.ended_by.is_none() {
                s.ended_by = Some("closed");
            }
            s.finish("closed")
        })
    }
}
