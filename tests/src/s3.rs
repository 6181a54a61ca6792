//! An S3-protocol server for the file store tests. Each [`TestBucket`] is a fresh root prefix
//! in a shared bucket (created on first use), so tests run in parallel without seeing each
//! other's objects; the prefix is emptied when the test ends ([`TestBucket::cleanup`] or, if
//! the test panicked, `Drop`).
//!
//! The server comes from `SEDIMENT_TEST_S3_URL` (CI starts moto's server on
//! `http://127.0.0.1:9000`). Without it the S3 tests skip with a loud message, unless
//! `SEDIMENT_REQUIRE_S3` is set, which turns the skip into a failure.

use shared::files::{FileStore as _, S3Credentials, S3FileStore, S3Settings};
use shared::runtime::error_chain;

/// The server's URL, e.g. `http://127.0.0.1:9000`.
pub const URL_ENV: &str = "SEDIMENT_TEST_S3_URL";
/// Set to make a missing server fail the S3 tests instead of skipping them.
pub const REQUIRE_ENV: &str = "SEDIMENT_REQUIRE_S3";
/// Overrides the bucket the tests share (default [`DEFAULT_BUCKET`]).
pub const BUCKET_ENV: &str = "SEDIMENT_TEST_S3_BUCKET";
/// Override the access key (default `test` / `test`, which moto accepts; MinIO wants its own).
pub const ACCESS_KEY_ENV: &str = "SEDIMENT_TEST_S3_ACCESS_KEY_ID";
pub const SECRET_KEY_ENV: &str = "SEDIMENT_TEST_S3_SECRET_ACCESS_KEY";
pub const DEFAULT_BUCKET: &str = "sediment-test";

/// Settings for the test server with root prefix `root`, or `None` (after a loud message)
/// when no server is configured and none is required.
pub fn settings(root: &str) -> Option<S3Settings> {
    let Some(url) = std::env::var(URL_ENV).ok().filter(|url| !url.trim().is_empty()) else {
        assert!(
            std::env::var_os(REQUIRE_ENV).is_none(),
            "{REQUIRE_ENV} is set but {URL_ENV} is not: start an S3 server (moto_server -p 9000) and set it"
        );
        eprintln!(
            "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
             !!! SKIPPED: {URL_ENV} is not set; the S3 file store test did not run.\n\
             !!! Start one with `moto_server -p 9000` and set {URL_ENV}=http://127.0.0.1:9000.\n\
             !!! CI sets {REQUIRE_ENV} and fails instead.\n\
             !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
        );
        return None;
    };
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
    let mut settings = S3Settings::new(var(BUCKET_ENV, DEFAULT_BUCKET));
    settings.endpoint = Some(url.trim().to_owned());
    settings.credentials = Some(S3Credentials {
        access_key_id: var(ACCESS_KEY_ENV, "test"),
        secret_access_key: shared::config::Secret::new(var(SECRET_KEY_ENV, "test")),
    });
    settings.root_prefix = root.to_owned();
    Some(settings)
}

/// A root prefix unique to one run of `test`: `sediment-test/{test}-{random}/`.
pub fn unique_root(test: &str) -> String {
    let test: String = test
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .take(60)
        .collect();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("sediment-test/{test}-{}/", &random[..12])
}

/// One test's share of the bucket.
pub struct TestBucket {
    store: S3FileStore,
    settings: S3Settings,
    cleaned: bool,
}

impl TestBucket {
    /// A store on a fresh root prefix for `test`, creating the bucket if needed; `None` when
    /// the S3 tests are skipped. Panics when the server does not answer.
    pub async fn start(test: &str) -> Option<TestBucket> {
        let settings = settings(&unique_root(test))?;
        let store = S3FileStore::new(&settings).expect("configure the S3 test client");
        // Idempotent, and safe when tests race: "already owned by you" counts as done.
        if let Err(e) = store.create_bucket().await {
            panic!(
                "creating bucket {} on {} failed: {}",
                settings.bucket,
                settings.endpoint.as_deref().unwrap_or_default(),
                error_chain(&e)
            );
        }
        Some(TestBucket {
            store,
            settings,
            cleaned: false,
        })
    }

    pub fn store(&self) -> &S3FileStore {
        &self.store
    }

    /// The settings of this test's store, to build more stores on the same prefix.
    pub fn settings(&self) -> &S3Settings {
        &self.settings
    }

    /// Deletes every object under this test's root prefix.
    pub async fn cleanup(mut self) {
        self.cleaned = true;
        delete_root(&self.settings).await;
    }
}

impl Drop for TestBucket {
    /// Runs when the test panicked before `cleanup`: deletes on a thread of its own, since the
    /// test's runtime may be gone or be the one blocked here.
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        let settings = self.settings.clone();
        let cleaner = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            if let Ok(runtime) = runtime {
                runtime.block_on(delete_root(&settings));
            }
        });
        let _ = cleaner.join();
    }
}

/// Best effort: a leftover prefix costs space, not correctness (every test has its own).
async fn delete_root(settings: &S3Settings) {
    let mut whole_bucket = settings.clone();
    whole_bucket.root_prefix = String::new();
    let Ok(store) = S3FileStore::new(&whole_bucket) else {
        return;
    };
    if let Err(e) = store.delete_prefix(&settings.root_prefix).await {
        eprintln!(
            "cleaning up S3 prefix {} failed: {}",
            settings.root_prefix,
            error_chain(&e)
        );
    }
}
