//! The scene/persona store conformance suite (`shared::store::scene_testsuite`) against both
//! backends: a fresh Postgres database or SQLite file per test.

use std::sync::Arc;

use integration_tests::pg::TestDb;
use integration_tests::stores;
use shared::store::scene::SceneStore;

struct Fixture<G> {
    store: Arc<dyn SceneStore>,
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
                    shared::store::scene_testsuite::$check(&*fixture.store).await;
                }
            )*

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_schedule_updates_lose_nothing() {
                let fixture = super::$backend().await;
                shared::store::scene_testsuite::concurrent_schedule_updates_lose_nothing(fixture.store.clone()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_claims_have_one_winner() {
                let fixture = super::$backend().await;
                shared::store::scene_testsuite::concurrent_claims_have_one_winner(fixture.store.clone()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn whole_suite_on_one_store() {
                let fixture = super::$backend().await;
                shared::store::scene_testsuite::scene_store_suite(fixture.store.clone()).await;
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
    scene_rows_round_trip_newest_first,
    layer_data_is_tenant_scoped,
    schedule_defaults_then_updates,
    due_owners_are_due_and_free,
    leases_expire_and_release_only_with_their_token,
    a_lost_lease_commits_nothing,
    a_commit_reschedules_after_a_late_l1,
    persona_signals_and_builds,
    provenance_filters_by_layer_and_scene,
    layer_owners_page_in_order,
);
