//! The API key port: keys of teams (`auth`), kept in the same database as the turns.
//! Implemented by both transcript store backends; only the SHA-256 of a secret is stored.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::StoreResult;
use crate::auth::{ApiKey, NewApiKey};

#[async_trait]
pub trait KeyStore: Send + Sync + 'static {
    /// Stores a new key.
    async fn create_key(&self, key: &NewApiKey) -> StoreResult<()>;

    /// Keys newest first, of one team or of every team; revoked ones too (with `revoked_at`).
    async fn list_keys(&self, team: Option<&str>) -> StoreResult<Vec<ApiKey>>;

    /// Revokes a key at `at`; revoking a revoked key keeps its first revocation time. `None`
    /// when no key has this id.
    async fn revoke_key(&self, id: Uuid, at: DateTime<Utc>) -> StoreResult<Option<ApiKey>>;

    /// The key whose secret hashes to `hash`, unless it is revoked, with its last use set to
    /// `now` in the same statement: the one call a request's authentication makes.
    async fn use_key(&self, hash: &str, now: DateTime<Utc>) -> StoreResult<Option<ApiKey>>;
}
