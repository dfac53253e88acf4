//! MCP's compact answers: what a model needs from a tool call (content,
//! id, kind, scope, date, score) as plain text, about the size of the
//! content it carries. The full records, as the HTTP API answers them, come
//! with `verbose: true`.
//!
//! One memory is one line, `- <id> <kind> <date> [<score>] [v<version>]:
//! <content>`, under a `<scope>:` line that starts each run of memories of
//! one scope; continuation lines of a multi-line memory are indented two
//! spaces. Ids are whole: a prefix of a time-ordered id that names one
//! memory today names two once another is written in the same moment, so
//! an id handed to an agent is the one that keeps naming its memory. The
//! format is stated once, in the tool
//! descriptions, not in every answer.

use std::fmt::Write as _;

use strata::{ContextPackage, ForgetReport, Memory, Recalled};

use crate::api::{ListAnswer, MemoryAnswer};
use crate::error::ApiError;
use crate::ops::Ctx;

/// One memory as a line (its continuation lines indented).
fn line(out: &mut String, id: &str, m: &Memory, score: Option<f64>) {
    let _ = write!(
        out,
        "- {id} {} {}",
        m.kind,
        m.created_at.strftime("%Y-%m-%d")
    );
    if let Some(s) = score {
        let _ = write!(out, " {s:.2}");
    }
    if m.version > 1 {
        let _ = write!(out, " v{}", m.version);
    }
    out.push_str(": ");
    out.push_str(&indent(&m.content));
    out.push('\n');
}

/// Memories as scope runs of lines.
fn lines<'a>(items: impl Iterator<Item = (&'a Memory, Option<f64>, Option<&'a str>)>) -> String {
    let mut out = String::new();
    let mut scope: Option<&strata::Scope> = None;
    for (m, score, note) in items {
        if scope != Some(&m.scope) {
            let _ = writeln!(out, "{}:", m.scope);
            scope = Some(&m.scope);
        }
        line(&mut out, &m.id, m, score);
        if let Some(n) = note {
            let _ = writeln!(out, "  ({n})");
        }
    }
    out
}

/// A recall's results, best first; without any, what was searched and
/// why nothing came back: the view holds no memory the caller may see (an
/// empty or misspelt scope), or none reached the floor.
pub fn recall(
    c: &Ctx<'_>,
    hits: &[Recalled],
    view: &[String],
    query: &str,
    floor: f64,
) -> Result<String, ApiError> {
    if hits.is_empty() {
        return Ok(if query.trim().is_empty() || c.view_is_empty(view)? {
            format!("no memories in {}", view.join(", "))
        } else {
            format!(
                "nothing relevant in {} (no memory reached min_relevance {floor})",
                view.join(", ")
            )
        });
    }
    let archived: Vec<Option<String>> = hits
        .iter()
        .map(|h| {
            h.archived
                .as_ref()
                .map(|a| format!("archived: {}", a.reason))
        })
        .collect();
    Ok(lines(
        hits.iter()
            .zip(&archived)
            .map(|(h, a)| (&h.memory, Some(h.score), a.as_deref())),
    ))
}

/// A listing, in its order.
pub fn list(answer: &ListAnswer, view: &[String]) -> String {
    if answer.memories.is_empty() {
        return format!("no memories in {}", view.join(", "));
    }
    let archived: Vec<Option<String>> = answer
        .memories
        .iter()
        .map(|a| {
            a.archived
                .as_ref()
                .map(|a| format!("archived: {}", a.reason))
        })
        .collect();
    lines(
        answer
            .memories
            .iter()
            .zip(&archived)
            .map(|(a, n)| (&a.memory, None, n.as_deref())),
    )
}

/// A memory just written: what an agent needs to refer to it again.
pub fn written(verb: &str, m: &Memory) -> String {
    format!(
        "{verb} {} in {} ({}, v{})",
        m.id, m.scope, m.kind, m.version
    )
}

/// One memory with the fields an agent acts on (the full id and version
/// for `update`), then its content; earlier versions when asked for.
pub fn memory(a: &MemoryAnswer) -> String {
    let m = &a.memory;
    let mut out = format!(
        "{} {} {} {} v{}",
        m.id,
        m.scope,
        m.kind,
        m.created_at.strftime("%Y-%m-%d"),
        m.version
    );
    if let Some(k) = &m.key {
        let _ = write!(out, " key={k}");
    }
    if !m.tags.is_empty() {
        let _ = write!(out, " tags={}", m.tags.join(","));
    }
    if m.pinned {
        out.push_str(" pinned");
    }
    if let Some(ar) = &a.archived {
        let _ = write!(out, " archived ({})", ar.reason);
    }
    out.push('\n');
    out.push_str(&m.content);
    out.push('\n');
    for h in a.history.iter().flatten() {
        let _ = writeln!(
            out,
            "- v{} {}: {}",
            h.version,
            h.updated_at.strftime("%Y-%m-%d"),
            indent(&h.content)
        );
    }
    out
}

/// A context package: one line of figures (with the package id when it
/// was logged, the only case where the id can be replayed), then the text
/// it renders to.
pub fn context(pkg: &ContextPackage, text: &str, logged: bool) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    if logged {
        let _ = write!(out, "context {} ", pkg.id);
    }
    let _ = write!(
        out,
        "({}, {} of {} tokens",
        if pkg.items.len() == 1 {
            "1 item".to_string()
        } else {
            format!("{} items", pkg.items.len())
        },
        pkg.total_tokens,
        pkg.max_tokens
    );
    if pkg.dropped > 0 {
        let _ = write!(out, ", {} left out", pkg.dropped);
    }
    out.push_str(")\n");
    out.push_str(text);
    out
}

/// What a forget did (or would do).
pub fn forget(r: &ForgetReport) -> String {
    let mut out = format!(
        "{} {} memor{}",
        if r.dry_run { "would delete" } else { "deleted" },
        if r.dry_run { r.ids.len() } else { r.deleted },
        if (if r.dry_run { r.ids.len() } else { r.deleted }) == 1 {
            "y"
        } else {
            "ies"
        }
    );
    if r.pinned_kept > 0 {
        let _ = write!(out, "; {} pinned kept (force to include)", r.pinned_kept);
    }
    if !r.ids.is_empty() {
        let _ = write!(out, ": {}", r.ids.join(" "));
    }
    out
}

/// Scopes with their counts.
pub fn scopes(all: &[strata::ScopeCount]) -> String {
    if all.is_empty() {
        return "no scopes hold memories".into();
    }
    let mut out = String::new();
    for s in all {
        let _ = write!(out, "{} {}", s.scope, s.memories);
        if s.archived > 0 {
            let _ = write!(out, " (+{} archived)", s.archived);
        }
        out.push('\n');
    }
    out
}

/// A multi-line text as one list item: continuation lines indented two
/// spaces, trailing newlines dropped (as the context's markdown does).
fn indent(text: &str) -> String {
    text.trim_end_matches(['\n', '\r'])
        .lines()
        .collect::<Vec<_>>()
        .join("\n  ")
}
