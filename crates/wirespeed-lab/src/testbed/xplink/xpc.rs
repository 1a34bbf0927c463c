//! The raw devices' transport over XPC: [`XpcDevLink`] implements the [`DevLink`] contract
//! for one XPC node (the devices know XPC; XPC knows nothing of the devices). Device `d` (00..0f) of remote `r` is channel `d + 1` to
//! `r` (channel 0 is kept for control); a write becomes one or more messages (up to 64 KiB
//! each, out of line beyond the slot's immediate bytes), the end-of-stream marker is a message
//! of its own kind, and a read shorter than a message keeps the rest for the next one.
//!
//! Devices of a remote exist from its first activation on, forever (the seed's hardware graph
//! never removes them); deactivation closes the remote's channels, after which every operation
//! on its devices fails at once with ENOTCONN "partition R is deactivated", and the peer's
//! readers get the bytes sent before, then ENOTCONN. A later activation opens new channels (a
//! new generation) and the devices work again once the peer has activated too.

use super::{DevLink, DEVICES};
use crate::xpc::{Channel, Kind, Node};
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xpc::tests::{node, Tmp};

    #[test]
    fn xpc_devlink_carries_byte_streams_with_eof_and_deactivation_gives_enotconn() {
        let t = Tmp::new("dev");
        let (l1, l2) = (XpcDevLink::new(node(t.path(), 1)), XpcDevLink::new(node(t.path(), 2)));
        let e = l1.send(2, 0, b"x").expect_err("not activated");
        assert_eq!(e.kind(), std::io::ErrorKind::NotConnected);
        l1.activate(2).expect("activate");
        l2.activate(1).expect("activate");
        assert_eq!(l1.remotes(), [2]);
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (mut off, mut got, mut eof) = (0, Vec::new(), false);
        let mut buf = [0u8; 1000];
        let mut eof_sent = false;
        while !eof {
            if off < data.len() {
                off += l1.send(2, 3, &data[off..(off + 70_000).min(data.len())]).expect("send");
            } else if !eof_sent {
                eof_sent = l1.send_eof(2, 3).expect("eof");
            }
            loop {
                match l2.recv(1, 3, &mut buf).expect("recv") {
                    Some(0) => {
                        eof = true;
                        break;
                    }
                    Some(n) => got.extend_from_slice(&buf[..n]),
                    None => break,
                }
            }
        }
        assert_eq!(got, data, "byte-exact, in order, then EOF");
        // Other devices are separate streams.
        assert_eq!(l2.recv(1, 4, &mut buf).expect("recv"), None);
        // Deactivation: this side fails at once; the peer reads what was sent, then ENOTCONN.
        assert!(l1.send(2, 5, b"last words").expect("send") == 10);
        l1.deactivate(2);
        let e = l1.send(2, 5, b"more").expect_err("deactivated");
        assert_eq!(e.kind(), std::io::ErrorKind::NotConnected);
        assert_eq!(e.to_string(), "partition 2 is deactivated");
        assert_eq!(l1.recv(2, 5, &mut buf).expect_err("deactivated").kind(), std::io::ErrorKind::NotConnected);
        assert_eq!(l1.remotes(), [2], "devices stay");
        assert_eq!(l2.recv(1, 5, &mut buf).expect("recv"), Some(10));
        let e = l2.recv(1, 5, &mut buf).expect_err("peer deactivated");
        assert_eq!(e.kind(), std::io::ErrorKind::NotConnected);
        assert!(e.to_string().contains("partition 1 closed channel 6"), "{e}");
        // Activation again: the devices work again.
        l1.activate(2).expect("activate");
        let mut n = 0;
        for _ in 0..100_000 {
            n = l1.send(2, 5, b"again").expect("send");
            if n > 0 {
                break;
            }
            l1.wait(Duration::from_millis(10));
        }
        assert_eq!(n, 5);
        let mut r = None;
        for _ in 0..100_000 {
            r = l2.recv(1, 5, &mut buf).expect("recv");
            if r.is_some() {
                break;
            }
            l2.wait(Duration::from_millis(10));
        }
        assert_eq!(r, Some(5));
        assert_eq!(&buf[..5], b"again");
    }
}
