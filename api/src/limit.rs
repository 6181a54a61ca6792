//! Per-team rate limits (`SEDIMENT_RATE_LIMIT_RPS`, `SEDIMENT_RATE_LIMIT_BURST`): a token
//! bucket per team in each API replica. Limits are per replica, not global: with N replicas
//! behind a balancer a team may make up to N times the rate. A refused call is 429
//! `rate_limited` with `Retry-After`, before any work is done.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use shared::config::RateLimit;

/// Most teams tracked at once; past it, buckets that have refilled completely (teams idle for
/// at least `burst / per_second`) are dropped, which changes nothing for them.
const MAX_TEAMS: usize = 100_000;

pub struct RateLimiter {
    limit: RateLimit,
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    pub fn new(limit: RateLimit) -> Self {
        Self {
            limit,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from `team`'s bucket; when it is empty, how long until it holds one.
    pub fn check(&self, team: &str) -> Result<(), Duration> {
        self.check_at(team, Instant::now())
    }

    fn check_at(&self, team: &str, now: Instant) -> Result<(), Duration> {
        let rate = f64::from(self.limit.per_second);
        let burst = f64::from(self.limit.burst);
        // A panic while holding the lock leaves buckets that are still sound.
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_TEAMS && !buckets.contains_key(team) {
            buckets.retain(|_, b| b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * rate < burst);
        }
        let bucket = buckets
            .entry(team.to_owned())
            .or_insert(Bucket { tokens: burst, at: now });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refill).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_team_gets_its_burst_then_its_rate() {
        let limiter = RateLimiter::new(RateLimit {
            per_second: 10,
            burst: 3,
        });
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.check_at("a", t0).is_ok());
        }
        let wait = limiter.check_at("a", t0).expect_err("burst spent");
        assert!(
            wait > Duration::from_millis(90) && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        assert!(limiter.check_at("b", t0).is_ok(), "another team has its own bucket");
        assert!(
            limiter.check_at("a", t0 + Duration::from_millis(100)).is_ok(),
            "one token back"
        );
        assert!(limiter.check_at("a", t0 + Duration::from_millis(100)).is_err());
        // Idle time refills to the burst, never beyond.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(limiter.check_at("a", later).is_ok());
        }
        assert!(limiter.check_at("a", later).is_err());
    }
}
