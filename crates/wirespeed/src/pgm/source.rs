//! The PGM source: original data into the transmit window, NAKs answered with an NCF and
//! repaired with RDATA, SPMs that tell the receivers where the window's edges are and where to
//! send NAKs.
//!
//! No sockets here: whoever owns them passes packets in ([`Source::on_packet`]) and a
//! `send` function out, so the same engine serves `send`, `ping` and `reflect`, and the unit
//! tests drive it packet by packet. Every buffer is allocated in [`Source::new`]; the per-packet
//! path allocates nothing.

use super::packet::{self, NakKind, Packet};
use super::txw::{RepairBudget, SpmSchedule, TokenBucket, TxWindow};
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
    /// Asked for again while already queued, or within the hold-off of their last repair: not
    /// sent twice.
    pub nak_eliminated: u64,
    /// Of those, asked for within the hold-off of their last repair (`--pgm-repair-holdoff`):
    /// one receiver asks again only after NAK_RDATA_IVL, so many of these mean NAKs replayed.
    pub nak_held_off: u64,
    /// Asked for when the repair budget had no room (`--pgm-repair-share`): not repaired then.
    /// Honest loss within the budget never gets here; NAKs beyond it are more than receivers
    /// could have lost.
    pub nak_over_budget: u64,
    /// Asked for after they had left the transmit window: unrecoverable at the receiver.
    pub nak_out_of_window: u64,
    /// Asked for before they were sent (ahead of the lead): no receiver can have lost them.
    pub nak_not_sent: u64,
    /// NAKs for another session, or naming another source or group address than ours (a
    /// forged or misdirected NAK): ignored, as OpenPGM's source ignores them.
    pub nak_refused: u64,
    /// NAKs (and SPM requests) from an address no receiver can have: unspecified, multicast,
    /// broadcast, port 0, or the source's own NAK address. Ignored.
    pub nak_bad_source: u64,
    /// SPM requests not answered because one was answered less than the hold-off ago (that
    /// SPM, multicast, answers them too).
    pub spmr_held_off: u64,
    /// Packets that were not PGM at all, or broken (checksum, lengths, options).
    pub malformed: u64,
}

impl SourceStats {
    /// Why the NAKs this source answered ask for more than its receivers can have lost, one
    /// reason each (empty: nothing implausible). Honest receivers never NAK a sequence number
    /// not yet sent, nor from an impossible address, and within the budget's share of the data
    /// (25 % by default, far above what a path that works loses) never run it dry; one
    /// receiver asks again for a repair only after its NAK_RDATA_IVL, so more NAKs held off
    /// than repairs sent means NAKs repeated faster than any receiver repeats them.
    pub fn implausible_naks(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.nak_over_budget > 0 {
            why.push(format!(
                "{} NAKed sequence number(s) beyond the repair budget (more repairs asked for than its share of the data)",
                self.nak_over_budget
            ));
        }
        if self.nak_not_sent > 0 {
            why.push(format!("{} NAKed sequence number(s) not sent yet", self.nak_not_sent));
        }
        if self.nak_held_off > self.rdata {
            why.push(format!(
                "{} NAKed sequence number(s) asked for again within the hold-off of their repair, more than the {} repairs sent",
                self.nak_held_off, self.rdata
            ));
        }
        if self.nak_bad_source > 0 {
            why.push(format!("{} NAK(s) from an address no receiver can have", self.nak_bad_source));
        }
        why
    }

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
    holdoff_ns: u64,
    stats: SourceStats,
    last_nak_ns: u64,
    /// The RDATA pace (`pace_repairs`); unlimited until set.
    repairs: TokenBucket,
    /// The RDATA budget earned by the data sent (`PgmConfig::repair_share`).
    budget: RepairBudget,
    /// The default budget's burst, for judging a source that runs without a budget.
    default_cap: u64,
    /// When the first and the last ODATA went (monotonic ns): the session's mean data rate.
    first_odata_ns: u64,
    last_odata_ns: u64,
    /// After [`Source::end_of_data`]: until when the budget was paid for the time since.
    paid_after_data_ns: Option<u64>,
    /// When an SPMR was last answered.
    last_spmr_answer_ns: Option<u64>,
    /// Where receivers send NAKs (the NLA at the session's port): nothing the source sends
    /// comes from there, so a NAK claiming to is forged.
    own_nak_addr: SocketAddr,
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
            // A repair sent less than the hold-off ago answers every NAK for the same packet
            // that is still on its way (RFC 3208 NAK elimination), and replayed NAKs get it
            // once per hold-off at most.
            holdoff_ns: cfg.repair_holdoff_ns(),
            stats: SourceStats::default(),
            last_nak_ns: 0,
            repairs: TokenBucket::new(0, 0, now_ns),
            budget: match cfg.repair_share {
                Some(p) => RepairBudget::new(p, u64::from(cfg.repair_burst_sqns()) * (slot + IP_UDP_HEADERS) as u64),
                None => RepairBudget::unlimited(),
            },
            default_cap: u64::from(cfg.repair_burst_sqns()) * (slot + IP_UDP_HEADERS) as u64,
            first_odata_ns: 0,
            last_odata_ns: 0,
            paid_after_data_ns: None,
            last_spmr_answer_ns: None,
            own_nak_addr: SocketAddr::new(nla, dest.port()),
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

    /// The repair budget (its share, cap and what it holds now).
    pub fn budget(&self) -> &RepairBudget {
        &self.budget
    }

    /// The most RDATA bytes on the wire (IP and UDP headers counted) the budget can have let
    /// out so far: its burst plus its share of the ODATA sent (and of the mean data rate over
    /// the time since [`Source::end_of_data`]). `u64::MAX` when unlimited.
    pub fn repair_bound_bytes(&self) -> u64 {
        self.budget.bound()
    }

    /// The data has ended (the sender lingers for NAKs now): from here the budget goes on
    /// earning as if the data went on at the session's mean rate, so that the last datagrams,
    /// NAKed after the data ended, are repaired too once the burst is spent (with nothing
    /// earning they could never be).
    pub fn end_of_data(&mut self, now_ns: u64) {
        self.paid_after_data_ns = Some(now_ns.max(self.last_odata_ns));
    }

    /// Pay the budget for the time since the data ended (see [`Source::end_of_data`]).
    fn earn_after_data(&mut self, now_ns: u64) {
        let Some(paid) = self.paid_after_data_ns else { return };
        let span = self.last_odata_ns.saturating_sub(self.first_odata_ns);
        if now_ns <= paid || span == 0 {
            return;
        }
        let wire = self.stats.odata_bytes + self.stats.odata * IP_UDP_HEADERS as u64;
        let bytes = (wire as u128 * (now_ns - paid) as u128 / span as u128).min(u64::MAX as u128) as u64;
        self.budget.earn(bytes);
        self.paid_after_data_ns = Some(now_ns);
    }

    /// The RDATA bytes sent so far as the budget counts them (IP and UDP headers included).
    pub fn repair_wire_bytes(&self) -> u64 {
        self.stats.rdata_bytes + self.stats.rdata * IP_UDP_HEADERS as u64
    }

    /// Why the NAKs asked for more than the receivers can have lost ([`SourceStats::implausible_naks`]),
    /// and, for a source without a budget, whether its repairs went beyond what the default
    /// budget would have allowed: a quarter of the data plus the burst.
    pub fn implausible_naks(&self) -> Vec<String> {
        let mut why = self.stats.implausible_naks();
        if !self.budget.is_limited() {
            let mut reference = RepairBudget::new(super::DEFAULT_REPAIR_SHARE, self.default_cap);
            let wire = self.repair_wire_bytes();
            reference.earn(self.stats.odata_bytes + self.stats.odata * IP_UDP_HEADERS as u64);
            let bound = reference.bound();
            if wire > bound {
                why.push(format!(
                    "repairs of {wire} bytes, beyond the default budget's {bound} ({} % of the data plus the burst)",
                    super::DEFAULT_REPAIR_SHARE
                ));
            }
        }
        why
    }

    /// The re-repair hold-off, ns.
    pub fn holdoff_ns(&self) -> u64 {
        self.holdoff_ns
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
        self.budget.earn((len + IP_UDP_HEADERS) as u64);
        self.spm.on_data(now_ns);
        if self.stats.odata == 0 {
            self.first_odata_ns = now_ns;
        }
        self.last_odata_ns = now_ns;
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
        from: SocketAddr,
        now_ns: u64,
        send: &mut S,
    ) {
        if !could_be_a_receiver(from) || from == self.own_nak_addr {
            self.stats.nak_bad_source += 1;
            return;
        }
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
                self.earn_after_data(now_ns);
                let budget = &mut self.budget;
                let mut admit = |len: usize| budget.take((len + IP_UDP_HEADERS) as u64);
                let out = self.txw.on_nak(list, now_ns, self.holdoff_ns, &mut admit);
                self.stats.nak_eliminated += (out.already_queued + out.held_off) as u64;
                self.stats.nak_held_off += out.held_off as u64;
                self.stats.nak_over_budget += out.over_budget as u64;
                self.stats.nak_out_of_window += out.out_of_window as u64;
                self.stats.nak_not_sent += out.not_sent as u64;
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
                // One SPM per hold-off answers every receiver that asked (it is multicast); more
                // would let anyone make the source multicast an SPM per forged SPMR.
                if self.last_spmr_answer_ns.is_some_and(|t| now_ns.saturating_sub(t) < self.holdoff_ns) {
                    self.stats.spmr_held_off += 1;
                } else {
                    self.last_spmr_answer_ns = Some(now_ns);
                    self.send_spm(false, send);
                }
            }
            Packet::Nak { .. } | Packet::Spmr { .. } => self.stats.nak_refused += 1,
            // Our own multicast coming back, or another source's session: not ours to answer.
            _ => {}
        }
    }

    /// Send what is due: every queued repair as RDATA, and an SPM when the schedule says so.
    pub fn service<S: FnMut(&[u8]) -> io::Result<()>>(&mut self, now_ns: u64, send: &mut S) {
        self.earn_after_data(now_ns);
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

/// Whether a packet from `from` can have been sent by a receiver: a unicast address and a
/// port. A packet claiming to come from a group, the broadcast or the unspecified address,
/// or port 0, was forged (or is noise), and only an attacker gains from answering it.
fn could_be_a_receiver(from: SocketAddr) -> bool {
    let ip = from.ip();
    let bcast = matches!(ip, IpAddr::V4(a) if a.is_broadcast());
    from.port() != 0 && !ip.is_unspecified() && !ip.is_multicast() && !bcast
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

    #[test]
    fn forged_naks_for_the_whole_window_get_the_budget_and_no_more() {
        // 10,000 x 1000 B sent (window 8192 holds the last 8192), then a forger NAKs every
        // sqn of the window, 63 at a time, again and again over 2 s of (simulated) time.
        let mut s = source_with(10_000);
        let wire = 1000 + packet::DATA_HEADER_LEN as u64 + IP_UDP_HEADERS as u64;
        // Default: 25 % of the data, a burst of a quarter of the window (2048 datagrams).
        assert_eq!(s.budget().share_percent(), 25);
        assert_eq!(s.budget().cap(), 2048 * wire);
        let mut sent_rdata = 0;
        let trail = 10_000 - 8192;
        for round in 0..1000u64 {
            let first = trail + (round as u32 * 63) % 8000;
            let ask: Vec<u32> = (first..first + 63).collect();
            sent_rdata += sent_kinds(&{
                let n = nak(&s, &ask);
                on_nak(&mut s, &n, round * 2 * MS)
            })
            .0;
        }
        // No data was sent meanwhile, so nothing more was earned: the burst, exactly.
        assert_eq!(sent_rdata, 2048);
        assert_eq!(s.stats().rdata, 2048);
        assert!(s.repair_wire_bytes() <= s.repair_bound_bytes());
        let st = *s.stats();
        assert_eq!(st.nak_packets, 1000);
        assert_eq!(st.nak_sqns, 63_000);
        assert_eq!(st.nak_sqns, 2048 + st.nak_eliminated + st.nak_over_budget);
        let why = st.implausible_naks();
        assert!(why.iter().any(|w| w.contains("beyond the repair budget")), "{why:?}");
        // Data earns more: 1000 datagrams x 25 % = 250 repairs.
        let mut pkt = vec![0u8; packet::DATA_HEADER_LEN + 1000];
        for _ in 0..1000 {
            s.seal(&mut pkt, 1000, 3_000 * MS);
        }
        let ask: Vec<u32> = (11_000 - 400..11_000).collect();
        let mut got = 0;
        for chunk in ask.chunks(50) {
            got += sent_kinds(&{
                let n = nak(&s, chunk);
                on_nak(&mut s, &n, 3_001 * MS)
            })
            .0;
        }
        assert_eq!(got, 250);
        assert!(s.repair_wire_bytes() <= s.repair_bound_bytes());
    }

    #[test]
    fn honest_loss_within_the_budget_is_repaired_at_once_and_is_plausible() {
        let mut s = source_with(5000);
        // A burst of 2000 lost (within the 2048 burst), NAKed one by one as a receiver does.
        let mut sent = 0;
        for sqn in 1000..3000 {
            sent += sent_kinds(&{
                let n = nak(&s, &[sqn]);
                on_nak(&mut s, &n, 10 * MS)
            })
            .0;
        }
        assert_eq!(sent, 2000);
        // The receiver lost 10 of those repairs too, and asks again after NAK_RDATA_IVL
        // (50 ms): past the 25 ms hold-off, so they are repaired again.
        for sqn in 1000..1010 {
            sent += sent_kinds(&{
                let n = nak(&s, &[sqn]);
                on_nak(&mut s, &n, 60 * MS)
            })
            .0;
        }
        assert_eq!(sent, 2010);
        assert_eq!(s.stats().nak_over_budget, 0);
        assert!(s.stats().implausible_naks().is_empty(), "{:?}", s.stats().implausible_naks());
    }

    #[test]
    fn replayed_naks_are_held_off_and_flagged() {
        let mut s = source_with(100);
        let n = nak(&s, &[5, 6, 7]);
        assert_eq!(sent_kinds(&on_nak(&mut s, &n, 10 * MS)), (3, 1));
        // The same NAK 100 times within the hold-off (25 ms, half of --nak-rdata): an NCF
        // each, no RDATA.
        for k in 0..100 {
            assert_eq!(sent_kinds(&on_nak(&mut s, &n, 10 * MS + k * 100_000)), (0, 1));
        }
        let st = *s.stats();
        assert_eq!((st.rdata, st.nak_held_off), (3, 300));
        assert!(st.implausible_naks().iter().any(|w| w.contains("within the hold-off")));
        // After the hold-off, once more.
        assert_eq!(sent_kinds(&on_nak(&mut s, &n, 36 * MS)), (3, 1));
    }

    #[test]
    fn naks_from_impossible_addresses_or_for_unsent_data_are_refused_and_counted() {
        let mut s = source_with(100);
        let n = nak(&s, &[5]);
        let mut out = Vec::new();
        let mut send = |p: &[u8]| {
            out.push(p.to_vec());
            Ok(())
        };
        for from in ["0.0.0.0:7600", "239.192.0.1:7600", "255.255.255.255:7600", "198.18.0.2:0", "198.18.0.1:7600"] {
            s.on_packet(&n, from.parse().unwrap(), 0, &mut send);
        }
        s.service(0, &mut send);
        assert!(out.is_empty(), "nothing answered");
        assert_eq!((s.stats().nak_bad_source, s.stats().nak_packets), (5, 0));
        // Sqns ahead of the lead (99): never sent.
        let n = nak(&s, &[100, 101, 5000]);
        assert_eq!(sent_kinds(&on_nak(&mut s, &n, MS)), (0, 1));
        assert_eq!(s.stats().nak_not_sent, 3);
        let why = s.stats().implausible_naks();
        assert_eq!(why.len(), 2, "{why:?}");
    }

    #[test]
    fn without_a_budget_every_nak_is_repaired() {
        let cfg = PgmConfig { repair_share: None, ..PgmConfig::default() };
        let nla = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));
        let dest = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 192, 0, 1)), 7600);
        let mut s = Source::new(&cfg, Tsi { gsi: [9; 6], sport: 1 }, nla, dest, 1000, 0);
        let mut pkt = vec![0u8; packet::DATA_HEADER_LEN + 1000];
        for _ in 0..8192 {
            s.seal(&mut pkt, 1000, 0);
        }
        let all: Vec<u32> = (0..8192).collect();
        let mut sent = 0;
        for c in all.chunks(63) {
            sent += sent_kinds(&{
                let n = nak(&s, c);
                on_nak(&mut s, &n, MS)
            })
            .0;
        }
        assert_eq!(sent, 8192);
        assert_eq!(s.repair_bound_bytes(), u64::MAX);
        // 8192 repairs of 8192 sent: beyond a quarter plus the 2048 burst, so flagged.
        let why = s.implausible_naks();
        assert!(why.len() == 1 && why[0].contains("beyond the default budget"), "{why:?}");
    }

    #[test]
    fn after_the_data_the_budget_earns_at_the_mean_data_rate() {
        // 1000 datagrams over 999 ms (1 kpps, 1052 B on the wire each), then the data ends.
        let nla = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));
        let dest = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 192, 0, 1)), 7600);
        let cfg = PgmConfig { repair_burst: Some(10), ..PgmConfig::default() };
        let mut s = Source::new(&cfg, Tsi { gsi: [3; 6], sport: 2 }, nla, dest, 1000, 0);
        let mut pkt = vec![0u8; packet::DATA_HEADER_LEN + 1000];
        for k in 0..1000 {
            s.seal(&mut pkt, 1000, k * MS);
        }
        let wire = 1052u64;
        assert_eq!(s.repair_bound_bytes(), 10 * wire + 1000 * wire / 4);
        // Spend the burst: 10 repairs, the 11th refused.
        let ask: Vec<u32> = (900..911).collect();
        let n = nak(&s, &ask);
        assert_eq!(sent_kinds(&on_nak(&mut s, &n, 999 * MS)).0, 10);
        assert_eq!(s.stats().nak_over_budget, 1);
        // Without end_of_data nothing more is earned, however long.
        let n = nak(&s, &[910]);
        assert_eq!(sent_kinds(&on_nak(&mut s, &n, 5_000 * MS)).0, 0);
        // After it, 25 % of 1000 x 1052 B per 999 ms: 4 ms pay for one repair (1052 B).
        s.end_of_data(5_000 * MS);
        assert_eq!(sent_kinds(&on_nak(&mut s, &n, 5_003 * MS)).0, 0, "3 ms earn 789 bytes");
        assert_eq!(sent_kinds(&on_nak(&mut s, &n, 5_005 * MS)).0, 1);
        let bound = s.repair_bound_bytes();
        assert!(s.repair_wire_bytes() <= bound);
        assert!(bound <= 10 * wire + 1000 * wire / 4 + 5 * wire / 4 + 2, "{bound}");
    }

    #[test]
    fn spm_requests_are_answered_once_per_hold_off() {
        let mut s = source_with(10);
        let mut buf = [0u8; 64];
        let n = packet::write_spmr(&mut buf, s.tsi(), s.dport());
        let mut spms = 0;
        for k in 0..100u64 {
            let out = on_nak(&mut s, &buf[..n], 10 * MS + k * MS / 10);
            spms += out.iter().filter(|p| p[4] == packet::kind::SPM).count();
        }
        // 100 SPMRs within 10 ms: one answered; the other two SPMs are the heartbeats after
        // the data at t = 0 (the 8 ms one, checked late at 10 ms, and the 16 ms one).
        assert_eq!(s.stats().spmr_held_off, 99);
        assert_eq!(spms, 3);
        // 26 ms after the answer, the next SPMR is answered.
        let out = on_nak(&mut s, &buf[..n], 36 * MS);
        assert!(out.iter().any(|p| p[4] == packet::kind::SPM));
        assert_eq!(s.stats().spmr_held_off, 99);
    }
}
