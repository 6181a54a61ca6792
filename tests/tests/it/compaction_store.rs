//! The compaction store conformance suite against both backends: a fresh Postgres database or
//! SQLite file per test.

integration_tests::store_suite!(
    compaction_testsuite;
    checks: [
        request_queues_one_job_per_session,
        claim_then_complete_stores_the_summary,
        an_expired_lease_is_claimed_again_and_fences_the_old_worker,
        a_failed_job_is_retried_when_due_up_to_the_attempt_cap,
        an_unclaimed_job_is_due_at_once_and_requeued_after_its_lease,
        the_summary_outlives_the_next_job,
        compaction_rows_are_tenant_scoped,
        window_turns_reads_newest_first_within_its_range,
    ];
    shared: [
        concurrent_requests_queue_one_job,
        compaction_store_suite,
    ];
);
