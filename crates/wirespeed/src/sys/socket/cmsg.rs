//! Control messages ("cmsgs"): the one encoder and the one iterator every socket call in
//! wirespeed uses to attach or read the extra facts the kernel passes beside a datagram
//! (GSO segment size on send; drop counter and GRO segment size on receive).
//!
//! Written once here, after the shape of quinn-udp's `cmsg` module, instead of inline with
//! `CMSG_FIRSTHDR`/`CMSG_NXTHDR` pointer walks at each call site: the bounds checks live in one
//! place, and the callers are safe code that match on `(level, type)` and decode bytes.
//!
//! Both work on a [`Space`], a fixed, `cmsghdr`-aligned byte array that the batches preallocate
//! per message. Neither allocates: they run once per datagram on the receive path.

use std::mem::{align_of, size_of};

/// Control-message space for one message: bytes aligned for `cmsghdr`, so that headers can be
/// written at the offsets `CMSG_SPACE` yields. Batches keep one per message, allocated once.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct Space<const N: usize>(pub(crate) [u8; N]);

// The alignment above must satisfy the header's own.
const _: () = assert!(align_of::<libc::cmsghdr>() <= align_of::<Space<8>>());

impl<const N: usize> Space<N> {
    /// An empty (zeroed) space.
    pub(crate) const fn new() -> Self {
        Space([0; N])
    }
}

/// Bytes one control message with `data` payload bytes takes in a buffer, padding included.
pub(crate) const fn space(data: usize) -> usize {
    // SAFETY: CMSG_SPACE is pure arithmetic on its argument; libc marks it unsafe only because
    // it mirrors a C macro.
    unsafe { libc::CMSG_SPACE(data as libc::c_uint) as usize }
}

/// The `cmsg_len` of a control message with `data` payload bytes (header plus payload).
const fn len(data: usize) -> usize {
    // SAFETY: as for `space`: pure arithmetic.
    unsafe { libc::CMSG_LEN(data as libc::c_uint) as usize }
}

/// Where the payload starts inside a control message.
const DATA: usize = len(0);

/// Appends control messages to one message's [`Space`] and points its header at them.
///
/// Dropping the encoder (or calling [`finish`](Encoder::finish)) writes the final length into
/// the header; with nothing pushed the header carries no control buffer at all.
pub(crate) struct Encoder<'a> {
    hdr: &'a mut libc::msghdr,
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Encoder<'a> {
    /// Start an empty control buffer for `hdr` in `space`. `hdr` keeps a pointer into `space`,
    /// so the caller must keep `space` where it is until `hdr` has been handed to the kernel
    /// (the batches own both and never move them).
    pub(crate) fn new<const N: usize>(hdr: &'a mut libc::msghdr, space: &'a mut Space<N>) -> Self {
        hdr.msg_control = space.0.as_mut_ptr().cast();
        Encoder { hdr, buf: &mut space.0, len: 0 }
    }

    /// Append one control message carrying `value`'s bytes.
    ///
    /// # Panics
    /// If the space cannot hold it: the batches size their space for the messages they push,
    /// so this is a programming error, not a run-time condition.
    pub(crate) fn push<T: Copy>(&mut self, level: libc::c_int, ty: libc::c_int, value: T) {
        let need = space(size_of::<T>());
        assert!(self.len + need <= self.buf.len(), "control message space too small");
        // SAFETY: all-zero is a valid cmsghdr (plain integers, possibly padding).
        let mut h: libc::cmsghdr = unsafe { std::mem::zeroed() };
        h.cmsg_len = len(size_of::<T>()) as _;
        h.cmsg_level = level;
        h.cmsg_type = ty;
        let at = self.buf[self.len..].as_mut_ptr();
        // SAFETY: the assert above put `need` = CMSG_SPACE(size_of::<T>()) bytes, which cover
        // the header and the payload at offset DATA, inside `buf` from `at`. Both writes are
        // unaligned writes of plain `Copy` values, so no alignment or drop is involved.
        unsafe {
            std::ptr::write_unaligned(at.cast::<libc::cmsghdr>(), h);
            std::ptr::write_unaligned(at.add(DATA).cast::<T>(), value);
        }
        self.len += need;
    }

    /// Done: write the length into the header (the same as dropping the encoder).
    pub(crate) fn finish(self) {}
}

impl Drop for Encoder<'_> {
    fn drop(&mut self) {
        self.hdr.msg_controllen = self.len as _;
        if self.len == 0 {
            self.hdr.msg_control = std::ptr::null_mut();
        }
    }
}

/// One received control message: its level, type and payload bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cmsg<'a> {
    /// Protocol level (`SOL_SOCKET`, `SOL_UDP`, ...).
    pub(crate) level: libc::c_int,
    /// Message type within the level.
    pub(crate) ty: libc::c_int,
    /// The payload, exactly as long as the kernel said.
    pub(crate) data: &'a [u8],
}

impl Cmsg<'_> {
    /// The first `M` payload bytes, if the payload has that many; callers decode them with
    /// `from_ne_bytes` of the type the kernel documents for the message.
    #[inline]
    pub(crate) fn bytes<const M: usize>(&self) -> Option<[u8; M]> {
        self.data.get(..M).and_then(|b| b.try_into().ok())
    }
}

/// Walks the control messages the kernel wrote into a [`Space`] for one received message.
///
/// Works on the bytes alone, bounded by the space's size and the length the kernel reported,
/// so a malformed or truncated chain ends the walk instead of reading past the buffer.
pub(crate) struct Iter<'a> {
    rest: &'a [u8],
}

impl<'a> Iter<'a> {
    /// The messages the kernel wrote into `space` for the message `hdr` describes: the first
    /// `msg_controllen` bytes (the length the receive left in the header), never more than `N`.
    #[inline]
    pub(crate) fn new<const N: usize>(space: &'a Space<N>, hdr: &libc::msghdr) -> Self {
        #[allow(clippy::unnecessary_cast)] // usize on glibc, socklen_t on musl
        let controllen = hdr.msg_controllen as usize;
        Iter { rest: &space.0[..controllen.min(N)] }
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = Cmsg<'a>;

    #[inline]
    fn next(&mut self) -> Option<Cmsg<'a>> {
        if self.rest.len() < size_of::<libc::cmsghdr>() {
            return None;
        }
        // SAFETY: `rest` holds at least size_of::<cmsghdr>() bytes (checked above); an unaligned
        // read of a plain-integer struct is valid for any bit pattern.
        let h: libc::cmsghdr = unsafe { std::ptr::read_unaligned(self.rest.as_ptr().cast()) };
        let n = h.cmsg_len as usize;
        if n < DATA || n > self.rest.len() {
            self.rest = &[];
            return None;
        }
        let data = &self.rest[DATA..n];
        self.rest = &self.rest[space(n - DATA).min(self.rest.len())..];
        Some(Cmsg { level: h.cmsg_level, ty: h.cmsg_type, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr() -> libc::msghdr {
        // SAFETY: all-zero is a valid msghdr.
        unsafe { std::mem::zeroed() }
    }

    #[test]
    fn what_the_encoder_writes_the_iterator_reads_back() {
        let mut sp = Space::<64>::new();
        let mut h = hdr();
        let mut e = Encoder::new(&mut h, &mut sp);
        e.push(libc::SOL_UDP, libc::UDP_SEGMENT, 1472u16);
        e.push(libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 7u32);
        e.finish();
        let want = space(2) + space(4);
        #[allow(clippy::unnecessary_cast)] // usize on glibc, socklen_t on musl
        let got = h.msg_controllen as usize;
        assert_eq!(got, want);
        let got: Vec<_> = Iter::new(&sp, &h).collect();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].level, got[0].ty), (libc::SOL_UDP, libc::UDP_SEGMENT));
        assert_eq!(got[0].bytes::<2>().map(u16::from_ne_bytes), Some(1472));
        assert_eq!(got[0].bytes::<4>(), None);
        assert_eq!((got[1].level, got[1].ty), (libc::SOL_SOCKET, libc::SO_RXQ_OVFL));
        assert_eq!(got[1].bytes::<4>().map(u32::from_ne_bytes), Some(7));
    }

    #[test]
    fn the_encoder_agrees_with_the_libc_macros() {
        let mut space = Space::<32>::new();
        let mut h = hdr();
        h.msg_controllen = 32;
        let mut e = Encoder::new(&mut h, &mut space);
        e.push(libc::SOL_UDP, libc::UDP_SEGMENT, 9000u16);
        drop(e);
        // SAFETY: `h` points at `space` with the length the encoder wrote; the macros stay inside.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&h);
            assert!(!c.is_null());
            assert_eq!((*c).cmsg_level, libc::SOL_UDP);
            assert_eq!((*c).cmsg_type, libc::UDP_SEGMENT);
            assert_eq!((*c).cmsg_len as usize, libc::CMSG_LEN(2) as usize);
            assert_eq!(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<u16>()), 9000);
            assert!(libc::CMSG_NXTHDR(&h, c).is_null());
        }
    }

    #[test]
    fn nothing_pushed_means_no_control_buffer() {
        let mut space = Space::<32>::new();
        let mut h = hdr();
        drop(Encoder::new(&mut h, &mut space));
        assert!(h.msg_control.is_null());
        assert_eq!(h.msg_controllen, 0);
    }

    fn set_len(space: &mut Space<64>, n: usize) {
        // SAFETY: the space holds a header at offset 0 (aligned, in bounds); only its length
        // field is rewritten.
        unsafe { (*space.0.as_mut_ptr().cast::<libc::cmsghdr>()).cmsg_len = n as _ };
    }

    #[test]
    fn a_malformed_chain_ends_the_walk() {
        let mut space = Space::<64>::new();
        let mut h = hdr();
        let mut e = Encoder::new(&mut h, &mut space);
        e.push(libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1u32);
        drop(e);
        assert_eq!(Iter::new(&space, &h).count(), 1);
        h.msg_controllen = 8;
        assert_eq!(Iter::new(&space, &h).count(), 0, "shorter than a header");
        h.msg_controllen = 64;
        set_len(&mut space, 1000);
        assert_eq!(Iter::new(&space, &h).count(), 0, "longer than the buffer");
        set_len(&mut space, 3);
        assert_eq!(Iter::new(&space, &h).count(), 0, "shorter than its own header");
    }

    #[test]
    #[should_panic(expected = "too small")]
    fn pushing_past_the_space_panics() {
        let mut space = Space::<16>::new();
        let mut h = hdr();
        let mut e = Encoder::new(&mut h, &mut space);
        e.push(libc::SOL_UDP, libc::UDP_SEGMENT, 1u16);
    }
}
