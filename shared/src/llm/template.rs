//! Prompt templates: versioned Markdown files in `shared/prompts/`, overridable per instance
//! (a directory of `{id}.md` files), per team and per agent (rows the store keeps).
//!
//! A template file starts with a front matter block naming its id and version:
//!
//! ```text
//! ---
//! id: l1-extract
//! version: 1
//! ---
//! You extract long-term memories ...
//! ```
//!
//! The text after the front matter, trimmed, is the system prompt sent to the model, and what
//! the provenance hash is computed over. The effective template of a call is the most specific
//! one that exists: agent > team > instance > builtin ([`resolve`]). An override replaces the
//! instructions only; the input the engine sends and the JSON it accepts stay the same, so an
//! override should start from a copy of the builtin file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use super::chat::sha256_hex;
use crate::domain::Tenant;
use crate::memory::TemplateRef;

/// A prompt template the engines use; each has a builtin text in `shared/prompts/{id}.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TemplateId {
    /// Segment a batch into scenes and extract L1 cards.
    L1Extract,
    /// Decide add / update / merge / discard for new L1 cards.
    L1Dedup,
    /// The L2 scene agent: edit an owner's scene documents with new memories.
    L2Scene,
    /// Build or update the L3 persona from scenes and memories.
    L3Persona,
}

impl TemplateId {
    pub const ALL: &'static [Self] = &[Self::L1Extract, Self::L1Dedup, Self::L2Scene, Self::L3Persona];

    /// The stable id, also the file name (without `.md`) of an instance override.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::L1Extract => "l1-extract",
            Self::L1Dedup => "l1-dedup",
            Self::L2Scene => "l2-scene",
            Self::L3Persona => "l3-persona",
        }
    }

    pub fn parse(id: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|t| t.as_str() == id)
    }

    fn builtin_file(self) -> &'static str {
        match self {
            Self::L1Extract => include_str!("../../prompts/l1-extract.md"),
            Self::L1Dedup => include_str!("../../prompts/l1-dedup.md"),
            Self::L2Scene => include_str!("../../prompts/l2-scene.md"),
            Self::L3Persona => include_str!("../../prompts/l3-persona.md"),
        }
    }
}

/// Where an effective template came from, most specific last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TemplateSource {
    Builtin,
    Instance,
    Team,
    Agent,
}

impl TemplateSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Builtin => "builtin",
            Self::Instance => "instance",
            Self::Team => "team",
            Self::Agent => "agent",
        }
    }
}

/// The template a call uses: its text and its provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveTemplate {
    /// The system prompt.
    pub text: String,
    /// Id, version, source level and SHA-256 of `text`.
    pub template: TemplateRef,
}

/// The level of a stored override.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OverrideLevel {
    /// Applies to every agent of `team`.
    Team,
    /// Applies to `agent` of `team` only.
    Agent,
}

impl OverrideLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Team => "team",
            Self::Agent => "agent",
        }
    }

    pub fn parse(level: &str) -> Option<Self> {
        match level {
            "team" => Some(Self::Team),
            "agent" => Some(Self::Agent),
            _ => None,
        }
    }
}

/// A team's or an agent's version of a template, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateOverride {
    /// A [`TemplateId`] string (`l1-extract`).
    pub id: String,
    pub level: OverrideLevel,
    pub team: String,
    /// The agent, for [`OverrideLevel::Agent`]; ignored for a team override.
    pub agent: Option<String>,
    pub version: String,
    /// The template text; a front matter block, if any, is ignored (`version` counts).
    pub content: String,
}

/// Why the instance templates cannot be loaded (a start-up error).
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("failed to read prompt templates in {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("prompt template {file}: {reason}")]
    Invalid { file: String, reason: String },
}

/// Why the stored overrides could not be read; the call cannot know its template and fails
/// as unavailable rather than silently use a less specific one.
#[derive(Debug, thiserror::Error)]
#[error("template overrides unavailable")]
pub struct OverridesError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

/// Where team and agent overrides are stored.
#[async_trait]
pub trait TemplateOverrides: Send + Sync + 'static {
    /// The active overrides of template `id` for `tenant`: at most one team override (for
    /// `tenant.team`) and one agent override (for `tenant.team` + `tenant.agent`). Others are
    /// ignored by [`resolve`], so returning more is harmless. No override is `Ok(vec![])`.
    async fn overrides(&self, tenant: &Tenant, id: TemplateId) -> Result<Vec<TemplateOverride>, OverridesError>;
}

/// No team or agent overrides: the instance directory and the builtins only.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOverrides;

#[async_trait]
impl TemplateOverrides for NoOverrides {
    async fn overrides(&self, _tenant: &Tenant, _id: TemplateId) -> Result<Vec<TemplateOverride>, OverridesError> {
        Ok(Vec::new())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Template {
    version: String,
    text: String,
}

/// The instance-wide overrides: the `{id}.md` files of `SEDIMENT_PROMPTS_DIR`, read once at
/// start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceTemplates {
    templates: BTreeMap<TemplateId, Template>,
}

impl InstanceTemplates {
    /// Reads every `*.md` file of `dir`. Each must be named after a known template id and have
    /// a front matter with a `version` (and, if it names an `id`, the same one). Other files
    /// are ignored, so the directory may hold a README or editor backups.
    pub fn load(dir: &Path) -> Result<Self, TemplateError> {
        let io = |source| TemplateError::Io {
            path: dir.to_owned(),
            source,
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("md") || !path.is_file() {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|source| TemplateError::Io {
                path: path.clone(),
                source,
            })?;
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            files.push((name, text));
        }
        Self::from_files(files)
    }

    /// The templates of `(file name, text)` pairs, checked like [`InstanceTemplates::load`].
    pub fn from_files<N: AsRef<str>, T: AsRef<str>>(
        files: impl IntoIterator<Item = (N, T)>,
    ) -> Result<Self, TemplateError> {
        let mut templates = BTreeMap::new();
        for (name, text) in files {
            let name = name.as_ref();
            let invalid = |reason: String| TemplateError::Invalid {
                file: name.to_owned(),
                reason,
            };
            let stem = name.strip_suffix(".md").unwrap_or(name);
            let Some(id) = TemplateId::parse(stem) else {
                let known: Vec<&str> = TemplateId::ALL.iter().map(|t| t.as_str()).collect();
                return Err(invalid(format!(
                    "no template is called {stem:?} (known: {})",
                    known.join(", ")
                )));
            };
            let parsed = parse(text.as_ref()).map_err(invalid)?;
            if let Some(named) = parsed.id.filter(|named| *named != stem) {
                return Err(invalid(format!(
                    "front matter says id {named:?}, the file name {stem:?}"
                )));
            }
            let Some(version) = parsed.version else {
                return Err(invalid("front matter has no version".into()));
            };
            if parsed.body.is_empty() {
                return Err(invalid("template text is empty".into()));
            }
            templates.insert(
                id,
                Template {
                    version: version.to_owned(),
                    text: parsed.body.to_owned(),
                },
            );
        }
        Ok(Self { templates })
    }

    /// The ids this instance overrides.
    pub fn ids(&self) -> impl Iterator<Item = TemplateId> + '_ {
        self.templates.keys().copied()
    }
}

/// The effective template `id` for `tenant`: the first that exists of an agent override, a
/// team override, the instance file and the builtin. Overrides for another template, team or
/// agent, and overrides with no text, are skipped; among several that fit one level, the first
/// wins.
pub fn resolve(
    id: TemplateId,
    tenant: &Tenant,
    instance: &InstanceTemplates,
    overrides: &[TemplateOverride],
) -> EffectiveTemplate {
    let stored = |level: OverrideLevel| {
        overrides
            .iter()
            .filter(|o| o.id == id.as_str() && o.level == level && o.team == tenant.team)
            .filter(|o| match level {
                OverrideLevel::Agent => o.agent.as_deref() == Some(tenant.agent.as_str()),
                OverrideLevel::Team => true,
            })
            .find_map(|o| {
                let text = parse(&o.content).map_or(o.content.trim(), |p| p.body);
                (!text.is_empty()).then_some((o.version.as_str(), text))
            })
    };
    let (source, version, text) = if let Some((version, text)) = stored(OverrideLevel::Agent) {
        (TemplateSource::Agent, version, text)
    } else if let Some((version, text)) = stored(OverrideLevel::Team) {
        (TemplateSource::Team, version, text)
    } else if let Some(template) = instance.templates.get(&id) {
        (
            TemplateSource::Instance,
            template.version.as_str(),
            template.text.as_str(),
        )
    } else {
        let file = id.builtin_file();
        // The builtins are checked by a unit test; were one broken, the whole file would still
        // be a usable prompt.
        match parse(file) {
            Ok(parsed) => (TemplateSource::Builtin, parsed.version.unwrap_or("0"), parsed.body),
            Err(_) => (TemplateSource::Builtin, "0", file.trim()),
        }
    };
    EffectiveTemplate {
        text: text.to_owned(),
        template: TemplateRef {
            id: id.as_str().to_owned(),
            version: version.to_owned(),
            source: source.as_str().to_owned(),
            hash: sha256_hex(text),
        },
    }
}

/// The instance templates and the stored overrides, resolved per call.
#[derive(Clone)]
pub struct Prompts {
    instance: Arc<InstanceTemplates>,
    overrides: Arc<dyn TemplateOverrides>,
}

impl std::fmt::Debug for Prompts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompts")
            .field("instance", &self.instance.ids().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Prompts {
    pub fn new(instance: InstanceTemplates, overrides: Arc<dyn TemplateOverrides>) -> Self {
        Self {
            instance: Arc::new(instance),
            overrides,
        }
    }

    /// The builtin templates only.
    pub fn builtin() -> Self {
        Self::new(InstanceTemplates::default(), Arc::new(NoOverrides))
    }

    /// The effective template `id` for `tenant`, reading its overrides from the store.
    pub async fn effective(&self, id: TemplateId, tenant: &Tenant) -> Result<EffectiveTemplate, OverridesError> {
        let overrides = self.overrides.overrides(tenant, id).await?;
        Ok(resolve(id, tenant, &self.instance, &overrides))
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Parsed<'a> {
    id: Option<&'a str>,
    version: Option<&'a str>,
    body: &'a str,
}

/// Splits a template file into its front matter (`id`, `version`; other keys are allowed and
/// ignored) and its trimmed body. A file without front matter is all body.
fn parse(text: &str) -> Result<Parsed<'_>, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")) else {
        return Ok(Parsed {
            id: None,
            version: None,
            body: text.trim(),
        });
    };
    let (mut id, mut version) = (None, None);
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        offset += line.len();
        let line = line.trim();
        if line == "---" {
            return Ok(Parsed {
                id,
                version,
                body: rest[offset..].trim(),
            });
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!("front matter line {line:?} is not `key: value`"));
        };
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        let value = (!value.is_empty()).then_some(value);
        match key.trim() {
            "id" => id = value,
            "version" => version = value,
            _ => {}
        }
    }
    Err("front matter is not closed by a `---` line".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant() -> Tenant {
        Tenant {
            team: "dba".into(),
            agent: "oncall".into(),
            user: "u1".into(),
        }
    }

    fn stored(level: OverrideLevel, team: &str, agent: Option<&str>, content: &str) -> TemplateOverride {
        TemplateOverride {
            id: "l1-extract".into(),
            level,
            team: team.into(),
            agent: agent.map(str::to_owned),
            version: format!("{}-7", level.as_str()),
            content: content.into(),
        }
    }

    #[test]
    fn builtins_have_front_matter_matching_their_id() {
        for &id in TemplateId::ALL {
            let parsed = parse(id.builtin_file()).unwrap();
            assert_eq!(parsed.id, Some(id.as_str()));
            assert!(parsed.version.is_some(), "{id:?}");
            assert!(
                parsed.body.contains("JSON"),
                "json_object mode needs the word JSON: {id:?}"
            );
            let effective = resolve(id, &tenant(), &InstanceTemplates::default(), &[]);
            assert_eq!(effective.template.source, "builtin");
            assert_eq!(effective.template.id, id.as_str());
            assert_eq!(Some(effective.template.version.as_str()), parsed.version);
            assert!(!effective.text.starts_with("---"));
        }
    }

    #[test]
    fn front_matter_is_optional_and_checked() {
        let parsed = parse("---\nid: x\nversion: \"3\"\n# a comment\nowner: me\n---\n\nHello\n").unwrap();
        assert_eq!(
            parsed,
            Parsed {
                id: Some("x"),
                version: Some("3"),
                body: "Hello"
            }
        );
        assert_eq!(parse("  just text ").unwrap().body, "just text");
        assert_eq!(parse("---\r\nversion: 2\r\n---\r\nbody").unwrap().version, Some("2"));
        assert!(parse("---\nversion: 1\n\n").unwrap_err().contains("not closed"));
        assert!(parse("---\nno colon\n---\n").unwrap_err().contains("key: value"));
    }

    #[test]
    fn the_most_specific_template_wins_and_carries_its_source_version_and_hash() {
        let instance =
            InstanceTemplates::from_files([("l1-extract.md", "---\nversion: inst-2\n---\nInstance prompt")]).unwrap();
        let team = stored(OverrideLevel::Team, "dba", None, "Team prompt");
        let agent = stored(
            OverrideLevel::Agent,
            "dba",
            Some("oncall"),
            "---\nversion: ignored\n---\nAgent prompt",
        );
        let id = TemplateId::L1Extract;

        let all = resolve(id, &tenant(), &instance, &[team.clone(), agent.clone()]);
        assert_eq!(
            (all.text.as_str(), all.template.source.as_str()),
            ("Agent prompt", "agent")
        );
        assert_eq!(all.template.version, "agent-7");
        assert_eq!(all.template.hash, sha256_hex("Agent prompt"));
        assert_eq!(all.template.hash.len(), 64);

        let no_agent = resolve(id, &tenant(), &instance, std::slice::from_ref(&team));
        assert_eq!(
            (no_agent.text.as_str(), no_agent.template.source.as_str()),
            ("Team prompt", "team")
        );
        assert_eq!(no_agent.template.version, "team-7");

        let no_team = resolve(id, &tenant(), &instance, &[]);
        assert_eq!(
            (no_team.text.as_str(), no_team.template.source.as_str()),
            ("Instance prompt", "instance")
        );
        assert_eq!(no_team.template.version, "inst-2");
        assert_eq!(no_team.template.hash, sha256_hex("Instance prompt"));

        let builtin = resolve(id, &tenant(), &InstanceTemplates::default(), &[]);
        assert_eq!(builtin.template.source, "builtin");
        assert_eq!(builtin.template.hash, sha256_hex(&builtin.text));
        // The dedup template is not overridden by the instance's extract file.
        assert_eq!(
            resolve(TemplateId::L1Dedup, &tenant(), &instance, &[team])
                .template
                .source,
            "builtin"
        );
    }

    #[test]
    fn overrides_of_other_tenants_templates_or_without_text_are_skipped() {
        let id = TemplateId::L1Extract;
        let skipped = [
            stored(OverrideLevel::Team, "other-team", None, "x"),
            stored(OverrideLevel::Agent, "dba", Some("other-agent"), "x"),
            stored(OverrideLevel::Agent, "other-team", Some("oncall"), "x"),
            stored(OverrideLevel::Agent, "dba", None, "x"),
            stored(OverrideLevel::Team, "dba", None, "  \n"),
            TemplateOverride {
                id: "l1-dedup".into(),
                ..stored(OverrideLevel::Team, "dba", None, "x")
            },
        ];
        for o in &skipped {
            let effective = resolve(id, &tenant(), &InstanceTemplates::default(), std::slice::from_ref(o));
            assert_eq!(effective.template.source, "builtin", "{o:?}");
        }
        let first = stored(OverrideLevel::Team, "dba", None, "first");
        let second = stored(OverrideLevel::Team, "dba", None, "second");
        assert_eq!(
            resolve(id, &tenant(), &InstanceTemplates::default(), &[first, second]).text,
            "first"
        );
    }

    #[test]
    fn instance_files_are_checked() {
        let cases = [
            ("l1_extract.md", "---\nversion: 1\n---\nx", "no template is called"),
            ("l1-extract.md", "no front matter", "no version"),
            (
                "l1-extract.md",
                "---\nid: l1-dedup\nversion: 1\n---\nx",
                "front matter says id",
            ),
            ("l1-extract.md", "---\nversion: 1\n---\n  ", "empty"),
        ];
        for (name, text, expected) in cases {
            let error = InstanceTemplates::from_files([(name, text)]).unwrap_err().to_string();
            assert!(error.contains(expected), "{name}: {error}");
            assert!(error.contains(name), "{error}");
        }
    }

    #[test]
    fn instance_directory_is_loaded_ignoring_other_files() {
        let dir = std::env::temp_dir().join(format!("sediment-prompts-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("l1-dedup.md"),
            "---\nid: l1-dedup\nversion: 5\n---\nDedup here",
        )
        .unwrap();
        std::fs::write(dir.join("README.txt"), "notes").unwrap();
        let loaded = InstanceTemplates::load(&dir).unwrap();
        assert_eq!(loaded.ids().collect::<Vec<_>>(), vec![TemplateId::L1Dedup]);
        let effective = resolve(TemplateId::L1Dedup, &tenant(), &loaded, &[]);
        assert_eq!(
            (effective.text.as_str(), effective.template.version.as_str()),
            ("Dedup here", "5")
        );
        std::fs::remove_dir_all(&dir).unwrap();

        let missing = InstanceTemplates::load(&dir).unwrap_err();
        assert!(matches!(missing, TemplateError::Io { .. }), "{missing}");
    }

    #[tokio::test]
    async fn prompts_ask_the_store_for_overrides() {
        struct Fixed(Vec<TemplateOverride>);
        #[async_trait]
        impl TemplateOverrides for Fixed {
            async fn overrides(&self, _: &Tenant, _: TemplateId) -> Result<Vec<TemplateOverride>, OverridesError> {
                Ok(self.0.clone())
            }
        }
        struct Down;
        #[async_trait]
        impl TemplateOverrides for Down {
            async fn overrides(&self, _: &Tenant, _: TemplateId) -> Result<Vec<TemplateOverride>, OverridesError> {
                Err(OverridesError("store down".into()))
            }
        }
        let prompts = Prompts::new(
            InstanceTemplates::default(),
            Arc::new(Fixed(vec![stored(OverrideLevel::Team, "dba", None, "Team prompt")])),
        );
        let effective = prompts.effective(TemplateId::L1Extract, &tenant()).await.unwrap();
        assert_eq!(effective.template.source, "team");
        let builtin = Prompts::builtin()
            .effective(TemplateId::L1Extract, &tenant())
            .await
            .unwrap();
        assert_eq!(builtin.template.source, "builtin");
        let down = Prompts::new(InstanceTemplates::default(), Arc::new(Down));
        assert!(down.effective(TemplateId::L1Extract, &tenant()).await.is_err());
    }
}
