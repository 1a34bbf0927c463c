//! Frames per second an Ethernet link can carry, counting everything that occupies the wire.
//!
//! Seed 003 sizes its latency test by the capacity of a gigabit link: "with an IFG of 96ns the
//! line capacity of a gigabit network is 81,274pps". That figure is 10^9 / (1538 x 8): a
//! 1500-byte IP packet plus the Ethernet header (14), frame check sequence (4), preamble and
//! start delimiter (8) and the inter-frame gap (12). Frames shorter than 64 bytes are padded.

use serde::Serialize;

/// Ethernet preamble plus start-of-frame delimiter, bytes.
pub const PREAMBLE: u64 = 8;
/// Minimum inter-frame gap, bytes (96 bit times).
pub const IFG: u64 = 12;
/// Destination, source and EtherType.
pub const ETH_HEADER: u64 = 14;
/// Frame check sequence.
pub const FCS: u64 = 4;
/// An 802.1Q tag.
pub const VLAN_TAG: u64 = 4;
/// Shortest frame (header to FCS); shorter ones are padded.
pub const MIN_FRAME: u64 = 64;
/// UDP header.
pub const UDP_HEADER: u64 = 8;

/// Which layer a given size describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// The IP packet: what an MTU counts (seed 003's 1500).
    Ip,
    /// The UDP payload: what `wirespeed send --size` counts.
    Udp,
    /// The Ethernet frame from destination address to FCS.
    Frame,
}

/// Everything on the wire for one frame size at one link speed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LineRate {
    /// Link speed, bits/s.
    pub link_bps: f64,
    /// UDP payload bytes (None when the packet is too small to hold a UDP header).
    pub udp_payload: Option<u64>,
    /// IP packet bytes.
    pub ip_packet: u64,
    /// Ethernet frame bytes, header to FCS, after padding.
    pub frame: u64,
    /// Bytes the frame occupies on the wire: frame + preamble + inter-frame gap.
    pub wire: u64,
    /// Frames per second at line rate.
    pub frames_per_s: f64,
    /// Time one frame occupies the wire, ns.
    pub frame_time_ns: f64,
    /// UDP payload bits/s at line rate.
    pub udp_goodput_bps: f64,
    /// IP bits/s at line rate.
    pub ip_bps: f64,
}

/// Compute the line rate for `size` bytes at `layer` on a `link_bps` link (`ip_header` 20 for
/// IPv4, 40 for IPv6; `vlan` adds an 802.1Q tag). Errors name the problem for the user.
pub fn compute(link_bps: f64, size: u64, layer: Layer, ip_header: u64, vlan: bool) -> Result<LineRate, String> {
    if !(link_bps.is_finite() && link_bps > 0.0) {
        return Err("the link speed must be positive, e.g. 1G, 10G, 100G".into());
    }
    let l2_header = ETH_HEADER + if vlan { VLAN_TAG } else { 0 };
    let ip_packet = match layer {
        Layer::Ip => size,
        Layer::Udp => size + UDP_HEADER + ip_header,
        Layer::Frame => size.checked_sub(l2_header + FCS).ok_or_else(|| {
            format!("a {size}-byte frame cannot hold the {}-byte Ethernet header and FCS", l2_header + FCS)
        })?,
    };
    if ip_packet < ip_header {
        return Err(format!("a {ip_packet}-byte IP packet is shorter than its own {ip_header}-byte header"));
    }
    if ip_packet > 65535 {
        return Err(format!("a {ip_packet}-byte IP packet exceeds the IP maximum of 65535 bytes"));
    }
    let frame = (ip_packet + l2_header + FCS).max(MIN_FRAME);
    let wire = frame + PREAMBLE + IFG;
    let frames_per_s = link_bps / (wire as f64 * 8.0);
    let udp_payload = ip_packet.checked_sub(ip_header + UDP_HEADER);
    Ok(LineRate {
        link_bps,
        udp_payload,
        ip_packet,
        frame,
        wire,
        frames_per_s,
        frame_time_ns: wire as f64 * 8.0 / link_bps * 1e9,
        udp_goodput_bps: frames_per_s * udp_payload.unwrap_or(0) as f64 * 8.0,
        ip_bps: frames_per_s * ip_packet as f64 * 8.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_003_gigabit_1500() {
        let r = compute(1e9, 1500, Layer::Ip, 20, false).unwrap();
        assert_eq!(r.wire, 1538);
        assert_eq!(r.frames_per_s.floor(), 81_274.0);
        assert_eq!(r.udp_payload, Some(1472));
        // The same packet given as its UDP payload.
        assert_eq!(compute(1e9, 1472, Layer::Udp, 20, false).unwrap(), r);
    }

    #[test]
    fn hand_computed_values() {
        // Minimum frames: 64 + 20 = 84 bytes on the wire; 10^9 / 672 = 1,488,095.2.
        let r = compute(1e9, 64, Layer::Frame, 20, false).unwrap();
        assert_eq!(r.wire, 84);
        assert_eq!(r.frames_per_s.floor(), 1_488_095.0);
        // A 1-byte UDP payload is padded to the 64-byte minimum.
        assert_eq!(compute(1e9, 1, Layer::Udp, 20, false).unwrap().frame, 64);
        // 10G, 9000-byte jumbo: 9000 + 38 = 9038 bytes; 10^10 / 72304 = 138,304.9.
        let r = compute(10e9, 9000, Layer::Ip, 20, false).unwrap();
        assert_eq!(r.wire, 9038);
        assert_eq!(r.frames_per_s.floor(), 138_304.0);
        assert!((r.udp_goodput_bps - 138_304.9 * 8972.0 * 8.0).abs() / r.udp_goodput_bps < 1e-5);
        // VLAN tag and IPv6 header.
        assert_eq!(compute(1e9, 1500, Layer::Ip, 20, true).unwrap().wire, 1542);
        assert_eq!(compute(1e9, 1452, Layer::Udp, 40, false).unwrap().ip_packet, 1500);
        assert!((compute(100e9, 1500, Layer::Ip, 20, false).unwrap().frame_time_ns - 123.04).abs() < 1e-9);
    }

    #[test]
    fn bad_sizes() {
        assert!(compute(1e9, 10, Layer::Frame, 20, false).is_err());
        assert!(compute(1e9, 10, Layer::Ip, 20, false).is_err());
        assert!(compute(1e9, 70000, Layer::Ip, 20, false).is_err());
        assert!(compute(0.0, 1500, Layer::Ip, 20, false).is_err());
    }
}
