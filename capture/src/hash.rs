//! The datagram payload hash: 64-bit FNV-1a.
//!
//! FNV-1a rather than xxh3 because the preload library depends on libc only and must hash
//! without allocating; FNV-1a is a few lines and needs no tables. It is not a cryptographic
//! hash: it tells datagrams apart, so that a sent one can be paired with its receipt.

/// FNV-1a 64 offset basis.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64 prime.
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`: the hash the preload library logs for datagrams.
pub fn payload_hash(bytes: &[u8]) -> u64 {
    let mut h = PayloadHasher::new();
    h.update(bytes);
    h.finish()
}

/// Streaming FNV-1a 64, for payloads in several pieces (scatter/gather calls).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadHasher(u64);

impl Default for PayloadHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl PayloadHasher {
    /// A hasher with nothing hashed yet.
    pub fn new() -> Self {
        PayloadHasher(FNV_OFFSET)
    }

    /// Hashes more bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
    }

    /// The hash of everything so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(payload_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(payload_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(payload_hash(b"foobar"), 0x8594_4171_f739_67e8);
        let mut h = PayloadHasher::new();
        h.update(b"foo");
        h.update(b"bar");
        assert_eq!(h.finish(), payload_hash(b"foobar"));
    }
}
