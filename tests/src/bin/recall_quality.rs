//! Retrieval-quality benchmark: recall of long multi-session conversations through the real
//! index (Qdrant Edge, in-process) and the real local embedder, for keyword, semantic and
//! hybrid search under several indexed-text shapes, query rewrites and fusion settings.
//!
//! ```sh
//! bash api/fetch-model.sh   # once: all-MiniLM-L6-v2 into ~/.cache/sediment/models
//! cargo run --release -p integration-tests --bin recall_quality -- [--json out.json]
//! ```
//!
//! Flags: `--seed N` (42), `--owners N` (12), `--embedder local|hash` (local), `--model-dir DIR`
//! (else `SEDIMENT_MODEL_DIR`, else `~/.cache/sediment/models/all-MiniLM-L6-v2`), `--quick`
//! (fewer variants), `--json FILE`, `--embed-cache FILE` (reuse vectors across runs),
//! `--misses N` (print N misses of the product variant), `--dump-dataset FILE`,
//! `--tokens TEXT` (print the BM25 tokens of a text), `--summary-only` (skip the three stages:
//! only the defaults, the recommended and the product rows). See `tests/QUALITY.md`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use async_trait::async_trait;
use futures::stream::{self, StreamExt, TryStreamExt};
use integration_tests::quality::metrics::Scores;
use integration_tests::quality::text::{Rewrite, TextShape};
use integration_tests::quality::{Dataset, GenConfig, Lang, Owner, QuestionKind};
use shared::embed::{EmbedResult, Embedder, LocalEmbedder};
use shared::index::{EdgeIndex, Fusion, IndexPoint, IndexQuery, PointKind, SearchIndex, Strategy};
use uuid::Uuid;

/// Hits retrieved per question: R@10 and MRR@10 need no more.
const LIMIT: usize = 10;
/// Queries in flight: enough to keep both cores of the index busy.
const CONCURRENCY: usize = 4;
/// Texts handed to the embedder per call (it batches internally); also the progress step.
const EMBED_CHUNK: usize = 256;

#[derive(Debug, Clone)]
struct Args {
    seed: u64,
    owners: usize,
    embedder: String,
    model_dir: Option<PathBuf>,
    quick: bool,
    json: Option<PathBuf>,
    embed_cache: Option<PathBuf>,
    misses: usize,
    dump_dataset: Option<PathBuf>,
    summary_only: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        seed: 42,
        owners: GenConfig::default().owners,
        embedder: "local".into(),
        model_dir: None,
        quick: false,
        json: None,
        embed_cache: None,
        misses: 0,
        dump_dataset: None,
        summary_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || -> anyhow::Result<String> {
            inline
                .clone()
                .or_else(|| it.next())
                .with_context(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--seed" => args.seed = value()?.parse()?,
            "--owners" => args.owners = value()?.parse()?,
            "--embedder" => args.embedder = value()?,
            "--model-dir" => args.model_dir = Some(value()?.into()),
            "--json" => args.json = Some(value()?.into()),
            "--embed-cache" => args.embed_cache = Some(value()?.into()),
            "--misses" => args.misses = value()?.parse()?,
            "--dump-dataset" => args.dump_dataset = Some(value()?.into()),
            "--quick" => args.quick = true,
            "--summary-only" => args.summary_only = true,
            "--tokens" => {
                // Shows which BM25 tokens a text yields, e.g. to see how dates are split.
                let bm25 = shared::index::Bm25::new();
                let text = value()?;
                println!(
                    "query {:?}\ndocument {:?}",
                    bm25.embed_query(&text),
                    bm25.embed_document(&text)
                );
                std::process::exit(0);
            }
            "-h" | "--help" => {
                println!(
                    "{}",
                    include_str!("recall_quality.rs")
                        .lines()
                        .take(15)
                        .collect::<Vec<_>>()
                        .join("\n")
                );
                std::process::exit(0);
            }
            other => bail!("unknown flag {other} (try --help)"),
        }
    }
    Ok(args)
}

/// A stand-in for developing the harness without the model: feature-hashed words and Chinese
/// character bigrams. It knows no synonyms, so its "semantic" numbers mean nothing; used only
/// with `--embedder hash`, never for reported results.
struct HashStandInEmbedder;

const HASH_DIMENSION: usize = 256;

#[async_trait]
impl Embedder for HashStandInEmbedder {
    fn dimension(&self) -> usize {
        HASH_DIMENSION
    }

    fn model(&self) -> &str {
        "hash-stand-in"
    }

    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| hash_vector(t)).collect())
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn hash_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; HASH_DIMENSION];
    let mut add = |feature: &str| {
        let h = fnv1a(feature.as_bytes());
        let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
        v[(h % HASH_DIMENSION as u64) as usize] += sign;
    };
    let lower = text.to_lowercase();
    for word in lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.is_ascii() && w.len() > 2)
    {
        add(word);
    }
    let cjk: Vec<char> = lower.chars().filter(|c| !c.is_ascii()).collect();
    for pair in cjk.windows(2) {
        add(&pair.iter().collect::<String>());
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

fn model_dir(args: &Args) -> PathBuf {
    args.model_dir
        .clone()
        .or_else(|| std::env::var_os("SEDIMENT_MODEL_DIR").map(PathBuf::from))
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
            home.join(".cache/sediment/models/all-MiniLM-L6-v2")
        })
}

/// Every distinct text is embedded once per run (and per `--embed-cache` file), whatever the
/// number of variants that use it.
struct Vectors {
    embedder: Arc<dyn Embedder>,
    cache: HashMap<String, Arc<Vec<f32>>>,
    embedded: usize,
    seconds: f64,
}

impl Vectors {
    async fn ensure(&mut self, texts: impl IntoIterator<Item = String>) -> anyhow::Result<()> {
        let mut missing: Vec<String> = texts.into_iter().filter(|t| !self.cache.contains_key(t)).collect();
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        let start = Instant::now();
        for (i, chunk) in missing.chunks(EMBED_CHUNK).enumerate() {
            let vectors = self.embedder.embed(chunk).await.context("embedding failed")?;
            for (text, vector) in chunk.iter().zip(vectors) {
                self.cache.insert(text.clone(), Arc::new(vector));
            }
            let done = (i * EMBED_CHUNK + chunk.len()) as f64;
            eprint!(
                "\r  embedded {done:>6} / {} texts ({:.0}/s)   ",
                missing.len(),
                done / start.elapsed().as_secs_f64()
            );
        }
        eprintln!();
        self.embedded += missing.len();
        self.seconds += start.elapsed().as_secs_f64();
        Ok(())
    }

    fn get(&self, text: &str) -> Arc<Vec<f32>> {
        Arc::clone(self.cache.get(text).expect("text embedded by ensure()"))
    }

    /// Loads vectors saved by `save` for the same model and dimension; a mismatch is ignored.
    fn load(&mut self, path: &Path) -> anyhow::Result<()> {
        let Ok(mut file) = std::fs::File::open(path) else {
            return Ok(());
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let mut r = Reader(&bytes);
        let header = r.string()?;
        if header != self.cache_header() {
            eprintln!("  {} was made by another model ({header}); ignoring it", path.display());
            return Ok(());
        }
        let dimension = self.embedder.dimension();
        while !r.0.is_empty() {
            let text = r.string()?;
            let vector = (0..dimension).map(|_| r.f32()).collect::<anyhow::Result<Vec<_>>>()?;
            self.cache.insert(text, Arc::new(vector));
        }
        eprintln!("  loaded {} cached vectors from {}", self.cache.len(), path.display());
        Ok(())
    }

    fn save(&self, path: &Path) -> anyhow::Result<()> {
        let mut out = Vec::new();
        put_string(&mut out, &self.cache_header());
        let mut entries: Vec<_> = self.cache.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        for (text, vector) in entries {
            put_string(&mut out, text);
            vector.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
        }
        std::fs::File::create(path)?.write_all(&out)?;
        Ok(())
    }

    fn cache_header(&self) -> String {
        format!(
            "sediment-recall-quality-v1 {} {}",
            self.embedder.model(),
            self.embedder.dimension()
        )
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> anyhow::Result<&[u8]> {
        if self.0.len() < n {
            bail!("truncated embedding cache");
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn u32(&mut self) -> anyhow::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into()?))
    }

    fn f32(&mut self) -> anyhow::Result<f32> {
        Ok(f32::from_le_bytes(self.take(4)?.try_into()?))
    }

    fn string(&mut self) -> anyhow::Result<String> {
        let n = self.u32()? as usize;
        Ok(String::from_utf8(self.take(n)?.to_vec())?)
    }
}

/// One configuration of what each channel indexes and queries, and how hybrid fuses them.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Variant {
    keyword_text: TextShape,
    dense_text: TextShape,
    rewrite: Rewrite,
    fusion: Fusion,
}

/// What QUALITY.md recommends for the service, from the stages below on two seeds: the
/// stages' own winners differ from it only within noise.
const RECOMMENDED: Variant = Variant {
    keyword_text: TextShape::TAGGED,
    dense_text: TextShape::PREVIOUS_FOR_SHORT,
    rewrite: Rewrite {
        strip: true,
        dates: true,
        synonyms: false,
        dense_dates: true,
        product: false,
    },
    fusion: Fusion {
        keyword_prefetch: 50,
        semantic_prefetch: 50,
        rrf_k: 10,
        weights: None,
    },
};

/// What the service does by default: its own text shaping and query rewrite
/// (`shared::retrieval`) and its default fusion (`Fusion::default` in `shared::config`).
const PRODUCT: Variant = Variant {
    keyword_text: TextShape::PRODUCT_KEYWORD,
    dense_text: TextShape::PRODUCT_DENSE,
    rewrite: Rewrite::PRODUCT,
    fusion: Fusion {
        keyword_prefetch: 50,
        semantic_prefetch: 50,
        rrf_k: 60,
        weights: None,
    },
};

impl Variant {
    const DEFAULT: Self = Self {
        keyword_text: TextShape::RAW,
        dense_text: TextShape::RAW,
        rewrite: Rewrite::NONE,
        fusion: Fusion {
            keyword_prefetch: 50,
            semantic_prefetch: 50,
            rrf_k: 60,
            weights: None,
        },
    };

    fn fusion_name(&self) -> String {
        let f = self.fusion;
        let (kw, sem) = f.weights.unwrap_or((1.0, 1.0));
        format!(
            "{}/{} k={} w={kw}:{sem}",
            f.keyword_prefetch, f.semantic_prefetch, f.rrf_k
        )
    }

    /// What a strategy's results depend on, so equal runs are computed once.
    fn key(&self, strategy: Strategy) -> String {
        let r = self.rewrite;
        match strategy {
            Strategy::Keyword => format!(
                "kw {:?} {} {} {} {}",
                self.keyword_text, r.strip, r.dates, r.synonyms, r.product
            ),
            Strategy::Semantic => format!("sem {:?} {} {}", self.dense_text, r.dense_dates, r.product),
            Strategy::Hybrid => format!("hyb {self:?}"),
        }
    }
}

#[derive(Debug, Clone)]
struct Outcome {
    overall: Scores,
    by_kind: BTreeMap<QuestionKind, Scores>,
    by_lang: BTreeMap<Lang, Scores>,
    ranked: Arc<Vec<Vec<Uuid>>>,
}

#[derive(Debug, Clone)]
struct Row {
    stage: &'static str,
    variant: Variant,
    strategy: Strategy,
    outcome: Outcome,
}

/// Indexes (one per pair of indexed-text shapes) and results, built on demand.
struct Bench {
    dataset: Dataset,
    vectors: Vectors,
    /// The index comes first: it flushes when dropped, so its directory must outlive it.
    indexes: HashMap<(TextShape, TextShape), (Arc<EdgeIndex>, tempfile::TempDir)>,
    outcomes: HashMap<String, Outcome>,
    rows: Vec<Row>,
}

impl Bench {
    /// `f(owner, session, turn)` for every turn of the dataset, in dataset order.
    fn per_turn<T>(&self, f: impl Fn(&Owner, usize, usize) -> T) -> Vec<T> {
        let mut out = Vec::with_capacity(self.dataset.turn_count());
        for owner in &self.dataset.owners {
            for (s, session) in owner.sessions.iter().enumerate() {
                out.extend((0..session.turns.len()).map(|t| f(owner, s, t)));
            }
        }
        out
    }

    fn turn_texts(&self, shape: TextShape) -> Vec<String> {
        self.per_turn(|owner, s, t| shape.render(owner, s, t))
    }

    async fn index(&mut self, keyword_text: TextShape, dense_text: TextShape) -> anyhow::Result<Arc<EdgeIndex>> {
        if let Some((index, _)) = self.indexes.get(&(keyword_text, dense_text)) {
            return Ok(Arc::clone(index));
        }
        let dense_texts = self.turn_texts(dense_text);
        self.vectors.ensure(dense_texts.iter().cloned()).await?;
        let start = Instant::now();
        let dir = tempfile::tempdir()?;
        let dimension = self.vectors.embedder.dimension();
        let path = dir.path().to_path_buf();
        // Background optimization off: one explicit run after loading, as a long-lived shard
        // would have, so semantic search goes through a built HNSW graph.
        let index = tokio::task::spawn_blocking(move || EdgeIndex::open(&path, 0, Some(dimension))).await??;
        let keyword_texts = self.turn_texts(keyword_text);
        let mut tags = self.per_turn(|owner, s, t| keyword_text.tags(owner, s, t));
        let mut points = Vec::with_capacity(keyword_texts.len());
        let mut i = 0;
        for owner in &self.dataset.owners {
            for session in &owner.sessions {
                for turn in &session.turns {
                    points.push(IndexPoint {
                        id: turn.id,
                        kind: PointKind::Turn,
                        tenant: owner.tenant.clone(),
                        session_id: session.id.clone(),
                        text: keyword_texts[i].clone(),
                        tags: std::mem::take(&mut tags[i]),
                        task: None,
                        dense: Some(self.vectors.get(&dense_texts[i]).to_vec()),
                    });
                    i += 1;
                }
            }
        }
        for chunk in points.chunks(1_000) {
            index.upsert(chunk).await?;
        }
        index.optimize().await?;
        eprintln!(
            "  indexed {} turns (keyword: {}, dense: {}) in {:.1}s",
            points.len(),
            keyword_text.name(),
            dense_text.name(),
            start.elapsed().as_secs_f64()
        );
        let index = Arc::new(index);
        self.indexes
            .insert((keyword_text, dense_text), (Arc::clone(&index), dir));
        Ok(index)
    }

    async fn run(&mut self, stage: &'static str, variant: Variant, strategies: &[Strategy]) -> anyhow::Result<()> {
        for &strategy in strategies {
            let key = variant.key(strategy);
            if !self.outcomes.contains_key(&key) {
                let outcome = self.evaluate(variant, strategy).await?;
                self.outcomes.insert(key.clone(), outcome);
            }
            self.rows.push(Row {
                stage,
                variant,
                strategy,
                outcome: self.outcomes[&key].clone(),
            });
        }
        Ok(())
    }

    async fn evaluate(&mut self, variant: Variant, strategy: Strategy) -> anyhow::Result<Outcome> {
        let index = self.index(variant.keyword_text, variant.dense_text).await?;
        let today = self.dataset.today;
        let dense_texts: Vec<String> = self
            .dataset
            .questions
            .iter()
            .map(|q| variant.rewrite.dense_text(&q.text, today))
            .collect();
        self.vectors.ensure(dense_texts.iter().cloned()).await?;
        let queries: Vec<IndexQuery> = self
            .dataset
            .questions
            .iter()
            .zip(&dense_texts)
            .map(|(q, dense_text)| IndexQuery {
                tenant: self.dataset.owners[q.owner].tenant.clone(),
                kind: PointKind::Turn,
                session_id: None,
                text: variant.rewrite.keyword_text(&q.text, today),
                tags: variant.rewrite.tags(&q.text, today),
                task: None,
                dense: match strategy {
                    Strategy::Keyword => None,
                    Strategy::Semantic | Strategy::Hybrid => Some(self.vectors.get(dense_text).to_vec()),
                },
                strategy,
                fusion: variant.fusion,
                limit: LIMIT,
            })
            .collect();
        let ranked: Vec<Vec<Uuid>> = stream::iter(queries)
            .map(|query| {
                let index = Arc::clone(&index);
                async move {
                    let hits = index.search(&query).await?;
                    anyhow::Ok(hits.into_iter().map(|h| h.id).collect::<Vec<_>>())
                }
            })
            .buffered(CONCURRENCY)
            .try_collect()
            .await?;

        let mut outcome = Outcome {
            overall: Scores::default(),
            by_kind: BTreeMap::new(),
            by_lang: BTreeMap::new(),
            ranked: Arc::new(Vec::new()),
        };
        for (q, hits) in self.dataset.questions.iter().zip(&ranked) {
            outcome.overall.add(hits, &q.evidence);
            outcome.by_kind.entry(q.kind).or_default().add(hits, &q.evidence);
            outcome.by_lang.entry(q.lang).or_default().add(hits, &q.evidence);
        }
        outcome.ranked = Arc::new(ranked);
        Ok(outcome)
    }

    /// The hybrid variant with the best selection score among rows that `keep`.
    fn best(&self, keep: impl Fn(&Row) -> bool) -> Variant {
        self.best_of(Strategy::Hybrid, keep)
    }

    fn best_of(&self, strategy: Strategy, keep: impl Fn(&Row) -> bool) -> Variant {
        self.rows
            .iter()
            .filter(|r| r.strategy == strategy && keep(r))
            .max_by(|a, b| selection_score(&a.outcome.overall).total_cmp(&selection_score(&b.outcome.overall)))
            .map(|r| r.variant)
            .expect("the stage ran")
    }

    fn outcome(&self, variant: Variant, strategy: Strategy) -> &Outcome {
        &self.outcomes[&variant.key(strategy)]
    }
}

const ALL: [Strategy; 3] = [Strategy::Keyword, Strategy::Semantic, Strategy::Hybrid];

/// What "best" means when a stage picks its winner: the mean of R@5, R@10 and MRR. R@10 alone
/// is noisy (one question is 0.2 points) and blind to where in the top 10 the answer is.
fn selection_score(s: &Scores) -> f64 {
    (s.recall(1) + s.recall(2) + s.mrr()) / 3.0
}

fn pct(x: f64) -> String {
    format!("{:.1}", x * 100.0)
}

fn scores_cells(s: &Scores) -> String {
    format!(
        "{:>5} | {:>5} | {:>5} | {:>6} | {:.3}",
        pct(s.recall(0)),
        pct(s.recall(1)),
        pct(s.recall(2)),
        pct(s.recall_all(2)),
        s.mrr()
    )
}

fn print_rows(rows: &[&Row]) {
    println!("| stage | keyword text | dense text | rewrite | fusion (prefetch kw/sem, k, weights kw:sem) | strategy | R@1 | R@5 | R@10 | all@10 | MRR |");
    println!("|---|---|---|---|---|---|---:|---:|---:|---:|---:|");
    for r in rows {
        let v = r.variant;
        let fusion = if r.strategy == Strategy::Hybrid {
            v.fusion_name()
        } else {
            "–".into()
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.stage,
            v.keyword_text.name(),
            v.dense_text.name(),
            v.rewrite.name(),
            fusion,
            r.strategy.as_str(),
            scores_cells(&r.outcome.overall)
        );
    }
    println!();
}

/// Picks one slice of an outcome's scores (all questions, one kind, one language).
type Slice = Box<dyn Fn(&Outcome) -> Option<&Scores>>;

fn print_breakdown(bench: &Bench, title: &str, variant: Variant) {
    println!("### {title}\n");
    println!(
        "keyword text `{}`, dense text `{}`, rewrite `{}`, fusion `{}`\n",
        variant.keyword_text.name(),
        variant.dense_text.name(),
        variant.rewrite.name(),
        variant.fusion_name()
    );
    println!("| slice | n | strategy | R@1 | R@5 | R@10 | all@10 | MRR |");
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    let mut slices: Vec<(String, Slice)> = vec![("all".into(), Box::new(|o: &Outcome| Some(&o.overall)))];
    for kind in QuestionKind::ALL {
        slices.push((kind.as_str().into(), Box::new(move |o: &Outcome| o.by_kind.get(&kind))));
    }
    for lang in [Lang::En, Lang::Zh] {
        slices.push((
            format!("asked in {}", lang.as_str()),
            Box::new(move |o: &Outcome| o.by_lang.get(&lang)),
        ));
    }
    for (name, get) in &slices {
        for strategy in ALL {
            if let Some(s) = get(bench.outcome(variant, strategy)) {
                println!(
                    "| {name} | {} | {} | {} |",
                    s.questions,
                    strategy.as_str(),
                    scores_cells(s)
                );
            }
        }
    }
    println!();
}

fn print_misses(bench: &Bench, variant: Variant, n: usize) {
    let texts: HashMap<Uuid, String> = bench
        .dataset
        .owners
        .iter()
        .flat_map(|o| {
            o.sessions.iter().flat_map(move |s| {
                s.turns
                    .iter()
                    .map(move |t| (t.id, format!("[{}] {}", s.date, t.content)))
            })
        })
        .collect();
    let outcome = bench.outcome(variant, Strategy::Hybrid);
    println!("### Misses of the product variant (hybrid, not in top {LIMIT})\n");
    let mut shown = 0;
    for (q, ranked) in bench.dataset.questions.iter().zip(outcome.ranked.iter()) {
        if shown == n {
            break;
        }
        if ranked.iter().any(|id| q.evidence.contains(id)) {
            continue;
        }
        shown += 1;
        println!("- ({}, owner {}) {}", q.kind.as_str(), q.owner, q.text);
        for id in &q.evidence {
            println!("    evidence: {}", texts[id].replace('\n', " / "));
        }
        if let Some(top) = ranked.first() {
            println!("    top hit:  {}", texts[top].replace('\n', " / "));
        }
    }
    println!();
}

fn row_json(r: &Row) -> serde_json::Value {
    let scores = |s: &Scores| {
        serde_json::json!({
            "n": s.questions,
            "r1": s.recall(0), "r5": s.recall(1), "r10": s.recall(2),
            "all1": s.recall_all(0), "all5": s.recall_all(1), "all10": s.recall_all(2),
            "mrr": s.mrr(),
        })
    };
    let v = r.variant;
    serde_json::json!({
        "stage": r.stage,
        "keyword_text": v.keyword_text.name(),
        "dense_text": v.dense_text.name(),
        "rewrite": v.rewrite.name(),
        "keyword_prefetch": v.fusion.keyword_prefetch,
        "semantic_prefetch": v.fusion.semantic_prefetch,
        "rrf_k": v.fusion.rrf_k,
        "weights": v.fusion.weights.map(|(k, s)| [k, s]),
        "strategy": r.strategy.as_str(),
        "overall": scores(&r.outcome.overall),
        "by_kind": r.outcome.by_kind.iter().map(|(k, s)| (k.as_str().to_string(), scores(s))).collect::<serde_json::Map<_, _>>(),
        "by_lang": r.outcome.by_lang.iter().map(|(l, s)| (l.as_str().to_string(), scores(s))).collect::<serde_json::Map<_, _>>(),
    })
}

fn dataset_json(d: &Dataset) -> serde_json::Value {
    serde_json::json!({
        "seed": d.seed,
        "today": d.today.to_string(),
        "owners": d.owners.iter().map(|o| serde_json::json!({
            "tenant": o.tenant.user, "name": o.name, "lang": o.lang.as_str(),
            "sessions": o.sessions.iter().map(|s| serde_json::json!({
                "id": s.id, "date": s.date.to_string(),
                "turns": s.turns.iter().map(|t| serde_json::json!({
                    "id": t.id, "speaker": t.speaker, "content": t.content,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "questions": d.questions.iter().map(|q| serde_json::json!({
            "owner": q.owner, "kind": q.kind.as_str(), "lang": q.lang.as_str(), "text": q.text,
            "evidence": q.evidence, "answer": q.answer,
        })).collect::<Vec<_>>(),
    })
}

/// The variants in order, without repeats.
fn unique<const N: usize>(variants: [Variant; N]) -> Vec<Variant> {
    let mut out: Vec<Variant> = Vec::with_capacity(N);
    for v in variants {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

fn fusion(prefetch: (usize, usize), rrf_k: usize, weights: Option<(f32, f32)>) -> Fusion {
    Fusion {
        keyword_prefetch: prefetch.0,
        semantic_prefetch: prefetch.1,
        rrf_k,
        weights,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let started = Instant::now();
    let dataset = Dataset::generate_with(
        args.seed,
        &GenConfig {
            owners: args.owners,
            ..GenConfig::default()
        },
    );
    if let Some(path) = &args.dump_dataset {
        std::fs::write(path, serde_json::to_vec_pretty(&dataset_json(&dataset))?)?;
    }

    let embedder: Arc<dyn Embedder> = match args.embedder.as_str() {
        "local" => {
            let dir = model_dir(&args);
            if !LocalEmbedder::is_model_dir(&dir) {
                bail!(
                    "no model in {} (run `bash api/fetch-model.sh`, or pass --model-dir, or --embedder hash to try the harness)",
                    dir.display()
                );
            }
            Arc::new(tokio::task::spawn_blocking(move || LocalEmbedder::load(&dir)).await??)
        }
        "hash" => {
            eprintln!("WARNING: --embedder hash is a stand-in; its semantic numbers are not results");
            Arc::new(HashStandInEmbedder)
        }
        other => bail!("unknown embedder {other} (local or hash)"),
    };

    let mut summary = String::new();
    writeln!(
        summary,
        "dataset: seed {}, {} owners ({} zh), {} sessions, {} turns, {} questions; embedder {} ({} dims)",
        dataset.seed,
        dataset.owners.len(),
        dataset.owners.iter().filter(|o| o.lang == Lang::Zh).count(),
        dataset.owners.iter().map(|o| o.sessions.len()).sum::<usize>(),
        dataset.turn_count(),
        dataset.questions.len(),
        embedder.model(),
        embedder.dimension(),
    )?;
    let mut counts = String::new();
    for kind in QuestionKind::ALL {
        let n = dataset.questions.iter().filter(|q| q.kind == kind).count();
        write!(counts, "{} {n}, ", kind.as_str())?;
    }
    writeln!(summary, "questions by kind: {}", counts.trim_end_matches(", "))?;
    eprint!("{summary}");

    let mut vectors = Vectors {
        embedder,
        cache: HashMap::new(),
        embedded: 0,
        seconds: 0.0,
    };
    if let Some(path) = &args.embed_cache {
        vectors.load(path)?;
    }
    let mut bench = Bench {
        dataset,
        vectors,
        indexes: HashMap::new(),
        outcomes: HashMap::new(),
        rows: Vec::new(),
    };

    let default_k10 = Variant {
        fusion: fusion((50, 50), 10, None),
        ..Variant::DEFAULT
    };
    let product_k10 = Variant {
        fusion: fusion((50, 50), 10, None),
        ..PRODUCT
    };
    // The product's parts one at a time, to see what each is worth.
    let mut summary_rows = vec![
        ("defaults", Variant::DEFAULT),
        ("defaults, k=10", default_k10),
        ("recommended", RECOMMENDED),
        ("product", PRODUCT),
        ("product, k=10", product_k10),
        (
            "product text, no rewrite",
            Variant {
                rewrite: Rewrite::NONE,
                ..PRODUCT
            },
        ),
        (
            "product rewrite, raw text",
            Variant {
                keyword_text: TextShape::RAW,
                dense_text: TextShape::RAW,
                ..PRODUCT
            },
        ),
        (
            "product, raw dense text",
            Variant {
                dense_text: TextShape::RAW,
                ..PRODUCT
            },
        ),
    ];
    let mut best_found_synonyms = None;
    if !args.summary_only {
        // Stage 1: what each channel indexes.
        eprintln!("stage 1: indexed text shapes");
        // (keyword text, dense text). Date tags only on the keyword side, where they work around
        // the tokenizer dropping digits (`date+speaker | raw` shows the problem); to the model
        // they would be noise, so the dense side tries the long date form instead.
        let mut shapes = vec![(TextShape::RAW, TextShape::RAW), (TextShape::TAGGED, TextShape::RAW)];
        if !args.quick {
            shapes.extend([
                (TextShape::DATED, TextShape::RAW),
                (TextShape::DATED_LONG, TextShape::RAW),
                (TextShape::RAW, TextShape::DATED_LONG),
                (TextShape::DATED_LONG, TextShape::DATED_LONG),
                (TextShape::TAGGED, TextShape::DATED_LONG),
                (TextShape::RAW, TextShape::PREVIOUS),
                (TextShape::RAW, TextShape::PREVIOUS_FOR_USER),
                (TextShape::RAW, TextShape::PREVIOUS_FOR_SHORT),
                (TextShape::TAGGED, TextShape::PREVIOUS_FOR_SHORT),
            ]);
        }
        for (keyword_text, dense_text) in shapes {
            let variant = Variant {
                keyword_text,
                dense_text,
                ..Variant::DEFAULT
            };
            bench.run("shape", variant, &ALL).await?;
        }
        // Each channel's best text, judged on that channel alone.
        let best_keyword_text = bench.best_of(Strategy::Keyword, |r| r.stage == "shape").keyword_text;
        let best_dense_text = bench.best_of(Strategy::Semantic, |r| r.stage == "shape").dense_text;
        // Stage 1 embeds nearly every text; keep them even if a later stage fails.
        if let Some(path) = &args.embed_cache {
            bench.vectors.save(path)?;
        }

        // Stage 2: query rewriting, on raw and tagged keyword text (date tags only pay off with
        // the `dates` rewrite, so they are tried whatever stage 1 says) and the best texts.
        eprintln!("stage 2: query rewriting");
        let strip = Rewrite {
            strip: true,
            ..Rewrite::NONE
        };
        let dates = Rewrite { dates: true, ..strip };
        let synonyms = Rewrite {
            synonyms: true,
            ..dates
        };
        let dense_dates = Rewrite {
            dense_dates: true,
            ..dates
        };
        let everything = Rewrite {
            dense_dates: true,
            ..synonyms
        };
        let mut bases = Vec::new();
        for keyword_text in [TextShape::RAW, TextShape::TAGGED, best_keyword_text] {
            for dense_text in [TextShape::RAW, best_dense_text] {
                let base = Variant {
                    keyword_text,
                    dense_text,
                    ..Variant::DEFAULT
                };
                if !bases.contains(&base) {
                    bases.push(base);
                }
            }
        }
        for base in bases {
            bench.run("rewrite", base, &ALL).await?;
            for rewrite in [strip, dates, synonyms, dense_dates, everything] {
                let variant = Variant { rewrite, ..base };
                bench.run("rewrite", variant, &ALL).await?;
            }
        }
        let best_rewrite = bench.best(|r| r.stage == "rewrite");
        // The synonym table is tuned to the generator (see QUALITY.md), so the recommendation is
        // also given without it.
        let best_rewrite_generic = bench.best(|r| r.stage == "rewrite" && !r.variant.rewrite.synonyms);

        // Stage 3: fusion settings, on the defaults and on the best text and rewrite.
        eprintln!("stage 3: fusion");
        let prefetches: &[(usize, usize)] = if args.quick {
            &[(20, 20), (50, 50), (100, 100)]
        } else {
            &[(20, 20), (50, 50), (100, 100), (20, 100), (100, 20)]
        };
        let bases = unique([Variant::DEFAULT, best_rewrite_generic, best_rewrite]);
        for base in &bases {
            for &prefetch in prefetches {
                for rrf_k in [10, 60] {
                    for weights in [None, Some((1.0, 2.0)), Some((2.0, 1.0))] {
                        let variant = Variant {
                            fusion: fusion(prefetch, rrf_k, weights),
                            ..*base
                        };
                        bench.run("fusion", variant, &[Strategy::Hybrid]).await?;
                    }
                }
            }
        }
        let best_fusion_of = |bench: &Bench, base: Variant| -> Variant {
            bench.best(|r| {
                r.stage == "fusion"
                    && r.variant.keyword_text == base.keyword_text
                    && r.variant.dense_text == base.dense_text
                    && r.variant.rewrite == base.rewrite
            })
        };
        summary_rows.extend([
            ("defaults, best fusion", best_fusion_of(&bench, Variant::DEFAULT)),
            ("best found", best_fusion_of(&bench, best_rewrite_generic)),
            ("best found + synonyms", best_fusion_of(&bench, best_rewrite)),
        ]);
        best_found_synonyms = Some(best_fusion_of(&bench, best_rewrite));
    }
    for &(label, v) in &summary_rows {
        bench.run(label, v, &ALL).await?;
    }

    if let Some(path) = &args.embed_cache {
        bench.vectors.save(path)?;
    }

    // Report.
    println!("## recall_quality\n");
    println!("```\n{summary}```\n");
    for (stage, title) in [
        (
            "shape",
            "Stage 1: indexed text (no rewriting, default fusion 50/50, k=60)",
        ),
        ("rewrite", "Stage 2: query rewriting"),
        ("fusion", "Stage 3: fusion settings (hybrid)"),
    ] {
        println!("### {title}\n");
        let rows: Vec<&Row> = bench.rows.iter().filter(|r| r.stage == stage).collect();
        print_rows(&rows);
    }
    println!("### Summary\n");
    let rows: Vec<&Row> = bench
        .rows
        .iter()
        .filter(|r| summary_rows.iter().any(|(label, _)| r.stage == *label))
        .collect();
    print_rows(&rows);
    print_breakdown(&bench, "Per kind and language: defaults", Variant::DEFAULT);
    print_breakdown(&bench, "Per kind and language: recommended", RECOMMENDED);
    print_breakdown(&bench, "Per kind and language: product", PRODUCT);
    print_breakdown(&bench, "Per kind and language: product, k=10", product_k10);
    if let Some(variant) = best_found_synonyms {
        print_breakdown(&bench, "Per kind and language: best found + synonyms", variant);
    }
    let verdict = |v: Variant| {
        let r10 = |s| bench.outcome(v, s).overall.recall(2);
        let (k, s, h) = (r10(Strategy::Keyword), r10(Strategy::Semantic), r10(Strategy::Hybrid));
        format!(
            "R@10 keyword {} / semantic {} / hybrid {}: hybrid {} both",
            pct(k),
            pct(s),
            pct(h),
            if h > k && h > s { "beats" } else { "does NOT beat" }
        )
    };
    println!("- defaults: {}", verdict(Variant::DEFAULT));
    println!("- defaults, k=10: {}", verdict(default_k10));
    println!("- recommended: {}", verdict(RECOMMENDED));
    println!("- product: {}", verdict(PRODUCT));
    println!("- product, k=10: {}", verdict(product_k10));
    println!(
        "\nembedded {} texts in {:.0}s; total {:.0}s",
        bench.vectors.embedded,
        bench.vectors.seconds,
        started.elapsed().as_secs_f64()
    );
    if args.misses > 0 {
        print_misses(&bench, PRODUCT, args.misses);
    }

    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "seed": bench.dataset.seed,
            "turns": bench.dataset.turn_count(),
            "questions": bench.dataset.questions.len(),
            "embedder": bench.vectors.embedder.model(),
            "rows": bench.rows.iter().map(row_json).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_vec_pretty(&json)?)?;
    }
    Ok(())
}
