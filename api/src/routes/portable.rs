//! Moving an owner's whole memory: `GET /v1/export` streams it as JSONL (`shared::portable`
//! describes the format), and `POST /v1/import` loads such a stream, here or in the other
//! deployment.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt as _;
use serde::Serialize;
use shared::domain::Tenant;
use shared::metrics;
use shared::portable::{ExportError, ImportError, Parser, Portability, MEDIA_TYPE};
use shared::runtime::error_chain;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::extract::{tenant_from, TenantHeaders};
use crate::routes::audit::{self, Audited};
use crate::state::AppState;

/// Lines an export may run ahead of a slow reader.
const EXPORT_BUFFER: usize = 256;

/// What an import did.
#[derive(Serialize, ToSchema)]
pub struct ImportView {
    /// Lines read, the header and end line included.
    lines: usize,
    /// Rows of each kind the stream held.
    read: BTreeMap<String, u64>,
    /// Rows of each kind that were new here; the others were already here and were left as
    /// they were (a second import of a stream inserts nothing).
    inserted: BTreeMap<String, u64>,
}

/// Streams the owner's whole memory as JSONL: a header, sessions and their turns, memories
/// with their history and provenance, scenes and the persona with their documents, L2/L3
/// provenance, and an end line that counts the lines before it (a cut stream lacks it). Not a
/// snapshot: what is written meanwhile may or may not be in it. If the export fails midway
/// the response stops before the end line, and an import refuses it.
#[utoipa::path(
    get,
    path = "/v1/export",
    operation_id = "export_owner",
    tag = "portability",
    responses(
        (status = 200, description = "The stream, one JSON object per line", content_type = "application/x-ndjson", body = String),
        (status = 400, description = "missing_tenant", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn export(
    State(state): State<AppState>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<Response, ApiError> {
    let tenant = headers.tenant()?;
    let started = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(EXPORT_BUFFER);
    let portability = Portability::from_backends(&state.backends);
    let source = source(&state);
    let (task_state, task_tenant) = (state.clone(), tenant.clone());
    let actor = headers.actor(&tenant);
    // The export runs beside the response: the channel's bound is its backpressure, and a
    // dropped response (the client went away) ends it with `Closed`.
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        // `tx` is kept until a failure is signalled, so the body never sees the channel close
        // before it can tell a failure from the end.
        let outcome = portability.export(&task_tenant, &source, tx.clone()).await;
        let result = match &outcome {
            Ok(()) => "ok".to_owned(),
            Err(ExportError::Closed) => "closed".to_owned(),
            Err(e) => {
                tracing::error!(error = %error_chain(e), "export failed midway; the stream ends without its end line");
                let _ = failed_tx.send(());
                "failed".to_owned()
            }
        };
        drop(tx);
        ::metrics::counter!(metrics::EXPORTS, "outcome" => result.clone()).increment(1);
        audit::record(
            &task_state,
            Audited {
                actor,
                tenant: task_tenant,
                action: "owner.export",
                target: None,
                outcome: result,
                started,
                detail: serde_json::json!({}),
            },
        )
        .await;
    });
    let mut failed_rx = Some(failed_rx);
    let body = futures::stream::poll_fn(move |cx| {
        use std::task::Poll;
        match rx.poll_recv(cx) {
            Poll::Ready(Some(line)) => Poll::Ready(Some(Ok::<_, std::io::Error>(line))),
            // The sender is gone: finished, or failed. A failure aborts the body, so the
            // client sees a broken transfer, not a clean end.
            Poll::Ready(None) => match failed_rx.take().map(|mut f| f.try_recv()) {
                Some(Ok(())) => Poll::Ready(Some(Err(std::io::Error::other("export failed")))),
                _ => Poll::Ready(None),
            },
            Poll::Pending => Poll::Pending,
        }
    });
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, MEDIA_TYPE.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{}.jsonl\"", file_stem(&tenant)),
            ),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

/// Loads an export stream for an owner: the caller's team (the credential's), and the agent
/// and user of the headers, or else the stream's. The stream is read and checked whole before
/// anything is written, and then written in one transaction: an invalid or truncated stream,
/// or one whose ids another owner holds here, writes nothing. Ids, seqs and provenance are
/// kept; the turns are indexed again here; turns the stream's memories were extracted from
/// are not extracted again. What is already here is left as it is, so importing the same
/// stream twice inserts nothing the second time. The body may be up to
/// `SEDIMENT_MAX_IMPORT_BYTES` (256 MiB by default).
#[utoipa::path(
    post,
    path = "/v1/import",
    operation_id = "import_owner",
    tag = "portability",
    request_body(content = String, content_type = "application/x-ndjson", description = "An export stream"),
    responses(
        (status = 200, description = "Imported", body = ImportView),
        (status = 403, description = "forbidden: the stream names an owner the credential does not reach", body = crate::openapi::ErrorBody),
        (status = 409, description = "import_conflict: an id of the stream is another owner's here", body = crate::openapi::ErrorBody),
        (status = 413, description = "payload_too_large", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_import (naming the line), truncated_import, or unsupported_export_version", body = crate::openapi::ErrorBody),
        (status = 429, description = "quota_exceeded", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn import(
    State(state): State<AppState>,
    TenantHeaders(headers): TenantHeaders,
    body: Body,
) -> Result<Json<ImportView>, ApiError> {
    let started = Instant::now();
    let limit = state.limits.max_import_bytes;
    let mut parser = Parser::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut received = 0usize;
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| ApiError::Invalid(format!("could not read the request body: {e}")))?;
        received += chunk.len();
        if received > limit {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        pending.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = pending[start..].iter().position(|b| *b == b'\n') {
            feed(&mut parser, &pending[start..start + end])?;
            start += end + 1;
        }
        pending.drain(..start);
    }
    if !pending.is_empty() {
        feed(&mut parser, &pending)?;
    }
    let stream_owner = parser.header().map(|h| h.owner.clone());
    let parsed = parser.finish().map_err(import_error)?;
    let owner = stream_owner.expect("a finished stream has a header");
    let tenant = tenant_from(
        &headers,
        headers.is_open().then_some(owner.team.as_str()),
        Some(owner.agent.as_str()),
        Some(owner.user.as_str()),
    )?;

    let turns = parsed.rows.turns.len() as u64;
    if let Some(quotas) = state.quotas.as_ref().filter(|_| turns > 0) {
        // Counts every turn of the stream, also those already here: an import can be refused
        // a little early, never let past the quota.
        if let Err((stored, wait)) = quotas.admit(state.backends.store.as_ref(), &tenant.team, turns).await? {
            ::metrics::counter!(metrics::QUOTA_EXCEEDED).increment(1);
            return Err(ApiError::QuotaExceeded(
                format!(
                    "the team stores {stored} turns and the stream holds {turns}; its quota is {}",
                    quotas.max_turns()
                ),
                wait,
            ));
        }
    }

    let portability = Portability::from_backends(&state.backends);
    let outcome = portability.import(&tenant, parsed).await;
    let result = match &outcome {
        Ok(_) => "ok",
        Err(ImportError::Conflict(_)) => "conflict",
        Err(_) => "failed",
    };
    ::metrics::counter!(metrics::IMPORTS, "outcome" => result).increment(1);
    audit::record(
        &state,
        Audited {
            actor: headers.actor(&tenant),
            tenant: tenant.clone(),
            action: "owner.import",
            target: None,
            outcome: result.to_owned(),
            started,
            detail: match &outcome {
                Ok(report) => serde_json::json!({ "inserted": report.inserted }),
                Err(_) => serde_json::json!({}),
            },
        },
    )
    .await;
    let report = outcome.map_err(import_error)?;
    tracing::info!(lines = report.lines, inserted = ?report.inserted, "import committed");

    // The rows are committed: the index worker indexes the new turns on the wake-up (or the
    // sweep), and the memory outbox is applied in the background.
    for (session, last_seq) in &report.sessions {
        if *last_seq > 0 {
            state.wakeups.turn_appended(tenant.clone(), session.clone(), *last_seq);
        }
    }
    if report.inserted.get("memory").copied().unwrap_or(0) > 0 {
        let indexer = state.memory_indexer.clone();
        tokio::spawn(async move {
            if let Err(e) = indexer.drain().await {
                tracing::warn!(error = %error_chain(&e), "memory index update after an import failed; the sweep will apply it");
            }
        });
    }
    Ok(Json(ImportView {
        lines: report.lines,
        read: report.read,
        inserted: report.inserted,
    }))
}

fn feed(parser: &mut Parser, line: &[u8]) -> Result<(), ApiError> {
    let text = std::str::from_utf8(line).map_err(|_| {
        ApiError::Rejected(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_import",
            "a line is not UTF-8".into(),
        )
    })?;
    parser.line(text).map_err(import_error)
}

fn import_error(e: ImportError) -> ApiError {
    let reject = |status, code, e: &ImportError| ApiError::Rejected(status, code, e.to_string());
    match e {
        ImportError::Invalid { .. } => reject(StatusCode::UNPROCESSABLE_ENTITY, "invalid_import", &e),
        ImportError::UnsupportedVersion { .. } => {
            reject(StatusCode::UNPROCESSABLE_ENTITY, "unsupported_export_version", &e)
        }
        ImportError::Truncated { .. } => reject(StatusCode::UNPROCESSABLE_ENTITY, "truncated_import", &e),
        ImportError::Conflict(_) => reject(StatusCode::CONFLICT, "import_conflict", &e),
        ImportError::Store(e) => e.into(),
        ImportError::Files(e) if e.is_retryable() => ApiError::Unavailable(Box::new(e)),
        ImportError::Files(e) => ApiError::Internal(Box::new(e)),
    }
}

/// What the header's `source` says: the build and the deployment.
fn source(state: &AppState) -> String {
    let deployment = if state.backends.embedded { "embedded" } else { "cluster" };
    format!("sediment {} ({deployment})", env!("CARGO_PKG_VERSION"))
}

/// A file name for the download: the user id, kept to safe characters.
fn file_stem(tenant: &Tenant) -> String {
    let stem: String = tenant
        .user
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    format!("sediment-export-{stem}")
}
