//! The OpenAPI 3.1 document of the API, generated from the code with utoipa and served at
//! `GET /openapi.json` (open, like the probes).
//!
//! Each handler carries a `#[utoipa::path]` with its method, path, parameters, body, success
//! response and the errors the handler itself can answer. What the router adds around the
//! handlers is added here, from the path alone, exactly as `routes::app` layers it:
//! - every `/v1` route is behind `auth::authenticate`: a bearer credential (the admin key for
//!   `/v1/admin/*`, a team's API key for the rest), 401 `unauthorized`, 403 `forbidden`,
//!   503 `backend_unavailable` (the key store), 500 `internal`, and on tenant routes 429
//!   `rate_limited` (the operator has no team, so no limit);
//! - every tenant route (`/v1` but not `/v1/admin/*`) reads the tenant headers: 400
//!   `missing_tenant`, 422 `invalid_request` for a header that is not visible ASCII or an id
//!   that is not valid; the routes that take a task (`TASK_OPERATIONS`) also read
//!   `X-Sediment-Task`.
//!
//! The schemas of request and response types live beside their handlers. Types a handler
//! takes from `shared` (which has no utoipa, STYLE R4) are described by the mirrors below and
//! named in the handlers' types with `#[schema(value_type = ...)]`; the integration test
//! `openapi` checks real responses against them.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use utoipa::openapi::path::{HttpMethod, Operation, ParameterBuilder, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, HeaderBuilder, ObjectBuilder, Ref, RefOr, Required, ResponseBuilder, Type};
use utoipa::{Modify, OpenApi, ToSchema};
use uuid::Uuid;

use crate::routes::{
    audit, context, erase, health, keys, memories, ops, portable, prompts, queues, recall, scenes, search, sessions,
};

/// The bearer scheme of a team's API key (`sdmk_…`).
pub const API_KEY_SCHEME: &str = "api_key";
/// The bearer scheme of the operator's admin key (`SEDIMENT_ADMIN_KEY`).
pub const ADMIN_KEY_SCHEME: &str = "admin_key";
/// The bearer scheme of the ops page's token (`SEDIMENT_OPS_TOKEN`).
pub const OPS_TOKEN_SCHEME: &str = "ops_token";
/// The bearer scheme of an identity provider's JWT (`SEDIMENT_AUTH_JWKS_*`): every operation
/// that takes `api_key` takes it as the alternative.
pub const IDP_TOKEN_SCHEME: &str = "idp_token";

/// Operations whose body may carry `team_id`, `agent_id` and `user_id` in place of the headers.
const BODY_TENANT_OPERATIONS: &[&str] = &["append_messages", "search_conversations", "recall"];
/// Operations that take a task, in the `X-Sediment-Task` header or their own `task` (the body's,
/// or the query's for the listing).
const TASK_OPERATIONS: &[&str] = &["append_messages", "search_conversations", "recall", "list_memories"];
/// What `shared::domain::TaskId` and `SessionId` accept: no control character (Unicode `Cc`, as
/// `char::is_control`); their length, 1 to 128 characters, is the schemas' min and max length.
const ID_PATTERN: &str = r"^[^\u0000-\u001f\u007f-\u009f]*$";

const DESCRIPTION: &str = "Long-term memory for AI agents: L0 turns, conversation search, \
recall, L1 memories, L2 scenes, the L3 persona, prompt overrides and the audit log.\n\n\
Every `/v1` call names its tenant with the headers `X-Sediment-Team`, `X-Sediment-Agent` and \
`X-Sediment-User` (append, search and recall also take `team_id`, `agent_id` and `user_id` in \
the body). Append, search, recall and the memory listing also take an optional task, the \
fifth isolation dimension, in `X-Sediment-Task` or their own `task`: it is stored on appended \
turns (and on the memories made from them), and narrows the others to it. Both given must \
agree. With auth on, `/v1` needs `Authorization: Bearer`: a team's API key (which decides \
the team, so `X-Sediment-Team` may be left out) or, for `/v1/admin/*` only, the operator's \
admin key. The embedded deployment listening on loopback without an admin key runs with auth \
off: then no credential is needed and `/v1/admin/*` answers 403.\n\n\
Errors are JSON `{\"code\",\"message\"}` with a stable `code`.";

#[derive(OpenApi)]
#[openapi(
    info(title = "sediment", version = env!("CARGO_PKG_VERSION"), description = DESCRIPTION),
    paths(
        sessions::append,
        sessions::list,
        sessions::reset,
        context::context,
        context::compact,
        context::compaction,
        search::search,
        recall::recall,
        memories::list,
        memories::search,
        memories::get,
        memories::patch,
        memories::delete,
        scenes::list,
        scenes::get,
        scenes::persona,
        prompts::list,
        prompts::get,
        prompts::put,
        prompts::delete,
        audit::list,
        erase::erase_user,
        erase::get_erasure,
        portable::export,
        portable::import,
        keys::create,
        keys::list,
        keys::revoke,
        erase::erase_team,
        erase::get_erasure_as_operator,
        audit::list_operator,
        queues::replay_parked,
        health::healthz,
        health::readyz,
        health::metrics,
        ops::page,
        ops::state,
        openapi_json,
    ),
    components(schemas(ErrorBody, ErrorCode)),
    modifiers(&RouterLayers),
    tags(
        (name = "sessions", description = "L0 turns and session context"),
        (name = "search", description = "Conversation search over L0 turns"),
        (name = "recall", description = "What an agent injects before an LLM call"),
        (name = "memories", description = "L1 atomic memories"),
        (name = "scenes", description = "L2 scenes and the L3 persona"),
        (name = "prompts", description = "Prompt templates and the team's and agent's overrides"),
        (name = "audit", description = "The tenant's audit log"),
        (name = "portability", description = "An owner's whole memory as one JSONL stream: export, and import here or into the other deployment"),
        (name = "erase", description = "Erasing a user from every store, as a resumable job"),
        (name = "admin", description = "The operator's API key management, team erasure, parked messages and log (admin key only)"),
        (name = "probes", description = "Liveness, readiness, metrics and this document (open). With `SEDIMENT_HEALTH_LISTEN` set, `/healthz`, `/readyz` and `/metrics` move to that address."),
        (name = "ops", description = "The ops page (its own access rule)"),
    ),
)]
pub struct ApiDoc;

/// The document, rendered once.
static DOCUMENT: LazyLock<String> =
    LazyLock::new(|| ApiDoc::openapi().to_json().expect("the OpenAPI document serializes"));

/// The document as JSON.
pub fn document() -> &'static str {
    &DOCUMENT
}

/// `GET /openapi.json`: this document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    tag = "probes",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", body = Object, content_type = "application/json")),
)]
pub async fn openapi_json() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document())
}

/// The body of every error.
#[derive(ToSchema)]
#[allow(dead_code)] // Mirrors `error::ErrorBody`, which serializes it.
pub struct ErrorBody {
    code: ErrorCode,
    /// For people; 5xx messages carry no internal detail.
    message: String,
}

/// Every code of `ApiError::status_and_code`.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ErrorCode {
    /// 400: no tenant ids.
    MissingTenant,
    /// 400: the body is not JSON.
    MalformedJson,
    /// 415: the body is not `application/json`.
    UnsupportedMediaType,
    /// 422: the request is well-formed but not valid.
    InvalidRequest,
    /// 413: the body is over `SEDIMENT_MAX_BODY_BYTES`.
    PayloadTooLarge,
    /// 413: more turns than `SEDIMENT_MAX_TURNS_PER_REQUEST`.
    TooManyItems,
    /// 404.
    NotFound,
    /// 404 from `GET /v1/scenes/{id}`.
    SceneNotFound,
    /// 404 from `GET /v1/persona` before the first build.
    PersonaNotFound,
    /// 401, with `WWW-Authenticate: Bearer`.
    Unauthorized,
    /// 403.
    Forbidden,
    /// 429, with `Retry-After`: the team's request rate.
    RateLimited,
    /// 429, with `Retry-After`: the team's stored-turn quota (`SEDIMENT_QUOTA_TURNS`).
    QuotaExceeded,
    /// 422 from `POST /v1/import`: a line of the stream is not valid; the message names it.
    InvalidImport,
    /// 422 from `POST /v1/import`: the stream ends without its end line.
    TruncatedImport,
    /// 422 from `POST /v1/import`: the header's format version is not one this build reads.
    UnsupportedExportVersion,
    /// 409 from `POST /v1/import`: an id of the stream belongs to another owner here.
    ImportConflict,
    /// 503.
    BackendUnavailable,
    /// 500.
    Internal,
}

// ---- Mirrors of the `shared` types the handlers return or accept ----

/// A turn's role.
#[derive(ToSchema)]
#[schema(as = Role, rename_all = "lowercase")]
#[allow(dead_code)]
pub enum RoleDoc {
    User,
    Assistant,
    System,
    Tool,
}

/// How a query ranks its hits: `keyword` (BM25), `semantic` (dense vectors) or `hybrid` (both,
/// fused by RRF).
#[derive(ToSchema)]
#[schema(as = Strategy, rename_all = "lowercase")]
#[allow(dead_code)]
pub enum StrategyDoc {
    Keyword,
    Semantic,
    Hybrid,
}

/// A memory's category.
#[derive(ToSchema)]
#[schema(as = Category, rename_all = "snake_case")]
#[allow(dead_code)]
pub enum CategoryDoc {
    Persona,
    Episodic,
    Instruction,
    WorkFact,
    WorkTask,
    WorkMethod,
    WorkArtifact,
}

/// A memory's lifecycle state: `archived` once superseded by an update or merge.
#[derive(ToSchema)]
#[schema(as = MemoryStatus, rename_all = "snake_case")]
#[allow(dead_code)]
pub enum MemoryStatusDoc {
    Active,
    Archived,
}

/// What an API key may do on its team; each level includes the ones before it.
#[derive(ToSchema)]
#[schema(as = Permission, rename_all = "lowercase")]
#[allow(dead_code)]
pub enum PermissionDoc {
    Read,
    Write,
    Admin,
}

/// One turn as stored by an append.
#[derive(ToSchema)]
#[schema(as = AppendedTurn)]
#[allow(dead_code)]
pub struct AppendedTurnDoc {
    id: Uuid,
    seq: i64,
    created_at: DateTime<Utc>,
}

/// The prompt template (or rules version) an output came from.
#[derive(ToSchema)]
#[schema(as = TemplateRef)]
#[allow(dead_code)]
pub struct TemplateRefDoc {
    /// Template id, e.g. `l1-extract`.
    id: String,
    version: String,
    /// `builtin`, `instance`, `team`, `agent`, or `rules` for the rules engine.
    source: String,
    /// Hex SHA-256 of the effective template text.
    hash: String,
}

/// One audited call.
#[derive(ToSchema)]
#[schema(as = AuditEntry)]
#[allow(dead_code)]
pub struct AuditEntryDoc {
    id: Uuid,
    at: DateTime<Utc>,
    /// The `X-Sediment-Actor` header, or the tenant's user.
    actor: String,
    /// `recall`, `memory.update`, `memory.delete`, `prompt.update`, `prompt.delete`.
    action: String,
    /// A memory, session or template id; `null` for a recall without a session.
    #[schema(required = true)]
    target: Option<String>,
    /// `ok`, or the error code of the call.
    outcome: String,
    duration_ms: i64,
    /// Action-specific facts (ids and codes, never content).
    detail: serde_json::Value,
}

/// One call the operator made with the admin key.
#[derive(ToSchema)]
#[schema(as = OperatorEntry)]
#[allow(dead_code)]
pub struct OperatorEntryDoc {
    id: Uuid,
    at: DateTime<Utc>,
    /// The team acted on; `null` when the call named none this service knows (revoking an
    /// unknown key).
    #[schema(required = true)]
    team_id: Option<String>,
    /// The `X-Sediment-Actor` header, or `operator`.
    actor: String,
    /// `key.create`, `key.revoke` or `team.erase`.
    action: String,
    /// The key's id; `null` for a team erase or a key that was not made.
    #[schema(required = true)]
    target: Option<String>,
    /// `ok`, or the error code of the call.
    outcome: String,
    duration_ms: i64,
    /// Action-specific facts: a key's permission, agents, name and prefix; an erase's agent
    /// and job ids. Never a secret.
    detail: serde_json::Value,
}

/// A recall's answer.
#[derive(ToSchema)]
#[schema(as = RecallResponse)]
#[allow(dead_code)]
pub struct RecallResponseDoc {
    stable: StablePartDoc,
    /// The hits for this message, best first, within the budget.
    dynamic: Vec<RecallItemDoc>,
    /// Whether an item was cut or dropped to fit the budget.
    truncated: bool,
    /// What is missing and why: `recall_timeout`, `index_unavailable`,
    /// `embedding_unavailable`, `store_unavailable`.
    errors: Vec<RecallIssueDoc>,
    strategy: StrategyDoc,
}

/// The part for the end of the system prompt; changes rarely.
#[derive(ToSchema)]
#[schema(as = StablePart)]
#[allow(dead_code)]
pub struct StablePartDoc {
    /// Markdown; empty until the persona is built.
    persona: String,
    /// Markdown; empty until the owner has scenes.
    scene_navigation: String,
    tools_guide: String,
}

/// A recalled item.
#[derive(ToSchema)]
#[schema(as = RecallItem)]
#[allow(dead_code)]
pub struct RecallItemDoc {
    id: Uuid,
    kind: RecallKindDoc,
    /// The text within the budget, wrapped in `<sediment-memory>` markers.
    content: String,
    score: f32,
    source: SourceDoc,
}

/// What a recalled item is.
#[derive(ToSchema)]
#[schema(as = RecallKind, rename_all = "lowercase")]
#[allow(dead_code)]
pub enum RecallKindDoc {
    Memory,
    Turn,
}

/// Where a recalled item came from.
#[derive(ToSchema)]
#[schema(as = RecallSource)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(dead_code)]
pub enum SourceDoc {
    Turn {
        session_id: String,
        seq: i64,
        role: RoleDoc,
        created_at: DateTime<Utc>,
        /// The turn's task; `null` when it has none.
        #[schema(required = true)]
        task: Option<String>,
    },
    Memory {
        session_id: String,
        category: CategoryDoc,
        priority: u8,
        #[schema(required = true)]
        scene: Option<String>,
        #[schema(required = true)]
        occurred_at: Option<String>,
        source_message_ids: Vec<Uuid>,
        created_at: DateTime<Utc>,
        /// The memory's task; `null` when it has none.
        #[schema(required = true)]
        task: Option<String>,
    },
}

/// Why a result is partial.
#[derive(ToSchema)]
#[schema(as = RecallIssue)]
#[allow(dead_code)]
pub struct RecallIssueDoc {
    code: String,
    message: String,
}

/// The ops page's data (`shared::ops::Snapshot`): counts, kinds and error messages, never
/// content nor tenant ids. Its rows are for the page and may change.
#[derive(ToSchema)]
#[schema(as = OpsState)]
#[allow(dead_code)]
pub struct OpsStateDoc {
    generated_at: DateTime<Utc>,
    /// `embedded` or `cluster`.
    deployment: String,
    /// Per worker kind: ready and parked messages, consumers.
    queues: Vec<serde_json::Value>,
    /// Turns and sessions past the `index` and `extract` cursors.
    lag: Vec<serde_json::Value>,
    /// Worker liveness.
    workers: Vec<serde_json::Value>,
    /// The last failed extraction batches.
    failures: serde_json::Value,
    /// The L1 funnel.
    funnel: serde_json::Value,
}

// ---- What the router adds around the handlers ----

/// Adds the security schemes, and to each operation what `routes::app` layers around it (see
/// the module docs).
struct RouterLayers;

impl Modify for RouterLayers {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let bearer = |description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(description))
                    .build(),
            )
        };
        components.add_security_scheme(
            API_KEY_SCHEME,
            bearer(
                "A team's API key (`sdmk_` and 64 hex digits), made by `POST /v1/admin/keys`. It decides the \
                 team and carries a permission: `read`, `write` or `admin`. Auth is off on the embedded \
                 deployment's loopback default (no `SEDIMENT_ADMIN_KEY`): then no credential is needed.",
            ),
        );
        components.add_security_scheme(
            ADMIN_KEY_SCHEME,
            bearer(
                "The operator's admin key (`SEDIMENT_ADMIN_KEY`, 32+ characters). It reaches `/v1/admin/*` \
                 and nothing else; with auth off those routes answer 403.",
            ),
        );
        components.add_security_scheme(
            IDP_TOKEN_SCHEME,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "A JWT of the organisation's identity provider (RS256 or ES256, verified with \
                         `SEDIMENT_AUTH_JWKS_FILE` or `SEDIMENT_AUTH_JWKS_URL`), accepted wherever `api_key` is \
                         when configured. Its claims decide the team and may pin the agent, the user and the \
                         permission.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            OPS_TOKEN_SCHEME,
            bearer(
                "The ops token (`SEDIMENT_OPS_TOKEN`). Unset (the default), `/ops/state` answers loopback \
                 peers without a credential and everyone else 403; set, everyone must send it.",
            ),
        );

        for (path, item) in doc.paths.paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            let admin = path.starts_with(crate::auth::ADMIN_ROUTES);
            // A route of one user (`/v1/users/{user_id}`) takes the user from its path; the header
            // may be left out, and must agree when sent.
            let user_in_path = path.contains("{user_id}");
            for (_, operation) in operations(item) {
                v1_layers(operation, admin, user_in_path);
                path_rules(operation);
            }
        }
    }
}

fn operations(item: &mut utoipa::openapi::PathItem) -> Vec<(HttpMethod, &mut Operation)> {
    [
        (HttpMethod::Get, item.get.as_mut()),
        (HttpMethod::Post, item.post.as_mut()),
        (HttpMethod::Put, item.put.as_mut()),
        (HttpMethod::Patch, item.patch.as_mut()),
        (HttpMethod::Delete, item.delete.as_mut()),
    ]
    .into_iter()
    .filter_map(|(method, op)| op.map(|op| (method, op)))
    .collect()
}

fn v1_layers(operation: &mut Operation, admin: bool, user_in_path: bool) {
    // Alternatives: a team's key or an identity provider's token, wherever a tenant calls.
    let schemes: &[&str] = if admin {
        &[ADMIN_KEY_SCHEME]
    } else {
        &[API_KEY_SCHEME, IDP_TOKEN_SCHEME]
    };
    let security = operation.security.get_or_insert_with(Vec::new);
    for scheme in schemes {
        security.push(SecurityRequirement::new(*scheme, Vec::<String>::new()));
    }
    error(
        operation,
        401,
        "unauthorized: no credential, or an unknown or revoked one (auth on only)",
    );
    error(
        operation,
        403,
        if admin {
            "forbidden: not the admin key, or auth is off"
        } else {
            "forbidden: the credential does not reach this route (the admin key, or a key without \
             the permission), team or agent"
        },
    );
    error(operation, 500, "internal");
    error(operation, 503, "backend_unavailable");
    if admin {
        return;
    }
    error(
        operation,
        400,
        "missing_tenant: no team, agent or user (header or body)",
    );
    error(
        operation,
        422,
        "invalid_request: a tenant header that is not visible ASCII, or an id that is not valid",
    );
    error(
        operation,
        429,
        "rate_limited: the team's rate limit (`SEDIMENT_RATE_LIMIT_RPS`) is spent",
    );
    if operation.operation_id.as_deref() == Some("append_messages") {
        error(
            operation,
            429,
            "quota_exceeded: the team stores as many turns as `SEDIMENT_QUOTA_TURNS` allows",
        );
    }
    let body_tenant = operation
        .operation_id
        .as_deref()
        .is_some_and(|id| BODY_TENANT_OPERATIONS.contains(&id));
    let or_body = if body_tenant {
        " (or the body's `*_id` field)"
    } else {
        ""
    };
    let header = |name: &str, required: bool, description: String| {
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Header)
            .required(if required { Required::True } else { Required::False })
            .description(Some(description))
            .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
            .build()
            .into()
    };
    let parameters = operation.parameters.get_or_insert_with(Vec::new);
    parameters.push(header(
        "X-Sediment-Team",
        false,
        format!(
            "The team{or_body}. Required with auth off; with an API key the key decides the team and this may \
             be left out (naming another team is 403)."
        ),
    ));
    parameters.push(header("X-Sediment-Agent", !body_tenant, format!("The agent{or_body}.")));
    parameters.push(header(
        "X-Sediment-User",
        !body_tenant && !user_in_path,
        format!("The user{or_body}."),
    ));
    parameters.push(header(
        "X-Sediment-Actor",
        false,
        "Who acts for the tenant, for the audit log; default: the user.".to_owned(),
    ));
    if operation
        .operation_id
        .as_deref()
        .is_some_and(|id| TASK_OPERATIONS.contains(&id))
    {
        parameters.push(
            ParameterBuilder::new()
                .name("X-Sediment-Task")
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(
                    "The task, in place of the request's own `task`; given in both, they must be the same \
                     (else 422). 1 to 128 characters, none a control character (a tab within it is 422). Stored on \
                     appended turns; narrows search, recall and the memory listing.",
                ))
                // No `pattern`, unlike the body's and the query's `task`: HTTP strips a header
                // value's surrounding whitespace, tabs included, before the server sees it, so
                // a value that breaks the pattern only there arrives valid.
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .min_length(Some(1))
                        .max_length(Some(128)),
                ))
                .build()
                .into(),
        );
    }
}

/// The values the handlers accept in shared path parameters, which their tuple-form `params`
/// cannot say: `{session_id}` as `SessionId::parse` takes it (1 to 128 characters, `shared`'s
/// private `MAX_ID_LEN`, none a control character: Unicode `Cc`, as `char::is_control`), and
/// `{template_id}` as one of `TemplateId::ALL`.
fn path_rules(operation: &mut Operation) {
    for parameter in operation.parameters.iter_mut().flatten() {
        let RefOr::T(parameter) = parameter else { continue };
        if parameter.parameter_in != ParameterIn::Path {
            continue;
        }
        let schema = match parameter.name.as_str() {
            "session_id" => ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(128))
                .pattern(Some(ID_PATTERN)),
            "template_id" => ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(shared::llm::TemplateId::ALL.iter().map(|t| t.as_str()))),
            _ => continue,
        };
        parameter.schema = Some(schema.into());
    }
}

/// Adds an error response, or names another code on one the handler already documents.
fn error(operation: &mut Operation, status: u16, text: &str) {
    let status = status.to_string();
    let responses = &mut operation.responses.responses;
    if let Some(RefOr::T(response)) = responses.get_mut(&status) {
        response.description = format!("{}; or {text}", response.description);
        return;
    }
    let mut response = ResponseBuilder::new().description(text).content(
        "application/json",
        Content::new(Some(Ref::from_schema_name("ErrorBody"))),
    );
    match status.as_str() {
        "401" => {
            response = response.header(
                "WWW-Authenticate",
                HeaderBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                    .description(Some("`Bearer realm=\"sediment\"`"))
                    .build(),
            );
        }
        "429" => {
            response = response.header(
                "Retry-After",
                HeaderBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1))))
                    .description(Some(
                        "Whole seconds until a retry may succeed: the team's bucket holds a request again, or \
                         its stored turns are counted again",
                    ))
                    .build(),
            );
        }
        _ => {}
    }
    responses.insert(status, response.build().into());
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn enum_values(doc: &Value, name: &str) -> Vec<String> {
        doc["components"]["schemas"][name]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{name} is not an enum"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    }

    /// The mirrored enums list exactly what `shared` accepts and returns.
    #[test]
    fn mirrored_enums_match_shared() {
        use shared::auth::Permission;
        use shared::domain::Role;
        use shared::index::Strategy;
        use shared::memory::{Category, MemoryStatus};
        let doc: Value = serde_json::from_str(document()).unwrap();
        // Exhaustive matches: a new variant in `shared` stops this compiling until mirrored.
        let role = |r: Role| match r {
            Role::User | Role::Assistant | Role::System | Role::Tool => r.as_str().to_owned(),
        };
        let strategy = |s: Strategy| match s {
            Strategy::Keyword | Strategy::Semantic | Strategy::Hybrid => s.as_str().to_owned(),
        };
        let status = |s: MemoryStatus| match s {
            MemoryStatus::Active | MemoryStatus::Archived => serde_json::to_value(s).unwrap(),
        };
        let permission = |p: Permission| match p {
            Permission::Read | Permission::Write | Permission::Admin => p.as_str().to_owned(),
        };
        assert_eq!(
            enum_values(&doc, "Role"),
            [Role::User, Role::Assistant, Role::System, Role::Tool].map(role)
        );
        assert_eq!(
            enum_values(&doc, "Strategy"),
            [Strategy::Keyword, Strategy::Semantic, Strategy::Hybrid].map(strategy)
        );
        assert_eq!(
            enum_values(&doc, "MemoryStatus"),
            [MemoryStatus::Active, MemoryStatus::Archived].map(|s| status(s).as_str().unwrap().to_owned())
        );
        assert_eq!(
            enum_values(&doc, "Permission"),
            [Permission::Read, Permission::Write, Permission::Admin].map(permission)
        );
        let categories: Vec<String> = Category::ALL.iter().map(|c| c.as_str().to_owned()).collect();
        assert_eq!(enum_values(&doc, "Category"), categories);
    }

    #[test]
    fn the_document_is_openapi_3_1_with_every_error_code() {
        use crate::error::ApiError;
        use axum::http::StatusCode;
        let doc: Value = serde_json::from_str(document()).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["info"]["title"], "sediment");
        // A new variant stops this compiling until it is listed below (and in `ErrorCode`).
        let listed = |e: &ApiError| match e {
            ApiError::MissingTenant(_)
            | ApiError::MalformedJson(_)
            | ApiError::UnsupportedMediaType(_)
            | ApiError::Invalid(_)
            | ApiError::PayloadTooLarge(_)
            | ApiError::TooManyItems(_)
            | ApiError::NotFound(_)
            | ApiError::NotFoundCode(..)
            | ApiError::Unauthorized(_)
            | ApiError::Forbidden(_)
            | ApiError::RateLimited(_)
            | ApiError::QuotaExceeded(..)
            | ApiError::Rejected(..)
            | ApiError::Unavailable(_)
            | ApiError::Internal(_) => e.status_and_code().1.to_owned(),
        };
        let every = [
            ApiError::MissingTenant(String::new()),
            ApiError::MalformedJson(String::new()),
            ApiError::UnsupportedMediaType(String::new()),
            ApiError::Invalid(String::new()),
            ApiError::PayloadTooLarge(0),
            ApiError::TooManyItems(String::new()),
            ApiError::NotFound(String::new()),
            ApiError::NotFoundCode("scene_not_found", String::new()),
            ApiError::NotFoundCode("persona_not_found", String::new()),
            ApiError::QuotaExceeded(String::new(), std::time::Duration::ZERO),
            ApiError::Unauthorized(String::new()),
            ApiError::Forbidden(String::new()),
            ApiError::RateLimited(std::time::Duration::ZERO),
            ApiError::Rejected(StatusCode::UNPROCESSABLE_ENTITY, "invalid_import", String::new()),
            ApiError::Rejected(StatusCode::UNPROCESSABLE_ENTITY, "truncated_import", String::new()),
            ApiError::Rejected(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unsupported_export_version",
                String::new(),
            ),
            ApiError::Rejected(StatusCode::CONFLICT, "import_conflict", String::new()),
            ApiError::Unavailable("down".into()),
            ApiError::Internal("broken".into()),
        ];
        let mut codes: Vec<String> = every.iter().map(listed).collect();
        let mut documented = enum_values(&doc, "ErrorCode");
        codes.sort();
        documented.sort();
        assert_eq!(documented, codes);
    }
}
