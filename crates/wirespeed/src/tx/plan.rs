//! How a send run is shaped: datagram length, GSO segments, the burst each wake-up sends and
//! the messages per call, from the rate asked for.

use super::SendConfig;
use crate::units::MAX_UDP_PAYLOAD;

/// Most datagrams the kernel accepts in one GSO super-datagram (UDP_MAX_SEGMENTS).
const GSO_MAX_SEGMENTS: usize = 64;

/// How a run sends: datagram length, GSO segments, burst and messages per call, pace.
pub(super) struct Plan {
    pub(super) pkt_len: usize,
    pub(super) segs: usize,
    pub(super) burst: usize,
    pub(super) msgs: usize,
    pub(super) pps_per_stream: Option<f64>,
    pub(super) gso_used: bool,
}

pub(super) fn plan(cfg: &SendConfig, pkt_len: usize, gso_ok: bool) -> Plan {
    let pps_per_stream = cfg.rate.packets_per_sec(pkt_len).map(|p| p / cfg.streams as f64);
    let gso_used = cfg.gso && gso_ok;
    let segs = if gso_used { (MAX_UDP_PAYLOAD / pkt_len).clamp(1, GSO_MAX_SEGMENTS) } else { 1 };
    let max_burst = if gso_used { segs * 16 } else { 64 };
    let auto = match pps_per_stream {
        // Aim for one send call about every 50 us: bursts stay short, calls stay cheap.
        Some(p) => ((p * 50e-6).round() as usize).clamp(1, max_burst),
        None => max_burst,
    };
    let burst = cfg.burst.unwrap_or(auto).max(1);
    let msgs = burst.div_ceil(segs);
    Plan { pkt_len, segs, burst, msgs, pps_per_stream, gso_used }
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
        assert_eq!((p.segs, p.burst), (1, 50));
        c.gso = true;
        let p = plan(&c, 1080, true);
        assert_eq!(p.segs, 60);
        assert_eq!(p.msgs, 1);
        let p = plan(&c, 8800, true);
        assert_eq!(p.segs, 7);
        assert_eq!(p.msgs, 8);
        let p = plan(&c, 8800, false);
        assert_eq!(p.segs, 1);
        c.rate = Rate::Packets(10.0);
        assert_eq!(plan(&c, 8800, true).burst, 1);
    }
}
