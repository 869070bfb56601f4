//! What `causeway score` and a resumed run read back: `analyze`'s JSON lines (patterns and
//! instances, trees nested as deep as a path's chain) and a `--checkpoint` file; nothing may
//! panic or exhaust the stack. The first byte picks the reader.
#![no_main]

use causeway::cli::RankArg;
use causeway::score::{parse_patterns, parse_truth, score};
use causeway_operators::paths::build::PathsCheckpoint;
use causeway_operators::json::from_slice_nested;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 2 {
        0 => {
            let ours = parse_patterns(rest, "fuzz-ours.jsonl");
            let truth = parse_truth(rest, "fuzz-truth.jsonl");
            if let (Ok(truth), Ok(ours)) = (truth, ours) {
                let _ = score(&truth, &ours, RankArg::Expected, Some(5));
            }
        }
        _ => {
            let _ = from_slice_nested::<PathsCheckpoint>(rest);
        }
    }
});
