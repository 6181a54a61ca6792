//! The command line's client commands: `sediment ingest|search|recall|memories|scenes|persona|
//! erase|export|import|status|parked`, each a few calls to a running sediment's API
//! (`client::Upstream`).
//!
//! Output is a table for people by default; `--json` prints each answer as one JSON document
//! per line, for scripts. A failure names the call and the API's code
//! (`POST /v1/recall: invalid_request (422): ...`) and exits non-zero.

use std::io::{BufRead, IsTerminal as _, Write};

use anyhow::Context as _;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::client::{encode, query, Upstream};
use crate::extract::{AGENT_HEADER, TASK_HEADER, TEAM_HEADER, USER_HEADER};

/// Turns sent per append by `ingest` (the API takes up to 1000).
const INGEST_BATCH: usize = 500;
/// Longest cell of a table, in characters; `--json` prints everything.
const CELL_CHARS: usize = 80;

/// Where the API is and who calls it.
#[derive(Debug, Args, PartialEq, Eq)]
pub struct Connection {
    /// The sediment to call.
    #[arg(long, env = "SEDIMENT_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The team's API key (or an identity provider's token), when auth is on.
    #[arg(long = "api-key", env = "SEDIMENT_API_KEY", hide_env_values = true)]
    key: Option<String>,
    /// The team (optional with a key: the key decides it).
    #[arg(long, env = "SEDIMENT_TEAM")]
    team: Option<String>,
    #[arg(long, env = "SEDIMENT_AGENT")]
    agent: Option<String>,
    #[arg(long, env = "SEDIMENT_USER")]
    user: Option<String>,
    /// Narrows reads to this task, and stores appended turns under it.
    #[arg(long, env = "SEDIMENT_TASK")]
    task: Option<String>,
    /// Print each answer as one JSON document per line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand, PartialEq, Eq)]
pub enum ClientCommand {
    /// Append turns from a JSONL file (or - for stdin): one turn per line,
    /// {"session_id","role","content","created_at"?,"metadata"?,"client_id"?,"task"?}.
    Ingest {
        #[command(flatten)]
        conn: Connection,
        /// The file, or - for stdin.
        file: String,
    },
    /// Search the turns of past conversations.
    Search {
        #[command(flatten)]
        conn: Connection,
        query: String,
        #[arg(long)]
        session: Option<String>,
        /// keyword, semantic or hybrid (default).
        #[arg(long)]
        strategy: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// What recall would inject before an LLM call for this message.
    Recall {
        #[command(flatten)]
        conn: Connection,
        query: String,
        #[arg(long)]
        session: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// List, show, correct or delete memories.
    Memories {
        #[command(subcommand)]
        action: MemoriesCommand,
    },
    /// List the scenes, or show one.
    Scenes {
        #[command(flatten)]
        conn: Connection,
        /// A scene's id: show its document.
        id: Option<String>,
    },
    /// Show the persona.
    Persona {
        #[command(flatten)]
        conn: Connection,
    },
    /// Erase the user (--user, under the team and agent) from every store, and wait until it is
    /// done.
    Erase {
        #[command(flatten)]
        conn: Connection,
        /// Return once the job is accepted, without waiting.
        #[arg(long)]
        no_wait: bool,
    },
    /// Write the user's (--user) whole memory as one JSONL stream: sessions and turns,
    /// memories with their history and provenance, scenes, the persona. To stdout, or --output.
    Export {
        #[command(flatten)]
        conn: Connection,
        /// Write to this file instead of stdout; it is removed if the export breaks off.
        #[arg(long, short)]
        output: Option<String>,
    },
    /// Load an export stream (a file, or - for stdin) into this sediment, in one transaction.
    /// The owner is the stream's, unless --agent and --user (and --team when no key decides it)
    /// name another. Importing the same stream again changes nothing.
    Import {
        #[command(flatten)]
        conn: Connection,
        /// The file, or - for stdin.
        file: String,
    },
    /// Queues, lag and workers: the ops page's data.
    Status {
        #[command(flatten)]
        conn: Connection,
        /// The ops token, when the API has one (SEDIMENT_OPS_TOKEN).
        #[arg(long = "ops-token", env = "SEDIMENT_OPS_TOKEN", hide_env_values = true)]
        ops_token: Option<String>,
    },
    /// Messages a worker parked: it could not read them (e.g. sent by a newer API during an
    /// upgrade) or they failed for good. Needs the admin key.
    Parked {
        #[command(subcommand)]
        action: ParkedCommand,
    },
}

#[derive(Debug, Subcommand, PartialEq, Eq)]
pub enum ParkedCommand {
    /// Move a worker kind's parked messages back to its queue, oldest first, their attempts
    /// starting again at 1; one the worker still cannot read is parked again.
    Replay {
        #[command(flatten)]
        conn: Connection,
        /// The operator's admin key, in place of --api-key (the admin routes take no team key).
        #[arg(long = "admin-key", env = "SEDIMENT_ADMIN_KEY", hide_env_values = true)]
        admin_key: Option<String>,
        /// index, extract, compact, scene or persona.
        kind: String,
        /// At most this many (1 to 1000; the API's default is 100).
        #[arg(long)]
        limit: Option<u32>,
    },
}

#[derive(Debug, Subcommand, PartialEq, Eq)]
pub enum MemoriesCommand {
    /// A page of memories, newest first.
    List {
        #[command(flatten)]
        conn: Connection,
        #[arg(long)]
        category: Option<String>,
        #[arg(long)]
        session: Option<String>,
        /// active or archived (default: both).
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
        /// The `next` of the previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// One memory with its history and provenance.
    Show {
        #[command(flatten)]
        conn: Connection,
        id: String,
    },
    /// Correct a memory.
    Edit {
        #[command(flatten)]
        conn: Connection,
        id: String,
        #[arg(long)]
        content: Option<String>,
        #[arg(long)]
        category: Option<String>,
        #[arg(long)]
        priority: Option<u8>,
    },
    /// Delete a memory.
    Delete {
        #[command(flatten)]
        conn: Connection,
        id: String,
    },
}

/// A connection's calls.
struct Api {
    upstream: Upstream,
    headers: HeaderMap,
    json: bool,
}

impl Api {
    fn new(conn: &Connection) -> anyhow::Result<Self> {
        let mut headers = HeaderMap::new();
        let pairs = [
            ("authorization", conn.key.as_ref().map(|k| format!("Bearer {k}"))),
            (TEAM_HEADER, conn.team.clone()),
            (AGENT_HEADER, conn.agent.clone()),
            (USER_HEADER, conn.user.clone()),
            (TASK_HEADER, conn.task.clone()),
        ];
        for (name, value) in pairs {
            if let Some(value) = value {
                let value = HeaderValue::from_str(&value)
                    .map_err(|_| anyhow::anyhow!("{name}: printable text without line breaks, please"))?;
                headers.insert(HeaderName::from_static(name), value);
            }
        }
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .timeout(std::time::Duration::from_secs(300))
            .build()
            .context("build the HTTP client")?;
        Ok(Self {
            upstream: Upstream::Http {
                client,
                base: conn.url.trim_end_matches('/').to_owned(),
            },
            headers,
            json: conn.json,
        })
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        self.upstream
            .call(method.clone(), path, &self.headers, body.as_ref())
            .await
            .map_err(|e| anyhow::anyhow!("{method} {}: {e}", path.split('?').next().unwrap_or(path)))
    }

    /// Sends a call over HTTP and returns the response once it succeeded, its body unread: for
    /// a stream.
    async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<reqwest::Response> {
        let call = format!("{method} {path}");
        let Upstream::Http { client, base } = &self.upstream else {
            anyhow::bail!("{call}: streams go over HTTP only");
        };
        let mut request = client
            .request(method, format!("{base}{path}"))
            .headers(self.headers.clone());
        if let Some((content_type, body)) = body {
            request = request
                .header(axum::http::header::CONTENT_TYPE, content_type)
                .body(body);
        }
        let response = request.send().await.map_err(|e| {
            anyhow::anyhow!(
                "{call}: sediment could not be reached: {base}: {}",
                shared::runtime::error_chain(&e)
            )
        })?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let bytes = response.bytes().await.unwrap_or_default();
        let error = crate::client::answer(status, &bytes).expect_err("an error status");
        Err(anyhow::anyhow!("{call}: {error}"))
    }

    /// A call with a body that is not JSON; the answer's JSON.
    async fn call_body(&self, method: Method, path: &str, content_type: &str, body: Vec<u8>) -> anyhow::Result<Value> {
        let call = format!("{method} {path}");
        let response = self.raw(method, path, Some((content_type, body))).await?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .with_context(|| format!("{call}: read the answer"))?;
        crate::client::answer(status, &bytes).map_err(|e| anyhow::anyhow!("{call}: {e}"))
    }

    /// Prints an answer: as one JSON line, or through `table`.
    fn print(&self, value: &Value, table: impl FnOnce(&Value) -> String) -> anyhow::Result<()> {
        let text = if self.json { format!("{value}\n") } else { table(value) };
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).context("write to stdout")?;
        out.flush().context("write to stdout")
    }
}

/// Runs one client command.
pub async fn run(command: ClientCommand) -> anyhow::Result<()> {
    match command {
        ClientCommand::Ingest { conn, file } => ingest(&Api::new(&conn)?, &file).await,
        ClientCommand::Search {
            conn,
            query,
            session,
            strategy,
            limit,
        } => {
            let api = Api::new(&conn)?;
            let body = json!({ "query": query, "session_id": session, "strategy": strategy, "limit": limit });
            let found = api.call(Method::POST, "/v1/conversations/search", Some(body)).await?;
            api.print(&found, |v| {
                table(
                    &["score", "session", "seq", "role", "content"],
                    rows(&v["items"], &["score", "session_id", "seq", "role", "content"]),
                )
            })
        }
        ClientCommand::Recall {
            conn,
            query,
            session,
            limit,
        } => {
            let api = Api::new(&conn)?;
            let body = json!({ "query": query, "session_id": session, "limit": limit });
            let recalled = api.call(Method::POST, "/v1/recall", Some(body)).await?;
            api.print(&recalled, |v| {
                let mut out = table(
                    &["score", "kind", "id", "content"],
                    rows(&v["dynamic"], &["score", "kind", "id", "content"]),
                );
                for issue in v["errors"].as_array().into_iter().flatten() {
                    out.push_str(&format!("degraded: {} {}\n", issue["code"], issue["message"]));
                }
                out
            })
        }
        ClientCommand::Memories { action } => memories(action).await,
        ClientCommand::Scenes { conn, id } => {
            let api = Api::new(&conn)?;
            match id {
                Some(id) => {
                    let scene = api
                        .call(Method::GET, &format!("/v1/scenes/{}", encode(&id)), None)
                        .await?;
                    api.print(&scene, |v| {
                        format!("# {}\n\n{}\n", cell_text(&v["name"]), cell_text(&v["content"]))
                    })
                }
                None => {
                    let scenes = api.call(Method::GET, "/v1/scenes", None).await?;
                    api.print(&scenes, |v| {
                        table(
                            &["id", "name", "version", "updated", "overview"],
                            rows(&v["items"], &["id", "name", "version", "updated_at", "overview"]),
                        )
                    })
                }
            }
        }
        ClientCommand::Persona { conn } => {
            let api = Api::new(&conn)?;
            let persona = api.call(Method::GET, "/v1/persona", None).await?;
            api.print(&persona, |v| format!("{}\n", cell_text(&v["content"])))
        }
        ClientCommand::Erase { conn, no_wait } => {
            let api = Api::new(&conn)?;
            let user = conn.user.clone().context("name the user to erase: --user")?;
            let path = format!("/v1/users/{}", encode(&user));
            let mut job = api.call(Method::DELETE, &path, None).await?;
            while !no_wait && !matches!(job["status"].as_str(), Some("done" | "failed")) {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                let id = job["id"].as_str().context("the erasure job has no id")?;
                job = api
                    .call(Method::GET, &format!("{path}/erasures/{}", encode(id)), None)
                    .await?;
            }
            api.print(&job, |v| {
                table(
                    &["id", "status", "step", "attempts", "error"],
                    rows(&json!([v]), &["id", "status", "step", "attempts", "error"]),
                )
            })?;
            if job["status"] == "failed" {
                anyhow::bail!("the erasure failed: {}", cell_text(&job["error"]));
            }
            Ok(())
        }
        ClientCommand::Export { conn, output } => export(&Api::new(&conn)?, output.as_deref()).await,
        ClientCommand::Import { conn, file } => import(&Api::new(&conn)?, &file).await,
        ClientCommand::Parked { action } => parked(action).await,
        ClientCommand::Status { mut conn, ops_token } => {
            conn.key = ops_token;
            let api = Api::new(&conn)?;
            let state = api.call(Method::GET, "/ops/state", None).await?;
            api.print(&state, |v| {
                let mut out = format!("deployment: {}\n\n", cell_text(&v["deployment"]));
                out.push_str(&table(
                    &["queue", "ready", "parked", "consumers"],
                    rows(&v["queues"], &["queue", "ready", "parked", "consumers"]),
                ));
                out.push('\n');
                out.push_str(&table(
                    &["lag of", "turns", "sessions"],
                    rows(&v["lag"], &["consumer", "turns", "sessions"]),
                ));
                out.push('\n');
                out.push_str(&table(
                    &["worker", "runs", "status", "heartbeat age (s)", "consumers"],
                    rows(
                        &v["workers"],
                        &["worker", "runs", "status", "heartbeat_age_seconds", "consumers"],
                    ),
                ));
                out
            })
        }
    }
}

async fn parked(action: ParkedCommand) -> anyhow::Result<()> {
    match action {
        ParkedCommand::Replay {
            mut conn,
            admin_key,
            kind,
            limit,
        } => {
            if admin_key.is_some() {
                conn.key = admin_key;
            }
            let api = Api::new(&conn)?;
            let body = limit.map(|limit| json!({ "limit": limit }));
            let path = format!("/v1/admin/queues/{}/parked/replay", encode(&kind));
            let replayed = api.call(Method::POST, &path, body).await?;
            api.print(&replayed, |v| {
                let count = v["items"].as_array().map_or(0, Vec::len);
                let mut out = format!(
                    "replayed {count} parked message(s) to the {} queue\n",
                    cell_text(&v["kind"])
                );
                if count > 0 {
                    out.push_str(&table(
                        &["message id", "type", "reason", "attempts"],
                        rows(&v["items"], &["message_id", "type", "reason", "attempts"]),
                    ));
                }
                out
            })
        }
    }
}

async fn memories(action: MemoriesCommand) -> anyhow::Result<()> {
    match action {
        MemoriesCommand::List {
            conn,
            category,
            session,
            status,
            limit,
            cursor,
        } => {
            let api = Api::new(&conn)?;
            let path = format!(
                "/v1/memories{}",
                query(&[
                    ("category", category),
                    ("session_id", session),
                    ("status", status),
                    ("limit", limit.map(|l| l.to_string())),
                    ("cursor", cursor),
                ])
            );
            let page = api.call(Method::GET, &path, None).await?;
            api.print(&page, |v| {
                let mut out = table(
                    &["id", "category", "priority", "status", "content"],
                    rows(&v["items"], &["id", "category", "priority", "status", "content"]),
                );
                if let Some(next) = v["next"].as_str() {
                    out.push_str(&format!("next page: --cursor {next}\n"));
                }
                out
            })
        }
        MemoriesCommand::Show { conn, id } => {
            let api = Api::new(&conn)?;
            let memory = api
                .call(Method::GET, &format!("/v1/memories/{}", encode(&id)), None)
                .await?;
            api.print(&memory, |v| {
                let fields = [
                    "id",
                    "content",
                    "category",
                    "priority",
                    "status",
                    "scene",
                    "occurred_at",
                    "session_id",
                    "task",
                    "created_at",
                    "updated_at",
                ];
                let mut out: String = fields
                    .iter()
                    .map(|f| format!("{f:<12} {}\n", cell_text(&v[*f])))
                    .collect();
                out.push_str(&format!(
                    "history      {} earlier version(s); provenance {} record(s) (--json shows them)\n",
                    v["history"].as_array().map_or(0, Vec::len),
                    v["provenance"].as_array().map_or(0, Vec::len)
                ));
                out
            })
        }
        MemoriesCommand::Edit {
            conn,
            id,
            content,
            category,
            priority,
        } => {
            let api = Api::new(&conn)?;
            if content.is_none() && category.is_none() && priority.is_none() {
                anyhow::bail!("nothing to change: give --content, --category or --priority");
            }
            let mut body = serde_json::Map::new();
            for (name, value) in [
                ("content", content.map(Value::from)),
                ("category", category.map(Value::from)),
                ("priority", priority.map(Value::from)),
            ] {
                if let Some(value) = value {
                    body.insert(name.into(), value);
                }
            }
            let memory = api
                .call(
                    Method::PATCH,
                    &format!("/v1/memories/{}", encode(&id)),
                    Some(Value::Object(body)),
                )
                .await?;
            api.print(&memory, |v| {
                table(
                    &["id", "category", "priority", "content"],
                    rows(&json!([v]), &["id", "category", "priority", "content"]),
                )
            })
        }
        MemoriesCommand::Delete { conn, id } => {
            let api = Api::new(&conn)?;
            api.call(Method::DELETE, &format!("/v1/memories/{}", encode(&id)), None)
                .await?;
            api.print(&json!({ "deleted": id }), |_| format!("deleted {id}\n"))
        }
    }
}

/// One line of an ingest file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    session_id: String,
    role: String,
    content: String,
    created_at: Option<String>,
    metadata: Option<Value>,
    client_id: Option<String>,
    task: Option<String>,
}

/// Appends the file's turns in order: consecutive lines of one session (and task) in one call.
/// A spinner on stderr when it is a terminal and the output is for people.
fn spinner(api: &Api, template: &str) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() || api.json {
        return None;
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(bar)
}

async fn export(api: &Api, output: Option<&str>) -> anyhow::Result<()> {
    let response = api.raw(Method::GET, "/v1/export", None).await?;
    let mut out: Box<dyn Write> = match output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("create {path}"))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let bar = spinner(api, "{spinner} exported {pos} lines {per_sec} {msg}");
    let result = copy_stream(response, &mut out, bar.as_ref()).await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let (lines, end) = match result {
        Ok(done) => done,
        Err(e) => {
            if let Some(path) = output {
                let _ = std::fs::remove_file(path);
            }
            return Err(anyhow::anyhow!("GET /v1/export: {e:#}"));
        }
    };
    out.flush().context("write the export")?;
    drop(out);
    let counts = end.get("counts").cloned().unwrap_or(Value::Null);
    let summary = json!({ "lines": lines, "counts": counts });
    if output.is_some() || api.json {
        // The stream went to a file (or the caller asked for JSON on stdout, which then holds
        // the stream): the summary goes to stderr, so stdout stays one stream.
        let text = if api.json {
            format!("{summary}\n")
        } else {
            format!("exported {lines} lines: {}\n", counts_text(&counts))
        };
        std::io::stderr()
            .write_all(text.as_bytes())
            .context("write to stderr")?;
    }
    Ok(())
}

/// Copies the export's body to `out` and checks that it ends with its end line; returns the
/// lines copied and the end line.
async fn copy_stream(
    mut response: reqwest::Response,
    out: &mut dyn Write,
    bar: Option<&indicatif::ProgressBar>,
) -> anyhow::Result<(u64, Value)> {
    let mut lines = 0u64;
    let mut last = Vec::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => anyhow::bail!(
                "the stream broke off after {lines} lines: {}",
                shared::runtime::error_chain(&e)
            ),
        };
        out.write_all(&chunk).context("write the export")?;
        for part in chunk.split_inclusive(|b| *b == b'\n') {
            if last.ends_with(b"\n") {
                last.clear();
            }
            last.extend_from_slice(part);
            if part.ends_with(b"\n") {
                lines += 1;
                if let Some(bar) = bar {
                    bar.inc(1);
                }
            }
        }
    }
    let end: Value = serde_json::from_slice(&last).unwrap_or(Value::Null);
    if end["kind"] != "end" {
        anyhow::bail!("the stream stopped after {lines} lines without its end line (the server's log says why)");
    }
    Ok((lines, end))
}

async fn import(api: &Api, file: &str) -> anyhow::Result<()> {
    let body = if file == "-" {
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut body).context("read stdin")?;
        body
    } else {
        std::fs::read(file).with_context(|| format!("read {file}"))?
    };
    let size = body.len();
    let bar = spinner(api, "{spinner} importing {msg} ({elapsed})");
    if let Some(bar) = &bar {
        bar.set_message(format!("{:.1} MB", size as f64 / 1e6));
    }
    let result = api
        .call_body(Method::POST, "/v1/import", shared::portable::MEDIA_TYPE, body)
        .await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let report = result?;
    api.print(&report, |v| {
        let read = counts_text(&v["read"]);
        let inserted = counts_text(&v["inserted"]);
        format!(
            "imported {} lines\n  read:     {read}\n  inserted: {inserted}\n",
            v["lines"]
        )
    })
}

/// `{"turn": 3, "memory": 1}` as `3 turn, 1 memory`.
fn counts_text(counts: &Value) -> String {
    let Some(map) = counts.as_object().filter(|m| !m.is_empty()) else {
        return "nothing".to_owned();
    };
    map.iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn ingest(api: &Api, file: &str) -> anyhow::Result<()> {
    let reader: Box<dyn BufRead> = if file == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file).with_context(|| format!("open {file}"))?,
        ))
    };
    // The total is known for a file: count its lines first for the progress bar.
    let total = if file == "-" {
        None
    } else {
        Some(std::io::BufReader::new(std::fs::File::open(file)?).lines().count() as u64)
    };
    let progress = std::io::stderr().is_terminal() && !api.json;
    let bar = if progress {
        let bar = match total {
            Some(total) => indicatif::ProgressBar::new(total),
            None => indicatif::ProgressBar::new_spinner(),
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {bar:40} {pos}/{len} turns {per_sec} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(bar)
    } else {
        None
    };

    let mut batch: Vec<Value> = Vec::new();
    let mut key: Option<(String, Option<String>)> = None;
    let (mut turns, mut sessions) = (0u64, std::collections::BTreeSet::new());
    for (number, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("read {file}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let turn: Line = serde_json::from_str(&line).with_context(|| format!("{file}:{}: not a turn", number + 1))?;
        let this = (turn.session_id.clone(), turn.task.clone());
        if key.as_ref().is_some_and(|k| *k != this) || batch.len() == INGEST_BATCH {
            turns += send(api, key.as_ref().unwrap(), std::mem::take(&mut batch), bar.as_ref()).await?;
        }
        sessions.insert(turn.session_id.clone());
        key = Some(this);
        let mut message = json!({ "role": turn.role, "content": turn.content });
        for (name, value) in [
            ("created_at", turn.created_at.map(Value::from)),
            ("metadata", turn.metadata),
            ("client_id", turn.client_id.map(Value::from)),
        ] {
            if let Some(value) = value {
                message[name] = value;
            }
        }
        batch.push(message);
    }
    if let Some(key) = &key {
        if !batch.is_empty() {
            turns += send(api, key, batch, bar.as_ref()).await?;
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let summary = json!({ "turns": turns, "sessions": sessions.len() });
    api.print(&summary, |_| {
        format!("ingested {turns} turns into {} session(s)\n", sessions.len())
    })
}

async fn send(
    api: &Api,
    (session, task): &(String, Option<String>),
    messages: Vec<Value>,
    bar: Option<&indicatif::ProgressBar>,
) -> anyhow::Result<u64> {
    let count = messages.len() as u64;
    let mut body = json!({ "messages": messages });
    if let Some(task) = task {
        body["task"] = json!(task);
    }
    api.call(
        Method::POST,
        &format!("/v1/sessions/{}/messages", encode(session)),
        Some(body),
    )
    .await?;
    if let Some(bar) = bar {
        bar.inc(count);
    }
    Ok(count)
}

/// The `fields` of each item, as table cells.
fn rows(items: &Value, fields: &[&str]) -> Vec<Vec<String>> {
    items
        .as_array()
        .into_iter()
        .flatten()
        .map(|item| fields.iter().map(|f| cell_text(&item[*f])).collect())
        .collect()
}

/// A value as one line of text: strings bare, numbers rounded, `null` as `-`.
fn cell_text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => format!("{:.3}", n.as_f64().unwrap_or_default()),
        other @ (Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_)) => other.to_string(),
    }
}

/// Aligned columns; cells on one line, cut at `CELL_CHARS`.
fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    if rows.is_empty() {
        return "(none)\n".into();
    }
    let clean = |cell: &str| -> String {
        let flat: String = cell.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        if flat.chars().count() > CELL_CHARS {
            format!("{}…", flat.chars().take(CELL_CHARS - 1).collect::<String>())
        } else {
            flat
        }
    };
    let rows: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(|c| clean(c)).collect()).collect();
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| -> String {
        let last = cells.len() - 1;
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_cut_and_flatten() {
        let out = table(
            &["id", "content"],
            vec![
                vec!["1".into(), "short".into()],
                vec!["22".into(), format!("two\nlines {}", "x".repeat(100))],
            ],
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "id  content");
        assert_eq!(lines[1], "1   short");
        assert!(
            lines[2].starts_with("22  two lines xxx") && lines[2].ends_with('…'),
            "{out}"
        );
        assert_eq!(lines[2].chars().count(), 4 + CELL_CHARS);
        assert_eq!(table(&["a"], Vec::new()), "(none)\n");
    }

    #[test]
    fn cells_read_like_text() {
        assert_eq!(cell_text(&json!(null)), "-");
        assert_eq!(cell_text(&json!("a")), "a");
        assert_eq!(cell_text(&json!(0.123456)), "0.123");
        assert_eq!(cell_text(&json!(7)), "7");
    }
}
