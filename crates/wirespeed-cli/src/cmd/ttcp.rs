//! `wirespeed ttcp`: the classic ttcp measurement (seed 000), one transfer at a time.

use crate::out::print_json;
use clap::Args;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::addr::resolve;
use wirespeed::units::{self, Rate};
use wirespeed::{sys, Error};
use wirespeed_lab::ttcp::{self, Config, Proto, RawConfig, RawKind, RawReceiver, Receiver, Role};

// The subcommand's one-line `about` comes from its registration in main.rs; the teaching text
// is the long help's epilogue.
#[derive(Args)]
#[command(
    after_help = "`wirespeed ttcp --help` explains what each side times and how UDP loss is counted.",
    after_long_help = "ttcp in the classic style: bulk TCP (or UDP with -u) transfer between two hosts, \
        reported in MB/s (10^6 bytes/s) by each side, with ttcp's KB/sec, I/O calls and CPU time.\n\n\
        Start the receiver first, then the transmitter (here both on this host; between two \
        hosts, the receiver's address in place of 127.0.0.1):\n  \
        wirespeed ttcp -r -l49152 -b 1M                      (in one terminal: the receiver)\n  \
        wirespeed ttcp -t -l49152 -b 1M -n 20000 127.0.0.1   (in another: the transmitter)\n\n\
        Each side times its own part, as ttcp does: the transmitter from connect to the return \
        of its last write (data can still be in its socket buffer then, so its figure may \
        exceed what was delivered; the TCP transmitter also reports when the receiver had \
        everything), the receiver from accept (TCP) or the start marker (UDP) to the end of \
        the data.\n\n\
        UDP: datagrams of -l bytes, bracketed by marker datagrams like ttcp's; the end marker \
        carries the transmitter's counts and is sent 4 times, 5 ms apart, so the receiver \
        reports % data dropped = 1 - bytes received / bytes sent even under heavy loss. The \
        transmitter sends as fast as it can unless --rate paces it.\n\n\
        Seed 000 measured its Tables 4 and 5 with `ttcp -r/-t -s -l49152 -b <socket buffer \
        size> -n 126976`; `wirespeed bench ttcp` runs that whole table set.\n\n\
        Raw mode (--device PATH or --unix PATH; Table 3): the transmitter issues -n writes of \
        -l bytes into PATH and closes it, the receiver reads with -l-byte reads until it has \
        -n x -l bytes and then the end of stream, both from 128-byte aligned buffers (the \
        seed's cache-line aligned source and destination). PATH is opened like any file: a \
        raw device (/hw/xplink/raw/02/00 inside `wirespeed partition exec 1`, its peer \
        /hw/xplink/raw/01/00 in partition 2), a FIFO (mkfifo) or a file; --unix PATH is a Unix \
        stream socket the receiver binds. Every byte is checked (a counter per 8 bytes): a \
        lost, repeated or changed byte, or a short or long stream, fails the receiver with \
        the offset. Byte streams give short reads: each side counts its calls and the short \
        ones. Several paths (comma-separated, at most 16) run at once, one thread each, with \
        per-stream and aggregate MB/s. The receiver times from its first read that returned \
        data to the last; both print their first and last byte on the monotonic clock, which \
        `bench ttcp --table3` uses to time from the first byte written to the last read:\n  \
        mkfifo /tmp/p\n  \
        wirespeed ttcp --receive --device /tmp/p -l 4096 -n 1000 &   (the receiver)\n  \
        wirespeed ttcp --transmit --device /tmp/p -l 4096 -n 1000     (the transmitter)\n\n\
        Exit codes: 0 success, 1 runtime failure (port in use, connection refused), 2 bad usage."
)]
pub struct TtcpArgs {
    /// Transmit: connect to HOST and write -n buffers of -l bytes.
    #[arg(short = 't', long = "transmit")]
    transmit: bool,
    /// Receive: listen, accept one transmitter and read until its end of stream.
    #[arg(short = 'r', long = "receive")]
    receive: bool,
    /// UDP instead of TCP: -l-byte datagrams, and the receiver reports % data dropped.
    #[arg(short = 'u', long)]
    udp: bool,
    /// Bytes per read or write call (ttcp -l); with -u the datagram size (at most 65507).
    /// Accepts 64K style sizes (K = 1024).
    #[arg(short = 'l', long = "buflen", value_name = "LEN", default_value = "8192", value_parser = units::parse_bytes)]
    buflen: u64,
    /// Socket buffer size in bytes (ttcp -b): SO_SNDBUF on the transmitter, SO_RCVBUF on the
    /// receiver. Left out, the kernel's default is kept and reported ("default", the seed's
    /// shaded row). Linux grants twice the request for its bookkeeping and caps it at
    /// net.core.[rw]mem_max unless run as root.
    #[arg(short = 'b', long = "sockbuf", value_name = "BUF", value_parser = crate::args::sockbuf_request)]
    sockbuf: Option<u64>,
    /// Number of buffers the transmitter writes (ttcp -n); a UDP receiver uses -n x -l as
    /// the amount sent only when no marker from the transmitter arrived.
    #[arg(short = 'n', long = "nbuf", value_name = "COUNT", default_value = "2048", value_parser = units::parse_count)]
    nbuf: u64,
    /// Port: the receiver listens on it (0 picks a free one and prints it), the transmitter
    /// connects to it (default 5001, ttcp's).
    #[arg(short = 'p', long, value_name = "PORT")]
    port: Option<u16>,
    /// Accepted for ttcp compatibility and ignored: wirespeed always sources and sinks a
    /// pattern in memory (ttcp without -s moved stdin to stdout).
    #[arg(short = 's', long = "sink")]
    sink: bool,
    /// TCP_NODELAY on the transmitter (ttcp -D): small writes go out at once instead of being
    /// gathered by Nagle's algorithm.
    #[arg(short = 'D', long)]
    nodelay: bool,
    /// Receiver: the local address to listen on (default all IPv4 addresses, 0.0.0.0; `::` or
    /// `::1` for IPv6).
    #[arg(long, value_name = "ADDR")]
    bind: Option<String>,
    /// Transmitter: pace the writes, in payload bits/s (2G) or buffers per second (100kpps);
    /// default: as fast as possible, as ttcp.
    #[arg(long, value_parser = Rate::parse)]
    rate: Option<Rate>,
    /// UDP receiver: end after this long without data once data began, when no end marker
    /// arrives (default 5 s).
    #[arg(long, value_parser = crate::args::run_duration)]
    timeout: Option<Duration>,
    /// Pin the thread doing the I/O to this CPU (bench ttcp puts the two ends on different cores).
    #[arg(long)]
    cpu: Option<usize>,
    /// Print one JSON document (schema wirespeed.ttcp/1) instead of the ttcp-style lines.
    #[arg(long)]
    json: bool,
    /// Raw mode: open these paths (raw devices, FIFOs or files; comma-separated for several
    /// streams at once) instead of a TCP or UDP socket; see below.
    #[arg(long = "device", value_name = "PATH", value_delimiter = ',', conflicts_with = "unix")]
    device: Vec<PathBuf>,
    /// Raw mode over Unix stream sockets at these paths: -r binds and listens, -t connects.
    #[arg(long = "unix", value_name = "PATH", value_delimiter = ',')]
    unix: Vec<PathBuf>,
    /// Raw mode: send one fixed buffer and only count on receipt (both ends must agree);
    /// default: every write carries a counter per 8 bytes and the receiver checks each read.
    #[arg(long = "no-check")]
    no_check: bool,
    /// Transmitter: the receiver's host name or address.
    host: Option<String>,
}

pub fn cmd_ttcp(a: TtcpArgs) -> Result<u8, Error> {
    let role = match (a.transmit, a.receive) {
        (true, false) => Role::Transmit,
        (false, true) => Role::Receive,
        (false, false) => {
            return Err(Error::invalid("say which end this is: -r to receive (start it first), -t HOST to transmit"))
        }
        (true, true) => {
            return Err(Error::invalid(
                "-t and -r together: a ttcp process is either the transmitter (-t HOST) or the receiver (-r)",
            ))
        }
    };
    let _ = a.sink;
    if !a.device.is_empty() || !a.unix.is_empty() {
        return cmd_ttcp_raw(a, role);
    }
    if a.no_check {
        return Err(Error::invalid("--no-check is for raw mode (--device or --unix)"));
    }
    let proto = if a.udp { Proto::Udp } else { Proto::Tcp };
    let mut cfg = Config::new(proto);
    cfg.buflen = usize::try_from(a.buflen).map_err(|_| Error::invalid(format!("-l {} is too large", a.buflen)))?;
    cfg.nbuf = a.nbuf;
    cfg.sockbuf = match a.sockbuf {
        Some(b) => Some(usize::try_from(b).map_err(|_| Error::invalid(format!("-b {b} is too large")))?),
        None => None,
    };
    cfg.nodelay = a.nodelay;
    cfg.rate = a.rate.unwrap_or(Rate::Max);
    cfg.timeout = a.timeout.unwrap_or(ttcp::DEFAULT_UDP_TIMEOUT);
    cfg.cpu = a.cpu;
    cfg.validate()?;
    if a.nodelay && proto == Proto::Udp {
        return Err(Error::invalid("-D (TCP_NODELAY) is a TCP option: leave it out with -u"));
    }
    let port = a.port.unwrap_or(ttcp::DEFAULT_PORT);
    let stop = sys::install_stop_handler();
    let rep = match role {
        Role::Transmit => {
            let Some(host) = a.host.as_deref() else {
                return Err(Error::invalid(
                    "-t needs the receiver's HOST: wirespeed ttcp -t [options] HOST (start wirespeed ttcp -r there first)",
                ));
            };
            if a.bind.is_some() {
                return Err(Error::invalid("--bind is for the receiver (-r); the transmitter connects to HOST"));
            }
            if a.timeout.is_some() {
                return Err(Error::invalid("--timeout is for the UDP receiver (-r -u)"));
            }
            let target = if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]:{}", port)
            } else {
                format!("{host}:{}", port)
            };
            let dest = resolve(&target)?;
            ttcp::transmit(&cfg, dest, stop)?
        }
        Role::Receive => {
            if let Some(h) = &a.host {
                return Err(Error::invalid(format!(
                    "'{h}': a receiver takes no HOST (it listens; use --bind ADDR to choose the address)"
                )));
            }
            if a.rate.is_some() {
                return Err(Error::invalid("--rate paces the transmitter: give it with -t"));
            }
            if a.nodelay {
                return Err(Error::invalid("-D (TCP_NODELAY) acts on the transmitter's writes: give it with -t"));
            }
            if a.timeout.is_some() && proto == Proto::Tcp {
                return Err(Error::invalid(
                    "--timeout is for the UDP receiver (-r -u); a TCP receiver ends at end of stream",
                ));
            }
            let bind = a.bind.as_deref().unwrap_or("0.0.0.0");
            let ip: IpAddr = wirespeed::addr::parse_ip(bind).map_err(|e| {
                Error::invalid(format!("--bind: {e}; give one of this host's addresses, e.g. 127.0.0.1 or ::1"))
            })?;
            let rx = Receiver::bind(&cfg, SocketAddr::new(ip, port))?;
            // Always on stderr, also with --json: whoever starts the transmitter waits for it.
            eprintln!(
                "wirespeed ttcp-r: listening on {} ({}, -l {}, -b {}); Ctrl-C stops",
                rx.local_addr(),
                proto.name(),
                cfg.buflen,
                cfg.sockbuf.map(|b| b.to_string()).unwrap_or_else(|| "default".into())
            );
            rx.run(stop)?
        }
    };
    if a.json {
        print_json(&rep)?;
    } else {
        print!("{}", rep.human());
    }
    Ok(0)
}

/// Raw mode: Table 3's transfer over paths or Unix sockets.
fn cmd_ttcp_raw(a: TtcpArgs, role: Role) -> Result<u8, Error> {
    let (kind, paths) = if a.unix.is_empty() { (RawKind::Path, a.device) } else { (RawKind::Unix, a.unix) };
    let refuse = |what: &str| {
        Err(Error::invalid(format!("{what} is for TCP and UDP sockets: leave it out with {}", kind.option())))
    };
    if a.udp {
        return refuse("-u");
    }
    if a.sockbuf.is_some() {
        return refuse("-b");
    }
    if a.nodelay {
        return refuse("-D");
    }
    if a.rate.is_some() {
        return refuse("--rate");
    }
    if a.timeout.is_some() {
        return refuse("--timeout");
    }
    if a.bind.is_some() {
        return refuse("--bind");
    }
    if a.port.is_some() {
        return refuse("-p");
    }
    if let Some(h) = &a.host {
        return Err(Error::invalid(format!(
            "'{h}': raw mode takes no HOST: both ends name the same stream with {} PATH",
            kind.option()
        )));
    }
    let cfg = RawConfig {
        kind,
        paths,
        buflen: usize::try_from(a.buflen).map_err(|_| Error::invalid(format!("-l {} is too large", a.buflen)))?,
        nbuf: a.nbuf,
        check: !a.no_check,
        cpu: a.cpu,
    };
    cfg.validate()?;
    let stop = sys::install_stop_handler();
    let rep = match role {
        Role::Transmit => ttcp::transmit_raw(&cfg, stop)?,
        Role::Receive => {
            let rx = RawReceiver::bind(&cfg)?;
            // Always on stderr, also with --json: whoever starts the transmitter waits for it.
            let shown: Vec<String> = cfg.paths.iter().map(|p| p.display().to_string()).collect();
            eprintln!(
                "wirespeed ttcp-r: listening on {} (raw {}, -l {}, -n {}); Ctrl-C stops",
                shown.join(","),
                kind.option(),
                cfg.buflen,
                cfg.nbuf
            );
            rx.run(stop)?
        }
    };
    if a.json {
        print_json(&rep)?;
    } else {
        print!("{}", rep.human());
    }
    Ok(0)
}
