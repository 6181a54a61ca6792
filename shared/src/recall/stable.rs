//! The stable part of recall: the owner's persona, the scene navigation list and the
//! memory-tool guide. It goes at the end of the agent's system prompt, so it must change only
//! when the persona or the scene list changes: the rendering is deterministic (scenes by
//! name, then id) and carries no time, score or query-dependent text.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::StablePart;
use crate::domain::Tenant;
use crate::files::{FileError, FileStore};
use crate::store::scene::SceneStore;
use crate::store::StoreError;

/// What the agent can call to look deeper than recall did (seed 001: 记忆工具指南).
pub const TOOLS_GUIDE: &str = "\
Memory tools (sediment HTTP API, same team/agent/user headers):
- POST /v1/conversations/search {\"query\", \"limit\", \"strategy\"}: search the raw conversation turns.
- GET /v1/memories?category=&scene=: list atomic memories; GET /v1/memories/{id} for one with its history and sources.
- GET /v1/scenes: the scene list; GET /v1/scenes/{id}: one scene document (the path in the scene list).
- GET /v1/persona: the whole persona.
Recalled items are cut to a budget; when an item ends with a cut marker, search for the rest.";

/// Persona documents kept in memory. Each build writes a new object key, so a cached entry
/// never goes stale; the bound only caps memory.
const PERSONA_CACHE_ENTRIES: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum StableError {
    #[error("store failed")]
    Store(#[from] StoreError),
    #[error("file store failed")]
    Files(#[from] FileError),
}

/// Reads the stable part for an owner.
#[derive(Clone)]
pub struct StableSource {
    scenes: Arc<dyn SceneStore>,
    files: Arc<dyn FileStore>,
    personas: Arc<Mutex<HashMap<String, Arc<str>>>>,
}

impl StableSource {
    pub fn new(scenes: Arc<dyn SceneStore>, files: Arc<dyn FileStore>) -> Self {
        Self {
            scenes,
            files,
            personas: Arc::default(),
        }
    }

    /// The owner's stable part. The scene list comes from the store and the persona from the
    /// file store: when only the persona cannot be read, the part keeps the scene list and the
    /// persona's error comes back beside it: a file store outage costs recall the persona
    /// alone.
    pub async fn stable(&self, tenant: &Tenant) -> Result<(StablePart, Option<StableError>), StableError> {
        let (persona, scenes) = tokio::join!(self.persona(tenant), self.scenes.scenes(tenant, false));
        let mut scenes = scenes?;
        scenes.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
        let scene_navigation = scenes
            .iter()
            .map(|s| {
                let overview = s.overview.trim();
                if overview.is_empty() {
                    format!("- {} (scenes/{}.md)", s.name, s.id)
                } else {
                    format!("- {}: {} (scenes/{}.md)", s.name, overview, s.id)
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let (persona, persona_error) = match persona {
            Ok(persona) => (persona.map(|p| p.to_string()).unwrap_or_default(), None),
            Err(e) => (String::new(), Some(e)),
        };
        let part = StablePart {
            persona,
            scene_navigation,
            tools_guide: TOOLS_GUIDE.to_owned(),
        };
        Ok((part, persona_error))
    }

    async fn persona(&self, tenant: &Tenant) -> Result<Option<Arc<str>>, StableError> {
        let Some(key) = self.scenes.persona(tenant).await?.and_then(|row| row.object_key) else {
            return Ok(None);
        };
        if let Some(hit) = self.cache().get(&key) {
            return Ok(Some(hit.clone()));
        }
        let Some(bytes) = self.files.get(&key).await? else {
            // The row names an object that is gone: the persona worker's self-heal rebuilds it.
            tracing::warn!(key, "persona object missing");
            return Ok(None);
        };
        let text: Arc<str> = String::from_utf8_lossy(&bytes).trim().into();
        let mut cache = self.cache();
        if cache.len() >= PERSONA_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, text.clone());
        Ok(Some(text))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<str>>> {
        self.personas.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
