//! `bench ttcp`'s results in the seed's layout: Table 3 (read/write size, a column per
//! transport beside the seed's own figures), Tables 4 and 5 (socket buffer size, TCP and UDP),
//! and all rows as CSV.

use super::{Proto, RawReport, Report, SockBuf};
use serde::Serialize;
use std::fmt::Write as _;

/// Read/write sizes of seed 000's Table 3: powers of two from 32 bytes to 1 MiB.
pub const TABLE3_SIZES: [usize; 16] =
    [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576];

/// Seed 000's own Table 3 (7.1): MB/s of one raw device between the two partitions of an
/// Origin 2000 by read/write size. The seed printed no row for 512 KiB.
pub const SEED_TABLE3: [(usize, f64); 15] = [
    (32, 0.8),
    (64, 1.5),
    (128, 2.8),
    (256, 1.2),
    (512, 2.4),
    (1024, 4.8),
    (2048, 9.5),
    (4096, 18.5),
    (8192, 34.0),
    (16384, 60.0),
    (32768, 95.0),
    (65536, 135.0),
    (131072, 170.0),
    (262144, 195.0),
    (1048576, 210.0),
];

/// The seed's figure for read/write size `size`, when it printed one.
pub fn seed_table3(size: usize) -> Option<f64> {
    SEED_TABLE3.iter().find(|(s, _)| *s == size).map(|(_, v)| *v)
}

/// What Table 3 runs over: the raw devices (the seed's), or a local reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Over {
    /// The raw devices between partitions 1 and 2 (`/hw/xplink/raw/<remote>/<nn>`).
    Devices,
    /// A pipe (a FIFO both ends open by path) between two processes.
    Pipe,
    /// A Unix stream socket between two processes.
    Unix,
    /// A TCP stream (the stand-in Table 3 had before the devices).
    Tcp,
}

impl Over {
    /// Every transport, in the order the table's columns take.
    pub const ALL: [Over; 4] = [Over::Devices, Over::Pipe, Over::Unix, Over::Tcp];

    /// The name the command line and the tables use.
    pub fn name(self) -> &'static str {
        match self {
            Over::Devices => "devices",
            Over::Pipe => "pipe",
            Over::Unix => "unix",
            Over::Tcp => "tcp",
        }
    }

    /// Read a name as [`Over::name`] writes it.
    pub fn parse(s: &str) -> Option<Over> {
        Over::ALL.into_iter().find(|o| o.name() == s.trim().to_ascii_lowercase())
    }
}

/// One raw transfer of Table 3 (devices, pipe or Unix socket): both ends' reports and the
/// figure the table shows.
#[derive(Clone, Debug, Serialize)]
pub struct RawRow {
    /// The transport.
    pub over: Over,
    /// Read/write size.
    pub buflen: usize,
    /// Writes per stream.
    pub nbuf: u64,
    /// Streams run at once (devices 00..K-1, or K pipes or sockets).
    pub streams: usize,
    /// The transmitter's command line (after any partition prefix).
    pub transmitter_cmd: Vec<String>,
    /// The receiver's command line (after any partition prefix).
    pub receiver_cmd: Vec<String>,
    /// The transmitter's report.
    pub transmit: RawReport,
    /// The receiver's report.
    pub receive: RawReport,
    /// Bytes received, all streams.
    pub bytes: u64,
    /// Seconds from the first byte written to the last byte read (all streams).
    pub real_s: f64,
    /// `bytes / real_s`, 10^6 bytes per second: the table's figure (the aggregate when several
    /// streams ran).
    pub mb_per_s: f64,
    /// The same per stream, from its own first byte written to its last byte read.
    pub stream_mb_per_s: Vec<f64>,
    /// What `real_s` spans.
    pub timed: String,
}

impl RawRow {
    /// Pair the two ends' reports: the time runs from the transmitter's first byte to the
    /// receiver's last, on the monotonic clock both read.
    pub fn new(
        over: Over,
        transmitter_cmd: Vec<String>,
        receiver_cmd: Vec<String>,
        transmit: RawReport,
        receive: RawReport,
    ) -> RawRow {
        // Both ends read CLOCK_MONOTONIC, which partitions (network and mount namespaces)
        // share; should a receiver's last byte ever come before the transmitter's first, the
        // clocks are not one, and each span falls back to the receiver's own.
        let shared = receive.last_ns > transmit.first_ns;
        let span = |first: u64, last: u64| last.saturating_sub(first) as f64 / 1e9;
        let rate = |bytes: u64, s: f64| if s > 0.0 { bytes as f64 / s / 1e6 } else { 0.0 };
        let real_s = if shared { span(transmit.first_ns, receive.last_ns) } else { receive.real_s };
        let stream_mb_per_s = receive
            .streams
            .iter()
            .zip(&transmit.streams)
            .map(|(r, t)| if shared { rate(r.bytes, span(t.first_ns, r.last_ns)) } else { r.mb_per_s })
            .collect();
        RawRow {
            over,
            buflen: receive.buflen,
            nbuf: receive.nbuf,
            streams: receive.streams.len(),
            transmitter_cmd,
            receiver_cmd,
            bytes: receive.bytes,
            real_s,
            mb_per_s: rate(receive.bytes, real_s),
            stream_mb_per_s,
            timed: if shared {
                "first byte written to last byte read"
            } else {
                "receiver's first to last read (the two clocks disagree)"
            }
            .into(),
            transmit,
            receive,
        }
    }
}

/// Table 3 in the seed's layout with a column per transport in `over` (MB/s at each size:
/// raw rows from `raw`, TCP rows from `tcp`) and the seed's own figures as the last column.
/// `streams` above 1 makes the raw columns aggregates of that many streams at once.
pub fn table3(sizes: &[usize], over: &[Over], raw: &[RawRow], tcp: &[BenchRow], streams: usize) -> String {
    let mut s = String::new();
    let head = |o: &Over| match (o, streams) {
        (Over::Tcp, _) | (_, 1) => o.name().to_string(),
        _ => format!("{} x{streams}", o.name()),
    };
    let _ = write!(s, "{:<28}", "Read/Write Size (bytes)");
    for o in over {
        let _ = write!(s, "{:>14}", head(o));
    }
    let _ = writeln!(s, "{:>14}", "seed");
    for &size in sizes {
        let _ = write!(s, "{size:<28}");
        for &o in over {
            let v = match o {
                Over::Tcp => tcp.iter().find(|r| r.buflen == size).map(|r| r.receive.mb_per_s),
                _ => raw.iter().find(|r| r.over == o && r.buflen == size).map(|r| r.mb_per_s),
            };
            let _ = write!(s, "{:>14}", v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into()));
        }
        let _ = writeln!(s, "{:>14}", seed_table3(size).map(|v| v.to_string()).unwrap_or_else(|| "-".into()));
    }
    let _ = writeln!(s, "Table 3: Raw Device Performance (MB/s)");
    s
}

/// One transmitter/receiver pair of `bench ttcp`: a row of Table 3, 4 or 5.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// TCP (Tables 3 and 4) or UDP (Table 5).
    pub proto: Proto,
    /// -b given to both sides; `None` for the default row.
    pub sockbuf: Option<u64>,
    /// -l given to both sides (Table 3's read/write size).
    pub buflen: usize,
    /// -n given to both sides.
    pub nbuf: u64,
    /// The transmitter's command line (after any partition prefix).
    pub transmitter_cmd: Vec<String>,
    /// The receiver's command line (after any partition prefix).
    pub receiver_cmd: Vec<String>,
    /// The transmitter's report.
    pub transmit: Report,
    /// The receiver's report.
    pub receive: Report,
}

fn sockbuf_label(r: &BenchRow) -> String {
    match r.sockbuf {
        Some(b) => b.to_string(),
        None => "default *".into(),
    }
}

fn mbs(v: f64) -> String {
    format!("{v:.1} MB/s")
}

/// Table 4 (TCP) or Table 5 (UDP) in the seed's layout, rows in the order run, with a
/// footnote for the default row (the seed's shaded one).
pub fn sockbuf_table(proto: Proto, rows: &[BenchRow]) -> String {
    let rows: Vec<&BenchRow> = rows.iter().filter(|r| r.proto == proto).collect();
    let mut s = String::new();
    let udp = proto == Proto::Udp;
    let _ = write!(s, "{:<28}{:>16}{:>16}", "Socket Buffer Size (Bytes)", "Transmit", "Receive");
    if udp {
        let _ = write!(s, "{:>18}", "% data dropped");
    }
    s.push('\n');
    for r in &rows {
        let _ = write!(s, "{:<28}{:>16}{:>16}", sockbuf_label(r), mbs(r.transmit.mb_per_s), mbs(r.receive.mb_per_s));
        if udp {
            let _ = write!(s, "{:>18}", format!("{:.2} %", r.receive.dropped_pct.unwrap_or(0.0)));
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "{}",
        match proto {
            Proto::Tcp => "Table 4: TCP/IP Performance",
            Proto::Udp => "Table 5: UDP/IP Performance",
        }
    );
    if let Some(d) = rows.iter().find(|r| r.sockbuf.is_none()) {
        let show = |b: &SockBuf| {
            let g = b.granted.map(|g| g.to_string()).unwrap_or_else(|| "unknown".into());
            match b.at_end {
                Some(e) if Some(e) != b.granted => format!("{} {g} at the start, {e} at the end", b.option),
                _ => format!("{} {g}", b.option),
            }
        };
        let _ = writeln!(
            s,
            "* no -b (the seed's shaded row): the kernel's defaults, {} (transmitter), {} (receiver)",
            show(&d.transmit.sockbuf),
            show(&d.receive.sockbuf)
        );
    }
    s
}

/// Table 3 in the seed's layout: read/write size and MB/s, the bytes received over the
/// receiver's wall-clock time.
pub fn rw_table(rows: &[BenchRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:<28}{:>12}", "Read/Write Size (bytes)", "MB/s");
    for r in rows {
        let _ = writeln!(s, "{:<28}{:>12.1}", r.buflen, r.receive.mb_per_s);
    }
    let _ = writeln!(s, "Table 3: Raw Device Performance (here: a TCP stream socket)");
    s
}

/// All rows as CSV, one line per pair, for spreadsheets and plots.
pub fn csv(table3: &[BenchRow], rows: &[BenchRow]) -> String {
    let mut s = String::from(
        "table,proto,sockbuf,buflen,nbuf,transmit_mb_s,receive_mb_s,dropped_pct,bytes_sent,bytes_received,\
         datagrams_sent,datagrams_received,transmit_cpu_pct,receive_cpu_pct,transmit_sockbuf_granted,receive_sockbuf_granted\n",
    );
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for (table, r) in
        table3.iter().map(|r| (3, r)).chain(rows.iter().map(|r| (if r.proto == Proto::Tcp { 4 } else { 5 }, r)))
    {
        let _ = writeln!(
            s,
            "{table},{},{},{},{},{:.3},{:.3},{},{},{},{},{},{:.1},{:.1},{},{}",
            r.proto.name(),
            r.sockbuf.map(|b| b.to_string()).unwrap_or_else(|| "default".into()),
            r.buflen,
            r.nbuf,
            r.transmit.mb_per_s,
            r.receive.mb_per_s,
            r.receive.dropped_pct.map(|p| format!("{p:.3}")).unwrap_or_default(),
            r.transmit.bytes,
            r.receive.bytes,
            opt(r.transmit.datagrams),
            opt(r.receive.datagrams),
            r.transmit.cpu_pct,
            r.receive.cpu_pct,
            opt(r.transmit.sockbuf.granted),
            opt(r.receive.sockbuf.granted),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ttcp::{Config, RawKind, Role, StreamReport};

    fn raw_report(role: Role, streams: &[(u64, u64, u64)]) -> RawReport {
        let streams: Vec<StreamReport> = streams
            .iter()
            .map(|&(bytes, first_ns, last_ns)| StreamReport {
                path: "p".into(),
                bytes,
                calls: 1,
                short_calls: 0,
                first_ns,
                last_ns,
                real_s: (last_ns - first_ns) as f64 / 1e9,
                mb_per_s: bytes as f64 / ((last_ns - first_ns) as f64 / 1e9) / 1e6,
                aligned: true,
            })
            .collect();
        let first_ns = streams.iter().map(|s| s.first_ns).min().unwrap();
        let last_ns = streams.iter().map(|s| s.last_ns).max().unwrap();
        RawReport {
            schema: String::new(),
            role,
            kind: RawKind::Path,
            buflen: 1000,
            nbuf: 1000,
            check: String::new(),
            cpu: None,
            bytes: streams.iter().map(|s| s.bytes).sum(),
            calls: 0,
            short_calls: 0,
            first_ns,
            last_ns,
            real_s: (last_ns - first_ns) as f64 / 1e9,
            mb_per_s: 0.0,
            cpu_s: 0.0,
            streams,
        }
    }

    #[test]
    fn a_raw_row_is_timed_from_the_first_byte_written_to_the_last_read() {
        // Two streams of 1 MB: written from t=1 s and 1.5 s, read until t=2 s and 3 s.
        let t = raw_report(
            Role::Transmit,
            &[(1_000_000, 1_000_000_000, 1_100_000_000), (1_000_000, 1_500_000_000, 1_600_000_000)],
        );
        let r = raw_report(
            Role::Receive,
            &[(1_000_000, 1_200_000_000, 2_000_000_000), (1_000_000, 1_700_000_000, 3_000_000_000)],
        );
        let row = RawRow::new(Over::Pipe, vec![], vec![], t.clone(), r.clone());
        assert_eq!((row.bytes, row.streams, row.buflen), (2_000_000, 2, 1000));
        assert!((row.real_s - 2.0).abs() < 1e-12 && (row.mb_per_s - 1.0).abs() < 1e-12, "{row:?}");
        assert!((row.stream_mb_per_s[0] - 1.0).abs() < 1e-12 && (row.stream_mb_per_s[1] - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(row.timed, "first byte written to last byte read");
        // Clocks that disagree: the receiver's own span.
        let late = raw_report(
            Role::Transmit,
            &[(1_000_000, 5_000_000_000, 5_100_000_000), (1_000_000, 5_000_000_000, 5_100_000_000)],
        );
        let row = RawRow::new(Over::Pipe, vec![], vec![], late, r);
        assert!((row.real_s - 1.8).abs() < 1e-12 && row.timed.contains("disagree"), "{row:?}");
        let text = table3(&[32, 524288], &[Over::Pipe, Over::Tcp], &[], &[], 1);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0].split_whitespace().skip(3).collect::<Vec<_>>(), ["pipe", "tcp", "seed"]);
        assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["32", "-", "-", "0.8"]);
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["524288", "-", "-", "-"]);
        assert!(table3(&[32], &[Over::Devices], &[], &[], 4).lines().next().unwrap().contains("devices x4"));
    }

    #[test]
    fn tables_have_the_seeds_columns() {
        let mut cfg = Config::new(Proto::Udp);
        cfg.buflen = 100;
        cfg.nbuf = 10;
        let rep = |role, mb: f64, pct: Option<f64>| {
            let mut r = Report::new(
                role,
                &cfg,
                "127.0.0.1:1".parse().unwrap(),
                SockBuf {
                    option: "SO_RCVBUF".into(),
                    requested: None,
                    granted: Some(212992),
                    source: String::new(),
                    at_end: None,
                },
            );
            r.mb_per_s = mb;
            r.dropped_pct = pct;
            r
        };
        let row = |sockbuf| BenchRow {
            proto: Proto::Udp,
            sockbuf,
            buflen: 100,
            nbuf: 10,
            transmitter_cmd: vec![],
            receiver_cmd: vec![],
            transmit: rep(Role::Transmit, 275.0, None),
            receive: rep(Role::Receive, 160.0, Some(45.0)),
        };
        let t = sockbuf_table(Proto::Udp, &[row(Some(65536)), row(None)]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("Socket Buffer Size (Bytes)") && lines[0].contains("% data dropped"));
        assert!(lines[1].starts_with("65536") && lines[1].contains("275.0 MB/s") && lines[1].contains("45.00 %"));
        assert!(lines[2].starts_with("default *"));
        assert!(lines[3].starts_with("Table 5"));
        assert!(lines[4].contains("212992"));
        assert!(sockbuf_table(Proto::Tcp, &[row(None)]).lines().nth(1).unwrap().starts_with("Table 4"));
        let c = csv(&[], &[row(Some(65536))]);
        assert_eq!(c.lines().count(), 2);
        assert!(c.lines().nth(1).unwrap().starts_with("5,udp,65536,100,10,275.000,160.000,45.000,"));
    }
}
