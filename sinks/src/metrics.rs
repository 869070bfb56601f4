//! The metrics sink (`--metrics ADDR`): the latest state of a run, served over HTTP at
//! `GET /metrics` in the Prometheus/OpenMetrics text format for Prometheus to scrape.
//!
//! - **Input**: every record; it keeps what the latest records say. Patterns (windowed and
//!   total: count, expected count, end-to-end time, each hop's node delay and network latency
//!   as mean and p50/p90/p99), clock offsets (offset, drift, error bound), per-origin input
//!   statistics (records, bytes, skipped by reason, late, unpaired, and `kernel_drops` where a
//!   stats record has it), alerts by source and severity, records seen by kind, and
//!   `causeway_up`.
//! - **Output**: on each scrape, from a background thread, the exposition of that state
//!   (`application/openmetrics-text`, encoded by `prometheus-client`, which escapes label
//!   values). Times are in seconds. Other paths answer 404.
//! - **State**: the latest record per pattern id and window kind (bounded upstream by
//!   `--max-patterns`; a `count: 0` record retracts and frees one), per clock domain and per
//!   origin: no history. Only the top N patterns (`--top`, ranked as `--rank`) of each window
//!   kind are exposed, which bounds the number of series. Freed when the sink is dropped,
//!   which also stops the server; the last state stays served until then.
//! - **Cost**: per record, a map update (a stats record is turned into its JSON form, to read
//!   fields that other versions may add); per scrape, encoding the exposed series.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use causeway_operators::{ClockOffset, PathPattern, Rank, Summary};
use causeway_sources::Origins;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;

use crate::{Record, Sink, SinkError};

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves the latest state of a run to Prometheus; see the module documentation.
pub struct Metrics {
    addr: SocketAddr,
    origins: Origins,
    state: Arc<Mutex<State>>,
    server: Arc<tiny_http::Server>,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct OriginCounts {
    records: u64,
    bytes: u64,
    late: u64,
    unpaired: u64,
    skipped: BTreeMap<String, u64>,
    kernel_drops: Option<u64>,
}

struct Clock {
    offset_ms: f64,
    drift_ppm: f64,
    error_ms: Option<f64>,
}

struct State {
    top: usize,
    rank: Rank,
    /// Latest pattern per id: [0] windowed, [1] total.
    patterns: [HashMap<String, PathPattern>; 2],
    clocks: BTreeMap<(String, String), Clock>,
    inputs: BTreeMap<String, OriginCounts>,
    alerts: BTreeMap<(String, String), u64>,
    kinds: BTreeMap<&'static str, u64>,
}

impl Metrics {
    /// Binds `addr` and starts serving; exposes the top `top` patterns ranked by `rank`.
    pub fn bind(
        addr: &str,
        top: usize,
        rank: Rank,
        origins: Origins,
    ) -> Result<Metrics, SinkError> {
        let io = |source: std::io::Error| SinkError::Io {
            target: format!("--metrics {addr}"),
            source,
        };
        let resolved = addr
            .to_socket_addrs()
            .map_err(io)?
            .next()
            .ok_or_else(|| io(std::io::Error::other("no address")))?;
        let server = tiny_http::Server::http(resolved)
            .map_err(|e| io(std::io::Error::other(e.to_string())))?;
        let bound = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| io(std::io::Error::other("not an IP address")))?;
        let server = Arc::new(server);
        let state = Arc::new(Mutex::new(State {
            top,
            rank,
            patterns: [HashMap::new(), HashMap::new()],
            clocks: BTreeMap::new(),
            inputs: BTreeMap::new(),
            alerts: BTreeMap::new(),
            kinds: BTreeMap::new(),
        }));
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let (server, state, stopping) = (
                Arc::clone(&server),
                Arc::clone(&state),
                Arc::clone(&stopping),
            );
            std::thread::Builder::new()
                .name("metrics".into())
                .spawn(move || serve(&server, &state, &stopping))
                .map_err(io)?
        };
        Ok(Metrics {
            addr: bound,
            origins,
            state,
            server,
            stopping,
            thread: Some(thread),
        })
    }

    /// The address served (with the port chosen, if `:0` was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The exposition as a scrape would get it.
    pub fn render(&self) -> String {
        render(&lock(&self.state))
    }
}

impl Drop for Metrics {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

fn serve(server: &tiny_http::Server, state: &Mutex<State>, stopping: &AtomicBool) {
    loop {
        let request = match server.recv() {
            Ok(r) => r,
            Err(_) if stopping.load(Ordering::SeqCst) => return,
            Err(e) => {
                tracing::debug!("metrics: {e}");
                continue;
            }
        };
        let path = request.url().split('?').next().unwrap_or("");
        let response = match (request.method(), path) {
            (tiny_http::Method::Get, "/metrics") => {
                let body = render(&lock(state));
                let mut r = tiny_http::Response::from_string(body);
                if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE) {
                    r.add_header(h);
                }
                r
            }
            (tiny_http::Method::Get, _) => {
                tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
            }
            _ => tiny_http::Response::from_string("GET only\n").with_status_code(405),
        };
        if let Err(e) = request.respond(response) {
            tracing::debug!("metrics: {e}");
        }
    }
}

impl Sink for Metrics {
    fn write(&mut self, record: &Record) -> Result<(), SinkError> {
        let mut st = lock(&self.state);
        *st.kinds.entry(record.kind()).or_default() += 1;
        match record {
            Record::Pattern(p) => {
                let map = &mut st.patterns[usize::from(p.cumulative)];
                if p.count == 0 {
                    map.remove(&p.id);
                } else {
                    map.insert(p.id.clone(), p.clone());
                }
            }
            Record::ClockOffset(c) => {
                st.clocks.insert(
                    (
                        c.domain.name(&self.origins),
                        c.reference.name(&self.origins),
                    ),
                    clock(c),
                );
            }
            Record::Stats(_) => {
                // From the JSON form: the fields other versions add (kernel_drops) come along.
                let v = record.to_json(&self.origins);
                let n = |k: &str| v.get(k).and_then(Value::as_u64);
                let origin = v
                    .get("origin")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned();
                let skipped = v
                    .get("skipped")
                    .and_then(Value::as_object)
                    .map(|o| {
                        o.iter()
                            .filter_map(|(k, c)| Some((k.clone(), c.as_u64()?)))
                            .collect()
                    })
                    .unwrap_or_default();
                st.inputs.insert(
                    origin,
                    OriginCounts {
                        records: n("records").unwrap_or(0),
                        bytes: n("bytes").unwrap_or(0),
                        late: n("late").unwrap_or(0),
                        unpaired: n("unpaired").unwrap_or(0),
                        skipped,
                        kernel_drops: n("kernel_drops"),
                    },
                );
            }
            Record::Alert(a) => {
                *st.alerts
                    .entry((a.source.clone(), a.severity.clone()))
                    .or_default() += 1;
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

fn clock(c: &ClockOffset) -> Clock {
    Clock {
        offset_ms: c.offset_ns / 1e6,
        drift_ppm: c.drift_ppm,
        error_ms: c.error_ns.is_finite().then_some(c.error_ns / 1e6),
    }
}

type Labels = Vec<(String, String)>;
type GaugeFamily = Family<Labels, Gauge<f64, AtomicU64>>;
type CounterFamily = Family<Labels, Counter<u64>>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn gauge(r: &mut Registry, name: &str, help: &str) -> GaugeFamily {
    let f = GaugeFamily::default();
    r.register(name, help, f.clone());
    f
}

fn counter(r: &mut Registry, name: &str, help: &str) -> CounterFamily {
    let f = CounterFamily::default();
    r.register(name, help, f.clone());
    f
}

/// Milliseconds to seconds, to the nearest ns: `1.455` ms is `0.001455`, not
/// `0.0014550000000000002`.
fn seconds(ms: f64) -> f64 {
    (ms * 1e6).round() / 1e9
}

/// One distribution in seconds: quantiles on `q`, the mean on `mean`.
fn summary(q: &GaugeFamily, mean: &GaugeFamily, base: &Labels, s: &Summary) {
    mean.get_or_create(base).set(seconds(s.mean));
    for (quantile, v) in [("0.5", s.p50), ("0.9", s.p90), ("0.99", s.p99)] {
        let mut l = base.clone();
        l.push(("quantile".into(), quantile.into()));
        q.get_or_create(&l).set(seconds(v));
    }
}

fn render(st: &State) -> String {
    let mut r = Registry::default();
    let up = Gauge::<f64, AtomicU64>::default();
    up.set(1.0);
    // prometheus-client ends each help text with a period.
    r.register("causeway_up", "1 while causeway runs", up);
    let kinds = counter(
        &mut r,
        "causeway_sink_records",
        "Records this sink has received, by kind",
    );
    for (kind, n) in &st.kinds {
        kinds.get_or_create(&labels(&[("kind", kind)])).inc_by(*n);
    }

    let known = gauge(
        &mut r,
        "causeway_patterns",
        "Path patterns known (before the top-N cut), by window (sliding or total)",
    );
    let info = gauge(
        &mut r,
        "causeway_pattern_info",
        "1 per exposed pattern, with its canonical shape",
    );
    let count = gauge(
        &mut r,
        "causeway_pattern_count",
        "Path instances inferred per pattern",
    );
    let likeliest = gauge(
        &mut r,
        "causeway_pattern_likeliest",
        "Requests whose most probable path is the pattern (each counted once)",
    );
    let expected = gauge(
        &mut r,
        "causeway_pattern_expected",
        "Expected true instances per pattern (sum of instance probabilities)",
    );
    let e2e = gauge(
        &mut r,
        "causeway_pattern_end_to_end_seconds",
        "End-to-end time of a pattern's instances, quantiles",
    );
    let e2e_mean = gauge(
        &mut r,
        "causeway_pattern_end_to_end_mean_seconds",
        "End-to-end time of a pattern's instances, mean",
    );
    let delay = gauge(
        &mut r,
        "causeway_node_delay_seconds",
        "Time a hop's sender held the parent message before sending (node latency), quantiles",
    );
    let delay_mean = gauge(
        &mut r,
        "causeway_node_delay_mean_seconds",
        "Time a hop's sender held the parent message before sending (node latency), mean",
    );
    let network = gauge(
        &mut r,
        "causeway_network_latency_seconds",
        "One-way network latency of a hop after clock correction, quantiles",
    );
    let network_mean = gauge(
        &mut r,
        "causeway_network_latency_mean_seconds",
        "One-way network latency of a hop after clock correction, mean",
    );
    for (i, window) in ["sliding", "total"].into_iter().enumerate() {
        let map = &st.patterns[i];
        known
            .get_or_create(&labels(&[("window", window)]))
            .set(map.len() as f64);
        let mut ranked: Vec<&PathPattern> = map.values().collect();
        ranked.sort_by(|a, b| {
            st.rank
                .score(b.count, b.expected)
                .total_cmp(&st.rank.score(a.count, a.expected))
                .then_with(|| a.id.cmp(&b.id))
        });
        for p in ranked.into_iter().take(st.top) {
            let base = labels(&[("pattern", &p.id), ("window", window)]);
            let mut l = base.clone();
            l.push(("canonical".into(), p.tree.canonical()));
            info.get_or_create(&l).set(1.0);
            count.get_or_create(&base).set(p.count as f64);
            likeliest.get_or_create(&base).set(p.likeliest as f64);
            expected.get_or_create(&base).set(p.expected);
            summary(&e2e, &e2e_mean, &base, &p.end_to_end);
            for (hop, (node, stats)) in p.tree.preorder().into_iter().zip(&p.hops).enumerate() {
                let port = node.dst_port.map_or("*".to_owned(), |p| p.to_string());
                let mut l = base.clone();
                l.extend(labels(&[
                    ("hop", &hop.to_string()),
                    ("src", &node.src),
                    ("dst", &node.dst),
                    ("dst_port", &port),
                ]));
                if let Some(d) = &stats.delay {
                    summary(&delay, &delay_mean, &l, d);
                }
                if let Some(n) = &stats.network {
                    summary(&network, &network_mean, &l, n);
                }
            }
        }
    }

    let offset = gauge(
        &mut r,
        "causeway_clock_offset_seconds",
        "A clock domain's clock minus the reference clock",
    );
    let drift = gauge(
        &mut r,
        "causeway_clock_drift_ppm",
        "Rate of change of a clock domain's offset, parts per million",
    );
    let error = gauge(
        &mut r,
        "causeway_clock_error_seconds",
        "Hard bound on the error of the clock offset",
    );
    for ((domain, reference), c) in &st.clocks {
        let l = labels(&[("domain", domain), ("reference", reference)]);
        offset.get_or_create(&l).set(seconds(c.offset_ms));
        drift.get_or_create(&l).set(c.drift_ppm);
        if let Some(e) = c.error_ms {
            error.get_or_create(&l).set(seconds(e));
        }
    }

    let records = counter(
        &mut r,
        "causeway_input_records",
        "Records read per origin (packets, socket calls, rows, samples)",
    );
    let bytes = counter(&mut r, "causeway_input_bytes", "Bytes read per origin");
    let skipped = counter(
        &mut r,
        "causeway_input_skipped",
        "Records skipped per origin, by reason",
    );
    let late = counter(
        &mut r,
        "causeway_input_late",
        "Records later than the allowed lateness per origin (still used)",
    );
    let unpaired = counter(
        &mut r,
        "causeway_input_unpaired",
        "Messages an origin should have seen but did not",
    );
    let kernel = counter(
        &mut r,
        "causeway_input_kernel_drops",
        "Packets the kernel dropped before a live capture read them",
    );
    for (origin, c) in &st.inputs {
        let l = labels(&[("origin", origin)]);
        records.get_or_create(&l).inc_by(c.records);
        bytes.get_or_create(&l).inc_by(c.bytes);
        late.get_or_create(&l).inc_by(c.late);
        unpaired.get_or_create(&l).inc_by(c.unpaired);
        if let Some(k) = c.kernel_drops {
            kernel.get_or_create(&l).inc_by(k);
        }
        for (reason, n) in &c.skipped {
            skipped
                .get_or_create(&labels(&[("origin", origin), ("reason", reason)]))
                .inc_by(*n);
        }
    }

    let alerts = counter(
        &mut r,
        "causeway_alerts",
        "Alerts raised, by source and severity",
    );
    for ((source, severity), n) in &st.alerts {
        alerts
            .get_or_create(&labels(&[("source", source), ("severity", severity)]))
            .inc_by(*n);
    }

    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, &r).is_err() {
        text = "# EOF\n".into();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_operators::Alert;
    use causeway_operators::{Domain, HopStats, OriginStats, PatternNode};
    use causeway_sources::SkipReason;
    use causeway_sources::SourceStats;
    use std::collections::BTreeSet;
    use std::io::{Read, Write};

    fn node(src: &str, dst: &str, port: Option<u16>, children: Vec<PatternNode>) -> PatternNode {
        PatternNode {
            src: src.into(),
            dst: dst.into(),
            dst_port: port,
            children,
        }
    }

    fn summary(ms: f64) -> Summary {
        Summary {
            mean: ms,
            p50: ms,
            p90: ms * 2.0,
            p99: ms * 3.0,
        }
    }

    fn pattern(id: &str, cumulative: bool, count: u64) -> Record {
        Record::Pattern(PathPattern {
            id: id.into(),
            tree: node(
                "CLIENT",
                "web",
                Some(80),
                vec![node("web", "db \"main\"", Some(5432), vec![])],
            ),
            cumulative,
            window: (0, 1),
            count,
            likeliest: count,
            expected: count as f64 * 0.5,
            max_probability: 1.0,
            end_to_end: summary(10.0),
            hops: vec![
                HopStats {
                    delay: None,
                    network: Some(summary(0.5)),
                    ..HopStats::default()
                },
                HopStats {
                    delay: Some(summary(2.0)),
                    network: None,
                    ..HopStats::default()
                },
            ],
            last: false,
        })
    }

    /// `GET path` over a plain TcpStream: (status line, body).
    fn get(addr: SocketAddr, path: &str) -> (String, String, String) {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let status = head.lines().next().unwrap().to_owned();
        (status, head.to_owned(), body.to_owned())
    }

    /// One sample: (name, labels, value).
    type Sample = (String, BTreeMap<String, String>, f64);

    /// A strict parser of the text exposition: comments are `# HELP|TYPE|UNIT name ...` or the
    /// final `# EOF`; samples are `name{k="v",...} value` with escaped label values.
    fn parse(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
        let mut types = BTreeMap::new();
        let mut samples = Vec::new();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.last(), Some(&"# EOF"));
        let is_name = |n: &str| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                && !n.starts_with(|c: char| c.is_ascii_digit())
        };
        for line in &lines[..lines.len() - 1] {
            if let Some(rest) = line.strip_prefix("# ") {
                let mut parts = rest.splitn(3, ' ');
                let (what, name) = (parts.next().unwrap(), parts.next().unwrap());
                assert!(["HELP", "TYPE", "UNIT"].contains(&what), "{line}");
                assert!(is_name(name), "{line}");
                if what == "TYPE" {
                    types.insert(name.to_owned(), parts.next().unwrap().to_owned());
                }
                continue;
            }
            let end = line.find(['{', ' ']).unwrap();
            let name = &line[..end];
            assert!(is_name(name), "{line}");
            let mut labels = BTreeMap::new();
            let mut rest = &line[end..];
            if let Some(inner) = rest.strip_prefix('{') {
                let mut chars = inner.char_indices();
                let mut key = String::new();
                loop {
                    let (i, c) = chars.next().unwrap();
                    match c {
                        '}' => {
                            rest = &inner[i + 1..];
                            break;
                        }
                        ',' => {}
                        '=' => {
                            assert_eq!(chars.next().unwrap().1, '"', "{line}");
                            let mut value = String::new();
                            loop {
                                match chars.next().unwrap().1 {
                                    '\\' => match chars.next().unwrap().1 {
                                        'n' => value.push('\n'),
                                        c @ ('\\' | '"') => value.push(c),
                                        c => panic!("bad escape \\{c} in {line}"),
                                    },
                                    '"' => break,
                                    c => value.push(c),
                                }
                            }
                            assert!(is_name(&key), "{line}");
                            labels.insert(std::mem::take(&mut key), value);
                        }
                        c => key.push(c),
                    }
                }
            }
            let value = rest
                .trim()
                .parse::<f64>()
                .unwrap_or_else(|e| panic!("{line}: {e}"));
            samples.push((name.to_owned(), labels, value));
        }
        (types, samples)
    }

    fn find<'a>(samples: &'a [Sample], name: &str, want: &[(&str, &str)]) -> Vec<&'a Sample> {
        samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && want
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(v))
            })
            .collect()
    }

    #[test]
    fn a_scrape_exposes_the_latest_state() {
        let mut origins = Origins::new();
        let sniffer = origins.intern("web1");
        let other = origins.intern("db");
        let mut sink = Metrics::bind("127.0.0.1:0", 2, Rank::Count, origins).unwrap();
        let addr = sink.addr();

        // Nothing yet: up, and a valid exposition.
        let (status, head, body) = get(addr, "/metrics");
        assert!(status.contains("200"), "{status}");
        assert!(head.contains("application/openmetrics-text"), "{head}");
        let (_, samples) = parse(&body);
        assert_eq!(find(&samples, "causeway_up", &[])[0].2, 1.0);

        // Three windowed patterns (top 2 exposed), one total; one retracted.
        for (id, count) in [("aaa", 5), ("bbb", 9), ("ccc", 1), ("ddd", 7)] {
            sink.write(&pattern(id, false, count)).unwrap();
        }
        sink.write(&pattern("ddd", false, 0)).unwrap();
        sink.write(&pattern("aaa", true, 50)).unwrap();
        let mut stats = SourceStats::default();
        stats.record(1, 100);
        stats.record(2, 50);
        stats.skip(SkipReason::CorruptRecord);
        stats.late = 4;
        sink.write(&Record::Stats(OriginStats {
            origin: sniffer,
            stats,
            last: false,
        }))
        .unwrap();
        sink.write(&Record::ClockOffset(ClockOffset {
            domain: Domain::Origin(other),
            reference: Domain::Origin(sniffer),
            at: 0,
            offset_ns: -2.5e6,
            drift_ppm: 3.0,
            error_ns: 1e4,
            seconds: 9,
            last: false,
        }))
        .unwrap();
        for _ in 0..2 {
            sink.write(&Record::Alert(Alert {
                source: "correlate".into(),
                severity: "warning".into(),
                message: "m".into(),
                time_ns: 0,
                correlation: None,
                rule: None,
            }))
            .unwrap();
        }
        sink.finish().unwrap();

        let (_, _, body) = get(addr, "/metrics");
        // The same series as rendering directly (in another order: families are hash maps).
        let sorted = |t: &str| {
            let mut l: Vec<String> = t.lines().map(str::to_owned).collect();
            l.sort();
            l
        };
        assert_eq!(sorted(&body), sorted(&sink.render()));
        let (types, s) = parse(&body);
        assert_eq!(types["causeway_pattern_count"], "gauge");
        assert_eq!(types["causeway_alerts"], "counter");
        let sliding = [("window", "sliding")];
        let counts = find(&s, "causeway_pattern_count", &sliding);
        let ids: BTreeSet<&str> = counts
            .iter()
            .map(|(_, l, _)| l["pattern"].as_str())
            .collect();
        assert_eq!(
            ids,
            BTreeSet::from(["aaa", "bbb"]),
            "top 2 by count, ddd retracted"
        );
        assert_eq!(find(&s, "causeway_patterns", &sliding)[0].2, 3.0);
        let total = find(&s, "causeway_pattern_count", &[("window", "total")]);
        assert_eq!((total.len(), total[0].2), (1, 50.0));
        assert_eq!(
            find(
                &s,
                "causeway_pattern_expected",
                &[("pattern", "bbb"), ("window", "sliding")]
            )[0]
            .2,
            4.5
        );
        assert_eq!(
            find(
                &s,
                "causeway_pattern_likeliest",
                &[("pattern", "bbb"), ("window", "sliding")]
            )[0]
            .2,
            9.0
        );
        // Hop statistics in seconds, labelled by hop; a quote in a node name survives escaping.
        let d = find(
            &s,
            "causeway_node_delay_seconds",
            &[("pattern", "bbb"), ("hop", "1"), ("quantile", "0.99")],
        );
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].1["dst"], "db \"main\"");
        assert_eq!(d[0].1["dst_port"], "5432");
        assert!((d[0].2 - 0.006).abs() < 1e-12);
        let n = find(&s, "causeway_network_latency_mean_seconds", &[("hop", "0")]);
        assert_eq!(n.len(), 3, "one per exposed pattern and window");
        assert!((n[0].2 - 0.0005).abs() < 1e-12);
        assert!(find(&s, "causeway_node_delay_seconds", &[("hop", "0")]).is_empty());
        let c = find(&s, "causeway_clock_offset_seconds", &[("domain", "db")]);
        assert_eq!((c[0].1["reference"].as_str(), c[0].2), ("web1", -0.0025));
        let web1 = [("origin", "web1")];
        assert_eq!(find(&s, "causeway_input_records_total", &web1)[0].2, 2.0);
        assert_eq!(find(&s, "causeway_input_bytes_total", &web1)[0].2, 150.0);
        assert_eq!(find(&s, "causeway_input_late_total", &web1)[0].2, 4.0);
        let skipped = find(&s, "causeway_input_skipped_total", &web1);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].1["reason"], "corrupt_record");
        // Every stats record carries the live sniffer's counters (0 for a file).
        assert_eq!(
            find(&s, "causeway_input_kernel_drops_total", &web1)[0].2,
            0.0
        );
        assert_eq!(
            find(&s, "causeway_alerts_total", &[("severity", "warning")])[0].2,
            2.0
        );
        assert_eq!(
            find(&s, "causeway_sink_records_total", &[("kind", "pattern")])[0].2,
            6.0
        );

        let (status, _, _) = get(addr, "/other");
        assert!(status.contains("404"), "{status}");
        drop(sink);
        // tiny_http closes its listener from its accept thread, soon after.
        let closed = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            std::net::TcpStream::connect(addr).is_err()
        });
        assert!(closed, "stopped with the sink");
    }
}
