use super::judge::Judge;
use super::*;
use crate::paths::build::HopStats;
use crate::paths::pattern::tests::node;

fn summary(ms: f64) -> Summary {
    Summary {
        mean: ms,
        p50: ms,
        p90: ms,
        p99: ms,
    }
}

/// CLIENT -> web:80 -> app:5000 with end-to-end `e2e` and app delay `delay` ms.
fn pattern(app: &str, count: u64, e2e: f64, delay: f64) -> PathPattern {
    let tree = node(
        "CLIENT",
        "web",
        Some(80),
        vec![node("web", app, Some(5000), vec![])],
    );
    PathPattern {
        id: tree.id(),
        tree,
        cumulative: false,
        window: (0, 0),
        count,
        likeliest: count,
        expected: count as f64,
        max_probability: 1.0,
        end_to_end: summary(e2e),
        hops: vec![
            HopStats {
                delay: None,
                network: Some(summary(0.1)),
                ..HopStats::default()
            },
            HopStats {
                delay: Some(summary(delay)),
                network: Some(summary(0.1)),
                ..HopStats::default()
            },
        ],
        last: false,
    }
}

fn judge(rules: &[&str]) -> Judge {
    Judge::new(AlertConfig {
        rules: rules.iter().map(|r| r.parse().unwrap()).collect(),
        window_ns: 60_000_000_000,
    })
}

fn run(j: &mut Judge, t_s: u64, patterns: Vec<PathPattern>) -> Vec<Alert> {
    for p in patterns {
        j.apply(p);
    }
    let mut out = Vec::new();
    j.judge(t_s * 1_000_000_000, &mut out);
    out
}

#[test]
fn rules_parse_and_print() {
    for (text, shown) in [
        ("new-pattern", "new-pattern"),
        ("new-pattern >= 5", "new-pattern >= 5"),
        ("warning: new-pattern>4", "new-pattern >= 5"),
        ("pattern.p99 > 200ms", "pattern.p99 > 200ms"),
        ("pattern.p99>1.5s", "pattern.p99 > 1500ms"),
        (
            "critical: hop.network.mean >= 300us",
            "critical: hop.network.mean >= 0.3ms",
        ),
        (
            "node.delay.mean > 2x baseline",
            "node.delay.mean > 2x baseline",
        ),
        (
            "node.delay.p90 > 3 × baseline",
            "node.delay.p90 > 3x baseline",
        ),
        ("pattern.count < 10", "pattern.count < 10"),
        ("pattern.likeliest < 10", "pattern.likeliest < 10"),
    ] {
        let rule: AlertRule = text.parse().unwrap();
        assert_eq!(rule.to_string(), shown, "{text}");
    }
    for bad in [
        "",
        "pattern.p99",
        "pattern.p99 > fast",
        "pattern.count > 10ms",
        "node.delay.count > 3",
        "node.p99 > 3ms",
        "pattern.p99 > 0x baseline",
    ] {
        assert!(bad.parse::<AlertRule>().is_err(), "{bad:?} parsed");
    }
}

#[test]
fn threshold_fires_once_and_resolves() {
    let mut j = judge(&["pattern.p99 > 200ms"]);
    assert!(run(&mut j, 10, vec![pattern("app", 5, 50.0, 1.0)]).is_empty());
    let fired = run(&mut j, 20, vec![pattern("app", 5, 250.0, 1.0)]);
    assert_eq!(fired.len(), 1);
    let f = fired[0].rule.as_ref().unwrap();
    assert_eq!(
        (f.state.as_str(), f.value, f.threshold),
        ("firing", Some(250.0), Some(200.0))
    );
    assert!(
        fired[0].message.contains("CLIENT -> web:80"),
        "{}",
        fired[0].message
    );
    // Persisting: nothing new.
    assert!(run(&mut j, 30, vec![pattern("app", 6, 260.0, 1.0)]).is_empty());
    let resolved = run(&mut j, 40, vec![pattern("app", 6, 20.0, 1.0)]);
    assert_eq!(resolved[0].rule.as_ref().unwrap().state, "resolved");
    // Firing again, then the pattern leaves the window: resolved.
    assert_eq!(
        run(&mut j, 50, vec![pattern("app", 6, 900.0, 1.0)]).len(),
        1
    );
    let mut gone = pattern("app", 0, 0.0, 0.0);
    gone.count = 0;
    let left = run(&mut j, 60, vec![gone]);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].rule.as_ref().unwrap().value, None);
}

#[test]
fn baseline_needs_history_and_ignores_its_own_anomaly() {
    let mut j = judge(&["node.delay.mean > 2x baseline"]);
    // A jump before the baseline is established does not fire.
    assert!(run(&mut j, 10, vec![pattern("app", 5, 10.0, 1.0)]).is_empty());
    for t in 2..=7 {
        assert!(run(&mut j, t * 10, vec![pattern("app", 5, 10.0, 1.0)]).is_empty());
    }
    let fired = run(&mut j, 80, vec![pattern("app", 5, 10.0, 3.0)]);
    assert_eq!(fired.len(), 1, "{fired:?}");
    let f = fired[0].rule.as_ref().unwrap();
    assert_eq!((f.scope.as_str(), f.subject.as_str()), ("node", "web"));
    assert_eq!(f.baseline, Some(1.0));
    // Still high for a long time: the baseline does not learn it, so no resolution.
    for t in 9..30 {
        assert!(run(&mut j, t * 10, vec![pattern("app", 5, 10.0, 3.0)]).is_empty());
    }
    assert_eq!(
        run(&mut j, 300, vec![pattern("app", 5, 10.0, 1.1)]).len(),
        1
    );
}

#[test]
fn node_mean_is_weighted_across_patterns() {
    let mut j = judge(&["node.delay.mean > 2ms"]);
    // web sends to app (1 ms, 30 instances) and app2 (5 ms, 10): mean 2 ms, not above.
    let a = pattern("app", 30, 10.0, 1.0);
    let b = pattern("app2", 10, 10.0, 5.0);
    assert!(run(&mut j, 10, vec![a, b]).is_empty());
    let fired = run(&mut j, 20, vec![pattern("app2", 20, 10.0, 5.0)]);
    assert_eq!(fired.len(), 1);
    let v = fired[0].rule.as_ref().unwrap().value.unwrap();
    assert!((v - 130.0 / 50.0).abs() < 1e-9, "{v}");
}

#[test]
fn new_pattern_after_warm_up_only_and_once() {
    let mut j = judge(&["new-pattern"]);
    assert!(run(&mut j, 0, vec![pattern("app", 5, 10.0, 1.0)]).is_empty());
    // Still warming up (first window).
    assert!(run(&mut j, 30, vec![pattern("app2", 1, 10.0, 1.0)]).is_empty());
    let new = run(&mut j, 70, vec![pattern("app3", 1, 10.0, 1.0)]);
    assert_eq!(new.len(), 1);
    assert!(new[0].message.contains("new path pattern"));
    assert!(run(&mut j, 80, vec![pattern("app3", 2, 10.0, 1.0)]).is_empty());
}

#[test]
fn new_pattern_waits_for_its_minimum_count() {
    let mut j = judge(&["new-pattern >= 3"]);
    assert!(run(&mut j, 0, vec![pattern("app", 1, 10.0, 1.0)]).is_empty());
    // New, but one instance: quiet; then three: it fires, once.
    assert!(run(&mut j, 70, vec![pattern("app3", 1, 10.0, 1.0)]).is_empty());
    let new = run(&mut j, 80, vec![pattern("app3", 3, 10.0, 1.0)]);
    assert_eq!(new.len(), 1, "{new:?}");
    assert_eq!(new[0].rule.as_ref().unwrap().value, Some(3.0));
    assert!(run(&mut j, 90, vec![pattern("app3", 4, 10.0, 1.0)]).is_empty());
    // Seen in the warm-up with one instance: known, whatever it grows to.
    assert!(run(&mut j, 100, vec![pattern("app", 9, 10.0, 1.0)]).is_empty());
    assert!("new-pattern = 3".parse::<AlertRule>().is_err());
    assert!("new-pattern >= x".parse::<AlertRule>().is_err());
}

#[test]
fn forgotten_subjects_free_their_state() {
    let mut j = judge(&["new-pattern", "hop.network.p99 > 1s"]);
    run(&mut j, 0, vec![pattern("app", 5, 10.0, 1.0)]);
    let mut gone = pattern("app", 0, 0.0, 0.0);
    gone.count = 0;
    run(&mut j, 10, vec![gone]);
    run(&mut j, 700, vec![]);
    assert!(j.current.is_empty() && j.seen.is_empty() && j.standings.is_empty());
    // Back after ten windows: new again.
    assert_eq!(
        run(&mut j, 710, vec![pattern("app", 5, 10.0, 1.0)]).len(),
        1
    );
}
