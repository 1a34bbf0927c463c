//! VSI-S, the text protocol a VLBI station's Field System drives its recorder with, spoken as
//! jive5ab speaks it (measured against jive5ab 3.1.0), so that a client written for jive5ab
//! works unchanged: the same framing, the same return codes and the same replies, byte for byte
//! where a client could look.
//!
//! Framing: a unit of input (what arrived up to a newline, or up to a `;` that ends it) loses
//! its spaces, CRs and LFs, is split at `;`, and each non-empty piece is a command
//! (`keyword = a : b`) or a query (`keyword ? a : b`), its keyword lower-cased. The replies of a
//! unit are joined with nothing between them and end in one `\n` (`\r\n` when the input had
//! one); an empty unit gets no reply. Return codes: 0 done, 1 initiated, 2 not applicable, 4
//! error, 6 busy or conflicting, 7 no such keyword or syntax, 8 parameter error.
//!
//! This module is pure: [`execute`] turns a command and the recorder's [`Settings`] into a reply,
//! through the [`Engine`] that starts and stops scans, so every reply is testable without a
//! socket or a disk.

use crate::spool::scan::{self, ScanLayout};
use std::fmt::Write;
use std::net::IpAddr;
use std::path::PathBuf;

/// Done.
pub const RC_DONE: u8 = 0;
/// Initiated, not yet complete.
pub const RC_INITIATED: u8 = 1;
/// Not applicable (a query-only keyword used as a command).
pub const RC_NOT_APPLICABLE: u8 = 2;
/// Error while carrying it out.
pub const RC_ERROR: u8 = 4;
/// Busy, or in conflict with what is happening (a recording).
pub const RC_CONFLICT: u8 = 6;
/// No such keyword, or not a command at all.
pub const RC_SYNTAX: u8 = 7;
/// A parameter is wrong.
pub const RC_PARAMETER: u8 = 8;

/// One command or query of a unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The keyword, lower case.
    pub keyword: String,
    /// A query (`?`) rather than a command (`=`).
    pub query: bool,
    /// The `:`-separated arguments (empty ones kept); none when nothing follows `?`/`=`.
    pub args: Vec<String>,
}

/// A piece of a unit that is not a command: its reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotACommand(pub String);

/// Split one unit of input into its commands (or the replies of pieces that are none).
pub fn split(unit: &str) -> Vec<Result<Command, NotACommand>> {
    let clean: String = unit.chars().filter(|c| !matches!(c, ' ' | '\r' | '\n')).collect();
    clean
        .split(';')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let Some(at) = p.find(['?', '=']) else {
                return Err(NotACommand("!syntax = 7 : Not a command or query;".into()));
            };
            let keyword = p[..at].to_ascii_lowercase();
            if keyword.is_empty() {
                return Err(NotACommand("!syntax = 7 : No keyword given ;".into()));
            }
            let rest = &p[at + 1..];
            let args = if rest.is_empty() { Vec::new() } else { rest.split(':').map(str::to_string).collect() };
            Ok(Command { keyword, query: p.as_bytes()[at] == b'?', args })
        })
        .collect()
}

/// The terminator of a unit's replies: `\r\n` when the input had one.
pub fn terminator(unit: &str) -> &'static str {
    if unit.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    }
}

/// A reply with jive5ab's spacing for `keyword`: `!kw<sep> rc : f : f ;`. `sep` is what comes
/// between the keyword and the code (`"= "`, `"=  "`, `" = "`, `"? "`...).
fn reply(keyword: &str, sep: &str, rc: u8, fields: &[String]) -> String {
    let mut s = format!("!{keyword}{sep}{rc}");
    for f in fields {
        let _ = write!(s, " : {f}");
    }
    s.push_str(" ;");
    s
}

/// An error reply as jive5ab's exception path writes it: `!kw = rc : message;`.
fn thrown(c: &Command, rc: u8, msg: &str) -> String {
    format!("!{} {} {rc} : {msg};", c.keyword, if c.query { "?" } else { "=" })
}

/// How datagrams carry the frames (`net_protocol=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// One frame per datagram (`pudp`).
    Plain,
    /// An 8-byte sequence number, then the frame (`udps`; jive5ab stores `udp` as this).
    Udps,
    /// As `udps`, without reordering (`udpsnor`).
    Udpsnor,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Plain => "pudp",
            Protocol::Udps => "udps",
            Protocol::Udpsnor => "udpsnor",
        }
    }
}

/// What `mode=` set: the stream's format family and what a reader of it needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Mode {
    /// As the client wrote it.
    pub text: String,
    /// The format family the recorder learns the exact layout of (`vdif`, `mark5b`), or a
    /// whole wirespeed format spec (other instruments' formats).
    pub family: String,
    /// Frame bytes on the wire (VDIF: payload + 32), when the mode says.
    pub frame: Option<usize>,
    /// Frames per second per thread, when the mode says (VDIF: the data rate over the payload).
    pub fps: Option<u32>,
    /// `mode?`'s fields after the mode string.
    pub query: Vec<String>,
}

/// Parse a jive5ab mode: `vdif_<payload>-<Mbps>-<channels>-<bits>`, `mark5b:<mask>[:<decimation>]`
/// (or `ext:`), or, beyond jive5ab, any wirespeed format spec (`counter,size=8192`, `spead,...`).
pub fn parse_mode(args: &[String]) -> Result<Mode, String> {
    let text = args.join(":");
    let first = args.first().map(String::as_str).unwrap_or("");
    let lower = first.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("vdif_") {
        let nums: Vec<u64> =
            rest.split('-').map(|n| n.parse::<u64>()).collect::<Result<_, _>>().map_err(|_| bad_mode(&text))?;
        let [payload, mbps, chans, bits] = nums[..] else { return Err(bad_mode(&text)) };
        let in_range = payload <= 1 << 24 && mbps <= 1 << 24 && chans <= 1 << 16 && bits <= 32;
        if !in_range
            || payload == 0
            || payload % 8 != 0
            || mbps == 0
            || chans == 0
            || bits == 0
            || !chans.is_power_of_two()
        {
            return Err(bad_mode(&text));
        }
        let ntrack = chans * bits;
        return Ok(Mode {
            text: first.to_string(),
            family: "vdif".into(),
            frame: Some(payload as usize + 32),
            fps: (mbps * 1_000_000 % (payload * 8) == 0).then(|| (mbps * 1_000_000 / (payload * 8)) as u32),
            query: vec![
                "VDIF".into(),
                ntrack.to_string(),
                format!("{:.3}", mbps as f64 * 1e6 / ntrack as f64),
                payload.to_string(),
            ],
        });
    }
    if lower == "mark5b" || lower == "ext" {
        let mask = args.get(1).cloned().unwrap_or_else(|| "0xffffffff".into());
        let decimation = args.get(2).cloned().unwrap_or_else(|| "1".into());
        return Ok(Mode {
            text: format!("{first}:{mask}:{decimation}"),
            family: "mark5b".into(),
            frame: Some(crate::wire::mark5b::FRAME_LEN),
            fps: None,
            query: vec!["mark5b".into(), mask, decimation],
        });
    }
    match crate::wire::spec::parse(&text) {
        Ok(f) => Ok(Mode {
            text: text.clone(),
            family: f.spec(),
            frame: f.fixed_len(),
            fps: None,
            query: vec![f.name(), f.fixed_len().map(|n| n.to_string()).unwrap_or_default()],
        }),
        Err(_) => Err(bad_mode(&text)),
    }
}

fn bad_mode(text: &str) -> String {
    format!("Mode '{text}' is not a valid mode (vdif_<payload>-<Mbps>-<channels>-<bits>, mark5b:<mask>, or a wirespeed format spec)")
}

/// Everything the control protocol sets, as it stands.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `mode=`.
    pub mode: Option<Mode>,
    /// `net_protocol=`: protocol, socket buffer, work buffer (the chunk size), buffers.
    pub protocol: Protocol,
    /// Socket receive buffer, bytes.
    pub socbuf: u64,
    /// Chunk size, bytes (rounded down to whole frames when used).
    pub workbuf: u64,
    /// jive5ab's number of work buffers (kept and reported; wirespeed's RAM ring is one).
    pub nbuf: u64,
    /// `net_port=`: the address to listen on, if one was given, and the port.
    pub ip: Option<IpAddr>,
    /// The data port.
    pub port: u16,
    /// `mtu=` (kept and reported).
    pub mtu: u64,
    /// `set_disks=`: the mount points.
    pub disks: Vec<PathBuf>,
    /// `record=mk6:1` chooses Mark6, `record=mk6:0` FlexBuff.
    pub layout: ScanLayout,
    /// `scan_set=`: the scan read back by `scan_check?`, with its byte range.
    pub scan_set: Option<(String, u64, u64)>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: None,
            protocol: Protocol::Plain,
            socbuf: 4 << 20,
            workbuf: scan::FLEXBUFF_CHUNK,
            nbuf: 8,
            ip: None,
            port: 2630,
            mtu: 1500,
            disks: Vec::new(),
            layout: ScanLayout::FlexBuff,
            scan_set: None,
        }
    }
}

/// What a recording looks like right now, for `record?`, `evlbi?` and `status?`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Live {
    /// A scan is starting or being recorded: settings wait, and another record=on conflicts.
    pub busy: bool,
    /// The scan being recorded (its number since start-up, from 1, and name), if any.
    pub recording: Option<(u64, String)>,
    /// Bytes received into the scan so far.
    pub bytes: u64,
    /// Datagrams received in the scan (or the last one).
    pub total: u64,
    /// Lost, from the frames' own sequence: the exact ledger.
    pub lost: u64,
    /// Out of order (late).
    pub late: u64,
    /// Invalid datagrams (stray or short ones among them), counted and never written.
    pub invalid: u64,
    /// An error is waiting for `error?`.
    pub error_pending: bool,
}

/// Starts and stops scans and reads recordings back: the recorder behind the protocol.
pub trait Engine {
    /// Start recording `scan` with `settings`; returns the name used (another when the name
    /// was taken) or the code and message of why not. Returns once a stream sent from then on
    /// is recorded from its first datagram.
    fn record_on(&self, scan: &str, settings: &Settings) -> Result<String, (u8, String)>;
    /// Stop the scan being recorded; false when none is.
    fn record_off(&self) -> bool;
    /// The recording's state now.
    fn live(&self) -> Live;
    /// The next queued error: its message and time.
    fn pop_error(&self) -> Option<(String, String)>;
    /// Scans recorded since start-up, in order.
    fn scans(&self) -> Vec<String>;
    /// `scan_check?` of `scan` on `disks`: the fields after the code, or an error message.
    fn scan_check(&self, scan: &str, disks: &[PathBuf]) -> Result<Vec<String>, String>;
    /// Bytes of `scan` on `disks`, if it is there.
    fn scan_bytes(&self, scan: &str, disks: &[PathBuf]) -> Option<u64>;
    /// The version fields of `version?`.
    fn version(&self) -> Vec<String>;
    /// Mount points matching `patterns` (absolute paths or globs), as `set_disks=` takes them.
    fn match_disks(&self, patterns: &[String]) -> Vec<PathBuf>;
}

const BUSY: &str = "not whilst vbsrecord is in progress";

/// jive5ab's names for its mount point groups, which `set_disks=` takes besides paths.
fn is_group(a: &str) -> bool {
    matches!(a, "flexbuff" | "flexbuf" | "mk6" | "null" | "1" | "2" | "3" | "4")
}

/// Carry out one command against the settings and the engine; the reply.
pub fn execute(c: &Command, s: &mut Settings, e: &dyn Engine) -> String {
    let live = e.live();
    let busy = live.busy;
    let kw = c.keyword.as_str();
    let arg = |i: usize| c.args.get(i).map(String::as_str).unwrap_or("");
    match (kw, c.query) {
        ("version", true) => reply(kw, "?  ", RC_DONE, &e.version()),
        ("version", false) => reply(kw, "=  ", RC_NOT_APPLICABLE, &["query only".into()]),
        ("status", true) => {
            let mut word = 0x1u32;
            if live.error_pending {
                word |= 0x2;
            }
            if busy {
                word |= 0x58;
            }
            reply(kw, "?  ", RC_DONE, &[format!("0x{word:08x}")])
        }
        ("status" | "scan_check", false) => {
            format!("!{kw}= {RC_NOT_APPLICABLE} : only available as query ;")
        }
        ("error", true) => match e.pop_error() {
            Some((msg, t)) => reply(kw, "? ", RC_DONE, &["-1".into(), msg, t, String::new(), String::new()]),
            None => format!("!{kw}? 0 :  :  :  :  :  ;"),
        },
        ("mode", true) => match &s.mode {
            Some(m) => {
                let mut f = vec![m.text.clone()];
                f.extend(m.query.iter().cloned());
                reply(kw, "? ", RC_DONE, &f)
            }
            None => format!("!{kw}? 0 :  : <unknown> : 0 : 0.000 ;"),
        },
        ("mode", false) if busy => reply(kw, "=  ", RC_CONFLICT, &[BUSY.into()]),
        ("mode", false) => match parse_mode(&c.args) {
            Ok(m) => {
                s.mode = Some(m);
                reply(kw, "= ", RC_DONE, &[])
            }
            Err(msg) => thrown(c, RC_ERROR, &msg),
        },
        ("net_protocol", true) => reply(
            kw,
            "? ",
            RC_DONE,
            &[s.protocol.name().into(), s.socbuf.to_string(), s.workbuf.to_string(), s.nbuf.to_string()],
        ),
        ("net_protocol", false) if busy => reply(kw, "= ", RC_CONFLICT, &[BUSY.into()]),
        ("net_protocol", false) => {
            let protocol = match arg(0).to_ascii_lowercase().as_str() {
                "" => s.protocol,
                "pudp" => Protocol::Plain,
                "udp" | "udps" => Protocol::Udps,
                "udpsnor" => Protocol::Udpsnor,
                other => {
                    return thrown(
                        c,
                        RC_PARAMETER,
                        &format!(
                            "protocol '{other}' is not recorded here: wirespeed records UDP (pudp, udps, udpsnor)"
                        ),
                    )
                }
            };
            let size = |i: usize, cur: u64, min: u64, max: u64| -> Result<u64, String> {
                match arg(i) {
                    "" => Ok(cur),
                    t => match crate::units::parse_bytes(t) {
                        Ok(n) if (min..=max).contains(&n) => Ok(n),
                        _ => Err(format!("'{t}' is not a size from {min} to {max} bytes")),
                    },
                }
            };
            let parsed = (|| -> Result<(u64, u64, u64), String> {
                Ok((
                    size(1, s.socbuf, 4096, 1 << 31)?,
                    size(2, s.workbuf, 64 << 10, 2 << 30)?,
                    match arg(3) {
                        "" => s.nbuf,
                        t => t
                            .parse::<u64>()
                            .ok()
                            .filter(|n| (1..=1024).contains(n))
                            .ok_or(format!("'{t}' is not a number of buffers"))?,
                    },
                ))
            })();
            match parsed {
                Ok((socbuf, workbuf, nbuf)) => {
                    (s.protocol, s.socbuf, s.workbuf, s.nbuf) = (protocol, socbuf, workbuf, nbuf);
                    reply(kw, " = ", RC_DONE, &[])
                }
                Err(msg) => thrown(c, RC_PARAMETER, &msg),
            }
        }
        ("net_port", true) => {
            let p = match s.ip {
                Some(ip) => format!("{ip}@{}", s.port),
                None => s.port.to_string(),
            };
            reply(kw, "? ", RC_DONE, &[p])
        }
        ("net_port", false) if busy => reply(kw, "= ", RC_CONFLICT, &[BUSY.into()]),
        ("net_port", false) => {
            let (ip, port) = match arg(0).split_once('@') {
                Some((ip, port)) => (Some(ip), port),
                None => (None, arg(0)),
            };
            let ip = match ip.map(str::parse::<IpAddr>) {
                None => None,
                Some(Ok(ip)) => Some(ip),
                Some(Err(_)) => {
                    return thrown(c, RC_PARAMETER, &format!("'{}' is not an IP address", ip.unwrap_or("")))
                }
            };
            match port.parse::<u16>() {
                Ok(p) if p > 0 => {
                    (s.ip, s.port) = (ip, p);
                    reply(kw, "= ", RC_DONE, &[])
                }
                _ => thrown(c, RC_PARAMETER, &format!("'{port}' is not a port (1..65535)")),
            }
        }
        ("mtu", true) => reply(kw, "? ", RC_DONE, &[s.mtu.to_string()]),
        ("mtu", false) if busy => reply(kw, "= ", RC_CONFLICT, &[BUSY.into()]),
        ("mtu", false) => match arg(0).parse::<u64>() {
            Ok(m) if (68..=65535).contains(&m) => {
                s.mtu = m;
                reply(kw, "= ", RC_DONE, &[])
            }
            _ => thrown(c, RC_PARAMETER, &format!("'{}' is not an MTU (68..65535)", arg(0))),
        },
        ("set_disks", true) => {
            let mut f = vec![s.disks.len().to_string()];
            f.extend(s.disks.iter().map(|d| d.display().to_string()));
            reply(kw, "?  ", RC_DONE, &f)
        }
        ("set_disks", false) if busy => reply(kw, "=  ", RC_CONFLICT, &[BUSY.into()]),
        ("set_disks", false) => {
            // As jive5ab: a failed selection leaves no disk selected, not the old ones.
            if let Some(rel) = c.args.iter().find(|a| !a.is_empty() && !a.starts_with('/') && !is_group(a)) {
                s.disks.clear();
                return thrown(
                    c,
                    RC_ERROR,
                    &format!("group definition '{rel}' not found: give absolute paths or globs, or flexbuff or mk6"),
                );
            }
            let found = e.match_disks(&c.args);
            if found.is_empty() {
                s.disks.clear();
                return reply(
                    kw,
                    "=  ",
                    RC_PARAMETER,
                    &["0".into(), "no mountpoints matched your selection criteria".into()],
                );
            }
            s.disks = found;
            reply(kw, "=  ", RC_DONE, &[s.disks.len().to_string()])
        }
        ("record", true) => match arg(0) {
            "mk6" => reply(kw, "?  ", RC_DONE, &[u8::from(s.layout == ScanLayout::Mark6).to_string()]),
            "nthread" => reply(kw, "?  ", RC_DONE, &["1".into(), s.disks.len().to_string()]),
            _ => match &live.recording {
                Some((n, name)) => {
                    reply(kw, "?  ", RC_DONE, &["on".into(), n.to_string(), name.clone(), live.bytes.to_string()])
                }
                None => reply(kw, "?  ", RC_DONE, &["off".into()]),
            },
        },
        ("record", false) => match arg(0) {
            "on" => {
                if busy {
                    return reply(kw, "=  ", RC_CONFLICT, &["Already doing vbsrecord".into()]);
                }
                let name = arg(1);
                if name.is_empty() {
                    return thrown(c, RC_CONFLICT, "must provide a scan name");
                }
                if let Err(msg) = scan::validate_scan_name(name) {
                    return thrown(c, RC_PARAMETER, &msg);
                }
                if s.mode.is_none() {
                    return thrown(c, RC_CONFLICT, "no mode set: give mode= first (e.g. mode=vdif_8000-2048-4-2)");
                }
                if s.disks.is_empty() {
                    return thrown(c, RC_CONFLICT, "no mountpoints: give set_disks= first");
                }
                match e.record_on(name, s) {
                    // jive5ab's spacing: `!record=  0  ;`, or with the name it used instead.
                    Ok(used) if used == name => format!("!{kw}=  {RC_DONE}  ;"),
                    Ok(used) => format!("!{kw}=  {RC_DONE}  : {used} ;"),
                    Err((rc, msg)) => thrown(c, rc, &msg),
                }
            }
            "off" => {
                if e.record_off() {
                    reply(kw, "=  ", RC_INITIATED, &[])
                } else {
                    reply(kw, "=  ", RC_CONFLICT, &["Not doing record".into()])
                }
            }
            // jive5ab's reader and writer thread counts: wirespeed has one capture thread and
            // one writer per disk, so the setting is taken and changes nothing.
            "nthread" => reply(kw, "=  ", RC_DONE, &[]),
            "mk6" if busy => reply(kw, "=  ", RC_CONFLICT, &[BUSY.into()]),
            "mk6" => match arg(1) {
                "" => thrown(c, RC_CONFLICT, "this command requires a parameter"),
                v => match v.parse::<i64>() {
                    Ok(n) => {
                        s.layout = if n != 0 { ScanLayout::Mark6 } else { ScanLayout::FlexBuff };
                        reply(kw, "=  ", RC_DONE, &[])
                    }
                    Err(_) => thrown(c, RC_PARAMETER, &format!("'{v}' is not a number")),
                },
            },
            other => reply(kw, "=  ", RC_NOT_APPLICABLE, &[format!("{other} does not apply to record")]),
        },
        ("evlbi", true) => {
            let pct = |n: u64| {
                let d = live.total + live.lost;
                format!("{:5.2}%", if d == 0 { 0.0 } else { n as f64 * 100.0 / d as f64 })
            };
            reply(
                kw,
                "? ",
                RC_DONE,
                &[
                    "total".into(),
                    live.total.to_string(),
                    "loss".into(),
                    format!("{} ({})", live.lost, pct(live.lost)),
                    "out-of-order".into(),
                    format!("{} ({})", live.late, pct(live.late)),
                    "extent".into(),
                    "0seqnr/pkt".into(),
                ],
            )
        }
        ("scan_set", true) => match &s.scan_set {
            Some((name, a, b)) => {
                let idx = e.scans().iter().rposition(|n| n == name).map_or(-1, |i| i as i64);
                reply(kw, "? ", RC_DONE, &[idx.to_string(), name.clone(), a.to_string(), b.to_string()])
            }
            None => match e.scans().last() {
                Some(last) => {
                    reply(kw, "? ", RC_DONE, &[(e.scans().len() - 1).to_string(), last.clone(), "0".into(), "0".into()])
                }
                None => format!("!{kw}? 0 : -1 :  : 0 : 0 ;"),
            },
        },
        ("scan_set", false) if busy => reply(kw, "= ", RC_CONFLICT, &[BUSY.into()]),
        ("scan_set", false) => {
            let name = arg(0);
            if scan::validate_scan_name(name).is_err() {
                return thrown(c, RC_ERROR, &format!("'{name}' does not exist in Mk6/VBS format"));
            }
            let Some(len) = e.scan_bytes(name, &s.disks) else {
                return thrown(c, RC_ERROR, &format!("'{name}' does not exist in Mk6/VBS format"));
            };
            let at = |t: &str, base: u64, default: u64| -> Option<u64> {
                match t {
                    "" => Some(default),
                    t => match t.strip_prefix('+') {
                        Some(n) => n.parse::<u64>().ok().map(|n| base.saturating_add(n)),
                        None => t.parse().ok(),
                    },
                }
            };
            let Some(start) = at(arg(1), 0, 0) else {
                return thrown(c, RC_PARAMETER, &format!("'{}' is not a byte position", arg(1)));
            };
            let Some(end) = at(arg(2), start, len).map(|e| e.min(len)) else {
                return thrown(c, RC_PARAMETER, &format!("'{}' is not a byte position", arg(2)));
            };
            s.scan_set = Some((name.to_string(), start.min(end), end));
            reply(kw, "= ", RC_DONE, &[])
        }
        ("scan_check", true) => {
            if busy {
                return format!("!{kw}? {RC_PARAMETER} : no scan name given ;");
            }
            let name = s.scan_set.as_ref().map(|x| x.0.clone()).or_else(|| e.scans().last().cloned());
            let Some(name) = name else { return format!("!{kw}? {RC_PARAMETER} : no scan name given ;") };
            match e.scan_check(&name, &s.disks) {
                Ok(f) => reply(kw, "? ", RC_DONE, &f),
                Err(msg) => thrown(c, RC_ERROR, &msg),
            }
        }
        _ => format!("!{kw}{} 7 : ENOSYS - not implemented ;", if c.query { "?" } else { "=" }),
    }
}

/// Replies to one unit of input, joined and terminated as jive5ab does; `None` for an empty one.
pub fn respond(unit: &str, s: &mut Settings, e: &dyn Engine) -> Option<String> {
    let pieces = split(unit);
    if pieces.is_empty() {
        return None;
    }
    let mut out = String::new();
    for p in pieces {
        match p {
            Ok(c) => out.push_str(&execute(&c, s, e)),
            Err(NotACommand(r)) => out.push_str(&r),
        }
    }
    out.push_str(terminator(unit));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A recorder that records nothing: what the protocol asked of it, and a scan in progress
    /// when it says so.
    #[derive(Default)]
    struct Fake {
        on: RefCell<Option<(u64, String)>>,
        started: RefCell<Vec<String>>,
        errors: RefCell<Vec<(String, String)>>,
    }

    impl Engine for Fake {
        fn record_on(&self, scan: &str, _: &Settings) -> Result<String, (u8, String)> {
            let used = if self.started.borrow().iter().any(|s| s == scan) { format!("{scan}a") } else { scan.into() };
            self.started.borrow_mut().push(used.clone());
            *self.on.borrow_mut() = Some((self.started.borrow().len() as u64, used.clone()));
            Ok(used)
        }
        fn record_off(&self) -> bool {
            self.on.borrow_mut().take().is_some()
        }
        fn live(&self) -> Live {
            Live {
                busy: self.on.borrow().is_some(),
                recording: self.on.borrow().clone(),
                bytes: 803200,
                total: 9901,
                lost: 99,
                error_pending: !self.errors.borrow().is_empty(),
                ..Default::default()
            }
        }
        fn pop_error(&self) -> Option<(String, String)> {
            self.errors.borrow_mut().pop()
        }
        fn scans(&self) -> Vec<String> {
            self.started.borrow().clone()
        }
        fn scan_check(&self, scan: &str, _: &[PathBuf]) -> Result<Vec<String>, String> {
            Ok(vec!["?".into(), scan.into(), "VDIF".into()])
        }
        fn scan_bytes(&self, scan: &str, _: &[PathBuf]) -> Option<u64> {
            (scan == "t1").then_some(160640000)
        }
        fn version(&self) -> Vec<String> {
            vec![" wirespeed".into(), "1".into()]
        }
        fn match_disks(&self, p: &[String]) -> Vec<PathBuf> {
            p.iter().filter(|p| p.starts_with("/mnt/")).map(PathBuf::from).collect()
        }
    }

    fn session(e: &Fake, s: &mut Settings, unit: &str) -> String {
        respond(unit, s, e).unwrap_or_default()
    }

    /// The replies jive5ab 3.1.0 gave for the same input, byte for byte (BENCHMARKS/README
    /// name where they were measured), and the return codes of everything that differs.
    #[test]
    fn replies_are_jive5abs_byte_for_byte() {
        let e = Fake::default();
        let mut s = Settings::default();
        let cases: &[(&str, &str)] = &[
            ("status?;", "!status?  0 : 0x00000001 ;\n"),
            ("mode?;", "!mode? 0 :  : <unknown> : 0 : 0.000 ;\n"),
            ("mode=vdif_8000-2048-4-2;", "!mode= 0 ;\n"),
            ("mode?;", "!mode? 0 : vdif_8000-2048-4-2 : VDIF : 8 : 256000000.000 : 8000 ;\n"),
            ("net_protocol=pudp:4M:128M:8;", "!net_protocol = 0 ;\n"),
            ("net_protocol?;", "!net_protocol? 0 : pudp : 4194304 : 134217728 : 8 ;\n"),
            ("net_port?;", "!net_port? 0 : 2630 ;\n"),
            ("net_port=7148;", "!net_port= 0 ;\n"),
            ("net_port?;", "!net_port? 0 : 7148 ;\n"),
            ("mtu?;", "!mtu? 0 : 1500 ;\n"),
            ("mtu=9000;", "!mtu= 0 ;\n"),
            ("mtu?;", "!mtu? 0 : 9000 ;\n"),
            ("set_disks?;", "!set_disks?  0 : 0 ;\n"),
            ("set_disks=/work/j5;", "!set_disks=  8 : 0 : no mountpoints matched your selection criteria ;\n"),
            ("set_disks=/mnt/disk0:/mnt/disk1;", "!set_disks=  0 : 2 ;\n"),
            ("set_disks?;", "!set_disks?  0 : 2 : /mnt/disk0 : /mnt/disk1 ;\n"),
            ("record?;", "!record?  0 : off ;\n"),
            ("record?mk6;", "!record?  0 : 0 ;\n"),
            ("scan_check?;", "!scan_check? 8 : no scan name given ;\n"),
            ("scan_set?;", "!scan_set? 0 : -1 :  : 0 : 0 ;\n"),
            ("record=off;", "!record=  6 : Not doing record ;\n"),
            ("record=on:test_scan;", "!record=  0  ;\n"),
            ("record?;", "!record?  0 : on : 1 : test_scan : 803200 ;\n"),
            ("status?;", "!status?  0 : 0x00000059 ;\n"),
            ("record=on:other;", "!record=  6 : Already doing vbsrecord ;\n"),
            ("scan_set=test_scan;", "!scan_set= 6 : not whilst vbsrecord is in progress ;\n"),
            ("scan_check?;", "!scan_check? 8 : no scan name given ;\n"),
            ("set_disks=/mnt/disk0;", "!set_disks=  6 : not whilst vbsrecord is in progress ;\n"),
            ("mode=vdif_8000-2048-4-2;", "!mode=  6 : not whilst vbsrecord is in progress ;\n"),
            ("net_protocol=pudp:4M:128M:8;", "!net_protocol= 6 : not whilst vbsrecord is in progress ;\n"),
            ("net_port=7148;", "!net_port= 6 : not whilst vbsrecord is in progress ;\n"),
            (
                "evlbi?;",
                "!evlbi? 0 : total : 9901 : loss : 99 ( 0.99%) : out-of-order : 0 ( 0.00%) : extent : 0seqnr/pkt ;\n",
            ),
            ("record=off;", "!record=  1 ;\n"),
            ("record?;", "!record?  0 : off ;\n"),
            ("scan_set?;", "!scan_set? 0 : 0 : test_scan : 0 : 0 ;\n"),
            ("record=on:test_scan;", "!record=  0  : test_scana ;\n"),
            ("record=off;", "!record=  1 ;\n"),
            ("scan_set=t1;", "!scan_set= 0 ;\n"),
            ("scan_set?;", "!scan_set? 0 : -1 : t1 : 0 : 160640000 ;\n"),
            ("scan_set=t1:+8032:+16064;", "!scan_set= 0 ;\n"),
            ("scan_set?;", "!scan_set? 0 : -1 : t1 : 8032 : 24096 ;\n"),
            ("scan_set=no_such_scan;", "!scan_set = 4 : 'no_such_scan' does not exist in Mk6/VBS format;\n"),
            ("foo=1;", "!foo= 7 : ENOSYS - not implemented ;\n"),
            ("foo?;", "!foo? 7 : ENOSYS - not implemented ;\n"),
            ("record=bogus;", "!record=  2 : bogus does not apply to record ;\n"),
            ("record=;", "!record=  2 :  does not apply to record ;\n"),
            ("mode;", "!syntax = 7 : Not a command or query;\n"),
            ("=;", "!syntax = 7 : No keyword given ;\n"),
            ("version=;", "!version=  2 : query only ;\n"),
            ("status=;", "!status= 2 : only available as query ;\n"),
            ("scan_check=;", "!scan_check= 2 : only available as query ;\n"),
            ("record=mk6:2;", "!record=  0 ;\n"),
            ("record?mk6;", "!record?  0 : 1 ;\n"),
            ("record=mk6:0;", "!record=  0 ;\n"),
            ("error?;", "!error? 0 :  :  :  :  :  ;\n"),
            // Framing: several per unit, no final ';', spaces, upper case, CRLF.
            ("status?;foo?;mode?", "!status?  0 : 0x00000001 ;!foo? 7 : ENOSYS - not implemented ;!mode? 0 : vdif_8000-2048-4-2 : VDIF : 8 : 256000000.000 : 8000 ;\n"),
            (" status ? ; ", "!status?  0 : 0x00000001 ;\n"),
            ("STATUS?;", "!status?  0 : 0x00000001 ;\n"),
            ("status?\r\n", "!status?  0 : 0x00000001 ;\r\n"),
            (";", ""),
            ("\n", ""),
            ("record=nthread::2;", "!record=  0 ;\n"),
            // A failed selection leaves no disk, as jive5ab's does.
            ("set_disks=/nope;", "!set_disks=  8 : 0 : no mountpoints matched your selection criteria ;\n"),
            ("set_disks?;", "!set_disks?  0 : 0 ;\n"),
        ];
        for (input, want) in cases {
            assert_eq!(session(&e, &mut s, input), *want, "input {input:?}");
        }
    }

    /// What wirespeed does where jive5ab would do harm: a scan name that leaves the mount
    /// point, or that jive5ab itself could not read back, is a parameter error.
    #[test]
    fn scan_names_outside_a_mount_point_or_unreadable_by_jive5ab_are_refused() {
        let e = Fake::default();
        let mut s = Settings::default();
        session(&e, &mut s, "mode=vdif_8000-2048-4-2;set_disks=/mnt/disk0;");
        for bad in ["../x", "a/b", "a.b", ".x"] {
            let r = session(&e, &mut s, &format!("record=on:{bad};"));
            assert!(r.starts_with("!record = 8 : scan name"), "{bad}: {r}");
        }
        assert_eq!(session(&e, &mut s, "record=on:;"), "!record = 6 : must provide a scan name;\n");
        assert!(e.started.borrow().is_empty(), "nothing was started");
        // Without a mode or disks, record=on is refused before anything starts.
        let mut fresh = Settings::default();
        assert!(session(&e, &mut fresh, "record=on:x;").starts_with("!record = 6 : no mode set"));
        // A bad mode and bad parameters keep what was set.
        assert!(session(&e, &mut s, "mode=vdif_8001-2048-4-2;").starts_with("!mode = 4 : Mode 'vdif_8001-2048-4-2'"));
        assert!(session(&e, &mut s, "net_port=0;").starts_with("!net_port = 8 :"));
        assert!(session(&e, &mut s, "net_protocol=tcp;").starts_with("!net_protocol = 8 :"));
        assert!(session(&e, &mut s, "mtu=12;").starts_with("!mtu = 8 :"));
        assert_eq!(s.mode.as_ref().map(|m| m.text.as_str()), Some("vdif_8000-2048-4-2"));
        assert_eq!((s.port, s.mtu, s.protocol), (2630, 1500, Protocol::Plain));
    }

    #[test]
    fn modes_give_the_frame_and_the_family() {
        let m = parse_mode(&["vdif_8192-4096-8-2".into()]).unwrap();
        assert_eq!((m.family.as_str(), m.frame), ("vdif", Some(8224)));
        let m = parse_mode(&["mark5b".into(), "0xffffffff".into(), "1".into()]).unwrap();
        assert_eq!((m.family.as_str(), m.frame), ("mark5b", Some(10016)));
        let m = parse_mode(&["counter,size=8192".into()]).unwrap();
        assert_eq!(m.frame, Some(8192));
        for bad in ["bogus", "vdif_8000-2048-3-2", "vdif_0-1-1-1", "vdif_8000"] {
            assert!(parse_mode(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
