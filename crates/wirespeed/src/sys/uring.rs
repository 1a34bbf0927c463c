//! io_uring for the recorder's writer: several writes of one file in flight from one thread,
//! without write threads. One of the writer's two engines (the other is a few threads calling
//! pwrite); the writer picks one at start.

use std::io;
use std::os::fd::RawFd;

/// A submission queue for the writer's batches of writes.
pub struct WriteRing {
    ring: io_uring::IoUring,
}

impl WriteRing {
    /// A ring for up to `depth` writes in flight; fails where io_uring is missing or forbidden
    /// (old kernels, seccomp, `kernel.io_uring_disabled`), and the writer then uses threads.
    pub fn new(depth: u32) -> io::Result<Self> {
        Ok(WriteRing { ring: io_uring::IoUring::new(depth.next_power_of_two().max(2))? })
    }

    /// Write each `(bytes, file offset)` of `bufs` to `fd`, all submitted at once; each one's
    /// result and nanoseconds from the submission to its completion, in the order given. Short
    /// writes are resubmitted for their remainder. Returns only when no write is in flight, so
    /// the buffers are never used after the borrow ends.
    pub fn write_batch(&mut self, fd: RawFd, bufs: &[(&[u8], u64)]) -> Vec<(io::Result<()>, u64)> {
        let n = bufs.len();
        let mut done = vec![0usize; n];
        let mut out: Vec<Option<(io::Result<()>, u64)>> = (0..n).map(|_| None).collect();
        let t0 = super::monotonic_ns();
        let mut pending = 0usize;
        for i in 0..n {
            match self.push(fd, bufs[i], 0, i) {
                Ok(()) => pending += 1,
                Err(e) => out[i] = Some((Err(e), 0)),
            }
        }
        while pending > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)) => continue,
                Err(e) => {
                    // Every write not completed fails with this error. One already submitted
                    // may still complete later: it only reads the ring's bytes, and the writer
                    // stops and cuts the file back to its last whole record written.
                    let e2 = io::Error::new(e.kind(), e.to_string());
                    for o in out.iter_mut().filter(|o| o.is_none()) {
                        *o = Some((Err(io::Error::new(e2.kind(), e2.to_string())), 0));
                    }
                    return out.into_iter().map(|o| o.expect("filled")).collect();
                }
            }
            let now = super::monotonic_ns();
            let completed: Vec<(u64, i32)> = self.ring.completion().map(|c| (c.user_data(), c.result())).collect();
            for (i, r) in completed {
                let i = i as usize;
                pending -= 1;
                if r < 0 {
                    out[i] = Some((Err(io::Error::from_raw_os_error(-r)), now - t0));
                } else if r == 0 {
                    out[i] = Some((Err(io::Error::from(io::ErrorKind::WriteZero)), now - t0));
                } else {
                    done[i] += r as usize;
                    if done[i] < bufs[i].0.len() {
                        match self.push(fd, bufs[i], done[i], i) {
                            Ok(()) => pending += 1,
                            Err(e) => out[i] = Some((Err(e), now - t0)),
                        }
                    } else {
                        out[i] = Some((Ok(()), now - t0));
                    }
                }
            }
        }
        out.into_iter().map(|o| o.unwrap_or_else(|| (Err(io::Error::other("write lost")), 0))).collect()
    }

    fn push(&mut self, fd: RawFd, (buf, off): (&[u8], u64), done: usize, tag: usize) -> io::Result<()> {
        let rest = &buf[done..];
        let len = u32::try_from(rest.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let e = io_uring::opcode::Write::new(io_uring::types::Fd(fd), rest.as_ptr(), len)
            .offset(off + done as u64)
            .build()
            .user_data(tag as u64);
        // SAFETY: the entry points at `rest`, borrowed by `write_batch` until every write it
        // submitted has completed (it returns only then), and the kernel only reads it.
        unsafe { self.ring.submission().push(&e) }.map_err(|_| io::Error::other("io_uring submission queue full"))
    }
}
