//! The prompt store port: team and agent overrides of the prompt templates (`llm::template`),
//! kept in the same database as the turns. Implemented by both transcript store backends.
//!
//! # Versions and history
//! An override lives at a scope: a team (every agent of it), or one agent of a team. At each
//! scope and template there is one row per version the caller ever put, and at most one of them
//! is active; the active one is what [`StoredOverrides`] hands to the resolver. Rows are never
//! deleted: a new version deactivates the previous one, a delete only deactivates, and putting
//! an old version again (with the same text) reactivates its row. A version string therefore
//! names one text for good at its scope; putting it with another text is refused
//! ([`PutOutcome::VersionTaken`]), so a provenance record's `(id, version, source)` always
//! points at the text that was used.
//!
//! # Content and hash
//! What is stored is the text the model receives: the caller's content with any front matter
//! block removed, trimmed ([`NewPrompt::new`]). `content_hash` is its SHA-256 in hex, equal to
//! the `hash` that provenance records for a call that used it.
//!
//! # Concurrency
//! Puts and deletes at one scope and template are serialized (Postgres: an advisory transaction
//! lock; SQLite: an immediate transaction), so at most one row is ever active; a unique index
//! enforces it as well.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::StoreResult;
use crate::domain::{Tenant, ValidationError};
use crate::llm::{
    resolve, InstanceTemplates, OverrideLevel, OverridesError, TemplateId, TemplateOverride, TemplateOverrides,
};

/// Longest override text, in bytes: ten times the builtin templates, far below the API body
/// limit, and small enough to send with every call of a small-context model.
pub const MAX_PROMPT_BYTES: usize = 32 * 1024;
/// Longest version string.
pub const MAX_VERSION_CHARS: usize = 64;

/// Where an override applies: the whole team, or one agent of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PromptScope {
    pub level: OverrideLevel,
    pub team: String,
    /// The agent, for [`OverrideLevel::Agent`]; `None` for a team override.
    pub agent: Option<String>,
}

impl PromptScope {
    /// The scope of `tenant` at `level`: its team, or its team and agent. The user plays no
    /// part: templates are shared by every user of an agent.
    pub fn of(tenant: &Tenant, level: OverrideLevel) -> Self {
        Self {
            level,
            team: tenant.team.clone(),
            agent: match level {
                OverrideLevel::Team => None,
                OverrideLevel::Agent => Some(tenant.agent.clone()),
            },
        }
    }

    /// The agent column: empty for a team override, so one unique index covers both levels.
    pub fn agent_key(&self) -> &str {
        self.agent.as_deref().unwrap_or("")
    }
}

/// A validated override, ready to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPrompt {
    pub template: TemplateId,
    pub scope: PromptScope,
    pub version: String,
    /// The text the model receives (no front matter, trimmed).
    pub content: String,
    /// SHA-256 (hex) of `content`.
    pub content_hash: String,
}

impl NewPrompt {
    /// Checks an override as a caller sent it: a version of 1 to [`MAX_VERSION_CHARS`]
    /// letters, digits and `.-_+`, and a content of at most [`MAX_PROMPT_BYTES`] that is not
    /// empty once a front matter block (whose `version`, if any, is ignored) is removed.
    pub fn new(
        template: TemplateId,
        scope: PromptScope,
        version: &str,
        content: &str,
    ) -> Result<Self, ValidationError> {
        let version = version.trim();
        if version.is_empty() || version.chars().count() > MAX_VERSION_CHARS {
            return Err(ValidationError::invalid(
                "version",
                format!("must be 1 to {MAX_VERSION_CHARS} characters"),
            ));
        }
        if !version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
        {
            return Err(ValidationError::invalid(
                "version",
                "may hold only ASCII letters, digits and . - _ +",
            ));
        }
        if content.len() > MAX_PROMPT_BYTES {
            return Err(ValidationError::invalid(
                "content",
                format!("longer than {MAX_PROMPT_BYTES} bytes"),
            ));
        }
        if content.contains('\0') {
            return Err(ValidationError::invalid("content", "contains a NUL character"));
        }
        let candidate = TemplateOverride {
            id: template.as_str().to_owned(),
            level: scope.level,
            team: scope.team.clone(),
            agent: scope.agent.clone(),
            version: version.to_owned(),
            content: content.to_owned(),
        };
        // The resolver is the one place that knows how an override's text is read; asking it
        // keeps the stored text and hash identical to what calls will use and record.
        let owner = Tenant {
            team: scope.team.clone(),
            agent: scope.agent.clone().unwrap_or_default(),
            user: String::new(),
        };
        let effective = resolve(template, &owner, &InstanceTemplates::default(), &[candidate]);
        if effective.template.source != scope.level.as_str() {
            return Err(ValidationError::invalid(
                "content",
                "is empty (a front matter block alone is no template)",
            ));
        }
        Ok(Self {
            template,
            scope,
            version: version.to_owned(),
            content: effective.text,
            content_hash: effective.template.hash,
        })
    }
}

/// One stored version of an override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPrompt {
    /// The row's own id.
    pub id: Uuid,
    pub template: TemplateId,
    pub scope: PromptScope,
    pub version: String,
    pub content: String,
    pub content_hash: String,
    /// Whether this is the version in use at its scope.
    pub active: bool,
    pub created_at: DateTime<Utc>,
    /// The last time it was activated or deactivated.
    pub updated_at: DateTime<Utc>,
}

impl StoredPrompt {
    /// The override as the resolver takes it.
    pub fn to_override(&self) -> TemplateOverride {
        TemplateOverride {
            id: self.template.as_str().to_owned(),
            level: self.scope.level,
            team: self.scope.team.clone(),
            agent: self.scope.agent.clone(),
            version: self.version.clone(),
            content: self.content.clone(),
        }
    }
}

/// What [`PromptStore::put_prompt`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// A new version was stored and is active; the previous one, if any, is kept inactive.
    Created(StoredPrompt),
    /// This version with this text is already the active one; nothing changed.
    Unchanged(StoredPrompt),
    /// This version with this text was stored before and is active again.
    Reactivated(StoredPrompt),
    /// This version was stored before with another text (returned); nothing changed.
    VersionTaken(StoredPrompt),
}

/// What a put does, given the row already stored with its version at its scope, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PutPlan {
    /// Deactivate the active row, insert the new one.
    Insert,
    Unchanged,
    /// Deactivate the active row, activate the stored one.
    Reactivate,
    VersionTaken,
}

pub(crate) fn plan_put(same_version: Option<&StoredPrompt>, prompt: &NewPrompt) -> PutPlan {
    match same_version {
        None => PutPlan::Insert,
        Some(stored) if stored.content_hash != prompt.content_hash => PutPlan::VersionTaken,
        Some(stored) if stored.active => PutPlan::Unchanged,
        Some(_) => PutPlan::Reactivate,
    }
}

#[async_trait]
pub trait PromptStore: Send + Sync + 'static {
    /// Stores `prompt` as the active override at its scope (see [`PutOutcome`] and the module
    /// docs). Committed before it returns.
    async fn put_prompt(&self, prompt: &NewPrompt) -> StoreResult<PutOutcome>;

    /// Deactivates the active override of `template` at `scope`, so that calls fall back to
    /// the next level; its row stays in the history. `false` when none was active (a repeated
    /// delete).
    async fn deactivate_prompt(&self, template: TemplateId, scope: &PromptScope) -> StoreResult<bool>;

    /// The active overrides that apply to `tenant`: its team's, and its agent's within its
    /// team, for `template` or (with `None`) every template. At most one per template and
    /// level; in no particular order.
    async fn active_prompts(&self, tenant: &Tenant, template: Option<TemplateId>) -> StoreResult<Vec<StoredPrompt>>;

    /// Every version of `template` ever stored for `tenant`'s team and agent, newest first.
    async fn prompt_history(&self, tenant: &Tenant, template: TemplateId) -> StoreResult<Vec<StoredPrompt>>;
}

/// The stored overrides, as the prompt resolver reads them on every call.
#[derive(Clone)]
pub struct StoredOverrides(pub Arc<dyn PromptStore>);

#[async_trait]
impl TemplateOverrides for StoredOverrides {
    async fn overrides(&self, tenant: &Tenant, id: TemplateId) -> Result<Vec<TemplateOverride>, OverridesError> {
        let active = self
            .0
            .active_prompts(tenant, Some(id))
            .await
            .map_err(|e| OverridesError(Box::new(e)))?;
        Ok(active.iter().map(StoredPrompt::to_override).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team() -> PromptScope {
        PromptScope {
            level: OverrideLevel::Team,
            team: "dba".into(),
            agent: None,
        }
    }

    #[test]
    fn content_is_stored_as_the_model_receives_it() {
        let prompt = NewPrompt::new(
            TemplateId::L1Extract,
            team(),
            " 2026.1 ",
            "---\nid: l1-extract\nversion: ignored\n---\n\nExtract JSON.\n",
        )
        .unwrap();
        assert_eq!(prompt.version, "2026.1");
        assert_eq!(prompt.content, "Extract JSON.");
        assert_eq!(prompt.content_hash.len(), 64);
        let tenant = Tenant {
            team: "dba".into(),
            agent: "any".into(),
            user: "u".into(),
        };
        let stored = StoredPrompt {
            id: Uuid::new_v4(),
            template: prompt.template,
            scope: prompt.scope.clone(),
            version: prompt.version.clone(),
            content: prompt.content.clone(),
            content_hash: prompt.content_hash.clone(),
            active: true,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        };
        let effective = resolve(
            TemplateId::L1Extract,
            &tenant,
            &InstanceTemplates::default(),
            &[stored.to_override()],
        );
        assert_eq!(effective.template.source, "team");
        assert_eq!(effective.template.hash, prompt.content_hash);
        assert_eq!(effective.template.version, "2026.1");
    }

    #[test]
    fn bad_versions_and_contents_are_refused() {
        let agent = PromptScope::of(
            &Tenant {
                team: "dba".into(),
                agent: "oncall".into(),
                user: "u".into(),
            },
            OverrideLevel::Agent,
        );
        assert_eq!(agent.agent_key(), "oncall");
        assert_eq!(team().agent_key(), "");
        let cases = [
            ("", "text", "version"),
            ("v 1", "text", "version"),
            (&"9".repeat(MAX_VERSION_CHARS + 1), "text", "version"),
            ("1", "   \n", "content"),
            ("1", "---\nversion: 2\n---\n", "content"),
            ("1", "a\0b", "content"),
            ("1", &"x".repeat(MAX_PROMPT_BYTES + 1), "content"),
        ];
        for (version, content, field) in cases {
            let error = NewPrompt::new(TemplateId::L1Dedup, agent.clone(), version, content).unwrap_err();
            assert!(
                matches!(&error, ValidationError::Invalid { field: f, .. } if *f == field),
                "{version:?}: {error}"
            );
        }
        assert!(NewPrompt::new(TemplateId::L1Dedup, agent, "v1.2-rc+3_x", "ok").is_ok());
    }
}
