//! What an assembled context is made of: the package and its items, cuts,
//! per-source figures and summary, and the ranked candidates they are
//! chosen from. Assembly (`assemble.rs`), replay (`replay.rs`) and the
//! summarizer (`summary.rs`) all build on these; none of them on each
//! other's internals.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::profile::Render;
use crate::model::{Kind, Role};
use crate::rank::{ScoreParts, Signals};
use crate::scope::{Scope, Tier};
use crate::tokens::TokenCounter;

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

/// A ranked candidate.
#[derive(Clone, Debug)]
pub(crate) struct Cand {
    pub sig: Signals,
    pub parts: ScoreParts,
    pub why: Why,
    /// Tokens of the line around the content (prefix and newline).
    pub fixed: u32,
}

/// The elision marker put where a cut item's middle was.
pub fn marker(elided: u32) -> String {
    format!(" […{elided} tokens cut…] ")
}

/// Applies a recorded cut (replay uses this too).
pub(crate) fn apply_cut(counter: &TokenCounter, content: &str, cut: Cut) -> String {
    let head = counter.head(content, cut.head as usize);
    let tail = counter.tail(content, cut.tail as usize);
    format!(
        "{}{}{}",
        head.trim_end(),
        marker(cut.elided),
        tail.trim_start()
    )
}

/// The package id: a hash of the profile, the render, the budget, each
/// item's id, version and cut, and the summary's sources.
pub(crate) fn package_id(pkg: &ContextPackage) -> String {
    let mut h = Sha256::new();
    h.update(format!(
        "{}\0{}\0{}\0",
        pkg.profile,
        pkg.render.as_str(),
        pkg.max_tokens
    ));
    for it in &pkg.items {
        h.update(format!("{}\0{}\0{}\0", it.source, it.id, it.version));
        if let Some(c) = it.cut {
            h.update(format!("cut {} {} {}\0", c.head, c.tail, c.elided));
        }
    }
    if let Some(s) = &pkg.summary {
        h.update(format!("summary {}\0", s.method));
        for p in &s.picks {
            h.update(format!("{}\0{}\0{}\0", p.id, p.version, p.sentence));
        }
        for id in &s.ids {
            h.update(format!("{id}\0"));
        }
    }
    let d = h.finalize();
    let hex: String = d.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("ctx-{hex}")
}
