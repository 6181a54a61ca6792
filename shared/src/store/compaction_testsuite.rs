//! The conformance suite of [`CompactionStore`]: one function per point of the contract, run by
//! the integration tests against both backends. Each takes the same store as its two ports
//! (turns are written through `TranscriptStore`).
//!
//! Time is passed in (`now`), so lease expiry and retry times are tested without waiting. Each
//! function uses fresh tenants and sessions; `due_compactions` is store-wide, so the checks on
//! it look only for their own sessions.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone as _, Utc};
use uuid::Uuid;

use super::compaction::{
    CompactionRecord, CompactionRequest, CompactionStatus, CompactionStore, DueCompaction, RequestOutcome,
    StoredSummary, WindowQuery,
};
use super::{StoreError, TranscriptStore};
use crate::domain::{NewTurn, SessionId, Tenant};

/// The lease every check uses.
pub const LEASE: Duration = Duration::from_secs(120);
/// Claims allowed per job in these checks.
pub const MAX_ATTEMPTS: i32 = 3;

/// Both ports of one store.
pub trait Both: TranscriptStore + CompactionStore {}
impl<T: TranscriptStore + CompactionStore> Both for T {}

/// Runs every check of this module against one store, one after another.
pub async fn compaction_store_suite(store: Arc<dyn Both>) {
    request_queues_one_job_per_session(&*store).await;
    concurrent_requests_queue_one_job(Arc::clone(&store)).await;
    claim_then_complete_stores_the_summary(&*store).await;
    an_expired_lease_is_claimed_again_and_fences_the_old_worker(&*store).await;
    a_failed_job_is_retried_when_due_up_to_the_attempt_cap(&*store).await;
    an_unclaimed_job_is_due_at_once_and_requeued_after_its_lease(&*store).await;
    the_summary_outlives_the_next_job(&*store).await;
    compaction_rows_are_tenant_scoped(&*store).await;
    window_turns_reads_newest_first_within_its_range(&*store).await;
}

/// A request makes the session's one job `pending`; more requests change nothing while it is
/// live; unknown sessions are `SessionNotFound` and write nothing, and another owner's session of
/// the same id is another session.
pub async fn request_queues_one_job_per_session(store: &dyn Both) {
    let (t, s) = session_with_turns(store, 3).await;
    let now = at(0);
    assert_eq!(
        store.compaction(&t, &s).await.expect("read"),
        None,
        "no job before a request"
    );
    assert_eq!(request(store, &t, &s, false, now).await, RequestOutcome::Queued);
    let record = read(store, &t, &s).await;
    assert_eq!(record.status, CompactionStatus::Pending);
    assert!(!record.claimed, "a queued job is not claimed");
    assert_eq!(record.attempts, 0);
    assert_eq!(record.requested_at, now);
    assert_eq!(record.lease_until, Some(now + lease()));
    assert_eq!(record.summary, None);
    assert_eq!(record.tenant, t);
    assert_eq!(record.session_id, s.as_str());

    for force in [false, true] {
        assert_eq!(
            request(store, &t, &s, force, at(60)).await,
            RequestOutcome::AlreadyPending,
            "a live job is never queued twice (force {force})"
        );
    }
    assert_eq!(
        read(store, &t, &s).await.requested_at,
        now,
        "a refused request writes nothing"
    );

    let stranger = tenant();
    assert_not_found(
        store.request_compaction(&stranger, &s, req(false, None, now)).await,
        "another tenant",
    );
    assert_not_found(
        store.request_compaction(&t, &session(), req(false, None, now)).await,
        "an unknown session",
    );

    // The stranger's own session of the same id has a job of its own.
    let one = NewTurn::new("user", "the stranger's turn", None, None, None).expect("a valid turn");
    store.append(&stranger, &s, &[one]).await.expect("append");
    assert_eq!(
        request(store, &stranger, &s, false, at(120)).await,
        RequestOutcome::Queued,
        "another owner's session of the same id is another job"
    );
    assert_eq!(read(store, &stranger, &s).await.tenant, stranger);
    assert_eq!(
        read(store, &t, &s).await.requested_at,
        now,
        "the owner's job is left as it was"
    );
}

/// Of many requests at once for one session, exactly one queues the job.
pub async fn concurrent_requests_queue_one_job(store: Arc<dyn Both>) {
    let (t, s) = session_with_turns(&*store, 1).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (store, t, s) = (Arc::clone(&store), t.clone(), s.clone());
        tasks.spawn(async move { store.request_compaction(&t, &s, req(false, None, Utc::now())).await });
    }
    let mut queued = 0;
    while let Some(outcome) = tasks.join_next().await {
        match outcome.expect("request task").expect("request") {
            RequestOutcome::Queued => queued += 1,
            RequestOutcome::AlreadyPending => {}
            RequestOutcome::NotDue => panic!("no job failed, so none can be not due"),
        }
    }
    assert_eq!(queued, 1, "concurrent requests queue one job, not {queued}");
}

/// A claim holds the job (no second claim while its lease runs); `complete` with its token
/// stores the summary and ends the job; the token is then spent.
pub async fn claim_then_complete_stores_the_summary(store: &dyn Both) {
    let (t, s) = session_with_turns(store, 8).await;
    let now = at(0);
    request(store, &t, &s, false, now).await;
    let held = claim(store, &t, &s, at(1)).await.expect("a queued job can be claimed");
    assert_eq!(held.attempt, 1);
    assert_eq!(held.lease_until, at(1) + lease());
    let record = read(store, &t, &s).await;
    assert!(record.claimed && record.status == CompactionStatus::Pending);
    assert_eq!(claim(store, &t, &s, at(2)).await, None, "a held job cannot be claimed");

    let summary = summary(1, 3);
    assert!(
        store
            .complete_compaction(&t, s.as_str(), held.token, Some(&summary))
            .await
            .expect("complete"),
        "the holder's token completes the job"
    );
    let record = read(store, &t, &s).await;
    assert_eq!(record.status, CompactionStatus::Success);
    assert!(!record.claimed);
    assert_eq!(record.attempts, 0, "a success resets the attempts");
    assert_eq!(record.lease_until, None);
    assert_eq!(record.error, None);
    assert_eq!(
        record.summary.as_ref(),
        Some(&summary),
        "the summary round-trips exactly"
    );

    assert!(
        !store
            .complete_compaction(&t, s.as_str(), held.token, None)
            .await
            .expect("complete again"),
        "a spent token completes nothing"
    );
    assert_eq!(
        claim(store, &t, &s, at(3)).await,
        None,
        "a finished job cannot be claimed"
    );
    assert!(!due(store, at(10_000)).await.iter().any(|d| d.session_id == s.as_str()));
}

/// A worker that dies after its claim leaves the job pending until the lease runs out; then
/// the job is due, a new claim takes it with a new token, and the old token can neither
/// complete nor fail it.
pub async fn an_expired_lease_is_claimed_again_and_fences_the_old_worker(store: &dyn Both) {
    let (t, s) = session_with_turns(store, 8).await;
    request(store, &t, &s, false, at(0)).await;
    let first = claim(store, &t, &s, at(1)).await.expect("first claim");
    // The first worker dies here, between its claim and its result.
    assert!(
        !due(store, at(60)).await.iter().any(|d| d.session_id == s.as_str()),
        "a job under a live lease is not due"
    );
    assert_eq!(
        request(store, &t, &s, false, at(60)).await,
        RequestOutcome::AlreadyPending,
        "a job under a live lease is not queued again"
    );
    let expiry = 1 + LEASE.as_secs() as i64;
    assert!(
        due(store, at(expiry)).await.iter().any(|d| d.session_id == s.as_str()),
        "an expired lease makes the job due"
    );
    let second = claim(store, &t, &s, at(expiry))
        .await
        .expect("an expired lease is claimed again");
    assert_ne!(second.token, first.token);
    assert_eq!(second.attempt, 2, "each claim counts an attempt");

    // The first worker wakes up and tries to finish.
    let stale = summary(1, 3);
    assert!(!store
        .complete_compaction(&t, s.as_str(), first.token, Some(&stale))
        .await
        .expect("stale complete"));
    assert!(!store
        .fail_compaction(&t, s.as_str(), first.token, "stale failure", at(expiry + 1))
        .await
        .expect("stale fail"));
    let record = read(store, &t, &s).await;
    assert_eq!(
        record.status,
        CompactionStatus::Pending,
        "the stale worker changed nothing"
    );
    assert_eq!(record.summary, None);

    let fresh = summary(1, 3);
    assert!(store
        .complete_compaction(&t, s.as_str(), second.token, Some(&fresh))
        .await
        .expect("complete"));
    assert_eq!(read(store, &t, &s).await.status, CompactionStatus::Success);
}

/// A failure records its error and retry time; the job is claimable (and due) only from that
/// time, and only below the attempt cap. A request respects the retry time unless forced;
/// forcing resets the attempts.
pub async fn a_failed_job_is_retried_when_due_up_to_the_attempt_cap(store: &dyn Both) {
    let (t, s) = session_with_turns(store, 8).await;
    request(store, &t, &s, false, at(0)).await;
    let mut now = 1;
    for attempt in 1..=MAX_ATTEMPTS {
        let c = claim(store, &t, &s, at(now)).await.expect("the job is claimable");
        assert_eq!(c.attempt, attempt);
        let retry_at = at(now + 30);
        assert!(store
            .fail_compaction(&t, s.as_str(), c.token, "model timed out", retry_at)
            .await
            .expect("fail"));
        let record = read(store, &t, &s).await;
        assert_eq!(record.status, CompactionStatus::Failed);
        assert_eq!(record.error.as_deref(), Some("model timed out"));
        assert_eq!(record.retry_at, Some(retry_at));
        assert!(!record.claimed);
        assert_eq!(
            claim(store, &t, &s, at(now + 10)).await,
            None,
            "not before its retry time"
        );
        assert!(!due(store, at(now + 10))
            .await
            .iter()
            .any(|d| d.session_id == s.as_str()));
        now += 31;
        let is_due = due(store, at(now)).await.iter().any(|d| d.session_id == s.as_str());
        assert_eq!(
            is_due,
            attempt < MAX_ATTEMPTS,
            "due after attempt {attempt} of {MAX_ATTEMPTS}"
        );
    }
    assert_eq!(
        claim(store, &t, &s, at(now)).await,
        None,
        "the cap stops the sweep's retries"
    );

    let (t2, s2) = session_with_turns(store, 8).await;
    request(store, &t2, &s2, false, at(0)).await;
    let c = claim(store, &t2, &s2, at(1)).await.expect("claim");
    store
        .fail_compaction(&t2, s2.as_str(), c.token, "boom", at(100))
        .await
        .expect("fail");
    assert_eq!(request(store, &t2, &s2, false, at(50)).await, RequestOutcome::NotDue);
    assert_eq!(request(store, &t2, &s2, false, at(100)).await, RequestOutcome::Queued);
    let record = read(store, &t2, &s2).await;
    assert_eq!(record.status, CompactionStatus::Pending);
    assert_eq!(record.attempts, 1, "a due request keeps the attempts");
    assert_eq!(
        record.error.as_deref(),
        Some("boom"),
        "the last error stays visible until a success"
    );
    let c = claim(store, &t2, &s2, at(101)).await.expect("claim");
    store
        .fail_compaction(&t2, s2.as_str(), c.token, "boom again", at(1_000))
        .await
        .expect("fail");
    assert_eq!(request(store, &t2, &s2, true, at(102)).await, RequestOutcome::Queued);
    assert_eq!(read(store, &t2, &s2).await.attempts, 0, "forcing resets the attempts");
}

/// A job nobody claimed (its event was lost) is due at once; after its lease a request
/// queues it again.
pub async fn an_unclaimed_job_is_due_at_once_and_requeued_after_its_lease(store: &dyn Both) {
    let (t, s) = session_with_turns(store, 2).await;
    request(store, &t, &s, false, at(0)).await;
    let found: Vec<DueCompaction> = due(store, at(0)).await;
    let mine = found
        .iter()
        .find(|d| d.session_id == s.as_str())
        .expect("the job is due");
    assert_eq!(mine.tenant, t);
    let later = LEASE.as_secs() as i64 + 1;
    assert_eq!(request(store, &t, &s, false, at(later)).await, RequestOutcome::Queued);
    assert_eq!(read(store, &t, &s).await.requested_at, at(later));
}

/// While the next job runs, the last summary stays readable; a success without a new summary
/// keeps it.
pub async fn the_summary_outlives_the_next_job(store: &dyn Both) {
    let (t, s) = session_with_turns(store, 8).await;
    request(store, &t, &s, false, at(0)).await;
    let c = claim(store, &t, &s, at(1)).await.expect("claim");
    let first = summary(1, 3);
    store
        .complete_compaction(&t, s.as_str(), c.token, Some(&first))
        .await
        .expect("complete");
    // A caller that decided before this summary existed must not queue another job for it.
    assert_eq!(
        store
            .request_compaction(&t, &s, req(false, None, at(2)))
            .await
            .expect("request"),
        RequestOutcome::AlreadyPending,
        "a request based on an older summary queues nothing"
    );
    assert_eq!(
        store
            .request_compaction(&t, &s, req(false, Some(2), at(2)))
            .await
            .expect("request"),
        RequestOutcome::AlreadyPending
    );
    assert_eq!(request(store, &t, &s, false, at(2)).await, RequestOutcome::Queued);
    let record = read(store, &t, &s).await;
    assert_eq!(record.status, CompactionStatus::Pending);
    assert_eq!(
        record.summary.as_ref(),
        Some(&first),
        "the summary is kept while a job runs"
    );
    let c = claim(store, &t, &s, at(3)).await.expect("claim");
    store
        .fail_compaction(&t, s.as_str(), c.token, "boom", at(4))
        .await
        .expect("fail");
    assert_eq!(
        read(store, &t, &s).await.summary.as_ref(),
        Some(&first),
        "a failure keeps it"
    );
    let c = claim(store, &t, &s, at(5)).await.expect("claim the retry");
    store
        .complete_compaction(&t, s.as_str(), c.token, None)
        .await
        .expect("complete");
    let record = read(store, &t, &s).await;
    assert_eq!(record.status, CompactionStatus::Success);
    assert_eq!(record.summary.as_ref(), Some(&first), "nothing new keeps it");
    assert_eq!(record.error, None, "a success clears the error");
}

/// Another tenant sees no row, cannot claim, complete or fail the job, and reads no turns.
pub async fn compaction_rows_are_tenant_scoped(store: &dyn Both) {
    let (t, s) = session_with_turns(store, 4).await;
    request(store, &t, &s, false, at(0)).await;
    let intruders = [
        Tenant {
            team: unique("team"),
            ..t.clone()
        },
        Tenant {
            agent: unique("agent"),
            ..t.clone()
        },
        Tenant {
            user: unique("user"),
            ..t.clone()
        },
    ];
    for other in &intruders {
        assert_eq!(
            store.compaction(other, &s).await.expect("read"),
            None,
            "{other:?} sees no row"
        );
        assert_eq!(claim(store, other, &s, at(1)).await, None, "{other:?} cannot claim");
        let turns = store
            .window_turns(other, &s, query(0, None, None, 100))
            .await
            .expect("window turns");
        assert!(turns.is_empty(), "{other:?} reads no turns");
    }
    let c = claim(store, &t, &s, at(1)).await.expect("the owner claims");
    for other in &intruders {
        assert!(!store
            .complete_compaction(other, s.as_str(), c.token, Some(&summary(1, 2)))
            .await
            .expect("complete"));
        assert!(!store
            .fail_compaction(other, s.as_str(), c.token, "x", at(2))
            .await
            .expect("fail"));
    }
    let record = read(store, &t, &s).await;
    assert!(record.claimed && record.summary.is_none(), "intruders changed nothing");
}

/// `window_turns` reads newest first, bounded by seq on both sides, by creation time, and by
/// the limit.
pub async fn window_turns_reads_newest_first_within_its_range(store: &dyn Both) {
    let (t, s) = (tenant(), session());
    let times: Vec<DateTime<Utc>> = (1..=10).map(|i| at(i * 100)).collect();
    let turns: Vec<NewTurn> = times
        .iter()
        .enumerate()
        .map(|(i, created)| {
            NewTurn::new("user", &format!("turn {}", i + 1), None, None, Some(*created)).expect("a valid turn")
        })
        .collect();
    store.append(&t, &s, &turns).await.expect("append");
    let seqs = |turns: Vec<crate::domain::StoredTurn>| turns.iter().map(|t| t.seq).collect::<Vec<_>>();
    let read = |q: WindowQuery| store.window_turns(&t, &s, q);
    assert_eq!(
        seqs(read(query(0, None, None, 100)).await.expect("all")),
        (1..=10).rev().collect::<Vec<_>>()
    );
    assert_eq!(seqs(read(query(0, None, None, 3)).await.expect("limit")), [10, 9, 8]);
    assert_eq!(
        seqs(read(query(6, None, None, 100)).await.expect("after")),
        [10, 9, 8, 7]
    );
    assert_eq!(
        seqs(read(query(2, Some(6), None, 100)).await.expect("between")),
        [5, 4, 3]
    );
    assert_eq!(
        seqs(read(query(0, None, Some(times[6]), 100)).await.expect("since")),
        [10, 9, 8],
        "only turns created after `since`"
    );
    let first = read(query(0, None, None, 1)).await.expect("newest");
    assert_eq!(first[0].content, "turn 10");
    assert_eq!(first[0].tenant, t);
    assert_eq!(first[0].created_at, times[9]);
    assert!(store
        .window_turns(&t, &session(), query(0, None, None, 100))
        .await
        .expect("unknown session")
        .is_empty());
}

fn query(after_seq: i64, before_seq: Option<i64>, since: Option<DateTime<Utc>>, limit: u32) -> WindowQuery {
    WindowQuery {
        after_seq,
        before_seq,
        since,
        limit,
    }
}

/// A fixed instant plus `seconds`: whole seconds, so both backends store it exactly.
fn at(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + seconds, 0)
        .single()
        .expect("a valid time")
}

fn lease() -> chrono::Duration {
    chrono::Duration::from_std(LEASE).expect("a small lease")
}

/// A request based on the summary the store holds now (what a caller that just read it sees).
async fn request(store: &dyn Both, t: &Tenant, s: &SessionId, force: bool, now: DateTime<Utc>) -> RequestOutcome {
    let seen = store
        .compaction(t, s)
        .await
        .expect("read the compaction")
        .and_then(|r| r.summary)
        .map(|s| s.last_seq);
    store
        .request_compaction(t, s, req(force, seen, now))
        .await
        .expect("request a compaction")
}

fn req(force: bool, seen_last_seq: Option<i64>, now: DateTime<Utc>) -> CompactionRequest {
    CompactionRequest {
        force,
        seen_last_seq,
        now,
        lease: LEASE,
    }
}

async fn claim(store: &dyn Both, t: &Tenant, s: &SessionId, now: DateTime<Utc>) -> Option<super::compaction::Claim> {
    store
        .claim_compaction(t, s.as_str(), now, LEASE, MAX_ATTEMPTS)
        .await
        .expect("claim")
}

async fn due(store: &dyn Both, now: DateTime<Utc>) -> Vec<DueCompaction> {
    store
        .due_compactions(now, MAX_ATTEMPTS, 10_000)
        .await
        .expect("list due jobs")
}

async fn read(store: &dyn Both, t: &Tenant, s: &SessionId) -> CompactionRecord {
    store
        .compaction(t, s)
        .await
        .expect("read the compaction")
        .expect("a compaction row")
}

/// A summary with every field set, times in whole seconds.
fn summary(first_seq: i64, last_seq: i64) -> StoredSummary {
    StoredSummary {
        summary: serde_json::json!({"decisions": ["按月分区 orders"], "todos": []}),
        content: "Summary of the earlier conversation: 按月分区 orders.".to_owned(),
        token_count: 21,
        source_tokens: 480,
        message_count: last_seq - first_seq + 1,
        first_seq,
        last_seq,
        reset_at: Some(at(-500)),
        summarizer: "rules".to_owned(),
        prompt_version: "compact.v1".to_owned(),
        input_hash: "ab".repeat(32),
        started_at: at(-3),
        duration_ms: 12,
        compressed_at: at(-2),
    }
}

async fn session_with_turns(store: &dyn Both, n: usize) -> (Tenant, SessionId) {
    let (t, s) = (tenant(), session());
    let turns: Vec<NewTurn> = (0..n)
        .map(|i| NewTurn::new("user", &format!("turn {i}"), None, None, None).expect("a valid turn"))
        .collect();
    store.append(&t, &s, &turns).await.expect("append turns");
    (t, s)
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", Uuid::new_v4().simple())
}

fn tenant() -> Tenant {
    Tenant {
        team: unique("team"),
        agent: unique("agent"),
        user: unique("user"),
    }
}

fn session() -> SessionId {
    SessionId::parse(&unique("session")).expect("a valid session id")
}

fn assert_not_found<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    match result {
        Err(StoreError::SessionNotFound) => {}
        other => panic!("{what}: expected SessionNotFound, got {other:?}"),
    }
}
