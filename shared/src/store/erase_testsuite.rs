//! The conformance suite of [`EraseStore`], run by the integration tests against both
//! backends: the job record's rules, and the deletion of one owner's rows that leaves every
//! other owner's alone and keeps a late L1 batch from bringing anything back.

use std::time::Duration;

use chrono::{SubsecRound as _, Utc};
use uuid::Uuid;

use super::compaction::{CompactionRequest, CompactionStore};
use super::erase::{EraseStore, Erasure, ErasureStep};
use super::memory::{CommitOutcome, MemoryStore};
use super::memory_testsuite::{commit, memory, session_with_turns, tenant};
use super::scene::{SceneRunCommit, SceneSchedule, SceneStore};
use super::TranscriptStore;
use crate::domain::{SessionId, Tenant};
use crate::memory::MemoryStatus;

/// What a store must be for the erase suite: every port that keeps an owner's rows.
pub trait OwnerStores: TranscriptStore + MemoryStore + EraseStore + SceneStore + CompactionStore {}
impl<T: TranscriptStore + MemoryStore + EraseStore + SceneStore + CompactionStore> OwnerStores for T {}

fn now() -> chrono::DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

pub async fn a_job_runs_once_per_owner_and_under_one_lease(store: &dyn OwnerStores) {
    let owner = tenant();
    let first = store
        .start_erasure(&Erasure::new(owner.clone(), "ops".into(), now()))
        .await
        .expect("start");
    assert_eq!(first.step, ErasureStep::Rows);
    let again = store
        .start_erasure(&Erasure::new(owner.clone(), "someone else".into(), now()))
        .await
        .expect("start again");
    assert_eq!(again.id, first.id, "a second request finds the running job");
    assert_eq!(store.erasure(first.id).await.expect("read"), Some(first.clone()));
    assert_eq!(store.erasure(Uuid::new_v4()).await.expect("read absent"), None);

    let t = now();
    assert!(store
        .stalled_erasures(t, 1000)
        .await
        .expect("stalled")
        .contains(&first.id));
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let claimed = store
        .claim_erasure(first.id, a, t, t + chrono::Duration::seconds(60))
        .await
        .expect("claim")
        .expect("a free job is claimed");
    assert_eq!(claimed.attempts, 1);
    assert!(
        store
            .claim_erasure(first.id, b, t, t + chrono::Duration::seconds(60))
            .await
            .expect("claim")
            .is_none(),
        "a held lease is not taken"
    );
    assert!(!store
        .stalled_erasures(t, 1000)
        .await
        .expect("stalled")
        .contains(&first.id));

    let mut progressed = claimed.clone();
    progressed.step = ErasureStep::Index;
    progressed.deleted.insert("turns".into(), 3);
    progressed.updated_at = now();
    assert!(
        !store.save_erasure(&progressed, b, None).await.expect("save"),
        "only the lease holder saves"
    );
    assert!(store
        .save_erasure(&progressed, a, Some(t + chrono::Duration::seconds(60)))
        .await
        .expect("save"));
    assert_eq!(
        store.erasure(first.id).await.expect("read").expect("job").step,
        ErasureStep::Index
    );

    // An expired lease is taken over, and the attempt counted.
    let later = t + chrono::Duration::seconds(61);
    assert!(store
        .stalled_erasures(later, 1000)
        .await
        .expect("stalled")
        .contains(&first.id));
    let resumed = store
        .claim_erasure(first.id, b, later, later + chrono::Duration::seconds(60))
        .await
        .expect("claim")
        .expect("an expired lease is taken over");
    assert_eq!((resumed.attempts, resumed.step), (2, ErasureStep::Index));
    assert_eq!(resumed.deleted.get("turns"), Some(&3));

    let mut done = resumed;
    done.step = ErasureStep::Done;
    done.finished_at = Some(now());
    assert!(store.save_erasure(&done, b, None).await.expect("finish"));
    assert!(
        store
            .claim_erasure(first.id, a, later, later)
            .await
            .expect("claim")
            .is_none(),
        "done is done"
    );
    let next = store
        .start_erasure(&Erasure::new(owner, "ops".into(), now()))
        .await
        .expect("start after done");
    assert_ne!(next.id, first.id, "after a job ends, a new request is a new job");
}

/// An owner with turns, memories, a compaction job and a scene schedule.
async fn populated(store: &dyn OwnerStores, owner: &Tenant) -> String {
    let (session, turns) = session_with_turns(store, owner, 3).await;
    let batch = commit(
        owner,
        &session,
        0,
        3,
        vec![memory(owner, &session, "I live in Lisbon", &[turns[0].id])],
    );
    assert_eq!(
        store.commit_batch(&batch).await.expect("commit"),
        CommitOutcome::Committed
    );
    let session_id = SessionId::parse(&session).expect("session id");
    store
        .request_compaction(
            owner,
            &session_id,
            CompactionRequest {
                force: true,
                seen_last_seq: None,
                now: now(),
                lease: Duration::from_secs(60),
            },
        )
        .await
        .expect("request compaction");
    session
}

pub async fn erase_removes_every_row_of_the_owner_and_no_other(store: &dyn OwnerStores) {
    let owner = tenant();
    // The same team and agent, another user: the nearest neighbour an erasure could reach.
    let neighbour = Tenant {
        user: "neighbour".into(),
        ..owner.clone()
    };
    let session = populated(store, &owner).await;
    populated(store, &neighbour).await;
    // The neighbour's own session of the owner's session id, with a cursor: erasing the owner's
    // sessions by id alone would take it too.
    let same_id = SessionId::parse(&session).expect("session id");
    let turn = crate::domain::NewTurn::new("user", "the neighbour's turn", None, None, None).expect("turn");
    store.append(&neighbour, &same_id, &[turn]).await.expect("append");
    store
        .advance_cursor(
            crate::store::INDEX_CONSUMER,
            &crate::domain::SessionKey::new(neighbour.clone(), session.as_str()),
            1,
        )
        .await
        .expect("advance");
    let before = store.owner_rows(&neighbour).await.expect("count");
    assert_eq!(before.get("turns"), Some(&4), "the neighbour's turns: {before:?}");
    assert_eq!(before.get("sessions"), Some(&2), "the neighbour's sessions: {before:?}");

    let counts = store.owner_rows(&owner).await.expect("count");
    for table in [
        "turns",
        "sessions",
        "memories",
        "memory_provenance",
        "compactions",
        "scene_schedules",
    ] {
        assert!(
            counts.get(table).copied().unwrap_or(0) > 0,
            "the owner has {table}: {counts:?}"
        );
    }
    let deleted = store.erase_owner_rows(&owner).await.expect("erase");
    assert_eq!(deleted.get("turns"), Some(&3));
    assert_eq!(deleted, counts, "every counted row is deleted, and only those");
    let left = store.owner_rows(&owner).await.expect("count");
    assert!(left.values().all(|n| *n == 0), "nothing is left: {left:?}");
    assert_eq!(
        store.owner_rows(&neighbour).await.expect("count"),
        before,
        "the neighbour keeps everything"
    );
    assert_eq!(
        store
            .count_memories(&neighbour, MemoryStatus::Active)
            .await
            .expect("count"),
        1
    );
    assert!(matches!(
        store
            .list(&owner, &SessionId::parse(&session).expect("id"), 0, 10)
            .await,
        Err(super::StoreError::SessionNotFound)
    ));
    let owners = store.owners_of(&owner.team, None).await.expect("owners");
    assert_eq!(
        owners,
        vec![neighbour.clone()],
        "the team's owners, the erased one gone"
    );
    assert_eq!(
        store.owners_of(&owner.team, Some("other")).await.expect("owners"),
        vec![]
    );
    let again = store.erase_owner_rows(&owner).await.expect("erase again");
    assert!(
        again.values().all(|n| *n == 0),
        "erasing again finds nothing: {again:?}"
    );
}

pub async fn a_batch_read_before_the_erasure_cannot_commit_after_it(store: &dyn OwnerStores) {
    let owner = tenant();
    let (session, turns) = session_with_turns(store, &owner, 2).await;
    // Read as a worker would, then the owner is erased before the batch commits.
    let late = commit(
        &owner,
        &session,
        0,
        2,
        vec![memory(&owner, &session, "I drive a red car", &[turns[1].id])],
    );
    // A scene run that held the owner's lease when the erasure came.
    let lease = store
        .claim_scene_run(&owner, now(), Duration::from_secs(60))
        .await
        .expect("claim scene run")
        .expect("a free owner is claimed");
    store.erase_owner_rows(&owner).await.expect("erase");

    assert_eq!(
        store.commit_batch(&late).await.expect("commit"),
        CommitOutcome::SourcesGone
    );
    let scene_commit = SceneRunCommit {
        scenes: Vec::new(),
        schedule: SceneSchedule {
            last_run_at: Some(now()),
            ..SceneSchedule::default()
        },
        after_l1: Duration::from_secs(60),
        min_gap: Duration::from_secs(60),
        persona_signal: false,
        provenance: Vec::new(),
    };
    assert!(
        !store
            .commit_scene_run(&owner, &lease, &scene_commit)
            .await
            .expect("commit scene run"),
        "a scene run whose lease row was erased writes nothing"
    );
    let left = store.owner_rows(&owner).await.expect("count");
    assert!(left.values().all(|n| *n == 0), "nothing came back: {left:?}");

    // A batch citing a turn that never existed in the session is refused the same way.
    let (session, _) = session_with_turns(store, &owner, 1).await;
    let phantom = commit(
        &owner,
        &session,
        0,
        1,
        vec![memory(&owner, &session, "x", &[Uuid::new_v4()])],
    );
    assert_eq!(
        store.commit_batch(&phantom).await.expect("commit"),
        CommitOutcome::SourcesGone
    );
}
