//! The product's text shaping and query rewrite (`shared::retrieval`) end to end, over real
//! SQLite and Qdrant Edge: these fail if the index worker indexes raw content again or search
//! sends the raw query.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use integration_tests::app::tenant;
use integration_tests::fake_openai::embed_text;
use shared::domain::{NewTurn, SessionId, Tenant};
use shared::embed::{EmbedResult, Embedder};
use shared::index::{EdgeIndex, Fusion, SearchIndex, Strategy};
use shared::indexer::Indexer;
use shared::recall::{Budget, Recall, RecallRequest};
use shared::search::{ConversationQuery, ConversationSearch};
use shared::store::{SqliteStore, TranscriptStore};

const DIMENSION: usize = 256;

/// The scripted fake's bag of words, in-process: a terse answer shares no word with a question
/// about it unless its dense text carries the question. Counts the texts it embeds.
#[derive(Default)]
struct BagOfWords(AtomicUsize);

#[async_trait]
impl Embedder for BagOfWords {
    fn dimension(&self) -> usize {
        DIMENSION
    }

    fn model(&self) -> &str {
        "bag-of-words"
    }

    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
        self.0.fetch_add(texts.len(), Ordering::SeqCst);
        Ok(texts.iter().map(|t| embed_text(t, DIMENSION)).collect())
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    sqlite: Arc<SqliteStore>,
    index: Arc<dyn SearchIndex>,
    search: ConversationSearch,
    tenant: Tenant,
}

/// Stores `turns` (role, content, created_at) in session `s1` and indexes them `batch` at a time.
async fn fixture(turns: &[(&str, &str, DateTime<Utc>)], batch: u32) -> Fixture {
    let new_turns: Vec<NewTurn> = turns
        .iter()
        .map(|(role, content, at)| NewTurn::new(role, content, None, None, Some(*at)).unwrap())
        .collect();
    fixture_of(new_turns, batch).await
}

async fn fixture_of(new_turns: Vec<NewTurn>, batch: u32) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("db.sqlite")).await.unwrap());
    let store: Arc<dyn TranscriptStore> = sqlite.clone();
    let index: Arc<dyn SearchIndex> =
        Arc::new(EdgeIndex::open(&dir.path().join("index"), 5_000, Some(DIMENSION)).unwrap());
    let embedder: Arc<dyn Embedder> = Arc::new(BagOfWords::default());
    let t = tenant();
    store
        .append(&t, &SessionId::parse("s1").unwrap(), &new_turns)
        .await
        .unwrap();
    let indexed = Indexer::new(store.clone(), index.clone(), Some(embedder.clone()), batch)
        .index_session(&shared::domain::SessionKey::new(t.clone(), "s1"))
        .await
        .unwrap();
    assert_eq!(indexed, new_turns.len());
    Fixture {
        _dir: dir,
        sqlite,
        search: ConversationSearch::new(store, index.clone(), Some(embedder), Fusion::default()),
        index,
        tenant: t,
    }
}

async fn search(f: &Fixture, text: &str, strategy: Strategy) -> Vec<String> {
    let query = ConversationQuery {
        text: text.to_owned(),
        limit: 5,
        session: None,
        task: None,
        strategy,
    };
    let results = f.search.search(&f.tenant, &query).await.unwrap();
    results.hits.into_iter().map(|h| h.turn.content).collect()
}

/// The latest `month`/`day` not after today, as the query rewrite resolves "in <month>".
fn latest(month: u32, day: u32) -> DateTime<Utc> {
    let today = Utc::now().date_naive();
    let year = if (month, day) <= (today.month(), today.day()) {
        today.year()
    } else {
        today.year() - 1
    };
    let date = NaiveDate::from_ymd_opt(year, month, day).unwrap();
    Utc.from_utc_datetime(&date.and_hms_opt(10, 0, 0).unwrap())
}

const NOVEMBER: &str = "Deployment platform decision: VMs.";
const APRIL: &str = "Decision on the deployment platform, after a long discussion with the whole team: Kubernetes.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temporal_question_finds_the_turn_of_that_month_by_keyword() {
    let april = latest(4, 10);
    let november = Utc.with_ymd_and_hms(april.year() - 1, 11, 20, 10, 0, 0).unwrap();
    let f = fixture(
        &[
            ("user", NOVEMBER, november),
            ("assistant", "Noted.", november),
            ("user", "The billing service moves to the new cluster next week.", april),
            ("user", APRIL, april),
        ],
        100,
    )
    .await;
    // Shorter, so raw BM25 ranks the November turn first: only the month tag of the turn and
    // the question's `m` tag put April ahead.
    let raw = search(&f, "deployment platform decision", Strategy::Keyword).await;
    assert_eq!(raw.first().map(String::as_str), Some(NOVEMBER), "{raw:?}");

    let question = "What did we decide about the deployment platform in April?";
    let keyword = search(&f, question, Strategy::Keyword).await;
    assert_eq!(keyword.first().map(String::as_str), Some(APRIL), "{keyword:?}");
    let chinese = search(&f, "四月份 deployment platform 定的是什么？", Strategy::Keyword).await;
    assert_eq!(chinese.first().map(String::as_str), Some(APRIL), "{chinese:?}");
    // A full date in the question matches the turns of that day.
    let iso = april.date_naive().format("%Y-%m-%d").to_string();
    let dated = search(&f, &format!("deployment platform on {iso}"), Strategy::Keyword).await;
    assert_eq!(dated.first().map(String::as_str), Some(APRIL), "{dated:?}");

    // Recall runs the same rewrite (keyword: the fake's vectors would make hybrid a tie).
    let recall = Recall::new(f.search.clone(), f.sqlite.clone());
    let response = recall
        .recall(
            &f.tenant,
            &RecallRequest {
                query: question.to_owned(),
                session: None,
                task: None,
                strategy: Strategy::Keyword,
                limit: 1,
                budget: Budget {
                    item_chars: 1_000,
                    total_chars: 5_000,
                },
                timeout: std::time::Duration::from_secs(5),
                recency: false,
            },
        )
        .await;
    assert!(response.errors.is_empty(), "{:?}", response.errors);
    assert!(
        response
            .dynamic
            .first()
            .is_some_and(|item| item.content.contains(APRIL)),
        "{:?}",
        response.dynamic
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terse_answer_is_found_by_the_question_it_answers() {
    let at = Utc::now() - chrono::Duration::days(3);
    let turns = [
        ("user", "We adopted a dog last weekend from the shelter downtown!", at),
        ("assistant", "Congratulations! What name did you give the puppy?", at),
        ("user", "Noodle.", at),
        ("assistant", "Lovely. Anything else today?", at),
        ("user", "Check the replication lag on the orders replica.", at),
        ("assistant", "Replication lag on the orders replica is 2 seconds.", at),
    ];
    // One turn per batch: the terse answer's question comes from the store, not the batch.
    let f = fixture(&turns, 1).await;
    let found = search(&f, "puppy name", Strategy::Semantic).await;
    let rank = found.iter().position(|c| c == "Noodle.");
    assert!(rank.is_some_and(|r| r < 2), "{found:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_naming_a_speaker_ranks_that_speakers_turn_first() {
    let at = Utc::now() - chrono::Duration::days(3);
    let said = |speaker: &str, role: &str, content: &str| {
        let metadata = serde_json::json!({ "speaker": speaker });
        NewTurn::new(role, content, Some(metadata), None, Some(at)).unwrap()
    };
    const ANA: &str = "I went kayaking on the lake!";
    const MARC: &str = "Mine was busy, but on Sunday I finally went kayaking on the river with my brother.";
    let f = fixture_of(
        vec![
            said("Ana", "user", ANA),
            said("Marc", "assistant", MARC),
            said("Ana", "user", "Sounds lovely, how cold was the water?"),
        ],
        100,
    )
    .await;
    // The shorter turn wins on the words alone, and a name is no word of any turn.
    for text in ["kayaking", "where did marc go kayaking"] {
        let raw = search(&f, text, Strategy::Keyword).await;
        assert_eq!(raw.first().map(String::as_str), Some(ANA), "{text}: {raw:?}");
    }
    // Naming Marc narrows a copy of the channel to his turns: his line gets the second vote.
    for text in ["Where did Marc go kayaking?", "What was Marc's kayaking trip like?"] {
        let named = search(&f, text, Strategy::Keyword).await;
        assert_eq!(named.first().map(String::as_str), Some(MARC), "{text}: {named:?}");
        assert!(
            named.iter().any(|c| c == ANA),
            "narrowing adds votes, it hides nothing: {named:?}"
        );
    }
    let ana = search(&f, "Where did Ana go kayaking?", Strategy::Keyword).await;
    assert_eq!(ana.first().map(String::as_str), Some(ANA), "{ana:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_asked_again_is_not_embedded_again() {
    let at = Utc::now() - chrono::Duration::days(3);
    let f = fixture(
        &[
            ("user", "We adopted a dog last weekend from the shelter downtown!", at),
            ("user", "Check the replication lag on the orders replica.", at),
        ],
        100,
    )
    .await;
    let counting = Arc::new(BagOfWords::default());
    let embedded = || counting.0.load(Ordering::SeqCst);
    let store: Arc<dyn TranscriptStore> = f.sqlite.clone();
    let search = |entries: usize| {
        let embedder: Arc<dyn Embedder> = counting.clone();
        ConversationSearch::new(store.clone(), f.index.clone(), Some(embedder), Fusion::default())
            .with_query_cache(entries)
    };
    let ask = |search: ConversationSearch, text: &str| {
        let query = ConversationQuery {
            text: text.to_owned(),
            limit: 5,
            session: None,
            task: None,
            strategy: Strategy::Hybrid,
        };
        let tenant = f.tenant.clone();
        async move {
            let results = search.search(&tenant, &query).await.unwrap();
            results.hits.into_iter().map(|h| h.turn.content).collect::<Vec<_>>()
        }
    };

    let cached = search(16);
    let first = ask(cached.clone(), "Where did the dog come from?").await;
    assert_eq!(embedded(), 1);
    let again = ask(cached.clone(), "Where did the dog come from?").await;
    assert_eq!(embedded(), 1, "the second asking takes the cached vector");
    assert_eq!(first, again, "and ranks alike");
    assert_eq!(
        first.first().map(String::as_str),
        Some("We adopted a dog last weekend from the shelter downtown!")
    );
    ask(cached.clone(), "Which replica lags?").await;
    assert_eq!(embedded(), 2, "another question is embedded");
    // A clone of the search shares its cache (the API clones it into recall).
    ask(cached, "Which replica lags?").await;
    assert_eq!(embedded(), 2);

    let uncached = search(0);
    ask(uncached.clone(), "Where did the dog come from?").await;
    ask(uncached, "Where did the dog come from?").await;
    assert_eq!(embedded(), 4, "0 turns the cache off");
}
