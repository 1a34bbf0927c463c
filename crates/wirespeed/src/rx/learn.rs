//! Learning a stream's layout before counting it: `recv --format vdif` (or `vtp`, `mark5b`,
//! `spead`) with no keys reads the stream's first datagrams, learns the layout from their
//! headers ([`crate::wire::learn`]), and hands every datagram it read to the capture first,
//! so that nothing is lost to the learning and everything is counted by the layout learned.
//!
//! It runs before the capture thread starts, on the socket the capture will read, with a
//! plain receive call: the capture's hot path is not touched. What it holds is bounded
//! ([`HOLD_MAX`] bytes, [`LEARN_WAIT`] after the first datagram); a key the headers have not
//! shown by then (a VDIF or Mark5B frame rate needs a second boundary) is taken from the
//! format's defaults and said to be assumed, never passed off as seen.

use super::backend::Opened;
use super::run::Listener;
use crate::control::{EndOfStream, END_LEN};
use crate::error::{Error, Result};
use crate::sys;
use crate::wire::learn::{Learned, Learner};
use crate::wire::{spec, Format};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The format names that, given alone, ask for the layout to be learned.
pub const LEARNABLE: [&str; 4] = ["vdif", "vtp", "mark5b", "spead"];

/// How long to learn after the first datagram before taking the defaults for what was not
/// seen: a VDIF or Mark5B frame rate shows at the first second boundary, within a second.
pub const LEARN_WAIT: Duration = Duration::from_secs(3);

/// Most bytes held while learning (a second of 2 Gb/s VDIF is 256 MB). A recorder holds at
/// most half its ring, so that the held datagrams fit it when they are counted.
pub const HOLD_MAX: usize = 1 << 30;

/// A datagram read while learning, counted first by the capture.
#[derive(Debug)]
pub struct Held {
    /// Where it came from.
    pub src: Option<SocketAddr>,
    /// When it was read (monotonic ns): the capture counts it, and a recorder stamps it, then.
    pub at_ns: u64,
    /// Its payload.
    pub data: Vec<u8>,
}

/// What a run learned of its stream's layout, for the report (and its JSON).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LearnedLayout {
    /// The spec the stream was counted with.
    pub spec: String,
    /// The source it was learned from (empty when nothing arrived).
    pub source: String,
    /// What that source's headers showed.
    pub facts: Vec<String>,
    /// What was taken without being seen (the defaults), and why.
    pub assumed: Vec<String>,
    /// Datagrams read while learning (handed to the capture first).
    pub datagrams: u64,
    /// Seconds from the first datagram to the layout.
    pub seconds: f64,
    /// Time spent learning, waiting for the first datagram included: the run's duration
    /// counts it.
    #[serde(skip)]
    pub spent: Duration,
}

impl LearnedLayout {
    /// The lines a human report shows.
    pub fn lines(&self) -> Vec<String> {
        let mut v = vec![format!(
            "layout learned from {} ({} datagram(s) in {:.2} s, counted too): --format {}",
            if self.source.is_empty() { "nothing (no datagram arrived)" } else { &self.source },
            self.datagrams,
            self.seconds,
            self.spec
        )];
        v.extend(self.assumed.iter().map(|a| format!("assumed, not seen: {a}")));
        v
    }
}

/// The format learned, and what the report says of it.
type FormatLearned = (Arc<dyn Format>, LearnedLayout);

/// The format's default value of `key`, from its spec.
fn default_key(family: &str, key: &str) -> Option<String> {
    let spec = spec::parse(family).ok()?.spec();
    crate::wire::learn::spec_key(&spec, key).map(str::to_string)
}

/// The source to count by: the one with the most datagrams of the family asked for (VTP for
/// VDIF is another family: a VTP stream read as VDIF does not match, and is said not to).
fn pick(learned: &[Learned], family: &str) -> Option<usize> {
    (0..learned.len()).filter(|&i| learned[i].format == family).max_by_key(|&i| learned[i].datagrams)
}

/// Read `listener`'s first datagrams until the layout of a `family` stream is known, keep
/// them in the listener for the capture (at most `hold_max` bytes), and return the format
/// learned. Waits for the first datagram until `stop` or `wait_first` (the run's duration);
/// with nothing read, the family's defaults are returned and said to be assumed.
pub fn learn(
    listener: &mut Listener,
    family: &str,
    stop: &AtomicBool,
    wait_first: Option<Duration>,
    hold_max: usize,
) -> Result<FormatLearned> {
    learn_with(listener, family, stop, wait_first, hold_max, None)
}

/// As [`learn`], with the frame rate known beforehand (`fps`: a station's `mode=` states it), so
/// that learning ends with the first datagrams instead of waiting for the stream's seconds to
/// roll over; the report says the rate was taken, not seen.
pub fn learn_with(
    listener: &mut Listener,
    family: &str,
    stop: &AtomicBool,
    wait_first: Option<Duration>,
    hold_max: usize,
    fps: Option<u32>,
) -> Result<FormatLearned> {
    if listener.threads() > 1 {
        return Err(Error::invalid(format!(
            "learning the {family} layout reads one socket: give --threads 1, or the format's keys (`wirespeed probe` prints them)"
        )));
    }
    let Opened::Mmsg(ep) = &listener.endpoint else {
        return Err(Error::invalid(format!(
            "learning the {family} layout reads a UDP socket: leave --backend out, or give the format's keys (`wirespeed probe` prints them)"
        )));
    };
    let sock = ep.socket();
    // Never blocked in a receive call (a datagram the kernel drops after poll said readable,
    // a bad checksum, must not hold learning past its time); the capture's own calls do not
    // depend on the mode, which is put back.
    sock.set_nonblocking(true).map_err(|e| Error::os(format!("receiving failed: {e}"), &e))?;
    let result = read_and_learn(sock, ep.fd(), family, stop, wait_first, hold_max, fps);
    sock.set_nonblocking(false).map_err(|e| Error::os(format!("receiving failed: {e}"), &e))?;
    let (held, layout) = result?;
    listener.held = held;
    listener.relearn = LEARNABLE.iter().find(|f| **f == family).map(|f| (*f, true));
    Ok(layout)
}

fn read_and_learn(
    sock: &std::net::UdpSocket,
    fd: std::os::fd::RawFd,
    family: &str,
    stop: &AtomicBool,
    wait_first: Option<Duration>,
    hold_max: usize,
    fps: Option<u32>,
) -> Result<(Vec<Held>, FormatLearned)> {
    let mut learner = Learner::new();
    learner.rate_seconds = 2;
    learner.assume_fps = fps;
    let mut held: Vec<Held> = Vec::new();
    let (mut bytes, mut ended) = (0usize, false);
    let mut buf = vec![0u8; 65_536];
    let t0 = sys::monotonic_ns();
    let mut first_ns = None;
    let mut chosen = None;
    loop {
        if stop.load(Ordering::Relaxed) || ended || bytes >= hold_max {
            break;
        }
        let now = sys::monotonic_ns();
        match first_ns {
            None if wait_first.is_some_and(|w| now - t0 >= w.as_nanos() as u64) => break,
            Some(f) if now - f >= LEARN_WAIT.as_nanos() as u64 => break,
            _ => {}
        }
        if !sys::poll_readable(fd, Some(20_000_000)).map_err(|e| Error::os(format!("receiving failed: {e}"), &e))? {
            continue;
        }
        // Everything queued, then look at what was learned.
        let mut n = 0;
        while n < 256 {
            let (len, src) = match sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => break,
                Err(e) => return Err(Error::os(format!("receiving failed: {e}"), &e)),
            };
            // Named as the capture names it (an IPv4 sender on a dual-stack socket is a.b.c.d).
            let src = crate::addr::unmap(src);
            let data = &buf[..len];
            let at_ns = sys::monotonic_ns();
            first_ns.get_or_insert(at_ns);
            // A wirespeed sender's end message: the stream is over, learn from what came.
            ended |= len == END_LEN && EndOfStream::decode(data).is_some();
            learner.feed(src, data);
            held.push(Held { src: Some(src), at_ns, data: data.to_vec() });
            bytes += len;
            n += 1;
        }
        let learned = learner.learned();
        if let Some(i) = pick(&learned, family) {
            if learned[i].spec.is_some() {
                chosen = Some(learned[i].clone());
                break;
            }
        }
    }
    let seconds = first_ns.map_or(0.0, |f| (sys::monotonic_ns() - f) as f64 / 1e9);
    let spent = Duration::from_nanos(sys::monotonic_ns() - t0);
    let datagrams = held.len() as u64;
    let mut assumed = Vec::new();
    if chosen.is_none() {
        // Not all seen in time: the frame rate is the key that needs time; take the default.
        if let Some(fps) = default_key(family, "fps").and_then(|v| v.parse().ok()) {
            learner.assume_fps = Some(fps);
        }
        let learned = learner.learned();
        if let Some(i) = pick(&learned, family) {
            if learned[i].spec.is_some() {
                if learner.assume_fps.is_some() && learned[i].facts.iter().any(|f| f.contains("assumed, not seen")) {
                    assumed.push(format!(
                        "fps={} (the default): the stream did not cross two second boundaries within {} s, so its frame rate was not seen",
                        learner.assume_fps.unwrap_or(0),
                        LEARN_WAIT.as_secs()
                    ));
                }
                chosen = Some(learned[i].clone());
            } else {
                assumed
                    .push(format!("the whole layout ({family}'s defaults), because {}", learned[i].missing.join("; ")));
            }
        } else if let Some(other) = learned.iter().max_by_key(|l| l.datagrams) {
            assumed.push(format!(
                "the whole layout ({family}'s defaults): the stream from {} is {}, not {family}",
                other.source, other.format
            ));
        } else {
            assumed.push(format!("the whole layout ({family}'s defaults): no datagram arrived to learn from"));
        }
    }
    let (fmt, source, facts) = match &chosen {
        Some(l) => {
            let spec = l.spec.as_deref().unwrap_or(family);
            (spec::parse(spec).map_err(Error::failed)?, l.source.clone(), l.facts.clone())
        }
        None => (spec::parse(family).map_err(Error::invalid)?, String::new(), Vec::new()),
    };
    let layout = LearnedLayout { spec: fmt.spec(), source, facts, assumed, datagrams, seconds, spent };
    Ok((held, (fmt, layout)))
}
