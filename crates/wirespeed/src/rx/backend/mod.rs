//! Receive backends: the ways datagrams get from the kernel into the capture loop.
//!
//! A backend is one file in this directory implementing [`Backend`], plus one line in the
//! `backends!` list below (after the trait). The list gives it a [`BackendKind`] (the name
//! a configuration or a command line chooses it by), makes [`open`] able to set it up, and
//! makes [`Opened::run`] able to start it on the capture thread. The capture loop is generic
//! over [`Backend`]: choosing a backend costs one `match` per run, never a call through a
//! pointer per batch or per datagram.
//!
//! A backend comes to life in two steps, because the two happen on different threads:
//! [`Backend::open`] binds and configures the endpoint (socket, ring, queue) when the
//! [`Listener`](crate::rx::Listener) is made, so that bind errors reach the user before a
//! capture starts and the bound port can be announced; [`Backend::start`] builds the receive
//! state on the capture thread itself, after it is pinned, so that the buffers are first
//! touched on the capture core.

use super::RecvConfig;
use crate::error::{Error, Result};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::str::FromStr;

pub mod udp;

/// One receive path into the capture loop.
pub trait Backend: Sized {
    /// Name shown in reports and accepted by [`BackendKind::from_str`], e.g. `recvmmsg`.
    const NAME: &'static str;
    /// What [`Backend::open`] sets up and the listener keeps until the report is written: it
    /// owns the socket (or ring, or queue), so the kernel's per-socket counters can still be
    /// read after the capture thread is done.
    type Endpoint: Send + Sync;
    /// Bind and configure the endpoint; failures are explained for the user. Returns, beside
    /// it, what the report needs to know about it.
    /// `member` says which of the run's capture threads the endpoint serves: with more than
    /// one, every member joins one group (an SO_REUSEPORT group, a PACKET_FANOUT group) that
    /// the kernel spreads datagrams over.
    fn open(cfg: &RecvConfig, member: Member) -> Result<(Self::Endpoint, Bound)>;
    /// The receive state over an open endpoint, built on the capture thread.
    fn start(endpoint: &Self::Endpoint, cfg: &RecvConfig) -> Self;
    /// Name shown in reports, e.g. `recvmmsg`.
    fn name(&self) -> &'static str {
        Self::NAME
    }
    /// Wait briefly for datagrams and hand each to `f` (after splitting GRO buffers).
    /// Returns how many buffers the kernel returned; 0 on a timeout.
    fn recv<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, f: F) -> io::Result<usize>;
    /// [`recv`](Self::recv), receiving straight into the ring memory `lease` lends (when
    /// given): `f` gets the datagrams that landed in its slots, in order, as
    /// [`Landed::InPlace`], then the lease back ([`Landed::Return`], always exactly once,
    /// also on a timeout or an error), then the datagrams that did not land in place
    /// ([`Landed::Copied`]). The default receives as `recv` does and returns the lease unused,
    /// so a backend without an in-place path is still correct.
    fn recv_into<F: FnMut(Landed<'_>)>(&mut self, lease: Option<crate::sys::Lease>, mut f: F) -> io::Result<usize> {
        if let Some(l) = lease {
            f(Landed::Return(l));
        }
        self.recv(|data, src| f(Landed::Copied { data, src }))
    }
    /// The socket's cumulative drop count as last reported by the kernel (SO_RXQ_OVFL).
    fn kernel_drops(&self) -> Option<u64>;
    /// Datagrams the kernel truncated (larger than the receive buffer).
    fn truncated(&self) -> u64;
    /// The drop count once the run is over, read fresh: a backend that reads its kernel's
    /// counter only now and then (a packet ring reads it when a block says it lost some) reads
    /// it here once more, so that drops in the last moments before a stop are not missed.
    fn final_drops(&mut self) -> Option<u64> {
        self.kernel_drops()
    }
    /// The transport has given up data it will never deliver (PGM's unrecoverable sequence
    /// numbers): the end-of-stream message may have been among them, so `--once` ends after
    /// [`RecvConfig::once_quiet`](crate::rx::RecvConfig::once_quiet) of silence instead of
    /// waiting for it.
    fn end_unproven(&self) -> bool {
        false
    }
    /// The run is over: hand on what the backend still holds (PGM's received data behind a
    /// sequence number still missing), giving up what is missing, so that the ledger sees
    /// every gap. Nothing by default.
    fn drain<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, _f: F) {}
}

/// What a backend hands the capture from [`Backend::recv_into`].
pub enum Landed<'a> {
    /// A datagram that landed in slot `slot` of the lent ring memory: the slice borrows the
    /// lease, so the ring cannot move it while the capture looks at it.
    InPlace {
        /// The datagram's bytes, in the ring.
        data: &'a [u8],
        /// Where it came from.
        src: Option<SocketAddr>,
        /// The lease it landed in.
        lease: &'a crate::sys::Lease,
        /// Its slot.
        slot: usize,
    },
    /// The lease, given back: no more datagrams in place this batch, and no slice of it alive.
    Return(crate::sys::Lease),
    /// A datagram in the backend's own memory (to be copied where it is kept).
    Copied {
        /// The datagram's bytes.
        data: &'a [u8],
        /// Where it came from.
        src: Option<SocketAddr>,
    },
}

/// Which capture thread of a run an endpoint serves, and how many there are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// This thread's index, 0-based.
    pub index: usize,
    /// Capture threads in the run (1: no group).
    pub count: usize,
    /// An id shared by the run's members and no other run's (a fanout group id).
    pub group: u32,
}

impl Member {
    /// The only member of a one-thread run.
    pub const SOLE: Member = Member { index: 0, count: 1, group: 0 };
}

/// What the report needs to know about an opened endpoint, whatever the backend.
#[derive(Clone, Debug, Default)]
pub struct Bound {
    /// The bound address (with the port the kernel chose when binding port 0).
    pub local_addr: Option<SocketAddr>,
    /// Receive buffer the kernel granted, bytes (as getsockopt reports it, i.e. doubled).
    pub rcvbuf_granted: usize,
    /// Whether the kernel delivers GRO-coalesced buffers.
    pub gro: bool,
    /// The socket's inode, which names it in /proc/net/udp where its drop counter lives
    /// (`None` for an endpoint that is not a UDP socket).
    pub udp_inode: Option<u64>,
    /// Things the user should know (buffer clamps, features the kernel refused).
    pub notes: Vec<String>,
}

/// Code to run with a started backend of whichever kind the configuration named: a generic
/// visitor, so that what it runs (the capture loop) is compiled once per backend.
pub trait RunBackend {
    /// What the run returns.
    type Output;
    /// Run with `backend`, started on the calling thread.
    fn run<B: Backend>(self, backend: B) -> Self::Output;
}

/// Declares the backend list: [`BackendKind`], its names, [`Opened`] and [`open`]. One line a
/// backend: `Variant => module::Type,` (the module is declared here too).
macro_rules! backends {
    ($( $(#[$doc:meta])* $kind:ident => $module:ident :: $ty:ident ),+ $(,)?) => {
        $( pub mod $module; pub use $module::$ty; )+

        /// The receive backends, by name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum BackendKind {
            $( $(#[$doc])* $kind, )+
        }

        impl BackendKind {
            /// Every backend, in the order the list gives them.
            pub const ALL: &'static [BackendKind] = &[$(BackendKind::$kind),+];

            /// The name reports show and [`FromStr`] accepts.
            pub fn name(self) -> &'static str {
                match self {
                    $( BackendKind::$kind => <$ty as Backend>::NAME, )+
                }
            }
        }

        /// An opened endpoint of whichever backend the configuration named.
        pub enum Opened {
            $( #[doc = concat!("An endpoint of [`", stringify!($ty), "`].")] $kind(<$ty as Backend>::Endpoint), )+
        }

        impl Opened {
            /// Which backend opened it.
            pub fn kind(&self) -> BackendKind {
                match self {
                    $( Opened::$kind(_) => BackendKind::$kind, )+
                }
            }

            /// Start the backend on the calling thread and hand it to `r`.
            pub fn run<R: RunBackend>(&self, cfg: &RecvConfig, r: R) -> R::Output {
                match self {
                    $( Opened::$kind(ep) => r.run(<$ty as Backend>::start(ep, cfg)), )+
                }
            }
        }

        /// Open the endpoint of backend `kind` as `cfg` says.
        pub fn open(kind: BackendKind, cfg: &RecvConfig, member: Member) -> Result<(Opened, Bound)> {
            match kind {
                $( BackendKind::$kind => {
                    let (ep, bound) = <$ty as Backend>::open(cfg, member)?;
                    Ok((Opened::$kind(ep), bound))
                } )+
            }
        }
    };
}

backends! {
    /// `recvmmsg` on a UDP socket, with optional GRO.
    Mmsg => mmsg::MmsgBackend,
    /// AF_PACKET with a TPACKET_V3 ring and a kernel filter to the port (needs CAP_NET_RAW).
    Packet => packet::PacketBackend,
    /// AF_XDP (copy mode, one queue) fed by an XDP program redirecting the listen address.
    Xdp => xdp::XdpBackend,
    /// PGM over UDP (`--transport pgm`): NAKs for what the path dropped, data in order.
    Pgm => pgm::PgmBackend,
}

impl Default for BackendKind {
    /// recvmmsg: the portable backend, needing no privilege and no special kernel.
    fn default() -> Self {
        BackendKind::Mmsg
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        BackendKind::ALL.iter().copied().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<&str> = BackendKind::ALL.iter().map(|k| k.name()).collect();
            Error::invalid(format!("unknown receive backend {s:?}: give one of {}", names.join(", ")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_names() {
        for &k in BackendKind::ALL {
            assert_eq!(k.to_string().parse::<BackendKind>().unwrap(), k);
        }
        assert_eq!(BackendKind::default().to_string(), "recvmmsg");
        assert!("nonsense".parse::<BackendKind>().unwrap_err().to_string().contains("recvmmsg"));
    }
}
