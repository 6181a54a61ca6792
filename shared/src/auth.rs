//! API keys: what a credential is, how one is made, and what it may do.
//!
//! A key belongs to one team and decides the tenant's team for every call made with it. It may
//! be narrowed to some agents of that team, and it carries one [`Permission`]. The secret is
//! shown once, when the key is created: stores keep only its SHA-256 ([`key_hash`]). A fast
//! hash is right here (unlike for passwords) because a key holds 256 random bits: there is
//! nothing to guess, so a slow hash would only slow every request.
//!
//! The secret's form, `sdmk_` followed by 64 lowercase hex digits, is fixed so that secret
//! scanners (and sediment's own redaction of turns) can recognise a leaked key.

use chrono::{DateTime, Utc};
use rand::TryRngCore as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use crate::domain::{tenant_id, ValidationError};

/// The fixed start of every API key.
pub const KEY_PREFIX: &str = "sdmk_";
/// Random bytes in a key's secret.
const KEY_RANDOM_BYTES: usize = 32;
/// How much of a key listings show: the prefix and the first 7 hex digits, enough to tell
/// keys apart, far too little to guess the rest.
const SHOWN_CHARS: usize = KEY_PREFIX.len() + 7;
/// Most agents one key may be narrowed to.
pub const MAX_KEY_AGENTS: usize = 100;
/// Longest key name.
pub const MAX_KEY_NAME_CHARS: usize = 128;

/// What a key may do on its team. Each level includes the ones below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Read turns, memories, scenes and the persona; search and recall.
    Read,
    /// Also append turns, correct and delete memories, reset and compact sessions.
    Write,
    /// Also manage the team's prompt overrides and read its audit log.
    Admin,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Admin => "admin",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "read" => Some(Self::Read),
            "write" => Some(Self::Write),
            "admin" => Some(Self::Admin),
            _ => None,
        }
    }
}

/// A stored key, as listings show it: never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiKey {
    pub id: Uuid,
    pub team: String,
    /// The agents it is narrowed to; `None`: every agent of the team.
    pub agents: Option<Vec<String>>,
    pub permission: Permission,
    /// The operator's label, if any.
    pub name: Option<String>,
    /// The start of the secret ([`SHOWN_CHARS`] characters), to tell keys apart.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    /// When a request last used it; written at most once per key-cache period and replica.
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl ApiKey {
    /// Whether this key may act as `agent` of its team.
    pub fn allows_agent(&self, agent: &str) -> bool {
        self.agents
            .as_ref()
            .is_none_or(|agents| agents.iter().any(|a| a == agent))
    }
}

/// A key about to be stored: its record and the SHA-256 of its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewApiKey {
    pub key: ApiKey,
    /// Hex SHA-256 of the secret: what a request's key is looked up by.
    pub hash: String,
}

/// A freshly made key: the record to store and the secret to show once.
pub struct IssuedKey {
    pub new: NewApiKey,
    pub secret: String,
}

impl IssuedKey {
    /// Makes a key for `team` after checking the request: a valid team id, at most
    /// [`MAX_KEY_AGENTS`] valid, distinct agent ids (an empty list is refused: such a key could
    /// do nothing), and a name of at most [`MAX_KEY_NAME_CHARS`] characters.
    pub fn generate(
        team: &str,
        agents: Option<Vec<String>>,
        permission: Permission,
        name: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<Self, ValidationError> {
        let team = tenant_id("team", Some(team))?;
        let agents = match agents {
            None => None,
            Some(agents) => {
                if agents.is_empty() {
                    return Err(ValidationError::invalid(
                        "agents",
                        "must name at least one agent, or be left out for every agent",
                    ));
                }
                if agents.len() > MAX_KEY_AGENTS {
                    return Err(ValidationError::invalid(
                        "agents",
                        format!("more than {MAX_KEY_AGENTS} agents"),
                    ));
                }
                let mut checked = Vec::with_capacity(agents.len());
                for agent in &agents {
                    let agent = tenant_id("agents", Some(agent))?;
                    if !checked.contains(&agent) {
                        checked.push(agent);
                    }
                }
                Some(checked)
            }
        };
        let name = name.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
        if let Some(name) = &name {
            if name.chars().count() > MAX_KEY_NAME_CHARS {
                return Err(ValidationError::invalid(
                    "name",
                    format!("longer than {MAX_KEY_NAME_CHARS} characters"),
                ));
            }
            if name.chars().any(char::is_control) {
                return Err(ValidationError::invalid("name", "contains control characters"));
            }
        }
        let secret = new_secret();
        Ok(Self {
            new: NewApiKey {
                hash: key_hash(&secret),
                key: ApiKey {
                    id: Uuid::new_v4(),
                    team,
                    agents,
                    permission,
                    name,
                    prefix: secret[..SHOWN_CHARS].to_owned(),
                    created_at: now,
                    last_used_at: None,
                    revoked_at: None,
                },
            },
            secret,
        })
    }
}

/// A new secret: [`KEY_PREFIX`] and 256 bits from the operating system's generator, in hex.
fn new_secret() -> String {
    let mut bytes = [0u8; KEY_RANDOM_BYTES];
    // Failing to read the OS generator leaves no safe way to make a key.
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random number generator failed");
    let mut secret = String::with_capacity(KEY_PREFIX.len() + 2 * KEY_RANDOM_BYTES);
    secret.push_str(KEY_PREFIX);
    push_hex(&mut secret, &bytes);
    secret
}

/// Whether `value` has the form of a key ([`KEY_PREFIX`] and 64 lowercase hex digits). A
/// bearer token that does not is not looked up at all.
pub fn looks_like_key(value: &str) -> bool {
    value.strip_prefix(KEY_PREFIX).is_some_and(|hex| {
        hex.len() == 2 * KEY_RANDOM_BYTES && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Hex SHA-256 of a secret, as stored.
pub fn key_hash(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    let mut out = String::with_capacity(64);
    push_hex(&mut out, &digest);
    out
}

/// Compares two secrets in time that depends only on their lengths, by comparing their
/// SHA-256 digests: the operator's admin key is held in memory, not looked up by hash.
pub fn secrets_equal(a: &str, b: &str) -> bool {
    let (a, b) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    a.iter().zip(b.iter()).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(agents: Option<Vec<String>>) -> Result<IssuedKey, ValidationError> {
        IssuedKey::generate("acme", agents, Permission::Write, Some(" ci bot ".into()), Utc::now())
    }

    #[test]
    fn a_key_has_the_scannable_form_and_only_its_hash_is_kept() {
        let issued = issue(None).expect("valid");
        assert!(looks_like_key(&issued.secret), "{}", issued.secret);
        assert_eq!(issued.secret.len(), KEY_PREFIX.len() + 64);
        assert_eq!(issued.new.hash, key_hash(&issued.secret));
        assert_ne!(issued.new.hash, issued.secret);
        assert!(issued.secret.starts_with(&issued.new.key.prefix));
        assert_eq!(issued.new.key.prefix.len(), SHOWN_CHARS);
        assert_eq!(issued.new.key.name.as_deref(), Some("ci bot"));
        let other = issue(None).expect("valid");
        assert_ne!(issued.secret, other.secret, "every key is new");
    }

    #[test]
    fn the_key_form_is_exact() {
        let hex = "a".repeat(64);
        assert!(looks_like_key(&format!("sdmk_{hex}")));
        assert!(!looks_like_key(&format!("sdmk_{}", "A".repeat(64))), "uppercase");
        assert!(!looks_like_key(&format!("sdmk_{}", "a".repeat(63))), "short");
        assert!(!looks_like_key(&format!("sdmk_{hex}0")), "long");
        assert!(!looks_like_key(&format!("sk_{hex}")), "prefix");
        assert!(!looks_like_key(""));
    }

    #[test]
    fn scope_checks_refuse_what_could_never_be_used() {
        assert!(issue(Some(vec![])).is_err(), "no agent at all");
        assert!(issue(Some(vec!["a\u{0}b".into()])).is_err(), "control character");
        assert!(issue(Some(vec!["x".into(); MAX_KEY_AGENTS + 1])).is_err());
        assert!(IssuedKey::generate(" ", None, Permission::Read, None, Utc::now()).is_err());
        let key = issue(Some(vec!["bot".into(), "bot".into(), " helper ".into()]))
            .expect("valid")
            .new
            .key;
        assert_eq!(key.agents, Some(vec!["bot".to_owned(), "helper".to_owned()]));
        assert!(key.allows_agent("helper") && !key.allows_agent("other"));
        let everyone = issue(None).expect("valid").new.key;
        assert!(everyone.allows_agent("anyone"));
    }

    #[test]
    fn permissions_are_ordered_and_round_trip() {
        assert!(Permission::Read < Permission::Write && Permission::Write < Permission::Admin);
        for p in [Permission::Read, Permission::Write, Permission::Admin] {
            assert_eq!(Permission::parse(p.as_str()), Some(p));
        }
        assert_eq!(Permission::parse("root"), None);
    }

    #[test]
    fn secrets_compare_by_value() {
        assert!(secrets_equal("same-secret", "same-secret"));
        assert!(!secrets_equal("same-secret", "same-secreT"));
        assert!(!secrets_equal("short", "longer one"));
    }
}
