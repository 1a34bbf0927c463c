//! `wirespeed bench bare-recv` (hidden): the bare recvmmsg loop `bench compare --tools bare`
//! runs on the receiving side, and, with `--hold`, the socket that owns the port while
//! tcpdump or netsniff-ng capture. Not for users: `bench compare` starts it and reads its line.

use clap::Args;
use std::net::SocketAddr;
use std::time::Duration;
use wirespeed::{sys, Error};
use wirespeed_lab::bench::peer::bare;

#[derive(Args)]
pub struct BareRecvArgs {
    /// Address to bind (port 0: any free port; the one bound is printed).
    addr: SocketAddr,
    /// Count datagrams of exactly this many bytes.
    #[arg(long)]
    size: usize,
    /// Receive buffer to ask for, bytes (forced past net.core.rmem_max when permitted).
    #[arg(long, default_value_t = 32 << 20)]
    rcvbuf: u64,
    /// Pin the loop to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Stop this long after the last datagram, milliseconds.
    #[arg(long, default_value_t = 1000)]
    idle_ms: u64,
    /// Only own the port, never read, until stopped by a signal.
    #[arg(long)]
    hold: bool,
}

pub fn cmd_bare_recv(a: BareRecvArgs) -> Result<u8, Error> {
    let stop = sys::install_stop_handler();
    if let Some(c) = a.cpu {
        sys::pin_current_thread(c).map_err(|e| Error::failed(format!("cannot pin to CPU {c}: {e}")))?;
    }
    let (sock, granted) = bare::bind(a.addr, a.rcvbuf)?;
    let at = sock.local_addr().map_err(|e| Error::io(format!("cannot read the bound address: {e}")))?;
    eprintln!("listening on {at} (rcvbuf granted {granted})");
    if a.hold {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        return Ok(0);
    }
    let r = bare::receive(&sock, a.size, Duration::from_millis(a.idle_ms.max(1)), stop)?;
    println!("{}", serde_json::to_string(&r).map_err(|e| Error::failed(format!("cannot encode JSON: {e}")))?);
    Ok(0)
}
