//! [`KeyStore`] on SQLite: the table of `keys.sql`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension as _};
use tracing::instrument;
use uuid::Uuid;

use super::{json_array, time_of, uuid_of, Failure, Outcome, SqliteStore};
use crate::auth::{ApiKey, NewApiKey, Permission};
use crate::store::keys::KeyStore;
use crate::store::StoreResult;

const INSERT: &str = "INSERT INTO api_keys (id, key_hash, team_id, agents, permission, name, prefix, created_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
const LIST: &str = "SELECT id, team_id, agents, permission, name, prefix, created_at, last_used_at, revoked_at \
     FROM api_keys WHERE (?1 IS NULL OR team_id = ?1) ORDER BY created_at DESC, id DESC";
const REVOKE: &str = "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1 \
     RETURNING id, team_id, agents, permission, name, prefix, created_at, last_used_at, revoked_at";
const USE: &str = "UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, ?2), ?2) \
     WHERE key_hash = ?1 AND revoked_at IS NULL \
     RETURNING id, team_id, agents, permission, name, prefix, created_at, last_used_at, revoked_at";

#[async_trait]
impl KeyStore for SqliteStore {
    #[instrument(skip_all)]
    async fn create_key(&self, new: &NewApiKey) -> StoreResult<()> {
        let new = new.clone();
        self.run(move |conn| {
            let key = &new.key;
            let agents = key
                .agents
                .as_ref()
                .map(|agents| json_array(agents))
                .transpose()
                .map_err(Failure::Corrupt)?;
            conn.prepare_cached(INSERT)?.execute(params![
                key.id.to_string(),
                new.hash,
                key.team,
                agents,
                key.permission.as_str(),
                key.name,
                key.prefix,
                key.created_at.timestamp_micros(),
            ])?;
            Ok(())
        })
        .await
    }

    #[instrument(skip_all)]
    async fn list_keys(&self, team: Option<&str>) -> StoreResult<Vec<ApiKey>> {
        let team = team.map(str::to_owned);
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(LIST)?;
            let mut rows = stmt.query(params![team])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                out.push(api_key(row)?);
            }
            Ok(out)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn revoke_key(&self, id: Uuid, at: DateTime<Utc>) -> StoreResult<Option<ApiKey>> {
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(REVOKE)?;
            let key = stmt
                .query_row(params![id.to_string(), at.timestamp_micros()], |row| Ok(api_key(row)))
                .optional()?;
            key.transpose()
        })
        .await
    }

    #[instrument(skip_all)]
    async fn use_key(&self, hash: &str, now: DateTime<Utc>) -> StoreResult<Option<ApiKey>> {
        let hash = hash.to_owned();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(USE)?;
            let key = stmt
                .query_row(params![hash, now.timestamp_micros()], |row| Ok(api_key(row)))
                .optional()?;
            key.transpose()
        })
        .await
    }
}

fn api_key(row: &rusqlite::Row<'_>) -> Outcome<ApiKey> {
    let agents: Option<String> = row.get("agents")?;
    let agents = agents
        .map(|json| serde_json::from_str::<Vec<String>>(&json))
        .transpose()
        .map_err(|e| Failure::Corrupt(Box::new(e)))?;
    let permission: String = row.get("permission")?;
    Ok(ApiKey {
        id: uuid_of(row, "id")?,
        team: row.get("team_id")?,
        agents,
        permission: Permission::parse(&permission)
            .ok_or_else(|| Failure::Corrupt(format!("unknown key permission {permission:?}").into()))?,
        name: row.get("name")?,
        prefix: row.get("prefix")?,
        created_at: time_of(row.get("created_at")?)?,
        last_used_at: row.get::<_, Option<i64>>("last_used_at")?.map(time_of).transpose()?,
        revoked_at: row.get::<_, Option<i64>>("revoked_at")?.map(time_of).transpose()?,
    })
}
