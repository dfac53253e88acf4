//! Rendering a package for a model, and what each part costs in tokens.
//!
//! The markdown document is the reference form:
//!
//! ```text
//! ## Task context
//! - [decision · 2026-11-02] We keep the billing API synchronous.
//!
//! ## Summary of what did not fit
//! - The retry budget is 3 attempts. (0193…)
//! ```
//!
//! `messages` puts the same sections in one system message and each
//! user/assistant turn in a message of its own, in time order; `json` is the
//! package itself with the markdown as its `text`. Assembly plans with the
//! per-part costs below and then counts the whole rendering exactly, so the
//! budget holds for what the model actually receives.

use serde::{Deserialize, Serialize};

use super::{ContextItem, ContextPackage, Render};
use crate::model::Role;
use crate::tokens::TokenCounter;

/// Tokens a chat message costs beyond its content (OpenAI's accounting:
/// three per message, one for the role).
pub const MESSAGE_OVERHEAD: u32 = 4;

/// Heading of the summary section.
pub const SUMMARY_TITLE: &str = "Summary of what did not fit";

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// A section heading line.
pub fn heading(title: &str) -> String {
    format!("## {title}\n")
}

/// The part of an item's line before its content.
pub fn prefix(kind: &str, created_at: jiff::Timestamp) -> String {
    let date = created_at.strftime("%Y-%m-%d");
    format!("- [{kind} · {date}] ")
}

fn line(item: &ContextItem) -> String {
    format!(
        "{}{}\n",
        prefix(item.kind.as_str(), item.created_at),
        item.content
    )
}

/// Whether an item becomes a chat message of its own under `messages`.
pub fn is_turn(item: &ContextItem) -> bool {
    matches!(item.role, Some(Role::User | Role::Assistant))
}

/// The markdown document: sections in source order, then the summary.
/// `turns` decides whether user/assistant turns are written as lines.
fn sections(p: &ContextPackage, turns: bool) -> String {
    let mut out = String::new();
    for (i, src) in p.per_source.iter().enumerate() {
        let mut body = String::new();
        for item in p.items.iter().filter(|it| it.source == i) {
            if turns || !is_turn(item) {
                body.push_str(&line(item));
            }
        }
        if body.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&heading(&src.title));
        out.push_str(&body);
    }
    if let Some(s) = p.summary.as_ref().filter(|s| !s.text.is_empty()) {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&heading(SUMMARY_TITLE));
        out.push_str(&s.text);
    }
    out
}

/// The package as markdown.
pub fn markdown(p: &ContextPackage) -> String {
    sections(p, true)
}

/// The package as chat messages.
pub fn messages(p: &ContextPackage) -> Vec<Message> {
    let mut out = Vec::new();
    let system = sections(p, false);
    if !system.is_empty() {
        out.push(Message {
            role: "system".into(),
            content: system,
        });
    }
    let mut turns: Vec<&ContextItem> = p.items.iter().filter(|it| is_turn(it)).collect();
    turns.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then_with(|| a.id.cmp(&b.id))
    });
    for t in turns {
        out.push(Message {
            role: t.role.map(|r| r.as_str()).unwrap_or("user").to_string(),
            content: t.content.clone(),
        });
    }
    out
}

/// Exact tokens of the package as `render` renders it (`json` is counted
/// as its markdown `text`, the part meant for the model).
pub fn count(counter: &TokenCounter, render: Render, p: &ContextPackage) -> u32 {
    match render {
        Render::Markdown | Render::Json => counter.count(&markdown(p)),
        Render::Messages => messages(p)
            .iter()
            .map(|m| MESSAGE_OVERHEAD + counter.count(&m.content))
            .sum(),
    }
}

/// The package rendered as text: markdown, messages as a JSON array, or the
/// package as JSON.
pub fn to_text(p: &ContextPackage, render: Render) -> String {
    match render {
        Render::Markdown => markdown(p),
        Render::Messages => {
            serde_json::to_string_pretty(&messages(p)).unwrap_or_else(|_| "[]".into()) + "\n"
        }
        Render::Json => {
            #[derive(Serialize)]
            struct WithText<'a> {
                #[serde(flatten)]
                package: &'a ContextPackage,
                text: String,
            }
            serde_json::to_string_pretty(&WithText {
                package: p,
                text: markdown(p),
            })
            .unwrap_or_else(|_| "{}".into())
                + "\n"
        }
    }
}
