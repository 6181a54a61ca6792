//! The `FileStore` conformance suite on both backends, one test per check and backend: the
//! local directory in a temp dir, and S3 on a fresh root prefix of the test server's bucket
//! (`SEDIMENT_TEST_S3_URL`; skipped loudly without it, unless `SEDIMENT_REQUIRE_S3` is set).
//! Plus what only S3 can get wrong: an unreachable endpoint, a missing bucket, root prefixes.

use std::time::{Duration, Instant};

use integration_tests::s3::{self as test_s3, TestBucket};
use shared::files::{testsuite, FileError, FileStore, LocalFileStore, S3FileStore, S3Settings};

/// One test per check for each backend: `file_store::local::<check>`, `file_store::s3::<check>`.
macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod local {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let dir = tempfile::tempdir().expect("create a temp dir");
                    let store = LocalFileStore::open(&dir.path().join("files")).expect("open the local store");
                    testsuite::$check(&store).await;
                }
            )*
        }

        mod s3 {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let Some(bucket) = TestBucket::start(stringify!($check)).await else {
                        return;
                    };
                    testsuite::$check(bucket.store()).await;
                    bucket.cleanup().await;
                }
            )*
        }
    };
}

conformance!(
    check_answers,
    put_get_round_trip,
    overwrite_replaces,
    missing_key_is_none,
    list_is_recursive_sorted_and_prefix_exact,
    list_pages_past_a_thousand,
    delete_is_idempotent,
    delete_prefix_removes_only_its_folder,
    copy_prefix_copies_the_folder,
    snapshot_then_restore_gives_back_the_snapshot,
    invalid_keys_are_rejected,
    concurrent_puts_leave_one_complete_value,
    name_conflicts_never_corrupt,
);

/// Settings for an endpoint where nothing listens, with short timeouts.
fn unreachable_settings() -> S3Settings {
    let mut settings = S3Settings::new("sediment-test");
    // Port 1 (tcpmux) is closed on any machine that runs these tests.
    settings.endpoint = Some("http://127.0.0.1:1".to_owned());
    settings.credentials = Some(shared::files::S3Credentials {
        access_key_id: "test".to_owned(),
        secret_access_key: shared::config::Secret::new("test"),
    });
    settings.connect_timeout = Duration::from_secs(1);
    settings.operation_timeout = Duration::from_secs(10);
    settings
}

#[tokio::test]
async fn s3_unreachable_endpoint_is_unavailable_quickly() {
    let store = S3FileStore::new(&unreachable_settings()).expect("configure the client");
    let started = Instant::now();
    let put = store.put("a/b.md", b"x".to_vec()).await;
    let check = store.check().await;
    let get = store.get("a/b.md").await;
    for (what, error) in [("put", put.err()), ("check", check.err()), ("get", get.err())] {
        match error {
            Some(FileError::Unavailable(_)) => {}
            other => panic!("{what}: expected Unavailable, got {other:?}"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "three calls took {:?}: a closed port must fail fast",
        started.elapsed()
    );
}

#[tokio::test]
async fn s3_missing_bucket_is_a_permanent_error() {
    let Some(mut settings) = test_s3::settings(&test_s3::unique_root("missing-bucket")) else {
        return;
    };
    settings.bucket = format!("sediment-missing-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let store = S3FileStore::new(&settings).expect("configure the client");
    let check = store.check().await.expect_err("no such bucket");
    assert!(matches!(check, FileError::Backend(_)), "{check:?}");
    let put = store.put("a.md", b"x".to_vec()).await.expect_err("no such bucket");
    assert!(!put.is_retryable(), "{put:?}");
    let message = shared::runtime::error_chain(&put);
    assert!(
        message.contains(&settings.bucket),
        "the error names the bucket: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_root_prefixes_keep_stores_apart() {
    let Some(first) = TestBucket::start("root-prefix-a").await else {
        return;
    };
    let Some(second) = TestBucket::start("root-prefix-b").await else {
        return;
    };
    first.store().put("scenes/a.md", b"a".to_vec()).await.unwrap();
    second.store().put("scenes/b.md", b"b".to_vec()).await.unwrap();
    let keys = |objects: Vec<shared::files::ObjectMeta>| objects.into_iter().map(|o| o.key).collect::<Vec<_>>();
    assert_eq!(keys(first.store().list("").await.unwrap()), ["scenes/a.md"]);
    assert_eq!(keys(second.store().list("").await.unwrap()), ["scenes/b.md"]);
    assert_eq!(second.store().get("scenes/a.md").await.unwrap(), None);
    // The same prefix seen by a second client is the same store.
    let again = S3FileStore::new(first.settings()).unwrap();
    assert_eq!(again.get("scenes/a.md").await.unwrap().as_deref(), Some(&b"a"[..]));
    first.cleanup().await;
    second.cleanup().await;
}
