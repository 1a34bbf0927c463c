//! `wirespeed bench ttcp`: seed 000's Tables 3-5, the whole table set across two partitions.

use crate::out::print_json;
use clap::Args;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use wirespeed::testbed::{self, pair::Pair, topology::Topology};
use wirespeed::ttcp::{self, BenchRow, Config, Proto, Report, Role, TABLE3_SIZES};
use wirespeed::units::{self};
use wirespeed::{sys, Error};

fn parse_size(s: &str) -> Result<u64, String> {
    units::parse_bytes(s)
}

#[derive(Args)]
#[command(
    after_help = "`wirespeed bench ttcp --help` explains what the tables measure and where they run.",
    after_long_help = "Seed 000's ttcp tables, regenerated: Table 4 (TCP) and Table 5 (UDP, with % data \
        dropped) give transmit and receive MB/s per socket buffer size (-b) for a fixed -l; \
        Table 3 (--table3) gives MB/s per read/write size over a TCP stream.\n\n\
        Each row is one pair of `wirespeed ttcp` processes (this same binary): the receiver \
        (-r) first, then the transmitter (-t); one row per --buffers size plus a \"default\" \
        row without -b (the seed's shaded row). With CAP_NET_ADMIN (root) the receiver runs in \
        partition 2 and the transmitter in partition 1, made for the run (two network \
        namespaces with a core each, joined by a veth link) and removed however it ends; \
        otherwise, or with --loopback, both run over loopback on two different cores.\n\n\
        The seed used -l49152 -n 126976 (6 GB per run, between the two partitions of an \
        Origin 2000); the default -n here is 20000 (983 MB). UDP is \
        sent as fast as the transmitter can, as ttcp did, so the receive column and the \
        dropped share show what each receive buffer absorbs. Table 3 in the seed timed 1000 \
        reads against 1000 writes of each size on a raw partition-to-partition device; here \
        the same 1000 writes go over a TCP stream and the receiver reads with the same size.\n\n\
        Try:  wirespeed bench ttcp                                  (Tables 4 and 5)\n      \
        wirespeed bench ttcp --table3 --proto none            (Table 3 alone)\n      \
        wirespeed bench ttcp --buffers 64K,1M -n 5000 -o out  (ttcp.txt, ttcp.csv, ttcp.json)\n\n\
        Exit codes: 0 done (UDP loss is a result, not a failure), 1 runtime failure or stopped by a \
        signal (Ctrl-C: the rows measured are still reported, and partitions are removed), 2 bad usage."
)]
pub struct BenchTtcpArgs {
    /// Which socket-buffer tables to run: tcp (Table 4), udp (Table 5), both (default) or none
    /// (with --table3, for Table 3 alone).
    #[arg(long, value_delimiter = ',', default_value = "tcp,udp", value_parser = parse_proto)]
    proto: Vec<Option<Proto>>,
    /// Socket buffer sizes (-b), one row each, in this order (the seed's, largest first);
    /// a "default" row without -b is always added.
    #[arg(long, value_delimiter = ',', default_value = "1M,512K,256K,128K,64K", value_parser = crate::args::sockbuf_request)]
    buffers: Vec<u64>,
    /// Bytes per read/write and UDP datagram size for Tables 4 and 5 (the seed's -l49152).
    #[arg(short = 'l', long = "buflen", default_value = "49152", value_parser = parse_size)]
    buflen: u64,
    /// Buffers per run for Tables 4 and 5 (the seed used 126976, 6 GB per run).
    #[arg(short = 'n', long = "nbuf", default_value = "20000", value_parser = units::parse_count)]
    nbuf: u64,
    /// Also run Table 3: MB/s for read/write sizes 32 B to 1 MiB (powers of two), --writes
    /// writes each, over a TCP stream with default socket buffers.
    #[arg(long)]
    table3: bool,
    /// Writes per size in Table 3 (the seed's 1000).
    #[arg(long, default_value = "1000", value_parser = crate::args::table3_writes)]
    writes: u64,
    /// Run over loopback even with the privilege to make partitions.
    #[arg(long)]
    loopback: bool,
    /// Write ttcp.txt, ttcp.csv and ttcp.json into this directory (created if missing).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print one JSON document (schema wirespeed.bench.ttcp/1) instead of the tables.
    #[arg(long)]
    json: bool,
}

fn parse_proto(s: &str) -> Result<Option<Proto>, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "tcp" => Ok(Some(Proto::Tcp)),
        "udp" => Ok(Some(Proto::Udp)),
        "none" => Ok(None),
        _ => Err(format!("'{s}' is not a protocol: use tcp, udp, both as tcp,udp, or none")),
    }
}

/// Where the pairs run: a partition pair made for the bench, or loopback.
struct Place {
    pair: Option<Pair>,
    exe: PathBuf,
    /// Address the transmitter sends to.
    host: String,
    /// Address the receiver binds.
    bind: String,
    rx_cpu: Option<usize>,
    tx_cpu: Option<usize>,
    description: String,
}

impl Place {
    fn command(&self, partition: u32, args: &[String]) -> Command {
        match &self.pair {
            Some(p) => p.command(partition, args),
            None => {
                let mut c = Command::new(&self.exe);
                c.args(args);
                // Like a pair's commands: the child dies with this process.
                wirespeed::sys::die_with_parent(&mut c);
                c
            }
        }
    }

    fn name(&self) -> &'static str {
        if self.pair.is_some() {
            "partitions"
        } else {
            "loopback"
        }
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

/// Wait for a child, passing on a stop request (a signal sent to this process alone) once;
/// after `limit`, SIGTERM, and SIGKILL 3 s later.
fn wait_child(child: &mut Child, stop: &AtomicBool, limit: Option<Duration>) -> Result<ExitStatus, Error> {
    let t = Instant::now();
    let mut termed: Option<Instant> = None;
    loop {
        if let Some(st) = child.try_wait().map_err(|e| Error::Runtime(format!("cannot wait for ttcp: {e}")))? {
            return Ok(st);
        }
        let over = limit.is_some_and(|l| t.elapsed() > l);
        match termed {
            None if stop.load(Ordering::Relaxed) || over => {
                let _ = sys::send_signal(child.id(), sys::SIGTERM);
                termed = Some(Instant::now());
            }
            Some(when) if when.elapsed() > Duration::from_secs(3) => {
                let _ = child.kill();
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn read_all(r: Option<impl Read>) -> String {
    let mut s = String::new();
    if let Some(mut r) = r {
        let _ = r.read_to_string(&mut s);
    }
    s
}

fn last_line(s: &str) -> &str {
    s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(no message)").trim()
}

/// Run one receiver/transmitter pair and return its row; `None` when a stop request cut it
/// short (the children may then have died of the signal: not a failure, not a measurement).
fn run_pair(
    place: &Place,
    proto: Proto,
    sockbuf: Option<u64>,
    buflen: u64,
    nbuf: u64,
    stop: &AtomicBool,
) -> Result<Option<BenchRow>, Error> {
    let b = sockbuf.map(|b| b.to_string());
    let (l, n) = (buflen.to_string(), nbuf.to_string());
    let spec = Spec { proto, buflen: &l, sockbuf: b.as_deref(), nbuf: &n };
    let rx_args = ttcp_argv(Role::Receive, &spec, "0", &place.bind, place.rx_cpu);
    let mut rx = place
        .command(2, &rx_args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Runtime(format!("cannot start the ttcp receiver: {e}")))?;
    let mut err = BufReader::new(rx.stderr.take().ok_or_else(|| Error::Runtime("the receiver has no stderr".into()))?);
    let mut first = String::new();
    let _ = err.read_line(&mut first);
    let port = first
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse::<u16>().ok());
    let Some(port) = port else {
        let _ = rx.kill();
        let _ = rx.wait();
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let rest = read_all(Some(err));
        return Err(Error::Runtime(format!("the ttcp receiver did not start: {}", last_line(&(first + &rest)))));
    };
    let rx_err = std::thread::spawn(move || read_all(Some(err)));
    let tx_args = ttcp_argv(Role::Transmit, &spec, &port.to_string(), &place.host, place.tx_cpu);
    let tx = place.command(1, &tx_args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    let tx_out =
        tx.map_err(|e| Error::Runtime(format!("cannot start the ttcp transmitter: {e}"))).and_then(|mut tx| {
            // The reports are a few KiB, well inside a pipe: read them after the exit.
            let st = wait_child(&mut tx, stop, None)?;
            Ok((st, read_all(tx.stdout.take()), read_all(tx.stderr.take())))
        });
    let tx_ok = matches!(&tx_out, Ok((st, ..)) if st.success());
    if !tx_ok {
        let _ = sys::send_signal(rx.id(), sys::SIGTERM);
    }
    // A TCP receiver ends at end of stream; a UDP one at the end marker, or after its 5 s
    // silence timeout when every copy was lost.
    let rx_st = wait_child(&mut rx, stop, Some(ttcp::DEFAULT_UDP_TIMEOUT + Duration::from_secs(10)))?;
    let rx_stdout = read_all(rx.stdout.take());
    let rx_stderr = rx_err.join().unwrap_or_default();
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let (tx_st, tx_stdout, tx_stderr) = tx_out?;
    if !tx_st.success() {
        return Err(Error::Runtime(format!("the ttcp transmitter failed: {}", last_line(&tx_stderr))));
    }
    if !rx_st.success() {
        return Err(Error::Runtime(format!("the ttcp receiver failed: {}", last_line(&rx_stderr))));
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
        transmit: parse("transmitter", &tx_stdout, &tx_stderr)?,
        receive: parse("receiver", &rx_stdout, &rx_stderr)?,
    }))
}

fn open_place(a: &BenchTtcpArgs) -> Result<Place, Error> {
    let exe = std::env::current_exe().map_err(|e| Error::Runtime(format!("cannot find this program's path: {e}")))?;
    if !a.loopback && testbed::require_net_admin("bench ttcp").is_ok() {
        let pair = Pair::create("wsttcp", "bench ttcp")?;
        let description = format!(
            "over a veth link from partition 1 (transmitter, CPUs {:?}) to partition 2 (receiver, CPUs {:?}); partitions '{}' are removed at the end (--loopback skips them)",
            pair.cpus[0], pair.cpus[1], pair.prefix
        );
        let addr = testbed::partition_addr(2).to_string();
        return Ok(Place {
            pair: Some(pair),
            exe,
            host: addr.clone(),
            bind: addr,
            rx_cpu: None,
            tx_cpu: None,
            description,
        });
    }
    let cores = Topology::read_host().map(|t| t.cores).unwrap_or_default();
    let first = |i: usize| cores.get(i).and_then(|c| c.iter().next().copied());
    let (tx_cpu, rx_cpu) = match (first(0), first(1)) {
        (Some(t), Some(r)) => (Some(t), Some(r)),
        _ => (None, None),
    };
    let description = match (tx_cpu, rx_cpu) {
        (Some(t), Some(r)) => format!("over loopback, transmitter on CPU {t}, receiver on CPU {r}"),
        _ => "over loopback (one core: transmitter and receiver share it)".into(),
    };
    Ok(Place { pair: None, exe, host: "127.0.0.1".into(), bind: "127.0.0.1".into(), rx_cpu, tx_cpu, description })
}

/// The "Receiver Command / Sender Command" rows the seed printed above each table.
fn command_rows(place: &Place, spec: &Spec) -> [String; 2] {
    let show = |v: Vec<String>, part: u32| {
        let inside = if place.pair.is_some() { format!("   (in partition {part})") } else { String::new() };
        format!("wirespeed {}{inside}", v.join(" "))
    };
    [
        show(ttcp_argv(Role::Receive, spec, "0", &place.bind, place.rx_cpu), 2),
        show(ttcp_argv(Role::Transmit, spec, "<receiver's port>", &place.host, place.tx_cpu), 1),
    ]
}

pub fn cmd_bench_ttcp(a: BenchTtcpArgs) -> Result<u8, Error> {
    let mut protos: Vec<Proto> = Vec::new();
    for p in a.proto.iter().flatten() {
        if !protos.contains(p) {
            protos.push(*p);
        }
    }
    if protos.is_empty() && !a.table3 {
        return Err(Error::Usage("nothing to run: --proto none needs --table3".into()));
    }
    if let Some(b) = a.buffers.iter().find(|&&b| b == 0) {
        return Err(Error::Usage(format!("--buffers {b}: a socket buffer size must be at least 1 byte")));
    }
    if a.writes == 0 {
        return Err(Error::Usage("--writes must be at least 1".into()));
    }
    // The same checks ttcp makes, here once rather than in every child.
    for &p in &protos {
        let mut c = Config::new(p);
        c.buflen = usize::try_from(a.buflen).unwrap_or(usize::MAX);
        c.nbuf = a.nbuf;
        c.validate()?;
    }
    if let Some(d) = &a.out {
        std::fs::create_dir_all(d)
            .map_err(|e| Error::Runtime(format!("cannot create the output directory {}: {e}", d.display())))?;
    }
    let stop = sys::install_stop_handler();
    let place = open_place(&a)?;
    eprintln!("wirespeed bench ttcp: {}", place.description);
    // The plan: Tables 4/5 (each --buffers size, then the default), then Table 3.
    let mut plan: Vec<(bool, Proto, Option<u64>, u64, u64)> = Vec::new();
    for &p in &protos {
        for &b in &a.buffers {
            plan.push((false, p, Some(b), a.buflen, a.nbuf));
        }
        plan.push((false, p, None, a.buflen, a.nbuf));
    }
    if a.table3 {
        for &s in &TABLE3_SIZES {
            plan.push((true, Proto::Tcp, None, s as u64, a.writes));
        }
    }
    let (mut rows, mut t3) = (Vec::new(), Vec::new());
    let mut done = 0;
    for (i, &(is_t3, p, b, l, n)) in plan.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let Some(row) = run_pair(&place, p, b, l, n, stop)? else { break };
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
        eprintln!(
            "bench ttcp [{}/{}] {what}: transmit {:.1} MB/s, receive {:.1} MB/s{dropped}",
            i + 1,
            plan.len(),
            row.transmit.mb_per_s,
            row.receive.mb_per_s
        );
        if is_t3 {
            t3.push(row);
        } else {
            rows.push(row);
        }
    }
    let (l, n) = (a.buflen.to_string(), a.nbuf.to_string());
    let mut text = format!("wirespeed bench ttcp {}\n", place.description);
    if !protos.is_empty() {
        text.push_str(&format!(
            "Tables 4 and 5: -l {} -n {}, {} bytes per run\n",
            a.buflen,
            a.nbuf,
            units::thousands(a.buflen.saturating_mul(a.nbuf))
        ));
    }
    let mut commands = serde_json::Map::new();
    for &p in &protos {
        let [r, s] =
            command_rows(&place, &Spec { proto: p, buflen: &l, sockbuf: Some("<socket buffer size>"), nbuf: &n });
        text.push_str(&format!("\nReceiver Command   {r}\nSender Command     {s}\n\n"));
        text.push_str(&ttcp::sockbuf_table(p, &rows));
        commands.insert(p.name().into(), serde_json::json!({"receiver": r, "sender": s}));
    }
    if a.table3 {
        let writes = a.writes.to_string();
        let [r, s] = command_rows(&place, &Spec { proto: Proto::Tcp, buflen: "<size>", sockbuf: None, nbuf: &writes });
        text.push_str(&format!("\nReceiver Command   {r}\nSender Command     {s}\n\n"));
        text.push_str(&ttcp::rw_table(&t3));
        text.push_str(&format!(
            "MB/s = bytes received / the receiver's wall-clock time (accept to end of stream); {} writes of each size, default socket buffers\n",
            a.writes
        ));
        commands.insert("table3".into(), serde_json::json!({"receiver": r, "sender": s}));
    }
    let by = |p: Proto| rows.iter().filter(|r| r.proto == p).collect::<Vec<_>>();
    let doc = serde_json::json!({
        "schema": "wirespeed.bench.ttcp/1",
        "where": place.name(),
        "description": place.description,
        "buflen": a.buflen,
        "nbuf": a.nbuf,
        "writes": a.writes,
        "commands": commands,
        "tcp": by(Proto::Tcp),
        "udp": by(Proto::Udp),
        "table3": t3,
        "stopped": done < plan.len(),
    });
    if let Some(d) = &a.out {
        write_out(d, "ttcp.txt", &text)?;
        write_out(d, "ttcp.csv", &ttcp::csv(&t3, &rows))?;
        let js = serde_json::to_string_pretty(&doc).map_err(|e| Error::Runtime(format!("cannot encode JSON: {e}")))?;
        write_out(d, "ttcp.json", &(js + "\n"))?;
    }
    if a.json {
        print_json(&doc)?;
    } else {
        print!("{text}");
    }
    if done < plan.len() {
        return Err(Error::Runtime(format!(
            "stopped by a signal after {done} of {} runs; the tables above are partial{}",
            plan.len(),
            if place.pair.is_some() { " (the partitions are removed)" } else { "" }
        )));
    }
    Ok(0)
}

fn write_out(dir: &Path, name: &str, body: &str) -> Result<(), Error> {
    let p = dir.join(name);
    std::fs::write(&p, body).map_err(|e| Error::Runtime(format!("cannot write {}: {e}", p.display())))
}
