//! `POST /v1/recall`: the memory an agent injects before an LLM call.
//!
//! A recall answers 200 even when a backend fails or the deadline passes: the body carries
//! what was found and `errors` says what is missing (see `shared::recall`). Only bad input is a
//! 4xx.

use std::time::Duration;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use shared::domain::SessionId;
use shared::index::Strategy;
use shared::recall::{Budget, RecallRequest, RecallResponse};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::extract::{task_from, tenant_from, AppJson, TenantHeaders};
use crate::routes::search::check_query;
use crate::state::AppState;

/// Longest deadline a caller may ask for.
const MAX_TIMEOUT_MS: u64 = 60_000;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallBody {
    /// The new message: not blank, at most 4096 characters.
    #[schema(min_length = 1, max_length = 4096)]
    query: String,
    /// The current session: its turns are searched besides the tenant's memories.
    session_id: Option<String>,
    /// Narrows the dynamic part, memories and turns, to this task (the stable part stays the
    /// owner's): 1 to 128 characters, none a control character. The `X-Sediment-Task` header
    /// may carry it instead; given in both, it must be the same.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    task: Option<String>,
    /// Default `hybrid`.
    #[schema(value_type = Option<crate::openapi::StrategyDoc>)]
    strategy: Option<Strategy>,
    /// 1 to `SEDIMENT_MAX_SEARCH_LIMIT` (100); default `SEDIMENT_RECALL_LIMIT` (10).
    #[schema(minimum = 1, maximum = 100)]
    limit: Option<usize>,
    #[serde(default, deserialize_with = "crate::extract::optional_object")]
    budget: Option<BudgetBody>,
    /// The deadline, 1 to 60000 ms; default `SEDIMENT_RECALL_TIMEOUT_MS` (5000).
    #[schema(minimum = 1, maximum = 60000)]
    timeout_ms: Option<u64>,
    /// Re-rank by recency (off unless the instance turns it on by default).
    recency: Option<bool>,
    team_id: Option<String>,
    agent_id: Option<String>,
    user_id: Option<String>,
}

/// Caps in Unicode code points.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RecallBudget)]
pub struct BudgetBody {
    /// Per item; default `SEDIMENT_RECALL_ITEM_CHARS` (1000).
    #[schema(minimum = 1)]
    item_chars: Option<usize>,
    /// For all items; default `SEDIMENT_RECALL_TOTAL_CHARS` (6000).
    #[schema(minimum = 1)]
    total_chars: Option<usize>,
}

/// Answers 200 even when a backend fails or the deadline passes: `errors` says what is missing.
#[utoipa::path(
    post,
    path = "/v1/recall",
    operation_id = "recall",
    tag = "recall",
    request_body(content = RecallBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The stable part (for the system prompt) and the dynamic part (for the user message)", body = crate::openapi::RecallResponseDoc),
        (status = 400, description = "malformed_json", body = crate::openapi::ErrorBody),
        (status = 413, description = "payload_too_large", body = crate::openapi::ErrorBody),
        (status = 415, description = "unsupported_media_type", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: a body of the wrong shape, a blank or too long query, limit, budget or timeout_ms out of range, an invalid task, or a task header that names another task than the body", body = crate::openapi::ErrorBody),
    ),
)]

pub async fn recall(
    State(state): State<AppState>,
    TenantHeaders(headers): TenantHeaders,
    AppJson(body): AppJson<RecallBody>,
) -> Result<Json<RecallResponse>, ApiError> {
    let tenant = tenant_from(
        &headers,
        body.team_id.as_deref(),
        body.agent_id.as_deref(),
        body.user_id.as_deref(),
    )?;
    let task = task_from(&headers, body.task.as_deref())?;
    check_query(&body.query)?;
    let defaults = &state.recall_defaults;
    let max = state.limits.max_search_limit;
    let limit = body.limit.unwrap_or(defaults.default_limit.min(max));
    if limit == 0 || limit > max {
        return Err(ApiError::Invalid(format!("limit must be between 1 and {max}")));
    }
    let budget = Budget {
        item_chars: body
            .budget
            .as_ref()
            .and_then(|b| b.item_chars)
            .unwrap_or(defaults.item_chars),
        total_chars: body
            .budget
            .as_ref()
            .and_then(|b| b.total_chars)
            .unwrap_or(defaults.total_chars),
    };
    if budget.item_chars == 0 || budget.total_chars == 0 {
        return Err(ApiError::Invalid("budget caps must be greater than zero".into()));
    }
    let timeout_ms = body.timeout_ms.unwrap_or(defaults.timeout.as_millis() as u64);
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(ApiError::Invalid(format!(
            "timeout_ms must be between 1 and {MAX_TIMEOUT_MS}"
        )));
    }
    let request = RecallRequest {
        query: body.query,
        session: body.session_id.as_deref().map(SessionId::parse).transpose()?,
        task,
        strategy: body.strategy.unwrap_or_default(),
        limit,
        budget,
        timeout: Duration::from_millis(timeout_ms),
        recency: body.recency.unwrap_or(defaults.recency),
    };
    let started = std::time::Instant::now();
    let response = state.recall.recall(&tenant, &request).await;
    // What was handed to the agent, by id: the audit log keeps no content.
    super::audit::record_later(
        &state,
        super::audit::Audited {
            actor: headers.actor(&tenant),
            tenant,
            action: "recall",
            target: request.session.as_ref().map(|s| s.as_str().to_owned()),
            outcome: response.errors.first().map_or("ok", |e| e.code).to_owned(),
            started,
            detail: serde_json::json!({
                "strategy": response.strategy,
                "items": response.dynamic.iter().map(|i| serde_json::json!({"id": i.id, "kind": i.kind})).collect::<Vec<_>>(),
                "truncated": response.truncated,
                "errors": response.errors.iter().map(|e| e.code).collect::<Vec<_>>(),
            }),
        },
    );
    Ok(Json(response))
}
