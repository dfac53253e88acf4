//! The generators' random numbers: xorshift64* (Vigna), small, seeded,
//! and the same on every machine, so a labelled set is the same set
//! wherever it is generated.

/// A xorshift64* generator; the seed must not be 0.
#[derive(Debug)]
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// A number below `n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }

    /// One of `xs`.
    pub(crate) fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }

    /// `n` characters drawn from `set` (ASCII).
    pub(crate) fn chars(&mut self, n: usize, set: &str) -> String {
        let b = set.as_bytes();
        (0..n).map(|_| b[self.below(b.len())] as char).collect()
    }
}
