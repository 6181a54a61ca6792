//! [`PromptStore`] on Postgres: the table of `migrations/V004__prompt_templates.sql`.

use async_trait::async_trait;
use chrono::Utc;
use tokio_postgres::Row;
use tracing::instrument;
use uuid::Uuid;

use super::{get, pg_error, PostgresStore};
use crate::domain::Tenant;
use crate::llm::{OverrideLevel, TemplateId};
use crate::store::prompts::{plan_put, NewPrompt, PromptScope, PromptStore, PutOutcome, PutPlan, StoredPrompt};
use crate::store::{truncate_to_micros, StoreError, StoreResult};

mod sql {
    /// Serializes puts at one scope and template; released when the transaction ends. The key
    /// is a 64-bit hash of the scope, so it cannot meet the migration lock's fixed key but by
    /// a 2^-64 chance.
    pub const LOCK_SCOPE: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";
    pub const BY_VERSION: &str = "SELECT id, template_id, level, team_id, agent_id, version, content, \
         content_hash, active, created_at, updated_at FROM prompt_templates \
         WHERE team_id = $1 AND agent_id = $2 AND template_id = $3 AND version = $4";
    pub const DEACTIVATE: &str = "UPDATE prompt_templates SET active = false, updated_at = $4 \
         WHERE team_id = $1 AND agent_id = $2 AND template_id = $3 AND active";
    pub const ACTIVATE: &str = "UPDATE prompt_templates SET active = true, updated_at = $2 WHERE id = $1";
    pub const INSERT: &str = "INSERT INTO prompt_templates (id, template_id, level, team_id, agent_id, version, \
         content, content_hash, active, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, true, $9, $9)";
    /// `$3` is a template id, or NULL for every template.
    pub const ACTIVE: &str = "SELECT id, template_id, level, team_id, agent_id, version, content, \
         content_hash, active, created_at, updated_at FROM prompt_templates \
         WHERE team_id = $1 AND agent_id IN ('', $2) AND ($3::text IS NULL OR template_id = $3) AND active";
    pub const HISTORY: &str = "SELECT id, template_id, level, team_id, agent_id, version, content, \
         content_hash, active, created_at, updated_at FROM prompt_templates \
         WHERE team_id = $1 AND agent_id IN ('', $2) AND template_id = $3 \
         ORDER BY created_at DESC, id";
}

#[async_trait]
impl PromptStore for PostgresStore {
    #[instrument(skip_all, fields(template = prompt.template.as_str(), level = prompt.scope.level.as_str()))]
    async fn put_prompt(&self, prompt: &NewPrompt) -> StoreResult<PutOutcome> {
        let scope = &prompt.scope;
        let template = prompt.template.as_str();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let lock = tx.prepare_cached(sql::LOCK_SCOPE).await.map_err(pg_error)?;
        let lock_key = format!("prompt\u{1f}{}\u{1f}{}\u{1f}{template}", scope.team, scope.agent_key());
        tx.execute(&lock, &[&lock_key]).await.map_err(pg_error)?;

        let select = tx.prepare_cached(sql::BY_VERSION).await.map_err(pg_error)?;
        let same_version = tx
            .query_opt(&select, &[&scope.team, &scope.agent_key(), &template, &prompt.version])
            .await
            .map_err(pg_error)?
            .map(|row| prompt_of(&row))
            .transpose()?
            .flatten();
        let now = truncate_to_micros(Utc::now());
        let deactivate = tx.prepare_cached(sql::DEACTIVATE).await.map_err(pg_error)?;
        let deactivate_params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&scope.team, &scope.agent_key(), &template, &now];
        let outcome = match (plan_put(same_version.as_ref(), prompt), same_version) {
            (PutPlan::Insert, _) => {
                tx.execute(&deactivate, &deactivate_params).await.map_err(pg_error)?;
                let id = Uuid::new_v4();
                let insert = tx.prepare_cached(sql::INSERT).await.map_err(pg_error)?;
                tx.execute(
                    &insert,
                    &[
                        &id,
                        &template,
                        &scope.level.as_str(),
                        &scope.team,
                        &scope.agent_key(),
                        &prompt.version,
                        &prompt.content,
                        &prompt.content_hash,
                        &now,
                    ],
                )
                .await
                .map_err(pg_error)?;
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
                tx.execute(&deactivate, &deactivate_params).await.map_err(pg_error)?;
                let activate = tx.prepare_cached(sql::ACTIVATE).await.map_err(pg_error)?;
                tx.execute(&activate, &[&stored.id, &now]).await.map_err(pg_error)?;
                PutOutcome::Reactivated(StoredPrompt {
                    active: true,
                    updated_at: now,
                    ..stored
                })
            }
            (PutPlan::Unchanged, Some(stored)) => PutOutcome::Unchanged(stored),
            (PutPlan::VersionTaken, Some(stored)) => PutOutcome::VersionTaken(stored),
            (PutPlan::Reactivate | PutPlan::Unchanged | PutPlan::VersionTaken, None) => {
                return Err(StoreError::Backend("put plan needs the stored version".into()));
            }
        };
        tx.commit().await.map_err(pg_error)?;
        Ok(outcome)
    }

    #[instrument(skip_all, fields(template = template.as_str(), level = scope.level.as_str()))]
    async fn deactivate_prompt(&self, template: TemplateId, scope: &PromptScope) -> StoreResult<bool> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::DEACTIVATE).await.map_err(pg_error)?;
        let now = truncate_to_micros(Utc::now());
        let changed = client
            .execute(&stmt, &[&scope.team, &scope.agent_key(), &template.as_str(), &now])
            .await
            .map_err(pg_error)?;
        Ok(changed > 0)
    }

    #[instrument(skip_all)]
    async fn active_prompts(&self, tenant: &Tenant, template: Option<TemplateId>) -> StoreResult<Vec<StoredPrompt>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::ACTIVE).await.map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[&tenant.team, &tenant.agent, &template.map(TemplateId::as_str)])
            .await
            .map_err(pg_error)?;
        prompts_of(&rows)
    }

    #[instrument(skip_all, fields(template = template.as_str()))]
    async fn prompt_history(&self, tenant: &Tenant, template: TemplateId) -> StoreResult<Vec<StoredPrompt>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::HISTORY).await.map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[&tenant.team, &tenant.agent, &template.as_str()])
            .await
            .map_err(pg_error)?;
        prompts_of(&rows)
    }
}

fn prompts_of(rows: &[Row]) -> StoreResult<Vec<StoredPrompt>> {
    let mut prompts = Vec::with_capacity(rows.len());
    for row in rows {
        prompts.extend(prompt_of(row)?);
    }
    Ok(prompts)
}

/// The row as a [`StoredPrompt`]; `None` for a template this build does not know (a newer
/// replica's), which no call of this build can use.
fn prompt_of(row: &Row) -> StoreResult<Option<StoredPrompt>> {
    let template: &str = get(row, "template_id")?;
    let Some(template) = TemplateId::parse(template) else {
        return Ok(None);
    };
    let level: &str = get(row, "level")?;
    let level = OverrideLevel::parse(level)
        .ok_or_else(|| StoreError::Backend(format!("unknown prompt level {level}").into()))?;
    let agent: String = get(row, "agent_id")?;
    Ok(Some(StoredPrompt {
        id: get(row, "id")?,
        template,
        scope: PromptScope {
            level,
            team: get(row, "team_id")?,
            agent: (level == OverrideLevel::Agent).then_some(agent),
        },
        version: get(row, "version")?,
        content: get(row, "content")?,
        content_hash: get(row, "content_hash")?,
        active: get(row, "active")?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
    }))
}
