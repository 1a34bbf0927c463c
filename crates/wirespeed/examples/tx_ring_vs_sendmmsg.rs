//! The measurement behind `sys::packet_tx`'s choice of `sendmmsg` over a TPACKET_V2 TX ring:
//! the same prebuilt Ethernet frame sent flat out through `sendmmsg` (batches of 64) and through
//! a TX ring (flushes of 64) on one interface, printing frames/s and the thread's CPU per frame
//! of each. Needs root (CAP_NET_RAW). Send it into a veth whose peer drops the frames, in a
//! namespace of your own, never onto a shared network.
//!
//! ```sh
//! sudo cargo run --release --example tx_ring_vs_sendmmsg -- IFACE FRAME_HEX [FRAMES]
//! ```
//!
//! FRAME_HEX is the whole frame (destination MAC first) as hex; FRAMES defaults to 2,000,000.

use std::os::fd::AsRawFd;
use wirespeed::sys::packet_tx::{if_index, PacketTx, PacketTxRing, TX_DATA_OFFSET};
use wirespeed::sys::{monotonic_ns, thread_cpu_ns, SendBatch};

fn main() {
    if let Err(e) = run() {
        eprintln!("tx_ring_vs_sendmmsg: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(iface), Some(hex)) = (args.first(), args.get(1)) else {
        return Err("give IFACE FRAME_HEX [FRAMES]".into());
    };
    if hex.len() % 2 != 0 || hex.len() < 28 {
        return Err("FRAME_HEX must be a whole frame in hex (at least the 14-byte Ethernet header)".into());
    }
    let frame = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|e| format!("FRAME_HEX: {e}"))?;
    let n: u64 = match args.get(2) {
        Some(v) => v.parse().map_err(|e| format!("FRAMES '{v}': {e}"))?,
        None => 2_000_000,
    };
    let idx = if_index(iface).map_err(|e| format!("interface {iface}: {e}"))?;

    let tx = PacketTx::open(idx).map_err(|e| format!("packet socket on {iface}: {e}"))?;
    let mut batch = SendBatch::new(64, frame.len());
    for i in 0..64 {
        batch.buf_mut(i).copy_from_slice(&frame);
        batch.set_message(i, frame.len(), None);
    }
    let (t0, c0) = (monotonic_ns(), thread_cpu_ns());
    let mut sent = 0u64;
    while sent < n {
        match batch.send(tx.as_raw_fd(), 0, 64) {
            Ok(k) => sent += k as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
            Err(e) => return Err(format!("sendmmsg: {e}")),
        }
    }
    let (t1, c1) = (monotonic_ns(), thread_cpu_ns());
    println!("sendmmsg: {} frames/s, {} ns CPU per frame", sent * 1_000_000_000 / (t1 - t0).max(1), (c1 - c0) / sent);

    let size = (frame.len() + TX_DATA_OFFSET).next_power_of_two().max(2048);
    let mut ring = PacketTxRing::open(idx, size, 256).map_err(|e| format!("TX ring on {iface}: {e}"))?;
    let (t0, c0) = (monotonic_ns(), thread_cpu_ns());
    let mut sent = 0u64;
    while sent < n {
        let mut k = 0;
        while k < 64 && ring.push(&frame) {
            k += 1;
        }
        ring.flush().map_err(|e| format!("TX ring flush: {e}"))?;
        sent += k;
    }
    let (t1, c1) = (monotonic_ns(), thread_cpu_ns());
    println!("tx ring:  {} frames/s, {} ns CPU per frame", sent * 1_000_000_000 / (t1 - t0).max(1), (c1 - c0) / sent);
    Ok(())
}
