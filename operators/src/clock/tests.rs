use super::bounds::BatchBounds;
use super::correct::{History, Recent, corrected};
use super::offsets::feasible_range;
use super::*;
use causeway_sources::OriginId;
use std::collections::HashMap;

fn bounds(a: u16, b: u16, bucket: Time, fwd: (i64, i64), back: (i64, i64)) -> DelayBounds {
    DelayBounds {
        a: Domain::Origin(OriginId(a)),
        b: Domain::Origin(OriginId(b)),
        pair: 1,
        bucket,
        forward: Some(fwd),
        backward: Some(back),
        count: 10,
    }
}

#[test]
fn paxson_midpoint_and_bound_either_orientation() {
    // Δ = 5 ms, latency 100 µs each way.
    let b = bounds(0, 1, 0, (5_100_000, 5_400_000), (4_700_000, 4_900_000));
    let (d, h) = b.estimate().unwrap();
    assert_eq!((d, h), (5_000_000.0, 100_000.0));
    let flipped = bounds(0, 1, 0, (4_700_000, 4_900_000), (5_100_000, 5_400_000));
    assert_eq!(flipped.estimate().unwrap(), (5_000_000.0, 100_000.0));
}

#[test]
fn offsets_with_drift_are_made_consistent_over_the_graph() {
    // Domain 1 runs 3 s ahead and 50 ppm fast, domain 2 is 1 h behind; pairs 0-1 and 1-2.
    let mut est = ClockEstimator::new(ClockConfig::default());
    for s in 0..30u64 {
        let t = s as f64 + 0.5;
        let off1 = 3e9 + 50e-6 * t * 1e9;
        let off2 = -3600e9;
        let lat = 100_000.0;
        for (a, b, delta) in [(0u16, 1u16, off1), (1, 2, off2 - off1)] {
            let up = (delta + lat) as i64;
            let down = (delta - lat) as i64;
            est.add(bounds(a, b, s, (up, up + 50_000), (down - 50_000, down)));
        }
    }
    let at = 30 * BUCKET_NS;
    est.advance(at);
    let offsets = est.offsets(at, false);
    let by: HashMap<Domain, &ClockOffset> = offsets.iter().map(|o| (o.domain.clone(), o)).collect();
    let o1 = by[&Domain::Origin(OriginId(1))];
    let want1 = 3e9 + 50e-6 * 30.0 * 1e9;
    assert!(
        (o1.offset_ns - want1).abs() < 1_000.0,
        "{} vs {want1}",
        o1.offset_ns
    );
    assert!((o1.drift_ppm - 50.0).abs() < 0.5, "{}", o1.drift_ppm);
    // The hard bound: each second's ±100 µs, widened a little by the half second from the
    // last second's middle to the boundary.
    assert!(
        o1.error_ns >= (o1.offset_ns - want1).abs() && o1.error_ns <= 110_000.0,
        "{}",
        o1.error_ns
    );
    let o2 = by[&Domain::Origin(OriginId(2))];
    assert!((o2.offset_ns + 3600e9).abs() < 1_000.0, "{}", o2.offset_ns);
    // Domain 2 is placed against the reference through domain 1: its bound is the two pairs'
    // bounds together, not its own pair's alone.
    assert!(
        o2.error_ns >= o1.error_ns + 90_000.0 && o2.error_ns <= 220_000.0,
        "{} (domain 1: {})",
        o2.error_ns,
        o1.error_ns
    );
    assert_eq!(by[&Domain::Origin(OriginId(0))].offset_ns, 0.0);
}

#[test]
fn a_group_the_pairs_no_longer_connect_to_the_reference_keeps_its_place_and_a_new_one_gets_none() {
    // Seconds 0-29: pairs 0-1 and 1-2 (domain 1 is 3 s ahead of 0, domain 2 1 h behind).
    // Seconds 30-149: pairs 0-1 and 2-3 (domain 3 is 5 s ahead of 2), and 4-5, which never
    // met the rest. Pair 1-2 leaves the window at second 90.
    let mut est = ClockEstimator::new(ClockConfig::default());
    let lat = 100_000;
    let add = |est: &mut ClockEstimator, s: u64, a: u16, b: u16, delta: i64| {
        let (up, down) = (delta + lat, delta - lat);
        est.add(bounds(a, b, s, (up, up + 50_000), (down - 50_000, down)));
    };
    let d = |i: u16| Domain::Origin(OriginId(i));
    let mut offsets = Vec::new();
    for s in 0..150u64 {
        add(&mut est, s, 0, 1, 3_000_000_000);
        if s < 30 {
            add(&mut est, s, 1, 2, -3_603_000_000_000);
        } else {
            add(&mut est, s, 2, 3, 5_000_000_000);
            add(&mut est, s, 4, 5, 7_000_000_000);
        }
        let at = (s + 1) * BUCKET_NS;
        est.advance(at);
        offsets = est.offsets(at, false);
    }
    let by: HashMap<Domain, &ClockOffset> = offsets.iter().map(|o| (o.domain.clone(), o)).collect();
    assert!(
        !by.contains_key(&d(4)) && !by.contains_key(&d(5)),
        "{offsets:?}"
    );
    assert!((by[&d(1)].offset_ns - 3e9).abs() < 1_000.0);
    for (i, want) in [(2, -3600e9), (3, -3595e9)] {
        let o = by[&d(i)];
        assert_eq!(o.reference, d(0));
        assert!((o.offset_ns - want).abs() < 10_000.0, "{o:?}");
        // At least the bounds of pairs 0-1 and 1-2 (the latter widened by the drift the
        // fit allows over its last minute in the window), and finite.
        assert!(o.error_ns >= 150_000.0 && o.error_ns < 1e9, "{o:?}");
    }
    assert!(by[&d(3)].error_ns > by[&d(2)].error_ns);
}

#[test]
fn reports_stop_shortly_after_the_evidence() {
    let mut est = ClockEstimator::new(ClockConfig::default());
    for s in 0..20u64 {
        est.add(bounds(0, 1, s, (1_100, 1_200), (900, 1_000)));
    }
    let every = 10 * BUCKET_NS;
    let mut done = 0;
    let mut fresh = Vec::new();
    while let Some(at) = est.next_boundary(done) {
        est.advance(at);
        done = at;
        if est.fresh(at, every) {
            fresh.push(at / BUCKET_NS);
        }
    }
    assert!(
        done > 40 * BUCKET_NS,
        "estimates go on while the window holds evidence"
    );
    assert_eq!(fresh.first(), Some(&1));
    assert_eq!(
        fresh.last(),
        Some(&29),
        "reports stop within `every` of the last second"
    );
}

#[test]
fn feasible_range_is_the_hard_limit_of_the_evidence() {
    // Two seconds, 10 s apart, each within ±1 of 0: a line through both boxes is at most
    // 1 away at the later one (x = 0), and, extrapolated 10 s further, at most 3.
    let points = [(-10.0, 0.0, 1.0), (0.0, 0.0, 1.0)];
    let (lo, hi) = feasible_range(&points, 1.0).unwrap();
    assert!(
        (lo + 1.0).abs() < 1e-6 && (hi - 1.0).abs() < 1e-6,
        "{lo} {hi}"
    );
    let later: Vec<(f64, f64, f64)> = points.iter().map(|(x, y, h)| (x - 10.0, *y, *h)).collect();
    let (lo, hi) = feasible_range(&later, 1.0).unwrap();
    assert!(
        (lo + 3.0).abs() < 1e-6 && (hi - 3.0).abs() < 1e-6,
        "{lo} {hi}"
    );
    // Evidence on both sides of x = 0 takes the other path.
    let around: Vec<(f64, f64, f64)> = points.iter().map(|(x, y, h)| (x + 5.0, *y, *h)).collect();
    let (lo, hi) = feasible_range(&around, 1.0).unwrap();
    assert!(
        (lo + 1.0).abs() < 1e-6 && (hi - 1.0).abs() < 1e-6,
        "{lo} {hi}"
    );
    // A slope limit narrows it; contradicting seconds leave nothing.
    let (lo, hi) = feasible_range(&later, 0.05).unwrap();
    assert!(
        (lo + 1.5).abs() < 1e-6 && (hi - 1.5).abs() < 1e-6,
        "{lo} {hi}"
    );
    assert_eq!(
        feasible_range(&[(0.0, 0.0, 1.0), (0.0, 5.0, 1.0)], 1.0),
        None
    );
}

#[test]
fn a_traced_node_without_an_estimate_is_corrected_by_its_hosts_coarse_offset() {
    let mut alignment = Alignment::none();
    let host = Address::parse("10.0.0.2:80");
    alignment.set_host(causeway_sources::HostKey::of(&host), 3_600_000_000_000);
    let history = History::default();
    let mut recent = Recent::new(&history);
    let node = Some(Domain::Node("ws".into()));
    let raw = Some(7_200_000_000_000);
    let at = 3_600_000_000_000;
    assert_eq!(
        corrected(raw, &node, &host, at, &mut recent, &alignment),
        Some(3_600_000_000_000)
    );
    // A host the bootstrap did not see is taken as the reference.
    let other = Address::parse("10.0.0.3:80");
    assert_eq!(
        corrected(raw, &node, &other, at, &mut recent, &alignment),
        raw
    );
}

/// A traced node's first estimate rests on one second whose requests queued (9.5 ms, within
/// 12.5 ms); the bootstrap had its host at 0 within 3 ms: the alignment corrects it until an
/// estimate knows the clock better than that.
#[test]
fn a_traced_nodes_loose_estimate_gives_way_to_a_tighter_alignment() {
    let ms = 1_000_000.0;
    let mut alignment = Alignment::none();
    let host = Address::Name("service1".into());
    alignment.set_host(causeway_sources::HostKey::of(&host), 0);
    alignment.set_host_bound(causeway_sources::HostKey::of(&host), 3_000_000);
    let node = Domain::Node("service1".into());
    let estimate = |at: Time, offset: f64, error: f64| ClockOffset {
        domain: node.clone(),
        reference: Domain::Node("init".into()),
        at,
        offset_ns: offset,
        drift_ppm: 0.0,
        error_ns: error,
        seconds: 1,
        last: false,
    };
    let mut history = History::default();
    history.insert(
        node.clone(),
        [
            estimate(8 * BUCKET_NS, 9.5 * ms, 12.5 * ms),
            estimate(9 * BUCKET_NS, 1.0 * ms, 2.0 * ms),
        ]
        .into(),
    );
    let mut recent = Recent::new(&history);
    let raw = 8 * BUCKET_NS + 276_000_000;
    let node = Some(node);
    let at = raw;
    assert_eq!(
        corrected(Some(raw), &node, &host, at, &mut recent, &alignment),
        Some(raw)
    );
    let later = 9 * BUCKET_NS + 276_000_000;
    assert_eq!(
        corrected(Some(later), &node, &host, later, &mut recent, &alignment),
        Some(later - 1_000_000)
    );
}

#[test]
fn messages_in_the_reference_clock_alone_do_not_wait_for_estimates() {
    use std::sync::Mutex;
    use timely::dataflow::InputHandle;
    use timely::dataflow::operators::{Input, Inspect};

    type Corrected = (u16, Option<Time>, Option<Time>);
    let got: Arc<Mutex<Vec<Corrected>>> = Arc::default();
    let sink = Arc::clone(&got);
    timely::execute_directly(move |worker| {
        let mut messages = InputHandle::new();
        let mut estimates = InputHandle::new();
        worker.dataflow::<Time, _, _>(|scope| {
            let m = scope
                .input_from(&mut messages)
                .container::<Vec<Box<Message>>>();
            let e = scope
                .input_from(&mut estimates)
                .container::<Vec<ClockOffset>>();
            m.correct(
                e,
                1_000_000_000,
                Arc::new(Alignment::none()),
                Some(Domain::Origin(OriginId(0))),
            )
            .inspect(move |m| {
                sink.lock()
                    .unwrap()
                    .push((m.origin.0, m.send_corrected_ns, m.recv_corrected_ns))
            });
        });
        let t = 5_000_000_000;
        let message = |origin: u16, recv: Option<u16>| Message {
            send_ns: Some(t),
            recv_ns: recv.map(|_| t + 1_000),
            send_domain: Some(Domain::Origin(OriginId(origin))),
            recv_domain: recv.map(|r| Domain::Origin(OriginId(r))),
            origin: OriginId(origin),
            event_ns: t,
            ..Message::default()
        };
        messages.send(Box::new(message(0, Some(0))));
        messages.send(Box::new(message(1, None)));
        messages.send(Box::new(message(2, Some(0))));
        messages.advance_to(t + 1);
        for _ in 0..50 {
            worker.step();
        }
        // The estimates' frontier is still at 0: only the message seen in the reference
        // clock alone has left, uncorrected.
        assert_eq!(*got.lock().unwrap(), vec![(0, Some(t), Some(t + 1_000))]);
        estimates.advance_to(t + 10_000_000_000);
        for _ in 0..50 {
            worker.step();
        }
        let mut all = got.lock().unwrap().clone();
        all.sort();
        assert_eq!(
            all,
            vec![
                (0, Some(t), Some(t + 1_000)),
                (1, Some(t), None),
                (2, Some(t), Some(t + 1_000)),
            ]
        );
    });
}

proptest::proptest! {
    /// A batch's bounds are those of its messages' samples, aggregated one by one as
    /// `clock.bounds` does (node domains, both orders, several seconds and host pairs).
    #[test]
    fn batch_bounds_are_the_bounds_of_the_samples(
        msgs in proptest::collection::vec(
            (0u8..4, 0u8..4, 0u8..3, 0u8..3, 0u64..3_000, 0u64..5_000_000, proptest::bool::ANY),
            0..120,
        )
    ) {
        let name = |i: u8| -> crate::names::NodeName { Arc::from(format!("n{i}").as_str()) };
        let messages: Vec<Message> = msgs
            .iter()
            .map(|&(src, dst, sd, rd, at_ms, delay, one_sided)| Message {
                src: name(src),
                dst: name(dst),
                send_ns: Some(1_000_000_000 + at_ms * 1_000_000),
                recv_ns: (!one_sided).then_some(1_000_000_000 + at_ms * 1_000_000 + delay),
                send_domain: Some(Domain::Node(name(sd))),
                recv_domain: Some(Domain::Node(name(rd))),
                event_ns: at_ms * 1_000_000,
                ..Message::default()
            })
            .collect();
        let mut want: BTreeMap<(Time, Domain, Domain, u64), DelayBounds> = BTreeMap::new();
        for s in messages.iter().filter_map(sample_of) {
            let bucket = s.at / BUCKET_NS;
            want.entry((bucket, s.a.clone(), s.b.clone(), s.pair))
                .or_insert(DelayBounds::empty(s.a, s.b, s.pair, bucket))
                .record(s.forward, s.delay_ns);
        }
        let mut batch = BatchBounds::default();
        for m in &messages {
            batch.add(m);
        }
        let mut got = batch.take();
        got.sort_by(|x, y| (x.bucket, &x.a, &x.b, x.pair).cmp(&(y.bucket, &y.a, &y.b, y.pair)));
        let want: Vec<DelayBounds> = want.into_values().collect();
        proptest::prop_assert_eq!(got, want);
        proptest::prop_assert!(batch.take().is_empty());
    }
}
