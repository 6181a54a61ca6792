//! The search index port: points with a BM25 sparse vector (IDF modifier) and tenant payload.
//!
//! Backends: `edge` (Qdrant Edge, in-process) and `qdrant` (a Qdrant server, over gRPC), used
//! when configured. One project-owned point and query model; each backend is a thin adapter.
//! Both run `testsuite::search_index_suite`.
//!
//! Sparse vectors are computed here, client side, by one BM25 model (`Bm25`) for both
//! backends, so a query scores the same wherever it runs.

mod bm25;
mod edge;
mod qdrant;
#[cfg(feature = "testing")]
pub mod testsuite;

use async_trait::async_trait;
use uuid::Uuid;

use crate::domain::Tenant;

pub use bm25::{Bm25, SparseVector};
pub use edge::EdgeIndex;
pub use qdrant::QdrantIndex;

/// Name of the BM25 sparse vector, in an edge shard and in a server collection alike.
pub const BM25_VECTOR: &str = "bm25";

// The payload of every point, the same in both backends; each field has a keyword index.
const TEAM_ID: &str = "team_id";
const AGENT_ID: &str = "agent_id";
const USER_ID: &str = "user_id";
const SESSION_ID: &str = "session_id";
const KIND: &str = "kind";
const KEYWORD_FIELDS: [&str; 5] = [TEAM_ID, AGENT_ID, USER_ID, SESSION_ID, KIND];

/// The payload of a point as (field, value) pairs; each backend writes exactly these.
fn payload_terms(point: &IndexPoint) -> [(&'static str, &str); 5] {
    [
        (TEAM_ID, &point.tenant.team),
        (AGENT_ID, &point.tenant.agent),
        (USER_ID, &point.tenant.user),
        (SESSION_ID, &point.session_id),
        (KIND, point.kind.as_str()),
    ]
}

/// The exact keyword matches that scope a query: tenant, kind and, if given, session. Both
/// backends translate these and nothing else, so tenant isolation has one definition.
fn scope_terms<'a>(tenant: &'a Tenant, kind: PointKind, session_id: Option<&'a str>) -> Vec<(&'static str, &'a str)> {
    let mut terms = vec![
        (TEAM_ID, tenant.team.as_str()),
        (AGENT_ID, tenant.agent.as_str()),
        (USER_ID, tenant.user.as_str()),
        (KIND, kind.as_str()),
    ];
    terms.extend(session_id.map(|s| (SESSION_ID, s)));
    terms
}

pub type IndexResult<T> = Result<T, IndexError>;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("search index unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("search index failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl IndexError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unavailable(_) => true,
            Self::Backend(_) => false,
        }
    }
}

/// What kind of item a point stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointKind {
    /// An L0 turn.
    Turn,
}

impl PointKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Turn => "turn",
        }
    }
}

/// One indexed item. `id` is deterministic (the item's own id), so indexing twice overwrites.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexPoint {
    pub id: Uuid,
    pub kind: PointKind,
    pub tenant: Tenant,
    pub session_id: String,
    /// The text the BM25 vector is computed from.
    pub text: String,
}

/// A tenant-scoped keyword query.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexQuery {
    pub tenant: Tenant,
    pub kind: PointKind,
    pub session_id: Option<String>,
    pub text: String,
    pub limit: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IndexHit {
    pub id: Uuid,
    pub score: f32,
}

#[async_trait]
pub trait SearchIndex: Send + Sync + 'static {
    /// Inserts or overwrites points (by id). Returns once they are durable (edge: flushed and
    /// fsynced; server: `wait=true`) and visible to `search` and `count`. A point whose text
    /// has no searchable token is stored too. An empty slice is a no-op.
    async fn upsert(&self, points: &[IndexPoint]) -> IndexResult<()>;

    /// Returns up to `limit` hits for the query text within the tenant and kind (and session,
    /// if given), best first. An empty or all-stopword query, or `limit` 0, returns no hits.
    async fn search(&self, query: &IndexQuery) -> IndexResult<Vec<IndexHit>>;

    /// Deletes points by id; unknown ids are ignored. Durable on return, like `upsert`.
    async fn delete(&self, ids: &[Uuid]) -> IndexResult<()>;

    /// Counts the tenant's points of a kind, exactly.
    async fn count(&self, tenant: &Tenant, kind: PointKind) -> IndexResult<u64>;

    /// Checks that the backend answers.
    async fn ping(&self) -> IndexResult<()>;
}
