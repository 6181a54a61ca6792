//! Request extraction: JSON bodies with our error codes, and the caller's tenant.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use serde::de::DeserializeOwned;
use shared::domain::{TaskId, Tenant};

use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::AppState;

pub const TEAM_HEADER: &str = "x-sediment-team";
pub const AGENT_HEADER: &str = "x-sediment-agent";
pub const USER_HEADER: &str = "x-sediment-user";
/// Who acts for the tenant (a person or service behind the agent), for the audit log.
pub const ACTOR_HEADER: &str = "x-sediment-actor";
/// The task a request works under (see [`task_from`]).
pub const TASK_HEADER: &str = "x-sediment-task";

/// A JSON body. Syntax errors are 400 `malformed_json`; a body of the wrong shape is 422
/// `invalid_request`; a body over the limit is 413.
pub struct AppJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for AppJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/json"));
        if !is_json {
            return Err(ApiError::UnsupportedMediaType(
                "expected content-type application/json".into(),
            ));
        }
        let limit = state.limits.max_body_bytes;
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(limit)
            } else {
                ApiError::MalformedJson(format!("failed to read request body: {}", rejection.body_text()))
            }
        })?;
        let rejection = |e: serde_json::Error| {
            use serde_json::error::Category;
            match e.classify() {
                Category::Syntax | Category::Eof | Category::Io => {
                    ApiError::MalformedJson(format!("malformed JSON: {e}"))
                }
                Category::Data => ApiError::Invalid(format!("invalid request body: {e}")),
            }
        };
        // Every body is an object; serde would also fill a struct from an array of its fields.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).map_err(rejection)?;
            return Err(ApiError::Invalid("invalid request body: must be a JSON object".into()));
        }
        serde_json::from_slice(&bytes).map(AppJson).map_err(rejection)
    }
}

/// `deserialize_with` for an optional nested struct: a JSON object or `null`, never the array
/// of its fields that serde's derive would also take (the document allows objects only).
pub fn optional_object<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    use serde::Deserialize as _;
    Option::<serde_json::Map<String, serde_json::Value>>::deserialize(deserializer)?
        .map(|fields| serde_json::from_value(serde_json::Value::Object(fields)))
        .transpose()
        .map_err(serde::de::Error::custom)
}

/// `deserialize_with` for a list of nested structs: each a JSON object (see [`optional_object`]).
pub fn objects<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    use serde::Deserialize as _;
    Vec::<serde_json::Map<String, serde_json::Value>>::deserialize(deserializer)?
        .into_iter()
        .enumerate()
        .map(|(i, fields)| {
            serde_json::from_value(serde_json::Value::Object(fields))
                .map_err(|e| serde::de::Error::custom(format_args!("[{i}]: {e}")))
        })
        .collect()
}

/// axum's `Path`, rejected with our error body: a parameter that is not valid UTF-8 after
/// percent-decoding is 422 `invalid_request` (axum answers plain text).
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| Self(value))
            .map_err(|rejection| ApiError::Invalid(rejection.body_text()))
    }
}

/// Tenant ids from the headers. Body fields, where an endpoint accepts them, fill in what the
/// headers lack (see [`tenant_from`]).
pub struct TenantHeaders(pub HeaderIds);

#[derive(Debug, Clone)]
pub struct HeaderIds {
    team: Option<String>,
    agent: Option<String>,
    user: Option<String>,
    actor: Option<String>,
    /// Kept raw: only the routes that take a task read it (`task_from`), so on the others it
    /// can be neither wrong nor refused.
    task: Option<HeaderValue>,
    /// Who called, as authentication decided.
    principal: Principal,
}

impl<S: Send + Sync> FromRequestParts<S> for TenantHeaders {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Only a route behind `auth::authenticate` may read a tenant: one that is not would
        // serve any caller as any tenant, so it fails loudly instead.
        let principal =
            parts.extensions.get::<Principal>().cloned().ok_or_else(|| {
                ApiError::Internal("a tenant route is not behind the authentication middleware".into())
            })?;
        let headers = &parts.headers;
        Ok(Self(HeaderIds {
            team: header(headers, TEAM_HEADER)?,
            agent: header(headers, AGENT_HEADER)?,
            user: header(headers, USER_HEADER)?,
            actor: header(headers, ACTOR_HEADER)?,
            task: headers.get(TASK_HEADER).cloned(),
            principal,
        }))
    }
}

fn header(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map(str::to_owned)
                .map_err(|_| ApiError::Invalid(format!("header {name} must be visible ASCII")))
        })
        .transpose()
}

/// Resolves the tenant: headers first, then the body's `team_id`/`agent_id`/`user_id`, within
/// what the caller's credential allows. A team's key or token decides the team (naming it is
/// optional; naming another is 403). A key narrowed to some agents may act only as those, and a
/// token whose claims name an agent or a user acts as that one (naming it is optional; naming
/// another is 403).
pub fn tenant_from(
    headers: &HeaderIds,
    team: Option<&str>,
    agent: Option<&str>,
    user: Option<&str>,
) -> Result<Tenant, ApiError> {
    let team = headers.team.as_deref().or(team);
    let agent = headers.agent.as_deref().or(agent);
    let user = headers.user.as_deref().or(user);
    match &headers.principal {
        Principal::Open => Ok(Tenant::new(team, agent, user)?),
        Principal::Key(key) => within(
            "API key",
            Tenant::new(Some(team.unwrap_or(&key.team)), agent, user)?,
            &key.team,
            |agent| key.allows_agent(agent),
            None,
        ),
        Principal::Token(token) => within(
            "token",
            Tenant::new(
                Some(team.unwrap_or(&token.team)),
                agent.or(token.agent.as_deref()),
                user.or(token.user.as_deref()),
            )?,
            &token.team,
            |agent| token.agent.as_deref().is_none_or(|pinned| pinned == agent),
            token.user.as_deref(),
        ),
        Principal::Operator => Err(ApiError::Forbidden(
            "the admin key manages API keys only: call this route with a team's API key".into(),
        )),
    }
}

/// `tenant`, if a team's credential reaches it: its team, an agent it allows, and its user
/// when it pins one.
fn within(
    credential: &str,
    tenant: Tenant,
    team: &str,
    allows_agent: impl Fn(&str) -> bool,
    user: Option<&str>,
) -> Result<Tenant, ApiError> {
    let refuse = |what: &str, id: &str| {
        Err(ApiError::Forbidden(format!(
            "this {credential} does not grant access to {what} {id:?}"
        )))
    };
    if tenant.team != team {
        return refuse("team", &tenant.team);
    }
    if !allows_agent(&tenant.agent) {
        return refuse("agent", &tenant.agent);
    }
    if user.is_some_and(|user| user != tenant.user) {
        return refuse("user", &tenant.user);
    }
    Ok(tenant)
}

/// Resolves the request's task: the `X-Sediment-Task` header, or `named` (the body's or the
/// query's `task`). Each is validated whenever it is present, so an invalid one is refused
/// even beside a valid other one; both given must name the same task.
pub fn task_from(headers: &HeaderIds, named: Option<&str>) -> Result<Option<TaskId>, ApiError> {
    let header = headers
        .task
        .as_ref()
        .map(|value| {
            let value = value
                .to_str()
                .map_err(|_| ApiError::Invalid(format!("header {TASK_HEADER} must be visible ASCII")))?;
            Ok::<_, ApiError>(TaskId::parse(value)?)
        })
        .transpose()?;
    let named = named.map(TaskId::parse).transpose()?;
    match (header, named) {
        (Some(header), Some(named)) if header != named => Err(ApiError::Invalid(format!(
            "the {TASK_HEADER} header names task {:?} but the request names {:?}: send one, or the same in both",
            header.as_str(),
            named.as_str()
        ))),
        (header, named) => Ok(header.or(named)),
    }
}

impl HeaderIds {
    /// True when auth is off: no credential decides the team.
    pub fn is_open(&self) -> bool {
        matches!(self.principal, Principal::Open)
    }

    pub fn tenant(&self) -> Result<Tenant, ApiError> {
        tenant_from(self, None, None, None)
    }

    /// Who acts, for the audit log: the actor header, else the tenant's user.
    pub fn actor(&self, tenant: &Tenant) -> String {
        self.actor
            .as_deref()
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| a.chars().take(MAX_ACTOR_CHARS).collect())
            .unwrap_or_else(|| tenant.user.clone())
    }
}

/// Longest actor kept in the audit log.
pub(crate) const MAX_ACTOR_CHARS: usize = 128;
