//! A bounded, in-process cache of query vectors, keyed by model and text.
//!
//! Embedding the query is most of a recall's time (about 15 ms of all-MiniLM-L6-v2 on one
//! core, against about 1 ms for the index; issue 37), and agents ask the same thing again: a
//! retried LLM call recalls with the same last message, and a tool loop re-reads its context.
//! Only queries go through it: turns are embedded once, by the index worker, and would only
//! push the queries out.
//!
//! Bounded in memory: at most `capacity` vectors, least recently used out first, and a text
//! longer than [`MAX_CACHED_CHARS`] is never kept, so the cache holds at most `capacity` ×
//! (dimension × 4 + [`MAX_CACHED_CHARS`] × 4) bytes (about 5.6 MB for 1,024 vectors of 384
//! dimensions). It lives as long as the process: a restart with another model starts empty,
//! and the model is part of the key anyway.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;

use crate::metrics;

/// Longest query text kept, in code points: a question or a message, not a pasted document,
/// which is rarely asked twice and would take the room of many questions.
pub const MAX_CACHED_CHARS: usize = 1_000;

/// Query vectors by (model, text).
type Vectors = LruCache<(String, String), Arc<[f32]>>;

/// Query vectors by (model, text), least recently used out first.
pub struct QueryVectorCache {
    entries: Mutex<Vectors>,
}

impl QueryVectorCache {
    /// A cache of at most `capacity` vectors; `None` for 0 (the cache is off).
    pub fn new(capacity: usize) -> Option<Self> {
        let capacity = NonZeroUsize::new(capacity)?;
        Some(Self {
            entries: Mutex::new(LruCache::new(capacity)),
        })
    }

    /// The vector of `text` under `model`, if it is cached; counts the hit or miss.
    pub fn get(&self, model: &str, text: &str) -> Option<Arc<[f32]>> {
        let found = self.lock().get(&(model.to_owned(), text.to_owned())).cloned();
        let outcome = if found.is_some() { "hit" } else { "miss" };
        ::metrics::counter!(metrics::QUERY_VECTOR_CACHE, "outcome" => outcome).increment(1);
        found
    }

    /// Keeps the vector of `text` under `model`, unless the text is too long to be worth it.
    pub fn insert(&self, model: &str, text: &str, vector: &[f32]) {
        if text.chars().count() > MAX_CACHED_CHARS {
            return;
        }
        self.lock().put((model.to_owned(), text.to_owned()), Arc::from(vector));
    }

    /// How many vectors are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The map, even after a panic elsewhere while it was held: it holds no invariant that a
    /// half-done `put` could break.
    fn lock(&self) -> std::sync::MutexGuard<'_, Vectors> {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_by_model_and_text_and_drops_the_least_recently_used() {
        assert!(QueryVectorCache::new(0).is_none(), "0 turns the cache off");
        let cache = QueryVectorCache::new(2).unwrap();
        assert!(cache.get("m", "a").is_none());
        cache.insert("m", "a", &[1.0, 0.0]);
        cache.insert("m", "b", &[0.0, 1.0]);
        assert_eq!(cache.get("m", "a").as_deref(), Some(&[1.0, 0.0][..]));
        assert!(
            cache.get("other-model", "a").is_none(),
            "another model's vector is another"
        );
        // "a" was used last, so "b" goes when "c" comes.
        cache.insert("m", "c", &[0.5, 0.5]);
        assert_eq!(cache.len(), 2);
        assert!(cache.get("m", "b").is_none());
        assert!(cache.get("m", "a").is_some() && cache.get("m", "c").is_some());
    }

    #[test]
    fn a_long_text_is_not_kept() {
        let cache = QueryVectorCache::new(4).unwrap();
        let long = "x".repeat(MAX_CACHED_CHARS + 1);
        cache.insert("m", &long, &[1.0]);
        assert!(cache.is_empty());
        let limit = "字".repeat(MAX_CACHED_CHARS);
        cache.insert("m", &limit, &[1.0]);
        assert_eq!(cache.len(), 1, "the bound counts characters, not bytes");
    }
}
