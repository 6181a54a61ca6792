//! Binaries run as real processes: a free port, a graceful stop, and the API as a child
//! process for the benchmarks.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shared::domain::Tenant;
use shared::metrics::INDEX_OPTIMIZING;
use shared::store::INDEX_CONSUMER;
use tokio::process::Child;

use crate::app::TenantHeaders as _;

/// A port nothing listens on right now (the OS picks it).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// Sends SIGTERM and asserts the process exits 0 within 10 s (the drain deadline).
pub async fn sigterm_and_wait(child: Child) {
    sigterm_within(child, Duration::from_secs(10)).await;
}

/// Sends SIGTERM and asserts the process exits 0 within `deadline`.
pub async fn sigterm_within(mut child: Child, deadline: Duration) {
    let pid = child.id().expect("pid");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = tokio::time::timeout(deadline, child.wait())
        .await
        .unwrap_or_else(|_| panic!("no exit within {deadline:?} of SIGTERM"))
        .expect("wait");
    assert!(exit.success(), "exit status {exit:?} after SIGTERM");
}

/// How a process ended after SIGTERM.
#[derive(Debug, Clone, Copy)]
pub struct Stopped {
    /// Its exit status; `None` if it had not exited within the bound (it was SIGKILLed then).
    pub status: Option<std::process::ExitStatus>,
    /// From the SIGTERM to the exit, or to the bound.
    pub after: Duration,
}

impl Stopped {
    /// Exited by itself, with status 0.
    pub fn clean(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

/// Sends SIGTERM and waits at most `bound` for the exit, SIGKILLing the process past it: a
/// graceful stop measured and reported rather than asserted, so a scenario can carry on past
/// one that hangs.
pub async fn terminate(child: &mut Child, bound: Duration) -> Stopped {
    let sent = Instant::now();
    if let Some(pid) = child.id() {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }
    match tokio::time::timeout(bound, child.wait()).await {
        Ok(status) => Stopped {
            status: Some(status.expect("wait")),
            after: sent.elapsed(),
        },
        Err(_) => {
            let _ = child.kill().await;
            Stopped {
                status: None,
                after: sent.elapsed(),
            }
        }
    }
}

/// A process's `/proc/<pid>/status`, read once.
pub struct ProcStatus(String);

impl ProcStatus {
    /// `None` once the process is gone, or off Linux.
    pub fn read(pid: &str) -> Option<Self> {
        std::fs::read_to_string(format!("/proc/{pid}/status")).ok().map(Self)
    }

    /// The number of a field (`"Threads:"`, or `"VmRSS:"` in kB); `None` when it is absent.
    pub fn field(&self, name: &str) -> Option<f64> {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// A field given in kB, in MB.
    pub fn mb(&self, name: &str) -> Option<f64> {
        Some(self.field(name)? / 1024.0)
    }
}

/// `sediment-api` beside the running binary, where cargo puts it for the binaries of this
/// package (integration tests use `CARGO_BIN_EXE_sediment-api` instead).
pub fn sibling_binary() -> std::path::PathBuf {
    std::env::current_exe()
        .expect("this binary")
        .with_file_name("sediment-api")
}

/// The API binary (`sediment-api`, the test copy of `sediment`) as a child process, for the
/// benchmarks that measure the server's own CPU and memory apart from the client's, and for
/// the fault scenarios (`chaos`) that kill and restart it.
pub struct ApiProcess {
    child: Child,
    pid: String,
    pub base: String,
    pub client: reqwest::Client,
}

impl ApiProcess {
    /// Starts the binary beside the running one with only `env` (and `HOME`, `PATH`) set, on a
    /// free loopback port, its log appended to `log`; waits until `/readyz` answers 200 and
    /// returns it with how long that took.
    pub async fn start(env: &[(&str, String)], log: &Path) -> (Self, Duration) {
        Self::start_at(&sibling_binary(), free_port(), env, log).await
    }

    /// [`ApiProcess::start`] of the binary `bin` on `port`: a restarted server keeps its
    /// address, so a client's load carries on against the same URL.
    pub async fn start_at(bin: &Path, port: u16, env: &[(&str, String)], log: &Path) -> (Self, Duration) {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the server log");
        let mut command = tokio::process::Command::new(bin);
        command
            .env_clear()
            .env("HOME", std::env::var_os("HOME").unwrap_or_default())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("SEDIMENT_LISTEN", format!("127.0.0.1:{port}"))
            .envs(env.iter().map(|(k, v)| (format!("SEDIMENT_{k}"), v)))
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true);
        let started = Instant::now();
        let mut child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "start {}: {e} (cargo build --release -p integration-tests --bin sediment-api)",
                bin.display()
            )
        });
        let pid = child.id().expect("pid").to_string();
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the server exited with {status}; its log is {}", log.display());
            }
            let ready = client.get(format!("{base}/readyz")).send().await;
            if ready.is_ok_and(|r| r.status() == 200) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "not ready after 10 minutes"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let server = Self {
            child,
            pid,
            base,
            client,
        };
        (server, started.elapsed())
    }

    /// SIGTERM, then waits up to 2 minutes for exit status 0 (the index flushes on the way out).
    pub async fn stop(self) {
        sigterm_within(self.child, Duration::from_secs(120)).await;
    }

    /// SIGTERM, waiting at most `bound` for the exit ([`terminate`]).
    pub async fn terminate(mut self, bound: Duration) -> Stopped {
        terminate(&mut self.child, bound).await
    }

    /// SIGKILL, then waits for the process to be gone: a crash, with no chance to flush.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("SIGKILL the server");
    }

    /// The server's process id, for reading its `/proc` entries.
    pub fn pid(&self) -> &str {
        &self.pid
    }

    /// User plus system CPU seconds the server has spent so far.
    pub fn cpu_seconds(&self) -> f64 {
        crate::cpu::process_seconds(&self.pid).unwrap_or(f64::NAN)
    }

    /// `rss 1234 MB (anonymous 800, files 434; peak 1300)` from `/proc/<pid>/status`: the index
    /// maps its files, so file-backed pages count apart from the heap.
    pub fn memory(&self) -> String {
        let status = ProcStatus::read(&self.pid);
        let mb = |field: &str| status.as_ref().and_then(|s| s.mb(field)).unwrap_or(f64::NAN);
        format!(
            "rss {:.0} MB (anonymous {:.0}, files {:.0}; peak {:.0})",
            mb("VmRSS:"),
            mb("RssAnon:"),
            mb("RssFile:"),
            mb("VmHWM:")
        )
    }

    /// Appends `messages` to `session` as `t`; asserts 201.
    pub async fn append(&self, t: &Tenant, session: &str, messages: Vec<Value>) {
        let response = self
            .client
            .post(format!("{}/v1/sessions/{session}/messages", self.base))
            .tenant_headers(t)
            .json(&json!({ "messages": messages }))
            .send()
            .await
            .expect("append");
        assert_eq!(
            response.status(),
            201,
            "append: {}",
            response.text().await.unwrap_or_default()
        );
    }

    /// `consumer`'s lag in turns (`index`, `extract`), from `/ops/state`.
    pub async fn lag(&self, consumer: &str) -> i64 {
        self.try_lag(consumer)
            .await
            .unwrap_or_else(|| panic!("no lag for {consumer} from {}/ops/state", self.base))
    }

    /// [`ApiProcess::lag`], or `None` when the server or its store does not answer (a fault
    /// is in progress).
    pub async fn try_lag(&self, consumer: &str) -> Option<i64> {
        let state = self.ops_state().await?;
        state["lag"].as_array()?.iter().find(|r| r["consumer"] == consumer)?["turns"].as_i64()
    }

    /// The `/ops/state` body, or `None` when the server does not answer with one.
    pub async fn ops_state(&self) -> Option<Value> {
        let response = self.client.get(format!("{}/ops/state", self.base)).send().await.ok()?;
        response.json().await.ok()
    }

    /// The `/metrics` text, empty when the server does not answer.
    pub async fn metrics(&self) -> String {
        match self.client.get(format!("{}/metrics", self.base)).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Waits until the index has caught up with the store and no index optimizer run is in
    /// progress, three checks half a second apart in a row.
    pub async fn wait_indexed(&self) {
        let optimizing = format!("{INDEX_OPTIMIZING} 1");
        let mut quiet = 0;
        while quiet < 3 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let metrics = self
                .client
                .get(format!("{}/metrics", self.base))
                .send()
                .await
                .expect("metrics")
                .text()
                .await
                .expect("metrics body");
            let busy = metrics.lines().any(|line| line.trim() == optimizing);
            quiet = if !busy && self.lag(INDEX_CONSUMER).await == 0 {
                quiet + 1
            } else {
                0
            };
        }
    }
}

/// A worker binary (`sediment-test-layers scene`, ...) as a child process, probed on its side
/// port: for the fault scenarios that watch workers of their own through a fault.
pub struct WorkerProcess {
    child: Child,
    /// `http://127.0.0.1:<side port>`: `/healthz`, `/readyz`, `/metrics`.
    pub health: String,
    client: reqwest::Client,
}

impl WorkerProcess {
    /// Starts `bin` with `args` and only `env` (prefixed `SEDIMENT_`, plus `HOME` and `PATH`),
    /// its side port on a free loopback port and its log appended to `log`; waits until
    /// `/readyz` answers 200.
    pub async fn start(bin: &Path, args: &[&str], env: &[(&str, String)], log: &Path) -> Self {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the worker log");
        let listen = format!("127.0.0.1:{}", free_port());
        let mut child = tokio::process::Command::new(bin)
            .args(args)
            .env_clear()
            .env("HOME", std::env::var_os("HOME").unwrap_or_default())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("SEDIMENT_WORKER_HEALTH_LISTEN", &listen)
            .envs(env.iter().map(|(k, v)| (format!("SEDIMENT_{k}"), v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let started = Instant::now();
        let client = reqwest::Client::new();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{} exited with {status}; its log is {}", bin.display(), log.display());
            }
            let ready = client.get(format!("http://{listen}/readyz")).send().await;
            if ready.is_ok_and(|r| r.status() == 200) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{} {args:?} not ready after 2 minutes",
                bin.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            child,
            health: format!("http://{listen}"),
            client,
        }
    }

    /// The status of `GET path` on the side port (`/readyz`), or `None` without an answer.
    pub async fn probe(&self, path: &str) -> Option<u16> {
        let response = self.client.get(format!("{}{path}", self.health)).send().await.ok()?;
        Some(response.status().as_u16())
    }

    /// The `/metrics` text, empty without an answer.
    pub async fn metrics(&self) -> String {
        match self.client.get(format!("{}/metrics", self.health)).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// SIGTERM, then waits up to 2 minutes for exit status 0.
    pub async fn stop(self) {
        sigterm_within(self.child, Duration::from_secs(120)).await;
    }

    /// SIGTERM, waiting at most `bound` for the exit ([`terminate`]); start a new one after.
    pub async fn terminate(&mut self, bound: Duration) -> Stopped {
        terminate(&mut self.child, bound).await
    }

    /// SIGKILL, then waits for the process to be gone: a crash mid-run, leases left held.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("SIGKILL the worker");
    }

    /// SIGSTOP: the process stops wherever it is, keeping its connections and whatever it
    /// holds, as a long GC pause or a frozen VM would; [`WorkerProcess::resume`] lets it go on.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`WorkerProcess::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the worker is running").to_string();
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}: {status}");
    }
}

/// The sum of every sample of counter or gauge `name` in Prometheus text `metrics` whose
/// labels contain each of `labels` (`result="failed"`); 0 when there is none.
pub fn metric_sum(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            if !(rest.is_empty() || rest.starts_with('{')) || !labels.iter().all(|l| rest.contains(l)) {
                return None;
            }
            value.parse::<f64>().ok()
        })
        .fold(0.0, |total, value| total + value)
}
