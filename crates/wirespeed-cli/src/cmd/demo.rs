//! `wirespeed demo`: a first look, a sender and a receiver for a few seconds, then the ledger.

use crate::args::{self, counter_format, FormatArgs};
use crate::out::print_json;
use clap::Args;
use std::time::Duration;
use wirespeed::rx::{self, Listener, RecvConfig, RecvReport};
use wirespeed::testbed;
use wirespeed::tx::{self, SendConfig, SendReport};
use wirespeed::units::{self, Rate};
use wirespeed::wire::ByteOrder;
use wirespeed::{sys, Error};

#[derive(Args)]
pub struct DemoArgs {
    /// How long to send.
    #[arg(long, default_value = "3s", value_parser = args::run_duration)]
    duration: Duration,
    /// Send rate.
    #[arg(long, default_value = "2G", value_parser = Rate::parse)]
    rate: Rate,
    /// Payload bytes.
    #[arg(long, default_value = "8800", value_parser = args::udp_size)]
    size: u64,
    /// Leave out every Nth packet (N >= 2), to watch the ledger find them.
    #[arg(long, value_name = "N", value_parser = args::skip_every)]
    skip_every: Option<u64>,
    /// Print one JSON document with both reports.
    #[arg(long)]
    json: bool,
    /// Stay on loopback even when partitions could be made (by default, with CAP_NET_ADMIN the
    /// demo builds two partitions joined by a veth link, runs there, and removes them).
    #[arg(long)]
    loopback: bool,
}

#[derive(serde::Serialize)]
struct DemoReport<'a> {
    schema: &'static str,
    path: &'static str,
    send: &'a SendReport,
    recv: &'a RecvReport,
}

/// The demo across two partitions: sender in partition 1, receiver in partition 2, each a
/// `wirespeed` process started through `partition exec`, so the traffic crosses a real veth link.
fn demo_in_partitions(a: &DemoArgs) -> Result<u8, Error> {
    // Ctrl-C reaches the children too (same process group); this process must live on to
    // remove the partitions, so it only notes the signal.
    let _ = sys::install_stop_handler();
    let pair = testbed::pair::Pair::create("wsdemo", "demo")?;
    let (prefix, cpus) = (&pair.prefix, &pair.cpus);
    let dest = format!("{}:7148", testbed::partition_addr(2));
    if !a.json {
        eprintln!(
            "wirespeed demo: {} of {}-byte counter datagrams at {} from partition 1 (CPUs {:?}) to partition 2 (CPUs {:?}) over a veth link; partitions '{prefix}' are removed at the end (--loopback skips them)",
            units::nanos(a.duration.as_nanos() as f64),
            a.size,
            a.rate,
            cpus[0],
            cpus[1]
        );
    }
    let json = |mut v: Vec<String>| {
        if a.json {
            v.push("--json".into());
        }
        v
    };
    let recv_args = json(vec![
        "recv".into(),
        dest.clone(),
        "--once".into(),
        "--duration".into(),
        format!("{}", a.duration.as_secs_f64() + 10.0),
    ]);
    let mut recv = pair
        .command(2, &recv_args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::Runtime(format!("cannot start the receiver: {e}")))?;
    // Wait until the receiver says it is listening.
    {
        use std::io::BufRead;
        let mut line = String::new();
        let err = recv.stderr.take().ok_or_else(|| Error::Runtime("receiver has no stderr".into()))?;
        let mut r = std::io::BufReader::new(err);
        r.read_line(&mut line).map_err(|e| Error::Runtime(format!("receiver did not start: {e}")))?;
        if !line.contains("listening on") {
            let _ = recv.kill();
            return Err(Error::Runtime(format!("receiver did not start: {}", line.trim())));
        }
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut r, &mut rest);
        });
    }
    let mut send_args = json(vec![
        "send".into(),
        dest,
        "--rate".into(),
        match a.rate {
            Rate::Bits(b) => format!("{b}"),
            Rate::Packets(p) => format!("{p}pps"),
            Rate::Max => "max".into(),
        },
        "--size".into(),
        a.size.to_string(),
        "--duration".into(),
        format!("{}", a.duration.as_secs_f64()),
    ]);
    if let Some(n) = a.skip_every {
        send_args.extend(["--skip-every".into(), n.to_string()]);
    }
    let sent =
        pair.command(1, &send_args).output().map_err(|e| Error::Runtime(format!("cannot start the sender: {e}")))?;
    let recvd = recv.wait_with_output().map_err(|e| Error::Runtime(format!("receiver failed: {e}")))?;
    if !sent.status.success() || !recvd.status.success() {
        return Err(Error::Runtime(format!(
            "the demo failed: sender: {} receiver: {}",
            String::from_utf8_lossy(&sent.stderr).trim(),
            String::from_utf8_lossy(&recvd.stderr).trim()
        )));
    }
    if a.json {
        let parse = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b);
        let (Ok(s), Ok(r)) = (parse(&sent.stdout), parse(&recvd.stdout)) else {
            return Err(Error::Runtime("the demo's sender or receiver printed no JSON".into()));
        };
        let doc = serde_json::json!({"schema": "wirespeed.demo/1", "path": "partitions", "send": s, "recv": r});
        print_json(&doc)?;
    } else {
        print!("{}", String::from_utf8_lossy(&sent.stdout));
        println!();
        print!("{}", String::from_utf8_lossy(&recvd.stdout));
    }
    Ok(0)
}

pub fn cmd_demo(a: DemoArgs) -> Result<u8, Error> {
    if !a.loopback && testbed::require_net_admin("demo").is_ok() {
        return demo_in_partitions(&a);
    }
    let fa = FormatArgs {
        format: "counter".into(),
        byte_order: ByteOrder::Be,
        seq_offset: None,
        seq_width: 8,
        seq_endian: ByteOrder::Be,
    };
    let fmt = counter_format(a.size, &fa)?;
    let mut rcfg = RecvConfig::new("127.0.0.1:0".parse().expect("static address"));
    rcfg.once = true;
    rcfg.duration = Some(a.duration + Duration::from_secs(5));
    let listener = Listener::bind(&rcfg)?;
    let dest = listener.local_addr().ok_or_else(|| Error::Runtime("cannot read the receiver's port".into()))?;
    let mut scfg = SendConfig::new(dest);
    scfg.rate = a.rate;
    scfg.duration = Some(a.duration);
    scfg.skip_every = a.skip_every;
    let stop = sys::install_stop_handler();
    if !a.json {
        eprintln!(
            "wirespeed demo: {} of {}-byte counter datagrams at {} over loopback ({dest}); partitions come with `wirespeed partition`",
            units::nanos(a.duration.as_nanos() as f64),
            a.size,
            a.rate
        );
    }
    let (sent, recvd) = std::thread::scope(|s| {
        let r = s.spawn(|| rx::capture(&rcfg, listener, fmt.as_ref(), stop, None, &|_| {}));
        let sent = tx::run(&scfg, fmt.clone(), stop);
        (sent, r.join().expect("receiver thread panicked"))
    });
    let (sent, recvd) = (sent?, recvd?);
    if a.json {
        print_json(&DemoReport { schema: "wirespeed.demo/1", path: "loopback", send: &sent, recv: &recvd })?;
    } else {
        print!("{}", sent.human());
        println!();
        print!("{}", recvd.human(8));
    }
    Ok(0)
}
