//! Recordings on disk: `open` (through `wirespeed::spool::open`) and `verify` (through
//! `wirespeed::spool::verify`, the same report as `wirespeed verify --json`).
//!
//! Payloads are never copied here: the Python side maps the files (numpy.memmap) at the
//! offsets this module reports. What crosses over is metadata: JSON documents, and columns as
//! little-endian bytes that numpy reads in place (`numpy.frombuffer`).

use crate::{to_py, usage};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use wirespeed::spool::extract;
use wirespeed::spool::open::{self as spool_open, OpenFile};
use wirespeed::spool::verify::{self, VerifyOptions};
use wirespeed::spool::FileFormat;
use wirespeed::wire::columns::HeaderKind;
use wirespeed::wire::{spec, Format};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(verify_paths, m)?)?;
    m.add_function(wrap_pyfunction!(open_paths, m)?)?;
    m.add_function(wrap_pyfunction!(open_scan_native, m)?)?;
    m.add_class::<Recording>()?;
    Ok(())
}

fn parse_format(format: Option<&str>) -> PyResult<Option<Arc<dyn Format>>> {
    format.map(|s| spec::parse(s).map_err(|e| usage(format!("format {s:?}: {e}")))).transpose()
}

/// `wirespeed verify --json` of `paths`, as a JSON string.
#[pyfunction]
#[pyo3(signature = (paths, format=None, window=65536))]
fn verify_paths(py: Python<'_>, paths: Vec<PathBuf>, format: Option<&str>, window: u64) -> PyResult<String> {
    if paths.is_empty() {
        return Err(usage("give at least one recorded file or directory"));
    }
    if !window.is_power_of_two() || window > wirespeed::rx::MAX_WINDOW {
        return Err(usage(format!("window {window} must be a power of two up to {}", wirespeed::rx::MAX_WINDOW)));
    }
    let format = parse_format(format)?;
    py.detach(move || {
        let found = verify::collect(&paths, format.as_ref())?;
        let report = verify::verify(&found, &VerifyOptions { format, window })?;
        serde_json::to_string(&report).map_err(|e| wirespeed::Error::failed(format!("cannot encode JSON: {e}")))
    })
    .map_err(to_py)
}

/// An opened recording: its files, and what can be read of each.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct Recording {
    files: Vec<OpenFile>,
    meta: String,
    /// Each file opened with a shared lock for as long as the recording is open in Python, so
    /// that a recorder's retention (`record --keep-free`) never deletes a file mapped here.
    _locks: Vec<std::fs::File>,
}

fn header_name(k: HeaderKind) -> &'static str {
    match k {
        HeaderKind::Vdif => "vdif",
        HeaderKind::Mark5b => "mark5b",
    }
}

/// Open the recording at `paths` (files or directories, as `verify` reads them).
#[pyfunction]
#[pyo3(signature = (paths, format=None))]
fn open_paths(py: Python<'_>, paths: Vec<PathBuf>, format: Option<&str>) -> PyResult<Recording> {
    if paths.is_empty() {
        return Err(usage("give a recorded file or directory"));
    }
    let format = parse_format(format)?;
    let rec = py.detach(move || spool_open::open(&paths, format)).map_err(to_py)?;
    Ok(recording(rec))
}

/// Open the scan `scan` on `mounts` (FlexBuff chunks or Mark6 blocks, in number order).
#[pyfunction]
#[pyo3(signature = (scan, mounts, format=None))]
fn open_scan_native(py: Python<'_>, scan: &str, mounts: Vec<PathBuf>, format: Option<&str>) -> PyResult<Recording> {
    let format = parse_format(format)?;
    let scan = scan.to_string();
    let rec = py
        .detach(move || {
            let mounts = wirespeed::spool::scan::expand_mounts(&mounts)?;
            let found = wirespeed::spool::scan::find(&scan, &mounts)?;
            spool_open::open_scan(&found, format)
        })
        .map_err(to_py)?;
    Ok(recording(rec))
}

/// The Python side's view of an opened recording: its files' metadata as JSON.
fn recording(rec: spool_open::Recording) -> Recording {
    let files: Vec<serde_json::Value> = rec
        .files
        .iter()
        .map(|f| {
            let (records, trailing) = f.raw_records().map_or((None, None), |(r, t)| (Some(r), Some(t)));
            let header = f.header();
            json!({
                "path": f.path.display().to_string(),
                "sidecar_path": f.sidecar_path.as_ref().map(|p| p.display().to_string()),
                "sidecar": f.sidecar,
                "sidecar_error": f.sidecar_error,
                "file_format": f.layout.file_format,
                "format": f.layout.reader.spec(),
                "stream_format": f.sidecar.as_ref().map_or_else(|| f.layout.reader.spec(), |s| s.format.clone()),
                "record_len": (f.layout.record_len > 0).then_some(f.layout.record_len),
                "offset": f.offset,
                "bytes": f.bytes,
                "part": f.part,
                "records": records,
                "trailing_bytes": trailing,
                "header": header.map(|h| header_name(h.0)),
                "header_offset": header.map(|h| h.1),
            })
        })
        .collect();
    let meta = json!({
        "files": files,
        "skipped": rec.skipped.iter().map(|s| json!({"path": s.path, "reason": s.reason})).collect::<Vec<_>>(),
        "sidecar_total": rec.sidecar_total(),
    });
    let locks = rec
        .files
        .iter()
        .filter_map(|f| std::fs::File::open(&f.path).ok())
        .filter(|f| wirespeed::sys::file::lock_shared(f).is_ok())
        .collect();
    Recording { files: rec.files, meta: meta.to_string(), _locks: locks }
}

impl Recording {
    fn file(&self, i: usize) -> PyResult<&OpenFile> {
        self.files.get(i).ok_or_else(|| usage(format!("no file {i}: the recording has {}", self.files.len())))
    }
}

/// `(dtype, bytes)` of a column, for `numpy.frombuffer`.
fn column<'py>(py: Python<'py>, dtype: &str, bytes: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    Ok((dtype, PyBytes::new(py, bytes)).into_pyobject(py)?.into_any())
}

fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

/// A window edge from Python: ns since the epoch, or a string `wirespeed extract` takes.
fn edge(ns: Option<u64>, text: Option<&str>, now: u64, name: &str) -> PyResult<Option<extract::TimeArg>> {
    match (ns, text) {
        (Some(n), _) => Ok(Some(extract::TimeArg::Utc(n))),
        (None, Some(t)) => extract::parse_time(t, now).map(Some).map_err(|e| usage(format!("{name}: {e}"))),
        (None, None) => Ok(None),
    }
}

#[pymethods]
impl Recording {
    /// The recording's files and sidecars, as a JSON document.
    fn meta(&self) -> &str {
        &self.meta
    }

    /// The records of a window, found as `wirespeed extract` finds them (through the files'
    /// time indexes): `(ledger JSON, file ids, payload offsets, payload lengths, arrival ns)`,
    /// the columns as `(dtype, bytes)`.
    #[pyo3(signature = (from_ns=None, from_text=None, to_ns=None, to_text=None, clock="auto", stream=None, seq=None))]
    #[allow(clippy::too_many_arguments)]
    fn between<'py>(
        &self,
        py: Python<'py>,
        from_ns: Option<u64>,
        from_text: Option<&str>,
        to_ns: Option<u64>,
        to_text: Option<&str>,
        clock: &str,
        stream: Option<u32>,
        seq: Option<(u64, u64)>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let now = wirespeed::sys::realtime_ns();
        let (from, to) = (edge(from_ns, from_text, now, "t0")?, edge(to_ns, to_text, now, "t1")?);
        let Some(first) = self.files.first() else { return Err(usage("the recording has no files")) };
        let fmt = first.layout.reader.clone();
        if let Some((a, b)) = seq {
            if a > b {
                return Err(usage(format!("seq ({a}, {b}) is empty: give the smaller number first")));
            }
        }
        // The library names the command's options; Python's are t0 and t1.
        let named = |e: String| usage(e.replace("--from", "t0").replace("--to", "t1").replace("--clock", "clock="));
        let window = extract::window_for(clock, from, to, &*fmt).map_err(named)?;
        let q = extract::Query { window, stream, seq, no_index: false };
        let files = self.files.clone();
        let (report, ids, offs, lens, times) = py
            .detach(move || {
                let (mut ids, mut offs, mut lens, mut times) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                let r = extract::extract(&files, &q, &fmt, |p| {
                    ids.push(p.file as u32);
                    // Where the payload lies in the file (a pcap record's after its headers).
                    let at = if p.payload.is_empty() {
                        0
                    } else {
                        (p.payload.as_ptr() as usize).saturating_sub(p.record.as_ptr() as usize)
                    };
                    offs.push(p.offset + at as u64 + files[p.file].offset);
                    lens.push(p.payload.len() as u32);
                    times.push(p.arrival_ns.unwrap_or(0));
                    Ok(())
                })?;
                Ok::<_, wirespeed::Error>((r, ids, offs, lens, times))
            })
            .map_err(to_py)?;
        let json = serde_json::to_string(&report).map_err(|e| usage(format!("cannot encode the ledger: {e}")))?;
        let items: Vec<Bound<'py, PyAny>> = vec![
            json.into_pyobject(py)?.into_any(),
            column(py, "<u4", &le(&ids, u32::to_le_bytes))?,
            column(py, "<u8", &le(&offs, u64::to_le_bytes))?,
            column(py, "<u4", &le(&lens, u32::to_le_bytes))?,
            column(py, "<u8", &le(&times, u64::to_le_bytes))?,
        ];
        PyTuple::new(py, items)
    }

    /// The record index of pcap file `i`: a dict of columns (`(dtype, bytes)`) and facts.
    fn pcap_index<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyDict>> {
        let f = self.file(i)?;
        if f.layout.file_format != FileFormat::Pcap {
            return Err(usage(format!("{} is a raw file, not a pcap: it has no record index", f.path.display())));
        }
        let (path, len) = (f.path.clone(), f.bytes);
        let idx = py.detach(move || spool_open::index_pcap(&path, len)).map_err(to_py)?;
        // Sources as small integers into a table of their names.
        let mut names: Vec<String> = Vec::new();
        let mut seen: HashMap<std::net::SocketAddr, u32> = HashMap::new();
        let ids: Vec<u32> = idx
            .sources
            .iter()
            .map(|s| match s {
                None => u32::MAX,
                Some(a) => *seen.entry(*a).or_insert_with(|| {
                    names.push(a.to_string());
                    names.len() as u32 - 1
                }),
            })
            .collect();
        let d = PyDict::new(py);
        d.set_item("record_offsets", column(py, "<u8", &le(&idx.record_offsets, u64::to_le_bytes))?)?;
        d.set_item("payload_offsets", column(py, "<u8", &le(&idx.payload_offsets, u64::to_le_bytes))?)?;
        d.set_item("lengths", column(py, "<u4", &le(&idx.payload_lens, u32::to_le_bytes))?)?;
        d.set_item("time_ns", column(py, "<u8", &le(&idx.time_ns, u64::to_le_bytes))?)?;
        d.set_item("readable", column(py, "?", &le(&idx.readable, |b| [u8::from(b)]))?)?;
        d.set_item("source_ids", column(py, "<u4", &le(&ids, u32::to_le_bytes))?)?;
        d.set_item("source_names", PyList::new(py, names)?)?;
        d.set_item("trailing_bytes", idx.trailing_bytes)?;
        d.set_item("problem", idx.problem)?;
        d.set_item("nanosecond", idx.info.map(|i| i.nanos))?;
        d.set_item("linktype", idx.info.map(|i| i.linktype))?;
        Ok(d)
    }

    /// The VDIF or Mark5B header fields of every record of file `i`: a list of
    /// `(name, dtype, bytes)`, or None when its format has no such header.
    fn header_columns<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Option<Bound<'py, PyList>>> {
        let f = self.file(i)?.clone();
        let cols = py.detach(move || spool_open::header_columns(&f)).map_err(to_py)?;
        let Some(cols) = cols else { return Ok(None) };
        let items: Vec<Bound<'py, PyAny>> = cols
            .iter()
            .map(|c| {
                Ok((c.name, c.values.dtype(), PyBytes::new(py, &c.values.to_le_bytes())).into_pyobject(py)?.into_any())
            })
            .collect::<PyResult<_>>()?;
        Ok(Some(PyList::new(py, items)?))
    }
}
