//! The conformance suite of [`MemoryStore`], run by the integration tests against both
//! backends. Each function panics, naming the broken rule, when the store breaks its contract.
//! Functions use fresh tenants and sessions; `outbox` and `due_sessions` are store-wide, so a
//! check reads them filtered to its own ids.

use chrono::{Duration, SubsecRound as _, Utc};
use uuid::Uuid;

use super::memory::{
    BatchCommit, CommitOutcome, MemoryFilter, MemoryPatch, MemoryStore, ProvenanceRecord, EXTRACT_CONSUMER, LAYER_L1,
};
use super::TranscriptStore;
use crate::domain::{NewTurn, SessionId, SessionKey, StoredTurn, Tenant};
use crate::memory::{Category, Memory, MemoryStatus, TemplateRef};

pub(crate) fn tenant() -> Tenant {
    let id = Uuid::new_v4().simple().to_string();
    Tenant {
        team: format!("team-{id}"),
        agent: "agent".to_owned(),
        user: "user".to_owned(),
    }
}

fn key(tenant: &Tenant, session: &str) -> SessionKey {
    SessionKey::new(tenant.clone(), session)
}

/// A session of `n` stored turns.
pub(crate) async fn session_with_turns(
    turns: &dyn TranscriptStore,
    tenant: &Tenant,
    n: usize,
) -> (String, Vec<StoredTurn>) {
    let session = SessionId::parse(&format!("s-{}", Uuid::new_v4().simple())).expect("session id");
    let new: Vec<NewTurn> = (0..n)
        .map(|i| NewTurn::new("user", &format!("turn {i}"), None, None, None).expect("turn"))
        .collect();
    turns.append(tenant, &session, &new).await.expect("append turns");
    let stored = turns.list(tenant, &session, 0, 1000).await.expect("list turns");
    (session.as_str().to_owned(), stored)
}

pub(crate) fn memory(tenant: &Tenant, session_id: &str, content: &str, sources: &[Uuid]) -> Memory {
    let now = Utc::now().trunc_subsecs(6);
    Memory {
        id: Uuid::new_v4(),
        tenant: tenant.clone(),
        session_id: session_id.to_owned(),
        content: content.to_owned(),
        category: Category::Persona,
        priority: 80,
        scene: Some("work".to_owned()),
        occurred_at: Some("2026-11-30".to_owned()),
        source_message_ids: sources.to_vec(),
        status: MemoryStatus::Active,
        superseded_by: None,
        task: None,
        created_at: now,
        updated_at: now,
    }
}

fn record(memory: &Memory, event: &str) -> ProvenanceRecord {
    ProvenanceRecord {
        id: Uuid::new_v4(),
        memory_id: Some(memory.id),
        tenant: memory.tenant.clone(),
        session_id: memory.session_id.clone(),
        layer: LAYER_L1.to_owned(),
        event: event.to_owned(),
        template: Some(TemplateRef {
            id: "l1-extract".to_owned(),
            version: "1".to_owned(),
            source: "rules".to_owned(),
            hash: "abc".to_owned(),
        }),
        model: Some("rules".to_owned()),
        input_message_ids: memory.source_message_ids.clone(),
        sibling_ids: Vec::new(),
        detail: serde_json::json!({ "decision": event }),
        started_at: Utc::now().trunc_subsecs(6),
        duration_ms: 3,
    }
}

pub(crate) fn commit(tenant: &Tenant, session_id: &str, from: i64, to: i64, memories: Vec<Memory>) -> BatchCommit {
    let provenance = memories.iter().map(|m| record(m, "add")).collect();
    BatchCommit {
        tenant: tenant.clone(),
        session_id: session_id.to_owned(),
        expected_cursor: from,
        new_cursor: to,
        memories,
        archive: Vec::new(),
        provenance,
        now: Utc::now().trunc_subsecs(6),
    }
}

async fn outbox_ids(store: &dyn MemoryStore) -> Vec<Uuid> {
    store
        .outbox(10_000)
        .await
        .expect("read outbox")
        .into_iter()
        .map(|e| e.memory_id)
        .collect()
}

/// A commit writes memories, provenance and outbox entries, moves the cursor and counts a run.
pub async fn commit_writes_everything_and_moves_the_cursor(turns: &dyn TranscriptStore, store: &dyn MemoryStore) {
    let t = tenant();
    let (session, stored) = session_with_turns(turns, &t, 3).await;
    let ids: Vec<Uuid> = stored.iter().map(|s| s.id).collect();
    let (a, b) = (
        memory(&t, &session, "I am a DBA", &ids[..1]),
        memory(&t, &session, "I use vim", &ids[1..2]),
    );
    let outcome = store
        .commit_batch(&commit(&t, &session, 0, 2, vec![a.clone(), b.clone()]))
        .await
        .expect("commit");
    assert_eq!(outcome, CommitOutcome::Committed);
    let (cursor, pending) = turns
        .pending_turns(EXTRACT_CONSUMER, &key(&t, &session), 10)
        .await
        .expect("pending");
    assert_eq!(cursor, 2, "the commit moves the extraction cursor");
    assert_eq!(pending.len(), 1, "the turn past the batch stays pending");
    let mut found = store.memories_by_id(&t, &[a.id, b.id]).await.expect("read memories");
    found.sort_by_key(|m| m.content.clone());
    assert_eq!(found, vec![a.clone(), b.clone()], "memories round-trip exactly");
    let provenance = store.memory_provenance(&t, a.id).await.expect("provenance");
    assert_eq!(provenance.len(), 1);
    assert_eq!(provenance[0], record_like(&provenance[0], &a));
    assert_eq!(store.schedule(&key(&t, &session)).await.expect("schedule").runs, 1);
    let queued = outbox_ids(store).await;
    assert!(
        queued.contains(&a.id) && queued.contains(&b.id),
        "new memories are queued for the index"
    );
    assert_eq!(store.count_memories(&t, MemoryStatus::Active).await.expect("count"), 2);
}

fn record_like(stored: &ProvenanceRecord, memory: &Memory) -> ProvenanceRecord {
    assert_eq!(stored.memory_id, Some(memory.id));
    assert_eq!(
        stored.input_message_ids, memory.source_message_ids,
        "provenance keeps its input turns"
    );
    assert_eq!(stored.template.as_ref().map(|t| t.id.as_str()), Some("l1-extract"));
    stored.clone()
}

/// A second commit of the same batch (a redelivery, a racing worker) writes nothing.
pub async fn commit_refuses_a_moved_cursor(turns: &dyn TranscriptStore, store: &dyn MemoryStore) {
    let t = tenant();
    let (session, stored) = session_with_turns(turns, &t, 2).await;
    let first = commit(
        &t,
        &session,
        0,
        2,
        vec![memory(&t, &session, "fact one", &[stored[0].id])],
    );
    assert_eq!(
        store.commit_batch(&first).await.expect("commit"),
        CommitOutcome::Committed
    );
    let again = commit(
        &t,
        &session,
        0,
        2,
        vec![memory(&t, &session, "fact one", &[stored[0].id])],
    );
    assert_eq!(
        store.commit_batch(&again).await.expect("second commit"),
        CommitOutcome::CursorMoved,
        "a batch read at an old cursor must not commit"
    );
    assert_eq!(
        store.count_memories(&t, MemoryStatus::Active).await.expect("count"),
        1,
        "no duplicate"
    );
    assert_eq!(store.schedule(&key(&t, &session)).await.expect("schedule").runs, 1);
}

/// Archiving links the old memory to its successor; history follows the chain.
pub async fn archive_keeps_history(turns: &dyn TranscriptStore, store: &dyn MemoryStore) {
    let t = tenant();
    let (session, stored) = session_with_turns(turns, &t, 3).await;
    let v1 = memory(&t, &session, "I live in Beijing", &[stored[0].id]);
    store
        .commit_batch(&commit(&t, &session, 0, 1, vec![v1.clone()]))
        .await
        .expect("commit v1");
    let v2 = memory(&t, &session, "I live in Shanghai", &[stored[1].id]);
    let mut second = commit(&t, &session, 1, 2, vec![v2.clone()]);
    second.archive.push((v1.id, v2.id));
    store.commit_batch(&second).await.expect("commit v2");
    let v3 = memory(&t, &session, "I live in Shenzhen", &[stored[2].id]);
    let mut third = commit(&t, &session, 2, 3, vec![v3.clone()]);
    third.archive.push((v2.id, v3.id));
    store.commit_batch(&third).await.expect("commit v3");

    let old = store.memories_by_id(&t, &[v1.id]).await.expect("read v1");
    assert_eq!(
        old[0].status,
        MemoryStatus::Archived,
        "an updated memory is archived, not deleted"
    );
    assert_eq!(old[0].superseded_by, Some(v2.id));
    let history: Vec<Uuid> = store
        .memory_history(&t, v3.id)
        .await
        .expect("history")
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(history, [v2.id, v1.id], "history is the whole chain, newest first");
    assert_eq!(store.count_memories(&t, MemoryStatus::Active).await.expect("count"), 1);
    assert_eq!(
        store.count_memories(&t, MemoryStatus::Archived).await.expect("count"),
        2
    );
    assert!(
        outbox_ids(store).await.contains(&v1.id),
        "an archived memory is queued to leave the index"
    );
}

/// No read or write crosses tenants.
pub async fn memories_are_tenant_scoped(turns: &dyn TranscriptStore, store: &dyn MemoryStore) {
    let (owner, other) = (tenant(), tenant());
    let (session, stored) = session_with_turns(turns, &owner, 1).await;
    let m = memory(&owner, &session, "secret fact", &[stored[0].id]);
    store
        .commit_batch(&commit(&owner, &session, 0, 1, vec![m.clone()]))
        .await
        .expect("commit");
    assert!(store.memories_by_id(&other, &[m.id]).await.expect("read").is_empty());
    let listed = store
        .list_memories(&other, &MemoryFilter::default(), None, 100)
        .await
        .expect("list");
    assert!(listed.is_empty(), "another tenant lists nothing");
    assert!(store
        .memory_provenance(&other, m.id)
        .await
        .expect("provenance")
        .is_empty());
    let patch = MemoryPatch {
        content: Some("stolen".to_owned()),
        ..MemoryPatch::default()
    };
    assert!(store
        .patch_memory(&other, m.id, &patch, &record(&m, "correction"))
        .await
        .expect("patch")
        .is_none());
    assert!(!store.delete_memory(&other, m.id).await.expect("delete"));
    // An archive naming another tenant's memory does nothing to it.
    let (their_session, their_turns) = session_with_turns(turns, &other, 1).await;
    let theirs = memory(&other, &their_session, "theirs", &[their_turns[0].id]);
    let mut sneaky = commit(&other, &their_session, 0, 1, vec![theirs.clone()]);
    sneaky.archive.push((m.id, theirs.id));
    store.commit_batch(&sneaky).await.expect("commit");
    let still = store.memories_by_id(&owner, &[m.id]).await.expect("read");
    assert_eq!(
        still[0].status,
        MemoryStatus::Active,
        "another tenant cannot archive it"
    );
    assert_eq!(still[0].content, "secret fact");
}

/// Listing filters by every field and pages newest first without gaps or repeats.
pub async fn list_filters_and_pages(turns: &dyn TranscriptStore, store: &dyn MemoryStore) {
    let t = tenant();
    let (session, stored) = session_with_turns(turns, &t, 1).await;
    let base = Utc::now().trunc_subsecs(6) - Duration::hours(1);
    let mut all = Vec::new();
    for i in 0..7 {
        let mut m = memory(&t, &session, &format!("fact {i}"), &[stored[0].id]);
        m.created_at = base + Duration::minutes(i);
        m.updated_at = m.created_at;
        if i % 2 == 0 {
            m.category = Category::Instruction;
            m.scene = Some("style".to_owned());
        }
        all.push(m);
    }
    store
        .commit_batch(&commit(&t, &session, 0, 1, all.clone()))
        .await
        .expect("commit");

    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_memories(&t, &MemoryFilter::default(), after, 3)
            .await
            .expect("list");
        if page.is_empty() {
            break;
        }
        after = page.last().map(|m| super::memory::MemoryCursor {
            created_at: m.created_at,
            id: m.id,
        });
        pages.extend(page.into_iter().map(|m| m.content));
    }
    let expected: Vec<String> = (0..7).rev().map(|i| format!("fact {i}")).collect();
    assert_eq!(pages, expected, "pages cover every memory once, newest first");

    assert_eq!(
        count(
            store,
            &t,
            MemoryFilter {
                category: Some(Category::Instruction),
                ..MemoryFilter::default()
            }
        )
        .await,
        4
    );
    assert_eq!(
        count(
            store,
            &t,
            MemoryFilter {
                scene: Some("style".to_owned()),
                ..MemoryFilter::default()
            }
        )
        .await,
        4
    );
    assert_eq!(
        count(
            store,
            &t,
            MemoryFilter {
                status: Some(MemoryStatus::Archived),
                ..MemoryFilter::default()
            }
        )
        .await,
        0
    );
    assert_eq!(
        count(
            store,
            &t,
            MemoryFilter {
                session_id: Some("another-session".to_owned()),
                ..MemoryFilter::default()
            }
        )
        .await,
        0
    );
    assert_eq!(
        count(
            store,
            &t,
            MemoryFilter {
                created_after: Some(base + Duration::minutes(2)),
                created_before: Some(base + Duration::minutes(5)),
                ..MemoryFilter::default()
            }
        )
        .await,
        3,
        "the time range is [after, before)"
    );
}

/// A memory keeps its task through every read, a correction and archiving; a listing with a
/// task holds only that task's memories (paged, beside the other filters, never another
/// tenant's), and one without a task holds them all.
pub async fn memories_keep_their_task(turns: &dyn TranscriptStore, store: &dyn MemoryStore) {
    let (t, other) = (tenant(), tenant());
    let (session, stored) = session_with_turns(turns, &t, 2).await;
    let base = Utc::now().trunc_subsecs(6) - Duration::hours(1);
    let mut all = Vec::new();
    for (i, task) in [
        Some("task-a"),
        Some("任务 b"),
        None,
        Some("task-a"),
        Some("task-a"),
        None,
    ]
    .into_iter()
    .enumerate()
    {
        let mut m = memory(&t, &session, &format!("fact {i}"), &[stored[0].id]);
        m.task = task.map(str::to_owned);
        m.created_at = base + Duration::minutes(i as i64);
        m.updated_at = m.created_at;
        if i == 4 {
            m.category = Category::Instruction;
        }
        all.push(m);
    }
    store
        .commit_batch(&commit(&t, &session, 0, 1, all.clone()))
        .await
        .expect("commit");
    let ids: Vec<Uuid> = all.iter().map(|m| m.id).collect();
    let mut found = store.memories_by_id(&t, &ids).await.expect("read");
    found.sort_by_key(|m| m.created_at);
    assert_eq!(found, all, "memories round-trip with their task");

    let contents = |page: Vec<Memory>| page.into_iter().map(|m| m.content).collect::<Vec<_>>();
    let of_task = |task: &str| MemoryFilter {
        task: Some(task.to_owned()),
        ..MemoryFilter::default()
    };
    assert_eq!(
        contents(
            store
                .list_memories(&t, &of_task("task-a"), None, 100)
                .await
                .expect("list")
        ),
        ["fact 4", "fact 3", "fact 0"],
        "a task lists its own memories, newest first"
    );
    assert_eq!(
        contents(
            store
                .list_memories(&t, &of_task("任务 b"), None, 100)
                .await
                .expect("list")
        ),
        ["fact 1"]
    );
    assert!(store
        .list_memories(&t, &of_task("task-c"), None, 100)
        .await
        .expect("list")
        .is_empty());
    assert_eq!(
        store
            .list_memories(&t, &MemoryFilter::default(), None, 100)
            .await
            .expect("list")
            .len(),
        6,
        "without a task, every memory, with a task or without"
    );
    let first = store
        .list_memories(&t, &of_task("task-a"), None, 2)
        .await
        .expect("first page");
    let after = first.last().map(|m| super::memory::MemoryCursor {
        created_at: m.created_at,
        id: m.id,
    });
    let second = store
        .list_memories(&t, &of_task("task-a"), after, 2)
        .await
        .expect("second page");
    assert_eq!(
        (contents(first), contents(second)),
        (
            vec!["fact 4".to_owned(), "fact 3".to_owned()],
            vec!["fact 0".to_owned()]
        ),
        "a task's listing pages by the cursor"
    );
    let instructions = MemoryFilter {
        category: Some(Category::Instruction),
        ..of_task("task-a")
    };
    assert_eq!(
        contents(store.list_memories(&t, &instructions, None, 100).await.expect("list")),
        ["fact 4"],
        "the task narrows beside the other filters"
    );
    let (their_session, their_turns) = session_with_turns(turns, &other, 1).await;
    let mut theirs = memory(&other, &their_session, "their fact", &[their_turns[0].id]);
    theirs.task = Some("task-a".to_owned());
    store
        .commit_batch(&commit(&other, &their_session, 0, 1, vec![theirs]))
        .await
        .expect("commit theirs");
    assert_eq!(
        store
            .list_memories(&t, &of_task("task-a"), None, 100)
            .await
            .expect("list")
            .len(),
        3,
        "another tenant's memories of the same task stay out"
    );

    let patch = MemoryPatch {
        content: Some("fact 0, corrected".to_owned()),
        ..MemoryPatch::default()
    };
    let patched = store
        .patch_memory(&t, all[0].id, &patch, &record(&all[0], "correction"))
        .await
        .expect("patch")
        .expect("the memory");
    assert_eq!(patched.task.as_deref(), Some("task-a"), "a correction keeps the task");
    let successor = {
        let mut m = memory(&t, &session, "fact 3, updated", &[stored[1].id]);
        m.task = Some("task-a".to_owned());
        m
    };
    let mut update = commit(&t, &session, 1, 2, vec![successor.clone()]);
    update.archive.push((all[3].id, successor.id));
    store.commit_batch(&update).await.expect("commit the update");
    let archived = store.memories_by_id(&t, &[all[3].id]).await.expect("read");
    assert_eq!(
        (archived[0].status, archived[0].task.as_deref()),
        (MemoryStatus::Archived, Some("task-a")),
        "an archived memory keeps its task"
    );
}

/// A correction changes only what it names, is recorded, and queues the index; a delete
/// removes the memory and queues the removal of its point.
pub async fn patch_and_delete(turns: &dyn TranscriptStore, store: &dyn MemoryStore) {
    let t = tenant();
    let (session, stored) = session_with_turns(turns, &t, 1).await;
    let m = memory(&t, &session, "I prefer tabs", &[stored[0].id]);
    store
        .commit_batch(&commit(&t, &session, 0, 1, vec![m.clone()]))
        .await
        .expect("commit");
    let before = store.outbox(10_000).await.expect("outbox").len();
    let patch = MemoryPatch {
        content: Some("I prefer spaces".to_owned()),
        priority: Some(95),
        scene: Some(None),
        ..MemoryPatch::default()
    };
    let patched = store
        .patch_memory(&t, m.id, &patch, &record(&m, "correction"))
        .await
        .expect("patch")
        .expect("the memory exists");
    assert_eq!(patched.content, "I prefer spaces");
    assert_eq!(patched.priority, 95);
    assert_eq!(patched.scene, None, "Some(None) clears the scene");
    assert_eq!(patched.category, m.category, "fields not named stay");
    assert_eq!(patched.occurred_at, m.occurred_at);
    let events: Vec<String> = store
        .memory_provenance(&t, m.id)
        .await
        .expect("provenance")
        .into_iter()
        .map(|r| r.event)
        .collect();
    assert_eq!(events, ["add", "correction"], "the correction is recorded");
    assert_eq!(store.outbox(10_000).await.expect("outbox").len(), before + 1);

    assert!(store
        .patch_memory(&t, Uuid::new_v4(), &patch, &record(&m, "correction"))
        .await
        .expect("patch")
        .is_none());
    assert!(store.delete_memory(&t, m.id).await.expect("delete"));
    assert!(store.memories_by_id(&t, &[m.id]).await.expect("read").is_empty());
    assert!(!store.delete_memory(&t, m.id).await.expect("delete twice"));
    assert_eq!(store.outbox(10_000).await.expect("outbox").len(), before + 2);
}

/// Outbox entries come oldest first and go once cleared.
pub async fn outbox_clears(turns: &dyn TranscriptStore, store: &dyn MemoryStore) {
    let t = tenant();
    let (session, stored) = session_with_turns(turns, &t, 1).await;
    let m = memory(&t, &session, "queued", &[stored[0].id]);
    store
        .commit_batch(&commit(&t, &session, 0, 1, vec![m.clone()]))
        .await
        .expect("commit");
    let entries = store.outbox(10_000).await.expect("outbox");
    assert!(entries.windows(2).all(|w| w[0].seq < w[1].seq), "oldest first");
    let mine: Vec<i64> = entries.iter().filter(|e| e.memory_id == m.id).map(|e| e.seq).collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(
        entries.iter().find(|e| e.memory_id == m.id).map(|e| &e.tenant),
        Some(&t)
    );
    store.clear_outbox(&mine).await.expect("clear");
    assert!(!outbox_ids(store).await.contains(&m.id));
    // A new index gets every active memory again.
    assert!(store.requeue_all().await.expect("requeue") >= 1);
    assert!(
        outbox_ids(store).await.contains(&m.id),
        "requeue_all queues active memories"
    );
}

/// Idle due-times are stored, replaced, found when due and cleared by a commit.
pub async fn idle_due_times(turns: &dyn TranscriptStore, store: &dyn MemoryStore) {
    let t = tenant();
    let (session, stored) = session_with_turns(turns, &t, 1).await;
    let now = Utc::now();
    let due_ids = |at| async move {
        store
            .due_sessions(at, 10_000)
            .await
            .expect("due sessions")
            .into_iter()
            .map(|d| d.session_id)
            .collect::<Vec<_>>()
    };
    store
        .set_idle_due(&key(&t, &session), now + Duration::seconds(60))
        .await
        .expect("set due");
    assert!(!due_ids(now).await.contains(&session), "not due before its time");
    store
        .set_idle_due(&key(&t, &session), now - Duration::seconds(1))
        .await
        .expect("replace due");
    let due = store.due_sessions(now, 10_000).await.expect("due sessions");
    let mine = due
        .iter()
        .find(|d| d.session_id == session)
        .expect("due once its time passed");
    assert_eq!(mine.tenant, t);
    store
        .commit_batch(&commit(
            &t,
            &session,
            0,
            1,
            vec![memory(&t, &session, "x", &[stored[0].id])],
        ))
        .await
        .expect("commit");
    assert_eq!(
        store.schedule(&key(&t, &session)).await.expect("schedule").idle_due_at,
        None
    );
    assert!(!due_ids(now).await.contains(&session), "a commit clears the due-time");
}

async fn count(store: &dyn MemoryStore, tenant: &Tenant, filter: MemoryFilter) -> usize {
    store
        .list_memories(tenant, &filter, None, 100)
        .await
        .expect("list")
        .len()
}

/// One owner at a time holds a session's lease; it can renew it; an expired lease can be
/// taken; a release frees it; releasing someone else's lease does nothing.
pub async fn session_leases_are_exclusive(turns: &dyn TranscriptStore, store: &dyn MemoryStore) {
    let t = tenant();
    let (session, _) = session_with_turns(turns, &t, 1).await;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let later = Utc::now() + Duration::minutes(10);
    assert!(
        store.claim_session(&key(&t, &session), a, later).await.expect("claim"),
        "a free session is claimed"
    );
    assert!(
        !store.claim_session(&key(&t, &session), b, later).await.expect("claim"),
        "a held lease is refused"
    );
    assert!(
        store.claim_session(&key(&t, &session), a, later).await.expect("renew"),
        "the holder renews"
    );
    store
        .release_session(&key(&t, &session), b)
        .await
        .expect("release by another");
    assert!(
        !store.claim_session(&key(&t, &session), b, later).await.expect("claim"),
        "a stranger cannot release it"
    );
    store.release_session(&key(&t, &session), a).await.expect("release");
    assert!(
        store.claim_session(&key(&t, &session), b, later).await.expect("claim"),
        "a released lease is free"
    );
    // An expired lease is taken over.
    let (other, _) = session_with_turns(turns, &t, 1).await;
    assert!(store
        .claim_session(&key(&t, &other), a, Utc::now() - Duration::seconds(1))
        .await
        .expect("claim"));
    assert!(
        store
            .claim_session(&key(&t, &other), b, later)
            .await
            .expect("take over"),
        "an expired lease is free"
    );
    // Leases leave the schedule alone.
    assert_eq!(store.schedule(&key(&t, &other)).await.expect("schedule").runs, 0);

    // Another owner's session of the same id has a lease of its own.
    let neighbour = Tenant {
        user: format!("user-{}", Uuid::new_v4().simple()),
        ..t.clone()
    };
    let id = SessionId::parse(&session).expect("session id");
    let one = NewTurn::new("user", "same id, another owner", None, None, None).expect("turn");
    turns.append(&neighbour, &id, &[one]).await.expect("append");
    assert!(
        store
            .claim_session(&key(&neighbour, &session), a, later)
            .await
            .expect("claim"),
        "another owner's session of the same id is free while this one is held"
    );
    assert!(
        !store.claim_session(&key(&t, &session), a, later).await.expect("claim"),
        "and claiming it did not free this one"
    );
}
