//! Benchmark runs like the seeds' reports (issue #7): one probe of a send/receive pair, the
//! search for the highest zero-loss rate, and rate tables. Being built.
