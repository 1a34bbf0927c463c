//! `wirespeed demo`'s run: a paced sender and a receiver for a few seconds, then both reports,
//! so a first-time user sees the ledger at work. With the privilege it runs across two
//! partitions made for it (sender in partition 1, receiver in partition 2, each a `wirespeed`
//! child on one [`Place`], the traffic crossing a real veth link); otherwise the two ends are
//! threads of this process on loopback.
//!
//! Its own room rather than a part of `testbed` or `bench`: a demo is the whole product in
//! miniature (tx, rx, ledger, and the testbed when it can), not a measurement, and the command
//! only chooses the options and prints what comes back.

use crate::testbed;
use crate::testbed::place::{Place, Side};
use crate::testbed::proc::{self, Proc, Wait};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use wirespeed::rx::{self, Listener, RecvConfig, RecvReport};
use wirespeed::tx::{self, SendConfig, SendReport};
use wirespeed::units::{self, Rate};
use wirespeed::wire::Format;
use wirespeed::{Error, Result};

/// The document `demo --json` prints.
pub const SCHEMA: &str = "wirespeed.demo/1";

/// What the demo sends.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// How long to send.
    pub duration: Duration,
    /// Send rate.
    pub rate: Rate,
    /// Payload bytes of each counter datagram.
    pub size: u64,
    /// Leave out every Nth datagram, to watch the ledger find them.
    pub skip_every: Option<u64>,
    /// The caller prints one JSON document: no banner, and the children report in JSON.
    pub json: bool,
    /// Stay on loopback even when partitions could be made.
    pub loopback: bool,
}

/// What a demo produced.
pub enum Demo {
    /// The two threads' reports (loopback).
    Loopback {
        /// The sender's report.
        send: Box<SendReport>,
        /// The receiver's report.
        recv: Box<RecvReport>,
    },
    /// What the two children printed (on partitions or hosts): their human reports, or their
    /// JSON with `json`.
    Children {
        /// "partitions" or "hosts".
        path: &'static str,
        /// The sender's standard output.
        send: String,
        /// The receiver's standard output.
        recv: String,
    },
}

/// The loopback demo's document.
#[derive(Serialize)]
pub struct DemoReport<'a> {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// "loopback".
    pub path: &'static str,
    /// The sender's report.
    pub send: &'a SendReport,
    /// The receiver's report.
    pub recv: &'a RecvReport,
}

impl Demo {
    /// The two reports as a user reads them, the sender's first, a blank line between.
    pub fn human(&self) -> String {
        match self {
            Demo::Loopback { send, recv } => format!("{}\n{}", send.human(), recv.human(8)),
            Demo::Children { send, recv, .. } => format!("{send}\n{recv}"),
        }
    }

    /// The [`SCHEMA`] document as pretty JSON (on partitions the children must have been run
    /// with `json`: their documents are its `send` and `recv`).
    pub fn to_json(&self) -> Result<String> {
        let encode = |e: serde_json::Error| Error::failed(format!("cannot encode JSON: {e}"));
        match self {
            Demo::Loopback { send, recv } => {
                serde_json::to_string_pretty(&DemoReport { schema: SCHEMA, path: "loopback", send, recv })
                    .map_err(encode)
            }
            Demo::Children { path, send, recv } => {
                let parse = |b: &str| serde_json::from_str::<serde_json::Value>(b);
                let (Ok(s), Ok(r)) = (parse(send), parse(recv)) else {
                    return Err(Error::failed("the demo's sender or receiver printed no JSON"));
                };
                let doc = serde_json::json!({"schema": SCHEMA, "path": path, "send": s, "recv": r});
                serde_json::to_string_pretty(&doc).map_err(encode)
            }
        }
    }
}

/// Run the demo: across partitions when this process has CAP_NET_ADMIN and `loopback` is
/// false, else on loopback with the counter format `fmt` makes (only asked for there: the
/// children on partitions make their own). `say` gets the banner line.
pub fn run(
    cfg: &DemoConfig,
    fmt: impl FnOnce() -> Result<Arc<dyn Format>>,
    stop: &'static AtomicBool,
    say: &mut dyn FnMut(&str),
) -> Result<Demo> {
    if !cfg.loopback && testbed::require_net_admin("demo").is_ok() {
        return in_partitions(cfg, say);
    }
    loopback(cfg, fmt()?, stop, say)
}

/// The demo on loopback: the receiver on a thread, the sender on this one.
pub fn loopback(
    cfg: &DemoConfig,
    fmt: Arc<dyn Format>,
    stop: &'static AtomicBool,
    say: &mut dyn FnMut(&str),
) -> Result<Demo> {
    let mut rcfg = RecvConfig::new("127.0.0.1:0".parse().expect("static address"));
    rcfg.once = true;
    rcfg.duration = Some(cfg.duration + Duration::from_secs(5));
    let listener = Listener::bind(&rcfg)?;
    let dest = listener.local_addr().ok_or_else(|| Error::io("cannot read the receiver's port"))?;
    let mut scfg = SendConfig::new(dest);
    scfg.rate = cfg.rate;
    scfg.duration = Some(cfg.duration);
    scfg.skip_every = cfg.skip_every;
    if !cfg.json {
        say(&format!(
            "wirespeed demo: {} of {}-byte counter datagrams at {} over loopback ({dest}); partitions come with `wirespeed partition`",
            units::nanos(cfg.duration.as_nanos() as f64),
            cfg.size,
            cfg.rate
        ));
    }
    let (sent, recvd) = std::thread::scope(|s| {
        let r = s.spawn(|| rx::capture(&rcfg, listener, fmt.as_ref(), stop, None, &|_| {}));
        let sent = tx::run(&scfg, fmt.clone(), stop);
        (sent, r.join().expect("receiver thread panicked"))
    });
    Ok(Demo::Loopback { send: Box::new(sent?), recv: Box::new(recvd?) })
}

/// The demo across two partitions: sender in partition 1, receiver in partition 2, each a
/// `wirespeed` process started through `partition exec`, so the traffic crosses a real veth
/// link. A Ctrl-C reaches the children too (same process group); this process lives on to
/// remove the partitions.
pub fn in_partitions(cfg: &DemoConfig, say: &mut dyn FnMut(&str)) -> Result<Demo> {
    let place = Place::partitions("wsdemo", "demo")?;
    let pair = place.pair().ok_or_else(|| Error::failed("the partitions are gone"))?;
    if !cfg.json {
        say(&format!(
            "wirespeed demo: {} of {}-byte counter datagrams at {} from partition 1 (CPUs {:?}) to partition 2 (CPUs {:?}) over a veth link; partitions '{}' are removed at the end (--loopback skips them)",
            units::nanos(cfg.duration.as_nanos() as f64),
            cfg.size,
            cfg.rate,
            pair.cpus[0],
            pair.cpus[1],
            pair.prefix
        ));
    }
    children(&place, cfg, None)
}

/// The demo between two hosts reached over ssh (greeted already): the sender on the first,
/// the receiver on the second, each its host's own `wirespeed`, both ending with this process.
pub fn on_hosts(
    hosts: testbed::hosts::Hosts,
    cfg: &DemoConfig,
    stop: &'static AtomicBool,
    say: &mut dyn FnMut(&str),
) -> Result<Demo> {
    let place = Place::hosts(hosts)?;
    if !cfg.json {
        say(&format!(
            "wirespeed demo: {} of {}-byte counter datagrams at {}: {}",
            units::nanos(cfg.duration.as_nanos() as f64),
            cfg.size,
            cfg.rate,
            place.describe("sender", "receiver")
        ));
    }
    children(&place, cfg, Some(stop))
}

/// The demo's two children on `place`: the receiver first, on a port it picks, then the sender
/// to the address it says it listens on. `stop` (a Ctrl-C this process caught) is passed on to
/// both: far children are in process groups of their own, out of the terminal's reach.
fn children(place: &Place, cfg: &DemoConfig, stop: Option<&AtomicBool>) -> Result<Demo> {
    let listen = SocketAddr::new(place.ip(Side::Recv), 0).to_string();
    let json = |mut v: Vec<String>| {
        if cfg.json {
            v.push("--json".into());
        }
        v
    };
    let recv_args = json(vec![
        "recv".into(),
        listen,
        "--once".into(),
        "--duration".into(),
        format!("{}", cfg.duration.as_secs_f64() + 10.0),
    ]);
    let (rwho, swho) = (place.who(Side::Recv, "the receiver"), place.who(Side::Send, "the sender"));
    let mut recv = Proc::spawn_listener(place.command(Side::Recv, &recv_args), &rwho)?;
    let dest = match recv.listening(None) {
        Ok(a) => a,
        Err(said) => {
            return Err(Error::failed(format!("{rwho} did not start: {}", proc::last_line(&said).unwrap_or(""))))
        }
    };
    let mut send_args = json(vec![
        "send".into(),
        dest,
        "--rate".into(),
        crate::bench::point::rate_arg(cfg.rate),
        "--size".into(),
        cfg.size.to_string(),
        "--duration".into(),
        format!("{}", cfg.duration.as_secs_f64()),
    ]);
    if let Some(n) = cfg.skip_every {
        send_args.extend(["--skip-every".into(), n.to_string()]);
    }
    let send = Proc::spawn(place.command(Side::Send, &send_args), &swho)?;
    let others = [&recv];
    let sent = match stop {
        Some(f) => send.wait(Wait::new().stop(f).also_stop(&others))?,
        None => send.wait(Wait::new())?,
    };
    let recvd = recv.wait(Wait::new())?;
    if !sent.status.success() || !recvd.status.success() {
        return Err(Error::failed(format!(
            "the demo failed: sender: {} receiver: {}",
            sent.stderr.trim(),
            recvd.stderr.trim()
        )));
    }
    let path = place.kind();
    Ok(Demo::Children { path, send: sent.stdout, recv: recvd.stdout })
}
