//! The buffer protocol over ring memory: [`RingView`] exports one run of records of a capture
//! ring, read-only, so that numpy views it without a copy. This is the crate's only `unsafe`.
//!
//! The memory stays valid for as long as any view of it lives: a `RingView` owns its run of
//! the ring (the capture cannot write there until the run is given back) and gives it back
//! only when it is dropped, which Python does only after the last buffer exported from it is
//! released (every exported `Py_buffer` holds a strong reference to its exporter). A numpy
//! array made from it holds that buffer, and arrays sliced from that array hold the array.

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};
use wirespeed::rx::batches::{self, BatchReader, Span};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RingView>()?;
    let fields = PyDict::new(m.py());
    for (name, at) in [
        ("time_ns", batches::field::TIME_NS),
        ("seq", batches::field::SEQ),
        ("stream", batches::field::STREAM),
        ("len", batches::field::LEN),
        ("port", batches::field::PORT),
        ("family", batches::field::FAMILY),
        ("status", batches::field::STATUS),
        ("addr", batches::field::ADDR),
    ] {
        fields.set_item(name, at)?;
    }
    m.add("BATCH_FIELDS", fields)?;
    m.add("BATCH_HEADER_LEN", batches::HEADER_LEN)?;
    Ok(())
}

/// The reader of a capture ring, shared by the receiver and every run it handed out.
pub(crate) type SharedReader = Arc<Mutex<BatchReader>>;

pub(crate) fn lock(r: &SharedReader) -> MutexGuard<'_, BatchReader> {
    // A panic elsewhere while holding the lock leaves the reader's state consistent (every
    // method completes its bookkeeping before returning), so a poisoned lock is still usable.
    r.lock().unwrap_or_else(|p| p.into_inner())
}

/// One run of records of a capture ring, exported read-only through the buffer protocol.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct RingView {
    reader: SharedReader,
    span: Span,
}

impl RingView {
    pub(crate) fn new(reader: SharedReader, span: Span) -> Self {
        RingView { reader, span }
    }
}

#[pymethods]
impl RingView {
    /// Records in the run.
    #[getter]
    fn records(&self) -> usize {
        self.span.records
    }

    /// Bytes per record (header and slot).
    #[getter]
    fn stride(&self) -> usize {
        self.span.stride
    }

    /// Export the run's bytes, read-only.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no Py_buffer to fill"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("batch memory is read-only (copy it to change it)"));
        }
        let me = slf.get();
        let (ptr, len) = {
            let r = lock(&me.reader);
            let b = r.bytes(&me.span);
            if b.len() != me.span.bytes() {
                return Err(PyBufferError::new_err("this batch was given back; its memory is no longer readable"));
            }
            (b.as_ptr(), b.len())
        };
        // SAFETY: `view` is the non-null Py_buffer the interpreter asks us to fill. `ptr..ptr+len`
        // is this run of the ring: mapped for as long as the ring lives, which `me.reader` (an
        // Arc to the ring's consumer, which holds the mapping) guarantees while `slf` lives; and
        // unchanged until the run is given back, which only `Drop` of this object does.
        // PyBuffer_FillInfo stores a new strong reference to `slf` in `view.obj`, so `slf`
        // outlives every use of the exported pointer (until PyBuffer_Release). The buffer is
        // marked read-only (readonly = 1), so Python never writes through it.
        let rc =
            unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr as *mut c_void, len as ffi::Py_ssize_t, 1, flags) };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
}

impl Drop for RingView {
    fn drop(&mut self) {
        // No buffer of this run is exported any more (each would hold this object): give the
        // memory back to the capture.
        lock(&self.reader).release(&self.span);
    }
}
