use super::*;

/// Ten chance answers over 0-20 ms before reply `i`, the same at its shifted time,
/// shifted a little per reply so that every bin gets some.
fn add_chance(d: &mut CausalDensity, i: u64) {
    for k in 0..10u64 {
        let at = ((k * 2_000_000 + i * 7_919) % 20_000_000) as f64 + 100_000.0;
        d.add_candidate(at, 1.0);
        d.add_null(at, 1.0);
    }
}

/// Replies on a busy node: before each, one parent 1 ms back and ten other answers spread
/// over 0-20 ms, at both the reply and its shifted time. At 1 ms a gap is far likelier
/// for a parent than by chance; at 5 ms, where only chance puts answers, it is not,
/// however many were seen.
#[test]
fn a_gap_is_likely_for_a_parent_where_parents_are_and_not_where_chance_alone_puts_candidates() {
    let mut d = CausalDensity::new(20_000.0);
    assert_eq!(d.likelihood_ratio(1e6, 0.5), None, "nothing seen");
    for i in 0..5_000u64 {
        d.add_candidate(1e6, 1.0);
        add_chance(&mut d, i);
        d.step(i);
    }
    let at_parents = d.likelihood_ratio(1e6, 0.5).unwrap_or(0.0);
    assert!(at_parents > 10.0, "{at_parents}");
    let at_chance = d.likelihood_ratio(5e6, 0.5).unwrap_or(1.0);
    assert!(at_chance < 1e-6, "{at_chance}");
    let unseen = d.likelihood_ratio(60e6, 0.5).unwrap_or(1.0);
    assert!(unseen < 1e-6, "nothing seen there: {unseen}");
}

/// As above, but with fewer chance answers 50 ms before a reply than before the shifted
/// time (as many fewer as there are parents), and a chance bump at 3 ms a twentieth as
/// large as the parents'. Counted by the total excess, the parents would be almost none
/// and the bump would look like a parent's gap; the fit to the main mode counts them
/// where they are.
#[test]
fn a_deficit_far_away_does_not_make_a_chance_bump_look_like_parents() {
    let mut d = CausalDensity::new(20_000.0);
    for i in 0..5_000u64 {
        d.add_candidate(1e6, 1.0);
        if i % 20 == 0 {
            d.add_candidate(3e6, 1.0);
        }
        d.add_null(50e6, 1.0);
        add_chance(&mut d, i);
        d.step(i);
    }
    assert!(d.evidence() < 300.0, "{}", d.evidence());
    let at_parents = d.likelihood_ratio(1e6, 0.5).unwrap_or(0.0);
    assert!(at_parents > 10.0, "{at_parents}");
    let at_bump = d.likelihood_ratio(3e6, 0.5).unwrap_or(1.0);
    assert!(at_bump < 0.01, "{at_bump}");
}

#[test]
fn a_typical_delay_is_one_at_the_peak_and_nothing_where_none_was_seen() {
    let mut d = TypicalDelay::new(1000.0);
    assert_eq!(d.relative(5e6), 1.0, "nothing seen: no judgement");
    for i in 0..500u64 {
        // 1.0 ms, 1.05 ms and 0.95 ms in turn, clean; and as many gaps of 20 ms that
        // are not, as a task that lost a call has.
        let delay = [1.0e6, 1.05e6, 0.95e6][(i % 3) as usize];
        d.observe(delay, true, Some(true), i);
        d.observe(20e6, false, Some(false), i);
    }
    assert!(d.relative(1.0e6) > 0.5, "{}", d.relative(1.0e6));
    assert_eq!(d.relative(20e6), 0.0, "what is not clean is not learned");
    assert!((d.values() - 300.0).abs() < 100.0, "{}", d.values());
}

/// Two kinds of complete task, as common as each other: one replies after 1 ms, the
/// other after 4 ms, on a node where a window of 4 ms is clean a quarter as often as
/// one of 1 ms. Weighed by how rarely their length is clean, the 4 ms gaps are as
/// typical as the 1 ms ones, though fewer of them were seen clean.
#[test]
fn clean_gaps_count_as_many_as_their_length_is_rarely_clean() {
    let mut d = TypicalDelay::new(10_000.0);
    for i in 0..4000u64 {
        // Clean: every 1 ms gap; one 4 ms gap in four; the shifted windows alike.
        d.observe(1e6, true, Some(true), i);
        d.observe(4e6, i % 4 == 0, Some(i % 4 == 1), i);
    }
    let (short, long) = (d.relative(1e6), d.relative(4e6));
    assert!(short > 0.8 && long > 0.8, "{short} {long}");
    assert_eq!(d.relative(2e6), 0.0);
}

/// A reply type whose gaps are never clean, where windows as long are clean half the
/// time, is made of tasks that lost a call (an application server's reply linked straight
/// to its request, its query given to another task): none of its unclean gaps is whole.
/// One whose gaps are clean as often as windows of their length is made of whole tasks.
/// Before 20 clean gaps were expected, no judgement.
#[test]
fn a_reply_type_never_clean_where_windows_as_long_often_are_is_not_whole() {
    let (mut lost, mut whole) = (TypicalDelay::new(1000.0), TypicalDelay::new(1000.0));
    for i in 0..400u64 {
        let shifted_clean = i % 2 == 0;
        lost.observe(15e6, false, Some(shifted_clean), i);
        whole.observe(15e6, i % 2 == 1, Some(shifted_clean), i);
        if i < 30 {
            assert_eq!(lost.clean_share(20.0), None, "after {i}");
        }
    }
    let (l, w) = (lost.clean_share(20.0), whole.clean_share(20.0));
    assert_eq!(l, Some(0.0));
    assert!(w.is_some_and(|w| w > 0.8), "{w:?}");
    // Nothing was learned clean for the lost type: the histogram judges nothing.
    assert_eq!(lost.relative(15e6), 1.0);
}

/// The histograms are rescaled now and then (every 40 gaps here, remembering 2); the
/// most typical delay stays typical across it.
#[test]
fn a_typical_delay_stays_typical_when_the_histograms_are_rescaled() {
    let mut d = TypicalDelay::new(2.0);
    for i in 0..200u64 {
        d.observe(1e6, true, Some(true), i);
        assert!(d.relative(1e6) > 0.5, "after {i}: {}", d.relative(1e6));
    }
}

#[test]
fn bins_are_five_percent_wide_from_a_microsecond() {
    assert_eq!(bin(0.0), 0);
    assert_eq!(bin(1_000.0), 0);
    assert_eq!(bin(1_060.0), 1);
    let b = bin(2_000_000.0);
    assert!(centre(b) / 2_000_000.0 > 0.97 && centre(b) / 2_000_000.0 < 1.03);
    assert_eq!(bin(1e15), BINS - 1);
}

#[test]
fn every_whole_delay_falls_in_the_bin_the_float_definition_gives() {
    let table = &*BIN_TABLE;
    let mut delays: Vec<u64> = Vec::new();
    for &e in table.edges_ns() {
        delays.extend(e.saturating_sub(2)..=e + 2);
    }
    for p in 0..63 {
        let x = 1u64 << p;
        delays.extend([x - 1, x, x + 1]);
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Delays up to about 2^40 ns (18 minutes), spread over the powers of two.
        delays.push(x >> (24 + x % 40));
    }
    for d in delays {
        assert_eq!(table.bin(d), bin_by_float(d as f64), "delay {d} ns");
        assert_eq!(bin(d as f64), bin_by_float(d as f64), "delay {d} ns");
    }
    assert_eq!(bin(1_500.5), bin_by_float(1_500.5));
    assert_eq!(bin(-3.0), 0);
}

#[test]
fn a_peak_over_a_background_scores_the_typical_delay_highest() {
    let mut d = DelayDensity::new(1000.0);
    // True delays near 2 ms; wrong candidates more often recent than not (0-25 ms,
    // denser near 0), as the candidates of a busy node are.
    let mut x = 12345u64;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) as f64 / (1u64 << 31) as f64
    };
    for i in 0..2000u64 {
        d.add(2_000_000.0 + (next() - 0.5) * 400_000.0, 0.6);
        for _ in 0..4 {
            let u = next();
            d.add(u * u * 25_000_000.0, 0.1);
        }
        d.step(i);
    }
    d.refresh();
    let at_peak = d.relative(2_000_000.0);
    assert!(at_peak > 0.8, "{at_peak}");
    assert!(d.relative(9_000_000.0) < 0.3 * at_peak);
    assert!(d.relative(300_000.0) < 0.3 * at_peak);
    // One unit of parent weight per step, faded over 1000 steps, for 2000 steps.
    let expected = 1000.0 * (1.0 - (-2.0f64).exp());
    assert!((d.evidence() - expected).abs() < 10.0, "{}", d.evidence());
}

/// A busy node: requests arrive at random, 5 a millisecond, and each causes a call 1.5-2.5 ms
/// later; answers arrive as often, on their own, and cause nothing. Every candidate within 10 ms counts,
/// at each call and at a time 50 ms earlier.
#[test]
fn the_excess_over_the_null_finds_the_parents_delay_and_the_type_that_is_never_parent() {
    let mut x = 99u64;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) as f64 / (1u64 << 31) as f64
    };
    let (mut requests, mut answers, mut calls) = (Vec::new(), Vec::new(), Vec::new());
    let mut t = 0.0;
    while t < 4e9 {
        t += -(1.0 - next()).ln() * 200_000.0;
        requests.push(t);
        calls.push(t + 1_500_000.0 + next() * 1_000_000.0);
    }
    let mut t = 0.0;
    while t < 4e9 {
        t += -(1.0 - next()).ln() * 200_000.0;
        answers.push(t);
    }
    calls.sort_by(f64::total_cmp);
    let (mut request, mut answer) = (CausalDensity::new(5000.0), CausalDensity::new(5000.0));
    let within = |list: &[f64], at: f64| -> Vec<f64> {
        list.iter()
            .filter(|&&r| r <= at && at - r < 10_000_000.0)
            .map(|r| at - r)
            .collect()
    };
    for (i, &c) in calls.iter().enumerate().filter(|(_, c)| **c > 1e8) {
        for d in within(&requests, c) {
            request.add_candidate(d, 1.0);
        }
        for d in within(&requests, c - 5e7) {
            request.add_null(d, 1.0);
        }
        for d in within(&answers, c) {
            answer.add_candidate(d, 1.0);
        }
        for d in within(&answers, c - 5e7) {
            answer.add_null(d, 1.0);
        }
        request.step(i as u64);
        answer.step(i as u64);
    }
    let at = |d: &CausalDensity, ms: f64| d.probability(ms * 1e6);
    // Where parents are (1.5-2.5 ms), a bin 5% wide holds 0.1 parents and 0.5 other
    // requests: a request there is the parent with probability 1/6. The parents are
    // modelled as a normal, which reads their flat spread somewhat high in its middle
    // and low at its edges.
    for ms in [1.8, 2.0, 2.2] {
        let p = at(&request, ms);
        assert!(p > 0.12 && p < 0.25, "{ms} ms: {p}");
    }
    for ms in [0.3, 0.5, 4.0, 6.0] {
        assert!(at(&request, ms) < 0.03, "{ms} ms: {}", at(&request, ms));
    }
    for ms in [0.5, 2.0, 6.0] {
        assert!(at(&answer, ms) < 0.03, "{ms} ms: {}", at(&answer, ms));
    }
    // Relative to the most typical delay: near 1 inside the parents' range, small
    // outside.
    let relative = request.relative(2.0e6);
    assert!(relative > 0.7 && relative <= 1.0, "{relative}");
    assert!(request.relative(5.0e6) < 0.2 * relative);
    // Both were candidates of every call, faded over 5000.
    let sends = 5000.0 * (1.0 - (-(calls.len() as f64 - 500.0) / 5000.0).exp());
    assert!(
        (request.samples() - sends).abs() < 0.05 * sends,
        "{}",
        request.samples()
    );
}

/// A delay at which a type had a handful of candidates, none of them in the null, is not
/// taken for a sure parent: without the prior it had probability 1 and set the peak
/// that every other delay is judged against.
#[test]
fn a_delay_few_candidates_had_does_not_pass_for_the_most_typical() {
    let mut d = CausalDensity::new(5000.0);
    for i in 0..20_000u64 {
        // Every send: its parent 2 ms back, and twenty other candidates spread over 0-10
        // ms, found alike at the shifted time.
        d.add_candidate(2.0e6, 1.0);
        for k in 0..20 {
            let x = ((i * 7 + k * 13) % 100) as f64 * 1e5 + 5e4;
            d.add_candidate(x, 1.0);
            d.add_null(x, 1.0);
        }
        // Once in 2,000 sends, a candidate 300 ms back that the null never had.
        if i % 2000 == 0 {
            d.add_candidate(3.0e8, 1.0);
        }
        d.step(i);
    }
    assert!(d.probability(3.0e8) < 0.1, "{}", d.probability(3.0e8));
    assert!(d.relative(2.0e6) > 0.95, "{}", d.relative(2.0e6));
    assert!(d.relative(6.0e6) < 0.1, "{}", d.relative(6.0e6));
}

/// A bump in the excess a tenth the size of the parents' mode, where no parent is (on a
/// busy node, chance makes such bumps), is not read as parents: the probability follows
/// the fitted mode.
#[test]
fn a_bump_beside_the_mode_is_not_read_as_parents() {
    let mut d = CausalDensity::new(20_000.0);
    assert_eq!(d.probability(2e6), 0.0, "nothing seen");
    for i in 0..5_000u64 {
        d.add_candidate(2e6, 1.0);
        if i % 10 == 0 {
            d.add_candidate(4e6, 1.0);
        }
        add_chance(&mut d, i);
        d.step(i);
    }
    let at_parents = d.probability(2e6);
    assert!(at_parents > 0.3, "{at_parents}");
    let at_bump = d.probability(4e6);
    assert!(at_bump < 0.01, "{at_bump}");
    assert!(d.relative(2e6) > 0.7, "{}", d.relative(2e6));
}

#[test]
fn old_evidence_fades() {
    let mut d = DelayDensity::new(100.0);
    for i in 0..1000 {
        d.add(1_000_000.0, 1.0);
        d.add(10_000_000.0, 0.0);
        d.step(i);
    }
    for i in 0..1000 {
        d.add(10_000_000.0, 1.0);
        d.add(1_000_000.0, 0.0);
        d.step(1000 + i);
    }
    d.refresh();
    assert!(d.relative(10_000_000.0) > 0.99);
    assert!(d.relative(1_000_000.0) < 0.01);
}

/// An application server's queries: nine in ten are first queries (answered with 4 kB),
/// whose parents are requests, not answers; one in ten is a second query (answered with
/// 8 kB), whose parent is an answer of the type. Each query has three candidates of the
/// type at its time and three at its shifted time, weighed alike; a second query has one
/// more (its parent). A query answered with 8 kB is far likelier than queries in general
/// to have a parent of the type, one answered with 4 kB less likely, and a size never
/// seen reads 1.
#[test]
fn a_type_is_likelier_the_parent_of_calls_whose_answers_are_sized_as_its_children_are() {
    let mut e = SizeEvidence::new(20_000.0);
    assert_eq!(e.ratio(8_000, 100.0), 1.0, "nothing seen");
    for i in 0..5_000u64 {
        let (bytes, parents) = if i % 10 == 0 {
            (8_000, 1.0)
        } else {
            (4_000, 0.0)
        };
        e.add(bytes, 3.0 * 0.2 + parents * 0.5, 3.0 * 0.2, i);
    }
    let (second, first) = (e.ratio(8_000, 100.0), e.ratio(4_000, 100.0));
    assert!(second > 8.0, "{second}");
    assert!(first < 0.2, "{first}");
    assert!((e.ratio(500, 100.0) - 1.0).abs() < 1e-9);
    assert_eq!(e.ratio(8_000, 1e9), 1.0, "too few parents to judge");
}

/// An authentication server's queries: their parents are logins' requests (220 bytes);
/// the other candidates are as often logins as session checks (180 bytes), at the query
/// and at the shifted time alike. A check's size makes a candidate far less likely the
/// parent, a login's likelier.
#[test]
fn a_size_the_parents_never_have_makes_a_candidate_unlikely() {
    let mut p = ParentSizes::new(20_000.0);
    assert_eq!(p.ratio(180, 100.0), 1.0, "nothing seen");
    for i in 0..5_000u64 {
        p.add(220, 0.5, false);
        for bytes in [180, 220] {
            p.add(bytes, 0.2, false);
            p.add(bytes, 0.2, true);
        }
        p.step(i);
    }
    let (check, login) = (p.ratio(180, 100.0), p.ratio(220, 100.0));
    assert!(check < 0.11, "{check}");
    assert!(login > 1.9, "{login}");
}

/// A web server's application calls: a report's (answered with 40 kB) has its parent in
/// a task that replies with 45 kB, a dynamic page's (answered with 9 kB) in one that
/// replies with 12 kB; every call's other candidates, at the call and at the shifted
/// time alike, are as often in tasks of either kind. Read by the pair, a report task is
/// likely the parent of a report's call and unlikely that of a page's, and the other way
/// round; a size pair never seen reads about 1.
#[test]
fn a_task_is_likelier_the_parent_of_calls_whose_answers_are_sized_for_its_reply() {
    let mut r = ReplySizes::new(20_000.0);
    assert_eq!(r.ratio(40_000, 45_000, 100.0), 1.0, "nothing seen");
    for i in 0..5_000u64 {
        let (answer, own) = if i % 5 == 0 {
            (40_000, 45_000)
        } else {
            (9_000, 12_000)
        };
        r.add(answer, own, 0.5, false);
        for reply in [45_000, 12_000] {
            r.add(answer, reply, 0.2, false);
            r.add(answer, reply, 0.2, true);
        }
        r.step(i);
    }
    let report_call = (
        r.ratio(40_000, 45_000, 100.0),
        r.ratio(40_000, 12_000, 100.0),
    );
    let page_call = (r.ratio(9_000, 12_000, 100.0), r.ratio(9_000, 45_000, 100.0));
    assert!(
        report_call.0 > 1.9 && report_call.1 < 0.11,
        "{report_call:?}"
    );
    assert!(page_call.0 > 1.9 && page_call.1 < 0.11, "{page_call:?}");
    assert!(
        (r.ratio(500, 700, 100.0) - 1.0).abs() < 1e-9,
        "an answer size never seen"
    );
    assert_eq!(
        r.ratio(40_000, 45_000, 1e9),
        1.0,
        "too few parents to judge"
    );
}
