use super::delays::SURVIVAL_FLOOR;
use super::*;

#[test]
fn a_type_that_is_the_parent_at_a_delay_reads_likelier_there_than_elsewhere() {
    let mut d = Delays::new(1000.0);
    for i in 0..200 {
        d.add(1, 10, 1_000_000 + i * 1000, 1.0);
    }
    let at = d.log_p(1, 10, 1_100_000);
    let far = d.log_p(1, 10, 100_000_000);
    let other = d.log_p(2, 10, 1_100_000);
    assert!(at > far + 3.0, "{at} {far}");
    assert!(at > other + 3.0, "{at} {other}");
    // The share of the class's decisions: close to ln(1) near the mode's bins.
    assert!(at > (0.3f64).ln(), "{at}");
}

#[test]
fn a_task_with_more_calls_of_a_class_than_its_class_makes_is_unlikely_to_make_another() {
    let mut r = Repeats::new(1000.0);
    // Tasks of class 7 call class 3 once or twice, never more.
    for i in 0..40 {
        r.add(7, &[(3, 1 + i % 2)]);
    }
    // Too few closed tasks to say.
    assert_eq!(r.log_another(7, 3, 5), 0.0);
    for i in 0..160 {
        r.add(7, &[(3, 1 + i % 2)]);
    }
    // The first call is never weighed; a second is made by half the tasks.
    assert_eq!(r.log_another(7, 3, 0), 0.0);
    let second = r.log_another(7, 3, 1);
    assert!((second - 0.5f64.ln()).abs() < 0.01, "{second}");
    let third = r.log_another(7, 3, 2);
    let tenth = r.log_another(7, 3, 9);
    assert!(third < -4.0 && third.is_finite(), "{third}");
    assert!((tenth - third).abs() < 1e-9, "{tenth} {third}");
    // Another call class or task class knows nothing.
    assert_eq!(r.log_another(7, 4, 3), 0.0);
    assert_eq!(r.log_another(8, 3, 3), 0.0);
}

#[test]
fn only_a_task_older_than_all_but_the_lost_share_of_its_class_counts_its_age() {
    let mut d = Durations::new(1000.0);
    for i in 0..40 {
        d.add(7, 5_000_000 + i * 100_000);
    }
    // Too few closed tasks to say.
    assert_eq!(d.log_survival(7, 1_000_000_000), 0.0);
    for i in 0..960 {
        d.add(7, 5_000_000 + i * 100_000);
    }
    // Within the durations its class's tasks have, no weight at all.
    assert_eq!(d.log_survival(7, 1_000_000), 0.0);
    assert_eq!(d.log_survival(7, 50_000_000), 0.0);
    // Far older than any: a task that lost its reply rather than an open one.
    let old = d.log_survival(7, 10_000_000_000);
    assert!(old < -2.0 && old.is_finite(), "{old}");
    // Another class knows nothing yet.
    assert_eq!(d.log_survival(8, 10_000_000_000), 0.0);
}

#[test]
fn delays_fade_but_keep_their_shape() {
    let mut d = Delays::new(10.0);
    for _ in 0..1000 {
        d.add(1, 10, 2_000_000, 1.0);
    }
    let n = d.class[&10].count;
    assert!(n <= 20.0, "{n}");
    assert!(d.log_p(1, 10, 2_000_000) > d.log_p(1, 10, 200_000_000) + 3.0);
}

#[test]
fn a_signature_a_type_never_replies_with_is_unlikely() {
    let mut c = Composition::new(1000.0);
    for _ in 0..100 {
        c.add(7, 42, 1.0);
    }
    assert!(c.log_p(7, 42) > -0.1);
    assert!(c.log_p(7, 0) < -5.0);
}

#[test]
fn the_order_prior_is_a_distribution_over_ranks() {
    for rho in [1.0, 0.5, 0.2] {
        for n in 1..6 {
            let total: f64 = (0..n).map(|k| order_log_prior(rho, k, n).exp()).sum();
            assert!((total - 1.0).abs() < 1e-9, "rho {rho} n {n}: {total}");
        }
    }
    assert!(order_log_prior(0.2, 0, 3) > order_log_prior(0.2, 1, 3));
}

#[test]
fn a_size_the_parents_of_a_class_have_reads_likelier_than_others_of_the_type() {
    let mut s = Sizes::new(1000.0);
    for i in 0..200 {
        let big = size_bin(Some(300 + i));
        let small = size_bin(Some(100 + i % 20));
        s.arrival(1, big);
        s.arrival(1, small);
        s.parent(1, 10, big, 1.0);
        s.parent(1, 11, small, 1.0);
    }
    let (big, small) = (size_bin(Some(350)), size_bin(Some(110)));
    assert!(s.log_ratio(1, 10, big) > 0.5);
    assert!(s.log_ratio(1, 10, small) < -2.0);
    assert!(s.log_ratio(1, 11, small) > 0.5);
    assert_eq!(s.log_ratio(1, 10, 0), 0.0);
    assert_eq!(size_bin(None), 0);
    assert_eq!(size_bin(Some(1)), 1);
    assert_eq!(size_bin(Some(1024)), 11);
}

#[test]
fn an_arrival_type_that_precedes_a_class_beyond_chance_is_its_likely_cause() {
    let mut c = Coincidence::new(1000.0);
    for i in 0..200i64 {
        // Type 1 always 50 µs before the departure, at random before the null; type 2
        // at random before both.
        let r = (i * 7919) % 20_000_000;
        c.observe(
            10,
            &[(1, 50_000), (2, 1_000_000 + r)],
            &[(1, 1_000_000 + r), (2, 1_000_000 + (r * 3) % 20_000_000)],
        );
    }
    assert!(c.probability(1, 10, 50_000) > 0.7);
    assert!(c.probability(2, 10, 5_000_000) < 0.3);
    assert_eq!(c.probability(1, 11, 50_000), 0.0);
}

#[test]
fn delays_are_signed() {
    assert_eq!(delay(10, 7), -3);
    assert_eq!(delay(7, 10), 3);
    assert_eq!(bin(-5), 0);
}

#[test]
fn a_delay_reads_as_a_density_in_time_so_the_newer_of_two_as_common_causes_is_likelier() {
    // As many delays in every bin from 10 µs to 100 ms: per log-delay, flat.
    let mut d = Delays::new(100_000.0);
    let mut us = 10.0f64;
    while us < 100_000.0 {
        for _ in 0..20 {
            d.add(1, 10, (us * 1000.0) as i64, 1.0);
        }
        us *= BIN_RATIO;
    }
    let short = d.log_p(1, 10, 100_000);
    let long = d.log_p(1, 10, 10_000_000);
    // A hundred times the delay, a hundredth of the density (within the histogram's bins).
    let ratio = short - long;
    assert!((ratio - 100f64.ln()).abs() < 0.7, "{ratio}");
}

#[test]
fn the_hazard_is_the_density_over_the_share_still_to_come() {
    let mut d = Delays::new(100_000.0);
    for k in 0..400 {
        // Log-normal-ish: most near 1 ms, a tail to 100 ms.
        let us = 1000.0 * 1.02f64.powi(k - 200);
        d.add(1, 10, (us * 1000.0) as i64, 1.0);
    }
    let gap = |ns: i64| d.log_hazard(1, 10, ns) - d.log_p(1, 10, ns);
    // Early, almost everything is still to come; late, little is.
    assert!(gap(30_000) < 0.15, "{}", gap(30_000));
    assert!(gap(20_000_000) > gap(1_000_000) + 1.0);
    // Past every delay seen, the hazard stops growing (the survival's floor).
    assert!((gap(10_000_000_000) + f64::from(SURVIVAL_FLOOR).ln()).abs() < 1e-9);
}

#[test]
fn delays_written_to_the_millisecond_are_not_read_finer() {
    // Half the delays 0 (ties), half 1 ms: both stand for "under a millisecond".
    let mut d = Delays::new(100_000.0);
    for _ in 0..200 {
        d.add(1, 10, 0, 1.0);
        d.add(1, 10, 1_000_000, 1.0);
    }
    let tie = d.log_p(1, 10, 0);
    let one = d.log_p(1, 10, 1_000_000);
    assert!((tie - one).abs() < 0.1, "{tie} {one}");
    // Microsecond delays: 1 µs is a thousand times denser than 1 ms.
    let mut e = Delays::new(100_000.0);
    for i in 0..200 {
        e.add(1, 10, 1_000 + i, 1.0);
        e.add(1, 10, 1_000_000 + i * 7, 1.0);
    }
    let diff = e.log_p(1, 10, 1_000) - e.log_p(1, 10, 1_000_000);
    assert!((diff - 1000f64.ln()).abs() < 0.7, "{diff}");
}

/// The bins found from the edges are the logarithm's, `floor(log_1.4(µs))`, but where a
/// delay lies within rounding of an edge; below 1 µs the first, past the last edge the last.
#[test]
fn a_delays_bin_is_its_logarithms() {
    let mut d = 1.0_f64;
    let mut checked = 0;
    while d < 1e15 {
        let ns = d as i64;
        let us = (ns as f64 / 1000.0).max(1.0);
        let exact = us.ln() / BIN_RATIO.ln();
        if (exact - exact.round()).abs() > 1e-9 {
            assert_eq!(bin(ns), (exact as usize).min(BINS - 1), "{ns} ns");
            checked += 1;
        }
        d *= 1.013;
    }
    assert!(checked > 2000);
    assert_eq!(bin(-5), 0);
    assert_eq!(bin(999), 0);
    assert_eq!(bin(1_000), 0);
    assert_eq!(bin(1_400), 1);
    assert_eq!(bin(i64::MAX), BINS - 1);
}

/// The integer bins are the floating-point ones: at every ns near every edge, at every ns of
/// the first 2 ms, and at spread delays up to days.
#[test]
fn a_delays_bin_in_integers_is_its_bin_in_floating_point() {
    let mut x: u64 = 7;
    let mut checks: Vec<i64> = (-2_000..2_000_000).collect();
    for k in 0..BINS as i32 {
        let edge = (BIN_RATIO.powi(k) * 1000.0) as i64;
        checks.extend(edge - 3..=edge + 3);
    }
    for _ in 0..100_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        checks.push((x >> 20) as i64 % 400_000_000_000_000);
    }
    checks.extend([i64::MAX, i64::MIN, 1 << 62]);
    for d in checks {
        assert_eq!(bin(d), bin_by_float(d), "{d} ns");
    }
}
