use super::*;

fn seen(id: u64, src: u64, dst: u64, role: Role, send: Time, recv: Time) -> Seen {
    Seen {
        id,
        src,
        dst,
        role,
        send_local: Some(send),
        recv_local: Some(recv),
        conn: None,
        bytes: None,
    }
}

const C: u64 = 1;
const A: u64 = 2;
const B: u64 = 3;

/// A client calls A, A calls B, B answers, A replies: every parent is the latest arrival
/// of the one task.
#[test]
fn a_call_and_its_reply_follow_their_task() {
    let mut m = Model::new(ModelConfig::default());
    let mut finals = Vec::new();
    let req = seen(10, C, A, Role::Request, 0, 100);
    m.depart(&req);
    m.take_final(&mut finals);
    assert!(finals[0].1.from_client);
    m.arrive(&req);
    let call = seen(11, A, B, Role::Request, 200, 300);
    m.depart(&call);
    m.arrive(&call);
    let answer = seen(12, B, A, Role::Response, 400, 500);
    m.depart(&answer);
    m.arrive(&answer);
    let reply = seen(13, A, C, Role::Response, 600, 700);
    m.depart(&reply);
    m.arrive(&reply);
    m.take_final(&mut finals);
    let parent = |id| finals.iter().find(|f| f.0 == id).and_then(|f| f.1.parent());
    assert_eq!(parent(11), Some(10));
    assert_eq!(parent(12), Some(11));
    assert_eq!(parent(13), Some(12));
    assert_eq!(m.open_tasks(), 0);
}

/// Two requests from the client; the reply goes to the task whose calls are answered.
#[test]
fn a_reply_closes_a_task_whose_calls_are_answered() {
    let mut m = Model::new(ModelConfig::default());
    let r1 = seen(1, C, A, Role::Request, 0, 0);
    let r2 = seen(2, C, A, Role::Request, 10, 10);
    for r in [&r1, &r2] {
        m.depart(r);
        m.arrive(r);
    }
    let call = seen(3, A, B, Role::Request, 11, 12);
    m.depart(&call);
    m.arrive(&call);
    let reply = seen(4, A, C, Role::Response, 20, 21);
    m.depart(&reply);
    m.finalize_all();
    let mut out = Vec::new();
    m.take_final(&mut out);
    let parent = |id| out.iter().find(|f| f.0 == id).and_then(|f| f.1.parent());
    let (called, replied) = (parent(3), parent(4));
    assert!(called.is_some());
    assert_ne!(replied, called);
    // Open: A's task awaiting B, and B's task serving the call.
    assert_eq!(m.open_tasks(), 2);
}

/// Two tasks asked in turn, two calls of one class: decided together, each task takes
/// one, in the order whose delays fit both (with delays learned near 2 ms).
#[test]
fn two_calls_of_a_class_go_to_two_tasks_jointly() {
    let ms = 1_000_000;
    let mut m = Model::new(ModelConfig::default());
    // Teach: calls to B 2 ms after a request.
    let mut id = 100;
    for i in 0..200 {
        let t = i * 100 * ms;
        let r = seen(id, C, A, Role::Request, t, t);
        m.depart(&r);
        m.arrive(&r);
        let c = seen(id + 1, A, B, Role::Request, t + 2 * ms, t + 2 * ms);
        m.depart(&c);
        m.arrive(&c);
        let a = seen(id + 2, B, A, Role::Response, t + 3 * ms, t + 3 * ms);
        m.depart(&a);
        m.arrive(&a);
        let reply = seen(id + 3, A, C, Role::Response, t + 4 * ms, t + 4 * ms);
        m.depart(&reply);
        m.arrive(&reply);
        id += 4;
    }
    let t = 1_000_000 * ms;
    let r1 = seen(1, C, A, Role::Request, t, t);
    let r2 = seen(2, C, A, Role::Request, t + ms / 2, t + ms / 2);
    for r in [&r1, &r2] {
        m.depart(r);
        m.arrive(r);
    }
    // The first call fits the second request best on its own (1.9 ms), but then the
    // second call would be 1.6 ms after nothing: jointly, FIFO.
    let c1 = seen(3, A, B, Role::Request, t + 2 * ms + ms / 10, t + 2 * ms);
    let c2 = seen(4, A, B, Role::Request, t + 2 * ms + ms / 2, t + 2 * ms);
    m.depart(&c1);
    m.depart(&c2);
    m.finalize_all();
    let mut out = Vec::new();
    m.take_final(&mut out);
    let parent = |id| out.iter().find(|f| f.0 == id).and_then(|f| f.1.parent());
    assert_eq!((parent(3), parent(4)), (Some(1), Some(2)));
}

#[test]
fn open_tasks_are_forgotten_after_the_timeout() {
    let config = ModelConfig {
        task_timeout_ns: 1_000,
        ..ModelConfig::default()
    };
    let mut m = Model::new(config);
    let r = seen(1, C, A, Role::Request, 0, 0);
    m.arrive(&r);
    let later = seen(2, C, A, Role::Request, 5_000, 5_000);
    m.arrive(&later);
    m.expire();
    assert_eq!(m.open_tasks(), 1);
    assert_eq!(m.expired(), 1);
}

/// A task's calls answer lookups by call and by class alike before and after they are many
/// enough to be counted (`Kids::INDEX_FROM`), through additions and removals.
#[test]
fn a_tasks_calls_are_found_however_many_it_holds() {
    let mut kids = Kids::default();
    let mut list: Vec<(u64, u64)> = Vec::new();
    let check = |kids: &Kids, list: &[(u64, u64)]| {
        for parent in 0..8 {
            for class in 0..4 {
                assert_eq!(
                    kids.contains((parent, class)),
                    list.contains(&(parent, class))
                );
            }
        }
        for class in 0..4 {
            assert_eq!(
                kids.of_class(class),
                list.iter().filter(|k| k.1 == class).count()
            );
        }
        assert!(kids.iter().copied().eq(list.iter().copied()));
    };
    for i in 0..3 * Kids::INDEX_FROM as u64 {
        let kid = (i % 7, i % 3);
        kids.push(kid);
        list.push(kid);
        check(&kids, &list);
        if i % 5 == 4 {
            // Takes out the first occurrence, as the list does.
            let gone = (i % 7, (i + 1) % 3);
            kids.remove(gone);
            if let Some(p) = list.iter().position(|k| *k == gone) {
                list.remove(p);
            }
            check(&kids, &list);
        }
    }
    assert!(kids.index.is_some());
}

/// A task's latest arrival before a time is the last of those at or before it, arrivals
/// kept in time order.
#[test]
fn a_tasks_latest_arrival_is_the_last_before_the_time() {
    let task = Task {
        id: 1,
        caller: 0,
        class: 0,
        opened: 10,
        conn: None,
        arrivals: smallvec::smallvec![(10, 1, 0, 0), (20, 2, 0, 0), (20, 3, 0, 0), (30, 4, 0, 0)],
        outstanding: SmallVec::new(),
        kids: Kids::default(),
        signature: 0,
        foreign: false,
    };
    assert_eq!(task.latest(5), None);
    assert_eq!(task.latest(10).map(|a| a.1), Some(1));
    assert_eq!(task.latest(25).map(|a| a.1), Some(3));
    assert_eq!(task.latest(99).map(|a| a.1), Some(4));
    assert_eq!(task.newest(), 30);
}

/// A worker (a client: it serves nothing) holds a job another task's arrival opened. The
/// answer to the call it made for the job stays in the job, but the worker's next call, which
/// follows that answer beyond chance (as a closed-loop client's next request follows its
/// answers), is not made in the job: only an arrival another task caused opens or continues
/// a client's task. The answer to the worker's next pop, which another task caused (the
/// queue's next job), is that kind of arrival even though the pop was made in the job, and
/// the call after it is made in a task.
#[test]
fn a_clients_calls_join_a_task_only_after_another_tasks_arrival() {
    const W: u64 = 4;
    let ms = 1_000_000;
    let (answer_type, job_type, class) = (7, 8, 9);
    let mut m = Model::new(ModelConfig::default());
    // Learned: calls of `class` follow answers and jobs 1 ms before them, never by chance.
    for _ in 0..100 {
        m.coincidence.observe(
            class,
            &[
                (mix(answer_type, CROSS_TYPE), ms as i64),
                (mix(job_type, CROSS_TYPE), ms as i64),
            ],
            &[],
        );
    }
    let node = m.nodes.entry(W).or_default();
    remember(node, (0, 50, job_type, 0, FOREIGN, None));
    insert_task(
        node,
        Task {
            id: 50,
            caller: 0,
            class: 0,
            opened: 0,
            conn: None,
            arrivals: smallvec::smallvec![(0, 50, job_type, 0)],
            outstanding: SmallVec::new(),
            kids: Kids::default(),
            signature: 0,
            foreign: true,
        },
    );
    assign_call(node, 51, 0, 50, class, ms);
    m.answer(W, 51, false, 10 * ms, (52, None), answer_type, 0);
    assert_eq!(m.nodes[&W].recent.back().map(|r| r.4), Some(50));
    let next = seen(53, W, B, Role::Request, 11 * ms, 12 * ms);
    assert!(m.client_call(&next, 11 * ms, class).is_some(), "chained");
    // The pop, made in the job; its answer is the next job.
    assign_call(m.nodes.get_mut(&W).unwrap(), 54, 0, 52, class, 11 * ms);
    m.answer(W, 54, true, 15 * ms, (55, None), job_type, 0);
    assert_eq!(m.nodes[&W].recent.back().map(|r| r.4), Some(FOREIGN));
    let call = seen(56, W, B, Role::Request, 16 * ms, 17 * ms);
    assert!(
        m.client_call(&call, 16 * ms, class).is_none(),
        "not in the job"
    );
}

/// A worker's job came from the queue Q on its pop's connection (its pop's answer, another
/// task's doing). Its call to the service S within the window is decided in the job; its
/// next call on that connection, though as close, is the next turn of its loop and starts a
/// path, however quick the job's work was. Without connections, nothing tells the two apart.
#[test]
fn a_workers_next_pop_is_not_made_in_the_job_its_last_pop_brought() {
    const W: u64 = 4;
    const Q: u64 = 5;
    const S: u64 = 6;
    let ms = 1_000_000;
    let mut m = Model::new(ModelConfig::default());
    m.nodes.entry(Q).or_default().served = true;
    m.nodes.entry(S).or_default().served = true;
    let job_type = arrival_type(Q, Role::Response);
    let to_s = departure_class(W, S, Role::Request);
    let to_q = departure_class(W, Q, Role::Request);
    // Learned: calls of either class follow jobs 1 ms after them, never by chance.
    for class in [to_s, to_q] {
        for _ in 0..100 {
            m.coincidence
                .observe(class, &[(mix(job_type, CROSS_TYPE), ms as i64)], &[]);
        }
    }
    let pop_conn = Some(1);
    remember(
        m.nodes.entry(W).or_default(),
        (0, 50, job_type, 0, FOREIGN, pop_conn),
    );
    let mut call = seen(51, W, S, Role::Request, ms, 2 * ms);
    call.conn = Some(2);
    assert!(m.client_call(&call, ms, to_s).is_none(), "in the job");
    let mut pop = seen(52, W, Q, Role::Request, 2 * ms, 3 * ms);
    pop.conn = pop_conn;
    assert!(
        m.client_call(&pop, 2 * ms, to_q).is_some(),
        "made in the job"
    );
    pop.conn = None;
    assert!(m.client_call(&pop, 2 * ms, to_q).is_none(), "told apart");
}

/// A queue Q: a producer P pushes jobs on its connection, two workers pop them on theirs.
/// While the workers wait, each job's reply follows its push at once, and the model learns
/// that replies on the workers' connections carry the producer's requests. With a backlog
/// the pop is answered at once, its timing its own; the reply still carries a job, and the
/// oldest waiting first (two pushes, two pops: in the order the pops came, whatever the
/// order of the answers). The producer's acknowledgements, as quick after their pushes,
/// carry nothing.
#[test]
fn a_queues_replies_carry_its_jobs_in_order_through_a_backlog() {
    const P: u64 = 1;
    const Q: u64 = 5;
    const W: [u64; 2] = [2, 3];
    let us = 1_000;
    let mut m = Model::new(ModelConfig::default());
    let mut finals = Vec::new();
    let mut id = 0;
    let mut send = |m: &mut Model, src: u64, dst: u64, role: Role, at: Time, conn: u64| {
        id += 1;
        let mut s = seen(id, src, dst, role, at, at + us);
        s.conn = Some(conn);
        m.depart(&s);
        m.arrive(&s);
        id
    };
    let conn = |w: u64| 200 + w;
    // Waiting workers: a pop, then some time later (any: 0.1 to 19 ms) a push, its ack and
    // the job.
    let mut t: Time = 0;
    let mut carried = 0;
    for i in 0..200u64 {
        let w = W[(i % 2) as usize];
        let wait = 100 + (i * 7_919) % 19_000;
        send(&mut m, w, Q, Role::Request, t, conn(w));
        let push = send(&mut m, P, Q, Role::Request, t + wait * us, 100);
        send(&mut m, Q, P, Role::Response, t + (wait + 60) * us, 100);
        let job = send(&mut m, Q, w, Role::Response, t + (wait + 100) * us, conn(w));
        m.take_final(&mut finals);
        let parent = finals
            .iter()
            .find(|f| f.0 == job)
            .and_then(|f| f.1.parent());
        carried += usize::from(parent == Some(push));
        t += 20_000 * us;
    }
    assert!(
        carried > 100,
        "{carried} of 200 jobs carried while workers waited"
    );
    // A backlog: two pushes, then the two workers' pops, each answered at once; or both
    // pops, answered together, the second's written first.
    let mut wrong = Vec::new();
    for i in 0..20 {
        let a = send(&mut m, P, Q, Role::Request, t, 100);
        let ack_a = send(&mut m, Q, P, Role::Response, t + 60 * us, 100);
        let b = send(&mut m, P, Q, Role::Request, t + 1_000 * us, 100);
        let ack_b = send(&mut m, Q, P, Role::Response, t + 1_060 * us, 100);
        let (job_a, job_b);
        if i % 2 == 0 {
            send(&mut m, W[0], Q, Role::Request, t + 2_000 * us, conn(W[0]));
            job_a = send(&mut m, Q, W[0], Role::Response, t + 2_050 * us, conn(W[0]));
            send(&mut m, W[1], Q, Role::Request, t + 3_000 * us, conn(W[1]));
            job_b = send(&mut m, Q, W[1], Role::Response, t + 3_050 * us, conn(W[1]));
        } else {
            send(&mut m, W[0], Q, Role::Request, t + 2_000 * us, conn(W[0]));
            send(&mut m, W[1], Q, Role::Request, t + 2_100 * us, conn(W[1]));
            job_b = send(&mut m, Q, W[1], Role::Response, t + 2_200 * us, conn(W[1]));
            job_a = send(&mut m, Q, W[0], Role::Response, t + 2_250 * us, conn(W[0]));
        }
        m.take_final(&mut finals);
        let parent = |id| finals.iter().find(|f| f.0 == id).and_then(|f| f.1.parent());
        for (reply, want) in [(job_a, a), (job_b, b), (ack_a, a), (ack_b, b)] {
            if parent(reply) != Some(want) {
                wrong.push((reply, parent(reply), want));
            }
        }
        t += 10_000 * us;
    }
    assert!(wrong.is_empty(), "(reply, parent, true parent): {wrong:?}");
}

/// A task that computes for milliseconds after an answer before its next call looks, at
/// that call, no likelier than a task that has just been asked and calls the same service at
/// once; its reply, 50 µs after the call's answer, tells whose call it was. Taught: C's
/// requests to A make a call to B at once and another 4-6 ms after its answer, and A
/// replies 50 µs after the second answer; D's requests make one call 0.5 ms after they come.
/// Then D asks just before C's task makes its second call: by its own timing the call is
/// D's; C's task's reply takes it over.
#[test]
fn a_reply_takes_over_the_call_whose_answer_it_follows() {
    const D: u64 = 4;
    let us = 1_000;
    let ms = 1_000_000;
    let mut m = Model::new(ModelConfig::default());
    let step = |m: &mut Model, s: Seen| {
        m.depart(&s);
        m.arrive(&s);
    };
    // `from` asks A at `t` (message `id`), A calls B 0.5 ms later, B answers 1 ms after.
    let asked_and_answered = |m: &mut Model, id: u64, from: u64, t: u64| {
        step(m, seen(id, from, A, Role::Request, t, t));
        step(m, seen(id + 1, A, B, Role::Request, t + ms / 2, t + ms / 2));
        step(
            m,
            seen(id + 2, B, A, Role::Response, t + 3 * ms / 2, t + 3 * ms / 2),
        );
    };
    let mut id = 100;
    for i in 0..300 {
        let t = i * 100 * ms;
        let compute = 4 * ms + (i * 7 % 21) * ms / 10;
        asked_and_answered(&mut m, id, C, t);
        let second = t + 3 * ms / 2 + compute;
        step(&mut m, seen(id + 3, A, B, Role::Request, second, second));
        step(
            &mut m,
            seen(id + 4, B, A, Role::Response, second + ms, second + ms),
        );
        let reply = second + ms + 50 * us;
        step(&mut m, seen(id + 5, A, C, Role::Response, reply, reply));
        let u = t + 50 * ms;
        asked_and_answered(&mut m, id + 6, D, u);
        step(
            &mut m,
            seen(id + 9, A, D, Role::Response, u + 1550 * us, u + 1550 * us),
        );
        id += 10;
    }
    let t = 1_000_000 * ms;
    asked_and_answered(&mut m, 1, C, t);
    let asked = t + 6 * ms + 200 * us;
    step(&mut m, seen(4, D, A, Role::Request, asked, asked));
    let call = asked + ms / 2;
    step(&mut m, seen(5, A, B, Role::Request, call, call));
    step(&mut m, seen(6, B, A, Role::Response, call + ms, call + ms));
    let reply = call + ms + 50 * us;
    step(&mut m, seen(7, A, C, Role::Response, reply, reply));
    m.finalize_all();
    let mut out = Vec::new();
    m.take_final(&mut out);
    let parent = |id| out.iter().find(|f| f.0 == id).and_then(|f| f.1.parent());
    assert_eq!(
        parent(5),
        Some(3),
        "the second call is C's task's, after its answer"
    );
    assert_eq!(parent(7), Some(6), "its reply follows that call's answer");
    assert_eq!(m.tally.nesting_moves, 1);
}

/// A reply that could close either of two of its caller's tasks teaches the delays half as
/// much as one that could close only one: its delay follows the decision it helped make.
#[test]
fn a_reply_with_rival_tasks_teaches_its_delay_less() {
    let ms = 1_000_000;
    let mut m = Model::new(ModelConfig::default());
    let taught = |m: &Model| -> f32 { m.delays().summary().iter().map(|s| s.2).sum() };
    let request = seen(1, C, A, Role::Request, 0, 0);
    m.depart(&request);
    m.arrive(&request);
    let before = taught(&m);
    let reply = seen(2, A, C, Role::Response, 2 * ms, 2 * ms);
    m.depart(&reply);
    m.arrive(&reply);
    let alone = taught(&m) - before;
    assert!((alone - 1.0).abs() < 1e-3, "one task to close: {alone}");
    for (id, at) in [(3, 10 * ms), (4, 11 * ms)] {
        let request = seen(id, C, A, Role::Request, at, at);
        m.depart(&request);
        m.arrive(&request);
    }
    let before = taught(&m);
    let reply = seen(5, A, C, Role::Response, 13 * ms, 13 * ms);
    m.depart(&reply);
    let rivals = taught(&m) - before;
    assert!((rivals - 0.5).abs() < 2e-3, "two tasks to close: {rivals}");
}

/// A server that calls B 5 ms after each request (requests 1-3 ms apart), while the answers
/// of its other tasks' calls come at any time: the calls' coincidences, counted whatever was
/// decided, say the request at 5 ms explains a call beyond chance and another task's answer
/// just before it does not.
#[test]
fn a_calls_coincidences_tell_its_cause_from_chance() {
    let us = 1_000;
    let mut m = Model::new(ModelConfig::default());
    let mut finals = Vec::new();
    let mut id = 100;
    let mut next = || {
        id += 1;
        id
    };
    // Requests 1-3 ms apart; each one's call at +5 ms; B answers after 1.95 ms; A replies
    // 0.45 ms after the answer.
    let mut events: Vec<(Time, Seen, bool)> = Vec::new();
    let (mut t, mut lcg) = (0, 12_345u64);
    for _ in 0..300 {
        lcg = lcg.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        t += 1_000 * us + (lcg >> 33) % (2_000 * us);
        let request = seen(next(), C, A, Role::Request, t, t);
        let call = seen(next(), A, B, Role::Request, t + 5_000 * us, t + 5_000 * us);
        let answer = seen(next(), B, A, Role::Response, t + 6_950 * us, t + 6_950 * us);
        let reply = seen(next(), A, C, Role::Response, t + 7_400 * us, t + 7_400 * us);
        for s in [request, call, answer, reply] {
            events.push((s.send_local.unwrap(), s, true));
            events.push((s.recv_local.unwrap(), s, false));
        }
    }
    // Departures before arrivals at the same time.
    events.sort_by_key(|e| (e.0, !e.2));
    for (_, s, departs) in &events {
        if *departs {
            m.depart(s);
        } else {
            m.arrive(s);
        }
        m.take_final(&mut finals);
    }
    let class = departure_class(A, B, Role::Request);
    let cause = m.call_coincidence.read((
        arrival_type(CLIENT, Role::Request),
        class,
        5_000 * us as i64,
    ));
    let chance = m
        .call_coincidence
        .read((arrival_type(B, Role::Response), class, 50 * us as i64));
    assert!(m.call_coincidence.believed(class));
    assert!(cause > 0.05, "the request 5 ms before: {cause}");
    assert!(
        chance < cause / 4.0,
        "another task's answer 50 µs before: {chance}"
    );
}
