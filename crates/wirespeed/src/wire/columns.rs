//! The header fields of many frames as columns, one array per field: how a front end (the
//! Python binding) shows a VDIF or Mark5B recording's headers as arrays without parsing them
//! again itself. Every field is read through the format's own header view
//! ([`vdif::Header`](super::vdif::Header), [`mark5b::Header`](super::mark5b::Header)), so the
//! layout is still written once.

use super::mark5b::{self, Mark5b};
use super::vdif::{self, Vdif, Vtp};
use super::Format;

/// One column's values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Values {
    /// Flags.
    Bool(Vec<bool>),
    /// Bytes.
    U8(Vec<u8>),
    /// 16-bit values.
    U16(Vec<u16>),
    /// 32-bit values.
    U32(Vec<u32>),
    /// 64-bit values.
    U64(Vec<u64>),
}

impl Values {
    /// Rows in the column.
    pub fn len(&self) -> usize {
        match self {
            Values::Bool(v) => v.len(),
            Values::U8(v) => v.len(),
            Values::U16(v) => v.len(),
            Values::U32(v) => v.len(),
            Values::U64(v) => v.len(),
        }
    }

    /// Whether the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The numpy type string of the values (`?`, `<u1`, `<u2`, `<u4`, `<u8`).
    pub fn dtype(&self) -> &'static str {
        match self {
            Values::Bool(_) => "?",
            Values::U8(_) => "<u1",
            Values::U16(_) => "<u2",
            Values::U32(_) => "<u4",
            Values::U64(_) => "<u8",
        }
    }

    /// The values as little-endian bytes (one byte per flag).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            Values::Bool(v) => v.iter().map(|&b| u8::from(b)).collect(),
            Values::U8(v) => v.clone(),
            Values::U16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Values::U32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Values::U64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
}

/// A named column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// The field's name.
    pub name: &'static str,
    /// One value per frame.
    pub values: Values,
}

/// Which header a format's frames carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderKind {
    /// VDIF (also inside VTP datagrams, after the PSN).
    Vdif,
    /// Mark5B (whole frames, or the first halves of Mark5C-style datagrams).
    Mark5b,
}

impl HeaderKind {
    /// The header `fmt`'s frames carry, if it is one of the time-stamped instrument formats.
    pub fn of(fmt: &dyn Format) -> Option<HeaderKind> {
        let any = fmt.as_any()?;
        if any.downcast_ref::<Vdif>().is_some() || any.downcast_ref::<Vtp>().is_some() {
            Some(HeaderKind::Vdif)
        } else if any.downcast_ref::<Mark5b>().is_some() {
            Some(HeaderKind::Mark5b)
        } else {
            None
        }
    }
}

/// Collects header fields frame by frame.
pub struct HeaderColumns {
    kind: HeaderKind,
    rows: usize,
    cols: Vec<Column>,
}

fn bools(name: &'static str) -> Column {
    Column { name, values: Values::Bool(Vec::new()) }
}
fn u8s(name: &'static str) -> Column {
    Column { name, values: Values::U8(Vec::new()) }
}
fn u16s(name: &'static str) -> Column {
    Column { name, values: Values::U16(Vec::new()) }
}
fn u32s(name: &'static str) -> Column {
    Column { name, values: Values::U32(Vec::new()) }
}

/// Append to column `i` (its type is fixed by the constructor below).
macro_rules! put {
    ($cols:expr, $i:expr, $variant:ident, $v:expr) => {
        match &mut $cols[$i].values {
            Values::$variant(c) => c.push($v),
            _ => unreachable!("column {} has another type", $cols[$i].name),
        }
    };
}

impl HeaderColumns {
    /// Empty columns for `kind`'s fields.
    ///
    /// VDIF: `header_ok` (the frame was long enough for its header), `invalid`, `legacy`,
    /// `seconds`, `epoch`, `frame`, `version`, `log2_chans`, `frame_len`, `complex`,
    /// `bits_per_sample`, `thread`, `station`, `edv`. Mark5B: `header_ok` (long enough and the sync word is there: second halves
    /// have none), `user`, `tvg`, `frame`, `mjd`, `second_of_day`, `fraction` (0.1 ms units),
    /// `bcd_ok` (every BCD digit is one), `crc`, `crc_ok`.
    pub fn new(kind: HeaderKind) -> Self {
        let cols = match kind {
            HeaderKind::Vdif => vec![
                bools("header_ok"),
                bools("invalid"),
                bools("legacy"),
                u32s("seconds"),
                u8s("epoch"),
                u32s("frame"),
                u8s("version"),
                u8s("log2_chans"),
                u32s("frame_len"),
                bools("complex"),
                u8s("bits_per_sample"),
                u16s("thread"),
                u16s("station"),
                u8s("edv"),
            ],
            HeaderKind::Mark5b => vec![
                bools("header_ok"),
                u16s("user"),
                bools("tvg"),
                u32s("frame"),
                u32s("mjd"),
                u32s("second_of_day"),
                u32s("fraction"),
                bools("bcd_ok"),
                u16s("crc"),
                bools("crc_ok"),
            ],
        };
        HeaderColumns { kind, rows: 0, cols }
    }

    /// Frames added so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Add one frame (its header first). A frame too short for its header gets
    /// `header_ok = false` and zeros.
    pub fn push(&mut self, frame: &[u8]) {
        self.rows += 1;
        let c = &mut self.cols;
        match self.kind {
            HeaderKind::Vdif => {
                let h = vdif::Header::new_checked(frame).ok();
                put!(c, 0, Bool, h.is_some());
                let h = match h {
                    Some(h) => h,
                    None => vdif::Header::new_unchecked(&[0u8; vdif::HEADER_LEN][..]),
                };
                put!(c, 1, Bool, h.invalid());
                put!(c, 2, Bool, h.legacy());
                put!(c, 3, U32, h.seconds());
                put!(c, 4, U8, h.epoch());
                put!(c, 5, U32, h.frame());
                put!(c, 6, U8, h.version() as u8);
                put!(c, 7, U8, h.log2_chans());
                put!(c, 8, U32, h.frame_len() as u32);
                put!(c, 9, Bool, h.complex());
                put!(c, 10, U8, h.bits_per_sample());
                put!(c, 11, U16, h.thread() as u16);
                put!(c, 12, U16, h.station());
                put!(c, 13, U8, h.edv());
            }
            HeaderKind::Mark5b => {
                let h = mark5b::Header::new_checked(frame).ok().filter(|h| h.sync_ok());
                let ok = h.is_some();
                put!(c, 0, Bool, ok);
                let h = match h {
                    Some(h) => h,
                    None => mark5b::Header::new_unchecked(&[0u8; mark5b::HEADER_LEN][..]),
                };
                let (mjd, sod, frac) = (h.mjd(), h.second_of_day(), h.fraction());
                put!(c, 1, U16, h.user());
                put!(c, 2, Bool, h.tvg());
                put!(c, 3, U32, h.frame());
                put!(c, 4, U32, mjd.unwrap_or(0));
                put!(c, 5, U32, sod.unwrap_or(0));
                put!(c, 6, U32, frac.unwrap_or(0));
                put!(c, 7, Bool, ok && mjd.is_some() && sod.is_some() && frac.is_some());
                put!(c, 8, U16, h.crc());
                put!(c, 9, Bool, ok && h.crc_ok());
            }
        }
    }

    /// The columns, in the order [`new`](Self::new) names them.
    pub fn finish(self) -> Vec<Column> {
        self.cols
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::spec;

    #[test]
    fn vdif_fields_come_from_the_header_view() {
        let f = spec::parse("vdif,frame=96,fps=100,threads=4,epoch=52,start=1000").unwrap();
        assert_eq!(HeaderKind::of(&*f), Some(HeaderKind::Vdif));
        let mut cols = HeaderColumns::new(HeaderKind::Vdif);
        let mut b = vec![0u8; 96];
        for seq in [0u64, 1, 150] {
            f.emit(3, seq, &mut b);
            cols.push(&b);
        }
        cols.push(&b[..10]);
        assert_eq!(cols.rows(), 4);
        let c = cols.finish();
        let get = |n: &str| c.iter().find(|c| c.name == n).unwrap().values.clone();
        assert_eq!(get("header_ok"), Values::Bool(vec![true, true, true, false]));
        assert_eq!(get("frame"), Values::U32(vec![0, 1, 50, 0]));
        assert_eq!(get("seconds"), Values::U32(vec![1000, 1000, 1001, 0]));
        assert_eq!(get("thread"), Values::U16(vec![3, 3, 3, 0]));
        assert_eq!(get("frame_len"), Values::U32(vec![96, 96, 96, 0]));
        assert!(c.iter().all(|c| c.values.len() == 4));
        assert_eq!(get("seconds").to_le_bytes()[..4], 1000u32.to_le_bytes());
    }

    #[test]
    fn mark5b_fields_and_headerless_halves() {
        let f = spec::parse("mark5b,fps=1000,mjd=60123,sec=100").unwrap();
        assert_eq!(HeaderKind::of(&*f), Some(HeaderKind::Mark5b));
        let mut cols = HeaderColumns::new(HeaderKind::Mark5b);
        let mut b = vec![0u8; mark5b::FRAME_LEN];
        f.emit(0, 1001, &mut b);
        cols.push(&b);
        cols.push(&b[mark5b::HALF_LEN..]);
        let c = cols.finish();
        let get = |n: &str| c.iter().find(|c| c.name == n).unwrap().values.clone();
        assert_eq!(get("header_ok"), Values::Bool(vec![true, false]));
        assert_eq!(get("frame"), Values::U32(vec![1, 0]));
        assert_eq!(get("second_of_day"), Values::U32(vec![101, 0]));
        assert_eq!(get("mjd"), Values::U32(vec![123, 0]), "MJD 60123 modulo 1000");
        assert_eq!(get("crc_ok"), Values::Bool(vec![true, false]));
        assert_eq!(HeaderKind::of(&*spec::parse("counter").unwrap()), None);
    }
}
