//! The OpenAI-compatible embedder against the scripted fake server: batching and ordering,
//! authentication, and how each kind of provider failure is classified and retried.

use std::time::{Duration, Instant};

use integration_tests::fake_openai::{embed_text, FakeOpenAi, Fault};
use serde_json::{json, Value};
use shared::config::Secret;
use shared::embed::{EmbedError, Embedder, OpenAiEmbedder, OpenAiSettings};
use shared::runtime::error_chain;

const DIMENSION: usize = 32;
const MODEL: &str = "fake-embed";

/// Defaults, except for quick retries so that failure tests stay fast.
fn settings(fake: &FakeOpenAi) -> OpenAiSettings {
    OpenAiSettings {
        retry_base_delay: Duration::from_millis(10),
        timeout: Duration::from_secs(5),
        ..OpenAiSettings::new(fake.base_url(), MODEL)
    }
}

async fn connect(fake: &FakeOpenAi) -> OpenAiEmbedder {
    OpenAiEmbedder::connect(settings(fake))
        .await
        .expect("connect to the fake")
}

fn texts(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("turn {i} talks about topic {}", i % 7))
        .collect()
}

fn expect_backend(result: Result<impl std::fmt::Debug, EmbedError>) -> String {
    let error = result.expect_err("expected a Backend error");
    assert!(
        matches!(error, EmbedError::Backend(_)),
        "expected a Backend error, got {error:?}"
    );
    assert!(!error.is_retryable());
    error_chain(&error)
}

fn expect_unavailable(result: Result<impl std::fmt::Debug, EmbedError>) -> String {
    let error = result.expect_err("expected an Unavailable error");
    assert!(
        matches!(error, EmbedError::Unavailable(_)),
        "expected an Unavailable error, got {error:?}"
    );
    assert!(error.is_retryable());
    error_chain(&error)
}

#[tokio::test]
async fn batches_of_at_most_batch_size_keep_input_order_even_when_shuffled() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    fake.set_shuffle(true);
    let embedder = connect(&fake).await;
    assert_eq!(embedder.dimension(), DIMENSION);
    assert_eq!(embedder.model(), MODEL);
    assert_eq!(fake.embeddings().requests(), 1, "connect probes once");

    let texts = texts(150);
    let vectors = embedder.embed(&texts).await.unwrap();

    let expected: Vec<Vec<f32>> = texts.iter().map(|t| embed_text(t, DIMENSION)).collect();
    assert_eq!(vectors, expected);
    let bodies = fake.embeddings().bodies();
    let sizes: Vec<usize> = bodies[1..]
        .iter()
        .map(|b| b["input"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, vec![64, 64, 22]);
    assert_eq!(bodies[1]["model"], json!(MODEL));
    assert_eq!(bodies[3]["input"][21], json!(texts[149]));
}

#[tokio::test]
async fn empty_input_makes_no_request() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let embedder = connect(&fake).await;
    assert!(embedder.embed(&[]).await.unwrap().is_empty());
    assert_eq!(fake.embeddings().requests(), 1);
}

#[tokio::test]
async fn api_key_is_sent_as_a_bearer_token_and_only_when_set() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let with_key = OpenAiSettings {
        api_key: Some(Secret::new("sk-test-123")),
        ..settings(&fake)
    };
    assert!(!format!("{with_key:?}").contains("sk-test-123"));
    let embedder = OpenAiEmbedder::connect(with_key).await.unwrap();
    assert!(!format!("{embedder:?}").contains("sk-test-123"));
    embedder.embed(&texts(2)).await.unwrap();
    let seen: Vec<Option<String>> = fake
        .embeddings()
        .recorded()
        .into_iter()
        .map(|r| r.authorization)
        .collect();
    assert_eq!(seen, vec![Some("Bearer sk-test-123".to_owned()); 2]);

    connect(&fake).await;
    assert_eq!(fake.embeddings().last_authorization(), None);
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_waited_out_then_succeeds() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let embedder = connect(&fake).await;
    fake.embeddings().push(Fault::retry_after(429, 1));

    let started = Instant::now();
    let vectors = embedder.embed(&texts(3)).await.unwrap();

    assert_eq!(vectors.len(), 3);
    assert_eq!(fake.embeddings().requests(), 1 + 2, "the 429 and its retry");
    // The backoff alone would be ~10 ms: waiting a second shows Retry-After was honoured.
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(950), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
}

#[tokio::test]
async fn server_errors_on_every_attempt_end_unavailable() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let embedder = OpenAiEmbedder::connect(OpenAiSettings {
        max_retries: 2,
        ..settings(&fake)
    })
    .await
    .unwrap();
    fake.embeddings().push_times(Fault::Status(500), 3);

    let chain = expect_unavailable(embedder.embed(&texts(3)).await);

    assert!(chain.contains("500"), "{chain}");
    assert_eq!(fake.embeddings().requests(), 1 + 3, "first attempt and 2 retries");
    // The next call starts afresh and succeeds.
    assert_eq!(embedder.embed(&texts(1)).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_few_server_errors_are_retried_away() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let embedder = connect(&fake).await;
    fake.embeddings().push(Fault::Status(502));
    fake.embeddings().push(Fault::Status(503));

    assert_eq!(embedder.embed(&texts(2)).await.unwrap().len(), 2);
    assert_eq!(fake.embeddings().requests(), 1 + 3);
}

#[tokio::test]
async fn client_error_is_permanent_and_carries_the_provider_message() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let embedder = connect(&fake).await;
    let message = "This model's maximum context length is 8192 tokens";
    fake.embeddings().push(Fault::error(400, message));

    let chain = expect_backend(embedder.embed(&texts(2)).await);

    assert!(chain.contains(message), "{chain}");
    assert!(chain.contains("400"), "{chain}");
    assert_eq!(fake.embeddings().requests(), 1 + 1, "no retry");
}

#[tokio::test]
async fn refused_key_fails_connect_permanently() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    fake.embeddings().push(Fault::error(401, "Incorrect API key provided"));

    let chain = expect_backend(OpenAiEmbedder::connect(settings(&fake)).await);

    assert!(chain.contains("Incorrect API key provided"), "{chain}");
}

#[tokio::test]
async fn slow_answers_time_out_each_attempt_then_end_unavailable() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let timeout = Duration::from_millis(300);
    let embedder = OpenAiEmbedder::connect(OpenAiSettings {
        timeout,
        max_retries: 2,
        ..settings(&fake)
    })
    .await
    .unwrap();
    fake.embeddings().push_times(Fault::Delay(Duration::from_secs(30)), 3);

    let started = Instant::now();
    let chain = expect_unavailable(embedder.embed(&texts(2)).await);
    let elapsed = started.elapsed();

    assert!(chain.contains("timed out"), "{chain}");
    assert_eq!(fake.embeddings().requests(), 1 + 3);
    assert!(elapsed >= timeout * 3, "{elapsed:?}");
    assert!(elapsed < timeout * 3 + Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn dimension_mismatch_fails_connect_naming_both_numbers() {
    let fake = FakeOpenAi::start(DIMENSION).await;

    let chain = expect_backend(
        OpenAiEmbedder::connect(OpenAiSettings {
            dimension: Some(384),
            ..settings(&fake)
        })
        .await,
    );

    assert!(
        chain.contains("384") && chain.contains(&DIMENSION.to_string()),
        "{chain}"
    );
    let matching = OpenAiSettings {
        dimension: Some(DIMENSION),
        ..settings(&fake)
    };
    assert_eq!(OpenAiEmbedder::connect(matching).await.unwrap().dimension(), DIMENSION);
}

#[tokio::test]
async fn wrong_count_wrong_dimension_and_malformed_json_are_permanent() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let embedder = connect(&fake).await;
    let cases = [
        (Fault::WrongCount(2), "2 embeddings for 3 inputs"),
        (Fault::WrongDimension(DIMENSION + 1), "dimension 33, expected 32"),
        (Fault::MalformedJson, "not an embeddings list"),
    ];
    for (fault, expected) in cases {
        let before = fake.embeddings().requests();
        fake.embeddings().push(fault.clone());

        let chain = expect_backend(embedder.embed(&texts(3)).await);

        assert!(chain.contains(expected), "{fault:?}: {chain}");
        assert_eq!(fake.embeddings().requests(), before + 1, "{fault:?} was retried");
    }
}

#[tokio::test]
async fn stopped_server_is_unavailable_at_connect() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    fake.stop().await;

    let chain = expect_unavailable(
        OpenAiEmbedder::connect(OpenAiSettings {
            max_retries: 1,
            ..settings(&fake)
        })
        .await,
    );

    assert!(chain.contains("could not connect"), "{chain}");
}

#[tokio::test]
async fn server_stopped_after_connect_is_unavailable() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let embedder = connect(&fake).await;
    // The probe left a pooled keep-alive connection; a stop must close it too.
    fake.stop().await;

    expect_unavailable(embedder.embed(&texts(1)).await);
}

#[tokio::test]
async fn down_server_is_unavailable_until_it_comes_back() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let embedder = OpenAiEmbedder::connect(OpenAiSettings {
        max_retries: 1,
        ..settings(&fake)
    })
    .await
    .unwrap();
    fake.set_down(true);

    let chain = expect_unavailable(embedder.embed(&texts(1)).await);
    assert!(chain.contains("503"), "{chain}");

    fake.set_down(false);
    assert_eq!(embedder.embed(&texts(1)).await.unwrap().len(), 1);
}

#[tokio::test]
async fn retries_and_outcomes_are_counted() {
    let handle = shared::metrics::prometheus();
    let fake = FakeOpenAi::start(DIMENSION).await;
    let embedder = connect(&fake).await;
    fake.embeddings().push(Fault::Status(500));
    embedder.embed(&texts(1)).await.unwrap();

    let rendered = handle.render();
    for result in ["ok", "retry"] {
        let line = rendered
            .lines()
            .find(|l| {
                l.starts_with(shared::metrics::EMBEDDING_REQUESTS)
                    && l.contains(r#"provider="openai""#)
                    && l.contains(&format!(r#"result="{result}""#))
            })
            .unwrap_or_else(|| panic!("no {result} counter in:\n{rendered}"));
        assert!(!line.ends_with(" 0"), "{line}");
    }
    assert!(rendered.contains(shared::metrics::EMBEDDING_LATENCY), "{rendered}");
}

#[tokio::test]
async fn fake_chat_completions_replay_the_script_and_record_requests() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", fake.base_url());
    let request = json!({"model": "fake-chat", "messages": [{"role": "user", "content": "hi"}]});
    fake.push_reply("first");
    fake.chat().push(Fault::Status(429));

    let limited = client.post(&url).json(&request).send().await.unwrap();
    assert_eq!(limited.status(), 429);
    let ok: Value = client
        .post(&url)
        .json(&request)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ok["choices"][0]["message"]["content"], json!("first"));
    assert_eq!(ok["model"], json!("fake-chat"));
    let unscripted = client.post(&url).json(&request).send().await.unwrap();
    assert_eq!(unscripted.status(), 500);

    assert_eq!(fake.chat().requests(), 3);
    assert_eq!(fake.chat().bodies()[1], request);
    assert_eq!(fake.embeddings().requests(), 0);
}
