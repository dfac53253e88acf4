//! Learned memories for both front ends: list, show (with the evidence the
//! caller may see), confirm, reject. The grant rules are those of every
//! operation (`ops.rs`): a learned memory outside the grant is "not
//! found"; confirming and rejecting need `read_write`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::ops::{Ctx, Touched, without_vector};

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// `POST /v1/learned/list`: learned memories in a view.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LearnedListBody {
    /// Scopes to read (`project/acme/**`, `global`).
    pub view: Vec<String>,
}

/// A learned memory, its record, and (when shown) its evidence.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct LearnedAnswer {
    /// The learned memory.
    pub memory: strata::Memory,
    /// Detector, evidence ids, confidence, first and last seen, status.
    pub learned: strata::Learned,
    /// The evidence that still exists and that the caller may see, oldest
    /// first (only when one memory is shown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Vec<strata::Memory>>,
}

/// `POST /v1/learned/list`: learned memories, most confident first.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct LearnedListAnswer {
    /// The learned memories.
    pub learned: Vec<LearnedAnswer>,
}

/// The `learned` tool: what upkeep learned, and a person's say over it.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LearnedArgs {
    /// `list` (the default), `show`, `confirm`, `reject` or `run` (an admin token).
    #[serde(default)]
    pub action: Option<String>,
    /// The learned memory, for show, confirm and reject.
    #[serde(default)]
    pub id: Option<String>,
    /// Scopes to list; defaults to the configured project, session and global.
    #[serde(default)]
    pub view: Vec<String>,
}

/// Compact text for the `learned` tool: one line per learned memory,
/// `- <id> <detector> <confidence> <status> (<n> evidence): <first line>`,
/// then, for one shown memory, its evidence as `  · <id> <first line>`.
pub fn text(answers: &[LearnedAnswer]) -> String {
    if answers.is_empty() {
        return "nothing learned in this view".into();
    }
    let first_line = |m: &strata::Memory| m.content.lines().next().unwrap_or("").to_string();
    let mut out = String::new();
    for a in answers {
        let status = match a.learned.status {
            strata::LearnedStatus::Proposed => "proposed",
            strata::LearnedStatus::Confirmed => "confirmed",
        };
        out.push_str(&format!(
            "- {} {} {:.2} {status} ({} evidence): {}\n",
            a.memory.id,
            a.learned.detector,
            a.learned.confidence,
            a.learned.evidence.len(),
            first_line(&a.memory)
        ));
        for e in a.evidence.iter().flatten() {
            out.push_str(&format!("  · {} {}\n", e.id, first_line(e)));
        }
    }
    out
}

impl Ctx<'_> {
    /// Learned memories in a view the grant covers.
    pub fn learned_list(&self, b: &LearnedListBody) -> Result<LearnedListAnswer> {
        self.audited(
            "learned_list",
            || crate::ops::asked(b.view.iter()),
            || {
                let view = self.view("view", &b.view)?;
                let learned = self
                    .engine
                    .learned(&view)?
                    .into_iter()
                    .map(|(m, l)| LearnedAnswer {
                        memory: without_vector(m),
                        learned: l,
                        evidence: None,
                    })
                    .collect();
                Ok(LearnedListAnswer { learned })
            },
            |a| Touched::read(a.learned.len()),
        )
    }

    /// One learned memory with the evidence the grant lets the caller see.
    pub fn learned_show(&self, id: &str) -> Result<LearnedAnswer> {
        self.audited(
            "learned_show",
            Vec::new,
            || {
                let id = self.learned_id(id)?;
                let (m, l) = self.engine.learned_one(&id)?;
                let evidence = self
                    .engine
                    .learned_evidence(&id)?
                    .into_iter()
                    .filter(|e| self.grant.allows_scope(&e.scope))
                    .map(without_vector)
                    .collect();
                Ok(LearnedAnswer {
                    memory: without_vector(m),
                    learned: l,
                    evidence: Some(evidence),
                })
            },
            |a| {
                Touched::read(1)
                    .scopes([&a.memory.scope])
                    .named([a.memory.id.clone()])
            },
        )
    }

    /// Confirms a learned memory.
    pub fn learned_confirm(&self, id: &str) -> Result<strata::Memory> {
        self.audited(
            "learned_confirm",
            Vec::new,
            || {
                self.writable()?;
                let id = self.learned_id(id)?;
                Ok(without_vector(self.engine.confirm_learned(&id)?))
            },
            |m| Touched::wrote([m.id.clone()]).scopes([&m.scope]),
        )
    }

    /// Rejects a learned memory (to the archive; not learned again from
    /// the same evidence).
    pub fn learned_reject(&self, id: &str) -> Result<strata::Memory> {
        self.audited(
            "learned_reject",
            Vec::new,
            || {
                self.writable()?;
                let id = self.learned_id(id)?;
                Ok(without_vector(self.engine.reject_learned(&id)?))
            },
            |m| Touched::wrote([m.id.clone()]).scopes([&m.scope]),
        )
    }

    /// The full id of a learned memory inside the grant.
    fn learned_id(&self, id: &str) -> Result<String> {
        let id = self.resolve(id)?;
        self.visible(&id)?;
        Ok(id)
    }

    /// Runs learning now, as upkeep does: every detector over what
    /// changed since the last run, in every scope. It reads and writes
    /// every scope, so it takes an admin token (or no authentication).
    pub fn learned_run(&self) -> Result<strata::LearnReport> {
        self.audited(
            "learn",
            Vec::new,
            || {
                if !self.grant.is_admin() {
                    return Err(ApiError::forbidden(
                        "running learning reads and writes every scope: it needs an admin token",
                    ));
                }
                Ok(self.engine.learn()?)
            },
            |r| Touched::read(r.learned + r.updated + r.removed + r.consolidated + r.faded),
        )
    }

    fn writable(&self) -> Result<()> {
        if self.grant.can_write() {
            Ok(())
        } else {
            Err(ApiError::read_only())
        }
    }
}
