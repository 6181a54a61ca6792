use serde::{Deserialize, Serialize};

use super::ValidationError;

/// Longest id we accept for a team, agent, user, session or task.
pub const MAX_ID_LEN: usize = 128;

/// The owner of every piece of data: team, agent and user. Every read and write is scoped to
/// one tenant; no query in any backend runs without all three.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Tenant {
    pub team: String,
    pub agent: String,
    pub user: String,
}

impl Tenant {
    /// Validates the three ids; a missing or blank one is `MissingTenant`.
    pub fn new(team: Option<&str>, agent: Option<&str>, user: Option<&str>) -> Result<Self, ValidationError> {
        Ok(Self {
            team: tenant_id("team", team)?,
            agent: tenant_id("agent", agent)?,
            user: tenant_id("user", user)?,
        })
    }
}

/// Validates one team, agent or user id given on its own (an API key's team and agents): not
/// blank, at most [`MAX_ID_LEN`] characters, no control characters. Returns it trimmed.
pub fn tenant_id(field: &'static str, value: Option<&str>) -> Result<String, ValidationError> {
    let value = value.map(str::trim).filter(|v| !v.is_empty());
    let Some(value) = value else {
        return Err(ValidationError::MissingTenant(field));
    };
    check_id(field, value)?;
    Ok(value.to_owned())
}

fn check_id(field: &'static str, value: &str) -> Result<(), ValidationError> {
    if value.chars().count() > MAX_ID_LEN {
        return Err(ValidationError::invalid(
            field,
            format!("longer than {MAX_ID_LEN} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(ValidationError::invalid(field, "contains control characters"));
    }
    Ok(())
}

/// A session id chosen by the client: 1–128 characters, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(String);

/// Validates an id a client chose (a session's, a task's): not empty, then [`check_id`]. Not
/// trimmed, unlike a tenant id: the client's exact string names the thing.
fn client_id(field: &'static str, value: &str) -> Result<String, ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::invalid(field, "must not be empty"));
    }
    check_id(field, value)?;
    Ok(value.to_owned())
}

impl SessionId {
    pub fn parse(value: &str) -> Result<Self, ValidationError> {
        client_id("session_id", value).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A stored session: its owner and the client's id. A client's session id is unique only
/// within its owner (two users may both call theirs `s1`), so whatever names a session outside
/// a tenant's own request (a cursor, a schedule, a worker's job) names the owner as well.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SessionKey {
    pub tenant: Tenant,
    pub session_id: String,
}

impl SessionKey {
    pub fn new(tenant: Tenant, session_id: impl Into<String>) -> Self {
        Self {
            tenant,
            session_id: session_id.into(),
        }
    }
}

impl std::fmt::Display for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = &self.tenant;
        write!(f, "{}/{}/{}/{}", t.team, t.agent, t.user, self.session_id)
    }
}

/// A task id chosen by the client, the optional fifth isolation dimension (seed 001): the
/// rules of a [`SessionId`]. Turns and memories carry it; given with a query, it narrows
/// search, recall and the memory listing to what was stored under it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(String);

impl TaskId {
    pub fn parse(value: &str) -> Result<Self, ValidationError> {
        client_id("task", value).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_ids_are_missing() {
        assert_eq!(
            Tenant::new(Some("t"), Some("  "), Some("u")),
            Err(ValidationError::MissingTenant("agent"))
        );
        assert_eq!(
            Tenant::new(None, Some("a"), Some("u")),
            Err(ValidationError::MissingTenant("team"))
        );
    }

    #[test]
    fn ids_are_trimmed_and_bounded() {
        let t = Tenant::new(Some(" t "), Some("a"), Some("u")).unwrap();
        assert_eq!(t.team, "t");
        let long = "x".repeat(MAX_ID_LEN + 1);
        assert!(Tenant::new(Some(&long), Some("a"), Some("u")).is_err());
        assert!(SessionId::parse(&long).is_err());
        assert!(SessionId::parse("").is_err());
        assert!(SessionId::parse("a\u{0}b").is_err());
        assert!(SessionId::parse("会话-1").is_ok());
    }

    #[test]
    fn task_ids_follow_the_session_rules() {
        assert_eq!(TaskId::parse("任务-7").unwrap().as_str(), "任务-7");
        assert!(TaskId::parse(&"x".repeat(MAX_ID_LEN)).is_ok());
        for bad in [
            String::new(),
            "x".repeat(MAX_ID_LEN + 1),
            "a\u{c}b".to_owned(),
            "\u{85}".to_owned(),
        ] {
            match TaskId::parse(&bad) {
                Err(ValidationError::Invalid { field, .. }) => assert_eq!(field, "task", "{bad:?}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
