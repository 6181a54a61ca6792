use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{strip_injected_memory, TaskId, ValidationError};

/// Who said a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::System => "system",
            Self::Tool => "tool",
        }
    }

    pub fn parse(value: &str) -> Result<Self, ValidationError> {
        match value {
            "user" => Ok(Self::User),
            "assistant" => Ok(Self::Assistant),
            "system" => Ok(Self::System),
            "tool" => Ok(Self::Tool),
            other => Err(ValidationError::invalid(
                "role",
                format!("unknown role {other:?}; expected user, assistant, system or tool"),
            )),
        }
    }
}

/// Longest client idempotency key we accept.
pub const MAX_CLIENT_ID_LEN: usize = 256;

/// A turn as accepted from a client, already sanitized: injected memory blocks are stripped
/// and the content is known to be non-empty.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTurn {
    pub role: Role,
    pub content: String,
    pub metadata: serde_json::Map<String, serde_json::Value>,
    pub client_id: Option<String>,
    pub created_at: Option<DateTime<Utc>>,
    /// The task the turn was appended under (every turn of an append has the request's).
    pub task: Option<TaskId>,
}

impl NewTurn {
    /// Validates and sanitizes one turn. The content is stored as the user and agent said it:
    /// memory blocks that sediment injected itself are removed first, and a turn that was
    /// nothing but such a block is rejected as empty.
    pub fn new(
        role: &str,
        content: &str,
        metadata: Option<serde_json::Value>,
        client_id: Option<String>,
        created_at: Option<DateTime<Utc>>,
    ) -> Result<Self, ValidationError> {
        let role = Role::parse(role)?;
        let content = strip_injected_memory(content);
        if content.trim().is_empty() {
            return Err(ValidationError::invalid("content", "must not be empty"));
        }
        if content.contains('\0') {
            return Err(ValidationError::invalid("content", "must not contain NUL characters"));
        }
        let metadata = match metadata {
            None | Some(serde_json::Value::Null) => serde_json::Map::new(),
            Some(serde_json::Value::Object(map)) => map,
            Some(_) => return Err(ValidationError::invalid("metadata", "must be a JSON object")),
        };
        if let Some(id) = &client_id {
            if id.is_empty() || id.chars().count() > MAX_CLIENT_ID_LEN {
                return Err(ValidationError::invalid(
                    "client_id",
                    format!("must be 1 to {MAX_CLIENT_ID_LEN} characters"),
                ));
            }
        }
        Ok(Self {
            role,
            content: content.into_owned(),
            metadata,
            client_id,
            created_at,
            task: None,
        })
    }

    /// The turn, stored under `task`.
    pub fn with_task(mut self, task: Option<TaskId>) -> Self {
        self.task = task;
        self
    }
}

/// What a successful append returns for each turn, in request order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendedTurn {
    pub id: Uuid,
    pub seq: i64,
    pub created_at: DateTime<Utc>,
}

/// A stored L0 turn; never rewritten after it is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredTurn {
    pub id: Uuid,
    pub tenant: crate::domain::Tenant,
    pub session_id: String,
    pub seq: i64,
    pub role: Role,
    pub content: String,
    pub metadata: serde_json::Map<String, serde_json::Value>,
    pub client_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The task it was appended under, if any.
    pub task: Option<String>,
}

impl StoredTurn {
    /// The session the turn belongs to.
    pub fn session_key(&self) -> crate::domain::SessionKey {
        crate::domain::SessionKey::new(self.tenant.clone(), self.session_id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_unknown_role_and_empty_content() {
        assert!(NewTurn::new("robot", "hi", None, None, None).is_err());
        assert!(NewTurn::new("user", "   ", None, None, None).is_err());
        assert!(NewTurn::new("user", "hi", Some(serde_json::json!([1])), None, None).is_err());
        assert!(NewTurn::new("user", "hi", None, Some(String::new()), None).is_err());
        let turn = NewTurn::new("tool", "hi", Some(serde_json::json!({"k": 1})), None, None).unwrap();
        assert_eq!(turn.role, Role::Tool);
        assert_eq!(turn.metadata["k"], 1);
    }
}
