//! What recording a format to a raw file involves, beside the wire: the file's extension, the
//! transport prefix left out, the format that reads the file back, and which part of a file
//! record a datagram is.
//!
//! These are questions of the file layout, so they live here and not in [`Format`], which
//! answers only what a sender and a receiver ask of the wire. Each format type implements
//! [`Recordable`] below (an empty impl takes the defaults: a raw file is the datagrams as they
//! are, named `.raw`); [`recordable`] finds the implementation behind a `dyn Format` through
//! [`Format::as_any`]. A format this module does not know (one defined outside the crate) is
//! recorded with the defaults.

use crate::wire::view::PSN_LEN;
use crate::wire::{Counter, Format, Mark5b, SeqField, Spead, Vdif, Vtp};
use std::sync::Arc;

/// How a format's datagrams become a raw recording.
pub trait Recordable {
    /// File name extension for raw recordings (`vdif`, `m5b`, ...), so VLBI software and users
    /// recognise the files.
    fn file_extension(&self) -> &'static str {
        "raw"
    }
    /// Bytes at the start of each datagram that raw recordings leave out (a transport prefix
    /// such as the VTP packet sequence number), so that the file is in the instrument's own
    /// format.
    fn raw_strip(&self) -> usize {
        0
    }
    /// The format that reads raw recordings back, when it differs from the stream's (VTP is
    /// recorded as plain VDIF, Mark5B halves as whole frames). `None`: the stream's format
    /// itself, with records of `fixed_len() - raw_strip()` bytes.
    fn raw_reader(&self) -> Option<Arc<dyn Format>> {
        None
    }
    /// When datagrams are parts of a larger record in raw files (Mark5B halves make whole
    /// frames): which part this datagram is (0 = the record's first), from its own bytes.
    /// `None`: each datagram is a whole record.
    fn raw_part(&self, _datagram: &[u8]) -> Option<u64> {
        None
    }
}

/// Datagrams recorded as they are: the defaults.
struct AsSent;
impl Recordable for AsSent {}

impl Recordable for Counter {}
impl Recordable for Spead {}
impl Recordable for SeqField {}

impl Recordable for Vdif {
    fn file_extension(&self) -> &'static str {
        "vdif"
    }
}

impl Recordable for Vtp {
    fn file_extension(&self) -> &'static str {
        "vdif"
    }
    fn raw_strip(&self) -> usize {
        PSN_LEN
    }
    fn raw_reader(&self) -> Option<Arc<dyn Format>> {
        Some(Arc::new(self.vdif().clone()))
    }
}

impl Recordable for Mark5b {
    fn file_extension(&self) -> &'static str {
        "m5b"
    }
    fn raw_strip(&self) -> usize {
        if self.config().psn {
            PSN_LEN
        } else {
            0
        }
    }
    fn raw_reader(&self) -> Option<Arc<dyn Format>> {
        let c = self.config();
        (c.halves || c.psn).then(|| Arc::new(self.whole_frames()) as Arc<dyn Format>)
    }
    fn raw_part(&self, datagram: &[u8]) -> Option<u64> {
        self.half_index(datagram)
    }
}

/// `Some(body)` with `$f` bound to the concrete format behind `$any` when it is one of the
/// crate's formats: the one list of known types.
macro_rules! with_known_format {
    ($any:expr, |$f:ident| $body:expr) => {{
        let any: &dyn std::any::Any = $any;
        if let Some($f) = any.downcast_ref::<Mark5b>() {
            Some($body)
        } else if let Some($f) = any.downcast_ref::<Vtp>() {
            Some($body)
        } else if let Some($f) = any.downcast_ref::<Vdif>() {
            Some($body)
        } else if let Some($f) = any.downcast_ref::<Counter>() {
            Some($body)
        } else if let Some($f) = any.downcast_ref::<Spead>() {
            Some($body)
        } else if let Some($f) = any.downcast_ref::<SeqField>() {
            Some($body)
        } else {
            None
        }
    }};
}

/// The crate's own [`Recordable`] for `fmt`, `None` for a format defined elsewhere.
fn lookup(fmt: &dyn Format) -> Option<&dyn Recordable> {
    with_known_format!(fmt.as_any()?, |f| f as &dyn Recordable)
}

/// The [`Recordable`] of the format behind `fmt` (the defaults for a format this module does
/// not know).
pub fn recordable(fmt: &dyn Format) -> &dyn Recordable {
    lookup(fmt).unwrap_or(&AsSent)
}

/// The [`Recordable`] of `fmt`, owned: what a writer keeps to ask about every datagram of a
/// run without finding the format's type each time.
#[allow(clippy::clone_on_copy)] // one expression for Copy and non-Copy formats alike
pub fn recordable_owned(fmt: &dyn Format) -> Arc<dyn Recordable + Send + Sync> {
    fmt.as_any()
        .and_then(|a| with_known_format!(a, |f| Arc::new(f.clone()) as Arc<dyn Recordable + Send + Sync>))
        .unwrap_or_else(|| Arc::new(AsSent))
}

/// The recording questions asked of any format, for callers outside `spool` that held them as
/// `Format` methods before they moved here (`record` names its files with `file_extension`).
impl dyn Format {
    /// [`Recordable::file_extension`] of this format.
    pub fn file_extension(&self) -> &'static str {
        recordable(self).file_extension()
    }
    /// [`Recordable::raw_strip`] of this format.
    pub fn raw_strip(&self) -> usize {
        recordable(self).raw_strip()
    }
    /// [`Recordable::raw_reader`] of this format.
    pub fn raw_reader(&self) -> Option<Arc<dyn Format>> {
        recordable(self).raw_reader()
    }
    /// [`Recordable::raw_part`] of this format.
    pub fn raw_part(&self, datagram: &[u8]) -> Option<u64> {
        recordable(self).raw_part(datagram)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::spec;

    /// Every format `spec` can build is one this module knows, so none is recorded with the
    /// defaults by mistake (a new format fails here until it has its `Recordable` line).
    #[test]
    fn every_built_in_format_is_known() {
        for (name, ..) in spec::formats_help() {
            let f = spec::parse(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(f.as_any().is_some(), "{name} does not expose its type");
            assert!(lookup(&*f).is_some(), "{name} has no Recordable line");
        }
    }

    #[test]
    fn what_each_format_records() {
        let cases = [
            ("counter,size=64", "raw", 0, false),
            ("vdif,frame=96,fps=100", "vdif", 0, false),
            ("vtp,frame=96,fps=100", "vdif", 8, true),
            ("mark5b,fps=100", "m5b", 0, false),
            ("mark5b,fps=100,halves=1,psn=1", "m5b", 8, true),
            ("spead", "raw", 0, false),
            ("seqfield", "raw", 0, false),
        ];
        for (s, ext, strip, reader) in cases {
            let f = spec::parse(s).unwrap();
            let r = recordable_owned(&*f);
            assert_eq!((r.file_extension(), r.raw_strip(), r.raw_reader().is_some()), (ext, strip, reader), "{s}");
            assert_eq!((f.file_extension(), f.raw_strip(), f.raw_reader().is_some()), (ext, strip, reader), "{s}");
        }
    }
}
