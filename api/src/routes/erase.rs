//! Erasing a user: `DELETE /v1/users/{user_id}` starts a job that removes everything the owner
//! (the caller's team and agent, that user) has in every store (`shared::erase`), and
//! `GET /v1/users/{user_id}/erasures/{erasure_id}` shows its progress. The operator erases a
//! whole team, or one agent of it, through `DELETE /v1/admin/teams/{team_id}`: one job per
//! owner, each polled at `GET /v1/admin/erasures/{erasure_id}`.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::domain::{tenant_id, Tenant};
use shared::scene::paths::encode_segment;
use shared::store::erase::Erasure;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::audit::{record_operator, OperatorActor, OperatorAudited};
use crate::error::ApiError;
use crate::extract::{tenant_from, HeaderIds, Path, TenantHeaders};
use crate::state::AppState;

/// An erasure job as the API shows it: ids and counts, never content.
#[derive(Serialize, ToSchema)]
pub struct ErasureView {
    id: Uuid,
    team_id: String,
    agent_id: String,
    user_id: String,
    /// `running`, or `done` once nothing of the owner is left anywhere.
    #[schema(example = "running")]
    status: &'static str,
    /// The step in progress: `rows`, `index`, `files`, `verify`, or `done`.
    step: &'static str,
    requested_by: String,
    requested_at: DateTime<Utc>,
    /// Runs that worked on the job; more than one means it resumed after a crash or a failure.
    attempts: i32,
    /// What was deleted, per store: `turns`, `sessions`, `memories` (with their history),
    /// `memory_provenance`, `compactions`, `scenes`, `personas`, …, `index_points`, `files`.
    deleted: BTreeMap<String, u64>,
    /// What the last check found left, per store; all zero when done.
    residue: BTreeMap<String, u64>,
    /// Why the last run stopped short, while the job waits for the next.
    #[schema(required = true)]
    error: Option<String>,
    #[schema(required = true)]
    finished_at: Option<DateTime<Utc>>,
}

impl From<Erasure> for ErasureView {
    fn from(e: Erasure) -> Self {
        Self {
            id: e.id,
            status: if e.is_done() { "done" } else { "running" },
            step: e.step.as_str(),
            team_id: e.tenant.team,
            agent_id: e.tenant.agent,
            user_id: e.tenant.user,
            requested_by: e.requested_by,
            requested_at: e.requested_at,
            attempts: e.attempts,
            deleted: e.deleted,
            residue: e.residue,
            error: e.error,
            finished_at: e.finished_at,
        }
    }
}

/// The owner a path names: the caller's team and agent, the path's user. A user header, when
/// sent, must name the same user.
fn owner(headers: &HeaderIds, user_id: &str) -> Result<Tenant, ApiError> {
    let tenant = tenant_from(headers, None, None, Some(user_id))?;
    if tenant.user != user_id {
        return Err(ApiError::Invalid(
            "X-Sediment-User names another user than the path".into(),
        ));
    }
    Ok(tenant)
}

/// Erases the user: every turn, session, memory (with its history and provenance),
/// compaction, scene, persona, index point and file of this team's agent for this user. The
/// job runs in the background and resumes by itself after a crash; poll the `Location`. A
/// repeated request while one runs returns that job. When it is done, the owner's audit log
/// has a `user.erase` record with the counts per store.
#[utoipa::path(
    delete,
    path = "/v1/users/{user_id}",
    operation_id = "erase_user",
    tag = "erase",
    params(("user_id" = String, Path, description = "The user to erase, under the caller's team and agent")),
    responses(
        (status = 202, description = "The job, started or already running", body = ErasureView,
            headers(("Location" = String, description = "Where to poll the job"))),
        (status = 422, description = "invalid_request", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn erase_user(
    State(state): State<AppState>,
    Path(user_id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<Response, ApiError> {
    let tenant = owner(&headers, &user_id)?;
    let job = state.eraser.request(&tenant, &headers.actor(&tenant)).await?;
    tracing::info!(erasure = %job.id, "erasure requested");
    run_in_background(&state, vec![job.id]);
    let location = format!("/v1/users/{}/erasures/{}", encode_segment(&tenant.user), job.id);
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        Json(ErasureView::from(job)),
    )
        .into_response())
}

/// One erasure job of the user. Another owner's job, or an unknown id, is 404.
#[utoipa::path(
    get,
    path = "/v1/users/{user_id}/erasures/{erasure_id}",
    operation_id = "get_erasure",
    tag = "erase",
    params(
        ("user_id" = String, Path, description = "The erased user, under the caller's team and agent"),
        ("erasure_id" = String, Path, description = "The job's id (a UUID; anything else is 404)"),
    ),
    responses(
        (status = 200, description = "The job", body = ErasureView),
        (status = 404, description = "not_found", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn get_erasure(
    State(state): State<AppState>,
    Path((user_id, erasure_id)): Path<(String, String)>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<Json<ErasureView>, ApiError> {
    let tenant = owner(&headers, &user_id)?;
    let not_found = || ApiError::NotFound("erasure not found".into());
    let id = Uuid::parse_str(&erasure_id).map_err(|_| not_found())?;
    match state.backends.erasures.erasure(id).await? {
        Some(job) if job.tenant == tenant => Ok(Json(job.into())),
        _ => Err(not_found()),
    }
}

/// Runs the jobs one after another off the request. A failure is recorded on its job and
/// retried by the resumer.
fn run_in_background(state: &AppState, ids: Vec<Uuid>) {
    let eraser = state.eraser.clone();
    tokio::spawn(async move {
        for id in ids {
            if let Err(e) = eraser.run(id).await {
                tracing::warn!(erasure = %id, error = format!("{e:#}"), "erasure run failed");
            }
        }
    });
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TeamErase {
    /// Only this agent of the team.
    agent_id: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ErasureList {
    items: Vec<ErasureView>,
}

/// Admin key only: erases every owner of the team (or of one of its agents) with turns,
/// memories, scenes or a persona, one job per owner (see `DELETE /v1/users/{user_id}`). The
/// team's API keys and prompt overrides are kept: revoke and deactivate them on their own.
/// Logged in the operator's log with the job ids.
#[utoipa::path(
    delete,
    path = "/v1/admin/teams/{team_id}",
    operation_id = "erase_team",
    tag = "admin",
    params(("team_id" = String, Path, description = "The team to erase"), TeamErase),
    responses(
        (status = 202, description = "One job per owner, started or already running; empty when the team has nothing", body = ErasureList),
        (status = 400, description = "missing_tenant: a blank team or agent id", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: a bad team or agent id, an unknown parameter", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn erase_team(
    State(state): State<AppState>,
    OperatorActor(actor): OperatorActor,
    Path(team_id): Path<String>,
    query: Result<Query<TeamErase>, axum::extract::rejection::QueryRejection>,
) -> Result<(StatusCode, Json<ErasureList>), ApiError> {
    let started = std::time::Instant::now();
    let agent = query.as_ref().ok().and_then(|Query(q)| q.agent_id.clone());
    let result = request_team_erasure(&state, &actor, &team_id, query).await;
    let erasures: Vec<String> = match &result {
        Ok((_, Json(list))) => list.items.iter().map(|job| job.id.to_string()).collect(),
        Err(_) => Vec::new(),
    };
    let audited = OperatorAudited {
        actor,
        action: "team.erase",
        team_id: tenant_id("team_id", Some(&team_id)).ok(),
        target: None,
        started,
        detail: serde_json::json!({ "agent_id": agent, "erasures": erasures }),
    };
    record_operator(&state, audited, &result).await;
    result
}

async fn request_team_erasure(
    state: &AppState,
    actor: &str,
    team_id: &str,
    query: Result<Query<TeamErase>, axum::extract::rejection::QueryRejection>,
) -> Result<(StatusCode, Json<ErasureList>), ApiError> {
    let Query(query) = query.map_err(|e| ApiError::Invalid(e.body_text()))?;
    let team = tenant_id("team_id", Some(team_id))?;
    let agent = query
        .agent_id
        .as_deref()
        .map(|agent| tenant_id("agent_id", Some(agent)))
        .transpose()?;
    let owners = state.backends.erasures.owners_of(&team, agent.as_deref()).await?;
    let mut jobs = Vec::with_capacity(owners.len());
    for owner in &owners {
        jobs.push(state.eraser.request(owner, actor).await?);
    }
    tracing::info!(
        team,
        agent = agent.as_deref(),
        owners = jobs.len(),
        "team erasure requested"
    );
    run_in_background(state, jobs.iter().map(|j| j.id).collect());
    Ok((
        StatusCode::ACCEPTED,
        Json(ErasureList {
            items: jobs.into_iter().map(ErasureView::from).collect(),
        }),
    ))
}

/// Admin key only: any erasure job.
#[utoipa::path(
    get,
    path = "/v1/admin/erasures/{erasure_id}",
    operation_id = "get_erasure_as_operator",
    tag = "admin",
    params(("erasure_id" = String, Path, description = "The job's id (a UUID; anything else is 404)")),
    responses(
        (status = 200, description = "The job", body = ErasureView),
        (status = 404, description = "not_found", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: the id is not UTF-8", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn get_erasure_as_operator(
    State(state): State<AppState>,
    Path(erasure_id): Path<String>,
) -> Result<Json<ErasureView>, ApiError> {
    let not_found = || ApiError::NotFound("erasure not found".into());
    let id = Uuid::parse_str(&erasure_id).map_err(|_| not_found())?;
    let job = state.backends.erasures.erasure(id).await?.ok_or_else(not_found)?;
    Ok(Json(job.into()))
}
