//! The tools `wirespeed bench compare` measures beside wirespeed, one file each: iperf3, the
//! bare recvmmsg loop, tcpdump and netsniff-ng as recorders, the dd ceiling, and the trait and
//! registry they share ([`tool`]). Adding a peer is one new file here and one line in
//! [`tool::TOOLS`].

pub mod bare;
pub mod dd;
pub mod iperf3;
pub mod max;
pub mod netsniff;
pub mod tcpdump;
pub mod tool;
pub mod wirespeed;

pub use iperf3::{iperf3_version, Iperf3, PeerPoint, PeerSetting, IPERF3_MIN_SIZE, IPERF3_MISSING};
