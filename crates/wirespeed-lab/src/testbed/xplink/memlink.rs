//! [`MemLink`]: a [`DevLink`] in memory, two ends of one pair of partitions, for tests and
//! benchmarks of the raw devices without XPC underneath.

use super::DevLink;
use std::collections::{BTreeSet, HashMap, VecDeque};
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
    /// Links that are down, as (lower id, higher id).
    down: BTreeSet<(u32, u32)>,
    /// Bumped on every change any end could wait for.
    generation: u64,
    /// The generation each end (by partition) had seen when its last `wait` returned.
    seen: HashMap<u32, u64>,
    /// Keyed by (sending partition, receiving partition, device).
    queues: HashMap<(u32, u32, u8), Queue>,
}

fn key(a: u32, b: u32) -> (u32, u32) {
    (a.min(b), a.max(b))
}

/// One end of an in-memory link between partition `local` and its remotes: bounded buffers
/// per device and direction (`capacity` bytes each) with flow control, end-of-stream markers,
/// and [`MemLink::deactivate`] to play remotes that go away. Public because the raw devices'
/// tests, the CLI's tests and the partition daemon's tests all stand it in for XPC.
///
/// `wait` returns at once when anything changed since this end's previous `wait` returned, so
/// one thread that loops on it (as the devices' pump does) never misses a wakeup.
pub struct MemLink {
    local: u32,
    remotes: Vec<u32>,
    capacity: usize,
    shared: Arc<(Mutex<Shared>, Condvar)>,
}

impl MemLink {
    /// Two connected ends: the first is partition `a` (its remote is `b`), the second `b`.
    /// `capacity_bytes` (at least 1) bounds each device's buffer in each direction.
    pub fn pair(a: u32, b: u32, capacity_bytes: usize) -> (Arc<MemLink>, Arc<MemLink>) {
        let mut v = MemLink::mesh(&[a, b], capacity_bytes);
        let second = v.pop().unwrap_or_else(|| unreachable!());
        (v.pop().unwrap_or_else(|| unreachable!()), second)
    }

    /// One end per partition in `ids`, each linked to all the others (a full mesh).
    pub fn mesh(ids: &[u32], capacity_bytes: usize) -> Vec<Arc<MemLink>> {
        let shared = Arc::new((
            Mutex::new(Shared { down: BTreeSet::new(), generation: 0, seen: HashMap::new(), queues: HashMap::new() }),
            Condvar::new(),
        ));
        let capacity = capacity_bytes.max(1);
        ids.iter()
            .map(|&local| {
                Arc::new(MemLink {
                    local,
                    remotes: ids.iter().copied().filter(|&r| r != local).collect(),
                    capacity,
                    shared: Arc::clone(&shared),
                })
            })
            .collect()
    }

    /// Take this end's links down (seen from both sides): sends fail with ENOTCONN, reads
    /// return what is already queued and then fail, waiters wake.
    pub fn deactivate(&self) {
        self.set_active(false);
    }

    /// Bring the links back after [`MemLink::deactivate`].
    pub fn activate(&self) {
        self.set_active(true);
    }

    fn set_active(&self, on: bool) {
        let mut s = self.lock();
        for &r in &self.remotes {
            if on {
                s.down.remove(&key(self.local, r));
            } else {
                s.down.insert(key(self.local, r));
            }
        }
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
        if !self.remotes.contains(&r) {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!("partition {} has no link to partition {r} (only to {:?})", self.local, self.remotes),
            ));
        }
        if d >= super::DEVICES {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no raw device {d}: they are 00..0f")));
        }
        Ok(())
    }

    fn gone(&self, r: u32) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotConnected,
            format!("partition {r} is deactivated: its raw devices fail until it is activated again"),
        )
    }
}

impl DevLink for MemLink {
    fn remotes(&self) -> Vec<u32> {
        self.remotes.clone()
    }

    fn send(&self, r: u32, d: u8, data: &[u8]) -> io::Result<usize> {
        self.check(r, d)?;
        let mut s = self.lock();
        if s.down.contains(&key(self.local, r)) {
            return Err(self.gone(r));
        }
        let q = s.queues.entry((self.local, r, d)).or_default();
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
        if s.down.contains(&key(self.local, r)) {
            return Err(self.gone(r));
        }
        let q = s.queues.entry((self.local, r, d)).or_default();
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
        let active = !s.down.contains(&key(self.local, r));
        let Some(q) = s.queues.get_mut(&(r, self.local, d)) else {
            return if active { Ok(None) } else { Err(self.gone(r)) };
        };
        let got = match q.items.front_mut() {
            None if active => return Ok(None),
            None => return Err(self.gone(r)),
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
        while s.generation == s.seen.get(&self.local).copied().unwrap_or(0) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            s = self.shared.1.wait_timeout(s, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
        let g = s.generation;
        s.seen.insert(self.local, g);
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
    fn a_mesh_links_every_pair_and_one_end_going_down_leaves_the_others() {
        let v = MemLink::mesh(&[1, 2, 3], 64);
        assert_eq!(v[0].remotes(), vec![2, 3]);
        v[0].send(2, 0, b"to2").unwrap();
        v[0].send(3, 0, b"to3").unwrap();
        v[1].send(3, 0, b"2to3").unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(v[2].recv(1, 0, &mut buf).unwrap(), Some(3));
        assert_eq!(&buf[..3], b"to3");
        assert_eq!(v[2].recv(2, 0, &mut buf).unwrap(), Some(4));
        assert_eq!(&buf[..4], b"2to3");
        v[0].deactivate();
        assert_eq!(v[1].send(1, 0, b"x").unwrap_err().kind(), io::ErrorKind::NotConnected);
        assert_eq!(v[1].send(3, 0, b"x").unwrap(), 1, "2 and 3 still talk");
        assert_eq!(v[1].recv(1, 0, &mut buf).unwrap(), Some(3), "queued bytes are still read");
        assert!(v[1].recv(1, 0, &mut buf).unwrap_err().to_string().contains("partition 1 is deactivated"));
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
