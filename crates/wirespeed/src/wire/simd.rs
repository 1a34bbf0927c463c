//! Run-time CPU dispatch for the counter-format kernels: the same safe loops as
//! [`super::counter`], compiled a second time with AVX2 enabled and picked when the CPU has it.
//!
//! The only room outside `sys` allowed `unsafe` code: calling a `#[target_feature]` function
//! is `unsafe` because it is undefined on a CPU without the feature, so every call sits right
//! after the run-time check that makes it sound. It lives beside the counter format, which it
//! serves, so `wire` does not call into `sys` and `sys` does not call back into `wire`.

use super::counter::{fill_words, mismatch_words};

/// Fill `buf` with the counter words `first, first+1, ...`, using AVX2 when the CPU has it.
///
/// The pattern check runs on every received byte, so it must cost far less than the receive
/// itself; the generic x86-64 baseline (SSE2) has no byte shuffle and byte-swaps slowly.
#[inline]
pub fn counter_fill(buf: &mut [u8], first: u64, big_endian: bool) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 support was detected on this CPU just above; the function body is
        // ordinary safe slice code compiled with AVX2 enabled.
        return unsafe { counter_fill_avx2(buf, first, big_endian) };
    }
    fill_words(buf, first, big_endian)
}

/// OR of `word[i] ^ (first + i)` over `buf`'s 8-byte words (zero when the count continues),
/// using AVX2 when the CPU has it.
#[inline]
pub fn counter_mismatch(buf: &[u8], first: u64, big_endian: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 support was detected on this CPU just above; the function body is
        // ordinary safe slice code compiled with AVX2 enabled.
        return unsafe { counter_mismatch_avx2(buf, first, big_endian) };
    }
    mismatch_words(buf, first, big_endian)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn counter_fill_avx2(buf: &mut [u8], first: u64, big_endian: bool) {
    fill_words(buf, first, big_endian)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn counter_mismatch_avx2(buf: &[u8], first: u64, big_endian: bool) -> u64 {
    mismatch_words(buf, first, big_endian)
}
