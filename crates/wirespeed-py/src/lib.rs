//! `wirespeed._native`: the compiled half of the Python package `wirespeed` (the pure-Python
//! half, in `python/wirespeed/`, turns what this returns into numpy arrays and dicts).
//!
//! Everything here calls into the `wirespeed` library; nothing is parsed twice:
//! - [`recording`]: `open` a recording (its files, sidecars, layouts, the pcap record index,
//!   the VDIF/Mark5B header fields) and `verify` it, as `wirespeed verify --json` does.
//! - [`receiver`]: a capture on a native thread through the library's receive path, its
//!   datagrams handed over in batches through a RAM ring ([`wirespeed::rx::batches`]).
//! - [`tap`]: a live ring of `wirespeed record --share`, read as `wirespeed tap` reads it.
//! - [`buffer`]: the one place with `unsafe`: the buffer protocol that lets numpy view ring
//!   memory without a copy, and keeps that memory from the capture while any view lives.
//!
//! Errors raise `WirespeedError` (`UsageError`, a subclass, for bad arguments or input), with
//! the library's one-line message.

#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod buffer;
mod receiver;
mod recording;
mod tap;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _native,
    WirespeedError,
    PyException,
    "A wirespeed operation failed; the message says what is wrong and what to do."
);
create_exception!(
    _native,
    UsageError,
    WirespeedError,
    "The request itself is wrong: a bad argument, a missing file, a file that is not a recording."
);

/// The library's error as a Python exception with the same one-line message.
pub(crate) fn to_py(e: wirespeed::Error) -> PyErr {
    match e {
        wirespeed::Error::Usage(m) => UsageError::new_err(for_python(&m)),
        wirespeed::Error::Runtime(m) => WirespeedError::new_err(for_python(&m)),
    }
}

/// A bad argument, as a Python exception.
pub(crate) fn usage(m: impl Into<String>) -> PyErr {
    UsageError::new_err(m.into())
}

/// The `(timeout, max_records)` arguments of a wait for the next batch (`Receiver`, `tap`):
/// the instant the wait ends (None: no limit), or one clear error for a bad value.
pub(crate) fn deadline(timeout: Option<f64>, max_records: usize) -> PyResult<Option<std::time::Instant>> {
    if max_records == 0 {
        return Err(usage("max_records must be at least 1"));
    }
    match timeout {
        Some(t) if !(t >= 0.0 && t.is_finite()) => Err(usage(format!("timeout={t} must be 0 or more seconds"))),
        Some(t) => Ok(Some(std::time::Instant::now() + std::time::Duration::from_secs_f64(t))),
        None => Ok(None),
    }
}

/// The library words its advice for the command line; say it the way Python calls it.
fn for_python(m: &str) -> String {
    m.replace("give --format (e.g. --format counter,size=8800)", "pass format= (e.g. format=\"counter,size=8800\")")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("WirespeedError", py.get_type::<WirespeedError>())?;
    m.add("UsageError", py.get_type::<UsageError>())?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    recording::register(m)?;
    receiver::register(m)?;
    tap::register(m)?;
    buffer::register(m)?;
    Ok(())
}
