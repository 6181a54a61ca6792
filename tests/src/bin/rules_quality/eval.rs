//! Scoring of the rules extractor on the labelled set `tests/data/rules_extractor/labelled.jsonl`.
//! Shared by the `rules_quality` bin (the report) and the `it::rules_extractor` test (the
//! regression floors), which includes this file by path.
//!
//! Each labelled line is one user turn: `{"split", "lang", "text", "memory", "category"}`. The
//! turns go through what the pipeline does before extraction (junk filter, redaction) and then
//! `RulesExtractor::cards` in batches of 10 turns, as the pipeline batches them. A turn is
//! predicted to be a memory when at least one card cites it; its predicted category is that of
//! its highest-priority card.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use chrono::{TimeZone as _, Utc};
use shared::domain::{Role, Tenant};
use shared::memory::rules::{classify_sentence, split_sentences, RulesExtractor};
use shared::memory::{junk, redact, Batch, BatchTurn, Category};
use uuid::Uuid;

/// Turns per extraction call, as in the pipeline.
pub const BATCH_TURNS: usize = 10;

#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// `dev` (written before the rules) or `holdout` (written after, never tuned on).
    pub split: String,
    pub lang: String,
    pub text: String,
    /// Whether a careful human would want it remembered.
    pub memory: bool,
    pub category: Option<Category>,
}

pub fn labelled_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/rules_extractor/labelled.jsonl")
}

pub fn load(path: &Path) -> anyhow::Result<Vec<Item>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| parse(line).with_context(|| format!("{}:{}", path.display(), n + 1)))
        .collect()
}

fn parse(line: &str) -> anyhow::Result<Item> {
    let v: serde_json::Value = serde_json::from_str(line)?;
    let field = |name: &str| v.get(name).with_context(|| format!("missing {name}"));
    let string = |name: &str| -> anyhow::Result<String> {
        Ok(field(name)?
            .as_str()
            .with_context(|| format!("{name} is not a string"))?
            .to_owned())
    };
    let memory = field("memory")?.as_bool().context("memory is not a bool")?;
    let category = field("category")?;
    let category = if category.is_null() {
        None
    } else {
        let name = category.as_str().context("category is not a string")?;
        Some(Category::parse(name).with_context(|| format!("unknown category {name}"))?)
    };
    anyhow::ensure!(memory == category.is_some(), "memory and category disagree");
    Ok(Item {
        split: string("split")?,
        lang: string("lang")?,
        text: string("text")?,
        memory,
        category,
    })
}

/// What the extractor made of one item.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub category: Option<Category>,
    /// The rule that fired, or why nothing did (`junk:…`, `none`), for the misses listing.
    pub why: String,
}

pub fn predict(items: &[Item]) -> Vec<Prediction> {
    let extractor = RulesExtractor::new();
    let created_at = Utc.with_ymd_and_hms(2026, 3, 2, 10, 0, 0).single().expect("valid time");
    let mut out = Vec::with_capacity(items.len());
    for (b, chunk) in items.chunks(BATCH_TURNS).enumerate() {
        let mut turns = Vec::new();
        let mut ids = Vec::new();
        let mut junk_of = Vec::new();
        for (i, item) in chunk.iter().enumerate() {
            let id = Uuid::from_u128((b * BATCH_TURNS + i) as u128 + 1);
            ids.push(id);
            let junk = junk::classify(&item.text);
            junk_of.push(junk);
            if junk.is_none() {
                turns.push(BatchTurn {
                    id,
                    seq: (b * BATCH_TURNS + i) as i64,
                    role: Role::User,
                    content: redact::redact(&item.text).text.into_owned(),
                    created_at,
                });
            }
        }
        let batch = Batch {
            tenant: Tenant {
                team: "quality".into(),
                agent: "rules".into(),
                user: "labelled".into(),
            },
            session_id: format!("batch-{b}"),
            context: Vec::new(),
            turns,
        };
        let cards = extractor.cards(&batch);
        for (i, id) in ids.iter().enumerate() {
            let best = cards
                .iter()
                .filter(|c| c.source_message_ids.contains(id))
                .max_by_key(|c| c.priority);
            let why = match (junk_of[i], best) {
                (Some(reason), _) => format!("junk:{}", reason.as_str()),
                (None, Some(card)) => classify_sentence(&card.content).map_or("?", |c| c.rule).to_owned(),
                (None, None) => rule_of(&chunk[i].text),
            };
            out.push(Prediction {
                category: best.map(|c| c.category),
                why,
            });
        }
    }
    out
}

fn rule_of(text: &str) -> String {
    if split_sentences(text).is_empty() {
        "no-sentence".into()
    } else {
        "none".into()
    }
}

/// Confusion counts of one slice of the set.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    /// Labelled memory, predicted memory.
    pub tp: usize,
    /// Labelled not a memory, predicted memory.
    pub fp: usize,
    /// Labelled memory, predicted none.
    pub fn_: usize,
    pub tn: usize,
    /// True positives whose predicted category is the labelled one.
    pub category_ok: usize,
}

impl Counts {
    pub fn add(&mut self, item: &Item, prediction: &Prediction) {
        match (item.memory, prediction.category) {
            (true, Some(category)) => {
                self.tp += 1;
                if item.category == Some(category) {
                    self.category_ok += 1;
                }
            }
            (true, None) => self.fn_ += 1,
            (false, Some(_)) => self.fp += 1,
            (false, None) => self.tn += 1,
        }
    }

    pub fn precision(&self) -> f64 {
        ratio(self.tp, self.tp + self.fp)
    }

    pub fn recall(&self) -> f64 {
        ratio(self.tp, self.tp + self.fn_)
    }

    pub fn f1(&self) -> f64 {
        let (p, r) = (self.precision(), self.recall());
        if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        }
    }

    /// Share of true positives put in the labelled category.
    pub fn category_accuracy(&self) -> f64 {
        ratio(self.category_ok, self.tp)
    }

    pub fn n(&self) -> usize {
        self.tp + self.fp + self.fn_ + self.tn
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

pub fn counts<'a>(pairs: impl IntoIterator<Item = (&'a Item, &'a Prediction)>) -> Counts {
    let mut c = Counts::default();
    for (item, prediction) in pairs {
        c.add(item, prediction);
    }
    c
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

/// The Markdown report: overall, per split, per language, per category.
pub fn report(items: &[Item], predictions: &[Prediction]) -> String {
    let pairs: Vec<(&Item, &Prediction)> = items.iter().zip(predictions).collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| slice | n | memories | precision | recall | F1 | category accuracy (TP) |\n|---|---|---|---|---|---|---|"
    );
    let mut row = |label: &str, filter: &dyn Fn(&Item) -> bool| {
        let c = counts(pairs.iter().copied().filter(|(i, _)| filter(i)));
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} | {} | {} ({}/{}) |",
            c.n(),
            c.tp + c.fn_,
            pct(c.precision()),
            pct(c.recall()),
            pct(c.f1()),
            pct(c.category_accuracy()),
            c.category_ok,
            c.tp
        );
    };
    row("all", &|_| true);
    for split in ["dev", "holdout"] {
        row(split, &|i| i.split == split);
    }
    for lang in ["en", "zh"] {
        row(&format!("lang {lang}"), &|i| i.lang == lang);
    }
    for split in ["dev", "holdout"] {
        for lang in ["en", "zh"] {
            row(&format!("{split} {lang}"), &|i| i.split == split && i.lang == lang);
        }
    }

    // Per category: recall of the labelled ones (any card / right category) and precision of
    // the predicted ones.
    let _ = writeln!(
        out,
        "\n| category | labelled | detected (any card) | recall, right category | predicted | precision of predicted |\n|---|---|---|---|---|---|"
    );
    for &category in Category::ALL {
        let labelled: Vec<_> = pairs.iter().filter(|(i, _)| i.category == Some(category)).collect();
        let detected = labelled.iter().filter(|(_, p)| p.category.is_some()).count();
        let right = labelled.iter().filter(|(_, p)| p.category == Some(category)).count();
        let predicted: Vec<_> = pairs.iter().filter(|(_, p)| p.category == Some(category)).collect();
        let correct = predicted.iter().filter(|(i, _)| i.category == Some(category)).count();
        let _ = writeln!(
            out,
            "| {} | {} | {} ({}) | {} ({}) | {} | {} ({}/{}) |",
            category.as_str(),
            labelled.len(),
            pct(ratio(detected, labelled.len())),
            detected,
            pct(ratio(right, labelled.len())),
            right,
            predicted.len(),
            pct(ratio(correct, predicted.len())),
            correct,
            predicted.len()
        );
    }

    // Where the wrong categories went.
    let mut confusion: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (item, prediction) in &pairs {
        if let (Some(want), Some(got)) = (item.category, prediction.category) {
            if want != got {
                *confusion.entry((want.as_str(), got.as_str())).or_default() += 1;
            }
        }
    }
    if !confusion.is_empty() {
        let _ = writeln!(out, "\nWrong categories (labelled → predicted): ");
        let list: Vec<String> = confusion.iter().map(|((w, g), n)| format!("{w} → {g} ×{n}")).collect();
        let _ = writeln!(out, "{}", list.join(", "));
    }
    out
}

/// Every false positive, false negative and wrong category, one per line.
pub fn misses(items: &[Item], predictions: &[Prediction]) -> String {
    let mut out = String::new();
    for (item, p) in items.iter().zip(predictions) {
        let kind = match (item.memory, p.category) {
            (true, None) => "FN",
            (false, Some(_)) => "FP",
            (true, Some(c)) if item.category != Some(c) => "CAT",
            (true, Some(_)) | (false, None) => continue,
        };
        let _ = writeln!(
            out,
            "{kind:3} {:7} {} want={} got={} rule={} | {}",
            item.split,
            item.lang,
            item.category.map_or("-", |c| c.as_str()),
            p.category.map_or("-", |c| c.as_str()),
            p.why,
            item.text
        );
    }
    out
}
