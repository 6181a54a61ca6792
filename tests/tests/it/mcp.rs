//! The MCP server through a real MCP client (the official SDK's, rmcp): `/mcp` on the API over
//! Streamable HTTP with API keys, and `sediment mcp` on stdio, both against a running API
//! (`--url`) and over an embedded data directory of its own. Each tool and resource is called
//! and checked against what `/v1` holds; a key's team and permission bound what its tools see
//! and do.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use integration_tests::app::{fast_layer_env, tenant, Mode, Options, TestApp};
use reqwest::{Method, StatusCode};
use rmcp::model::{CallToolRequestParams, CallToolResult, ReadResourceRequestParams, ResourceContents};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt as _, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::{json, Value};
use shared::domain::Tenant;

/// The `sediment` binary, built from api/src/main.rs inside this package.
const BIN: &str = env!("CARGO_BIN_EXE_sediment-api");
const ADMIN_KEY: &str = "test-admin-key-0123456789abcdef-0123456789";
const WAIT: Duration = Duration::from_secs(40);
const TOOLS: [&str; 9] = [
    "conversation_search",
    "forget",
    "get_persona",
    "list_memories",
    "list_scenes",
    "memory_search",
    "read_scene",
    "recall",
    "remember",
];

type Client = RunningService<RoleClient, ()>;

async fn create_key(app: &TestApp, body: Value) -> String {
    let response = app
        .client
        .post(app.url("/v1/admin/keys"))
        .bearer_auth(ADMIN_KEY)
        .json(&body)
        .send()
        .await
        .expect("create a key");
    assert_eq!(response.status(), StatusCode::CREATED);
    let created: Value = response.json().await.expect("a JSON body");
    created["key"].as_str().expect("the secret").to_owned()
}

/// An MCP client on `/mcp`, as an MCP host configured with `key` and `t`'s agent and user.
async fn http_client(app: &TestApp, key: &str, t: &Tenant, session: &str) -> Client {
    let mut headers = HashMap::new();
    for (name, value) in [
        (api::AGENT_HEADER, t.agent.as_str()),
        (api::USER_HEADER, t.user.as_str()),
        (api::mcp::SESSION_HEADER, session),
    ] {
        headers.insert(
            name.parse().expect("a header name"),
            value.parse().expect("a header value"),
        );
    }
    let config = StreamableHttpClientTransportConfig::with_uri(app.url("/mcp"))
        .auth_header(key)
        .custom_headers(headers);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("the MCP handshake")
}

async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object");
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tool's successful JSON answer.
async fn ok(client: &Client, tool: &str, arguments: Value) -> Value {
    let result = call(client, tool, arguments).await;
    assert_eq!(result.is_error, Some(false), "{tool}: {}", text(&result));
    serde_json::from_str(&text(&result)).unwrap_or_else(|_| Value::String(text(&result)))
}

/// A tool's error, as the model reads it.
async fn refused(client: &Client, tool: &str, arguments: Value) -> String {
    let result = call(client, tool, arguments).await;
    assert_eq!(result.is_error, Some(true), "{tool} should fail: {}", text(&result));
    text(&result)
}

/// Calls `tool` until it succeeds with an answer that `ready` accepts (what it waits for may
/// not exist yet: a persona is 404 until its first build).
async fn until(client: &Client, tool: &str, arguments: Value, ready: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let result = call(client, tool, arguments.clone()).await;
        let answer = serde_json::from_str(&text(&result)).unwrap_or_else(|_| Value::String(text(&result)));
        if result.is_error == Some(false) && ready(&answer) {
            return answer;
        }
        assert!(started.elapsed() < WAIT, "{tool} never became ready: {answer}");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

fn mentions(items: &Value, needle: &str) -> bool {
    items.as_array().is_some_and(|items| {
        items
            .iter()
            .any(|i| i["content"].as_str().is_some_and(|c| c.contains(needle)))
    })
}

/// Every tool and resource over `/mcp`, with a team key; then what other keys can reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_http_serves_every_tool_within_the_key() {
    let mut env = vec![("ADMIN_KEY", ADMIN_KEY.to_owned())];
    env.extend(fast_layer_env());
    let mut app = TestApp::with(
        Mode::Embedded,
        Options {
            env,
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    let writer = create_key(&app, json!({ "team_id": t.team })).await;
    let client = http_client(&app, &writer, &t, "mcp-http-1").await;

    // The server describes itself, and each tool has a description and an object schema.
    let info = client.peer_info().expect("the server's initialize answer");
    assert_eq!(info.server_info.as_ref().map(|i| i.name.as_str()), Some("sediment"));
    assert!(info.instructions.as_deref().is_some_and(|i| i.contains("recall")));
    let tools = client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(names, TOOLS);
    for tool in &tools {
        assert!(tool.description.as_ref().is_some_and(|d| d.len() > 40), "{}", tool.name);
        assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
        let read_only = tool.annotations.as_ref().and_then(|a| a.read_only_hint);
        let writes = matches!(tool.name.as_ref(), "remember" | "forget");
        assert_eq!(read_only, Some(!writes), "{}", tool.name);
    }
    let recall_schema = &tools.iter().find(|t| t.name == "recall").unwrap().input_schema;
    assert_eq!(recall_schema["required"], json!(["query"]), "{recall_schema:?}");

    // remember appends to the session the host configured; the turns are /v1's.
    let remembered = ok(
        &client,
        "remember",
        json!({ "messages": [
            { "role": "user", "content": "I am the on-call DBA for the Quokkaville payments cluster." },
            { "role": "assistant", "content": "Noted: Quokkaville payments run on Postgres 16." },
        ]}),
    )
    .await;
    assert_eq!(remembered["session_id"], "mcp-http-1", "{remembered}");
    assert_eq!(remembered["messages"].as_array().map(Vec::len), Some(2), "{remembered}");
    let listed: Value = app
        .req(Method::GET, "/v1/sessions/mcp-http-1/messages", &t)
        .bearer_auth(&writer)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(listed["messages"].as_array().map(Vec::len), Some(2), "{listed}");

    let found = until(
        &client,
        "conversation_search",
        json!({ "query": "Quokkaville payments", "strategy": "keyword" }),
        |answer| mentions(&answer["items"], "on-call DBA"),
    )
    .await;
    assert_eq!(found["items"][0]["session_id"], "mcp-http-1");

    // The rules extractor distils a memory; the memory tools find it.
    let memories = until(&client, "list_memories", json!({}), |answer| {
        mentions(&answer["items"], "DBA")
    })
    .await;
    let memory = memories["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"].as_str().is_some_and(|c| c.contains("DBA")))
        .unwrap()
        .clone();
    // Listed from the store at once, searchable once the memory index applied its outbox.
    let searched = until(
        &client,
        "memory_search",
        json!({ "query": "Quokkaville DBA", "limit": 5 }),
        |answer| answer["items"][0]["id"] == memory["id"],
    )
    .await;
    assert_eq!(searched["items"][0]["id"], memory["id"], "{searched}");
    assert!(searched["items"][0]["score"].as_f64().is_some(), "{searched}");
    let recalled = ok(
        &client,
        "recall",
        json!({ "query": "who runs the Quokkaville payments database?" }),
    )
    .await;
    assert!(
        recalled["dynamic"]
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i["id"] == memory["id"])),
        "{recalled}"
    );

    // Scenes and the persona, as tools and as Markdown resources.
    let persona = until(&client, "get_persona", json!({}), |p| {
        p.as_str().is_some_and(|p| p.contains("DBA"))
    })
    .await;
    let scenes = until(&client, "list_scenes", json!({}), |s| {
        s["items"].as_array().is_some_and(|items| !items.is_empty())
    })
    .await;
    let scene = &scenes["items"][0];
    let scene_id = scene["id"].as_str().unwrap();
    let read = ok(&client, "read_scene", json!({ "scene_id": scene_id })).await;
    let read = read.as_str().expect("Markdown");
    assert!(
        read.starts_with(&format!("# {}", scene["name"].as_str().unwrap())),
        "{read}"
    );
    let resources = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    let scene_uri = format!("sediment://scenes/{scene_id}");
    assert!(
        uris.contains(&"sediment://persona") && uris.contains(&scene_uri.as_str()),
        "{uris:?}"
    );
    for (uri, expected) in [
        ("sediment://persona", persona.as_str().unwrap()),
        (scene_uri.as_str(), read),
    ] {
        let contents = client
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .expect("resources/read")
            .contents;
        let [ResourceContents::TextResourceContents { text, mime_type, .. }] = contents.as_slice() else {
            panic!("one text content: {contents:?}");
        };
        assert_eq!((text.as_str(), mime_type.as_deref()), (expected, Some("text/markdown")));
    }
    let missing = client
        .read_resource(ReadResourceRequestParams::new(
            "sediment://scenes/00000000-0000-0000-0000-000000000000",
        ))
        .await;
    assert!(missing.is_err(), "{missing:?}");

    // Bad input is the API's own error, which the model can read and correct.
    let error = refused(&client, "memory_search", json!({ "query": "   " })).await;
    assert!(error.starts_with("invalid_request (422)"), "{error}");
    let error = refused(&client, "read_scene", json!({ "scene_id": "no-such-scene" })).await;
    assert!(error.contains("404"), "{error}");

    // forget deletes the memory: it is gone from the listing.
    let forgotten = ok(&client, "forget", json!({ "memory_id": memory["id"] })).await;
    assert_eq!(forgotten["forgotten"], memory["id"]);
    let after = ok(&client, "list_memories", json!({})).await;
    assert!(
        !after["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == memory["id"]),
        "{after}"
    );
    client.cancel().await.expect("close");

    // Another team's key reaches nothing of this team's; a read key cannot write.
    let other = tenant();
    let foreign_key = create_key(&app, json!({ "team_id": other.team })).await;
    let foreign = http_client(&app, &foreign_key, &other, "mcp-http-2").await;
    let nothing = ok(
        &foreign,
        "conversation_search",
        json!({ "query": "Quokkaville", "strategy": "keyword" }),
    )
    .await;
    assert_eq!(nothing["items"], json!([]), "{nothing}");
    let error = refused(&foreign, "forget", json!({ "memory_id": memories["items"][0]["id"] })).await;
    assert!(error.contains("404"), "{error}");
    foreign.cancel().await.expect("close");
    let reader_key = create_key(&app, json!({ "team_id": t.team, "permission": "read" })).await;
    let reader = http_client(&app, &reader_key, &t, "mcp-http-1").await;
    let error = refused(
        &reader,
        "remember",
        json!({ "messages": [{ "role": "user", "content": "hi" }] }),
    )
    .await;
    assert!(error.starts_with("forbidden (403)"), "{error}");
    ok(&reader, "conversation_search", json!({ "query": "Quokkaville" })).await;
    reader.cancel().await.expect("close");

    // Without a credential, /mcp answers as /v1 does; the admin key reads no tenant data.
    for bearer in [None, Some("sdmk_not-a-key")] {
        let mut request = app.client.post(app.url("/mcp")).json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/list"
        }));
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        let response = request.send().await.expect("post /mcp");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(response.headers().contains_key("www-authenticate"));
    }
    let admin = app
        .client
        .post(app.url("/mcp"))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
        .send()
        .await
        .expect("post /mcp");
    assert_eq!(admin.status(), StatusCode::FORBIDDEN);

    let metrics = app.metrics_text().await;
    for series in [
        r#"sediment_mcp_tool_calls_total{tool="remember",result="ok"}"#,
        r#"sediment_mcp_tool_calls_total{tool="remember",result="refused"}"#,
        r#"sediment_mcp_tool_calls_total{tool="memory_search",result="refused"}"#,
    ] {
        assert!(metrics.contains(series), "{series} missing");
    }
    app.stop().await;
}

/// `sediment mcp` as an MCP host launches it: on stdio, with its settings in the environment.
fn stdio_command(args: &[&str], env: &[(&str, String)]) -> TokioChildProcess {
    let command = tokio::process::Command::new(BIN).configure(|cmd| {
        cmd.arg("mcp")
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("SEDIMENT_LOG", "warn")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    });
    TokioChildProcess::new(command).expect("start sediment mcp")
}

/// `sediment mcp --url`: the tools call a running API with the key from the environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_on_stdio_calls_a_running_sediment() {
    let mut app = TestApp::with(
        Mode::Embedded,
        Options {
            env: vec![("ADMIN_KEY", ADMIN_KEY.to_owned())],
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    let key = create_key(&app, json!({ "team_id": t.team })).await;
    let env = [
        ("SEDIMENT_API_KEY", key.clone()),
        ("SEDIMENT_AGENT", t.agent.clone()),
        ("SEDIMENT_USER", t.user.clone()),
    ];
    let client = ().serve(stdio_command(&["--url", &app.base], &env)).await.expect("handshake");
    let remembered = ok(
        &client,
        "remember",
        json!({ "messages": [{ "role": "user", "content": "My cat Wombleton hates the vacuum." }] }),
    )
    .await;
    // One stdio process is one conversation unless the host names a session.
    let session = remembered["session_id"].as_str().expect("a session").to_owned();
    assert!(session.starts_with("mcp-"), "{remembered}");
    let found = until(
        &client,
        "conversation_search",
        json!({ "query": "Wombleton", "strategy": "keyword" }),
        |answer| mentions(&answer["items"], "vacuum"),
    )
    .await;
    assert_eq!(found["items"][0]["session_id"], session.as_str());
    client.cancel().await.expect("close");

    // A wrong key is the API's 401, told to the model; the process keeps serving.
    let env = [
        ("SEDIMENT_API_KEY", "sdmk_wrong".to_owned()),
        ("SEDIMENT_USER", t.user.clone()),
    ];
    let client = ().serve(stdio_command(&["--url", &app.base], &env)).await.expect("handshake");
    let error = refused(&client, "list_memories", json!({})).await;
    assert!(error.starts_with("unauthorized (401)"), "{error}");
    client.cancel().await.expect("close");

    // Nothing listening: the model is told sediment cannot be reached.
    let client = ().serve(stdio_command(&["--url", "http://127.0.0.1:9"], &env)).await.expect("handshake");
    let error = refused(&client, "recall", json!({ "query": "anything" })).await;
    assert!(error.starts_with("sediment could not be reached"), "{error}");
    client.cancel().await.expect("close");
    app.stop().await;
}

/// `sediment mcp` without `--url` runs the embedded deployment on its data directory, with no
/// port open; what it was told survives a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_on_stdio_runs_the_embedded_deployment_itself() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [
        ("SEDIMENT_DATA_DIR", dir.path().join("data").display().to_string()),
        ("SEDIMENT_EMBEDDING", "none".to_owned()),
        ("SEDIMENT_TEAM", "home".to_owned()),
        ("SEDIMENT_USER", "ana".to_owned()),
        ("SEDIMENT_AGENT", "desktop".to_owned()),
        ("SEDIMENT_SESSION", "desk-1".to_owned()),
    ];
    // Without a key the ids are the tenant: a missing one is refused at start, before any
    // store is opened.
    let refused = tokio::process::Command::new(BIN)
        .args(["mcp"])
        .env_clear()
        .envs(
            env.iter()
                .filter(|(k, _)| *k != "SEDIMENT_TEAM")
                .map(|(k, v)| (*k, v.as_str())),
        )
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run sediment mcp");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("--team (SEDIMENT_TEAM)"),
        "{stderr}"
    );
    assert!(refused.stdout.is_empty(), "stdout carries only MCP");
    assert!(!dir.path().join("data").exists(), "a refused start writes nothing");

    let client = ().serve(stdio_command(&[], &env)).await.expect("handshake");
    let remembered = ok(
        &client,
        "remember",
        json!({ "messages": [{ "role": "user", "content": "The Zanzibar offsite is on 14 March." }] }),
    )
    .await;
    assert_eq!(remembered["session_id"], "desk-1");
    until(
        &client,
        "conversation_search",
        json!({ "query": "Zanzibar offsite", "strategy": "keyword" }),
        |answer| mentions(&answer["items"], "14 March"),
    )
    .await;
    // Closing stdin stops the process cleanly (its workers drain).
    client.cancel().await.expect("close");

    let client = ().serve(stdio_command(&[], &env)).await.expect("handshake again");
    until(
        &client,
        "conversation_search",
        json!({ "query": "Zanzibar", "strategy": "keyword" }),
        |answer| mentions(&answer["items"], "14 March"),
    )
    .await;
    // Another user of the same data directory sees nothing of ana's.
    client.cancel().await.expect("close");
    let mut other = env.to_vec();
    other.retain(|(k, _)| *k != "SEDIMENT_USER");
    other.push(("SEDIMENT_USER", "bo".to_owned()));
    let client = ().serve(stdio_command(&[], &other)).await.expect("handshake as bo");
    let found = ok(
        &client,
        "conversation_search",
        json!({ "query": "Zanzibar", "strategy": "keyword" }),
    )
    .await;
    assert_eq!(found["items"], json!([]), "{found}");
    client.cancel().await.expect("close");
}
