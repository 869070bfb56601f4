//! Any bytes as a TCP statistics log (`ss -tin` output after `###` lines), read whole and
//! also after a valid `###` line and header; the line parsers and format detection on the
//! same bytes. Nothing may panic, and every record is a sample or counted as skipped.
#![no_main]

use std::io::BufReader;

use causeway_sources::tcpstats::TcpInfo;
use causeway_sources::tcpstats::ss::{
    SsReader, looks_like_ss_log, parse_connection_line, parse_info_line,
};
use causeway_sources::{Batch, ObservationReader, OriginId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = looks_like_ss_log(data);
    let mut text = b"### 1795305858.489725640\n\
        State Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n"
        .to_vec();
    text.extend_from_slice(data);
    for (input, cap) in [(data, 8192), (&text[..], 7)] {
        // A small buffer for the second: lines cross buffer boundaries.
        let mut reader = SsReader::new(BufReader::with_capacity(cap, input), OriginId(0), "fuzz");
        let mut batch = Batch::default();
        let mut stats = causeway_sources::SourceStats::default();
        while reader.read_batch(16, &mut batch) {
            stats.merge(&reader.take_stats());
        }
        stats.merge(&reader.take_stats());
        let _ = reader.take_warnings();
        assert_eq!(
            stats.records,
            batch.tcp.len() as u64 + stats.skipped_total()
        );
    }
    let line = String::from_utf8_lossy(data);
    if let Ok(c) = parse_connection_line(&line) {
        let _ = parse_info_line(c.rest, &mut TcpInfo::default());
    }
    let _ = parse_info_line(&line, &mut TcpInfo::default());
});
