//! Any bytes as an input file (format detection, gzip, capture or trace): everything is read;
//! nothing may panic.
#![no_main]

use std::io::Cursor;

use causeway_sources::decode::DecodeOptions;
use causeway_sources::{Batch, InputSpec, OriginId, open_stream};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let spec = InputSpec { origin: OriginId(0), path: "fuzz".into() };
    let Ok((mut reader, _)) = open_stream(Box::new(Cursor::new(data.to_vec())), &spec, DecodeOptions::default()) else {
        return;
    };
    let mut batch = Batch::default();
    while reader.read_batch(256, &mut batch) {
        batch.clear();
    }
    let _ = reader.take_stats();
    let _ = reader.take_warnings();
});
