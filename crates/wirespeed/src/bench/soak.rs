//! A long zero-loss run with a record per minute (seed 001's 24- and 30-minute runs).
//! Not built yet: `wirespeed bench soak` says so and exits 1.
