//! A fresh store of each backend, for the conformance suites: a new Postgres database, or a
//! SQLite file in a new temp dir. Each comes with the guard that keeps it alive (and removes it
//! when dropped).

use std::sync::Arc;

use shared::store::{PostgresStore, SqliteStore};

use crate::pg::TestDb;

/// A store under test with whatever keeps it alive (its database or directory).
pub struct Fixture<S, G> {
    pub store: Arc<S>,
    _guard: G,
}

/// [`postgres`] as a [`Fixture`].
pub async fn postgres_fixture() -> Fixture<PostgresStore, TestDb> {
    let (store, db) = postgres().await;
    Fixture {
        store: Arc::new(store),
        _guard: db,
    }
}

/// [`sqlite`] as a [`Fixture`].
pub async fn sqlite_fixture() -> Fixture<SqliteStore, tempfile::TempDir> {
    let (store, dir) = sqlite().await;
    Fixture {
        store: Arc::new(store),
        _guard: dir,
    }
}

/// Runs the checks of a store conformance suite, `shared::store::$suite`, against both
/// backends, one fresh store per test, in modules `postgres` and `sqlite`. Each check in
/// `checks` gets the store by reference; each in `shared` gets it as an `Arc` (for checks that
/// spawn tasks) and runs on 4 worker threads.
#[macro_export]
macro_rules! store_suite {
    ($suite:ident; checks: [$($check:ident),* $(,)?]; shared: [$($shared:ident),* $(,)?] $(;)?) => {
        $crate::store_suite!(@backend postgres, postgres_fixture; $suite; [$($check),*]; [$($shared),*]);
        $crate::store_suite!(@backend sqlite, sqlite_fixture; $suite; [$($check),*]; [$($shared),*]);
    };
    (@backend $backend:ident, $fixture:ident; $suite:ident; [$($check:ident),*]; [$($shared:ident),*]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let fixture = $crate::stores::$fixture().await;
                    shared::store::$suite::$check(&*fixture.store).await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $shared() {
                    let fixture = $crate::stores::$fixture().await;
                    shared::store::$suite::$shared(fixture.store.clone()).await;
                }
            )*
        }
    };
}

/// A migrated store on a new database of the test server.
pub async fn postgres() -> (PostgresStore, TestDb) {
    let db = TestDb::create().await;
    (db.store().await, db)
}

/// A store in a new SQLite file.
pub async fn sqlite() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("create a temp dir");
    let store = SqliteStore::open(&dir.path().join("sediment.db"))
        .await
        .expect("open sqlite store");
    (store, dir)
}
