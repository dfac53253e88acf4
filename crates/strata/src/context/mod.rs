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

mod assemble;
mod package;
pub mod profile;
pub mod render;
mod replay;
mod summary;
pub(crate) use summary::summarize_memories;

pub use package::{ContextItem, ContextPackage, Cut, SourceUsage, Summary, SummaryPick, Why};
pub use profile::{
    FileProfile, FileProfiles, FileSource, Profile, ProfileSource, Render, ShareOrBool,
    SummarizerKind,
};
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
