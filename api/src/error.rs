//! The API's one error type and its HTTP mapping (STYLE R10). Public codes are stable; 5xx
//! bodies never carry internal detail, which is logged once, here.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use shared::domain::ValidationError;
use shared::runtime::error_chain;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    MissingTenant(String),
    #[error("{0}")]
    MalformedJson(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Invalid(String),
    #[error("request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("{0}")]
    TooManyItems(String),
    #[error("{0}")]
    NotFound(String),
    /// Not found, with a code of its own (`persona_not_found`: not built yet).
    #[error("{1}")]
    NotFoundCode(&'static str, String),
    /// No valid credentials were presented.
    #[error("{0}")]
    Unauthorized(String),
    /// The caller may not use this endpoint from where it is.
    #[error("{0}")]
    Forbidden(String),
    /// The team's rate limit is spent; a request may succeed after the duration.
    #[error("the team's rate limit is exceeded; retry after {} ms", .0.as_millis())]
    RateLimited(std::time::Duration),
    /// The team stores as many turns as its quota allows; the usage is read again after the
    /// duration (an erasure frees room).
    #[error("{0}")]
    QuotaExceeded(String, std::time::Duration),
    /// Refused with a status and a code of its own (an import's `invalid_import`, …).
    #[error("{2}")]
    Rejected(StatusCode, &'static str, String),
    #[error("a backend is unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: String,
}

impl ApiError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::MissingTenant(_) => (StatusCode::BAD_REQUEST, "missing_tenant"),
            Self::MalformedJson(_) => (StatusCode::BAD_REQUEST, "malformed_json"),
            Self::UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            Self::Invalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
            Self::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::TooManyItems(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_many_items"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Self::NotFoundCode(code, _) => (StatusCode::NOT_FOUND, code),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Self::QuotaExceeded(..) => (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded"),
            Self::Rejected(status, code, _) => (*status, code),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "backend_unavailable"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = match &self {
            Self::Unavailable(_) | Self::Internal(_) => {
                tracing::error!(code, error = %error_chain(&self), "request failed");
                self.to_string()
            }
            Self::MissingTenant(_)
            | Self::MalformedJson(_)
            | Self::UnsupportedMediaType(_)
            | Self::Invalid(_)
            | Self::PayloadTooLarge(_)
            | Self::TooManyItems(_)
            | Self::NotFound(_)
            | Self::NotFoundCode(..)
            | Self::Unauthorized(_)
            | Self::Forbidden(_)
            | Self::RateLimited(_)
            | Self::QuotaExceeded(..)
            | Self::Rejected(..) => self.to_string(),
        };
        // Whole seconds (RFC 9110), rounded up so that a retry at once is never too early.
        let retry_after = if let Self::RateLimited(wait) | Self::QuotaExceeded(_, wait) = &self {
            Some(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
        } else {
            None
        };
        let mut response = (status, Json(ErrorBody { code, message })).into_response();
        if status == StatusCode::UNAUTHORIZED {
            // RFC 6750: a 401 names the scheme that would have worked.
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"sediment\""),
            );
        }
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds.max(1)),
            );
        }
        response
    }
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        match e {
            ValidationError::MissingTenant(_) => Self::MissingTenant(format!(
                "{e}; send the X-Sediment-Team, X-Sediment-Agent and X-Sediment-User headers (or team_id, agent_id and user_id in the body)"
            )),
            ValidationError::Invalid { .. } => Self::Invalid(e.to_string()),
        }
    }
}

impl From<shared::store::StoreError> for ApiError {
    fn from(e: shared::store::StoreError) -> Self {
        use shared::store::StoreError;
        match e {
            StoreError::SessionNotFound => Self::NotFound("session not found".into()),
            StoreError::Unavailable(_) => Self::Unavailable(Box::new(e)),
            StoreError::Backend(_) => Self::Internal(Box::new(e)),
        }
    }
}

impl From<shared::bus::BusError> for ApiError {
    fn from(e: shared::bus::BusError) -> Self {
        if e.is_retryable() {
            Self::Unavailable(Box::new(e))
        } else {
            Self::Internal(Box::new(e))
        }
    }
}

impl From<shared::search::SearchError> for ApiError {
    fn from(e: shared::search::SearchError) -> Self {
        use shared::search::SearchError;
        let retryable = match &e {
            SearchError::NoEmbedder => return Self::Invalid(e.to_string()),
            SearchError::Index(inner) => inner.is_retryable(),
            SearchError::Store(shared::store::StoreError::SessionNotFound) => false,
            SearchError::Store(inner) => inner.is_retryable(),
            SearchError::Embed(inner) => inner.is_retryable(),
        };
        if retryable {
            Self::Unavailable(Box::new(e))
        } else {
            Self::Internal(Box::new(e))
        }
    }
}
