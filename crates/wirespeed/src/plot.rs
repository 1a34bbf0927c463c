//! Figures people would rather look at than read: latency heat maps (and, later, the benchmark
//! charts), each drawn once as PNG and once as SVG from the same data.
