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
