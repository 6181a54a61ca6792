//! The operator's key management, `/v1/admin/keys`: create, list and revoke the API keys of
//! teams. Only the admin key reaches these routes (`auth::authenticate`).

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::auth::{ApiKey, IssuedKey, Permission};
use shared::domain::tenant_id;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::audit::{record_operator, OperatorActor, OperatorAudited};
use crate::error::ApiError;
use crate::extract::{AppJson, Path};
use crate::state::AppState;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    #[schema(min_length = 1)]
    team_id: String,
    /// The agents the key may act as; left out: every agent of the team.
    #[serde(default)]
    agents: Option<Vec<String>>,
    /// `read`, `write` (the default) or `admin`.
    #[serde(default)]
    #[schema(value_type = Option<crate::openapi::PermissionDoc>)]
    permission: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

/// A key as the API shows it: never the secret, except once in [`Created`].
#[derive(Serialize, ToSchema)]
#[schema(as = ApiKey)]
pub struct KeyView {
    id: Uuid,
    team_id: String,
    /// The agents it may act as; `null`: every agent of the team.
    #[schema(required = true)]
    agents: Option<Vec<String>>,
    #[schema(value_type = crate::openapi::PermissionDoc)]
    permission: Permission,
    #[schema(required = true)]
    name: Option<String>,
    /// The secret's first characters, to tell keys apart.
    prefix: String,
    created_at: DateTime<Utc>,
    /// Exact to `SEDIMENT_AUTH_KEY_CACHE_MS`.
    #[schema(required = true)]
    last_used_at: Option<DateTime<Utc>>,
    #[schema(required = true)]
    revoked_at: Option<DateTime<Utc>>,
}

impl From<ApiKey> for KeyView {
    fn from(key: ApiKey) -> Self {
        Self {
            id: key.id,
            team_id: key.team,
            agents: key.agents,
            permission: key.permission,
            name: key.name,
            prefix: key.prefix,
            created_at: key.created_at,
            last_used_at: key.last_used_at,
            revoked_at: key.revoked_at,
        }
    }
}

/// A new key with its secret.
#[derive(Serialize, ToSchema)]
#[schema(as = CreatedApiKey)]
pub struct Created {
    /// The secret: shown here once, never again.
    key: String,
    #[serde(flatten)]
    view: KeyView,
}

/// Makes a team's API key; the call is logged in the operator's log (`GET /v1/admin/audit`),
/// without the secret.
#[utoipa::path(
    post,
    path = "/v1/admin/keys",
    operation_id = "create_api_key",
    tag = "admin",
    request_body(content = CreateKey, content_type = "application/json"),
    responses(
        (status = 201, description = "The key with its secret `key`, shown this once", body = Created),
        (status = 400, description = "malformed_json, or missing_tenant: a blank team_id or agent", body = crate::openapi::ErrorBody),
        (status = 413, description = "payload_too_large", body = crate::openapi::ErrorBody),
        (status = 415, description = "unsupported_media_type", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: a body of the wrong shape, a bad team or agent id, an unknown permission", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    OperatorActor(actor): OperatorActor,
    AppJson(body): AppJson<CreateKey>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let mut audited = OperatorAudited {
        actor,
        action: "key.create",
        team_id: tenant_id("team_id", Some(&body.team_id)).ok(),
        target: None,
        started: std::time::Instant::now(),
        detail: serde_json::json!({
            "permission": body.permission,
            "agents": body.agents,
            "name": body.name,
        }),
    };
    let result = issue_key(&state, body).await;
    if let Ok((_, Json(created))) = &result {
        audited.target = Some(created.view.id.to_string());
        audited.detail["permission"] = created.view.permission.as_str().into();
        audited.detail["prefix"] = created.view.prefix.as_str().into();
    }
    record_operator(&state, audited, &result).await;
    result
}

async fn issue_key(state: &AppState, body: CreateKey) -> Result<(StatusCode, Json<Created>), ApiError> {
    let permission = match body.permission.as_deref() {
        None => Permission::Write,
        Some(text) => Permission::parse(text)
            .ok_or_else(|| ApiError::Invalid(format!("permission: {text:?} is not read, write or admin")))?,
    };
    let issued = IssuedKey::generate(&body.team_id, body.agents, permission, body.name, Utc::now())?;
    state.backends.keys.create_key(&issued.new).await?;
    let key = issued.new.key;
    tracing::info!(key = %key.id, team = %key.team, permission = key.permission.as_str(), "API key created");
    Ok((
        StatusCode::CREATED,
        Json(Created {
            key: issued.secret,
            view: key.into(),
        }),
    ))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this team's keys.
    team_id: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[schema(as = ApiKeyList)]
pub struct KeyList {
    items: Vec<KeyView>,
}

/// Every key (without secrets), newest first, revoked keys included.
#[utoipa::path(
    get,
    path = "/v1/admin/keys",
    operation_id = "list_api_keys",
    tag = "admin",
    params(ListQuery),
    responses(
        (status = 200, description = "The keys", body = KeyList),
        (status = 400, description = "missing_tenant: a blank team_id", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: a bad team_id, an unknown parameter", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<KeyList>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::Invalid(e.body_text()))?;
    let team = query
        .team_id
        .as_deref()
        .map(|team| tenant_id("team_id", Some(team)))
        .transpose()?;
    let keys = state.backends.keys.list_keys(team.as_deref()).await?;
    Ok(Json(KeyList {
        items: keys.into_iter().map(KeyView::from).collect(),
    }))
}

/// Revokes a key: 200 with the key and its `revoked_at` (the first revocation's, when revoked
/// before), 404 for an id no key has. Logged in the operator's log either way.
#[utoipa::path(
    delete,
    path = "/v1/admin/keys/{key_id}",
    operation_id = "revoke_api_key",
    tag = "admin",
    params(("key_id" = String, Path, description = "The key's id (a UUID; anything else is 404)")),
    responses(
        (status = 200, description = "The key with its `revoked_at`", body = KeyView),
        (status = 404, description = "not_found: no key has this id", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: the id is not UTF-8", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn revoke(
    State(state): State<AppState>,
    OperatorActor(actor): OperatorActor,
    Path(id): Path<String>,
) -> Result<Json<KeyView>, ApiError> {
    let started = std::time::Instant::now();
    let result = revoke_key(&state, &id).await;
    let audited = OperatorAudited {
        actor,
        action: "key.revoke",
        team_id: result.as_ref().ok().map(|Json(key)| key.team_id.clone()),
        // The path as sent, bounded: a revoke of an unknown id is worth seeing too.
        target: Some(id.chars().take(64).collect()),
        started,
        detail: serde_json::json!({}),
    };
    record_operator(&state, audited, &result).await;
    result
}

async fn revoke_key(state: &AppState, id: &str) -> Result<Json<KeyView>, ApiError> {
    let not_found = || ApiError::NotFound("no API key has this id".into());
    let id = Uuid::parse_str(id).map_err(|_| not_found())?;
    let key = state
        .backends
        .keys
        .revoke_key(id, Utc::now())
        .await?
        .ok_or_else(not_found)?;
    state.auth.forget(id);
    tracing::info!(key = %key.id, team = %key.team, "API key revoked");
    Ok(Json(key.into()))
}
