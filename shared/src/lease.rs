//! Renewed leases: a run holds its session or owner under a short lease that it renews every
//! third of its length while it works, so a worker that dies (SIGKILL, OOM, an evicted pod)
//! keeps what it held for one lease at most, however long a run may take. Extraction runs,
//! scene runs and persona builds hold theirs this way; each store fences its commit by the
//! lease's token.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::runtime::error_chain;

/// The end of a lease of `lease` taken or renewed now.
pub fn end_of(lease: Duration) -> DateTime<Utc> {
    let now = Utc::now();
    chrono::Duration::from_std(lease)
        .ok()
        .and_then(|lease| now.checked_add_signed(lease))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Renews a lease every third of `lease` for as long as it is awaited, beside the work it
/// covers (in a `select!`); returns only once a renewal finds the lease held by another.
/// `renew` gets the lease's new end and answers whether the lease was still this holder's. A
/// renewal that fails (the store is down) is tried again a third later: the lease may still
/// hold, and the next renewal tells. `what` names the lease in the log.
pub async fn keep<F, Fut, E>(lease: Duration, what: &'static str, mut renew: F)
where
    F: FnMut(DateTime<Utc>) -> Fut,
    Fut: Future<Output = Result<bool, E>>,
    E: std::error::Error,
{
    loop {
        tokio::time::sleep(lease / 3).await;
        match renew(end_of(lease)).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => tracing::warn!(lease = what, error = %error_chain(&e), "failed to renew a lease"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("down")]
    struct Down;

    #[tokio::test]
    async fn renews_every_third_through_failures_until_the_lease_is_lost() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let started = std::time::Instant::now();
        keep(Duration::from_millis(300), "test", move |until| {
            let call = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                assert!(until > Utc::now() + chrono::Duration::milliseconds(250), "{until}");
                match call {
                    2 => Err(Down),
                    4 => Ok(false),
                    _ => Ok(true),
                }
            }
        })
        .await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            4,
            "a failure does not end the lease, a loss does"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_lease_too_long_for_the_calendar_ends_at_its_end() {
        assert_eq!(end_of(Duration::MAX), DateTime::<Utc>::MAX_UTC);
        let end = end_of(Duration::from_secs(30)) - Utc::now();
        assert!((29..=30).contains(&end.num_seconds()), "{end}");
    }
}
