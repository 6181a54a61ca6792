//! Per-team rate limits (`SEDIMENT_RATE_LIMIT_RPS`, `SEDIMENT_RATE_LIMIT_BURST`): a token
//! bucket per team in each API replica. Limits are per replica, not global: with N replicas
//! behind a balancer a team may make up to N times the rate. A refused call is 429
//! `rate_limited` with `Retry-After`, before any work is done.
//!
//! Stored-turn quotas (`SEDIMENT_QUOTA_TURNS`) are global: they count the team's turns in the
//! store, read again at most every `SEDIMENT_QUOTA_REFRESH_MS`; in between each replica adds
//! what it accepts itself. A refused append is 429 `quota_exceeded` with `Retry-After` (when
//! the count is read again: an erasure frees room).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use shared::config::{RateLimit, TurnQuota};
use shared::store::{StoreError, TranscriptStore};

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

/// The per-team stored-turn quota (`SEDIMENT_QUOTA_TURNS`) of one replica: each team's count,
/// read from the store at most every `refresh`, plus what this replica accepted since.
pub struct TurnQuotas {
    quota: TurnQuota,
    usage: tokio::sync::Mutex<HashMap<String, Usage>>,
}

struct Usage {
    read_at: Instant,
    turns: u64,
}

impl TurnQuotas {
    pub fn new(quota: TurnQuota) -> Self {
        Self {
            quota,
            usage: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    pub fn max_turns(&self) -> u64 {
        self.quota.max_turns
    }

    /// Counts `adding` turns against the team's quota: `Ok` (and counted) when they fit,
    /// otherwise how long until the count is read again. The lock is held over a store read
    /// only when a team's count is stale, once per `refresh`.
    pub async fn admit(
        &self,
        store: &dyn TranscriptStore,
        team: &str,
        adding: u64,
    ) -> Result<Result<(), (u64, Duration)>, StoreError> {
        let now = Instant::now();
        let mut usage = self.usage.lock().await;
        if usage.len() >= MAX_TEAMS && !usage.contains_key(team) {
            usage.retain(|_, u| now.saturating_duration_since(u.read_at) < self.quota.refresh);
        }
        let stale = usage
            .get(team)
            .is_none_or(|u| now.saturating_duration_since(u.read_at) >= self.quota.refresh);
        if stale {
            let turns = store.team_turns(team).await?;
            usage.insert(team.to_owned(), Usage { read_at: now, turns });
        }
        let entry = usage.get_mut(team).expect("inserted above");
        if entry.turns.saturating_add(adding) > self.quota.max_turns {
            let wait = self
                .quota
                .refresh
                .saturating_sub(now.saturating_duration_since(entry.read_at));
            return Ok(Err((entry.turns, wait)));
        }
        entry.turns += adding;
        Ok(Ok(()))
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
