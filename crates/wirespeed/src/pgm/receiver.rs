//! The PGM receiver: sessions found by their TSI, one receive window each, NAKs sent to the
//! address each session's SPMs name, data handed on in sequence order.
//!
//! No sockets here: the owner passes each datagram in ([`Receiver::on_packet`]), lets the
//! receiver send its NAKs through a `send` function ([`Receiver::service`]) and takes the data
//! out in order ([`Receiver::deliver`]). A session's window is allocated once, when its first
//! packet arrives; after that nothing is allocated per packet.
//!
//! Trust: a session is bound to the UDP source address its first packet came from. A packet
//! that claims the session's TSI from any other address (a forged SPM redirecting NAKs, forged
//! data) is counted and ignored, as is every packet that does not parse (checksum, lengths,
//! options) and every packet for another data-destination port.

use super::packet::{self, NakKind, Packet};
use super::rxw::{DataVerdict, Delivery, RxStats, RxWindow};
use super::{PgmConfig, Tsi};
use serde::Serialize;
use std::io;
use std::net::{IpAddr, SocketAddr};

/// How many sessions (sources) one receiver follows at once; packets of more are counted and
/// ignored.
pub const MAX_SESSIONS: usize = 16;

/// What a receiver saw and did, summed over its sessions: the repair half of the ledger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ReceiverStats {
    /// Sessions (TSIs) seen.
    pub sessions: u64,
    /// ODATA packets taken.
    pub odata: u64,
    /// RDATA packets taken (repairs, including ones another receiver asked for).
    pub rdata: u64,
    /// Sequence numbers that were missing and came back (RDATA or late ODATA).
    pub repaired: u64,
    /// Of those, the slowest: from the gap being noticed to the repair, in ns.
    pub repair_max_ns: u64,
    /// Sum of the repair waits, ns (with `repaired`, the mean).
    pub repair_sum_ns: u64,
    /// NAKs sent (sequence numbers, retries included).
    pub naks_sent: u64,
    /// NAK packets sent.
    pub nak_packets: u64,
    /// NCFs heard.
    pub ncfs: u64,
    /// NAKs not sent because the source confirmed, or another receiver asked first.
    pub suppressed: u64,
    /// Sequence numbers given up after the retries or after the source's window moved past
    /// them: lost for good (the ledger counts them lost as well).
    pub unrecoverable: u64,
    /// Data that came twice.
    pub duplicates: u64,
    /// SPMs taken.
    pub spms: u64,
    /// Packets that did not parse (bad checksum, lengths, options, unknown type).
    pub malformed: u64,
    /// Packets for a known session from another source address: forged or misrouted, ignored.
    pub foreign: u64,
    /// Packets for another data-destination port, or sessions beyond [`MAX_SESSIONS`].
    pub ignored: u64,
    /// NAKs that could not be sent (no SPM has named the source's address yet, or the send
    /// failed).
    pub nak_unsent: u64,
}

impl ReceiverStats {
    fn add_window(&mut self, w: &RxStats) {
        self.odata += w.odata;
        self.rdata += w.rdata;
        self.repaired += w.repaired;
        self.naks_sent += w.naks_sent;
        self.ncfs += w.ncfs;
        self.suppressed += w.suppressed;
        self.unrecoverable += w.unrecoverable;
        self.duplicates += w.duplicates;
    }
}

struct Session {
    tsi: Tsi,
    /// The UDP source address of its first packet: later packets must come from its IP
    /// (OpenPGM may send NCFs from a second socket, so the port is not compared).
    from: IpAddr,
    /// That address with its port: the stream's name in the ledger.
    src: SocketAddr,
    /// Where NAKs go: the SPM's NLA with the session's UDP port.
    nla: Option<SocketAddr>,
    /// The group (or, unicast, our own address) the NAK names.
    group: IpAddr,
    window: RxWindow,
    spm_sqn: Option<u32>,
}

/// The receiving side of every session arriving at one socket.
pub struct Receiver {
    cfg: PgmConfig,
    port: u16,
    /// The address data is sent to: the group, or (unicast) ours.
    group: IpAddr,
    max_tsdu: usize,
    sessions: Vec<Session>,
    stats: ReceiverStats,
    due: [u32; packet::MAX_NAK_LIST],
    nak: Vec<u8>,
    seed: u64,
}

impl Receiver {
    /// A receiver for sessions sent to `group` (a multicast group, or this host's unicast
    /// address) at UDP port `port`, with datagrams of at most `max_tsdu` bytes.
    pub fn new(cfg: &PgmConfig, group: IpAddr, port: u16, max_tsdu: usize, seed: u64) -> Self {
        Receiver {
            cfg: cfg.clone(),
            port,
            group,
            max_tsdu,
            sessions: Vec::with_capacity(MAX_SESSIONS),
            stats: ReceiverStats::default(),
            due: [0; packet::MAX_NAK_LIST],
            nak: vec![0u8; 1024],
            seed,
        }
    }

    /// The counters, the sessions' windows included.
    pub fn stats(&self) -> ReceiverStats {
        let mut s = self.stats;
        for sess in &self.sessions {
            s.add_window(sess.window.stats());
        }
        s
    }

    /// Sequence numbers still being recovered, over all sessions.
    pub fn pending(&self) -> u32 {
        self.sessions.iter().map(|s| s.window.pending()).sum()
    }

    /// One datagram from `from`, received at `now_ns`. `f` takes datagrams handed on early:
    /// when the packet would push received data out of a full window (a backlog larger than
    /// the window behind a gap whose repair is queued behind it), what is in order is handed
    /// on and the missing sqns in front of held data are given up, so only they are lost.
    pub fn on_packet<F: FnMut(&[u8], SocketAddr)>(&mut self, data: &[u8], from: SocketAddr, now_ns: u64, f: &mut F) {
        let pkt = match packet::parse(data) {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let tsi = pkt.tsi();
        match pkt {
            Packet::Data { hdr, repair, sqn, trail, payload, .. } => {
                if hdr.dport != self.cfg.dport {
                    self.stats.ignored += 1;
                    return;
                }
                let Some(i) = self.session(tsi, from, now_ns) else { return };
                let src = self.sessions[i].src;
                let w = &mut self.sessions[i].window;
                while w.must_give_way(sqn) {
                    hand_on(w, src, f);
                    if w.must_give_way(sqn) && w.give_way() == 0 {
                        break; // nothing missing in front: the window itself makes room
                    }
                }
                if let DataVerdict::Repaired { waited_ns } = w.on_data(sqn, trail, payload, repair, now_ns) {
                    self.stats.repair_max_ns = self.stats.repair_max_ns.max(waited_ns);
                    self.stats.repair_sum_ns += waited_ns;
                }
            }
            Packet::Spm { hdr, sqn, trail, lead, nla, .. } => {
                if hdr.dport != self.cfg.dport {
                    self.stats.ignored += 1;
                    return;
                }
                let port = self.port;
                let Some(i) = self.session(tsi, from, now_ns) else { return };
                let s = &mut self.sessions[i];
                // Only an advancing SPM counts (OpenPGM's pgm_on_spm): a replayed old one
                // moves nothing.
                if s.spm_sqn.is_some_and(|last| super::sqn_lt(sqn, last)) {
                    return;
                }
                s.spm_sqn = Some(sqn);
                s.nla = Some(SocketAddr::new(nla, port));
                s.window.on_spm(trail, lead, now_ns);
                self.stats.spms += 1;
            }
            Packet::Nak { kind: NakKind::Ncf, sqns, .. } => {
                if let Some(i) = self.find(tsi, from.ip()) {
                    self.sessions[i].window.on_ncf(sqns.as_slice(), now_ns);
                }
            }
            Packet::Nak { kind: NakKind::Nak, sqns, .. } => {
                // Another receiver's NAK on the group: ours for the same packets can wait.
                if let Some(i) = self.sessions.iter().position(|s| s.tsi == tsi) {
                    self.sessions[i].window.on_foreign_nak(sqns.as_slice(), now_ns);
                }
            }
            _ => {}
        }
    }

    /// Send the NAKs that are due (one packet per session and up to 63 sequence numbers,
    /// again until none are due), through `send(packet, to)`.
    pub fn service<S: FnMut(&[u8], SocketAddr) -> io::Result<()>>(&mut self, now_ns: u64, send: &mut S) {
        for s in &mut self.sessions {
            loop {
                let n = s.window.poll(now_ns, &mut self.due);
                if n == 0 {
                    break;
                }
                let Some(to) = s.nla else {
                    // No SPM has named the source's address yet: OpenPGM's receiver waits for
                    // one too (and asks with an SPMR); the window retries on its timers.
                    self.stats.nak_unsent += n as u64;
                    continue;
                };
                let len = packet::write_nak(
                    &mut self.nak,
                    NakKind::Nak,
                    s.tsi,
                    self.cfg.dport,
                    &self.due[..n],
                    to.ip(),
                    s.group,
                );
                match send(&self.nak[..len], to) {
                    Ok(()) => self.stats.nak_packets += 1,
                    Err(_) => self.stats.nak_unsent += n as u64,
                }
                if n < self.due.len() {
                    break;
                }
            }
        }
    }

    /// The earliest time [`Receiver::service`] has something to do.
    pub fn next_deadline(&self) -> Option<u64> {
        self.sessions.iter().filter_map(|s| s.window.next_deadline()).min()
    }

    /// Hand every datagram that is next in its session's order to `f` (with the source's
    /// address); returns how many. Unrecoverable runs are skipped here: they are counted in
    /// the stats, and the ledger sees the gap in the payloads' own sequence numbers.
    pub fn deliver<F: FnMut(&[u8], SocketAddr)>(&mut self, f: &mut F) -> usize {
        self.sessions.iter_mut().map(|s| hand_on(&mut s.window, s.src, f)).sum()
    }

    /// The run is over: what is still missing is given up (counted unrecoverable) and every
    /// datagram already held is delivered.
    pub fn abandon<F: FnMut(&[u8], SocketAddr)>(&mut self, f: &mut F) -> usize {
        for s in &mut self.sessions {
            s.window.abandon();
        }
        self.deliver(f)
    }

    fn find(&self, tsi: Tsi, from: IpAddr) -> Option<usize> {
        self.sessions.iter().position(|s| s.tsi == tsi && s.from == from)
    }

    /// The session `tsi` from `from`, made on its first packet; None (counted) for a packet
    /// claiming a known session from another address, or one session too many.
    fn session(&mut self, tsi: Tsi, src: SocketAddr, _now_ns: u64) -> Option<usize> {
        let from = src.ip();
        if let Some(i) = self.sessions.iter().position(|s| s.tsi == tsi) {
            if self.sessions[i].from == from {
                return Some(i);
            }
            self.stats.foreign += 1;
            return None;
        }
        if self.sessions.len() == MAX_SESSIONS {
            self.stats.ignored += 1;
            return None;
        }
        self.seed = self.seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let window = RxWindow::new(self.cfg.rx(self.max_tsdu), self.seed ^ u64::from(tsi.sport));
        // The NAK names the group the data came to; unicast, our own address, which the
        // source sent to (found from the route back to it when we listen on every address).
        let group = if self.group.is_unspecified() { local_towards(from).unwrap_or(self.group) } else { self.group };
        self.sessions.push(Session { tsi, from, src, nla: None, group, window, spm_sqn: None });
        self.stats.sessions += 1;
        Some(self.sessions.len() - 1)
    }
}

/// The local address the route to `peer` leaves from (a connected UDP socket's own address;
/// nothing is sent). Once per session, never per packet.
pub fn local_towards(peer: IpAddr) -> Option<IpAddr> {
    let any: SocketAddr = if peer.is_ipv4() { "0.0.0.0:0".parse().ok()? } else { "[::]:0".parse().ok()? };
    let s = std::net::UdpSocket::bind(any).ok()?;
    s.connect(SocketAddr::new(peer, 9)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// Hand every datagram now in order in `w` to `f` (unrecoverable runs are skipped: counted in
/// the window's stats, seen by the ledger as a gap); returns how many.
fn hand_on<F: FnMut(&[u8], SocketAddr)>(w: &mut RxWindow, src: SocketAddr, f: &mut F) -> usize {
    let mut n = 0;
    while let Some(d) = w.pop() {
        if let Delivery::Data { payload, .. } = d {
            f(payload, src);
            n += 1;
        }
    }
    n
}
