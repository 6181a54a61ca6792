//! Authentication of `/v1`: a bearer credential decides who calls, and what it may do.
//!
//! - **Off** (the embedded default on a loopback address, or `SEDIMENT_AUTH=off`): every caller
//!   is whichever tenant its headers name, as before keys existed.
//! - **On** (an admin key, or an identity provider's JWKS, is set): the operator's admin key may
//!   call `/v1/admin/*` and nothing else; a team's API key (`shared::auth`), or a token of the
//!   identity provider (`jwt`), may call the rest within its scope. The credential decides the
//!   team; the agent and user still come from the headers or body, and must be inside its scope
//!   (see `extract::tenant_from`). A missing or unknown credential is 401 with `WWW-Authenticate`.
//!
//! A bearer shaped like an API key (`sdmk_…`) is only ever looked up as a key, and one shaped
//! like a JWT only ever verified as a token: neither kind can be mistaken for the other.
//!
//! Keys are looked up by the SHA-256 of the presented secret and cached per replica for
//! `SEDIMENT_AUTH_KEY_CACHE_MS` (10 s): a revoked key stops working at once on the replica
//! that revoked it and within that bound on every other.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use shared::auth::{key_hash, looks_like_key, secrets_equal, ApiKey, Permission};
use shared::config::{AuthMode, AuthSettings, Deployment, Secret, Settings};
use shared::metrics;
use shared::store::keys::KeyStore;
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::TEAM_HEADER;
use crate::jwt::{looks_like_jwt, TokenError, TokenGrant, TokenVerifier};
use crate::limit::RateLimiter;

/// The prefix of every route only the operator's admin key may call.
pub const ADMIN_ROUTES: &str = "/v1/admin/";

/// The admin routes a server with auth off (loopback, no admin key) serves to anyone: the
/// queue tools. Such a server trusts every caller with every tenant already, and its parked
/// messages live in memory: restarting it with an admin key to replay them would lose them.
const OPEN_ADMIN_ROUTES: &str = "/v1/admin/queues/";
/// Most keys a replica keeps in its cache; past it the cache starts over. Far above the keys
/// one deployment holds, low enough that random bearer tokens cannot grow it without end.
const MAX_CACHED_KEYS: usize = 10_000;

/// Who is calling, as the middleware decided; every `/v1` handler finds it in the request's
/// extensions.
#[derive(Debug, Clone)]
pub enum Principal {
    /// Auth is off: the caller is whichever tenant it names.
    Open,
    /// The operator's admin key.
    Operator,
    /// A team's API key.
    Key(Arc<ApiKey>),
    /// A token of the organisation's identity provider.
    Token(Arc<TokenGrant>),
}

/// The API's authentication, decided once at start.
#[derive(Clone)]
pub enum Auth {
    Off,
    On(Arc<KeyAuth>),
}

/// The credentials accepted with auth on.
pub struct KeyAuth {
    /// `None` when only the identity provider turned auth on: then no one manages keys.
    admin_key: Option<Secret>,
    keys: Arc<dyn KeyStore>,
    cache: KeyCache,
    tokens: Option<TokenVerifier>,
}

/// Why the API must not start with these settings on `listen`, if it must not: auth asked for
/// but not configured, or off where that is not allowed (the cluster, a non-loopback address)
/// without `SEDIMENT_AUTH=off`. `run` asks before it opens any store, so a refused start leaves
/// nothing behind; [`Auth::decide`] asks again for servers started without `run`.
pub fn refusal(settings: &Settings, listen: SocketAddr) -> Option<String> {
    let auth = &settings.auth;
    if auth.admin_key.is_some() || auth.jwt.is_some() {
        return None;
    }
    match auth.mode {
        AuthMode::Off => None,
        AuthMode::On => Some(
            "SEDIMENT_AUTH=on needs SEDIMENT_ADMIN_KEY, SEDIMENT_ADMIN_KEY_FILE, SEDIMENT_AUTH_JWKS_FILE \
             or SEDIMENT_AUTH_JWKS_URL"
                .to_owned(),
        ),
        AuthMode::Auto if matches!(settings.deployment, Deployment::Cluster { .. }) => Some(
            "the cluster deployment requires auth: set SEDIMENT_ADMIN_KEY or SEDIMENT_ADMIN_KEY_FILE, or an \
             identity provider's SEDIMENT_AUTH_JWKS_URL or SEDIMENT_AUTH_JWKS_FILE \
             (or SEDIMENT_AUTH=off to run without, which lets any client act as any tenant)"
                .to_owned(),
        ),
        AuthMode::Auto if !listen.ip().is_loopback() => Some(format!(
            "refusing to listen on {listen} with auth off: set SEDIMENT_ADMIN_KEY or SEDIMENT_ADMIN_KEY_FILE \
             (or SEDIMENT_AUTH_JWKS_URL or SEDIMENT_AUTH_JWKS_FILE), listen on a loopback address, \
             or set SEDIMENT_AUTH=off explicitly"
        )),
        AuthMode::Auto => None,
    }
}

impl Auth {
    /// Decides from the settings, the deployment and the address the API listens on. Refuses
    /// to start when auth would be off anywhere but on a loopback address of the embedded
    /// deployment, unless `SEDIMENT_AUTH=off` says so. A JWKS file is read here, so a missing
    /// or unusable one fails the start.
    pub fn decide(settings: &Settings, listen: SocketAddr, keys: Arc<dyn KeyStore>) -> anyhow::Result<Self> {
        let AuthSettings {
            mode,
            admin_key,
            key_cache_ttl,
            jwt,
        } = &settings.auth;
        let configured = admin_key.is_some() || jwt.is_some();
        match mode {
            AuthMode::Off => {
                tracing::warn!(
                    addr = %listen,
                    "auth is off (SEDIMENT_AUTH=off): any client that reaches this address can read and write every tenant"
                );
                if jwt.is_some() {
                    tracing::warn!("SEDIMENT_AUTH=off: the identity provider's tokens are ignored");
                }
                Ok(Self::Off)
            }
            AuthMode::On | AuthMode::Auto if configured => {
                let tokens = jwt.as_ref().map(TokenVerifier::new).transpose()?;
                let accepted = match (admin_key.is_some(), tokens.is_some()) {
                    (_, false) => "an API key",
                    (true, true) => "an API key or a token of the identity provider",
                    (false, true) => "a token of the identity provider (or an API key made earlier)",
                };
                tracing::info!("auth is on: /v1 needs {accepted} (Authorization: Bearer)");
                Ok(Self::On(Arc::new(KeyAuth {
                    admin_key: admin_key.clone(),
                    keys,
                    cache: KeyCache::new(*key_cache_ttl),
                    tokens,
                })))
            }
            AuthMode::On | AuthMode::Auto => {
                if let Some(refusal) = refusal(settings, listen) {
                    anyhow::bail!(refusal);
                }
                tracing::info!(
                    addr = %listen,
                    "auth is off: no admin key is set and the API listens on loopback only; \
                     set SEDIMENT_ADMIN_KEY to require API keys"
                );
                Ok(Self::Off)
            }
        }
    }

    /// Forgets what this replica cached of a key (after a revocation here).
    pub fn forget(&self, id: Uuid) {
        if let Self::On(auth) = self {
            auth.cache.forget(id);
        }
    }
}

/// What the middleware of `/v1` needs: authentication and the per-team rate limit.
#[derive(Clone)]
pub struct Gate {
    pub auth: Auth,
    pub limiter: Option<Arc<RateLimiter>>,
}

/// The middleware of every `/v1` route: decides the [`Principal`] and whether it may call this
/// route, applies the team's rate limit, and hands the principal to the handler.
pub async fn authenticate(State(gate): State<Gate>, mut req: Request, next: Next) -> Response {
    let Gate { auth, limiter } = gate;
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let principal = match &auth {
        Auth::Off => Principal::Open,
        // Only the header crosses the await: a request body is not `Sync`.
        Auth::On(auth) => match auth.principal(req.headers().get(AUTHORIZATION).cloned()).await {
            Ok(principal) => principal,
            Err(e) => return e.into_response(),
        },
    };
    if let Err(e) = allow(&principal, req.method(), &route) {
        count("forbidden");
        return e.into_response();
    }
    // The team a limit applies to: the key's, or with auth off the one the caller names.
    let team = match &principal {
        Principal::Open => req
            .headers()
            .get(TEAM_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|t| t.trim().to_owned()),
        Principal::Operator => {
            count("admin");
            None
        }
        Principal::Key(key) => {
            count("key");
            Some(key.team.clone())
        }
        Principal::Token(token) => {
            count("token");
            Some(token.team.clone())
        }
    };
    // An MCP tool's `/v1` call was counted as the `/mcp` request that made it.
    let counted = req.extensions().get::<crate::client::Counted>().is_some();
    if let (Some(limiter), Some(team), false) = (&limiter, &team, counted) {
        if let Err(wait) = limiter.check(team) {
            ::metrics::counter!(metrics::RATE_LIMITED).increment(1);
            return ApiError::RateLimited(wait).into_response();
        }
    }
    req.extensions_mut().insert(principal);
    next.run(req).await
}

impl KeyAuth {
    async fn principal(&self, authorization: Option<HeaderValue>) -> Result<Principal, ApiError> {
        let Some(value) = authorization else {
            count("missing");
            let credential = if self.tokens.is_some() {
                "an API key or a token"
            } else {
                "an API key"
            };
            return Err(ApiError::Unauthorized(format!(
                "this call needs {credential}: send Authorization: Bearer <credential>"
            )));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .unwrap_or_default();
        if self
            .admin_key
            .as_ref()
            .is_some_and(|admin_key| secrets_equal(token, admin_key.expose()))
        {
            return Ok(Principal::Operator);
        }
        if looks_like_key(token) {
            match self.cache.get(token, self.keys.as_ref()).await {
                Ok(Some(key)) => return Ok(Principal::Key(key)),
                Ok(None) => {}
                Err(e) => {
                    count("unavailable");
                    return Err(e.into());
                }
            }
        }
        if let Some(tokens) = self.tokens.as_ref().filter(|_| looks_like_jwt(token)) {
            return match tokens.verify(token).await {
                Ok(grant) => Ok(Principal::Token(Arc::new(grant))),
                Err(TokenError::Invalid(reason)) => {
                    count("invalid_token");
                    Err(ApiError::Unauthorized(reason))
                }
                Err(TokenError::NoGrant(reason)) => {
                    count("forbidden");
                    Err(ApiError::Forbidden(reason))
                }
            };
        }
        count("unknown");
        Err(ApiError::Unauthorized(
            "the API key is not valid (unknown or revoked)".into(),
        ))
    }
}

/// Whether `principal` may call `method route`.
fn allow(principal: &Principal, method: &Method, route: &str) -> Result<(), ApiError> {
    let admin_route = route.starts_with(ADMIN_ROUTES);
    match principal {
        Principal::Open if route.starts_with(OPEN_ADMIN_ROUTES) => Ok(()),
        Principal::Open if admin_route => Err(ApiError::Forbidden(
            "auth is off, so there are no API keys to manage: set SEDIMENT_ADMIN_KEY".into(),
        )),
        Principal::Open => Ok(()),
        Principal::Operator if admin_route => Ok(()),
        Principal::Operator => Err(ApiError::Forbidden(
            "the admin key manages API keys only: call this route with a team's API key".into(),
        )),
        Principal::Key(_) | Principal::Token(_) if admin_route => Err(ApiError::Forbidden(
            "only the operator's admin key may manage API keys".into(),
        )),
        Principal::Key(key) => permitted("API key", key.permission, method, route),
        Principal::Token(token) => permitted("token", token.permission, method, route),
    }
}

fn permitted(credential: &str, has: Permission, method: &Method, route: &str) -> Result<(), ApiError> {
    let needed = required_permission(method, route);
    if has >= needed {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!(
            "this {credential} has {} permission; {method} {route} needs {}",
            has.as_str(),
            needed.as_str()
        )))
    }
}

/// The permission a team's key needs for a `/v1` route. Reads (including the searches, which
/// are POSTs) need `read`; team settings and the audit log need `admin`; every other change
/// needs `write`. A route this table does not know needs `admin`: a new route is closed until
/// it is placed here.
pub fn required_permission(method: &Method, route: &str) -> Permission {
    match (method.as_str(), route) {
        ("POST", "/v1/conversations/search" | "/v1/recall" | "/v1/memories/search") => Permission::Read,
        // The MCP endpoint reads nothing itself: each tool is a `/v1` call that the key must
        // be allowed on its own (`mcp::Upstream`).
        ("POST" | "GET" | "DELETE", "/mcp") => Permission::Read,
        (
            "GET",
            "/v1/sessions/{session_id}/messages"
            | "/v1/sessions/{session_id}/context"
            | "/v1/sessions/{session_id}/compaction"
            | "/v1/memories"
            | "/v1/memories/{memory_id}"
            | "/v1/scenes"
            | "/v1/scenes/{id}"
            | "/v1/persona"
            | "/v1/prompts"
            | "/v1/prompts/{template_id}"
            | "/v1/users/{user_id}/erasures/{erasure_id}"
            // An export reads the owner's memory, as the listings do.
            | "/v1/export",
        ) => Permission::Read,
        (
            "POST",
            "/v1/sessions/{session_id}/messages"
            | "/v1/sessions/{session_id}/reset"
            | "/v1/sessions/{session_id}/compact"
            | "/v1/import",
        )
        | ("PATCH" | "DELETE", "/v1/memories/{memory_id}") => Permission::Write,
        _ => Permission::Admin,
    }
}

fn count(outcome: &'static str) {
    ::metrics::counter!(metrics::AUTH_REQUESTS, "outcome" => outcome).increment(1);
}

/// What a replica read of keys lately, by secret hash: when, and the key, or `None` for a
/// hash that matched no active key.
struct KeyCache {
    ttl: std::time::Duration,
    entries: Mutex<Entries>,
}

type Entries = HashMap<String, (Instant, Option<Arc<ApiKey>>)>;

impl KeyCache {
    fn new(ttl: std::time::Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    async fn get(&self, secret: &str, store: &dyn KeyStore) -> shared::store::StoreResult<Option<Arc<ApiKey>>> {
        let hash = key_hash(secret);
        let cached = self
            .lock()
            .get(&hash)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, key)| key.clone());
        if let Some(key) = cached {
            ::metrics::counter!(metrics::AUTH_KEY_LOOKUPS, "source" => "cache").increment(1);
            return Ok(key);
        }
        ::metrics::counter!(metrics::AUTH_KEY_LOOKUPS, "source" => "store").increment(1);
        // The read also records the key's last use: once per key and period on each replica.
        let key = store.use_key(&hash, Utc::now()).await?.map(Arc::new);
        let mut entries = self.lock();
        if entries.len() >= MAX_CACHED_KEYS {
            let ttl = self.ttl;
            entries.retain(|_, (at, _)| at.elapsed() < ttl);
            if entries.len() >= MAX_CACHED_KEYS {
                entries.clear();
            }
        }
        entries.insert(hash, (Instant::now(), key.clone()));
        Ok(key)
    }

    fn forget(&self, id: Uuid) {
        self.lock()
            .retain(|_, (_, key)| key.as_ref().is_none_or(|key| key.id != id));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding the lock leaves a map that is still sound.
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(permission: Permission) -> Principal {
        Principal::Key(Arc::new(ApiKey {
            id: Uuid::new_v4(),
            team: "acme".into(),
            agents: None,
            permission,
            name: None,
            prefix: "sdmk_0000000".into(),
            created_at: Utc::now(),
            last_used_at: None,
            revoked_at: None,
        }))
    }

    fn token(permission: Permission) -> Principal {
        Principal::Token(Arc::new(TokenGrant {
            team: "acme".into(),
            agent: None,
            user: None,
            permission,
        }))
    }

    #[test]
    fn each_principal_reaches_only_its_routes() {
        let (get, post, put) = (Method::GET, Method::POST, Method::PUT);
        assert!(allow(&Principal::Open, &get, "/v1/memories").is_ok());
        assert!(allow(&Principal::Open, &post, "/v1/admin/keys").is_err());
        assert!(allow(&Principal::Open, &Method::DELETE, "/v1/admin/teams/{team_id}").is_err());
        // An open server's parked messages are in memory: its operator replays them as is.
        assert!(allow(&Principal::Open, &post, "/v1/admin/queues/{kind}/parked/replay").is_ok());
        assert!(allow(&Principal::Operator, &post, "/v1/admin/keys").is_ok());
        assert!(allow(&Principal::Operator, &get, "/v1/memories").is_err());
        assert!(allow(&key(Permission::Admin), &get, "/v1/admin/keys").is_err());
        assert!(allow(&key(Permission::Read), &post, "/v1/recall").is_ok());
        assert!(allow(&key(Permission::Read), &post, "/v1/sessions/{session_id}/messages").is_err());
        assert!(allow(&key(Permission::Write), &post, "/v1/sessions/{session_id}/messages").is_ok());
        assert!(allow(&key(Permission::Write), &put, "/v1/prompts/{template_id}").is_err());
        assert!(allow(&key(Permission::Admin), &put, "/v1/prompts/{template_id}").is_ok());
        assert!(allow(&key(Permission::Write), &get, "/v1/audit").is_err());
        // A token is held to the same table as a key with its permission.
        assert!(allow(&token(Permission::Admin), &get, "/v1/admin/keys").is_err());
        assert!(allow(&token(Permission::Read), &post, "/v1/recall").is_ok());
        assert!(allow(&token(Permission::Read), &post, "/v1/sessions/{session_id}/messages").is_err());
        assert!(allow(&token(Permission::Admin), &put, "/v1/prompts/{template_id}").is_ok());
    }

    #[test]
    fn an_unknown_route_needs_admin() {
        assert_eq!(
            required_permission(&Method::POST, "/v1/something/new"),
            Permission::Admin
        );
        assert_eq!(required_permission(&Method::DELETE, "/v1/persona"), Permission::Admin);
    }
}
