//! 64-bit FNV-1a, the datagram payload hash (the same as `causeway_capture::payload_hash`).

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// Streaming FNV-1a 64.
#[derive(Clone, Copy)]
pub struct Fnv(u64);

impl Fnv {
    /// Nothing hashed yet.
    pub fn new() -> Fnv {
        Fnv(OFFSET)
    }

    /// Hashes more bytes.
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(PRIME);
        }
        self.0 = h;
    }

    /// The hash so far.
    pub fn finish(self) -> u64 {
        self.0
    }
}
