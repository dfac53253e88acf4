//! Context assembly: "the context for this task, within N tokens".
//!
//! A [`Profile`] names sources (scope patterns filled from the request), a
//! strategy, a budget and a render. [`Engine::context`](crate::Engine::context) fills each source's
//! share of the budget with its best items, keeps the oldest and newest
//! `head_tail` items of each source, cuts an item that does not fit to its
//! head and tail (or skips it), writes a summary of what did not fit into
//! `summary_share` of the budget, and renders the result. The rendered
//! package never exceeds `max_tokens`, counted exactly with the tokenizer
//! that counted the items, headings and markers included.
//!
//! Everything is deterministic: the same store state, request and clock give
//! a byte-identical package whose id hashes the items and versions it used.
//! Packages can be logged and rebuilt later from those versions
//! ([`Engine::replay`](crate::Engine::replay)).

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::model::{Kind, Role};
use crate::scope::{Scope, Tier};

mod assemble;
pub mod profile;
pub mod render;
mod replay;
mod summary;

pub use profile::{FileProfile, FileProfiles, Profile, Render, Source, SummarizerKind};
pub use render::Message;
pub use replay::Replay;
pub use summary::SummarizerConfig;

/// A request for a context package.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextRequest {
    /// `"none"` (an empty package), `"global"` (the built-in profile) or a
    /// profile id.
    pub profile: String,
    /// Values of the profile's placeholders (`task`, `project`, …).
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// What the task is about; ranks items under relevance and hybrid.
    #[serde(default)]
    pub query: String,
    /// Overrides the profile's render.
    #[serde(default)]
    pub render: Option<Render>,
    /// Overrides the profile's budget.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Record the package for replay.
    #[serde(default)]
    pub log: bool,
    /// The time ranking is computed at (default: the engine's clock).
    #[serde(default)]
    pub now: Option<Timestamp>,
}

impl ContextRequest {
    /// A request for `profile` with no placeholders, no query.
    pub fn new(profile: impl Into<String>) -> ContextRequest {
        ContextRequest {
            profile: profile.into(),
            vars: BTreeMap::new(),
            query: String::new(),
            render: None,
            max_tokens: None,
            log: false,
            now: None,
        }
    }

    /// Sets a placeholder value.
    pub fn var(mut self, name: &str, value: impl Into<String>) -> ContextRequest {
        self.vars.insert(name.to_string(), value.into());
        self
    }

    /// Sets the query.
    pub fn query(mut self, q: impl Into<String>) -> ContextRequest {
        self.query = q.into();
        self
    }
}

/// Why an item is in the package.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Why {
    /// Its key is in the source's `always` list.
    Always,
    /// One of the source's oldest `head_tail` items.
    Head,
    /// Ranked in.
    Rank,
    /// One of the source's newest `head_tail` items.
    Tail,
}

/// How an item was cut to fit: its first `head` and last `tail` tokens were
/// kept around an elision marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Cut {
    /// Tokens kept from the start.
    pub head: u32,
    /// Tokens kept from the end.
    pub tail: u32,
    /// Tokens left out.
    pub elided: u32,
}

/// One memory in a package.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContextItem {
    /// Memory id.
    pub id: String,
    /// Its version when the package was assembled.
    pub version: u64,
    /// Its scope.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "project/acme"))]
    pub scope: Scope,
    /// The scope's lifetime tier.
    pub tier: Tier,
    /// Its kind.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "decision"))]
    pub kind: Kind,
    /// Its role, for conversation turns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Its key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When it was created (rendered as its date).
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: Timestamp,
    /// Index of the profile source it came from.
    pub source: usize,
    /// Why it is here.
    pub why: Why,
    /// The ranking score (its scale depends on the strategy).
    pub score: f64,
    /// Tokens of `content` as included.
    pub tokens: u32,
    /// Set when the content was cut to fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<Cut>,
    /// The content as included.
    pub content: String,
}

impl ContextItem {
    /// The item for memory `m`, whole or (with `cut`) as the cut text and
    /// its tokens.
    pub(crate) fn of(
        m: crate::model::Memory,
        source: usize,
        why: Why,
        score: f64,
        cut: Option<(Cut, String, u32)>,
    ) -> ContextItem {
        let (cut, content, tokens) = match cut {
            Some((c, text, tokens)) => (Some(c), text, tokens),
            None => (None, m.content, m.tokens),
        };
        ContextItem {
            id: m.id,
            version: m.version,
            tier: m.scope.tier(),
            scope: m.scope,
            kind: m.kind,
            role: m.role,
            key: m.key,
            created_at: m.created_at,
            source,
            why,
            score,
            tokens,
            cut,
            content,
        }
    }
}

/// What one source contributed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SourceUsage {
    /// Section heading.
    pub title: String,
    /// The filled scope (or the pattern, when skipped).
    pub scope: String,
    /// Its share of the budget.
    pub share: f64,
    /// Tokens it used, heading included (planned cost).
    pub tokens: u32,
    /// Items included.
    pub items: usize,
    /// Ranked candidates that did not fit.
    pub dropped: usize,
    /// Why the source contributed nothing, when it was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// One sentence the extractive summarizer picked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SummaryPick {
    /// Memory id.
    pub id: String,
    /// Its version.
    pub version: u64,
    /// Index of the sentence in the memory's content.
    pub sentence: usize,
}

/// A summary of what did not fit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Summary {
    /// `extractive` or `llm`.
    pub method: String,
    /// The summary lines (each ends with a newline).
    pub text: String,
    /// Ids of the memories it covers.
    pub ids: Vec<String>,
    /// The sentences picked (extractive only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub picks: Vec<SummaryPick>,
    /// Tokens of the section, heading included (planned cost).
    pub tokens: u32,
    /// Set when the LLM summarizer failed and the extractive one stood in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// An assembled context.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContextPackage {
    /// Hash of the profile, the items and versions, and the summary's picks.
    pub id: String,
    /// The profile used.
    pub profile: String,
    /// The render the budget was checked for.
    pub render: Render,
    /// The budget.
    pub max_tokens: u32,
    /// Exact tokens of the rendered package (≤ `max_tokens`).
    pub total_tokens: u32,
    /// Tokens of all ranked candidates (what was available).
    pub available_tokens: u64,
    /// Item tokens included / available tokens.
    pub compression_ratio: f64,
    /// Ranked candidates left out.
    pub dropped: usize,
    /// Per source, in profile order.
    pub per_source: Vec<SourceUsage>,
    /// The items, grouped by source.
    pub items: Vec<ContextItem>,
    /// What did not fit, summarized.
    pub summary: Option<Summary>,
}

impl ContextPackage {
    /// Renders the package (`json` includes the markdown as `text`).
    pub fn to_text(&self, render: Render) -> String {
        render::to_text(self, render)
    }

    /// The package as markdown.
    pub fn markdown(&self) -> String {
        render::markdown(self)
    }

    /// The package as chat messages.
    pub fn messages(&self) -> Vec<Message> {
        render::messages(self)
    }
}
