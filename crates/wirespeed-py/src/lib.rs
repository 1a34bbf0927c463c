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
//! the library's one-line message, as the class of the error's kind ([`KINDS`]): each is also
//! the matching built-in (`InvalidValueError` is a `ValueError`, `NotFoundError` a
//! `FileNotFoundError`, `PermissionDeniedError` a `PermissionError`, ...), so `except
//! ValueError` works as a Python user expects, and `except wirespeed.UsageError` as before.

#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod buffer;
mod receiver;
mod recording;
mod tap;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use wirespeed::Kind;

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

/// The exception class of each error kind: `(kind, class name, wirespeed base is UsageError,
/// built-in base, doc)`. The classes are made when the module loads (a class with two bases
/// cannot be declared with `create_exception!`).
const KINDS: [(Kind, &str, bool, &str, &str); 9] = [
    (
        Kind::Invalid,
        "InvalidValueError",
        true,
        "ValueError",
        "An argument's value is wrong, or arguments were given that cannot go together.",
    ),
    (
        Kind::NotFound,
        "NotFoundError",
        true,
        "FileNotFoundError",
        "A file, directory, interface or shared ring that was named is not there.",
    ),
    (
        Kind::BadData,
        "BadDataError",
        true,
        "ValueError",
        "A file is not what it claims to be: not a recording, or a sidecar that does not parse.",
    ),
    (
        Kind::Permission,
        "PermissionDeniedError",
        false,
        "PermissionError",
        "The host refused for want of a privilege or a file permission.",
    ),
    (
        Kind::Busy,
        "BusyError",
        false,
        "OSError",
        "Something the request needs is held by another: a port in use, a name taken.",
    ),
    (
        Kind::Unsupported,
        "UnsupportedError",
        false,
        "OSError",
        "This host, kernel, device or build cannot do what was asked.",
    ),
    (
        Kind::Peer,
        "PeerError",
        false,
        "ConnectionError",
        "A peer broke the protocol, or a message on the network was forged.",
    ),
    (Kind::Io, "IOFailedError", false, "OSError", "A read or write failed: a full disk, an I/O error, a device gone."),
    (
        Kind::Failed,
        "RunFailedError",
        false,
        "RuntimeError",
        "The run was stopped, or failed in a way no other class names.",
    ),
];

/// The classes of [`KINDS`], made once when the module is first initialised (held here, so that
/// raising never depends on the module's name or on importing it again).
static CLASSES: std::sync::OnceLock<Vec<(Kind, Py<PyAny>)>> = std::sync::OnceLock::new();

/// The library's error as a Python exception of its kind's class, with the same one-line
/// message (a parameter named as Python names it: `window=3 ...`), the parameter's name as
/// `.param` and the operating system's error number, if any, as `.errno`.
pub(crate) fn to_py(e: wirespeed::Error) -> PyErr {
    let message = match e.param_name() {
        Some(p) => format!("{}={}", p.replace('-', "_"), e.message()),
        None => e.to_string(),
    };
    raise(e.kind(), &for_python(&message), e.param_name(), e.raw_os_error())
}

/// An exception of `kind`'s class; [`WirespeedError`] itself should the class be missing.
fn raise(kind: Kind, message: &str, param: Option<&str>, errno: Option<i32>) -> PyErr {
    Python::attach(|py| {
        let made = (|| -> PyResult<PyErr> {
            let classes =
                CLASSES.get().ok_or_else(|| WirespeedError::new_err("wirespeed._native is not initialised"))?;
            let class = classes.iter().find(|c| c.0 == kind).or_else(|| classes.last()).map(|c| c.1.bind(py));
            let class = class.ok_or_else(|| WirespeedError::new_err("no exception class"))?;
            let exc = class.call1((message,))?;
            exc.setattr("param", param.map(|p| p.replace('-', "_")))?;
            if let Some(n) = errno {
                exc.setattr("errno", n)?;
            }
            Ok(PyErr::from_value(exc))
        })();
        made.unwrap_or_else(|_| WirespeedError::new_err(message.to_string()))
    })
}

/// A bad argument, as a Python exception (an [`InvalidValueError`](KINDS)).
pub(crate) fn usage(m: impl Into<String>) -> PyErr {
    raise(Kind::Invalid, &m.into(), None, None)
}

/// A failure of the binding itself (a thread or a ring it could not make), as a Python
/// exception of `kind`.
pub(crate) fn failure(kind: Kind, m: impl Into<String>) -> PyErr {
    raise(kind, &m.into(), None, None)
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
    let builtins = py.import("builtins")?;
    let mut made = Vec::new();
    for (kind, name, usage, builtin, doc) in KINDS {
        let ours = if usage { py.get_type::<UsageError>() } else { py.get_type::<WirespeedError>() };
        let bases = PyTuple::new(py, [ours.into_any(), builtins.getattr(builtin)?])?;
        let attrs = PyDict::new(py);
        attrs.set_item("__doc__", doc)?;
        attrs.set_item("__module__", "wirespeed")?;
        let class = builtins.getattr("type")?.call1((name, bases, attrs))?;
        m.add(name, &class)?;
        made.push((kind, class.unbind()));
    }
    // A second initialisation (a subinterpreter) keeps the first classes.
    let _ = CLASSES.set(made);
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    recording::register(m)?;
    receiver::register(m)?;
    tap::register(m)?;
    buffer::register(m)?;
    Ok(())
}
