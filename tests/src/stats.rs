//! Summaries of measured latencies, for the benchmark binaries.

use std::time::Duration;

use crate::rng::Rng;

/// The value at quantile `p` (0 to 1) of latencies sorted ascending, by nearest rank; zero
/// when there are none.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Send times of an open loop: Poisson arrivals at `rate` a second for `seconds`, as offsets
/// from the start. The generator is seeded, so every run sends on the same schedule.
pub fn poisson_arrivals(rate: f64, seconds: f64) -> Vec<Duration> {
    poisson_arrivals_seeded(rate, seconds, 0)
}

/// [`poisson_arrivals`] from another seed: two streams of one run (appends and searches) must
/// not share their gaps.
pub fn poisson_arrivals_seeded(rate: f64, seconds: f64, seed: u64) -> Vec<Duration> {
    let mut schedule = Vec::new();
    let mut at = 0.0;
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
    loop {
        // An exponential gap.
        at += -(1.0 - rng.unit()).ln() / rate;
        if at >= seconds {
            return schedule;
        }
        schedule.push(Duration::from_secs_f64(at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_arrivals_come_at_the_rate_in_order_and_within_the_span() {
        let schedule = poisson_arrivals(100.0, 100.0);
        // 10,000 expected; a Poisson count's standard deviation is 100.
        assert!((9_600..=10_400).contains(&schedule.len()), "{}", schedule.len());
        assert!(schedule.windows(2).all(|w| w[0] <= w[1]));
        assert!(schedule.last().is_some_and(|last| last.as_secs_f64() < 100.0));
        assert_eq!(schedule, poisson_arrivals(100.0, 100.0), "the same schedule every run");
        let other = poisson_arrivals_seeded(100.0, 100.0, 1);
        assert!((9_600..=10_400).contains(&other.len()), "{}", other.len());
        assert_ne!(other[..100], schedule[..100], "another seed, other gaps");
    }
}
