//! The `SearchIndex` conformance suite. Every backend must pass it.
//!
//! Each `pub async fn` checks one point of the contract in `super::SearchIndex`'s docs and
//! panics when it is broken. They all run against one shared index: each works in tenants of
//! its own (a fresh team id), so they may run in any order, on an index holding other data.
//! `search_index_suite` runs them all. What only some backends promise (reopening a directory,
//! background optimization) is tested next to those backends.

use std::collections::HashSet;

use uuid::Uuid;

use super::{rrf_score, Fusion, IndexHit, IndexPoint, IndexQuery, PointKind, SearchIndex, Strategy};
use crate::domain::Tenant;

/// The dense dimension every backend under this suite must be opened with.
pub const SUITE_DIMENSION: usize = 4;

/// Runs every contract check below on `index` (opened with `SUITE_DIMENSION`).
pub async fn search_index_suite(index: &dyn SearchIndex) {
    assert_eq!(
        index.dense_dimension(),
        Some(SUITE_DIMENSION),
        "open the index with SUITE_DIMENSION"
    );
    semantic_ranks_by_cosine(index).await;
    semantic_skips_points_without_a_vector(index).await;
    semantic_needs_a_vector(index).await;
    dense_dimension_is_checked(index).await;
    hybrid_fuses_both_channels_by_rrf(index).await;
    tags_add_a_narrowed_channel(index).await;
    hybrid_without_a_vector_is_keyword(index).await;
    hybrid_and_semantic_are_tenant_isolated(index).await;
    scope_ids_lists_the_scope(index).await;
    ping_answers(index).await;
    finds_a_point_by_a_word_in_it(index).await;
    repeated_word_ranks_first(index).await;
    shorter_document_ranks_first(index).await;
    chinese_english_and_mixed_text(index).await;
    tenants_are_isolated(index).await;
    session_filter(index).await;
    task_filter(index).await;
    scope_ids_narrow_to_a_task(index).await;
    kind_filter(index).await;
    upsert_overwrites_by_id(index).await;
    unsynced_upserts_are_visible_at_once(index).await;
    delete_removes_and_ignores_unknown_ids(index).await;
    count_is_per_tenant(index).await;
    empty_query_returns_nothing(index).await;
    limit_is_respected(index).await;
    concurrent_writes_and_reads(index).await;
    many_points_stay_searchable(index, 1_200).await;
}

/// A tenant no other check (or earlier run) uses.
pub fn unique_tenant() -> Tenant {
    Tenant {
        team: format!("team-{}", Uuid::new_v4()),
        agent: "agent-1".to_owned(),
        user: "user-1".to_owned(),
    }
}

/// A turn point with a fresh id in session `s1`.
pub fn turn(tenant: &Tenant, text: &str) -> IndexPoint {
    IndexPoint {
        id: Uuid::new_v4(),
        kind: PointKind::Turn,
        tenant: tenant.clone(),
        session_id: "s1".to_owned(),
        text: text.to_owned(),
        tags: Vec::new(),
        task: None,
        dense: None,
    }
}

/// A turn query in `tenant`, any session, limit 10.
pub fn query(tenant: &Tenant, text: &str) -> IndexQuery {
    IndexQuery {
        tenant: tenant.clone(),
        kind: PointKind::Turn,
        session_id: None,
        task: None,
        text: text.to_owned(),
        tags: Vec::new(),
        limit: 10,
        dense: None,
        strategy: Strategy::Keyword,
        fusion: Fusion::default(),
    }
}

/// A point with a dense vector.
pub fn dense_turn(tenant: &Tenant, text: &str, dense: [f32; SUITE_DIMENSION]) -> IndexPoint {
    IndexPoint {
        dense: Some(dense.to_vec()),
        ..turn(tenant, text)
    }
}

/// A query of `strategy` with a dense vector.
pub fn dense_query(tenant: &Tenant, text: &str, dense: [f32; SUITE_DIMENSION], strategy: Strategy) -> IndexQuery {
    IndexQuery {
        dense: Some(dense.to_vec()),
        strategy,
        ..query(tenant, text)
    }
}

/// Every point kind. The match makes a new variant a compile error here, so that the kind
/// checks grow with the enum.
fn all_kinds() -> Vec<PointKind> {
    let kinds = vec![PointKind::Turn, PointKind::Memory];
    for kind in &kinds {
        match kind {
            PointKind::Turn | PointKind::Memory => {}
        }
    }
    kinds
}

async fn upsert(index: &dyn SearchIndex, points: &[IndexPoint]) {
    index.upsert(points).await.expect("upsert");
}

async fn search(index: &dyn SearchIndex, query: &IndexQuery) -> Vec<IndexHit> {
    let hits = index.search(query).await.expect("search");
    assert!(hits.len() <= query.limit, "more hits than the limit");
    assert!(
        hits.windows(2).all(|w| w[0].score >= w[1].score),
        "hits are not best first: {hits:?}"
    );
    hits
}

pub async fn search_ids(index: &dyn SearchIndex, query: &IndexQuery) -> Vec<Uuid> {
    search(index, query).await.into_iter().map(|hit| hit.id).collect()
}

async fn count(index: &dyn SearchIndex, tenant: &Tenant) -> u64 {
    index.count(tenant, PointKind::Turn).await.expect("count")
}

/// `ping` succeeds on a working backend.
pub async fn ping_answers(index: &dyn SearchIndex) {
    index.ping().await.expect("ping");
}

/// A point is found by a word it contains, and not by a word it lacks.
pub async fn finds_a_point_by_a_word_in_it(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let invoice = turn(&tenant, "Please resend the invoice for March");
    let weather = turn(&tenant, "Sunny weather all week");
    upsert(index, &[invoice.clone(), weather.clone()]).await;

    assert_eq!(search_ids(index, &query(&tenant, "invoice")).await, vec![invoice.id]);
    assert_eq!(search_ids(index, &query(&tenant, "WEATHER")).await, vec![weather.id]);
    assert!(search_ids(index, &query(&tenant, "kubernetes")).await.is_empty());
}

/// A document with the query word twice outranks one with it once (same length).
pub async fn repeated_word_ranks_first(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let once = turn(&tenant, "refund requested by customer today");
    let twice = turn(&tenant, "refund refund requested by customer");
    upsert(index, &[once.clone(), twice.clone()]).await;

    assert_eq!(
        search_ids(index, &query(&tenant, "refund")).await,
        vec![twice.id, once.id]
    );
}

/// A short document outranks a long one with the query word once.
pub async fn shorter_document_ranks_first(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let long = turn(
        &tenant,
        "the migration finished after a long night of checks, retries, rollbacks, \
         dashboards, reviews, approvals, meetings and several rounds of coffee for everyone",
    );
    let short = turn(&tenant, "migration finished");
    upsert(index, &[long.clone(), short.clone()]).await;

    assert_eq!(
        search_ids(index, &query(&tenant, "migration")).await,
        vec![short.id, long.id]
    );
}

/// Chinese words match inside longer phrases; English and mixed text work alike.
pub async fn chinese_english_and_mixed_text(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let chinese = turn(&tenant, "请检查订单表的索引");
    let english = turn(&tenant, "The deployment pipeline failed on staging");
    let mixed = turn(&tenant, "明天 deploy 订单服务 to production");
    upsert(index, &[chinese.clone(), english.clone(), mixed.clone()]).await;

    let found: HashSet<_> = search_ids(index, &query(&tenant, "订单")).await.into_iter().collect();
    assert_eq!(found, HashSet::from([chinese.id, mixed.id]));
    assert_eq!(search_ids(index, &query(&tenant, "索引")).await, vec![chinese.id]);
    assert_eq!(search_ids(index, &query(&tenant, "pipeline")).await, vec![english.id]);
    assert_eq!(search_ids(index, &query(&tenant, "production")).await, vec![mixed.id]);
    let found = search_ids(index, &query(&tenant, "订单 pipeline")).await;
    assert_eq!(found.len(), 3, "a mixed query matches either script: {found:?}");
}

/// Identical text under another team, agent or user is never returned nor counted.
pub async fn tenants_are_isolated(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let other_team = Tenant {
        team: format!("{}-x", tenant.team),
        ..tenant.clone()
    };
    let other_agent = Tenant {
        agent: "agent-2".to_owned(),
        ..tenant.clone()
    };
    let other_user = Tenant {
        user: "user-2".to_owned(),
        ..tenant.clone()
    };
    // Ids that would run together if the backend joined them naively into one key.
    let joined = |team: &str, agent: &str, user: &str| Tenant {
        team: format!("{}{team}", tenant.team),
        agent: agent.to_owned(),
        user: user.to_owned(),
    };
    let tenants = [
        joined("/a", "b", "u"),
        joined("", "a/b", "u"),
        joined("", r#"a","b"#, "u"),
        joined("", "a", r#"b","u"#),
        joined(r"\", "a", "u"),
        tenant,
        other_team,
        other_agent,
        other_user,
    ];
    let points: Vec<_> = tenants.iter().map(|t| turn(t, "shared secret roadmap")).collect();
    upsert(index, &points).await;

    for (tenant, point) in tenants.iter().zip(&points) {
        assert_eq!(search_ids(index, &query(tenant, "roadmap")).await, vec![point.id]);
        assert_eq!(count(index, tenant).await, 1);
    }
}

/// With a session id, only that session's points are returned; without, all of them.
pub async fn session_filter(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let first = turn(&tenant, "budget review");
    let second = IndexPoint {
        session_id: "s2".to_owned(),
        ..turn(&tenant, "budget review")
    };
    upsert(index, &[first.clone(), second.clone()]).await;

    let in_session = |session: &str| IndexQuery {
        session_id: Some(session.to_owned()),
        ..query(&tenant, "budget")
    };
    assert_eq!(search_ids(index, &in_session("s1")).await, vec![first.id]);
    assert_eq!(search_ids(index, &in_session("s2")).await, vec![second.id]);
    assert!(search_ids(index, &in_session("s3")).await.is_empty());
    let all: HashSet<_> = search_ids(index, &query(&tenant, "budget")).await.into_iter().collect();
    assert_eq!(all, HashSet::from([first.id, second.id]));
}

/// With a task, only that task's points are returned: not another task's, not those without
/// one, in any strategy and together with a session; without a task, all of them.
pub async fn task_filter(index: &dyn SearchIndex) {
    let (tenant, other) = (unique_tenant(), unique_tenant());
    let tasked = |tenant: &Tenant, task: Option<&str>, session: &str, dense: [f32; SUITE_DIMENSION]| IndexPoint {
        session_id: session.to_owned(),
        task: task.map(str::to_owned),
        ..dense_turn(tenant, "migration plan", dense)
    };
    let a1 = tasked(&tenant, Some("task-a"), "s1", [1.0, 0.0, 0.0, 0.0]);
    let a2 = tasked(&tenant, Some("task-a"), "s2", [0.9, 0.1, 0.0, 0.0]);
    let b = tasked(&tenant, Some("task-b"), "s1", [1.0, 0.0, 0.0, 0.0]);
    let none = tasked(&tenant, None, "s1", [1.0, 0.0, 0.0, 0.0]);
    let foreign = tasked(&other, Some("task-a"), "s1", [1.0, 0.0, 0.0, 0.0]);
    upsert(
        index,
        &[a1.clone(), a2.clone(), b.clone(), none.clone(), foreign.clone()],
    )
    .await;

    let set = |ids: Vec<Uuid>| ids.into_iter().collect::<HashSet<_>>();
    for strategy in [Strategy::Keyword, Strategy::Semantic, Strategy::Hybrid] {
        let with_task = |task: Option<&str>| IndexQuery {
            task: task.map(str::to_owned),
            ..dense_query(&tenant, "migration", [1.0, 0.0, 0.0, 0.0], strategy)
        };
        assert_eq!(
            set(search_ids(index, &with_task(Some("task-a"))).await),
            HashSet::from([a1.id, a2.id]),
            "{strategy:?}"
        );
        assert_eq!(
            search_ids(index, &with_task(Some("task-b"))).await,
            vec![b.id],
            "{strategy:?}"
        );
        assert!(
            search_ids(index, &with_task(Some("task-c"))).await.is_empty(),
            "{strategy:?}"
        );
        assert_eq!(
            set(search_ids(index, &with_task(None)).await),
            HashSet::from([a1.id, a2.id, b.id, none.id]),
            "{strategy:?}: no task matches every point"
        );
    }
    let session_and_task = IndexQuery {
        session_id: Some("s2".to_owned()),
        task: Some("task-a".to_owned()),
        ..query(&tenant, "migration")
    };
    assert_eq!(search_ids(index, &session_and_task).await, vec![a2.id]);
    let theirs = IndexQuery {
        task: Some("task-a".to_owned()),
        ..query(&other, "migration")
    };
    assert_eq!(
        search_ids(index, &theirs).await,
        vec![foreign.id],
        "a task never crosses tenants"
    );

    // A point's task can change when it is written again (a memory corrected, say).
    let moved = IndexPoint {
        task: Some("task-b".to_owned()),
        ..a1.clone()
    };
    upsert(index, &[moved]).await;
    let in_b = IndexQuery {
        task: Some("task-b".to_owned()),
        ..query(&tenant, "migration")
    };
    assert_eq!(set(search_ids(index, &in_b).await), HashSet::from([a1.id, b.id]));
}

/// `scope_ids` with a task lists only that task's points (within the session, if given).
pub async fn scope_ids_narrow_to_a_task(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let with = |task: Option<&str>, session: &str| IndexPoint {
        session_id: session.to_owned(),
        task: task.map(str::to_owned),
        ..turn(&tenant, "anything")
    };
    let (a1, a2, b, none) = (
        with(Some("task-a"), "s1"),
        with(Some("task-a"), "s2"),
        with(Some("task-b"), "s1"),
        with(None, "s1"),
    );
    upsert(index, &[a1.clone(), a2.clone(), b.clone(), none.clone()]).await;
    let tenant = &tenant;
    let ids = |session: Option<&'static str>, task: Option<&'static str>| async move {
        index
            .scope_ids(tenant, PointKind::Turn, session, task, 10)
            .await
            .expect("scope ids")
            .into_iter()
            .collect::<HashSet<Uuid>>()
    };
    assert_eq!(ids(None, Some("task-a")).await, HashSet::from([a1.id, a2.id]));
    assert_eq!(ids(None, Some("task-b")).await, HashSet::from([b.id]));
    assert_eq!(ids(Some("s2"), Some("task-a")).await, HashSet::from([a2.id]));
    assert!(ids(Some("s2"), Some("task-b")).await.is_empty());
    assert!(ids(None, Some("task-c")).await.is_empty());
    assert_eq!(ids(None, None).await, HashSet::from([a1.id, a2.id, b.id, none.id]));
}

/// A query and a count see only points of their kind.
pub async fn kind_filter(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let kinds = all_kinds();
    let points: Vec<_> = kinds
        .iter()
        .map(|&kind| IndexPoint {
            kind,
            ..turn(&tenant, "quarterly forecast")
        })
        .collect();
    upsert(index, &points).await;

    for (&kind, point) in kinds.iter().zip(&points) {
        let query = IndexQuery {
            kind,
            ..query(&tenant, "forecast")
        };
        assert_eq!(search_ids(index, &query).await, vec![point.id], "kind {kind:?}");
        assert_eq!(index.count(&tenant, kind).await.expect("count"), 1, "kind {kind:?}");
    }
}

/// Upserting an id again replaces the point: one point, new text searchable, old text not.
/// A point whose text has no searchable token is still stored.
pub async fn upsert_overwrites_by_id(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let old = turn(&tenant, "alpha launch checklist");
    upsert(index, std::slice::from_ref(&old)).await;
    let new = IndexPoint {
        text: "beta rollout summary".to_owned(),
        tags: Vec::new(),
        ..old.clone()
    };
    upsert(index, std::slice::from_ref(&new)).await;

    assert_eq!(count(index, &tenant).await, 1);
    assert_eq!(search_ids(index, &query(&tenant, "rollout")).await, vec![new.id]);
    assert!(search_ids(index, &query(&tenant, "checklist")).await.is_empty());

    let blank = turn(&tenant, "");
    let stopwords = turn(&tenant, "the and of");
    upsert(index, &[blank, stopwords]).await;
    assert_eq!(count(index, &tenant).await, 3);
}

/// An unsynced upsert is searchable and counted at once, overwrites by id like `upsert`, and
/// `sync` (with or without anything to sync) succeeds.
pub async fn unsynced_upserts_are_visible_at_once(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let first = turn(&tenant, "quarterly forecast draft");
    index
        .upsert_unsynced(std::slice::from_ref(&first))
        .await
        .expect("upsert_unsynced");
    assert_eq!(search_ids(index, &query(&tenant, "forecast")).await, vec![first.id]);
    let again = IndexPoint {
        text: "quarterly forecast final".to_owned(),
        ..first.clone()
    };
    index
        .upsert_unsynced(&[again, turn(&tenant, "forecast review")])
        .await
        .expect("upsert_unsynced");
    index.upsert_unsynced(&[]).await.expect("upsert nothing");
    assert_eq!(count(index, &tenant).await, 2);
    assert_eq!(search_ids(index, &query(&tenant, "final")).await, vec![first.id]);
    index.sync().await.expect("sync");
    index.sync().await.expect("sync with nothing new");
    assert_eq!(count(index, &tenant).await, 2);
}

/// Deleted points are gone; unknown ids and repeated deletes are not errors.
pub async fn delete_removes_and_ignores_unknown_ids(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let keep = turn(&tenant, "contract renewal notes");
    let gone = turn(&tenant, "contract termination notes");
    upsert(index, &[keep.clone(), gone.clone()]).await;

    index.delete(&[gone.id, Uuid::new_v4()]).await.expect("delete");
    assert_eq!(search_ids(index, &query(&tenant, "contract")).await, vec![keep.id]);
    assert!(search_ids(index, &query(&tenant, "termination")).await.is_empty());
    assert_eq!(count(index, &tenant).await, 1);

    index.delete(&[gone.id]).await.expect("delete again");
    index.delete(&[]).await.expect("delete nothing");
    assert_eq!(count(index, &tenant).await, 1);
}

/// Counts are per tenant; a tenant without points counts 0.
pub async fn count_is_per_tenant(index: &dyn SearchIndex) {
    let first = unique_tenant();
    let second = unique_tenant();
    let mut points: Vec<_> = (0..3).map(|i| turn(&first, &format!("note {i}"))).collect();
    points.extend((0..2).map(|i| turn(&second, &format!("note {i}"))));
    upsert(index, &points).await;

    assert_eq!(count(index, &first).await, 3);
    assert_eq!(count(index, &second).await, 2);
    assert_eq!(count(index, &unique_tenant()).await, 0);
}

/// An empty, blank or all-stopword query returns no hits, as does limit 0.
pub async fn empty_query_returns_nothing(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    upsert(index, &[turn(&tenant, "the and of empty words")]).await;

    for text in ["", "   ", "the and of"] {
        assert!(search(index, &query(&tenant, text)).await.is_empty(), "query {text:?}");
    }
    let none = IndexQuery {
        limit: 0,
        ..query(&tenant, "empty")
    };
    assert!(search(index, &none).await.is_empty());
}

/// No more than `limit` hits come back, and they are the best ones.
pub async fn limit_is_respected(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let best = turn(&tenant, "outage outage outage");
    let mut points: Vec<_> = (0..10)
        .map(|i| turn(&tenant, &format!("outage report number {i} with extra words")))
        .collect();
    points.push(best.clone());
    upsert(index, &points).await;

    let three = IndexQuery {
        limit: 3,
        ..query(&tenant, "outage")
    };
    let hits = search(index, &three).await;
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0].id, best.id);
    let all = IndexQuery {
        limit: 100,
        ..query(&tenant, "outage")
    };
    assert_eq!(search(index, &all).await.len(), 11);
}

/// Concurrent upserts and searches all succeed and nothing is lost.
pub async fn concurrent_writes_and_reads(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let points = bulk_points(&tenant, 200);
    let writes = points.chunks(25).map(|batch| index.upsert(batch));
    let bulk = query(&tenant, "bulk");
    let reads = (0..8).map(|_| index.search(&bulk));
    let (writes, reads) =
        futures::future::join(futures::future::join_all(writes), futures::future::join_all(reads)).await;
    writes.into_iter().for_each(|r| r.expect("concurrent upsert"));
    reads.into_iter().for_each(|r| drop(r.expect("concurrent search")));

    assert_all_searchable(index, &tenant, &points).await;
}

/// `total` points upserted in batches of 100 are all counted and searchable. Pass more than the
/// backend's optimization threshold to check that optimization loses nothing.
pub async fn many_points_stay_searchable(index: &dyn SearchIndex, total: usize) {
    let tenant = unique_tenant();
    let points = bulk_points(&tenant, total);
    for batch in points.chunks(100) {
        upsert(index, batch).await;
    }
    assert_all_searchable(index, &tenant, &points).await;
}

/// `total` points whose texts share the word "bulk" and each hold a unique code word.
pub fn bulk_points(tenant: &Tenant, total: usize) -> Vec<IndexPoint> {
    (0..total)
        .map(|i| turn(tenant, &format!("bulk entry {} 批量", code_word(i))))
        .collect()
}

/// Asserts that `tenant` holds exactly `points` (from `bulk_points`), each found by its code
/// word, and all found by "bulk".
pub async fn assert_all_searchable(index: &dyn SearchIndex, tenant: &Tenant, points: &[IndexPoint]) {
    assert_eq!(count(index, tenant).await, points.len() as u64);
    let step = (points.len() / 50).max(1);
    for (i, point) in points.iter().enumerate().step_by(step) {
        let word = code_word(i);
        assert_eq!(search_ids(index, &query(tenant, &word)).await, vec![point.id], "{word}");
    }
    let everything = IndexQuery {
        limit: points.len() + 10,
        ..query(tenant, "bulk")
    };
    assert_eq!(search(index, &everything).await.len(), points.len());
}

/// A unique, single-token word for `i`: letters only (a tokenizer may split digits off) and
/// ending in a letter no English stemmer strips, so that two codes never share a stem.
pub fn code_word(i: usize) -> String {
    const DIGITS: &[u8; 10] = b"bcdfghjkmn";
    let digits: String = i
        .to_string()
        .bytes()
        .map(|d| DIGITS[usize::from(d - b'0')] as char)
        .collect();
    format!("zq{digits}x")
}

/// A query with tags runs each channel twice, over the scope and over the points with any of
/// the tags, and fuses them by RRF: a tagged point gains a place. Tags are exact, any one
/// suffices, they stay within the tenant, and an upsert replaces them.
pub async fn tags_add_a_narrowed_channel(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let tagged = |text: &str, tags: &[&str]| IndexPoint {
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ..turn(&tenant, text)
    };
    // Keyword "alpha" alone ranks shorter documents first: nov > apr > may > plain.
    let nov = tagged("alpha", &["m202511", "d20251110"]);
    let apr = tagged("alpha beta", &["m202604", "d20260420"]);
    let may = tagged("alpha beta gamma", &["m202605"]);
    let plain = turn(&tenant, "alpha beta gamma delta");
    let other_tenant = IndexPoint {
        tags: vec!["m202604".to_owned()],
        ..turn(&unique_tenant(), "alpha")
    };
    upsert(
        index,
        &[
            nov.clone(),
            apr.clone(),
            may.clone(),
            plain.clone(),
            other_tenant.clone(),
        ],
    )
    .await;
    let with_tags = |tags: &[&str]| IndexQuery {
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ..query(&tenant, "alpha")
    };
    let k = Fusion::default().rrf_k;
    let rrf = |p| rrf_score(p, k, 1.0);

    assert_eq!(
        search_ids(index, &query(&tenant, "alpha")).await,
        vec![nov.id, apr.id, may.id, plain.id],
        "keyword alone"
    );
    let hits = search(index, &with_tags(&["m202604", "d20991231"])).await;
    let expected = [
        (apr.id, rrf(1) + rrf(0)),
        (nov.id, rrf(0)),
        (may.id, rrf(2)),
        (plain.id, rrf(3)),
    ];
    assert_eq!(hits.len(), expected.len(), "{hits:?}");
    for (hit, (id, score)) in hits.iter().zip(expected) {
        assert_eq!(hit.id, id, "tagged order {hits:?}");
        assert!((hit.score - score).abs() < 1e-6, "score {} != {score}", hit.score);
    }
    assert_eq!(
        search_ids(index, &with_tags(&["d20251110"])).await[0],
        nov.id,
        "a day tag"
    );
    assert_eq!(
        search_ids(index, &with_tags(&["m2026"])).await,
        vec![nov.id, apr.id, may.id, plain.id],
        "tags match exactly, not by prefix"
    );
    let theirs = IndexQuery {
        tags: vec!["m202604".to_owned()],
        ..query(&other_tenant.tenant, "alpha")
    };
    assert_eq!(
        search_ids(index, &theirs).await,
        vec![other_tenant.id],
        "tenant isolation"
    );

    upsert(
        index,
        &[IndexPoint {
            tags: Vec::new(),
            ..apr.clone()
        }],
    )
    .await;
    assert_eq!(
        search_ids(index, &with_tags(&["m202604"])).await,
        vec![nov.id, apr.id, may.id, plain.id],
        "an upsert replaces the tags"
    );

    // The semantic channel gets its tagged copy too.
    let tenant = unique_tenant();
    let near = dense_turn(&tenant, "one", [1.0, 0.0, 0.0, 0.0]);
    let tagged_far = IndexPoint {
        tags: vec!["m202604".to_owned()],
        ..dense_turn(&tenant, "two", [0.6, 0.8, 0.0, 0.0])
    };
    upsert(index, &[near.clone(), tagged_far.clone()]).await;
    let semantic = IndexQuery {
        tags: vec!["m202604".to_owned()],
        ..dense_query(&tenant, "", [1.0, 0.0, 0.0, 0.0], Strategy::Semantic)
    };
    let hits = search(index, &semantic).await;
    let expected = [(tagged_far.id, rrf(1) + rrf(0)), (near.id, rrf(0))];
    assert_eq!(hits.len(), expected.len(), "{hits:?}");
    for (hit, (id, score)) in hits.iter().zip(expected) {
        assert_eq!(hit.id, id, "semantic tagged order {hits:?}");
        assert!((hit.score - score).abs() < 1e-6, "score {} != {score}", hit.score);
    }
}

/// Semantic queries rank by cosine similarity, best first, and score it.
pub async fn semantic_ranks_by_cosine(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let near = dense_turn(&tenant, "one", [1.0, 0.1, 0.0, 0.0]);
    let mid = dense_turn(&tenant, "two", [0.6, 0.8, 0.0, 0.0]);
    let far = dense_turn(&tenant, "three", [0.0, 0.0, 1.0, 0.0]);
    upsert(index, &[far.clone(), near.clone(), mid.clone()]).await;
    let hits = search(
        index,
        &dense_query(&tenant, "", [1.0, 0.0, 0.0, 0.0], Strategy::Semantic),
    )
    .await;
    let ids: Vec<Uuid> = hits.iter().map(|h| h.id).collect();
    assert_eq!(ids, vec![near.id, mid.id, far.id], "semantic order");
    let cosine = 1.0 / (1.0f32 + 0.01).sqrt();
    assert!((hits[0].score - cosine).abs() < 1e-4, "cosine score {}", hits[0].score);
    assert!(hits[2].score.abs() < 1e-4, "orthogonal scores 0: {}", hits[2].score);
}

/// Points indexed without a vector are invisible to semantic queries but found by keyword.
pub async fn semantic_skips_points_without_a_vector(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let plain = turn(&tenant, "kestrel migration");
    let dense = dense_turn(&tenant, "unrelated words", [0.0, 1.0, 0.0, 0.0]);
    upsert(index, &[plain.clone(), dense.clone()]).await;
    let semantic = search_ids(
        index,
        &dense_query(&tenant, "kestrel", [0.0, 1.0, 0.0, 0.0], Strategy::Semantic),
    )
    .await;
    assert_eq!(semantic, vec![dense.id]);
    let hybrid = search_ids(
        index,
        &dense_query(&tenant, "kestrel", [0.0, 1.0, 0.0, 0.0], Strategy::Hybrid),
    )
    .await;
    assert_eq!(hybrid.len(), 2, "hybrid finds both channels' hits: {hybrid:?}");
    assert!(hybrid.contains(&plain.id));
}

/// A semantic query without a vector is refused rather than answered with nothing.
pub async fn semantic_needs_a_vector(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let query = IndexQuery {
        strategy: Strategy::Semantic,
        ..query(&tenant, "anything")
    };
    let error = index.search(&query).await.expect_err("semantic without a vector");
    assert!(!error.is_retryable(), "{error:?}");
}

/// A vector of the wrong dimension is refused, on write and on query.
pub async fn dense_dimension_is_checked(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let wrong = IndexPoint {
        dense: Some(vec![1.0; SUITE_DIMENSION + 1]),
        ..turn(&tenant, "wrong size")
    };
    let error = index
        .upsert(&[wrong])
        .await
        .expect_err("upsert of a wrong-sized vector");
    assert!(!error.is_retryable(), "{error:?}");
    assert_eq!(count(index, &tenant).await, 0, "nothing of a refused batch is written");
    let query = IndexQuery {
        dense: Some(vec![1.0; SUITE_DIMENSION - 1]),
        strategy: Strategy::Semantic,
        ..query(&tenant, "x")
    };
    index.search(&query).await.expect_err("query with a wrong-sized vector");
}

/// Hybrid ranks by RRF over the keyword and semantic rankings, with the documented formula:
/// the fused score of each hit is the sum of `rrf_score` over the channels that found it.
pub async fn hybrid_fuses_both_channels_by_rrf(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    // Keyword "alpha": shorter documents rank first, so a > b > c; d has no "alpha".
    let a = dense_turn(&tenant, "alpha", [0.8, 0.6, 0.0, 0.0]);
    let b = dense_turn(&tenant, "alpha beta", [0.0, 0.0, 1.0, 0.0]);
    let c = dense_turn(&tenant, "alpha beta gamma delta", [1.0, 0.0, 0.0, 0.0]);
    let d = dense_turn(&tenant, "epsilon", [0.6, 0.8, 0.0, 0.0]);
    upsert(index, &[a.clone(), b.clone(), c.clone(), d.clone()]).await;
    let vector = [1.0, 0.0, 0.0, 0.0];

    let keyword = search_ids(index, &dense_query(&tenant, "alpha", vector, Strategy::Keyword)).await;
    assert_eq!(keyword, vec![a.id, b.id, c.id], "keyword channel");
    let semantic = search_ids(index, &dense_query(&tenant, "alpha", vector, Strategy::Semantic)).await;
    assert_eq!(semantic, vec![c.id, a.id, d.id, b.id], "semantic channel");

    for fusion in [
        Fusion::default(),
        Fusion {
            rrf_k: 2,
            weights: Some((1.0, 3.0)),
            ..Fusion::default()
        },
    ] {
        let (wk, ws) = fusion.weights.unwrap_or((1.0, 1.0));
        let fused = |id: Uuid| {
            let rank = |list: &[Uuid], w: f32| {
                list.iter()
                    .position(|x| *x == id)
                    .map_or(0.0, |p| rrf_score(p, fusion.rrf_k, w))
            };
            rank(&keyword, wk) + rank(&semantic, ws)
        };
        let mut expected: Vec<(Uuid, f32)> = [a.id, b.id, c.id, d.id].iter().map(|&id| (id, fused(id))).collect();
        expected.sort_by(|x, y| y.1.total_cmp(&x.1));
        let query = IndexQuery {
            fusion,
            ..dense_query(&tenant, "alpha", vector, Strategy::Hybrid)
        };
        let hits = search(index, &query).await;
        assert_eq!(hits.len(), 4, "{fusion:?}: {hits:?}");
        for (hit, (id, score)) in hits.iter().zip(&expected) {
            assert_eq!(hit.id, *id, "{fusion:?}: fused order {hits:?}, expected {expected:?}");
            assert!(
                (hit.score - score).abs() < 1e-5,
                "{fusion:?}: score {} != {score}",
                hit.score
            );
        }
    }
}

/// A hybrid query without a vector runs as keyword; with a text of no token, as semantic.
pub async fn hybrid_without_a_vector_is_keyword(index: &dyn SearchIndex) {
    let tenant = unique_tenant();
    let a = dense_turn(&tenant, "ledger reconciliation", [1.0, 0.0, 0.0, 0.0]);
    let b = dense_turn(&tenant, "ledger", [0.0, 1.0, 0.0, 0.0]);
    upsert(index, &[a.clone(), b.clone()]).await;
    let hybrid = IndexQuery {
        strategy: Strategy::Hybrid,
        ..query(&tenant, "ledger")
    };
    let keyword = query(&tenant, "ledger");
    assert_eq!(search(index, &hybrid).await, search(index, &keyword).await);
    let no_words = search_ids(index, &dense_query(&tenant, "", [0.0, 1.0, 0.0, 0.0], Strategy::Hybrid)).await;
    assert_eq!(no_words, vec![b.id, a.id], "semantic ranking");
}

/// No strategy crosses tenants, however close the vectors.
pub async fn hybrid_and_semantic_are_tenant_isolated(index: &dyn SearchIndex) {
    let (mine, theirs) = (unique_tenant(), unique_tenant());
    let own = dense_turn(&mine, "quarterly budget", [0.0, 0.0, 0.0, 1.0]);
    let foreign = dense_turn(&theirs, "quarterly budget", [0.0, 0.0, 0.0, 1.0]);
    upsert(index, &[own.clone(), foreign]).await;
    for strategy in [Strategy::Keyword, Strategy::Semantic, Strategy::Hybrid] {
        let ids = search_ids(
            index,
            &dense_query(&mine, "quarterly budget", [0.0, 0.0, 0.0, 1.0], strategy),
        )
        .await;
        assert_eq!(ids, vec![own.id], "{strategy:?}");
    }
}

/// `scope_ids` lists the points of a tenant (and session), up to the limit.
pub async fn scope_ids_lists_the_scope(index: &dyn SearchIndex) {
    let (tenant, other) = (unique_tenant(), unique_tenant());
    let s1: Vec<IndexPoint> = (0..3).map(|i| turn(&tenant, &format!("first {i}"))).collect();
    let s2 = IndexPoint {
        session_id: "s2".to_owned(),
        ..turn(&tenant, "second")
    };
    upsert(index, &s1).await;
    upsert(index, &[s2.clone(), turn(&other, "foreign")]).await;
    let all: HashSet<Uuid> = index
        .scope_ids(&tenant, PointKind::Turn, None, None, 10)
        .await
        .expect("scope ids")
        .into_iter()
        .collect();
    let mut expected: HashSet<Uuid> = s1.iter().map(|p| p.id).collect();
    expected.insert(s2.id);
    assert_eq!(all, expected);
    let session = index
        .scope_ids(&tenant, PointKind::Turn, Some("s2"), None, 10)
        .await
        .expect("scope ids");
    assert_eq!(session, vec![s2.id]);
    let limited = index
        .scope_ids(&tenant, PointKind::Turn, None, None, 2)
        .await
        .expect("scope ids");
    assert_eq!(limited.len(), 2);
    assert!(index
        .scope_ids(&tenant, PointKind::Turn, None, None, 0)
        .await
        .expect("scope ids")
        .is_empty());
}
