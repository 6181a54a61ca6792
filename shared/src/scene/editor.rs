//! The two scene editors: the LLM agent with file tools, and the rules planner. Both work only
//! through a [`Workspace`], so the cap, the folder restriction and document validity hold
//! whichever one runs.
//!
//! # The LLM agent's protocol
//! The agent works in steps. Each step it answers with JSON naming tool calls:
//!
//! ```json
//! {"actions": [{"tool": "read", "scene": "s2"},
//!              {"tool": "update", "scene": "s2", "content": "# name\n..."},
//!              {"tool": "create", "content": "# name\n..."},
//!              {"tool": "merge", "scenes": ["s3", "s5"], "content": "# merged\n..."},
//!              {"tool": "delete", "scene": "s4", "reason": "..."}],
//!  "done": false, "persona_worthy": false}
//! ```
//!
//! and gets each call's result back (`ok`, a refusal's reason, a read's document) until it says
//! `done` or the step budget runs out. Tool calls travel as JSON content rather than as the
//! provider's function-calling API because every OpenAI-compatible server (vLLM, Ollama, TEI
//! proxies) returns JSON content reliably, while function calling varies; the JSON plumbing
//! (lenient parsing, one repair call, labels, metrics) is the one L1 already uses.
//!
//! # Secrets
//! The agent sees memories, which L1 stored redacted, and documents this editor wrote; every
//! message to it is masked again all the same (`memory::redact`), since a memory or document
//! from before a redaction pattern existed would otherwise reach the model. What the agent
//! writes is masked before it is parsed, so a secret it makes up or repeats from elsewhere is
//! never stored. The rules editor writes only what the memories say.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::doc::SceneDoc;
use super::rules::{self, ScenePlan, SceneSummary};
use super::workspace::{Refusal, Workspace, WorkspaceError};
use crate::llm::{trace, CallLabels, ChatClient, Message, Prompts, TemplateId};
use crate::memory::redact::{count_masked, redact, redact_json};
use crate::memory::{Category, EngineError, EngineRun, Memory, TemplateRef};

/// What one editing run did, besides the files.
#[derive(Debug, Clone, PartialEq)]
pub struct EditOutcome {
    pub run: EngineRun,
    /// The editor flagged content worth lifting into the persona.
    pub persona_worthy: bool,
    /// LLM steps taken (0 for rules).
    pub steps: usize,
    /// Tool calls refused (cap, invalid document, unknown ref).
    pub refusals: usize,
}

/// Why a run failed; the runner rolls the folder back.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

/// Edits an owner's scenes with new memories.
#[async_trait]
pub trait SceneEditor: Send + Sync + 'static {
    /// `rules` or `llm`.
    fn mode(&self) -> &'static str;
    async fn edit(&self, workspace: &mut Workspace, memories: &[Memory]) -> Result<EditOutcome, EditError>;
}

// ---------------------------------------------------------------------------------------------
// Rules

/// The rules editor (no LLM): groups memories by scene and similarity (`rules::plan_scenes`).
#[derive(Debug, Clone, Default)]
pub struct RulesSceneEditor;

/// The rules editor's version, recorded in provenance; bump it when its output changes.
pub const RULES_VERSION: &str = "1";

#[async_trait]
impl SceneEditor for RulesSceneEditor {
    fn mode(&self) -> &'static str {
        "rules"
    }

    async fn edit(&self, workspace: &mut Workspace, memories: &[Memory]) -> Result<EditOutcome, EditError> {
        let existing: Vec<SceneSummary> = workspace
            .entries()
            .iter()
            .filter(|e| e.is_active())
            .map(|e| SceneSummary {
                id: e.row.id,
                name: e.row.name.clone(),
                doc: e.doc.clone(),
            })
            .collect();
        let plans = rules::plan_scenes(&existing, memories, workspace.cap(), workspace.now());
        let mut refusals = 0;
        for plan in plans {
            let refused = match plan {
                ScenePlan::Create { doc } => workspace.create(doc).await?.err(),
                ScenePlan::Update { id, doc } => {
                    let reference = reference_of(workspace, id);
                    workspace.update(&reference, doc).await?.err()
                }
                ScenePlan::Merge { sources, doc } => {
                    let references: Vec<String> = sources.iter().map(|&id| reference_of(workspace, id)).collect();
                    workspace.merge(&references, doc).await?.err()
                }
            };
            if let Some(refusal) = refused {
                // The planner follows the same cap rules; a refusal here is a planner bug, so
                // it is loud, but the rest of the plan still applies.
                tracing::warn!(%refusal, "rules scene plan refused by the workspace");
                refusals += 1;
            }
        }
        let persona_worthy = memories
            .iter()
            .any(|m| matches!(m.category, Category::Persona | Category::Instruction));
        Ok(EditOutcome {
            run: EngineRun {
                template: TemplateRef {
                    id: "l2-scene-rules".into(),
                    version: RULES_VERSION.into(),
                    source: "rules".into(),
                    hash: String::new(),
                },
                model: "rules".into(),
            },
            persona_worthy,
            steps: 0,
            refusals,
        })
    }
}

fn reference_of(workspace: &Workspace, id: uuid::Uuid) -> String {
    workspace
        .find_id(id)
        .map_or_else(|| format!("unknown:{id}"), |e| e.reference.clone())
}

// ---------------------------------------------------------------------------------------------
// LLM

/// The LLM scene agent, under the effective `l2-scene` template.
#[derive(Debug, Clone)]
pub struct LlmSceneEditor {
    chat: Arc<ChatClient>,
    prompts: Prompts,
    max_steps: usize,
}

impl LlmSceneEditor {
    pub fn new(chat: Arc<ChatClient>, prompts: Prompts, max_steps: usize) -> Self {
        Self {
            chat,
            prompts,
            max_steps: max_steps.max(1),
        }
    }
}

/// Longest memory text shown to the agent; a memory is one statement, longer ones are noise.
const MEMORY_CHARS: usize = 600;
/// The redaction metric's label for scenes.
const STAGE: &str = "scene";

#[async_trait]
impl SceneEditor for LlmSceneEditor {
    fn mode(&self) -> &'static str {
        "llm"
    }

    async fn edit(&self, workspace: &mut Workspace, memories: &[Memory]) -> Result<EditOutcome, EditError> {
        let tenant = workspace.tenant().clone();
        let template = self
            .prompts
            .effective(TemplateId::L2Scene, &tenant)
            .await
            .map_err(|e| EngineError::Unavailable(Box::new(e)))?;
        let run = EngineRun {
            template: template.template,
            model: self.chat.model().to_owned(),
        };
        let labels = CallLabels::new(trace::L2_SCENE, &tenant, None);
        let mut messages = vec![
            Message::system(template.text),
            Message::user(briefing(workspace, memories)),
        ];
        let mut outcome = EditOutcome {
            run,
            persona_worthy: false,
            steps: 0,
            refusals: 0,
        };
        while outcome.steps < self.max_steps {
            outcome.steps += 1;
            let reply = self
                .chat
                .complete_json(&labels, messages.clone(), parse_step)
                .await
                .map_err(EngineError::from)?;
            let step = reply.value;
            outcome.persona_worthy |= step.persona_worthy;
            let mut results = Vec::with_capacity(step.actions.len());
            for action in &step.actions {
                let result = apply(workspace, action).await?;
                if result.get("ok") == Some(&Value::Bool(false)) {
                    outcome.refusals += 1;
                }
                results.push(result);
            }
            if step.done || step.actions.is_empty() {
                break;
            }
            // The agent's own step goes back to it too: masked, like everything it is sent.
            let mut echo = step.raw;
            count_masked(STAGE, "input", redact_json(&mut echo));
            messages.push(Message::assistant(echo.to_string()));
            let mut follow_up = json!({
                "results": results,
                "active_scenes": workspace.active_count(),
                "cap": workspace.cap(),
                "cap_advice": workspace.advice(),
                "steps_left": self.max_steps - outcome.steps,
            });
            count_masked(STAGE, "input", redact_json(&mut follow_up));
            messages.push(Message::user(follow_up.to_string()));
        }
        if outcome.steps >= self.max_steps {
            tracing::warn!(steps = outcome.steps, "scene agent used its whole step budget");
        }
        Ok(outcome)
    }
}

/// The first user message: the cap, the scene list and the new memories, as JSON.
fn briefing(workspace: &Workspace, memories: &[Memory]) -> String {
    let scenes: Vec<Value> = workspace
        .entries()
        .iter()
        .filter(|e| e.is_active())
        .map(|e| {
            json!({
                "ref": e.reference,
                "name": e.row.name,
                "overview": e.row.overview,
                "tags": e.row.tags,
                "updated": e.row.updated_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            })
        })
        .collect();
    let memories: Vec<Value> = memories
        .iter()
        .enumerate()
        .map(|(i, m)| {
            json!({
                "ref": format!("m{}", i + 1),
                "category": m.category.as_str(),
                "priority": m.priority,
                "scene": m.scene,
                "occurred_at": m.occurred_at,
                "content": m.content.chars().take(MEMORY_CHARS).collect::<String>(),
            })
        })
        .collect();
    let mut briefing = json!({
        "cap": workspace.cap(),
        "active_scenes": workspace.active_count(),
        "cap_advice": workspace.advice(),
        "scenes": scenes,
        "memories": memories,
    });
    count_masked(STAGE, "input", redact_json(&mut briefing));
    briefing.to_string()
}

/// One validated step of the agent.
#[derive(Debug, Clone)]
struct Step {
    actions: Vec<Action>,
    done: bool,
    persona_worthy: bool,
    raw: Value,
}

#[derive(Debug, Clone, PartialEq)]
enum Action {
    Read { scene: String },
    Create { content: String },
    Update { scene: String, content: String },
    Merge { scenes: Vec<String>, content: String },
    Delete { scene: String },
}

/// Most tool calls taken from one step; more is a runaway answer.
const MAX_ACTIONS: usize = 16;

fn parse_step(value: Value) -> Result<Step, String> {
    let Value::Object(root) = &value else {
        return Err("expected a JSON object with an \"actions\" list".into());
    };
    let actions = match root.get("actions") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, a)| parse_action(a).map_err(|e| format!("actions[{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err("\"actions\" must be a list".into()),
    };
    if actions.len() > MAX_ACTIONS {
        return Err(format!("at most {MAX_ACTIONS} actions per step, got {}", actions.len()));
    }
    let flag = |name: &str| -> Result<bool, String> {
        match root.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(format!("\"{name}\" must be true or false")),
        }
    };
    Ok(Step {
        actions,
        done: flag("done")?,
        persona_worthy: flag("persona_worthy")?,
        raw: value.clone(),
    })
}

fn parse_action(value: &Value) -> Result<Action, String> {
    let Value::Object(action) = value else {
        return Err("expected an object".into());
    };
    let text = |name: &str| -> Result<String, String> {
        match action.get(name) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
            Some(_) => Err(format!("\"{name}\" must be a non-empty string")),
            None => Err(format!("\"{name}\" is missing")),
        }
    };
    let tool = text("tool")?;
    match tool.as_str() {
        "read" => Ok(Action::Read { scene: text("scene")? }),
        "create" => Ok(Action::Create {
            content: text("content")?,
        }),
        "update" => Ok(Action::Update {
            scene: text("scene")?,
            content: text("content")?,
        }),
        "merge" => {
            let scenes = match action.get("scenes") {
                Some(Value::Array(list)) => list
                    .iter()
                    .map(|s| s.as_str().map(str::to_owned).ok_or("\"scenes\" must be a list of refs"))
                    .collect::<Result<Vec<_>, _>>()?,
                _ => return Err("\"scenes\" must be a list of 2 to 4 scene refs".into()),
            };
            Ok(Action::Merge {
                scenes,
                content: text("content")?,
            })
        }
        "delete" => Ok(Action::Delete { scene: text("scene")? }),
        other => Err(format!(
            "unknown tool \"{other}\": use read, create, update, merge or delete"
        )),
    }
}

/// Runs one tool call; a refusal is a result the agent reads, a file-store failure ends the run.
async fn apply(workspace: &mut Workspace, action: &Action) -> Result<Value, WorkspaceError> {
    let result: Result<Value, Refusal> = match action {
        Action::Read { scene } => workspace
            .read(scene)
            .map(|content| json!({"tool": "read", "scene": scene, "ok": true, "content": content})),
        Action::Create { content } => match parse_doc(content) {
            Ok(doc) => workspace
                .create(doc)
                .await?
                .map(|reference| json!({"tool": "create", "ok": true, "scene": reference})),
            Err(refusal) => Err(refusal),
        },
        Action::Update { scene, content } => match parse_doc(content) {
            Ok(doc) => workspace
                .update(scene, doc)
                .await?
                .map(|()| json!({"tool": "update", "scene": scene, "ok": true})),
            Err(refusal) => Err(refusal),
        },
        Action::Merge { scenes, content } => match parse_doc(content) {
            Ok(doc) => workspace
                .merge(scenes, doc)
                .await?
                .map(|()| json!({"tool": "merge", "scenes": scenes, "ok": true, "scene": scenes.first()})),
            Err(refusal) => Err(refusal),
        },
        Action::Delete { scene } => workspace
            .delete(scene)
            .await?
            .map(|()| json!({"tool": "delete", "scene": scene, "ok": true})),
    };
    Ok(result.unwrap_or_else(|refusal| {
        tracing::debug!(%refusal, "scene tool call refused");
        json!({"tool": tool_name(action), "ok": false, "error": refusal.to_string()})
    }))
}

fn tool_name(action: &Action) -> &'static str {
    match action {
        Action::Read { .. } => "read",
        Action::Create { .. } => "create",
        Action::Update { .. } => "update",
        Action::Merge { .. } => "merge",
        Action::Delete { .. } => "delete",
    }
}

/// The agent's document, its secrets masked, parsed.
fn parse_doc(content: &str) -> Result<SceneDoc, Refusal> {
    let redacted = redact(content);
    count_masked(STAGE, "output", redacted.count);
    SceneDoc::parse(&redacted.text).map_err(|e| Refusal::Invalid(format!("content is not a scene document: {e}")))
}

/// Memories by id, for provenance refs.
pub fn memory_refs(memories: &[Memory]) -> Vec<String> {
    let mut seen = HashSet::new();
    memories
        .iter()
        .filter(|m| seen.insert(m.id))
        .map(|m| format!("memory:{}", m.id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_document_is_stored_without_its_secrets() {
        let doc = parse_doc(
            "# Orders DB\n\n## Overview\nthe app connects with postgres://app:Zq9x8w7v6u5t@db/orders\n\n## Event chain\n- [2026-12-01] rotated DB_PASSWORD=hunter2x\n",
        )
        .expect("a scene document");
        assert_eq!(
            doc.overview,
            "the app connects with postgres://app:[REDACTED:url_credentials]@db/orders"
        );
        assert_eq!(doc.events[0].what, "rotated DB_PASSWORD=[REDACTED:password]");
    }

    #[test]
    fn steps_parse_every_tool_and_reject_unknown_ones() {
        let step = parse_step(json!({
            "actions": [
                {"tool": "read", "scene": "s1"},
                {"tool": "create", "content": "# A\n## Overview\nx"},
                {"tool": "update", "scene": "s2", "content": "# B"},
                {"tool": "merge", "scenes": ["s1", "s2"], "content": "# C"},
                {"tool": "delete", "scene": "s3", "reason": "stale"}
            ],
            "done": true
        }))
        .expect("valid step");
        assert_eq!(step.actions.len(), 5);
        assert!(step.done);
        assert!(!step.persona_worthy);
        let error = parse_step(json!({"actions": [{"tool": "rm", "scene": "s1"}]})).unwrap_err();
        assert!(
            error.contains("actions[0]") && error.contains("unknown tool"),
            "{error}"
        );
        let error = parse_step(json!({"actions": [{"tool": "update", "scene": "s1"}]})).unwrap_err();
        assert!(error.contains("\"content\" is missing"), "{error}");
        assert!(parse_step(json!({"actions": "all"})).is_err());
        assert!(parse_step(json!({"done": "yes"})).is_err());
    }
}
