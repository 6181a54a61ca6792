//! A fresh store of each backend, for the conformance suites: a new Postgres database, or a
//! SQLite file in a new temp dir. Each comes with the guard that keeps it alive (and removes it
//! when dropped).

use shared::store::{PostgresStore, SqliteStore};

use crate::pg::TestDb;

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
