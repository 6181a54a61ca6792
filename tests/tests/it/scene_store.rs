//! The scene/persona store conformance suite (`shared::store::scene_testsuite`) against both
//! backends: a fresh Postgres database or SQLite file per test.

integration_tests::store_suite!(
    scene_testsuite;
    checks: [
        scene_rows_round_trip_newest_first,
        layer_data_is_tenant_scoped,
        schedule_defaults_then_updates,
        due_owners_are_due_and_free,
        leases_expire_and_release_only_with_their_token,
        leases_are_renewed_only_by_their_holder,
        a_lost_lease_commits_nothing,
        a_commit_reschedules_after_a_late_l1,
        persona_signals_and_builds,
        provenance_filters_by_layer_and_scene,
        layer_owners_page_in_order,
    ];
    shared: [
        concurrent_schedule_updates_lose_nothing,
        concurrent_claims_have_one_winner,
        scene_store_suite,
    ];
);
