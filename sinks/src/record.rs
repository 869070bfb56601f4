//! [`Record`]: what sinks receive, and its JSON form (DESIGN.md, "Output contract").
//!
//! Every JSON object carries `"schema": 1` and a `"kind"`. Field names and meanings are an
//! interface: change them only with a bump of [`SCHEMA`].

use std::collections::BTreeMap;

use causeway_operators::{Flow, Message, OriginStats};
use causeway_sources::Origins;
use causeway_sources::decode::linktype;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Version of the JSON output contract.
pub const SCHEMA: u32 = 1;

/// One output record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// Per-origin counts.
    Stats(OriginStats),
    /// A conversation summary.
    Flow(Flow),
    /// A message.
    Message(Message),
}

impl Record {
    /// The record's `kind` in JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Stats(_) => "stats",
            Record::Flow(_) => "flow",
            Record::Message(_) => "message",
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
                    "unpaired": 0,
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
                let mut v = json!({
                    "schema": SCHEMA,
                    "kind": "message",
                    "src": m.src,
                    "dst": m.dst,
                    "src_endpoint": m.src_endpoint.to_string(),
                    "dst_endpoint": m.dst_endpoint.to_string(),
                    "send_ns": m.send_ns,
                    "recv_ns": m.recv_ns,
                    "bytes": m.bytes,
                    "protocol": m.protocol.map(|p| p.as_str()),
                    "origin": origins.name(m.origin),
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
        }
    }
}
