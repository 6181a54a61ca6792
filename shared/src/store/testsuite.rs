//! The conformance suite of [`TranscriptStore`]: one function per point of the contract,
//! run by the integration tests against every backend.
//!
//! Each function panics, with a message naming the broken rule, when the store under test
//! breaks its contract. The functions use fresh tenants, sessions and consumer names, so they
//! tolerate data left in the store by earlier ones, but they expect no other writer while they
//! run (`backlog` and `lag` are store-wide). [`transcript_store_suite`] runs them all in turn.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone as _, Utc};
use serde_json::json;
use uuid::Uuid;

use super::{Backlog, Lag, StoreError, StoreResult, TranscriptStore};
use crate::domain::{AppendedTurn, NewTurn, Role, SessionId, SessionKey, StoredTurn, TaskId, Tenant};

/// Tasks that append to one session at once in the concurrency tests.
pub const CONCURRENT_TASKS: usize = 8;
/// Turns each of those tasks appends.
pub const TURNS_PER_TASK: usize = 500;
/// Turns per request in the batched concurrency test.
pub const TURNS_PER_BATCH: usize = 10;

/// Runs every check of this module against one store, one after another.
pub async fn transcript_store_suite(store: Arc<dyn TranscriptStore>) {
    append_assigns_gapless_seqs(&*store).await;
    append_is_idempotent_on_client_id(&*store).await;
    append_dedups_client_id_within_request(&*store).await;
    other_tenants_cannot_touch_a_session(&*store).await;
    turns_by_id_is_tenant_scoped(&*store).await;
    list_pages_by_after_seq_and_limit(&*store).await;
    turns_round_trip_exactly(&*store).await;
    turns_keep_their_task(&*store).await;
    reset_marks_session_and_deletes_nothing(&*store).await;
    cursors_track_pending_turns(&*store).await;
    cursors_of_many_sessions_move_together(&*store).await;
    backlog_and_lag_follow_cursors(&*store).await;
    failed_append_writes_nothing(&*store).await;
    concurrent_batch_appends_are_gapless(Arc::clone(&store)).await;
    concurrent_single_appends_are_gapless(store).await;
}

/// Seqs start at 1, follow request order, and a later append continues where the last ended.
pub async fn append_assigns_gapless_seqs(store: &dyn TranscriptStore) {
    store.ping().await.expect("ping a healthy store");
    let (t, s) = (tenant(), session());
    let before = Utc::now();
    let first = store
        .append(&t, &s, &[turn("one"), role_turn(Role::Assistant, "two"), turn("three")])
        .await
        .expect("append to a new session");
    assert_eq!(seqs(&first), [1, 2, 3], "a new session numbers its turns from 1");
    let ids: HashSet<Uuid> = first.iter().map(|a| a.id).collect();
    assert_eq!(ids.len(), 3, "every turn gets its own id");
    for appended in &first {
        assert_recent(appended.created_at, before, "created_at of a turn without one");
    }

    let second = store
        .append(
            &t,
            &s,
            &[role_turn(Role::Tool, "four"), role_turn(Role::System, "five")],
        )
        .await
        .expect("append to an existing session");
    assert_eq!(seqs(&second), [4, 5], "a second append continues the sequence");
    // Ids lead with the time of the append (see `turn_id`), on every path an append takes.
    let versions: Vec<usize> = first.iter().chain(&second).map(|a| a.id.get_version_num()).collect();
    assert_eq!(versions, [7; 5], "turn ids are version 7 UUIDs");

    let empty = store.append(&t, &s, &[]).await.expect("append nothing");
    assert!(empty.is_empty(), "an empty append returns nothing");
    let info = store.session(&t, &s).await.expect("read the session");
    assert_eq!(info.last_seq, 5, "last_seq is the seq of the last turn");
    assert_eq!(info.reset_at, None, "a session starts without reset_at");

    let listed = store.list(&t, &s, 0, 100).await.expect("list the session");
    let appended: Vec<AppendedTurn> = first.iter().chain(&second).cloned().collect();
    assert_eq!(
        listed.iter().map(appended_of).collect::<Vec<_>>(),
        appended,
        "list shows what append returned"
    );
    let contents: Vec<&str> = listed.iter().map(|t| t.content.as_str()).collect();
    assert_eq!(contents, ["one", "two", "three", "four", "five"]);
    let roles: Vec<Role> = listed.iter().map(|t| t.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::User, Role::Tool, Role::System]
    );
    for stored in &listed {
        assert_eq!(stored.tenant, t, "a turn belongs to the appending tenant");
        assert_eq!(stored.session_id, s.as_str());
    }

    let claimed = session();
    store
        .append(&t, &claimed, &[])
        .await
        .expect("claim a session with an empty append");
    let info = store
        .session(&t, &claimed)
        .await
        .expect("an empty append creates the session");
    assert_eq!(info.last_seq, 0);
}

/// A retried turn (same client_id) gets its original id, seq and created_at back and is not
/// stored twice; the key is scoped to its session.
pub async fn append_is_idempotent_on_client_id(store: &dyn TranscriptStore) {
    let (t, s) = (tenant(), session());
    let first = store
        .append(&t, &s, &[keyed("a", "key-a"), keyed("b", "key-b")])
        .await
        .expect("append keyed turns");
    assert_eq!(seqs(&first), [1, 2]);

    let retry = store
        .append(&t, &s, &[keyed("a", "key-a"), keyed("b", "key-b")])
        .await
        .expect("retry the append");
    assert_eq!(retry, first, "a retry returns the original turns");
    assert_eq!(
        store.list(&t, &s, 0, 100).await.expect("list").len(),
        2,
        "a retry stores nothing"
    );
    assert_eq!(
        store.session(&t, &s).await.expect("session").last_seq,
        2,
        "a retry uses no seq"
    );

    let mut late = keyed("a", "key-a");
    late.created_at = Some(Utc.with_ymd_and_hms(2001, 2, 3, 4, 5, 6).unwrap());
    let mixed = store
        .append(&t, &s, &[keyed("b, edited", "key-b"), keyed("c", "key-c"), late])
        .await
        .expect("append a mix of retried and new turns");
    assert_eq!(
        mixed[0], first[1],
        "a retried turn keeps its original id, seq and created_at"
    );
    assert_eq!(mixed[1].seq, 3, "a new turn next to retried ones takes the next seq");
    assert_eq!(
        mixed[2], first[0],
        "a retry with another created_at still returns the original"
    );

    let listed = store.list(&t, &s, 0, 100).await.expect("list");
    let contents: Vec<&str> = listed.iter().map(|t| t.content.as_str()).collect();
    assert_eq!(contents, ["a", "b", "c"], "a retry never rewrites the stored turn");
    assert_eq!(listed[2].client_id.as_deref(), Some("key-c"));

    let other = session();
    let elsewhere = store.append(&t, &other, &[keyed("a", "key-a")]).await.expect("append");
    assert_eq!(seqs(&elsewhere), [1], "a client_id is scoped to its session");
    assert_ne!(
        elsewhere[0].id, first[0].id,
        "the same key in another session is another turn"
    );
}

/// A client_id repeated inside one request stores one turn, and both entries name it.
pub async fn append_dedups_client_id_within_request(store: &dyn TranscriptStore) {
    let (t, s) = (tenant(), session());
    let request = [keyed("x", "dup"), turn("y"), keyed("x again", "dup")];
    let appended = store
        .append(&t, &s, &request)
        .await
        .expect("append with a repeated key");
    assert_eq!(appended[0], appended[2], "a repeated key maps to the same turn");
    assert_eq!(seqs(&appended), [1, 2, 1]);
    let listed = store.list(&t, &s, 0, 100).await.expect("list");
    let contents: Vec<&str> = listed.iter().map(|t| t.content.as_str()).collect();
    assert_eq!(contents, ["x", "y"], "the first occurrence of a key is the one stored");
    assert_eq!(store.session(&t, &s).await.expect("session").last_seq, 2);

    let retry = store.append(&t, &s, &[keyed("x", "dup")]).await.expect("retry");
    assert_eq!(retry[0], appended[0]);
}

/// A session is its owner's: tenants differing in one id only, using the same session id, have
/// sessions of their own. Before its first append another tenant gets `SessionNotFound` from
/// every read, as for an id nobody used; its append (even one replaying the owner's client id)
/// makes its own session, numbered from 1, and nothing it does reaches the owner's.
pub async fn other_tenants_cannot_touch_a_session(store: &dyn TranscriptStore) {
    let (owner, s) = (tenant(), session());
    let appended = store
        .append(&owner, &s, &[keyed("secret one", "key-1"), turn("secret two")])
        .await
        .expect("append as the owner");
    let ids: Vec<Uuid> = appended.iter().map(|a| a.id).collect();
    let before = store.list(&owner, &s, 0, 100).await.expect("list as the owner");

    let others = [
        Tenant {
            team: unique("team"),
            ..owner.clone()
        },
        Tenant {
            agent: unique("agent"),
            ..owner.clone()
        },
        Tenant {
            user: unique("user"),
            ..owner.clone()
        },
        tenant(),
    ];
    for other in &others {
        let who = format!("{other:?}");
        assert_not_found(store.list(other, &s, 0, 100).await, &who);
        assert_not_found(store.session(other, &s).await, &who);
        assert_not_found(store.reset(other, &s).await, &who);
        let stolen = store
            .turns_by_id(other, &ids)
            .await
            .expect("turns_by_id as another tenant");
        assert!(stolen.is_empty(), "{who} read another tenant's turns by id: {stolen:?}");

        let own = store
            .append(other, &s, &[keyed("replay", "key-1"), turn("its own")])
            .await
            .unwrap_or_else(|e| panic!("{who}: append to its own session of the same id: {e:?}"));
        assert_eq!(seqs(&own), [1, 2], "{who}: its session of the same id numbers from 1");
        assert!(
            own.iter().all(|a| !ids.contains(&a.id)),
            "{who}: the owner's client id answered with the owner's turn"
        );
        let listed = store.list(other, &s, 0, 100).await.expect("list its own session");
        assert_eq!(
            listed.iter().map(|t| t.content.as_str()).collect::<Vec<_>>(),
            ["replay", "its own"],
            "{who} lists its own turns, and only those"
        );
        assert!(
            listed.iter().all(|t| t.tenant == *other),
            "{who}: turns carry their owner"
        );
        store.reset(other, &s).await.expect("reset its own session");
    }

    let after = store.list(&owner, &s, 0, 100).await.expect("list as the owner");
    assert_eq!(
        after, before,
        "other tenants' sessions of the same id changed the owner's"
    );
    let info = store.session(&owner, &s).await.expect("session as the owner");
    assert_eq!(info.last_seq, 2, "another tenant's append used the owner's seqs");
    assert_eq!(
        info.reset_at, None,
        "another tenant's reset reached the owner's session"
    );
}

/// `turns_by_id` returns exactly the caller's turns among the ids, across sessions.
pub async fn turns_by_id_is_tenant_scoped(store: &dyn TranscriptStore) {
    let (a, b) = (tenant(), tenant());
    let (a1, a2, b1) = (session(), session(), session());
    let a_first = store.append(&a, &a1, &[turn("a1"), turn("a2")]).await.expect("append");
    let a_second = store.append(&a, &a2, &[turn("a3")]).await.expect("append");
    let b_turns = store.append(&b, &b1, &[turn("b1"), turn("b2")]).await.expect("append");

    let a_ids: BTreeSet<Uuid> = a_first.iter().chain(&a_second).map(|t| t.id).collect();
    let b_ids: BTreeSet<Uuid> = b_turns.iter().map(|t| t.id).collect();
    let mut all: Vec<Uuid> = a_ids.iter().chain(&b_ids).copied().collect();
    all.push(Uuid::new_v4());

    let got = store.turns_by_id(&a, &all).await.expect("turns_by_id");
    assert_eq!(
        got.iter().map(|t| t.id).collect::<BTreeSet<_>>(),
        a_ids,
        "only the caller's turns"
    );
    let mut expected = store.list(&a, &a1, 0, 100).await.expect("list");
    expected.extend(store.list(&a, &a2, 0, 100).await.expect("list"));
    assert_eq!(
        sorted(got),
        sorted(expected),
        "turns_by_id reads the same turns as list"
    );

    let got = store.turns_by_id(&b, &all).await.expect("turns_by_id");
    assert_eq!(got.iter().map(|t| t.id).collect::<BTreeSet<_>>(), b_ids);

    assert!(store.turns_by_id(&a, &[]).await.expect("no ids").is_empty());
    assert!(store
        .turns_by_id(&a, &[Uuid::new_v4()])
        .await
        .expect("unknown id")
        .is_empty());
}

/// `list` returns turns with seq > after_seq, in seq order, at most `limit` of them.
pub async fn list_pages_by_after_seq_and_limit(store: &dyn TranscriptStore) {
    let (t, s) = (tenant(), session());
    let first: Vec<NewTurn> = (1..=6).map(|i| turn(&format!("turn {i}"))).collect();
    let second: Vec<NewTurn> = (7..=10).map(|i| turn(&format!("turn {i}"))).collect();
    store.append(&t, &s, &first).await.expect("append");
    store.append(&t, &s, &second).await.expect("append");

    let page = |after: i64, limit: u32| {
        let (t, s) = (t.clone(), s.clone());
        async move {
            let turns = store.list(&t, &s, after, limit).await.expect("list a page");
            for turn in &turns {
                assert_eq!(turn.content, format!("turn {}", turn.seq), "content matches its seq");
            }
            turns.iter().map(|t| t.seq).collect::<Vec<i64>>()
        }
    };
    assert_eq!(page(0, 3).await, [1, 2, 3]);
    assert_eq!(page(3, 3).await, [4, 5, 6]);
    assert_eq!(page(5, 100).await, [6, 7, 8, 9, 10]);
    assert_eq!(page(9, 5).await, [10]);
    assert_eq!(page(10, 5).await, Vec::<i64>::new());
    assert_eq!(page(0, 0).await, Vec::<i64>::new(), "limit 0 returns nothing");
    assert_eq!(page(0, 100).await, (1..=10).collect::<Vec<_>>());

    let mut walked = Vec::new();
    let mut after = 0;
    loop {
        let seqs = page(after, 4).await;
        let Some(&last) = seqs.last() else { break };
        walked.extend(seqs);
        after = last;
    }
    assert_eq!(walked, (1..=10).collect::<Vec<_>>(), "paging visits every turn once");

    assert_not_found(store.list(&t, &session(), 0, 10).await, "unknown session");
}

/// Content, metadata, ids, client ids and timestamps come back exactly as stored, whatever
/// the script; a client's created_at is kept to the microsecond. Both with a client id among
/// the turns and without any (a backend may take another path for each).
pub async fn turns_round_trip_exactly(store: &dyn TranscriptStore) {
    for keyed in [true, false] {
        round_trip_exactly(store, keyed.then(|| "客户端-1 🔑".to_owned())).await;
    }
}

async fn round_trip_exactly(store: &dyn TranscriptStore, client_id: Option<String>) {
    let t = Tenant {
        team: unique("团队"),
        agent: unique("агент"),
        user: unique("ユーザー 🙂"),
    };
    let s = SessionId::parse(&unique("会话-🚀")).expect("a valid session id");
    let client_time = Utc.timestamp_opt(1_715_000_000, 123_456_789).unwrap();
    let metadata = json!({
        "lang": "zh-CN",
        "标签": ["数据库", "订单表", "🎉"],
        "nested": {"list": [1, 2.5, -3, true, null, "二", 1.0], "empty": {}, "none": null},
        "big": 9_007_199_254_740_993_u64,
        "negative": -9_007_199_254_740_993_i64,
        "float": 0.1,
        "quote": "she said \"hi\" \\ 'bye'\n\ttab",
    });
    let turns = vec![
        NewTurn::new(
            "user",
            "你好，世界！我在查订单表的慢查询 🌏🚀\n\t\"quoted\" \\ back'slash",
            Some(metadata),
            client_id.clone(),
            Some(client_time),
        )
        .expect("a valid turn"),
        NewTurn::new("assistant", "👨‍👩‍👧‍👦 e\u{301} مرحبا 𝄞 ｆｕｌｌ", None, None, None)
            .expect("a valid turn")
            .with_task(Some(TaskId::parse("任务 🚀 ü").expect("a valid task"))),
        NewTurn::new("system", "  leading and trailing spaces  ", None, None, None).expect("a valid turn"),
        NewTurn::new("tool", "{\"json\": \"as text\"}", Some(json!({"k": {}})), None, None).expect("a valid turn"),
    ];
    let appended = store.append(&t, &s, &turns).await.expect("append unicode turns");
    assert_eq!(seqs(&appended), [1, 2, 3, 4], "client id {client_id:?}");
    assert_eq!(
        appended[0].created_at,
        Utc.timestamp_opt(1_715_000_000, 123_456_000).unwrap(),
        "a client's created_at is kept, truncated to microseconds (client id {client_id:?})"
    );

    let expected: Vec<StoredTurn> = turns
        .iter()
        .zip(&appended)
        .map(|(turn, appended)| StoredTurn {
            id: appended.id,
            tenant: t.clone(),
            session_id: s.as_str().to_owned(),
            seq: appended.seq,
            role: turn.role,
            content: turn.content.clone(),
            metadata: turn.metadata.clone(),
            client_id: turn.client_id.clone(),
            created_at: appended.created_at,
            task: turn.task.as_ref().map(|t| t.as_str().to_owned()),
        })
        .collect();
    let listed = store.list(&t, &s, 0, 100).await.expect("list");
    assert_eq!(listed, expected, "list returns the turns exactly as appended");
    let ids: Vec<Uuid> = appended.iter().map(|a| a.id).collect();
    let by_id = store.turns_by_id(&t, &ids).await.expect("turns_by_id");
    assert_eq!(
        sorted(by_id),
        expected,
        "turns_by_id returns the turns exactly as appended"
    );
    let (_, pending) = store
        .pending_turns(&unique("consumer"), &SessionKey::new(t.clone(), s.as_str()), 100)
        .await
        .expect("pending_turns");
    assert_eq!(pending, expected, "pending_turns returns the turns exactly as appended");
}

/// `reset` stamps reset_at and returns it, keeps every turn, and numbering goes on.
pub async fn reset_marks_session_and_deletes_nothing(store: &dyn TranscriptStore) {
    let (t, s) = (tenant(), session());
    store
        .append(&t, &s, &[turn("one"), turn("two"), turn("three")])
        .await
        .expect("append");
    let before = store.list(&t, &s, 0, 100).await.expect("list");

    let started = Utc::now();
    let at = store.reset(&t, &s).await.expect("reset");
    assert_recent(at, started, "reset_at");
    let info = store.session(&t, &s).await.expect("session");
    assert_eq!(
        info.reset_at,
        Some(at),
        "session shows the reset_at that reset returned"
    );
    assert_eq!(info.last_seq, 3, "reset keeps last_seq");
    assert_eq!(
        store.list(&t, &s, 0, 100).await.expect("list"),
        before,
        "reset deletes nothing"
    );

    let next = store.append(&t, &s, &[turn("four")]).await.expect("append after reset");
    assert_eq!(seqs(&next), [4], "numbering goes on after a reset");

    tokio::time::sleep(Duration::from_millis(5)).await;
    let again = store.reset(&t, &s).await.expect("reset again");
    assert!(again > at, "a later reset moves reset_at forward ({again} after {at})");
    assert_eq!(store.session(&t, &s).await.expect("session").reset_at, Some(again));

    let unknown = session();
    assert_not_found(store.reset(&t, &unknown).await, "reset of an unknown session");
    assert_not_found(store.session(&t, &unknown).await, "reset must not create a session");
}

/// `pending_turns` reads past a consumer's cursor; `advance_cursor` only moves it forward,
/// and each consumer has its own.
pub async fn cursors_track_pending_turns(store: &dyn TranscriptStore) {
    let (t, s) = (tenant(), session());
    let (consumer, other) = (unique("consumer"), unique("consumer"));
    let turns: Vec<NewTurn> = (1..=5).map(|i| turn(&format!("turn {i}"))).collect();
    store.append(&t, &s, &turns).await.expect("append");
    let sid = &SessionKey::new(t.clone(), s.as_str());

    let (cursor, pending) = store.pending_turns(&consumer, sid, 100).await.expect("pending");
    assert_eq!(
        (cursor, stored_seqs(&pending)),
        (0, vec![1, 2, 3, 4, 5]),
        "no cursor reads from 0"
    );
    let (cursor, pending) = store.pending_turns(&consumer, sid, 2).await.expect("pending");
    assert_eq!(
        (cursor, stored_seqs(&pending)),
        (0, vec![1, 2]),
        "pending_turns honours limit"
    );

    store.advance_cursor(&consumer, sid, 2).await.expect("advance");
    let (cursor, pending) = store.pending_turns(&consumer, sid, 100).await.expect("pending");
    assert_eq!((cursor, stored_seqs(&pending)), (2, vec![3, 4, 5]));
    assert_eq!(
        pending,
        store.list(&t, &s, 2, 100).await.expect("list"),
        "pending turns are full turns"
    );

    store
        .advance_cursor(&consumer, sid, 1)
        .await
        .expect("advance backwards");
    let (cursor, pending) = store.pending_turns(&consumer, sid, 100).await.expect("pending");
    assert_eq!(
        (cursor, stored_seqs(&pending)),
        (2, vec![3, 4, 5]),
        "a cursor never moves back"
    );
    store.advance_cursor(&consumer, sid, 2).await.expect("advance twice");
    let (cursor, _) = store.pending_turns(&consumer, sid, 100).await.expect("pending");
    assert_eq!(cursor, 2, "a duplicate advance changes nothing");

    let (cursor, pending) = store.pending_turns(&other, sid, 100).await.expect("pending");
    assert_eq!((cursor, pending.len()), (0, 5), "each consumer has its own cursor");

    store.advance_cursor(&other, sid, 4).await.expect("advance other");
    assert_eq!(store.reset_cursors(&other).await.expect("reset cursors"), 1);
    let (cursor, pending) = store.pending_turns(&other, sid, 100).await.expect("pending");
    assert_eq!((cursor, pending.len()), (0, 5), "a reset consumer starts over");
    let (cursor, _) = store.pending_turns(&consumer, sid, 100).await.expect("pending");
    assert_eq!(cursor, 2, "resetting one consumer leaves the others alone");

    store
        .advance_cursor(&consumer, sid, 5)
        .await
        .expect("advance to the end");
    let (cursor, pending) = store.pending_turns(&consumer, sid, 100).await.expect("pending");
    assert_eq!((cursor, pending.len()), (5, 0), "nothing pending past the last turn");
    store.append(&t, &s, &[turn("turn 6")]).await.expect("append");
    let (cursor, pending) = store.pending_turns(&consumer, sid, 100).await.expect("pending");
    assert_eq!((cursor, stored_seqs(&pending)), (5, vec![6]), "a new turn is pending");

    let (cursor, pending) = store
        .pending_turns(&consumer, &SessionKey::new(t.clone(), unique("no-such-session")), 10)
        .await
        .expect("pending");
    assert_eq!(
        (cursor, pending.len()),
        (0, 0),
        "an unknown session has nothing pending"
    );
}

/// `pending_turns_many` reads several sessions at once, each from its own cursor (or past the
/// caller's floor, when that is further) and up to the limit each; `advance_cursors` moves
/// several cursors in one write, never back.
pub async fn cursors_of_many_sessions_move_together(store: &dyn TranscriptStore) {
    let consumer = unique("consumer");
    let (t, other_tenant) = (tenant(), tenant());
    let (a, b, c, idle) = (session(), session(), session(), session());
    store
        .append(&t, &a, &[turn("a1"), turn("a2"), turn("a3")])
        .await
        .expect("append");
    store
        .append(&other_tenant, &b, &[turn("b1"), turn("b2")])
        .await
        .expect("append");
    store.append(&t, &c, &[turn("c1")]).await.expect("append");
    store.append(&t, &idle, &[]).await.expect("claim an empty session");
    // Another owner's session of the same id as `a`: a session of its own, with its own cursor.
    store
        .append(&other_tenant, &a, &[turn("twin1"), turn("twin2")])
        .await
        .expect("append");
    let key = |owner: &Tenant, s: &SessionId| SessionKey::new(owner.clone(), s.as_str());
    let (ka, kb, kc, kidle) = (key(&t, &a), key(&other_tenant, &b), key(&t, &c), key(&t, &idle));
    let twin = key(&other_tenant, &a);
    // Sessions to read with no floor of the caller's.
    let ids = |sessions: &[&SessionKey]| sessions.iter().map(|s| ((*s).clone(), 0)).collect::<Vec<_>>();
    // (session, seq) of each turn read, in the order the store gave them.
    let read = |sessions: Vec<(SessionKey, i64)>, limit: u32| {
        let consumer = consumer.clone();
        async move {
            let turns = store
                .pending_turns_many(&consumer, &sessions, limit)
                .await
                .expect("pending_turns_many");
            turns.into_iter().map(|t| (t.session_key(), t.seq)).collect::<Vec<_>>()
        }
    };
    let sorted = |mut pairs: Vec<(SessionKey, i64)>| {
        pairs.sort();
        pairs
    };

    let all = read(ids(&[&kc, &ka, &kb, &kidle, &twin, &key(&t, &session())]), 100).await;
    assert!(
        all.chunk_by(|x, y| x.0 == y.0)
            .all(|run| run.windows(2).all(|w| w[0].1 < w[1].1))
            && all.chunk_by(|x, y| x.0 == y.0).count() == all.iter().map(|p| &p.0).collect::<HashSet<_>>().len(),
        "turns come grouped by session, in seq order within one: {all:?}"
    );
    assert_eq!(
        sorted(all),
        sorted(vec![
            (ka.clone(), 1),
            (ka.clone(), 2),
            (ka.clone(), 3),
            (kb.clone(), 1),
            (kb.clone(), 2),
            (kc.clone(), 1),
            (twin.clone(), 1),
            (twin.clone(), 2),
        ]),
        "every session's pending turns, whatever its tenant; none for an empty or unknown session"
    );
    assert_eq!(
        read(ids(&[&kc, &kc]), 100).await,
        vec![(kc.clone(), 1)],
        "a session listed twice is read once"
    );
    assert_eq!(
        sorted(read(ids(&[&ka, &kb, &kc]), 1).await),
        sorted(vec![(ka.clone(), 1), (kb.clone(), 1), (kc.clone(), 1)]),
        "the limit holds per session"
    );
    assert!(read(Vec::new(), 100).await.is_empty(), "no sessions, no turns");

    store
        .advance_cursors(&consumer, &[(ka.clone(), 2), (kb.clone(), 2), (ka.clone(), 1)])
        .await
        .expect("advance_cursors");
    assert_eq!(
        sorted(read(ids(&[&ka, &kb, &kc, &twin]), 100).await),
        sorted(vec![
            (ka.clone(), 3),
            (kc.clone(), 1),
            (twin.clone(), 1),
            (twin.clone(), 2)
        ]),
        "each listed cursor moved, and only its owner's session's; a session listed twice took its larger seq"
    );
    assert_eq!(
        sorted(read(vec![(ka.clone(), 1), (kc.clone(), 1)], 100).await),
        vec![(ka.clone(), 3)],
        "a floor past the cursor skips what lies below it; one behind the cursor changes nothing"
    );
    assert_eq!(
        read(vec![(ka.clone(), 0), (ka.clone(), 3), (kb.clone(), 0)], 100).await,
        Vec::new(),
        "a session listed twice reads past its larger floor"
    );
    store
        .advance_cursors(&consumer, &[(ka.clone(), 1), (kc.clone(), 1), (twin.clone(), 2)])
        .await
        .expect("advance_cursors");
    assert_eq!(
        read(ids(&[&ka, &kb, &kc, &twin]), 100).await,
        vec![(ka.clone(), 3)],
        "a cursor never moves back, and a new one is created"
    );
    store.advance_cursors(&consumer, &[]).await.expect("advance nothing");
    let (cursor, _) = store.pending_turns(&consumer, &ka, 100).await.expect("pending");
    assert_eq!(cursor, 2, "the single-session read sees the same cursor");
    let (cursor, _) = store.pending_turns(&consumer, &twin, 100).await.expect("pending");
    assert_eq!(cursor, 2, "the same id of another owner has its own cursor");
    let fresh = unique("consumer");
    assert_eq!(
        store
            .pending_turns_many(&fresh, &ids(&[&ka, &kb]), 100)
            .await
            .expect("pending")
            .len(),
        5,
        "each consumer has its own cursors"
    );
}

/// `backlog` lists the sessions past a consumer's cursor, oldest first; `lag` sums them.
pub async fn backlog_and_lag_follow_cursors(store: &dyn TranscriptStore) {
    let (consumer, other) = (unique("consumer"), unique("consumer"));
    let base = store.lag(&consumer).await.expect("lag");
    let other_base = store.lag(&other).await.expect("lag");
    let t = tenant();
    let (s1, s2, empty) = (session(), session(), session());
    store
        .append(&t, &s1, &[turn("a"), turn("b"), turn("c")])
        .await
        .expect("append");
    pause().await;
    store.append(&t, &s2, &[turn("d"), turn("e")]).await.expect("append");
    store.append(&t, &empty, &[]).await.expect("claim an empty session");
    pause().await;
    let key = |s: &SessionId| SessionKey::new(t.clone(), s.as_str());

    let backlog_of = |s1: &SessionId, s2: &SessionId| {
        let ids = [
            s1.as_str().to_owned(),
            s2.as_str().to_owned(),
            empty.as_str().to_owned(),
        ];
        let consumer = consumer.clone();
        async move {
            let all = store.backlog(&consumer, u32::MAX).await.expect("backlog");
            all.into_iter()
                .filter(|b| ids.contains(&b.session_id))
                .collect::<Vec<_>>()
        }
    };
    let entry = |s: &SessionId, cursor: i64, last_seq: i64| Backlog {
        session_id: s.as_str().to_owned(),
        tenant: t.clone(),
        cursor,
        last_seq,
    };
    let lag_delta = |lag: Lag, base: Lag| (lag.turns - base.turns, lag.sessions - base.sessions);

    assert_eq!(
        backlog_of(&s1, &s2).await,
        [entry(&s1, 0, 3), entry(&s2, 0, 2)],
        "backlog lists sessions with pending turns, oldest first, and not empty ones"
    );
    assert_eq!(lag_delta(store.lag(&consumer).await.expect("lag"), base), (5, 2));
    assert_eq!(
        store.backlog(&consumer, 1).await.expect("backlog").len(),
        1,
        "backlog honours limit"
    );

    store.advance_cursor(&consumer, &key(&s1), 2).await.expect("advance");
    assert_eq!(backlog_of(&s1, &s2).await, [entry(&s1, 2, 3), entry(&s2, 0, 2)]);
    assert_eq!(lag_delta(store.lag(&consumer).await.expect("lag"), base), (3, 2));

    store.advance_cursor(&consumer, &key(&s1), 3).await.expect("advance");
    store.advance_cursor(&consumer, &key(&s2), 1).await.expect("advance");
    store
        .advance_cursor(&consumer, &key(&s2), 0)
        .await
        .expect("advance backwards");
    assert_eq!(
        backlog_of(&s1, &s2).await,
        [entry(&s2, 1, 2)],
        "a caught-up session leaves the backlog"
    );
    assert_eq!(lag_delta(store.lag(&consumer).await.expect("lag"), base), (1, 1));

    store.append(&t, &s1, &[turn("f")]).await.expect("append");
    assert_eq!(
        backlog_of(&s1, &s2).await,
        [entry(&s2, 1, 2), entry(&s1, 3, 4)],
        "a session with a new turn comes back, behind older ones"
    );
    assert_eq!(lag_delta(store.lag(&consumer).await.expect("lag"), base), (2, 2));

    store.advance_cursor(&consumer, &key(&s1), 4).await.expect("advance");
    store.advance_cursor(&consumer, &key(&s2), 2).await.expect("advance");
    assert!(
        backlog_of(&s1, &s2).await.is_empty(),
        "a caught-up consumer has no backlog here"
    );
    assert_eq!(
        store.lag(&consumer).await.expect("lag"),
        base,
        "a caught-up consumer has no new lag"
    );
    assert_eq!(
        lag_delta(store.lag(&other).await.expect("lag"), other_base),
        (6, 2),
        "another consumer's lag ignores these cursors"
    );

    // Another owner's session of the same id is behind on its own: the owner's cursor is not its.
    let neighbour = tenant();
    store
        .append(&neighbour, &s1, &[turn("g"), turn("h")])
        .await
        .expect("append");
    let theirs: Vec<Backlog> = store
        .backlog(&consumer, u32::MAX)
        .await
        .expect("backlog")
        .into_iter()
        .filter(|b| b.session_id == s1.as_str())
        .collect();
    assert_eq!(
        theirs,
        [Backlog {
            session_id: s1.as_str().to_owned(),
            tenant: neighbour.clone(),
            cursor: 0,
            last_seq: 2,
        }],
        "the same id of another owner has its own backlog"
    );
    assert_eq!(lag_delta(store.lag(&consumer).await.expect("lag"), base), (2, 1));
    store
        .advance_cursor(&consumer, &SessionKey::new(neighbour, s1.as_str()), 2)
        .await
        .expect("advance");
    assert_eq!(store.lag(&consumer).await.expect("lag"), base);
}

/// An append that fails part-way stores nothing: no turns, no seqs, no client ids, and no
/// session. The failing turn holds a NUL character, which `NewTurn::new` refuses and neither
/// backend can store.
pub async fn failed_append_writes_nothing(store: &dyn TranscriptStore) {
    let (t, s) = (tenant(), session());
    store.append(&t, &s, &[keyed("kept", "key-1")]).await.expect("append");
    let unstorable = NewTurn {
        role: Role::User,
        content: "broken \0 turn".to_owned(),
        metadata: serde_json::Map::new(),
        client_id: None,
        created_at: None,
        task: None,
    };

    let failed = store
        .append(&t, &s, &[keyed("lost", "key-2"), turn("lost too"), unstorable.clone()])
        .await;
    match &failed {
        Err(error @ StoreError::Backend(_)) => assert!(!error.is_retryable()),
        other => panic!("an unstorable turn must fail the append as Backend, got {other:?}"),
    }
    let listed = store.list(&t, &s, 0, 100).await.expect("list");
    assert_eq!(stored_seqs(&listed), [1], "a failed append left turns behind");
    assert_eq!(
        store.session(&t, &s).await.expect("session").last_seq,
        1,
        "a failed append moved last_seq"
    );
    let retried = store
        .append(&t, &s, &[keyed("lost, retried", "key-2")])
        .await
        .expect("append");
    assert_eq!(
        seqs(&retried),
        [2],
        "a failed append stored its client ids or used seqs"
    );
    let listed = store.list(&t, &s, 0, 100).await.expect("list");
    assert_eq!(listed[1].content, "lost, retried");

    let fresh = session();
    let failed = store.append(&t, &fresh, &[turn("ok"), unstorable]).await;
    assert!(failed.is_err(), "an unstorable turn must fail the append");
    assert_not_found(
        store.session(&t, &fresh).await,
        "a failed first append created the session",
    );
    let other = tenant();
    let claimed = store
        .append(&other, &fresh, &[turn("mine")])
        .await
        .expect("claim the session");
    assert_eq!(
        seqs(&claimed),
        [1],
        "the session was still free after the failed append"
    );
}

/// [`CONCURRENT_TASKS`] tasks append [`TURNS_PER_TASK`] turns each to one session, in requests
/// of [`TURNS_PER_BATCH`]; every seq from 1 to the total is used exactly once and every
/// request gets consecutive seqs.
pub async fn concurrent_batch_appends_are_gapless(store: Arc<dyn TranscriptStore>) {
    let (t, s) = (tenant(), session());
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..CONCURRENT_TASKS {
        let (store, t, s) = (Arc::clone(&store), t.clone(), s.clone());
        tasks.spawn(async move {
            let mut seqs = Vec::with_capacity(TURNS_PER_TASK);
            for batch in 0..TURNS_PER_TASK / TURNS_PER_BATCH {
                let turns: Vec<NewTurn> = (0..TURNS_PER_BATCH)
                    .map(|i| turn(&format!("task {task} batch {batch} turn {i}")))
                    .collect();
                let appended = store.append(&t, &s, &turns).await.expect("concurrent append");
                let got: Vec<i64> = appended.iter().map(|a| a.seq).collect();
                let want: Vec<i64> = (got[0]..got[0] + TURNS_PER_BATCH as i64).collect();
                assert_eq!(got, want, "one request gets consecutive seqs");
                seqs.extend(got);
            }
            seqs
        });
    }
    let seqs = join_seqs(tasks).await;
    assert_gapless(&*store, &t, &s, seqs).await;
}

/// Like [`concurrent_batch_appends_are_gapless`], with one turn per request, each keyed and
/// every tenth one retried: retries return the original seq and store nothing.
pub async fn concurrent_single_appends_are_gapless(store: Arc<dyn TranscriptStore>) {
    let (t, s) = (tenant(), session());
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..CONCURRENT_TASKS {
        let (store, t, s) = (Arc::clone(&store), t.clone(), s.clone());
        tasks.spawn(async move {
            let mut seqs = Vec::with_capacity(TURNS_PER_TASK);
            for i in 0..TURNS_PER_TASK {
                let one = keyed(&format!("task {task} turn {i}"), &format!("{task}-{i}"));
                let appended = store
                    .append(&t, &s, std::slice::from_ref(&one))
                    .await
                    .expect("concurrent append");
                if i % 10 == 0 {
                    let retry = store.append(&t, &s, &[one]).await.expect("concurrent retry");
                    assert_eq!(retry, appended, "a retry under concurrency returns the original");
                }
                seqs.push(appended[0].seq);
            }
            seqs
        });
    }
    let seqs = join_seqs(tasks).await;
    assert_gapless(&*store, &t, &s, seqs).await;
}

async fn join_seqs(mut tasks: tokio::task::JoinSet<Vec<i64>>) -> Vec<i64> {
    let mut seqs = Vec::new();
    while let Some(result) = tasks.join_next().await {
        match result {
            Ok(task_seqs) => {
                assert!(task_seqs.windows(2).all(|w| w[0] < w[1]), "one task's seqs increase");
                seqs.extend(task_seqs);
            }
            Err(error) => match error.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(error) => panic!("an appending task failed: {error}"),
            },
        }
    }
    seqs
}

async fn assert_gapless(store: &dyn TranscriptStore, t: &Tenant, s: &SessionId, mut seqs: Vec<i64>) {
    let total = (CONCURRENT_TASKS * TURNS_PER_TASK) as i64;
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (1..=total).collect::<Vec<_>>(),
        "concurrent appends got every seq exactly once"
    );
    assert_eq!(store.session(t, s).await.expect("session").last_seq, total);

    let mut stored = Vec::new();
    let mut after = 0;
    loop {
        let page = store.list(t, s, after, 1000).await.expect("list");
        let Some(last) = page.last() else { break };
        after = last.seq;
        stored.extend(page);
    }
    assert_eq!(
        stored_seqs(&stored),
        (1..=total).collect::<Vec<_>>(),
        "stored seqs are 1..=total"
    );
    let ids: HashSet<Uuid> = stored.iter().map(|t| t.id).collect();
    let contents: HashSet<&str> = stored.iter().map(|t| t.content.as_str()).collect();
    assert_eq!(ids.len(), stored.len(), "every stored turn has its own id");
    assert_eq!(contents.len(), stored.len(), "no turn was stored twice");
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

/// A turn keeps the task it was appended under, on every path an append takes (with client
/// ids and without) and every read (list, by id, pending, pending of many sessions); a turn
/// appended without one has none, and a retried client id keeps the task of its first append.
pub async fn turns_keep_their_task(store: &dyn TranscriptStore) {
    let (t, s) = (tenant(), session());
    let task = |name: &str| Some(TaskId::parse(name).expect("a valid task"));
    store
        .append(
            &t,
            &s,
            &[
                turn("a1").with_task(task("task-a")),
                turn("a2").with_task(task("task-a")),
            ],
        )
        .await
        .expect("append without client ids");
    store
        .append(&t, &s, &[keyed("b1", "key-b").with_task(task("任务-b")), turn("none")])
        .await
        .expect("append with a client id");
    let retried = store
        .append(&t, &s, &[keyed("b1", "key-b").with_task(task("task-c"))])
        .await
        .expect("retry a client id under another task");
    assert_eq!(seqs(&retried), [3], "the retry finds the stored turn");

    let by_seq = |turns: &[StoredTurn]| -> Vec<(i64, Option<String>)> {
        let mut tasks: Vec<_> = turns.iter().map(|t| (t.seq, t.task.clone())).collect();
        tasks.sort();
        tasks
    };
    let expected = vec![
        (1, Some("task-a".to_owned())),
        (2, Some("task-a".to_owned())),
        (3, Some("任务-b".to_owned())),
        (4, None),
    ];
    let listed = store.list(&t, &s, 0, 100).await.expect("list");
    assert_eq!(by_seq(&listed), expected, "list returns each turn's task");
    let ids: Vec<Uuid> = listed.iter().map(|turn| turn.id).collect();
    let found = store.turns_by_id(&t, &ids).await.expect("turns by id");
    assert_eq!(by_seq(&found), expected, "turns_by_id returns each turn's task");
    let consumer = unique("consumer");
    let (_, pending) = store
        .pending_turns(&consumer, &SessionKey::new(t.clone(), s.as_str()), 100)
        .await
        .expect("pending turns");
    assert_eq!(by_seq(&pending), expected, "pending_turns returns each turn's task");
    let many = store
        .pending_turns_many(&consumer, &[(SessionKey::new(t.clone(), s.as_str()), 0)], 100)
        .await
        .expect("pending turns of many sessions");
    assert_eq!(by_seq(&many), expected, "pending_turns_many returns each turn's task");
}

fn session() -> SessionId {
    SessionId::parse(&unique("session")).expect("a valid session id")
}

fn turn(content: &str) -> NewTurn {
    role_turn(Role::User, content)
}

fn role_turn(role: Role, content: &str) -> NewTurn {
    NewTurn::new(role.as_str(), content, None, None, None).expect("a valid turn")
}

fn keyed(content: &str, client_id: &str) -> NewTurn {
    NewTurn::new("user", content, None, Some(client_id.to_owned()), None).expect("a valid turn")
}

fn seqs(appended: &[AppendedTurn]) -> Vec<i64> {
    appended.iter().map(|a| a.seq).collect()
}

fn stored_seqs(turns: &[StoredTurn]) -> Vec<i64> {
    turns.iter().map(|t| t.seq).collect()
}

fn appended_of(turn: &StoredTurn) -> AppendedTurn {
    AppendedTurn {
        id: turn.id,
        seq: turn.seq,
        created_at: turn.created_at,
    }
}

fn sorted(mut turns: Vec<StoredTurn>) -> Vec<StoredTurn> {
    turns.sort_by(|a, b| (&a.session_id, a.seq).cmp(&(&b.session_id, b.seq)));
    turns
}

/// Lets the clock move on, so timestamps taken before and after differ.
async fn pause() {
    tokio::time::sleep(Duration::from_millis(5)).await;
}

/// A backend clock may differ a little from ours; a minute catches any real mistake.
fn assert_recent(at: DateTime<Utc>, started: DateTime<Utc>, what: &str) {
    let slack = chrono::Duration::seconds(60);
    assert!(
        at > started - slack && at < Utc::now() + slack,
        "{what} {at} is not the time of the call ({started})"
    );
}

fn assert_not_found<T: Debug>(result: StoreResult<T>, what: &str) {
    match result {
        Err(StoreError::SessionNotFound) => {}
        other => panic!("{what}: expected SessionNotFound, got {other:?}"),
    }
}
