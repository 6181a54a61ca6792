//! The conformance suite of [`FileStore`]: every backend must pass it.
//!
//! Each `pub async fn` checks one point of the contract in `super`'s docs and panics, naming
//! the broken rule, when the store breaks it. Each works in a folder of its own (a fresh
//! `t-{uuid}/`), so they may run in any order, concurrently, on a store holding other data.
//! `file_store_suite` runs them all.

use std::collections::BTreeMap;

use futures::stream::{self, StreamExt as _};
use uuid::Uuid;

use super::{FileError, FileStore, ObjectMeta, MAX_KEY_BYTES};

/// Objects of the listing check: past S3's page of 1000 keys.
pub const MANY_OBJECTS: usize = 1_100;

/// Runs every check below on `store`.
pub async fn file_store_suite(store: &dyn FileStore) {
    check_answers(store).await;
    put_get_round_trip(store).await;
    overwrite_replaces(store).await;
    missing_key_is_none(store).await;
    list_is_recursive_sorted_and_prefix_exact(store).await;
    list_pages_past_a_thousand(store).await;
    delete_is_idempotent(store).await;
    delete_prefix_removes_only_its_folder(store).await;
    copy_prefix_copies_the_folder(store).await;
    snapshot_then_restore_gives_back_the_snapshot(store).await;
    invalid_keys_are_rejected(store).await;
    concurrent_puts_leave_one_complete_value(store).await;
    name_conflicts_never_corrupt(store).await;
}

/// A folder no other check (or earlier run) uses.
pub fn fresh_folder() -> String {
    format!("t-{}/", Uuid::new_v4().simple())
}

/// The store's objects under `prefix` with their bytes, keys relative to `prefix`.
pub async fn contents(store: &dyn FileStore, prefix: &str) -> BTreeMap<String, Vec<u8>> {
    let mut found = BTreeMap::new();
    for object in store.list(prefix).await.expect("list") {
        let body = store
            .get(&object.key)
            .await
            .expect("get")
            .unwrap_or_else(|| panic!("{} is listed but get finds nothing", object.key));
        assert_eq!(body.len() as u64, object.size, "{}: listed size", object.key);
        let relative = object
            .key
            .strip_prefix(prefix)
            .expect("listed key starts with the prefix");
        found.insert(relative.to_owned(), body);
    }
    found
}

fn keys(objects: &[ObjectMeta]) -> Vec<&str> {
    objects.iter().map(|o| o.key.as_str()).collect()
}

fn assert_invalid<T: std::fmt::Debug>(result: Result<T, FileError>, what: &str) {
    match result {
        Err(FileError::InvalidKey(_)) => {}
        other => panic!("{what}: expected InvalidKey, got {other:?}"),
    }
}

async fn put(store: &dyn FileStore, key: &str, body: &[u8]) {
    store
        .put(key, body.to_vec())
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e:?}"));
}

pub async fn check_answers(store: &dyn FileStore) {
    store.check().await.expect("check of a reachable store");
    assert!(matches!(store.backend(), "s3" | "local"), "{}", store.backend());
}

/// Binary and UTF-8 bodies (and an empty one) come back byte for byte, under ASCII and CJK
/// keys, and listings give their sizes.
pub async fn put_get_round_trip(store: &dyn FileStore) {
    let dir = fresh_folder();
    let binary: Vec<u8> = (0..=255u8).cycle().take(3 * 256 + 7).collect();
    let text = "# 北京\n\n概述：用户在北京工作。🙂\n".as_bytes().to_vec();
    let cases = [
        (format!("{dir}bin/all-bytes.bin"), binary),
        (format!("{dir}场景/北京.md"), text),
        (format!("{dir}with space+plus&amp=.md"), b"odd but valid".to_vec()),
        (format!("{dir}empty"), Vec::new()),
    ];
    for (key, body) in &cases {
        put(store, key, body).await;
    }
    for (key, body) in &cases {
        assert_eq!(store.get(key).await.expect("get").as_ref(), Some(body), "{key}");
    }
    let listed = store.list(&dir).await.expect("list");
    let mut expected: Vec<ObjectMeta> = cases
        .iter()
        .map(|(key, body)| ObjectMeta {
            key: key.clone(),
            size: body.len() as u64,
        })
        .collect();
    expected.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(listed, expected);
}

/// A second put replaces the object whole.
pub async fn overwrite_replaces(store: &dyn FileStore) {
    let key = format!("{}doc.md", fresh_folder());
    put(store, &key, b"first version, longer than the second").await;
    put(store, &key, b"second").await;
    assert_eq!(store.get(&key).await.expect("get").as_deref(), Some(&b"second"[..]));
    let dir = key.trim_end_matches("doc.md");
    let listed = store.list(dir).await.expect("list");
    assert_eq!(
        listed,
        [ObjectMeta {
            key: key.clone(),
            size: 6
        }]
    );
}

/// Reading what is not there is `None`, not an error: an unknown key, a folder, a deleted key.
pub async fn missing_key_is_none(store: &dyn FileStore) {
    let dir = fresh_folder();
    assert_eq!(store.get(&format!("{dir}nothing.md")).await.expect("get"), None);
    put(store, &format!("{dir}folder/inside.md"), b"x").await;
    assert_eq!(store.get(&format!("{dir}folder")).await.expect("get a folder"), None);
    assert_eq!(
        store
            .get(&format!("{dir}folder/inside.md/deeper"))
            .await
            .expect("get below an object"),
        None
    );
}

/// A listing holds every object below the prefix at any depth, in byte order of keys, and
/// nothing from a sibling whose name merely starts the same (`a/` never lists `ab/x`).
pub async fn list_is_recursive_sorted_and_prefix_exact(store: &dyn FileStore) {
    let dir = fresh_folder();
    for key in ["b", "a/y/z", "ab/x", "a-b", "a/x", "a/y/场"] {
        put(store, &format!("{dir}{key}"), key.as_bytes()).await;
    }
    let under_a = store.list(&format!("{dir}a/")).await.expect("list a/");
    let expected_a: Vec<String> = ["a/x", "a/y/z", "a/y/场"].iter().map(|k| format!("{dir}{k}")).collect();
    assert_eq!(keys(&under_a), expected_a, "a/ lists its subtree only");
    // Byte order: '-' (0x2d) < '/' (0x2f) < 'b' (0x62).
    let all = store.list(&dir).await.expect("list dir");
    let expected_all: Vec<String> = ["a-b", "a/x", "a/y/z", "a/y/场", "ab/x", "b"]
        .iter()
        .map(|k| format!("{dir}{k}"))
        .collect();
    assert_eq!(keys(&all), expected_all);
    assert_eq!(all[0].size, 3);
    assert!(store.list(&format!("{dir}none/")).await.expect("list").is_empty());
    assert!(store
        .list(&format!("{dir}b/"))
        .await
        .expect("list below an object")
        .is_empty());
    let everything = store.list("").await.expect("list everything");
    for key in &expected_all {
        assert!(everything.iter().any(|o| &o.key == key), "list(\"\") misses {key}");
    }
    assert_invalid(store.list(&format!("{dir}a")).await, "a prefix without a trailing /");
}

/// Listings follow S3's continuation tokens: more than one page of keys comes back whole.
pub async fn list_pages_past_a_thousand(store: &dyn FileStore) {
    let dir = fresh_folder();
    let keys_written: Vec<String> = (0..MANY_OBJECTS).map(|i| format!("{dir}{i:05}")).collect();
    let failures: Vec<_> = stream::iter(&keys_written)
        .map(|key| store.put(key, key.as_bytes().to_vec()))
        .buffer_unordered(32)
        .filter_map(|result| async move { result.err() })
        .collect()
        .await;
    assert!(failures.is_empty(), "puts failed: {:?}", failures.first());
    let listed = store.list(&dir).await.expect("list");
    assert_eq!(keys(&listed), keys_written, "every key, once, in order");
    assert_eq!(store.delete_prefix(&dir).await.expect("delete_prefix"), MANY_OBJECTS);
    assert!(store.list(&dir).await.expect("list").is_empty());
}

/// Deleting is idempotent: a second delete, or one of a key never written, succeeds.
pub async fn delete_is_idempotent(store: &dyn FileStore) {
    let dir = fresh_folder();
    let key = format!("{dir}gone.md");
    let sibling = format!("{dir}stays.md");
    put(store, &key, b"x").await;
    put(store, &sibling, b"y").await;
    store.delete(&key).await.expect("delete");
    assert_eq!(store.get(&key).await.expect("get"), None);
    store.delete(&key).await.expect("delete again");
    store
        .delete(&format!("{dir}never/written.md"))
        .await
        .expect("delete unknown");
    assert_eq!(keys(&store.list(&dir).await.expect("list")), [sibling.as_str()]);
}

/// `delete_prefix` removes the folder's subtree, counts it, and leaves look-alike siblings.
pub async fn delete_prefix_removes_only_its_folder(store: &dyn FileStore) {
    let dir = fresh_folder();
    for key in ["a/1", "a/b/2", "ab/3", "a-4"] {
        put(store, &format!("{dir}{key}"), b"x").await;
    }
    assert_invalid(store.delete_prefix(&format!("{dir}a")).await, "prefix without /");
    assert_invalid(store.delete_prefix("").await, "the empty prefix");
    assert_eq!(
        store.list(&dir).await.expect("list").len(),
        4,
        "a refused call deleted something"
    );
    assert_eq!(
        store.delete_prefix(&format!("{dir}a/")).await.expect("delete_prefix"),
        2
    );
    let left = store.list(&dir).await.expect("list");
    assert_eq!(keys(&left), [format!("{dir}a-4"), format!("{dir}ab/3")]);
    assert_eq!(store.delete_prefix(&format!("{dir}a/")).await.expect("again"), 0);
}

/// `copy_prefix` copies each object to the same relative key, byte for byte, overwrites what
/// is there, leaves other objects of the target and the source alone, and never nests.
pub async fn copy_prefix_copies_the_folder(store: &dyn FileStore) {
    let dir = fresh_folder();
    let (from, to) = (format!("{dir}src/"), format!("{dir}dst/"));
    let binary: Vec<u8> = (0..=255u8).rev().collect();
    put(store, &format!("{from}one.md"), b"one").await;
    put(store, &format!("{from}sub/场景 2.bin"), &binary).await;
    put(store, &format!("{to}one.md"), b"stale").await;
    put(store, &format!("{to}other.md"), b"other").await;
    assert_eq!(store.copy_prefix(&from, &to).await.expect("copy_prefix"), 2);
    let copied = contents(store, &to).await;
    let expected: BTreeMap<String, Vec<u8>> = [
        ("one.md".to_owned(), b"one".to_vec()),
        ("other.md".to_owned(), b"other".to_vec()),
        ("sub/场景 2.bin".to_owned(), binary.clone()),
    ]
    .into_iter()
    .collect();
    assert_eq!(copied, expected);
    assert_eq!(contents(store, &from).await.len(), 2, "the source is unchanged");
    assert_eq!(
        store
            .copy_prefix(&format!("{dir}empty/"), &to)
            .await
            .expect("copy nothing"),
        0
    );
    assert_invalid(store.copy_prefix(&from, &format!("{from}nested/")).await, "into itself");
    assert_invalid(store.copy_prefix(&from, &dir).await, "onto its parent");
    assert_invalid(store.copy_prefix(&from, &from).await, "onto itself");
    assert_invalid(store.copy_prefix(&format!("{dir}src"), &to).await, "from without /");
}

/// A snapshot is an exact copy; restoring it undoes every later change (changed objects come
/// back, deleted ones are re-created, added ones are removed), and restoring again is harmless.
pub async fn snapshot_then_restore_gives_back_the_snapshot(store: &dyn FileStore) {
    let dir = fresh_folder();
    let (live, snap) = (format!("{dir}scenes/"), format!("{dir}versions/v1/"));
    put(store, &format!("{live}a.md"), b"a1").await;
    put(store, &format!("{live}b.md"), b"b1").await;
    put(store, &format!("{live}sub/c.md"), "场景 c1".as_bytes()).await;
    // Whatever was under the snapshot prefix is replaced.
    put(store, &format!("{snap}left-over.md"), b"old").await;
    assert_eq!(store.snapshot(&live, &snap).await.expect("snapshot"), 3);
    let taken = contents(store, &live).await;
    assert_eq!(contents(store, &snap).await, taken, "the snapshot is an exact copy");

    put(store, &format!("{live}a.md"), b"a2").await;
    store.delete(&format!("{live}b.md")).await.expect("delete");
    put(store, &format!("{live}d.md"), b"new").await;
    put(store, &format!("{live}sub/deeper/e.md"), b"new").await;
    assert_eq!(
        contents(store, &snap).await,
        taken,
        "changes to the folder leak into the snapshot"
    );

    assert_eq!(store.restore(&snap, &live).await.expect("restore"), 3);
    assert_eq!(
        contents(store, &live).await,
        taken,
        "restore gives back exactly the snapshot"
    );
    assert_eq!(store.restore(&snap, &live).await.expect("restore again"), 3);
    assert_eq!(contents(store, &live).await, taken, "restoring twice changes nothing");
    assert_eq!(
        contents(store, &snap).await,
        taken,
        "restoring leaves the snapshot alone"
    );

    assert_invalid(
        store.snapshot(&live, &format!("{live}v1/")).await,
        "snapshot inside the folder",
    );
    assert_invalid(store.snapshot(&format!("{dir}scenes"), &snap).await, "prefix without /");
    assert_invalid(
        store.restore(&snap, &format!("{dir}versions/")).await,
        "restore onto a parent",
    );
}

/// Bad keys and prefixes fail with `InvalidKey` on every call, and nothing is written.
pub async fn invalid_keys_are_rejected(store: &dyn FileStore) {
    let dir = fresh_folder();
    let too_long = format!("{dir}{}", "k".repeat(MAX_KEY_BYTES));
    let bad_keys = [
        String::new(),
        dir.clone(),
        format!("/{dir}x"),
        format!("{dir}a//b"),
        format!("{dir}./x"),
        format!("{dir}a/../../x"),
        format!("{dir}.."),
        format!("{dir}a\\b"),
        format!("{dir}a\nb"),
        format!("{dir}tab\there"),
        format!("{dir}nul\u{0}"),
        too_long,
    ];
    for key in &bad_keys {
        assert_invalid(store.put(key, b"x".to_vec()).await, &format!("put {key:?}"));
        assert_invalid(store.get(key).await, &format!("get {key:?}"));
        assert_invalid(store.delete(key).await, &format!("delete {key:?}"));
    }
    for prefix in [format!("/{dir}"), format!("{dir}a//"), format!("{dir}../")] {
        assert_invalid(store.list(&prefix).await, &format!("list {prefix:?}"));
    }
    assert!(
        store.list(&dir).await.expect("list").is_empty(),
        "a refused put wrote something"
    );
    let everything = store.list("").await.expect("list everything");
    assert!(
        everything.iter().all(|o| super::validate_key(&o.key).is_ok()),
        "a listing shows an invalid key"
    );
}

/// Writers racing on one key leave one writer's value whole, and readers meanwhile see
/// nothing or one whole value, never a mix or a prefix.
pub async fn concurrent_puts_leave_one_complete_value(store: &dyn FileStore) {
    const WRITERS: u8 = 8;
    const SIZE: usize = 256 * 1024;
    let key = format!("{}contended.bin", fresh_folder());
    fn check(body: &[u8]) {
        assert_eq!(body.len(), SIZE, "a reader saw a partial object");
        let first = body[0];
        assert!(
            first < WRITERS && body.iter().all(|b| *b == first),
            "a reader saw mixed values"
        );
    }
    let writers = stream::iter(0..WRITERS)
        .map(|id| store.put(&key, vec![id; SIZE]))
        .buffer_unordered(usize::from(WRITERS))
        .collect::<Vec<_>>();
    let readers = stream::iter(0..32)
        .map(|_| store.get(&key))
        .buffer_unordered(8)
        .collect::<Vec<_>>();
    let (written, read) = tokio::join!(writers, readers);
    for result in written {
        result.expect("a concurrent put failed");
    }
    for body in read.into_iter().filter_map(|r| r.expect("a concurrent get failed")) {
        check(&body);
    }
    check(&store.get(&key).await.expect("get").expect("the object exists"));
    assert_eq!(
        store
            .list(key.trim_end_matches("contended.bin"))
            .await
            .expect("list")
            .len(),
        1
    );
}

/// An object and a folder of the same name (`k` and `k/x`): S3 keeps both, the local store
/// refuses the second with a permanent error. Either way the first object is intact.
pub async fn name_conflicts_never_corrupt(store: &dyn FileStore) {
    let dir = fresh_folder();
    let (object, below) = (format!("{dir}k"), format!("{dir}k/x"));
    put(store, &object, b"object").await;
    match store.put(&below, b"below".to_vec()).await {
        Ok(()) => assert_eq!(store.get(&below).await.expect("get").as_deref(), Some(&b"below"[..])),
        Err(e) => assert!(!e.is_retryable(), "a conflict is not transient: {e:?}"),
    }
    assert_eq!(store.get(&object).await.expect("get").as_deref(), Some(&b"object"[..]));
}
