//! The ring's memory: one anonymous mapping, populated (every page faulted in before the
//! first datagram) and locked where the limits allow, so that capture never takes a page fault.

use super::RING_ALIGN;
use std::io;

/// Anonymous memory mapped once, populated up front and unmapped on drop.
pub struct RingMemory {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
    /// The pages are locked in RAM (mlock succeeded).
    pub locked: bool,
}

// SAFETY: the mapping is plain memory owned by this value; access to its bytes is governed by
// the producer/consumer protocol below, which never lets two threads touch the same bytes
// concurrently.
unsafe impl Send for RingMemory {}
// SAFETY: as above.
unsafe impl Sync for RingMemory {}

impl RingMemory {
    /// Map `len` bytes (a multiple of [`RING_ALIGN`]), fault every page in, and try to lock them.
    pub(super) fn new(len: usize, lock: bool) -> io::Result<Self> {
        if len == 0 || len % RING_ALIGN != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "ring size must be a non-zero multiple of 4 KiB"));
        }
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = ptr as *mut u8;
        // MAP_POPULATE maps the pages but may leave them shared with the zero page until first
        // written; touch one byte per page so that the first second of capture never faults.
        let mut off = 0;
        while off < len {
            // SAFETY: off < len, inside the mapping we just created and own exclusively.
            unsafe { ptr.add(off).write_volatile(0) };
            off += RING_ALIGN;
        }
        // SAFETY: the range is exactly our mapping; failure (RLIMIT_MEMLOCK) is reported.
        let locked = lock && unsafe { libc::mlock(ptr as *const libc::c_void, len) } == 0;
        Ok(RingMemory { ptr, len, locked })
    }
}

impl Drop for RingMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `new`; no references outlive self
        // because producer and consumer hold an Arc to the shared state that owns this.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}
