//! The memory store conformance suite (`shared::store::memory_testsuite`) against both
//! backends, one fresh store per test.

macro_rules! suite {
    ($($check:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let (store, _db) = integration_tests::stores::postgres().await;
                    shared::store::memory_testsuite::$check(&store, &store).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let (store, _dir) = integration_tests::stores::sqlite().await;
                    shared::store::memory_testsuite::$check(&store, &store).await;
                }
            )*
        }
    };
}

suite!(
    commit_writes_everything_and_moves_the_cursor,
    commit_refuses_a_moved_cursor,
    archive_keeps_history,
    memories_are_tenant_scoped,
    list_filters_and_pages,
    memories_keep_their_task,
    patch_and_delete,
    outbox_clears,
    idle_due_times,
    session_leases_are_exclusive,
);
