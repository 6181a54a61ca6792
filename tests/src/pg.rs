//! Per-test Postgres databases.
//!
//! [`TestDb::create`] makes a fresh, uniquely named database on the server named by
//! `SEDIMENT_TEST_DATABASE_URL` (default [`DEFAULT_ADMIN_URL`]) and drops it, with any
//! connections still open to it, when the `TestDb` is dropped. A missing or unreachable server
//! fails the test with a message saying so: these tests never skip.

use std::str::FromStr as _;

use shared::store::PostgresStore;
use tokio_postgres::NoTls;
use uuid::Uuid;

/// The variable naming the server (and a database to connect to for administration).
pub const DATABASE_URL_ENV: &str = "SEDIMENT_TEST_DATABASE_URL";
/// Used when [`DATABASE_URL_ENV`] is not set.
pub const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// Every test database name starts with this, so leftovers are easy to find.
pub const DB_PREFIX: &str = "sediment_test_";

/// A throwaway database, dropped on `Drop`.
pub struct TestDb {
    /// Connection URL of the new database.
    pub url: String,
    name: String,
    admin_url: String,
}

impl std::fmt::Debug for TestDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDb").field("url", &self.url).finish_non_exhaustive()
    }
}

impl TestDb {
    /// Creates an empty database (no schema). Panics, loudly, when Postgres is unreachable.
    pub async fn create() -> TestDb {
        let admin_url = std::env::var(DATABASE_URL_ENV).unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_owned());
        let name = format!("{DB_PREFIX}{}", Uuid::new_v4().simple());
        let admin = admin_client(&admin_url).await.unwrap_or_else(|e| {
            panic!(
                "cannot reach the test Postgres at {admin_url} ({e:#}); start it or set \
                 {DATABASE_URL_ENV}"
            )
        });
        admin
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await
            .unwrap_or_else(|e| panic!("failed to create test database {name}: {e:#}"));
        let url = database_url(&admin_url, &name);
        TestDb { url, name, admin_url }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A plain connection to this database, beside any store's pool, for checks the store
    /// does not offer.
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url, NoTls)
            .await
            .expect("connect to the test database");
        tokio::spawn(connection);
        client
    }

    /// Connects a [`PostgresStore`] to this database and applies the migrations.
    pub async fn store(&self) -> PostgresStore {
        let store = PostgresStore::connect(&self.url, 16)
            .await
            .expect("connect to the test database");
        store.migrate().await.expect("migrate the test database");
        store
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop runs inside the test's runtime, which cannot be blocked on; a thread with its
        // own runtime does the async cleanup and is joined, so the database is gone when the
        // test ends.
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async {
                let admin = admin_client(&admin_url).await?;
                admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                    .await?;
                anyhow::Ok(())
            })
        });
        match cleanup.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("failed to drop test database {}: {e:#}", self.name),
            Err(_) => eprintln!("failed to drop test database {}: cleanup panicked", self.name),
        }
    }
}

async fn admin_client(admin_url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let mut config = tokio_postgres::Config::from_str(admin_url)?;
    config.connect_timeout(std::time::Duration::from_secs(10));
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("test postgres admin connection failed: {e:#}");
        }
    });
    Ok(client)
}

/// Points `admin_url` (a URL or a key=value string) at database `name`.
fn database_url(admin_url: &str, name: &str) -> String {
    let Some(rest) = admin_url
        .strip_prefix("postgres://")
        .map(|r| ("postgres://", r))
        .or_else(|| admin_url.strip_prefix("postgresql://").map(|r| ("postgresql://", r)))
    else {
        // key=value form: a later key wins.
        return format!("{admin_url} dbname={name}");
    };
    let (scheme, rest) = rest;
    let (before_query, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    let authority = before_query
        .split_once('/')
        .map_or(before_query, |(authority, _)| authority);
    match query {
        Some(query) => format!("{scheme}{authority}/{name}?{query}"),
        None => format!("{scheme}{authority}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::database_url;

    #[test]
    fn replaces_the_database_of_a_url() {
        assert_eq!(
            database_url("postgres://postgres@127.0.0.1:5432/postgres", "t1"),
            "postgres://postgres@127.0.0.1:5432/t1"
        );
        assert_eq!(
            database_url("postgresql://u:p@h/db?sslmode=disable", "t1"),
            "postgresql://u:p@h/t1?sslmode=disable"
        );
        assert_eq!(database_url("postgres://h:1", "t1"), "postgres://h:1/t1");
        assert_eq!(database_url("host=h user=u", "t1"), "host=h user=u dbname=t1");
    }
}
