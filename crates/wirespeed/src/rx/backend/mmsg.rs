//! The recvmmsg backend: batches of datagrams from one UDP socket per system call, with
//! optional UDP GRO (coalesced buffers, split again here).

use super::udp::UdpEndpoint;
use super::{Backend, Bound, Member, RecvConfig};
use crate::error::Result;
use crate::sys;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// recvmmsg on a UDP socket, with optional GRO.
pub struct MmsgBackend {
    fd: RawFd,
    batch: sys::RecvBatch,
    nonblocking: bool,
    rxq_ovfl: Option<u64>,
    truncated: u64,
}

impl MmsgBackend {
    /// Wrap a bound socket; `batch` datagrams per call.
    pub fn new(fd: RawFd, batch: usize, nonblocking: bool, rxq_ovfl_enabled: bool) -> Self {
        // GRO buffers can hold up to 64 KiB of coalesced datagrams. The kernel attaches the
        // drop count only once it is non-zero, so an enabled counter starts at 0.
        let rxq_ovfl = rxq_ovfl_enabled.then_some(0);
        MmsgBackend { fd, batch: sys::RecvBatch::new(batch, 65536), nonblocking, rxq_ovfl, truncated: 0 }
    }
}

impl Backend for MmsgBackend {
    const NAME: &'static str = "recvmmsg";
    type Endpoint = UdpEndpoint;

    fn open(cfg: &RecvConfig, member: Member) -> Result<(UdpEndpoint, Bound)> {
        UdpEndpoint::bind_member(cfg, member)
    }

    fn start(endpoint: &UdpEndpoint, cfg: &RecvConfig) -> Self {
        MmsgBackend::new(endpoint.fd(), cfg.batch, cfg.busy_poll, endpoint.rxq_ovfl())
    }

    #[inline]
    fn recv<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, mut f: F) -> io::Result<usize> {
        let n = match self.batch.recv(self.fd, self.nonblocking) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                return Ok(0)
            }
            Err(e) => return Err(e),
        };
        for i in 0..n {
            let meta = self.batch.meta(i);
            if let Some(d) = meta.rxq_ovfl {
                self.rxq_ovfl = Some(d as u64);
            }
            let data = self.batch.data(i);
            if meta.truncated {
                self.truncated += 1;
            }
            match meta.gro_segment {
                Some(seg) if seg > 0 && data.len() > seg as usize => {
                    for chunk in data.chunks(seg as usize) {
                        f(chunk, meta.src);
                    }
                }
                _ => f(data, meta.src),
            }
        }
        Ok(n)
    }

    fn kernel_drops(&self) -> Option<u64> {
        self.rxq_ovfl
    }

    fn truncated(&self) -> u64 {
        self.truncated
    }
}
