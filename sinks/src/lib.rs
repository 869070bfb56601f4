//! Causeway's sinks: the [`Sink`] trait, the built-in sinks, and the `deliver` operator that
//! feeds them.
//!
//! A sink receives [`Record`]s (one per pattern, message, conversation, statistics report...)
//! and writes them somewhere. Configuration ([`SinkConfig`]) is separate from the running sink:
//! sinks are built from it before the dataflow starts, so a bad output path fails at once.
//!
//! Built-in sinks: [`table`] (a summary for people), [`jsonl`] (the JSON-lines output contract,
//! and the single JSON array of `--format json`), [`exec`] (JSON lines piped into a command),
//! [`webhook`] (alerts POSTed to a URL through an on-disk queue), [`metrics`] (the latest
//! state served in the Prometheus text format).

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod buffer;
pub mod deliver;
pub mod exec;
pub mod jsonl;
pub mod metrics;
pub mod output;
pub mod record;
pub mod table;
pub mod webhook;

use std::path::PathBuf;

use causeway_sources::{Origins, Time};

pub use buffer::{Buffered, WhenFull};
pub use deliver::{Deliver, SinkSet};
pub use record::{Record, SCHEMA};

/// Why a sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Writing failed.
    #[error("{target}: {source}")]
    Io {
        /// Where it was writing.
        target: String,
        /// The error.
        source: std::io::Error,
    },
    /// The reader went away (a closed pipe): not an error for the user.
    #[error("output closed")]
    Closed,
    /// A record could not be encoded.
    #[error("cannot encode a record: {0}")]
    Encode(String),
}

/// A destination for records.
pub trait Sink: Send {
    /// Receives one record.
    fn write(&mut self, record: &Record) -> Result<(), SinkError>;
    /// Called when the frontier advances to `frontier`: no record at an earlier event time
    /// will follow. A good moment to flush.
    fn progress(&mut self, _frontier: Option<Time>) -> Result<(), SinkError> {
        Ok(())
    }
    /// Called once after the last record.
    fn finish(&mut self) -> Result<(), SinkError>;
}

/// Output format of the CLI's main sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A summary table.
    Table,
    /// One JSON object per line.
    Jsonl,
    /// One JSON array.
    Json,
}

/// What to build: a format and where it writes.
#[derive(Clone, Debug)]
pub struct SinkConfig {
    /// The format.
    pub format: Format,
    /// The file, or `None` for stdout.
    pub path: Option<PathBuf>,
    /// For tables: how many conversations and patterns to list.
    pub top: usize,
    /// For tables: how path patterns are ranked.
    pub rank: causeway_operators::Rank,
    /// For JSON lines in a file: rotation by size.
    pub rotation: Option<output::Rotation>,
}

/// An extra sink named on the command line: `jsonl:PATH` (`jsonl:-` for stdout),
/// `exec:COMMAND` or `webhook:URL` (with default [`webhook::WebhookOptions`]).
pub fn build_spec(spec: &str, origins: &Origins) -> Result<Box<dyn Sink>, String> {
    build_spec_with(spec, origins, &SpecOptions::default())
}

/// Settings of the extra sinks that take more than their spec.
#[derive(Clone, Debug, Default)]
pub struct SpecOptions {
    /// For `webhook:URL`.
    pub webhook: webhook::WebhookOptions,
    /// For `jsonl:PATH`: rotation by size.
    pub rotation: Option<output::Rotation>,
}

/// [`build_spec`] with settings.
pub fn build_spec_with(
    spec: &str,
    origins: &Origins,
    options: &SpecOptions,
) -> Result<Box<dyn Sink>, String> {
    match spec.split_once(':') {
        Some(("jsonl", path)) if !path.is_empty() => {
            let path = (path != "-").then(|| PathBuf::from(path));
            let out = output::Output::open_rotating(path.as_deref(), options.rotation.clone())
                .map_err(|e| e.to_string())?;
            Ok(Box::new(jsonl::JsonLines::new(out, origins.clone())))
        }
        Some(("exec", command)) if !command.trim().is_empty() => Ok(Box::new(
            exec::Exec::spawn(command, origins.clone()).map_err(|e| e.to_string())?,
        )),
        Some(("webhook", url)) if !url.trim().is_empty() => Ok(Box::new(
            webhook::Webhook::start(url.trim(), &options.webhook, origins.clone())
                .map_err(|e| e.to_string())?,
        )),
        _ => Err(format!(
            "--sink {spec}: expected jsonl:PATH (jsonl:- for stdout), exec:COMMAND or webhook:URL"
        )),
    }
}

impl SinkConfig {
    /// Builds the sink (creating its output file).
    pub fn build(&self, origins: &Origins) -> Result<Box<dyn Sink>, SinkError> {
        let rotation = match self.format {
            Format::Jsonl => self.rotation.clone(),
            Format::Table | Format::Json => None,
        };
        let out = output::Output::open_rotating(self.path.as_deref(), rotation)?;
        Ok(self.build_on(out, origins))
    }

    /// Builds the sink writing to `out` instead of its configured path.
    pub fn build_on(&self, out: output::Output, origins: &Origins) -> Box<dyn Sink> {
        match self.format {
            Format::Table => Box::new(table::Table::new(out, origins.clone(), self.top, self.rank)),
            Format::Jsonl => Box::new(jsonl::JsonLines::new(out, origins.clone())),
            Format::Json => Box::new(jsonl::JsonArray::new(out, origins.clone())),
        }
    }
}

#[cfg(test)]
mod compliance {
    //! The compliance test every sink passes: it takes every kind of record, progress and
    //! finish without error, writes something, and (for the JSON sinks) writes each record
    //! exactly once as an object of the output contract.

    use super::*;
    use causeway_operators::{Flow, FlowEnd, Message, OriginStats};
    use causeway_sources::{Address, OriginId, Protocol, SourceStats};

    fn records() -> Vec<Record> {
        let mut stats = SourceStats::default();
        stats.record(1_000, 60);
        stats.record(2_000, 70);
        let flow = Flow {
            origin: OriginId(0),
            protocol: Protocol::Tcp,
            client: "10.0.0.1:40000".parse().unwrap(),
            server: "10.0.0.2:80".parse().unwrap(),
            start_ns: 1_000,
            end_ns: 2_000,
            packets: [1, 1],
            bytes: [60, 70],
            payload_bytes: [0, 10],
            saw_open: true,
            end: FlowEnd::Closed,
        };
        let message = Message {
            send_ns: Some(1_000),
            recv_ns: None,
            send_domain: None,
            recv_domain: None,
            send_corrected_ns: None,
            recv_corrected_ns: None,
            sightings: 1,
            tcp: None,
            event_ns: 1_000,
            src: "a".into(),
            dst: "b".into(),
            src_endpoint: Address::parse("10.0.0.1:40000"),
            dst_endpoint: Address::parse("b"),
            bytes: Some(10),
            protocol: None,
            kind: None,
            call_id: None,
            origin: OriginId(0),
            row: Some(0),
        };
        vec![
            Record::Flow(flow),
            Record::Message(message),
            Record::Stats(OriginStats {
                origin: OriginId(0),
                stats,
                last: true,
            }),
        ]
    }

    #[test]
    fn every_sink_complies() {
        let mut origins = Origins::new();
        origins.intern("sniffer");
        let dir = std::env::temp_dir().join(format!("causeway-sinks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for format in [Format::Table, Format::Jsonl, Format::Json] {
            let path = dir.join(format!("{format:?}"));
            let config = SinkConfig {
                format,
                path: Some(path.clone()),
                top: 10,
                rank: causeway_operators::Rank::Expected,
                rotation: None,
            };
            let mut sink = config.build(&origins).unwrap();
            for r in records() {
                sink.write(&r).unwrap();
                sink.progress(Some(5)).unwrap();
            }
            sink.finish().unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(!text.is_empty(), "{format:?} wrote nothing");
            let objects: Vec<serde_json::Value> = match format {
                Format::Table => {
                    assert!(
                        text.contains("Input sniffer")
                            && text.contains("Conversations")
                            && text.contains("Messages")
                    );
                    continue;
                }
                Format::Jsonl => text
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect(),
                Format::Json => serde_json::from_str::<Vec<serde_json::Value>>(&text).unwrap(),
            };
            assert_eq!(objects.len(), records().len(), "{format:?}");
            for (o, r) in objects.iter().zip(records()) {
                assert_eq!(o["schema"], SCHEMA);
                assert_eq!(o["kind"], r.kind());
            }
            assert_eq!(objects[0]["src_endpoint"], "10.0.0.1:40000");
            assert_eq!(objects[1]["recv_ns"], serde_json::Value::Null);
            assert_eq!(objects[2]["origin"], "sniffer");
        }
        std::fs::remove_dir_all(dir).ok();
    }

    /// The sinks that do not write files: they take every kind of record, progress and
    /// finish without error, and account for what they took.
    #[test]
    fn network_sinks_comply() {
        let mut origins = Origins::new();
        origins.intern("sniffer");
        let alert = Record::Alert(causeway_operators::Alert {
            source: "test".into(),
            severity: "warning".into(),
            message: "m".into(),
            time_ns: 1,
            correlation: None,
            rule: None,
        });
        let all: Vec<Record> = records().into_iter().chain([alert]).collect();

        // A webhook whose receiver is not there: the alert is left in its queue, counted.
        let base = std::env::temp_dir().join(format!("causeway-comply-{}", std::process::id()));
        let mut options = SpecOptions::default();
        options.webhook.queue_base = Some(base.clone());
        options.webhook.drain = std::time::Duration::from_millis(100);
        let mut hook =
            webhook::Webhook::start("http://127.0.0.1:9/x", &options.webhook, origins.clone())
                .unwrap();
        for r in &all {
            hook.write(r).unwrap();
            hook.progress(Some(5)).unwrap();
        }
        hook.finish().unwrap();
        let report = hook.report();
        assert_eq!(
            (report.pending, report.delivered, report.dropped),
            (1, 0, 0)
        );
        drop(hook);
        std::fs::remove_dir_all(base).ok();
        assert!(build_spec_with("webhook:https://x/", &origins, &options).is_err());

        let mut m = metrics::Metrics::bind(
            "127.0.0.1:0",
            10,
            causeway_operators::Rank::Expected,
            origins,
        )
        .unwrap();
        for r in &all {
            m.write(r).unwrap();
            m.progress(Some(5)).unwrap();
        }
        m.finish().unwrap();
        let text = m.render();
        for r in &all {
            assert!(
                text.contains(&format!(
                    "causeway_sink_records_total{{kind=\"{}\"}} 1",
                    r.kind()
                )),
                "{text}"
            );
        }
        assert!(
            text.contains("causeway_input_records_total{origin=\"sniffer\"} 2"),
            "{text}"
        );
    }
}
