//! [`KeyStore`] on Postgres: the table of `migrations/V008__api_keys.sql`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use tracing::instrument;
use uuid::Uuid;

use super::{get, pg_error, PostgresStore};
use crate::auth::{ApiKey, NewApiKey, Permission};
use crate::store::keys::KeyStore;
use crate::store::{StoreError, StoreResult};

// Every statement is a constant with `$n` parameters; the column list is repeated, not
// formatted in, so no SQL text is ever built at run time.
const INSERT: &str = "INSERT INTO api_keys (id, key_hash, team_id, agents, permission, name, prefix, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
const LIST: &str = "SELECT id, team_id, agents, permission, name, prefix, created_at, last_used_at, revoked_at \
     FROM api_keys WHERE ($1::text IS NULL OR team_id = $1) ORDER BY created_at DESC, id DESC";
const REVOKE: &str = "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 \
     RETURNING id, team_id, agents, permission, name, prefix, created_at, last_used_at, revoked_at";
const USE: &str = "UPDATE api_keys SET last_used_at = GREATEST(last_used_at, $2) \
     WHERE key_hash = $1 AND revoked_at IS NULL \
     RETURNING id, team_id, agents, permission, name, prefix, created_at, last_used_at, revoked_at";

#[async_trait]
impl KeyStore for PostgresStore {
    #[instrument(skip_all)]
    async fn create_key(&self, new: &NewApiKey) -> StoreResult<()> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(INSERT).await.map_err(pg_error)?;
        let key = &new.key;
        client
            .execute(
                &stmt,
                &[
                    &key.id,
                    &new.hash,
                    &key.team,
                    &key.agents,
                    &key.permission.as_str(),
                    &key.name,
                    &key.prefix,
                    &key.created_at,
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    #[instrument(skip_all)]
    async fn list_keys(&self, team: Option<&str>) -> StoreResult<Vec<ApiKey>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(LIST).await.map_err(pg_error)?;
        let rows = client.query(&stmt, &[&team]).await.map_err(pg_error)?;
        rows.iter().map(api_key).collect()
    }

    #[instrument(skip_all)]
    async fn revoke_key(&self, id: Uuid, at: DateTime<Utc>) -> StoreResult<Option<ApiKey>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(REVOKE).await.map_err(pg_error)?;
        let row = client.query_opt(&stmt, &[&id, &at]).await.map_err(pg_error)?;
        row.as_ref().map(api_key).transpose()
    }

    #[instrument(skip_all)]
    async fn use_key(&self, hash: &str, now: DateTime<Utc>) -> StoreResult<Option<ApiKey>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(USE).await.map_err(pg_error)?;
        let row = client.query_opt(&stmt, &[&hash, &now]).await.map_err(pg_error)?;
        row.as_ref().map(api_key).transpose()
    }
}

fn api_key(row: &Row) -> StoreResult<ApiKey> {
    let permission: String = get(row, "permission")?;
    Ok(ApiKey {
        id: get(row, "id")?,
        team: get(row, "team_id")?,
        agents: get(row, "agents")?,
        permission: Permission::parse(&permission)
            .ok_or_else(|| StoreError::Backend(format!("unknown key permission {permission:?}").into()))?,
        name: get(row, "name")?,
        prefix: get(row, "prefix")?,
        created_at: get(row, "created_at")?,
        last_used_at: get(row, "last_used_at")?,
        revoked_at: get(row, "revoked_at")?,
    })
}
