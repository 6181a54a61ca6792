//! Tokens of an identity provider: RSA and P-256 keys the test makes with the `openssl` CLI, a
//! JWKS in a file or served by a tiny local IdP, and the API with auth turned on by the JWKS
//! alone (no admin key). Tokens decide the team and pin what their claims name; every way a
//! token can be wrong is 401 with `WWW-Authenticate`; a JWKS URL is cached, picks up a rotation,
//! does not let unknown kids hammer the IdP, and outlives the IdP going down.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode as AxumStatus;
use integration_tests::app::{tenant, Mode, Options, TestApp, MODES};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{json, Value};
use shared::domain::{SessionId, Tenant};

const ISSUER: &str = "https://idp.test";
const AUDIENCE: &str = "sediment";

/// A key of the test's IdP: what signs, and the public JWK it publishes.
struct IdpKey {
    kid: &'static str,
    alg: Algorithm,
    signer: EncodingKey,
    jwk: Value,
}

static RSA: LazyLock<IdpKey> = LazyLock::new(|| rsa_key("rsa-1"));
static EC: LazyLock<IdpKey> = LazyLock::new(|| ec_key("ec-1"));
/// Another RSA key: not published, or published beside `RSA`.
static RSA_2: LazyLock<IdpKey> = LazyLock::new(|| rsa_key("rsa-2"));

fn openssl(args: &[&str]) -> Vec<u8> {
    let out = Command::new("openssl").args(args).output().expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temp path")
}

fn rsa_key(kid: &'static str) -> IdpKey {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("rsa.pem");
    openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        path(&pem),
    ]);
    // PKCS#1, which the signer reads; the modulus in hex for the JWK (the exponent is 65537).
    let pkcs1 = openssl(&["rsa", "-in", path(&pem), "-traditional", "-outform", "DER"]);
    let modulus = String::from_utf8(openssl(&["rsa", "-in", path(&pem), "-noout", "-modulus"])).unwrap();
    let hex = modulus
        .trim()
        .strip_prefix("Modulus=")
        .expect("openssl prints Modulus=");
    let n: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    IdpKey {
        kid,
        alg: Algorithm::RS256,
        signer: EncodingKey::from_rsa_der(&pkcs1),
        jwk: json!({ "kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": b64(&n), "e": "AQAB" }),
    }
}

fn ec_key(kid: &'static str) -> IdpKey {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("ec.pem");
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        path(&pem),
    ]);
    let pkcs8 = openssl(&["pkcs8", "-topk8", "-nocrypt", "-in", path(&pem), "-outform", "DER"]);
    // The public key's DER ends with the uncompressed point: 0x04, x, y.
    let spki = openssl(&["pkey", "-in", path(&pem), "-pubout", "-outform", "DER"]);
    let point = &spki[spki.len() - 65..];
    assert_eq!(point[0], 4, "an uncompressed point");
    // No "alg": the API infers ES256 from a P-256 key.
    IdpKey {
        kid,
        alg: Algorithm::ES256,
        signer: EncodingKey::from_ec_der(&pkcs8),
        jwk: json!({ "kty": "EC", "crv": "P-256", "kid": kid, "x": b64(&point[1..33]), "y": b64(&point[33..]) }),
    }
}

/// Base64url without padding, as JWTs and JWKs encode bytes.
fn b64(bytes: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, bytes)
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Valid claims for `team`: the configured issuer and audience, ten minutes to live.
fn claims(team: &str) -> Value {
    json!({ "iss": ISSUER, "aud": AUDIENCE, "sub": "svc-1", "exp": now() + 600, "team": team })
}

fn sign(key: &IdpKey, claims: &Value) -> String {
    sign_as(key, key.kid, claims)
}

fn sign_as(key: &IdpKey, kid: &str, claims: &Value) -> String {
    let mut header = Header::new(key.alg);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &key.signer).expect("sign")
}

/// Signed by `key` with no `kid` in the header.
fn sign_without_kid(key: &IdpKey, claims: &Value) -> String {
    jsonwebtoken::encode(&Header::new(key.alg), claims, &key.signer).expect("sign")
}

fn jwks(keys: &[&IdpKey]) -> Value {
    json!({ "keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>() })
}

fn call(app: &TestApp, method: Method, path: &str, token: &str) -> RequestBuilder {
    app.client.request(method, app.url(path)).bearer_auth(token)
}

fn as_agent(req: RequestBuilder, t: &Tenant) -> RequestBuilder {
    req.header(api::AGENT_HEADER, &t.agent)
        .header(api::USER_HEADER, &t.user)
}

async fn send(req: RequestBuilder) -> (StatusCode, Value) {
    let response = req.send().await.expect("send");
    let status = response.status();
    if status == StatusCode::UNAUTHORIZED {
        let challenge = response
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        assert!(
            challenge.as_deref().is_some_and(|c| c.starts_with("Bearer")),
            "a 401 without a Bearer challenge: {challenge:?}"
        );
    }
    (status, response.json().await.unwrap_or(Value::Null))
}

fn append(text: &str) -> Value {
    json!({ "messages": [{ "role": "user", "content": text }] })
}

async fn app_with(mode: Mode, env: Vec<(&'static str, String)>) -> TestApp {
    // The JWKS alone turns auth on: no admin key.
    let mut all = vec![("AUTH", "on".to_owned())];
    all.extend(env);
    TestApp::with(
        mode,
        Options {
            env: all,
            ..Options::default()
        },
    )
    .await
}

#[tokio::test]
async fn tokens_decide_the_team_and_pin_what_their_claims_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&RSA, &EC]).to_string()).unwrap();
    for mode in MODES {
        let started = Instant::now();
        let mut app = app_with(
            mode,
            vec![
                ("AUTH_JWKS_FILE", path(&file).to_owned()),
                ("AUTH_JWT_ISSUER", ISSUER.to_owned()),
                ("AUTH_JWT_AUDIENCE", AUDIENCE.to_owned()),
            ],
        )
        .await;
        let t = tenant();
        let messages = "/v1/sessions/s1/messages";

        // RS256 and ES256 both work end to end; the token decides the team, so no team header.
        let rs = sign(&RSA, &claims(&t.team));
        let es = sign(&EC, &claims(&t.team));
        for (token, text) in [
            (&rs, "the token decides my team"),
            (&es, "the curve decides my team too"),
        ] {
            let (status, body) =
                send(as_agent(call(&app, Method::POST, messages, token), &t).json(&append(text))).await;
            assert_eq!(status, StatusCode::CREATED, "{mode:?}: {body}");
        }
        app.wait_indexed(Duration::from_secs(20)).await;
        let search = json!({ "query": "decides my team", "strategy": "keyword" });
        let (status, found) =
            send(as_agent(call(&app, Method::POST, "/v1/conversations/search", &es), &t).json(&search)).await;
        assert_eq!(status, StatusCode::OK, "{found}");
        assert_eq!(found["items"].as_array().map(Vec::len), Some(2), "{mode:?}: {found}");

        // Naming another team, in a header or the body, is 403; so is an admin route.
        let other = tenant();
        let req = call(&app, Method::POST, messages, &rs)
            .header(api::TEAM_HEADER, &other.team)
            .json(&append("x"));
        assert_eq!(send(as_agent(req, &t)).await.0, StatusCode::FORBIDDEN);
        let mut body = append("x");
        body["team_id"] = json!(other.team);
        body["agent_id"] = json!(t.agent);
        body["user_id"] = json!(t.user);
        assert_eq!(
            send(call(&app, Method::POST, messages, &rs).json(&body)).await.0,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            send(call(&app, Method::GET, "/v1/admin/keys", &rs)).await.0,
            StatusCode::FORBIDDEN
        );

        // An agent claim pins the agent (no header needed; another is 403); so does a user claim.
        let mut pinned = claims(&t.team);
        pinned["agent"] = json!("bot");
        pinned["user"] = json!("ann");
        let bot = sign(&EC, &pinned);
        let (status, body) =
            send(call(&app, Method::POST, "/v1/sessions/s2/messages", &bot).json(&append("as bot"))).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let as_bot = Tenant {
            team: t.team.clone(),
            agent: "bot".into(),
            user: "ann".into(),
        };
        let stored = app
            .backends
            .store
            .list(&as_bot, &SessionId::parse("s2").unwrap(), 0, 10)
            .await
            .expect("list");
        assert_eq!(stored.len(), 1, "stored as the pinned agent and user");
        assert_eq!(
            send(as_agent(call(&app, Method::GET, "/v1/memories", &bot), &as_bot))
                .await
                .0,
            StatusCode::OK
        );
        let other_agent = Tenant {
            agent: "helper".into(),
            ..as_bot.clone()
        };
        assert_eq!(
            send(as_agent(call(&app, Method::GET, "/v1/memories", &bot), &other_agent))
                .await
                .0,
            StatusCode::FORBIDDEN
        );
        let other_user = Tenant {
            user: "bob".into(),
            ..as_bot.clone()
        };
        assert_eq!(
            send(as_agent(call(&app, Method::GET, "/v1/memories", &bot), &other_user))
                .await
                .0,
            StatusCode::FORBIDDEN
        );

        // The permission claim: read reads but cannot write; a token with no usable grant is 403.
        let mut read = claims(&t.team);
        read["permission"] = json!("read");
        let reader = sign(&RSA, &read);
        assert_eq!(
            send(as_agent(call(&app, Method::POST, "/v1/conversations/search", &reader), &t).json(&search))
                .await
                .0,
            StatusCode::OK
        );
        assert_eq!(
            send(as_agent(call(&app, Method::POST, messages, &reader), &t).json(&append("x")))
                .await
                .0,
            StatusCode::FORBIDDEN
        );
        let mut no_team = claims(&t.team);
        no_team.as_object_mut().unwrap().remove("team");
        let mut no_permission = claims(&t.team);
        no_permission["permission"] = json!("superuser");
        for token in [sign(&RSA, &no_team), sign(&RSA, &no_permission)] {
            let (status, body) = send(as_agent(call(&app, Method::GET, "/v1/memories", &token), &t)).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        }

        // Every way a token can be wrong: 401, with the scheme named (checked in `send`).
        let with = |change: &dyn Fn(&mut Value)| {
            let mut c = claims(&t.team);
            change(&mut c);
            c
        };
        let expired = with(&|c| c["exp"] = json!(now() - 3600));
        let early = with(&|c| c["nbf"] = json!(now() + 3600));
        let no_exp = with(&|c| {
            c.as_object_mut().unwrap().remove("exp");
        });
        let wrong_aud = with(&|c| c["aud"] = json!("someone-else"));
        let no_aud = with(&|c| {
            c.as_object_mut().unwrap().remove("aud");
        });
        let wrong_iss = with(&|c| c["iss"] = json!("https://evil.test"));
        let valid = claims(&t.team);
        let part = |v: &Value| b64(v.to_string().as_bytes());
        // The signature of a valid token over other claims (another team).
        let tampered = {
            let [header, _, signature]: [&str; 3] = rs.split('.').collect::<Vec<_>>().try_into().unwrap();
            format!("{header}.{}.{signature}", part(&claims(&other.team)))
        };
        // HMAC with the RSA key's public modulus as the secret: the classic confusion attack.
        let hs256 = {
            let mut header = Header::new(Algorithm::HS256);
            header.kid = Some(RSA.kid.to_owned());
            let secret = RSA.jwk["n"].as_str().unwrap().as_bytes().to_vec();
            jsonwebtoken::encode(&header, &valid, &EncodingKey::from_secret(&secret).unwrap()).unwrap()
        };
        let unsigned = format!("{}.{}.", part(&json!({ "alg": "none", "kid": RSA.kid })), part(&valid));
        // Each with the reason it was refused for, so that no case passes by failing early.
        let cases = [
            ("expired", sign(&RSA, &expired), "expired"),
            ("not yet valid", sign(&EC, &early), "not valid yet"),
            ("no exp", sign(&RSA, &no_exp), "no exp claim"),
            ("wrong audience", sign(&RSA, &wrong_aud), "audience"),
            ("no audience", sign(&EC, &no_aud), "no aud claim"),
            ("wrong issuer", sign(&EC, &wrong_iss), "issuer"),
            ("tampered", tampered, "signature"),
            ("alg none", unsigned, "header"),
            ("HS256", hs256, "not accepted"),
            // An RS256 header on the EC key's kid: the key decides the algorithm.
            ("alg mismatch", sign_as(&RSA, EC.kid, &valid), "not the algorithm"),
            ("unknown kid", sign_as(&RSA, "no-such-key", &valid), "not one of"),
            // No kid: checked against the only RS256 key, which did not sign it.
            ("no kid, another signer", sign_without_kid(&RSA_2, &valid), "signature"),
        ];
        for (case, token, reason) in cases {
            let (status, body) = send(as_agent(call(&app, Method::GET, "/v1/memories", &token), &t)).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{mode:?} {case}: {body}");
            assert_eq!(body["code"], "unauthorized", "{case}");
            let message = body["message"].as_str().unwrap_or_default();
            assert!(message.contains(reason), "{case}: {message}");
        }
        // A bearer shaped like an API key only ever goes the key path.
        let key_shaped = format!("sdmk_{}", "0".repeat(64));
        let (status, _) = send(as_agent(call(&app, Method::GET, "/v1/memories", &key_shaped), &t)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        app.stop().await;
        eprintln!("jwt file {mode:?}: {:?}", started.elapsed());
    }
}

/// The test's identity provider: serves a JWKS it can rotate, goes down on request, and counts
/// how often it was asked.
#[derive(Default)]
struct Idp {
    jwks: Mutex<Value>,
    down: AtomicBool,
    hits: AtomicUsize,
}

impl Idp {
    async fn serve(self: &Arc<Self>) -> String {
        let idp = self.clone();
        let router = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let idp = idp.clone();
                async move {
                    idp.hits.fetch_add(1, Ordering::SeqCst);
                    if idp.down.load(Ordering::SeqCst) {
                        return (AxumStatus::SERVICE_UNAVAILABLE, String::new());
                    }
                    (AxumStatus::OK, idp.jwks.lock().unwrap().to_string())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://{addr}/jwks")
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn a_jwks_url_is_cached_refreshed_on_rotation_and_outlives_the_idp() {
    let started = Instant::now();
    let idp = Arc::new(Idp::default());
    *idp.jwks.lock().unwrap() = jwks(&[&RSA]);
    let url = idp.serve().await;
    let refresh = Duration::from_millis(1000);
    let mut app = app_with(
        Mode::Embedded,
        vec![
            ("AUTH_JWKS_URL", url),
            ("AUTH_JWKS_REFRESH_MS", refresh.as_millis().to_string()),
        ],
    )
    .await;
    let t = tenant();
    let status_of = |token: String| {
        let req = as_agent(call(&app, Method::GET, "/v1/memories", &token), &t);
        async move { send(req).await.0 }
    };
    let valid = claims(&t.team);

    // Read on first use (or by the warm-up at start), then served from the cache.
    assert_eq!(status_of(sign(&RSA, &valid)).await, StatusCode::OK);
    let after_first = idp.hits();
    assert!((1..=2).contains(&after_first), "{after_first} reads for one token");
    for _ in 0..5 {
        assert_eq!(status_of(sign(&RSA, &valid)).await, StatusCode::OK);
    }

    // Made-up kids: each refused, and together they cause at most a read per cool-down.
    let before = idp.hits();
    let burst = Instant::now();
    for i in 0..20 {
        assert_eq!(
            status_of(sign_as(&RSA, &format!("made-up-{i}"), &valid)).await,
            StatusCode::UNAUTHORIZED
        );
    }
    let reads = idp.hits() - before;
    let allowed = 1 + (burst.elapsed().as_millis() / refresh.as_millis()) as usize;
    assert!(
        reads <= allowed,
        "{reads} reads for 20 unknown kids in {:?}",
        burst.elapsed()
    );

    // Rotation: the IdP now signs with a new key only. Its kid is picked up once the cool-down
    // allows a read, and the retired key stops working with that read.
    *idp.jwks.lock().unwrap() = jwks(&[&EC]);
    let rotated = Instant::now();
    while status_of(sign(&EC, &valid)).await != StatusCode::OK {
        assert!(
            rotated.elapsed() < Duration::from_secs(10),
            "the new kid was never picked up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status_of(sign(&RSA, &valid)).await, StatusCode::UNAUTHORIZED);

    // The IdP goes down: past the refresh period the API tries again, and keeps the cached key.
    idp.down.store(true, Ordering::SeqCst);
    let down_at = idp.hits();
    let down = Instant::now();
    while down.elapsed() < refresh * 3 {
        assert_eq!(
            status_of(sign(&EC, &valid)).await,
            StatusCode::OK,
            "a cached key while the IdP is down"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(idp.hits() > down_at, "the API never tried to refresh");
    assert_eq!(
        status_of(sign_as(&EC, "another-made-up", &valid)).await,
        StatusCode::UNAUTHORIZED,
        "an unknown kid while the IdP is down"
    );
    app.stop().await;
    eprintln!("jwt url: {:?}", started.elapsed());
}

#[tokio::test]
async fn a_token_without_kid_is_checked_against_the_only_key_of_its_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let t = tenant();
    let valid = claims(&t.team);
    // The RSA key published without its kid: it serves tokens without one, and no kid names it.
    let mut unnamed = RSA.jwk.clone();
    unnamed.as_object_mut().unwrap().remove("kid");
    // A token, the status it gets, and what the refusal says.
    type Expect = (String, StatusCode, &'static str);
    let cases: [(&str, Value, Vec<Expect>); 2] = [
        (
            "one key per algorithm",
            json!({ "keys": [unnamed, EC.jwk.clone()] }),
            vec![
                (sign_without_kid(&RSA, &valid), StatusCode::OK, ""),
                (sign_without_kid(&EC, &valid), StatusCode::OK, ""),
                (sign_without_kid(&RSA_2, &valid), StatusCode::UNAUTHORIZED, "signature"),
                (sign(&RSA, &valid), StatusCode::UNAUTHORIZED, "not one of"),
            ],
        ),
        (
            "two RSA keys",
            jwks(&[&RSA, &RSA_2, &EC]),
            vec![
                (
                    sign_without_kid(&RSA, &valid),
                    StatusCode::UNAUTHORIZED,
                    "has 2 RS256 keys: the token must name its kid",
                ),
                (sign(&RSA_2, &valid), StatusCode::OK, ""),
                (sign_without_kid(&EC, &valid), StatusCode::OK, ""),
            ],
        ),
    ];
    for (name, document, tokens) in cases {
        let file = dir.path().join(format!("{}.json", name.replace(' ', "-")));
        std::fs::write(&file, document.to_string()).unwrap();
        let mut app = app_with(
            Mode::Embedded,
            vec![
                ("AUTH_JWKS_FILE", path(&file).to_owned()),
                ("AUTH_JWT_ISSUER", ISSUER.to_owned()),
                ("AUTH_JWT_AUDIENCE", AUDIENCE.to_owned()),
            ],
        )
        .await;
        for (i, (token, expected, reason)) in tokens.into_iter().enumerate() {
            let (status, body) = send(as_agent(call(&app, Method::GET, "/v1/memories", &token), &t)).await;
            assert_eq!(status, expected, "{name}, token {i}: {body}");
            if expected != StatusCode::OK {
                let message = body["message"].as_str().unwrap_or_default();
                assert!(message.contains(reason), "{name}, token {i}: {message}");
            }
        }
        app.stop().await;
    }
}

/// Claims named by a namespaced name (Auth0's `https://…/team`) or by a path into nested objects
/// (Keycloak's `realm_access.roles`) make the grant end to end: the roles decide what the
/// token may do.
#[tokio::test]
async fn namespaced_and_nested_claims_make_the_grant() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&RSA]).to_string()).unwrap();
    let mut app = app_with(
        Mode::Embedded,
        vec![
            ("AUTH_JWKS_FILE", path(&file).to_owned()),
            ("AUTH_JWT_TEAM_CLAIM", "https://sediment.example/team".to_owned()),
            ("AUTH_JWT_PERMISSION_CLAIM", "realm_access.roles".to_owned()),
        ],
    )
    .await;
    let t = tenant();
    let token = |roles: Value| {
        let claims = json!({
            "exp": now() + 600,
            "https://sediment.example/team": t.team,
            "realm_access": { "roles": roles },
        });
        sign(&RSA, &claims)
    };
    let messages = "/v1/sessions/s1/messages";
    let reader = token(json!(["offline_access", "sediment:read"]));
    let (status, body) = send(as_agent(call(&app, Method::GET, "/v1/memories", &reader), &t)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) =
        send(as_agent(call(&app, Method::POST, messages, &reader), &t).json(&append("read only"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a read role cannot append: {body}");
    let writer = token(json!(["sediment:write"]));
    let (status, body) = send(as_agent(call(&app, Method::POST, messages, &writer), &t).json(&append("written"))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    app.stop().await;
}

/// Starts the embedded API on `addr` with `AUTH_JWKS_FILE` and no other auth setting; returns
/// the start error, or `None` when it started (and was stopped again).
async fn start_with_jwks(file: &Path, addr: &str) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("DATA_DIR", path(&dir.path().join("data"))),
        ("INDEX_DIR", path(&dir.path().join("index"))),
        ("FILES_DIR", path(&dir.path().join("files"))),
        ("EMBEDDING", "none"),
        ("AUTH_JWKS_FILE", path(file)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let settings = shared::config::Settings::from_map(&env).expect("valid settings");
    let backends = shared::backends::Backends::connect(&settings).await.expect("backends");
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    match api::start(listener, backends, &settings, shutdown.clone()).await {
        Ok(server) => {
            shutdown.cancel();
            server.wait().await.unwrap();
            None
        }
        Err(e) => Some(format!("{e:#}")),
    }
}

#[tokio::test]
async fn a_jwks_file_alone_turns_auth_on_and_a_bad_one_fails_the_start() {
    let dir = tempfile::tempdir().unwrap();
    // Auth on: so the API may listen beyond loopback without an admin key.
    let good = dir.path().join("jwks.json");
    std::fs::write(&good, jwks(&[&EC]).to_string()).unwrap();
    assert_eq!(start_with_jwks(&good, "0.0.0.0:0").await, None);
    let hmac_only = dir.path().join("hmac.json");
    std::fs::write(
        &hmac_only,
        json!({ "keys": [{ "kty": "oct", "kid": "h", "k": "c2VjcmV0" }] }).to_string(),
    )
    .unwrap();
    for file in [dir.path().join("missing.json"), hmac_only] {
        let err = start_with_jwks(&file, "127.0.0.1:0").await.expect("refused");
        assert!(err.contains("SEDIMENT_AUTH_JWKS_FILE"), "{err}");
    }
}
