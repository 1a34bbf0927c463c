//! Stream ids with a meaning shared by all formats.

/// [`super::PacketInfo::stream`] of datagrams that are valid but carry no position in any
/// sequence: SPEAD stream-control and descriptor heaps, and Mark5B second halves that have no
/// header and no PSN (with a fill that cannot number them). Their `seq` is always 0.
///
/// Why a stream and not an error: such datagrams are not damaged and must not be counted as
/// invalid, and they must not enter a data stream's ledger (they would be seen as loss or as
/// duplicates there). A receiver should count them apart; one that does not will show them as
/// one stream of duplicates of number 0, which is harmless to the other streams' loss counts.
pub const UNSEQUENCED: u32 = u32::MAX;
