//! The library's error: a [`Kind`] a program can branch on, the facts, and one line written
//! for the user (what is wrong and what to do).
//!
//! Typed here, formatted by the front ends (ripgrep's split): the command turns an error into
//! `wirespeed: LINE` and an exit code chosen by its kind (2 when the request must change, 1
//! when the host failed), and the Python package raises the built-in exception that matches the
//! kind (`ValueError`, `FileNotFoundError`, `PermissionError`, ...). A parameter's name is a
//! fact of its own ([`Error::param`]), so each front end names it the way its users wrote it:
//! `--block` on the command line, `block=` in Python.

use std::fmt;
use std::io;

/// What kind of failure an [`Error`] is: what a program branches on. It decides the
/// command's exit code ([`Kind::exit_code`]) and the Python exception.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A parameter's value is wrong, or values were given that cannot go together.
    Invalid,
    /// A file, directory, interface, host or shared ring the request names is not there.
    NotFound,
    /// Input data is not what it claims to be: a file that is not a recording, a sidecar or
    /// share descriptor that does not parse, a recording whose layout contradicts itself.
    BadData,
    /// The host refuses for want of a privilege or a file permission.
    Permission,
    /// Something the request needs is held by another: a port in use, a name taken.
    Busy,
    /// This host, kernel, device or build cannot do what was asked.
    Unsupported,
    /// A peer broke the protocol, or a message on the network was forged or out of place.
    Peer,
    /// A read or write on the host failed: a full disk, an I/O error, a device gone.
    Io,
    /// The run was stopped or failed in a way none of the other kinds names (a thread that
    /// could not start, a helper that died).
    Failed,
}

impl Kind {
    /// The command's exit code: 2 when the request must change (a bad value, a missing file,
    /// input that is not what it claims), 1 when the host failed or refused.
    pub fn exit_code(self) -> i32 {
        match self {
            Kind::Invalid | Kind::NotFound | Kind::BadData => 2,
            Kind::Permission | Kind::Busy | Kind::Unsupported | Kind::Peer | Kind::Io | Kind::Failed => 1,
        }
    }
}

/// A failure: its [`Kind`], the parameter it is about (if one), the operating system's error
/// number (if one), and the message. `Display` gives the message, after the parameter's name
/// when there is one (`block 1000 must be ...`); the command writes `--block 1000 must be ...`.
#[derive(Clone, Debug)]
pub struct Error {
    kind: Kind,
    param: Option<&'static str>,
    os: Option<i32>,
    message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.param {
            Some(p) => write!(f, "{p} {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}

/// Shorthand for results carrying [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error { kind, param: None, os: None, message: message.into() }
    }

    /// A bad value of the parameter `name` (its command-line name without the dashes):
    /// `message` follows the name, e.g. `Error::param("block", "1000 must be a multiple of 4 KiB")`.
    pub fn param(name: &'static str, message: impl Into<String>) -> Error {
        Error { kind: Kind::Invalid, param: Some(name), os: None, message: message.into() }
    }

    /// A bad value, or values that cannot go together ([`Kind::Invalid`]).
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(Kind::Invalid, message)
    }

    /// Something named is not there ([`Kind::NotFound`]).
    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(Kind::NotFound, message)
    }

    /// Input that is not what it claims ([`Kind::BadData`]).
    pub fn bad_data(message: impl Into<String>) -> Error {
        Error::new(Kind::BadData, message)
    }

    /// The host refuses for want of a privilege ([`Kind::Permission`]).
    pub fn permission(message: impl Into<String>) -> Error {
        Error::new(Kind::Permission, message)
    }

    /// Held by another ([`Kind::Busy`]).
    pub fn busy(message: impl Into<String>) -> Error {
        Error::new(Kind::Busy, message)
    }

    /// This host cannot do it ([`Kind::Unsupported`]).
    pub fn unsupported(message: impl Into<String>) -> Error {
        Error::new(Kind::Unsupported, message)
    }

    /// A peer broke the protocol ([`Kind::Peer`]).
    pub fn peer(message: impl Into<String>) -> Error {
        Error::new(Kind::Peer, message)
    }

    /// A read or write failed ([`Kind::Io`]).
    pub fn io(message: impl Into<String>) -> Error {
        Error::new(Kind::Io, message)
    }

    /// A read or write failed with the operating system's error `e`, whose number is kept.
    pub fn os(message: impl Into<String>, e: &io::Error) -> Error {
        Error { kind: Kind::Io, param: None, os: e.raw_os_error(), message: message.into() }
    }

    /// A path or name the request gave could not be used because of the operating system's
    /// error `e`: [`Kind::NotFound`] when it is not there, else [`Kind::Invalid`] (the request
    /// must change either way); the error number is kept.
    pub fn usage_io(message: impl Into<String>, e: &io::Error) -> Error {
        let kind = if e.kind() == io::ErrorKind::NotFound { Kind::NotFound } else { Kind::Invalid };
        Error { kind, param: None, os: e.raw_os_error(), message: message.into() }
    }

    /// Stopped, or failed otherwise ([`Kind::Failed`]).
    pub fn failed(message: impl Into<String>) -> Error {
        Error::new(Kind::Failed, message)
    }

    /// The same error carrying the operating system's error number `n` (the cause it reports).
    pub fn with_errno(mut self, n: Option<i32>) -> Error {
        self.os = n;
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The parameter whose value is wrong, by its command-line name without the dashes.
    pub fn param_name(&self) -> Option<&'static str> {
        self.param
    }

    /// The operating system's error number, when the failure came from a system call.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.os
    }

    /// The message without the parameter's name.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The command's exit code (see [`Kind::exit_code`]).
    pub fn exit_code(&self) -> i32 {
        self.kind.exit_code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_decides_the_exit_code_and_a_parameter_leads_the_line() {
        let e = Error::param("block", "1000 must be a non-zero multiple of 4 KiB");
        assert_eq!((e.kind(), e.exit_code(), e.param_name()), (Kind::Invalid, 2, Some("block")));
        assert_eq!(e.to_string(), "block 1000 must be a non-zero multiple of 4 KiB");
        assert_eq!(e.message(), "1000 must be a non-zero multiple of 4 KiB");
        for (k, code) in [
            (Kind::NotFound, 2),
            (Kind::BadData, 2),
            (Kind::Permission, 1),
            (Kind::Busy, 1),
            (Kind::Unsupported, 1),
            (Kind::Peer, 1),
            (Kind::Io, 1),
            (Kind::Failed, 1),
        ] {
            assert_eq!(Error::new(k, "x").exit_code(), code, "{k:?}");
        }
    }
}
