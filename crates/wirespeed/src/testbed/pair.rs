//! The old home of [`Pair`], a partition pair made for one run: it is now the partitions kind of
//! [`super::place::Place`] and lives in [`super::place`]. This path stays so code that names
//! `testbed::pair::Pair` keeps compiling; new code places its children through a `Place`.

pub use super::place::Pair;
