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

use super::package::package_id;
use super::{ContextItem, ContextPackage, Render, Why};
use crate::model::{Memory, Role};
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

/// A section heading as the markdown rendering writes it (`## Title`).
pub fn markdown_heading(title: &str) -> String {
    format!("## {title}\n")
}

/// A memory as the markdown rendering lists it under a heading
/// (`- [decision · 2026-05-01] content`), for tools that lay memories out
/// the way a context package does and count their tokens the same way.
pub fn markdown_line(m: &Memory) -> String {
    format!("{}{}\n", prefix(m.kind.as_str(), m.created_at), m.content)
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
        indent_continuation(&item.content)
    )
}

/// A multi-line text as the body of one markdown list item: continuation
/// lines indented by two spaces (CommonMark's rule for content belonging
/// to the item), trailing newlines dropped, so a memory holding a whole
/// `CLAUDE.md` stays one item instead of ending the list.
pub fn indent_continuation(text: &str) -> String {
    text.trim_end_matches(['\n', '\r'])
        .split('\n')
        .enumerate()
        .fold(String::with_capacity(text.len()), |mut out, (i, l)| {
            if i > 0 {
                out.push('\n');
                if !l.trim().is_empty() {
                    out.push_str("  ");
                }
            }
            out.push_str(l.strip_suffix('\r').unwrap_or(l));
            out
        })
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
        out.push_str(&markdown_heading(&src.title));
        out.push_str(&body);
    }
    if let Some(s) = p.summary.as_ref().filter(|s| !s.text.is_empty()) {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&markdown_heading(SUMMARY_TITLE));
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

impl ContextPackage {
    /// Exact tokens of the package as `render` renders it, counted afresh
    /// by `counter` (`json` is counted as its markdown `text`, the part
    /// meant for the model). Assembly keeps this within the budget.
    pub fn count_tokens(&self, counter: &TokenCounter, render: Render) -> u32 {
        match render {
            Render::Markdown | Render::Json => counter.count(&markdown(self)),
            Render::Messages => messages(self)
                .iter()
                .map(|m| MESSAGE_OVERHEAD + counter.count(&m.content))
                .sum(),
        }
    }
}

/// The pieces a rendering is counted in: the text split after each newline
/// that is followed by `-` or `#` (an item line or a heading). The
/// tokenizers' pre-splitting never joins a newline with a following
/// non-space character, so no token spans such a point and the pieces'
/// counts add up to the whole text's (`tests::pieces_add_up` checks it for
/// both tokenizers).
pub fn pieces(text: &str) -> impl Iterator<Item = &str> {
    let b = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    std::iter::from_fn(move || {
        if start >= b.len() {
            return None;
        }
        while i < b.len() {
            i += 1;
            if b[i - 1] == b'\n' && matches!(b.get(i), Some(b'-' | b'#')) {
                break;
            }
        }
        let piece = &text[start..i];
        start = i;
        Some(piece)
    })
}

/// Token counts of rendered pieces, remembered by a 128-bit keyed hash of
/// their text (never the text itself, so a forgotten memory leaves no copy
/// here). Repeated contexts over the same memories count only what is new.
#[derive(Debug, Default)]
pub struct CountCache {
    keys: (std::hash::RandomState, std::hash::RandomState),
    map: std::sync::Mutex<std::collections::HashMap<(u64, u64), u32>>,
}

impl CountCache {
    /// Most pieces remembered; the cache starts over beyond this.
    pub const MAX_ENTRIES: usize = 500_000;

    /// Exact tokens of `text`.
    pub fn count(&self, counter: &TokenCounter, text: &str) -> u32 {
        use std::hash::BuildHasher;
        let parts: Vec<(&str, (u64, u64))> = pieces(text)
            .map(|p| (p, (self.keys.0.hash_one(p), self.keys.1.hash_one(p))))
            .collect();
        let mut known: Vec<Option<u32>> = {
            let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            parts.iter().map(|(_, k)| map.get(k).copied()).collect()
        };
        let mut fresh = Vec::new();
        for (i, (p, k)) in parts.iter().enumerate() {
            if known[i].is_none() {
                let n = counter.count(p);
                known[i] = Some(n);
                fresh.push((*k, n));
            }
        }
        if !fresh.is_empty() {
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            if map.len() + fresh.len() > Self::MAX_ENTRIES {
                map.clear();
            }
            map.extend(fresh);
        }
        known.into_iter().map(|n| n.unwrap_or(0)).sum()
    }
}

/// [`count`] through a cache of piece counts (same result).
pub fn count_cached(
    cache: &CountCache,
    counter: &TokenCounter,
    render: Render,
    p: &ContextPackage,
) -> u32 {
    match render {
        Render::Markdown | Render::Json => cache.count(counter, &markdown(p)),
        Render::Messages => messages(p)
            .iter()
            .map(|m| MESSAGE_OVERHEAD + cache.count(counter, &m.content))
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

impl ContextPackage {
    /// Renders the package (`json` includes the markdown as `text`).
    pub fn to_text(&self, render: Render) -> String {
        to_text(self, render)
    }

    /// The package as markdown.
    pub fn markdown(&self) -> String {
        markdown(self)
    }

    /// The package as chat messages.
    pub fn messages(&self) -> Vec<Message> {
        messages(self)
    }
}

/// Counts the rendered package exactly, removes the lowest-ranked items
/// while it is over budget, and fills in the totals and the id.
pub(crate) fn finish(
    counter: &TokenCounter,
    cache: &CountCache,
    pkg: &mut ContextPackage,
    cands: &[usize],
) {
    loop {
        let total = count_cached(cache, counter, pkg.render, pkg);
        if total <= pkg.max_tokens || (pkg.items.is_empty() && pkg.summary.is_none()) {
            pkg.total_tokens = total;
            break;
        }
        // Over: drop the lowest-scored ranked item (or, failing that, the
        // last item, then the summary).
        let victim = pkg
            .items
            .iter()
            .enumerate()
            .filter(|(_, it)| it.why == Why::Rank)
            .min_by(|a, b| a.1.score.total_cmp(&b.1.score))
            .map(|(k, _)| k)
            .or(pkg.items.len().checked_sub(1));
        match victim {
            Some(k) => {
                pkg.items.remove(k);
            }
            None => pkg.summary = None,
        }
    }
    let mut used_items = vec![0usize; pkg.per_source.len()];
    for it in &pkg.items {
        used_items[it.source] += 1;
    }
    for (i, u) in pkg.per_source.iter_mut().enumerate() {
        u.items = used_items[i];
        u.dropped = cands.get(i).copied().unwrap_or(0).saturating_sub(u.items);
    }
    pkg.dropped = pkg.per_source.iter().map(|u| u.dropped).sum();
    let used: u64 = pkg.items.iter().map(|it| u64::from(it.tokens)).sum();
    pkg.compression_ratio = if pkg.available_tokens == 0 {
        1.0
    } else {
        (used as f64 / pkg.available_tokens as f64).min(1.0)
    };
    pkg.id = package_id(pkg);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The pieces' counts add up to the whole text's, and the cache
        /// gives the same count, for any line content.
        #[test]
        fn pieces_add_up(lines in prop::collection::vec(
            ("[-#]", "[ a-zA-Z0-9.,:;!?'\"()\\[\\]·…é中\t-]{0,60}", "\n{1,3}"), 1..40)
        ) {
            let text: String = lines
                .iter()
                .map(|(lead, body, nl)| format!("{lead}{body}{nl}"))
                .collect();
            prop_assert_eq!(pieces(&text).collect::<String>(), text.clone());
            let cache = CountCache::default();
            // Every tokenizer this build has (o200k_base needs its feature).
            for name in crate::tokens::TOKENIZERS {
                let Ok(c) = TokenCounter::new(name) else { continue };
                let whole = c.count(&text);
                let sum: u32 = pieces(&text).map(|p| c.count(p)).sum();
                prop_assert_eq!(sum, whole, "{}", name);
                let cache = CountCache::default();
                prop_assert_eq!(cache.count(&c, &text), whole);
                prop_assert_eq!(cache.count(&c, &text), whole, "cached");
            }
            let _ = cache;
        }
    }

    #[test]
    fn multi_line_memory_stays_one_list_item() {
        let claude_md = "# Project rules\n\n- use tabs\r\n- no unwrap in lib code\n\n";
        assert_eq!(
            indent_continuation(claude_md),
            "# Project rules\n\n  - use tabs\n  - no unwrap in lib code"
        );
        assert_eq!(indent_continuation("one line"), "one line");
    }
}
