//! Round-trip latency at fixed packet rates (seed 003): the probe, the reflector, the open-loop
//! pinger, the heat-map grid, and the Ethernet line-rate arithmetic that sizes such tests.

pub mod grid;
pub mod linerate;
pub mod pgm;
pub mod ping;
pub mod probe;
pub mod reflect;
pub mod report;
pub mod sweep;
