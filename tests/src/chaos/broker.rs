//! A RabbitMQ node of a scenario's own, so a fault can stop and start it while the machine's
//! broker (and every other test on it) carries on.
//!
//! The node runs from a temporary directory with its own name, AMQP port and distribution
//! port; `RABBITMQ_CONFIG_FILE` points at a config of its own because the machine's
//! `/etc/rabbitmq/rabbitmq.conf` pins 5672. It must be started as root (the scripts switch to
//! the `rabbitmq` user). Dropping a [`PrivateBroker`] halts the node and removes the directory,
//! also when the scenario panicked.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use tempfile::TempDir;

use super::command as run;
use crate::process::free_port;

/// Longest wait for the node to boot; about 6.5 s on an idle 2-core machine.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// A running private RabbitMQ node.
pub struct PrivateBroker {
    node: String,
    port: u16,
    dir: TempDir,
}

impl PrivateBroker {
    /// Boots a node named after `scenario` and waits until its applications run.
    pub async fn start(scenario: &str) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("sediment-chaos-rabbitmq-")
            .tempdir()
            .context("make the node's directory")?;
        let random = uuid::Uuid::new_v4().simple().to_string();
        let node = format!("sediment-chaos-{scenario}-{}@localhost", &random[..8]);
        let port = free_port();
        std::fs::write(dir.path().join("plugins"), "[].\n").context("write the plugins file")?;
        std::fs::write(
            dir.path().join("rabbitmq.conf"),
            format!("listeners.tcp.default = 127.0.0.1:{port}\nloopback_users = none\n"),
        )
        .context("write the node's config")?;
        run("chown", &["-R", "rabbitmq", &path(dir.path())]).await?;
        // Set before the first await that can fail, so a failed boot still halts the node.
        let broker = Self { node, port, dir };
        let d = |name: &str| path(&broker.dir.path().join(name));
        let status = tokio::process::Command::new("rabbitmq-server")
            .arg("-detached")
            .env("RABBITMQ_NODENAME", &broker.node)
            .env("RABBITMQ_CONFIG_FILE", d("rabbitmq.conf"))
            .env("RABBITMQ_DIST_PORT", free_port().to_string())
            .env("RABBITMQ_MNESIA_BASE", d("mnesia"))
            .env("RABBITMQ_LOG_BASE", d("log"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d("plugins"))
            .env("RABBITMQ_PID_FILE", d("pid"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .context("run rabbitmq-server (as root)")?;
        anyhow::ensure!(status.success(), "rabbitmq-server -detached exited with {status}");
        let timeout = BOOT_TIMEOUT.as_secs().to_string();
        broker.ctl(&["wait", &d("pid"), "--timeout", &timeout]).await?;
        Ok(broker)
    }

    /// The node's AMQP URL, as the guest user.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// The fault: stops the RabbitMQ application (the node stays up), which closes the port
    /// and drops every connection.
    pub async fn stop_app(&self) -> anyhow::Result<()> {
        self.ctl(&["stop_app"]).await
    }

    /// Ends the fault: starts the application again; returns once it accepts connections.
    pub async fn start_app(&self) -> anyhow::Result<()> {
        self.ctl(&["start_app"]).await
    }

    async fn ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut all = vec!["-n", self.node.as_str()];
        all.extend_from_slice(args);
        run("rabbitmqctl", &all).await
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        let stopped = std::process::Command::new("rabbitmqctl")
            .args(["-n", &self.node, "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !stopped {
            // The node never booted or does not answer: end it by its pid, if it wrote one.
            if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("pid")) {
                let _ = std::process::Command::new("kill").args(["-KILL", pid.trim()]).status();
            }
        }
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}
