//! Criterion benchmarks of the packet parser: what one packet costs to decode (link layer, IP,
//! TCP/UDP, payload hash), and what reading a capture from memory costs (frames, then frames
//! plus decoding and counting).
//!
//! Run: `cargo bench --bench parser` (add `-- decode` to run one group).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use causeway_sources::decode::{DecodeOptions, decode, linktype};
use causeway_sources::pcap::{Frame, FrameReader};
use causeway_sources::reader::{ObservationReader, PacketReader};
use causeway_sources::{Batch, OriginId, SourceStats};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use etherparse::PacketBuilder;

fn tcp_v4(payload: usize) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2; 6], [3; 6])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(40_000, 80, 1, 64_240)
        .ack(7)
        .psh()
        .write(&mut v, &vec![0x5a; payload])
        .unwrap();
    v
}

fn udp_v6_sll2() -> Vec<u8> {
    let mut v = vec![
        0x86, 0xdd, 0, 0, 0, 0, 0, 1, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0,
    ];
    PacketBuilder::ipv6([1; 16], [2; 16], 64)
        .udp(5353, 53)
        .write(&mut v, &[7u8; 60])
        .unwrap();
    v
}

fn pcap_file(frames: &[Vec<u8>], n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for x in [0xa1b2_3c4du32, 0x0004_0002, 0, 0, 65_535, 1] {
        out.extend(x.to_le_bytes());
    }
    for i in 0..n {
        let f = &frames[i % frames.len()];
        for x in [
            1_700_000_000 + (i / 1000) as u32,
            (i % 1000) as u32 * 1000,
            f.len() as u32,
            f.len() as u32,
        ] {
            out.extend(x.to_le_bytes());
        }
        out.extend(f);
    }
    out
}

fn bench_decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(1));
    for (name, lt, data) in [
        ("ethernet_tcp_ack", linktype::ETHERNET, tcp_v4(0)),
        ("ethernet_tcp_1448", linktype::ETHERNET, tcp_v4(1448)),
        ("sll2_udp_ipv6", linktype::LINUX_SLL2, udp_v6_sll2()),
    ] {
        let frame = Frame {
            ts_ns: 1,
            linktype: lt,
            data: &data,
            wire_len: data.len() as u32,
            offset: 0,
            interface: 0,
        };
        g.bench_function(name, |b| {
            b.iter(|| decode(black_box(&frame), OriginId(0), DecodeOptions::default()))
        });
        let no_hash = DecodeOptions {
            hash_payload: false,
            ..DecodeOptions::default()
        };
        g.bench_function(format!("{name}_no_hash"), |b| {
            b.iter(|| decode(black_box(&frame), OriginId(0), no_hash))
        });
    }
    g.finish();
}

fn bench_read(c: &mut Criterion) {
    let frames = vec![tcp_v4(1448), tcp_v4(0), tcp_v4(300), tcp_v4(0)];
    let n = 100_000;
    let file = pcap_file(&frames, n);
    let mut g = c.benchmark_group("read");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("frames_100k", |b| {
        b.iter(|| {
            let mut r = FrameReader::new(&file[..]).unwrap();
            let (mut stats, mut damage, mut count) = (SourceStats::default(), Vec::new(), 0usize);
            while let Some(f) = r.next_frame(&mut stats, &mut damage).unwrap() {
                count += f.data.len();
            }
            black_box(count)
        })
    });
    g.bench_function("packets_100k", |b| {
        b.iter(|| {
            let frames = FrameReader::new(&file[..]).unwrap();
            let mut r = PacketReader::new(frames, OriginId(0), "bench", DecodeOptions::default());
            let mut batch = Batch::default();
            let mut count = 0;
            while r.read_batch(1024, &mut batch) {
                count += batch.packets.len();
                batch.clear();
            }
            black_box(count + batch.packets.len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench_decode, bench_read);
criterion_main!(benches);
