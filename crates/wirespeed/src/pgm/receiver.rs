//! The PGM receiver: sessions found by their TSI, one receive window each, NAKs sent to the
//! address each session's SPMs name, data handed on in sequence order.
//!
//! No sockets here: the owner passes each datagram in ([`Receiver::on_packet`]), lets the
//! receiver send its NAKs through a `send` function ([`Receiver::service`]) and takes the data
//! out in order ([`Receiver::deliver`]). A session's window is allocated once, when its first
//! packet arrives; after that nothing is allocated per packet.
//!
//! Trust: a session is bound to the TSI and the UDP source address *and port* of its first
//! ODATA (the source's data socket), and to at most one more port of that address for its
//! control packets (OpenPGM sends SPMs, NCFs and RDATA from a second, router-alert socket):
//! the port its SPMs came from before its first ODATA, or else the first one after; a source
//! seen sending SPMs from its data socket (as wirespeed's does) has no second port. A packet
//! that claims the session's TSI from anywhere else (a forged SPM moving the window or
//! redirecting NAKs, forged data or repairs, an ODATA from another port with the same TSI) is
//! counted in `foreign` and ignored, as is every packet that does not parse (checksum,
//! lengths, options) and every packet for another data-destination port. Even from the
//! source's own ports, control packets are claims bounded by the data seen
//! ([`RxWindow::on_spm`]): none can make the receiver discard data or give up a sqn the
//! source has not been seen to send. Only ODATA starts a session.

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
    /// Sequence numbers named by the NCFs heard (an NCF packet may name up to 63).
    pub ncfs: u64,
    /// NCF packets heard from the session's source.
    pub ncf_packets: u64,
    /// NAKs not sent because the source confirmed, or another receiver asked first.
    pub suppressed: u64,
    /// Sequence numbers given up after the retries or after the source's window moved past
    /// them: lost for good (the ledger counts them lost as well).
    pub unrecoverable: u64,
    /// Of those, the ones after the last datagram a session handed on: no later datagram
    /// shows the ledger their gap, so the report adds them to its lost.
    pub unrecoverable_at_end: u64,
    /// Control packets (SPM, NCF, RDATA, another receiver's NAK) from the session's source
    /// that named sequence numbers beyond what its data has shown: the excess was ignored.
    pub beyond_data: u64,
    /// Data that came twice.
    pub duplicates: u64,
    /// SPMs taken.
    pub spms: u64,
    /// Packets that did not parse (bad checksum, lengths, options, unknown type).
    pub malformed: u64,
    /// Packets for a known session from another source address or port than the source's:
    /// forged or misrouted, ignored.
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
        self.beyond_data += w.beyond_data;
    }
}

struct Session {
    tsi: Tsi,
    /// The UDP source address and port of its first ODATA (the source's data socket): all
    /// ODATA must come from it; the stream's name in the ledger.
    src: SocketAddr,
    /// The second port of `src`'s address that control packets (SPM, NCF, RDATA) may come
    /// from (OpenPGM's router-alert socket); `src`'s own port when the source sends them from
    /// its data socket; None until the first SPM.
    ctrl_port: Option<u16>,
    /// Unrecoverable sqns handed on after the last datagram.
    tail_lost: u64,
    /// Where NAKs go: the SPM's NLA with the session's UDP port.
    nla: Option<SocketAddr>,
    /// Two ports of the source's address have sent SPMs as its control socket: only the data
    /// port is believed from then on (see `control`).
    ctrl_contested: bool,
    /// The group (or, unicast, our own address) the NAK names.
    group: IpAddr,
    window: RxWindow,
    spm_sqn: Option<u32>,
}

/// An SPM for a session whose first ODATA has not come yet: where it came from and the NLA
/// it named, so that the session can take its control port and NAK address from it.
#[derive(Clone, Copy)]
struct EarlySpm {
    tsi: Tsi,
    from: SocketAddr,
    nla: IpAddr,
    /// The lead it announced: data starts after it.
    lead: u32,
}

/// How many early SPMs (distinct TSI and sender) are remembered.
const EARLY_SPMS: usize = 2 * MAX_SESSIONS;

/// The receiving side of every session arriving at one socket.
pub struct Receiver {
    cfg: PgmConfig,
    port: u16,
    /// The address data is sent to: the group, or (unicast) ours.
    group: IpAddr,
    max_tsdu: usize,
    sessions: Vec<Session>,
    early: Vec<EarlySpm>,
    stats: ReceiverStats,
    due: [u32; packet::MAX_NAK_LIST],
    nak: Vec<u8>,
    seed: u64,
    /// The first session's window, made (and faulted in) with the receiver, before it is said
    /// to listen: that session's first datagrams meet no allocation and no page fault.
    spare: Option<RxWindow>,
}

impl Receiver {
    /// A receiver for sessions sent to `group` (a multicast group, or this host's unicast
    /// address) at UDP port `port`, with datagrams of at most `max_tsdu` bytes.
    pub fn new(cfg: &PgmConfig, group: IpAddr, port: u16, max_tsdu: usize, seed: u64) -> Self {
        Receiver { spare: Some(Self::window_for(cfg, max_tsdu)), ..Self::new_bare(cfg, group, port, max_tsdu, seed) }
    }

    fn new_bare(cfg: &PgmConfig, group: IpAddr, port: u16, max_tsdu: usize, seed: u64) -> Self {
        Receiver {
            cfg: cfg.clone(),
            port,
            group,
            max_tsdu,
            sessions: Vec::with_capacity(MAX_SESSIONS),
            early: Vec::with_capacity(EARLY_SPMS),
            stats: ReceiverStats::default(),
            due: [0; packet::MAX_NAK_LIST],
            nak: vec![0u8; 1024],
            seed,
            spare: None,
        }
    }

    /// As [`new`](Self::new), with the first session's window made beforehand by
    /// [`window_for`](Self::window_for) (where the receiver itself is built only once the
    /// socket is said to listen, its window is made before).
    pub fn with_window(cfg: &PgmConfig, group: IpAddr, port: u16, max_tsdu: usize, seed: u64, w: RxWindow) -> Self {
        Receiver { spare: Some(w), ..Receiver::new_bare(cfg, group, port, max_tsdu, seed) }
    }

    /// The window a receiver's first session will use, every page faulted in (it is
    /// `--pgm-window` datagrams of `max_tsdu` bytes: tens or hundreds of MiB).
    pub fn window_for(cfg: &PgmConfig, max_tsdu: usize) -> RxWindow {
        let mut w = RxWindow::new(cfg.rx(max_tsdu), 0);
        w.prefault();
        w
    }

    /// The counters, the sessions' windows included.
    pub fn stats(&self) -> ReceiverStats {
        let mut s = self.stats;
        for sess in &self.sessions {
            s.add_window(sess.window.stats());
            s.unrecoverable_at_end += sess.tail_lost;
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
                let found = if repair { self.control(tsi, from, false) } else { self.data_session(tsi, from, sqn) };
                let Some(i) = found else { return };
                let s = &mut self.sessions[i];
                let (src, w) = (s.src, &mut s.window);
                // Only the source's original data may push held data along (a backlog larger
                // than the window); a repair never needs room made (the window refuses one
                // beyond its free room).
                while !repair && w.must_give_way(sqn) {
                    hand_on(w, src, &mut s.tail_lost, f);
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
                let Some(i) = self.control(tsi, from, true) else {
                    if !self.sessions.iter().any(|s| s.tsi == tsi) {
                        self.remember_early(tsi, from, nla, lead);
                    }
                    return;
                };
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
                if let Some(i) = self.control(tsi, from, false) {
                    self.stats.ncf_packets += 1;
                    self.sessions[i].window.on_ncf(sqns.as_slice(), now_ns);
                }
            }
            Packet::Nak { kind: NakKind::Nak, sqns, .. } => {
                // Another receiver's NAK on the group, from any address: ours for the same
                // packets can wait (the window never lets it move anything).
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
        self.sessions.iter_mut().map(|s| hand_on(&mut s.window, s.src, &mut s.tail_lost, f)).sum()
    }

    /// The run is over: what is still missing is given up (counted unrecoverable) and every
    /// datagram already held is delivered.
    pub fn abandon<F: FnMut(&[u8], SocketAddr)>(&mut self, f: &mut F) -> usize {
        for s in &mut self.sessions {
            s.window.abandon();
        }
        self.deliver(f)
    }

    /// The session a control packet from `from` belongs to: one whose source sent it from its
    /// data port or its control port. An SPM (`learn`) from the source's address makes its
    /// port the control port when none is known yet, and one from the data port makes the
    /// data port the only one (the source sends control from its data socket). None (counted
    /// foreign when the TSI is known) for anything else.
    fn control(&mut self, tsi: Tsi, from: SocketAddr, learn: bool) -> Option<usize> {
        let i = self.sessions.iter().position(|s| s.tsi == tsi)?;
        let s = &mut self.sessions[i];
        if from == s.src {
            if learn {
                s.ctrl_port = Some(from.port());
            }
            return Some(i);
        }
        if from.ip() == s.src.ip() && !s.ctrl_contested {
            match s.ctrl_port {
                Some(p) if p == from.port() => return Some(i),
                None if learn => {
                    s.ctrl_port = Some(from.port());
                    return Some(i);
                }
                // A second port of the source's address claims to be its control socket:
                // one of the two is not the source (a process beside it, or a forger), and
                // nothing says which. Neither is believed from now on: the session listens to
                // its data port alone (repairs from a second socket stop; what they would
                // have repaired is counted lost, never given up on a stranger's word), and
                // NAKs go to the data's own address.
                Some(p) if learn && p != s.src.port() => {
                    s.ctrl_contested = true;
                    s.ctrl_port = None;
                    s.nla = Some(SocketAddr::new(s.src.ip(), self.port));
                }
                _ => {}
            }
        }
        self.stats.foreign += 1;
        None
    }

    /// Remembers an SPM for a session not yet started (OpenPGM announces a session with SPMs
    /// before its data), so the session can take its control port and NAK address.
    fn remember_early(&mut self, tsi: Tsi, from: SocketAddr, nla: IpAddr, lead: u32) {
        self.stats.spms += 1;
        if let Some(e) = self.early.iter_mut().find(|e| e.tsi == tsi && e.from == from) {
            e.nla = nla;
            e.lead = lead;
        } else if self.early.len() < EARLY_SPMS {
            self.early.push(EarlySpm { tsi, from, nla, lead });
        }
    }

    /// The session of an ODATA packet from `src`, made on its first one; None (counted) for
    /// ODATA claiming a known session from another address or port, or one session too many.
    fn data_session(&mut self, tsi: Tsi, src: SocketAddr, sqn: u32) -> Option<usize> {
        if let Some(i) = self.sessions.iter().position(|s| s.tsi == tsi) {
            if self.sessions[i].src == src {
                return Some(i);
            }
            self.stats.foreign += 1;
            return None;
        }
        if self.sessions.len() == MAX_SESSIONS {
            self.stats.ignored += 1;
            return None;
        }
        // The control port: the data port if SPMs came from it before, else the one other
        // port of the source's address that sent SPMs (none if several did: then the first
        // SPM after this ODATA names it).
        let same = |e: &&EarlySpm| e.tsi == tsi && e.from.ip() == src.ip();
        let early = match self.early.iter().find(|e| e.tsi == tsi && e.from == src) {
            Some(e) => Some(*e),
            None if self.early.iter().filter(same).count() == 1 => self.early.iter().find(same).copied(),
            None => None,
        };
        self.early.retain(|e| e.tsi != tsi);
        self.seed = self.seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let seed = self.seed ^ u64::from(tsi.sport);
        let mut window = match self.spare.take() {
            Some(mut w) => {
                w.reseed(seed);
                w
            }
            None => RxWindow::new(self.cfg.rx(self.max_tsdu), seed),
        };
        // The opening SPMs said where the data starts: ODATA lost before this one is a gap
        // to repair (as far as the data confirms it).
        if let Some(e) = early {
            window.start_at(e.lead.wrapping_add(1), sqn);
        }
        // The NAK names the group the data came to; unicast, our own address, which the
        // source sent to (found from the route back to it when we listen on every address).
        let from = src.ip();
        let group = if self.group.is_unspecified() { local_towards(from).unwrap_or(self.group) } else { self.group };
        self.sessions.push(Session {
            tsi,
            src,
            ctrl_port: early.map(|e| e.from.port()),
            tail_lost: 0,
            nla: early.map(|e| SocketAddr::new(e.nla, self.port)),
            ctrl_contested: false,
            group,
            window,
            spm_sqn: None,
        });
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
/// the window's stats, seen by the ledger as a gap, or, after the last datagram, in
/// `tail_lost`); returns how many.
fn hand_on<F: FnMut(&[u8], SocketAddr)>(w: &mut RxWindow, src: SocketAddr, tail_lost: &mut u64, f: &mut F) -> usize {
    let mut n = 0;
    while let Some(d) = w.pop() {
        match d {
            Delivery::Data { payload, .. } => {
                f(payload, src);
                *tail_lost = 0;
                n += 1;
            }
            Delivery::Lost { count, .. } => *tail_lost += u64::from(count),
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    const TSI: Tsi = Tsi { gsi: [1, 2, 3, 4, 5, 6], sport: 4000 };

    fn odata(sqn: u32) -> Vec<u8> {
        let mut b = vec![0u8; packet::DATA_HEADER_LEN + 64];
        b[packet::DATA_HEADER_LEN..].fill(sqn as u8);
        let n = packet::write_data(&mut b, TSI, PgmConfig::default().dport, false, sqn, 0, 64);
        packet::finish_checksum(&mut b[..n]);
        b.truncate(n);
        b
    }

    fn spm(sqn: u32, trail: u32, lead: u32, nla: IpAddr) -> Vec<u8> {
        let mut b = vec![0u8; packet::MAX_SPM_LEN];
        let n = packet::write_spm(&mut b, TSI, PgmConfig::default().dport, sqn, trail, lead, nla, false);
        b.truncate(n);
        b
    }

    /// OpenPGM sends SPMs from a second socket; a process beside the source (or a forger)
    /// claiming another port of the same address as that socket must not take the session
    /// over: once two ports claim it, neither moves the window, NAKs go to the data's own
    /// address, and everything the source sent is delivered.
    #[test]
    fn a_second_port_claiming_the_control_socket_moves_nothing() {
        let cfg = PgmConfig::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let (data, ctrl, forger) = (SocketAddr::new(ip, 5000), SocketAddr::new(ip, 5001), SocketAddr::new(ip, 5002));
        let mut rx = Receiver::new(&cfg, "127.0.0.2".parse().unwrap(), 7500, 9000, 1);
        let mut got = Vec::new();
        let mut take = |p: &[u8], _: SocketAddr| got.push(p[0]);
        let mut now = 1_000_000;
        for sqn in 0..10 {
            rx.on_packet(&odata(sqn), data, now, &mut take);
            now += 1_000;
        }
        // The real control socket first, then a forger's SPMs from a third port, far ahead.
        rx.on_packet(&spm(1, 0, 9, ip), ctrl, now, &mut take);
        let evil: IpAddr = "198.18.0.66".parse().unwrap();
        for k in 0..20 {
            rx.on_packet(&spm(100 + k, 30_000, 40_000, evil), forger, now, &mut take);
        }
        // Neither is believed now, not even the real second socket.
        rx.on_packet(&spm(200, 50_000, 60_000, ip), ctrl, now, &mut take);
        for sqn in 10..20 {
            rx.on_packet(&odata(sqn), data, now, &mut take);
            now += 1_000;
        }
        rx.deliver(&mut take);
        assert_eq!(got, (0..20).collect::<Vec<u8>>(), "every datagram delivered, in order");
        let st = rx.stats();
        assert_eq!((st.unrecoverable, st.duplicates), (0, 0), "{st:?}");
        assert_eq!(st.foreign, 21, "the forger's 20 SPMs and the contested socket's last one: {st:?}");
        assert_eq!(rx.sessions[0].nla, Some(SocketAddr::new(ip, 7500)), "NAKs go to the data's own address");
        assert!(rx.sessions[0].ctrl_contested);
    }
}
