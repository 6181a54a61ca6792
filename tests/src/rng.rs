//! A tiny seeded PRNG (SplitMix64), for whatever the tests and benchmarks draw: the quality
//! datasets, generated conversations, arrival schedules and fault points. The dataset must be
//! byte-identical for a seed on every platform and every version of every dependency, which
//! `rand`'s algorithms do not promise.

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A child generator whose stream depends only on the parent's seed and `salt`, so adding a
    /// draw in one owner's generation does not reshuffle every other owner.
    pub fn fork(&self, salt: u64) -> Self {
        let mut child = Self(self.0 ^ salt.wrapping_mul(0xA24B_AED4_963E_E407));
        child.next_u64();
        child
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`; `n` must be positive.
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "below(0)");
        // Modulo bias is ~n / 2^64: irrelevant for the small ranges used here.
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }

    /// `n` distinct items, in random order.
    pub fn sample<T: Clone>(&mut self, items: &[T], n: usize) -> Vec<T> {
        let mut all = items.to_vec();
        self.shuffle(&mut all);
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()));
        assert_ne!(Rng::new(7).fork(1).next_u64(), Rng::new(7).fork(2).next_u64());
    }

    #[test]
    fn bounds_hold() {
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            assert!(r.below(3) < 3);
            assert!((5..=9).contains(&r.range(5, 9)));
        }
        let s = r.sample(&[1, 2, 3, 4, 5], 3);
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|x| (1..=5).contains(x)));
    }
}
