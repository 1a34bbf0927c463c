//! [`MemLink`]: a [`DevLink`] in memory, two ends of one pair of partitions, for tests and
//! benchmarks of the raw devices without XPC underneath.

use super::DevLink;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One direction of one device: data chunks and end-of-stream markers in order.
#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    /// Data bytes queued (markers take no room).
    bytes: usize,
}

enum Item {
    Data(Vec<u8>, usize),
    Eof,
}

struct Shared {
    active: bool,
    /// Bumped on every change either end could wait for.
    generation: u64,
    /// The generation each end (0 = a, 1 = b) had seen when its last `wait` returned.
    seen: [u64; 2],
    /// Keyed by (sending partition, device).
    queues: HashMap<(u32, u8), Queue>,
}

/// One end of an in-memory link between partitions `local` and `remote`: bounded buffers per
/// device and direction (`capacity` bytes each) with flow control, end-of-stream markers, and
/// [`MemLink::deactivate`] to play a remote that goes away. Public because the raw devices'
/// tests, the CLI's tests and the partition daemon's tests all stand it in for XPC.
///
/// `wait` returns at once when anything changed since this end's previous `wait` returned, so
/// one thread that loops on it (as the devices' pump does) never misses a wakeup.
pub struct MemLink {
    local: u32,
    remote: u32,
    side: usize,
    capacity: usize,
    shared: Arc<(Mutex<Shared>, Condvar)>,
}

impl MemLink {
    /// Two connected ends: the first is partition `a` (its remote is `b`), the second `b`.
    /// `capacity_bytes` (at least 1) bounds each device's buffer in each direction.
    pub fn pair(a: u32, b: u32, capacity_bytes: usize) -> (Arc<MemLink>, Arc<MemLink>) {
        let shared = Arc::new((
            Mutex::new(Shared { active: true, generation: 0, seen: [0, 0], queues: HashMap::new() }),
            Condvar::new(),
        ));
        let capacity = capacity_bytes.max(1);
        let end =
            |local, remote, side| Arc::new(MemLink { local, remote, side, capacity, shared: Arc::clone(&shared) });
        (end(a, b, 0), end(b, a, 1))
    }

    /// Take the link down (both ends): sends fail with ENOTCONN, reads return what is already
    /// queued and then fail, waiters wake.
    pub fn deactivate(&self) {
        self.set_active(false);
    }

    /// Bring the link back after [`MemLink::deactivate`].
    pub fn activate(&self) {
        self.set_active(true);
    }

    fn set_active(&self, on: bool) {
        let mut s = self.lock();
        s.active = on;
        self.changed(&mut s);
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self, s: &mut Shared) {
        s.generation += 1;
        self.shared.1.notify_all();
    }

    fn check(&self, r: u32, d: u8) -> io::Result<()> {
        if r != self.remote {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!("partition {} has no link to partition {r} (only to {})", self.local, self.remote),
            ));
        }
        if d >= super::DEVICES {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no raw device {d}: they are 00..0f")));
        }
        Ok(())
    }

    fn gone(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotConnected,
            format!("partition {} is deactivated: its raw devices fail until it is activated again", self.remote),
        )
    }
}

impl DevLink for MemLink {
    fn remotes(&self) -> Vec<u32> {
        vec![self.remote]
    }

    fn send(&self, r: u32, d: u8, data: &[u8]) -> io::Result<usize> {
        self.check(r, d)?;
        let mut s = self.lock();
        if !s.active {
            return Err(self.gone());
        }
        let q = s.queues.entry((self.local, d)).or_default();
        let n = data.len().min(self.capacity.saturating_sub(q.bytes));
        if n == 0 {
            return Ok(0);
        }
        q.items.push_back(Item::Data(data[..n].to_vec(), 0));
        q.bytes += n;
        self.changed(&mut s);
        Ok(n)
    }

    fn send_eof(&self, r: u32, d: u8) -> io::Result<bool> {
        self.check(r, d)?;
        let mut s = self.lock();
        if !s.active {
            return Err(self.gone());
        }
        let q = s.queues.entry((self.local, d)).or_default();
        if q.bytes >= self.capacity {
            return Ok(false);
        }
        q.items.push_back(Item::Eof);
        self.changed(&mut s);
        Ok(true)
    }

    fn recv(&self, r: u32, d: u8, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.check(r, d)?;
        let mut s = self.lock();
        let active = s.active;
        let Some(q) = s.queues.get_mut(&(self.remote, d)) else {
            return if active { Ok(None) } else { Err(self.gone()) };
        };
        let got = match q.items.front_mut() {
            None if active => return Ok(None),
            None => return Err(self.gone()),
            Some(Item::Eof) => {
                q.items.pop_front();
                0
            }
            Some(Item::Data(v, off)) => {
                let n = buf.len().min(v.len() - *off);
                if n == 0 {
                    return Ok(None);
                }
                buf[..n].copy_from_slice(&v[*off..*off + n]);
                *off += n;
                if *off == v.len() {
                    q.items.pop_front();
                }
                q.bytes -= n;
                n
            }
        };
        self.changed(&mut s);
        Ok(Some(got))
    }

    fn wait(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut s = self.lock();
        while s.generation == s.seen[self.side] {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            s = self.shared.1.wait_timeout(s, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
        s.seen[self.side] = s.generation;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_flow_in_order_with_flow_control_and_eof() {
        let (a, b) = MemLink::pair(1, 2, 8);
        assert_eq!(a.send(2, 3, b"0123456789").unwrap(), 8);
        assert_eq!(a.send(2, 3, b"89").unwrap(), 0, "full");
        assert!(!a.send_eof(2, 3).unwrap(), "eof waits for room too");
        let mut buf = [0u8; 5];
        assert_eq!(b.recv(1, 3, &mut buf).unwrap(), Some(5));
        assert_eq!(&buf, b"01234");
        assert_eq!(b.recv(1, 4, &mut buf).unwrap(), None, "other device is empty");
        assert_eq!(a.send(2, 3, b"89").unwrap(), 2);
        assert!(a.send_eof(2, 3).unwrap());
        assert_eq!(b.recv(1, 3, &mut buf).unwrap(), Some(3));
        assert_eq!(&buf[..3], b"567");
        assert_eq!(b.recv(1, 3, &mut buf).unwrap(), Some(2));
        assert_eq!(&buf[..2], b"89");
        assert_eq!(b.recv(1, 3, &mut buf).unwrap(), Some(0), "one end-of-stream marker");
        assert_eq!(b.recv(1, 3, &mut buf).unwrap(), None);
    }

    #[test]
    fn deactivation_fails_sends_and_drains_then_fails_receives() {
        let (a, b) = MemLink::pair(1, 2, 64);
        a.send(2, 0, b"abc").unwrap();
        b.deactivate();
        let e = a.send(2, 0, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotConnected);
        assert!(e.to_string().contains("partition 2 is deactivated"), "{e}");
        let mut buf = [0u8; 8];
        assert_eq!(b.recv(1, 0, &mut buf).unwrap(), Some(3));
        assert_eq!(b.recv(1, 0, &mut buf).unwrap_err().kind(), io::ErrorKind::NotConnected);
        a.activate();
        assert_eq!(b.recv(1, 0, &mut buf).unwrap(), None);
        assert_eq!(a.send(2, 0, b"x").unwrap(), 1);
    }

    #[test]
    fn wait_sees_a_change_made_before_it_was_called() {
        let (a, b) = MemLink::pair(1, 2, 64);
        b.wait(Duration::ZERO); // catch up with nothing
        a.send(2, 0, b"x").unwrap();
        let t = Instant::now();
        b.wait(Duration::from_secs(30));
        assert!(t.elapsed() < Duration::from_secs(25), "missed wakeup");
        let waiter = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || b.wait(Duration::from_secs(30)))
        };
        std::thread::sleep(Duration::from_millis(20));
        a.deactivate();
        waiter.join().unwrap();
    }
}
