//! Any bytes after a valid message-trace header: every row is read; nothing may panic.
#![no_main]

use causeway_sources::trace::TraceReader;
use causeway_sources::{OriginId, SourceStats};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut text = b"send_ns,recv_ns,src,dst,bytes,kind,call_id\n".to_vec();
    text.extend_from_slice(data);
    for input in [data, &text[..]] {
        let Ok(mut reader) = TraceReader::new(input, OriginId(0)) else { continue };
        let mut stats = SourceStats::default();
        let mut damage = Vec::new();
        while let Ok(Some(_)) = reader.next_row(&mut stats, &mut damage) {}
    }
});
