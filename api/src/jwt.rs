//! Tokens of the organisation's identity provider (IdP): JWTs accepted in place of a team's API
//! key when `SEDIMENT_AUTH_JWKS_FILE` or `SEDIMENT_AUTH_JWKS_URL` is set.
//!
//! A token is checked against the one JWKS key its header's `kid` names, with that key's one
//! algorithm: the JWK's `alg`, else RS256 for an RSA key and ES256 for a P-256 key. A token
//! without a `kid` (some IdPs with one signing key omit it) is checked against the JWKS's only
//! key of the header's algorithm, and refused when there are several: sediment never tries keys
//! in turn. Nothing else is accepted. A header whose `alg` is `none`, an HMAC algorithm or
//! merely not its key's is refused before any signature check, so a public key can never serve
//! as an HMAC secret.
//! `exp` is required and `nbf` honoured, both with [`LEEWAY`] for clock skew; `iss` and `aud`
//! must match when configured (and must then be present).
//!
//! The claims named in the settings make the grant: the team (required), and the agent and
//! user when present, each pinning the token to that one id; the permission, else the default
//! one. A valid token that grants nothing usable here (no team, an unknown permission) is 403,
//! not 401: the IdP vouched for the caller, it is the grant that falls short.
//!
//! Keys are cached per replica. They are read again when older than the refresh period (in the
//! background: the request goes on with the cached keys), and when a token names a `kid` the
//! cache lacks (a rotation), at most once per cool-down ([`UNKNOWN_KID_COOLDOWN`], or the
//! refresh period if shorter) so that made-up kids cannot make the API hammer the IdP. A failed
//! read keeps the keys already cached: an IdP that is down breaks no token whose key is known.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use shared::auth::Permission;
use shared::config::{JwksSource, JwtSettings};
use shared::domain::tenant_id;

/// Clock skew allowed on `exp` and `nbf`.
pub const LEEWAY: Duration = Duration::from_secs(30);
/// Least time between two reads of the JWKS that a token with an unknown `kid` may cause.
pub const UNKNOWN_KID_COOLDOWN: Duration = Duration::from_secs(10);
/// How long one read of a JWKS URL may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest JWKS document read: an IdP publishes a handful of keys.
const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// The algorithms accepted, and the only ones a key may be used with.
const ACCEPTED: [Algorithm; 2] = [Algorithm::RS256, Algorithm::ES256];

/// What a verified token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGrant {
    pub team: String,
    /// The one agent the token may act as, when its claims name one.
    pub agent: Option<String>,
    /// The one user the token may act as, when its claims name one.
    pub user: Option<String>,
    pub permission: Permission,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// Not a valid token of the IdP (401).
    #[error("{0}")]
    Invalid(String),
    /// A valid token whose claims grant nothing here (403).
    #[error("{0}")]
    NoGrant(String),
}

/// Whether a bearer credential has the shape of a JWT: three base64url parts. The signature
/// may be empty, so that an unsigned token is refused as a token, with its reason.
pub fn looks_like_jwt(value: &str) -> bool {
    let parts: Vec<&str> = value.split('.').collect();
    let base64url = |part: &str| {
        part.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    parts.len() == 3 && !parts[0].is_empty() && !parts[1].is_empty() && parts.iter().all(|p| base64url(p))
}

/// Checks tokens against the IdP's keys and maps their claims to a [`TokenGrant`].
pub struct TokenVerifier {
    jwks: Arc<Jwks>,
    /// One validation per accepted algorithm: `decode` wants the token's algorithm listed.
    validations: Vec<(Algorithm, Validation)>,
    claims: ClaimNames,
    default_permission: Permission,
}

struct ClaimNames {
    team: String,
    agent: String,
    user: String,
    permission: String,
}

impl TokenVerifier {
    /// Reads a JWKS file now, so that a missing or unusable one fails the start; a JWKS URL is
    /// read in the background from now on, and on the first token if that read is not done.
    pub fn new(settings: &JwtSettings) -> anyhow::Result<Self> {
        let jwks = Arc::new(Jwks::new(&settings.jwks, settings.refresh)?);
        if matches!(settings.jwks, JwksSource::Url(_)) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let warm = jwks.clone();
                runtime.spawn(async move { warm.refresh().await });
            }
        }
        let validations = ACCEPTED
            .into_iter()
            .map(|alg| {
                let mut validation = Validation::new(alg);
                validation.leeway = LEEWAY.as_secs();
                validation.validate_nbf = true;
                let mut required = vec!["exp"];
                if let Some(issuer) = &settings.issuer {
                    validation.set_issuer(&[issuer]);
                    required.push("iss");
                }
                // Unset, `aud` is not checked: the library would refuse every token carrying one.
                match &settings.audience {
                    Some(audience) => {
                        validation.set_audience(&[audience]);
                        required.push("aud");
                    }
                    None => validation.validate_aud = false,
                }
                validation.set_required_spec_claims(&required);
                (alg, validation)
            })
            .collect();
        Ok(Self {
            jwks,
            validations,
            claims: ClaimNames {
                team: settings.team_claim.clone(),
                agent: settings.agent_claim.clone(),
                user: settings.user_claim.clone(),
                permission: settings.permission_claim.clone(),
            },
            default_permission: settings.default_permission,
        })
    }

    pub async fn verify(&self, token: &str) -> Result<TokenGrant, TokenError> {
        let invalid = |reason: &str| TokenError::Invalid(format!("the token is not valid: {reason}"));
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| invalid("its header is not a JWT header with alg RS256 or ES256"))?;
        if !ACCEPTED.contains(&header.alg) {
            return Err(invalid(&format!(
                "alg {:?} is not accepted (RS256 or ES256 only)",
                header.alg
            )));
        }
        let key = match header.kid.as_deref() {
            Some(kid) => {
                let key = self
                    .jwks
                    .key(kid)
                    .await
                    .ok_or_else(|| invalid(&format!("key {kid:?} is not one of the identity provider's")))?;
                if header.alg != key.alg {
                    return Err(invalid(&format!(
                        "alg {:?} is not the algorithm of key {kid:?} ({:?})",
                        header.alg, key.alg
                    )));
                }
                key
            }
            None => match self.jwks.only_key(header.alg).await {
                Ok(key) => key,
                Err(0) => {
                    return Err(invalid(&format!(
                        "its header names no key (kid), and the identity provider has no {:?} key",
                        header.alg
                    )))
                }
                Err(n) => {
                    return Err(invalid(&format!(
                        "its header names no key (kid), and the identity provider has {n} {:?} keys: \
                         the token must name its kid",
                        header.alg
                    )))
                }
            },
        };
        let (_, validation) = self
            .validations
            .iter()
            .find(|(alg, _)| *alg == key.alg)
            .ok_or_else(|| invalid("its key's algorithm is not accepted"))?;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, validation)
            .map_err(|e| invalid(&rejection(e.kind())))?
            .claims;
        self.grant(&claims)
    }

    fn grant(&self, claims: &Map<String, Value>) -> Result<TokenGrant, TokenError> {
        let id = |field: &'static str, claim: &str| -> Result<Option<String>, TokenError> {
            match claim_value(claims, claim) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(value)) => tenant_id(field, Some(value)).map(Some).map_err(|e| {
                    TokenError::NoGrant(format!("the token's claim {claim:?} is not a valid {field} id: {e}"))
                }),
                Some(_) => Err(TokenError::NoGrant(format!(
                    "the token's claim {claim:?} must be a string"
                ))),
            }
        };
        let team = id("team", &self.claims.team)?
            .ok_or_else(|| TokenError::NoGrant(format!("the token names no team (claim {:?})", self.claims.team)))?;
        let permission = match claim_value(claims, &self.claims.permission) {
            None | Some(Value::Null) => self.default_permission,
            Some(value) => highest_permission(value).ok_or_else(|| {
                TokenError::NoGrant(format!(
                    "the token's claim {:?} names no permission (read, write or admin)",
                    self.claims.permission
                ))
            })?,
        };
        Ok(TokenGrant {
            team,
            agent: id("agent", &self.claims.agent)?,
            user: id("user", &self.claims.user)?,
            permission,
        })
    }
}

/// The claim a setting names: the top-level claim of exactly that name (a namespaced claim such
/// as `https://example.com/team` holds dots), else the dotted path into nested objects
/// (Keycloak's roles are `realm_access.roles`).
fn claim_value<'a>(claims: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(value) = claims.get(name) {
        return Some(value);
    }
    let mut path = name.split('.');
    let mut value = claims.get(path.next()?)?;
    for step in path {
        value = value.as_object()?.get(step)?;
    }
    Some(value)
}

/// Why the library refused a token, in words a caller can act on.
#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "ErrorKind is non_exhaustive: the wildcard is required, and every other kind is a malformed token"
)]
fn rejection(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "it has expired (exp)".into(),
        ErrorKind::ImmatureSignature => "it is not valid yet (nbf)".into(),
        ErrorKind::InvalidIssuer => "its issuer (iss) is not the one configured".into(),
        ErrorKind::InvalidAudience => "its audience (aud) is not the one configured".into(),
        ErrorKind::InvalidSignature => "its signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("it has no {claim} claim"),
        ErrorKind::InvalidAlgorithm => "its algorithm is not its key's".into(),
        // The rest are malformed parts (base64, JSON, claim types) or a key the JWKS held that
        // does not parse as its kind: nothing a caller fixes but with a well-formed token.
        _ => "it is malformed".into(),
    }
}

/// The highest permission a claim names: `read`, `write`, `admin`, each optionally prefixed
/// `sediment:` (so an OAuth `scope` claim can carry it), in a space-separated string or an
/// array of strings. Other words are ignored; `None` if none is a permission.
fn highest_permission(value: &Value) -> Option<Permission> {
    let words: Vec<&str> = match value {
        Value::String(s) => s.split_whitespace().collect(),
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => Vec::new(),
    };
    words
        .into_iter()
        .filter_map(|word| Permission::parse(word.strip_prefix("sediment:").unwrap_or(word)))
        .max()
}

/// One usable key of the JWKS.
struct VerifyingKey {
    alg: Algorithm,
    key: DecodingKey,
}

/// The keys last read, and when.
#[derive(Default)]
struct KeySet {
    keys: Keys,
    read_at: Option<Instant>,
}

/// The usable keys of a JWKS: those with a `kid` by it, and every one (with a `kid` or not).
#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, Arc<VerifyingKey>>,
    all: Vec<Arc<VerifyingKey>>,
}

impl Keys {
    /// The one key of `alg`, or how many there are when that is not one.
    fn only(&self, alg: Algorithm) -> Result<Arc<VerifyingKey>, usize> {
        let mut of_alg = self.all.iter().filter(|key| key.alg == alg);
        match (of_alg.next(), of_alg.count()) {
            (Some(key), 0) => Ok(key.clone()),
            (None, _) => Err(0),
            (Some(_), more) => Err(1 + more),
        }
    }
}

/// The IdP's keys, cached; see the module docs for when they are read again.
struct Jwks {
    source: JwksSource,
    client: reqwest::Client,
    refresh: Duration,
    cooldown: Duration,
    current: RwLock<Arc<KeySet>>,
    /// When the last read began; held while one is in flight, so there is one at a time.
    last_read: tokio::sync::Mutex<Option<Instant>>,
}

impl Jwks {
    fn new(source: &JwksSource, refresh: Duration) -> anyhow::Result<Self> {
        let mut current = KeySet::default();
        if let JwksSource::File(path) = source {
            let bytes =
                std::fs::read(path).with_context(|| format!("read SEDIMENT_AUTH_JWKS_FILE {}", path.display()))?;
            current.keys = parse_jwks(&bytes)
                .with_context(|| format!("read the keys of SEDIMENT_AUTH_JWKS_FILE {}", path.display()))?;
            current.read_at = Some(Instant::now());
        }
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .context("build the JWKS client")?;
        Ok(Self {
            source: source.clone(),
            client,
            refresh,
            cooldown: refresh.min(UNKNOWN_KID_COOLDOWN),
            current: RwLock::new(Arc::new(current)),
            last_read: tokio::sync::Mutex::new(None),
        })
    }

    async fn key(self: &Arc<Self>, kid: &str) -> Option<Arc<VerifyingKey>> {
        let set = self.snapshot();
        if let Some(key) = set.keys.by_kid.get(kid) {
            self.refresh_when_due(&set);
            return Some(key.clone());
        }
        // An unknown kid may be a rotation the cache has not seen: read once (if the cool-down
        // allows), waiting for it, and look again.
        self.refresh().await;
        self.snapshot().keys.by_kid.get(kid).cloned()
    }

    /// The JWKS's only key of `alg` (see the module docs), or how many it has.
    async fn only_key(self: &Arc<Self>, alg: Algorithm) -> Result<Arc<VerifyingKey>, usize> {
        let set = self.snapshot();
        match set.keys.only(alg) {
            Ok(key) => {
                self.refresh_when_due(&set);
                Ok(key)
            }
            // None yet may be a rotation, as for an unknown kid; several stay several.
            Err(0) => {
                self.refresh().await;
                self.snapshot().keys.only(alg)
            }
            Err(n) => Err(n),
        }
    }

    fn refresh_when_due(self: &Arc<Self>, set: &KeySet) {
        if set.read_at.is_none_or(|at| at.elapsed() >= self.refresh) {
            self.refresh_in_background();
        }
    }

    fn refresh_in_background(self: &Arc<Self>) {
        // A read in flight holds the lock: this request has nothing to add to it.
        let due = self
            .last_read
            .try_lock()
            .is_ok_and(|last| last.is_none_or(|at| at.elapsed() >= self.cooldown));
        if due {
            let jwks = self.clone();
            tokio::spawn(async move { jwks.refresh().await });
        }
    }

    /// Reads the JWKS unless a read began less than the cool-down ago. Callers arriving during
    /// a read wait for it, then find the cool-down running and use its result.
    async fn refresh(&self) {
        let mut last = self.last_read.lock().await;
        if last.is_some_and(|at| at.elapsed() < self.cooldown) {
            return;
        }
        *last = Some(Instant::now());
        match self.read().await {
            Ok(keys) => {
                let before = self.snapshot();
                if before.keys.all.len() != keys.all.len()
                    || keys.by_kid.keys().any(|kid| !before.keys.by_kid.contains_key(kid))
                {
                    let kids: Vec<&str> = keys.by_kid.keys().map(String::as_str).collect();
                    tracing::info!(?kids, keys = keys.all.len(), "read the identity provider's keys");
                }
                let set = KeySet {
                    keys,
                    read_at: Some(Instant::now()),
                };
                *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(set);
            }
            Err(e) => {
                tracing::warn!("failed to read the identity provider's keys, keeping the cached ones: {e:#}");
            }
        }
    }

    async fn read(&self) -> anyhow::Result<Keys> {
        let bytes = match &self.source {
            JwksSource::File(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || std::fs::read(&path))
                    .await
                    .context("join the JWKS file read")?
                    .context("read SEDIMENT_AUTH_JWKS_FILE")?
            }
            JwksSource::Url(url) => {
                let response = self
                    .client
                    .get(url)
                    .send()
                    .await
                    .and_then(reqwest::Response::error_for_status)
                    .context("get SEDIMENT_AUTH_JWKS_URL")?;
                if response.content_length().is_some_and(|n| n > MAX_JWKS_BYTES as u64) {
                    anyhow::bail!("the JWKS is larger than {MAX_JWKS_BYTES} bytes");
                }
                response.bytes().await.context("read the JWKS body")?.to_vec()
            }
        };
        anyhow::ensure!(
            bytes.len() <= MAX_JWKS_BYTES,
            "the JWKS is larger than {MAX_JWKS_BYTES} bytes"
        );
        parse_jwks(&bytes)
    }

    fn snapshot(&self) -> Arc<KeySet> {
        // A panic while holding the lock leaves a set that is still sound.
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The usable keys of a JWKS document. Keys sediment cannot use (encryption keys, other
/// algorithms) are skipped, so an IdP may publish them; a key without a `kid` serves only tokens
/// without one. A document with no usable key at all is an error, which keeps the previous keys.
fn parse_jwks(bytes: &[u8]) -> anyhow::Result<Keys> {
    #[derive(serde::Deserialize)]
    struct Document {
        keys: Vec<Value>,
    }
    let document: Document = serde_json::from_slice(bytes).context("parse the JWKS document")?;
    let mut keys = Keys::default();
    for key in document.keys {
        match usable_key(key) {
            Ok((kid, key)) => {
                let key = Arc::new(key);
                keys.all.push(key.clone());
                if let Some(kid) = kid {
                    keys.by_kid.insert(kid, key);
                }
            }
            Err(reason) => tracing::debug!(reason, "skipped a key of the JWKS"),
        }
    }
    anyhow::ensure!(!keys.all.is_empty(), "the JWKS holds no usable key (RS256 or ES256)");
    Ok(keys)
}

fn usable_key(value: Value) -> Result<(Option<String>, VerifyingKey), &'static str> {
    let jwk: Jwk = serde_json::from_value(value).map_err(|_| "not a JWK this library reads")?;
    let kid = jwk.common.key_id.clone();
    if !matches!(jwk.common.public_key_use, None | Some(PublicKeyUse::Signature)) {
        return Err("not a signing key (use)");
    }
    let alg = match (&jwk.common.key_algorithm, &jwk.algorithm) {
        (None | Some(KeyAlgorithm::RS256), AlgorithmParameters::RSA(_)) => Algorithm::RS256,
        (None | Some(KeyAlgorithm::ES256), AlgorithmParameters::EllipticCurve(ec))
            if ec.curve == EllipticCurve::P256 =>
        {
            Algorithm::ES256
        }
        _ => return Err("not an RS256 or ES256 key"),
    };
    let key = DecodingKey::from_jwk(&jwk).map_err(|_| "unreadable key parameters")?;
    Ok((kid, VerifyingKey { alg, key }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn verifier() -> TokenVerifier {
        verifier_with(["team", "agent", "user", "scope"])
    }

    /// A verifier whose team, agent, user and permission claims are these.
    fn verifier_with([team, agent, user, permission]: [&str; 4]) -> TokenVerifier {
        let dir = std::env::temp_dir().join(format!("sediment-jwt-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jwks.json");
        // A P-256 public key (the curve's generator point): usable as a JWK, never as a signer.
        let jwks = json!({ "keys": [
            { "kty": "EC", "crv": "P-256", "kid": "ec",
              "x": "axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY",
              "y": "T-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU" },
            { "kty": "oct", "kid": "hmac", "k": "c2VjcmV0" },
            { "kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB" },
        ]});
        std::fs::write(&path, jwks.to_string()).unwrap();
        let verifier = TokenVerifier::new(&JwtSettings {
            jwks: JwksSource::File(path),
            refresh: Duration::from_secs(300),
            issuer: None,
            audience: None,
            team_claim: team.into(),
            agent_claim: agent.into(),
            user_claim: user.into(),
            permission_claim: permission.into(),
            default_permission: Permission::Write,
        })
        .expect("a usable JWKS");
        // Read at start; later reads fail and keep these keys.
        std::fs::remove_dir_all(&dir).unwrap();
        verifier
    }

    /// Base64url without padding, as JWTs and JWKs encode bytes.
    fn b64(bytes: &[u8]) -> String {
        base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, bytes)
    }

    #[test]
    fn only_jwt_shaped_bearers_take_the_token_path() {
        assert!(looks_like_jwt("eyJhbGciOiJSUzI1NiJ9.eyJ0ZWFtIjoiYSJ9.c2ln-_"));
        assert!(looks_like_jwt("eyJhbGciOiJub25lIn0.eyJ0ZWFtIjoiYSJ9."));
        assert!(!looks_like_jwt(&format!("sdmk_{}", "0".repeat(64))));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("a+b.c.d"));
        assert!(!looks_like_jwt(".b.c"));
    }

    #[test]
    fn only_signing_keys_of_the_accepted_algorithms_are_kept() {
        let verifier = verifier();
        let set = verifier.jwks.snapshot();
        assert_eq!(set.keys.by_kid.keys().collect::<Vec<_>>(), ["ec"]);
        assert_eq!(set.keys.by_kid["ec"].alg, Algorithm::ES256);
        assert_eq!(set.keys.all.len(), 1);
        assert!(parse_jwks(br#"{"keys":[{"kty":"oct","kid":"h","k":"c2VjcmV0"}]}"#).is_err());
        // A key without a kid is kept for tokens without one.
        let unnamed = parse_jwks(
            br#"{"keys":[{"kty":"EC","crv":"P-256","x":"axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY","y":"T-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU"}]}"#,
        )
        .unwrap();
        assert!(unnamed.by_kid.is_empty());
        assert_eq!(unnamed.only(Algorithm::ES256).map(|key| key.alg), Ok(Algorithm::ES256));
        assert_eq!(unnamed.only(Algorithm::RS256).err(), Some(0));
    }

    #[test]
    fn claims_make_the_grant() {
        let verifier = verifier();
        let grant = |claims: Value| verifier.grant(claims.as_object().unwrap());
        assert_eq!(
            grant(json!({ "team": "acme", "scope": "openid sediment:read profile" })),
            Ok(TokenGrant {
                team: "acme".into(),
                agent: None,
                user: None,
                permission: Permission::Read,
            })
        );
        let pinned =
            grant(json!({ "team": "acme", "agent": "bot", "user": "ann", "scope": ["read", "admin"] })).unwrap();
        assert_eq!(
            (pinned.agent.as_deref(), pinned.user.as_deref(), pinned.permission),
            (Some("bot"), Some("ann"), Permission::Admin)
        );
        assert_eq!(grant(json!({ "team": "acme" })).unwrap().permission, Permission::Write);
        for refused in [
            json!({ "scope": "read" }),
            json!({ "team": " " }),
            json!({ "team": 7 }),
            json!({ "team": "acme", "scope": "openid profile" }),
            json!({ "team": "acme", "agent": ["a", "b"] }),
        ] {
            assert!(
                matches!(grant(refused.clone()), Err(TokenError::NoGrant(_))),
                "{refused}"
            );
        }
    }

    #[test]
    fn claims_may_be_namespaced_or_nested() {
        let verifier = verifier_with(["https://example.com/team", "org.agent", "sub", "realm_access.roles"]);
        let grant = |claims: Value| verifier.grant(claims.as_object().unwrap());
        let keycloak = json!({
            "https://example.com/team": "acme",
            "org": { "agent": "bot" },
            "sub": "ann",
            "realm_access": { "roles": ["offline_access", "sediment:read"] },
        });
        assert_eq!(
            grant(keycloak),
            Ok(TokenGrant {
                team: "acme".into(),
                agent: Some("bot".into()),
                user: Some("ann".into()),
                permission: Permission::Read,
            })
        );
        // A top-level claim of the exact name wins over a path.
        let both = json!({ "https://example.com/team": "acme", "org.agent": "flat", "org": { "agent": "nested" } });
        assert_eq!(grant(both).unwrap().agent.as_deref(), Some("flat"));
        // A path through something that is not an object names nothing.
        let through = json!({ "https://example.com/team": "acme", "org": "bot", "realm_access": ["admin"] });
        let granted = grant(through).unwrap();
        assert_eq!((granted.agent, granted.permission), (None, Permission::Write));
        assert!(matches!(
            grant(json!({ "https": { "//example": { "com/team": "acme" } } })),
            Err(TokenError::NoGrant(_))
        ));
    }

    #[tokio::test]
    async fn headers_that_are_not_rs256_or_es256_with_a_known_or_only_key_are_refused() {
        let part = |v: Value| b64(v.to_string().as_bytes());
        let claims = part(json!({ "team": "acme", "exp": 4_102_444_800u64 }));
        let verifier = verifier();
        for (header, why) in [
            (json!({ "alg": "none", "kid": "ec" }), "header"),
            (json!({ "alg": "HS256", "kid": "ec" }), "not accepted"),
            // No kid: the only ES256 key is tried (and the signature is wrong); there is no
            // RS256 key at all.
            (json!({ "alg": "ES256" }), "signature"),
            (
                json!({ "alg": "RS256" }),
                "names no key (kid), and the identity provider has no RS256 key",
            ),
            (json!({ "alg": "RS256", "kid": "ec" }), "not the algorithm"),
            (json!({ "alg": "ES256", "kid": "hmac" }), "not one of"),
            (json!({ "alg": "ES256", "kid": "ec" }), "signature"),
        ] {
            let token = format!("{}.{claims}.AAAA", part(header.clone()));
            match verifier.verify(&token).await {
                Err(TokenError::Invalid(reason)) => assert!(reason.contains(why), "{header}: {reason}"),
                other => panic!("{header}: {other:?}"),
            }
        }
    }
}
