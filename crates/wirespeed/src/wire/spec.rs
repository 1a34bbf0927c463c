//! Format specifications as one string: `NAME[,KEY=VALUE]...`, e.g. `counter,size=8800,order=be`.
//!
//! Every [`Format`] can print its own spec ([`Format::spec`]) and [`parse`] builds it again, so a
//! recording's sidecar names the exact format its data were checked against and `verify` can
//! re-check a file without being told how it was made. Keys left out take the format's default;
//! a key given twice is refused. A [`Preset`] name (`mark5c`, `casper`, ...) stands for
//! its spec, and keys after it override the preset's.

use super::fill::Fill;
use super::mark5b::{self, Mark5b, Mark5bConfig};
use super::spead::{Spead, SpeadConfig};
use super::vdif::{self, Vdif, VdifConfig, Vtp};
use super::{ByteOrder, Counter, Format, SeqField};
use std::str::FromStr;
use std::sync::Arc;

/// A spec's name and its `KEY=VALUE` pairs, in order.
pub type Parts<'a> = (&'a str, Vec<(&'a str, &'a str)>);

/// Keys that set the same thing two ways: a spec may give one of each group, not both.
const SAME_THING: [(&str, &str, &str); 1] = [("fps", "rate", "the frame rate")];

/// Split `name,k=v,k=v` into the name and its key/value pairs. A key given twice (or two keys
/// that set the same thing, such as fps and rate) is refused: which one was meant cannot be
/// known, and silently taking the last would run with a setting the user did not read back.
pub fn split(spec: &str) -> Result<Parts<'_>, String> {
    let mut parts = spec.split(',').map(str::trim);
    let name = parts.next().filter(|n| !n.is_empty()).ok_or_else(|| "empty format spec".to_string())?;
    let mut kv: Vec<(&str, &str)> = Vec::new();
    for p in parts {
        let (k, v) = p.split_once('=').ok_or_else(|| format!("'{p}' in format spec '{spec}' is not KEY=VALUE"))?;
        let k = k.trim();
        if kv.iter().any(|&(seen, _)| seen == k) {
            return Err(format!("key '{k}' is given twice in format spec '{spec}': give each key once"));
        }
        for (a, b, what) in SAME_THING {
            let other = if k == a {
                b
            } else if k == b {
                a
            } else {
                continue;
            };
            if kv.iter().any(|&(seen, _)| seen == other) {
                return Err(format!("'{other}' and '{k}' both set {what} in format spec '{spec}': give one of them"));
            }
        }
        kv.push((k, v.trim()));
    }
    Ok((name, kv))
}

/// A preset's spec with the user's keys in place of the preset's own (a key that sets the same
/// thing as a preset key, such as rate for fps, replaces it too).
fn override_preset(preset_spec: &str, user: &[(&str, &str)]) -> String {
    let (name, base) = split(preset_spec).expect("preset specs are valid");
    let replaced = |k: &str| {
        user.iter()
            .any(|&(u, _)| u == k || SAME_THING.iter().any(|&(a, b, _)| (u == a && k == b) || (u == b && k == a)))
    };
    let mut out = name.to_string();
    for (k, v) in base.iter().filter(|(k, _)| !replaced(k)).chain(user.iter()) {
        out.push_str(&format!(",{k}={v}"));
    }
    out
}

/// A named, ready-made instrument setting: what `wirespeed formats` lists and what a user can
/// write instead of a full spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    /// Name usable wherever a spec is expected.
    pub name: &'static str,
    /// One line: which instrument this imitates.
    pub description: &'static str,
    /// The format spec it stands for (time-stamped formats take their start from the clock).
    pub spec: &'static str,
    /// Default send rate, in the sender's `--rate` syntax.
    pub rate: &'static str,
    /// UDP payload bytes per datagram.
    pub size: usize,
}

static PRESETS: [Preset; 7] = [
    Preset {
        name: "mark5b",
        description: "Mark5B at 2048 Mb/s, whole 10016-byte frames of TVG data (Haystack burst-mode tests, seed 002)",
        spec: "mark5b,fps=25600,halves=0,psn=0,fill=tvg",
        rate: "25600pps",
        size: 10_016,
    },
    Preset {
        name: "mark5c",
        description: "Mark5B at 2048 Mb/s as Mark5C sends it: half frames of 5008 bytes after an 8-byte PSN",
        spec: "mark5b,fps=25600,halves=1,psn=1,fill=tvg",
        rate: "51200pps",
        size: 5016,
    },
    Preset {
        name: "casper",
        description: "CASPER 10GbE test design: 8192-byte datagrams of one 64-bit big-endian counter (seed 004)",
        spec: "counter,size=8192,order=be",
        rate: "500kpps",
        size: 8192,
    },
    Preset {
        name: "vdif",
        description: "VDIF at 2048 Mb/s: 8032-byte frames, one thread, 2-bit real samples, 4 channels",
        spec: "vdif,frame=8032,threads=1,station=WS,bits=2,chans=4,complex=0,fps=32000,fill=counter",
        rate: "32000pps",
        size: 8032,
    },
    Preset {
        name: "vtp",
        description: "VDIF at 2048 Mb/s over VTP: 8-byte little-endian PSN + one 8032-byte frame",
        spec: "vtp,psn=64,frame=8032,threads=1,station=WS,bits=2,chans=4,complex=0,fps=32000,fill=counter",
        rate: "32000pps",
        size: 8040,
    },
    Preset {
        name: "spead",
        description: "MeerKAT-like SPEAD-64-48: 64 KiB heaps in 8 KiB packets, heap counters 1, 2, 3, ...",
        spec: "spead,heap=65536,payload=8192,first=1,step=1,addr=48,fill=counter",
        rate: "100kpps",
        size: 8256,
    },
    Preset {
        name: "seq64",
        description: "FPGA header: 64-bit big-endian packet number then data (8192-byte datagrams)",
        spec: "seqfield,offset=0,width=8,order=be,size=8192,fill=zeros",
        rate: "100kpps",
        size: 8192,
    },
];

/// The ready-made instrument settings.
pub fn presets() -> &'static [Preset] {
    &PRESETS
}

/// Each format's name and one line on what it is and its keys, for `wirespeed formats`.
pub fn formats_help() -> Vec<(&'static str, &'static str)> {
    vec![
        ("counter", "CASPER counter: datagrams of consecutive 64-bit words (keys: size, order=be|le)"),
        (
            "seqfield",
            "a sequence number field at an offset, rest filled (keys: offset, width=1..8, order, size, fill)",
        ),
        (
            "vdif",
            "VDIF EDV 0 frames, stream = thread (keys: frame, threads, station, bits, chans, complex, fps|rate, epoch, start, fill)",
        ),
        ("vtp", "VDIF over UDP after an 8-byte PSN, seq = PSN (keys: psn=64|32 and the vdif keys)"),
        (
            "mark5b",
            "Mark5B 10016-byte frames or 5008-byte halves, optional PSN (keys: fps|rate, halves, psn, user, fill, mjd, sec)",
        ),
        (
            "spead",
            "SPEAD-64-48/64-40 heaps over several packets (keys: heap, payload, lead = a heap's shorter first packet, first, step, addr=48|40, fill)",
        ),
    ]
}

fn num<T: FromStr>(k: &str, v: &str) -> Result<T, String> {
    let v2 = v.replace('_', "");
    let parsed = match v2.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok().and_then(|n| n.to_string().parse().ok()),
        None => v2.parse().ok(),
    };
    parsed.ok_or_else(|| format!("{k}={v}: not a number in range"))
}

fn flag(k: &str, v: &str) -> Result<bool, String> {
    match v {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("{k}={v}: use 1 or 0")),
    }
}

/// A rate in bits/s with an optional decimal suffix (`2048M`, `4G`).
fn rate(k: &str, v: &str) -> Result<u64, String> {
    let t = v.trim_end_matches("bps").trim_end_matches("b/s");
    crate::units::parse_count(t).map_err(|_| format!("{k}={v}: use a data rate in bits/s like 2048M"))
}

fn unknown(fmt: &str, k: &str, keys: &str) -> String {
    format!("unknown key '{k}' for the {fmt} format ({keys})")
}

const VDIF_KEYS: &str = "frame, threads, station, bits, chans, complex, fps, rate, epoch, start, fill";

/// Apply one VDIF key; `rate` is kept apart because it depends on the frame length.
fn vdif_key(c: &mut VdifConfig, rate_bps: &mut Option<u64>, k: &str, v: &str) -> Result<bool, String> {
    match k {
        "frame" => c.frame_len = num(k, v)?,
        "threads" => c.threads = num(k, v)?,
        "station" => {
            c.station = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
                num(k, v)?
            } else if v.len() == 2 && v.is_ascii() {
                u16::from_be_bytes([v.as_bytes()[0], v.as_bytes()[1]])
            } else {
                return Err(format!("station={v}: use two ASCII characters (WS) or a number up to 65535"));
            }
        }
        "bits" => c.bits = num(k, v)?,
        "chans" => {
            let n: u64 = num(k, v)?;
            if !n.is_power_of_two() || n > 1 << 31 {
                return Err(format!("chans={v}: the number of channels must be a power of two"));
            }
            c.log2_chans = n.trailing_zeros() as u8;
        }
        "complex" => c.complex = flag(k, v)?,
        "fps" => {
            c.fps = num(k, v)?;
            *rate_bps = None;
        }
        "rate" => *rate_bps = Some(rate(k, v)?),
        "epoch" => c.epoch = Some(num(k, v)?),
        "start" => c.start = Some(num(k, v)?),
        "fill" => c.fill = Fill::parse(v)?,
        _ => return Ok(false),
    }
    Ok(true)
}

fn parse_vdif(kv: &[(&str, &str)], vtp: bool) -> Result<Arc<dyn Format>, String> {
    let mut c = VdifConfig::default();
    let mut rate_bps = None;
    let mut psn32 = false;
    for &(k, v) in kv {
        if vtp && k == "psn" {
            psn32 = match v {
                "64" => false,
                "32" => true,
                _ => return Err(format!("psn={v}: use 64 or 32 (bits of packet sequence number)")),
            };
        } else if !vdif_key(&mut c, &mut rate_bps, k, v)? {
            let keys = if vtp { format!("psn, {VDIF_KEYS}") } else { VDIF_KEYS.to_string() };
            return Err(unknown(if vtp { "vtp" } else { "vdif" }, k, &keys));
        }
    }
    if let Some(r) = rate_bps {
        c.fps = vdif::fps_for_rate(c.frame_len, 32, r)?;
    }
    let v = Vdif::new(c)?;
    Ok(if vtp { Arc::new(Vtp::new(v, psn32)) } else { Arc::new(v) })
}

fn parse_mark5b(kv: &[(&str, &str)]) -> Result<Arc<dyn Format>, String> {
    let mut c = Mark5bConfig::default();
    for &(k, v) in kv {
        match k {
            "fps" => c.fps = num(k, v)?,
            "rate" => c.fps = mark5b::fps_for_rate(rate(k, v)?)?,
            "halves" => c.halves = flag(k, v)?,
            "psn" => c.psn = flag(k, v)?,
            "user" => c.user = num(k, v)?,
            "fill" => c.fill = Fill::parse(v)?,
            "mjd" => c.mjd = Some(num(k, v)?),
            "sec" => c.sec = Some(num(k, v)?),
            _ => return Err(unknown("mark5b", k, "fps, rate, halves, psn, user, fill, mjd, sec")),
        }
    }
    Ok(Arc::new(Mark5b::new(c)?))
}

fn parse_spead(kv: &[(&str, &str)]) -> Result<Arc<dyn Format>, String> {
    let mut c = SpeadConfig::default();
    for &(k, v) in kv {
        match k {
            "heap" => c.heap = num(k, v)?,
            "payload" => c.payload = num(k, v)?,
            "lead" => c.lead = Some(num(k, v)?),
            "first" => c.first = num(k, v)?,
            "step" => c.step = num(k, v)?,
            "addr" => c.addr_bits = num(k, v)?,
            "fill" => c.fill = Fill::parse(v)?,
            _ => return Err(unknown("spead", k, "heap, payload, lead, first, step, addr, fill")),
        }
    }
    Ok(Arc::new(Spead::new(c)?))
}

fn parse_seqfield(kv: &[(&str, &str)]) -> Result<Arc<dyn Format>, String> {
    let (mut offset, mut width, mut order, mut size, mut fill) = (0usize, 8usize, ByteOrder::Be, None, Fill::Any);
    for &(k, v) in kv {
        match k {
            "offset" => offset = num(k, v)?,
            "width" => width = num(k, v)?,
            "order" => order = ByteOrder::parse(v)?,
            "size" => size = Some(num(k, v)?),
            "fill" => fill = Fill::parse(v)?,
            _ => return Err(unknown("seqfield", k, "offset, width, order, size, fill")),
        }
    }
    Ok(Arc::new(SeqField::new(offset, width, order, size, fill)?))
}

/// Build a format from its spec string (or a preset name, with optional overriding keys).
pub fn parse(spec: &str) -> Result<Arc<dyn Format>, String> {
    let (name, kv) = split(spec)?;
    match name {
        "counter" => {
            let mut size = None;
            let mut order = ByteOrder::Be;
            for (k, v) in kv {
                match k {
                    "size" => size = Some(v.parse::<usize>().map_err(|_| format!("size '{v}' is not a number"))?),
                    "order" => order = ByteOrder::parse(v)?,
                    _ => return Err(format!("unknown key '{k}' for the counter format (size, order)")),
                }
            }
            Ok(match size {
                Some(n) => Arc::new(Counter::new(n, order)?),
                None => Arc::new(Counter::any_len(order)),
            })
        }
        "vdif" => parse_vdif(&kv, false),
        "vtp" => parse_vdif(&kv, true),
        "mark5b" => parse_mark5b(&kv),
        "spead" => parse_spead(&kv),
        "seqfield" => parse_seqfield(&kv),
        _ => match PRESETS.iter().find(|p| p.name == name) {
            Some(p) => parse(&override_preset(p.spec, &kv)),
            None => {
                let names: Vec<&str> =
                    formats_help().iter().map(|f| f.0).chain(PRESETS.iter().map(|p| p.name)).collect();
                Err(format!("unknown format '{name}' in spec '{spec}': use one of {}", names.join(", ")))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_round_trips() {
        for f in [
            Arc::new(Counter::new(1080, ByteOrder::Le).unwrap()) as Arc<dyn Format>,
            Arc::new(Counter::any_len(ByteOrder::Be)),
        ] {
            let g = parse(&f.spec()).unwrap();
            assert_eq!(g.spec(), f.spec());
            assert_eq!(g.fixed_len(), f.fixed_len());
        }
        assert!(parse("counter,size=12").unwrap_err().contains("multiple of 8"));
        assert!(parse("counter,bogus=1").unwrap_err().contains("unknown key"));
        assert!(parse("nope").unwrap_err().contains("unknown format"));
        assert!(parse("counter,size").unwrap_err().contains("KEY=VALUE"));
    }

    /// Every format and option: the spec parses back into a format with the same spec, length,
    /// and the same answer on a packet emitted by the original.
    fn same(spec: &str) {
        let f = parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let g = parse(&f.spec()).unwrap_or_else(|e| panic!("{}: {e}", f.spec()));
        assert_eq!(g.spec(), f.spec(), "from {spec}");
        assert_eq!(g.packet_len(), f.packet_len());
        assert_eq!(g.fixed_len(), f.fixed_len());
        assert_eq!(g.seq_bits(), f.seq_bits());
        assert_eq!(g.raw_strip(), f.raw_strip());
        assert_eq!(g.file_extension(), f.file_extension());
        let mut b = vec![0u8; f.packet_len()];
        for seq in [0u64, 1, 12345] {
            f.emit(0, seq, &mut b);
            assert_eq!(g.check(&b), f.check(&b), "{spec} seq {seq}");
            assert!(f.check(&b).is_ok(), "{spec} seq {seq}");
        }
    }

    #[test]
    fn every_format_round_trips() {
        for spec in [
            "seqfield",
            "seqfield,offset=4,width=3,order=le,size=100,fill=random:5",
            "seqfield,width=2,fill=counter",
            "vdif",
            "vdif,frame=8032,threads=4,station=WS,bits=2,chans=16,rate=512M,epoch=48,start=100",
            "vdif,frame=1032,station=12345,bits=8,chans=1,complex=1,fps=1000,fill=tvg",
            "vdif,station=12,fill=zeros",
            "vdif,fill=any,rate=4G,frame=8032",
            "vtp",
            "vtp,psn=32,frame=5032,fps=100,fill=random:9",
            "mark5b",
            "mark5b,rate=4096M,halves=1,psn=1,user=0xBEAD,fill=counter,mjd=57821,sec=19801",
            "mark5b,halves=1,fill=zeros",
            "mark5b,psn=1,fill=random:3",
            "spead",
            "spead,heap=4096,payload=1024,first=0,step=8,addr=40,fill=tvg",
            "spead,fill=any",
            "spead,heap=65542,payload=8208,lead=8192,first=0,step=1,addr=40,fill=any",
            "counter,size=64,order=le",
        ] {
            same(spec);
        }
        // The clock-chosen start is printed, so the parsed copy numbers packets the same way.
        let f = parse("vdif").unwrap();
        assert!(f.spec().contains(",epoch=") && f.spec().contains(",start="), "{}", f.spec());
        let m = parse("mark5b").unwrap();
        assert!(m.spec().contains(",mjd=") && m.spec().contains(",sec="), "{}", m.spec());
    }

    #[test]
    fn bad_specs_say_what_to_do() {
        assert!(parse("vdif,rate=512000001").unwrap_err().contains("whole number"));
        assert!(parse("vdif,chans=3").unwrap_err().contains("power of two"));
        assert!(parse("vdif,station=ABC").unwrap_err().contains("two ASCII"));
        assert!(parse("vdif,psn=32").unwrap_err().contains("unknown key"));
        assert!(parse("vtp,psn=16").unwrap_err().contains("64 or 32"));
        assert!(parse("mark5b,rate=100").unwrap_err().contains("80000"));
        assert!(parse("mark5b,halves=2").unwrap_err().contains("1 or 0"));
        assert!(parse("mark5b,fill=sine").unwrap_err().contains("unknown fill"));
        assert!(parse("spead,heap=0").unwrap_err().contains("heap size"));
        assert!(parse("spead,lead=9000").unwrap_err().contains("lead"));
        assert!(parse("spead,heap=-1").unwrap_err().contains("not a number"));
        assert!(parse("seqfield,width=9").unwrap_err().contains("1 to 8"));
        assert!(parse("bogus").unwrap_err().contains("mark5c"));
    }

    #[test]
    fn a_key_given_twice_is_refused_and_named() {
        for (spec, key) in [
            ("counter,size=8800,size=1024", "'size'"),
            ("vdif,frame=8032,threads=4,frame=1032", "'frame'"),
            ("mark5b,psn=1,psn=0", "'psn'"),
            ("seqfield,offset=0,offset=4,size=64", "'offset'"),
            ("mark5c,halves=0,halves=1", "'halves'"),
        ] {
            let e = parse(spec).unwrap_err();
            assert!(e.contains(key) && e.contains("twice"), "{spec}: {e}");
        }
        let e = parse("vdif,fps=32000,rate=2048M").unwrap_err();
        assert!(e.contains("fps") && e.contains("rate") && e.contains("one of them"), "{e}");
        // A preset's keys are overridden, not duplicated: rate replaces the preset's fps.
        assert!(parse("mark5b,rate=1024M").is_ok());
        assert!(parse("vdif,threads=4").is_ok());
    }

    #[test]
    fn presets_are_valid_and_consistent() {
        let mut names = std::collections::HashSet::new();
        for p in presets() {
            assert!(names.insert(p.name), "duplicate preset {}", p.name);
            let f = parse(p.name).unwrap_or_else(|e| panic!("preset {}: {e}", p.name));
            assert_eq!(f.packet_len(), p.size, "preset {}", p.name);
            assert_eq!(parse(p.spec).unwrap().packet_len(), p.size);
            crate::units::Rate::parse(p.rate).unwrap_or_else(|e| panic!("preset {}: {e}", p.name));
            assert!(!p.description.is_empty());
        }
        for needed in ["mark5b", "mark5c", "casper", "vdif", "vtp", "spead"] {
            assert!(names.contains(needed), "preset {needed} missing");
        }
        // Keys after a preset override it.
        assert!(parse("mark5c,fill=zeros").unwrap().spec().contains("fill=zeros"));
        let m = parse("mark5b").unwrap();
        assert_eq!(m.packet_len(), 10_016);
        assert!(m.spec().contains("fps=25600"), "2048 Mb/s = 25600 frames/s");
        // Every format has a help line, and each help name parses.
        for (name, line) in formats_help() {
            assert!(!line.is_empty());
            parse(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}
