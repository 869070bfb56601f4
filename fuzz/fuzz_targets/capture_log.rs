//! Any bytes as a socket-call log: the header and every record are read, each record both
//! through the owned `Record` and through the borrowed view; nothing may panic. Any bytes as a
//! lone record go through the checked view too, and any bytes as a spill file (the buffers a
//! killed process left) are split into their records.
#![no_main]

use causeway_capture::{Reader, Record, RecordView};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = causeway_capture::spill::buffers(data, std::path::Path::new("fuzz"));
    if let Ok(view) = RecordView::new_checked(data) {
        if let Ok(rec) = Record::parse(&view) {
            // What parses must encode back to the same bytes (unknown extensions aside).
            let _ = rec.to_bytes();
        }
    }
    if let Ok(reader) = Reader::new(data, "fuzz") {
        for item in reader {
            if item.is_err() {
                break;
            }
        }
    }
    if let Ok(mut reader) = Reader::new(data, "fuzz") {
        while let Ok(Some(view)) = reader.next_view() {
            let _ = (view.len(), view.time_ns(), view.errno());
        }
    }
});
