//! An S3 server of a scenario's own, so a fault can stop and start it while the S3 server of
//! the rest of the suite carries on.
//!
//! It is moto's, from the virtualenv `.ci/run` installs it into (`SEDIMENT_VENV`, default
//! `~/.cache/sediment-venv`), run by a small wrapper (`s3_server.py`) on a port of its own.
//! moto keeps buckets and objects in the memory of its process, so ending the process would
//! lose them all: the wrapper stops serving instead (the port refuses connections and open
//! ones are cut) and keeps the data, as `rabbitmqctl stop_app` keeps a node. Dropping a
//! [`PrivateS3`] ends the process.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use shared::files::{S3Credentials, S3FileStore, S3Settings};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Mutex;

use crate::process::free_port;

/// The wrapper, written into the scenario's directory to run.
const SCRIPT: &str = include_str!("s3_server.py");
/// The bucket the scenario's deployment keeps its files in.
const BUCKET: &str = "sediment-chaos";
/// Longest wait for the server to start (moto imports for a few seconds) or to switch.
const SWITCH_TIMEOUT: Duration = Duration::from_secs(60);

/// A running private S3 server.
pub struct PrivateS3 {
    port: u16,
    control: Mutex<(ChildStdin, Lines<BufReader<ChildStdout>>)>,
    _child: Child,
    dir: tempfile::TempDir,
}

impl PrivateS3 {
    /// Starts the server and creates the deployment's bucket.
    pub async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("sediment-chaos-s3-")
            .tempdir()
            .context("make the server's directory")?;
        let script = dir.path().join("s3_server.py");
        std::fs::write(&script, SCRIPT).context("write the server's wrapper")?;
        let python = venv().join("bin/python");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("server.log")).context("create the server's log")?;
        let mut child = tokio::process::Command::new(&python)
            .arg(&script)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("run {} (moto is installed by .ci/run)", python.display()))?;
        let stdin = child.stdin.take().context("the server's stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("the server's stdout")?).lines();
        let server = Self {
            port,
            control: Mutex::new((stdin, stdout)),
            _child: child,
            dir,
        };
        server.answer("started").await.with_context(|| {
            let log = std::fs::read_to_string(server.dir.path().join("server.log")).unwrap_or_default();
            format!("start moto's S3 server: {}", log.trim())
        })?;
        S3FileStore::new(&server.settings())
            .context("configure an S3 client")?
            .create_bucket()
            .await
            .context("create the bucket")?;
        Ok(server)
    }

    /// The deployment's file store on this server: `S3_*` settings (without the prefix).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("S3_BUCKET", BUCKET.to_owned()),
            ("S3_ENDPOINT", self.url()),
            ("S3_ACCESS_KEY_ID", "test".to_owned()),
            ("S3_SECRET_ACCESS_KEY", "test".to_owned()),
        ]
    }

    /// The fault: the server stops serving (connections are refused, open ones cut); returns
    /// once it has.
    pub async fn stop_server(&self) -> anyhow::Result<()> {
        self.command("stop", "stopped").await
    }

    /// Ends the fault: serves again on the same port, with the same objects.
    pub async fn start_server(&self) -> anyhow::Result<()> {
        self.command("start", "started").await
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn settings(&self) -> S3Settings {
        let mut settings = S3Settings::new(BUCKET);
        settings.endpoint = Some(self.url());
        settings.credentials = Some(S3Credentials {
            access_key_id: "test".to_owned(),
            secret_access_key: shared::config::Secret::new("test"),
        });
        settings
    }

    async fn command(&self, command: &str, done: &str) -> anyhow::Result<()> {
        {
            let mut control = self.control.lock().await;
            control
                .0
                .write_all(format!("{command}\n").as_bytes())
                .await
                .context("send the server a command")?;
            control.0.flush().await.context("send the server a command")?;
        }
        self.answer(done).await
    }

    /// Waits for the wrapper's line `expected`.
    async fn answer(&self, expected: &str) -> anyhow::Result<()> {
        let mut control = self.control.lock().await;
        let line = tokio::time::timeout(SWITCH_TIMEOUT, control.1.next_line())
            .await
            .context("no answer from the S3 server")?
            .context("read the S3 server's answer")?
            .context("the S3 server exited")?;
        anyhow::ensure!(line == expected, "the S3 server answered {line:?}, not {expected:?}");
        Ok(())
    }
}

fn venv() -> PathBuf {
    match std::env::var_os("SEDIMENT_VENV") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache/sediment-venv"),
    }
}
