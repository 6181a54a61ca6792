//! The OpenAPI document served at `/openapi.json`: it is 3.1, it lists every route of the
//! router (read from the router's sources, so a new undocumented route fails here) and only
//! routes the router serves, and real responses match its schemas.

use std::collections::BTreeSet;

use integration_tests::app::{tenant, Mode, Options, TestApp};
use integration_tests::routes::{routes_in_source, METHODS};
use reqwest::Method;
use serde_json::{json, Value};

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if item.get(method).is_some() {
                routes.insert((method.to_owned(), path.clone()));
            }
        }
    }
    routes
}

async fn document(app: &TestApp) -> Value {
    let response = reqwest::get(app.url("/openapi.json")).await.expect("get /openapi.json");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"].to_str().unwrap(), "application/json");
    response.json().await.expect("the document is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_covers_every_route_and_only_served_ones() {
    let app = TestApp::start(Mode::Embedded).await;
    let doc = document(&app).await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["title"], "sediment");
    for scheme in ["api_key", "admin_key", "ops_token", "idp_token"] {
        let scheme = &doc["components"]["securitySchemes"][scheme];
        assert_eq!((&scheme["type"], &scheme["scheme"]), (&json!("http"), &json!("bearer")));
    }

    let source = routes_in_source();
    let documented = documented(&doc);
    let undocumented: Vec<_> = source.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from the OpenAPI document (add #[utoipa::path] and list the handler in api/src/openapi.rs): {undocumented:?}"
    );

    // Every documented operation is served: the router's fallback never answers it.
    let t = tenant();
    for (method, path) in &documented {
        let concrete = path
            .replace("{session_id}", "openapi-session")
            .replace("{template_id}", "l1-extract")
            .replace(['{', '}'], "");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let response = app.req(method.clone(), &concrete, &t).send().await.expect("send");
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        assert_ne!(status, 405, "{method} {path} is documented but not routed");
        assert!(
            !body.contains("no such route"),
            "{method} {path} is documented but answers the fallback: {status} {body}"
        );
    }
    assert!(
        documented.is_subset(&source),
        "documented but not in the router's sources: {:?}",
        documented.difference(&source).collect::<Vec<_>>()
    );

    // Operations must be addressable by clients and the MCP server.
    let mut ids = BTreeSet::new();
    for (method, path) in &documented {
        let id = doc["paths"][path][method]["operationId"].as_str().unwrap_or_default();
        assert!(
            !id.is_empty() && ids.insert(id.to_owned()),
            "{method} {path}: operationId {id:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_schemas_are_faithful() {
    let app = TestApp::start(Mode::Embedded).await;
    let doc = document(&app).await;
    let schema = |name: &str| doc["components"]["schemas"][name].clone();
    let op = |method: &str, path: &str| doc["paths"][path][method].clone();

    // The append body: `messages` required, each turn needs role and content, nothing else.
    let append = op("post", "/v1/sessions/{session_id}/messages");
    assert_eq!(
        append["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/AppendRequest"
    );
    let body = schema("AppendRequest");
    assert_eq!(body["required"], json!(["messages"]));
    assert_eq!(body["additionalProperties"], false);
    let turn = schema("IncomingTurn");
    assert_eq!(turn["required"], json!(["role", "content"]));
    assert_eq!(turn["additionalProperties"], false);
    assert_eq!(schema("Role")["enum"], json!(["user", "assistant", "system", "tool"]));
    assert_eq!(schema("Strategy")["enum"], json!(["keyword", "semantic", "hybrid"]));
    assert_eq!(schema("Permission")["enum"], json!(["read", "write", "admin"]));
    // The task: the header on the routes that take one, with the body's and query's limits.
    for (method, path) in [
        ("post", "/v1/sessions/{session_id}/messages"),
        ("post", "/v1/conversations/search"),
        ("post", "/v1/recall"),
        ("get", "/v1/memories"),
    ] {
        let parameters = op(method, path)["parameters"].as_array().cloned().unwrap_or_default();
        let header = parameters
            .iter()
            .find(|p| p["name"] == "X-Sediment-Task" && p["in"] == "header")
            .unwrap_or_else(|| panic!("{method} {path} does not document X-Sediment-Task"));
        assert_eq!(header["required"], false);
        assert_eq!(
            (&header["schema"]["minLength"], &header["schema"]["maxLength"]),
            (&json!(1), &json!(128))
        );
    }
    assert!(!op("get", "/v1/sessions/{session_id}/messages")
        .to_string()
        .contains("X-Sediment-Task"));
    for name in ["AppendRequest", "SearchRequest", "RecallBody"] {
        let task = &schema(name)["properties"]["task"];
        assert_eq!(
            (&task["minLength"], &task["maxLength"]),
            (&json!(1), &json!(128)),
            "{name}: {task}"
        );
        assert!(task["pattern"].is_string(), "{name}: {task}");
    }
    let query_task = op("get", "/v1/memories")["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "task" && p["in"] == "query")
        .cloned()
        .expect("the memory listing documents ?task=");
    assert_eq!(query_task["schema"]["maxLength"], 128, "{query_task}");
    for name in [
        "SearchRequest",
        "RecallBody",
        "RecallBudget",
        "MemoryPatch",
        "PromptPut",
        "CreateKey",
    ] {
        assert_eq!(schema(name)["additionalProperties"], false, "{name}");
    }
    assert!(append["responses"].get("201").is_some());
    assert_eq!(
        op("get", "/v1/audit")["responses"]["429"]["headers"]["Retry-After"]["schema"]["type"],
        "integer"
    );
    assert!(op("get", "/healthz").get("security").is_none());
    assert_eq!(op("post", "/v1/admin/keys")["security"], json!([{ "admin_key": [] }]));
    assert_eq!(
        op("post", "/v1/recall")["security"],
        json!([{ "api_key": [] }, { "idp_token": [] }])
    );

    // Admin keys: 201 with the secret `key`.
    let created = &op("post", "/v1/admin/keys")["responses"]["201"]["content"]["application/json"]["schema"];
    let created = resolve(&doc, created);
    let (properties, required) = object_of(&doc, &created);
    assert!(properties.contains_key("key") && required.contains("key"), "{created}");

    // Recall: the stable and the dynamic part.
    let recall = &op("post", "/v1/recall")["responses"]["200"]["content"]["application/json"]["schema"];
    let (properties, required) = object_of(&doc, &resolve(&doc, recall));
    for field in ["stable", "dynamic", "truncated", "errors", "strategy"] {
        assert!(
            properties.contains_key(field) && required.contains(field),
            "recall: {field}"
        );
    }

    // Real responses match their documented schemas, field by field.
    let t = tenant();
    let session = "openapi-faithful";
    let calls: Vec<(Method, String, Option<Value>)> = vec![
        (
            Method::POST,
            format!("/v1/sessions/{session}/messages"),
            Some(json!({"messages": [
                {"role": "user", "content": "I run the orders database on Postgres", "metadata": {"k": 1}, "client_id": "c1"},
                {"role": "assistant", "content": "Noted: orders on Postgres."}
            ], "task": "openapi-task"})),
        ),
        (Method::GET, format!("/v1/sessions/{session}/messages?limit=10"), None),
        (
            Method::GET,
            format!("/v1/sessions/{session}/context?window_tokens=4000"),
            None,
        ),
        (Method::GET, format!("/v1/sessions/{session}/compaction"), None),
        (Method::POST, format!("/v1/sessions/{session}/reset"), None),
        (
            Method::POST,
            "/v1/conversations/search".into(),
            Some(json!({"query": "orders database", "strategy": "keyword"})),
        ),
        (
            Method::POST,
            "/v1/conversations/search".into(),
            Some(json!({"query": "orders database", "strategy": "keyword", "task": "openapi-task"})),
        ),
        (
            Method::POST,
            "/v1/recall".into(),
            Some(json!({"query": "which database?", "task": "openapi-task"})),
        ),
        (Method::GET, "/v1/memories?task=openapi-task".into(), None),
        (Method::GET, "/v1/memories?task=".into(), None),
        (
            Method::POST,
            "/v1/recall".into(),
            Some(json!({"query": "which database?", "budget": {"total_chars": 500}})),
        ),
        (Method::GET, "/v1/memories".into(), None),
        (Method::GET, "/v1/scenes".into(), None),
        (Method::GET, "/v1/persona".into(), None),
        (Method::GET, "/v1/prompts".into(), None),
        (Method::GET, "/v1/prompts/l1-extract".into(), None),
        (
            Method::PUT,
            "/v1/prompts/l1-extract".into(),
            Some(json!({"level": "team", "version": "v1", "content": "Extract facts."})),
        ),
        (Method::GET, "/v1/audit".into(), None),
        (Method::GET, "/v1/memories?limit=0".into(), None),
        (
            Method::POST,
            "/v1/recall".into(),
            Some(json!({"query": "x", "colour": "blue"})),
        ),
        (Method::GET, "/healthz".into(), None),
        (Method::GET, "/readyz".into(), None),
        (Method::GET, "/ops/state".into(), None),
    ];
    app.wait_indexed(std::time::Duration::from_secs(10)).await;
    for (method, path, body) in calls {
        let mut request = app.req(method.clone(), &path, &t);
        if let Some(body) = &body {
            request = request.json(body);
        }
        let template = path
            .split('?')
            .next()
            .unwrap()
            .replace(session, "{session_id}")
            .replace("l1-extract", "{template_id}");
        conforms(&doc, request, &template).await;
    }
}

/// With auth on: the key management routes and the auth errors match the document.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_schemas_of_key_management_and_auth_errors_are_faithful() {
    const ADMIN_KEY: &str = "openapi-admin-key-0123456789abcdef-0123";
    let options = Options {
        env: vec![("ADMIN_KEY", ADMIN_KEY.to_owned())],
        ..Options::default()
    };
    let app = TestApp::with(Mode::Embedded, options).await;
    let doc = document(&app).await;
    let admin = |method: Method, path: &str| app.client.request(method, app.url(path)).bearer_auth(ADMIN_KEY);
    let created = conforms(
        &doc,
        admin(Method::POST, "/v1/admin/keys").json(&json!({"team_id": "acme", "agents": ["bot"], "name": "bot"})),
        "/v1/admin/keys",
    )
    .await;
    let id = created["id"].as_str().expect("a key id").to_owned();
    let secret = created["key"].as_str().expect("the secret").to_owned();
    conforms(
        &doc,
        admin(Method::GET, "/v1/admin/keys?team_id=acme"),
        "/v1/admin/keys",
    )
    .await;
    let t = tenant();
    let as_key = app
        .req(Method::POST, "/v1/recall", &t)
        .bearer_auth(&secret)
        .json(&json!({"query": "anything"}));
    conforms(&doc, as_key, "/v1/recall").await; // 403: another team
    conforms(&doc, app.req(Method::GET, "/v1/memories", &t), "/v1/memories").await; // 401
    conforms(&doc, admin(Method::GET, "/v1/memories"), "/v1/memories").await; // 403
    conforms(
        &doc,
        admin(Method::DELETE, &format!("/v1/admin/keys/{id}")),
        "/v1/admin/keys/{key_id}",
    )
    .await;
    conforms(
        &doc,
        admin(Method::DELETE, "/v1/admin/keys/nope"),
        "/v1/admin/keys/{key_id}",
    )
    .await;
    // Found by tests/schemathesis.sh: an unknown parameter was axum's plain-text 400.
    let unknown = conforms(
        &doc,
        admin(Method::DELETE, "/v1/admin/teams/acme?colour=blue"),
        "/v1/admin/teams/{team_id}",
    )
    .await;
    assert_eq!(unknown["code"], "invalid_request");
    let log = conforms(
        &doc,
        admin(Method::GET, "/v1/admin/audit?team_id=acme&limit=2"),
        "/v1/admin/audit",
    )
    .await;
    assert_eq!(log["items"].as_array().map(Vec::len), Some(2), "{log}");
    conforms(&doc, admin(Method::GET, "/v1/admin/audit?limit=0"), "/v1/admin/audit").await;
    let replay = "/v1/admin/queues/{kind}/parked/replay";
    let replayed = conforms(
        &doc,
        admin(Method::POST, "/v1/admin/queues/index/parked/replay"),
        replay,
    )
    .await;
    assert_eq!(replayed, json!({ "kind": "index", "items": [] }));
    for (path, body) in [
        ("/v1/admin/queues/nope/parked/replay", json!({})),
        ("/v1/admin/queues/scene/parked/replay", json!({ "limit": 0 })),
    ] {
        let refused = conforms(&doc, admin(Method::POST, path).json(&body), replay).await;
        assert!(
            refused["code"] == "not_found" || refused["code"] == "invalid_request",
            "{refused}"
        );
    }
}

/// What the schemathesis run (tests/schemathesis.sh) found answering outside the document,
/// pinned here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_fuzz_findings_stay_fixed() {
    let app = TestApp::start(Mode::Embedded).await;
    let doc = document(&app).await;
    let t = tenant();
    // serde fills a struct from an array of its fields too; the document allows objects only.
    let messages = "/v1/sessions/{session_id}/messages";
    for (path, template, body) in [
        ("/v1/recall", "/v1/recall", json!({"query": "x", "budget": [1, 2]})),
        ("/v1/recall", "/v1/recall", json!(["x"])),
        (
            "/v1/sessions/fuzz/messages",
            messages,
            json!({"messages": [["user", "hi"]]}),
        ),
    ] {
        let answer = conforms(&doc, app.req(Method::POST, path, &t).json(&body), template).await;
        assert_eq!(answer["code"], "invalid_request", "{path} {body}");
    }
    // A path parameter that is not UTF-8 was axum's plain-text 400.
    for (path, template) in [
        ("/v1/sessions/%FF/messages", messages),
        ("/v1/memories/%FF", "/v1/memories/{memory_id}"),
    ] {
        let answer = conforms(&doc, app.req(Method::GET, path, &t), template).await;
        assert_eq!(answer["code"], "invalid_request", "{path}");
    }
    // The fuzzer's valid ids are the handlers' valid ids.
    let prompt = &doc["paths"]["/v1/prompts/{template_id}"]["get"]["parameters"][0];
    assert_eq!(
        prompt["schema"]["enum"],
        json!(["l1-extract", "l1-dedup", "l2-scene", "l3-persona"])
    );
}

/// Sends the request and checks that its status is documented for the operation and its body
/// matches the documented schema; returns the body.
async fn conforms(doc: &Value, request: reqwest::RequestBuilder, template: &str) -> Value {
    let request = request.build().expect("a request");
    let method = request.method().clone();
    let url = request.url().clone();
    let response = reqwest::Client::new().execute(request).await.expect("send");
    let status = response.status().as_u16().to_string();
    let value: Value = response.json().await.expect("a JSON body");
    let operation = &doc["paths"][template][method.as_str().to_lowercase()];
    assert!(!operation.is_null(), "{method} {template} is not documented");
    let documented = &operation["responses"][&status]["content"]["application/json"]["schema"];
    assert!(
        !documented.is_null(),
        "{method} {url} answered {status}, which is not documented: {value}"
    );
    let mut errors = Vec::new();
    check(doc, documented, &value, "$", &mut errors);
    assert!(
        errors.is_empty(),
        "{method} {url} ({status}) does not match its schema: {errors:#?}\n{value}"
    );
    value
}

fn resolve(doc: &Value, schema: &Value) -> Value {
    match schema["$ref"].as_str() {
        Some(reference) => {
            let name = reference.strip_prefix("#/components/schemas/").expect("a local ref");
            resolve(doc, &doc["components"]["schemas"][name])
        }
        None => schema.clone(),
    }
}

/// The properties and required fields of an object schema, through `allOf`.
fn object_of(doc: &Value, schema: &Value) -> (serde_json::Map<String, Value>, BTreeSet<String>) {
    let mut properties = serde_json::Map::new();
    let mut required = BTreeSet::new();
    let parts = match schema["allOf"].as_array() {
        Some(parts) => parts.iter().map(|p| resolve(doc, p)).collect(),
        None => vec![schema.clone()],
    };
    for part in parts {
        if part.get("allOf").is_some() {
            let (p, r) = object_of(doc, &part);
            properties.extend(p);
            required.extend(r);
            continue;
        }
        if let Some(p) = part["properties"].as_object() {
            properties.extend(p.clone());
        }
        if let Some(r) = part["required"].as_array() {
            required.extend(r.iter().filter_map(|r| r.as_str().map(str::to_owned)));
        }
    }
    (properties, required)
}

/// A small, strict JSON Schema check: types, enums, required fields, and no field the schema
/// does not name (responses must be documented completely).
fn check(doc: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    if let Some(branches) = schema["oneOf"].as_array() {
        let fits = branches.iter().any(|b| {
            let mut e = Vec::new();
            check(doc, b, value, at, &mut e);
            e.is_empty()
        });
        if !fits {
            errors.push(format!("{at}: fits no oneOf branch: {value}"));
        }
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            errors.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ if schema.get("allOf").is_some() => vec!["object"],
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => return, // any value
    };
    let actual = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let fits = types.contains(&actual) || (actual == "integer" && types.contains(&"number"));
    if !fits {
        errors.push(format!("{at}: a {actual}, documented as {types:?}"));
        return;
    }
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check(doc, &schema["items"], item, &format!("{at}[{i}]"), errors);
            }
        }
        Value::Object(fields) => {
            let (properties, required) = object_of(doc, &schema);
            if properties.is_empty() {
                return; // a free-form object
            }
            for name in &required {
                if !fields.contains_key(name) {
                    errors.push(format!("{at}: required {name} is missing"));
                }
            }
            for (name, field) in fields {
                match properties.get(name) {
                    Some(property) => check(doc, property, field, &format!("{at}.{name}"), errors),
                    None => errors.push(format!("{at}: {name} is not documented")),
                }
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}
