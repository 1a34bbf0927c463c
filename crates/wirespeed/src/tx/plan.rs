//! How a send run is shaped: datagram length, GSO segments, the batch each wake-up sends at
//! least, the burst (the most one send call carries) and the messages per call, from the rate
//! asked for.
//!
//! The pacer sleeps on a timer between batches and, on waking, sends what is due (see
//! [`crate::pace::Pacer::wait_due`]), so a wake-up's cost is shared by the batch. The batch is
//! sized so that wake-ups come about every [`WAKE_NS`]: long enough that a wake-up, which
//! costs microseconds of CPU on a virtual machine, is shared by several datagrams at moderate
//! rates, short enough that a burst stays far below what a receive buffer holds. The burst
//! leaves room for a late wake-up and for making up a stall.

use super::SendConfig;
use crate::units::MAX_UDP_PAYLOAD;

/// Most datagrams the kernel accepts in one GSO super-datagram (UDP_MAX_SEGMENTS).
const GSO_MAX_SEGMENTS: usize = 64;

/// Time between a paced stream's wake-ups the batch is sized for.
pub const WAKE_NS: f64 = 250e-6;

/// Time of schedule the burst holds: a batch plus what a late wake-up or a stall leaves due.
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
            let mut least = ((p * WAKE_NS).ceil() as usize).clamp(1, max_burst);
            if gso_used && least > 1 {
                // Whole GSO trains: a partly filled super-datagram costs a send like a full one.
                least = least.next_multiple_of(segs).min(max_burst);
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
        // 1 Gb/s of 8800 B (14.2 kpps): 4 per wake-up, up to 15.
        c.gso = false;
        c.rate = Rate::Bits(1e9);
        let p = plan(&c, 8800, true);
        assert_eq!((p.least, p.burst), (4, 15));
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
