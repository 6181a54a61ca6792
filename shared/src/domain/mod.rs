//! Domain types: tenants, turns and the text rules applied to them. Pure, no I/O.

mod markers;
mod tenant;
mod turn;

pub use markers::{strip_injected_memory, MEMORY_BLOCK_END, MEMORY_BLOCK_START};
pub use tenant::{tenant_id, SessionId, SessionKey, TaskId, Tenant};
pub use turn::{AppendedTurn, NewTurn, Role, StoredTurn};

/// A request that breaks a domain rule; always the caller's fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    #[error("missing tenant id: {0}")]
    MissingTenant(&'static str),
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

impl ValidationError {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            reason: reason.into(),
        }
    }
}
