//! Summaries of measured latencies, for the benchmark binaries.

use std::time::Duration;

/// The value at quantile `p` (0 to 1) of latencies sorted ascending, by nearest rank; zero
/// when there are none.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
