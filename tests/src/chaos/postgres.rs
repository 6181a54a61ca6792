//! A Postgres cluster of a scenario's own, so a fault can stop and start it while the
//! machine's Postgres (and every other test on it) carries on.
//!
//! `initdb` makes it in a temporary directory with trust auth; it listens on 127.0.0.1 on a
//! port of its own, with its socket in that directory. The programs run as the `postgres` user
//! (`runuser`, so the scenario must run as root). Dropping a [`PrivatePostgres`] stops the
//! server at once and removes the directory, also when the scenario panicked.

use std::process::Stdio;

use anyhow::Context as _;
use tempfile::TempDir;

use super::command as run;
use crate::process::free_port;

/// Where Debian puts the server's programs.
const BIN: &str = "/usr/lib/postgresql/15/bin";

/// A running private Postgres cluster.
pub struct PrivatePostgres {
    port: u16,
    dir: TempDir,
}

impl PrivatePostgres {
    /// Makes the cluster and starts it.
    pub async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("sediment-chaos-postgres-")
            .tempdir()
            .context("make the cluster's directory")?;
        run("chown", &["postgres", &dir.path().display().to_string()]).await?;
        let postgres = Self { port: free_port(), dir };
        let data = postgres.data();
        postgres
            .as_postgres("initdb", &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"])
            .await?;
        postgres.start_server().await?;
        Ok(postgres)
    }

    /// The URL of its `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The fault: a fast shutdown (open connections are closed); returns once it is down.
    pub async fn stop_server(&self) -> anyhow::Result<()> {
        let data = self.data();
        self.as_postgres("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"])
            .await
    }

    /// Starts the server; returns once it accepts connections.
    pub async fn start_server(&self) -> anyhow::Result<()> {
        let data = self.data();
        let log = self.dir.path().join("server.log").display().to_string();
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        self.as_postgres("pg_ctl", &["-D", &data, "-o", &options, "-l", &log, "-w", "start"])
            .await
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    async fn as_postgres(&self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let program = format!("{BIN}/{program}");
        let mut all = vec!["-u", "postgres", "--", program.as_str()];
        all.extend_from_slice(args);
        run("runuser", &all).await
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--", &format!("{BIN}/pg_ctl")])
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
