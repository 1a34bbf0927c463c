//! The raw devices' transport over XPC: [`XpcDevLink`] implements the `testbed::xplink`
//! [`DevLink`] contract for one node. Device `d` (00..0f) of remote `r` is channel `d + 1` to
//! `r` (channel 0 is kept for control); a write becomes one or more messages (up to 64 KiB
//! each, out of line beyond the slot's immediate bytes), the end-of-stream marker is a message
//! of its own kind, and a read shorter than a message keeps the rest for the next one.
//!
//! Devices of a remote exist from its first activation on, forever (the seed's hardware graph
//! never removes them); deactivation closes the remote's channels, after which every operation
//! on its devices fails at once with ENOTCONN "partition R is deactivated", and the peer's
//! readers get the bytes sent before, then ENOTCONN. A later activation opens new channels (a
//! new generation) and the devices work again once the peer has activated too.

use super::{Channel, Kind, Node};
use crate::testbed::xplink::{DevLink, DEVICES};
use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use wirespeed::Result;

/// Largest message one write is cut into.
const CHUNK: usize = 64 << 10;

struct Dev {
    chan: Channel,
    /// The rest of a message a short read did not take, from `at`.
    rest: Vec<u8>,
    at: usize,
}

struct Remote {
    devs: Option<Vec<Dev>>,
}

struct Links {
    ever: BTreeSet<u32>,
    remotes: HashMap<u32, Remote>,
}

/// The 16 byte streams per activated remote, carried by XPC channels of one [`Node`].
pub struct XpcDevLink {
    node: Node,
    links: Mutex<Links>,
}

fn not_connected(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, msg)
}

impl XpcDevLink {
    /// Devices over `node`'s channels; no remote is active yet.
    pub fn new(node: Node) -> Self {
        XpcDevLink { node, links: Mutex::new(Links { ever: BTreeSet::new(), remotes: HashMap::new() }) }
    }

    /// The node underneath (its page carries the heartbeat).
    pub fn node(&self) -> &Node {
        &self.node
    }

    fn lock(&self) -> MutexGuard<'_, Links> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Activate `remote`: open its 16 device channels (they connect once the remote activates
    /// this partition too). Its devices are listed from now on, for good.
    pub fn activate(&self, remote: u32) -> Result<()> {
        let mut l = self.lock();
        if l.remotes.get(&remote).is_some_and(|r| r.devs.is_some()) {
            return Ok(());
        }
        let mut devs = Vec::with_capacity(DEVICES as usize);
        for d in 0..DEVICES {
            devs.push(Dev { chan: Channel::open(&self.node, remote, d as u32 + 1)?, rest: Vec::new(), at: 0 });
        }
        l.remotes.insert(remote, Remote { devs: Some(devs) });
        l.ever.insert(remote);
        drop(l);
        self.node.wake();
        Ok(())
    }

    /// Deactivate `remote`: close and remove its channels. Its devices stay listed; using them
    /// fails with ENOTCONN until it is activated again.
    pub fn deactivate(&self, remote: u32) {
        let mut l = self.lock();
        if let Some(r) = l.remotes.get_mut(&remote) {
            r.devs = None;
        }
        drop(l);
        self.node.wake();
    }

    /// Whether `remote` is active here now.
    pub fn is_active(&self, remote: u32) -> bool {
        self.lock().remotes.get(&remote).is_some_and(|r| r.devs.is_some())
    }

    fn with_dev<T>(&self, r: u32, d: u8, f: impl FnOnce(&mut Dev) -> Result<T>) -> io::Result<T> {
        if d >= DEVICES {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no device {d:02x}: devices are 00..0f")));
        }
        let mut l = self.lock();
        let Some(rem) = l.remotes.get_mut(&r) else {
            return Err(not_connected(format!("partition {r} is not activated")));
        };
        let Some(devs) = rem.devs.as_mut() else {
            return Err(not_connected(format!("partition {r} is deactivated")));
        };
        let dev = &mut devs[d as usize];
        match f(dev) {
            Ok(v) => Ok(v),
            Err(e) => {
                // The channel is finished (peer closed or gone): give the device a new one, so it
                // works again once the peer reconnects, and report this one's end.
                if let Ok(c) = Channel::open(&self.node, r, d as u32 + 1) {
                    dev.chan = c;
                    dev.rest.clear();
                    dev.at = 0;
                }
                Err(not_connected(format!("partition {r} device {d:02x}: {e}")))
            }
        }
    }
}

impl DevLink for XpcDevLink {
    fn remotes(&self) -> Vec<u32> {
        self.lock().ever.iter().copied().collect()
    }

    fn send(&self, r: u32, d: u8, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        self.with_dev(r, d, |dev| {
            let mut taken = 0;
            for chunk in data.chunks(CHUNK) {
                if !dev.chan.try_send(chunk)? {
                    break;
                }
                taken += chunk.len();
            }
            Ok(taken)
        })
    }

    fn send_eof(&self, r: u32, d: u8) -> io::Result<bool> {
        self.with_dev(r, d, |dev| dev.chan.try_send_eof())
    }

    fn recv(&self, r: u32, d: u8, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.with_dev(r, d, |dev| {
            if dev.at >= dev.rest.len() {
                dev.at = 0;
                match dev.chan.try_recv_msg(&mut dev.rest)? {
                    None => {
                        dev.rest.clear();
                        return Ok(None);
                    }
                    Some(m) if m.kind == Kind::Eof => {
                        dev.rest.clear();
                        return Ok(Some(0));
                    }
                    Some(_) => {}
                }
                if dev.rest.is_empty() {
                    return Ok(None);
                }
            }
            let n = buf.len().min(dev.rest.len() - dev.at);
            buf[..n].copy_from_slice(&dev.rest[dev.at..dev.at + n]);
            dev.at += n;
            Ok(Some(n))
        })
    }

    fn wait(&self, timeout: Duration) {
        self.node.wait(timeout);
    }
}
