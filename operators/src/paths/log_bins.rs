//! Log-spaced delay bins read in integers ([`LogBins`]), for the learned delays of both
//! linkers: every candidate of every message reads several, and a logarithm each was a tenth
//! of a busy trace's time.
//!
//! - **State**: the least delay of each bin and the bin of each sixteenth of each power of
//!   two, worked out once from the bins' floating-point definition so that every delay falls
//!   where that definition puts it. A few kilobytes, for the life of the process.
//! - **Cost**: a leading-zero count, a table read and a step or two along the edges.

/// Sixteenths of a power of two a lookup starts from.
const SUB_BITS: usize = 4;

/// A bin definition's table: see the module documentation.
pub(crate) struct LogBins {
    /// The least delay in ns of each bin (`u64::MAX` for a bin no delay reaches).
    edges_ns: Box<[u64]>,
    /// The bin of the least delay of each sixteenth of each power of two.
    start: Box<[u16]>,
}

impl LogBins {
    /// The table of `bins` bins (at most `u16::MAX`) of `definition`, which maps a delay in
    /// ns to its bin, never decreasing as the delay grows, and is below `bins`.
    pub(crate) fn new(bins: usize, definition: impl Fn(u64) -> usize) -> Self {
        let top = 1u64 << 62;
        let edges_ns = (0..bins)
            .map(|k| {
                if k == 0 {
                    return 0;
                }
                if definition(top) < k {
                    return u64::MAX;
                }
                // The least delay in bin `k` or above, by halving.
                let (mut low, mut high) = (0u64, top);
                while low < high {
                    let mid = low + (high - low) / 2;
                    if definition(mid) >= k {
                        high = mid;
                    } else {
                        low = mid + 1;
                    }
                }
                low
            })
            .collect();
        let start = (0..64usize << SUB_BITS)
            .map(|i| {
                let (power, sub) = (i >> SUB_BITS, i & ((1 << SUB_BITS) - 1));
                let least = if power < SUB_BITS {
                    1u64 << power
                } else {
                    1u64 << power | (sub as u64) << (power - SUB_BITS)
                };
                definition(least) as u16
            })
            .collect();
        LogBins { edges_ns, start }
    }

    /// The bin of a delay in ns: from the bin of the sixteenth of a power of two it falls in
    /// (its leading bits), up past the edges at or below it.
    #[inline]
    pub(crate) fn bin(&self, delay_ns: u64) -> usize {
        let edges = &self.edges_ns;
        if edges.len() < 2 || delay_ns < edges[1] {
            return 0;
        }
        let power = 63 - delay_ns.leading_zeros() as usize;
        let i = if power < SUB_BITS {
            power << SUB_BITS
        } else {
            power << SUB_BITS | (delay_ns >> (power - SUB_BITS)) as usize & ((1 << SUB_BITS) - 1)
        };
        let mut b = usize::from(self.start[i]);
        while b + 1 < edges.len() && edges[b + 1] <= delay_ns {
            b += 1;
        }
        b
    }

    /// The least delay in ns of each bin.
    #[cfg(test)]
    pub(crate) fn edges_ns(&self) -> &[u64] {
        &self.edges_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_delay_falls_in_the_bin_its_definition_gives() {
        // Bins a quarter of a power of two wide from 1 µs, floored there, eight in all.
        let definition = |d: u64| {
            let us = (d as f64 / 1000.0).max(1.0);
            ((us.log2() * 4.0) as usize).min(7)
        };
        let bins = LogBins::new(8, definition);
        assert_eq!(bins.edges_ns()[0], 0);
        for d in (0..20_000).chain([u64::MAX, 1 << 62, 1 << 40]) {
            assert_eq!(bins.bin(d), definition(d), "{d} ns");
        }
    }
}
