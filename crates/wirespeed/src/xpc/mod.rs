//! XPC: cross-partition communication after the Origin 2000's XPC module (seed 000, 4.2).
//!
//! Reliable, ordered messages between two processes in two partitions of one host, through
//! shared memory that each side may write only in its own half (the other maps it read-only:
//! the seed's firewalls), woken by a doorbell instead of polling (the cross-call interrupt).

/// Where a configuration's XPC pages and channels live: `/run/wirespeed/PREFIX/xpc`.
pub fn dir(prefix: &str) -> std::path::PathBuf {
    crate::testbed::run_dir().join(prefix).join("xpc")
}
