//! XPC: cross-partition communication after the Origin 2000's XPC module (seed 000, 4.2).
//!
//! Reliable, ordered messages between two processes in two partitions of one host, through
//! shared memory that each side may write only in its own half (the other maps it read-only:
//! the seed's firewalls), woken by a doorbell instead of polling (the cross-call interrupt).
