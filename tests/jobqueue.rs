//! End-to-end test of a real job queue captured by tcpdump, judged against the programs' own
//! logs.
//!
//! On loopback, each program on an address of its own (Linux routes all of 127.0.0.0/8
//! locally), so that each is a node: a producer (127.0.0.21) LPUSHes jobs onto a list in a
//! real redis-server (127.0.0.22); four workers (127.0.0.31-34) each loop on `BRPOP jobs 1`
//! and, for each job popped, make one HTTP request naming the job to a python3 service
//! (127.0.0.41) over a keep-alive connection of their own. tcpdump captures it all on `lo`.
//!
//! Each job's true path is producer push → redis → redis's reply to the worker's BRPOP →
//! the worker's call to svc → svc's answer: redis answers a blocked BRPOP when an LPUSH comes
//! in on another connection. The truth comes from the programs' logs: each logs, per job, the
//! host clock (`time.time_ns()`, the clock tcpdump stamps packets with) around each of its
//! sends and receives, so each of a job's messages is the one between those stamps on the
//! connection of the addresses involved. The test runs `analyze --linker tasks` on the
//! capture and checks that the path instance holding each job's push links those messages
//! push → reply → call → answer, and that one shape of path holds at least 80% of the jobs:
//! one pattern, up to the order of a message's children (redis writes a job to the worker
//! before the push's acknowledgement when the worker waited, after it when the job waited in
//! the list, as it does under load: both are the job's path, and its pattern says which).
//!
//! Every load is bounded in count and time, and every process the test starts is killed
//! when it ends, passing or failing.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde::Deserialize;

const PRODUCER: &str = "127.0.0.21";
const REDIS: &str = "127.0.0.22";
const WORKERS: [&str; 4] = ["127.0.0.31", "127.0.0.32", "127.0.0.33", "127.0.0.34"];
const SVC: &str = "127.0.0.41";
/// Jobs pushed, one every 10-20 ms (about 6 s).
const JOBS: usize = 400;
/// The share of jobs the most common shape of path must hold (children in any order).
const MIN_SHARE: f64 = 0.8;
/// Slack around a logged time stamp when looking for a packet's (ns).
const SLACK_NS: u64 = 200_000;

/// The system's programs (python3, stdlib only): `svc`, `producer` and `worker`, each bounded
/// in time by its last argument (seconds).
const PROGRAMS: &str = r#"
import os, random, socket, sys, threading, time


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_reply(f):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise EOFError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind in (b"+", b":"):
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise RuntimeError("bad reply %r" % line)


def connect(src, host, port):
    s = socket.create_connection((host, port), timeout=5, source_address=(src, 0))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def svc(addr, port, limit):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            time.sleep(0.003)
            body = b"done " + self.path.encode() + b"\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((addr, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    time.sleep(limit)


# Logs per job: id, time before the LPUSH is sent, time its reply is read.
def producer(addr, host, port, n, log, done, limit):
    deadline = time.monotonic() + limit
    rng = random.Random(7)
    s = connect(addr, host, port)
    f = s.makefile("rb")
    with open(log, "w") as out:
        due = time.monotonic()
        for i in range(n):
            if time.monotonic() > deadline:
                break
            job = "job-%d" % i
            t_push = time.time_ns()
            s.sendall(resp("LPUSH", "jobs", job))
            read_reply(f)
            t_ack = time.time_ns()
            out.write("%s %d %d\n" % (job, t_push, t_ack))
            due += rng.uniform(0.010, 0.020)
            time.sleep(max(0.0, due - time.monotonic()))
    s.close()
    open(done, "w").close()


# Logs per job: id, time before its BRPOP was sent, time the reply was read, time before the
# HTTP request was sent, time its answer was read, HTTP status. Stops once the producer is
# done and BRPOP found the queue empty for 1 s.
def worker(addr, host, port, svc_host, svc_port, log, ready, done, limit):
    import http.client

    deadline = time.monotonic() + limit
    s = connect(addr, host, port)
    f = s.makefile("rb")
    conn = http.client.HTTPConnection(svc_host, svc_port, timeout=5, source_address=(addr, 0))
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    open(ready, "w").close()
    with open(log, "w") as out:
        while time.monotonic() < deadline:
            t_ask = time.time_ns()
            s.sendall(resp("BRPOP", "jobs", "1"))
            reply = read_reply(f)
            t_pop = time.time_ns()
            if reply is None:
                if os.path.exists(done):
                    break
                continue
            job = reply[1].decode()
            t_send = time.time_ns()
            conn.request("GET", "/job/" + job)
            answer = conn.getresponse()
            answer.read()
            t_answer = time.time_ns()
            out.write("%s %d %d %d %d %d\n" % (job, t_ask, t_pop, t_send, t_answer, answer.status))
    conn.close()
    s.close()


role, a = sys.argv[1], sys.argv[2:]
if role == "svc":
    svc(a[0], int(a[1]), float(a[2]))
elif role == "producer":
    producer(a[0], a[1], int(a[2]), int(a[3]), a[4], a[5], float(a[6]))
elif role == "worker":
    worker(a[0], a[1], int(a[2]), a[3], int(a[4]), a[5], a[6], a[7], float(a[8]))
else:
    sys.exit("unknown role " + role)
"#;

/// The processes the test started, killed (and reaped) when it drops, passing or failing.
struct Procs {
    dir: PathBuf,
    children: Vec<(String, Child)>,
}

impl Procs {
    fn new(dir: &Path) -> Procs {
        Procs {
            dir: dir.to_owned(),
            children: Vec::new(),
        }
    }

    /// Starts `cmd` as `name`, its standard error to `name.err` in the scratch directory.
    fn start(&mut self, name: &str, cmd: &mut Command) {
        let err = std::fs::File::create(self.dir.join(format!("{name}.err"))).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.children.push((name.to_owned(), child));
    }

    /// Starts `python3 PROGRAMS args...` as `name`.
    fn python(&mut self, name: &str, args: &[&str]) {
        self.start(
            name,
            Command::new("python3")
                .arg(self.dir.join("jobqueue.py"))
                .args(args),
        );
    }

    /// Waits (until `deadline`) for each of `names` to exit, and fails if one fails.
    fn wait(&mut self, names: &[&str], deadline: Instant) {
        for (name, child) in &mut self.children {
            if !names.contains(&name.as_str()) {
                continue;
            }
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break s;
                }
                assert!(Instant::now() < deadline, "{name} did not finish in time");
                std::thread::sleep(Duration::from_millis(20));
            };
            let err =
                std::fs::read_to_string(self.dir.join(format!("{name}.err"))).unwrap_or_default();
            assert!(status.success(), "{name} failed ({status}): {err}");
        }
    }

    /// Fails if `name` has exited.
    fn assert_running(&mut self, name: &str) {
        let (_, child) = self.children.iter_mut().find(|c| c.0 == name).unwrap();
        if let Some(status) = child.try_wait().unwrap() {
            let err =
                std::fs::read_to_string(self.dir.join(format!("{name}.err"))).unwrap_or_default();
            panic!("{name} exited ({status}): {err}");
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A port free on `ip` (bound, then released).
fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (at most 10 s, while `name` runs) until something accepts on `ip:port`.
fn wait_for(procs: &mut Procs, name: &str, ip: &str, port: u16) {
    let start = Instant::now();
    while TcpStream::connect((ip, port)).is_err() {
        procs.assert_running(name);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{name}: nothing listens on {ip}:{port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One job as the programs logged it.
#[derive(Debug, Default, Clone)]
struct Job {
    id: String,
    /// Before the LPUSH was sent, after its reply was read.
    push: (u64, u64),
    /// The worker's address.
    worker: String,
    /// Before the worker's BRPOP was sent, after its reply was read.
    pop: (u64, u64),
    /// Before the HTTP request was sent, after its answer was read.
    call: (u64, u64),
    status: u16,
}

fn numbers(fields: &[&str]) -> Vec<u64> {
    fields.iter().map(|f| f.parse().unwrap()).collect()
}

/// The jobs of the logs, by id, and how many times each was popped.
fn read_logs(dir: &Path) -> (BTreeMap<String, Job>, BTreeMap<String, usize>) {
    let mut jobs = BTreeMap::new();
    for line in std::fs::read_to_string(dir.join("producer.log"))
        .unwrap()
        .lines()
    {
        let f: Vec<&str> = line.split(' ').collect();
        let t = numbers(&f[1..3]);
        jobs.insert(
            f[0].to_owned(),
            Job {
                id: f[0].to_owned(),
                push: (t[0], t[1]),
                ..Job::default()
            },
        );
    }
    let mut pops = BTreeMap::new();
    for (w, addr) in WORKERS.iter().enumerate() {
        let log = dir.join(format!("worker{}.log", w + 1));
        for line in std::fs::read_to_string(log).unwrap().lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let t = numbers(&f[1..6]);
            *pops.entry(f[0].to_owned()).or_insert(0) += 1;
            let job = jobs
                .get_mut(f[0])
                .unwrap_or_else(|| panic!("{addr} popped {}, never pushed", f[0]));
            job.worker = (*addr).to_owned();
            job.pop = (t[0], t[1]);
            job.call = (t[2], t[3]);
            job.status = t[4] as u16;
        }
    }
    (jobs, pops)
}

/// A message of the analysis, as its instances name it: sender and receiver endpoints and
/// its time stamp (one sniffer: one clock).
type MessageKey = (String, String, u64);

fn ip_of(endpoint: &str) -> &str {
    endpoint.rsplit_once(':').map_or(endpoint, |(ip, _)| ip)
}

/// A line of analyze's output, as far as this test reads it. Read into types rather than
/// `serde_json::Value`: a pattern's `root` tree (left unread here) can be deeper than
/// serde_json's recursion limit when a linker chains paths.
#[derive(Debug, Deserialize)]
struct Line {
    kind: String,
    id: Option<String>,
    canonical: Option<String>,
    pattern: Option<String>,
    probability: Option<f64>,
    #[serde(default)]
    messages: Vec<Message>,
}

/// A message of an instance.
#[derive(Debug, Deserialize)]
struct Message {
    src_endpoint: String,
    dst_endpoint: String,
    send_ns: Option<u64>,
    recv_ns: Option<u64>,
    parent: Option<usize>,
}

fn key_of(m: &Message) -> MessageKey {
    let t = m
        .send_ns
        .or(m.recv_ns)
        .expect("a message without a time stamp");
    (m.src_endpoint.clone(), m.dst_endpoint.clone(), t)
}

/// `s`, cut after `n` characters.
fn short(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}... ({} characters)", &s[..i], s.chars().count()),
        None => s.to_owned(),
    }
}

/// The messages from `src` to `dst` (IPs) stamped within `[from, to]` (with slack), in time
/// order.
fn between<'a>(
    messages: &'a [MessageKey],
    src: &str,
    dst: &str,
    (from, to): (u64, u64),
) -> Vec<&'a MessageKey> {
    messages
        .iter()
        .filter(|m| ip_of(&m.0) == src && ip_of(&m.1) == dst)
        .filter(|m| m.2 + SLACK_NS >= from && m.2 <= to + SLACK_NS)
        .collect()
}

/// Where a job's path ended up in the analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// A message of the job is in no instance (not captured, or not reconstructed).
    MessageMissing,
    /// Its push is in an instance rooted elsewhere.
    PushNotRoot,
    /// Redis's reply to the worker is not a child of the push.
    ReplyNotFromPush,
    /// The worker's call to svc is not a child of that reply.
    CallNotFromReply,
    /// Svc's answer is not a child of the call.
    AnswerNotFromCall,
    /// push → reply → call → answer.
    OnPath,
}

/// Pattern text with the four workers as one (their paths are the same pattern). Nodes that
/// never serve on a fixed port are aggregated to `CLIENT` anyway (WAP5 §2.5.1), as the
/// workers are today; this keeps the count right if a linker names them.
fn generic(canonical: &str) -> String {
    let mut s = canonical.to_owned();
    for w in 1..=WORKERS.len() {
        s = s.replace(&format!("worker{w}"), "worker*");
    }
    s
}

/// `canonical` with each message's children sorted: the shape of the path, whatever the
/// order its concurrent messages were sent in (redis writes a popped job before the push's
/// acknowledgement when a worker waited, after it when the job waited in the list).
fn unordered(canonical: &str) -> String {
    fn node(s: &str) -> (String, &str) {
        let open = s.find('(').unwrap_or(s.len());
        let label = &s[..open];
        let mut rest = &s[(open + 1).min(s.len())..];
        let mut children = Vec::new();
        while !rest.is_empty() && !rest.starts_with(')') {
            let (c, r) = node(rest.trim_start_matches(' '));
            children.push(c);
            rest = r.trim_start_matches(' ');
        }
        children.sort();
        (
            format!("{label}({})", children.join(" ")),
            rest.strip_prefix(')').unwrap_or(rest),
        )
    }
    node(canonical).0
}

/// The most common entries of `counts`, as `  count  text` lines.
fn top(counts: &HashMap<String, usize>, n: usize) -> String {
    let mut v: Vec<_> = counts.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .take(n)
        .map(|(p, c)| format!("  {c:5}  {}\n", short(p, 300)))
        .collect()
}

/// Runs the system under tcpdump; returns the capture's path.
fn run_system(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("jobqueue.py"), PROGRAMS).unwrap();
    let path = |name: &str| dir.join(name).display().to_string();
    let mut servers = Procs::new(dir);
    let redis_port = free_port(REDIS);
    let svc_port = free_port(SVC);
    let (rp, sp) = (redis_port.to_string(), svc_port.to_string());
    servers.start(
        "redis",
        Command::new("redis-server")
            .args(["--bind", REDIS, "--port", &rp, "--save", ""])
            .args(["--appendonly", "no", "--protected-mode", "no"])
            .args(["--daemonize", "no", "--dir", dir.to_str().unwrap()]),
    );
    servers.python("svc", &["svc", SVC, &sp, "60"]);
    wait_for(&mut servers, "redis", REDIS, redis_port);
    wait_for(&mut servers, "svc", SVC, svc_port);

    let pcap = dir.join("capture.pcap");
    let filter = format!(
        "tcp and ((host {REDIS} and port {redis_port}) or (host {SVC} and port {svc_port}))"
    );
    let sniffer = Sniffer::start(
        "tcpdump",
        &[
            "-i",
            "lo",
            "--time-stamp-precision=nano",
            "--immediate-mode",
            "-B",
            "16384",
            "-U",
            "-w",
            pcap.to_str().unwrap(),
            &filter,
        ],
    );
    // Whatever happens to the load, tcpdump is stopped before this goes on (Sniffer has no
    // Drop of its own).
    let load = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut clients = Procs::new(dir);
        let done = path("done");
        let names: Vec<String> = (1..=WORKERS.len()).map(|w| format!("worker{w}")).collect();
        for (name, addr) in names.iter().zip(WORKERS) {
            let (log, ready) = (path(&format!("{name}.log")), path(&format!("{name}.ready")));
            clients.python(
                name,
                &[
                    "worker", addr, REDIS, &rp, SVC, &sp, &log, &ready, &done, "30",
                ],
            );
        }
        let start = Instant::now();
        for name in &names {
            while !dir.join(format!("{name}.ready")).exists() {
                clients.assert_running(name);
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "{name} did not connect"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let jobs = JOBS.to_string();
        clients.python(
            "producer",
            &[
                "producer",
                PRODUCER,
                REDIS,
                &rp,
                &jobs,
                &path("producer.log"),
                &done,
                "20",
            ],
        );
        let deadline = Instant::now() + Duration::from_secs(25);
        clients.wait(&["producer"], deadline);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        clients.wait(&names, deadline + Duration::from_secs(5));
    }));
    sniffer.stop();
    if let Err(e) = load {
        std::panic::resume_unwind(e);
    }
    drop(servers);
    pcap
}

/// A producer's jobs pass through redis to four workers, each calling a service: the task
/// linker puts each job's push, redis's reply to the worker, the worker's call and its answer
/// on one path, and one shape of path holds at least 80% of the jobs.
#[test]
fn job_queue_paths_match_the_programs_logs() {
    if !system_tools(&["redis-server", "tcpdump", "python3", "kill"]) {
        return;
    }
    let started = Instant::now();
    let dir = scratch("jobqueue");
    let pcap = run_system(&dir);
    let ran = started.elapsed();

    // The system itself: every job pushed, popped once, and served.
    let (jobs, pops) = read_logs(&dir);
    assert_eq!(jobs.len(), JOBS, "jobs pushed");
    let twice: Vec<_> = pops.iter().filter(|p| *p.1 != 1).collect();
    assert!(twice.is_empty(), "jobs popped more than once: {twice:?}");
    let lost: Vec<_> = jobs.keys().filter(|j| !pops.contains_key(*j)).collect();
    assert!(lost.is_empty(), "jobs never popped: {lost:?}");
    assert!(jobs.values().all(|j| j.status == 200), "HTTP errors");

    let names = dir.join("names.txt");
    let mut text = format!("{PRODUCER} producer\n{REDIS} redis\n{SVC} svc\n");
    for (w, addr) in WORKERS.iter().enumerate() {
        text.push_str(&format!("{addr} worker{}\n", w + 1));
    }
    std::fs::write(&names, text).unwrap();
    let out = causeway(&[
        "analyze",
        "--linker",
        "tasks",
        "--names",
        names.to_str().unwrap(),
        "--format",
        "jsonl",
        "--emit",
        "patterns,instances",
        pcap.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "causeway analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let analyzed = started.elapsed() - ran;
    let records: Vec<Line> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("bad JSON line {}: {e}", short(l, 500)))
        })
        .collect();

    let mut canonical = HashMap::new();
    for r in records.iter().filter(|r| r.kind == "pattern") {
        canonical.insert(r.id.clone().unwrap(), r.canonical.clone().unwrap());
    }
    let instances: Vec<&Line> = records.iter().filter(|r| r.kind == "instance").collect();
    let pattern_of = |i: usize| {
        let id = instances[i].pattern.as_deref().unwrap();
        generic(canonical.get(id).map_or(id, String::as_str))
    };
    // Every message of every instance, and the instances (and places) that hold it.
    let mut holders: HashMap<MessageKey, Vec<(usize, usize)>> = HashMap::new();
    for (i, inst) in instances.iter().enumerate() {
        for (pos, m) in inst.messages.iter().enumerate() {
            holders.entry(key_of(m)).or_default().push((i, pos));
        }
    }
    let mut messages: Vec<MessageKey> = holders.keys().cloned().collect();
    messages.sort_by_key(|m| m.2);
    let probability = |i: usize| instances[i].probability.unwrap();
    // The most probable instance holding `m`.
    let best = |m: &MessageKey| {
        holders.get(m).and_then(|h| {
            h.iter()
                .copied()
                .max_by(|a, b| probability(a.0).total_cmp(&probability(b.0)))
        })
    };

    let mut outcomes: BTreeMap<Outcome, usize> = BTreeMap::new();
    // Jobs on the path, by the shape of their push's instance (`unordered`) and by its
    // pattern.
    let mut on_path: HashMap<String, usize> = HashMap::new();
    let mut ordered: HashMap<String, usize> = HashMap::new();
    let mut all: HashMap<String, usize> = HashMap::new();
    // For jobs off the path: the pattern of the most probable instance holding each of their
    // messages after the break (where the rest of the path went).
    let mut elsewhere: HashMap<String, usize> = HashMap::new();
    let mut example = None;
    // Per link of the true path (push -> reply, reply -> call, call -> answer), the jobs
    // whose child message has its true parent as parent in the most probable instance
    // holding the child, whatever became of the rest of the path.
    let mut links = [0usize; 3];
    for job in jobs.values() {
        // Each of the job's messages: the one between its program's time stamps on the
        // connection of its addresses (the reply: the last to the worker before it read it).
        let push = between(&messages, PRODUCER, REDIS, job.push)
            .first()
            .copied();
        let reply_window = (job.push.0.max(job.pop.0), job.pop.1);
        let reply = between(&messages, REDIS, &job.worker, reply_window)
            .last()
            .copied();
        let call = between(&messages, &job.worker, SVC, job.call)
            .first()
            .copied();
        let answer = between(&messages, SVC, &job.worker, job.call)
            .first()
            .copied();
        let (Some(push), Some(reply), Some(call), Some(answer)) = (push, reply, call, answer)
        else {
            *outcomes.entry(Outcome::MessageMissing).or_default() += 1;
            continue;
        };
        for (held, (parent, child)) in
            links
                .iter_mut()
                .zip([(push, reply), (reply, call), (call, answer)])
        {
            if let Some((j, pos)) = best(child) {
                let msgs = &instances[j].messages;
                let p = msgs[pos].parent.map(|p| key_of(&msgs[p]));
                *held += usize::from(p.as_ref() == Some(parent));
            }
        }
        let (i, push_pos) = best(push).unwrap();
        let pattern = pattern_of(i);
        *all.entry(pattern.clone()).or_default() += 1;
        let msgs = &instances[i].messages;
        let pos_of = |k: &MessageKey| msgs.iter().position(|m| key_of(m) == *k);
        let parent_of = |pos: Option<usize>| pos.and_then(|p| msgs[p].parent);
        let (reply_pos, call_pos, answer_pos) = (pos_of(reply), pos_of(call), pos_of(answer));
        let outcome = if push_pos != 0 {
            Outcome::PushNotRoot
        } else if reply_pos.is_none() || parent_of(reply_pos) != Some(0) {
            Outcome::ReplyNotFromPush
        } else if call_pos.is_none() || parent_of(call_pos) != reply_pos {
            Outcome::CallNotFromReply
        } else if answer_pos.is_none() || parent_of(answer_pos) != call_pos {
            Outcome::AnswerNotFromCall
        } else {
            Outcome::OnPath
        };
        *outcomes.entry(outcome).or_default() += 1;
        match outcome {
            Outcome::OnPath => {
                *ordered.entry(pattern.clone()).or_default() += 1;
                *on_path.entry(unordered(&pattern)).or_default() += 1;
            }
            _ => {
                let rest = match outcome {
                    Outcome::ReplyNotFromPush => vec![reply, call],
                    Outcome::CallNotFromReply => vec![call],
                    Outcome::AnswerNotFromCall => vec![answer],
                    _ => vec![],
                };
                for m in rest {
                    if let Some((j, _)) = best(m) {
                        *elsewhere.entry(pattern_of(j)).or_default() += 1;
                    }
                }
                example.get_or_insert((job.id.clone(), outcome, i));
            }
        }
    }

    let n = jobs.len();
    let right: usize = on_path.values().sum();
    let (top_pattern, top_count) = on_path
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map_or(("(none)".to_owned(), 0), |(p, c)| (p.clone(), *c));
    let share = top_count as f64 / n as f64;
    let mut report = format!(
        "jobs {n} (system ran {:.1} s, analyze {:.1} s; {} instances, {} messages in them)\n\
         jobs on the path push -> redis -> reply to worker -> call to svc -> answer: {right} \
         ({:.1}%)\n\
         most common shape on the path (children in any order): {top_count} jobs ({:.1}%; \
         at least {:.0}% needed): {top_pattern}\n\
         its patterns (children in send order):\n{}\
         links of the true path held (push -> reply, reply -> call, call -> answer): \
         {links:?} of {n}\n\
         outcomes (first break): {outcomes:?}\n\
         patterns of the instances holding each job's push (workers as worker*):\n{}\
         where the rest of a broken path went (patterns of the instances holding its reply, \
         call or answer):\n{}",
        ran.as_secs_f64(),
        analyzed.as_secs_f64(),
        instances.len(),
        messages.len(),
        100.0 * right as f64 / n as f64,
        100.0 * share,
        100.0 * MIN_SHARE,
        top(&ordered, 4),
        top(&all, 6),
        top(&elsewhere, 6),
    );
    if let Some((id, outcome, i)) = example {
        let msgs = &instances[i].messages;
        report.push_str(&format!(
            "first broken job, {id} ({outcome:?}): its push's instance ({} messages, \
             pattern {}):\n",
            msgs.len(),
            short(&pattern_of(i), 300)
        ));
        for (pos, m) in msgs.iter().enumerate().take(12) {
            report.push_str(&format!(
                "  {pos:3}  {} > {}  at {}  parent {:?}\n",
                m.src_endpoint,
                m.dst_endpoint,
                key_of(m).2,
                m.parent
            ));
        }
    }
    assert!(share >= MIN_SHARE, "{report}");
    println!("{report}");
}
