//! Prompt template endpoints: the effective template of each id for the caller, and the
//! caller's team and agent overrides (put a version, fall back). The rules live in
//! `shared::store::prompts`.

use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::domain::Tenant;
use shared::llm::{EffectiveTemplate, OverrideLevel, TemplateId};
use shared::memory::TemplateRef;
use shared::store::prompts::{NewPrompt, PromptScope, PutOutcome, StoredPrompt};

use utoipa::{IntoParams, ToSchema};

use super::audit::{self, Audited};
use crate::error::ApiError;
use crate::extract::{tenant_from, AppJson, Path, TenantHeaders};
use crate::state::AppState;

/// A stored override as the API shows it. The content is left out of listings.
#[derive(Serialize, ToSchema)]
#[schema(as = PromptOverride)]
pub struct OverrideView {
    #[schema(value_type = OverrideLevelDoc)]
    level: &'static str,
    version: String,
    /// SHA-256 (hex) of `content`: the `hash` provenance records when it is used.
    hash: String,
    active: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl OverrideView {
    fn of(prompt: StoredPrompt, with_content: bool) -> Self {
        Self {
            level: prompt.scope.level.as_str(),
            version: prompt.version,
            hash: prompt.content_hash,
            active: prompt.active,
            content: with_content.then_some(prompt.content),
            created_at: prompt.created_at,
            updated_at: prompt.updated_at,
        }
    }
}

/// One template for the caller: what a call made now would use, and the active overrides.
#[derive(Serialize, ToSchema)]
#[schema(as = PromptTemplate)]
pub struct TemplateView {
    #[schema(value_type = String)]
    id: &'static str,
    /// Id, version, source (`builtin`, `instance`, `team` or `agent`) and hash.
    #[schema(value_type = crate::openapi::TemplateRefDoc)]
    effective: TemplateRef,
    /// The effective text (detail only).
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    /// The team's active override.
    #[schema(required = true)]
    team: Option<OverrideView>,
    /// The agent's active override.
    #[schema(required = true)]
    agent: Option<OverrideView>,
    /// Every stored version at the caller's team and agent levels, newest first (detail only).
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<Vec<OverrideView>>,
}

#[derive(Serialize, ToSchema)]
#[schema(as = PromptList)]
pub struct ListResponse {
    items: Vec<TemplateView>,
}

/// An override's level.
#[derive(ToSchema)]
#[schema(as = OverrideLevel, rename_all = "lowercase")]
#[allow(dead_code)] // Names the values `OverrideLevel::parse` accepts.
pub(crate) enum OverrideLevelDoc {
    Team,
    Agent,
}

fn template_id(text: &str) -> Result<TemplateId, ApiError> {
    TemplateId::parse(text).ok_or_else(|| {
        let known: Vec<&str> = TemplateId::ALL.iter().map(|t| t.as_str()).collect();
        ApiError::NotFound(format!("no prompt template {text:?}; one of {}", known.join(", ")))
    })
}

fn level(text: &str) -> Result<OverrideLevel, ApiError> {
    OverrideLevel::parse(text).ok_or_else(|| ApiError::Invalid(format!("level: unknown {text:?}; one of team, agent")))
}

async fn effective(state: &AppState, id: TemplateId, tenant: &Tenant) -> Result<EffectiveTemplate, ApiError> {
    state
        .backends
        .prompts
        .effective(id, tenant)
        .await
        .map_err(|e| ApiError::Unavailable(Box::new(e)))
}

/// Splits active overrides into the team's and the agent's.
fn by_level(active: &[StoredPrompt], id: TemplateId) -> (Option<StoredPrompt>, Option<StoredPrompt>) {
    let find = |level| {
        active
            .iter()
            .find(|p| p.template == id && p.scope.level == level)
            .cloned()
    };
    (find(OverrideLevel::Team), find(OverrideLevel::Agent))
}

/// Every prompt template for the caller: the effective one and the active overrides.
#[utoipa::path(
    get,
    path = "/v1/prompts",
    operation_id = "list_prompts",
    tag = "prompts",
    responses((status = 200, description = "Every template, without contents", body = ListResponse)),
)]
pub async fn list(
    State(state): State<AppState>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<Json<ListResponse>, ApiError> {
    let tenant = tenant_from(&headers, None, None, None)?;
    let active = state.backends.prompt_store.active_prompts(&tenant, None).await?;
    let mut items = Vec::with_capacity(TemplateId::ALL.len());
    for &id in TemplateId::ALL {
        let (team, agent) = by_level(&active, id);
        items.push(TemplateView {
            id: id.as_str(),
            effective: effective(&state, id, &tenant).await?.template,
            content: None,
            team: team.map(|p| OverrideView::of(p, false)),
            agent: agent.map(|p| OverrideView::of(p, false)),
            history: None,
        });
    }
    Ok(Json(ListResponse { items }))
}

#[utoipa::path(
    get,
    path = "/v1/prompts/{template_id}",
    operation_id = "get_prompt",
    tag = "prompts",
    params(("template_id" = String, Path, description = "A prompt template id (`GET /v1/prompts` lists them); an unknown one is 404")),
    responses(
        (status = 200, description = "The template with the effective `content`, the overrides' `content` and `history` (newest first)", body = TemplateView),
        (status = 404, description = "not_found: no such template", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<Json<TemplateView>, ApiError> {
    let tenant = tenant_from(&headers, None, None, None)?;
    let id = template_id(&id)?;
    let store = &state.backends.prompt_store;
    let active = store.active_prompts(&tenant, Some(id)).await?;
    let history = store.prompt_history(&tenant, id).await?;
    let (team, agent) = by_level(&active, id);
    let effective = effective(&state, id, &tenant).await?;
    Ok(Json(TemplateView {
        id: id.as_str(),
        effective: effective.template,
        content: Some(effective.text),
        team: team.map(|p| OverrideView::of(p, true)),
        agent: agent.map(|p| OverrideView::of(p, true)),
        history: Some(history.into_iter().map(|p| OverrideView::of(p, false)).collect()),
    }))
}

/// A new version of the caller's team or agent override.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PromptPut)]
pub struct PutRequest {
    #[schema(value_type = OverrideLevelDoc)]
    level: String,
    /// A name for this text, 1 to 64 ASCII letters, digits and `.-_+`; a known version with
    /// another text is 422.
    #[schema(pattern = r"^\s*[A-Za-z0-9._+-]{1,64}\s*$")]
    version: String,
    /// Not blank once a front matter block is removed.
    #[schema(min_length = 1)]
    content: String,
}

#[derive(Serialize, ToSchema)]
#[schema(as = PromptPutResult)]
pub struct PutResponse {
    #[schema(value_type = String)]
    id: &'static str,
    #[serde(flatten)]
    stored: OverrideView,
    /// What a call made now uses (an agent override still wins over a new team one).
    #[schema(value_type = crate::openapi::TemplateRefDoc)]
    effective: TemplateRef,
}

/// Stores a version of the caller's team or agent override and makes it active.
#[utoipa::path(
    put,
    path = "/v1/prompts/{template_id}",
    operation_id = "put_prompt",
    tag = "prompts",
    params(("template_id" = String, Path, description = "A prompt template id (`GET /v1/prompts` lists them); an unknown one is 404")),
    request_body(content = PutRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "A new version, stored and active", body = PutResponse),
        (status = 200, description = "Unchanged, or an old version made active again", body = PutResponse),
        (status = 400, description = "malformed_json", body = crate::openapi::ErrorBody),
        (status = 413, description = "payload_too_large", body = crate::openapi::ErrorBody),
        (status = 415, description = "unsupported_media_type", body = crate::openapi::ErrorBody),
        (status = 404, description = "not_found: no such template", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: a body of the wrong shape, a bad level, version or content, a known version with another text", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn put(
    State(state): State<AppState>,
    Path(id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
    AppJson(body): AppJson<PutRequest>,
) -> Result<(StatusCode, Json<PutResponse>), ApiError> {
    let tenant = tenant_from(&headers, None, None, None)?;
    let id = template_id(&id)?;
    let started = Instant::now();
    let scope = PromptScope::of(&tenant, level(&body.level)?);
    let prompt = NewPrompt::new(id, scope, &body.version, &body.content)?;
    let (status, result, stored) = match state.backends.prompt_store.put_prompt(&prompt).await? {
        PutOutcome::Created(stored) => (StatusCode::CREATED, "created", stored),
        PutOutcome::Unchanged(stored) => (StatusCode::OK, "unchanged", stored),
        PutOutcome::Reactivated(stored) => (StatusCode::OK, "reactivated", stored),
        PutOutcome::VersionTaken(stored) => {
            return Err(ApiError::Invalid(format!(
                "version: {:?} of the {} override of {} already names another text (sha256 {}); \
                 give the new text a new version",
                stored.version,
                stored.scope.level.as_str(),
                id.as_str(),
                stored.content_hash
            )));
        }
    };
    audit::record(
        &state,
        Audited {
            actor: headers.actor(&tenant),
            tenant: tenant.clone(),
            action: "prompt.update",
            target: Some(id.as_str().to_owned()),
            outcome: "ok".to_owned(),
            started,
            detail: serde_json::json!({
                "level": stored.scope.level.as_str(),
                "version": stored.version,
                "hash": stored.content_hash,
                "result": result,
            }),
        },
    )
    .await;
    let effective = effective(&state, id, &tenant).await?.template;
    Ok((
        status,
        Json(PutResponse {
            id: id.as_str(),
            stored: OverrideView::of(stored, true),
            effective,
        }),
    ))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteParams {
    /// The override to deactivate (required).
    #[param(required = true, value_type = Option<OverrideLevelDoc>)]
    level: Option<String>,
}

/// Deactivates the caller's override (kept in `history`).
#[utoipa::path(
    delete,
    path = "/v1/prompts/{template_id}",
    operation_id = "delete_prompt",
    tag = "prompts",
    params(("template_id" = String, Path, description = "A prompt template id (`GET /v1/prompts` lists them); an unknown one is 404"), DeleteParams),
    responses(
        (status = 204, description = "Deactivated"),
        (status = 404, description = "not_found: no such template, or no active override at this level", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: level missing or unknown, an unknown parameter", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
    params: Result<Query<DeleteParams>, axum::extract::rejection::QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let tenant = tenant_from(&headers, None, None, None)?;
    let Query(params) = params.map_err(|e| ApiError::Invalid(e.body_text()))?;
    let id = template_id(&id)?;
    let level = level(
        params
            .level
            .as_deref()
            .ok_or_else(|| ApiError::Invalid("level: required; one of team, agent".into()))?,
    )?;
    let started = Instant::now();
    let scope = PromptScope::of(&tenant, level);
    if !state.backends.prompt_store.deactivate_prompt(id, &scope).await? {
        return Err(ApiError::NotFound(format!(
            "no active {} override of {}",
            level.as_str(),
            id.as_str()
        )));
    }
    audit::record(
        &state,
        Audited {
            actor: headers.actor(&tenant),
            tenant,
            action: "prompt.delete",
            target: Some(id.as_str().to_owned()),
            outcome: "ok".to_owned(),
            started,
            detail: serde_json::json!({ "level": level.as_str() }),
        },
    )
    .await;
    Ok(StatusCode::NO_CONTENT)
}
