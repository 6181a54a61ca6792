//! [`PromptStore`] on SQLite: the table of `prompts.sql`.

use async_trait::async_trait;
use chrono::Utc;
use rusqlite::{params, Connection, OptionalExtension as _, TransactionBehavior};
use tracing::instrument;
use uuid::Uuid;

use super::{time_of, uuid_of, Failure, Outcome, SqliteStore};
use crate::domain::Tenant;
use crate::llm::{OverrideLevel, TemplateId};
use crate::store::prompts::{plan_put, NewPrompt, PromptScope, PromptStore, PutOutcome, PutPlan, StoredPrompt};
use crate::store::{truncate_to_micros, StoreResult};

mod sql {
    pub const BY_VERSION: &str = "SELECT id, template_id, level, team_id, agent_id, version, content, \
         content_hash, active, created_at, updated_at FROM prompt_templates \
         WHERE team_id = ?1 AND agent_id = ?2 AND template_id = ?3 AND version = ?4";
    pub const DEACTIVATE: &str = "UPDATE prompt_templates SET active = 0, updated_at = ?4 \
         WHERE team_id = ?1 AND agent_id = ?2 AND template_id = ?3 AND active = 1";
    pub const ACTIVATE: &str = "UPDATE prompt_templates SET active = 1, updated_at = ?2 WHERE id = ?1";
    pub const INSERT: &str = "INSERT INTO prompt_templates (id, template_id, level, team_id, agent_id, version, \
         content, content_hash, active, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, ?9, ?9)";
    /// `?3` is a template id, or NULL for every template.
    pub const ACTIVE: &str = "SELECT id, template_id, level, team_id, agent_id, version, content, \
         content_hash, active, created_at, updated_at FROM prompt_templates \
         WHERE team_id = ?1 AND agent_id IN ('', ?2) AND (?3 IS NULL OR template_id = ?3) AND active = 1";
    pub const HISTORY: &str = "SELECT id, template_id, level, team_id, agent_id, version, content, \
         content_hash, active, created_at, updated_at FROM prompt_templates \
         WHERE team_id = ?1 AND agent_id IN ('', ?2) AND template_id = ?3 \
         ORDER BY created_at DESC, id";
}

#[async_trait]
impl PromptStore for SqliteStore {
    #[instrument(skip_all, fields(template = prompt.template.as_str(), level = prompt.scope.level.as_str()))]
    async fn put_prompt(&self, prompt: &NewPrompt) -> StoreResult<PutOutcome> {
        let prompt = prompt.clone();
        self.run(move |conn| put(conn, &prompt)).await
    }

    #[instrument(skip_all, fields(template = template.as_str(), level = scope.level.as_str()))]
    async fn deactivate_prompt(&self, template: TemplateId, scope: &PromptScope) -> StoreResult<bool> {
        let scope = scope.clone();
        self.run(move |conn| {
            let now = truncate_to_micros(Utc::now()).timestamp_micros();
            let changed = conn.prepare_cached(sql::DEACTIVATE)?.execute(params![
                scope.team,
                scope.agent_key(),
                template.as_str(),
                now
            ])?;
            Ok(changed > 0)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn active_prompts(&self, tenant: &Tenant, template: Option<TemplateId>) -> StoreResult<Vec<StoredPrompt>> {
        let (team, agent) = (tenant.team.clone(), tenant.agent.clone());
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::ACTIVE)?;
            let rows = stmt.query(params![team, agent, template.map(TemplateId::as_str)])?;
            prompts_of(rows)
        })
        .await
    }

    #[instrument(skip_all, fields(template = template.as_str()))]
    async fn prompt_history(&self, tenant: &Tenant, template: TemplateId) -> StoreResult<Vec<StoredPrompt>> {
        let (team, agent) = (tenant.team.clone(), tenant.agent.clone());
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::HISTORY)?;
            let rows = stmt.query(params![team, agent, template.as_str()])?;
            prompts_of(rows)
        })
        .await
    }
}

/// The whole put, in one immediate transaction: the write lock serializes puts.
fn put(conn: &mut Connection, prompt: &NewPrompt) -> Outcome<PutOutcome> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let scope = &prompt.scope;
    let key = params![scope.team, scope.agent_key(), prompt.template.as_str(), prompt.version];
    let same_version = tx
        .prepare_cached(sql::BY_VERSION)?
        .query_row(key, |row| Ok(prompt_of(row)))
        .optional()?
        .transpose()?
        .flatten();
    let now = truncate_to_micros(Utc::now());
    let deactivate = |tx: &Connection| -> Outcome<()> {
        tx.prepare_cached(sql::DEACTIVATE)?.execute(params![
            scope.team,
            scope.agent_key(),
            prompt.template.as_str(),
            now.timestamp_micros()
        ])?;
        Ok(())
    };
    let outcome = match (plan_put(same_version.as_ref(), prompt), same_version) {
        (PutPlan::Insert, _) => {
            deactivate(&tx)?;
            let id = Uuid::new_v4();
            tx.prepare_cached(sql::INSERT)?.execute(params![
                id.to_string(),
                prompt.template.as_str(),
                scope.level.as_str(),
                scope.team,
                scope.agent_key(),
                prompt.version,
                prompt.content,
                prompt.content_hash,
                now.timestamp_micros()
            ])?;
            PutOutcome::Created(StoredPrompt {
                id,
                template: prompt.template,
                scope: scope.clone(),
                version: prompt.version.clone(),
                content: prompt.content.clone(),
                content_hash: prompt.content_hash.clone(),
                active: true,
                created_at: now,
                updated_at: now,
            })
        }
        (PutPlan::Reactivate, Some(stored)) => {
            deactivate(&tx)?;
            tx.prepare_cached(sql::ACTIVATE)?
                .execute(params![stored.id.to_string(), now.timestamp_micros()])?;
            PutOutcome::Reactivated(StoredPrompt {
                active: true,
                updated_at: now,
                ..stored
            })
        }
        (PutPlan::Unchanged, Some(stored)) => PutOutcome::Unchanged(stored),
        (PutPlan::VersionTaken, Some(stored)) => PutOutcome::VersionTaken(stored),
        (PutPlan::Reactivate | PutPlan::Unchanged | PutPlan::VersionTaken, None) => {
            return Err(Failure::Corrupt("put plan needs the stored version".into()));
        }
    };
    tx.commit()?;
    Ok(outcome)
}

fn prompts_of(mut rows: rusqlite::Rows<'_>) -> Outcome<Vec<StoredPrompt>> {
    let mut prompts = Vec::new();
    while let Some(row) = rows.next()? {
        prompts.extend(prompt_of(row)?);
    }
    Ok(prompts)
}

/// The row as a [`StoredPrompt`]; `None` for a template this build does not know (a newer
/// replica's), which no call of this build can use.
fn prompt_of(row: &rusqlite::Row<'_>) -> Outcome<Option<StoredPrompt>> {
    let template: String = row.get("template_id")?;
    let Some(template) = TemplateId::parse(&template) else {
        return Ok(None);
    };
    let level: String = row.get("level")?;
    let agent: String = row.get("agent_id")?;
    let level =
        OverrideLevel::parse(&level).ok_or_else(|| Failure::Corrupt(format!("unknown prompt level {level}").into()))?;
    Ok(Some(StoredPrompt {
        id: uuid_of(row, "id")?,
        template,
        scope: PromptScope {
            level,
            team: row.get("team_id")?,
            agent: (level == OverrideLevel::Agent).then_some(agent),
        },
        version: row.get("version")?,
        content: row.get("content")?,
        content_hash: row.get("content_hash")?,
        active: row.get::<_, i64>("active")? == 1,
        created_at: time_of(row.get("created_at")?)?,
        updated_at: time_of(row.get("updated_at")?)?,
    }))
}
