//! `wirespeed bench ttcp`: seed 000's Tables 3-5, the whole table set, each row one pair of
//! `wirespeed ttcp` processes (the receiver first, then the transmitter once the receiver says
//! where it listens) in one [`Place`]: across two partitions with the privilege, else on
//! loopback on two different cores.
//!
//! The driver is here rather than in the command so that it stands on the same place and child
//! handling ([`crate::testbed::proc`]) as every other run of two ends; the command parses its
//! options and prints what [`run`] returns.

use crate::testbed;
use crate::testbed::place::{Place, Side};
use crate::testbed::proc::{self, Proc, Wait};
use crate::ttcp::{self, BenchRow, Config, Proto, Report, Role, TABLE3_SIZES};
use crate::units;
use crate::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The document `--json` prints and `ttcp.json` holds.
pub const SCHEMA: &str = "wirespeed.bench.ttcp/1";

/// A child told to stop (or past its limit) is killed this long after its SIGTERM.
const KILL_AFTER: Duration = Duration::from_secs(3);

/// What to run: the socket-buffer tables for `protos` and, with `table3`, Table 3.
#[derive(Clone, Debug)]
pub struct TtcpBenchConfig {
    /// Socket-buffer tables to run, in order: TCP is Table 4, UDP Table 5 (repeats are run once).
    pub protos: Vec<Proto>,
    /// Socket buffer sizes (-b), one row each, in this order; a "default" row is always added.
    pub buffers: Vec<u64>,
    /// Bytes per read/write and UDP datagram size for Tables 4 and 5 (-l).
    pub buflen: u64,
    /// Buffers per run for Tables 4 and 5 (-n).
    pub nbuf: u64,
    /// Also run Table 3 (read/write sizes 32 B to 1 MiB over a TCP stream).
    pub table3: bool,
    /// Writes per size in Table 3.
    pub writes: u64,
    /// Run over loopback even with the privilege to make partitions.
    pub loopback: bool,
}

impl TtcpBenchConfig {
    /// Refuse what cannot run (usage errors), with the same checks each ttcp child would make,
    /// here once rather than in every child.
    pub fn validate(&self) -> Result<()> {
        if self.protos.is_empty() && !self.table3 {
            return Err(Error::Usage("nothing to run: --proto none needs --table3".into()));
        }
        if let Some(b) = self.buffers.iter().find(|&&b| b == 0) {
            return Err(Error::Usage(format!("--buffers {b}: a socket buffer size must be at least 1 byte")));
        }
        if self.writes == 0 {
            return Err(Error::Usage("--writes must be at least 1".into()));
        }
        for &p in &self.protos {
            let mut c = Config::new(p);
            c.buflen = usize::try_from(self.buflen).unwrap_or(usize::MAX);
            c.nbuf = self.nbuf;
            c.validate()?;
        }
        Ok(())
    }

    fn protos(&self) -> Vec<Proto> {
        let mut protos: Vec<Proto> = Vec::new();
        for p in &self.protos {
            if !protos.contains(p) {
                protos.push(*p);
            }
        }
        protos
    }
}

/// Partitions when this process has CAP_NET_ADMIN and `loopback` is false, else loopback with
/// the two ends on different physical cores.
pub fn open_place(loopback: bool) -> Result<Place> {
    if !loopback && testbed::require_net_admin("bench ttcp").is_ok() {
        return Place::partitions("wsttcp", "bench ttcp");
    }
    Place::loopback_on_cores()
}

/// Where the tables were measured, in the words of their heading.
pub fn description(place: &Place) -> String {
    match (place.pair(), place.pin(Side::Send), place.pin(Side::Recv)) {
        (Some(pair), ..) => format!(
            "over a veth link from partition 1 (transmitter, CPUs {:?}) to partition 2 (receiver, CPUs {:?}); partitions '{}' are removed at the end (--loopback skips them)",
            pair.cpus[0], pair.cpus[1], pair.prefix
        ),
        (None, Some(t), Some(r)) => format!("over loopback, transmitter on CPU {t}, receiver on CPU {r}"),
        _ => "over loopback (one core: transmitter and receiver share it)".into(),
    }
}

/// What both ends of one pair are given; strings, so that the same builder writes the
/// template shown above each table (`<socket buffer size>`, `<size>`).
struct Spec<'a> {
    proto: Proto,
    buflen: &'a str,
    sockbuf: Option<&'a str>,
    nbuf: &'a str,
}

/// One ttcp command line for `role`, to `addr` (transmitter) or bound to it (receiver).
fn ttcp_argv(role: Role, spec: &Spec, port: &str, addr: &str, cpu: Option<usize>) -> Vec<String> {
    let Spec { proto, buflen, sockbuf, nbuf } = *spec;
    let mut v: Vec<String> = vec!["ttcp".into()];
    if proto == Proto::Udp {
        v.push("-u".into());
    }
    v.push(if role == Role::Transmit { "-t" } else { "-r" }.into());
    v.push("-s".into());
    v.push(format!("-l{buflen}"));
    if let Some(b) = sockbuf {
        v.extend(["-b".into(), b.to_string()]);
    }
    v.extend(["-n".into(), nbuf.to_string(), "-p".into(), port.to_string()]);
    if role == Role::Receive {
        v.extend(["--bind".into(), addr.to_string()]);
    }
    if let Some(c) = cpu {
        v.extend(["--cpu".into(), c.to_string()]);
    }
    v.push("--json".into());
    if role == Role::Transmit {
        v.push(addr.to_string());
    }
    v
}

fn last_line(s: &str) -> &str {
    proc::last_line(s).unwrap_or("(no message)")
}

/// Run one receiver/transmitter pair and return its row; `None` when a stop request cut it
/// short (the children may then have died of the signal: not a failure, not a measurement).
pub fn run_pair(
    place: &Place,
    proto: Proto,
    sockbuf: Option<u64>,
    buflen: u64,
    nbuf: u64,
    stop: &AtomicBool,
) -> Result<Option<BenchRow>> {
    let b = sockbuf.map(|b| b.to_string());
    let (l, n) = (buflen.to_string(), nbuf.to_string());
    let spec = Spec { proto, buflen: &l, sockbuf: b.as_deref(), nbuf: &n };
    let (host, bind) = (place.ip(Side::Recv).to_string(), place.ip(Side::Recv).to_string());
    let rx_args = ttcp_argv(Role::Receive, &spec, "0", &bind, place.pin(Side::Recv));
    let mut rx = Proc::spawn_listener(place.command(Side::Recv, &rx_args), "the ttcp receiver")?;
    let port = match rx.listening(None) {
        Ok(addr) => addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()),
        Err(said) => {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            return Err(Error::Runtime(format!("the ttcp receiver did not start: {}", last_line(&said))));
        }
    };
    let Some(port) = port else {
        return Err(Error::Runtime("the ttcp receiver did not say its port".into()));
    };
    let tx_args = ttcp_argv(Role::Transmit, &spec, &port.to_string(), &host, place.pin(Side::Send));
    let tx_out = Proc::spawn(place.command(Side::Send, &tx_args), "the ttcp transmitter")
        .and_then(|tx| tx.wait(Wait::new().stop(stop).kill_after(KILL_AFTER)));
    if !matches!(&tx_out, Ok(e) if e.status.success()) {
        rx.terminate();
    }
    // A TCP receiver ends at end of stream; a UDP one at the end marker, or after its 5 s
    // silence timeout when every copy was lost.
    let rx_out = rx.wait(
        Wait::new().stop(stop).limit(ttcp::DEFAULT_UDP_TIMEOUT + Duration::from_secs(10)).kill_after(KILL_AFTER),
    )?;
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let tx_out = tx_out?;
    if !tx_out.status.success() {
        return Err(Error::Runtime(format!("the ttcp transmitter failed: {}", last_line(&tx_out.stderr))));
    }
    if !rx_out.status.success() {
        return Err(Error::Runtime(format!("the ttcp receiver failed: {}", last_line(&rx_out.stderr))));
    }
    let parse = |who: &str, out: &str, err: &str| {
        serde_json::from_str::<Report>(out)
            .map_err(|e| Error::Runtime(format!("the ttcp {who} printed no report ({e}): {}", last_line(err))))
    };
    Ok(Some(BenchRow {
        proto,
        sockbuf,
        buflen: buflen as usize,
        nbuf,
        transmitter_cmd: tx_args,
        receiver_cmd: rx_args,
        transmit: parse("transmitter", &tx_out.stdout, &tx_out.stderr)?,
        receive: parse("receiver", &rx_out.stdout, &rx_out.stderr)?,
    }))
}

/// The "Receiver Command / Sender Command" rows the seed printed above each table.
fn command_rows(place: &Place, spec: &Spec) -> [String; 2] {
    let show = |v: Vec<String>, side: Side| {
        let inside =
            if place.is_partitions() { format!("   (in partition {})", side.partition()) } else { String::new() };
        format!("wirespeed {}{inside}", v.join(" "))
    };
    let addr = place.ip(Side::Recv).to_string();
    [
        show(ttcp_argv(Role::Receive, spec, "0", &addr, place.pin(Side::Recv)), Side::Recv),
        show(ttcp_argv(Role::Transmit, spec, "<receiver's port>", &addr, place.pin(Side::Send)), Side::Send),
    ]
}

/// What a table set produced.
pub struct TtcpBench {
    /// The tables as text (what the command prints and `ttcp.txt` holds).
    pub text: String,
    /// The tables as CSV (`ttcp.csv`).
    pub csv: String,
    /// The [`SCHEMA`] document (`--json`, `ttcp.json`).
    pub doc: serde_json::Value,
    /// Pairs measured.
    pub done: usize,
    /// Pairs planned; fewer done means a stop request cut the set short.
    pub planned: usize,
}

/// Run the whole table set in `place`: Tables 4/5 (each buffer size, then the default), then
/// Table 3. Each measured pair is reported to `progress` as one line. A stop request ends the
/// set after the pairs measured so far, which are still returned (`done < planned`).
pub fn run(
    cfg: &TtcpBenchConfig,
    place: &Place,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> Result<TtcpBench> {
    let protos = cfg.protos();
    let mut plan: Vec<(bool, Proto, Option<u64>, u64, u64)> = Vec::new();
    for &p in &protos {
        for &b in &cfg.buffers {
            plan.push((false, p, Some(b), cfg.buflen, cfg.nbuf));
        }
        plan.push((false, p, None, cfg.buflen, cfg.nbuf));
    }
    if cfg.table3 {
        for &s in &TABLE3_SIZES {
            plan.push((true, Proto::Tcp, None, s as u64, cfg.writes));
        }
    }
    let (mut rows, mut t3) = (Vec::new(), Vec::new());
    let mut done = 0;
    for (i, &(is_t3, p, b, l, n)) in plan.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let Some(row) = run_pair(place, p, b, l, n, stop)? else { break };
        if stop.load(Ordering::Relaxed) {
            // Cut short by the signal: not a measurement.
            break;
        }
        done += 1;
        let what = if is_t3 {
            format!("table 3, -l {l}")
        } else {
            format!("{} -b {}", p.name(), b.map(|b| b.to_string()).unwrap_or_else(|| "default".into()))
        };
        let dropped = row.receive.dropped_pct.map(|d| format!(", {d:.2} % dropped")).unwrap_or_default();
        progress(&format!(
            "bench ttcp [{}/{}] {what}: transmit {:.1} MB/s, receive {:.1} MB/s{dropped}",
            i + 1,
            plan.len(),
            row.transmit.mb_per_s,
            row.receive.mb_per_s
        ));
        if is_t3 {
            t3.push(row);
        } else {
            rows.push(row);
        }
    }
    let description = description(place);
    let (l, n) = (cfg.buflen.to_string(), cfg.nbuf.to_string());
    let mut text = format!("wirespeed bench ttcp {description}\n");
    if !protos.is_empty() {
        text.push_str(&format!(
            "Tables 4 and 5: -l {} -n {}, {} bytes per run\n",
            cfg.buflen,
            cfg.nbuf,
            units::thousands(cfg.buflen.saturating_mul(cfg.nbuf))
        ));
    }
    let mut commands = serde_json::Map::new();
    for &p in &protos {
        let [r, s] =
            command_rows(place, &Spec { proto: p, buflen: &l, sockbuf: Some("<socket buffer size>"), nbuf: &n });
        text.push_str(&format!("\nReceiver Command   {r}\nSender Command     {s}\n\n"));
        text.push_str(&ttcp::sockbuf_table(p, &rows));
        commands.insert(p.name().into(), serde_json::json!({"receiver": r, "sender": s}));
    }
    if cfg.table3 {
        let writes = cfg.writes.to_string();
        let [r, s] = command_rows(place, &Spec { proto: Proto::Tcp, buflen: "<size>", sockbuf: None, nbuf: &writes });
        text.push_str(&format!("\nReceiver Command   {r}\nSender Command     {s}\n\n"));
        text.push_str(&ttcp::rw_table(&t3));
        text.push_str(&format!(
            "MB/s = bytes received / the receiver's wall-clock time (accept to end of stream); {} writes of each size, default socket buffers\n",
            cfg.writes
        ));
        commands.insert("table3".into(), serde_json::json!({"receiver": r, "sender": s}));
    }
    let by = |p: Proto| rows.iter().filter(|r| r.proto == p).collect::<Vec<_>>();
    let doc = serde_json::json!({
        "schema": SCHEMA,
        "where": place.kind(),
        "description": description,
        "buflen": cfg.buflen,
        "nbuf": cfg.nbuf,
        "writes": cfg.writes,
        "commands": commands,
        "tcp": by(Proto::Tcp),
        "udp": by(Proto::Udp),
        "table3": t3,
        "stopped": done < plan.len(),
    });
    Ok(TtcpBench { text, csv: ttcp::csv(&t3, &rows), doc, done, planned: plan.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_lines_are_the_seeds() {
        let spec = Spec { proto: Proto::Udp, buflen: "49152", sockbuf: Some("1M"), nbuf: "20000" };
        assert_eq!(
            ttcp_argv(Role::Transmit, &spec, "5001", "127.0.0.1", Some(0)).join(" "),
            "ttcp -u -t -s -l49152 -b 1M -n 20000 -p 5001 --cpu 0 --json 127.0.0.1"
        );
        let place = Place::loopback_on(Some(0), Some(1)).expect("place");
        let [r, s] = command_rows(&place, &spec);
        assert_eq!(r, "wirespeed ttcp -u -r -s -l49152 -b 1M -n 20000 -p 0 --bind 127.0.0.1 --cpu 1 --json");
        assert_eq!(s, "wirespeed ttcp -u -t -s -l49152 -b 1M -n 20000 -p <receiver's port> --cpu 0 --json 127.0.0.1");
        assert_eq!(description(&place), "over loopback, transmitter on CPU 0, receiver on CPU 1");
    }

    #[test]
    fn nothing_to_run_is_a_usage_error() {
        let cfg = TtcpBenchConfig {
            protos: vec![],
            buffers: vec![1 << 20],
            buflen: 49152,
            nbuf: 10,
            table3: false,
            writes: 1000,
            loopback: true,
        };
        assert!(matches!(cfg.validate(), Err(Error::Usage(_))));
        let cfg = TtcpBenchConfig { protos: vec![Proto::Tcp, Proto::Tcp], buffers: vec![0], ..cfg };
        assert!(matches!(cfg.validate(), Err(Error::Usage(_))));
        assert_eq!(cfg.protos(), [Proto::Tcp]);
    }
}
