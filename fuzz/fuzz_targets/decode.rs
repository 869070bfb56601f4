//! Any bytes as one frame of one of the supported link types; nothing may panic.
#![no_main]

use causeway_sources::decode::{DecodeOptions, decode, linktype};
use causeway_sources::pcap::Frame;
use causeway_sources::OriginId;
use libfuzzer_sys::fuzz_target;

const LINKTYPES: [u16; 10] = [
    linktype::NULL,
    linktype::ETHERNET,
    linktype::RAW_BSD12,
    linktype::RAW_BSD14,
    linktype::RAW,
    linktype::LOOP,
    linktype::LINUX_SLL,
    linktype::IPV4,
    linktype::IPV6,
    linktype::LINUX_SLL2,
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, frame)) = data.split_first() else { return };
    let lt = LINKTYPES[selector as usize % LINKTYPES.len()];
    let frame = Frame { ts_ns: 1, linktype: lt, data: frame, wire_len: frame.len() as u32, offset: 0, interface: 0 };
    let _ = decode(&frame, OriginId(0), DecodeOptions::default());
});
