use super::*;
use timely::dataflow::operators::capture::Event;
use timely::dataflow::operators::{Capture, ToStream};

fn message(src: &str, dst: &str, send: Time) -> Box<Message> {
    Box::new(Message::between(src, dst, send, send + 100_000))
}

/// The probabilities of the instances `paths` finishes from a request and its reply,
/// the reply's [`Linked::typical`] as given.
fn instances(typical: Prob) -> Vec<f64> {
    let t = 1_000_000_000_000;
    let request = Linked {
        id: 1,
        message: message("10.1.0.1:40000", "10.0.0.2:80", t),
        parents: SmallVec::new(),
        spontaneous: ONE,
        best: None,
        from_client: true,
        keys: (11, 12),
        typical: ONE,
    };
    let reply = Linked {
        id: 2,
        message: message("10.0.0.2:80", "10.1.0.1:40000", t + 1_000_000),
        parents: smallvec::smallvec![(1, ONE)],
        spontaneous: 0,
        best: Some(1),
        from_client: false,
        keys: (12, 11),
        typical,
    };
    let config = PathsConfig {
        instances: true,
        ..PathsConfig::default()
    };
    let captured = timely::example(move |scope| {
        vec![request, reply]
            .to_stream(scope)
            .container::<Vec<_>>()
            .paths(config)
            .capture()
    });
    captured
        .try_iter()
        .flat_map(|event| match event {
            Event::Messages(_, records) => records,
            Event::Progress(_) => Vec::new(),
        })
        .filter_map(|r| match r {
            PathRecord::Instance(i) => Some(i.probability),
            PathRecord::Pattern(_) => None,
        })
        .collect()
}

#[test]
fn an_instance_counts_as_much_as_its_replies_are_typical() {
    assert_eq!(instances(ONE), vec![1.0]);
    assert_eq!(instances(ONE / 4), vec![0.25]);
}

/// A chain of messages longer than [`MAX_MESSAGES`] (what a linker that chains requests
/// together gives): every message is in some instance, the first [`MAX_MESSAGES`] in the
/// root's, the rest in instances that start where it was cut, each linked to its parent.
#[test]
fn a_tree_cut_at_its_largest_size_goes_on_in_instances_of_its_own() {
    let n = 2 * MAX_MESSAGES + 10;
    let t = 1_000_000_000_000;
    let linked: Vec<Linked> = (0..n as u64)
        .map(|i| {
            let (src, dst) = if i % 2 == 0 {
                ("10.1.0.1:40000", "10.0.0.2:80")
            } else {
                ("10.0.0.2:80", "10.1.0.1:40000")
            };
            Linked {
                id: i + 1,
                message: message(src, dst, t + i * 1_000_000),
                parents: if i == 0 {
                    SmallVec::new()
                } else {
                    smallvec::smallvec![(i, ONE)]
                },
                spontaneous: if i == 0 { ONE } else { 0 },
                best: (i > 0).then_some(i),
                from_client: i == 0,
                keys: if i % 2 == 0 { (11, 12) } else { (12, 11) },
                typical: ONE,
            }
        })
        .collect();
    let config = PathsConfig {
        instances: true,
        ..PathsConfig::default()
    };
    let captured = timely::example(move |scope| {
        linked
            .to_stream(scope)
            .container::<Vec<_>>()
            .paths(config)
            .capture()
    });
    let sizes: Vec<usize> = captured
        .try_iter()
        .flat_map(|event| match event {
            Event::Messages(_, records) => records,
            Event::Progress(_) => Vec::new(),
        })
        .filter_map(|r| match r {
            PathRecord::Instance(i) => Some(i.messages.len()),
            PathRecord::Pattern(_) => None,
        })
        .collect();
    assert_eq!(sizes, vec![MAX_MESSAGES, MAX_MESSAGES, 10], "{sizes:?}");
}
