//! [`Record`]: what sinks receive, and its JSON form (DESIGN.md, "Output contract").
//!
//! Every JSON object carries `"schema": 1` and a `"kind"`. Field names and meanings are an
//! interface: change them only with a bump of [`SCHEMA`].

use std::collections::BTreeMap;

use causeway_operators::{
    ClockOffset, Domain, Flow, HopStats, Message, NatMapping, OriginStats, PathInstance,
    PathPattern, PatternNode, Summary,
};
use causeway_sources::Origins;
use causeway_sources::decode::linktype;
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
            Record::Pattern(p) => {
                let mut pos = 0;
                object([
                    ("schema", json!(SCHEMA)),
                    ("kind", json!("pattern")),
                    ("id", json!(p.id)),
                    ("cumulative", json!(p.cumulative)),
                    (
                        "window",
                        json!({"start_ns": p.window.0, "end_ns": p.window.1}),
                    ),
                    ("count", json!(p.count)),
                    ("expected", json!(p.expected)),
                    ("max_probability", json!(p.max_probability)),
                    ("end_to_end_ms", summary(&p.end_to_end)),
                    ("canonical", Value::String(p.tree.canonical())),
                    ("root", tree_json(&p.tree, &p.hops, &mut pos)),
                    ("final", json!(p.last)),
                ])
            }
            Record::Instance(i) => {
                let messages = i
                    .messages
                    .iter()
                    .map(|m| {
                        let mut o = object([
                            ("src", json!(m.src)),
                            ("dst", json!(m.dst)),
                            ("dst_port", json!(m.dst_port)),
                            ("src_endpoint", Value::String(m.src_endpoint.to_string())),
                            ("dst_endpoint", Value::String(m.dst_endpoint.to_string())),
                            ("send_ns", json!(m.send_ns)),
                            ("recv_ns", json!(m.recv_ns)),
                            ("parent", json!(m.parent)),
                        ]);
                        if let (Some(row), Value::Object(o)) = (m.row, &mut o) {
                            o.insert("row".into(), json!(row));
                        }
                        o
                    })
                    .collect();
                object([
                    ("schema", json!(SCHEMA)),
                    ("kind", json!("instance")),
                    ("pattern", json!(i.pattern)),
                    ("probability", json!(i.probability)),
                    ("messages", Value::Array(messages)),
                ])
            }
        }
    }
}

/// A JSON object from its fields in order. Unlike `json!`, which serializes every interpolated
/// value again (a deep copy of each nested tree, quadratic in the depth of a pattern tree), this
/// moves the values in.
fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

fn summary(s: &Summary) -> Value {
    json!({"mean": s.mean, "p50": s.p50, "p90": s.p90, "p99": s.p99})
}

/// A pattern tree with each hop's statistics (`hops` in preorder; `pos` walks it).
fn tree_json(node: &PatternNode, hops: &[HopStats], pos: &mut usize) -> Value {
    let here = hops.get(*pos).cloned().unwrap_or_default();
    *pos += 1;
    let children: Vec<Value> = node
        .children
        .iter()
        .map(|c| tree_json(c, hops, pos))
        .collect();
    let mut v = object([
        ("src", json!(node.src)),
        ("dst", json!(node.dst)),
        ("dst_port", json!(node.dst_port)),
        ("children", Value::Array(children)),
    ]);
    if let Value::Object(o) = &mut v {
        if let Some(n) = &here.network {
            o.insert("network_ms".into(), summary(n));
        }
        if let Some(d) = &here.delay {
            o.insert("delay_ms".into(), summary(d));
        }
    }
    v
}
