//! The transcript store conformance suite against both backends, one fresh store per test
//! (a new Postgres database, or a SQLite file in a new temp dir), plus backend-specific tests.

use integration_tests::pg::TestDb;
use shared::domain::SessionKey;
use shared::store::{testsuite, PostgresStore, SqliteStore, StoreError, TranscriptStore};

integration_tests::store_suite!(
    testsuite;
    checks: [
        append_assigns_gapless_seqs,
        append_is_idempotent_on_client_id,
        append_dedups_client_id_within_request,
        other_tenants_cannot_touch_a_session,
        turns_by_id_is_tenant_scoped,
        list_pages_by_after_seq_and_limit,
        turns_round_trip_exactly,
        turns_keep_their_task,
        reset_marks_session_and_deletes_nothing,
        cursors_track_pending_turns,
        cursors_of_many_sessions_move_together,
        backlog_and_lag_follow_cursors,
        failed_append_writes_nothing,
    ];
    shared: [
        concurrent_batch_appends_are_gapless,
        concurrent_single_appends_are_gapless,
        transcript_store_suite,
    ];
);

/// The tenant of the backend-specific tests below.
fn tenant() -> shared::domain::Tenant {
    shared::domain::Tenant {
        team: "t".into(),
        agent: "a".into(),
        user: "u".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_migrations_both_succeed() {
    let db = TestDb::create().await;
    let a = PostgresStore::connect(&db.url, 2).await.expect("connect");
    let b = PostgresStore::connect(&db.url, 2).await.expect("connect");
    let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
    ra.expect("first concurrent migrate");
    rb.expect("second concurrent migrate");
    a.migrate().await.expect("migrate is idempotent");

    let client = db.client().await;
    let rows = client
        .query(
            "SELECT version, COUNT(*) AS n FROM schema_migrations GROUP BY version ORDER BY version",
            &[],
        )
        .await
        .expect("read schema_migrations");
    assert!(!rows.is_empty(), "no migration was recorded");
    for row in &rows {
        let (version, n): (i64, i64) = (row.get("version"), row.get("n"));
        assert_eq!(n, 1, "migration {version} recorded {n} times");
    }
    assert_eq!(rows[0].get::<_, i64>("version"), 1);
    // The schema is usable.
    testsuite::append_assigns_gapless_seqs(&a).await;
}

/// A cursor advance commits asynchronously (see `advance_cursors.sql`); the setting that does
/// it must end with its transaction, or every later commit on that pooled connection (turn
/// appends among them) would return before it is durable.
#[tokio::test]
async fn postgres_cursor_advance_leaves_commits_synchronous() {
    let db = TestDb::create().await;
    let store = PostgresStore::connect(&db.url, 1).await.expect("connect");
    store.migrate().await.expect("migrate");
    let before = store.setting("synchronous_commit").await.unwrap();
    assert_ne!(before, "off", "the test server already commits asynchronously");
    let s1 = SessionKey::new(integration_tests::app::tenant(), "s-1");
    store.advance_cursor("index", &s1, 3).await.expect("advance");
    store.advance_cursor("index", &s1, 2).await.expect("a late advance");
    assert_eq!(
        store.setting("synchronous_commit").await.unwrap(),
        before,
        "the advance's setting outlived its statement"
    );
    let (cursor, _) = store.pending_turns("index", &s1, 10).await.expect("read the cursor");
    assert_eq!(cursor, 3, "the advance took effect and never moved back");
}

/// A session the server sees idle inside a transaction for 5 s is ended (a paused worker's row
/// locks would stop every writer of those rows until it moves again); options of the URL's own
/// keep their place, and a URL that sets the timeout itself wins.
#[tokio::test]
async fn postgres_sessions_end_stalled_transactions() {
    let db = TestDb::create().await;
    let default = PostgresStore::connect(&db.url, 1).await.expect("connect");
    assert_eq!(
        default.setting("idle_in_transaction_session_timeout").await.unwrap(),
        "5s"
    );
    let sep = if db.url.contains('?') { '&' } else { '?' };
    let with_options = format!("{}{sep}options=-c%20statement_timeout%3D7s", db.url);
    let store = PostgresStore::connect(&with_options, 1).await.expect("connect");
    assert_eq!(store.setting("statement_timeout").await.unwrap(), "7s");
    assert_eq!(
        store.setting("idle_in_transaction_session_timeout").await.unwrap(),
        "5s"
    );
    let own = format!("{}{sep}options=-c%20idle_in_transaction_session_timeout%3D60s", db.url);
    let store = PostgresStore::connect(&own, 1).await.expect("connect");
    assert_eq!(
        store.setting("idle_in_transaction_session_timeout").await.unwrap(),
        "1min"
    );
}

/// Two workers advancing overlapping sessions, listed in opposite orders, at once: the
/// statement writes rows in session order, so neither waits on the other in a cycle (Postgres
/// would abort one as a deadlock after `deadlock_timeout`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_overlapping_cursor_advances_do_not_deadlock() {
    let db = TestDb::create().await;
    let store = PostgresStore::connect(&db.url, 4).await.expect("connect");
    store.migrate().await.expect("migrate");
    let t = integration_tests::app::tenant();
    let sessions: Vec<SessionKey> = (0..50)
        .map(|i| SessionKey::new(t.clone(), format!("s-{i:02}")))
        .collect();
    let mut workers = tokio::task::JoinSet::new();
    for reversed in [false, true] {
        let (store, mut sessions) = (store.clone(), sessions.clone());
        if reversed {
            sessions.reverse();
        }
        workers.spawn(async move {
            for seq in 1..=40 {
                let cursors: Vec<(SessionKey, i64)> = sessions.iter().map(|s| (s.clone(), seq)).collect();
                store.advance_cursors("index", &cursors).await.expect("advance");
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.expect("an advance failed");
    }
    for session in &sessions {
        let (cursor, _) = store.pending_turns("index", session, 1).await.expect("read the cursor");
        assert_eq!(cursor, 40, "{}", session.session_id);
    }
}

#[tokio::test]
async fn postgres_connect_to_an_unreachable_server_is_retryable() {
    // Port 1 on loopback: nothing listens there, so the connection is refused at once.
    let error = PostgresStore::connect("postgres://postgres@127.0.0.1:1/postgres", 2)
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        matches!(error, StoreError::Unavailable(_)),
        "expected Unavailable, got {error:?}"
    );
    assert!(error.is_retryable());
}

#[tokio::test]
async fn postgres_connect_with_a_malformed_url_is_permanent() {
    let error = PostgresStore::connect("postgres://[not a url", 2)
        .await
        .expect_err("malformed url");
    assert!(!error.is_retryable(), "a malformed url was deemed retryable: {error:?}");
}

/// Defense in depth: a turn whose tenant columns disagree with its session's owner (which the
/// store never writes) cannot be stored at all, since V012's foreign key names the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_turns_cannot_disagree_with_their_sessions_owner() {
    let fixture_db = TestDb::create().await;
    let store = fixture_db.store().await;
    let tenant = tenant();
    let session = shared::domain::SessionId::parse("s").expect("session id");
    let turn = shared::domain::NewTurn::new("user", "mine", None, None, None).expect("turn");
    store.append(&tenant, &session, &[turn]).await.expect("append");

    let client = fixture_db.client().await;
    let planted = client
        .execute(
            "INSERT INTO messages (id, session_id, team_id, agent_id, user_id, seq, role, content, created_at) \
             VALUES ($1, 's', 'other', 'a', 'u', 2, 'user', 'planted', now())",
            &[&uuid::Uuid::new_v4()],
        )
        .await
        .expect_err("a turn of another owner in this session");
    assert_eq!(
        planted.code(),
        Some(&tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION),
        "{planted}"
    );
    let listed = store.list(&tenant, &session, 0, 100).await.expect("list");
    assert_eq!(listed.iter().map(|t| t.content.as_str()).collect::<Vec<_>>(), ["mine"]);
}

/// An append moves its session's `last_seq` and `updated_at`, which no index holds (V007), so
/// the row's new version stays on its page (a HOT update) and the primary key keeps one
/// entry for the session: were either column indexed again, every append would add an entry
/// to each of the session's indexes, as it did before V007.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_appends_update_the_session_row_in_place() {
    let fixture_db = TestDb::create().await;
    let store = fixture_db.store().await;
    let tenant = tenant();
    let session = shared::domain::SessionId::parse("s").expect("session id");
    for i in 0..20 {
        // Half the appends take the path for turns with client ids, which locks the row and
        // updates it in a statement of its own.
        let client_id = (i % 2 == 0).then(|| format!("c-{i}"));
        let turn = shared::domain::NewTurn::new("user", &format!("turn {i}"), None, client_id, None).expect("turn");
        store.append(&tenant, &session, &[turn]).await.expect("append");
    }

    let client = fixture_db.client().await;
    let indexes: Vec<String> = client
        .query(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'sessions' ORDER BY indexname",
            &[],
        )
        .await
        .expect("list the indexes")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(indexes, ["sessions_pkey"]);
    client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        .await
        .expect("pageinspect (from PostgreSQL's contrib modules)");
    // A one-page B-tree keeps its items on block 1, its root and only leaf.
    let entries: i64 = client
        .query_one("SELECT count(*) FROM bt_page_items('sessions_pkey', 1)", &[])
        .await
        .expect("read the primary key's leaf")
        .get(0);
    assert_eq!(
        entries, 1,
        "20 appends to one session left {entries} primary key entries"
    );
    let last_seq: i64 = client
        .query_one("SELECT last_seq FROM sessions WHERE session_id = 's'", &[])
        .await
        .expect("read the session")
        .get(0);
    assert_eq!(last_seq, 20);
}

#[tokio::test]
async fn sqlite_reopen_keeps_data_and_schema() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nested").join("sediment.db");
    let tenant = tenant();
    let session = shared::domain::SessionId::parse("s").expect("session id");
    let turn = shared::domain::NewTurn::new("user", "kept", None, Some("k".into()), None).expect("turn");
    let first = {
        let store = SqliteStore::open(&path).await.expect("create the store");
        store
            .append(&tenant, &session, std::slice::from_ref(&turn))
            .await
            .expect("append")
    };
    let store = SqliteStore::open(&path).await.expect("reopen the store");
    let listed = store.list(&tenant, &session, 0, 10).await.expect("list after reopen");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].content, "kept");
    let retried = store
        .append(&tenant, &session, &[turn])
        .await
        .expect("retry after reopen");
    assert_eq!(retried, first, "client ids survive a reopen");
    assert!(
        dir.path().join("nested").join("sediment.db-wal").exists(),
        "the store runs in WAL mode"
    );
}

/// V012 keys sessions by their owner. A database written before it keeps every session, turn,
/// cursor, extraction schedule and compaction job through the upgrade; a cursor that named no
/// session goes; and another owner may then use a session id that was taken.
#[tokio::test]
async fn postgres_upgrade_to_owner_scoped_sessions_keeps_every_row() {
    use shared::domain::{NewTurn, SessionId, Tenant};
    use shared::store::compaction::CompactionStore;
    use shared::store::memory::MemoryStore;

    const BEFORE: &[&str] = &[
        include_str!("../../../migrations/V001__init.sql"),
        include_str!("../../../migrations/V002__memories.sql"),
        include_str!("../../../migrations/V003__session_compactions.sql"),
        include_str!("../../../migrations/V004__prompt_templates.sql"),
        include_str!("../../../migrations/V005__audit_log.sql"),
        include_str!("../../../migrations/V006__scenes.sql"),
        include_str!("../../../migrations/V007__append_write_volume.sql"),
        include_str!("../../../migrations/V008__api_keys.sql"),
        include_str!("../../../migrations/V009__erasures.sql"),
        include_str!("../../../migrations/V010__tasks.sql"),
        include_str!("../../../migrations/V011__operator_log.sql"),
    ];
    let db = TestDb::create().await;
    let client = db.client().await;
    for sql in BEFORE {
        client.batch_execute(sql).await.expect("a migration before V012");
    }
    // What a V011 database holds: two owners' sessions, and a cursor of an erased session.
    client
        .batch_execute(
            "INSERT INTO sessions (session_id, team_id, agent_id, user_id, last_seq)
                 VALUES ('s1', 't', 'a', 'u', 2), ('s2', 't', 'a', 'v', 1);
             INSERT INTO messages (id, session_id, team_id, agent_id, user_id, seq, role, content, client_id, created_at)
                 VALUES (gen_random_uuid(), 's1', 't', 'a', 'u', 1, 'user', 'one', 'k1', now()),
                        (gen_random_uuid(), 's1', 't', 'a', 'u', 2, 'assistant', 'two', NULL, now()),
                        (gen_random_uuid(), 's2', 't', 'a', 'v', 1, 'user', 'three', NULL, now());
             INSERT INTO cursors (consumer, session_id, seq)
                 VALUES ('index', 's1', 2), ('extract', 's2', 1), ('index', 'erased', 5);
             INSERT INTO extract_schedule (session_id, runs) VALUES ('s1', 3);
             INSERT INTO session_compactions (session_id, team_id, agent_id, user_id, status, requested_at)
                 VALUES ('s1', 't', 'a', 'u', 'pending', now());",
        )
        .await
        .expect("rows as V011 stored them");
    client
        .batch_execute(include_str!("../../../migrations/V012__owner_scoped_sessions.sql"))
        .await
        .expect("V012");

    let store = PostgresStore::connect(&db.url, 2).await.expect("connect");
    let owner = |user: &str| Tenant {
        team: "t".into(),
        agent: "a".into(),
        user: user.into(),
    };
    let (u, v) = (owner("u"), owner("v"));
    let s1 = SessionId::parse("s1").unwrap();
    let turns = store.list(&u, &s1, 0, 10).await.expect("list");
    assert_eq!(
        turns.iter().map(|t| t.content.as_str()).collect::<Vec<_>>(),
        ["one", "two"]
    );
    let key = |t: &Tenant, s: &str| SessionKey::new(t.clone(), s);
    assert_eq!(
        store.pending_turns("index", &key(&u, "s1"), 10).await.unwrap(),
        (2, vec![])
    );
    assert_eq!(
        store.pending_turns("extract", &key(&v, "s2"), 10).await.unwrap(),
        (1, vec![])
    );
    let cursors: i64 = client
        .query_one("SELECT count(*) FROM cursors", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        cursors, 2,
        "the cursor of a session without a row went, the others stayed"
    );
    assert_eq!(store.schedule(&key(&u, "s1")).await.unwrap().runs, 3);
    assert!(
        store.compaction(&u, &s1).await.unwrap().is_some(),
        "the compaction job stayed"
    );
    let replay = NewTurn::new("user", "again", None, Some("k1".into()), None).unwrap();
    let again = store
        .append(&u, &s1, std::slice::from_ref(&replay))
        .await
        .expect("append");
    assert_eq!(again[0].id, turns[0].id, "client ids are still recognised");

    // The id `s1` was taken; another user of the same agent now has a session of its own.
    let theirs = store.append(&v, &s1, &[replay]).await.expect("another owner's s1");
    assert_eq!(theirs[0].seq, 1);
    assert_ne!(theirs[0].id, turns[0].id);
    assert_eq!(
        store.session(&u, &s1).await.unwrap().last_seq,
        2,
        "the owner's session is as it was"
    );
}
