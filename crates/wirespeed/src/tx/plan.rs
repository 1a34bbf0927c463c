//! How a send run is shaped: datagram length, GSO segments, the batch each wake-up sends at
//! least, the burst (the most one send call carries) and the messages per call, from the rate
//! asked for.
//!
//! The pacer sleeps on a timer between batches and, on waking, sends what is due (see
//! [`crate::pace::Pacer::wait_due`]), so a wake-up's cost is shared by the batch. A timed
//! wake-up costs the sender tens of microseconds of CPU on a virtual machine (about 30 us
//! here, against about 5 us to send an 8800-byte datagram over loopback), so wake-ups are
//! made rare where the bursts stay moderate: at moderate rates a batch holds [`WAKE_NS`]
//! (1 ms, the period iperf3's pacing timer fires at) of schedule, as long as all streams'
//! batches together stay under [`BATCH_BYTES`]. At high rates the batch is cut to that bound,
//! but a wake-up never comes more often than every [`MIN_WAKE_NS`] (the batch then holds
//! 250 us of schedule, more than the bound, as before this pacing: there a wake-up's cost is
//! shared by many datagrams anyway). The burst, the most one wake-up sends after a late
//! wake-up, is 1 ms of schedule or the batch if larger; a longer stall is made up by further
//! calls at the bounded catch-up speed. `--burst` bounds both, for a finer-grained stream.

use super::SendConfig;
use crate::units::MAX_UDP_PAYLOAD;

/// Most datagrams the kernel accepts in one GSO super-datagram (UDP_MAX_SEGMENTS).
const GSO_MAX_SEGMENTS: usize = 64;

/// Time between a paced stream's wake-ups the batch is sized for, at moderate rates.
pub const WAKE_NS: f64 = 1e-3;

/// Shortest time between wake-ups: at high rates, where [`WAKE_NS`] of schedule would exceed
/// [`BATCH_BYTES`], the batch holds this much schedule (and so more than the bound).
pub const MIN_WAKE_NS: f64 = 250e-6;

/// Most payload bytes the batches of all streams hold together at moderate rates: iperf3's
/// 1 ms batch at 1 Gb/s. Over loopback the kernel charges a receive buffer about 16 KiB per
/// 8800-byte datagram, so such a burst fills a default 212,992-byte buffer that nobody
/// drains; a receiver that reads as the burst arrives (on another core) keeps up.
pub const BATCH_BYTES: usize = 128 * 1024;

/// Time of schedule the burst holds: a batch, or what a late wake-up leaves due, if more.
const BURST_S: f64 = 1e-3;

/// Most messages per paced send call without GSO (sendmmsg takes up to 1024): room for 1 ms
/// of schedule up to 256 kpps per stream.
const MAX_MESSAGES: usize = 256;

/// Messages per call of an unpaced (flat out) stream without GSO.
const FLAT_OUT_MESSAGES: usize = 64;

/// How a run sends: datagram length, GSO segments, batch, burst and messages per call, pace.
pub(super) struct Plan {
    pub(super) pkt_len: usize,
    pub(super) segs: usize,
    /// The fewest datagrams a paced wake-up sends (it sends more when more are due).
    pub(super) least: usize,
    /// The most datagrams one wake-up (one send call) sends.
    pub(super) burst: usize,
    pub(super) msgs: usize,
    pub(super) pps_per_stream: Option<f64>,
    pub(super) gso_used: bool,
}

pub(super) fn plan(cfg: &SendConfig, pkt_len: usize, gso_ok: bool) -> Plan {
    let pps_per_stream = cfg.rate.packets_per_sec(pkt_len).map(|p| p / cfg.streams as f64);
    let gso_used = cfg.gso && gso_ok;
    let segs = if gso_used { (MAX_UDP_PAYLOAD / pkt_len).clamp(1, GSO_MAX_SEGMENTS) } else { 1 };
    let max_burst = if gso_used { segs * 16 } else { MAX_MESSAGES };
    let (least, auto) = match pps_per_stream {
        Some(p) => {
            let bound = (BATCH_BYTES / cfg.streams.max(1) / pkt_len).max(1);
            let floor = (p * MIN_WAKE_NS).ceil() as usize;
            let whole = (p * WAKE_NS).ceil() as usize;
            let mut least = whole.min(bound).max(floor).clamp(1, max_burst);
            if gso_used && least > 1 {
                // Whole GSO trains: a partly filled super-datagram costs a send like a full one.
                // Rounded up, unless the bytes bound set the batch: then down, never past it.
                let by_bound = bound < whole && bound > floor && least == bound;
                least = if by_bound { (least / segs).max(1) * segs } else { least.next_multiple_of(segs) };
                least = least.min(max_burst);
            }
            (least, ((p * BURST_S).ceil() as usize).clamp(least, max_burst))
        }
        None => {
            let b = if gso_used { max_burst } else { FLAT_OUT_MESSAGES };
            (b, b)
        }
    };
    let burst = cfg.burst.unwrap_or(auto).max(1);
    let least = least.min(burst);
    let msgs = burst.div_ceil(segs);
    Plan { pkt_len, segs, least, burst, msgs, pps_per_stream, gso_used }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Rate;

    #[test]
    fn burst_plan() {
        let mut c = SendConfig::new("127.0.0.1:9".parse().unwrap());
        c.rate = Rate::Packets(1e6);
        let p = plan(&c, 1080, true);
        // 250 us at 1 Mpps per wake-up; 1 ms of schedule is more than a call may carry.
        assert_eq!((p.segs, p.least, p.burst, p.msgs), (1, 250, 256, 256));
        c.gso = true;
        let p = plan(&c, 1080, true);
        assert_eq!(p.segs, 60);
        assert_eq!((p.least, p.burst, p.msgs), (300, 960, 16));
        let p = plan(&c, 8800, true);
        assert_eq!(p.segs, 7);
        assert_eq!((p.least, p.burst, p.msgs), (112, 112, 16));
        let p = plan(&c, 8800, false);
        assert_eq!(p.segs, 1);
        c.rate = Rate::Packets(10.0);
        assert_eq!((plan(&c, 8800, true).least, plan(&c, 8800, true).burst), (1, 1));
        // 1 Gb/s of 8800 B (14.2 kpps): 1 ms of schedule is 15 datagrams, over the 128 KiB a
        // batch holds, so 14 per wake-up; up to 1 ms of schedule after a late one.
        c.gso = false;
        c.rate = Rate::Bits(1e9);
        let p = plan(&c, 8800, true);
        assert_eq!((p.least, p.burst), (14, 15));
        // 1 Gb/s of 1080 B (116 kpps): a whole millisecond per wake-up.
        let p = plan(&c, 1080, true);
        assert_eq!((p.least, p.burst), (116, 116));
        // Four streams share the bound: 3 of 8800 B each per wake-up at 1 Gb/s each.
        c.streams = 4;
        c.rate = Rate::Bits(4e9);
        assert_eq!(plan(&c, 8800, true).least, 4);
        c.streams = 1;
        // 100 Mb/s of 1080 B: 12 per wake-up, as iperf3's 1 ms pacing timer sends.
        c.rate = Rate::Bits(1e8);
        assert_eq!(plan(&c, 1080, true).least, 12);
        // 5 Gb/s of 8800 B: the bytes bound would wake every 197 us; 250 us is the floor.
        c.rate = Rate::Bits(5e9);
        let p = plan(&c, 8800, true);
        assert_eq!((p.least, p.burst), (18, 72));
        // GSO at 1.5 Gb/s of 1400 B: the bound (93) is not rounded up to whole 46-segment
        // trains past itself, but down.
        c.gso = true;
        c.rate = Rate::Bits(1.5e9);
        let p = plan(&c, 1400, true);
        assert_eq!((p.segs, p.least), (46, 92));
        c.gso = false;
        c.rate = Rate::Bits(1e9);
        // A burst given by hand bounds the batch too.
        c.burst = Some(2);
        let p = plan(&c, 8800, true);
        assert_eq!((p.least, p.burst, p.msgs), (2, 2, 2));
        // Flat out: full calls.
        c.burst = None;
        c.rate = Rate::Max;
        assert_eq!((plan(&c, 8800, true).least, plan(&c, 8800, true).burst), (64, 64));
    }
}
