//! Criterion benchmark of `clock`'s consistency solve ([`causeway_operators::clock::pairwise::solve`]):
//! what one solve costs (`clock` runs one per second boundary of event time) on the two
//! shapes of domain graph the harnesses meet: 17 domains in a mesh (the linking trace:
//! servers and a few client hosts, each host a clock domain) and 6 servers with 647 client
//! hosts that each talk to both web servers (the parallelism-45 accuracy trace).
//!
//! Run: `cargo bench --bench clock_solve`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use causeway_operators::clock::pairwise::solve;
use criterion::{Criterion, criterion_group, criterion_main};

/// Servers `0..servers` pairwise connected, then `clients` nodes that each talk to servers 0
/// and 1 (both directions of a pair are one edge, as `clock`'s series are).
fn graph(servers: u32, clients: u32) -> Vec<(u32, u32, [f64; 2], f64)> {
    let mut edges = Vec::new();
    for a in 0..servers {
        for b in a + 1..servers {
            edges.push((a, b, [f64::from(b - a) * 1e5, 0.5], 1.0 + f64::from(a)));
        }
    }
    for c in servers..servers + clients {
        let off = f64::from(c) * 1e3;
        edges.push((0, c, [off + 7.0, 0.0], 0.25));
        edges.push((1, c, [off - 1e5 + 3.0, 1.0], 0.5));
    }
    edges
}

fn solves(c: &mut Criterion) {
    let mut group = c.benchmark_group("pairwise_solve");
    for (name, servers, clients) in [("17_domains", 6, 11), ("653_domains", 6, 647)] {
        let edges = graph(servers, clients);
        group.bench_function(name, |b| {
            b.iter(|| solve(black_box(&0u32), black_box(&edges)))
        });
    }
    group.finish();
}

criterion_group!(benches, solves);
criterion_main!(benches);
