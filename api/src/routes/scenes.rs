//! L2 scene and L3 persona endpoints: the scene list, one scene's document with its
//! provenance, and the persona.

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;
use shared::files::FileError;
use shared::store::scene::{ArtifactProvenance, SceneRow, LAYER_L2, LAYER_L3};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{tenant_from, Path, TenantHeaders};
use crate::state::AppState;

/// Provenance records shown with a scene or the persona, newest first.
const PROVENANCE_LIMIT: u32 = 20;

#[derive(Serialize, ToSchema)]
#[schema(as = Scene)]
pub struct SceneView {
    id: Uuid,
    name: String,
    overview: String,
    tags: Vec<String>,
    version: i64,
    /// Where the scene navigation list of recall points (relative to the owner's folder).
    path: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<SceneRow> for SceneView {
    fn from(row: SceneRow) -> Self {
        Self {
            path: format!("scenes/{}.md", row.id),
            id: row.id,
            name: row.name,
            overview: row.overview,
            tags: row.tags,
            version: row.version,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[schema(as = SceneList)]
pub struct ListResponse {
    items: Vec<SceneView>,
}

/// `GET /v1/scenes`: the caller's active scenes, most recently updated first.
#[utoipa::path(
    get,
    path = "/v1/scenes",
    operation_id = "list_scenes",
    tag = "scenes",
    responses((status = 200, description = "The active scenes, most recently updated first", body = ListResponse)),
)]
pub async fn list(
    State(state): State<AppState>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<Json<ListResponse>, ApiError> {
    let tenant = tenant_from(&headers, None, None, None)?;
    let rows = state.backends.scenes.scenes(&tenant, false).await?;
    Ok(Json(ListResponse {
        items: rows.into_iter().map(SceneView::from).collect(),
    }))
}

/// One run that built or changed a scene or the persona.
#[derive(Serialize, ToSchema)]
#[schema(as = ArtifactProvenance)]
pub struct ProvenanceView {
    id: Uuid,
    event: String,
    #[schema(required = true, value_type = Option<crate::openapi::TemplateRefDoc>)]
    template: Option<shared::memory::TemplateRef>,
    #[schema(required = true)]
    model: Option<String>,
    input_refs: Vec<String>,
    output_refs: Vec<String>,
    #[schema(value_type = Object)]
    detail: serde_json::Value,
    started_at: DateTime<Utc>,
    duration_ms: i64,
}

impl From<ArtifactProvenance> for ProvenanceView {
    fn from(p: ArtifactProvenance) -> Self {
        Self {
            id: p.id,
            event: p.event,
            template: p.template,
            model: p.model,
            input_refs: p.input_refs,
            output_refs: p.output_refs,
            detail: p.detail,
            started_at: p.started_at,
            duration_ms: p.duration_ms,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[schema(as = SceneDetail)]
pub struct SceneResponse {
    #[serde(flatten)]
    scene: SceneView,
    /// The scene document (Markdown).
    content: String,
    provenance: Vec<ProvenanceView>,
}

/// `GET /v1/scenes/{id}`: one active scene with its document.
#[utoipa::path(
    get,
    path = "/v1/scenes/{id}",
    operation_id = "get_scene",
    tag = "scenes",
    params(("id" = String, Path, description = "The scene's id (a UUID; anything else is 404)")),
    responses(
        (status = 200, description = "The scene, its Markdown document and its provenance (newest first)", body = SceneResponse),
        (status = 404, description = "scene_not_found", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<Json<SceneResponse>, ApiError> {
    let tenant = tenant_from(&headers, None, None, None)?;
    let not_found = || ApiError::NotFoundCode("scene_not_found", "scene not found".into());
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    let scenes = &state.backends.scenes;
    let row = scenes
        .scene(&tenant, id)
        .await?
        .filter(|row| row.status == shared::store::scene::SceneStatus::Active)
        .ok_or_else(not_found)?;
    let Some(content) = read_text(&state, &row.object_key).await? else {
        // The row outlived its document (a lost object); the next scene run of this owner
        // rewrites it from the row. Say so rather than answer with an empty scene.
        tracing::error!(scene = %id, key = %row.object_key, "scene document missing");
        return Err(ApiError::NotFoundCode(
            "scene_not_found",
            "the scene's document is missing; it is rewritten by the next scene run".into(),
        ));
    };
    let provenance = scenes
        .artifact_provenance(&tenant, LAYER_L2, Some(id), PROVENANCE_LIMIT)
        .await?;
    Ok(Json(SceneResponse {
        scene: row.into(),
        content,
        provenance: provenance.into_iter().map(ProvenanceView::from).collect(),
    }))
}

#[derive(Serialize, ToSchema)]
#[schema(as = Persona)]
pub struct PersonaResponse {
    /// The persona document (Markdown).
    content: String,
    version: i64,
    #[schema(required = true)]
    updated_at: Option<DateTime<Utc>>,
    provenance: Vec<ProvenanceView>,
}

/// `GET /v1/persona`: the caller's current persona; 404 `persona_not_found` before the first
/// build.
#[utoipa::path(
    get,
    path = "/v1/persona",
    operation_id = "get_persona",
    tag = "scenes",
    responses(
        (status = 200, description = "The L3 persona (Markdown) and its provenance (newest first)", body = PersonaResponse),
        (status = 404, description = "persona_not_found: not built yet", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn persona(
    State(state): State<AppState>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<Json<PersonaResponse>, ApiError> {
    let tenant = tenant_from(&headers, None, None, None)?;
    let not_found = || {
        ApiError::NotFoundCode(
            "persona_not_found",
            "no persona has been built for this user yet".into(),
        )
    };
    let scenes = &state.backends.scenes;
    let row = scenes.persona(&tenant).await?.ok_or_else(not_found)?;
    let Some(key) = row.object_key.as_deref().filter(|_| row.version > 0) else {
        return Err(not_found());
    };
    let content = read_text(&state, key).await?.ok_or_else(not_found)?;
    let mut provenance = scenes
        .artifact_provenance(&tenant, LAYER_L3, None, PROVENANCE_LIMIT)
        .await?;
    // A build may commit between the two reads: show only the history of the version served.
    provenance.retain(|p| built_version(p).is_none_or(|v| v <= row.version));
    Ok(Json(PersonaResponse {
        content,
        version: row.version,
        updated_at: row.built_at,
        provenance: provenance.into_iter().map(ProvenanceView::from).collect(),
    }))
}

/// The persona version a build record produced (`persona@N` in its output refs).
fn built_version(record: &ArtifactProvenance) -> Option<i64> {
    record
        .output_refs
        .iter()
        .find_map(|r| r.strip_prefix("persona@").and_then(|v| v.parse().ok()))
}

async fn read_text(state: &AppState, key: &str) -> Result<Option<String>, ApiError> {
    match state.backends.files.get(key).await {
        Ok(bytes) => Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned())),
        Err(e @ FileError::Unavailable(_)) => Err(ApiError::Unavailable(Box::new(e))),
        Err(e) => Err(ApiError::Internal(Box::new(e))),
    }
}
