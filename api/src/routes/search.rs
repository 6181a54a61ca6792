//! Conversation search over the caller's L0 turns.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use shared::domain::SessionId;
use shared::index::Strategy;
use shared::metrics;
use shared::recall::{RecallIssue, EMBEDDING_UNAVAILABLE};
use shared::search::ConversationQuery;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::extract::{task_from, tenant_from, AppJson, TenantHeaders};
use crate::routes::sessions::TurnView;
use crate::state::AppState;

/// Longest query accepted, in characters.
pub(crate) const MAX_QUERY_CHARS: usize = 4_096;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// Not blank, at most 4096 characters.
    #[schema(min_length = 1, max_length = 4096)]
    query: String,
    /// 1 to `SEDIMENT_MAX_SEARCH_LIMIT` (100); default 10.
    #[schema(minimum = 1, maximum = 100)]
    limit: Option<usize>,
    /// Only this session's turns.
    session_id: Option<String>,
    /// Only the turns appended under this task: 1 to 128 characters, none a control
    /// character. The `X-Sediment-Task` header may carry it instead; given in both, it must be
    /// the same.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    task: Option<String>,
    /// `keyword`, `semantic` or `hybrid` (the default).
    #[schema(value_type = Option<crate::openapi::StrategyDoc>)]
    strategy: Option<Strategy>,
    team_id: Option<String>,
    agent_id: Option<String>,
    user_id: Option<String>,
}

/// A matching turn and its score.
#[derive(Serialize, ToSchema)]
pub struct SearchItem {
    #[serde(flatten)]
    turn: TurnView,
    score: f32,
}

#[derive(Serialize, ToSchema)]
pub struct SearchResponse {
    /// Best first; only what matched.
    items: Vec<SearchItem>,
    /// The strategy that ranked the items: `hybrid` runs as `keyword` without an embedder.
    #[schema(value_type = crate::openapi::StrategyDoc)]
    strategy: Strategy,
    /// Why the strategy was downgraded (`embedding_unavailable`), if it was.
    #[schema(value_type = Vec<crate::openapi::RecallIssueDoc>)]
    errors: Vec<RecallIssue>,
}

#[utoipa::path(
    post,
    path = "/v1/conversations/search",
    operation_id = "search_conversations",
    tag = "search",
    request_body(content = SearchRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The matching turns, best first", body = SearchResponse),
        (status = 400, description = "malformed_json", body = crate::openapi::ErrorBody),
        (status = 413, description = "payload_too_large", body = crate::openapi::ErrorBody),
        (status = 415, description = "unsupported_media_type", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: a body of the wrong shape, a blank or too long query, limit out of range, `semantic` without an embedder, an invalid task, or a task header that names another task than the body", body = crate::openapi::ErrorBody),
        (status = 503, description = "backend_unavailable: the index, the store or (for `semantic`) the embedder is down", body = crate::openapi::ErrorBody),
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
    check_query(&body.query)?;
    let max = state.limits.max_search_limit;
    let limit = body.limit.unwrap_or(10);
    if limit == 0 || limit > max {
        return Err(ApiError::Invalid(format!("limit must be between 1 and {max}")));
    }
    let session = body.session_id.as_deref().map(SessionId::parse).transpose()?;
    let strategy = body.strategy.unwrap_or_default();
    let query = ConversationQuery {
        text: body.query,
        limit,
        session,
        task,
        strategy,
    };
    let result = state.search.search(&tenant, &query).await;
    let label = if result.is_ok() { "ok" } else { "error" };
    ::metrics::counter!(metrics::SEARCHES, "strategy" => strategy.as_str(), "result" => label).increment(1);
    let results = result?;
    let errors = results
        .degraded
        .iter()
        .map(|e| RecallIssue {
            code: EMBEDDING_UNAVAILABLE,
            message: shared::runtime::error_chain(e),
        })
        .collect();
    let items = results
        .hits
        .into_iter()
        .map(|hit| SearchItem {
            turn: TurnView::from(hit.turn),
            score: hit.score,
        })
        .collect();
    Ok(Json(SearchResponse {
        items,
        strategy: results.strategy,
        errors,
    }))
}

/// A query must say something, and not too much.
pub(crate) fn check_query(query: &str) -> Result<(), ApiError> {
    if query.trim().is_empty() {
        return Err(ApiError::Invalid("query must not be empty".into()));
    }
    if query.chars().count() > MAX_QUERY_CHARS {
        return Err(ApiError::Invalid(format!(
            "query is longer than {MAX_QUERY_CHARS} characters"
        )));
    }
    Ok(())
}
