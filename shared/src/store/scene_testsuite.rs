//! The conformance suite of [`SceneStore`]: one function per point of the contract, run by the
//! integration tests against both backends. Each panics, naming the broken rule, when the store
//! breaks its contract.
//!
//! Time is passed in (`now`), so leases and due times are tested without waiting. Each function
//! uses fresh tenants; `due_scene_owners` and `layer_owners` are store-wide, so the checks on
//! them look only at their own owners.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone as _, Utc};
use uuid::Uuid;

use super::scene::{
    ArtifactProvenance, Lease, PersonaCommit, PersonaRow, SceneRow, SceneRunCommit, SceneSchedule, SceneStatus,
    SceneStore, LAYER_L2, LAYER_L3,
};
use crate::domain::Tenant;
use crate::memory::TemplateRef;

/// The lease most checks use.
pub const LEASE: Duration = Duration::from_secs(120);

/// Runs every check of this module against one store, one after another.
pub async fn scene_store_suite(store: Arc<dyn SceneStore>) {
    scene_rows_round_trip_newest_first(&*store).await;
    layer_data_is_tenant_scoped(&*store).await;
    schedule_defaults_then_updates(&*store).await;
    concurrent_schedule_updates_lose_nothing(Arc::clone(&store)).await;
    due_owners_are_due_and_free(&*store).await;
    concurrent_claims_have_one_winner(Arc::clone(&store)).await;
    leases_expire_and_release_only_with_their_token(&*store).await;
    leases_are_renewed_only_by_their_holder(&*store).await;
    a_lost_lease_commits_nothing(&*store).await;
    a_commit_reschedules_after_a_late_l1(&*store).await;
    persona_signals_and_builds(&*store).await;
    provenance_filters_by_layer_and_scene(&*store).await;
    layer_owners_page_in_order(&*store).await;
}

/// Rows are written as given and read back exactly; the listing is newest update first and
/// hides deleted scenes unless asked; `scene` reads any status; an edit replaces the row.
pub async fn scene_rows_round_trip_newest_first(store: &dyn SceneStore) {
    let t = tenant();
    let mut older = scene(&t, "订单表分区", at(10), SceneStatus::Active);
    older.tags = vec!["postgres".to_owned(), "分区".to_owned()];
    older.created_at = at(1) + chrono::Duration::microseconds(123_456);
    let newer = scene(&t, "deploy pipeline", at(30), SceneStatus::Active);
    let deleted = scene(&t, "merged away", at(20), SceneStatus::Deleted);
    let lease = claim(store, &t, at(0)).await;
    let commit = run(vec![older.clone(), newer.clone(), deleted.clone()], schedule_at(40));
    assert!(commit_run(store, &t, &lease, &commit).await, "a held lease commits");

    assert_eq!(
        scenes(store, &t, false).await,
        [newer.clone(), older.clone()],
        "active scenes, most recently updated first, exactly as written"
    );
    assert_eq!(
        scenes(store, &t, true).await,
        [newer.clone(), deleted.clone(), older.clone()],
        "deleted scenes are listed when asked"
    );
    assert_eq!(
        store.scene(&t, deleted.id).await.expect("read a scene"),
        Some(deleted),
        "one scene reads whatever its status"
    );
    assert_eq!(store.scene(&t, Uuid::new_v4()).await.expect("read a scene"), None);

    let mut edited = older.clone();
    edited.version = 2;
    edited.overview = "partitioned by month, then by tenant".to_owned();
    edited.tags.clear();
    edited.object_key = format!("scenes/{}/v2.md", edited.id);
    edited.updated_at = at(50);
    let lease = claim(store, &t, at(60)).await;
    assert!(commit_run(store, &t, &lease, &run(vec![edited.clone()], schedule_at(61))).await);
    assert_eq!(
        scenes(store, &t, false).await,
        [edited, newer],
        "an edit replaces the row and moves it to the front"
    );
}

/// Another owner (differing in any one of team, agent, user) sees nothing of an owner's
/// scenes, schedule, persona or provenance, cannot overwrite its scene by id, and a commit
/// that carries another owner's rows is refused whole.
pub async fn layer_data_is_tenant_scoped(store: &dyn SceneStore) {
    let t = tenant();
    let mine = scene(&t, "mine", at(10), SceneStatus::Active);
    let lease = claim(store, &t, at(0)).await;
    let mut commit = run(vec![mine.clone()], schedule_at(20));
    commit.persona_signal = true;
    commit.provenance = vec![record(&t, LAYER_L2, Some(mine.id), "create", at(5))];
    assert!(commit_run(store, &t, &lease, &commit).await);
    store
        .record_artifact_provenance(&[record(&t, LAYER_L3, None, "failed", at(6))])
        .await
        .expect("record provenance");
    assert!(store.persona(&t).await.expect("read the persona").is_some());

    let strangers = [
        Tenant {
            user: "someone-else".to_owned(),
            ..t.clone()
        },
        Tenant {
            agent: "another-agent".to_owned(),
            ..t.clone()
        },
        Tenant {
            team: format!("{}-other", t.team),
            ..t.clone()
        },
    ];
    for s in &strangers {
        assert!(
            scenes(store, s, true).await.is_empty(),
            "{s:?} lists another owner's scenes"
        );
        assert_eq!(
            store.scene(s, mine.id).await.expect("read a scene"),
            None,
            "{s:?} reads another owner's scene"
        );
        assert_eq!(
            store.scene_schedule(s).await.expect("read a schedule"),
            SceneSchedule::default(),
            "{s:?} sees another owner's schedule"
        );
        assert_eq!(
            store.persona(s).await.expect("read a persona"),
            None,
            "{s:?} sees another owner's persona"
        );
        for layer in [LAYER_L2, LAYER_L3] {
            assert!(
                provenance(store, s, layer, None).await.is_empty(),
                "{s:?} sees another owner's {layer} provenance"
            );
        }
    }

    // A stranger's commit naming the owner's scene id fails and writes nothing of its own.
    let s = &strangers[0];
    let lease = claim(store, s, at(0)).await;
    let mut hijack = scene(s, "hijack", at(30), SceneStatus::Active);
    hijack.id = mine.id;
    let mut commit = run(vec![hijack], schedule_at(31));
    commit.provenance = vec![record(s, LAYER_L2, Some(mine.id), "update", at(30))];
    assert!(
        store.commit_scene_run(s, &lease, &commit).await.is_err(),
        "a scene id of another owner is refused"
    );
    assert_eq!(
        store.scene(&t, mine.id).await.expect("read a scene"),
        Some(mine.clone()),
        "another owner's commit overwrote a scene"
    );
    assert!(
        provenance(store, s, LAYER_L2, None).await.is_empty(),
        "a refused commit wrote provenance"
    );
    assert_eq!(
        store.claim_scene_run(s, at(1), LEASE).await.expect("claim"),
        None,
        "a refused commit released the lease"
    );

    // The owner's commit carrying a stranger's row is refused whole.
    let lease = claim(store, &t, at(100)).await;
    let theirs = scene(s, "theirs", at(110), SceneStatus::Active);
    let other_mine = scene(&t, "other mine", at(110), SceneStatus::Active);
    let commit = run(vec![other_mine.clone(), theirs.clone()], schedule_at(111));
    assert!(
        store.commit_scene_run(&t, &lease, &commit).await.is_err(),
        "a commit carrying another owner's row is refused"
    );
    assert_eq!(
        store.scene(&t, other_mine.id).await.expect("read"),
        None,
        "a refused commit wrote a row"
    );
    assert_eq!(
        store.scene(s, theirs.id).await.expect("read"),
        None,
        "a refused commit wrote a row"
    );
    let persona_lease = store
        .claim_persona(&t, at(100), LEASE)
        .await
        .expect("claim the persona")
        .expect("a free persona lease");
    let mut build = persona_commit(&t, at(101));
    build.provenance.tenant = s.clone();
    assert!(
        store.commit_persona(&t, &persona_lease, &build).await.is_err(),
        "a persona commit carrying another owner's provenance is refused"
    );
    assert_eq!(
        store.persona(&t).await.expect("read the persona").map(|p| p.version),
        Some(0),
        "a refused persona commit built"
    );
}

/// An owner without a schedule reads all `None`; an update reads the stored schedule, and what
/// it returns is what is stored; it does not touch the lease.
pub async fn schedule_defaults_then_updates(store: &dyn SceneStore) {
    let t = tenant();
    assert_eq!(
        store.scene_schedule(&t).await.expect("read the schedule"),
        SceneSchedule::default(),
        "an owner without a schedule reads the default"
    );
    let first = SceneSchedule {
        due_at: Some(at(90)),
        last_run_at: None,
        last_l1_at: Some(at(0) + chrono::Duration::microseconds(7)),
        memory_watermark: None,
    };
    let set_first = first.clone();
    let written = store
        .update_scene_schedule(&t, &move |_| set_first.clone())
        .await
        .expect("update the schedule");
    assert_eq!(written, first, "the update returns what it stored");
    assert_eq!(
        store.scene_schedule(&t).await.expect("read"),
        first,
        "the update is stored"
    );

    let lease = claim(store, &t, at(1)).await;
    let second = store
        .update_scene_schedule(&t, &|s| SceneSchedule {
            memory_watermark: s.last_l1_at,
            ..s
        })
        .await
        .expect("update the schedule");
    assert_eq!(
        second,
        SceneSchedule {
            memory_watermark: first.last_l1_at,
            ..first
        },
        "the update is applied to the stored schedule"
    );
    assert_eq!(
        store.claim_scene_run(&t, at(2), LEASE).await.expect("claim"),
        None,
        "a schedule update freed the lease"
    );
    store.release_scene_run(&t, lease.token).await.expect("release");
}

/// Eight concurrent read-modify-writes of one owner's schedule each see the previous one's
/// result: none is lost.
pub async fn concurrent_schedule_updates_lose_nothing(store: Arc<dyn SceneStore>) {
    const CALLERS: i64 = 8;
    let t = tenant();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let (store, t) = (Arc::clone(&store), t.clone());
        tasks.spawn(async move {
            // A counter in seconds past `at(0)`: each update adds one.
            store
                .update_scene_schedule(&t, &|s| SceneSchedule {
                    memory_watermark: Some(s.memory_watermark.map_or(at(1), |w| w + chrono::Duration::seconds(1))),
                    ..s
                })
                .await
        });
    }
    let mut results = Vec::new();
    while let Some(result) = tasks.join_next().await {
        let schedule = result.expect("update task").expect("update the schedule");
        results.push(schedule.memory_watermark.expect("a watermark"));
    }
    results.sort();
    let expected: Vec<DateTime<Utc>> = (1..=CALLERS).map(at).collect();
    assert_eq!(results, expected, "each concurrent update saw the one before it");
    assert_eq!(
        store.scene_schedule(&t).await.expect("read").memory_watermark,
        Some(at(CALLERS)),
        "a concurrent schedule update was lost"
    );
}

/// `due_scene_owners` lists owners whose `due_at` is at or before `now` and whose lease is
/// free, earliest first.
pub async fn due_owners_are_due_and_free(store: &dyn SceneStore) {
    let (a, b, c, d) = (tenant(), tenant(), tenant(), tenant());
    set_due(store, &a, Some(at(10))).await;
    set_due(store, &b, Some(at(100))).await;
    set_due(store, &c, None).await;
    set_due(store, &d, Some(at(5))).await;
    store
        .claim_scene_run(&d, at(0), Duration::from_secs(60))
        .await
        .expect("claim")
        .expect("a free lease");
    let mine = &[a.clone(), b.clone(), c.clone(), d.clone()];
    let due = |now| async move {
        let all = store.due_scene_owners(now, 10_000).await.expect("list due owners");
        all.into_iter().filter(|o| mine.contains(o)).collect::<Vec<_>>()
    };
    assert!(due(at(4)).await.is_empty(), "an owner is due before its due time");
    assert_eq!(
        due(at(10)).await,
        std::slice::from_ref(&a),
        "due at its due time; a live lease hides an owner"
    );
    assert_eq!(due(at(50)).await, std::slice::from_ref(&a));
    assert_eq!(
        due(at(200)).await,
        [d, a, b],
        "earliest due first, an expired lease no longer hides, no due time is never due"
    );
}

/// Of eight concurrent claims of one owner's lease exactly one wins, for the scene run and for
/// the persona build alike (they are separate leases).
pub async fn concurrent_claims_have_one_winner(store: Arc<dyn SceneStore>) {
    let t = tenant();
    for persona in [false, true] {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (store, t) = (Arc::clone(&store), t.clone());
            tasks.spawn(async move {
                if persona {
                    store.claim_persona(&t, at(0), LEASE).await
                } else {
                    store.claim_scene_run(&t, at(0), LEASE).await
                }
            });
        }
        let mut winners = 0;
        while let Some(result) = tasks.join_next().await {
            if result.expect("claim task").expect("claim").is_some() {
                winners += 1;
            }
        }
        assert_eq!(
            winners, 1,
            "concurrent claims (persona {persona}) have one winner, not {winners}"
        );
    }
}

/// A live lease cannot be claimed; from its `until` on it can, and that claim reports the
/// displaced token as abandoned; a release with any token but the holder's does nothing; the
/// holder's release frees it at once, and the next claim finds nothing abandoned.
pub async fn leases_expire_and_release_only_with_their_token(store: &dyn SceneStore) {
    let t = &tenant();
    for persona in [false, true] {
        let leases = LeaseCalls {
            store,
            tenant: t,
            persona,
        };
        let claim_at = |now| leases.claim(now);
        let release = |token| leases.release(token);
        let first = claim_at(at(0)).await.expect("a free lease is claimed");
        assert_eq!(
            (first.claimed_at, first.until, first.abandoned),
            (at(0), at(60), None),
            "the lease's times; a first claim displaces nobody"
        );
        assert_eq!(
            claim_at(at(59)).await,
            None,
            "a live lease is claimed (persona {persona})"
        );
        let second = claim_at(at(60)).await.expect("an expired lease is claimed again");
        assert_ne!(second.token, first.token, "a claim has a fresh token");
        assert_eq!(
            second.abandoned,
            Some(first.token),
            "a claim over an expired, unreleased lease reports it abandoned (persona {persona})"
        );
        release(first.token).await;
        release(Uuid::new_v4()).await;
        assert_eq!(
            claim_at(at(61)).await,
            None,
            "a release with a wrong token freed the lease (persona {persona})"
        );
        release(second.token).await;
        let third = claim_at(at(62))
            .await
            .unwrap_or_else(|| panic!("the holder's release frees the lease (persona {persona})"));
        assert_eq!(
            third.abandoned, None,
            "a released lease is not abandoned (persona {persona})"
        );
    }
}

/// The calls of the owner's scene lease or, with `persona`, of its persona lease, with a lease
/// of 60 s.
#[derive(Clone, Copy)]
struct LeaseCalls<'a> {
    store: &'a dyn SceneStore,
    tenant: &'a Tenant,
    persona: bool,
}

impl LeaseCalls<'_> {
    const LEASE: Duration = Duration::from_secs(60);

    async fn claim(self, now: DateTime<Utc>) -> Option<Lease> {
        let (store, t) = (self.store, self.tenant);
        if self.persona {
            store.claim_persona(t, now, Self::LEASE).await.expect("claim")
        } else {
            store.claim_scene_run(t, now, Self::LEASE).await.expect("claim")
        }
    }

    async fn renew(self, token: Uuid, until: DateTime<Utc>) -> bool {
        let (store, t) = (self.store, self.tenant);
        if self.persona {
            store.renew_persona(t, token, until).await.expect("renew")
        } else {
            store.renew_scene_run(t, token, until).await.expect("renew")
        }
    }

    async fn release(self, token: Uuid) {
        let (store, t) = (self.store, self.tenant);
        if self.persona {
            store.release_persona(t, token).await.expect("release");
        } else {
            store.release_scene_run(t, token).await.expect("release");
        }
    }
}

/// A run renews its scene lease, and a build its persona lease, while it works: the holder's
/// token moves the lease's end, so a claim before the new end finds it held. Another token, a
/// lease another run took and a released lease are not renewed; an expired lease nobody
/// claimed since still is.
pub async fn leases_are_renewed_only_by_their_holder(store: &dyn SceneStore) {
    let t = &tenant();
    for persona in [false, true] {
        let leases = LeaseCalls {
            store,
            tenant: t,
            persona,
        };
        let claim_at = |now| leases.claim(now);
        let renew = |token, until| leases.renew(token, until);
        let release = |token| leases.release(token);

        let first = claim_at(at(0)).await.expect("a free lease is claimed");
        assert!(
            renew(first.token, at(120)).await,
            "the holder renews (persona {persona})"
        );
        assert_eq!(
            claim_at(at(90)).await,
            None,
            "a renewed lease holds past its first end (persona {persona})"
        );
        assert!(
            !renew(Uuid::new_v4(), at(500)).await,
            "another token renews nothing (persona {persona})"
        );
        let second = claim_at(at(120)).await.expect("a renewed lease ends at its new end");
        assert_eq!(second.abandoned, Some(first.token), "persona {persona}");
        assert!(
            !renew(first.token, at(500)).await,
            "a lease another run took is not renewed (persona {persona})"
        );
        assert_eq!(
            claim_at(at(150)).await,
            None,
            "and stays the other run's (persona {persona})"
        );
        release(second.token).await;
        assert!(
            !renew(second.token, at(500)).await,
            "a released lease is not renewed (persona {persona})"
        );

        let third = claim_at(at(200)).await.expect("a released lease is claimed");
        assert!(
            renew(third.token, at(400)).await,
            "a lease past its end that nobody claimed is renewed (persona {persona})"
        );
        assert_eq!(
            claim_at(at(300)).await,
            None,
            "and holds to its new end (persona {persona})"
        );
        release(third.token).await;
    }
}

/// A commit whose lease was claimed by another run (or released) returns `false` and writes
/// nothing — rows, provenance, schedule, signal — and leaves the other run's lease alone. A
/// lease past its `until` that nobody claimed since still commits.
pub async fn a_lost_lease_commits_nothing(store: &dyn SceneStore) {
    let t = tenant();
    set_due(store, &t, Some(at(0))).await;
    let before = store.scene_schedule(&t).await.expect("read");
    let stale = store
        .claim_scene_run(&t, at(0), Duration::from_secs(60))
        .await
        .expect("claim")
        .expect("a free lease");
    let current = claim(store, &t, at(100)).await;
    assert_eq!(current.abandoned, Some(stale.token), "the displaced lease is reported");
    let row = scene(&t, "late", at(90), SceneStatus::Active);
    let mut commit = run(vec![row.clone()], schedule_at(95));
    commit.persona_signal = true;
    commit.provenance = vec![record(&t, LAYER_L2, Some(row.id), "create", at(90))];
    assert!(!commit_run(store, &t, &stale, &commit).await, "a lost lease committed");
    assert_eq!(
        store.scene(&t, row.id).await.expect("read"),
        None,
        "a lost lease wrote a row"
    );
    assert!(
        provenance(store, &t, LAYER_L2, None).await.is_empty(),
        "a lost lease wrote provenance"
    );
    assert_eq!(
        store.scene_schedule(&t).await.expect("read"),
        before,
        "a lost lease wrote the schedule"
    );
    assert_eq!(
        store.persona(&t).await.expect("read"),
        None,
        "a lost lease signalled the persona"
    );
    assert_eq!(
        store.claim_scene_run(&t, at(101), LEASE).await.expect("claim"),
        None,
        "a lost lease's commit released the holder's lease"
    );

    assert!(commit_run(store, &t, &current, &commit).await, "the holder commits");
    assert_eq!(store.scene(&t, row.id).await.expect("read"), Some(row));
    assert!(
        !commit_run(store, &t, &current, &commit).await,
        "a spent lease commits again"
    );

    // Expired at 162 s, but nobody claimed the owner since: the token is still the owner's.
    let expired = store
        .claim_scene_run(&t, at(102), Duration::from_secs(60))
        .await
        .expect("claim")
        .expect("the commit released the lease");
    assert_eq!(expired.abandoned, None, "a committed lease is not abandoned");
    assert!(
        commit_run(store, &t, &expired, &run(Vec::new(), schedule_at(300))).await,
        "an expired lease nobody claimed since still commits"
    );
    let released = claim(store, &t, at(400)).await;
    store.release_scene_run(&t, released.token).await.expect("release");
    assert!(
        !commit_run(store, &t, &released, &run(Vec::new(), schedule_at(401))).await,
        "a released lease committed"
    );
}

/// Without an L1 batch since the claim a commit stores the given schedule; with one, `due_at`
/// becomes `max(last_l1_at + after_l1, last_run_at + min_gap)` and the later `last_l1_at` is
/// kept. Either way the lease is released.
pub async fn a_commit_reschedules_after_a_late_l1(store: &dyn SceneStore) {
    let t = tenant();
    store
        .update_scene_schedule(&t, &|s| SceneSchedule {
            due_at: Some(at(90)),
            last_l1_at: Some(at(0)),
            ..s
        })
        .await
        .expect("update the schedule");

    let quiet = claim(store, &t, at(100)).await;
    let given = SceneSchedule {
        due_at: None,
        last_run_at: Some(at(150)),
        last_l1_at: Some(at(0)),
        memory_watermark: Some(at(0)),
    };
    assert!(commit_run(store, &t, &quiet, &run(Vec::new(), given.clone())).await);
    assert_eq!(
        store.scene_schedule(&t).await.expect("read"),
        given,
        "without a later L1 the given schedule is stored"
    );

    for (claimed, l1, finished, min_gap, due) in [(200, 210, 250, 900, 1150), (2000, 2010, 2050, 10, 2100)] {
        let lease = claim(store, &t, at(claimed)).await;
        // An L1 batch commits while the run works.
        store
            .update_scene_schedule(&t, &|s| SceneSchedule {
                last_l1_at: Some(at(l1)),
                due_at: Some(at(l1 + 90)),
                ..s
            })
            .await
            .expect("update the schedule");
        let mut commit = run(
            Vec::new(),
            SceneSchedule {
                due_at: None,
                last_run_at: Some(at(finished)),
                last_l1_at: Some(at(0)),
                memory_watermark: Some(at(claimed)),
            },
        );
        commit.min_gap = Duration::from_secs(min_gap);
        assert!(commit_run(store, &t, &lease, &commit).await);
        assert_eq!(
            store.scene_schedule(&t).await.expect("read"),
            SceneSchedule {
                due_at: Some(at(due)),
                last_run_at: Some(at(finished)),
                last_l1_at: Some(at(l1)),
                memory_watermark: Some(at(claimed)),
            },
            "an L1 batch after the claim makes the next run due (min_gap {min_gap} s)"
        );
    }
    assert!(
        store
            .claim_scene_run(&t, at(3000), LEASE)
            .await
            .expect("claim")
            .is_some(),
        "a commit releases the lease"
    );
}

/// A scene run's signal creates the persona row (version 0) stamped with the run's end; a
/// build clears it only if it is not later than the build's claim; each build bumps the
/// version and returns the stored row; a build whose lease was lost writes nothing.
pub async fn persona_signals_and_builds(store: &dyn SceneStore) {
    let t = tenant();
    assert_eq!(
        store.persona(&t).await.expect("read"),
        None,
        "no persona before a signal"
    );
    let probe = store
        .claim_persona(&t, at(0), LEASE)
        .await
        .expect("claim")
        .expect("a free lease");
    store.release_persona(&t, probe.token).await.expect("release");
    assert_eq!(
        store.persona(&t).await.expect("read"),
        None,
        "a claim alone makes a persona"
    );

    signal(store, &t, at(10), at(50)).await;
    let signalled = store
        .persona(&t)
        .await
        .expect("read")
        .expect("a signal makes a persona");
    assert_eq!(
        (signalled.version, signalled.signal_at, signalled.object_key.as_deref()),
        (0, Some(at(50)), None),
        "a signal stamps the run's end on an unbuilt persona"
    );
    assert_eq!(
        (
            signalled.built_at,
            signalled.memories_at_build,
            signalled.scenes_at_build
        ),
        (None, 0, 0)
    );

    let build = store
        .claim_persona(&t, at(100), LEASE)
        .await
        .expect("claim")
        .expect("a free lease");
    let commit = persona_commit(&t, at(110));
    let built = store
        .commit_persona(&t, &build, &commit)
        .await
        .expect("commit the persona")
        .expect("a held lease commits");
    assert_eq!(
        built,
        PersonaRow {
            tenant: t.clone(),
            version: 1,
            object_key: Some(commit.object_key.clone()),
            built_at: Some(at(110)),
            memories_at_build: 12,
            scenes_at_build: 3,
            scene_watermark: Some(at(40)),
            signal_at: None,
            updated_at: built.updated_at,
        },
        "a build bumps the version, stores its state and clears an older signal"
    );
    assert_eq!(
        store.persona(&t).await.expect("read"),
        Some(built),
        "the build returns the stored row"
    );
    assert_eq!(
        provenance(store, &t, LAYER_L3, None).await,
        std::slice::from_ref(&commit.provenance),
        "a build writes its provenance"
    );

    // A signal that arrives during a build stays pending.
    let build = store
        .claim_persona(&t, at(200), LEASE)
        .await
        .expect("claim")
        .expect("free");
    signal(store, &t, at(205), at(250)).await;
    let built = commit_build(store, &t, &build, at(260))
        .await
        .expect("a held lease commits");
    assert_eq!(
        (built.version, built.signal_at),
        (2, Some(at(250))),
        "a signal during a build was cleared"
    );
    // The later of two pending signals is kept.
    signal(store, &t, at(206), at(240)).await;
    assert_eq!(
        store.persona(&t).await.expect("read").and_then(|p| p.signal_at),
        Some(at(250))
    );
    let build = store
        .claim_persona(&t, at(300), LEASE)
        .await
        .expect("claim")
        .expect("free");
    let built = commit_build(store, &t, &build, at(310))
        .await
        .expect("a held lease commits");
    assert_eq!(
        (built.version, built.signal_at),
        (3, None),
        "a build after the signal clears it"
    );

    // A build that lost its lease writes nothing.
    let stale = store
        .claim_persona(&t, at(400), Duration::from_secs(60))
        .await
        .expect("claim")
        .expect("free");
    let current = store
        .claim_persona(&t, at(600), LEASE)
        .await
        .expect("claim")
        .expect("expired");
    assert_eq!(
        current.abandoned,
        Some(stale.token),
        "the displaced persona lease is reported"
    );
    assert_eq!(
        commit_build(store, &t, &stale, at(610)).await,
        None,
        "a lost lease built"
    );
    assert_eq!(store.persona(&t).await.expect("read").map(|p| p.version), Some(3));
    assert_eq!(
        provenance(store, &t, LAYER_L3, None).await.len(),
        3,
        "a lost lease wrote provenance"
    );
    let built = commit_build(store, &t, &current, at(620))
        .await
        .expect("the holder builds");
    assert_eq!(built.version, 4);
    assert_eq!(
        commit_build(store, &t, &current, at(630)).await,
        None,
        "a spent lease built again"
    );
}

/// Provenance reads back exactly, newest first, one layer at a time, optionally one scene's;
/// `limit` caps it; writing a record again adds nothing.
pub async fn provenance_filters_by_layer_and_scene(store: &dyn SceneStore) {
    let t = tenant();
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let r1 = record(&t, LAYER_L2, Some(a), "create", at(1));
    let r2 = record(&t, LAYER_L2, Some(a), "update", at(3));
    let mut r3 = record(&t, LAYER_L2, Some(b), "merge", at(2));
    r3.template = None;
    r3.model = None;
    let mut r4 = record(&t, LAYER_L2, None, "failed", at(4));
    r4.detail = serde_json::json!({"error": "llm timeout", "trigger": "timer"});
    let r5 = record(&t, LAYER_L3, None, "build", at(5));
    let all = [r1.clone(), r2.clone(), r3.clone(), r4.clone(), r5.clone()];
    store.record_artifact_provenance(&all).await.expect("record provenance");
    store
        .record_artifact_provenance(std::slice::from_ref(&r1))
        .await
        .expect("record provenance again");

    assert_eq!(
        provenance(store, &t, LAYER_L2, None).await,
        [r4.clone(), r2.clone(), r3.clone(), r1.clone()],
        "a layer's records, newest first, exactly as written, each once"
    );
    let limited = store
        .artifact_provenance(&t, LAYER_L2, None, 2)
        .await
        .expect("read provenance");
    assert_eq!(limited, [r4, r2.clone()], "limit caps the listing");
    assert_eq!(
        provenance(store, &t, LAYER_L2, Some(a)).await,
        [r2, r1],
        "one scene's records"
    );
    assert_eq!(provenance(store, &t, LAYER_L2, Some(b)).await, [r3]);
    assert_eq!(
        provenance(store, &t, LAYER_L3, None).await,
        [r5],
        "the other layer's records"
    );
    assert!(provenance(store, &t, LAYER_L3, Some(a)).await.is_empty());
}

/// `layer_owners` lists each owner with a schedule or a persona row (however made) once, in
/// key order, strictly after the cursor; provenance alone makes no owner.
pub async fn layer_owners_page_in_order(store: &dyn SceneStore) {
    let team = unique("layers");
    let owner = |user: &str| Tenant {
        team: team.clone(),
        agent: "agent".to_owned(),
        user: user.to_owned(),
    };
    let owners: Vec<Tenant> = ["u0", "u1", "u2", "u3", "u4"].into_iter().map(owner).collect();
    set_due(store, &owners[0], Some(at(10))).await;
    store
        .claim_persona(&owners[1], at(0), LEASE)
        .await
        .expect("claim")
        .expect("free");
    signal(store, &owners[2], at(0), at(5)).await;
    claim(store, &owners[3], at(0)).await;
    set_due(store, &owners[4], None).await;
    store
        .claim_persona(&owners[4], at(0), LEASE)
        .await
        .expect("claim")
        .expect("free");
    store
        .record_artifact_provenance(&[record(&owner("u5"), LAYER_L2, None, "failed", at(1))])
        .await
        .expect("record provenance");

    assert!(
        !store.layer_owners(None, 1).await.expect("list owners").is_empty(),
        "the first page lists an owner"
    );
    // Every id is non-empty, so this cursor sits just before the team's first owner.
    let mut cursor = Tenant {
        team: team.clone(),
        agent: String::new(),
        user: String::new(),
    };
    let mut listed = Vec::new();
    'pages: loop {
        let page = store.layer_owners(Some(&cursor), 2).await.expect("list owners");
        assert!(page.len() <= 2, "a page is longer than its limit");
        let Some(last) = page.last() else { break };
        for o in &page {
            if o.team != team {
                break 'pages;
            }
            listed.push(o.clone());
        }
        cursor = last.clone();
    }
    assert_eq!(
        listed, owners,
        "each owner with a schedule or persona row once, in key order, none without"
    );
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", Uuid::new_v4().simple())
}

fn tenant() -> Tenant {
    Tenant {
        team: unique("team"),
        agent: "agent".to_owned(),
        user: "user".to_owned(),
    }
}

/// A fixed instant plus `seconds`: whole seconds, so both backends store it exactly.
fn at(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + seconds, 0)
        .single()
        .expect("a valid time")
}

fn scene(t: &Tenant, name: &str, updated_at: DateTime<Utc>, status: SceneStatus) -> SceneRow {
    let id = Uuid::new_v4();
    SceneRow {
        id,
        tenant: t.clone(),
        name: name.to_owned(),
        overview: format!("{name}: one line"),
        tags: vec!["work".to_owned()],
        object_key: format!("scenes/{id}/v1.md"),
        version: 1,
        status,
        created_at: at(0),
        updated_at,
    }
}

fn schedule_at(finished: i64) -> SceneSchedule {
    SceneSchedule {
        due_at: None,
        last_run_at: Some(at(finished)),
        last_l1_at: None,
        memory_watermark: Some(at(finished)),
    }
}

fn run(scenes: Vec<SceneRow>, schedule: SceneSchedule) -> SceneRunCommit {
    SceneRunCommit {
        scenes,
        schedule,
        after_l1: Duration::from_secs(90),
        min_gap: Duration::from_secs(900),
        persona_signal: false,
        provenance: Vec::new(),
    }
}

fn record(
    t: &Tenant,
    layer: &str,
    scene_id: Option<Uuid>,
    event: &str,
    started_at: DateTime<Utc>,
) -> ArtifactProvenance {
    ArtifactProvenance {
        id: Uuid::new_v4(),
        tenant: t.clone(),
        layer: layer.to_owned(),
        scene_id,
        event: event.to_owned(),
        template: Some(TemplateRef {
            id: "l2-scene".to_owned(),
            version: "1".to_owned(),
            source: "builtin".to_owned(),
            hash: "ab".repeat(32),
        }),
        model: Some("gpt-test".to_owned()),
        input_refs: vec![format!("memory:{}", Uuid::new_v4())],
        output_refs: scene_id.map(|id| format!("scene:{id}@1")).into_iter().collect(),
        detail: serde_json::json!({"trigger": "timer"}),
        started_at,
        duration_ms: 1234,
    }
}

fn persona_commit(t: &Tenant, built_at: DateTime<Utc>) -> PersonaCommit {
    PersonaCommit {
        object_key: format!("persona/{}.md", Uuid::new_v4()),
        built_at,
        memories_at_build: 12,
        scenes_at_build: 3,
        scene_watermark: Some(at(40)),
        provenance: record(t, LAYER_L3, None, "build", built_at),
    }
}

async fn claim(store: &dyn SceneStore, t: &Tenant, now: DateTime<Utc>) -> Lease {
    store
        .claim_scene_run(t, now, LEASE)
        .await
        .expect("claim the scene run")
        .expect("a free scene lease")
}

async fn commit_run(store: &dyn SceneStore, t: &Tenant, lease: &Lease, commit: &SceneRunCommit) -> bool {
    store
        .commit_scene_run(t, lease, commit)
        .await
        .expect("commit the scene run")
}

async fn commit_build(
    store: &dyn SceneStore,
    t: &Tenant,
    lease: &Lease,
    built_at: DateTime<Utc>,
) -> Option<PersonaRow> {
    store
        .commit_persona(t, lease, &persona_commit(t, built_at))
        .await
        .expect("commit the persona")
}

/// A scene run claimed at `claimed` that finishes at `finished` with a persona signal.
async fn signal(store: &dyn SceneStore, t: &Tenant, claimed: DateTime<Utc>, finished: DateTime<Utc>) {
    let lease = store
        .claim_scene_run(t, claimed, LEASE)
        .await
        .expect("claim the scene run")
        .expect("a free scene lease");
    let mut commit = run(
        Vec::new(),
        SceneSchedule {
            last_run_at: Some(finished),
            ..SceneSchedule::default()
        },
    );
    commit.persona_signal = true;
    assert!(commit_run(store, t, &lease, &commit).await, "a held lease commits");
}

async fn set_due(store: &dyn SceneStore, t: &Tenant, due_at: Option<DateTime<Utc>>) {
    store
        .update_scene_schedule(t, &move |s| SceneSchedule { due_at, ..s })
        .await
        .expect("update the schedule");
}

async fn scenes(store: &dyn SceneStore, t: &Tenant, include_deleted: bool) -> Vec<SceneRow> {
    store.scenes(t, include_deleted).await.expect("list scenes")
}

async fn provenance(
    store: &dyn SceneStore,
    t: &Tenant,
    layer: &str,
    scene_id: Option<Uuid>,
) -> Vec<ArtifactProvenance> {
    store
        .artifact_provenance(t, layer, scene_id, 100)
        .await
        .expect("read provenance")
}
