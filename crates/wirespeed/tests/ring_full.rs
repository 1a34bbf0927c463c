//! Datagrams a sink refuses (a full recording ring) are counted as ring-full loss, left out of
//! the ledger (which describes exactly what was kept), and named in the diagnosis.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use wirespeed::rx::{self, Listener, RecvConfig, Sink};
use wirespeed::tx::{self, SendConfig};
use wirespeed::units::Rate;
use wirespeed::wire::{ByteOrder, Counter, Format, Invalid, PacketInfo};

/// Refuses every 10th datagram, as a ring that is full at those moments would.
struct EveryTenthFull {
    seen: u64,
    refused: Vec<u64>,
    batches: u64,
}

impl Sink for EveryTenthFull {
    fn accept(&mut self, _: &[u8], _: Option<SocketAddr>, info: &Result<PacketInfo, Invalid>, _: u64) -> bool {
        self.seen += 1;
        if self.seen % 10 == 0 {
            self.refused.push(info.map(|i| i.seq).unwrap_or(u64::MAX));
            return false;
        }
        true
    }
    fn end_batch(&mut self, _: u64, _: Option<u64>) {
        self.batches += 1;
    }
    fn must_stop(&self) -> Option<&'static str> {
        None
    }
    fn finish(&mut self) {}
}

#[test]
fn refused_datagrams_are_ring_full_loss() {
    let fmt: Arc<dyn Format> = Arc::new(Counter::new(256, ByteOrder::Be).unwrap());
    let mut rcfg = RecvConfig::new("127.0.0.1:0".parse().unwrap());
    rcfg.once = true;
    rcfg.duration = Some(std::time::Duration::from_secs(30));
    let listener = Listener::bind(&rcfg).unwrap();
    let dest = listener.local_addr().unwrap();
    let mut scfg = SendConfig::new(dest);
    scfg.rate = Rate::Packets(50_000.0);
    scfg.count = Some(2000);
    let stop = AtomicBool::new(false);
    let sink = EveryTenthFull { seen: 0, refused: Vec::new(), batches: 0 };
    let (report, sink) = std::thread::scope(|s| {
        let r = s.spawn(|| rx::capture_with(&rcfg, listener, fmt.as_ref(), &stop, None, &|_| {}, sink));
        tx::run(&scfg, fmt.clone(), &stop).unwrap();
        r.join().unwrap().unwrap()
    });
    assert_eq!(sink.refused.len(), 200);
    assert!(sink.batches > 0);
    assert_eq!(report.ring_full, 200);
    assert_eq!(report.streams[0].ring_full, 200);
    assert_eq!(report.total.received, 1800);
    assert_eq!(report.total.lost, 200, "what the ring refused is not in the recording");
    let lost: Vec<u64> = report.streams[0].gaps.iter().flat_map(|g| g.first..=g.last).collect();
    let mut refused = sink.refused.clone();
    refused.sort();
    assert_eq!(lost, refused, "the gaps are exactly the refused datagrams");
    let d = report.diagnosis.join(" ");
    assert!(d.contains("recording ring was full"), "{d}");
    assert!(!d.contains("lost before it"), "ring-full loss is not blamed on the network: {d}");
}
