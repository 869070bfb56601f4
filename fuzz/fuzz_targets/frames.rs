//! Any bytes as a pcap/pcapng stream: every frame is read and decoded; nothing may panic.
#![no_main]

use causeway_sources::decode::{DecodeOptions, decode};
use causeway_sources::pcap::FrameReader;
use causeway_sources::{OriginId, SourceStats};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = FrameReader::new(data) else { return };
    let mut stats = SourceStats::default();
    let mut damage = Vec::new();
    while let Ok(Some(frame)) = reader.next_frame(&mut stats, &mut damage) {
        let _ = decode(&frame, OriginId(0), DecodeOptions::default());
    }
});
