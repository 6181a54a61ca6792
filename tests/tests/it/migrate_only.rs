//! `sediment migrate`, the Helm chart's migration hook: the real binary applies every migration
//! to an empty database and exits 0, is a no-op the second time, and fails (non-zero, with a
//! message) when it cannot do its job, so a `helm upgrade` stops before any pod rolls.
//! The same binary also shows it runs on the allocator every sediment binary declares.

use std::process::{Output, Stdio};
use std::time::Duration;

use integration_tests::pg::TestDb;
use tokio::process::Command;

/// The `sediment` binary, built from api/src/main.rs inside this package.
const BIN: &str = env!("CARGO_BIN_EXE_sediment-api");

async fn sediment(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SEDIMENT_LOG", "info")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("sediment exits within 60 s")
        .expect("run the sediment binary")
}

/// How many migration files the repository holds.
fn migration_files() -> i64 {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    std::fs::read_dir(&dir)
        .expect("read migrations/")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".sql"))
        .count() as i64
}

#[tokio::test]
async fn migrate_applies_the_schema_and_exits() {
    let db = TestDb::create().await;
    // The broker URL is validated, never dialled: migrating needs Postgres only.
    let env = [
        ("SEDIMENT_DATABASE_URL", db.url.as_str()),
        ("SEDIMENT_AMQP_URL", "amqp://127.0.0.1:1/%2f"),
    ];

    let first = sediment(&["migrate"], &env).await;
    let stderr = String::from_utf8_lossy(&first.stderr).into_owned() + &String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "migrate failed: {stderr}");
    assert!(stderr.contains("migrations are up to date"), "{stderr}");

    let pg = db.client().await;
    let applied: i64 = pg
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(applied, migration_files());
    let messages: Option<String> = pg
        .query_one("SELECT to_regclass('public.messages')::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(messages.as_deref(), Some("messages"));

    // A second run (every `helm upgrade`) finds nothing to do.
    let second = sediment(&["migrate"], &env).await;
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    let again: i64 = pg
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(again, applied);
}

#[tokio::test]
async fn migrate_fails_loudly_when_it_cannot_migrate() {
    // No database configured: the embedded deployment has nothing to migrate this way.
    let embedded = sediment(&["migrate"], &[]).await;
    assert!(!embedded.status.success());
    let stderr = String::from_utf8_lossy(&embedded.stderr);
    assert!(stderr.contains("SEDIMENT_DATABASE_URL"), "{stderr}");

    // Postgres unreachable: the hook Job fails, and Helm stops the upgrade.
    let unreachable = sediment(
        &["migrate"],
        &[
            ("SEDIMENT_DATABASE_URL", "postgres://postgres@127.0.0.1:1/postgres"),
            ("SEDIMENT_AMQP_URL", "amqp://127.0.0.1:1/%2f"),
        ],
    )
    .await;
    assert!(!unreachable.status.success());
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert!(stderr.contains("Postgres"), "{stderr}");

    let unknown = sediment(&["migrat"], &[]).await;
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("unrecognized subcommand 'migrat'") && stderr.contains("Usage: sediment"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_binary_allocates_with_jemalloc() {
    // jemalloc prints its statistics at exit when asked to; glibc's malloc knows no such
    // setting. The name carries the prefix of tikv-jemallocator's symbols.
    let conf = [
        ("_RJEM_MALLOC_CONF", "stats_print:true"),
        ("MALLOC_CONF", "stats_print:true"),
    ];
    let out = sediment(&["no-such-command"], &conf).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unrecognized subcommand"), "{stderr}");
    assert!(
        stderr.contains("jemalloc statistics"),
        "the sediment binary does not run on jemalloc: {stderr}"
    );
    assert!(
        stderr.contains("opt.background_thread: true"),
        "jemalloc purges on the threads that free: {stderr}"
    );
}
