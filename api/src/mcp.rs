//! The MCP server: sediment's memory as tools and resources for an MCP host (Claude Desktop,
//! Cursor, IDE agents, agent frameworks), built with the official SDK (rmcp).
//!
//! One handler, two transports:
//! - `/mcp` on the API speaks Streamable HTTP, stateless with JSON responses (so any replica
//!   answers any request), behind the same authentication middleware as `/v1`;
//! - `sediment mcp` speaks MCP on stdio for a host that launches it, and reaches a sediment over
//!   HTTP (`--url`) or runs the embedded deployment itself on its data directory.
//!
//! Every tool is one `/v1` call through [`Upstream`]: the same validation, tenant scoping,
//! permissions, rate limits and audit as any other client, so the MCP surface cannot grant what
//! the API would refuse. Over HTTP the caller's `Authorization` and `X-Sediment-*` headers are
//! forwarded to that call; on stdio they come from the command line and the environment. The
//! identity is the host's configuration, never a tool argument: a model cannot name another
//! user.

use std::sync::Arc;

use anyhow::Context as _;

use axum::http::{request::Parts, HeaderMap, HeaderName, HeaderValue, Method};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt as _};
use serde::Deserialize;
use serde_json::{json, Value};
use shared::metrics;
use tokio_util::sync::CancellationToken;

use crate::client::{encode, query, CallError, Upstream};
use crate::extract::{ACTOR_HEADER, AGENT_HEADER, TASK_HEADER, TEAM_HEADER, USER_HEADER};

/// The session `remember` appends to and `recall` searches when a call names none (an MCP-only
/// header: the `/v1` routes take the session in their path or body).
pub const SESSION_HEADER: &str = "x-sediment-session";

/// Headers of an `/mcp` request that its tools' `/v1` calls carry on.
const FORWARDED: [&str; 8] = [
    "authorization",
    TEAM_HEADER,
    AGENT_HEADER,
    USER_HEADER,
    TASK_HEADER,
    ACTOR_HEADER,
    "traceparent",
    "tracestate",
];

const PERSONA_URI: &str = "sediment://persona";
const SCENE_URI_PREFIX: &str = "sediment://scenes/";
const MARKDOWN: &str = "text/markdown";

const INSTRUCTIONS: &str = "sediment is this user's long-term memory across conversations. \
Call `recall` with the user's new message before answering it: it returns what was learned \
before (memories and earlier turns) that bears on it. Call `remember` after each exchange with \
the user's message and your answer, so later conversations can find them. Use `memory_search`, \
`conversation_search`, `list_memories`, `get_persona`, `list_scenes` and `read_scene` to look \
deeper, and `forget` when the user asks you to forget something.";

/// Who the tools act for when no HTTP request says (stdio): the credential and the ids that the
/// host configured.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    pub key: Option<String>,
    pub team: Option<String>,
    pub agent: Option<String>,
    pub user: Option<String>,
    pub task: Option<String>,
    pub session: Option<String>,
}

impl Identity {
    /// Without a credential nothing decides the tenant but these ids, so all three are needed
    /// (with one, the key or token decides the team and may pin the agent and user).
    fn check(&self) -> anyhow::Result<()> {
        if self.key.is_some() {
            return Ok(());
        }
        let missing: Vec<&str> = [
            ("--team (SEDIMENT_TEAM)", &self.team),
            ("--agent (SEDIMENT_AGENT)", &self.agent),
            ("--user (SEDIMENT_USER)", &self.user),
        ]
        .into_iter()
        .filter(|(_, id)| id.as_deref().is_none_or(|id| id.trim().is_empty()))
        .map(|(name, _)| name)
        .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            anyhow::bail!(
                "sediment mcp acts for one tenant: set {} (or an API key, SEDIMENT_API_KEY)",
                missing.join(", ")
            )
        }
    }

    fn headers(&self) -> anyhow::Result<HeaderMap> {
        let mut headers = HeaderMap::new();
        let mut put = |name: &'static str, value: Option<String>| -> anyhow::Result<()> {
            if let Some(value) = value {
                let value = HeaderValue::from_str(&value)
                    .map_err(|_| anyhow::anyhow!("{name} must be printable text without line breaks"))?;
                headers.insert(HeaderName::from_static(name), value);
            }
            Ok(())
        };
        put("authorization", self.key.as_ref().map(|key| format!("Bearer {key}")))?;
        put(TEAM_HEADER, self.team.clone())?;
        put(AGENT_HEADER, self.agent.clone())?;
        put(USER_HEADER, self.user.clone())?;
        put(TASK_HEADER, self.task.clone())?;
        Ok(headers)
    }
}

/// The MCP handler: the tools and resources of one connection (stdio) or one request (HTTP).
#[derive(Clone)]
pub struct Memory {
    upstream: Upstream,
    /// The identity headers when no HTTP request carries them (stdio).
    fixed: Arc<HeaderMap>,
    /// The session `remember` and `recall` use when neither the call nor the request names one.
    session: Option<String>,
    tool_router: ToolRouter<Self>,
}

impl Memory {
    /// A handler for a host on stdio, acting as `identity`.
    pub fn stdio(upstream: Upstream, identity: &Identity) -> anyhow::Result<Self> {
        Ok(Self {
            upstream,
            fixed: Arc::new(identity.headers()?),
            // One stdio process serves one host: its turns go to one session unless told.
            session: Some(
                identity
                    .session
                    .clone()
                    .unwrap_or_else(|| format!("mcp-{}", uuid::Uuid::new_v4())),
            ),
            tool_router: Self::tool_router(),
        })
    }

    /// A handler for `/mcp` requests, which carry their own identity.
    fn http(upstream: Upstream) -> Self {
        Self {
            upstream,
            fixed: Arc::new(HeaderMap::new()),
            session: None,
            tool_router: Self::tool_router(),
        }
    }

    /// The headers of this call's `/v1` request: the HTTP request's, else the configured ones.
    fn headers(&self, ctx: &RequestContext<RoleServer>) -> HeaderMap {
        match ctx.extensions.get::<Parts>() {
            Some(parts) => {
                let mut headers = HeaderMap::new();
                for name in FORWARDED {
                    if let Some(value) = parts.headers.get(name) {
                        headers.insert(HeaderName::from_static(name), value.clone());
                    }
                }
                headers
            }
            None => (*self.fixed).clone(),
        }
    }

    /// The session a call acts on: its own, the request's `X-Sediment-Session`, or the
    /// configured one.
    fn session(&self, given: Option<String>, ctx: &RequestContext<RoleServer>) -> Option<String> {
        given.filter(|s| !s.trim().is_empty()).or_else(|| {
            ctx.extensions
                .get::<Parts>()
                .and_then(|parts| parts.headers.get(SESSION_HEADER))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .or_else(|| self.session.clone())
        })
    }

    async fn call(
        &self,
        tool: &'static str,
        ctx: &RequestContext<RoleServer>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, CallError> {
        let result = self
            .upstream
            .call(method, path, &self.headers(ctx), body.as_ref())
            .await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(CallError::Api { status, .. }) if *status < 500 => "refused",
            Err(_) => "failed",
        };
        ::metrics::counter!(metrics::MCP_TOOL_CALLS, "tool" => tool, "result" => outcome).increment(1);
        result
    }

    /// A tool's answer: the `/v1` JSON for the model to read, or the API's error as a tool
    /// error (which the model sees, and may correct).
    async fn respond(
        &self,
        tool: &'static str,
        ctx: &RequestContext<RoleServer>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.call(tool, ctx, method, path, body).await {
            Ok(value) => CallToolResult::success(vec![ContentBlock::text(value.to_string())]),
            Err(e) => tool_error(&e),
        })
    }
}

fn tool_error(error: &CallError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error.to_string())])
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RecallArgs {
    /// The user's new message, as they wrote it.
    query: String,
    /// How many items to return, 1 to 100 (default 10).
    limit: Option<u32>,
    /// The conversation whose earlier turns to search too (default: this connection's).
    session_id: Option<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct MemorySearchArgs {
    /// What to look for, in words.
    query: String,
    /// How many memories to return, 1 to 100 (default 10).
    limit: Option<u32>,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchStrategy {
    /// Exact words (BM25): names, ids, rare terms.
    Keyword,
    /// Meaning (embeddings): paraphrases.
    Semantic,
    /// Both, fused (the default).
    Hybrid,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct ConversationSearchArgs {
    /// What to look for, in words.
    query: String,
    /// How many turns to return, 1 to 100 (default 10).
    limit: Option<u32>,
    /// Only this conversation's turns (default: every conversation of the user).
    session_id: Option<String>,
    /// How to match (default `hybrid`).
    strategy: Option<SearchStrategy>,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
    Tool,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Turn {
    /// Who said it.
    role: Role,
    /// What was said, verbatim.
    content: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RememberArgs {
    /// The turns to keep, oldest first: usually the user's message and your answer.
    messages: Vec<Turn>,
    /// The conversation they belong to (default: this connection's).
    session_id: Option<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct ListMemoriesArgs {
    /// Only this kind: persona, episodic, instruction, work_fact, work_task, work_method or
    /// work_artifact.
    category: Option<String>,
    /// Page size, 1 to 500 (default 50).
    limit: Option<u32>,
    /// The `next` value of the previous page.
    cursor: Option<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct ForgetArgs {
    /// The memory's id, from `recall`, `memory_search` or `list_memories`.
    memory_id: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct ReadSceneArgs {
    /// The scene's id, from `list_scenes`.
    scene_id: String,
}

#[tool_router]
impl Memory {
    #[tool(
        description = "Recall what sediment knows that bears on the user's new message: memories \
learned in earlier conversations and matching earlier turns, best first, with the user's \
persona and a map of topic scenes. Call it before answering each user message.",
        annotations(title = "Recall", read_only_hint = true, open_world_hint = false)
    )]
    async fn recall(
        &self,
        Parameters(args): Parameters<RecallArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let body = json!({
            "query": args.query,
            "limit": args.limit,
            "session_id": self.session(args.session_id, &ctx),
        });
        self.respond("recall", &ctx, Method::POST, "/v1/recall", Some(body))
            .await
    }

    #[tool(
        description = "Search the memories sediment distilled from past conversations (facts, \
preferences, instructions, events, tasks about the user), by meaning and keywords. Returns \
memories with their ids, categories and scores.",
        annotations(title = "Search memories", read_only_hint = true, open_world_hint = false)
    )]
    async fn memory_search(
        &self,
        Parameters(args): Parameters<MemorySearchArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let body = json!({ "query": args.query, "limit": args.limit });
        self.respond("memory_search", &ctx, Method::POST, "/v1/memories/search", Some(body))
            .await
    }

    #[tool(
        description = "Search the verbatim turns of past conversations (what was actually said, \
by whom and when). Use it for exact wording, names, numbers and dates that memories may have \
summarised away.",
        annotations(title = "Search conversations", read_only_hint = true, open_world_hint = false)
    )]
    async fn conversation_search(
        &self,
        Parameters(args): Parameters<ConversationSearchArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let strategy = args.strategy.map(|s| match s {
            SearchStrategy::Keyword => "keyword",
            SearchStrategy::Semantic => "semantic",
            SearchStrategy::Hybrid => "hybrid",
        });
        let body = json!({
            "query": args.query,
            "limit": args.limit,
            "session_id": args.session_id,
            "strategy": strategy,
        });
        self.respond(
            "conversation_search",
            &ctx,
            Method::POST,
            "/v1/conversations/search",
            Some(body),
        )
        .await
    }

    #[tool(
        description = "Keep turns of this conversation in long-term memory: call it after each \
exchange with the user's message and your answer. sediment stores them verbatim and distils \
memories from them in the background.",
        annotations(
            title = "Remember",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn remember(
        &self,
        Parameters(args): Parameters<RememberArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let Some(session) = self.session(args.session_id, &ctx) else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "no session: pass session_id (one id per conversation, the same on every call), \
                 or configure the X-Sediment-Session header",
            )]));
        };
        let messages: Vec<Value> = args
            .messages
            .into_iter()
            .map(|turn| {
                let role = match turn.role {
                    Role::User => "user",
                    Role::Assistant => "assistant",
                    Role::System => "system",
                    Role::Tool => "tool",
                };
                json!({ "role": role, "content": turn.content })
            })
            .collect();
        let path = format!("/v1/sessions/{}/messages", encode(&session));
        match self
            .call(
                "remember",
                &ctx,
                Method::POST,
                &path,
                Some(json!({ "messages": messages })),
            )
            .await
        {
            Ok(mut value) => {
                value["session_id"] = json!(session);
                Ok(CallToolResult::success(vec![ContentBlock::text(value.to_string())]))
            }
            Err(e) => Ok(tool_error(&e)),
        }
    }

    #[tool(
        description = "List the user's memories, newest first, one page at a time; optionally \
only one category.",
        annotations(title = "List memories", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_memories(
        &self,
        Parameters(args): Parameters<ListMemoriesArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = format!(
            "/v1/memories{}",
            query(&[
                ("status", Some("active".into())),
                ("category", args.category),
                ("limit", args.limit.map(|l| l.to_string())),
                ("cursor", args.cursor),
            ])
        );
        self.respond("list_memories", &ctx, Method::GET, &path, None).await
    }

    #[tool(
        description = "Forget one memory for good (the user asked you to forget it, or it is \
wrong). It stops being recalled at once.",
        annotations(
            title = "Forget a memory",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn forget(
        &self,
        Parameters(args): Parameters<ForgetArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = format!("/v1/memories/{}", encode(&args.memory_id));
        match self.call("forget", &ctx, Method::DELETE, &path, None).await {
            Ok(_) => Ok(CallToolResult::success(vec![ContentBlock::text(
                json!({ "forgotten": args.memory_id }).to_string(),
            )])),
            Err(e) => Ok(tool_error(&e)),
        }
    }

    #[tool(
        description = "Read the user's persona: who they are, how they work and what they \
prefer, as sediment has come to know it (Markdown).",
        annotations(title = "Persona", read_only_hint = true, open_world_hint = false)
    )]
    async fn get_persona(&self, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, ErrorData> {
        Ok(match self.persona(&ctx).await {
            Ok(markdown) => CallToolResult::success(vec![ContentBlock::text(markdown)]),
            Err(e) => tool_error(&e),
        })
    }

    #[tool(
        description = "List the topic scenes sediment keeps about the user (each a Markdown \
document on one theme of their life or work), with ids, names and overviews.",
        annotations(title = "List scenes", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_scenes(&self, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, ErrorData> {
        self.respond("list_scenes", &ctx, Method::GET, "/v1/scenes", None).await
    }

    #[tool(
        description = "Read one topic scene in full (Markdown), by the id that `list_scenes` or \
`recall` gave.",
        annotations(title = "Read a scene", read_only_hint = true, open_world_hint = false)
    )]
    async fn read_scene(
        &self,
        Parameters(args): Parameters<ReadSceneArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.scene(&args.scene_id, "read_scene", &ctx).await {
            Ok(markdown) => CallToolResult::success(vec![ContentBlock::text(markdown)]),
            Err(e) => tool_error(&e),
        })
    }
}

impl Memory {
    async fn persona(&self, ctx: &RequestContext<RoleServer>) -> Result<String, CallError> {
        let persona = self.call("get_persona", ctx, Method::GET, "/v1/persona", None).await?;
        Ok(persona["content"].as_str().unwrap_or_default().to_owned())
    }

    async fn scene(&self, id: &str, tool: &'static str, ctx: &RequestContext<RoleServer>) -> Result<String, CallError> {
        let path = format!("/v1/scenes/{}", encode(id));
        let scene = self.call(tool, ctx, Method::GET, &path, None).await?;
        Ok(format!(
            "# {}\n\n{}",
            scene["name"].as_str().unwrap_or_default(),
            scene["content"].as_str().unwrap_or_default()
        ))
    }
}

/// A resource read's failure, as the protocol's error: a missing one is "not found".
fn resource_error(uri: &str, error: &CallError) -> ErrorData {
    match error {
        CallError::Api { status: 404, .. } => ErrorData::resource_not_found(format!("{uri}: {error}"), None),
        CallError::Api { status, .. } if *status < 500 => ErrorData::invalid_request(error.to_string(), None),
        CallError::Api { .. } | CallError::Unreachable(_) => ErrorData::internal_error(error.to_string(), None),
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Memory {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("sediment", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut resources = vec![Resource::new(PERSONA_URI, "persona")
            .with_title("Persona")
            .with_description("Who the user is, how they work and what they prefer")
            .with_mime_type(MARKDOWN)];
        let scenes = self
            .call("resources/list", &ctx, Method::GET, "/v1/scenes", None)
            .await
            .map_err(|e| resource_error("sediment://scenes", &e))?;
        for scene in scenes["items"].as_array().into_iter().flatten() {
            let (Some(id), Some(name)) = (scene["id"].as_str(), scene["name"].as_str()) else {
                continue;
            };
            resources.push(
                Resource::new(format!("{SCENE_URI_PREFIX}{id}"), name)
                    .with_description(scene["overview"].as_str().unwrap_or_default())
                    .with_mime_type(MARKDOWN),
            );
        }
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(format!("{SCENE_URI_PREFIX}{{scene_id}}"), "scene")
                .with_description("One topic scene of the user's, by id")
                .with_mime_type(MARKDOWN),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let markdown = if uri == PERSONA_URI {
            self.persona(&ctx).await
        } else if let Some(id) = uri.strip_prefix(SCENE_URI_PREFIX) {
            self.scene(id, "resources/read", &ctx).await
        } else {
            return Err(ErrorData::resource_not_found(
                format!("{uri}: sediment's resources are {PERSONA_URI} and {SCENE_URI_PREFIX}<id>"),
                None,
            ));
        };
        let text = markdown.map_err(|e| resource_error(&uri, &e))?;
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri).with_mime_type(MARKDOWN)]).into())
    }
}

/// Serves MCP on stdin/stdout as `identity` until the host closes stdin or `shutdown` fires:
/// against the sediment at `url`, or, without one, against the deployment that `settings`
/// describe, started in this process with no port open (its workers run here meanwhile).
pub async fn run_stdio(
    settings: shared::config::Settings,
    url: Option<String>,
    identity: Identity,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    identity.check()?;
    let (upstream, server) = match url {
        Some(url) => {
            let client = reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .timeout(std::time::Duration::from_secs(120))
                .build()
                .context("build the HTTP client")?;
            let base = url.trim_end_matches('/').to_owned();
            tracing::info!(url = %base, "MCP on stdio, calling sediment over HTTP");
            (Upstream::Http { client, base }, None)
        }
        None => {
            if let Some(refusal) = crate::auth::refusal(&settings, std::net::SocketAddr::from(([127, 0, 0, 1], 0))) {
                anyhow::bail!(refusal);
            }
            let backends = shared::backends::Backends::connect(&settings).await?;
            let (router, server) = crate::start_in_process(backends, &settings, shutdown.clone()).await?;
            tracing::info!("MCP on stdio, over the deployment in this process");
            (Upstream::Router { router, counted: false }, Some(server))
        }
    };
    let handler = Memory::stdio(upstream, &identity)?;
    let service = handler
        .serve(rmcp::transport::stdio())
        .await
        .context("start MCP on stdio")?;
    let result = tokio::select! {
        quit = service.waiting() => quit.map(|_| ()).context("the MCP session failed"),
        () = shutdown.cancelled() => Ok(()),
    };
    shutdown.cancel();
    if let Some(server) = server {
        server.wait().await?;
    }
    result
}

/// The `/mcp` service: stateless Streamable HTTP whose tools call `v1` in this process.
/// `loopback_only` keeps rmcp's DNS-rebinding guard (Host must be a loopback name), for a
/// server that runs without authentication; behind auth any Host is accepted.
pub(crate) fn service(
    v1: axum::Router,
    loopback_only: bool,
    max_body_bytes: usize,
) -> StreamableHttpService<Memory, NeverSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(max_body_bytes);
    if !loopback_only {
        config = config.disable_allowed_hosts();
    }
    let upstream = Upstream::Router {
        router: v1,
        counted: true,
    };
    StreamableHttpService::new(
        move || Ok(Memory::http(upstream.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_identity_becomes_headers() {
        let identity = Identity {
            key: Some("sdk_secret".into()),
            agent: Some("coder".into()),
            user: Some("ana".into()),
            ..Identity::default()
        };
        let headers = identity.headers().unwrap();
        assert_eq!(headers["authorization"], "Bearer sdk_secret");
        assert_eq!(headers[AGENT_HEADER], "coder");
        assert_eq!(headers[USER_HEADER], "ana");
        assert!(headers.get(TEAM_HEADER).is_none());
        let bad = Identity {
            user: Some("line\nbreak".into()),
            ..Identity::default()
        };
        assert!(bad.headers().is_err());
        assert!(identity.check().is_ok(), "a key decides the team");
        let keyless = Identity {
            agent: Some("coder".into()),
            user: Some(" ".into()),
            ..Identity::default()
        };
        let err = keyless.check().unwrap_err().to_string();
        assert!(err.contains("--team (SEDIMENT_TEAM), --user (SEDIMENT_USER)"), "{err}");
    }
}
