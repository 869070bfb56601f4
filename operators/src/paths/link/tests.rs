use super::*;
use timely::dataflow::operators::capture::Extract;
use timely::dataflow::operators::{Capture, ToStream};

fn msg(src: &str, dst: &str, send: Time, recv: Time) -> Message {
    Message::between(src, dst, send, recv)
}

/// A message `src` → `dst` sent at `send`, received 10 µs later, of `bytes` if given.
fn sized_msg(src: &str, dst: &str, send: Time, bytes: Option<u64>) -> Message {
    let mut m = msg(src, dst, send, send + 10_000);
    m.bytes = bytes;
    m
}

fn run(messages: Vec<Message>) -> Vec<Linked> {
    run_with(messages, LinkConfig::default())
}

proptest::proptest! {
    /// A node's tasks found open at a time are exactly those asked by then and not
    /// answered before it, whatever their durations and however replies came and moved
    /// (some answered twice, the second time earlier).
    #[test]
    fn tasks_open_at_a_time_are_found(
        tasks in proptest::collection::vec(
            (0u64..1_000_000, proptest::option::of(0u64..1u64 << 40), proptest::option::of(0u64..1000)),
            1..60,
        ),
        probes in proptest::collection::vec(0u64..2_000_000_000_000, 1..20),
    ) {
        let mut node = NodeTasks::default();
        let mut truth = Vec::new();
        for (i, &(request_ns, first, earlier)) in tasks.iter().enumerate() {
            let task = i as u64;
            // Known at insertion or told later.
            let at_insert = first.filter(|d| d % 2 == 0).map(|d| request_ns + d);
            node.insert(TaskRef { request_ns, task, reply_ns: at_insert, event_ns: 0 });
            let mut reply = at_insert;
            if at_insert.is_none() {
                if let Some(d) = first {
                    node.answer(request_ns, task, None, request_ns + d);
                    reply = Some(request_ns + d);
                }
            }
            if let (Some(r), Some(e)) = (reply, earlier) {
                let new = request_ns + (r - request_ns) * e / 1000;
                node.answer(request_ns, task, reply, new);
                reply = Some(new);
            }
            truth.push((request_ns, task, reply));
        }
        for at in probes {
            let mut found = Vec::new();
            node.open_at(at, |t| {
                if t.reply_ns.is_none_or(|r| r >= at) {
                    found.push(t.task);
                }
            });
            found.sort_unstable();
            let expected: Vec<u64> = truth
                .iter()
                .filter(|&&(q, _, r)| q <= at && r.is_none_or(|r| r >= at))
                .map(|t| t.1)
                .collect();
            proptest::prop_assert_eq!(found, expected);
        }
    }
}

fn run_with(messages: Vec<Message>, config: LinkConfig) -> Vec<Linked> {
    let captured = timely::example(move |scope| {
        messages
            .into_iter()
            .map(Box::new)
            .to_stream(scope)
            .container::<Vec<_>>()
            .link(config)
            .capture()
    });
    let mut out: Vec<Linked> = captured
        .extract()
        .into_iter()
        .flat_map(|(_, l)| l)
        .collect();
    out.sort_by_key(|l| l.message.event_ns);
    out
}

/// `n` clients 10.1.0.x call B (10.0.0.2:80), one every `spacing`; B calls C
/// (10.0.0.3:5432) 1 ms after each request: request, call, request, call...
fn clients_call_b_and_b_calls_c(n: u64, spacing: Time) -> Vec<Message> {
    const MS: Time = 1_000_000;
    let mut messages = Vec::new();
    for i in 0..n {
        let t = 1_000 * MS + i * spacing;
        let client = format!("10.1.0.{}:{}", i % 200 + 1, 40000 + i);
        messages.push(msg(&client, "10.0.0.2:80", t, t + MS / 10));
        messages.push(msg(
            &format!("10.0.0.2:{}", 50000 + i),
            "10.0.0.3:5432",
            t + MS + MS / 10,
            t + MS + 2 * MS / 10,
        ));
    }
    messages
}

#[test]
fn match_windows_close_in_order_of_their_ends() {
    let p = |from: u64, event_ns: Time| Prep {
        id: event_ns,
        from,
        to: 0,
        from_client: false,
        root: false,
        conn: 0,
        at: event_ns,
        event_ns,
        send_ns: Some(event_ns),
        only_from: None,
        callee: false,
        answers: None,
        child_to: 0,
        nested_until: None,
        answer_kind: None,
        answer_bytes: None,
        calls_back: None,
    };
    let mut w = MatchWindows::default();
    let m = || Box::new(Message::default());
    w.push(p(1, 120), m(), 100);
    w.push(p(2, 95), m(), 100);
    w.push(p(1, 150), m(), 100);
    assert_eq!(w.first_start(), Some(0));
    assert_eq!(w.next_close(), Some(100));
    let first = w.close().unwrap_or_default();
    assert_eq!(first.iter().map(|s| s.0.id).collect::<Vec<_>>(), vec![95]);
    assert_eq!(w.first_start(), Some(100));
    assert_eq!(w.next_close(), Some(200));
    let second = w.close().unwrap_or_default();
    assert_eq!(
        second.iter().map(|s| s.0.id).collect::<Vec<_>>(),
        vec![120, 150]
    );
    assert_eq!((w.first_start(), w.next_close()), (None, None));
    assert!(w.close().is_none());
}

#[test]
fn match_windows_give_out_every_message_once_and_agree_where_nothing_is_ambiguous() {
    const MS: Time = 1_000_000;
    // As below, over more than one window; enough of them that the link types are
    // learned and the later windows are matched.
    let messages = clients_call_b_and_b_calls_c(240, 7 * MS);
    let jointly = run_with(messages.clone(), LinkConfig::default());
    let alone = run_with(
        messages.clone(),
        LinkConfig {
            match_window_ns: 0,
            ..LinkConfig::default()
        },
    );
    let ids = |l: &[Linked]| {
        let mut v: Vec<u64> = l.iter().map(|l| l.id).collect();
        v.sort_unstable();
        v
    };
    let mut all: Vec<u64> = messages.iter().map(message_id).collect();
    all.sort_unstable();
    assert_eq!(ids(&jointly), all);
    assert_eq!(ids(&alone), all);
    let best = |l: &[Linked]| l.iter().map(|l| (l.id, l.best)).collect::<Vec<_>>();
    assert_eq!(best(&jointly), best(&alone));
    for (i, l) in jointly.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        assert_eq!(l.best, Some(message_id(&messages[i - 1])), "{l:?}");
    }
}

/// Pairs of tasks at B, one pair every 10 ms (see
/// [`a_call_goes_to_the_task_whose_end_fits_it`]); the messages in time order, and for
/// each pair the ids of its C calls with their true parents.
fn tasks_x_and_y(pairs: u64) -> (Vec<Message>, Vec<[(u64, u64); 2]>) {
    const MS: Time = 1_000_000;
    const US: Time = 1_000;
    let mut messages = Vec::new();
    let mut truth = Vec::new();
    for i in 0..pairs {
        let t = 1_000 * MS + i * 10 * MS;
        let (x, y) = (
            format!("10.1.0.{}:{}", i % 200 + 1, 40000 + 2 * i),
            format!("10.1.0.{}:{}", i % 200 + 1, 40001 + 2 * i),
        );
        let (cx, cy, dx) = (
            format!("10.0.0.2:{}", 20000 + 3 * i),
            format!("10.0.0.2:{}", 20001 + 3 * i),
            format!("10.0.0.2:{}", 20002 + 3 * i),
        );
        let request_x = msg(&x, "10.0.0.2:80", t - 50 * US, t);
        let request_y = msg(&y, "10.0.0.2:80", t + 50 * US, t + 100 * US);
        // The C calls, 2.05 and 1.96 ms after their requests, 10 µs apart (which
        // leaves first alternates).
        let (sx, sy) = if i % 2 == 0 {
            (t + 2_050 * US, t + 2_060 * US)
        } else {
            (t + 2_060 * US, t + 2_050 * US)
        };
        let call_x = msg(&cx, "10.0.0.3:5432", sx, sx + 10 * US);
        let call_y = msg(&cy, "10.0.0.3:5432", sy, sy + 10 * US);
        let answer_x = msg("10.0.0.3:5432", &cx, sx + 990 * US, sx + MS);
        let answer_y = msg("10.0.0.3:5432", &cy, sy + 1_390 * US, sy + 1_400 * US);
        let call_d = msg(&dx, "10.0.0.4:6379", sx + 2 * MS, sx + 2 * MS + 10 * US);
        let answer_d = msg("10.0.0.4:6379", &dx, sx + 3 * MS - 10 * US, sx + 3 * MS);
        let reply_x = msg("10.0.0.2:80", &x, sx + 4 * MS, sx + 4 * MS + 50 * US);
        let reply_y = msg("10.0.0.2:80", &y, sy + 2_400 * US, sy + 2_450 * US);
        truth.push([
            (message_id(&call_x), message_id(&request_x)),
            (message_id(&call_y), message_id(&request_y)),
        ]);
        messages.extend([
            request_x, request_y, call_x, call_y, answer_x, answer_y, call_d, answer_d, reply_x,
            reply_y,
        ]);
    }
    messages.sort_by_key(|m| m.event_ns);
    (messages, truth)
}

/// How many of the (call, true parent) pairs in `truth` `out` gives their true parent.
fn right_calls<'a>(out: &[Linked], truth: impl IntoIterator<Item = &'a (u64, u64)>) -> usize {
    let best: FastMap<u64, Option<u64>> = out.iter().map(|l| (l.id, l.best)).collect();
    truth
        .into_iter()
        .filter(|(call, request)| best.get(call) == Some(&Some(*request)))
        .count()
}

/// Pairs of tasks at B: X calls C and then D before it replies, Y calls C and replies.
/// Their C calls leave together, as long after either request; what tells them apart
/// is how each task ends: X's C answer is followed by its D call, Y's by its reply.
/// (This holds with the gap weighed without looking a call ahead too: two tasks at a
/// time leave the gap densities little to blur. What the look-ahead changes, at 46
/// tasks in flight, is measured by `benches/accuracy.rs`; here it must not break what
/// worked.) The first 100 pairs are left out: they come while the densities learn.
#[test]
fn a_call_goes_to_the_task_whose_end_fits_it() {
    let (messages, truth) = tasks_x_and_y(400);
    let out = run(messages);
    let right = right_calls(&out, truth[100..].iter().flatten());
    assert!(
        right as f64 >= 0.95 * 600.0,
        "{right} of 600 C calls given their own task"
    );
}

/// Every 10 ms, a request X comes to B and B calls C 3 ms later for it; another request,
/// Y, comes in between (0.2 to 2.7 ms before the call, spread evenly), stays open past
/// the call's answer and is replied to without a call. WAP5's exponential, which stands
/// in while nothing is learned, takes the more recent Y; the learned density, X. With a
/// warm start over the first second (100 requests), the first calls are linked with
/// what the warm-up taught, as well as the later ones; every message is linked once.
#[test]
fn a_warm_start_links_the_first_calls_with_what_the_warm_up_taught() {
    const MS: Time = 1_000_000;
    const US: Time = 1_000;
    let mut messages = Vec::new();
    let mut truth = Vec::new();
    for i in 0..400u64 {
        let t = 1_000 * MS + i * 10 * MS;
        let (x, y) = (
            format!("10.1.0.{}:{}", i % 200 + 1, 40000 + 2 * i),
            format!("10.1.0.{}:{}", i % 200 + 1, 40001 + 2 * i),
        );
        let cx = format!("10.0.0.2:{}", 20000 + i);
        let decoy = 200 * US + (i * 7_919) % 2_500 * US;
        let request_x = msg(&x, "10.0.0.2:80", t - 50 * US, t);
        let request_y = msg(
            &y,
            "10.0.0.2:80",
            t + 3 * MS - decoy - 50 * US,
            t + 3 * MS - decoy,
        );
        let call = msg(&cx, "10.0.0.3:5432", t + 3 * MS, t + 3 * MS + 10 * US);
        let answer = msg("10.0.0.3:5432", &cx, t + 3_490 * US, t + 3_500 * US);
        let reply_x = msg("10.0.0.2:80", &x, t + 4_500 * US, t + 4_550 * US);
        let reply_y = msg("10.0.0.2:80", &y, t + 6 * MS, t + 6 * MS + 50 * US);
        truth.push((message_id(&call), message_id(&request_x)));
        messages.extend([request_x, request_y, call, answer, reply_x, reply_y]);
    }
    messages.sort_by_key(|m| m.event_ns);
    let warm_start = LinkConfig {
        warmup_ns: 1_000 * MS,
        ..LinkConfig::default()
    };
    let (cold, warm) = (
        run(messages.clone()),
        run_with(messages.clone(), warm_start),
    );
    let mut ids: Vec<u64> = warm.iter().map(|l| l.id).collect();
    ids.sort_unstable();
    let mut all: Vec<u64> = messages.iter().map(message_id).collect();
    all.sort_unstable();
    assert_eq!(ids, all);
    let (cold_first, warm_first) = (
        right_calls(&cold, &truth[..100]),
        right_calls(&warm, &truth[..100]),
    );
    let (cold_later, warm_later) = (
        right_calls(&cold, &truth[100..]),
        right_calls(&warm, &truth[100..]),
    );
    assert!(
        warm_first >= 95 && cold_first < 50,
        "first 100 calls: {warm_first} right with a warm start, {cold_first} without"
    );
    // Y stays a plausible parent here, and the later calls come out about as right
    // either way (183 and 192 of 300 when written): the gap densities learned from the
    // first pass's decisions, made while the causal densities were young, carry over
    // with them. Carrying over the causal densities alone put the later calls at 290,
    // but on the generator's multi-tier trace at parallelism 45 the gaps then had to be
    // learned afresh and the per-node delay error rose from 4.5% to 9.2%.
    assert!(
        warm_later as f64 >= 0.9 * cold_later as f64,
        "later 300 calls: {warm_later} right with a warm start, {cold_later} without"
    );
}

/// Every 10 ms a report R comes to B: B queries C about 3 ms later (answered with
/// 30 kB), again about 2 ms after that answer (answered with 8 kB), and replies. A
/// dynamic page D comes too, and B queries C about 3 ms after it (answered with 4 kB)
/// and replies. Each delay varies by ±0.3 ms. In three slots of four D's query comes
/// long after R's first answer; in the fourth (the ones returned as truth), D comes 1 ms
/// before that answer and both second queries leave 2 ms after it, 20 µs apart (either
/// first): each is 2 ms after R's first answer and 3 ms after D, timing cannot tell
/// which is which, and only the sizes of their answers can ([`SizeEvidence`]).
fn reports_and_dynamic_pages(slots: u64, sized: bool) -> (Vec<Message>, Vec<(u64, u64)>) {
    const MS: Time = 1_000_000;
    const US: Time = 1_000;
    let mut messages = Vec::new();
    let mut truth = Vec::new();
    let sized_msg = |src: &str, dst: &str, send: Time, bytes: u64| {
        sized_msg(src, dst, send, sized.then_some(bytes))
    };
    for i in 0..slots {
        let t = 1_000 * MS + i * 10 * MS;
        let jitter = |k: u64| ((i * 7_919 + k * 104_729) % 601) * US;
        let (r, d) = (
            format!("10.1.0.{}:{}", i % 200 + 1, 40000 + 2 * i),
            format!("10.1.0.{}:{}", i % 200 + 1, 40001 + 2 * i),
        );
        let (c1, c2, cd) = (
            format!("10.0.0.2:{}", 20000 + 3 * i),
            format!("10.0.0.2:{}", 20001 + 3 * i),
            format!("10.0.0.2:{}", 20002 + 3 * i),
        );
        let together = i % 4 == 0;
        // R's first query leaves at `first` and is answered 0.5 ms later (received 10
        // µs after that).
        let first = t + 2_700 * US + jitter(1);
        let answered = first + 500 * US;
        let (second, request_d, query_d, reply_r, reply_d) = if together {
            // 20 µs apart, either first.
            let (second, query_d) = if i % 8 == 0 {
                (answered + 2_000 * US, answered + 2_020 * US)
            } else {
                (answered + 2_020 * US, answered + 2_000 * US)
            };
            (
                second,
                answered - 1_010 * US,
                query_d,
                second + 1_500 * US,
                query_d + 1_500 * US,
            )
        } else {
            let second = answered + 1_700 * US + jitter(2);
            let request_d = t + 3_900 * US;
            let query_d = request_d + 2_700 * US + jitter(3);
            (
                second,
                request_d,
                query_d,
                second + 1_500 * US,
                query_d + 1_500 * US,
            )
        };
        let request_r = sized_msg(&r, "10.0.0.2:80", t, 500);
        let query_1 = sized_msg(&c1, "10.0.0.3:5432", first, 260);
        let answer_1 = sized_msg("10.0.0.3:5432", &c1, answered - 10 * US, 30_000);
        let query_2 = sized_msg(&c2, "10.0.0.3:5432", second, 240);
        let answer_2 = sized_msg("10.0.0.3:5432", &c2, second + 490 * US, 8_000);
        let request = sized_msg(&d, "10.0.0.2:80", request_d, 500);
        let query = sized_msg(&cd, "10.0.0.3:5432", query_d, 250);
        let answer_d = sized_msg("10.0.0.3:5432", &cd, query_d + 490 * US, 4_000);
        if together {
            truth.push((message_id(&query_2), message_id(&answer_1)));
            truth.push((message_id(&query), message_id(&request)));
        }
        messages.extend([
            request_r,
            query_1,
            answer_1,
            query_2,
            answer_2,
            sized_msg("10.0.0.2:80", &r, reply_r, 40_000),
            request,
            query,
            answer_d,
            sized_msg("10.0.0.2:80", &d, reply_d, 9_000),
        ]);
    }
    messages.sort_by_key(|m| m.event_ns);
    (messages, truth)
}

/// Where timing cannot tell two calls apart, what answers them can
/// ([`reports_and_dynamic_pages`]): of the last 300 slots' 150 such calls, 136 right
/// with sizes and 76 (about half) without, when written.
#[test]
fn a_call_answered_like_second_queries_follows_an_answer() {
    let right = |sized: bool| {
        let (messages, truth) = reports_and_dynamic_pages(400, sized);
        right_calls(&run(messages), &truth[50..])
    };
    let (with, without) = (right(true), right(false));
    assert!(
        with >= 125 && without <= 100,
        "{with} of 150 right with sizes, {without} without"
    );
}

/// A web server B (10.0.0.2:80) serves reports (its application call, to
/// 10.0.0.4:8080, answered with 40 kB; its reply 45 kB) and dynamic pages (answered with
/// 9 kB; replying 12 kB), the two alike in their requests (500 bytes), their calls'
/// delays and their answers' times. In every slot a report and a page come in; in one
/// slot of four (`together`) their requests arrive 20 µs apart, either first, and their
/// calls leave at once, so that nothing but sizes tells which call is whose; in the others the
/// page comes 3.9 ms after the report. Returns the messages, and each `together` call
/// with its true parent. `reply_sized`: whether the replies carry their sizes.
fn reports_and_pages_at_a_web_server(
    slots: u64,
    reply_sized: bool,
) -> (Vec<Message>, Vec<(u64, u64)>) {
    const MS: Time = 1_000_000;
    const US: Time = 1_000;
    let mut messages = Vec::new();
    let mut truth = Vec::new();
    for i in 0..slots {
        let t = 1_000 * MS + i * 10 * MS;
        let jitter = |k: u64| ((i * 7_919 + k * 104_729) % 401) * US;
        let together = i % 4 == 0;
        let (start_r, start_d) = match (together, i % 8 == 0) {
            (true, true) => (t, t + 20 * US),
            (true, false) => (t + 20 * US, t),
            (false, _) => (t, t + 3_900 * US),
        };
        for (k, start, answer_bytes, reply_bytes) in
            [(0, start_r, 40_000, 45_000), (1, start_d, 9_000, 12_000)]
        {
            let client = format!("10.1.{}.{}:{}", k, i % 200 + 1, 40000 + i);
            let port = format!("10.0.0.2:{}", 20000 + 2 * i + k);
            // Together, both calls leave at once, as long after either request as
            // calls are after theirs.
            let call_at = if together {
                t + 1_200 * US + jitter(2) / 2
            } else {
                start + 1_000 * US + jitter(k)
            };
            let request = sized_msg(&client, "10.0.0.2:80", start - 10 * US, Some(500));
            let call = sized_msg(&port, "10.0.0.4:8080", call_at, Some(700));
            let answer = sized_msg(
                "10.0.0.4:8080",
                &port,
                call_at + 3_000 * US,
                Some(answer_bytes),
            );
            let reply = sized_msg(
                "10.0.0.2:80",
                &client,
                call_at + 4_500 * US,
                reply_sized.then_some(reply_bytes),
            );
            if together {
                truth.push((message_id(&call), message_id(&request)));
            }
            messages.extend([request, call, answer, reply]);
        }
    }
    messages.sort_by_key(|m| m.event_ns);
    (messages, truth)
}

/// Where neither timing nor the requests tell two calls apart, the sizes of their
/// answers and of the tasks' replies do ([`reports_and_pages_at_a_web_server`]): of the
/// last 300 slots' 150 such calls, 122 right with the replies' sizes and 66 (about
/// half) without, when written. (Not more: the together slots' other candidates come
/// with the calls, so the excess over the null counts them with the parents.)
#[test]
fn a_call_goes_to_the_task_whose_reply_is_sized_for_its_answer() {
    let right = |reply_sized: bool| {
        let (messages, truth) = reports_and_pages_at_a_web_server(400, reply_sized);
        right_calls(&run(messages), &truth[50..])
    };
    let (with, without) = (right(true), right(false));
    assert!(
        with >= 110 && without <= 90,
        "{with} of 150 right with the replies' sizes, {without} without"
    );
}

#[test]
fn the_nearest_arrival_is_the_likely_parent() {
    const MS: Time = 1_000_000;
    let messages = clients_call_b_and_b_calls_c(5, 100 * MS);
    let linked = run(messages.clone());
    assert_eq!(linked.len(), 10);
    for (i, l) in linked.iter().enumerate() {
        if i % 2 == 0 {
            assert!(l.from_client, "client requests start paths");
            assert_eq!(l.spontaneous, ONE);
        } else {
            let parent = message_id(&messages[i - 1]);
            assert_eq!(l.best, Some(parent), "{l:?}");
            assert!(l.parents[0].1 > ONE * 9 / 10, "{l:?}");
        }
    }
}

/// Request `n` from its own client to B (10.0.0.2:80), received at `t`, and B's reply
/// `reply_after` later; with `call`, B calls C (10.0.0.3:5432) 5 ms after the request and
/// is answered 1 ms later. Returns the reply's id.
fn served_by_b(messages: &mut Vec<Message>, n: u64, t: Time, reply_after: Time, call: bool) -> u64 {
    const MS: Time = 1_000_000;
    let client = format!("10.1.{}.{}:{}", n / 200, n % 200 + 1, 40000 + n);
    messages.push(msg(&client, "10.0.0.2:80", t - 100, t));
    if call {
        let port = format!("10.0.0.2:{}", 50000 + n);
        messages.push(msg(&port, "10.0.0.3:5432", t + 5 * MS, t + 5 * MS + 100));
        messages.push(msg("10.0.0.3:5432", &port, t + 6 * MS - 100, t + 6 * MS));
    }
    let reply = msg(
        "10.0.0.2:80",
        &client,
        t + reply_after,
        t + reply_after + 100,
    );
    messages.push(reply.clone());
    message_id(&reply)
}

/// Tasks served by B ([`served_by_b`]), each from its own client.
#[derive(Default)]
struct TasksOfB {
    messages: Vec<Message>,
    n: u64,
}

impl TasksOfB {
    /// Adds one ([`served_by_b`]); returns its reply's id.
    fn add(&mut self, t: Time, reply_after: Time, call: bool) -> u64 {
        self.n += 1;
        served_by_b(&mut self.messages, self.n, t, reply_after, call)
    }
}

/// The [`Linked::typical`] of message `id` among `linked`.
fn typical_of(linked: &[Linked], id: u64) -> Prob {
    linked.iter().find(|l| l.id == id).expect("linked").typical
}

#[test]
fn a_reply_far_later_than_its_kind_is_untypical_if_a_call_was_made_and_answered_in_its_gap() {
    const MS: Time = 1_000_000;
    // Requests from many clients to B (10.0.0.2:80), 10 ms apart: every other one answered
    // 1.0-1.2 ms later with no call, the others after a call to C (10.0.0.3:5432) sent
    // 5 ms after the request and answered 1 ms later, the reply 1 ms after that.
    let mut tasks = TasksOfB::default();
    let t0 = 1_000 * MS;
    for i in 0..400u64 {
        let t = t0 + i * 10 * MS;
        if i % 2 == 0 {
            tasks.add(t, MS + (i % 3) * MS / 10, false);
        } else {
            tasks.add(t, 7 * MS, true);
        }
    }
    // A slow reply, 30 ms after its request, with no call of B in between.
    let t = t0 + 4_000 * MS;
    let alone = tasks.add(t, 30 * MS, false);
    // Two requests 0.3 ms apart and one call 5 ms after them, answered 1 ms later: one
    // of the two tasks made it, and the other, whose gap holds the call and its answer
    // and is far longer than a task of its kind's, may be the one that did.
    let t = t0 + 4_100 * MS;
    let first = tasks.add(t, 30 * MS, true);
    let second = tasks.add(t + 300_000, 10 * MS, false);
    let linked = run(tasks.messages);
    let typical = |id: u64| typical_of(&linked, id);
    assert_eq!(typical(alone), ONE, "slow for its own reasons");
    let (a, b) = (typical(first), typical(second));
    assert!(a.min(b) < ONE * 9 / 10, "{a} {b}");
}

/// Two requests to B, 0.1 ms apart, each calling C 5 ms later: either call may be either
/// request's. At a node where every reply comes 1 ms after its task's answer, both
/// replies come 5 ms after: evidence against the calls as given, and their instances
/// count less. The same gap after a call no other request could have made is no such
/// evidence. Replies 1 ms after are evidence for the calls: their instances count more.
#[test]
fn a_reply_long_after_an_answer_of_a_call_in_doubt_counts_less_and_one_not_in_doubt_does_not() {
    const MS: Time = 1_000_000;
    let mut tasks = TasksOfB::default();
    // A request at `t`, its call 5 ms later answered 1 ms after, the reply `gap` after
    // the answer.
    let mut task = |t: Time, gap: Time| tasks.add(t, 6 * MS + gap, true);
    let t0 = 1_000 * MS;
    // Pairs of requests 0.1 ms apart, 20 ms between pairs, each replied to 1 ms after
    // its answer.
    let mut usual = (0, 0);
    for i in 0..400u64 {
        let t = t0 + i * 20 * MS;
        usual = (task(t, MS), task(t + MS / 10, MS));
    }
    // A pair whose replies come 5 ms after their answers.
    let t = t0 + 8_000 * MS;
    let first = task(t, 5 * MS);
    let second = task(t + MS / 10, 5 * MS);
    // A lone request, its reply 5 ms after its answer.
    let alone = task(t + 100 * MS, 5 * MS);
    tasks.messages.sort_by_key(|m| m.send_ns);
    let linked = run(tasks.messages);
    let typical = |id: u64| typical_of(&linked, id);
    let (a, b) = (typical(first), typical(second));
    assert!(a < ONE / 2 && b < ONE / 2, "{a} {b}");
    assert_eq!(typical(alone), ONE);
    // The usual pair's replies, 1 ms after their answers, bear their calls out.
    let (a, b) = (typical(usual.0), typical(usual.1));
    assert!(a > ONE && b > ONE, "{a} {b}");
}

/// A node whose tasks all call C, and requests in pairs 0.1 ms apart of which only one
/// calls: whichever task the call is given to, the other's reply follows its request
/// straight, 7 ms later, its gap holding the call and the answer. No reply of that kind
/// is ever clean, where windows as long on this node are two times in three: such
/// replies are tasks that lost a call, and count for little. (Before any was learned
/// clean, a reply type judged nothing.) The other reply, 1 ms after the call's answer
/// as every reply here is, bears the call out and counts more.
#[test]
fn a_reply_type_never_clean_where_windows_as_long_often_are_counts_little() {
    const MS: Time = 1_000_000;
    let mut tasks = TasksOfB::default();
    let t0 = 1_000 * MS;
    let mut pair = (0, 0);
    for i in 0..200u64 {
        let t = t0 + i * 20 * MS;
        pair = (
            tasks.add(t, 7 * MS, true),
            tasks.add(t + MS / 10, 7 * MS + MS / 2, false),
        );
    }
    tasks.messages.sort_by_key(|m| m.send_ns);
    let linked = run(tasks.messages);
    let typical = |id: u64| typical_of(&linked, id);
    let (a, b) = (typical(pair.0), typical(pair.1));
    // The task given the call replies as soon after its answer as tasks here do: the
    // call, in doubt between the two, is borne out.
    assert!(a.max(b) > ONE && a.min(b) < ONE / 10, "{a} {b}");
}

/// A node that makes no calls can be missing none: however many of its replies a slow
/// reply's gap holds, the gap is clean (a scan cut short must not count as a call).
#[test]
fn a_slow_reply_of_a_node_that_makes_no_calls_keeps_its_weight_however_busy_it_is() {
    const MS: Time = 1_000_000;
    let mut tasks = TasksOfB::default();
    let mut task = |t: Time, reply_after: Time| tasks.add(t, reply_after, false);
    let t0 = 1_000 * MS;
    // Quiet: replies 20 ms after their requests, which come 10 ms apart.
    for i in 0..300u64 {
        task(t0 + i * 10 * MS, 20 * MS);
    }
    // Busy: requests 0.1 ms apart, and one reply 60 ms after its request, its gap
    // holding some 600 other replies (well over what a scan once stopped at).
    let t1 = t0 + 3_100 * MS;
    let mut slow = 0;
    for i in 0..800u64 {
        let id = task(t1 + i * MS / 10, if i == 100 { 60 * MS } else { 20 * MS });
        if i == 100 {
            slow = id;
        }
    }
    tasks.messages.sort_by_key(|m| m.send_ns);
    let linked = run(tasks.messages);
    let slow = linked.iter().find(|l| l.id == slow).expect("linked");
    assert_eq!(slow.typical, ONE, "{slow:?}");
}

#[test]
fn a_call_belongs_to_the_request_it_is_nested_in_and_the_reply_ends_the_task() {
    const MS: Time = 1_000_000;
    let t0 = 1_000 * MS;
    let us = |n: u64| t0 + n * 1_000;
    // R1 and R2 come to B (10.0.0.2:80) from two clients. B calls C for R1 at 1.5 ms; C
    // answers at 3 ms; B answers R1 at 3.5 ms. R2 is answered at 2 ms, before the call's
    // answer: the call is not nested in R2, although R2 is its most recent candidate.
    // Earlier requests from other clients make port 80 fixed.
    let mut messages = Vec::new();
    for i in 0..4u64 {
        let t = t0 - 500 * MS + i * 10 * MS;
        let client = format!("10.1.0.{}:{}", 10 + i, 40000 + i);
        messages.push(msg(&client, "10.0.0.2:80", t, t + 100));
        messages.push(msg("10.0.0.2:80", &client, t + MS, t + MS + 100));
    }
    let r1 = msg("10.1.0.1:40001", "10.0.0.2:80", us(0) - 100, us(0));
    let r2 = msg("10.1.0.2:40002", "10.0.0.2:80", us(1_000) - 100, us(1_000));
    let call = msg("10.0.0.2:50000", "10.0.0.3:5432", us(1_500), us(1_600));
    let ret = msg("10.0.0.3:5432", "10.0.0.2:50000", us(2_900), us(3_000));
    let reply1 = msg("10.0.0.2:80", "10.1.0.1:40001", us(3_500), us(3_600));
    let reply2 = msg("10.0.0.2:80", "10.1.0.2:40002", us(2_000), us(2_100));
    messages.extend([
        r1.clone(),
        r2.clone(),
        call.clone(),
        ret.clone(),
        reply1.clone(),
        reply2.clone(),
    ]);
    let linked = run(messages);
    let of = |m: &Message| {
        let id = message_id(m);
        linked.iter().find(|l| l.id == id).cloned().expect("linked")
    };
    assert_eq!(of(&call).best, Some(message_id(&r1)), "{:?}", of(&call));
    let l1 = of(&reply1);
    assert_eq!(l1.best, Some(message_id(&ret)), "{l1:?}");
    assert_eq!((l1.spontaneous, l1.parents.len()), (0, 1));
    assert_eq!(of(&reply2).best, Some(message_id(&r2)));
}

#[test]
fn a_client_on_the_servers_host_starts_a_path_with_each_request() {
    const MS: Time = 1_000_000;
    let t0 = 1_000 * MS;
    // On loopback, clients and the server they call are one node (the host). Four
    // clients each send a request every 2 ms on their own connection to port 7411, and
    // the server answers each 300 µs later; the requests of the clients overlap. Each
    // request is a root: neither the client's previous answer (a call that started a
    // path itself) nor a request the server is still serving caused it.
    let mut messages = Vec::new();
    let mut requests = Vec::new();
    for i in 0..20u64 {
        for c in 0..4u64 {
            let client = format!("127.0.0.1:{}", 40000 + c);
            let t = t0 + i * 2 * MS + c * 100_000;
            let request = msg(&client, "127.0.0.1:7411", t, t + 10_000);
            requests.push(request.clone());
            messages.push(request);
            messages.push(msg("127.0.0.1:7411", &client, t + 300_000, t + 310_000));
        }
    }
    let linked = run(messages);
    assert_eq!(linked.len(), 160);
    // Once port 7411 is known to be fixed (three peers), every request is a root.
    for r in &requests[4..] {
        let id = message_id(r);
        let l = linked.iter().find(|l| l.id == id).expect("linked");
        assert_eq!(l.best, None, "{l:?}");
    }
}

/// A proxy B (10.0.0.2:80) forwards each of 2,000 requests, one every 2 ms, to C
/// (10.0.0.3:8000): 10-14 µs after it, or, one request in ten, 24-36 µs after it (a
/// thread that waited), and replies when C answers. Returns the messages and the ids of
/// the late forwards with their requests'.
fn a_proxy_that_sometimes_forwards_late() -> (Vec<Message>, Vec<(u64, u64)>) {
    const US: Time = 1_000;
    let mut messages = Vec::new();
    let mut late = Vec::new();
    for n in 0..2_000u64 {
        let t = 1_000_000 * US + n * 2_000 * US;
        let client = format!("10.1.{}.{}:{}", n / 200, n % 200 + 1, 40000 + n);
        let request = msg(&client, "10.0.0.2:80", t - 100, t);
        let delay = if n % 10 == 9 {
            24 * US + n % 7 * 2 * US
        } else {
            10 * US + n % 5 * US
        };
        let port = format!("10.0.0.2:{}", 20000 + n);
        let forward = msg(&port, "10.0.0.3:8000", t + delay, t + delay + 50);
        if n % 10 == 9 {
            late.push((message_id(&forward), message_id(&request)));
        }
        messages.push(request);
        messages.push(forward);
        messages.push(msg(
            "10.0.0.3:8000",
            &port,
            t + delay + 300 * US,
            t + delay + 300 * US + 50,
        ));
        messages.push(msg(
            "10.0.0.2:80",
            &client,
            t + delay + 320 * US,
            t + delay + 320 * US + 100,
        ));
    }
    (messages, late)
}

#[test]
fn a_call_type_that_is_never_spontaneous_keeps_its_late_calls() {
    let (messages, late) = a_proxy_that_sometimes_forwards_late();
    let linked = run(messages);
    let by_id: FastMap<u64, &Linked> = linked.iter().map(|l| (l.id, l)).collect();
    // Once the proxy's forwards have taught that they are never spontaneous (the second
    // half), a late one still goes to its request, its only candidate.
    let second_half = &late[late.len() / 2..];
    let kept = second_half
        .iter()
        .filter(|(forward, request)| by_id[forward].best == Some(*request))
        .count();
    let spontaneous: f64 = second_half
        .iter()
        .map(|(forward, _)| f64::from(by_id[forward].spontaneous) / f64::from(ONE))
        .sum::<f64>()
        / second_half.len() as f64;
    assert!(
        kept == second_half.len() && spontaneous < 0.1,
        "{kept} of {} late forwards kept, spontaneous {spontaneous:.3} on average",
        second_half.len()
    );
}

/// `x` is learned from the causes taken: twice the longest wait of the sending nodes (each
/// twice their causes' 99.9th percentile), never more than `--max-delay`, `--max-delay` while
/// a sending node has too little evidence, grown at most to twice itself plus the keep margin
/// at a time, and worked out once per sweep interval of event time.
#[test]
fn the_horizon_follows_the_delays_of_the_causes_taken() {
    let config = LinkConfig::default();
    let mut l = Linker::new(config);
    assert_eq!(l.horizon_ns, config.max_delay_ns);
    let mut t = 0;
    for _ in 0..200 {
        t += 10_000_000;
        l.learn_horizon(1, 1_000_000, t);
    }
    // Node 1's causes lie 1 ms back: its wait is 2 ms (the bucket's upper end, doubled).
    let learned = l.horizon_ns;
    assert!((2_000_000..=6_000_000).contains(&learned), "{learned}");
    assert_eq!(l.keep_ns(), 2 * (learned + config.keep_margin_ns));
    // A second node with too little evidence: the maximum again, reached within bounds.
    for _ in 0..3 {
        t += SWEEP_NS;
        let before = l.horizon_ns;
        l.learn_horizon(2, 1_000_000, t);
        assert!(l.horizon_ns <= 2 * before + config.keep_margin_ns);
    }
    for _ in 0..10 {
        t += SWEEP_NS;
        l.learn_horizon(2, 1_000_000, t);
    }
    assert_eq!(l.horizon_ns, config.max_delay_ns);
    // Within a sweep interval nothing is worked out again.
    let mut l = Linker::new(config);
    for i in 0..200 {
        l.learn_horizon(1, 1_000_000, i);
    }
    assert_eq!(l.horizon_ns, config.max_delay_ns);
}

/// A web server whose requests are answered within a millisecond, each after one query to
/// a database: `count` requests from distinct client ports, one every `every` ns, from
/// `start`; each request's event times shifted by `skew` (its sender's clock error).
fn quick_tasks(start: Time, count: u64, every: Time, skew: Time) -> Vec<Message> {
    let mut out = Vec::new();
    for i in 0..count {
        let t = start + i * every;
        let client = format!("10.9.0.1:{}", 20_000 + i % 30_000);
        let port = 40_000 + i % 20_000;
        let mut request = msg(&client, "10.0.0.1:80", t, t + 50_000);
        request.event_ns += skew;
        out.push(request);
        let web = format!("10.0.0.1:{port}");
        out.push(msg(&web, "10.0.0.2:5432", t + 150_000, t + 200_000));
        out.push(msg("10.0.0.2:5432", &web, t + 400_000, t + 450_000));
        out.push(msg("10.0.0.1:80", &client, t + 600_000, t + 650_000));
    }
    out
}

/// Pushes messages into a pipeline (one worker) and links what the frontier at `now` lets
/// through.
fn pipeline_at(messages: Vec<Message>, now: Time) -> Pipeline {
    let mut p = Pipeline::new(Linker::new(LinkConfig::default()));
    for m in messages {
        let (arrival, child) = LinkInput::roles(Box::new(m));
        if let Some(a) = arrival {
            p.push(a);
        }
        p.push(child);
    }
    p.run(Some(now), &mut Vec::new(), &mut Vec::clear);
    p
}

#[test]
fn a_system_of_quick_requests_is_linked_soon_after_the_frontier() {
    let config = LinkConfig::default();
    let now = 4_000_000_000;
    let p = pipeline_at(quick_tasks(1_000_000_000, 2_500, 1_000_000, 0), now);
    // Its tasks last 0.6 ms: twice their 99.9th percentile's bucket, at least 1 ms, and the
    // clock error's 1 ms floor.
    let slack = p.linker.lookahead.slack_ns();
    assert!(slack <= 5_000_000, "{slack}");
    // What is linked is that far behind the frontier, not the configured half second.
    // (Or at the start of a match window open there.)
    let bound = p.bound(Some(now)).unwrap_or(0);
    assert!(
        bound >= now - config.lateness_ns - 5_000_000 - config.match_window_ns,
        "{}",
        now - bound
    );
    assert!(config.order_slack_ns >= 100_000_000);
}

#[test]
fn the_order_slack_covers_the_clock_error_of_the_causes() {
    // The requests' event times lie 20 ms after the server received them (their senders'
    // clocks run ahead): a send must wait for them.
    let p = pipeline_at(
        quick_tasks(1_000_000_000, 2_500, 1_000_000, 20_000_000),
        4_000_000_000,
    );
    let slack = p.linker.lookahead.slack_ns();
    assert!((40_000_000..=80_000_000).contains(&slack), "{slack}");
}

#[test]
fn too_few_tasks_keep_the_configured_order_slack() {
    let config = LinkConfig::default();
    let p = pipeline_at(quick_tasks(1_000_000_000, 40, 50_000_000, 0), 4_000_000_000);
    assert_eq!(p.linker.lookahead.slack_ns(), config.order_slack_ns);
}
