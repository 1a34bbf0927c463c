//! `bench ttcp`'s results in the seed's layout: Table 3 (read/write size), Tables 4 and 5
//! (socket buffer size, TCP and UDP), and all rows as CSV.

use super::{Proto, Report, SockBuf};
use serde::Serialize;
use std::fmt::Write as _;

/// Read/write sizes of seed 000's Table 3: powers of two from 32 bytes to 1 MiB.
pub const TABLE3_SIZES: [usize; 16] =
    [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576];

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
    use crate::ttcp::{Config, Role};

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
