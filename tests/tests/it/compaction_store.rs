//! The compaction store conformance suite against both backends: a fresh Postgres database or
//! SQLite file per test.

use std::sync::Arc;

use integration_tests::pg::TestDb;
use integration_tests::stores;
use shared::store::compaction_testsuite::{self, Both};

struct Fixture<G> {
    store: Arc<dyn Both>,
    _guard: G,
}

async fn postgres() -> Fixture<TestDb> {
    let (store, db) = stores::postgres().await;
    Fixture {
        store: Arc::new(store),
        _guard: db,
    }
}

async fn sqlite() -> Fixture<tempfile::TempDir> {
    let (store, dir) = stores::sqlite().await;
    Fixture {
        store: Arc::new(store),
        _guard: dir,
    }
}

macro_rules! suite {
    ($backend:ident; $($check:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let fixture = super::$backend().await;
                    shared::store::compaction_testsuite::$check(&*fixture.store).await;
                }
            )*

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_requests_queue_one_job() {
                let fixture = super::$backend().await;
                shared::store::compaction_testsuite::concurrent_requests_queue_one_job(fixture.store.clone()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn whole_suite_on_one_store() {
                let fixture = super::$backend().await;
                super::compaction_testsuite::compaction_store_suite(fixture.store.clone()).await;
            }
        }
    };
}

macro_rules! both {
    ($($check:ident),* $(,)?) => {
        suite!(postgres; $($check),*);
        suite!(sqlite; $($check),*);
    };
}

both!(
    request_queues_one_job_per_session,
    claim_then_complete_stores_the_summary,
    an_expired_lease_is_claimed_again_and_fences_the_old_worker,
    a_failed_job_is_retried_when_due_up_to_the_attempt_cap,
    an_unclaimed_job_is_due_at_once_and_requeued_after_its_lease,
    the_summary_outlives_the_next_job,
    compaction_rows_are_tenant_scoped,
    window_turns_reads_newest_first_within_its_range,
);
