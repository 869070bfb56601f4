//! Any text as a capture filter (`analyze --live --filter`): parsing must not panic; what
//! parses is compiled for both socket layouts and run on the rest of the input as a packet,
//! and the program must agree with the direct evaluation of the expression.
#![no_main]

use causeway_sources::live::filter::{Filter, Layout, Probe, capture_core, compile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|b| *b == 0).unwrap_or(data.len());
    let Ok(text) = std::str::from_utf8(&data[..split]) else {
        return;
    };
    let Ok(filter) = Filter::parse(text) else {
        return;
    };
    let packet = data.get(split + 1..).unwrap_or(&[]);
    for (layout, protocol) in [(Layout { nh: 0 }, 0x0800), (Layout { nh: 14 }, 0x86dd)] {
        let core = capture_core(Some(&filter), Some(1));
        let Ok(program) = compile(&core, layout, 100) else {
            continue;
        };
        let probe = Probe {
            data: packet,
            protocol,
            pkttype: 4,
            ifindex: 2,
        };
        let want = if core.eval(&probe, layout) == Ok(true) { 100 } else { 0 };
        assert_eq!(program.run(&probe), want, "{text}");
    }
});
