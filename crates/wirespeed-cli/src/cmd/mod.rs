//! One file per command: its options, its long help and its printing. The work is in the
//! library; what several commands share (option groups, value parsers, output) is in
//! `crate::args` and `crate::out`, never in another command's file.

pub mod bench;
pub mod completions;
pub mod demo;
pub mod disk_test;
pub mod doctor;
pub mod extract;
pub mod formats;
pub mod gather;
pub mod linerate;
pub mod man;
pub mod partition;
pub mod ping;
pub mod probe;
pub mod record;
pub mod recordings;
pub mod recv;
pub mod reflect;
pub mod send;
pub mod station;
pub mod tap;
pub mod ttcp;
pub mod verify;
