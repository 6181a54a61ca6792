//! The operator's key management, `/v1/admin/keys`: create, list and revoke the API keys of
//! teams. Only the admin key reaches these routes (`auth::authenticate`).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::auth::{ApiKey, IssuedKey, Permission};
use shared::domain::tenant_id;
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::AppJson;
use crate::state::AppState;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    team_id: String,
    /// The agents the key may act as; left out: every agent of the team.
    #[serde(default)]
    agents: Option<Vec<String>>,
    /// `read`, `write` (the default) or `admin`.
    #[serde(default)]
    permission: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

/// A key as the API shows it: never the secret, except once in [`Created`].
#[derive(Serialize)]
pub struct KeyView {
    id: Uuid,
    team_id: String,
    agents: Option<Vec<String>>,
    permission: Permission,
    name: Option<String>,
    prefix: String,
    created_at: DateTime<Utc>,
    last_used_at: Option<DateTime<Utc>>,
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

#[derive(Serialize)]
pub struct Created {
    /// The secret: shown here once, never again.
    key: String,
    #[serde(flatten)]
    view: KeyView,
}

pub async fn create(
    State(state): State<AppState>,
    AppJson(body): AppJson<CreateKey>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    team_id: Option<String>,
}

#[derive(Serialize)]
pub struct KeyList {
    items: Vec<KeyView>,
}

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
/// before), 404 for an id no key has.
pub async fn revoke(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<KeyView>, ApiError> {
    let not_found = || ApiError::NotFound("no API key has this id".into());
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
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
