//! The recvmmsg backend: batches of datagrams from one UDP socket per system call, with
//! optional UDP GRO (coalesced buffers, split again here).
//!
//! With a lease of ring memory ([`Backend::recv_into`]) the same single recvmmsg receives
//! straight into the ring's slots. With GRO on, the lease is given back unused: coalesced
//! buffers never fit a slot, so they keep the copy path.

use super::udp::UdpEndpoint;
use super::{Backend, Bound, Landed, Member, RecvConfig};
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
    gro: bool,
}

impl MmsgBackend {
    /// Wrap a bound socket; `batch` datagrams per call.
    pub fn new(fd: RawFd, batch: usize, nonblocking: bool, rxq_ovfl_enabled: bool) -> Self {
        // GRO buffers can hold up to 64 KiB of coalesced datagrams. The kernel attaches the
        // drop count only once it is non-zero, so an enabled counter starts at 0.
        let rxq_ovfl = rxq_ovfl_enabled.then_some(0);
        MmsgBackend { fd, batch: sys::RecvBatch::new(batch, 65536), nonblocking, rxq_ovfl, truncated: 0, gro: false }
    }

    /// One receive call (into the lease's slots when given); 0 on a timeout.
    #[inline]
    fn call(&mut self, lease: Option<&mut sys::Lease>) -> io::Result<usize> {
        let r = match lease {
            Some(l) => self.batch.recv_lent(self.fd, self.nonblocking, l),
            None => self.batch.recv(self.fd, self.nonblocking),
        };
        match r {
            Ok(n) => Ok(n),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    /// Hand datagrams `from..n` of the last call, from the batch's own buffers, to `f`.
    #[inline]
    fn deliver<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, from: usize, n: usize, mut f: F) {
        for i in from..n {
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
    }
}

impl Backend for MmsgBackend {
    const NAME: &'static str = "recvmmsg";
    type Endpoint = UdpEndpoint;

    fn open(cfg: &RecvConfig, member: Member) -> Result<(UdpEndpoint, Bound)> {
        UdpEndpoint::bind_member(cfg, member)
    }

    fn start(endpoint: &UdpEndpoint, cfg: &RecvConfig) -> Self {
        let mut b = MmsgBackend::new(endpoint.fd(), cfg.batch, cfg.busy_poll, endpoint.rxq_ovfl());
        b.gro = cfg.gro;
        b
    }

    #[inline]
    fn recv<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, f: F) -> io::Result<usize> {
        let n = self.call(None)?;
        self.deliver(0, n, f);
        Ok(n)
    }

    #[inline]
    fn recv_into<F: FnMut(Landed<'_>)>(&mut self, lease: Option<sys::Lease>, mut f: F) -> io::Result<usize> {
        let mut lease = match lease {
            Some(l) if !self.gro => l,
            other => {
                if let Some(l) = other {
                    f(Landed::Return(l));
                }
                return self.recv(|data, src| f(Landed::Copied { data, src }));
            }
        };
        let n = match self.call(Some(&mut lease)) {
            Ok(n) => n,
            Err(e) => {
                f(Landed::Return(lease));
                return Err(e);
            }
        };
        let in_place = self.batch.in_place().min(n);
        for i in 0..in_place {
            // A datagram in place is whole (not truncated, no GRO buffer): only the drop
            // counter and the source matter.
            let meta = self.batch.meta(i);
            if let Some(d) = meta.rxq_ovfl {
                self.rxq_ovfl = Some(d as u64);
            }
            f(Landed::InPlace { data: self.batch.lent_data(&lease, i), src: meta.src, lease: &lease, slot: i });
        }
        f(Landed::Return(lease));
        self.deliver(in_place, n, |data, src| f(Landed::Copied { data, src }));
        Ok(n)
    }

    fn kernel_drops(&self) -> Option<u64> {
        self.rxq_ovfl
    }

    fn truncated(&self) -> u64 {
        self.truncated
    }
}
