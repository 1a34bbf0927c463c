//! ttcp in the classic style (seed 000's Tables 3-5): bulk TCP or UDP transfer between two
//! hosts, reported in MB/s and, for UDP, the share of data dropped. Being built.
