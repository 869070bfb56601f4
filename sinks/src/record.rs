//! [`Record`]: what sinks receive, and its JSON form (DESIGN.md, "Output contract").
//!
//! Every JSON object carries `"schema": 1` and a `"kind"`. Field names and meanings are an
//! interface: change them only with a bump of [`SCHEMA`].

use std::collections::BTreeMap;

use causeway_operators::Alert;
use causeway_operators::tcp::correlate::Correlation;
use causeway_operators::tcp::problem::{ConnProblem, Problem};
use causeway_operators::{
    ClockOffset, Domain, Flow, HopProblems, HopStats, Message, NatMapping, OriginStats,
    PathInstance, PathPattern, PatternNode, Summary,
};
use causeway_sources::Origins;
use causeway_sources::decode::linktype;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Version of the JSON output contract.
pub const SCHEMA: u32 = 1;

/// One output record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    /// Per-origin counts.
    Stats(OriginStats),
    /// A conversation summary.
    Flow(Flow),
    /// A message.
    Message(Message),
    /// A clock domain's offset from the reference clock.
    ClockOffset(ClockOffset),
    /// A learned address translation.
    NatMapping(NatMapping),
    /// A path pattern's statistics (windowed or cumulative).
    Pattern(PathPattern),
    /// A finished path instance.
    Instance(PathInstance),
    /// A run of intervals in which a TCP connection had one problem (SNAP).
    ConnProblem(ConnProblem),
    /// Connections sharing a resource with a common problem (SNAP §2.3).
    Correlation(Correlation),
    /// Something to look at now.
    Alert(Alert),
}

impl Record {
    /// The record's `kind` in JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Stats(_) => "stats",
            Record::Flow(_) => "flow",
            Record::Message(_) => "message",
            Record::ClockOffset(_) => "clock_offset",
            Record::NatMapping(_) => "nat_mapping",
            Record::Pattern(_) => "pattern",
            Record::Instance(_) => "instance",
            Record::ConnProblem(_) => "conn_problem",
            Record::Correlation(_) => "correlation",
            Record::Alert(_) => "alert",
        }
    }

    /// The record as a JSON object of the output contract.
    pub fn to_json(&self, origins: &Origins) -> Value {
        match self {
            Record::Stats(s) => {
                let st = &s.stats;
                let linktypes: BTreeMap<String, u64> = st
                    .linktypes
                    .iter()
                    .map(|(lt, n)| (linktype::name(*lt), *n))
                    .collect();
                json!({
                    "schema": SCHEMA,
                    "kind": "stats",
                    "origin": origins.name(s.origin),
                    "records": st.records,
                    "bytes": st.bytes,
                    "first_ns": st.first_ns,
                    "last_ns": st.last_ns,
                    "skipped": st.skipped_by_name(),
                    "late": st.late,
                    "unpaired": st.unpaired,
                    "late_sightings": st.late_sightings,
                    "tcp": st.tcp,
                    "udp": st.udp,
                    "ipv6": st.ipv6,
                    "kernel_drops": st.kernel_drops,
                    "ring_freezes": st.ring_freezes,
                    "formats": st.formats,
                    "linktypes": linktypes,
                    "final": s.last,
                })
            }
            Record::Flow(f) => json!({
                "schema": SCHEMA,
                "kind": "flow",
                "origin": origins.name(f.origin),
                "protocol": f.protocol.as_str(),
                "src_endpoint": f.client.to_string(),
                "dst_endpoint": f.server.to_string(),
                "start_ns": f.start_ns,
                "end_ns": f.end_ns,
                "to_server": {"packets": f.packets[0], "bytes": f.bytes[0], "payload_bytes": f.payload_bytes[0]},
                "to_client": {"packets": f.packets[1], "bytes": f.bytes[1], "payload_bytes": f.payload_bytes[1]},
                "saw_open": f.saw_open,
                "end": f.end.as_str(),
            }),
            Record::Message(m) => {
                let domain = |d: &Option<Domain>| d.as_ref().map(|d| d.name(origins));
                let network_ms = match (m.send_corrected_ns, m.recv_corrected_ns) {
                    (Some(s), Some(r)) => Some((r as i64 - s as i64) as f64 / 1e6),
                    _ => None,
                };
                let mut v = json!({
                    "schema": SCHEMA,
                    "kind": "message",
                    "src": m.src,
                    "dst": m.dst,
                    "src_endpoint": m.src_endpoint.to_string(),
                    "dst_endpoint": m.dst_endpoint.to_string(),
                    "send_ns": m.send_ns,
                    "recv_ns": m.recv_ns,
                    "send_domain": domain(&m.send_domain),
                    "recv_domain": domain(&m.recv_domain),
                    "send_corrected_ns": m.send_corrected_ns,
                    "recv_corrected_ns": m.recv_corrected_ns,
                    "network_ms": network_ms,
                    "bytes": m.bytes,
                    "protocol": m.protocol.map(|p| p.as_str()),
                    "flow": format!("{}->{}", m.src_endpoint, m.dst_endpoint),
                    "origin": origins.name(m.origin),
                    "sightings": m.sightings,
                });
                if let Value::Object(o) = &mut v {
                    if let Some(row) = m.row {
                        o.insert("row".into(), json!(row));
                    }
                    if let Some(k) = m.kind {
                        o.insert("role".into(), json!(k.as_str()));
                    }
                    if let Some(c) = &m.call_id {
                        o.insert("call_id".into(), json!(c));
                    }
                }
                v
            }
            Record::ClockOffset(c) => json!({
                "schema": SCHEMA,
                "kind": "clock_offset",
                "domain": c.domain.name(origins),
                "reference": c.reference.name(origins),
                "at_ns": c.at,
                "offset_ms": c.offset_ns / 1e6,
                "drift_ppm": c.drift_ppm,
                "error_ms": if c.error_ns.is_finite() { Some(c.error_ns / 1e6) } else { None },
                "seconds": c.seconds,
                "final": c.last,
            }),
            Record::NatMapping(n) => json!({
                "schema": SCHEMA,
                "kind": "nat_mapping",
                "protocol": n.protocol.as_str(),
                "public": n.public.to_string(),
                "private": n.private.to_string(),
                "observations": n.observations,
                "final": n.last,
            }),
            Record::Pattern(p) => serde_json::to_value(PatternJson(p)).unwrap_or(Value::Null),
            Record::Instance(i) => serde_json::to_value(InstanceJson(i)).unwrap_or(Value::Null),
            Record::ConnProblem(c) => json!({
                "schema": SCHEMA,
                "kind": "conn_problem",
                "flow": c.conn.flow(),
                "origin": origins.name(c.conn.origin),
                "problem": c.problem.as_str(),
                "evidence": c.source.as_str(),
                "start_ns": c.start_ns,
                "end_ns": c.end_ns,
                "fraction": c.fraction,
                "events": c.events,
                "intervals": c.intervals,
                "bytes": c.bytes,
            }),
            Record::Correlation(c) => correlation_json(c),
            Record::Alert(a) => {
                let mut v = json!({
                    "schema": SCHEMA,
                    "kind": "alert",
                    "source": a.source,
                    "severity": a.severity,
                    "message": a.message,
                    "time_ns": a.time_ns,
                });
                if let Value::Object(o) = &mut v {
                    if let Some(c) = &a.correlation {
                        o.insert("correlation".into(), correlation_json(c));
                    }
                    if let Some(r) = &a.rule {
                        o.insert("rule".into(), json!(r.rule));
                        o.insert("state".into(), json!(r.state));
                        o.insert("scope".into(), json!(r.scope));
                        o.insert("subject".into(), json!(r.subject));
                        for (name, value) in [
                            ("value", r.value),
                            ("threshold", r.threshold),
                            ("baseline", r.baseline),
                        ] {
                            if let Some(x) = value {
                                o.insert(name.into(), json!(x));
                            }
                        }
                        if let Some(p) = &r.pattern {
                            o.insert("pattern".into(), json!(p));
                        }
                    }
                }
                v
            }
        }
    }

    /// Appends the record's JSON (as [`Record::to_json`] gives it) to `out`. Patterns and
    /// instances, the bulk of a long run's output, are written straight from the records,
    /// without building a [`Value`] first.
    pub fn write_json(&self, origins: &Origins, out: &mut Vec<u8>) -> serde_json::Result<()> {
        match self {
            Record::Pattern(p) => serde_json::to_writer(out, &PatternJson(p)),
            Record::Instance(i) => serde_json::to_writer(out, &InstanceJson(i)),
            other => serde_json::to_writer(out, &other.to_json(origins)),
        }
    }
}

/// A correlation's JSON form.
fn correlation_json(c: &Correlation) -> Value {
    json!({
        "schema": SCHEMA,
        "kind": "correlation",
        "scope": c.scope.as_str(),
        "name": c.name,
        "problem": c.problem.as_str(),
        "connections": c.connections,
        "members": c.members,
        "acc": c.acc,
        "acc_all": c.acc_all,
        "window": {"start_ns": c.start_ns, "end_ns": c.end_ns},
        "bucket_ms": c.bucket_ns as f64 / 1e6,
        "series_ms": c.series_ms,
        "flows": c.flows,
        "also": c.also,
        "incast": c.incast,
        "patterns": c.patterns,
    })
}

/// A pattern's JSON form.
struct PatternJson<'a>(&'a PathPattern);

impl Serialize for PatternJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let p = self.0;
        let mut m = s.serialize_map(Some(12))?;
        m.serialize_entry("schema", &SCHEMA)?;
        m.serialize_entry("kind", "pattern")?;
        m.serialize_entry("id", &p.id)?;
        m.serialize_entry("cumulative", &p.cumulative)?;
        m.serialize_entry(
            "window",
            &WindowJson {
                start_ns: p.window.0,
                end_ns: p.window.1,
            },
        )?;
        m.serialize_entry("count", &p.count)?;
        m.serialize_entry("likeliest", &p.likeliest)?;
        m.serialize_entry("expected", &p.expected)?;
        m.serialize_entry("max_probability", &p.max_probability)?;
        m.serialize_entry("end_to_end_ms", &SummaryJson(&p.end_to_end))?;
        m.serialize_entry("canonical", &p.tree.canonical())?;
        m.serialize_entry(
            "root",
            &TreeJson {
                node: &p.tree,
                hops: &p.hops,
                pos: 0,
            },
        )?;
        m.serialize_entry("final", &p.last)?;
        m.end()
    }
}

#[derive(Serialize)]
struct WindowJson {
    start_ns: u64,
    end_ns: u64,
}

/// A distribution summary in ms.
struct SummaryJson<'a>(&'a Summary);

impl Serialize for SummaryJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("mean", &self.0.mean)?;
        m.serialize_entry("p50", &self.0.p50)?;
        m.serialize_entry("p90", &self.0.p90)?;
        m.serialize_entry("p99", &self.0.p99)?;
        m.end()
    }
}

/// A pattern tree node with its hop's statistics (`hops` in preorder, `pos` this node's).
struct TreeJson<'a> {
    node: &'a PatternNode,
    hops: &'a [HopStats],
    pos: usize,
}

impl Serialize for TreeJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Children<'a>(&'a TreeJson<'a>);
        impl Serialize for Children<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let t = self.0;
                let mut seq = s.serialize_seq(Some(t.node.children.len()))?;
                let mut pos = t.pos + 1;
                for c in &t.node.children {
                    seq.serialize_element(&TreeJson {
                        node: c,
                        hops: t.hops,
                        pos,
                    })?;
                    pos += c.len();
                }
                seq.end()
            }
        }
        let here = self.hops.get(self.pos);
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("src", &self.node.src)?;
        m.serialize_entry("dst", &self.node.dst)?;
        m.serialize_entry("dst_port", &self.node.dst_port)?;
        m.serialize_entry("children", &Children(self))?;
        if let Some(n) = here.and_then(|h| h.network.as_ref()) {
            m.serialize_entry("network_ms", &SummaryJson(n))?;
        }
        if let Some(d) = here.and_then(|h| h.delay.as_ref()) {
            m.serialize_entry("delay_ms", &SummaryJson(d))?;
        }
        if let Some(t) = here.and_then(|h| h.tcp.as_ref()) {
            m.serialize_entry("tcp", &TcpJson(t))?;
        }
        m.end()
    }
}

/// A hop's TCP problems: the messages evidence covers, and per problem present the mean
/// share of time and the messages sent in it.
struct TcpJson<'a>(&'a HopProblems);

impl Serialize for TcpJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let problems: BTreeMap<&str, Value> = Problem::CORRELATED
            .iter()
            .enumerate()
            .filter(|&(k, _)| t.affected[k] > 0.0)
            .map(|(k, p)| {
                (
                    p.as_str(),
                    json!({"share": t.share[k], "messages": t.affected[k]}),
                )
            })
            .collect();
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("messages", &t.messages)?;
        m.serialize_entry("problems", &problems)?;
        if !t.flows.is_empty() {
            m.serialize_entry("flows", &t.flows)?;
        }
        m.end()
    }
}

/// An instance's JSON form.
struct InstanceJson<'a>(&'a PathInstance);

impl Serialize for InstanceJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct MessageJson<'a> {
            src: &'a str,
            dst: &'a str,
            dst_port: Option<u16>,
            src_endpoint: String,
            dst_endpoint: String,
            send_ns: Option<u64>,
            recv_ns: Option<u64>,
            parent: Option<usize>,
            #[serde(skip_serializing_if = "Option::is_none")]
            row: Option<u64>,
        }
        let i = self.0;
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("schema", &SCHEMA)?;
        m.serialize_entry("kind", "instance")?;
        m.serialize_entry("pattern", &i.pattern)?;
        m.serialize_entry("probability", &i.probability)?;
        let messages: Vec<MessageJson> = i
            .messages
            .iter()
            .map(|x| MessageJson {
                src: &x.src,
                dst: &x.dst,
                dst_port: x.dst_port,
                src_endpoint: x.src_endpoint.to_string(),
                dst_endpoint: x.dst_endpoint.to_string(),
                send_ns: x.send_ns,
                recv_ns: x.recv_ns,
                parent: x.parent,
                row: x.row,
            })
            .collect();
        m.serialize_entry("messages", &messages)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn node(src: &str, dst: &str, port: Option<u16>, children: Vec<PatternNode>) -> PatternNode {
        PatternNode {
            src: src.into(),
            dst: dst.into(),
            dst_port: port,
            children,
        }
    }

    fn summary(mean: f64) -> Summary {
        Summary {
            mean,
            p50: mean,
            p90: mean,
            p99: mean,
        }
    }

    /// The pattern JSON of the output contract, with each hop's statistics at its place in
    /// the tree (preorder), written straight and as a value alike.
    #[test]
    fn pattern_json_places_hop_statistics_in_preorder() {
        let tree = node(
            "CLIENT",
            "web",
            Some(80),
            vec![
                node(
                    "web",
                    "db",
                    Some(5432),
                    vec![node("db", "web", None, vec![])],
                ),
                node("web", "CLIENT", None, vec![]),
            ],
        );
        let hops: Vec<HopStats> = (0..4)
            .map(|i| HopStats {
                delay: (i > 0).then(|| summary(i as f64)),
                network: Some(summary(10.0 + i as f64)),
                // The database's answers: a quarter of them sent while their connection
                // waited out a timeout, for 40% of the time on average.
                tcp: (i == 2).then(|| HopProblems {
                    messages: 3.0,
                    share: [0.0, 0.0, 0.4, 0.0, 0.0],
                    affected: [0.0, 0.0, 0.75, 0.0, 0.0],
                    flows: vec!["10.0.0.2:5432->10.0.0.1:40000".into()],
                }),
            })
            .collect();
        let p = PathPattern {
            id: "abc".into(),
            tree,
            cumulative: true,
            window: (1, 2),
            count: 3,
            likeliest: 2,
            expected: 2.5,
            max_probability: 1.0,
            end_to_end: summary(7.0),
            hops,
            last: false,
        };
        let r = Record::Pattern(p);
        let s = |m: f64| json!({"mean": m, "p50": m, "p90": m, "p99": m});
        let expected = json!({
            "schema": 1, "kind": "pattern", "id": "abc", "cumulative": true,
            "window": {"start_ns": 1, "end_ns": 2}, "count": 3, "likeliest": 2, "expected": 2.5,
            "max_probability": 1.0, "end_to_end_ms": s(7.0),
            "canonical": "CLIENT>web:80(web>db:5432(db>web:*()) web>CLIENT:*())",
            "root": {"src": "CLIENT", "dst": "web", "dst_port": 80, "network_ms": s(10.0),
                "children": [
                    {"src": "web", "dst": "db", "dst_port": 5432, "network_ms": s(11.0),
                     "delay_ms": s(1.0), "children": [
                        {"src": "db", "dst": "web", "dst_port": null, "network_ms": s(12.0),
                         "delay_ms": s(2.0), "children": [],
                         "tcp": {"messages": 3.0,
                                 "problems": {"timeout": {"share": 0.4, "messages": 0.75}},
                                 "flows": ["10.0.0.2:5432->10.0.0.1:40000"]}}]},
                    {"src": "web", "dst": "CLIENT", "dst_port": null, "network_ms": s(13.0),
                     "delay_ms": s(3.0), "children": []}]},
            "final": false,
        });
        let origins = Origins::default();
        assert_eq!(r.to_json(&origins), expected);
        let mut bytes = Vec::new();
        r.write_json(&origins, &mut bytes).unwrap();
        let written: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(written, expected);
    }
}
