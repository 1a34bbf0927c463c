//! The PGM source: original data into the transmit window, NAKs answered with an NCF and
//! repaired with RDATA, SPMs that tell the receivers where the window's edges are and where to
//! send NAKs.
//!
//! No sockets here: whoever owns them passes packets in ([`Source::on_packet`]) and a
//! `send` function out, so the same engine serves `send`, `ping` and `reflect`, and the unit
//! tests drive it packet by packet. Every buffer is allocated in [`Source::new`]; the per-packet
//! path allocates nothing.

use super::packet::{self, NakKind, Packet};
use super::txw::{SpmSchedule, TokenBucket, TxWindow};
use super::{PgmConfig, Tsi};
use serde::Serialize;
use std::io;
use std::net::{IpAddr, SocketAddr};

/// The IPv4 and UDP headers in front of every PGM packet, counted against the repair budget
/// as the wire carries them.
const IP_UDP_HEADERS: usize = 28;

/// What a source did, for the sender's report: the repair traffic is the "consuming more
/// bandwidth" seed 003 saw once the network dropped packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SourceStats {
    /// ODATA packets sent (original data).
    pub odata: u64,
    /// Their bytes on the wire (PGM header included, UDP/IP not).
    pub odata_bytes: u64,
    /// RDATA packets sent (repairs).
    pub rdata: u64,
    /// Their bytes.
    pub rdata_bytes: u64,
    /// NCFs sent (one per NAK packet accepted).
    pub ncf: u64,
    /// SPMs sent.
    pub spm: u64,
    /// NAK packets accepted.
    pub nak_packets: u64,
    /// Sequence numbers those NAKs asked for.
    pub nak_sqns: u64,
    /// Asked for again while already queued, or within the elimination interval of their last
    /// repair: not sent twice.
    pub nak_eliminated: u64,
    /// Asked for after they had left the transmit window: unrecoverable at the receiver.
    pub nak_out_of_window: u64,
    /// NAKs for another session, or naming another source or group address than ours (a
    /// forged or misdirected NAK): ignored, as OpenPGM's source ignores them.
    pub nak_refused: u64,
    /// Packets that were not PGM at all, or broken (checksum, lengths, options).
    pub malformed: u64,
}

impl SourceStats {
    /// Repair bytes as a share of all data bytes sent, in percent.
    pub fn repair_share(&self) -> f64 {
        let all = self.odata_bytes + self.rdata_bytes;
        if all == 0 {
            0.0
        } else {
            100.0 * self.rdata_bytes as f64 / all as f64
        }
    }
}

/// One PGM session's sending side.
pub struct Source {
    tsi: Tsi,
    dport: u16,
    nla: IpAddr,
    dest: SocketAddr,
    txw: TxWindow,
    spm: SpmSchedule,
    spm_sqn: u32,
    /// Scratch for NCF, SPM and RDATA packets (one at a time).
    scratch: Vec<u8>,
    elim_ns: u64,
    stats: SourceStats,
    last_nak_ns: u64,
    /// The RDATA budget (`pace_repairs`); unlimited until set.
    repairs: TokenBucket,
}

impl Source {
    /// A session sending to `dest` (a group or a host, with the UDP port every PGM packet of
    /// the session uses), naming `nla` as the address for NAKs, with packets of at most
    /// `max_tsdu` payload bytes.
    pub fn new(cfg: &PgmConfig, tsi: Tsi, nla: IpAddr, dest: SocketAddr, max_tsdu: usize, now_ns: u64) -> Self {
        let slot = packet::DATA_HEADER_LEN + max_tsdu;
        // The first sequence number: OpenPGM starts at 0 unless told otherwise; a receiver
        // joins at whatever it first sees, so any start works.
        Source {
            tsi,
            dport: cfg.dport,
            nla,
            dest,
            txw: TxWindow::new(cfg.window, slot, 0),
            spm: SpmSchedule::lan_default(now_ns),
            spm_sqn: 0,
            scratch: vec![0u8; slot.max(1024)],
            // A repair sent less than one NAK back-off ago answers every NAK for the same
            // packet that is still on its way (RFC 3208 NAK elimination).
            elim_ns: cfg.nak_backoff.as_nanos() as u64,
            stats: SourceStats::default(),
            last_nak_ns: 0,
            repairs: TokenBucket::new(0, 0, now_ns),
        }
    }

    /// Send repairs at most at `bytes_per_s` on the wire (IP and UDP headers counted; 0 =
    /// unlimited). Unlimited, a burst of loss is answered by a burst of RDATA as large, into a
    /// receiver that may just have shown it cannot keep up; capped, nothing is sent twice but
    /// the receiver waits longer and NAKs again meanwhile (OpenPGM meters RDATA too, with
    /// `rdata_rate_control`). The bucket holds 10 ms of repairs (at least one packet), so a
    /// source that services its NAKs between send batches still reaches the rate.
    pub fn pace_repairs(&mut self, bytes_per_s: u64, now_ns: u64) {
        let burst = (bytes_per_s / 100).max((self.scratch.len() + IP_UDP_HEADERS) as u64);
        self.repairs = TokenBucket::new(bytes_per_s, burst, now_ns);
    }

    /// The session's transport session identifier.
    pub fn tsi(&self) -> Tsi {
        self.tsi
    }

    /// The PGM data-destination port the session's packets carry.
    pub fn dport(&self) -> u16 {
        self.dport
    }

    /// Where the session's packets go.
    pub fn dest(&self) -> SocketAddr {
        self.dest
    }

    /// The counters so far.
    pub fn stats(&self) -> &SourceStats {
        &self.stats
    }

    /// When a NAK last came (monotonic ns, 0: never), for a linger that ends when quiet.
    pub fn last_nak_ns(&self) -> u64 {
        self.last_nak_ns
    }

    /// Make the ODATA packet around a payload the caller already wrote at
    /// `pkt[DATA_HEADER_LEN..DATA_HEADER_LEN + payload_len]` (in its send buffer, so the payload
    /// is written once), keep a copy for repairs and return the packet's length.
    pub fn seal(&mut self, pkt: &mut [u8], payload_len: usize, now_ns: u64) -> usize {
        let trail = self.txw.trail();
        let (sqn, slot) = self.txw.next_slot();
        let len = packet::write_data(pkt, self.tsi, self.dport, false, sqn, trail, payload_len);
        packet::finish_checksum(&mut pkt[..len]);
        slot[..len].copy_from_slice(&pkt[..len]);
        self.txw.commit(len);
        self.spm.on_data(now_ns);
        self.stats.odata += 1;
        self.stats.odata_bytes += len as u64;
        len
    }

    /// A packet that came to the source's socket from `from`: NAKs are confirmed with an NCF
    /// at once and queued for repair; SPM requests are answered with an SPM; anything else is
    /// ignored, broken packets counted.
    pub fn on_packet<S: FnMut(&[u8]) -> io::Result<()>>(
        &mut self,
        data: &[u8],
        _from: SocketAddr,
        now_ns: u64,
        send: &mut S,
    ) {
        let pkt = match packet::parse(data) {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        match pkt {
            Packet::Nak { hdr, kind: NakKind::Nak, sqns, source_nla, group_nla } => {
                // OpenPGM's source takes a NAK only for its own session and only when it names
                // its own address and group (source.c, on_nak); so does this one.
                if hdr.gsi != self.tsi.gsi
                    || hdr.dport != self.tsi.sport
                    || hdr.sport != self.dport
                    || source_nla != self.nla
                    || (self.dest.ip().is_multicast() && group_nla != self.dest.ip())
                {
                    self.stats.nak_refused += 1;
                    return;
                }
                let list = sqns.as_slice();
                self.stats.nak_packets += 1;
                self.stats.nak_sqns += list.len() as u64;
                self.last_nak_ns = now_ns;
                let out = self.txw.on_nak(list, now_ns, self.elim_ns);
                self.stats.nak_eliminated += (out.already_queued + out.eliminated) as u64;
                self.stats.nak_out_of_window += out.out_of_window as u64;
                let len = packet::write_nak(
                    &mut self.scratch,
                    NakKind::Ncf,
                    self.tsi,
                    self.dport,
                    list,
                    source_nla,
                    group_nla,
                );
                if send(&self.scratch[..len]).is_ok() {
                    self.stats.ncf += 1;
                }
            }
            Packet::Spmr { hdr } if hdr.gsi == self.tsi.gsi && hdr.dport == self.tsi.sport => {
                self.send_spm(false, send);
            }
            Packet::Nak { .. } | Packet::Spmr { .. } => self.stats.nak_refused += 1,
            // Our own multicast coming back, or another source's session: not ours to answer.
            _ => {}
        }
    }

    /// Send what is due: every queued repair as RDATA, and an SPM when the schedule says so.
    pub fn service<S: FnMut(&[u8]) -> io::Result<()>>(&mut self, now_ns: u64, send: &mut S) {
        while let Some(sqn) = self.txw.peek_repair() {
            let len = self.txw.get(sqn).map_or(0, <[u8]>::len);
            if !self.repairs.take((len + IP_UDP_HEADERS) as u64, now_ns) {
                break; // the rest waits for the budget: see `pace_repairs`
            }
            self.txw.next_repair(now_ns);
            let trail = self.txw.trail();
            let Some(stored) = self.txw.get(sqn) else { continue };
            self.scratch[..len].copy_from_slice(stored);
            packet::set_repair(&mut self.scratch[..len], trail);
            if send(&self.scratch[..len]).is_ok() {
                self.stats.rdata += 1;
                self.stats.rdata_bytes += len as u64;
            }
            // RDATA restarts the heartbeats as ODATA does (OpenPGM's send_rdata).
            self.spm.on_data(now_ns);
        }
        if self.spm.due(now_ns) {
            self.send_spm(false, send);
        }
    }

    /// The session's opening SPM (OpenPGM sends one when the socket connects): trail and lead
    /// of an empty window, so receivers know the first sequence number before any data.
    pub fn announce<S: FnMut(&[u8]) -> io::Result<()>>(&mut self, send: &mut S) {
        self.send_spm(false, send);
    }

    /// The last SPM of the session (OPT_FIN): the receivers know the lead and that no more
    /// data follows.
    pub fn finish<S: FnMut(&[u8]) -> io::Result<()>>(&mut self, send: &mut S) {
        self.send_spm(true, send);
    }

    /// When [`Source::service`] next has something to do: an SPM, or the next queued repair
    /// once the repair budget allows it.
    pub fn next_deadline(&self) -> u64 {
        let repair = match self.txw.peek_repair().and_then(|sqn| self.txw.get(sqn)) {
            Some(p) => self.repairs.next_ok((p.len() + IP_UDP_HEADERS) as u64),
            None => u64::MAX,
        };
        self.spm.next_deadline().min(repair)
    }

    /// Repairs waiting to be sent.
    pub fn repairs_queued(&self) -> usize {
        self.txw.repairs_queued()
    }

    fn send_spm<S: FnMut(&[u8]) -> io::Result<()>>(&mut self, fin: bool, send: &mut S) {
        let trail = self.txw.trail();
        let lead = self.txw.spm_lead();
        let len = packet::write_spm(&mut self.scratch, self.tsi, self.dport, self.spm_sqn, trail, lead, self.nla, fin);
        self.spm_sqn = self.spm_sqn.wrapping_add(1);
        if send(&self.scratch[..len]).is_ok() {
            self.stats.spm += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const MS: u64 = 1_000_000;

    /// A source on 198.18.0.1 to group 239.192.0.1 with `n` 1000-byte ODATA sent at t = 0.
    fn source_with(n: u32) -> Source {
        let nla = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));
        let dest = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 192, 0, 1)), 7600);
        let tsi = Tsi { gsi: [1, 2, 3, 4, 5, 6], sport: 4000 };
        let mut s = Source::new(&PgmConfig::default(), tsi, nla, dest, 1000, 0);
        let mut pkt = vec![0u8; packet::DATA_HEADER_LEN + 1000];
        for _ in 0..n {
            s.seal(&mut pkt, 1000, 0);
        }
        s
    }

    /// A NAK for `sqns` from a receiver, as the source expects it.
    fn nak(s: &Source, sqns: &[u32]) -> Vec<u8> {
        let mut buf = vec![0u8; 1500];
        let len = packet::write_nak(&mut buf, NakKind::Nak, s.tsi(), s.dport(), sqns, s.nla, s.dest().ip());
        buf.truncate(len);
        buf
    }

    /// What the source sends when the NAK `pkt` arrives at `now`, then serviced then.
    fn on_nak(s: &mut Source, pkt: &[u8], now: u64) -> Vec<Vec<u8>> {
        let from = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)), 7600);
        let mut out = Vec::new();
        let mut send = |p: &[u8]| {
            out.push(p.to_vec());
            Ok(())
        };
        s.on_packet(pkt, from, now, &mut send);
        s.service(now, &mut send);
        out
    }

    /// What `service` at `now` sends.
    fn serve(s: &mut Source, now: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        s.service(now, &mut |p: &[u8]| {
            out.push(p.to_vec());
            Ok(())
        });
        out
    }

    /// Counts RDATA and NCF in what the source sent.
    fn sent_kinds(out: &[Vec<u8>]) -> (usize, usize) {
        let rdata = out.iter().filter(|p| p[4] == packet::kind::RDATA).count();
        let ncf = out.iter().filter(|p| p[4] == packet::kind::NCF).count();
        (rdata, ncf)
    }

    #[test]
    fn a_burst_of_naks_is_repaired_at_the_budget_not_at_once() {
        let mut s = source_with(100);
        // 1052-byte packets on the wire (1000 + 24 + 28): a budget of 105,200 B/s is 100
        // repairs per second, with a bucket of one packet (1 % of the rate is less).
        s.pace_repairs(105_200, 0);
        let ask: Vec<u32> = (0..40).collect();
        let n = nak(&s, &ask);
        // The NCF goes at once; one repair fits the full bucket, the other 39 wait.
        assert_eq!(sent_kinds(&on_nak(&mut s, &n, 10 * MS)), (1, 1));
        assert_eq!(s.repairs_queued(), 39);
        // The next one is due 10 ms later (1052 bytes at 105,200 B/s).
        let due = s.next_deadline();
        assert!(due > 10 * MS && due <= 20 * MS, "next repair due at {due} ns");
        assert_eq!(sent_kinds(&serve(&mut s, due - 1)).0, 0, "not before it is due");
        // 100 ms later only one goes (the bucket holds one: no burst built up meanwhile),
        // then one per 10 ms.
        assert_eq!(sent_kinds(&serve(&mut s, 110 * MS)).0, 1);
        let mut more = 0;
        for t in 1..=10 {
            more += sent_kinds(&serve(&mut s, 110 * MS + t * 10 * MS)).0;
        }
        assert_eq!(more, 10);
        assert_eq!(s.repairs_queued(), 28);
        assert_eq!(s.stats().rdata, 12);
    }

    #[test]
    fn unpaced_repairs_all_go_at_once() {
        let mut s = source_with(100);
        let ask: Vec<u32> = (0..40).collect();
        let n = nak(&s, &ask);
        assert_eq!(sent_kinds(&on_nak(&mut s, &n, 10 * MS)), (40, 1));
        assert_eq!(s.repairs_queued(), 0);
    }
}
