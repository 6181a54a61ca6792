//! L1 memory endpoints: list, read (with history and provenance), correct, delete.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::domain::Tenant;
use shared::memory::{Category, Memory, MemoryStatus, MAX_PRIORITY};
use shared::runtime::error_chain;
use shared::store::memory::{MemoryCursor, MemoryFilter, MemoryPatch, ProvenanceRecord, LAYER_L1};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{task_from, tenant_from, AppJson, Path, TenantHeaders};
use crate::state::AppState;

/// Page size when the caller gives none.
const DEFAULT_LIMIT: u32 = 50;
/// Largest page.
const MAX_LIMIT: u32 = 500;
/// Longest memory content a correction may write, in code points.
const MAX_CONTENT_CHARS: usize = 4_000;

/// A memory as the API shows it (the tenant is the caller's own, so it is left out).
#[derive(Serialize, ToSchema)]
#[schema(as = Memory)]
pub struct MemoryView {
    id: Uuid,
    content: String,
    #[schema(value_type = crate::openapi::CategoryDoc)]
    category: Category,
    /// 0 to 100.
    #[schema(maximum = 100)]
    priority: u8,
    #[schema(required = true)]
    scene: Option<String>,
    #[schema(value_type = crate::openapi::MemoryStatusDoc)]
    status: MemoryStatus,
    /// When what it says happened, as the extractor read it.
    #[schema(required = true)]
    occurred_at: Option<String>,
    /// The L0 turns it was made from.
    source_message_ids: Vec<Uuid>,
    session_id: String,
    /// The memory that replaced it, once archived.
    #[schema(required = true)]
    superseded_by: Option<Uuid>,
    /// The task of the turns it was made from (the newest one's, when they differ); `null`
    /// for none.
    #[schema(required = true)]
    task: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<Memory> for MemoryView {
    fn from(m: Memory) -> Self {
        Self {
            id: m.id,
            content: m.content,
            category: m.category,
            priority: m.priority,
            scene: m.scene,
            status: m.status,
            occurred_at: m.occurred_at,
            source_message_ids: m.source_message_ids,
            session_id: m.session_id,
            superseded_by: m.superseded_by,
            task: m.task,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    #[param(value_type = Option<crate::openapi::CategoryDoc>)]
    category: Option<String>,
    scene: Option<String>,
    /// Default: both.
    #[param(value_type = Option<crate::openapi::MemoryStatusDoc>)]
    status: Option<String>,
    session_id: Option<String>,
    /// Only the memories of this task: 1 to 128 characters, none a control character. The
    /// `X-Sediment-Task` header may carry it instead; given in both, it must be the same.
    #[param(min_length = 1, max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    task: Option<String>,
    /// RFC 3339; inclusive.
    created_after: Option<DateTime<Utc>>,
    /// RFC 3339; exclusive.
    created_before: Option<DateTime<Utc>>,
    /// 1 to 500; default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// The `next` of the previous page.
    cursor: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[schema(as = MemoryList)]
pub struct ListResponse {
    items: Vec<MemoryView>,
    /// The `cursor` of the next page, or `null` on the last one.
    #[schema(required = true)]
    next: Option<String>,
}

fn category(name: &str) -> Result<Category, ApiError> {
    Category::parse(name).ok_or_else(|| {
        let known: Vec<&str> = Category::ALL.iter().map(|c| c.as_str()).collect();
        ApiError::Invalid(format!("category: unknown {name:?}; one of {}", known.join(", ")))
    })
}

/// The tenant's L1 memories, newest first, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/memories",
    operation_id = "list_memories",
    tag = "memories",
    params(ListParams),
    responses(
        (status = 200, description = "A page of memories", body = ListResponse),
        (status = 422, description = "invalid_request: an unknown category or status, limit out of range, a bad cursor or time, an unknown parameter, an invalid task, or a task header that names another task than the parameter", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    TenantHeaders(headers): TenantHeaders,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ListResponse>, ApiError> {
    let tenant = tenant_from(&headers, None, None, None)?;
    let Query(params) = params.map_err(|e| ApiError::Invalid(e.body_text()))?;
    let task = task_from(&headers, params.task.as_deref())?;
    let limit = params.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::Invalid(format!("limit: must be between 1 and {MAX_LIMIT}")));
    }
    let status = params
        .status
        .as_deref()
        .map(|s| {
            MemoryStatus::parse(s)
                .ok_or_else(|| ApiError::Invalid(format!("status: unknown {s:?}; one of active, archived")))
        })
        .transpose()?;
    let filter = MemoryFilter {
        category: params.category.as_deref().map(category).transpose()?,
        scene: params.scene,
        status,
        session_id: params.session_id,
        task: task.map(shared::domain::TaskId::into_string),
        created_after: params.created_after,
        created_before: params.created_before,
    };
    let after = params
        .cursor
        .as_deref()
        .map(super::cursor::decode)
        .transpose()?
        .map(|(created_at, id)| MemoryCursor { created_at, id });
    // One extra row tells whether a next page exists.
    let mut page = state
        .backends
        .memories
        .list_memories(&tenant, &filter, after, limit + 1)
        .await?;
    let next = if page.len() > limit as usize {
        page.truncate(limit as usize);
        page.last().map(|m| super::cursor::encode(m.created_at, m.id))
    } else {
        None
    };
    Ok(Json(ListResponse {
        items: page.into_iter().map(MemoryView::from).collect(),
        next,
    }))
}

/// `POST /v1/memories/search`: the memories that match a query.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = MemorySearchRequest)]
pub struct SearchRequest {
    /// Not blank, at most 4096 characters.
    #[schema(min_length = 1, max_length = 4096)]
    query: String,
    /// 1 to `SEDIMENT_MAX_SEARCH_LIMIT` (100); default 10.
    #[schema(minimum = 1, maximum = 100)]
    limit: Option<usize>,
    /// Only the memories of this task: 1 to 128 characters, none a control character. The
    /// `X-Sediment-Task` header may carry it instead; given in both, it must be the same.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    task: Option<String>,
    /// `keyword`, `semantic` or `hybrid` (the default).
    #[schema(value_type = Option<crate::openapi::StrategyDoc>)]
    strategy: Option<shared::index::Strategy>,
    team_id: Option<String>,
    agent_id: Option<String>,
    user_id: Option<String>,
}

/// A matching memory and its score.
#[derive(Serialize, ToSchema)]
#[schema(as = MemoryHit)]
pub struct SearchItem {
    #[serde(flatten)]
    memory: MemoryView,
    score: f32,
}

#[derive(Serialize, ToSchema)]
#[schema(as = MemorySearchResponse)]
pub struct SearchResponse {
    /// Best first.
    items: Vec<SearchItem>,
    /// What is missing and why, when a backend failed or the deadline passed (as in recall).
    #[schema(value_type = Vec<crate::openapi::RecallIssueDoc>)]
    errors: Vec<shared::recall::RecallIssue>,
    /// The strategy that ranked them (`keyword` when the embedder was unavailable).
    #[schema(value_type = crate::openapi::StrategyDoc)]
    strategy: shared::index::Strategy,
}

/// The tenant's active memories that match a query, best first (keyword, meaning or both, as
/// conversation search). Answers 200 when a backend fails: `errors` says what is missing.
#[utoipa::path(
    post,
    path = "/v1/memories/search",
    operation_id = "search_memories",
    tag = "memories",
    request_body(content = SearchRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The matching memories, best first", body = SearchResponse),
        (status = 400, description = "malformed_json", body = crate::openapi::ErrorBody),
        (status = 413, description = "payload_too_large", body = crate::openapi::ErrorBody),
        (status = 415, description = "unsupported_media_type", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: a body of the wrong shape, a blank or too long query, limit out of range, an invalid task, or a task header that names another task than the body", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn search(
    State(state): State<AppState>,
    TenantHeaders(headers): TenantHeaders,
    AppJson(body): AppJson<SearchRequest>,
) -> Result<Json<SearchResponse>, ApiError> {
    let tenant = tenant_from(
        &headers,
        body.team_id.as_deref(),
        body.agent_id.as_deref(),
        body.user_id.as_deref(),
    )?;
    let task = task_from(&headers, body.task.as_deref())?;
    super::search::check_query(&body.query)?;
    let max = state.limits.max_search_limit;
    let limit = body.limit.unwrap_or(10.min(max));
    if limit == 0 || limit > max {
        return Err(ApiError::Invalid(format!("limit must be between 1 and {max}")));
    }
    let query = shared::search::ConversationQuery {
        text: body.query,
        limit,
        session: None,
        task,
        strategy: body.strategy.unwrap_or_default(),
    };
    let found = state
        .recall
        .search_memories(&tenant, query, state.recall_defaults.timeout)
        .await;
    Ok(Json(SearchResponse {
        items: found
            .items
            .into_iter()
            .map(|(memory, score)| SearchItem {
                memory: memory.into(),
                score,
            })
            .collect(),
        errors: found.errors,
        strategy: found.strategy,
    }))
}

/// A memory with its history and provenance.
#[derive(Serialize, ToSchema)]
#[schema(as = MemoryDetail)]
pub struct DetailResponse {
    #[serde(flatten)]
    memory: MemoryView,
    /// The memories this one replaced, newest first.
    history: Vec<MemoryView>,
    /// How it was made and changed, oldest first.
    provenance: Vec<ProvenanceView>,
}

/// One step in a memory's making or change.
#[derive(Serialize, ToSchema)]
#[schema(as = MemoryProvenance)]
pub struct ProvenanceView {
    id: Uuid,
    layer: String,
    /// What happened: `add`, `update`, `merge`, `correction`, ...
    event: String,
    #[schema(required = true, value_type = Option<crate::openapi::TemplateRefDoc>)]
    template: Option<shared::memory::TemplateRef>,
    #[schema(required = true)]
    model: Option<String>,
    input_message_ids: Vec<Uuid>,
    sibling_ids: Vec<Uuid>,
    #[schema(value_type = Object)]
    detail: serde_json::Value,
    started_at: DateTime<Utc>,
    duration_ms: i64,
}

impl From<ProvenanceRecord> for ProvenanceView {
    fn from(r: ProvenanceRecord) -> Self {
        Self {
            id: r.id,
            layer: r.layer,
            event: r.event,
            template: r.template,
            model: r.model,
            input_message_ids: r.input_message_ids,
            sibling_ids: r.sibling_ids,
            detail: r.detail,
            started_at: r.started_at,
            duration_ms: r.duration_ms,
        }
    }
}

fn memory_id(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| ApiError::NotFound("memory not found".into()))
}

#[utoipa::path(
    get,
    path = "/v1/memories/{memory_id}",
    operation_id = "get_memory",
    tag = "memories",
    params(("memory_id" = String, Path, description = "The memory's id (a UUID; anything else is 404)")),
    responses(
        (status = 200, description = "The memory, the memories it replaced (newest first) and its provenance (oldest first)", body = DetailResponse),
        (status = 404, description = "not_found", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<Json<DetailResponse>, ApiError> {
    let tenant = tenant_from(&headers, None, None, None)?;
    let id = memory_id(&id)?;
    let store = &state.backends.memories;
    let memory = store
        .memories_by_id(&tenant, &[id])
        .await?
        .pop()
        .ok_or_else(|| ApiError::NotFound("memory not found".into()))?;
    let history = store.memory_history(&tenant, id).await?;
    let provenance = store.memory_provenance(&tenant, id).await?;
    Ok(Json(DetailResponse {
        memory: memory.into(),
        history: history.into_iter().map(MemoryView::from).collect(),
        provenance: provenance.into_iter().map(ProvenanceView::from).collect(),
    }))
}

/// A user's correction. `scene` and `occurred_at` may be `null` to clear them.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = MemoryPatch, min_properties = 1)]
pub struct PatchRequest {
    /// Not blank, at most 4000 characters; secrets are masked before it is stored.
    content: Option<String>,
    #[schema(value_type = Option<crate::openapi::CategoryDoc>)]
    category: Option<String>,
    /// 0 to 100.
    #[schema(maximum = 100)]
    priority: Option<u8>,
    /// `null` clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    scene: Option<Option<String>>,
    /// `null` clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    occurred_at: Option<Option<String>>,
}

/// Tells a field sent as `null` (`Some(None)`) from one left out (`None`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// A user's correction, recorded in provenance with the values before; the index follows at
/// once.
#[utoipa::path(
    patch,
    path = "/v1/memories/{memory_id}",
    operation_id = "update_memory",
    tag = "memories",
    params(("memory_id" = String, Path, description = "The memory's id (a UUID; anything else is 404)")),
    request_body(content = PatchRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The memory as corrected", body = MemoryView),
        (status = 400, description = "malformed_json", body = crate::openapi::ErrorBody),
        (status = 413, description = "payload_too_large", body = crate::openapi::ErrorBody),
        (status = 415, description = "unsupported_media_type", body = crate::openapi::ErrorBody),
        (status = 404, description = "not_found", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: a body of the wrong shape, nothing to change, empty or too long content, an unknown category, priority over 100", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn patch(
    State(state): State<AppState>,
    Path(id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
    AppJson(body): AppJson<PatchRequest>,
) -> Result<Json<MemoryView>, ApiError> {
    let started = std::time::Instant::now();
    let tenant = tenant_from(&headers, None, None, None)?;
    let id = memory_id(&id)?;
    let content = body.content.map(|c| c.trim().to_owned());
    if let Some(content) = &content {
        if content.is_empty() {
            return Err(ApiError::Invalid("content: must not be empty".into()));
        }
        if content.chars().count() > MAX_CONTENT_CHARS {
            return Err(ApiError::Invalid(format!(
                "content: longer than {MAX_CONTENT_CHARS} characters"
            )));
        }
    }
    if body.priority.is_some_and(|p| p > MAX_PRIORITY) {
        return Err(ApiError::Invalid(format!(
            "priority: must be between 0 and {MAX_PRIORITY}"
        )));
    }
    let patch = MemoryPatch {
        // A correction is stored like any memory: secrets are masked first.
        content: content.map(|c| shared::memory::redact::redact(&c).text.into_owned()),
        category: body.category.as_deref().map(category).transpose()?,
        priority: body.priority,
        scene: body.scene,
        occurred_at: body.occurred_at,
    };
    if patch == MemoryPatch::default() {
        return Err(ApiError::Invalid("nothing to change: send at least one field".into()));
    }
    let store = &state.backends.memories;
    let before = store
        .memories_by_id(&tenant, &[id])
        .await?
        .pop()
        .ok_or_else(|| ApiError::NotFound("memory not found".into()))?;
    let record = ProvenanceRecord {
        id: Uuid::new_v4(),
        memory_id: Some(id),
        tenant: tenant.clone(),
        session_id: before.session_id.clone(),
        layer: LAYER_L1.to_owned(),
        event: "correction".to_owned(),
        template: None,
        model: None,
        input_message_ids: Vec::new(),
        sibling_ids: Vec::new(),
        detail: serde_json::json!({
            "by": "user",
            "before": {
                "content": before.content,
                "category": before.category,
                "priority": before.priority,
                "scene": before.scene,
                "occurred_at": before.occurred_at,
            },
        }),
        started_at: Utc::now(),
        duration_ms: 0,
    };
    let updated = store
        .patch_memory(&tenant, id, &patch, &record)
        .await?
        .ok_or_else(|| ApiError::NotFound("memory not found".into()))?;
    follow_in_index(&state, &tenant, id).await;
    let changed: Vec<&str> = [
        ("content", patch.content.is_some()),
        ("category", patch.category.is_some()),
        ("priority", patch.priority.is_some()),
        ("scene", patch.scene.is_some()),
        ("occurred_at", patch.occurred_at.is_some()),
    ]
    .into_iter()
    .filter_map(|(field, set)| set.then_some(field))
    .collect();
    super::audit::record(
        &state,
        super::audit::Audited {
            actor: headers.actor(&tenant),
            tenant,
            action: "memory.update",
            target: Some(id.to_string()),
            outcome: "ok".to_owned(),
            started,
            detail: serde_json::json!({ "fields": changed }),
        },
    )
    .await;
    Ok(Json(updated.into()))
}

/// Removes the memory from the store and the index.
#[utoipa::path(
    delete,
    path = "/v1/memories/{memory_id}",
    operation_id = "delete_memory",
    tag = "memories",
    params(("memory_id" = String, Path, description = "The memory's id (a UUID; anything else is 404)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "not_found", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<StatusCode, ApiError> {
    let tenant = tenant_from(&headers, None, None, None)?;
    let id = memory_id(&id)?;
    let started = std::time::Instant::now();
    if !state.backends.memories.delete_memory(&tenant, id).await? {
        return Err(ApiError::NotFound("memory not found".into()));
    }
    follow_in_index(&state, &tenant, id).await;
    super::audit::record(
        &state,
        super::audit::Audited {
            actor: headers.actor(&tenant),
            tenant,
            action: "memory.delete",
            target: Some(id.to_string()),
            outcome: "ok".to_owned(),
            started,
            detail: serde_json::json!({}),
        },
    )
    .await;
    Ok(StatusCode::NO_CONTENT)
}

/// Applies the change to this memory's point now, so that the next recall sees it, instead of
/// draining the whole outbox (every tenant's backlog) on a user's request. The change is
/// already committed with its outbox entry; if this fails, the extract worker's sweep applies
/// it.
async fn follow_in_index(state: &AppState, tenant: &Tenant, id: Uuid) {
    if let Err(e) = state.memory_indexer.sync(tenant, &[id]).await {
        tracing::warn!(error = %error_chain(&e), "memory index update failed; the sweep will apply it");
    }
}
