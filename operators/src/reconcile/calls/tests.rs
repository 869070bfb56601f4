//! Tests of `reconcile.calls`.

use super::*;
use crate::reconcile::merge::NatFact;
use causeway_sources::Endpoint;
use timely::dataflow::operators::capture::Extract;
use timely::dataflow::operators::{Capture, ToStream};

#[allow(clippy::too_many_arguments)]
fn call(
    origin: u16,
    ts: Time,
    node: &str,
    local: &str,
    peer: &str,
    direction: Direction,
    offset: u64,
    bytes: u64,
) -> SocketCall {
    SocketCall {
        origin: OriginId(origin),
        ts_ns: ts,
        node: node.into(),
        transport: Transport::Tcp,
        local: Address::Endpoint(local.parse::<Endpoint>().unwrap()),
        peer: Address::Endpoint(peer.parse::<Endpoint>().unwrap()),
        direction,
        offset,
        bytes,
        payload_hash: 0,
        opener: Opener::Unknown,
    }
}

fn run(calls: Vec<SocketCall>) -> Vec<Box<Message>> {
    run_with_facts(calls).0
}

/// The messages (by event time) and the translation facts.
fn run_with_facts(calls: Vec<SocketCall>) -> (Vec<Box<Message>>, Vec<NatFact>) {
    let names = Arc::new(Names::default());
    let alignment = Arc::new(Alignment::default());
    let (messages, facts) = timely::example(move |scope| {
        let out = calls
            .to_stream(scope)
            .container::<Vec<_>>()
            .reconcile_calls(CallsConfig::default(), names, alignment);
        (out.messages.capture(), out.facts.capture())
    });
    let mut m: Vec<Box<Message>> = messages
        .extract()
        .into_iter()
        .flat_map(|(_, m)| m)
        .collect();
    m.sort_by_key(|m| m.event_ns);
    let f = facts.extract().into_iter().flat_map(|(_, f)| f).collect();
    (m, f)
}

/// `call`, saying which end connected.
fn opened(opener: Opener, c: SocketCall) -> SocketCall {
    SocketCall { opener, ..c }
}

const C: &str = "10.0.0.1:40000";
const S: &str = "10.0.0.2:80";

#[test]
fn writes_and_reads_split_differently_make_one_message_each_way() {
    use Direction::{Recv, Send};
    let calls = vec![
        // Client writes the request in two calls; the server reads it in three.
        call(0, 1_000, "curl[1]@a", C, S, Send, 0, 100),
        call(0, 1_100, "curl[1]@a", C, S, Send, 100, 50),
        call(1, 1_500, "srv[2]@b", S, C, Recv, 0, 60),
        call(1, 1_600, "srv[2]@b", S, C, Recv, 60, 60),
        call(1, 1_700, "srv[2]@b", S, C, Recv, 120, 30),
        // The server answers; the client reads it in one call.
        call(1, 5_000, "srv[2]@b", S, C, Send, 0, 4000),
        call(0, 6_000, "curl[1]@a", C, S, Recv, 0, 4000),
    ];
    let m = run(calls);
    assert_eq!(m.len(), 2, "{m:#?}");
    assert_eq!(
        (
            &*m[0].src,
            &*m[0].dst,
            m[0].send_ns,
            m[0].recv_ns,
            m[0].bytes
        ),
        ("curl[1]@a", "srv[2]@b", Some(1_000), Some(1_500), Some(150))
    );
    assert_eq!(
        (&*m[1].src, m[1].send_ns, m[1].recv_ns, m[1].bytes),
        ("srv[2]@b", Some(5_000), Some(6_000), Some(4000))
    );
    assert_eq!(m[0].send_domain, Some(Domain::Origin(OriginId(0))));
    assert_eq!(m[0].recv_domain, Some(Domain::Origin(OriginId(1))));
}

#[test]
fn pipelined_requests_take_the_time_of_the_read_holding_their_first_byte() {
    use Direction::{Recv, Send};
    let calls = vec![
        call(0, 1_000, "c[1]@a", C, S, Send, 0, 10),
        call(1, 2_000, "s[2]@a", S, C, Recv, 0, 10),
        call(1, 2_500, "s[2]@a", S, C, Send, 0, 5),
        call(0, 3_000, "c[1]@a", C, S, Recv, 0, 5),
        // Two requests; the server reads both at once.
        call(0, 4_000, "c[1]@a", C, S, Send, 10, 10),
        call(0, 4_100, "c[1]@a", C, S, Recv, 5, 0),
        call(0, 4_200, "c[1]@a", C, S, Send, 20, 10),
        call(1, 5_000, "s[2]@a", S, C, Recv, 10, 20),
    ];
    let m = run(calls);
    let reqs: Vec<_> = m.iter().filter(|m| &*m.src == "c[1]@a").collect();
    assert_eq!(reqs.len(), 2, "{m:#?}");
    assert_eq!(reqs[0].recv_ns, Some(2_000));
    let later: Vec<_> = m
        .iter()
        .filter(|m| &*m.src == "c[1]@a" && m.send_ns >= Some(4_000))
        .map(|m| (m.send_ns, m.recv_ns, m.bytes))
        .collect();
    // The empty read ended nothing, so both writes are one run.
    assert_eq!(later, vec![(Some(4_000), Some(5_000), Some(20))]);
}

#[test]
fn an_untraced_sender_is_named_by_address_and_receives_make_the_runs() {
    use Direction::{Recv, Send};
    let calls = vec![
        call(1, 1_500, "srv[2]@b", S, C, Recv, 0, 60),
        call(1, 1_600, "srv[2]@b", S, C, Recv, 60, 60),
        call(1, 5_000, "srv[2]@b", S, C, Send, 0, 10),
    ];
    let m = run(calls);
    assert_eq!(m.len(), 2, "{m:#?}");
    assert_eq!(
        (&*m[0].src, m[0].send_ns, m[0].recv_ns, m[0].bytes),
        ("10.0.0.1", None, Some(1_500), Some(120))
    );
    assert_eq!((&*m[1].dst, m[1].recv_ns), ("10.0.0.1", None));
}

const VIP: &str = "10.0.0.100:80";
const REAL: &str = "10.0.0.2:8080";

/// A client's calls to a virtual address and the calls of the server the balancer chose.
fn through_dnat(server_first: bool) -> Vec<SocketCall> {
    use Direction::{Recv, Send};
    use Opener::{Local, Peer};
    let client = |ts, direction, offset, bytes| {
        opened(
            Local,
            call(0, ts, "curl[1]@a", C, VIP, direction, offset, bytes),
        )
    };
    let server = |ts, direction, offset, bytes| {
        opened(
            Peer,
            call(1, ts, "nginx[2]@b", REAL, C, direction, offset, bytes),
        )
    };
    let mut calls = vec![
        client(1_000, Send, 0, 100),
        server(1_500, Recv, 0, 100),
        server(3_000, Send, 0, 400),
        client(3_600, Recv, 0, 400),
    ];
    if server_first {
        // The server's clock is behind: its calls come first in event time.
        for c in &mut calls {
            if c.origin == OriginId(1) {
                c.ts_ns -= 900;
            }
        }
    }
    calls
}

#[test]
fn both_ends_through_a_destination_nat_are_one_connection() {
    for server_first in [false, true] {
        let (m, facts) = run_with_facts(through_dnat(server_first));
        let got: Vec<_> = m
            .iter()
            .map(|m| {
                (
                    &*m.src,
                    &*m.dst,
                    m.dst_endpoint.to_string(),
                    m.send_ns.is_some() && m.recv_ns.is_some(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("curl[1]@a", "nginx[2]@b", REAL.to_owned(), true),
                ("nginx[2]@b", "curl[1]@a", C.to_owned(), true),
            ],
            "server first: {server_first}"
        );
        let vip: Endpoint = VIP.parse().unwrap();
        let real: Endpoint = REAL.parse().unwrap();
        let client: Endpoint = C.parse().unwrap();
        assert_eq!(facts.len(), 2);
        assert_eq!(facts[0].public, (client, vip));
        assert_eq!(facts[0].private, (client, real));
        assert_eq!(facts[1].public, (vip, client));
    }
}

#[test]
fn a_port_used_again_for_another_server_is_not_joined() {
    use Direction::{Recv, Send};
    use Opener::{Local, Peer};
    let other = "10.0.0.3:5432";
    let calls = vec![
        // The client talks to an untraced server from port 40000 ...
        opened(Local, call(0, 1_000, "app[1]@a", C, other, Send, 0, 10)),
        opened(Local, call(0, 2_000, "app[1]@a", C, other, Recv, 0, 10)),
        // ... and, 5 s later, from the same port to a traced one that logged only its side.
        opened(
            Peer,
            call(1, 5_000_002_000, "nginx[2]@b", REAL, C, Recv, 0, 10),
        ),
    ];
    let (m, facts) = run_with_facts(calls);
    assert!(facts.is_empty(), "{facts:?}");
    assert_eq!(m.len(), 3, "{m:#?}");
    assert_eq!(&*m[2].src, "10.0.0.1");
}

#[test]
fn messages_never_come_behind_the_frontier_the_operator_holds() {
    // Calls come through an input whose frontier moves on with them, as a live source's
    // does; the request waits for its receive and the reply for the window. Each message
    // must carry a timestamp at or before its event time (what lets `link` wait nothing for
    // it), and the frontier must still move on once nothing is held.
    use Direction::{Recv, Send};
    use std::sync::Mutex;
    use timely::dataflow::InputHandle;
    use timely::dataflow::operators::{Input, Inspect, Probe};

    let ms = 1_000_000;
    let got: Arc<Mutex<Vec<(Time, Time)>>> = Arc::default();
    let sink = Arc::clone(&got);
    timely::execute_directly(move |worker| {
        let mut input = InputHandle::new();
        let probe = worker.dataflow::<Time, _, _>(|scope| {
            let out = scope
                .input_from(&mut input)
                .container::<Vec<SocketCall>>()
                .reconcile_calls(
                    CallsConfig::default(),
                    Arc::new(Names::default()),
                    Arc::new(Alignment::default()),
                );
            out.messages
                .inspect_core(move |event| {
                    if let Ok((stamp, batch)) = event {
                        let t = stamp.iter().copied().min().unwrap_or(0);
                        let mut got = sink.lock().unwrap();
                        got.extend(batch.iter().map(|m| (t, m.event_ns)));
                    }
                })
                .probe()
                .0
        });
        let calls = [
            call(0, 100 * ms, "curl[1]@a", C, S, Send, 0, 100),
            call(1, 101 * ms, "srv[2]@b", S, C, Recv, 0, 100),
            call(1, 110 * ms, "srv[2]@b", S, C, Send, 0, 400),
            // The client never logs reading the reply: it waits the window (1 s).
        ];
        for c in calls {
            let t = c.ts_ns;
            input.advance_to(t);
            input.send(c);
            input.advance_to(t + 1);
            for _ in 0..10 {
                worker.step();
            }
        }
        // While the reply waits, the frontier after the operator stays at it.
        input.advance_to(600 * ms);
        for _ in 0..20 {
            worker.step();
        }
        assert!(probe.less_equal(&(110 * ms)), "held at the reply's send");
        assert!(!probe.less_than(&(100 * ms)), "the request is reported");
        // Past the window the reply is reported and the frontier moves on.
        input.advance_to(2_000 * ms);
        for _ in 0..20 {
            worker.step();
        }
        assert!(!probe.less_than(&(2_000 * ms)));
    });
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "{got:?}");
    for (t, event) in got {
        assert!(t <= event, "a message at {event} came at {t}");
    }
}
