//! Rate x size x socket buffer sweeps (seed 004's figures). Not built yet.
